"""User namespaces (issue 13 part 2): root in a runc sandbox is an unprivileged host uid.

Checked from the host, as an operator would: the uid of the sandbox's processes in /proc,
the owner of what the sandbox writes in its writable layer, and what its root cannot read.
The lifecycle (fork, hibernate, snapshot) keeps processes and mapping. These daemons run with
--userns on; the rest of the suite with the default, auto, which turns them on here."""
import os
import subprocess
import tempfile

import httpx
import pytest

from conftest import Daemon, Sandboxes, wait_for

SIZE = 65536


@pytest.fixture
def sbx_daemon(registry_url):
    """A daemon whose runc sandboxes get user namespaces (refusing to start without)."""
    with tempfile.TemporaryDirectory(prefix="sbx-test-") as workdir:
        d = Daemon(workdir, ["--registry-mirror", registry_url, "--userns", "on"])
        try:
            d.start()
            yield d
        finally:
            d.kill()


@pytest.fixture
def sbx(sbx_daemon):
    c = Sandboxes(sbx_daemon.url, sbx_daemon.admin_token)
    yield c
    c.cleanup()


# `echo > f` truncates and then writes, and a read in between sees an empty file (a loaded
# machine, a restored shell scheduled first): the counter renames a whole file into place.
COUNTER = ("sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; "
           "mv /tmp/count.new /tmp/count; sleep 0.1; done' "
           ">/dev/null 2>&1 </dev/null &")


def procs_of(sid):
    """Host pids in the sandbox's cgroup (the pids hierarchy on v1, the unified one on v2)."""
    for root in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup"):
        path = f"{root}/sandboxer/{sid}/cgroup.procs"
        if os.path.exists(path):
            with open(path) as f:
                return [int(p) for p in f.read().split()]
    raise AssertionError(f"no cgroup for sandbox {sid}")


def host_ids(pid):
    """(real uid, real gid) of a host pid, from /proc/<pid>/status; (None, None) if it is
    gone (a shell of an exec that just ended)."""
    uid = gid = None
    try:
        f = open(f"/proc/{pid}/status")
    except FileNotFoundError:
        return None, None
    with f:
        for line in f:
            if line.startswith("Uid:"):
                uid = int(line.split()[1])
            elif line.startswith("Gid:"):
                gid = int(line.split()[1])
    return uid, gid


def counter(sbx, sid):
    """The counter's value; once it has started, the file is always there and never empty."""
    r = sbx.sh(sid, "cat /tmp/count")
    assert r["exit_code"] == 0 and r["stdout"].strip(), r
    return int(r["stdout"])


def counter_started(sbx, sid):
    return sbx.sh(sid, "test -s /tmp/count")["exit_code"] == 0


def upper(daemon, sid):
    return os.path.join(daemon.state_dir, "sandboxes", sid, "layer", "upper")


def test_root_in_a_sandbox_is_an_unprivileged_host_uid(sbx, sbx_daemon):
    s = sbx.create()
    ns = s["user_namespace"]
    assert ns and ns["size"] == SIZE and ns["host_id"] >= SIZE, s
    base = ns["host_id"]
    # Inside: root, mapped to the range.
    out = sbx.sh(s["id"], "id -u; cat /proc/self/uid_map /proc/self/gid_map")["stdout"].split()
    assert out == ["0", "0", str(base), str(SIZE), "0", str(base), str(SIZE)], out
    sbx.sh(s["id"], COUNTER)
    wait_for("the counter", lambda: counter_started(sbx, s["id"]))
    # Outside: every process of the sandbox, the agent included, is the range's uid.
    pids = procs_of(s["id"])
    assert len(pids) >= 2, pids
    ids = {host_ids(pid) for pid in pids} - {(None, None)}
    assert ids == {(base, base)}, ids
    # A non-root user of the sandbox is base + its uid.
    r = sbx.post(f"/sandboxes/{s['id']}/exec", timeout=60, json={
        "argv": ["sh", "-c", "sleep 30 >/dev/null 2>&1 </dev/null & id -u"], "user": "1234"})
    assert r.status_code == 200 and r.json()["stdout"].strip() == "1234", r.text
    wait_for("uid 1234's sleep", lambda: any(
        host_ids(p)[0] == base + 1234 for p in procs_of(s["id"])))


def test_files_the_sandbox_writes_belong_to_its_range(sbx, sbx_daemon):
    s = sbx.create()
    base = s["user_namespace"]["host_id"]
    sbx.sh(s["id"], "echo made > /made-by-root && mkdir -p /data && "
                    "echo user > /data/by-user && chown 1000:1001 /data/by-user")
    top = upper(sbx_daemon, s["id"])
    st = os.stat(os.path.join(top, "made-by-root"))
    assert (st.st_uid, st.st_gid) == (base, base)
    st = os.stat(os.path.join(top, "data", "by-user"))
    assert (st.st_uid, st.st_gid) == (base + 1000, base + 1001)
    # The image's files stay the host's root's on disk (shared layers, nothing chowned) and
    # are root's inside.
    out = sbx.sh(s["id"], "stat -c '%u %g' /bin/busybox /etc/passwd")["stdout"].split()
    assert out == ["0", "0", "0", "0"], out
    # Through the files API (the agent writes as the sandbox's root).
    r = sbx.http.put(f"/sandboxes/{s['id']}/files/api-upload.txt", content=b"hello",
                     timeout=60)
    assert r.status_code in (200, 201), r.text
    st = os.stat(os.path.join(top, "api-upload.txt"))
    assert st.st_uid == base, st


def test_the_sandbox_root_cannot_read_a_host_root_file(sbx, sbx_daemon):
    """A file of the host's root that becomes visible inside (put into the sandbox's layer
    from the host, as a mistake or an escape would show it) is nobody's inside, and root
    there cannot read, change or take it."""
    s = sbx.create()
    top = upper(sbx_daemon, s["id"])
    secret = os.path.join(top, "host-secret")
    with open(secret, "w") as f:
        f.write("the host's\n")
    os.chown(secret, 0, 0)
    os.chmod(secret, 0o600)
    out = sbx.sh(s["id"], "stat -c '%u %g' /host-secret; cat /host-secret; echo rc=$?; "
                          "(echo x >> /host-secret); echo rc=$?; chown 0 /host-secret; echo rc=$?")
    lines = out["stdout"].splitlines()
    assert lines[0] == "65534 65534", out      # unmapped: the overflow ids
    assert "the host's" not in out["stdout"], out
    rcs = [line for line in lines if line.startswith("rc=")]
    assert len(rcs) == 3 and "rc=0" not in rcs, out
    with open(secret) as f:
        assert f.read() == "the host's\n"
    assert os.stat(secret).st_uid == 0


def test_fork_hibernate_and_snapshot_keep_the_mapping_and_processes(sbx, sbx_daemon):
    s = sbx.create()
    base = s["user_namespace"]["host_id"]
    sbx.sh(s["id"], COUNTER)
    wait_for("the counter", lambda: counter_started(sbx, s["id"]))
    # fork: the child keeps the parent's range (CRIU restores the mapping it dumped)
    r = sbx.post(f"/sandboxes/{s['id']}/fork", json={}, timeout=120)
    assert r.status_code == 200, r.text
    child = r.json()
    sbx.created.append(child["id"])
    assert child["memory_preserved"] is True and child["user_namespace"]["host_id"] == base
    c0 = counter(sbx, child["id"])
    wait_for("the child's counter", lambda: counter(sbx, child["id"]) > c0)
    assert {host_ids(p) for p in procs_of(child["id"])} - {(None, None)} == {(base, base)}
    # hibernate and wake with memory
    assert sbx.post(f"/sandboxes/{child['id']}/hibernate", timeout=120).status_code == 200
    woke = sbx.post(f"/sandboxes/{child['id']}/wake", timeout=120).json()
    assert woke["status"] == "running" and woke["memory_preserved"] is True, woke
    c1 = counter(sbx, child["id"])
    assert c1 >= c0
    wait_for("the woken counter", lambda: counter(sbx, child["id"]) > c1)
    # a snapshot, and a sandbox from it
    r = sbx.post(f"/sandboxes/{s['id']}/snapshots", json={"name": "userns-snap"}, timeout=120)
    assert r.status_code == 201, r.text
    assert r.json()["memory_preserved"] is True
    try:
        r = sbx.post("/sandboxes", json={"snapshot": "userns-snap"}, timeout=120)
        assert r.status_code == 200, r.text
        new = r.json()
        sbx.created.append(new["id"])
        assert new["user_namespace"]["host_id"] == base
        n0 = counter(sbx, new["id"])
        wait_for("the snapshot start's counter", lambda: counter(sbx, new["id"]) > n0)
        out = sbx.sh(new["id"], "id -u; cat /proc/self/uid_map")["stdout"].split()
        assert out == ["0", "0", str(base), str(SIZE)], out
    finally:
        sbx.delete("/snapshots/userns-snap")


def test_each_sandbox_gets_its_own_range_and_a_freed_one_returns(sbx, sbx_daemon):
    a, b = sbx.create(), sbx.create()
    ra, rb = a["user_namespace"]["host_id"], b["user_namespace"]["host_id"]
    assert ra != rb and abs(ra - rb) >= SIZE
    # Were b's root to escape to the host, it could not signal a's processes: other uids.
    sbx.sh(a["id"], "sleep 300 >/dev/null 2>&1 &")
    target = max(procs_of(a["id"]))
    p = subprocess.run(["setpriv", f"--reuid={rb}", f"--regid={rb}", "--clear-groups",
                        "kill", "-0", str(target)], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "not permitted" in p.stderr, (p.returncode, p.stderr)
    p = subprocess.run(["setpriv", f"--reuid={ra}", f"--regid={ra}", "--clear-groups",
                        "kill", "-0", str(target)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr  # its own range's uid can: the check is the uid
    assert sbx.delete(f"/sandboxes/{b['id']}").status_code == 200
    sbx.created.remove(b["id"])
    c = sbx.create()
    assert c["user_namespace"]["host_id"] != ra  # a's range is taken while a exists


def test_userns_off_runs_root_as_the_host_root(registry_url):
    with tempfile.TemporaryDirectory(prefix="sbx-test-") as workdir:
        d = Daemon(workdir, ["--registry-mirror", registry_url, "--userns", "off"])
        try:
            d.start()
            c = Sandboxes(d.url, d.admin_token)
            try:
                s = c.create()
                assert s["user_namespace"] is None
                out = c.sh(s["id"], "cat /proc/self/uid_map")["stdout"].split()
                assert out == ["0", "0", "4294967295"], out
            finally:
                c.cleanup()
        finally:
            d.kill()


@pytest.mark.parametrize("opts, says", [
    (["--userns", "maybe"], b"--userns: auto, on or off"),
    (["--userns-range", "100:65536"], b"--userns-range: FIRST:COUNT"),
    (["--userns-range", "65536:0"], b"--userns-range: FIRST:COUNT"),
    (["--userns-range", "2147418112:131072"], b"--userns-range: FIRST:COUNT"),
    (["--userns-range", "65536:65536x"], b"--userns-range: FIRST:COUNT"),
])
def test_bad_userns_options_refuse_to_start(tmp_path, opts, says):
    from conftest import BIN
    p = subprocess.run([BIN, "serve", "--listen", "127.0.0.1:0", "--socket",
                        str(tmp_path / "s.sock"), "--state-dir", str(tmp_path / "state"),
                        "--templates-dir", "none", *opts], capture_output=True, timeout=60)
    assert p.returncode != 0 and says in p.stderr, p.stderr
