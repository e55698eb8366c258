"""The API skeleton: auth, tenancy of tokens, errors, limits, concurrency, restarts."""
import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import time

import httpx

from conftest import BIN, TOKEN_RE, Client


def assert_error(r, status, code=None):
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert isinstance(body["detail"], str) and body["detail"]
    assert isinstance(body["code"], str) and body["code"]
    if code:
        assert body["code"] == code, body
    return body


def test_health_and_ready_need_no_token(daemon):
    r = httpx.get(daemon.url + "/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    r = httpx.get(daemon.url + "/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ready"


def test_missing_token_is_401_with_challenge(daemon):
    r = httpx.get(daemon.url + "/auth/me")
    assert_error(r, 401)
    assert r.headers["www-authenticate"].lower().startswith("bearer")


def test_wrong_token_is_401(daemon):
    for token in ["sbx_" + "0" * 64, "nonsense", "sbx_" + "a" * 63, "x" * 5000]:
        r = httpx.get(daemon.url + "/auth/me", headers={"Authorization": f"Bearer {token}"})
        assert_error(r, 401)
    r = httpx.get(daemon.url + "/auth/me",
                  headers={"Authorization": "Basic " + daemon.admin_token})
    assert_error(r, 401)


def test_admin_token_identifies_admin(admin):
    me = admin.get("/auth/me").json()
    assert me["name"] == "admin" and me["admin"] is True
    assert me["token"]["id"].startswith("tok_")


def test_created_token_works_and_is_random(daemon, admin):
    r = admin.post("/auth/tokens", json={"name": "ci"})
    assert r.status_code == 201, r.text
    tok = r.json()
    assert TOKEN_RE.fullmatch(tok["token"])
    assert tok["user"] == "admin" and tok["name"] == "ci"
    c = Client(daemon.url, tok["token"])
    assert c.get("/auth/me").json()["token"]["id"] == tok["id"]
    second = admin.post("/auth/tokens", json={}).json()["token"]
    assert second != tok["token"]
    c.close()


def test_token_secret_is_not_stored_in_plain_text(daemon, admin):
    secret = admin.post("/auth/tokens", json={"name": "x"}).json()["token"]
    with open(os.path.join(daemon.state_dir, "sandboxer.db"), "rb") as f:
        data = f.read()
    wal = os.path.join(daemon.state_dir, "sandboxer.db-wal")
    if os.path.exists(wal):
        with open(wal, "rb") as f:
            data += f.read()
    assert secret.encode() not in data
    assert daemon.admin_token.encode() not in data


def test_users_see_only_their_own_tokens(make_user):
    alice = make_user("alice")
    bob = make_user("bob")
    a2 = alice.post("/auth/tokens", json={"name": "second"}).json()
    alice_tokens = alice.get("/auth/tokens").json()["tokens"]
    bob_tokens = bob.get("/auth/tokens").json()["tokens"]
    assert {t["user"] for t in alice_tokens} == {"alice"} and len(alice_tokens) == 2
    assert {t["user"] for t in bob_tokens} == {"bob"} and len(bob_tokens) == 1
    assert all("token" not in t and "hash" not in t for t in alice_tokens)
    # bob cannot see or delete alice's token: the same 404 as an unknown id
    r = bob.delete(f"/auth/tokens/{a2['id']}")
    assert_error(r, 404)
    unknown = bob.delete("/auth/tokens/tok_0000000000000000")
    assert unknown.status_code == 404 and unknown.json()["code"] == r.json()["code"]
    assert_error(bob.get("/auth/tokens", params={"all": "true"}), 403)
    assert_error(bob.get("/auth/tokens", params={"user": "alice"}), 403)


def test_user_cannot_mint_for_others_or_escalate(make_user):
    alice = make_user("alice")
    assert_error(alice.post("/auth/tokens", json={"user": "bob"}), 403)
    assert_error(alice.post("/auth/tokens", json={"admin": True}), 403)
    assert alice.get("/auth/me").json()["admin"] is False
    r = alice.post("/auth/tokens", json={"user": "alice", "name": "self"})
    assert r.status_code == 201 and r.json()["user"] == "alice"


def test_admin_lists_all_and_revokes(daemon, admin, make_user):
    alice = make_user("alice")
    all_tokens = admin.get("/auth/tokens", params={"all": "true"}).json()["tokens"]
    assert {"admin", "alice"} <= {t["user"] for t in all_tokens}
    mine = alice.get("/auth/me").json()["token"]["id"]
    assert admin.delete(f"/auth/tokens/{mine}").json() == {"id": mine, "deleted": True}
    assert_error(alice.get("/auth/me"), 401)


def test_revoked_token_stops_working(daemon, admin):
    tok = admin.post("/auth/tokens", json={"name": "temp"}).json()
    c = Client(daemon.url, tok["token"])
    assert c.get("/auth/me").status_code == 200
    assert c.delete(f"/auth/tokens/{tok['id']}").status_code == 200
    assert_error(c.get("/auth/me"), 401)
    c.close()


def test_malformed_json_is_400(admin):
    for body in [b"{", b"[]", b"nul", b'{"name": 1}', b'{"bogus": true}',
                 b'{"name":"a","name":"b"}', b'{"user": "UPPER CASE"}', b"\xff\xfe"]:
        r = admin.post("/auth/tokens", content=body,
                       headers={"Content-Type": "application/json"})
        assert_error(r, 400)
    # nothing was created by the bad requests
    assert len(admin.get("/auth/tokens").json()["tokens"]) == 1


def test_body_over_limit_is_413(admin):
    big = b'{"name":"' + b"x" * (17 << 20) + b'"}'
    r = admin.post("/auth/tokens", content=big)
    assert_error(r, 413, "body_too_large")
    # chunked (no Content-Length): refused when the body runs past the limit
    def chunks():
        for _ in range(17):
            yield b"x" * (1 << 20)
    r = admin.post("/auth/tokens", content=chunks())
    assert_error(r, 413, "body_too_large")
    assert admin.get("/healthz").status_code == 200


def test_configured_body_limit(tmp_path):
    from conftest import Daemon
    d = Daemon(str(tmp_path), ["--body-limit", "1K"])
    try:
        d.start()
        c = Client(d.url, d.admin_token)
        assert_error(c.post("/auth/tokens", content=b"{" + b" " * 2000 + b"}"), 413)
        assert c.post("/auth/tokens", content=b"{" + b" " * 500 + b"}").status_code == 201
        c.close()
    finally:
        d.kill()


def test_unknown_route_is_404_json_and_wrong_method_405(daemon, admin):
    assert_error(httpx.get(daemon.url + "/no/such/route"), 404, "route_not_found")
    assert_error(admin.get("/no/such/route"), 404, "route_not_found")
    r = admin.put("/auth/me")
    assert_error(r, 405)
    assert "GET" in r.headers["allow"]


def test_hostile_paths_and_headers(daemon, admin):
    assert_error(admin.get("/" + "a" * 9000), 400)
    # a header block far over the limit is refused, and the daemon keeps serving
    r = httpx.get(daemon.url + "/healthz", headers={"X-Big": "y" * 100000})
    assert 400 <= r.status_code < 500
    assert admin.get("/healthz").status_code == 200


def test_request_id_is_echoed_and_logged(daemon, admin):
    r = admin.get("/auth/me")
    rid = r.headers["x-request-id"]
    assert rid and len(rid) >= 8
    r = admin.get("/auth/me", headers={"X-Request-Id": "trace-123"})
    assert r.headers["x-request-id"] == "trace-123"
    time.sleep(0.2)
    assert "req=trace-123" in daemon.log()


def test_200_concurrent_requests_all_answered(daemon, admin):
    def one(i):
        with httpx.Client(base_url=daemon.url, timeout=30,
                          headers={"Authorization": f"Bearer {daemon.admin_token}"}) as c:
            return c.get("/auth/me").status_code
    with concurrent.futures.ThreadPoolExecutor(max_workers=200) as pool:
        codes = list(pool.map(one, range(200)))
    assert codes == [200] * 200


def test_restart_keeps_users_and_tokens_and_prints_no_token(daemon, admin, make_user):
    alice = make_user("alice")
    alice_token = alice.token
    assert daemon.stop() == 0
    daemon.start()
    assert not TOKEN_RE.search(daemon.stdout()), "a later start must not print a token"
    c = Client(daemon.url, alice_token)
    assert c.get("/auth/me").json()["name"] == "alice"
    c.close()
    a = Client(daemon.url, daemon.admin_token)
    assert a.get("/auth/me").json()["admin"] is True
    a.close()


def test_sigterm_exits_zero_and_removes_socket(daemon):
    assert os.path.exists(daemon.socket)
    assert daemon.stop(signal.SIGTERM) == 0
    assert not os.path.exists(daemon.socket)
    assert "daemon.stopped" in daemon.log()


def test_sigterm_finishes_inflight_request(daemon, admin):
    """A request whose body is still arriving when SIGTERM lands is answered, not cut."""
    s = socket.create_connection(("127.0.0.1", daemon.port))
    body = b'{"name": "late"}'
    s.sendall(b"POST /auth/tokens HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
              + daemon.admin_token.encode() + b"\r\nContent-Type: application/json\r\n"
              + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:5])
    time.sleep(0.3)
    daemon.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    s.sendall(body[5:])
    s.settimeout(10)
    reply = b""
    while b"\r\n\r\n" not in reply:
        chunk = s.recv(4096)
        if not chunk:
            break
        reply += chunk
    s.close()
    assert reply.startswith(b"HTTP/1.1 201"), reply[:200]
    assert daemon.proc.wait(timeout=20) == 0


def test_second_daemon_on_same_state_dir_refuses(daemon, tmp_path):
    p = subprocess.run([BIN, "serve", "--listen", "127.0.0.1:0", "--socket",
                        str(tmp_path / "other.sock"), "--state-dir", daemon.state_dir],
                       capture_output=True, timeout=20)
    assert p.returncode != 0
    assert b"state dir" in p.stderr


def test_unix_socket_serves_the_api(daemon):
    transport = httpx.HTTPTransport(uds=daemon.socket)
    with httpx.Client(transport=transport, base_url="http://sandboxer") as c:
        r = c.get("/auth/me", headers={"Authorization": f"Bearer {daemon.admin_token}"})
        assert r.status_code == 200 and r.json()["name"] == "admin"


def test_json_log_format(tmp_path):
    from conftest import Daemon
    d = Daemon(str(tmp_path), ["--log-format", "json"])
    try:
        d.start()
        httpx.get(d.url + "/healthz")
        time.sleep(0.2)
        lines = [l for l in d.log().splitlines() if l.strip()]
        parsed = [json.loads(l) for l in lines]
        assert any(p.get("event") == "http.request" and p.get("path") == "/healthz"
                   for p in parsed)
    finally:
        d.kill()


def test_openapi_document_lists_the_routes(daemon):
    doc = httpx.get(daemon.url + "/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    for path in ["/healthz", "/readyz", "/auth/tokens", "/auth/tokens/{id}", "/auth/me"]:
        assert path in doc["paths"], path


def test_expect_continue_gets_413_before_the_body(daemon):
    s = socket.create_connection(("127.0.0.1", daemon.port))
    s.settimeout(10)
    s.sendall(b"POST /auth/tokens HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
              + daemon.admin_token.encode() + b"\r\nContent-Length: 10000000000\r\n"
              + b"Expect: 100-continue\r\n\r\n")
    reply = s.recv(4096)
    s.close()
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b'"body_too_large"' in reply


def cgroup2_super_options():
    path = "/sys/fs/cgroup" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") \
        else "/sys/fs/cgroup/unified"
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path:
                after = fields[fields.index("-") + 1:]
                if after[0] == "cgroup2":
                    return after[2].split(",")
    return None


def test_daemon_turns_on_cgroup_favordynmods(daemon):
    """A started daemon leaves the host's cgroup2 hierarchy with favordynmods (this kernel has
    it), keeping the options it had."""
    opts = cgroup2_super_options()
    assert opts is not None, "no cgroup2 hierarchy on this host"
    assert "favordynmods" in opts and "rw" in opts, opts


def test_bad_cgroup_favordynmods_value_refuses_to_start(tmp_path):
    p = subprocess.run([BIN, "serve", "--listen", "127.0.0.1:0", "--socket",
                        str(tmp_path / "s.sock"), "--state-dir", str(tmp_path / "state"),
                        "--cgroup-favordynmods", "maybe"], capture_output=True, timeout=20)
    assert p.returncode != 0 and b"--cgroup-favordynmods: on or off" in p.stderr, p.stderr
