"""Terminals over WebSocket: /exec/pty, /attach, and the CLI's `shell` and `attach`."""
import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import termios
import time

import pytest
import websocket

from conftest import BIN, SLOW


def ws_url(d, sid, route, **query):
    q = "&".join(f"{k}={v}" for k, v in query.items())
    return d.url.replace("http://", "ws://") + f"/sandboxes/{sid}/{route}" + (f"?{q}" if q else "")


def connect(d, sid, route="exec/pty", token=None, **query):
    ws = websocket.create_connection(
        ws_url(d, sid, route, **query), timeout=30,
        header=[f"Authorization: Bearer {token or d.admin_token}"])
    return ws


class Term:
    """Reads a terminal WebSocket: output bytes, and the close frame's code and reason."""

    def __init__(self, ws):
        self.ws = ws
        self.out = b""
        self.close_code = None
        self.close_reason = None

    def send(self, text):
        self.ws.send_binary(text.encode())

    def resize(self, cols, rows):
        self.ws.send(json.dumps({"resize": {"cols": cols, "rows": rows}}))

    def read_until(self, marker, timeout=30):
        """Output until marker shows up (bytes), or the session closes."""
        deadline = time.monotonic() + timeout
        while marker not in self.out and self.close_code is None:
            assert time.monotonic() < deadline, f"no {marker!r} in {self.out[-500:]!r}"
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            op, data = self.ws.recv_data(control_frame=True)
            if op == websocket.ABNF.OPCODE_BINARY:
                self.out += data
            elif op == websocket.ABNF.OPCODE_CLOSE:
                self.close_code = struct.unpack("!H", data[:2])[0] if len(data) >= 2 else 0
                self.close_reason = data[2:].decode()
        return self.out

    def wait_close(self, timeout=30):
        self.read_until(b"\x00never\x00", timeout)
        return self.close_code, self.close_reason


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_pty_shell_resizes_and_closes_with_the_exit_code(sbx_daemon, sbx):
    d = sbx_daemon
    sid = sbx.create("busybox")["id"]
    t = Term(connect(d, sid, cols=80, rows=24))
    try:
        t.send("stty size; tty; echo m1-$((6*7))\n")
        out = t.read_until(b"m1-42")
        assert b"24 80" in out and b"/dev/pts/" in out
        t.resize(132, 43)
        t.send("stty size; echo m2-$((6*7))\n")
        assert b"43 132" in t.read_until(b"m2-42").split(b"m1-42", 2)[-1]
        t.send("exit 3\n")
        code, reason = t.wait_close()
        assert code == 1000 and json.loads(reason) == {"exit_code": 3, "signal": None}
    finally:
        t.ws.close()
    # recorded in the history like any exec
    hist = sbx.get(f"/sandboxes/{sid}/command-executions").json()
    assert any(e.get("exit_code") == 3 for e in hist.get("executions", hist)
               if isinstance(e, dict)), hist


def test_pty_cmd_query_and_bad_requests(sbx_daemon, sbx, sbx_user):
    d = sbx_daemon
    sid = sbx.create("busybox")["id"]
    t = Term(connect(d, sid, cmd="echo%20from-cmd%3B%20exit%205"))
    assert t.wait_close()[1] and b"from-cmd" in t.out
    assert json.loads(t.close_reason)["exit_code"] == 5

    # another owner's token cannot open a PTY: 404, as if the sandbox did not exist
    bob = sbx_user("bob")
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        connect(d, sid, token=bob.token)
    assert e.value.status_code == 404
    # a plain GET is not a WebSocket handshake
    r = sbx.get(f"/sandboxes/{sid}/exec/pty")
    assert r.status_code == 400 and r.json()["code"] == "websocket_required"
    for bad in ({"cols": "0"}, {"rows": "x"}, {"cmd": ""}):
        with pytest.raises(websocket.WebSocketBadStatusException) as e:
            connect(d, sid, **bad)
        assert e.value.status_code == 400
    # the sandbox still serves
    assert sbx.sh(sid, "echo fine")["stdout"] == "fine\n"


def test_deleting_the_sandbox_ends_its_pty_session(sbx_daemon, sbx):
    d = sbx_daemon
    sid = sbx.create("busybox")["id"]
    t = Term(connect(d, sid))
    t.send("echo ready-$((1+1))\n")
    t.read_until(b"ready-2")
    assert sbx.delete(f"/sandboxes/{sid}", timeout=60).status_code == 200
    code, _ = t.wait_close(timeout=30)
    assert code == 1011
    t.ws.close()


def test_fork_waits_for_an_open_pty_then_refuses(sbx_daemon, sbx):
    """CRIU cannot checkpoint a connection to the host: a fork with a shell open is a 409."""
    d = sbx_daemon
    sid = sbx.create("busybox")["id"]
    t = Term(connect(d, sid))
    try:
        t.send("echo up-$((2+2))\n")
        t.read_until(b"up-4")
        r = sbx.post(f"/sandboxes/{sid}/fork", json={}, timeout=60)
        assert r.status_code == 409 and r.json()["code"] == "sandbox_busy", r.text
        t.send("echo still-$((3+3))\n")
        t.read_until(b"still-6")
    finally:
        t.ws.close()
    # once the session is gone, the fork goes through
    deadline = time.monotonic() + 20 * SLOW
    while True:
        r = sbx.post(f"/sandboxes/{sid}/fork", json={}, timeout=60)
        if r.status_code != 409 or time.monotonic() > deadline:
            break
    assert r.status_code == 200, r.text
    sbx.created.append(r.json()["id"])


# ---- the CLI, driven through a real pseudo-terminal ----

def set_size(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class CliTerm:
    """`sandboxer ARGS` on a pty, as a person at a terminal would run it."""

    def __init__(self, d, args, rows=24, cols=80):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": d.workdir,
                   "TERM": "xterm", "SANDBOXER_URL": d.url, "SANDBOXER_TOKEN": d.admin_token}
            os.execve(BIN, [BIN, *args], env)
        set_size(self.fd, rows, cols)
        self.out = b""
        self.status = None

    def send(self, text):
        os.write(self.fd, text.encode())

    def read_until(self, marker, timeout=30):
        deadline = time.monotonic() + timeout
        while marker not in self.out:
            assert time.monotonic() < deadline, f"no {marker!r} in {self.out[-500:]!r}"
            r, _, _ = select.select([self.fd], [], [], 0.2)
            if r:
                try:
                    self.out += os.read(self.fd, 65536)
                except OSError:
                    break  # the child ended: EIO on the master
        return self.out

    def wait(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.out += os.read(self.fd, 65536) if select.select(
                    [self.fd], [], [], 0.1)[0] else b""
            except OSError:
                pass
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(st)
                return self.status
        raise AssertionError(f"the CLI did not end: {self.out[-500:]!r}")

    def kill(self):
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(self.fd)


def test_cli_shell_follows_the_terminal_size_and_exits_with_the_code(sbx_daemon, sbx):
    d = sbx_daemon
    sid = sbx.create("busybox")["id"]
    c = CliTerm(d, ["shell", sid[:12]], rows=30, cols=100)
    try:
        c.send("stty size; echo a-$((5*5))\n")
        assert b"30 100" in c.read_until(b"a-25")
        set_size(c.fd, 50, 160)  # the kernel sends SIGWINCH to the CLI
        time.sleep(0.3)
        c.send("stty size; echo b-$((5*5))\n")
        assert b"50 160" in c.read_until(b"b-25").split(b"a-25", 2)[-1]
        # raw mode: ^C reaches the remote shell, which survives it
        c.send("sleep 30\n")
        time.sleep(0.5)
        c.send("\x03")
        c.send("echo c-$((5*5))\n")
        c.read_until(b"c-25")
        c.send("exit 3\n")
        assert c.wait() == 3
    finally:
        c.kill()


# ---- attach: the console of an interactive sandbox's main process ----

@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_attach_reaches_the_main_process_console(sbx_daemon, sbx):
    d = sbx_daemon
    sid = sbx.create("busybox", interactive=True, args=["/bin/sh"])["id"]
    t = Term(connect(d, sid, route="attach"))
    t.send("echo first-$((10+1))\n")
    t.read_until(b"first-11")
    t.ws.close()  # detaching leaves the main process running
    assert sbx.get(f"/sandboxes/{sid}").json()["status"] == "running"

    t = Term(connect(d, sid, route="attach"))
    # the recent output comes first, then the session goes on
    assert b"first-11" in t.read_until(b"first-11")
    t.resize(90, 33)
    t.send("stty size; echo second-$((10+2))\n")
    assert b"33 90" in t.read_until(b"second-12")
    t.send("exit 7\n")
    code, reason = t.wait_close()
    t.ws.close()
    assert code == 1000 and json.loads(reason)["exit_code"] == 7
    # the main process's output is also its log
    deadline = time.monotonic() + 20 * SLOW
    while sbx.get(f"/sandboxes/{sid}").json()["status"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert b"second-12" in sbx.get(f"/sandboxes/{sid}/logs").content


def test_attach_refuses_sandboxes_without_a_console(sbx_daemon, sbx, sbx_user):
    d = sbx_daemon
    plain = sbx.create("busybox")["id"]
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        connect(d, plain, route="attach")
    assert e.value.status_code == 409
    inter = sbx.create("busybox", interactive=True, args=["/bin/sh"])["id"]
    bob = sbx_user("bob")
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        connect(d, inter, route="attach", token=bob.token)
    assert e.value.status_code == 404


def test_cli_attach_detaches_with_ctrl_bracket(sbx_daemon, sbx):
    d = sbx_daemon
    sid = sbx.create("busybox", interactive=True, args=["/bin/sh"])["id"]
    c = CliTerm(d, ["attach", sid])
    try:
        c.send("echo att-$((4*4))\n")
        c.read_until(b"att-16")
        c.send("\x1d")
        assert c.wait() == 0
    finally:
        c.kill()
    assert sbx.get(f"/sandboxes/{sid}").json()["status"] == "running"
    c = CliTerm(d, ["attach", sid])
    try:
        c.read_until(b"att-16")  # the replay
        c.send("exit 4\n")
        assert c.wait() == 4
    finally:
        c.kill()


def test_interactive_sandbox_survives_hibernate_and_fork(sbx_daemon, sbx_rt, runtime):
    """The console's PTY lives inside the sandbox, so CRIU takes it along. gVisor refuses to
    checkpoint a sandbox that holds a bound host socket, and the console's cannot be let go
    of: there hibernation is refused (409, the sandbox runs on) and a fork keeps the files
    only, both saying why."""
    d, sbx = sbx_daemon, sbx_rt
    sid = sbx.create("busybox", interactive=True, args=["/bin/sh"])["id"]
    t = Term(connect(d, sid, route="attach"))
    t.send("X=remembered-$((20+1))\n")
    t.send("echo set\n")
    t.read_until(b"set\r\n")
    t.ws.close()
    if runtime == "runsc":
        r = sbx.post(f"/sandboxes/{sid}/hibernate", timeout=120)
        assert r.status_code == 409 and "console" in r.json()["detail"], r.text
        r = sbx.post(f"/sandboxes/{sid}/fork", json={}, timeout=120)
        assert r.status_code == 200, r.text
        sbx.created.append(r.json()["id"])
        assert r.json()["memory_preserved"] is False and "console" in r.json()["reason"]
        t = Term(connect(d, sid, route="attach"))  # the source is as it was
        t.send("echo still $X\n")
        assert b"still remembered-21" in t.read_until(b"still remembered-21")
        t.ws.close()
        return
    r = sbx.post(f"/sandboxes/{sid}/hibernate", timeout=120)
    assert r.status_code == 200, r.text
    r = sbx.post(f"/sandboxes/{sid}/wake", timeout=120)
    assert r.status_code == 200, r.text
    t = Term(connect(d, sid, route="attach"))
    t.send("echo after-wake $X\n")
    assert b"after-wake remembered-21" in t.read_until(b"after-wake remembered-21")
    t.ws.close()
    r = sbx.post(f"/sandboxes/{sid}/fork", json={}, timeout=120)
    assert r.status_code == 200, r.text
    child = r.json()["id"]
    sbx.created.append(child)
    t = Term(connect(d, child, route="attach"))
    t.send("echo in-child $X\n")
    assert b"in-child remembered-21" in t.read_until(b"in-child remembered-21")
    t.send("exit 9\n")
    assert json.loads(t.wait_close()[1])["exit_code"] == 9
    t.ws.close()


def test_cli_shell_without_a_terminal_passes_input_and_the_exit_code(sbx_daemon, sbx):
    d = sbx_daemon
    sid = sbx.create("busybox")["id"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": d.workdir,
           "SANDBOXER_URL": d.url, "SANDBOXER_TOKEN": d.admin_token}
    p = subprocess.run([BIN, "shell", sid], input=b"echo piped-$((2+3))\nexit 5\n",
                       capture_output=True, env=env, timeout=60)
    assert p.returncode == 5 and b"piped-5\r\n" in p.stdout, p
    p = subprocess.run([BIN, "shell", sid, "--cmd", "exit 7"], stdin=subprocess.DEVNULL,
                       capture_output=True, env=env, timeout=60)
    assert p.returncode == 7, p
    p = subprocess.run([BIN, "shell", "no-such-sandbox"], stdin=subprocess.DEVNULL,
                       capture_output=True, env=env, timeout=60)
    assert p.returncode == 1 and b"no such sandbox" in p.stderr, p
