"""Issue 11, finding 11: only the sandbox's init serves the agent channel (DESIGN invariant 1).

Root in a sandbox can unlink /run/sandboxer/agent.sock (or console.sock) and bind a listener
of its own there. The daemon must then refuse the channel (a clear 502) instead of sending
the owner's next exec, environment included, to the impostor and taking its forged output.
Under gVisor the host sees the gofer as every socket's listener: the agent proves itself with
its token (AUTH), and answers the host only, so an impostor relaying to the real agent is
refused too (docs/runsc.md).
"""
import json
import os
import time

import pytest
import websocket

from test_terminal import Term, connect
from conftest import SLOW

# Binds NAME in /run/sandboxer after removing the agent's socket, then answers every
# connection as an agent would (STARTED, forged STDOUT, EXIT), keeping what it was sent.
IMPOSTOR = r'''
import os, socket, struct, sys
name = sys.argv[1]
path = "/run/sandboxer/" + name
try:
    os.unlink(path)
except FileNotFoundError:
    pass
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
s.listen(8)
open("/impostor-ready", "w").close()
def frame(t, p):
    return struct.pack(">IB", len(p), t) + p
while True:
    c, _ = s.accept()
    c.settimeout(1)
    data = b""
    try:
        while len(data) < 5 or len(data) < 5 + struct.unpack(">I", data[:4])[0]:
            chunk = c.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    with open("/stolen", "ab") as f:
        f.write(data)
    try:
        c.sendall(frame(0x83, b'{"pid": 4242}') + frame(0x84, b"forged\n") +
                  frame(0x86, b'{"exit_code": 0, "signal": null, "timed_out": false}'))
    except OSError:
        pass
    c.close()
'''


def upper(d, sid, path):
    """A file the sandbox wrote, read from its writable layer on the host (the agent channel
    is what the test breaks, so it cannot be asked)."""
    return os.path.join(d.state_dir, "sandboxes", sid, "layer", "upper", path.lstrip("/"))


def start_impostor(d, sbx, sid, name):
    r = sbx.post(f"/sandboxes/{sid}/exec", json={"argv": ["sh", "-c", "cat > /tmp/imp.py"],
                                                 "stdin": IMPOSTOR}, timeout=60)
    assert r.status_code == 200 and r.json()["exit_code"] == 0, r.text
    r = sbx.sh(sid, f"setsid python3 /tmp/imp.py {name} </dev/null >/tmp/imp.log 2>&1 &")
    assert r["exit_code"] == 0, r
    deadline = time.monotonic() + 20 * SLOW
    while not os.path.exists(upper(d, sid, "/impostor-ready")):
        assert time.monotonic() < deadline, "the impostor never listened"
        time.sleep(0.05)


def stolen(d, sid):
    try:
        with open(upper(d, sid, "/stolen"), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return b""
    # What the daemon sends before anything else under gVisor: AUTH, which tells nothing.
    return data.replace(b"\0\0\0\0\x08", b"")


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_a_listener_replacing_agent_sock_gets_no_exec(sbx_daemon, sbx):
    sid = sbx.create("python")["id"]
    start_impostor(sbx_daemon, sbx, sid, "agent.sock")
    r = sbx.post(f"/sandboxes/{sid}/exec",
                 json={"argv": ["sh", "-c", "echo real"], "env": {"SECRET": "s3cr3t-value"}},
                 timeout=60)
    # the daemon refuses the channel, clearly, and never takes the impostor's answer
    assert r.status_code == 502, r.text
    body = r.json()
    assert body["code"] == "agent_impostor" and "replaced it" in body["detail"], body
    assert "forged" not in r.text
    # the impostor received nothing: no command, no environment
    assert b"s3cr3t-value" not in stolen(sbx_daemon, sid) and stolen(sbx_daemon, sid) == b""
    # streamed execs, files and terminals are refused the same way
    with sbx.stream("POST", f"/sandboxes/{sid}/execute", params={"stream": "true"},
                    json={"code": "echo real"}) as s:
        lines = [json.loads(l) for l in s.iter_lines() if l.strip()]
    assert lines[-1]["type"] == "error" and lines[-1]["code"] == "agent_impostor", lines
    assert sbx.get(f"/sandboxes/{sid}/files/etc/hostname").status_code == 502
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        connect(sbx_daemon, sid)
    assert e.value.status_code == 502
    assert stolen(sbx_daemon, sid) == b""
    # the sandbox can still be deleted
    assert sbx.delete(f"/sandboxes/{sid}").status_code == 200


def test_console_keeps_working_after_fork_and_wake_and_refuses_an_impostor(sbx_daemon, sbx):
    d = sbx_daemon
    sid = sbx.create("python", interactive=True, args=["/bin/sh"])["id"]
    t = Term(connect(d, sid, route="attach"))
    t.send("X=kept-$((40+2))\necho set\n")
    t.read_until(b"set\r\n")
    t.ws.close()
    assert sbx.post(f"/sandboxes/{sid}/hibernate", timeout=120).status_code == 200
    assert sbx.post(f"/sandboxes/{sid}/wake", timeout=120).status_code == 200
    t = Term(connect(d, sid, route="attach"))
    t.send("echo woke $X\n")
    t.read_until(b"woke kept-42")
    t.ws.close()
    r = sbx.post(f"/sandboxes/{sid}/fork", json={}, timeout=120)
    assert r.status_code == 200, r.text
    child = r.json()["id"]
    sbx.created.append(child)
    t = Term(connect(d, child, route="attach"))
    t.send("echo child $X\n")
    t.read_until(b"child kept-42")
    t.ws.close()
    # root in the child takes console.sock: attaching is refused, nothing typed reaches it
    start_impostor(d, sbx, child, "console.sock")
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        connect(d, child, route="attach")
    assert e.value.status_code == 502
    assert stolen(d, child) == b""
    # execs (agent.sock, still the init's) keep working in the child
    assert sbx.sh(child, "echo fine")["stdout"] == "fine\n"


# Under gVisor: renames the agent's socket away, binds agent.sock, and relays every
# connection to the real agent, keeping what passes, as a man in the middle would.
RELAY = r'''
import os, socket, threading
real = "/run/sandboxer/agent.real"
os.rename("/run/sandboxer/agent.sock", real)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("/run/sandboxer/agent.sock")
s.listen(8)
open("/impostor-ready", "w").close()
def pipe(a, b, keep):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            if keep:
                with open("/stolen", "ab") as f:
                    f.write(d)
            b.sendall(d)
    except OSError:
        pass
    for x in (a, b):
        try:
            x.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
while True:
    c, _ = s.accept()
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.connect(real)
    with open("/relayed", "a") as f:
        f.write("1")
    threading.Thread(target=pipe, args=(c, u, True), daemon=True).start()
    threading.Thread(target=pipe, args=(u, c, False), daemon=True).start()
'''


def test_runsc_a_relay_to_the_real_agent_gets_no_exec(sbx_daemon, sbx):
    """The agent answers AUTH only to peers on the host: a relay inside the sandbox, which
    would pass the token along, is refused, so the daemon never sends it the exec."""
    sid = sbx.create("python", runtime="runsc")["id"]
    r = sbx.post(f"/sandboxes/{sid}/exec", json={"argv": ["sh", "-c", "cat > /tmp/imp.py"],
                                                 "stdin": RELAY}, timeout=60)
    assert r.status_code == 200 and r.json()["exit_code"] == 0, r.text
    r = sbx.sh(sid, "setsid python3 /tmp/imp.py </dev/null >/tmp/imp.log 2>&1 &")
    deadline = time.monotonic() + 20 * SLOW
    while not os.path.exists(upper(sbx_daemon, sid, "/impostor-ready")):
        assert time.monotonic() < deadline, "the relay never listened"
        time.sleep(0.05)
    r = sbx.post(f"/sandboxes/{sid}/exec",
                 json={"argv": ["sh", "-c", "echo real"], "env": {"SECRET": "s3cr3t-value"}},
                 timeout=60)
    assert r.status_code == 502 and r.json()["code"] == "agent_impostor", r.text
    assert os.path.exists(upper(sbx_daemon, sid, "/relayed"))  # it did reach the real agent
    assert b"s3cr3t-value" not in stolen(sbx_daemon, sid) and b"echo real" not in \
        stolen(sbx_daemon, sid)
    assert sbx.delete(f"/sandboxes/{sid}").status_code == 200
