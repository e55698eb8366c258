"""The idle reaper: sandboxes idle past their idle_timeout hibernate, and wake on use."""
import threading
import time

import pytest

from conftest import Daemon, Sandboxes


def wait_status(sbx, sid, want, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        st = sbx.get(f"/sandboxes/{sid}").json()["status"]
        if st == want or time.monotonic() > deadline:
            return st
        time.sleep(0.25)


def test_idle_sandbox_hibernates_and_wakes_on_exec(sbx):
    sid = sbx.create("busybox", idle_timeout=2)["id"]
    keep = sbx.create("busybox")["id"]  # no idle_timeout, daemon default 0: never
    sbx.sh(sid, "echo 41 > /tmp/n")
    assert wait_status(sbx, sid, "hibernated") == "hibernated"
    assert sbx.get(f"/sandboxes/{keep}").json()["status"] == "running"
    # the next request wakes it, with its files
    r = sbx.sh(sid, "echo $(( $(cat /tmp/n) + 1 ))")
    assert r["stdout"] == "42\n" and r["exit_code"] == 0
    assert sbx.get(f"/sandboxes/{sid}").json()["status"] == "running"
    # and after another idle spell it goes back to sleep
    assert wait_status(sbx, sid, "hibernated") == "hibernated"


def test_a_running_exec_keeps_a_sandbox_awake(sbx):
    sid = sbx.create("busybox", idle_timeout=1)["id"]
    done = {}

    def long_exec():
        done["r"] = sbx.sh(sid, "sleep 5; echo awake")

    t = threading.Thread(target=long_exec)
    t.start()
    time.sleep(3.5)  # past the timeout while the exec runs
    assert sbx.get(f"/sandboxes/{sid}").json()["status"] == "running"
    t.join(30)
    assert done["r"]["stdout"] == "awake\n"


@pytest.mark.parametrize("bad", [-1, "soon", 86400 * 366])
def test_idle_timeout_is_validated(sbx, bad):
    r = sbx.post("/sandboxes", json={"image": "busybox", "idle_timeout": bad})
    assert r.status_code == 400, r.text


def test_daemon_wide_idle_timeout_and_a_sandbox_that_opts_out(registry_url, tmp_path):
    d = Daemon(str(tmp_path), ["--registry-mirror", registry_url, "--idle-timeout", "2"])
    try:
        d.start()
        c = Sandboxes(d.url, d.admin_token)
        try:
            default = c.create("busybox")["id"]  # takes the daemon's 2 s
            never = c.create("busybox", idle_timeout=0)["id"]  # its own: never
            assert wait_status(c, default, "hibernated") == "hibernated"
            time.sleep(2)  # a few more rounds of the reaper
            assert c.get(f"/sandboxes/{never}").json()["status"] == "running"
        finally:
            c.cleanup()
    finally:
        d.kill()
