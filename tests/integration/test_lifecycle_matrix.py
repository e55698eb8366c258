"""Fork, hibernate/wake and snapshots of whatever users run, started the way agents start it.

Each workload is started in an idle sandbox through exec (`cmd &`, `nohup`, a daemon, a REPL
fed through a FIFO...), then one lifecycle operation runs, and the test checks that in the
child / woken / new sandbox the same processes go on with their memory: every workload keeps
a random boot id and a counter in memory and publishes both to /tmp/<name>.state
(workloads/state.py), so a process that was started again (new boot id) or stopped (the
counter stands still) fails the check. Workloads come from tests/integration/workloads/ and
are copied in through the files API; the image is the Debian one with python3 and nodejs.

Every workload runs on runc + CRIU; a representative subset runs on runsc (gVisor) too. gVisor
cannot checkpoint a sandbox holding a connected TCP endpoint: there the operation answers
what it could do and why (a fork or snapshot of the files, memory_preserved false with the
reason; a hibernation refused with 409), and the workload goes on in the source.
"""
import json
import os
import secrets
import subprocess
import time

import pytest

from conftest import Daemon, Sandboxes, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "workloads")
IMAGE = "node"
OPS = ("fork", "hibernate", "snapshot")



@pytest.fixture(scope="module")
def matrix_daemon(registry_url, tmp_path_factory):
    """One daemon for the whole matrix (each case cleans up its own sandboxes)."""
    d = Daemon(str(tmp_path_factory.mktemp("matrix")), ["--registry-mirror", registry_url])
    try:
        d.start()
        yield d
    finally:
        d.kill()


@pytest.fixture
def sbx(matrix_daemon):
    c = Sandboxes(matrix_daemon.url, matrix_daemon.admin_token)
    c.daemon = matrix_daemon  # its log explains a failed operation
    yield c
    c.cleanup()


@pytest.fixture(scope="module")
def fdprobe(tmp_path_factory):
    """The static C workload (epoll, timerfd, eventfd, inotify, signalfd)."""
    out = tmp_path_factory.mktemp("fdprobe") / "fdprobe"
    subprocess.run(["gcc", "-static", "-O2", "-o", str(out),
                    os.path.join(WORKLOADS, "fdprobe.c")], check=True, timeout=120)
    return out


def put(c, sid, path, data, mode="644"):
    r = c.put(f"/sandboxes/{sid}/files{path}", params={"mkdir": "true", "mode": mode},
              content=data)
    assert r.status_code in (200, 201), r.text


def upload_workloads(c, sid, fdprobe):
    for name in sorted(os.listdir(WORKLOADS)):
        if name.endswith((".py", ".js", ".sh")):
            with open(os.path.join(WORKLOADS, name), "rb") as f:
                put(c, sid, f"/tmp/wl/{name}", f.read())
    with open(fdprobe, "rb") as f:
        put(c, sid, "/tmp/wl/fdprobe", f.read(), mode="755")


def state(c, sid, name):
    """The published state of workload name in sandbox sid, or None."""
    r = c.sh(sid, f"cat /tmp/{name}.state 2>/dev/null")
    try:
        return json.loads(r["stdout"]) if r["exit_code"] == 0 else None
    except ValueError:
        return None


def running(c, sid, pid):
    """True if pid is a live (not zombie) process of sandbox sid."""
    r = c.sh(sid, f"grep -s '^State:' /proc/{pid}/status")
    return r["exit_code"] == 0 and "Z (zombie)" not in r["stdout"]


class Workload:
    """A process tree started through exec that publishes /tmp/<name>.state."""
    name = None
    start = None  # shell code run through exec
    tcp = False  # holds a connected TCP endpoint inside the sandbox (gVisor cannot keep it)

    def started(self, c, sid):
        c.sh(sid, self.start)
        return wait_for(f"{self.name} to start", lambda: (s := state(c, sid, self.name))
                        and s["count"] >= 3 and s)

    def goes_on(self, c, sid, before):
        """The same process (boot id) goes on from where it was (the counter grows)."""
        now = wait_for(f"{self.name}'s state", lambda: state(c, sid, self.name))
        assert now["boot"] == before["boot"], f"{self.name} was started again: {now}"
        assert now["count"] >= before["count"], (before, now)
        later = wait_for(f"{self.name} to go on", lambda: (s := state(c, sid, self.name))
                         and s["count"] > now["count"] and s)
        self.check(c, sid, before, later)

    def check(self, c, sid, before, now):
        """What else this workload must still do after the operation."""


class ShellLoop(Workload):
    name = "shell_loop"
    start = ("nohup sh -c 'i=0; while :; do i=$((i+1)); "
             "echo \"{\\\"boot\\\": \\\"$$\\\", \\\"count\\\": $i}\" > /tmp/shell_loop.tmp; "
             "mv /tmp/shell_loop.tmp /tmp/shell_loop.state; sleep 0.05; done' "
             ">/dev/null 2>&1 &")


class PythonScript(Workload):
    script = None

    @property
    def start(self):
        return f"nohup python3 /tmp/wl/{self.script} >/tmp/wl/{self.name}.log 2>&1 &"


class Threads(PythonScript):
    name, script = "threads", "threads.py"

    def check(self, c, sid, before, now):
        assert now["alive"] == 5, now  # the main thread and its four workers


class HttpServer(PythonScript):
    """Reached from outside through the daemon's proxy, as a user's browser would."""
    name, script = "httpserver", "httpserver.py"
    port = 8080

    def started(self, c, sid):
        c.sh(sid, self.start)
        wait_for("the server to answer", lambda: c.get(
            f"/sandboxes/{sid}/proxy/", params={"port": self.port}).status_code == 200)
        return wait_for("its state", lambda: state(c, sid, self.name))

    def goes_on(self, c, sid, before):
        """It answers, from the same memory: its counter goes on from where it was."""
        r = wait_for("an answer", lambda: (a := c.get(f"/sandboxes/{sid}/proxy/",
                                                       params={"port": self.port}))
                     .status_code == 200 and a)
        boot, count = r.text.split()
        assert boot == before["boot"] and int(count) > before["count"], (r.text, before)


class NodeServer(HttpServer):
    name, port = "node_server", 3000
    start = "nohup node /tmp/wl/server.js >/tmp/wl/node.log 2>&1 &"

    def started(self, c, sid):
        super().started(c, sid)
        return wait_for("its counter", lambda: (s := state(c, sid, self.name))
                        and s["count"] >= 3 and s)

    def goes_on(self, c, sid, before):
        Workload.goes_on(self, c, sid, before)  # its timer ticks on
        super().goes_on(c, sid, before)


class Daemonized(Workload):
    name = "daemon"
    start = "python3 /tmp/wl/daemon.py"  # forks, setsid, forks again, closes its fds


class Pipeline(Workload):
    name = "pipeline"
    start = ("nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i; sleep 0.02; done | "
             "python3 /tmp/wl/pipeline.py' >/dev/null 2>&1 &")

    def check(self, c, sid, before, now):
        assert now["last"] >= now["count"], now  # the writer's numbers, in order, none lost


class UnixSockets(PythonScript):
    name, script = "unixsock", "unixsock.py"


class SqliteWal(PythonScript):
    name, script = "sqlite_wal", "sqlite_wal.py"

    def check(self, c, sid, before, now):
        r = c.sh(sid, "python3 -c \"import sqlite3; db = sqlite3.connect('/tmp/wl/wal.db'); "
                      "print(db.execute('PRAGMA integrity_check').fetchone()[0], "
                      "db.execute('PRAGMA journal_mode').fetchone()[0])\"")
        assert r["stdout"].split() == ["ok", "wal"], r


class SharedMemoryAndDeletedFile(PythonScript):
    name, script = "shm", "shm.py"

    def check(self, c, sid, before, now):
        assert now["shm"] > before["shm"] and now["gone_size"] > before["gone_size"], now


class FdProbe(Workload):
    """epoll over a timerfd, an eventfd, an inotify watch and a signalfd (C, static)."""
    name = "fdprobe"
    start = "nohup /tmp/wl/fdprobe >/dev/null 2>&1 &"

    def check(self, c, sid, before, now):
        assert now["eventfd"] > before["eventfd"], now
        token = secrets.token_hex(4)
        c.sh(sid, f"touch /tmp/wl/watch/{token}; kill -USR1 {now['pid']}")
        wait_for("inotify and the signal", lambda: (s := state(c, sid, self.name))
                 and s["inotify"] > now["inotify"] and s["signals"] > now["signals"])


class TcpLoopback(PythonScript):
    name, script = "tcp_loopback", "tcppair.py"
    tcp = True


class SleepInBackground(Workload):
    """`sleep &` with and without redirections: no state of its own, so its pid is checked."""
    name = "sleep"
    redirect = ""

    def started(self, c, sid):
        r = c.sh(sid, f"sleep 100000 {self.redirect} & echo $!")
        return {"pid": int(r["stdout"])}

    def goes_on(self, c, sid, before):
        assert running(c, sid, before["pid"]), c.sh(sid, "ls /proc")


class SleepRedirected(SleepInBackground):
    name = "sleep_redirected"
    redirect = ">/dev/null 2>&1 </dev/null"


class FromTerminal(Workload):
    """Started with nohup in a terminal (the PTY WebSocket) that is then closed."""
    name = "from_terminal"

    def started(self, c, sid):
        import websocket
        url = str(c.http.base_url).replace("http://", "ws://") + f"/sandboxes/{sid}/exec/pty"
        ws = websocket.create_connection(url, timeout=30,
                                         header=[f"Authorization: Bearer {c.token}"])
        try:
            ws.send_binary(b"cd /tmp/wl && STATE_NAME=from_terminal nohup python3 threads.py "
                           b">/dev/null 2>&1 &\nexit\n")
            while True:  # until the shell ends and the daemon closes the WebSocket
                op, _ = ws.recv_data(control_frame=True)
                if op == websocket.ABNF.OPCODE_CLOSE:
                    break
        finally:
            ws.close()
        return wait_for("it to start", lambda: (s := state(c, sid, self.name))
                        and s["count"] >= 3 and s)


class ProcessesApi(Workload):
    """Started through POST /sandboxes/{id}/processes, as an E2B-style background command."""
    name = "processes_api"

    def started(self, c, sid):
        r = c.post(f"/sandboxes/{sid}/processes", json={
            "argv": ["python3", "threads.py"], "cwd": "/tmp/wl",
            "env": {"STATE_NAME": self.name}, "tag": "matrix"}, timeout=60)
        assert r.status_code == 201, r.text
        self.pid = r.json()["pid"]
        return wait_for("it to start", lambda: (s := state(c, sid, self.name))
                        and s["count"] >= 3 and s)

    def check(self, c, sid, before, now):
        p = c.get(f"/sandboxes/{sid}/processes/{self.pid}").json()
        assert p["status"] == "running" and p["tag"] == "matrix", p


class NonRootUser(Workload):
    """Run as a user other than root (sbx, 1000): CRIU must read its limits from /proc on a
    host whose root lacks CAP_SYS_RESOURCE (scripts/criu-patches/0009)."""
    name = "nonroot"

    def started(self, c, sid):
        r = c.post(f"/sandboxes/{sid}/exec", json={
            "argv": ["sh", "-c", "STATE_NAME=nonroot nohup python3 /tmp/wl/threads.py "
                                 ">/dev/null 2>&1 &"], "user": "sbx"}, timeout=60)
        assert r.status_code == 200 and r.json()["exit_code"] == 0, r.text
        return wait_for("it to start", lambda: (s := state(c, sid, self.name))
                        and s["count"] >= 3 and s)

    def check(self, c, sid, before, now):
        uid = c.sh(sid, f"stat -c %u /proc/{now['pid']}")["stdout"].strip()
        assert uid == "1000", uid


class PythonRepl(Workload):
    """A Python REPL on a FIFO: a variable set before the operation is read after it."""
    name = "repl"

    def started(self, c, sid):
        c.sh(sid, "sh /tmp/wl/repl_feed.sh")
        c.sh(sid, "echo 'x = 41' > /tmp/wl/repl.in")
        token = secrets.token_hex(4)
        self.ask(c, sid, token)
        return {"token": token}

    def ask(self, c, sid, token):
        c.sh(sid, f"echo 'print(\"{token}\", x + 1)' > /tmp/wl/repl.in")
        wait_for("the REPL's answer", lambda: f"{token} 42" in c.sh(
            sid, "cat /tmp/wl/repl.out")["stdout"])

    def goes_on(self, c, sid, before):
        self.ask(c, sid, secrets.token_hex(4))


ALL = [SleepInBackground(), SleepRedirected(), ShellLoop(), Threads(), HttpServer(),
       NodeServer(), Daemonized(), Pipeline(), UnixSockets(), SqliteWal(),
       SharedMemoryAndDeletedFile(), FdProbe(), TcpLoopback(), FromTerminal(), ProcessesApi(), NonRootUser(), PythonRepl()]
# What proves the lifecycle on gVisor: processes of every kind of start, threads, unix
# sockets, a REPL's memory, a server reached through the proxy, and a TCP pair (refused).
RUNSC = ("sleep", "shell_loop", "threads", "httpserver", "unixsock", "processes_api", "repl",
         "tcp_loopback")
CASES = [("runc", w) for w in ALL] + [("runsc", w) for w in ALL if w.name in RUNSC]


def ok(c, r, status=200):
    assert r.status_code == status, f"{r.text}\ndaemon log:\n{c.daemon.log()[-3000:]}"
    return r.json()


def operate_without_memory(c, sid, op):
    """gVisor and a connected TCP endpoint: the answer says why, the source goes on."""
    if op == "fork":
        child = ok(c, c.post(f"/sandboxes/{sid}/fork", json={"label": "matrix"}, timeout=120),
                   200)
        c.created.append(child["id"])
        assert child["memory_preserved"] is False and "TCP" in child["reason"], child
    elif op == "hibernate":
        r = c.post(f"/sandboxes/{sid}/hibernate", timeout=120)
        assert r.status_code == 409 and r.json()["code"] == "checkpoint_failed", r.text
        assert "TCP" in r.json()["detail"]
    else:
        name = "matrix-" + secrets.token_hex(4)
        snap = ok(c, c.post(f"/sandboxes/{sid}/snapshots", json={"name": name}, timeout=120),
                  201)
        assert snap["memory_preserved"] is False, snap
        ok(c, c.delete(f"/snapshots/{name}", timeout=60))
    assert c.get(f"/sandboxes/{sid}").json()["status"] == "running"
    return [sid]


def operate(c, sid, op, runtime="runc", workload=None):
    """Run op on sid; the sandboxes in which the workload must go on."""
    if runtime == "runsc" and workload.tcp:
        return operate_without_memory(c, sid, op)
    if op == "fork":
        child = ok(c, c.post(f"/sandboxes/{sid}/fork", json={"label": "matrix"}, timeout=120),
                   200)
        c.created.append(child["id"])
        assert child["memory_preserved"] is True
        return [child["id"], sid]
    if op == "hibernate":
        assert ok(c, c.post(f"/sandboxes/{sid}/hibernate", timeout=120))["status"] == "hibernated"
        woken = ok(c, c.post(f"/sandboxes/{sid}/wake", timeout=120))
        assert woken["status"] == "running" and woken["memory_preserved"] is True, woken
        return [sid]
    name = "matrix-" + secrets.token_hex(4)
    ok(c, c.post(f"/sandboxes/{sid}/snapshots", json={"name": name}, timeout=120), 201)
    new = ok(c, c.post("/sandboxes", json={"snapshot": name, "label": "matrix"}, timeout=120),
             200)
    c.created.append(new["id"])
    assert new["memory_preserved"] is True, new
    ok(c, c.delete(f"/sandboxes/{sid}", timeout=60))  # the new one must not need its source
    ok(c, c.delete(f"/snapshots/{name}", timeout=60))
    return [new["id"]]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("runtime,workload", CASES,
                         ids=[f"{r}-{w.name}" for r, w in CASES])
def test_workload_started_through_exec_survives(sbx, fdprobe, runtime, workload, op):
    sbx.runtime = runtime
    sid = sbx.create(IMAGE, label=f"{workload.name}-{op}")["id"]
    upload_workloads(sbx, sid, fdprobe)
    before = workload.started(sbx, sid)
    for target in operate(sbx, sid, op, runtime, workload):
        workload.goes_on(sbx, target, before)
