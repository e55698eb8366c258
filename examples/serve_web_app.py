#!/usr/bin/env python3
"""Serve a web app from a sandbox and reach it at its URL.

The sandbox is created with ``ports=[8080]``: the daemon's proxy forwards
``/sandboxes/{id}/proxy/{path}`` (and, with ``--vhost``, ``https://<name>.<vhost>/``) to
port 8080 inside it, streaming both ways, WebSockets included. The app's files are
uploaded with the files API, then the server is started in the background with an exec.
With an image that has python3 it is a small JSON + HTML app on ``http.server``; with
busybox only, busybox's ``httpd`` serves the static page.

The proxy needs the owner's token, unless the sandbox is made public (``--public``): then
anyone with the URL can open it (only the proxy; every other route still needs the token).

Run it against a daemon::

    export SANDBOXER_URL=http://127.0.0.1:8000 SANDBOXER_TOKEN=sbx_...
    python3 examples/serve_web_app.py
    python3 examples/serve_web_app.py --public --serve 600   # then open the printed URL

Environment: ``SANDBOXER_URL``, ``SANDBOXER_TOKEN``; ``SANDBOXER_IMAGE`` (default
``python``; ``busybox`` works too). Flags: ``--public`` makes the app reachable without a
token; ``--serve N`` keeps it up for N seconds (Ctrl-C stops) before deleting it.
"""
import json
import os
import sys
import time

try:
    import sandboxer
except ImportError:  # running from a checkout without installing the SDK
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk",
                                    "python"))
    import sandboxer

IMAGE = os.environ.get("SANDBOXER_IMAGE", "python")
PORT = 8080

INDEX = """<!doctype html>
<html><head><meta charset="utf-8"><title>Hello from a sandbox</title>
<link rel="stylesheet" href="static/style.css"></head>
<body><h1>Hello from a sandbox</h1>
<p>Served by <code>{server}</code> inside sandbox <code>{name}</code>.</p>
<p><a href="api/hello?name=you">api/hello?name=you</a></p></body></html>
"""

CSS = "body { font-family: sans-serif; margin: 3em; } code { color: #a33; }\n"

APP = r'''
import json, os, socket, threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

hits = 0
lock = threading.Lock()

class Handler(SimpleHTTPRequestHandler):
    def __init__(self, *a, **kw):
        super().__init__(*a, directory="/srv/app/www", **kw)

    def send_json(self, obj, status=200):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        global hits
        url = urlsplit(self.path)
        if url.path == "/api/hello":
            with lock:
                hits += 1
                n = hits
            name = parse_qs(url.query).get("name", ["world"])[0]
            return self.send_json({"message": f"hello, {name}", "hits": n,
                                   "host": socket.gethostname(),
                                   "seen_host": self.headers.get("X-Forwarded-Host")})
        return super().do_GET()

    def do_POST(self):
        if urlsplit(self.path).path != "/api/echo":
            return self.send_json({"error": "not found"}, 404)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        return self.send_json({"echo": json.loads(body or b"null")})

    def log_message(self, fmt, *args):
        print(self.address_string(), fmt % args, flush=True)

ThreadingHTTPServer(("0.0.0.0", PORT), Handler).serve_forever()
'''.replace("PORT", str(PORT))


def main():
    args = sys.argv[1:]
    public = "--public" in args
    serve = float(args[args.index("--serve") + 1]) if "--serve" in args else 0.0

    client = sandboxer.Sandboxer()
    with client.create(IMAGE, label="web-app", ports=[PORT], args=["sleep", "infinity"],
                       public=public or None) as sb:
        has_python = sb.exec(["sh", "-c", "command -v python3"]).ok
        server = "python3 http.server" if has_python else "busybox httpd"
        sb.upload("/srv/app/www", {"index.html": INDEX.format(server=server, name=sb.name)})
        sb.write_file("/srv/app/www/static/style.css", CSS, mkdir=True)
        if has_python:
            sb.write_file("/srv/app/app.py", APP)
            sb.exec("setsid python3 -u /srv/app/app.py >/tmp/app.log 2>&1 </dev/null &",
                    check=True)
        else:
            sb.exec(["httpd", "-p", str(PORT), "-h", "/srv/app/www"], check=True)

        r = sb.wait_for_http("/", timeout=30)  # polls through the proxy until it answers
        print(f"sandbox {sb.id[:12]} serves {server} on port {PORT}")
        print(f"GET / -> {r.status_code} {r.headers.get('content-type')}: "
              f"{r.text.splitlines()[3] if len(r.text.splitlines()) > 3 else r.text[:60]}")
        css = sb.proxy("GET", "/static/style.css")
        print(f"GET /static/style.css -> {css.status_code} ({len(css.content)} bytes)")
        if has_python:
            for name in ("agent", "again"):
                hello = sb.proxy("GET", "/api/hello", params={"name": name}).json()
                print(f"GET /api/hello?name={name} -> {hello['message']} "
                      f"(hit {hello['hits']}, host {hello['host']})")
            echo = sb.proxy("POST", "/api/echo", json={"ok": True, "n": 42}).json()
            print(f"POST /api/echo -> {json.dumps(echo)}")

        url = sb.proxy_url("/")
        if client.socket:
            print(f"path: {url[len(client.base_url):]} (the client uses the unix socket: "
                  "set SANDBOXER_URL for a URL others can open)")
        else:
            print(f"URL: {url}")
        if sb.url:
            print(f"also at: {sb.url}")
        if client.socket:
            pass
        elif public:
            import httpx
            anon = httpx.get(url, timeout=30)
            print(f"public: GET without a token -> {anon.status_code}")
        else:
            print(f"open it with the token: curl -H 'Authorization: Bearer $SANDBOXER_TOKEN' "
                  f"{url}  (or run with --public)")

        if serve > 0:
            print(f"serving for {serve:g} s; Ctrl-C to stop")
            try:
                time.sleep(serve)
            except KeyboardInterrupt:
                pass
        if has_python:
            log = sb.exec("cat /tmp/app.log").stdout.strip().splitlines()
            print(f"the app logged {len(log)} requests")
    print("sandbox deleted")
    client.close()


if __name__ == "__main__":
    main()
