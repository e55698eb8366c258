"""Issue 11, finding 5: image pulls are no way into the host's network (SSRF).

Before: POST /images/pull by a non-admin connected to any host and port, loopback included;
its error told open from closed ports and echoed what answered; pulls followed redirects to
internal URLs. Now a non-admin pulls only from the allowed registries (--allow-registry;
docker.io and the mirror by default); nobody pulls from loopback, private or local addresses
but through the mirror or an --insecure-registry; other registries are reached only through
the daemon's filtering proxy (redirects included); errors carry no text of the upstream's.

Traffic goes only to 127.0.0.0/8 and to a network namespace the test makes.
"""
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import Daemon, Sandboxes, SLOW

BANNER = b"SSH-2.0-TRAP-BANNER-7f3a\r\n"


class Trap:
    """A TCP listener that counts connections and greets them with BANNER."""

    def __init__(self, host="127.0.0.1"):
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        self.stopped = False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            try:
                c.sendall(BANNER)
                c.settimeout(1)
                c.recv(4096)
            except OSError:
                pass
            c.close()

    def close(self):
        self.stopped = True
        self.sock.close()


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def trap():
    t = Trap()
    yield t
    t.close()


def test_a_non_admin_cannot_pull_from_any_host(sbx, sbx_user, trap):
    alice = sbx_user("alice")
    details = []
    for port in (trap.port, closed_port()):
        for ref in (f"127.0.0.1:{port}/x/y:latest", f"localhost:{port}/x/y"):
            r = alice.post("/images/pull", json={"image": ref}, timeout=120)
            assert r.status_code == 403 and r.json()["code"] == "registry_not_allowed", r.text
            details.append(r.json()["detail"].replace(str(port), "PORT"))
        # nor through a create, which pulls what is missing
        r = alice.post("/sandboxes", json={"image": f"127.0.0.1:{port}/x/y"}, timeout=120)
        assert r.status_code == 403 and r.json()["code"] == "registry_not_allowed", r.text
    # an open port and a closed one read the same; nothing connected
    assert details[0] == details[2] and details[1] == details[3], details
    assert trap.hits == 0
    # the mirror (on loopback too) stays open to everyone
    r = alice.post("/images/pull", json={"image": "busybox"}, timeout=300)
    assert r.status_code == 200, r.text
    alice.create("busybox")


def test_nobody_pulls_from_loopback_but_through_the_mirror(sbx, trap):
    for ref in (f"127.0.0.1:{trap.port}/x/y", f"localhost:{trap.port}/x/y",
                f"[::1]:{trap.port}/x/y"):
        r = sbx.post("/images/pull", json={"image": ref}, timeout=120)
        assert r.status_code == 403, r.text
        assert r.json()["code"] == "registry_address_refused", r.text
        assert "TRAP" not in r.text and "SSH" not in r.text
    assert trap.hits == 0
    # an unknown image through the mirror: a sentence of ours, not the registry's
    r = sbx.post("/images/pull", json={"image": "no-such-image-here"}, timeout=120)
    assert r.status_code == 422 and r.json()["code"] == "image_pull_failed"
    assert r.json()["detail"].startswith("the registry has no such"), r.text


# ---- a registry on a "public" address (in a namespace of the test's) that redirects ----

REGISTRY = r'''
import http.server, ssl, sys
addr, port, cert, key, log, loop, local = sys.argv[1:8]
class H(http.server.BaseHTTPRequestHandler):
    def _go(self):
        with open(log, "a") as f:
            f.write(self.command + " " + self.path + "\n")
        if self.path.rstrip("/") == "/v2":
            self.send_response(200)
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
            return
        target = loop if "/loop/" in self.path else local
        self.send_response(302)
        self.send_header("Location", target + "/v2/stolen")
        self.send_header("Content-Length", "0")
        self.end_headers()
    do_GET = do_HEAD = _go
    def log_message(self, *a):
        pass
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv = http.server.ThreadingHTTPServer((addr, int(port)), H)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
'''


def run(*args, **kw):
    return subprocess.run(list(args), check=True, capture_output=True, timeout=30, **kw)


@pytest.fixture
def public_registry(tmp_path):
    """An HTTPS registry at 198.51.100.x:5443 in a new namespace (a documentation address,
    public as far as the daemon can tell), whose manifests redirect to a trap on the host's
    loopback (paths with /loop/) or on the host's own end of the link (others)."""
    k = os.getpid() % 60 + 1
    host_ip, ns_ip = f"198.51.100.{4 * k + 1}", f"198.51.100.{4 * k + 2}"
    ns, veth = f"sbxpull{os.getpid() % 100000}", f"vpl{os.getpid() % 100000}"
    run("ip", "netns", "add", ns)
    procs, traps = [], []
    try:
        run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        run("ip", "addr", "add", f"{host_ip}/30", "dev", veth)
        run("ip", "link", "set", veth, "up")
        for cmd in (["ip", "addr", "add", f"{ns_ip}/30", "dev", "eth0"],
                    ["ip", "link", "set", "eth0", "up"], ["ip", "link", "set", "lo", "up"]):
            run("ip", "netns", "exec", ns, *cmd)
        cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
        run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out", str(cert),
            "-days", "1", "-subj", "/CN=registry", "-addext", f"subjectAltName=IP:{ns_ip}")
        loop, local = Trap("127.0.0.1"), Trap(host_ip)
        traps += [loop, local]
        script, log = tmp_path / "registry.py", tmp_path / "requests.log"
        script.write_text(REGISTRY)
        log.write_text("")
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", ns, "/usr/bin/python3", str(script), ns_ip, "5443",
             str(cert), str(key), str(log), f"https://127.0.0.1:{loop.port}",
             f"https://{host_ip}:{local.port}"], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 20 * SLOW
        while subprocess.run(["ip", "netns", "exec", ns, "python3", "-c",
                              f"import socket; socket.create_connection(('{ns_ip}', 5443), 1)"],
                             capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, "the registry did not start"
            time.sleep(0.1)
        yield {"host": f"{ns_ip}:5443", "cert": str(cert), "log": log, "loop": loop,
               "local": local}
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for t in traps:
            t.close()
        subprocess.run(["ip", "link", "del", veth], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def test_redirects_to_internal_targets_are_not_followed(registry_url, public_registry):
    reg = public_registry
    with tempfile.TemporaryDirectory(prefix="sbx-test-") as workdir:
        d = Daemon(workdir, ["--registry-mirror", registry_url,
                             "--allow-registry", f"docker.io,{reg['host']}"])
        # skopeo trusts the test's certificate for that registry (its HOME is the store's)
        certs = os.path.join(d.state_dir, "images", "home", ".config", "containers",
                             "certs.d", reg["host"])
        os.makedirs(certs)
        shutil.copy(reg["cert"], os.path.join(certs, "ca.crt"))
        d.start()
        admin = Sandboxes(d.url, d.admin_token)
        try:
            tok = admin.post("/auth/tokens", json={"user": "alice"}).json()["token"]
            alice = Sandboxes(d.url, tok)
            for path in ("loop/img", "local/img"):  # allowed to alice, and to the admin
                for who in (alice, admin):
                    r = who.post("/images/pull", json={"image": f"{reg['host']}/{path}"},
                                 timeout=300)
                    assert r.status_code == 422, r.text
                    body = r.json()
                    assert body["code"] == "image_pull_failed"
                    assert "TRAP" not in r.text and "SSH" not in r.text and "stolen" not in r.text
            # the pulls did reach the registry (through the proxy) and were sent elsewhere ...
            assert "/manifests/" in reg["log"].read_text(), reg["log"].read_text()
            # ... but never got there: not the host's loopback, not the host's own address
            assert reg["loop"].hits == 0 and reg["local"].hits == 0
            with open(d.stderr_path) as f:
                assert "event=image.pull_blocked" in f.read()  # refused, and logged
            alice.close()
        finally:
            admin.cleanup()
            d.kill()
