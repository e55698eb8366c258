"""Fork with memory (CRIU), coalesce, tree, pause, hibernate/wake, snapshots, crash safety.

The python test image runs a small server as the sandbox's main process: it holds a
variable and DATA_MB of data in memory and answers one-line commands on 127.0.0.1:9000
inside the sandbox. Checks talk to it from inside each sandbox through exec."""
import os
import subprocess
import time

import httpx
import pytest

from conftest import Daemon, Sandboxes, wait_for, SLOW

SERVER = r"""
import hashlib, os, socket, threading, time
data = bytearray(int(os.environ.get("DATA_MB", "50")) * 1024 * 1024)
for i in range(0, len(data), 4096):
    data[i] = (i // 4096) % 251
x = 0
ticks = 0
def tick():
    global ticks
    while True:
        ticks += 1
        time.sleep(0.01)
threading.Thread(target=tick, daemon=True).start()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 9000))
s.listen(16)
while True:
    c, _ = s.accept()
    cmd = c.recv(100).decode().split()
    if cmd[0] == "set":
        x = int(cmd[1])
    elif cmd[0] == "get":
        pass
    reply = {"x": x, "ticks": ticks, "pid": os.getpid(),
             "digest": hashlib.sha256(bytes(data[::4096])).hexdigest()[:16], "size": len(data)}
    c.sendall(repr(reply).encode())
    c.close()
"""

CLIENT = ("python3 -c 'import socket,sys; s=socket.create_connection((\"127.0.0.1\",9000)); "
          "s.sendall(sys.argv[1].encode()); print(s.recv(4096).decode())' ")


def ask(c, sid, cmd="get"):
    r = c.sh(sid, CLIENT + f"'{cmd}'")
    assert r["exit_code"] == 0, r
    import ast
    return ast.literal_eval(r["stdout"].strip())


def server_sandbox(c, data_mb=50, **extra):
    s = c.create("python", args=["python3", "-c", SERVER], env={"DATA_MB": str(data_mb)},
                 **extra)
    deadline = time.monotonic() + 30 * SLOW
    while True:
        r = c.sh(s["id"], CLIENT + "get")
        if r["exit_code"] == 0:
            return s
        assert time.monotonic() < deadline, r
        time.sleep(0.1)


def fork(c, sid, expect=200, **body):
    r = c.post(f"/sandboxes/{sid}/fork", json=body, timeout=120)
    assert r.status_code == expect, r.text
    if r.status_code == 200:
        c.created.append(r.json()["id"])
    return r.json()


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_fork_keeps_process_memory_and_diverges(sbx):
    parent = server_sandbox(sbx)["id"]
    before = ask(sbx, parent, "set 41")
    child = fork(sbx, parent, label="branch", hostname="branch-host")
    assert child["memory_preserved"] is True and child["parent_id"] == parent
    assert child["label"] == "branch" and child["hostname"] == "branch-host"
    c_state = ask(sbx, child["id"])
    p_state = ask(sbx, parent)
    # the same process, the same 50 MB and the same variable, in both
    assert c_state["x"] == p_state["x"] == 41
    assert c_state["digest"] == p_state["digest"] == before["digest"]
    assert c_state["size"] == 50 << 20 and c_state["pid"] == before["pid"]
    # they diverge independently from here on
    ask(sbx, parent, "set 100")
    ask(sbx, child["id"], "set 200")
    assert ask(sbx, parent)["x"] == 100 and ask(sbx, child["id"])["x"] == 200
    assert sbx.sh(child["id"], "hostname")["stdout"] == "branch-host\n"
    assert sbx.get(f"/sandboxes/{parent}").json()["child_ids"] == [child["id"]]


def test_fork_files_are_separate(sbx):
    parent = sbx.create("busybox")["id"]
    sbx.sh(parent, "echo before > /tmp/shared")
    child = fork(sbx, parent)["id"]
    assert sbx.sh(child, "cat /tmp/shared")["stdout"] == "before\n"
    sbx.sh(child, "echo child > /tmp/only-child; echo changed > /tmp/shared")
    sbx.sh(parent, "echo parent > /tmp/only-parent")
    assert sbx.sh(parent, "cat /tmp/only-child 2>&1; cat /tmp/shared")["stdout"].endswith(
        "before\n")
    assert "No such file" in sbx.sh(parent, "cat /tmp/only-child 2>&1")["stdout"]
    assert "No such file" in sbx.sh(child, "cat /tmp/only-parent 2>&1")["stdout"]


def test_fork_depth_three_and_fan_out_five(sbx):
    root = server_sandbox(sbx, data_mb=4)["id"]
    ask(sbx, root, "set 1")
    chain = [root]
    for depth in range(3):
        kid = fork(sbx, chain[-1])["id"]
        assert ask(sbx, kid)["x"] == depth + 1
        ask(sbx, kid, f"set {depth + 2}")
        chain.append(kid)
    fan = [fork(sbx, root, label=f"fan{i}")["id"] for i in range(5)]
    for i, kid in enumerate(fan):
        assert ask(sbx, kid)["x"] == 1
        ask(sbx, kid, f"set {10 + i}")
    assert [ask(sbx, k)["x"] for k in fan] == [10, 11, 12, 13, 14]
    tree = sbx.get(f"/sandboxes/{chain[-1]}/tree").json()
    assert tree["tree_json"]["id"] == root
    assert len(tree["tree_json"]["children"]) == 6
    assert chain[3][:12] in tree["tree"]


def test_coalesce_deletes_exactly_the_rest_of_the_subtree(sbx):
    a = sbx.create("busybox", label="a")["id"]
    b = fork(sbx, a, label="b")["id"]
    c = fork(sbx, a, label="c")["id"]
    d = fork(sbx, b, label="d")["id"]
    e = fork(sbx, b, label="e")["id"]
    f = fork(sbx, d, label="f")["id"]
    other = sbx.create("busybox", label="other")["id"]
    r = sbx.post(f"/sandboxes/{b}/coalesce/{c}")
    assert r.status_code == 400, r.text  # c does not descend from b
    r = sbx.post(f"/sandboxes/{a}/coalesce/{d}")
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["id"] == d and out["parent_id"] is None and out["message"]
    assert sorted(out["terminated_sandboxes"]) == sorted([a, b, c, e, f])
    for sid in (a, b, c, e, f):
        s = sbx.get(f"/sandboxes/{sid}").json()
        assert s["status"] == "terminated" and s["delete_reason"] == "coalesced"
    assert sbx.sh(d, "echo alive")["stdout"] == "alive\n"
    assert sbx.sh(other, "echo untouched")["stdout"] == "untouched\n"
    assert sbx.get(f"/sandboxes/{d}/tree").json()["tree_json"]["id"] == d


def test_tree_shows_deleted_nodes_as_dead(sbx):
    a = sbx.create("busybox", label="root")["id"]
    b = fork(sbx, a, label="dead")["id"]
    sbx.delete(f"/sandboxes/{b}")
    t = sbx.get(f"/sandboxes/{a}/tree").json()
    assert t["tree_json"]["children"][0]["status"] == "terminated"
    assert "✗" in t["tree"] and "(dead)" in t["tree"]


def cgroup_memory(sid):
    for path in [f"/sys/fs/cgroup/memory/sandboxer/{sid}/memory.usage_in_bytes",
                 f"/sys/fs/cgroup/sandboxer/{sid}/memory.current"]:
        if os.path.exists(path):
            with open(path) as f:
                return int(f.read())
    return 0  # no cgroup at all: nothing is held


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_hibernate_frees_memory_and_wake_resumes_the_counter(sbx):
    sid = server_sandbox(sbx)["id"]
    ask(sbx, sid, "set 7")
    assert cgroup_memory(sid) > 50 << 20
    time.sleep(0.5)
    before = ask(sbx, sid)
    r = sbx.post(f"/sandboxes/{sid}/hibernate", timeout=120)
    assert r.json() == {"id": sid, "status": "hibernated"}
    assert sbx.get(f"/sandboxes/{sid}").json()["status"] == "hibernated"
    assert cgroup_memory(sid) < 4 << 20
    time.sleep(3.0)  # 300 ticks if it were running
    r = sbx.post(f"/sandboxes/{sid}/wake", timeout=120)
    assert r.json()["status"] == "running"
    after = ask(sbx, sid)
    assert after["x"] == 7 and after["digest"] == before["digest"]
    # the counter went on from where it was: not from zero, not counting the sleep
    assert before["ticks"] <= after["ticks"] < before["ticks"] + 150, (before, after)


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_exec_wakes_a_hibernated_sandbox(sbx):
    sid = sbx.create("busybox")["id"]
    sbx.sh(sid, "echo kept > /tmp/f")
    sbx.post(f"/sandboxes/{sid}/hibernate", timeout=120)
    r = sbx.sh(sid, "cat /tmp/f")
    assert r["stdout"] == "kept\n"
    assert sbx.get(f"/sandboxes/{sid}").json()["status"] == "running"


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_pause_blocks_exec_and_a_paused_sandbox_forks(sbx):
    sid = sbx.create("busybox")["id"]
    assert sbx.put(f"/sandboxes/{sid}/pause").json() == {"id": sid, "status": "paused"}
    r = sbx.post(f"/sandboxes/{sid}/execute", json={"code": "echo hi"})
    assert r.status_code == 409 and "paused" in r.json()["detail"]
    child = fork(sbx, sid)["id"]
    assert sbx.sh(child, "echo child runs")["stdout"] == "child runs\n"
    assert sbx.get(f"/sandboxes/{sid}").json()["status"] == "paused"
    assert sbx.delete(f"/sandboxes/{sid}/pause").json()["status"] == "running"
    assert sbx.sh(sid, "echo back")["stdout"] == "back\n"


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_snapshot_starts_sandboxes_with_its_memory(sbx):
    src = server_sandbox(sbx, data_mb=8)["id"]
    ask(sbx, src, "set 777")
    sbx.sh(src, "echo from-snapshot > /tmp/marker")
    r = sbx.post(f"/sandboxes/{src}/snapshots", json={"name": "warm"}, timeout=120)
    assert r.status_code == 201, r.text
    assert r.json()["memory_preserved"] is True
    assert "warm" in [s["name"] for s in sbx.get("/snapshots").json()["snapshots"]]
    assert sbx.post(f"/sandboxes/{src}/snapshots", json={"name": "warm"}).status_code == 409
    ids = []
    for i in range(3):
        r = sbx.post("/sandboxes", json={"snapshot": "warm", "label": f"w{i}"}, timeout=120)
        assert r.status_code == 200, r.text
        sbx.created.append(r.json()["id"])
        ids.append(r.json()["id"])
    for sid in ids:
        assert ask(sbx, sid)["x"] == 777
        assert sbx.sh(sid, "cat /tmp/marker")["stdout"] == "from-snapshot\n"
    ask(sbx, ids[0], "set 1")
    assert ask(sbx, ids[1])["x"] == 777
    assert sbx.delete("/snapshots/warm").status_code == 200
    assert sbx.post("/sandboxes", json={"snapshot": "warm"}).status_code == 404


def test_other_users_cannot_fork_or_coalesce(sbx, sbx_user):
    sid = sbx.create("busybox")["id"]
    bob = sbx_user("bob")
    assert bob.post(f"/sandboxes/{sid}/fork", json={}).status_code == 404
    assert bob.post(f"/sandboxes/{sid}/hibernate").status_code == 404
    assert bob.get(f"/sandboxes/{sid}/tree").status_code == 404
    assert bob.post(f"/sandboxes/{sid}/snapshots", json={"name": "x"}).status_code == 404
    mine = bob.create("busybox")["id"]
    assert bob.post(f"/sandboxes/{mine}/coalesce/{sid}").status_code == 404


def test_fork_without_criu_keeps_files_and_says_so(registry_url, tmp_path):
    path = ":".join(p for p in os.environ.get("PATH", "/usr/bin:/bin").split(":")
                    if p not in ("/usr/local/sbin", "/usr/local/bin"))
    d = Daemon(str(tmp_path), ["--registry-mirror", registry_url], env={"PATH": path})
    try:
        d.start()
        c = Sandboxes(d.url, d.admin_token)
        try:
            sid = c.create("busybox")["id"]
            c.sh(sid, "echo file > /tmp/f")
            child = fork(c, sid)
            assert child["memory_preserved"] is False
            assert c.sh(child["id"], "cat /tmp/f")["stdout"] == "file\n"
        finally:
            c.cleanup()
    finally:
        d.kill()


# ---- crash safety: the daemon is killed at a point, then restarted ----

def runc_ids(d):
    out = subprocess.run(["runc", "--root", os.path.join(d.state_dir, "runc"), "list", "-q"],
                         capture_output=True, text=True).stdout
    return set(out.split())


def ckpt_tmp(d):
    """Where d's forks checkpoint their parents (a dir of its own, named by its state dir)."""
    import hashlib
    return os.path.join("/dev/shm/sandboxer-checkpoints",
                        hashlib.sha256(d.state_dir.encode()).hexdigest()[:16])


def state_mounts(d):
    netns_dir = os.path.join(d.state_dir, "netns")
    with open("/proc/mounts") as f:
        return [l.split()[1] for l in f
                if d.state_dir in l.split()[1] and l.split()[1] != netns_dir]


@pytest.mark.parametrize("point,op", [
    ("fork.after_checkpoint", "fork"),
    ("fork.before_restore", "fork"),
    ("hibernate.after_checkpoint", "hibernate"),
    ("coalesce.after_mark", "coalesce"),
    ("coalesce.after_first_delete", "coalesce"),
])
def test_crash_mid_operation_leaves_nothing_half_made(registry_url, tmp_path, point, op):
    d = Daemon(str(tmp_path), ["--registry-mirror", registry_url])
    try:
        d.start()
        c = Sandboxes(d.url, d.admin_token)
        parent = server_sandbox(c, data_mb=4)["id"]
        ask(c, parent, "set 5")
        kids = [fork(c, parent)["id"] for _ in range(2)] if op == "coalesce" else []
        checkpoints = set(os.listdir(ckpt_tmp(d))) if os.path.isdir(ckpt_tmp(d)) else set()
        d.stop()
        d.env = {"SANDBOXER_FAULT": point}
        d.start()
        with pytest.raises(httpx.HTTPError):
            if op == "fork":
                c.post(f"/sandboxes/{parent}/fork", json={}, timeout=60)
            elif op == "hibernate":
                c.post(f"/sandboxes/{parent}/hibernate", timeout=60)
            else:
                c.post(f"/sandboxes/{parent}/coalesce/{kids[0]}", timeout=60)
        assert d.proc.wait(timeout=20) != 0  # it died at the fault point
        d.env = None
        d.start()
        listed = {s["id"]: s for s in c.get("/sandboxes").json()["sandboxes"]}
        live = {i for i, s in listed.items() if s["status"] != "terminated"}
        # every container and mount belongs to a listed live sandbox, nothing else
        assert runc_ids(d) <= live, (runc_ids(d), live)
        for m in state_mounts(d):
            assert any(i in m for i in live), m
        if op == "fork":
            assert set(listed) == {parent}, "the half-made child is gone"
            left = set(os.listdir(ckpt_tmp(d))) if os.path.isdir(ckpt_tmp(d)) else set()
            assert left <= checkpoints, "so is its checkpoint in memory"
        if op == "coalesce":
            assert listed[parent]["status"] == "terminated"
            assert listed[kids[1]]["status"] == "terminated"
            assert listed[kids[0]]["status"] == "running"
            assert listed[kids[0]]["parent_id"] is None
            parent = kids[0]
        if op == "hibernate":
            assert listed[parent]["status"] == "hibernated"
        # the parent (or the kept one) is intact, memory included
        assert ask(c, parent)["x"] == 5
        c.cleanup()
    finally:
        d.kill()


PINGPONG = r"""
import os, socket, threading, time
def echo(conn):
    try:
        while True:
            d = conn.recv(1)
            if not d:
                break
            conn.sendall(d)
    except OSError:
        pass
def serve():
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 9100))
    srv.listen()
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=echo, args=(conn,), daemon=True).start()
threading.Thread(target=serve, daemon=True).start()
time.sleep(0.2)
n = reconnects = 0
while True:
    try:
        cli = socket.create_connection(("127.0.0.1", 9100))
        while True:
            cli.sendall(b"x")
            if not cli.recv(1):
                raise OSError("closed")
            n += 1
            with open("/tmp/n.tmp", "w") as f:  # replaced whole: a reader never sees it empty
                f.write(f"{n} {reconnects}")
            os.replace("/tmp/n.tmp", "/tmp/n")
            time.sleep(0.02)
    except OSError:
        reconnects += 1
        time.sleep(0.05)
"""


def counters(c, sid):
    n, reconnects = c.sh(sid, "cat /tmp/n")["stdout"].split()
    return int(n), int(reconnects)


def test_fork_with_an_established_connection(sbx_rt, runtime):
    """Open connections do not block a fork: the parent's stays up, and the child's copy of a
    connection between two of its own processes (both ends on loopback) goes on too, without
    a reconnect (CRIU patch 0006; a connection to a peer outside comes back closed). gVisor
    cannot checkpoint a connected TCP endpoint: there the fork keeps the files only and says
    why, and the parent is left as it was."""
    sbx = sbx_rt
    sid = sbx.create("python", args=["python3", "-c", PINGPONG])["id"]
    deadline = time.monotonic() + 20 * SLOW
    while sbx.sh(sid, "cat /tmp/n")["exit_code"] != 0:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    child = fork(sbx, sid)
    if runtime == "runsc":
        assert child["memory_preserved"] is False and "TCP" in child["reason"], child
        p1 = counters(sbx, sid)
        time.sleep(1.0)
        p2 = counters(sbx, sid)
        assert p2[0] > p1[0] and p2[1] == 0, (p1, p2)  # the parent's connection never broke
        return
    assert child["memory_preserved"] is True and child["status"] == "running"
    p1, c1 = counters(sbx, sid), counters(sbx, child["id"])
    time.sleep(1.0)
    p2, c2 = counters(sbx, sid), counters(sbx, child["id"])
    assert p2[0] > p1[0] and p2[1] == 0, (p1, p2)  # the parent's connection never broke
    assert c2[0] > c1[0] and c2[1] == 0, (c1, c2)  # the child's copy goes on, unbroken


def cgroup_procs(sid):
    """PIDs in the sandbox's cgroup, in every hierarchy it has one (v1) or its v2 cgroup."""
    out = {}
    for root in ["/sys/fs/cgroup", *(f"/sys/fs/cgroup/{c}" for c in
                                     ("memory", "pids", "cpu", "freezer", "cpuset"))]:
        path = f"{root}/sandboxer/{sid}/cgroup.procs"
        if os.path.exists(path):
            with open(path) as f:
                out[root] = {int(p) for p in f.read().split()}
    return out


def test_clones_run_in_their_own_cgroups(sbx):
    """A fork's, a woken sandbox's and a snapshot start's processes are in the new sandbox's
    cgroups (its limits and stats apply to them), and inside, /proc/self/cgroup shows the
    sandbox's own cgroup namespace, not the host's paths."""
    parent = server_sandbox(sbx, data_mb=20)["id"]
    child = fork(sbx, parent)["id"]
    sbx.post(f"/sandboxes/{child}/hibernate", timeout=120)
    sbx.post(f"/sandboxes/{child}/wake", timeout=120)
    snap = sbx.post(f"/sandboxes/{parent}/snapshots", json={"name": "cg"}, timeout=120)
    assert snap.status_code == 201, snap.text
    r = sbx.post("/sandboxes", json={"snapshot": "cg"}, timeout=120)
    assert r.status_code == 200, r.text
    started = r.json()["id"]
    sbx.created.append(started)
    try:
        for sid in (parent, child, started):
            assert ask(sbx, sid)["size"] == 20 << 20
            assert cgroup_procs(sid), f"no cgroup for {sid}"

            def same_everywhere():
                # a process being started (an exec's) joins the hierarchies one at a time
                sets = list(cgroup_procs(sid).values())
                return sets if sets[0] and all(x == sets[0] for x in sets) else None
            sets = wait_for(f"the same processes in every cgroup hierarchy of {sid}",
                            same_everywhere, timeout=10)
            comms = set()
            for pid in sets[0]:
                try:
                    with open(f"/proc/{pid}/comm") as f:
                        comms.add(f.read().strip())
                except (FileNotFoundError, ProcessLookupError):  # gone, or going (ESRCH)
                    pass
            assert "python3" in comms, (sid, comms)
            # the 20 MB the server holds are charged to this sandbox
            assert cgroup_memory(sid) > 20 << 20, sid
            lines = sbx.sh(sid, "cat /proc/1/cgroup")["stdout"].split()
            assert lines and all(line.endswith(":/") for line in lines), ((parent, child, started).index(sid), lines)
    finally:
        sbx.delete("/snapshots/cg")


def test_a_damaged_snapshot_starts_from_its_files_and_says_why(sbx, sbx_daemon):
    """A snapshot whose memory cannot be restored still starts a sandbox, from its files:
    memory_preserved false, last_error and the daemon's log naming what CRIU found wrong."""
    src = sbx.create("busybox")["id"]
    sbx.sh(src, "echo from-snapshot > /tmp/marker")
    r = sbx.post(f"/sandboxes/{src}/snapshots", json={"name": "damaged"}, timeout=120)
    assert r.status_code == 201, r.text
    snap_id = r.json()["id"]
    try:
        ckpt = os.path.join(sbx_daemon.state_dir, "snapshots", snap_id, "checkpoint")
        with open(os.path.join(ckpt, "pstree.img"), "r+b") as f:
            f.truncate(3)
        r = sbx.post("/sandboxes", json={"snapshot": "damaged"}, timeout=120)
        assert r.status_code == 200, r.text
        sbx.created.append(r.json()["id"])
        assert r.json()["memory_preserved"] is False and r.json()["status"] == "running"
        assert "Img trimmed" in r.json()["last_error"]["detail"], r.json()
        assert sbx_daemon.state_dir not in r.json()["last_error"]["detail"]
        # the daemon's log says what CRIU found wrong, not only runc's "criu failed"
        log = sbx_daemon.log()
        assert "CRIU: Error (" in log and "Img trimmed" in log.split("CRIU: ")[-1], log[-2000:]
        assert sbx.sh(r.json()["id"], "cat /tmp/marker")["stdout"] == "from-snapshot\n"
        assert sbx.sh(src, "echo alive")["stdout"] == "alive\n"
    finally:
        sbx.delete("/snapshots/damaged")
