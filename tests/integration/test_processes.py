"""Background processes: /sandboxes/{id}/processes, owned by the sandbox's agent (PID 1).

Their table and output live in PID 1's memory: fork, hibernate/wake, snapshot start and a
daemon restart keep them, and a follower of their output goes on across all of these."""
import json
import os
import subprocess
import threading
import time

import httpx
import pytest

from conftest import BIN, SLOW



# ---- helpers ----------------------------------------------------------------------------

def start(c, sid, expect=201, **body):
    r = c.post(f"/sandboxes/{sid}/processes", json=body, timeout=60)
    assert r.status_code == expect, r.text
    return r.json()


def proc(c, sid, pid, expect=200):
    r = c.get(f"/sandboxes/{sid}/processes/{pid}", timeout=60)
    assert r.status_code == expect, r.text
    return r.json()


def wait_proc(c, sid, pid, cond, timeout=30, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        p = proc(c, sid, pid)
        if cond(p):
            return p
        assert time.monotonic() < deadline, f"process {pid} never met {what}: {p}"
        time.sleep(0.05)


def wait_exit(c, sid, pid, timeout=30):
    return wait_proc(c, sid, pid, lambda p: p["status"] == "exited", timeout, "exited")


def output(c, sid, pid, cursor=0, expect=200, **params):
    r = c.get(f"/sandboxes/{sid}/processes/{pid}/output", params={"cursor": cursor, **params},
              timeout=60)
    assert r.status_code == expect, r.text
    return r.json()


def text_of(out, stream=None):
    return "".join(ch["data"] for ch in out["chunks"] if stream in (None, ch["stream"]))


def all_output(c, sid, pid, cursor=0):
    """Every byte from cursor to the end of what the agent holds, following next_cursor."""
    text = ""
    while True:
        o = output(c, sid, pid, cursor)
        text += text_of(o)
        if o["next_cursor"] == cursor:
            return text, o
        cursor = o["next_cursor"]


def wait_output(c, sid, pid, needle, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        text, o = all_output(c, sid, pid)
        if needle in text:
            return text, o
        assert time.monotonic() < deadline, f"no {needle!r} in {text[-300:]!r}"
        time.sleep(0.05)


def stdin(c, sid, pid, data, eof=False, expect=200):
    r = c.post(f"/sandboxes/{sid}/processes/{pid}/stdin", content=data,
               params={"eof": "true"} if eof else {}, timeout=60)
    assert r.status_code == expect, r.text
    return r.json()


def signal_(c, sid, pid, sig, expect=200):
    r = c.post(f"/sandboxes/{sid}/processes/{pid}/signal", json={"signal": sig}, timeout=60)
    assert r.status_code == expect, r.text
    return r.json()


class Follower(threading.Thread):
    """Reads a ?stream=true of a process's output in the background, line by line."""

    def __init__(self, c, sid, pid, cursor=0, timeout=240):
        super().__init__(daemon=True)
        self.url = f"/sandboxes/{sid}/processes/{pid}/output"
        self.c, self.cursor, self.timeout = c, cursor, timeout
        self.lines, self.status, self.error = [], None, None
        self.done = threading.Event()

    def run(self):
        try:
            with self.c.stream("GET", self.url, params={"cursor": self.cursor, "stream": "true"},
                               timeout=httpx.Timeout(self.timeout, connect=10)) as r:
                self.status = r.status_code
                for line in r.iter_lines():
                    if line.strip():
                        self.lines.append(json.loads(line))
        except httpx.HTTPError as e:
            self.error = e
        finally:
            self.done.set()

    def text(self):
        return "".join(l["output"] for l in self.lines if l["type"] in ("stdout", "stderr"))

    def types(self):
        return [l["type"] for l in self.lines]

    def wait_for(self, pred, timeout=60, what="a line"):
        deadline = time.monotonic() + timeout * SLOW
        while not any(pred(l) for l in list(self.lines)):
            assert time.monotonic() < deadline, f"no {what} in {self.lines[-5:]}"
            assert not self.done.is_set() or any(pred(l) for l in self.lines), \
                f"stream ended ({self.status}, {self.error}) without {what}: {self.lines[-5:]}"
            time.sleep(0.05)


def check_cursors(lines, start=0):
    """Each output line's cursor is where it ends: continuous, no gap, no overlap."""
    at = start
    for l in lines:
        if l["type"] in ("stdout", "stderr"):
            assert l["cursor"] == at + len(l["output"].encode()), (l, at)
            at = l["cursor"]
        elif l["type"] == "dropped":
            at = l["cursor"]
        elif l["type"] in ("exit", "waiting", "ping"):
            assert l["cursor"] == at, (l, at)
    return at


COUNTER = "i=0; while [ $i -lt {n} ]; do i=$((i+1)); echo line $i; sleep {delay}; done"


def fork(c, sid, **body):
    r = c.post(f"/sandboxes/{sid}/fork", json=body, timeout=120)
    assert r.status_code == 200, r.text
    c.created.append(r.json()["id"])
    return r.json()


# ---- the routes -------------------------------------------------------------------------

@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_start_list_get_output_exit(sbx):
    sid = sbx.create("busybox")["id"]
    p = start(sbx, sid, code="echo out; echo err >&2; sleep 0.3; echo more; exit 3", tag="job")
    assert p["pid"] > 1 and p["status"] == "running" and p["tag"] == "job"
    assert p["argv"] == ["/bin/sh", "-c", "echo out; echo err >&2; sleep 0.3; echo more; exit 3"]
    assert p["command"].startswith("echo out") and p["tty"] is False and p["stdin"] is False
    for key in ("started_at", "ended_at", "exit_code", "signal", "output_start", "output_end"):
        assert key in p
    listed = sbx.get(f"/sandboxes/{sid}/processes").json()["processes"]
    assert [x["pid"] for x in listed] == [p["pid"]]
    done = wait_exit(sbx, sid, p["pid"])
    assert done["exit_code"] == 3 and done["signal"] is None and done["ended_at"] >= \
        done["started_at"]
    o = output(sbx, sid, p["pid"])
    assert text_of(o, "stdout") == "out\nmore\n" and text_of(o, "stderr") == "err\n"
    assert [ch["stream"] for ch in o["chunks"]] == ["stdout", "stderr", "stdout"]
    assert o["done"] is True and o["start"] == 0 and o["dropped"] == 0
    assert o["next_cursor"] == o["process"]["output_end"] == len("out\nerr\nmore\n")
    assert o["chunks"][-1]["cursor"] == o["next_cursor"]
    tail = output(sbx, sid, p["pid"], cursor=4)  # from the middle
    assert text_of(tail) == "err\nmore\n" and tail["start"] == 4
    assert output(sbx, sid, p["pid"], cursor=o["next_cursor"])["chunks"] == []


def test_argv_runs_directly_and_a_missing_program_is_an_exit_record(sbx):
    sid = sbx.create("busybox")["id"]
    p = start(sbx, sid, argv=["echo", "a b", "$HOME"], env={"X": "1"}, cwd="/tmp")
    assert wait_exit(sbx, sid, p["pid"])["exit_code"] == 0
    assert text_of(output(sbx, sid, p["pid"])) == "a b $HOME\n"
    p = start(sbx, sid, argv=["sh", "-c", "pwd; echo $X; id -u"], env={"X": "y"}, cwd="/tmp",
              user="sbx")
    wait_exit(sbx, sid, p["pid"])
    assert text_of(output(sbx, sid, p["pid"])) == "/tmp\ny\n1000\n"
    missing = start(sbx, sid, argv=["no-such-program"])
    assert missing["status"] == "exited" and missing["exit_code"] == 127
    assert "no-such-program" in text_of(output(sbx, sid, missing["pid"]), "stderr")
    r = sbx.post(f"/sandboxes/{sid}/processes", json={"argv": ["sh"], "cwd": "/no/such/dir"})
    assert r.status_code == 400 and r.json()["code"] == "bad_cwd"
    r = sbx.post(f"/sandboxes/{sid}/processes", json={"argv": ["sh"], "user": "nobody-here"})
    assert r.status_code == 400 and r.json()["code"] == "bad_user"


def test_bad_input_gets_clear_errors(sbx, sbx_user):
    sid = sbx.create("busybox")["id"]
    url = f"/sandboxes/{sid}/processes"
    cases = [
        (b"{not json", 400), (b"[]", 400),
        (json.dumps({"argv": "ls"}).encode(), 400), (json.dumps({"argv": []}).encode(), 400),
        (json.dumps({"argv": [""]}).encode(), 400), (json.dumps({"argv": [1]}).encode(), 400),
        (json.dumps({"code": ""}).encode(), 400), (json.dumps({}).encode(), 400),
        (json.dumps({"code": "x", "argv": ["x"]}).encode(), 400),
        (json.dumps({"code": "x", "bogus": 1}).encode(), 400),
        (json.dumps({"code": "x", "tty": "yes"}).encode(), 400),
        (json.dumps({"code": "x", "stdin": 5}).encode(), 400),
        (json.dumps({"code": "x", "env": {"A": 1}}).encode(), 400),
        (json.dumps({"code": "x", "cols": 0, "tty": True}).encode(), 400),
        (json.dumps({"code": "x", "tag": "t" * 300}).encode(), 400),
        (json.dumps({"code": "x", "stdin": "x" * (300 * 1024)}).encode(), 413),
    ]
    for body, status in cases:
        r = sbx.post(url, content=body)
        assert r.status_code == status, (body[:60], r.text)
        assert r.json()["code"] and r.json()["detail"]
    assert sbx.get(url).json()["processes"] == [], "nothing was started by bad requests"
    p = start(sbx, sid, code="sleep 100")
    pid = p["pid"]
    assert sbx.get(f"{url}/999999").status_code == 404
    assert sbx.get(f"{url}/999999").json()["code"] == "process_not_found"
    assert sbx.get(f"{url}/abc").status_code == 400
    assert sbx.get(f"{url}/0").status_code == 400
    for path in (f"{url}/999999/output", f"{url}/999999/output?stream=true"):
        assert sbx.get(path).status_code == 404
    assert sbx.post(f"{url}/999999/stdin", content=b"x").status_code == 404
    assert sbx.post(f"{url}/999999/signal", json={"signal": "TERM"}).status_code == 404
    assert sbx.delete(f"{url}/999999").status_code == 404
    r = sbx.get(f"{url}/{pid}/output", params={"cursor": 10})
    assert r.status_code == 400 and r.json()["code"] == "invalid_cursor"
    r = sbx.get(f"{url}/{pid}/output", params={"cursor": 10, "stream": "true"})
    assert r.status_code == 400 and r.json()["code"] == "invalid_cursor"
    for q in ({"cursor": -1}, {"cursor": "x"}, {"limit": 0}, {"limit": 2 << 20}):
        assert sbx.get(f"{url}/{pid}/output", params=q).status_code == 400, q
    for body in ({"signal": "NOPE"}, {"signal": 0}, {"signal": 65}, {}, {"signal": "TERM", "x": 1}):
        assert sbx.post(f"{url}/{pid}/signal", json=body).status_code == 400, body
    assert sbx.patch(f"{url}/{pid}", json={"cols": 0, "rows": 10}).status_code == 400
    assert sbx.patch(f"{url}/{pid}", json={"cols": 80, "rows": 24}).status_code == 409
    r = sbx.post(f"{url}/{pid}/stdin", content=b"x")
    assert r.status_code == 409 and r.json()["code"] == "stdin_closed"
    assert sbx.post(f"{url}/{pid}/stdin", content=b"x" * (300 * 1024)).status_code == 413
    # another owner: the same 404 as an unknown sandbox, for every route
    bob = sbx_user("bob")
    for method, path in (("GET", url), ("POST", url), ("GET", f"{url}/{pid}"),
                         ("GET", f"{url}/{pid}/output"), ("GET", f"{url}/{pid}/output?stream=true"),
                         ("POST", f"{url}/{pid}/stdin"), ("POST", f"{url}/{pid}/signal"),
                         ("PATCH", f"{url}/{pid}"), ("DELETE", f"{url}/{pid}")):
        body = {"code": "true"} if method == "POST" and path == url else \
            {"signal": "KILL"} if path.endswith("signal") else \
            {"cols": 80, "rows": 24} if method == "PATCH" else None
        r = bob.request(method, path, json=body)
        assert r.status_code == 404 and r.json()["code"] == "sandbox_not_found", (method, path)
        r = bob.request(method, path.replace(sid, "0" * 64), json=body)
        assert r.status_code == 404 and r.json()["code"] == "sandbox_not_found", (method, path)
    assert proc(sbx, sid, pid)["status"] == "running", "bob changed nothing"


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_stdin_pipe_and_eof(sbx):
    sid = sbx.create("busybox")["id"]
    p = start(sbx, sid, argv=["cat"], stdin=True)
    assert p["stdin"] is True
    stdin(sbx, sid, p["pid"], b"hello\n")
    wait_output(sbx, sid, p["pid"], "hello\n")
    big = os.urandom(100 * 1024).hex().encode()  # 200 KiB
    stdin(sbx, sid, p["pid"], big)
    wait_output(sbx, sid, p["pid"], big[-64:].decode())
    after = stdin(sbx, sid, p["pid"], b"bye\n", eof=True)
    assert after["stdin"] is False
    done = wait_exit(sbx, sid, p["pid"])
    assert done["exit_code"] == 0
    text, _ = all_output(sbx, sid, p["pid"])
    assert text == "hello\n" + big.decode() + "bye\n"
    r = sbx.post(f"/sandboxes/{sid}/processes/{p['pid']}/stdin", content=b"late")
    assert r.status_code == 409 and r.json()["code"] == "process_exited"
    # a stdin string is written first, then closed (as exec's stdin)
    p = start(sbx, sid, code="wc -l; cat", stdin="a\nb\nc\n")
    wait_exit(sbx, sid, p["pid"])
    assert text_of(output(sbx, sid, p["pid"])).startswith("3\n")


def test_stdin_eof_reaches_the_process_while_sessions_and_keepers_run(sbx):
    """No copy of a stdin pipe's write end stays in an exec session or a PTY keeper (they
    are forked from PID 1 while it holds it): EOF still comes."""
    sid = sbx.create("busybox")["id"]
    cat = start(sbx, sid, argv=["cat"], stdin=True)
    tty = start(sbx, sid, argv=["sh"], tty=True)  # its keeper is forked now
    other = start(sbx, sid, argv=["sleep", "100"])
    holder = threading.Thread(target=lambda: sbx.sh(sid, "sleep 3"), daemon=True)
    holder.start()  # an exec session, forked while cat's stdin pipe exists
    time.sleep(0.5)
    t0 = time.monotonic()
    stdin(sbx, sid, cat["pid"], b"x\n", eof=True)
    assert wait_exit(sbx, sid, cat["pid"], timeout=10)["exit_code"] == 0
    assert time.monotonic() - t0 < 2.5, "EOF waited for the exec session"
    holder.join(30)
    for p in (tty, other):
        assert proc(sbx, sid, p["pid"])["status"] == "running"


def test_signal_and_delete(sbx):
    sid = sbx.create("busybox")["id"]
    p = start(sbx, sid, code="trap 'echo got-term; exit 7' TERM; while true; do sleep 0.1; done")
    time.sleep(0.3)
    signal_(sbx, sid, p["pid"], "TERM")
    done = wait_exit(sbx, sid, p["pid"])
    assert done["exit_code"] == 7 and "got-term" in text_of(output(sbx, sid, p["pid"]))
    p = start(sbx, sid, argv=["sleep", "100"])
    r = signal_(sbx, sid, p["pid"], 9)
    assert r["pid"] == p["pid"]
    done = wait_exit(sbx, sid, p["pid"])
    assert done["exit_code"] == 137 and done["signal"] == 9
    assert signal_(sbx, sid, p["pid"], "SIGKILL", expect=409)["code"] == "process_exited"
    # delete kills the whole group (a child in the background too) and forgets it
    p = start(sbx, sid, code="sleep 101 & sleep 102")
    time.sleep(0.3)
    r = sbx.delete(f"/sandboxes/{sid}/processes/{p['pid']}")
    assert r.status_code == 200 and r.json() == {"pid": p["pid"], "deleted": True}
    proc(sbx, sid, p["pid"], expect=404)
    deadline = time.monotonic() + 10 * SLOW
    while "sleep 10" in sbx.sh(sid, "ps -o args")["stdout"]:
        assert time.monotonic() < deadline, "the process group survived its delete"
        time.sleep(0.1)
    assert sbx.delete(f"/sandboxes/{sid}/processes/{p['pid']}").status_code == 404
    # both ends are events of the sandbox
    seen = set()
    with sbx.stream("GET", "/events", timeout=httpx.Timeout(10, connect=10)) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                ev = json.loads(line[6:])
                if ev["container_id"] == sid and (ev.get("data") or {}).get("pid") == p["pid"]:
                    seen.add(ev["type"])
            if seen == {"process_started", "process_deleted"}:
                break
    assert seen == {"process_started", "process_deleted"}
    # an exited one can be deleted too
    p = start(sbx, sid, code="true")
    wait_exit(sbx, sid, p["pid"])
    assert sbx.delete(f"/sandboxes/{sid}/processes/{p['pid']}").status_code == 200
    assert all(x["pid"] != p["pid"] for x in
               sbx.get(f"/sandboxes/{sid}/processes").json()["processes"])


def test_output_ring_reports_what_it_dropped(sbx):
    sid = sbx.create("busybox")["id"]
    # 3 MiB on stdout: the ring keeps the last 1 MiB
    p = start(sbx, sid, code="head -c 3145728 /dev/zero | tr '\\0' x; echo; echo END")
    done = wait_exit(sbx, sid, p["pid"])
    total = 3145728 + len("\nEND\n")
    assert done["output_end"] == total and done["output_start"] == total - (1 << 20)
    o = output(sbx, sid, p["pid"], cursor=0)
    assert o["dropped"] == done["output_start"] and o["start"] == done["output_start"]
    assert len(text_of(o)) == 256 * 1024, "at most 256 KiB an answer by default"
    o = output(sbx, sid, p["pid"], cursor=done["output_start"], limit=1 << 20)
    assert len(text_of(o)) == 1 << 20 and text_of(o).endswith("x\nEND\n") and o["done"]
    f = Follower(sbx, sid, p["pid"], cursor=5)
    f.start()
    f.done.wait(60)
    assert f.lines[0] == {"type": "dropped", "bytes": done["output_start"] - 5,
                          "cursor": done["output_start"]}
    assert f.text() == "x" * ((1 << 20) - 5) + "\nEND\n"
    assert f.lines[-1]["type"] == "exit" and f.lines[-1]["cursor"] == total
    check_cursors(f.lines, 5)


def test_stream_follows_until_the_exit_and_resumes_from_a_cursor(sbx):
    sid = sbx.create("busybox")["id"]
    p = start(sbx, sid, code=COUNTER.format(n=20, delay=0.05) + "; echo oops >&2; exit 4")
    f = Follower(sbx, sid, p["pid"])
    f.start()
    assert f.done.wait(60) and f.status == 200
    expected = "".join(f"line {i}\n" for i in range(1, 21)) + "oops\n"
    assert f.text() == expected
    end = check_cursors(f.lines)
    assert f.lines[-1] == {"type": "exit", "output": "Process exited with code 4",
                           "exit_code": 4, "signal": None, "cursor": end}
    mid = next(l for l in f.lines if l["type"] == "stdout" and "line 10" in l["output"])
    g = Follower(sbx, sid, p["pid"], cursor=mid["cursor"])
    g.start()
    assert g.done.wait(30)
    assert f.text()[:mid["cursor"]] + g.text() == expected
    # a UTF-8 character cut in two by the writer is never split in a line
    p = start(sbx, sid, code="printf '\\303'; sleep 0.3; printf '\\251 done\\n'")
    h = Follower(sbx, sid, p["pid"])
    h.start()
    assert h.done.wait(30)
    assert h.text() == "\u00e9 done\n" and check_cursors(h.lines) == 8


def test_bounds_running_and_exited(sbx):
    sid = sbx.create("busybox", pids=1024)["id"]
    pids = [start(sbx, sid, argv=["sleep", "1000"])["pid"] for _ in range(64)]
    r = sbx.post(f"/sandboxes/{sid}/processes", json={"argv": ["true"]})
    assert r.status_code == 429 and r.json()["code"] == "too_many_processes"
    sbx.delete(f"/sandboxes/{sid}/processes/{pids[0]}")
    quick = [start(sbx, sid, argv=["true"])["pid"]]
    for pid in pids[1:4]:
        signal_(sbx, sid, pid, "KILL")
    # 70 more that end at once: only the 64 most recently ended are kept
    for _ in range(70):
        p = start(sbx, sid, argv=["true"])
        wait_exit(sbx, sid, p["pid"])
        quick.append(p["pid"])
    listed = sbx.get(f"/sandboxes/{sid}/processes").json()["processes"]
    exited = [x["pid"] for x in listed if x["status"] == "exited"]
    running = [x["pid"] for x in listed if x["status"] == "running"]
    assert len(exited) == 64 and sorted(running) == sorted(pids[4:])
    assert exited == quick[-64:], "the oldest ended ones were forgotten first"
    proc(sbx, sid, quick[0], expect=404)


def test_pty_process(sbx):
    sid = sbx.create("busybox")["id"]
    p = start(sbx, sid, argv=["sh"], tty=True, cols=100, rows=30, env={"PS1": "$ "})
    assert p["tty"] is True and p["stdin"] is True
    stdin(sbx, sid, p["pid"], b"stty size; tty; echo $((6*7)) $TERM\r")
    text, _ = wait_output(sbx, sid, p["pid"], "42 xterm")
    assert "30 100" in text and "/dev/pts/" in text
    r = sbx.patch(f"/sandboxes/{sid}/processes/{p['pid']}", json={"cols": 120, "rows": 40})
    assert r.status_code == 200 and r.json()["pid"] == p["pid"]
    stdin(sbx, sid, p["pid"], b"stty size\r")
    wait_output(sbx, sid, p["pid"], "40 120")
    stdin(sbx, sid, p["pid"], b"exit 5\r")
    assert wait_exit(sbx, sid, p["pid"])["exit_code"] == 5
    # no keeper is left behind
    assert "pty-keeper" not in sbx.sh(sid, "ps -o comm")["stdout"]
    # ^D on a terminal, through ?eof=true
    p = start(sbx, sid, argv=["cat"], tty=True)
    stdin(sbx, sid, p["pid"], b"abc\r")
    stdin(sbx, sid, p["pid"], b"", eof=True)
    assert wait_exit(sbx, sid, p["pid"])["exit_code"] == 0
    assert "abc" in text_of(output(sbx, sid, p["pid"]))


# ---- lifecycle: fork, hibernate, snapshot, restart --------------------------------------

@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_fork_keeps_processes_and_their_output(sbx):
    sid = sbx.create("busybox")["id"]
    p = start(sbx, sid, code=COUNTER.format(n=100000, delay=0.02), tag="counter")
    cat = start(sbx, sid, argv=["cat"], stdin=True)
    stdin(sbx, sid, cat["pid"], b"before\n")
    wait_output(sbx, sid, p["pid"], "line 5\n")
    wait_output(sbx, sid, cat["pid"], "before\n")
    child = fork(sbx, sid, label="child")
    assert child["memory_preserved"] is True
    cid = child["id"]
    listed = {x["pid"]: x for x in sbx.get(f"/sandboxes/{cid}/processes").json()["processes"]}
    assert listed[p["pid"]]["status"] == "running" and listed[p["pid"]]["tag"] == "counter"
    assert listed[cat["pid"]]["stdin"] is True
    # the child has the buffered output and its counter goes on, on its own
    text, o = all_output(sbx, cid, p["pid"])
    assert text.startswith("line 1\nline 2\n")
    n = len(text.splitlines())
    wait_output(sbx, cid, p["pid"], f"line {n + 20}\n")
    stdin(sbx, cid, cat["pid"], b"in-child\n")
    stdin(sbx, sid, cat["pid"], b"in-parent\n")
    ctext, _ = wait_output(sbx, cid, cat["pid"], "in-child\n")
    ptext, _ = wait_output(sbx, sid, cat["pid"], "in-parent\n")
    assert ctext == "before\nin-child\n" and ptext == "before\nin-parent\n"
    # deleting in one does not touch the other
    assert sbx.delete(f"/sandboxes/{cid}/processes/{p['pid']}").status_code == 200
    assert proc(sbx, sid, p["pid"])["status"] == "running"


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_hibernate_and_wake_keep_processes_and_output(sbx):
    sid = sbx.create("busybox")["id"]
    p = start(sbx, sid, code=COUNTER.format(n=100000, delay=0.02))
    done = start(sbx, sid, code="echo finished")
    wait_exit(sbx, sid, done["pid"])
    wait_output(sbx, sid, p["pid"], "line 5\n")
    r = sbx.post(f"/sandboxes/{sid}/hibernate", timeout=120)
    assert r.status_code == 200, r.text
    assert sbx.get(f"/sandboxes/{sid}").json()["status"] == "hibernated"
    # a process request wakes it, as an exec does
    listed = {x["pid"]: x for x in
              sbx.get(f"/sandboxes/{sid}/processes", timeout=120).json()["processes"]}
    assert sbx.get(f"/sandboxes/{sid}").json()["status"] == "running"
    assert listed[p["pid"]]["status"] == "running" and listed[done["pid"]]["exit_code"] == 0
    text, _ = all_output(sbx, sid, p["pid"])
    n = len(text.splitlines())
    wait_output(sbx, sid, p["pid"], f"line {n + 10}\n")
    assert text_of(output(sbx, sid, done["pid"])) == "finished\n"


def test_snapshot_start_keeps_processes(sbx):
    sid = sbx.create("busybox")["id"]
    p = start(sbx, sid, code=COUNTER.format(n=100000, delay=0.02))
    wait_output(sbx, sid, p["pid"], "line 3\n")
    r = sbx.post(f"/sandboxes/{sid}/snapshots", json={"name": "procs-warm"}, timeout=120)
    assert r.status_code == 201, r.text
    new = sbx.post("/sandboxes", json={"snapshot": "procs-warm"}, timeout=120)
    assert new.status_code == 200, new.text
    nid = new.json()["id"]
    sbx.created.append(nid)
    assert proc(sbx, nid, p["pid"])["status"] == "running"
    text, _ = all_output(sbx, nid, p["pid"])
    n = len(text.splitlines())
    assert text.startswith("line 1\n")
    wait_output(sbx, nid, p["pid"], f"line {n + 10}\n")
    sbx.delete("/snapshots/procs-warm")


def test_stream_goes_on_across_fork_and_hibernation(sbx):
    sid = sbx.create("busybox")["id"]
    p = start(sbx, sid, code=COUNTER.format(n=150, delay=0.05) + "; exit 9")
    f = Follower(sbx, sid, p["pid"])
    f.start()
    f.wait_for(lambda l: l["type"] == "stdout" and "line 10\n" in l["output"])
    # a fork takes the sandbox's write lock: the follower lets go at once
    t0 = time.monotonic()
    child = fork(sbx, sid)
    print("fork with a follower took", time.monotonic() - t0)
    assert time.monotonic() - t0 < 5
    f.wait_for(lambda l: l["type"] == "stdout" and "line 40\n" in l["output"])
    # hibernation: the stream waits (without waking it), then goes on after a wake
    r = sbx.post(f"/sandboxes/{sid}/hibernate", timeout=120)
    assert r.status_code == 200, r.text
    f.wait_for(lambda l: l["type"] == "waiting", what="a waiting line")
    seen = len(f.lines)
    time.sleep(1.5)
    assert sbx.get(f"/sandboxes/{sid}").json()["status"] == "hibernated", "following woke it"
    assert all(l["type"] in ("waiting", "ping") for l in f.lines[seen:])
    assert sbx.post(f"/sandboxes/{sid}/wake", timeout=120).status_code == 200
    assert f.done.wait(60), f.lines[-3:]
    assert f.status == 200 and f.lines[-1]["type"] == "exit" and f.lines[-1]["exit_code"] == 9
    assert f.text() == "".join(f"line {i}\n" for i in range(1, 151))
    check_cursors(f.lines)
    # the child's copy of the process ran on its own to the same end
    c = Follower(sbx, child["id"], p["pid"])
    c.start()
    assert c.done.wait(60) and c.lines[-1]["exit_code"] == 9
    assert c.text() == f.text()


def test_follow_resumes_across_a_daemon_restart(sbx_daemon, sbx):
    sid = sbx.create("busybox")["id"]
    p = start(sbx, sid, code=COUNTER.format(n=80, delay=0.05))
    f = Follower(sbx, sid, p["pid"])
    f.start()
    f.wait_for(lambda l: l["type"] == "stdout" and "line 5\n" in l["output"])
    sbx_daemon.stop()
    assert f.done.wait(30), "the stream ends with the daemon"
    last = [l for l in f.lines if "cursor" in l][-1]["cursor"]
    time.sleep(1)  # it keeps running meanwhile
    sbx_daemon.start()
    g = Follower(sbx, sid, p["pid"], cursor=last)
    g.start()
    assert g.done.wait(60) and g.lines[-1]["type"] == "exit"
    whole = f.text()[:last] + g.text()
    assert whole == "".join(f"line {i}\n" for i in range(1, 81))
    check_cursors(g.lines, last)


def test_pty_process_survives_fork_and_hibernation(sbx):
    sid = sbx.create("busybox")["id"]
    p = start(sbx, sid, argv=["sh"], tty=True, env={"PS1": "$ "})
    stdin(sbx, sid, p["pid"], b"echo one-$((1+1))\r")
    wait_output(sbx, sid, p["pid"], "one-2")
    child = fork(sbx, sid)
    stdin(sbx, sid, p["pid"], b"echo parent-$((2+1))\r")
    stdin(sbx, child["id"], p["pid"], b"echo child-$((3+1))\r")
    wait_output(sbx, sid, p["pid"], "parent-3")
    text, _ = wait_output(sbx, child["id"], p["pid"], "child-4")
    assert "parent-3" not in text and "one-2" in text
    assert sbx.post(f"/sandboxes/{sid}/hibernate", timeout=120).status_code == 200
    assert sbx.post(f"/sandboxes/{sid}/wake", timeout=120).status_code == 200
    stdin(sbx, sid, p["pid"], b"echo woke-$((4+1))\r")
    wait_output(sbx, sid, p["pid"], "woke-5")
    stdin(sbx, sid, p["pid"], b"exit 3\r")
    assert wait_exit(sbx, sid, p["pid"])["exit_code"] == 3


def test_following_is_not_activity_the_idle_sandbox_hibernates(sbx):
    sid = sbx.create("busybox", idle_timeout=2)["id"]
    p = start(sbx, sid, code="echo started; while true; do sleep 1; done")
    f = Follower(sbx, sid, p["pid"])
    f.start()
    f.wait_for(lambda l: l["type"] == "stdout" and l["output"] == "started\n")
    deadline = time.monotonic() + 30 * SLOW
    while sbx.get(f"/sandboxes/{sid}").json()["status"] != "hibernated":
        assert time.monotonic() < deadline, "a follower kept the idle sandbox awake"
        time.sleep(0.2)
    f.wait_for(lambda l: l["type"] == "waiting", what="a waiting line")
    assert not f.done.is_set()
    # a request on the process wakes it; the stream goes on to the end
    signal_(sbx, sid, p["pid"], "KILL")
    assert f.done.wait(60 * SLOW)
    assert f.lines[-1]["type"] == "exit" and f.lines[-1]["signal"] == 9, f.lines[-3:]
    check_cursors(f.lines)


# ---- the CLI ----------------------------------------------------------------------------

def cli(d, *args, check=True, timeout=60, stdin_text=None):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": d.workdir,
           "SANDBOXER_SOCKET": d.socket, "SANDBOXER_TOKEN": d.admin_token}
    p = subprocess.run([BIN, *args], env=env, capture_output=True, text=True, timeout=timeout,
                       input=stdin_text)
    if check:
        assert p.returncode == 0, (args, p.returncode, p.stdout, p.stderr)
    return p


def test_cli_exec_detached_ps_logs_kill(sbx_daemon, sbx):
    sid = sbx.create("busybox")["id"]
    pid = int(cli(sbx_daemon, "exec", "-d", sid, "--tag", "ticker", "--",
                  "sh", "-c", "echo hello; echo oops >&2; exec sleep 1000").stdout)
    assert proc(sbx, sid, pid)["tag"] == "ticker"
    wait_output(sbx, sid, pid, "oops")
    table = cli(sbx_daemon, "ps", sid).stdout
    assert "PID" in table and str(pid) in table and "running" in table and "ticker" in table
    listed = json.loads(cli(sbx_daemon, "ps", sid, "--json").stdout)["processes"]
    assert listed[0]["pid"] == pid
    p = cli(sbx_daemon, "logs", sid, "--process", str(pid))
    assert p.stdout == "hello\n" and p.stderr == "oops\n"
    assert cli(sbx_daemon, "kill", sid, str(pid), "--signal", "INT").stdout.strip() == str(pid)
    done = wait_exit(sbx, sid, pid)
    assert done["signal"] == 2 and done["exit_code"] == 130
    assert "130 (signal 2)" in cli(sbx_daemon, "ps", sid).stdout
    p = cli(sbx_daemon, "kill", sid, str(pid), check=False)
    assert p.returncode == 1 and "409" in p.stderr
    # --code, followed to its end with -f
    code_pid = cli(sbx_daemon, "exec", "-d", sid, "--code",
                   "for i in 1 2 3; do echo n$i; sleep 0.2; done; echo bad >&2").stdout.strip()
    p = cli(sbx_daemon, "logs", sid, "--process", code_pid, "-f")
    assert p.stdout == "n1\nn2\nn3\n" and p.stderr == "bad\n"
    lines = [json.loads(l) for l in
             cli(sbx_daemon, "logs", sid, "--process", code_pid, "-f", "--json").stdout.splitlines()]
    assert lines[-1]["type"] == "exit" and lines[-1]["exit_code"] == 0
    # a default TERM; --stdin with -d
    pid = cli(sbx_daemon, "exec", "-d", sid, "--stdin", "--", "cat", stdin_text="piped\n").stdout
    wait_exit(sbx, sid, int(pid))
    assert cli(sbx_daemon, "logs", sid, "--process", pid.strip()).stdout == "piped\n"
    pid = cli(sbx_daemon, "exec", "-d", sid, "--", "sleep", "1000").stdout.strip()
    cli(sbx_daemon, "kill", sid, pid)
    assert wait_exit(sbx, sid, int(pid))["signal"] == 15
    # usage errors
    for args in (("exec", "-d", sid, "--timeout", "1", "--", "true"),
                 ("exec", sid, "--tag", "x", "--", "true"), ("kill", sid, "abc"),
                 ("logs", sid, "--process", "x")):
        p = cli(sbx_daemon, *args, check=False)
        assert p.returncode == 2, (args, p.stderr)
    p = cli(sbx_daemon, "logs", sid, "--process", "999999", check=False)
    assert p.returncode == 1 and "404" in p.stderr


def test_cli_logs_follow_resumes_across_a_daemon_restart(sbx_daemon, sbx):
    sid = sbx.create("busybox")["id"]
    pid = start(sbx, sid, code=COUNTER.format(n=60, delay=0.1))["pid"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": sbx_daemon.workdir,
           "SANDBOXER_URL": sbx_daemon.url, "SANDBOXER_TOKEN": sbx_daemon.admin_token}
    follower = subprocess.Popen([BIN, "logs", sid, "--process", str(pid), "-f"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_output(sbx, sid, pid, "line 10\n")
        sbx_daemon.stop()
        time.sleep(1)
        sbx_daemon.start()
        out, errs = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, errs
    assert out == "".join(f"line {i}\n" for i in range(1, 61))
