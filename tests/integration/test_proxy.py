"""The inbound proxy: /sandboxes/{id|name}/proxy/{path} to a sandbox's HTTP server."""
import hashlib
import pytest
import os
import time

import httpx

from conftest import SLOW

UPLOAD_SERVER = r"""
import hashlib, http.server
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def _send(self, body, ctype="text/plain"):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Seen-Host", self.headers.get("X-Forwarded-Host", ""))
        self.send_header("X-Seen-For", self.headers.get("X-Forwarded-For", ""))
        self.send_header("X-Seen-Auth", self.headers.get("Authorization", "none"))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path.startswith("/big"):
            n = int(self.path.split("=")[1])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            block = bytes(range(256)) * 256
            while n > 0:
                chunk = block[:min(n, len(block))]
                self.wfile.write(chunk)
                n -= len(chunk)
            return
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"one,", b"two," * 1000, b"three"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path == "/close":
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"until-the-end " * 5000)
            self.close_connection = True
            return
        self._send(("path=" + self.path).encode())
    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "12345")
        self.end_headers()
    def do_POST(self):
        h = hashlib.sha256()
        total = 0
        if self.headers.get("Transfer-Encoding", "") == "chunked":
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data = self.rfile.read(size)
                self.rfile.readline()
                h.update(data)
                total += len(data)
        else:
            left = int(self.headers.get("Content-Length", "0"))
            while left > 0:
                data = self.rfile.read(min(left, 1 << 20))
                h.update(data)
                total += len(data)
                left -= len(data)
        self._send(f"{total} {h.hexdigest()}".encode())
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), H).serve_forever()
"""


def server(c, **extra):
    s = c.create("python", args=["python3", "-c", UPLOAD_SERVER], ports=[8080], **extra)
    deadline = time.monotonic() + 20 * SLOW
    while c.get(f"/sandboxes/{s['id']}/proxy/ping").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    return s


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_get_with_path_query_and_forwarded_headers(sbx):
    s = server(sbx)
    r = sbx.get(f"/sandboxes/{s['name']}/proxy/a/b%20c", params={"x": "1", "y": "two words"})
    assert r.status_code == 200
    assert r.text == "path=/a/b%20c?x=1&y=two%20words"
    assert r.headers["x-seen-host"].startswith("127.0.0.1")
    assert r.headers["x-seen-for"] == "127.0.0.1"
    assert r.headers["x-seen-auth"] == "none"  # the daemon's token never reaches the sandbox


def test_twenty_megabytes_down_and_up(sbx):
    s = server(sbx)
    n = 20 << 20
    got = hashlib.sha256()
    size = 0
    with sbx.stream("GET", f"/sandboxes/{s['id']}/proxy/big", params={"n": str(n)},
                    timeout=120) as r:
        assert r.status_code == 200
        for part in r.iter_bytes():
            got.update(part)
            size += len(part)
    block = bytes(range(256)) * 256
    want = hashlib.sha256()
    left = n
    while left > 0:
        want.update(block[:min(left, len(block))])
        left -= min(left, len(block))
    assert size == n and got.hexdigest() == want.hexdigest()
    data = os.urandom(20 << 20)
    r = sbx.post(f"/sandboxes/{s['id']}/proxy/up", content=data, timeout=120)
    assert r.text == f"{len(data)} {hashlib.sha256(data).hexdigest()}"

    def chunks():
        for i in range(0, len(data), 1 << 20):
            yield data[i:i + (1 << 20)]
    r = sbx.post(f"/sandboxes/{s['id']}/proxy/up", content=chunks(), timeout=120)
    assert r.text == f"{len(data)} {hashlib.sha256(data).hexdigest()}"


def test_answers_of_every_framing_pass_whole(sbx):
    """Content-Length, chunked, ended by closing, and HEAD (no body) answers."""
    s = server(sbx)
    base = f"/sandboxes/{s['id']}/proxy"
    r = sbx.get(f"{base}/big?n=300000")
    assert r.status_code == 200 and r.content == (bytes(range(256)) * 256 * 5)[:300000]
    r = sbx.get(f"{base}/chunked")
    assert r.status_code == 200 and r.content == b"one," + b"two," * 1000 + b"three"
    r = sbx.get(f"{base}/close")
    assert r.status_code == 200 and r.content == b"until-the-end " * 5000
    r = sbx.head(f"{base}/anything")
    assert r.status_code == 200 and r.content == b""


def test_private_needs_the_owners_token_public_does_not(sbx_daemon, sbx, sbx_user):
    s = server(sbx)
    url = f"{sbx_daemon.url}/sandboxes/{s['id']}/proxy/x"
    r = httpx.get(url)
    assert r.status_code == 401 and r.headers["www-authenticate"].lower().startswith("bearer")
    bob = sbx_user("bob")
    assert bob.get(f"/sandboxes/{s['id']}/proxy/x").status_code == 404
    sbx.patch(f"/sandboxes/{s['id']}", json={"public": True})
    assert httpx.get(url).text == "path=/x"
    assert bob.get(f"/sandboxes/{s['id']}/proxy/x").text == "path=/x"
    # public opens the proxy only
    assert httpx.get(f"{sbx_daemon.url}/sandboxes/{s['id']}").status_code == 401
    assert bob.post(f"/sandboxes/{s['id']}/execute", json={"code": "id"}).status_code == 404


def test_nothing_listening_is_a_clear_502(sbx):
    s = sbx.create("busybox")
    r = sbx.get(f"/sandboxes/{s['id']}/proxy/", params={"port": "9999"})
    assert r.status_code == 502 and r.json()["code"] == "bad_gateway"
    assert "9999" in r.json()["detail"]
    r = sbx.get(f"/sandboxes/{s['id']}/proxy/")  # no port known at all
    assert r.status_code == 502


def vhost_daemon(tmp_path, registry_url):
    from conftest import Daemon, Sandboxes
    d = Daemon(str(tmp_path / "d"), ["--registry-mirror", registry_url, "--vhost", "sbx.test"])
    os.makedirs(d.workdir, exist_ok=True)
    d.start()
    return d, Sandboxes(d.url, d.admin_token)


def test_subdomains_reach_the_sandbox(registry_url, tmp_path, runtime):
    d, c = vhost_daemon(tmp_path, registry_url)
    c.runtime = runtime
    try:
        s = server(c, public=True)
        r = httpx.get(d.url + "/hi?a=1", headers={"Host": f"{s['name']}.sbx.test"})
        assert r.status_code == 200 and r.text == "path=/hi?a=1"
        r = httpx.get(d.url + "/p", headers={"Host": f"{s['name']}-8080.sbx.test"})
        assert r.text == "path=/p"
        # an undeclared port is not public: its owner's token reaches it (nothing listens)
        r = httpx.get(d.url + "/p", headers={"Host": f"{s['name']}-9999.sbx.test"})
        assert r.status_code == 401
        r = httpx.get(d.url + "/p", headers={"Host": f"{s['name']}-9999.sbx.test",
                                             "Authorization": f"Bearer {c.token}"})
        assert r.status_code == 502
        # the API itself is unchanged on other hosts
        assert httpx.get(d.url + "/healthz").json()["status"] == "ok"
    finally:
        c.cleanup()
        d.kill()


def test_caddy_with_tls_internal_serves_a_sandbox_subdomain(registry_url, tmp_path):
    import subprocess
    from conftest import free_port
    d, c = vhost_daemon(tmp_path, registry_url)
    caddy = None
    try:
        s = server(c, public=True)
        http_port, https_port = free_port(), free_port()
        store = tmp_path / "caddy"
        caddyfile = tmp_path / "Caddyfile"
        caddyfile.write_text(
            "{\n\tadmin off\n\tlocal_certs\n\tskip_install_trust\n"
            f"\thttp_port {http_port}\n\thttps_port {https_port}\n"
            f"\tstorage file_system {store}\n}}\n"
            f"*.sbx.test {{\n\ttls internal\n\treverse_proxy 127.0.0.1:{d.port}\n}}\n")
        env = dict(os.environ, HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "data"),
                   XDG_CONFIG_HOME=str(tmp_path / "config"))
        log = open(tmp_path / "caddy.log", "wb")
        caddy = subprocess.Popen(["caddy", "run", "--config", str(caddyfile), "--adapter",
                                  "caddyfile"], env=env, stdout=log, stderr=log)
        root = store / "pki" / "authorities" / "local" / "root.crt"
        host = f"{s['name']}.sbx.test"
        deadline = time.monotonic() + 30 * SLOW
        out = None
        while time.monotonic() < deadline:
            if root.exists():
                out = subprocess.run(
                    ["curl", "-sS", "--max-time", "5", "--resolve",
                     f"{host}:{https_port}:127.0.0.1", "--cacert", str(root),
                     f"https://{host}:{https_port}/through-caddy"],
                    capture_output=True, text=True, timeout=20)
                if out.returncode == 0:
                    break
            time.sleep(0.3)
        assert out is not None and out.returncode == 0, (out, (tmp_path / "caddy.log").read_text()[-2000:])
        assert out.stdout == "path=/through-caddy"
    finally:
        if caddy:
            caddy.terminate()
            caddy.wait(timeout=20)
        c.cleanup()
        d.kill()


def test_caddy_config_prints_a_wildcard_site(sbx_daemon):
    import subprocess
    from conftest import BIN
    out = subprocess.run([BIN, "caddy-config", "--vhost", "sbx.example.com"],
                         capture_output=True, text=True, timeout=10).stdout
    assert "*.sbx.example.com" in out and "reverse_proxy 127.0.0.1:8000" in out
    assert "dns cloudflare" in out and "xcaddy" in out


WS_ECHO = r"""
import base64, hashlib, socket, struct, threading
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def recv_exact(c, n):
    b = b""
    while len(b) < n:
        d = c.recv(n - len(b))
        if not d:
            raise EOFError
        b += d
    return b
def serve(c):
    head = b""
    while b"\r\n\r\n" not in head:
        head += c.recv(4096)
    key = [l.split(b":", 1)[1].strip() for l in head.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key")][0]
    acc = base64.b64encode(hashlib.sha1(key + GUID.encode()).digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
    try:
        while True:
            b0, b1 = recv_exact(c, 2)
            n = b1 & 127
            if n == 126:
                n = struct.unpack("!H", recv_exact(c, 2))[0]
            elif n == 127:
                n = struct.unpack("!Q", recv_exact(c, 8))[0]
            mask = recv_exact(c, 4)
            data = bytes(x ^ mask[i % 4] for i, x in enumerate(recv_exact(c, n)))
            if b0 & 15 == 8:
                break
            reply = b"echo:" + data
            c.sendall(bytes([0x81, len(reply)]) + reply)
    except EOFError:
        pass
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080))
s.listen()
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
"""


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_websocket_through_the_proxy(sbx_daemon, sbx):
    import base64
    import socket
    s = sbx.create("python", args=["python3", "-c", WS_ECHO], ports=[8080])
    key = base64.b64encode(os.urandom(16)).decode()
    deadline = time.monotonic() + 20 * SLOW
    while True:
        c = socket.create_connection(("127.0.0.1", sbx_daemon.port), timeout=10)
        c.sendall((f"GET /sandboxes/{s['id']}/proxy/ws HTTP/1.1\r\nHost: x\r\n"
                   f"Authorization: Bearer {sbx_daemon.admin_token}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                   "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            part = c.recv(4096)
            if not part:
                break
            head += part
        if head.startswith(b"HTTP/1.1 101"):
            break
        c.close()
        assert time.monotonic() < deadline, head[:300]
        time.sleep(0.3)
    assert b"sec-websocket-accept" in head.lower()
    for msg in (b"hello", b"second message"):
        mask = os.urandom(4)
        c.sendall(bytes([0x81, 0x80 | len(msg)]) + mask +
                  bytes(b ^ mask[i % 4] for i, b in enumerate(msg)))
        frame = c.recv(4096)
        assert frame[0] == 0x81 and frame[2:2 + frame[1]] == b"echo:" + msg
    c.close()


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_without_a_port_the_listening_one_is_found(sbx):
    s = sbx.create("python", args=["python3", "-c", UPLOAD_SERVER])  # no ports, no ExposedPorts
    deadline = time.monotonic() + 20 * SLOW
    while (r := sbx.get(f"/sandboxes/{s['id']}/proxy/found")).status_code != 200:
        assert time.monotonic() < deadline, r.text
        time.sleep(0.2)
    assert r.text == "path=/found"


def test_busybox_httpd_through_the_path_and_a_subdomain(registry_url, tmp_path):
    d, c = vhost_daemon(tmp_path, registry_url)
    try:
        s = c.create("busybox", args=["sh", "-c", "mkdir -p /www && echo it-works > /www/index.html"
                                      " && exec httpd -f -p 80 -h /www"], ports=[80])
        deadline = time.monotonic() + 20 * SLOW
        while (r := c.get(f"/sandboxes/{s['id']}/proxy/index.html")).status_code != 200:
            assert time.monotonic() < deadline, r.text
            time.sleep(0.2)
        assert r.text == "it-works\n"
        r = httpx.get(d.url + "/index.html", headers={"Host": f"{s['name']}.sbx.test",
                                                      "Authorization": f"Bearer {c.token}"})
        assert r.status_code == 200 and r.text == "it-works\n"
    finally:
        c.cleanup()
        d.kill()
