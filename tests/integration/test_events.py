"""GET /events: the caller's sandbox events as SSE, in order, resumable without loss."""
import json
import threading

import httpx
import pytest

from test_fork import fork


def read_events(c, n, headers=None, timeout=30, params=None):
    """The next n events of the stream as (id, event, data) tuples (fewer after timeout s)."""
    import time
    deadline = time.monotonic() + timeout
    out = []
    with c.stream("GET", "/events", headers=headers or {}, params=params, timeout=5) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        cur = {}
        for line in r.iter_lines():
            line = line.rstrip("\r\n")
            if time.monotonic() > deadline:
                break
            if line.startswith("id: "):
                cur["id"] = int(line[4:])
            elif line.startswith("event: "):
                cur["event"] = line[7:]
            elif line.startswith("data: "):  # our events end with their one data line
                out.append((cur["id"], cur["event"], json.loads(line[6:])))
                cur = {}
                if len(out) == n:
                    break
    return out


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_events_arrive_in_order_and_resume(sbx, sbx_user):
    bob = sbx_user("bob")
    bob.create("busybox")  # another owner's events never show
    sid = sbx.create("busybox")["id"]
    sbx.sh(sid, "echo hi")
    child = fork(sbx, sid)["id"]
    sbx.delete(f"/sandboxes/{child}")
    events = read_events(sbx, 5)
    kinds = [(e, d["container_id"]) for _, e, d in events]
    assert kinds == [("created", sid), ("exec", sid), ("forked", sid), ("created", child),
                     ("deleted", child)], kinds
    for _, e, d in events:
        assert d["type"] == e and isinstance(d["timestamp"], float) and "data" in d
    assert events[2][2]["data"]["child_id"] == child
    # a reconnect with Last-Event-ID gets exactly what came after it
    sbx.put(f"/sandboxes/{sid}/pause")
    sbx.delete(f"/sandboxes/{sid}/pause")
    missed = read_events(sbx, 2, headers={"Last-Event-ID": str(events[-1][0])})
    assert [e for _, e, _ in missed] == ["paused", "unpaused"]
    assert missed[0][0] > events[-1][0]


def test_live_events_and_bad_cursor(sbx):
    got = []

    def listen():
        got.extend(read_events(sbx, 1, timeout=30))
    t = threading.Thread(target=listen)
    t.start()
    import time
    time.sleep(0.5)
    sid = sbx.create("busybox")["id"]
    t.join(30)
    assert got and got[0][1] == "created" and got[0][2]["container_id"] == sid
    assert sbx.get("/events", headers={"Last-Event-ID": "nope"}).status_code == 400
    assert httpx.get(str(sbx.http.base_url) + "/events").status_code == 401


def test_since_skips_the_history(sbx):
    import time
    first = sbx.create("busybox")["id"]
    time.sleep(0.05)
    mark = time.time()
    time.sleep(0.05)
    second = sbx.create("busybox")["id"]
    # from a time: only what came after it
    got = read_events(sbx, 1, params={"since": f"{mark:.3f}"}, timeout=10)
    assert got[0][1] == "created" and got[0][2]["container_id"] == second
    # now: nothing of the history, then what happens next
    got = []

    def listen():
        got.extend(read_events(sbx, 1, params={"since": "now"}, timeout=30))
    t = threading.Thread(target=listen)
    t.start()
    time.sleep(0.5)
    sbx.sh(first, "true")
    t.join(30)
    assert got and got[0][1] == "exec" and got[0][2]["container_id"] == first, got
    for bad in ("soon", "-5", ""):
        assert sbx.get("/events", params={"since": bad}).status_code == 400


def test_cli_events_prints_them(sbx_daemon, sbx):
    import os
    import subprocess
    from conftest import BIN
    sid = sbx.create("busybox")["id"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": sbx_daemon.workdir,
           "SANDBOXER_URL": sbx_daemon.url, "SANDBOXER_TOKEN": sbx_daemon.admin_token}
    p = subprocess.run(["timeout", "3", BIN, "events", "--json"], env=env, capture_output=True,
                       text=True, timeout=30)
    first = json.loads(p.stdout.splitlines()[0])
    assert first["type"] == "created" and first["container_id"] == sid
    p = subprocess.run(["timeout", "3", BIN, "events"], env=env, capture_output=True, text=True,
                       timeout=30)
    assert "created" in p.stdout and sid[:12] in p.stdout
