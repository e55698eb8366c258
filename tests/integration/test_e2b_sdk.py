"""E2B's clients against the daemon (docs/e2b.md).

- The official, unmodified `e2b` and `@e2b/code-interpreter` npm packages (tests/e2b, pinned
  in its package-lock.json; npm ci runs first when node_modules is missing or older) drive
  tpl_daemon through tests/e2b/sdk.test.mjs under Node's test runner. The SDK stays on
  loopback with its own self-hosting options: E2B_API_URL and E2B_SANDBOX_URL name the daemon
  (envd requests then carry the E2b-Sandbox-Id/-Port headers), E2B_DOMAIN is its
  --e2b-domain, and getHost()'s names are sent as Host headers.
- The same SDKs with nothing but E2B_DOMAIN and a key, through Caddy with the site of
  `sandboxer caddy-config --e2b` (tls internal): tests/e2b/tls-front.test.mjs.
- E2B API keys from our token API, and what bad input to E2B's routes answers (E2B's error
  shapes), with plain HTTP.
"""
import os
import re
import shutil
import signal
import subprocess

import httpx
import pytest

from conftest import BIN, E2B_DOMAIN, ROOT, free_port, wait_for
from test_sdk_js import ensure_node_modules, npm_env

SUITE = os.path.join(ROOT, "tests", "e2b")
TEST_TIMEOUT = 600
KEY_RE = re.compile(r"^e2b_[0-9a-f]{64}$")


def e2b_key(d, user):
    r = httpx.post(d.url + "/auth/tokens", json={"user": user, "name": "e2b", "kind": "e2b"},
                   headers={"Authorization": f"Bearer {d.admin_token}"}, timeout=30)
    assert r.status_code == 201, r.text
    key = r.json()["token"]
    assert KEY_RE.match(key), key
    assert r.json()["kind"] == "e2b"
    return key


def e2b_live(d, key):
    r = httpx.get(d.url + "/v2/sandboxes", params={"state": "running,paused"},
                  headers={"X-API-KEY": key}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


class E2B:
    """An E2B control-plane client of one key that kills what it created."""

    def __init__(self, d, key):
        self.http = httpx.Client(base_url=d.url, headers={"X-API-KEY": key}, timeout=120)
        self.made = []

    def create(self, **body):
        body.setdefault("templateID", "base")
        r = self.http.post("/sandboxes", json=body)
        assert r.status_code == 201, r.text
        self.made.append(r.json()["sandboxID"])
        return r.json()

    def close(self):
        for sid in self.made:
            try:
                self.http.delete(f"/sandboxes/{sid}")
            except httpx.HTTPError:
                pass
        self.http.close()


@pytest.fixture
def e2b_users(tpl_daemon):
    made = []

    def make(name):
        c = E2B(tpl_daemon, e2b_key(tpl_daemon, name))
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def test_official_e2b_sdks(tpl_daemon):
    # Not a skip: a machine without Node.js must not pass this test silently.
    assert shutil.which("npm") and shutil.which("node"), \
        "Node.js 20+ and npm are needed for the E2B SDK tests (see scripts/setup)"
    d = tpl_daemon
    key, other = e2b_key(d, "e2b-sdk-a"), e2b_key(d, "e2b-sdk-b")
    ensure_node_modules(SUITE)
    env = npm_env({"E2B_API_KEY": key, "E2B_OTHER_API_KEY": other, "E2B_API_URL": d.url,
                   "E2B_SANDBOX_URL": d.url, "E2B_DOMAIN": E2B_DOMAIN,
                   "SANDBOXER_ADDR": f"127.0.0.1:{d.port}"})
    env.pop("E2B_DEBUG", None)
    try:
        run_node("sdk.test.mjs", env)
    finally:
        leftover = {k: e2b_live(d, k) for k in (key, other)}
    # every scenario killed what it made, failed or not
    assert leftover == {key: [], other: []}, leftover


def test_e2b_keys_are_their_own_kind(tpl_daemon, e2b_users):
    d = tpl_daemon
    key = e2b_key(d, "e2b-kind")
    # an E2B key is no bearer token, and a bearer token is no E2B key
    r = httpx.get(d.url + "/sandboxes", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert r.status_code == 401, r.text
    api = {"Host": f"api.{E2B_DOMAIN}"}
    r = httpx.get(d.url + "/v2/sandboxes", headers={"X-API-KEY": d.admin_token, **api},
                  timeout=30)
    assert r.status_code == 401, r.text
    assert set(r.json()) == {"code", "message"} and r.json()["code"] == 401
    # without E2B's host, an X-API-KEY that is no E2B key leaves a request to our own API
    r = httpx.get(d.url + "/healthz", headers={"X-API-KEY": d.admin_token}, timeout=30)
    assert r.status_code == 200, r.text
    r = httpx.get(d.url + "/v2/sandboxes", headers={"X-API-KEY": "e2b_" + "0" * 64}, timeout=30)
    assert r.status_code == 401 and r.json()["code"] == 401, r.text
    r = httpx.post(d.url + "/auth/tokens", json={"user": "e2b-kind", "kind": "nope"},
                   headers={"Authorization": f"Bearer {d.admin_token}"}, timeout=30)
    assert r.status_code == 400, r.text
    # the token listing says which kind each is, and never the key itself
    r = httpx.get(d.url + "/auth/tokens", headers={"Authorization": f"Bearer {d.admin_token}"},
                  timeout=30)
    assert r.status_code == 200, r.text
    assert key not in r.text and key[4:] not in r.text


def test_the_envd_token_guards_secure_sandboxes_only(tpl_daemon, e2b_users):
    """What docs/e2b.md warns of: without secure, envd needs no token, only the id."""
    d = tpl_daemon
    alice = e2b_users("e2b-secure-a")
    tight = alice.create(secure=True, timeout=120)
    loose = alice.create(secure=False, timeout=120)
    assert tight["envdAccessToken"] and not loose.get("envdAccessToken")

    def stat(sbx, token=None):
        h = {"E2b-Sandbox-Id": sbx["sandboxID"], "E2b-Sandbox-Port": "49983",
             "Connect-Protocol-Version": "1"}
        if token:
            h["X-Access-Token"] = token
        return httpx.post(d.url + "/filesystem.Filesystem/Stat", json={"path": "/home/user"},
                          headers=h, timeout=30)

    assert stat(tight).status_code == 401
    assert stat(tight, "wrong").status_code == 401
    assert stat(tight, tight["envdAccessToken"]).status_code == 200
    r = stat(loose)  # no key, no token: the id is enough
    assert r.status_code == 200 and r.json()["entry"]["name"] == "user", r.text


def test_envd_files_of_a_file_rewritten_while_read(tpl_daemon, e2b_users):
    """GET /files of a counter rewritten all the time: each answer whole (its length kept),
    plain and gzip, never a cut connection."""
    d = tpl_daemon
    sbx = e2b_users("e2b-rewrite").create(timeout=120)
    h = {"E2b-Sandbox-Id": sbx["sandboxID"], "E2b-Sandbox-Port": "49983",
         "X-Access-Token": sbx["envdAccessToken"], "Connect-Protocol-Version": "1"}
    r = httpx.post(d.url + "/process.Process/Start", headers=h, timeout=30, json={
        "process": {"cmd": "/bin/sh", "args": ["-c", "nohup sh -c 'i=100000; while true; do "
                                               "i=$((i+1)); echo $i > /tmp/count; done' "
                                               ">/dev/null 2>&1 &"]}})
    # Start's stream ends with the shell; the loop it left runs on
    assert r.status_code == 200, r.text
    wait_for("the counter to start", lambda: httpx.get(
        d.url + "/files", params={"path": "/tmp/count"}, headers=h, timeout=30
    ).status_code == 200)
    seen = set()
    for i in range(200):
        enc = {"Accept-Encoding": "gzip"} if i % 2 else {"Accept-Encoding": "identity"}
        r = httpx.get(d.url + "/files", params={"path": "/tmp/count"}, headers={**h, **enc},
                      timeout=30)
        assert r.status_code == 200, r.text
        assert r.content == b"" or (r.content.endswith(b"\n") and r.content[:-1].isdigit()), \
            r.content
        seen.add(r.content)
    assert len(seen) > 3, seen  # it did change under us


def test_e2b_bad_input_gets_e2b_errors(tpl_daemon, e2b_users):
    d = tpl_daemon
    alice, bob = e2b_users("e2b-bad-a"), e2b_users("e2b-bad-b")
    sbx = alice.create(metadata={"who": "alice"}, timeout=120)
    sid = sbx["sandboxID"]
    assert re.match(r"^[a-z0-9]{20}$", sid)
    assert sbx["domain"] == E2B_DOMAIN and sbx["envdVersion"]

    def e2b_error(r, status):
        assert r.status_code == status, r.text
        body = r.json()
        assert body["code"] == status and isinstance(body["message"], str), body

    e2b_error(alice.http.post("/sandboxes", content=b'{"templateID":'), 400)
    e2b_error(alice.http.post("/sandboxes", json=[]), 400)
    e2b_error(alice.http.post("/sandboxes", json={"templateID": 5}), 400)
    e2b_error(alice.http.post("/sandboxes", json={}), 400)
    e2b_error(alice.http.post("/sandboxes", json={"templateID": "base", "timeout": "x"}), 400)
    e2b_error(alice.http.post("/sandboxes", json={"templateID": "base",
                                                  "metadata": {"a": 1}}), 400)
    e2b_error(alice.http.post("/sandboxes", json={"templateID": "no-such-template"}), 404)
    e2b_error(alice.http.get("/v2/sandboxes", params={"limit": "abc"}), 400)
    e2b_error(alice.http.post(f"/sandboxes/{sid}/timeout", json={"timeout": "x"}), 400)
    e2b_error(alice.http.get("/sandboxes/" + "a" * 20), 404)
    e2b_error(alice.http.get("/sandboxes/not-an-id"), 404)
    # another user's sandbox is as unknown as one that never was, for every verb
    e2b_error(bob.http.get(f"/sandboxes/{sid}"), 404)
    e2b_error(bob.http.delete(f"/sandboxes/{sid}"), 404)
    e2b_error(bob.http.post(f"/sandboxes/{sid}/timeout", json={"timeout": 1}), 404)
    e2b_error(bob.http.post(f"/sandboxes/{sid}/pause"), 404)
    e2b_error(bob.http.post(f"/sandboxes/{sid}/connect", json={"timeout": 60}), 404)
    assert bob.http.get("/v2/sandboxes").json() == []
    # nothing bob did changed it
    r = alice.http.get(f"/sandboxes/{sid}")
    assert r.status_code == 200 and r.json()["state"] == "running", r.text
    assert r.json()["metadata"] == {"who": "alice"}

    # envd (Connect RPC): its error shape, and the access token of a secure sandbox
    envd = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983",
            "X-Access-Token": sbx["envdAccessToken"], "Connect-Protocol-Version": "1"}

    def rpc(path, body, headers=envd):
        kw = {"content": body} if isinstance(body, bytes) else {"json": body}
        return httpx.post(d.url + path, headers=headers, timeout=30, **kw)

    def connect_error(r, status, code):
        assert r.status_code == status, r.text
        assert r.json()["code"] == code and r.json()["message"], r.text

    r = rpc("/filesystem.Filesystem/Stat", {"path": "/home/user"})
    assert r.status_code == 200 and r.json()["entry"]["type"] == "FILE_TYPE_DIRECTORY", r.text
    connect_error(rpc("/filesystem.Filesystem/Stat", {"path": "/nope"}), 404, "not_found")
    connect_error(rpc("/filesystem.Filesystem/Stat", {"path": 5}), 400, "invalid_argument")
    connect_error(rpc("/filesystem.Filesystem/Stat", b'{"path'), 400, "invalid_argument")
    connect_error(rpc("/filesystem.Filesystem/Stat", {"path": "/"},
                      dict(envd, **{"X-Access-Token": "wrong"})), 401, "unauthenticated")
    unknown = dict(envd, **{"E2b-Sandbox-Id": "b" * 20})
    r = rpc("/filesystem.Filesystem/Stat", {"path": "/"}, unknown)
    assert r.status_code in (502, 503) and r.json()["code"] == "unavailable", r.text
    r = httpx.get(d.url + "/files", params={"path": "/nope"}, headers=envd, timeout=30)
    e2b_error(r, 404)
    # envd's health: 204 while it runs, 502 once it is gone, as E2B's proxy answers
    r = httpx.get(d.url + "/health", headers=envd, timeout=30)
    assert r.status_code == 204, r.text
    assert alice.http.delete(f"/sandboxes/{sid}").status_code == 204
    r = httpx.get(d.url + "/health", headers=envd, timeout=30)
    assert r.status_code == 502, r.text


def run_node(suite_file, env, timeout=TEST_TIMEOUT, args=()):
    """node --test on suite_file in tests/e2b; its output, failing the test unless all passed."""
    p = subprocess.Popen(["node", *args, "--test", "--test-reporter=spec", suite_file],
                         cwd=SUITE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        output, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        output, _ = p.communicate()
        pytest.fail(f"{suite_file} did not finish in {timeout} s:\n{output[-20000:]}")
    print(output[-4000:])
    assert p.returncode == 0, f"{suite_file} failed ({p.returncode}):\n{output[-20000:]}"
    assert re.search(r"ℹ pass [1-9]", output) and "ℹ fail 0" in output, output[-5000:]
    return output


def test_e2b_sdk_through_caddy_tls_internal(tpl_daemon, tmp_path):
    """The set-up docs/e2b.md describes: `sandboxer caddy-config --e2b` in front, the SDK with
    only E2B_DOMAIN and its key, trusting Caddy's local CA."""
    assert shutil.which("caddy"), "caddy is needed (scripts/setup installs Debian's package)"
    d = tpl_daemon
    key = e2b_key(d, "e2b-tls")
    http_port, https_port = free_port(), free_port()
    out = subprocess.run([BIN, "caddy-config", "--e2b", E2B_DOMAIN, "--upstream",
                          f"127.0.0.1:{d.port}", "--https-port", str(https_port)],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    assert f"*.{E2B_DOMAIN}" in out.stdout and "tls internal" in out.stdout, out.stdout
    store = tmp_path / "caddy"
    # the test's own globals: no admin endpoint, no trust store change, a private storage
    caddyfile = out.stdout.replace(
        "{\n", "{\n\tadmin off\n\tskip_install_trust\n"
        f"\thttp_port {http_port}\n\tstorage file_system {store}\n", 1)
    (tmp_path / "Caddyfile").write_text(caddyfile)
    env = dict(os.environ, HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_CONFIG_HOME=str(tmp_path / "config"))
    root = store / "pki" / "authorities" / "local" / "root.crt"
    with open(tmp_path / "caddy.log", "wb") as log:
        caddy = subprocess.Popen(["caddy", "run", "--config", str(tmp_path / "Caddyfile"),
                                  "--adapter", "caddyfile"], env=env, stdout=log, stderr=log)
    try:
        def api_health():
            if not root.exists():
                return None
            r = subprocess.run(["curl", "-sS", "--max-time", "5", "--resolve",
                                f"api.{E2B_DOMAIN}:{https_port}:127.0.0.1", "--cacert",
                                str(root), f"https://api.{E2B_DOMAIN}:{https_port}/health"],
                               capture_output=True, text=True, timeout=20)
            return r.returncode == 0 and "Health check successful" in r.stdout
        wait_for("E2B's API through Caddy", api_health, timeout=60, interval=0.3)
        ensure_node_modules(SUITE)
        env = npm_env({"E2B_API_KEY": key, "E2B_DOMAIN": E2B_DOMAIN,
                       "NODE_EXTRA_CA_CERTS": str(root), "SANDBOXER_TLS_PORT": str(https_port)})
        for name in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DEBUG"):
            env.pop(name, None)
        try:
            run_node("tls-front.test.mjs", env, timeout=300, args=("--require", "./loopback.cjs"))
        finally:
            leftover = e2b_live(d, key)
        assert leftover == [], leftover
    finally:
        caddy.terminate()
        try:
            caddy.wait(timeout=20)
        except subprocess.TimeoutExpired:
            caddy.kill()
            caddy.wait()
