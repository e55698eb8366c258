"""An HTTP server on port 8080 whose answer is a counter held in memory."""
import http.server
from state import State

st = State("httpserver")


class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        st.tick()
        body = f"{st.boot} {st.count}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


st.tick(0)
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), H).serve_forever()
