"""Sandboxes on runc (and, where marked, runsc): create, exec, logs, limits, isolation, delete, restart."""
import concurrent.futures
import json
import os
import subprocess
import time

import httpx
import pytest

from conftest import leftover_cgroups, wait_for, SLOW


def wait_status(c, sid, status, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = c.get(f"/sandboxes/{sid}").json()
        if s["status"] == status:
            return s
        time.sleep(0.05)
    raise AssertionError(f"sandbox {sid} never became {status}: {s}")


def test_quick_start_hello_world(sbx):
    s = sbx.create("hello-world", label="hello", interactive=False)
    assert len(s["id"]) == 64 and s["label"] == "hello" and s["hostname"]
    done = wait_status(sbx, s["id"], "exited")
    assert done["exit_code"] == 0
    logs = sbx.get(f"/sandboxes/{s['id']}/logs")
    assert logs.status_code == 200
    assert "Hello from Sandboxer!" in logs.text


def test_sandbox_object_has_every_field(sbx):
    s = sbx.create("busybox", label="fields")
    for key in ["id", "name", "label", "image", "status", "exit_code", "hostname", "ip_address",
                "parent_id", "child_ids", "created_at", "last_active_at", "deleted_at",
                "delete_reason", "is_public", "interactive", "url", "resources", "runtime"]:
        assert key in s, key
    assert "client" not in s
    assert s["status"] == "running" and s["image"] == "docker.io/library/busybox:latest"
    assert s["resources"]["memory"] == 512 << 20 and s["resources"]["pids"] == 512
    assert sbx.get(f"/sandboxes/{s['name']}").json()["id"] == s["id"]
    listed = sbx.get("/sandboxes").json()["sandboxes"]
    assert s["id"] in [x["id"] for x in listed]


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_exec_echo_exit_codes_and_signals(sbx):
    sid = sbx.create("busybox")["id"]
    r = sbx.sh(sid, "echo hi")
    assert r["stdout"] == "hi\n" and r["stderr"] == "" and r["exit_code"] == 0
    assert sbx.sh(sid, "exit 3")["exit_code"] == 3
    assert sbx.sh(sid, "kill -9 $$")["exit_code"] == 137
    r = sbx.sh(sid, "echo out; echo err >&2")
    assert r["stdout"] == "out\n" and r["stderr"] == "err\n"
    r = sbx.post(f"/sandboxes/{sid}/exec", json={"argv": ["echo", "a b", "c"]}).json()
    assert r["stdout"] == "a b c\n"
    r = sbx.post(f"/sandboxes/{sid}/exec", json={"argv": ["no-such-program"]}).json()
    assert r["exit_code"] == 127


def test_exec_stream_separates_and_orders(sbx):
    sid = sbx.create("busybox")["id"]
    code = "echo one; echo two >&2; sleep 0.2; echo three; exit 5"
    with sbx.stream("POST", f"/sandboxes/{sid}/execute", params={"stream": "true"},
                    json={"code": code}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(l) for l in r.iter_lines() if l.strip()]
    out = "".join(l["output"] for l in lines if l["type"] == "stdout")
    err = "".join(l["output"] for l in lines if l["type"] == "stderr")
    assert out == "one\nthree\n" and err == "two\n"
    assert all(l["exit_code"] == -1 for l in lines[:-1])
    assert lines[-1] == {"type": "exit", "output": "Process exited with code 5",
                         "exit_code": 5, "timed_out": False}


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_exec_stream_is_live(sbx):
    sid = sbx.create("busybox")["id"]
    t0 = time.monotonic()
    first = None
    with sbx.stream("POST", f"/sandboxes/{sid}/execute", params={"stream": "true"},
                    json={"code": "echo first; sleep 2; echo last"}) as r:
        for line in r.iter_lines():
            if line.strip() and first is None:
                first = time.monotonic() - t0
    assert first is not None and first < 1.5, first


def test_exec_ten_megabytes_of_output(sbx):
    sid = sbx.create("busybox")["id"]
    r = sbx.sh(sid, "head -c 10485760 /dev/zero | tr '\\0' x")
    assert len(r["stdout"]) == 10 << 20 and set(r["stdout"]) == {"x"}
    assert r["truncated"] is False


def test_exec_timeout_kills_the_group(sbx):
    sid = sbx.create("busybox")["id"]
    t0 = time.monotonic()
    r = sbx.sh(sid, "sleep 100 & sleep 100; echo never", timeout=1)
    assert time.monotonic() - t0 < 10
    assert r["timed_out"] is True and r["exit_code"] == 137 and "never" not in r["stdout"]
    ps = sbx.sh(sid, "ps -o comm | grep -c sleep || true")["stdout"].strip()
    assert ps == "0", "the timed-out exec's background child must be gone"


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_exec_stdin(sbx):
    sid = sbx.create("busybox")["id"]
    r = sbx.post(f"/sandboxes/{sid}/exec",
                 json={"argv": ["sh", "-c", "wc -l; cat"], "stdin": "a\nb\nc\n"}).json()
    assert r["stdout"].startswith("3\n")


def test_fifty_concurrent_execs(sbx):
    sid = sbx.create("busybox")["id"]

    def one(i):
        with httpx.Client(base_url=str(sbx.http.base_url), headers=sbx.http.headers,
                          timeout=60) as c:
            return c.post(f"/sandboxes/{sid}/execute",
                          json={"code": f"sleep 0.2; echo {i}"}).json()["stdout"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
        outs = list(pool.map(one, range(50)))
    assert outs == [f"{i}\n" for i in range(50)]


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_env_args_hostname_workdir_honoured(sbx):
    s = sbx.create("busybox", env={"GREETING": "hello world"}, hostname="box1",
                   args=["sh", "-c", "echo main-started; exec sleep 1000"])
    sid = s["id"]
    assert s["hostname"] == "box1"
    r = sbx.sh(sid, 'echo "$GREETING"; hostname; cat /etc/hostname; pwd')
    assert r["stdout"].split("\n")[:4] == ["hello world", "box1", "box1", "/"]
    r = sbx.post(f"/sandboxes/{sid}/exec",
                 json={"argv": ["sh", "-c", "pwd; echo $X"], "cwd": "/tmp",
                       "env": {"X": "y"}}).json()
    assert r["stdout"] == "/tmp\ny\n"
    # the main process runs beside the exec: its first line may come a moment later (runsc)
    wait_for("the main process's first line",
             lambda: "main-started" in sbx.get(f"/sandboxes/{sid}/logs").text)
    r = sbx.post(f"/sandboxes/{sid}/exec", json={"argv": ["id", "-u"], "user": "sbx"}).json()
    assert r["stdout"] == "1000\n"


def test_memory_limit_kills_the_hog_not_the_sandbox(sbx_daemon, sbx):
    sid = sbx.create("busybox", memory="32M")["id"]
    # dd fills a 100 MB buffer: past the 32 MiB limit it is OOM-killed, nothing else is
    r = sbx.sh(sid, "dd if=/dev/zero of=/dev/null bs=100M count=1")
    assert r["exit_code"] == 137, r
    assert sbx.sh(sid, "echo alive")["stdout"] == "alive\n"
    assert httpx.get(sbx_daemon.url + "/healthz").status_code == 200


def pids_current(sid):
    for path in [f"/sys/fs/cgroup/pids/sandboxer/{sid}/pids.current",
                 f"/sys/fs/cgroup/sandboxer/{sid}/pids.current"]:
        if os.path.exists(path):
            with open(path) as f:
                return int(f.read())
    raise AssertionError("no pids cgroup for the sandbox")


def test_pids_limit_contains_a_fork_bomb(sbx_daemon, sbx):
    sid = sbx.create("busybox", pids=64)["id"]
    r = sbx.sh(sid, "i=0; while [ $i -lt 300 ]; do sleep 4 >/dev/null 2>&1 & i=$((i+1)); "
                    "done; echo spawned", timeout=30)
    # the shell ran out of processes: fork failed inside the sandbox, not on the host
    assert r["exit_code"] != 0 and "spawned" not in r["stdout"], r
    assert pids_current(sid) <= 64
    assert httpx.get(sbx_daemon.url + "/healthz").status_code == 200
    deadline = time.monotonic() + 30 * SLOW
    while time.monotonic() < deadline:  # once the sleeps end, the sandbox works again
        r = sbx.post(f"/sandboxes/{sid}/execute", json={"code": "echo ok"})
        if r.status_code == 200 and r.json()["stdout"] == "ok\n":
            break
        time.sleep(0.5)
    else:
        raise AssertionError("the sandbox did not recover from the fork bomb")


def test_cannot_see_host_processes_mounts_or_devices(sbx):
    sid = sbx.create("busybox")["id"]
    procs = sbx.sh(sid, "ls /proc | grep -c '^[0-9]'")["stdout"].strip()
    assert int(procs) < 10, "only the sandbox's own processes"
    assert sbx.sh(sid, "ps -o pid,comm")["stdout"].count("sandboxer-agent") == 1
    points = [l.split()[1] for l in sbx.sh(sid, "cat /proc/mounts")["stdout"].splitlines()]
    assert "/" in points and "/proc" in points
    for host_only in ("/work", "/var", "/boot", "/home", "/root", "/tmp/"):
        assert not any(p.startswith(host_only) for p in points), (host_only, points)
    devs = sbx.sh(sid, "ls /dev")["stdout"].split()
    assert not any(d.startswith(("sd", "vd", "nvme", "loop", "mem", "kmsg")) for d in devs)
    assert sbx.sh(sid, "cat /proc/kcore | head -c 1 | wc -c")["stdout"].strip() == "0"
    r = sbx.sh(sid, "mount -t tmpfs none /mnt 2>&1; echo $?")
    assert r["stdout"].strip().endswith("1") or "denied" in r["stdout"] or \
        "not permitted" in r["stdout"]


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_symlink_at_the_agent_socket_is_not_followed(sbx_daemon, sbx, tmp_path):
    import socket as so
    sid = sbx.create("busybox")["id"]
    # a listener on the host that must never be reached through the sandbox's socket dir
    decoy = tmp_path / "decoy.sock"
    srv = so.socket(so.AF_UNIX, so.SOCK_STREAM)
    srv.bind(str(decoy))
    srv.listen(1)
    srv.settimeout(0.5)
    try:
        sock_dir = os.path.join(sbx_daemon.state_dir, "sandboxes", sid, "sock")
        # the sandbox replaces its socket with a symlink to a host path
        sbx.sh(sid, f"rm -f /run/sandboxer/agent.sock; ln -s {decoy} /run/sandboxer/agent.sock")
        assert os.path.islink(os.path.join(sock_dir, "agent.sock"))
        r = sbx.post(f"/sandboxes/{sid}/execute", json={"code": "echo hi"})
        assert r.status_code >= 400 and r.status_code != 200
        with pytest.raises(so.timeout):
            srv.accept()
    finally:
        srv.close()


def test_other_users_sandbox_is_404(sbx, sbx_user):
    sid = sbx.create("busybox")["id"]
    bob = sbx_user("bob")
    for method, path, body in [("POST", f"/sandboxes/{sid}/execute", {"code": "id"}),
                               ("GET", f"/sandboxes/{sid}", None),
                               ("GET", f"/sandboxes/{sid}/logs", None),
                               ("DELETE", f"/sandboxes/{sid}", None)]:
        r = bob.request(method, path, json=body)
        assert r.status_code == 404 and r.json()["code"] == "sandbox_not_found"
    unknown = bob.get("/sandboxes/" + "0" * 64).json()
    assert unknown["code"] == "sandbox_not_found"
    assert sid not in [s["id"] for s in bob.get("/sandboxes").json()["sandboxes"]]
    assert sbx.sh(sid, "echo still mine")["exit_code"] == 0


def test_bad_input_is_rejected_and_changes_nothing(sbx):
    before = len(sbx.get("/sandboxes").json()["sandboxes"])
    # {} means the template base, which this daemon (no --templates-dir) does not have
    cases = [({"image": "Not A Ref!!"}, 400), ({"image": 5}, 400), ({}, 404),
             ({"image": "busybox", "template": "base"}, 400),
             ({"image": "busybox", "cpus": "x"}, 400), ({"image": "busybox", "memory": "lots"}, 400),
             ({"image": "busybox", "bogus": 1}, 400), ({"image": "busybox", "args": "sh"}, 400),
             ({"image": "busybox", "env": {"A": 1}}, 400),
             ({"image": "busybox", "hostname": "bad_host!"}, 400),
             ({"image": "no-such-image-here"}, 422)]
    for body, status in cases:
        r = sbx.post("/sandboxes", json=body, timeout=120)
        assert r.status_code == status, (body, r.text)
        assert r.json()["detail"]
    assert len(sbx.get("/sandboxes").json()["sandboxes"]) == before
    sid = sbx.create("busybox")["id"]
    for body in [{"code": ""}, {"code": 5}, {}, {"code": "x", "extra": 1}]:
        assert sbx.post(f"/sandboxes/{sid}/execute", json=body).status_code == 400
    for body in [{"argv": []}, {"argv": "ls"}, {"argv": [1]}, {"argv": ["ls"], "env": []}]:
        assert sbx.post(f"/sandboxes/{sid}/exec", json=body).status_code == 400
    assert sbx.post(f"/sandboxes/{sid}/execute", content=b"{nope").status_code == 400


def test_exec_history_routes(sbx):
    sid = sbx.create("busybox")["id"]
    sbx.sh(sid, "echo first")
    sbx.sh(sid, "echo second >&2; exit 2")
    ex = sbx.get(f"/sandboxes/{sid}/execution-logs").json()["executions"]
    assert [e["command"] for e in ex] == ["echo first", "echo second >&2; exit 2"]
    assert ex[1]["exit_code"] == 2
    assert ex[0]["logs"][0]["content"] == "first\n" and ex[0]["logs"][0]["fd"] == "stdout"
    assert ex[1]["logs"][0]["fd"] == "stderr"
    newest = sbx.get(f"/sandboxes/{sid}/command-executions", params={"limit": 1}).json()
    assert [e["command"] for e in newest["executions"]] == ["echo second >&2; exit 2"]
    eid = ex[0]["id"]
    page = sbx.get(f"/sandboxes/{sid}/command-executions/{eid}/logs").json()
    assert page["execution"]["id"] == eid and page["logs"][0]["content"] == "first\n"
    more = sbx.get(f"/sandboxes/{sid}/command-executions/{eid}/logs",
                   params={"start_id": page["next_start_id"]}).json()
    assert more["logs"] == []


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_logs_stream_follows_until_exit(sbx):
    s = sbx.create("busybox", args=["sh", "-c", "for i in 1 2 3; do echo tick $i; sleep 0.3; done"])
    with sbx.stream("GET", f"/sandboxes/{s['id']}/logs", params={"stream": "true"},
                    timeout=30) as r:
        text = b"".join(r.iter_bytes()).decode()
    assert text == "tick 1\ntick 2\ntick 3\n"
    done = wait_status(sbx, s["id"], "exited")
    assert done["exit_code"] == 0


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_delete_leaves_nothing_behind(sbx_daemon, sbx):
    sid = sbx.create("busybox")["id"]
    sdir = os.path.join(sbx_daemon.state_dir, "sandboxes", sid)
    assert os.path.isdir(sdir) and leftover_cgroups(sid)
    r = sbx.delete(f"/sandboxes/{sid}")
    assert r.json() == {"id": sid, "status": "terminated"}
    assert not os.path.exists(sdir)
    with open("/proc/mounts") as f:
        assert sid not in f.read()
    assert leftover_cgroups(sid) == []
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert sid not in ps
    runc = subprocess.run(["runc", "--root", os.path.join(sbx_daemon.state_dir, "runc"),
                           "list", "-q"], capture_output=True, text=True).stdout
    assert sid not in runc
    s = sbx.get(f"/sandboxes/{sid}").json()
    assert s["status"] == "terminated" and s["deleted_at"]
    assert sbx.post(f"/sandboxes/{sid}/execute", json={"code": "true"}).status_code == 409


def test_restart_keeps_sandboxes_running(sbx_daemon, sbx_rt, runtime):
    sbx = sbx_rt
    sid = sbx.create("busybox")["id"]
    sbx.sh(sid, "echo 42 > /tmp/value")
    gone = sbx.create("busybox")["id"]
    assert sbx_daemon.stop() == 0
    # while the daemon is down, one container disappears
    root = os.path.join(sbx_daemon.state_dir, runtime)
    subprocess.run([runtime, "--root", root, "kill", "--all", gone, "KILL"], check=True,
                   timeout=30)
    wait_for("the killed container to stop", lambda: json.loads(subprocess.run(
        [runtime, "--root", root, "state", gone], capture_output=True, text=True,
        timeout=30).stdout or '{"status": "stopped"}')["status"] == "stopped")
    sbx_daemon.start()
    c = type(sbx)(sbx_daemon.url, sbx_daemon.admin_token)
    try:
        assert c.sh(sid, "cat /tmp/value")["stdout"] == "42\n"
        s = c.get(f"/sandboxes/{gone}").json()
        assert s["status"] == "exited", s
    finally:
        c.close()


def test_logs_survive_exit_and_restart(sbx_daemon, sbx):
    s = sbx.create("busybox", args=["sh", "-c", "echo kept-line"])
    wait_status(sbx, s["id"], "exited")
    sbx_daemon.stop()
    sbx_daemon.start()
    c = type(sbx)(sbx_daemon.url, sbx_daemon.admin_token)
    try:
        assert c.get(f"/sandboxes/{s['id']}/logs").text == "kept-line\n"
    finally:
        c.close()


def test_images_routes(sbx):
    sbx.create("busybox")
    images = sbx.get("/images").json()["images"]
    assert "docker.io/library/busybox:latest" in [i["ref"] for i in images]
    r = sbx.post("/images/pull", json={"image": "hello-world"}, timeout=300)
    assert r.status_code == 200 and r.json()["digest"].startswith("sha256:")
    r = sbx.delete("/images/docker.io/library/busybox:latest")
    assert r.status_code == 409 and r.json()["code"] == "image_in_use"
    assert sbx.post("/images/pull", json={"image": "nope-nothing"}, timeout=120).status_code == 422


def test_main_log_is_capped_on_the_host(registry_url, tmp_path):
    from conftest import Daemon, Sandboxes
    d = Daemon(str(tmp_path), ["--registry-mirror", registry_url, "--log-max", "64K"])
    try:
        d.start()
        c = Sandboxes(d.url, d.admin_token)
        try:
            s = c.create("busybox", args=["sh", "-c", "i=0; while [ $i -lt 20000 ]; do "
                                          "echo line-$i; i=$((i+1)); done; echo last-line"])
            wait_status(c, s["id"], "exited", timeout=60)
            text = c.get(f"/sandboxes/{s['id']}/logs").text
            assert len(text) <= 2 * 64 * 1024, len(text)  # main.log.1 + main.log
            assert text.endswith("last-line\n") and "line-0\n" not in text
            logs = os.path.join(d.state_dir, "sandboxes", s["id"], "logs")
            assert sum(os.path.getsize(os.path.join(logs, f)) for f in os.listdir(logs)) \
                <= 2 * 64 * 1024
        finally:
            c.cleanup()
    finally:
        d.kill()


def test_image_config_and_layers_are_honoured(sbx):
    """webapp: two layers (the top one deletes /etc/group), Entrypoint + Cmd, WorkingDir,
    User, Env."""
    sid = sbx.create("webapp")["id"]
    deadline = time.monotonic() + 10 * SLOW
    while "app in" not in (log := sbx.get(f"/sandboxes/{sid}/logs").text):
        assert time.monotonic() < deadline, log
        time.sleep(0.05)
    assert log == "app in /app as sbx mode=test args=default-arg\n"
    r = sbx.sh(sid, "id -un; pwd; test -e /etc/group && echo group || echo no-group; "
                    "cat /etc/passwd | grep -c sbx")
    assert r["stdout"] == "sbx\n/app\nno-group\n1\n", r
    assert sbx.post(f"/sandboxes/{sid}/exec",
                    json={"argv": ["id", "-u"], "user": "root"}).json()["stdout"] == "0\n"
    args = sbx.create("webapp", args=["sh", "-c", "echo override; exec sleep 1000"])["id"]
    deadline = time.monotonic() + 10 * SLOW
    while "override" not in sbx.get(f"/sandboxes/{args}/logs").text:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_client_that_gives_up_kills_its_exec(sbx):
    """Plain and streamed execs end when their client goes away, so the sandbox is free."""
    import httpx as _httpx
    import time as _time
    sid = sbx.create("busybox")["id"]
    for stream in (False, True):
        marker = f"sleep 3{int(stream)}7"
        with pytest.raises(_httpx.ReadTimeout):
            sbx.post(f"/sandboxes/{sid}/execute", params={"stream": "true"} if stream else None,
                     json={"code": f"{marker}; echo never"}, timeout=1.5)
        deadline = _time.monotonic() + 10 * SLOW
        while marker in sbx.sh(sid, "ps -o args")["stdout"]:
            assert _time.monotonic() < deadline, f"{marker} still runs"
            _time.sleep(0.2)
    # nothing holds the sandbox: a fork goes through at once
    r = sbx.post(f"/sandboxes/{sid}/fork", json={}, timeout=60)
    assert r.status_code == 200, r.text
    sbx.created.append(r.json()["id"])
