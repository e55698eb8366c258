#!/usr/bin/python3
"""Soak: a long run of random lifecycle operations on one daemon, checking every --check-every
operations that nothing leaks and that the daemon stays as fast and as small as it started.

Not part of the default `bench/run` set (it takes 15-30 minutes): `bench/run --only soak`.

About --soak-sandboxes (20) sandboxes of the node test image (python3 + nodejs) run
workloads from tests/integration/workloads, copied in through the files API and started
through exec the way agents start them (`nohup python3 /tmp/wl/threads.py ... &`, a server,
a self-daemonizing process, a pipeline, unix sockets, sqlite in WAL mode, /dev/shm, TCP over
loopback, epoll/timerfd/eventfd/inotify/signalfd); a few are busybox (a shell loop) or
hello-world (exits at once). Each of --ops (2000) operations is drawn from a seeded RNG
(--seed): create, exec (reads every workload's state: the same process, boot id and a
counter that never goes back), a background process through exec (`... &`), one through
POST /sandboxes/{id}/processes (when the daemon has that route; probed at the start, the
operation is skipped otherwise and the output says so), fork, coalesce, pause, unpause,
hibernate, wake, snapshot + a sandbox started from it, delete. A tenth of the operations
go to a sandbox in any state, so the daemon's refusals (409 sandbox_paused ...) are
exercised too. After a fork, a wake or a start from a snapshot the workloads must go on in
the new or woken sandbox (same boot id, counters growing; the HTTP servers answer through
the daemon's proxy). The population is kept around the target by weighting create and
fork against delete and coalesce.

Every --check-every (100) operations, and after deleting everything at the end, it checks
(bench/soak_probe.py) against what GET /sandboxes says should exist: the daemon's fds and
threads (/proc/<pid>/fd, task) against a baseline, mounts under the state dir, netns
files, veths on its bridge, cgroup dirs, the elements of its nftables table, hibernation
and fork checkpoint dirs, snapshot dirs, and processes (a shim and a runc per running
sandbox, no other runc, CRIU, child or zombie of the daemon, nothing in the cgroup of a
sandbox that does not run). A difference that is still there after 5 s is a leak. It also
checks the daemon's RSS (at most --rss-growth-mb above the first checkpoint), exec p50 on a
reference busybox sandbox and the daemon's CPU over --soak-idle-seconds with nothing asked
(<= 1 %). The exec p50 is taken interleaved, request by request, with the same on an idle
control daemon (a second daemon of the same binary holding one busybox sandbox), and their
ratio must stay within --exec-bound (1.2) of the first checkpoint's: the machine's load,
and the workloads' CPU, hit both alike and cancel out (measured again twice before a
violation counts). One table row per checkpoint, then a summary.

Every request has a time limit (--op-timeout). Answers the API gives by design (409 for a
paused sandbox, a checkpoint CRIU refused ...) are counted by code; a 5xx, another 4xx, a
time-out, a failed check or a sandbox whose status changed on its own is a failure,
reported with the daemon's log lines. Exits 1 on any failure, leak or bound violated.
Cleans up like the other scripts (Session), also on Ctrl-C. Standard library + httpx.
"""
import collections
import copy
import json
import os
import random
import re
import sys
import time

import httpx

from common import (ROOT, Interrupted, Session, check_prerequisites, idle_cpu, interleaved,
                    keep_log_cleanup, log, machine_info, parser, percentile, run)
from soak_probe import Expect, Probe

WORKLOADS_DIR = os.path.join(ROOT, "tests", "integration", "workloads")
NODE_WORKLOADS = 2  # per node sandbox (busybox: the shell loop); bg_exec swaps one
MAX_PROCS = 3  # processes through POST /processes per sandbox
IDLE_CPU_PCT = 1.0
SETTLE_TRIES = 5  # a check that fails is made again, 1 s apart, before it is a leak

# name: (shell code started through exec, ticks on its own, images it runs in)
WORKLOADS = {
    "shell_loop": ("nohup sh -c 'i=0; while :; do i=$((i+1)); "
                   "echo \"{\\\"boot\\\": \\\"$$\\\", \\\"count\\\": $i}\" > /tmp/shell_loop.tmp; "
                   "mv /tmp/shell_loop.tmp /tmp/shell_loop.state; sleep 0.05; done' "
                   ">/dev/null 2>&1 &", True, ("node", "busybox")),
    "threads": ("nohup python3 /tmp/wl/threads.py >/dev/null 2>&1 &", True, ("node",)),
    "httpserver": ("nohup python3 /tmp/wl/httpserver.py >/dev/null 2>&1 &", False, ("node",)),
    "node_server": ("nohup node /tmp/wl/server.js >/dev/null 2>&1 &", True, ("node",)),
    "daemon": ("python3 /tmp/wl/daemon.py", True, ("node",)),
    "pipeline": ("nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i; sleep 0.02; done | "
                 "python3 /tmp/wl/pipeline.py' >/dev/null 2>&1 &", True, ("node",)),
    "unixsock": ("nohup python3 /tmp/wl/unixsock.py >/dev/null 2>&1 &", True, ("node",)),
    "sqlite_wal": ("nohup python3 /tmp/wl/sqlite_wal.py >/dev/null 2>&1 &", True, ("node",)),
    "shm": ("nohup python3 /tmp/wl/shm.py >/dev/null 2>&1 &", True, ("node",)),
    "tcp_loopback": ("nohup python3 /tmp/wl/tcppair.py >/dev/null 2>&1 &", True, ("node",)),
    "fdprobe": ("nohup /tmp/wl/fdprobe >/dev/null 2>&1 &", True, ("node",)),
}
SERVER_PORTS = {"httpserver": 8080, "node_server": 3000}
READ_STATES = 'cd /tmp && for f in *.state; do [ -e "$f" ] && echo "$f $(cat "$f")"; done; true'
PROC_CODE = "i=0; while :; do i=$((i+1)); echo $i; sleep 1; done"

# op: (weight, statuses it works from, statuses in which it has nothing to do)
OPS = {
    "exec": (24, {"running", "hibernated"}, set()),
    "bg_exec": (7, {"running", "hibernated"}, set()),
    "bg_proc": (6, {"running", "hibernated"}, set()),
    "fork": (9, {"running", "paused", "hibernated"}, set()),
    "coalesce": (3, None, None),
    "pause": (6, {"running"}, {"paused"}),
    "unpause": (6, {"paused"}, {"running"}),
    "hibernate": (7, {"running", "paused"}, {"hibernated"}),
    "wake": (6, {"hibernated"}, {"running", "paused"}),
    "snapshot": (4, {"running", "paused", "hibernated"}, set()),
    "delete": (8, None, None),
    "create": (8, None, None),
}
WRONG_CODE = {"paused": "sandbox_paused", "hibernated": "sandbox_hibernated",
              "exited": "sandbox_not_running"}
ANY_STATE = 0.15  # share of operations sent to a sandbox in any state


class Expected(Exception):
    """A 4xx the API gives by design; .code is its error code."""

    def __init__(self, status, code, detail):
        super().__init__(f"{status} {code}: {detail}")
        self.status, self.code, self.detail = status, code, detail


class OpFailure(Exception):
    """A 5xx, an unexpected status, a time-out or a failed check."""


class Box:
    """What the soak knows about one sandbox."""

    def __init__(self, sid, image, parent=None):
        self.id = sid
        self.image = image
        self.status = "running"
        self.parent = parent
        self.workloads = {}  # name -> the state last read: {"boot": ..., "count": ...}
        self.procs = set()  # pids started through POST /processes
        self.sleeps = 0
        self.stuck = False  # a coalesce left it undeleted: no more operations on it

    def inherit(self, other):
        self.workloads = copy.deepcopy(other.workloads)
        self.procs = set(other.procs)
        self.sleeps = other.sleeps


class Soak:
    def __init__(self, args, sbx, control, probe, rng, workdir):
        self.args = args
        self.sbx = sbx
        self.control = control  # an idle daemon: exec p50 there is the machine's load
        self.ctl = None
        self.probe = probe
        self.rng = rng
        self.workdir = workdir
        self.boxes = {}
        self.parent_of = {}  # every id the soak made -> its parent (deleted ones too)
        self.ref = None
        self.snapshots = []
        self.nsnap = 0
        self.procs_api = False
        self.procs_note = ""
        self.skipped = []
        self.fdprobe = None
        self.files = []
        self.ops_done = 0
        self.stats = collections.defaultdict(lambda: {
            "n": 0, "ok": 0, "noop": 0, "expected": collections.Counter(),
            "refused": collections.Counter(), "failed": 0, "ms": []})
        self.failures = []
        self.refusals = []
        self.rows = []
        self.base_norm = None
        self.base_rss = None
        self.leaks = 0
        self.bounds = 0
        self.final = None

    # ---- requests

    def call(self, method, path, ok=(200,), timeout=None, **kw):
        timeout = timeout or self.args.op_timeout
        try:
            r = self.sbx.http_nd.request(method, path, timeout=timeout, **kw)
        except httpx.TimeoutException:
            raise OpFailure(f"{method} {path}: no answer in {timeout} s") from None
        except httpx.HTTPError as e:
            raise OpFailure(f"{method} {path}: {type(e).__name__}: {e}") from None
        if r.status_code in ok:
            return r
        try:
            body = r.json()
        except ValueError:
            body = {}
        if 400 <= r.status_code < 500 and r.status_code in (409, 429):
            raise Expected(r.status_code, body.get("code", "?"), body.get("detail", r.text))
        raise OpFailure(f"{method} {path}: {r.status_code} {r.text[:500]}")

    def sh(self, box, code, timeout=None):
        r = self.call("POST", f"/sandboxes/{box.id}/execute", json={"code": code},
                      timeout=timeout).json()
        if box.status == "hibernated":
            box.status = "running"  # an exec wakes it
        return r

    # ---- setup

    def setup(self):
        for op in filter(None, (x.strip() for x in self.args.skip_ops.split(","))):
            if op not in OPS or op == "create":
                raise RuntimeError(f"--skip-ops: no operation {op!r} to leave out")
            OPS.pop(op)
            self.skipped.append(op)
        self.files = [os.path.join(WORKLOADS_DIR, n) for n in sorted(os.listdir(WORKLOADS_DIR))
                      if n.endswith((".py", ".js", ".sh"))]
        out = os.path.join(self.workdir, "fdprobe")
        r = run(["gcc", "-static", "-O2", "-o", out, os.path.join(WORKLOADS_DIR, "fdprobe.c")],
                check=False, timeout=120)
        if r.returncode == 0:
            self.fdprobe = out
        else:
            log("fdprobe did not build (gcc -static): that workload is left out")
            WORKLOADS.pop("fdprobe")
        self.ref = self.sbx.create(body={"image": "busybox", "label": "soak-reference"})
        self.ctl = self.control.create(body={"image": "busybox", "label": "soak-control"})
        r = self.sbx.http_nd.get(f"/sandboxes/{self.ref}/processes", timeout=30)
        if r.status_code == 200:
            self.procs_api = True
            self.procs_note = "POST /sandboxes/{id}/processes: answered, in the mix"
        elif "bg_proc" in OPS:
            OPS.pop("bg_proc")
            self.procs_note = (f"POST /sandboxes/{{id}}/processes: not on this daemon (GET "
                               f"answered {r.status_code} {r.text.strip()[:80]}); that "
                               f"operation is left out")
        log(self.procs_note)
        for _ in range(20):
            self.sbx.exec_op(self.ref, self.sbx.http_nd)()
        time.sleep(1)
        self.probe.baseline()

    def prefill(self):
        """The population, before the counted operations."""
        for _ in range(3 * self.args.soak_sandboxes):
            if len(self.usable()) >= self.args.soak_sandboxes:
                return
            self.run_op("create", None, counted=False)
        raise RuntimeError(f"prefill: {len(self.usable())} sandboxes after "
                           f"{3 * self.args.soak_sandboxes} creates")

    # ---- workloads

    def upload(self, box):
        for path in self.files + ([self.fdprobe] if self.fdprobe else []):
            name = os.path.basename(path)
            with open(path, "rb") as f:
                self.call("PUT", f"/sandboxes/{box.id}/files/tmp/wl/{name}", ok=(200, 201),
                          params={"mkdir": "true", "mode": "755" if name == "fdprobe" else "644"},
                          content=f.read())

    def states(self, box):
        r = self.sh(box, READ_STATES)
        if r.get("exit_code") != 0:
            raise OpFailure(f"reading the workloads' state in {box.id[:12]}: {r}")
        out = {}
        for line in r["stdout"].splitlines():
            name, _, text = line.partition(" ")
            try:
                out[name[:-len(".state")]] = json.loads(text)
            except ValueError:
                pass  # being replaced right now: read again next time
        return out

    def start_workload(self, box, name):
        code, _, _ = WORKLOADS[name]
        if box.image == "busybox":  # the test image has no nohup applet
            code = code.replace("nohup ", "", 1)
        r = self.sh(box, code)
        if r.get("exit_code") != 0:
            raise OpFailure(f"starting {name} in {box.id[:12]}: {r}")
        deadline = time.monotonic() + 30
        while True:
            st = self.states(box).get(name)
            if st:
                box.workloads[name] = {"boot": st["boot"], "count": st["count"]}
                return
            if time.monotonic() > deadline:
                raise OpFailure(f"{name} did not start in {box.id[:12]} in 30 s")
            time.sleep(0.1)

    def stop_workload(self, box, name):
        st = self.states(box).get(name) or {}
        pid = st.get("pid") or st.get("boot")  # the shell loop's boot id is its pid
        if not str(pid or "").isdigit():
            raise OpFailure(f"stopping {name} in {box.id[:12]}: no pid in its state {st}")
        r = self.sh(box, f"kill -9 {int(pid)}; rm -f /tmp/{name}.state")
        if r.get("exit_code") != 0:
            raise OpFailure(f"stopping {name} in {box.id[:12]}: {r}")
        box.workloads.pop(name)

    def check_states(self, box, states, what):
        """Every workload of box is the same process as before, its counter not behind."""
        for name, last in box.workloads.items():
            st = states.get(name)
            if st is None:
                raise OpFailure(f"{what}: {name}'s state is missing in {box.id[:12]}")
            if st["boot"] != last["boot"]:
                raise OpFailure(f"{what}: {name} in {box.id[:12]} was started again (boot "
                                f"{st['boot']}, was {last['boot']})")
            if st["count"] < last["count"]:
                raise OpFailure(f"{what}: {name}'s counter in {box.id[:12]} went back from "
                                f"{last['count']} to {st['count']}")
            last["count"] = st["count"]

    def goes_on(self, box, what):
        """Its workloads go on: same boot ids, the ticking ones count on, the servers answer
        through the proxy with their boot id."""
        first = self.states(box)
        self.check_states(box, first, what)
        for name, port in SERVER_PORTS.items():
            if name in box.workloads:
                r = self.call("GET", f"/sandboxes/{box.id}/proxy/", params={"port": port})
                boot = r.text.split()[0] if r.text.split() else ""
                if boot != box.workloads[name]["boot"]:
                    raise OpFailure(f"{what}: {name} in {box.id[:12]} answered {r.text!r}")
        ticking = {n for n in box.workloads if WORKLOADS[n][1]}
        deadline = time.monotonic() + 15
        while ticking:
            time.sleep(0.1)
            now = self.states(box)
            self.check_states(box, now, what)
            ticking = {n for n in ticking if now[n]["count"] <= first[n]["count"]}
            if ticking and time.monotonic() > deadline:
                raise OpFailure(f"{what}: {', '.join(sorted(ticking))} in {box.id[:12]} stood "
                                f"still for 15 s")

    # ---- the operations

    def op_create(self, _box):
        image = self.rng.choices(["node", "busybox", "hello-world"], [80, 15, 5])[0]
        r = self.call("POST", "/sandboxes", ok=(200,), timeout=max(self.args.op_timeout, 300),
                      json={"image": image, "label": "soak"})
        box = Box(r.json()["id"], image)
        self.adopt(box)
        if image == "hello-world":
            deadline = time.monotonic() + 30
            while self.call("GET", f"/sandboxes/{box.id}").json()["status"] != "exited":
                if time.monotonic() > deadline:
                    raise OpFailure(f"hello-world {box.id[:12]} did not exit in 30 s")
                time.sleep(0.1)
            box.status = "exited"
            return
        if image == "node":
            self.upload(box)
        for _ in range(NODE_WORKLOADS if image == "node" else 1):
            self.start_workload(box, self.new_workload(box))

    def new_workload(self, box):
        free = [n for n, (_, _, images) in WORKLOADS.items()
                if box.image in images and n not in box.workloads]
        return self.rng.choice(free) if free else None

    def op_exec(self, box):
        self.check_states(box, self.states(box), "exec")

    def op_bg_exec(self, box):
        """Another workload in the background instead of one that runs (so that the load
        stays the same), or a `sleep &`."""
        name = self.new_workload(box)
        if name and box.workloads and self.rng.random() < 0.7:
            self.stop_workload(box, self.rng.choice(sorted(box.workloads)))
            self.start_workload(box, name)
            return
        r = self.sh(box, "sleep 100000 >/dev/null 2>&1 & echo $!")
        if r.get("exit_code") != 0:
            raise OpFailure(f"sleep & in {box.id[:12]}: {r}")
        box.sleeps += 1

    def op_bg_proc(self, box):
        r = self.call("GET", f"/sandboxes/{box.id}/processes")
        if box.status == "hibernated":
            box.status = "running"
        body = r.json()
        listed = {p["pid"]: p for p in body.get("processes", body if isinstance(body, list)
                                                else [])}
        for pid in box.procs:
            if pid not in listed or listed[pid].get("status") != "running":
                raise OpFailure(f"process {pid} of {box.id[:12]} is gone or not running: "
                                f"{listed.get(pid)}")
        if box.procs and (len(box.procs) >= MAX_PROCS or self.rng.random() < 0.3):
            pid = self.rng.choice(sorted(box.procs))
            self.call("DELETE", f"/sandboxes/{box.id}/processes/{pid}")
            box.procs.discard(pid)
            return
        r = self.call("POST", f"/sandboxes/{box.id}/processes", ok=(201,),
                      json={"code": PROC_CODE, "tag": "soak"})
        box.procs.add(r.json()["pid"])

    def op_fork(self, box):
        r = self.call("POST", f"/sandboxes/{box.id}/fork", ok=(200,), json={"label": "soak"})
        child = Box(r.json()["id"], box.image, parent=box.id)
        child.inherit(box)
        self.adopt(child)
        if box.status == "hibernated":
            box.status = "running"  # a fork wakes it first
        if r.json().get("memory_preserved") is not True:
            raise OpFailure(f"fork of {box.id[:12]}: memory_preserved is "
                            f"{r.json().get('memory_preserved')!r}")
        self.goes_on(child, "fork child")

    def op_coalesce(self, _box):
        parents = [b for b in self.usable() if self.descendants(b.id)]
        if not parents:
            return "skip"
        parent = self.rng.choice(parents)
        final = self.boxes[self.rng.choice(sorted(self.descendants(parent.id)))]
        victims = ({parent.id} | self.descendants(parent.id)) - {final.id}
        r = self.call("POST", f"/sandboxes/{parent.id}/coalesce/{final.id}")
        done = set(r.json().get("terminated_sandboxes", []))
        for sid in done:
            self.forget(sid)
        for sid in victims - done:
            self.boxes[sid].stuck = True
        final.parent = None
        self.parent_of[final.id] = None
        if done != victims:
            raise OpFailure(f"coalesce {parent.id[:12]} -> {final.id[:12]} deleted "
                            f"{sorted(i[:12] for i in done)}, expected "
                            f"{sorted(i[:12] for i in victims)}")

    def descendants(self, sid):
        out = set()
        for b in self.usable():
            up, seen = self.parent_of.get(b.id), 0
            while up and seen < 1000:
                if up == sid:
                    out.add(b.id)
                    break
                up, seen = self.parent_of.get(up), seen + 1
        return out

    def op_pause(self, box):
        self.call("PUT", f"/sandboxes/{box.id}/pause")
        box.status = "paused"

    def op_unpause(self, box):
        self.call("DELETE", f"/sandboxes/{box.id}/pause")
        box.status = "running"

    def op_hibernate(self, box):
        r = self.call("POST", f"/sandboxes/{box.id}/hibernate")
        if r.json().get("status") != "hibernated":
            raise OpFailure(f"hibernate answered {r.text[:300]}")
        box.status = "hibernated"

    def op_wake(self, box):
        was = box.status
        r = self.call("POST", f"/sandboxes/{box.id}/wake")
        if r.json().get("status") not in ("running", "paused"):
            raise OpFailure(f"wake answered {r.text[:300]}")
        box.status = r.json()["status"]
        if was == "hibernated":
            if r.json().get("memory_preserved") is not True:
                raise OpFailure(f"wake of {box.id[:12]} answered memory_preserved "
                                f"{r.json().get('memory_preserved')!r}: {r.text[:300]}")
            self.goes_on(box, "woken")

    def op_snapshot(self, box):
        self.nsnap += 1
        name = f"soak-{self.nsnap}"
        r = self.call("POST", f"/sandboxes/{box.id}/snapshots", ok=(201,), json={"name": name})
        self.snapshots.append(name)
        self.sbx.snapshots.add(name)
        if box.status == "hibernated":
            box.status = "running"
        if r.json().get("memory_preserved") is not True:
            raise OpFailure(f"snapshot of {box.id[:12]}: {r.text[:300]}")
        r = self.call("POST", "/sandboxes", ok=(200,), json={"snapshot": name, "label": "soak"})
        new = Box(r.json()["id"], box.image)
        new.inherit(box)
        self.adopt(new)
        if r.json().get("memory_preserved") is not True:
            raise OpFailure(f"start from snapshot {name}: {r.text[:300]}")
        while self.snapshots and (len(self.snapshots) > 3 or self.rng.random() < 0.7):
            old = self.snapshots.pop(0)
            self.call("DELETE", f"/snapshots/{old}")
            self.sbx.snapshots.discard(old)
        self.goes_on(new, "started from a snapshot")

    def op_delete(self, box):
        self.call("DELETE", f"/sandboxes/{box.id}")
        self.forget(box.id)

    def adopt(self, box):
        self.boxes[box.id] = box
        self.parent_of[box.id] = box.parent
        self.sbx.ids.add(box.id)

    def forget(self, sid):
        self.boxes.pop(sid, None)
        self.sbx.ids.discard(sid)

    def wrong_state(self, op, box):
        """op on a box in a status it does not work from: must answer 409 with its code."""
        path = f"/sandboxes/{box.id}"
        method, url, body = {
            "exec": ("POST", path + "/execute", {"code": "true"}),
            "bg_exec": ("POST", path + "/execute", {"code": "sleep 1 &"}),
            "bg_proc": ("POST", path + "/processes", {"code": "true"}),
            "fork": ("POST", path + "/fork", {}),
            "snapshot": ("POST", path + "/snapshots", {"name": f"soak-wrong-{self.ops_done}"}),
            "pause": ("PUT", path + "/pause", None),
            "unpause": ("DELETE", path + "/pause", None),
            "hibernate": ("POST", path + "/hibernate", None),
            "wake": ("POST", path + "/wake", None),
        }[op]
        want = WRONG_CODE[box.status]
        try:
            r = self.call(method, url, ok=(200, 201), **({"json": body} if body else {}))
        except Expected as e:
            if e.code != want:
                raise OpFailure(f"{op} on a {box.status} sandbox answered {e}, expected "
                                f"409 {want}") from None
            raise
        raise OpFailure(f"{op} on a {box.status} sandbox answered {r.status_code} "
                        f"{r.text[:300]}")

    # ---- choosing and running

    def usable(self):
        return sorted((b for b in self.boxes.values() if not b.stuck), key=lambda b: b.id)

    def weights(self):
        n, target = len(self.usable()), self.args.soak_sandboxes
        grow = 3.0 if n < target - 3 else 0.3 if n > target + 3 else 1.0
        out = {}
        for op, (w, _, _) in OPS.items():
            if op in ("create", "fork", "snapshot"):
                w = 0 if n >= 2 * target else w * (grow if op == "create" else min(grow, 1))
            elif op in ("delete", "coalesce"):
                w = 0 if n <= 2 else w / grow
            out[op] = w
        return out

    def pick(self):
        """(op, box) for the next operation: a box in a status op works from, or (a tenth of
        the time) any box."""
        w = self.weights()
        for _ in range(100):
            op = self.rng.choices(list(w), list(w.values()))[0]
            _, allowed, _ = OPS[op]
            boxes = self.usable()
            if op in ("create", "coalesce"):
                return op, None
            if not boxes:
                continue
            if op == "delete" or self.rng.random() < ANY_STATE:
                return op, self.rng.choice(boxes)
            fit = [b for b in boxes if b.status in allowed]
            if fit:
                return op, self.rng.choice(fit)
        return "create", None

    def run_op(self, op, box, counted=True):
        st = self.stats[op if counted else "prefill"]
        st["n"] += 1
        pos = self.log_pos()
        status = box.status if box else None
        _, works, noop = OPS[op]
        wrong = works is not None and status not in works | noop
        t0 = time.perf_counter()
        try:
            if wrong:
                self.wrong_state(op, box)
            result = getattr(self, "op_" + op)(box)
            if result == "skip":
                st["n"] -= 1
                counted = False
                return
            st["noop" if noop and status in noop else "ok"] += 1
        except Expected as e:
            if wrong:
                st["expected"][e.code] += 1
            else:  # refused although the model says it should work: say why, resync
                st["refused"][e.code] += 1
                self.refusals.append({"op": self.ops_done + 1, "what": op, "sandbox": box
                                      and box.id, "status": status, "error": str(e)})
                if box:
                    self.resync(box)
        except OpFailure as e:
            st["failed"] += 1
            self.fail(op, box, status, str(e), pos)
            if box:
                self.resync(box)
        finally:
            st["ms"].append((time.perf_counter() - t0) * 1000)
            if counted:
                self.ops_done += 1

    def resync(self, box):
        try:
            r = self.sbx.http_nd.get(f"/sandboxes/{box.id}", timeout=30)
            status = r.json().get("status") if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return
        if status == "terminated":
            self.forget(box.id)
        elif status:
            box.status = status

    def fail(self, op, box, status, msg, pos):
        entry = {"op": self.ops_done + 1, "what": op, "sandbox": box and box.id,
                 "status": status, "error": msg, "log": self.log_excerpt(pos, msg),
                 "workloads": sorted(box.workloads) if box else []}
        self.failures.append(entry)
        log(f"FAILED op {entry['op']} {op}: {msg}")

    def log_pos(self):
        try:
            return os.path.getsize(self.sbx.stderr_path)
        except OSError:
            return 0

    def log_excerpt(self, pos, msg="", n=30):
        """The daemon's warnings and errors since pos, and the lines of the request msg
        names."""
        req = re.search(r"request ([0-9a-f]+)", msg)
        try:
            with open(self.sbx.stderr_path, errors="replace") as f:
                f.seek(pos)
                lines = f.read().splitlines()
        except OSError:
            return []
        keep = [ln for ln in lines if "level=warn" in ln or "level=error" in ln or
                (req and f"req={req.group(1)}" in ln) or " status=5" in ln]
        return keep[-n:]

    # ---- checkpoints

    def listed(self):
        sandboxes = self.call("GET", "/sandboxes", timeout=60).json()["sandboxes"]
        snaps = self.call("GET", "/snapshots", timeout=60).json()["snapshots"]
        return sandboxes, len(snaps)

    def sync_model(self, listed):
        """Statuses changed behind the soak's back (a sandbox exited on its own, a child
        the soak never heard of): failures, and the model takes the daemon's word."""
        by_id = {s["id"]: s for s in listed}
        drift = []
        for box in list(self.boxes.values()):
            s = by_id.get(box.id)
            status = s["status"] if s else "missing"
            if status != box.status:
                drift.append(f"{box.id[:12]} ({box.image}) is {status}, the soak had "
                             f"{box.status}")
                if status in ("terminated", "missing"):
                    self.forget(box.id)
                else:
                    box.status = status
        for s in listed:
            if s["status"] != "terminated" and s["id"] not in self.boxes and s["id"] != self.ref:
                drift.append(f"{s['id'][:12]} is {s['status']}, unknown to the soak")
                box = Box(s["id"], s.get("image", "?").split("/")[-1].split(":")[0],
                          s.get("parent_id"))
                box.status = s["status"]
                self.adopt(box)
        for d in drift:
            self.fail("status", None, None, "sandbox status changed: " + d, self.log_pos())
        return drift

    def exec_p50(self):
        """exec p50 on the reference sandbox and on the control daemon's, interleaved, and
        the first over the second (what the daemon adds beyond the machine's load)."""
        a, b = interleaved("exec p50", [self.sbx.exec_op(self.ref, self.sbx.http_nd),
                                        self.control.exec_op(self.ctl, self.control.http_nd)],
                           self.args.soak_exec_samples, 5, 120)
        p50, ctl = percentile(sorted(a), 50), percentile(sorted(b), 50)
        return p50, ctl, p50 / ctl

    def checkpoint(self, label, everything_deleted=False):
        time.sleep(0.5)
        listed, nsnap = self.listed()
        if not everything_deleted:
            self.sync_model(listed)
            listed, nsnap = self.listed()
        problems = None
        for attempt in range(SETTLE_TRIES + (5 if everything_deleted else 0)):
            exp = Expect(listed, nsnap)
            problems, counts = self.probe.check(exp)
            if not problems:
                break
            time.sleep(1)
            listed, nsnap = self.listed()
        row = {"label": label, "ops": self.ops_done, "leaks": problems, "bounds": []}
        row.update(counts)
        st = collections.Counter(s["status"] for s in listed)
        row.update({k: st[k] for k in ("running", "paused", "hibernated", "exited")})
        row["rss_mb"] = counts["rss_kb"] / 1024
        if not everything_deleted:
            m = self.exec_p50()
            if self.base_norm is None:  # the median of three
                ms = [m]
                for _ in range(2):
                    time.sleep(2)
                    ms.append(self.exec_p50())
                m = sorted(ms, key=lambda x: x[2])[1]
                self.base_norm, self.base_rss = m[2], row["rss_mb"]
            tries = 0
            while m[2] > self.args.exec_bound * self.base_norm and tries < 2:
                time.sleep(2)  # the machine's load comes and goes: measure again
                m, tries = min(m, self.exec_p50(), key=lambda x: x[2]), tries + 1
            row["exec_p50"], row["ctl_p50"] = m[0], m[1]
            row["exec_ratio"] = m[2] / self.base_norm
            if row["exec_ratio"] > self.args.exec_bound:
                row["bounds"].append(f"exec p50 {m[0]:.2f} ms, {m[2]:.2f}x the control "
                                     f"daemon's {m[1]:.2f} ms: {row['exec_ratio']:.2f}x the "
                                     f"first check's {self.base_norm:.2f}x (bound "
                                     f"{self.args.exec_bound:.2f})")
            if row["rss_mb"] > self.base_rss + self.args.rss_growth_mb:
                row["bounds"].append(f"RSS {row['rss_mb']:.1f} MB, more than "
                                     f"{self.args.rss_growth_mb} MB above the first "
                                     f"checkpoint's {self.base_rss:.1f} MB")
        time.sleep(0.5)
        cpu, pct = idle_cpu(self.probe.pid, self.args.soak_idle_seconds)
        row["idle_cpu_ms"], row["idle_cpu_pct"] = cpu, pct
        if pct > IDLE_CPU_PCT:
            row["bounds"].append(f"idle CPU {cpu:.0f} ms in {self.args.soak_idle_seconds:g} s "
                                 f"({pct:.1f} % > {IDLE_CPU_PCT:g} %)")
        self.leaks += len(problems)
        self.bounds += len(row["bounds"])
        self.rows.append(row)
        if len(self.rows) == 1:
            print(table_head(), flush=True)
        print(table_row(row), flush=True)
        for p in problems:
            print(f"      LEAK  {p}", flush=True)
        for b in row["bounds"]:
            print(f"      BOUND {b}", flush=True)
        return row

    def teardown_check(self):
        """Delete every sandbox and snapshot through the API; then the host must hold
        nothing of them, and the daemon's fds and threads must be the baseline's."""
        for sid in sorted(self.boxes) + [self.ref]:
            try:
                self.call("DELETE", f"/sandboxes/{sid}", ok=(200, 404))
                self.forget(sid)
            except (OpFailure, Expected) as e:
                self.fail("delete", None, None, f"final delete of {sid[:12]}: {e}",
                          self.log_pos())
        for name in list(self.snapshots):
            try:
                self.call("DELETE", f"/snapshots/{name}", ok=(200, 404))
                self.sbx.snapshots.discard(name)
            except (OpFailure, Expected) as e:
                self.fail("delete", None, None, f"final delete of snapshot {name}: {e}",
                          self.log_pos())
        self.final = self.checkpoint("all deleted", everything_deleted=True)

    # ---- the run

    def soak(self, deadline):
        next_check = self.args.check_every
        self.checkpoint("start")
        while self.ops_done < self.args.ops:
            if time.monotonic() > deadline:
                log(f"time is up after {self.ops_done} operations: stopping for the checks")
                self.stopped_early = self.ops_done
                break
            op, box = self.pick()
            self.run_op(op, box)
            if self.ops_done >= next_check:
                log(f"{self.ops_done} operations; checkpoint")
                self.checkpoint(str(self.ops_done))
                next_check += self.args.check_every
            if self.sbx.proc.poll() is not None:
                raise RuntimeError(f"the daemon exited with {self.sbx.proc.returncode}")
        if not self.rows or self.rows[-1]["ops"] != self.ops_done:
            self.checkpoint(str(self.ops_done))

    stopped_early = None


# ---------------------------------------------------------------- output

def table_head():
    return (f"{'check':>11} {'run':>4} {'pau':>3} {'hib':>3} {'exi':>3} | {'fds':>4} "
            f"{'pidfd':>5} {'thr':>3} | {'mnt':>3} {'netns':>5} {'veth':>4} {'cgrp':>4} "
            f"{'nft':>4} {'ckpt':>4} | {'shim':>4} {'runc':>4} | {'RSS MB':>6} "
            f"{'exec p50':>8} {'ctl p50':>7} {'x0':>5} {'idle CPU':>8} | result")


def table_row(r):
    p50 = (f"{r['exec_p50']:>8.2f} {r['ctl_p50']:>7.2f} {r['exec_ratio']:>5.2f}"
           if "exec_p50" in r else f"{'-':>8} {'-':>7} {'-':>5}")
    result = ("ok" if not r["leaks"] and not r["bounds"] else
              " ".join(x for x in (f"LEAK x{len(r['leaks'])}" if r["leaks"] else "",
                                   f"BOUND x{len(r['bounds'])}" if r["bounds"] else "") if x))
    return (f"{r['label']:>11} {r['running']:>4} {r['paused']:>3} {r['hibernated']:>3} "
            f"{r['exited']:>3} | {r['fds']:>4} {r['pidfds']:>5} {r['threads']:>3} | "
            f"{r['mounts']:>3} {r['netns']:>5} {r['veths']:>4} {r['cgroups']:>4} "
            f"{r['nft']:>4} {r['ckpt']:>4} | {r['shims']:>4} {r['runc']:>4} | "
            f"{r['rss_mb']:>6.1f} {p50} {r['idle_cpu_pct']:>7.2f}% | {result}")


def summary(soak, seconds):
    lines = [f"operations: {soak.ops_done} in {seconds:.0f} s (seed {soak.args.seed}, "
             f"{soak.args.soak_sandboxes} sandboxes targeted, prefill not counted)"]
    if soak.stopped_early is not None:
        lines.append(f"  stopped early (--total-timeout) after {soak.stopped_early}")
    lines.append(f"{'op':<10} {'n':>5} {'ok':>5} {'noop':>4} {'failed':>6} {'p50 ms':>8} "
                 f"{'p90 ms':>8} {'max ms':>8}  answered by design (409 codes) / refused")
    for op in list(OPS) + [o for o in soak.stats if o not in OPS]:
        st = soak.stats.get(op)
        if not st or not st["n"]:
            continue
        ms = sorted(st["ms"])
        exp = ", ".join(f"{k} {v}" for k, v in sorted(st["expected"].items()))
        ref = ", ".join(f"{k} {v}" for k, v in sorted(st["refused"].items()))
        lines.append(f"{op:<10} {st['n']:>5} {st['ok']:>5} {st['noop']:>4} {st['failed']:>6} "
                     f"{percentile(ms, 50):>8.1f} {percentile(ms, 90):>8.1f} {ms[-1]:>8.1f}  "
                     f"{exp or '-'}{' / refused: ' + ref if ref else ''}")
    lines.append(soak.procs_note)
    if soak.skipped:
        lines.append(f"left out (--skip-ops): {', '.join(soak.skipped)}")
    rows = [r for r in soak.rows if "exec_p50" in r]
    if rows:
        worst = max(rows, key=lambda r: r["exec_ratio"])
        lines.append(f"exec p50 (reference busybox sandbox, {soak.args.soak_exec_samples} "
                     f"samples a check, interleaved with an idle control daemon's): first "
                     f"{rows[0]['exec_p50']:.2f} ms (control {rows[0]['ctl_p50']:.2f}), last "
                     f"{rows[-1]['exec_p50']:.2f} ms (control {rows[-1]['ctl_p50']:.2f}), "
                     f"worst x0 {worst['exec_ratio']:.2f} (bound {soak.args.exec_bound:.2f}; "
                     f"x0 = p50 / control p50, over the first check's)")
        half = [r for r in rows if r["ops"] >= rows[-1]["ops"] / 2]
        trend = ""
        if len(half) > 1 and half[-1]["ops"] > half[0]["ops"]:
            slope = ((half[-1]["rss_mb"] - half[0]["rss_mb"]) * 1000 /
                     (half[-1]["ops"] - half[0]["ops"]))
            trend = f"; over the second half {slope:+.2f} MB per 1000 operations"
        lines.append(f"daemon RSS: first {rows[0]['rss_mb']:.1f} MB, last "
                     f"{rows[-1]['rss_mb']:.1f} MB, max {max(r['rss_mb'] for r in rows):.1f} MB "
                     f"(bound +{soak.args.rss_growth_mb} MB){trend}")
        lines.append(f"daemon idle CPU: max {max(r['idle_cpu_pct'] for r in soak.rows):.2f} % "
                     f"over {soak.args.soak_idle_seconds:g} s (bound {IDLE_CPU_PCT:g} %)")
    if soak.final:
        lines.append("after deleting every sandbox and snapshot: " + (
            "nothing left, fds and threads back to the baseline" if not soak.final["leaks"]
            else f"{len(soak.final['leaks'])} leaks (above)"))
    if soak.refusals:
        lines.append(f"refused although the soak expected it to work ({len(soak.refusals)}; "
                     f"the sandbox was left as it was), by kind:")
        for n, first in grouped(soak.refusals):
            lines.append(f"  {n} x {first['what']}, first op {first['op']} on "
                         f"{(first['sandbox'] or '-')[:12]} ({first['status']}): "
                         f"{short(first['error'])}")
    if soak.failures:
        lines.append(f"failures ({len(soak.failures)}), by kind:")
        for n, first in grouped(soak.failures):
            wl = f" [{', '.join(first['workloads'])}]" if first.get("workloads") else ""
            lines.append(f"  {n} x {first['what']}, first op {first['op']} on "
                         f"{(first['sandbox'] or '-')[:12]} ({first['status']}{wl}): "
                         f"{short(first['error'], 600)}")
            for ln in first["log"][-12:]:
                lines.append(f"      | {short(ln, 400)}")
    return "\n".join(lines)


def grouped(entries):
    """(count, first entry) per kind: the operation and its message without ids and
    numbers, in the order the kinds first came."""
    kinds = {}
    for e in entries:
        key = (e["what"], re.sub(r"[0-9a-f]{12,64}|\d+", "#", e["error"]))
        if key in kinds:
            kinds[key][0] += 1
        else:
            kinds[key] = [1, e]
    return list(kinds.values())


def short(msg, n=300):
    msg = " ".join(str(msg).split())
    return msg if len(msg) <= n else msg[:n] + " …"


# ---------------------------------------------------------------- main

def main():
    ap = parser("soak", __doc__)
    ap.set_defaults(total_timeout=3600)
    args = ap.parse_args()
    args.no_podman = True  # no podman rows here
    check_prerequisites(args)
    seed = args.seed
    path = os.environ.get("PATH", "/usr/bin:/bin").split(":")
    if "/usr/local/sbin" not in path:
        os.environ["PATH"] = ":".join(["/usr/local/sbin"] + path)
    info = machine_info(args.bin)
    session = Session(args.total_timeout)
    sbx = soak = failed = None
    session.on_cleanup("the daemon's log", keep_log_cleanup(lambda: sbx, args.keep_log))
    print(f"soak: --ops {args.ops} --seed {seed} --soak-sandboxes {args.soak_sandboxes} "
          f"--check-every {args.check_every}", flush=True)
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    t0 = time.monotonic()
    try:
        reg, sbx = session.start_sandboxer(args, "soak",
                                           names=("hello-world", "busybox", "node"))
        control = session.start_daemon(args, "soak", reg)
        a = sbx.extra_args
        probe = Probe(sbx.proc.pid, sbx.state_dir, a[a.index("--bridge") + 1],
                      a[a.index("--nft-table") + 1], sbx.stderr_path)
        soak = Soak(args, sbx, control, probe, random.Random(seed), session.workdir)
        log("pulling the images, the reference sandbox, the baseline (untimed)")
        for image in ("node", "hello-world"):
            sbx.delete(sbx.create(body={"image": image}, timeout=600))
        soak.setup()
        log(f"prefill: {args.soak_sandboxes} sandboxes")
        soak.prefill()
        deadline = session.t_start + args.total_timeout - max(180, args.total_timeout // 10)
        soak.soak(deadline)
        soak.teardown_check()
    except (Exception, KeyboardInterrupt, Interrupted) as e:
        failed = session.stopped(e, sbx)
    finally:
        session.close()
    print()
    if soak:
        print(summary(soak, time.monotonic() - t0))
        verdict = []
        if failed is not None:
            verdict.append(f"stopped: {type(failed).__name__}: {short(failed)}")
        if soak.failures:
            verdict.append(f"{len(soak.failures)} failures")
        if soak.leaks:
            verdict.append(f"{soak.leaks} leak findings")
        if soak.bounds:
            verdict.append(f"{soak.bounds} bounds violated")
        if soak.ops_done < args.ops:
            verdict.append(f"{soak.ops_done} of {args.ops} operations")
        print("verdict: " + ("PASS" if not verdict else "FAIL (" + "; ".join(verdict) + ")"))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"machine": info, "seed": seed, "ops": soak.ops_done,
                           "checkpoints": soak.rows, "failures": soak.failures,
                           "refusals": soak.refusals, "processes_api": soak.procs_api,
                           "stats": {op: {k: (dict(v) if isinstance(v, collections.Counter)
                                              else v) for k, v in st.items() if k != "ms"} |
                                     {"p50_ms": percentile(sorted(st["ms"]), 50)}
                                     for op, st in soak.stats.items()}},
                          f, indent=2, default=str)
        if verdict:
            sys.exit(1)
    elif failed is not None:
        sys.exit(1)


if __name__ == "__main__":
    main()
