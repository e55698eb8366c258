"""Issue 11, finding 8: /run/sandboxer (the agent's socket dir) is small and bounded.

It used to be a host directory under the state dir, bound read-write into the sandbox: a
sandbox with disk "20M" wrote 200 MB there, outside its limit and its stats. It is now a
tmpfs of 64 KiB and 16 inodes of its own, mounted on the host before the bind and removed
with the container; its use shows in stats.
"""
import os
import subprocess
import time

from conftest import SLOW


def mounted_at(path):
    with open("/proc/self/mountinfo") as f:
        return [l for l in f if l.split()[4] == path]


def test_the_socket_dir_holds_no_more_than_a_few_sockets(sbx_daemon, sbx):
    sid = sbx.create("busybox")["id"]
    host_dir = os.path.join(sbx_daemon.state_dir, "sandboxes", sid, "sock")
    # 4 MiB into /run/sandboxer: refused once the tmpfs is full (ENOSPC), not on the host disk
    r = sbx.sh(sid, "dd if=/dev/zero of=/run/sandboxer/fill bs=4k count=1024 2>&1; "
                    "echo rc=$?; wc -c < /run/sandboxer/fill")
    out = r["stdout"]
    assert "rc=0" not in out and "No space left" in out, out
    assert int(out.strip().splitlines()[-1]) <= 64 * 1024, out
    used = subprocess.run(["du", "-sk", host_dir], capture_output=True, text=True).stdout
    assert int(used.split()[0]) <= 64, used
    # few inodes: no thousand files either
    r = sbx.sh(sid, "rm -f /run/sandboxer/fill; i=0; while [ $i -lt 100 ]; do "
                    "touch /run/sandboxer/f$i 2>/dev/null || break; i=$((i+1)); done; echo $i")
    assert int(r["stdout"]) < 20, r
    # its use shows in stats (charged to the sandbox's memory, as every tmpfs of it is)
    sbx.sh(sid, "rm -f /run/sandboxer/f*; head -c 20000 /dev/zero > /run/sandboxer/x")
    st = sbx.get(f"/sandboxes/{sid}/stats").json()
    assert 16 * 1024 <= st["disk"]["socket_dir_bytes"] <= 64 * 1024, st["disk"]
    # on the host it is a tmpfs of its own, with no host path seen from inside
    assert mounted_at(host_dir) and " - tmpfs " in mounted_at(host_dir)[0]
    info = sbx.sh(sid, "grep ' /run/sandboxer ' /proc/self/mountinfo")["stdout"]
    assert info and sbx_daemon.state_dir not in info and " - tmpfs " in info, info
    # the agent keeps working, in the sandbox, a fork of it, and after hibernate and wake
    assert sbx.sh(sid, "echo ok")["stdout"] == "ok\n"
    r = sbx.post(f"/sandboxes/{sid}/fork", json={}, timeout=120)
    assert r.status_code == 200, r.text
    child = r.json()["id"]
    sbx.created.append(child)
    assert sbx.sh(child, "echo child")["stdout"] == "child\n"
    assert mounted_at(os.path.join(sbx_daemon.state_dir, "sandboxes", child, "sock"))
    assert sbx.post(f"/sandboxes/{sid}/hibernate", timeout=120).status_code == 200
    assert not mounted_at(host_dir), "a hibernated sandbox holds no socket dir"
    assert sbx.post(f"/sandboxes/{sid}/wake", timeout=120).status_code == 200
    names = sbx.sh(sid, "ls /run/sandboxer")["stdout"].split()
    assert "agent.sock" in names and "x" not in names, names  # a fresh dir, the agent's own
    # deleting it removes the mount with the rest
    assert sbx.delete(f"/sandboxes/{sid}").status_code == 200
    assert not mounted_at(host_dir) and not os.path.exists(host_dir)


def test_an_exited_sandbox_releases_its_socket_dir(sbx_daemon, sbx):
    sid = sbx.create("busybox", args=["sh", "-c", "sleep 0.5"])["id"]
    host_dir = os.path.join(sbx_daemon.state_dir, "sandboxes", sid, "sock")
    deadline = time.monotonic() + 30 * SLOW
    while sbx.get(f"/sandboxes/{sid}").json()["status"] != "exited":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    while mounted_at(host_dir):  # released right after the exit is recorded
        assert time.monotonic() < deadline, "the socket dir outlived the container"
        time.sleep(0.1)
