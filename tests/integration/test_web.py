"""The web console: /ui and its assets (headers, CSP, redirects, 404s), the WebSocket
subprotocol token that lets a browser open a terminal, and the console itself in a real
browser — Chromium driven by puppeteer-core from the Node suite in tests/web (npm ci runs
first when its node_modules is missing or older than package-lock.json)."""
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import httpx
import pytest
import websocket

from conftest import ROOT
from test_sdk_js import ensure_node_modules, live_sandboxes, npm_env

WEB = os.path.join(ROOT, "web")
SUITE = os.path.join(ROOT, "tests", "web")
SUITE_TIMEOUT = 900

CSP = ("default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; "
       "style-src 'self'; script-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
       "form-action 'none'")
ASSETS = {
    "/ui": ("text/html", os.path.join(WEB, "index.html")),
    "/ui/app.js": ("text/javascript", os.path.join(WEB, "app.js")),
    "/ui/app.css": ("text/css", os.path.join(WEB, "app.css")),
    "/ui/xterm.js": ("text/javascript",
                     os.path.join(WEB, "node_modules", "@xterm", "xterm", "lib", "xterm.js")),
    "/ui/xterm.css": ("text/css",
                      os.path.join(WEB, "node_modules", "@xterm", "xterm", "css", "xterm.css")),
    "/ui/addon-fit.js": ("text/javascript", os.path.join(WEB, "node_modules", "@xterm",
                                                         "addon-fit", "lib", "addon-fit.js")),
}


def assert_web_headers(r):
    assert r.headers["content-security-policy"] == CSP
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"


# ---------------------------------------------------------------- static files, no browser

def test_console_and_assets_are_served_without_a_token_with_security_headers(daemon):
    for path, (ctype, source) in ASSETS.items():
        r = httpx.get(daemon.url + path, timeout=30)
        assert r.status_code == 200, (path, r.text[:300])
        assert r.headers["content-type"].split(";")[0] == ctype, path
        assert r.headers["cache-control"] == "no-cache", path
        assert_web_headers(r)
        with open(source, "rb") as f:
            assert r.content == f.read(), f"{path} is not the embedded {source}"


def test_console_page_has_nothing_inline_and_nothing_from_elsewhere(daemon):
    page = httpx.get(daemon.url + "/ui", timeout=30).text
    # the CSP forbids inline code and styles: the page must not need them
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page), "inline <script>"
    assert "<style" not in page and not re.search(r"\sstyle=", page), "inline style"
    assert not re.search(r"\son[a-z]+=", page), "inline event handler"
    for ref in re.findall(r'(?:src|href)="([^"]+)"', page):
        if ref == "data:,":  # the empty favicon, so that the browser asks for none
            continue
        assert ref.startswith("/ui/"), f"{ref} is not served by the daemon"
        assert httpx.get(daemon.url + ref, timeout=30).status_code == 200, ref
    script = httpx.get(daemon.url + "/ui/app.js", timeout=30).text
    # data reaches the page as text only
    assert not re.search(r"\.(inner|outer)HTML\b|insertAdjacentHTML|document\.write|eval\(",
                         script)
    assert "http://" not in script and "https://" not in script


def test_root_redirects_to_the_console(daemon):
    r = httpx.get(daemon.url + "/", timeout=30, follow_redirects=False)
    assert r.status_code == 302 and r.headers["location"] == "/ui"


def test_unknown_console_paths_are_the_json_404(daemon):
    for path in ("/ui/nope.js", "/ui/app.js/x", "/ui/index.html", "/ui/xterm.js.map"):
        r = httpx.get(daemon.url + path, timeout=30)
        assert r.status_code == 404, path
        assert r.headers["content-type"].startswith("application/json")
        body = r.json()
        assert body["code"] == "route_not_found" and body["detail"], body
        assert_web_headers(r)
    r = httpx.get(daemon.url + "/ui/", timeout=30)
    assert r.status_code == 404 and r.json()["code"] == "route_not_found"
    r = httpx.post(daemon.url + "/ui", timeout=30)
    assert r.status_code == 405 and r.headers["allow"] == "GET", r.headers


# ---------------------------------------------------------------- WebSocket subprotocol token

def pty_url(d, sid):
    return d.url.replace("http://", "ws://") + f"/sandboxes/{sid}/exec/pty?cols=80&rows=24"


def read_until(ws, marker, timeout=30):
    out = b""
    deadline = time.monotonic() + timeout
    while marker not in out:
        assert time.monotonic() < deadline, f"no {marker!r} in {out[-300:]!r}"
        ws.settimeout(max(0.1, deadline - time.monotonic()))
        op, data = ws.recv_data(control_frame=True)
        assert op != websocket.ABNF.OPCODE_CLOSE, f"closed before {marker!r}: {data!r}"
        if op == websocket.ABNF.OPCODE_BINARY:
            out += data
    return out


def refused(d, sid, protocols, authorization=None):
    """A WebSocket handshake the daemon must refuse: its plain HTTP answer (no 101)."""
    headers = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
               "Sec-WebSocket-Protocol": ", ".join(protocols)}
    if authorization:
        headers["Authorization"] = authorization
    r = httpx.get(d.url + f"/sandboxes/{sid}/exec/pty", headers=headers, timeout=30)
    assert r.status_code != 101
    assert r.headers["content-type"].startswith("application/json")
    assert "sec-websocket-protocol" not in r.headers
    return r


def test_websocket_takes_the_token_as_a_subprotocol(sbx_daemon, sbx):
    d = sbx_daemon
    sid = sbx.create("busybox", label="ws-proto")["id"]
    ws = websocket.create_connection(pty_url(d, sid), timeout=30,
                                     subprotocols=["sandboxer", f"bearer.{d.admin_token}"])
    try:
        assert ws.getstatus() == 101
        assert ws.getsubprotocol() == "sandboxer"
        headers = ws.getheaders()
        assert headers["sec-websocket-protocol"] == "sandboxer"
        assert not any(d.admin_token in str(v) for v in headers.values()), headers
        ws.send_binary(b"echo ok-$((6*7))\n")
        read_until(ws, b"ok-42")
        ws.send_binary(b"exit 3\n")
        ws.settimeout(30)
        while True:
            op, data = ws.recv_data(control_frame=True)
            if op == websocket.ABNF.OPCODE_CLOSE:
                break
        assert int.from_bytes(data[:2], "big") == 1000
        assert json.loads(data[2:]) == {"exit_code": 3, "signal": None}
    finally:
        ws.close()
    # the token never lands in the daemon's log
    with open(d.stderr_path, encoding="utf-8", errors="replace") as f:
        assert d.admin_token not in f.read()


def test_websocket_subprotocol_token_is_checked_like_a_bearer_token(sbx_daemon, sbx, sbx_user):
    d = sbx_daemon
    sid = sbx.create("busybox", label="ws-proto-bad")["id"]
    bob = sbx_user("bob")
    url = pty_url(d, sid)
    wrong = "sbx_" + "0" * 64
    for protocols in (["sandboxer", f"bearer.{wrong}"], ["sandboxer", "bearer.nonsense"],
                      ["sandboxer", "bearer."], ["sandboxer"],
                      ["sandboxer", f"bearer.{d.admin_token}", f"bearer.{d.admin_token}"]):
        r = refused(d, sid, protocols)
        assert r.status_code == 401, (protocols, r.text)
        assert r.json()["code"] == "unauthorized"
        assert r.headers["www-authenticate"].startswith("Bearer")
    # another owner's sandbox answers 404, as with the header
    r = refused(d, sid, ["sandboxer", f"bearer.{bob.token}"])
    assert r.status_code == 404 and r.json()["code"] == "sandbox_not_found", r.text
    # the Authorization header wins over the subprotocol, both ways
    r = refused(d, sid, ["sandboxer", f"bearer.{d.admin_token}"], f"Bearer {wrong}")
    assert r.status_code == 401
    ws = websocket.create_connection(url, timeout=30, subprotocols=["sandboxer", f"bearer.{wrong}"],
                                     header=[f"Authorization: Bearer {d.admin_token}"])
    try:
        assert ws.getsubprotocol() == "sandboxer"
        ws.send_binary(b"echo hdr-$((2*3))\n")
        read_until(ws, b"hdr-6")
    finally:
        ws.close()
    # only the terminal routes take it, and only on an upgrade
    r = httpx.get(d.url + "/sandboxes", timeout=30,
                  headers={"Sec-WebSocket-Protocol": f"sandboxer, bearer.{d.admin_token}",
                           "Upgrade": "websocket", "Connection": "Upgrade"})
    assert r.status_code == 401
    r = httpx.get(d.url + f"/sandboxes/{sid}/exec/pty", timeout=30,
                  headers={"Sec-WebSocket-Protocol": f"sandboxer, bearer.{d.admin_token}"})
    assert r.status_code == 401
    # a client that sends the header and offers no subprotocol gets none back
    ws = websocket.create_connection(url, timeout=30,
                                     header=[f"Authorization: Bearer {d.admin_token}"])
    try:
        assert "sec-websocket-protocol" not in ws.getheaders()
    finally:
        ws.close()


def test_attach_takes_the_token_as_a_subprotocol(sbx_daemon, sbx, sbx_user):
    d = sbx_daemon
    sid = sbx.create("busybox", interactive=True, args=["/bin/sh"], label="ws-attach")["id"]
    url = d.url.replace("http://", "ws://") + f"/sandboxes/{sid}/attach"
    bob = sbx_user("bob")
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        websocket.create_connection(url, timeout=30,
                                    subprotocols=["sandboxer", f"bearer.{bob.token}"]).close()
    assert e.value.status_code == 404
    ws = websocket.create_connection(url, timeout=30,
                                     subprotocols=["sandboxer", f"bearer.{d.admin_token}"])
    try:
        assert ws.getsubprotocol() == "sandboxer"
        ws.send_binary(b"echo at-$((5*5))\n")
        read_until(ws, b"at-25")
    finally:
        ws.close()


# ---------------------------------------------------------------- the console in Chromium

def pids_using(path):
    """Processes whose command line names path (the browser's own temporary profile)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if path.encode() in f.read():
                    pids.append(int(entry))
        except OSError:
            pass
    return pids


def test_console_in_a_real_browser(sbx_daemon):
    # Not a skip: a machine without Chromium or Node.js must not pass this test silently.
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is needed for the web console's tests (scripts/setup)"
    assert shutil.which("npm") and shutil.which("node"), "Node.js 20+ and npm are needed"
    version = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout
    assert int(version.lstrip("v").split(".")[0]) >= 20, f"need Node.js 20+, not {version}"
    d = sbx_daemon
    r = httpx.post(d.url + "/auth/tokens", json={"user": "web-other", "name": "web"},
                   headers={"Authorization": f"Bearer {d.admin_token}"}, timeout=30)
    assert r.status_code == 201, r.text
    other = r.json()["token"]

    ensure_node_modules(SUITE)
    with tempfile.TemporaryDirectory(prefix="sbx-web-") as tmp:
        env = npm_env({"SANDBOXER_URL": d.url, "SANDBOXER_TOKEN": d.admin_token,
                       "SANDBOXER_OTHER_TOKEN": other, "CHROMIUM": chromium,
                       "SANDBOXER_WEB_TMP": tmp})
        # its own process group, so that a timeout ends node's test processes too
        p = subprocess.Popen(["npm", "test"], cwd=SUITE, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            output, _ = p.communicate(timeout=SUITE_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            output, _ = p.communicate()
            pytest.fail(f"the browser suite did not finish in {SUITE_TIMEOUT} s:\n"
                        f"{output[-20000:]}")
        finally:
            # a browser the suite could not close (it runs in its own process group)
            for pid in pids_using(tmp):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        print(output[-4000:])
        assert p.returncode == 0, f"the browser suite failed ({p.returncode}):\n{output[-20000:]}"
        assert "ℹ fail 0" in output and "ℹ pass 0" not in output, output[-5000:]
        assert not os.listdir(tmp), f"the suite left {os.listdir(tmp)} behind"

    # every test deleted what it made, failed or not
    for token in (d.admin_token, other):
        left = live_sandboxes(d.url, token)
        assert not left, [(s["id"], s["label"], s["status"]) for s in left]
