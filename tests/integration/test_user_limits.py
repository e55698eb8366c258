"""Issue 11, finding 7: per-user limits.

Before: a non-admin got cpus: 256, memory: 1T and pids: 4194304 accepted and applied, and made
25 sandboxes in 2 s. Now every sandbox must fit the host (400 for anyone), a non-admin is held
to per-user limits an admin sets (POST /auth/users/{name}/limits, or with the user's token;
the rest from --user-max-*), answered with 403 / 429 naming the limit, and shown in
GET /auth/me. Forks, snapshot starts and wakes count too.
"""
import os
import tempfile
import time

import pytest

from conftest import Daemon, Sandboxes


def err(r, status, code):
    assert r.status_code == status, r.text
    assert r.json()["code"] == code, r.text
    return r.json()["detail"]



def test_a_sandbox_bigger_than_the_host_is_refused_for_everyone(sbx, sbx_user):
    alice = sbx_user("alice")
    for who in (alice, sbx):  # a non-admin, and the admin too
        before = len(who.get("/sandboxes").json()["sandboxes"])
        d = err(who.post("/sandboxes", json={"image": "busybox", "cpus": 256}), 400,
                "invalid_field")
        assert "cpus" in d and "host" in d
        d = err(who.post("/sandboxes", json={"image": "busybox", "memory": "1T"}), 400,
                "invalid_field")
        assert "memory" in d and "host" in d
        assert len(who.get("/sandboxes").json()["sandboxes"]) == before


def test_default_limits_hold_a_non_admin_and_show_in_me(sbx, sbx_user):
    alice = sbx_user("alice")
    me = alice.get("/auth/me").json()
    assert me["limits"] == {"max_running": 16, "max_sandboxes": 64, "max_cpus": 4.0,
                            "max_memory": 8 << 30, "max_pids": 4096, "max_disk": None,
                            "max_creates_per_minute": 60}, me
    assert me["usage"] == {"running": 0, "sandboxes": 0, "created_last_minute": 0}
    d = err(alice.post("/sandboxes", json={"image": "busybox", "pids": 4194304}), 403,
            "limit_exceeded")
    assert "max_pids" in d
    # admins are held to none
    admin = sbx.get("/auth/me").json()
    assert set(admin["limits"].values()) == {None}
    s = sbx.create("busybox", pids=100000)
    assert s["resources"]["pids"] == 100000


def test_admin_sets_limits_and_they_hold(sbx, sbx_user):
    alice = sbx_user("alice")
    r = sbx.post("/auth/users/alice/limits",
                 json={"max_running": 2, "max_sandboxes": 3, "max_memory": "128M",
                       "max_cpus": 0.5})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["user"] == "alice" and body["limits"]["max_running"] == 2
    assert body["set"]["max_memory"] == 128 << 20 and body["set"]["max_pids"] is None
    assert body["limits"]["max_pids"] == 4096  # unset: the daemon's default
    assert alice.get("/auth/me").json()["limits"]["max_cpus"] == 0.5
    # size of one sandbox: 403 naming the limit; nothing made
    assert "max_memory" in err(alice.post("/sandboxes", json={"image": "busybox",
                                                              "memory": "256M", "cpus": 0.5}),
                               403, "limit_exceeded")
    assert "max_cpus" in err(alice.post("/sandboxes", json={"image": "busybox", "cpus": 1}),
                             403, "limit_exceeded")
    assert alice.get("/sandboxes").json()["sandboxes"] == []
    a = alice.create("busybox", memory="64M", cpus=0.5)["id"]
    b = alice.create("busybox", memory="64M", cpus=0.5)["id"]
    # running at once: 429 naming max_running, for a create, a fork and a snapshot start
    assert "max_running" in err(alice.post("/sandboxes", json={"image": "busybox",
                                                               "memory": "64M", "cpus": 0.5}),
                                429, "quota_exceeded")
    assert "max_running" in err(alice.post(f"/sandboxes/{a}/fork", json={}, timeout=60), 429,
                                "quota_exceeded")
    assert alice.post(f"/sandboxes/{a}/snapshots", json={"name": "warm"},
                      timeout=60).status_code == 201
    assert "max_running" in err(alice.post("/sandboxes", json={"snapshot": "warm"}, timeout=60),
                                429, "quota_exceeded")
    assert alice.get("/auth/me").json()["usage"]["running"] == 2
    # a hibernated one does not run: its place is free, and waking it needs one again
    assert alice.post(f"/sandboxes/{b}/hibernate", timeout=120).status_code == 200
    r = alice.post(f"/sandboxes/{a}/fork", json={}, timeout=120)
    assert r.status_code == 200, r.text
    alice.created.append(r.json()["id"])
    assert "max_running" in err(alice.post(f"/sandboxes/{b}/wake", timeout=60), 429,
                                "quota_exceeded")
    # sandboxes held at all (hibernated ones included): max_sandboxes
    assert alice.post(f"/sandboxes/{a}/hibernate", timeout=120).status_code == 200
    assert "max_sandboxes" in err(alice.post("/sandboxes", json={"image": "busybox",
                                                                 "memory": "64M",
                                                                 "cpus": 0.5}),
                                  429, "quota_exceeded")
    # deleting frees the place
    assert alice.delete(f"/sandboxes/{b}").status_code == 200
    alice.create("busybox", memory="64M", cpus=0.5)
    # null puts a limit back to the default
    r = sbx.post("/auth/users/alice/limits", json={"max_running": None})
    assert r.json()["limits"]["max_running"] == 16 and r.json()["set"]["max_running"] is None
    assert sbx.get("/auth/users/alice/limits").json()["set"]["max_memory"] == 128 << 20


def test_create_rate_and_limits_given_with_the_token(sbx_daemon, sbx):
    r = sbx.post("/auth/tokens", json={"user": "carol", "limits": {"max_creates_per_minute": 2}})
    assert r.status_code == 201, r.text
    carol = Sandboxes(sbx_daemon.url, r.json()["token"])
    try:
        t0 = time.monotonic()
        first = carol.create("busybox")["id"]
        carol.create("busybox")
        d = err(carol.post("/sandboxes", json={"image": "busybox"}), 429, "rate_limited")
        assert "max_creates_per_minute" in d
        # forks are creates too; deleting does not give the rate back
        assert carol.delete(f"/sandboxes/{first}").status_code == 200
        err(carol.post(f"/sandboxes/{carol.created[1]}/fork", json={}), 429, "rate_limited")
        assert time.monotonic() - t0 < 60
        assert carol.get("/auth/me").json()["usage"]["created_last_minute"] == 2
    finally:
        carol.cleanup()


def test_bad_limits_are_refused_and_change_nothing(sbx, sbx_user):
    alice = sbx_user("alice")
    before = sbx.get("/auth/users/alice/limits").json()
    for body in [{"max_running": -1}, {"max_running": "many"}, {"max_cpus": -2},
                 {"max_memory": "lots"}, {"max_memory": -5}, {"max_pids": 1.5},
                 {"max_pids": 3}, {"bogus": 1}, {"max_running": True}]:
        r = sbx.post("/auth/users/alice/limits", json=body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["detail"]
    r = sbx.post("/auth/users/alice/limits", content=b"[1]")
    assert r.status_code == 400
    assert sbx.get("/auth/users/alice/limits").json() == before
    # unknown user: 404, and no user is made
    err(sbx.post("/auth/users/nobody/limits", json={"max_running": 1}), 404, "user_not_found")
    err(sbx.get("/auth/users/nobody/limits"), 404, "user_not_found")
    # bad limits with a token: no token, no user
    r = sbx.post("/auth/tokens", json={"user": "dave", "limits": {"max_running": -3}})
    assert r.status_code == 400
    err(sbx.get("/auth/users/dave/limits"), 404, "user_not_found")
    # not an admin: 403, for herself too
    err(alice.post("/auth/users/alice/limits", json={"max_running": 100}), 403, "admin_only")
    err(alice.get("/auth/users/alice/limits"), 403, "admin_only")
    err(alice.post("/auth/tokens", json={"limits": {"max_running": 100}}), 403, "admin_only")
    assert sbx.get("/auth/users/alice/limits").json() == before


def test_daemon_defaults_come_from_options(registry_url):
    with tempfile.TemporaryDirectory(prefix="sbx-test-") as workdir:
        d = Daemon(workdir, ["--registry-mirror", registry_url, "--user-max-running", "1",
                             "--user-max-memory", "100M", "--user-max-creates-per-minute",
                             "none"])
        d.start()
        admin = Sandboxes(d.url, d.admin_token)
        try:
            tok = admin.post("/auth/tokens", json={"user": "erin"}).json()["token"]
            erin = Sandboxes(d.url, tok)
            lim = erin.get("/auth/me").json()["limits"]
            assert lim["max_running"] == 1 and lim["max_memory"] == 100 << 20
            assert lim["max_creates_per_minute"] is None
            erin.create("busybox", memory="64M")
            err(erin.post("/sandboxes", json={"image": "busybox", "memory": "64M"}), 429,
                "quota_exceeded")
            erin.cleanup()
        finally:
            admin.cleanup()
            d.kill()


@pytest.mark.parametrize("value", ["-1", "lots", "1.5x"])
def test_bad_default_limit_options_refuse_to_start(tmp_path, value):
    import subprocess
    from conftest import BIN
    p = subprocess.run([BIN, "serve", "--listen", "127.0.0.1:0", "--socket",
                        str(tmp_path / "s.sock"), "--state-dir", str(tmp_path / "state"),
                        "--user-max-memory", value], capture_output=True, timeout=20)
    assert p.returncode != 0 and b"--user-max-memory" in p.stderr, p.stderr
