"""The inbound proxy between tenants (issue 11, findings 1, 9 and 12), without a browser:
what a sandbox's answer may set on the API's origin and on its own, which ports of a public
sandbox anyone reaches, what an anonymous caller learns, which request headers reach a
sandbox (tokens, client addresses) and how a body must be framed. The browser side of
finding 1 is test_web_isolation.py."""
import base64
import json
import os
import re
import socket
import tempfile
import time

import httpx
import pytest

from conftest import Daemon, Sandboxes, SLOW

VHOST = "sbx.test"
TOKEN_RE = re.compile(r"sbx(_|%5f)[0-9a-f]{64}", re.I)

# Answers every request with what it received, on 8080 (declared) and 9090 (not declared).
# /headers answers with the headers a hostile page would like to set.
ECHO = r"""
import json, http.server, threading
HOSTILE = [("Content-Security-Policy", "script-src * 'unsafe-inline'"),
           ("X-Content-Type-Options", "sniff"), ("Set-Cookie", "host=1; Path=/"),
           ("Set-Cookie", "tossed=1; Domain=sbx.test; Path=/"),
           ("Set-Cookie", "tossed2=1; domain=.SBX.TEST"), ("Clear-Site-Data", '"storage"'),
           ("Strict-Transport-Security", "max-age=60"), ("Service-Worker-Allowed", "/")]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def body(self):
        if self.headers.get("Transfer-Encoding") != "chunked":
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))
        out = b""
        while (n := int(self.rfile.readline().strip(), 16)):
            out += self.rfile.read(n)
            self.rfile.readline()
        self.rfile.readline()
        return out
    def any(self):
        body = self.body()
        info = json.dumps({"port": self.server.server_address[1], "method": self.command,
                           "path": self.path, "headers": self.headers.items(),
                           "body": body.decode("latin-1")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.path.startswith("/headers"):
            host = (self.headers.get("Host") or "").split(":")[0]
            for k, v in HOSTILE + [("Set-Cookie", "own=1; Domain=" + host)]:
                self.send_header(k, v)
        if self.path.startswith("/headers/chunked"):
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(info), info))
            return
        self.send_header("Content-Length", str(len(info)))
        self.end_headers()
        self.wfile.write(info)
    do_GET = do_POST = do_PUT = do_DELETE = any
    def log_message(self, *a):
        pass
for port in (9090, 8080):
    s = http.server.ThreadingHTTPServer(("0.0.0.0", port), H)
    threading.Thread(target=s.serve_forever, daemon=(port == 9090)).start()
"""


@pytest.fixture(scope="module")
def env(registry_url):
    """A daemon with --vhost sbx.test; alice's public echo server (ports [8080]), her private
    one, and bob, another user."""
    with tempfile.TemporaryDirectory(prefix="sbx-test-") as workdir:
        d = Daemon(workdir, ["--registry-mirror", registry_url, "--vhost", VHOST])
        clients = []
        try:
            d.start()
            admin = Sandboxes(d.url, d.admin_token)
            clients.append(admin)

            def user(name):
                tok = admin.post("/auth/tokens", json={"user": name}).json()["token"]
                c = Sandboxes(d.url, tok)
                clients.append(c)
                return c
            alice, bob = user("alice"), user("bob")
            pub = alice.create("python", args=["python3", "-c", ECHO], ports=[8080], public=True)
            priv = alice.create("python", args=["python3", "-c", ECHO], ports=[8080])
            for s in (pub, priv):
                wait_answer(alice, s, 8080)
                wait_answer(alice, s, 9090)
            yield {"d": d, "alice": alice, "bob": bob, "pub": pub, "priv": priv}
        finally:
            for c in clients:
                c.cleanup()
            d.kill()


def wait_answer(c, s, port):
    deadline = time.monotonic() + 30 * SLOW
    while (r := c.get(f"/sandboxes/{s['id']}/proxy/ping", params={"port": port})).status_code != 200:
        assert time.monotonic() < deadline, r.text
        time.sleep(0.2)


def raw(port, request, timeout=15):
    """Send request bytes as they are; (status, headers (lower-case names), body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as c:
        c.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data or not complete(data):
            part = c.recv(65536)
            if not part:
                break
            data += part
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers.setdefault(k.strip().lower(), []).append(v.strip())
    return int(lines[0].split()[1]), headers, body


def complete(data):
    head, _, body = data.partition(b"\r\n\r\n")
    m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    return m is not None and len(body) >= int(m.group(1))


def seen(r):
    """The echo server's view of the request, as {lower-case name: [values]}."""
    assert r.status_code == 200, r.text
    info = r.json()
    out = {}
    for k, v in info["headers"]:
        out.setdefault(k.lower(), []).append(v)
    return info, out


def api_origin_get(env, path, **kw):
    return httpx.get(f"{env['d'].url}/sandboxes/{env['pub']['id']}/proxy{path}", timeout=30, **kw)


def vhost_get(env, host, path, **kw):
    headers = {"Host": f"{host}.{VHOST}:{env['d'].port}", **kw.pop("headers", {})}
    return httpx.get(env["d"].url + path, headers=headers, timeout=30, **kw)


# ---------------------------------------------------------------- finding 1: origins

@pytest.mark.parametrize("path", ["/headers", "/headers/chunked"])
def test_on_the_api_origin_a_sandbox_answer_runs_no_script_and_sets_no_cookie(env, path):
    for r in (api_origin_get(env, path),
              env["alice"].get(f"/sandboxes/{env['pub']['id']}/proxy{path}")):
        assert r.status_code == 200 and r.json()["path"] == path
        assert r.headers.get_list("content-security-policy") == ["sandbox"]
        assert r.headers.get_list("x-content-type-options") == ["nosniff"]
        for h in ("set-cookie", "clear-site-data", "strict-transport-security",
                  "service-worker-allowed"):
            assert h not in r.headers, (h, r.headers)


@pytest.mark.parametrize("path", ["/headers", "/headers/chunked"])
def test_on_its_own_origin_a_sandbox_sets_its_headers_but_no_cookie_for_other_hosts(env, path):
    name = env["pub"]["name"]
    r = vhost_get(env, name, path)
    assert r.status_code == 200 and r.json()["path"] == path
    assert r.headers.get_list("content-security-policy") == ["script-src * 'unsafe-inline'"]
    cookies = r.headers.get_list("set-cookie")
    assert cookies == ["host=1; Path=/", f"own=1; Domain={name}.{VHOST}"], cookies
    # the port-named host is an origin of its own too
    r = vhost_get(env, f"{name}-8080", path)
    assert r.headers.get_list("set-cookie") == ["host=1; Path=/", f"own=1; Domain={name}-8080.{VHOST}"]


def test_cookies_reach_a_sandbox_only_on_its_own_origin(env):
    _, h = seen(api_origin_get(env, "/c", headers={"Cookie": "a=1"}))
    assert "cookie" not in h
    _, h = seen(vhost_get(env, env["pub"]["name"], "/c", headers={"Cookie": "a=1"}))
    assert h["cookie"] == ["a=1"]


def test_every_host_below_the_vhost_is_a_sandbox_origin_never_the_console(env):
    d = env["d"]
    for host in (f"a.{env['pub']['name']}", "ui.api", "x_y", "-"):
        r = httpx.get(d.url + "/ui", headers={"Host": f"{host}.{VHOST}"}, timeout=30)
        assert r.status_code == 401 and r.json()["code"] == "unauthorized", (host, r.text)
    # the vhost itself (and its fully qualified spelling) is the API's and the console's
    for host in (VHOST, VHOST + "."):
        assert httpx.get(d.url + "/ui", headers={"Host": host}, timeout=30).status_code == 200
    r = httpx.get(d.url + "/ping", headers={"Host": f"{env['pub']['name']}.{VHOST}."}, timeout=30)
    assert r.status_code == 200 and r.json()["path"] == "/ping"


def test_the_daemons_own_answers_are_not_sniffed(env):
    d = env["d"]
    for r in (httpx.get(d.url + "/healthz"), httpx.get(d.url + "/sandboxes"),
              httpx.get(d.url + "/nope")):
        assert r.headers.get_list("x-content-type-options") == ["nosniff"]


# ---------------------------------------------------------------- finding 9: declared ports

def test_public_means_the_declared_ports_only(env):
    pub, alice, bob = env["pub"], env["alice"], env["bob"]
    assert api_origin_get(env, "/p").json()["port"] == 8080
    assert api_origin_get(env, "/p", params={"port": 8080}).json()["port"] == 8080
    assert vhost_get(env, pub["name"], "/p").json()["port"] == 8080
    assert vhost_get(env, f"{pub['name']}-8080", "/p").json()["port"] == 8080
    anon = [api_origin_get(env, "/p", params={"port": 9090}),
            vhost_get(env, f"{pub['name']}-9090", "/p"),
            vhost_get(env, pub["name"], "/p", params={"port": 9090})]
    for r in anon:
        assert r.status_code == 401 and r.json()["code"] == "unauthorized", r.text
    # another user: the 404 of a sandbox not theirs; the owner: any port
    r = bob.get(f"/sandboxes/{pub['id']}/proxy/p", params={"port": 9090})
    assert r.status_code == 404 and r.json()["code"] == "sandbox_not_found"
    assert bob.get(f"/sandboxes/{pub['id']}/proxy/p").json()["port"] == 8080
    assert alice.get(f"/sandboxes/{pub['id']}/proxy/p", params={"port": 9090}).json()["port"] == 9090
    r = httpx.get(env["d"].url + "/p", timeout=30,
                  headers={"Host": f"{pub['name']}-9090.{VHOST}",
                           "Authorization": f"Bearer {alice.token}"})
    assert r.json()["port"] == 9090


def test_public_without_ports_opens_the_images_exposed_ones_only(env):
    """webapp's image exposes 8080/tcp and was made without ports: 8080 is public, 9090 not,
    and with no port declared anywhere nothing is."""
    alice = env["alice"]
    s = alice.create("webapp", public=True)
    plain = alice.create("busybox", public=True)
    for box in (s, plain):
        for port in (8080, 9090):
            alice.sh(box["id"], f"mkdir -p /tmp/w{port} && echo p{port} > /tmp/w{port}/i.html"
                     f" && httpd -p {port} -h /tmp/w{port}")
    url = env["d"].url
    deadline = time.monotonic() + 30 * SLOW
    while (r := httpx.get(f"{url}/sandboxes/{s['id']}/proxy/i.html")).status_code != 200:
        assert time.monotonic() < deadline, r.text
        time.sleep(0.2)
    assert r.text == "p8080\n"
    r = httpx.get(f"{url}/sandboxes/{s['id']}/proxy/i.html", params={"port": 9090})
    assert r.status_code == 401
    assert alice.get(f"/sandboxes/{s['id']}/proxy/i.html", params={"port": 9090}).text == "p9090\n"
    for port in (None, 8080, 9090):
        r = httpx.get(f"{url}/sandboxes/{plain['id']}/proxy/i.html",
                      params={"port": port} if port else None)
        assert r.status_code == 401, (port, r.text)
    assert alice.get(f"/sandboxes/{plain['id']}/proxy/i.html", params={"port": 9090}).status_code == 200


# ---------------------------------------------------------------- finding 12

def test_anonymous_callers_cannot_tell_a_private_sandbox_from_none(env):
    d, priv, bob = env["d"], env["priv"], env["bob"]
    answers = [httpx.get(f"{d.url}/sandboxes/{key}/proxy/x", timeout=30)
               for key in (priv["id"], priv["name"], "0" * 64, "nosuchname")]
    answers += [vhost_get(env, host, "/x") for host in (priv["name"], "nosuchname",
                                                        f"{priv['name']}-8080")]
    for r in answers:
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"].lower().startswith("bearer")
        assert r.json() == answers[0].json()
    answers = [bob.get(f"/sandboxes/{key}/proxy/x") for key in (priv["id"], "0" * 64)]
    for r in answers:
        assert r.status_code == 404 and r.json() == answers[0].json()


def test_client_address_headers_are_set_by_the_proxy(env):
    d = env["d"]
    lies = {"X-Forwarded-For": "6.6.6.6", "Forwarded": "for=6.6.6.6;host=evil", "X-Real-IP":
            "6.6.6.6", "X-Forwarded-Host": "evil", "X-Forwarded-Proto": "https",
            "X-Forwarded-Port": "1", "True-Client-IP": "6.6.6.6", "X-Client-IP": "6.6.6.6"}
    info, h = seen(api_origin_get(env, "/a", headers=lies))
    assert "6.6.6.6" not in json.dumps(info) and "evil" not in json.dumps(info)
    assert h["x-forwarded-for"] == ["127.0.0.1"] and h["x-real-ip"] == ["127.0.0.1"]
    assert h["x-forwarded-proto"] == ["http"]
    assert h["x-forwarded-host"] == [f"127.0.0.1:{d.port}"]
    assert h["forwarded"] == [f'for=127.0.0.1;host="127.0.0.1:{d.port}";proto=http']
    for k in ("x-forwarded-port", "true-client-ip", "x-client-ip"):
        assert k not in h
    # headers that the client's Connection names are hop-by-hop: they stop at the proxy
    status, _, body = raw(d.port, (f"GET /sandboxes/{env['pub']['id']}/proxy/b HTTP/1.1\r\n"
                                   "Host: x\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\n"
                                   "X-Kept: 2\r\n\r\n").encode())
    got = {k.lower() for k, _ in json.loads(body)["headers"]}
    assert status == 200 and "x-kept" in got and "x-hop" not in got


def test_a_body_framed_two_ways_is_refused(env):
    d, pub = env["d"], env["pub"]
    head = f"POST /sandboxes/{pub['id']}/proxy/up HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    cases = [
        # a sandbox that trusted Content-Length would read "abc" and then a request "de..."
        head + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n0\r\n\r\n",
        head + "Transfer-Encoding: chunked\r\nContent-Length: 30\r\n\r\n5\r\nabcde\r\n0\r\n\r\n",
        head + "Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nabcde\r\n0\r\n\r\n",
        head + "Content-Length: 5\r\nContent-Length: 7\r\n\r\nabcdefg",
    ]
    for req in cases:
        status, headers, body = raw(d.port, req.encode())
        assert status == 400, (req, status, body)
        assert headers["content-type"][0].startswith("application/json"), body
        assert json.loads(body)["code"] == "bad_framing", body
    # one framing at a time still works, and the daemon serves on
    status, _, body = raw(d.port, (head + "Transfer-Encoding: chunked\r\n\r\n"
                                   "5\r\nabcde\r\n0\r\n\r\n").encode())
    assert status == 200 and json.loads(body)["body"] == "abcde"
    status, _, body = raw(d.port, (head + "Content-Length: 5\r\n\r\nabcde").encode())
    assert status == 200 and json.loads(body)["body"] == "abcde"
    assert httpx.get(d.url + "/healthz").status_code == 200


def token_variants(tok):
    basic = base64.b64encode(f"me:{tok}".encode()).decode()
    return [
        ("Authorization", f"Bearer  {tok}"),
        ("Authorization", f"bearer\t{tok}"),
        ("Authorization", f"Basic {basic}"),
        ("X-Api-Key", tok),
        ("X-Api-Key", "SBX_" + tok[4:].upper()),
        ("Cookie", f"session=1; sbx={tok}"),
        ("Sec-WebSocket-Protocol", f"sandboxer, bearer.{tok}, chat"),
        ("Referer", f"http://x/?token={tok}"),
    ]


def test_no_header_carrying_a_token_reaches_a_sandbox(env):
    d, pub, alice, bob = env["d"], env["pub"], env["alice"], env["bob"]
    for tok in (bob.token, alice.token, d.admin_token):
        for name, value in token_variants(tok):
            for host in (None, pub["name"]):  # the API's origin, the sandbox's own
                req = (f"GET {'/t' if host else '/sandboxes/' + pub['id'] + '/proxy/t'} "
                       f"HTTP/1.1\r\nHost: {f'{host}.{VHOST}' if host else 'x'}\r\n"
                       f"Connection: close\r\n{name}: {value}\r\n\r\n")
                status, _, body = raw(d.port, req.encode())
                assert status == 200, (name, value, body)
                assert not TOKEN_RE.search(body.decode("latin-1")), (name, value, body)
                if name == "Sec-WebSocket-Protocol":
                    hs = dict((k.lower(), v) for k, v in json.loads(body)["headers"])
                    assert hs["sec-websocket-protocol"] == "sandboxer, chat"
    # the spaced header still authenticates: alice reaches her undeclared port with it
    status, _, body = raw(d.port, (f"GET /sandboxes/{pub['id']}/proxy/t?port=9090 HTTP/1.1\r\n"
                                   f"Host: x\r\nConnection: close\r\n"
                                   f"Authorization: Bearer   {alice.token}\r\n\r\n").encode())
    assert status == 200 and json.loads(body)["port"] == 9090
    assert not TOKEN_RE.search(body.decode())


def test_a_token_in_the_url_is_refused_not_forwarded(env):
    pub, tok = env["pub"], env["bob"].token
    for path, params in ((f"/t", {"token": tok}), (f"/{tok}", None), ("/t", {tok: "1"})):
        r = api_origin_get(env, path, params=params)
        assert r.status_code == 400 and r.json()["code"] == "token_in_url", r.text
        assert tok not in r.text
    assert api_origin_get(env, "/t", params={"token": "sbx_short"}).status_code == 200
