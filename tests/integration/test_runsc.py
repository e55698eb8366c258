"""gVisor (runsc) as a sandbox's runtime: what only it has, and where it answers differently
from runc (docs/runsc.md). The lifecycle itself
runs on both runtimes in the other suites (the sbx_rt fixture, test_lifecycle_matrix.py)."""
import glob
import os
import re
import subprocess
import tempfile
import time

import httpx
import pytest

from conftest import Daemon, Sandboxes, leftover_cgroups, runsc_pids, wait_for

# io_uring_setup(4, &params) through ctypes: "ok <fd> <link>" or "err <errno>"
IO_URING = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
params = (ctypes.c_char * 120)()
fd = libc.syscall(425, 4, params)
if fd < 0:
    print("err", ctypes.get_errno())
else:
    print("ok", fd, os.readlink(f"/proc/self/fd/{fd}"))
'''


def test_runsc_sandbox_runs_on_gvisors_kernel(sbx):
    s = sbx.create("python", runtime="runsc")
    assert s["runtime"] == "runsc"
    assert sbx.get(f"/sandboxes/{s['id']}").json()["runtime"] == "runsc"
    r = sbx.sh(s["id"], "dmesg | head -3; uname -r")
    assert "Starting gVisor" in r["stdout"], r
    # io_uring is gVisor's own (or refused), never the host kernel's
    r = sbx.post(f"/sandboxes/{s['id']}/exec",
                 json={"argv": ["python3", "-c", IO_URING]}, timeout=60).json()
    out = r["stdout"].split()
    assert out[0] == "err" or "io_uring" in out[2], r
    if out[0] == "err":
        assert int(out[1]) in (1, 38), r  # EPERM or ENOSYS


def test_runsc_agent_token_is_nowhere_the_sandbox_can_read(sbx, sbx_daemon):
    sid = sbx.create("python", runtime="runsc")["id"]
    r = sbx.sh(sid, "tr '\\0' ' ' </proc/1/cmdline; echo; tr '\\0' ' ' </proc/1/environ; "
                    "ls -a /run/sandboxer")
    assert "--auth-stdin" in r["stdout"]
    assert not re.search(r"[0-9a-f]{64}", r["stdout"] + r["stderr"]), r  # no token anywhere
    # PID 1 is not dumpable: root in the sandbox (no CAP_SYS_PTRACE) cannot read its memory
    r = sbx.post(f"/sandboxes/{sid}/exec", json={"argv": [
        "python3", "-c", "open('/proc/1/mem', 'rb')"]}, timeout=60).json()
    assert r["exit_code"] != 0 and "PermissionError" in r["stderr"], r
    # nor is it in the host's run dir once the sandbox started
    assert not os.path.exists(os.path.join(sbx_daemon.state_dir, "sandboxes", sid, "run",
                                           "agent.token"))


def test_create_runtime_is_validated(sbx):
    r = sbx.post("/sandboxes", json={"image": "busybox", "runtime": "kata"})
    assert r.status_code == 400 and r.json()["code"] == "invalid_field", r.text
    assert "runsc" in r.json()["detail"]
    s = sbx.create("busybox")  # the daemon's default
    assert s["runtime"] == "runc"


def test_runsc_missing_is_a_clear_400(registry_url, tmp_path):
    d = Daemon(str(tmp_path), ["--registry-mirror", registry_url, "--runsc", "/nonexistent/runsc"])
    try:
        d.start()
        c = Sandboxes(d.url, d.admin_token)
        r = c.post("/sandboxes", json={"image": "busybox", "runtime": "runsc"}, timeout=60)
        assert r.status_code == 400 and r.json()["code"] == "unsupported", r.text
        assert "runsc" in r.json()["detail"] and "not usable" in r.json()["detail"]
        assert c.create("busybox")["runtime"] == "runc"  # runc goes on
        c.cleanup()
    finally:
        d.kill()


@pytest.mark.parametrize("opts, says", [
    (["--runsc-platform", "xen"], b"--runsc-platform: auto, ptrace or kvm"),
    (["--runtime", "kata"], b"--runtime: runc or runsc"),
])
def test_bad_runtime_options_refuse_to_start(tmp_path, opts, says):
    from conftest import BIN
    p = subprocess.run([BIN, "serve", "--listen", "127.0.0.1:0", "--socket",
                        str(tmp_path / "s.sock"), "--state-dir", str(tmp_path / "state"),
                        "--templates-dir", "none", *opts], capture_output=True, timeout=60)
    assert p.returncode != 0 and says in p.stderr, p.stderr


def test_kvm_probe_falls_back_to_ptrace_within_its_bound(registry_url, tmp_path):
    """--runsc-platform kvm on this nested VM hangs in KVM_RUN: the probe is killed after
    3 s, cleaned up, and ptrace is used; with --runtime runsc the daemon's start waits for
    that answer and no longer."""
    d = Daemon(str(tmp_path), ["--registry-mirror", registry_url, "--runtime", "runsc",
                               "--runsc-platform", "kvm"])
    t0 = time.monotonic()
    try:
        d.start(timeout=30)
        started = time.monotonic() - t0
        log = d.log()
        m = re.search(r"event=runsc\.platform platform=(\w+) asked=kvm why=\"([^\"]*)\"", log)
        assert m, log
        if m.group(1) == "ptrace":  # kvm did not run here: it says why, within the bound
            assert "kvm" in m.group(2) and "fallback" in m.group(2), m.group(0)
            assert started < 3 + 10, started
        # the probe left nothing: no process, no state, no cgroup
        assert not any(b"runsc-probe" in open(f"/proc/{p}/cmdline", "rb").read()
                       for p in runsc_pids(d.state_dir))
        assert not os.path.exists(os.path.join(d.state_dir, "runsc-probe"))
        assert not glob.glob("/sys/fs/cgroup/*/runsc-probe*")
        c = Sandboxes(d.url, d.admin_token)
        s = c.create("busybox")  # the default runtime is runsc now
        assert s["runtime"] == "runsc"
        assert "Starting gVisor" in c.sh(s["id"], "dmesg")["stdout"]
        c.cleanup()
    finally:
        d.kill()


def test_runsc_memory_limit_bounds_the_whole_sandbox(sbx):
    """gVisor has no OOM killer of its own: the host's cgroup limit holds its kernel too, and
    a process past it ends the sandbox (exited), not the process alone (docs/runsc.md)."""
    sid = sbx.create("busybox", runtime="runsc", memory="64M")["id"]
    r = sbx.post(f"/sandboxes/{sid}/execute",
                 json={"code": "dd if=/dev/zero of=/dev/null bs=200M count=1"}, timeout=60)
    assert r.status_code < 500, r.text  # never a server fault
    wait_for("the sandbox to end",
             lambda: sbx.get(f"/sandboxes/{sid}").json()["status"] == "exited")


def test_runsc_pids_limit_counts_host_threads_and_ends_the_sandbox(sbx, sbx_daemon):
    """On runsc the pids cgroup holds gVisor's host threads (the Sentry, the gofer, a ptrace
    stub per task): an idle sandbox already has dozens, and a fork bomb past the limit ends
    the whole sandbox; the exec that ran it answers 409, not 500 (docs/runsc.md)."""
    sid = sbx.create("busybox", runtime="runsc", pids=400)["id"]
    idle = sbx.get(f"/sandboxes/{sid}/stats").json()["pids"]
    assert idle["limit"] == 400 and 10 < idle["current"] < 400, idle
    r = sbx.post(f"/sandboxes/{sid}/execute", json={"code": (
        "i=0; while [ $i -lt 800 ]; do sleep 6 >/dev/null 2>&1 & i=$((i+1)); done; echo $i")},
        timeout=60)
    assert r.status_code == 409 and r.json()["code"] == "sandbox_not_running", r.text
    wait_for("the sandbox to end",
             lambda: sbx.get(f"/sandboxes/{sid}").json()["status"] == "exited")
    assert httpx.get(sbx_daemon.url + "/healthz").status_code == 200


TCP_CLIENT = r'''
import socket, time
srv = socket.socket(); srv.bind(("127.0.0.1", 7000)); srv.listen(1)
c = socket.create_connection(("127.0.0.1", 7000)); a, _ = srv.accept()
open("/connected", "w").close()
while True:
    time.sleep(1)
'''


def test_runsc_hibernate_with_a_connection_is_refused_and_changes_nothing(sbx, sbx_daemon):
    sid = sbx.create("python", runtime="runsc", args=["python3", "-c", TCP_CLIENT])["id"]
    wait_for("the connection", lambda: sbx.sh(sid, "test -e /connected && echo y")["stdout"])
    pid = sbx.sh(sid, "pgrep -f TCP || ps -o pid,args | grep python3 | head -1")["stdout"]
    r = sbx.post(f"/sandboxes/{sid}/hibernate", timeout=120)
    assert r.status_code == 409 and r.json()["code"] == "checkpoint_failed", r.text
    assert "TCP" in r.json()["detail"]
    s = sbx.get(f"/sandboxes/{sid}").json()
    assert s["status"] == "running"
    assert sbx.sh(sid, "test -e /connected && echo same")["stdout"] == "same\n"
    # a snapshot keeps the files only, and says so
    r = sbx.post(f"/sandboxes/{sid}/snapshots", json={"name": "tcp"}, timeout=120)
    assert r.status_code == 201 and r.json()["memory_preserved"] is False, r.text
    assert "TCP" in r.json()["reason"], r.text
    listed = [x for x in sbx.get("/snapshots").json()["snapshots"] if x["name"] == "tcp"]
    assert listed and "TCP" in listed[0]["reason"], listed
    sbx.delete("/snapshots/tcp")


def test_runsc_leaves_nothing_behind(sbx, sbx_daemon):
    """Create, fork, hibernate, wake, delete: no runsc process, container, cgroup or state."""
    sid = sbx.create("busybox", runtime="runsc")["id"]
    child = sbx.post(f"/sandboxes/{sid}/fork", json={}, timeout=120).json()
    assert child["memory_preserved"] is True, child
    assert sbx.post(f"/sandboxes/{sid}/hibernate", timeout=120).status_code == 200
    assert sbx.post(f"/sandboxes/{sid}/wake", timeout=120).json()["memory_preserved"] is True
    for x in (child["id"], sid):
        assert sbx.delete(f"/sandboxes/{x}", timeout=60).status_code == 200
    root = os.path.join(sbx_daemon.state_dir, "runsc")
    listed = subprocess.run(["runsc", "--root", root, "list", "-q"], capture_output=True,
                            text=True, timeout=30).stdout.split()
    assert listed == []
    assert runsc_pids(sbx_daemon.state_dir) == []
    assert leftover_cgroups(sid) == [] and leftover_cgroups(child["id"]) == []
