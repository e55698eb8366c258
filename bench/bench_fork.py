#!/usr/bin/python3
"""Fork, hibernate/wake and create from a snapshot of a sandbox in which a process holds N MB
of memory: Sandboxer against podman's checkpoint/restore (runc + CRIU), in one run, on the
same machine and the same python test image (tests/images/build.py python).

The workload is the server of tests/integration/test_fork.py (SERVER, read from that file):
a Python program holding a bytearray of DATA_MB MB with one write per 4 KiB page, a counter
x and a ticking thread, answering one-line commands on 127.0.0.1:9000 inside the sandbox.
It runs in one of two shapes (--workload, comma-separated; default exec):

  exec   the way agents work: an idle sandbox (python image, no args: python3 waits on its
         stdin pipe), and the server started through exec as a background process,
         POST /sandboxes/{id}/exec {"argv": ["sh", "-c", "nohup python3 -c SERVER
         >/dev/null 2>&1 &"], "env": {"DATA_MB": N}}, reparented to the agent once sh
         ends. podman: `podman run -d IMAGE sleep infinity`, then `podman exec -d -e DATA_MB=N
         CTR sh -c 'nohup python3 -c SERVER >/dev/null 2>&1 &'`.
  main   the server is the sandbox's main process (args, env DATA_MB); podman: `podman run
         -d -e DATA_MB=N IMAGE python3 -c SERVER`.

For each shape and size (--sizes, default 50 and 200 MB):

  fork                  Sandboxer: POST /sandboxes/{id}/fork until its response (the child
                        runs and its agent answers); memory_preserved must be true and the
                        child's x and memory digest the parent's (checked untimed, through
                        exec); the child is deleted after its sample, untimed.
                        podman: `podman container checkpoint --leave-running --export F.tar
                        CTR` and `podman container restore --import F.tar --name NEW`, each
                        timed, and their sum; NEW is checked the same way and removed.
  hibernate / wake      Sandboxer: POST /sandboxes/{id}/hibernate, then /wake, each until its
                        response; x and the digest are checked after each wake.
                        podman: `podman container checkpoint CTR` / `podman container restore
                        CTR`.
  snapshot save         Sandboxer: POST /sandboxes/{id}/snapshots {"name": ...}, once.
  create from snapshot  Sandboxer: POST /sandboxes {"snapshot": name} until its response;
                        checked, then deleted, untimed.

Each Sandboxer series runs on every runtime of --runtimes (default runc,runsc): rows
"sandboxer" on runc + CRIU, "sandboxer runsc" on gVisor's own checkpoint/restore (which stops
the source for a fork or a snapshot and restores it: docs/runsc.md).

Prints p50/p90/p99 in ms with the targets of issue 12 (at 50 MB: fork <= 200, wake <= 120,
create from a snapshot <= 80 ms; both shapes are held to them); a series that fails shows its
error instead of numbers. Everything it makes (sandboxes, snapshots, the daemon, the
registry, podman containers, image and checkpoint exports, temp dirs, mounts) is removed at
the end, also on error or Ctrl-C; every command and request has a time limit, every phase a
budget, the run a total. Run as root, through bench/run (make bench). Standard library and python3-httpx only.
"""
import ast
import json
import os
import re
import shlex
import shutil
import sys
import time

from common import (CKPT_TMP, PODMAN_OPTS, ROOT, Interrupted, Podman, Session,
                    TotalTimeout, check_prerequisites, keep_log_cleanup, log, machine_info,
                    parser, percentile, print_header, registry, run, runtimes, timed_run,
                    tool_name)

SLOW_OP = 180  # seconds for one fork, hibernate, wake, checkpoint or restore
# issue 12, at 50 MB (p50, ms)
TARGETS = {("fork", "sandboxer", 50): 200.0, ("wake", "sandboxer", 50): 120.0,
           ("create from snapshot", "sandboxer", 50): 80.0}
SHAPES = ("exec", "main")


def test_program(name):
    """A string constant of tests/integration/test_fork.py (SERVER, CLIENT), read without
    importing the test module (which needs pytest and the test fixtures)."""
    path = os.path.join(ROOT, "tests", "integration", "test_fork.py")
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError(f"{path} defines no {name}")


SERVER = test_program("SERVER")
CLIENT = test_program("CLIENT")  # a shell command line; the server's command follows it
# the exec shape: what an agent types to start a server in the background
BACKGROUND = f"nohup python3 -c {shlex.quote(SERVER)} >/dev/null 2>&1 &"


def parse_reply(text):
    return ast.literal_eval(text.strip())


def same_state(got, want, what):
    for k in ("x", "digest", "size"):
        if got.get(k) != want.get(k):
            raise RuntimeError(f"{what}: {k} is {got.get(k)!r}, expected {want.get(k)!r} "
                               f"(got {got}, expected {want})")


# ---------------------------------------------------------------- Sandboxer

class SandboxerFork:
    """The Sandboxer side of one shape and size: a server sandbox and its operations."""

    def __init__(self, sbx, mb, keep_dir, shape, runtime="runc"):
        self.sbx = sbx
        self.runtime = runtime
        self.mb = mb
        self.keep_dir = keep_dir
        self.shape = shape
        self.sid = None
        self.state = None  # what the server answered last: x, digest, size
        self.seq = 0

    def ask(self, sid, cmd="get"):
        r = self.sbx.request("POST", f"/sandboxes/{sid}/execute", timeout=120,
                             json={"code": CLIENT + f"'{cmd}'"})
        out = r.json()
        if out.get("exit_code") != 0:
            raise RuntimeError(f"the server in {sid} did not answer {cmd!r}: {out}")
        return parse_reply(out["stdout"])

    def start(self, timeout=60):
        if self.shape == "main":
            self.sid = self.sbx.create(body={
                "image": "python", "args": ["python3", "-c", SERVER],
                "env": {"DATA_MB": str(self.mb)}, "runtime": self.runtime})
        else:  # an idle sandbox, the server started through exec
            self.sid = self.sbx.create(body={"image": "python", "runtime": self.runtime})
            r = self.sbx.request("POST", f"/sandboxes/{self.sid}/exec", timeout=60, json={
                "argv": ["sh", "-c", BACKGROUND], "env": {"DATA_MB": str(self.mb)}})
            if r.json().get("exit_code") != 0:
                raise RuntimeError(f"starting the server through exec: {r.text[:500]}")
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.ask(self.sid)
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.state = self.ask(self.sid, f"set {self.mb + 41}")
        if self.state["size"] != self.mb << 20:
            raise RuntimeError(f"the server holds {self.state['size']} bytes, not {self.mb} MB")

    def keep_criu_logs(self, kind, sid, where="run"):
        """Copy CRIU's and runc's logs of sid (its run dir, or a snapshot's dir) aside."""
        if not self.keep_dir or self.runtime != "runc":  # CRIU's logs: runc only
            return
        src = where if os.path.isabs(where) else os.path.join(
            self.sbx.state_dir, "sandboxes", sid, where)
        dst = os.path.join(self.keep_dir, f"{self.mb}mb-{self.shape}-{kind}-{self.seq:02d}")
        os.makedirs(dst, exist_ok=True)
        for name in ("dump.log", "restore.log", "runc.log"):
            if os.path.exists(os.path.join(src, name)):
                shutil.copy(os.path.join(src, name), dst)

    def fork(self):
        self.seq += 1
        t0 = time.perf_counter_ns()
        r = self.sbx.request("POST", f"/sandboxes/{self.sid}/fork", expect=(200,),
                             timeout=SLOW_OP, json={})
        dt = (time.perf_counter_ns() - t0) / 1e6
        child = r.json()
        self.sbx.ids.add(child["id"])
        if child.get("memory_preserved") is not True:
            raise RuntimeError(f"fork: memory_preserved is {child.get('memory_preserved')!r}")
        same_state(self.ask(child["id"]), self.state, "the forked child")
        self.keep_criu_logs("fork", child["id"])  # the child's run dir has both logs
        self.sbx.delete(child["id"])
        return (dt,)

    def hibernate_wake(self):
        self.seq += 1
        t0 = time.perf_counter_ns()
        r = self.sbx.request("POST", f"/sandboxes/{self.sid}/hibernate", timeout=SLOW_OP)
        t1 = time.perf_counter_ns()
        if r.json().get("status") != "hibernated":
            raise RuntimeError(f"hibernate answered {r.text}")
        t2 = time.perf_counter_ns()
        r = self.sbx.request("POST", f"/sandboxes/{self.sid}/wake", timeout=SLOW_OP)
        t3 = time.perf_counter_ns()
        if r.json().get("status") != "running":
            raise RuntimeError(f"wake answered {r.text}")
        same_state(self.ask(self.sid), self.state, "the woken sandbox")
        self.keep_criu_logs("hibernate", self.sid)
        return ((t1 - t0) / 1e6, (t3 - t2) / 1e6)

    def snapshot(self, name):
        t0 = time.perf_counter_ns()
        r = self.sbx.request("POST", f"/sandboxes/{self.sid}/snapshots", expect=(201,),
                             timeout=SLOW_OP, json={"name": name})
        dt = (time.perf_counter_ns() - t0) / 1e6
        self.sbx.snapshots.add(name)
        if r.json().get("memory_preserved") is not True:
            raise RuntimeError(f"snapshot: memory_preserved is "
                               f"{r.json().get('memory_preserved')!r}")
        self.keep_criu_logs("snapshot", None,
                            os.path.join(self.sbx.state_dir, "snapshots", r.json()["id"]))
        return (dt,)

    def from_snapshot(self, name):
        def op():
            self.seq += 1
            t0 = time.perf_counter_ns()
            r = self.sbx.request("POST", "/sandboxes", expect=(200,), timeout=SLOW_OP,
                                 json={"snapshot": name})
            dt = (time.perf_counter_ns() - t0) / 1e6
            sid = r.json()["id"]
            self.sbx.ids.add(sid)
            same_state(self.ask(sid), self.state, "the sandbox made from the snapshot")
            self.keep_criu_logs("from-snapshot", sid)
            self.sbx.delete(sid)
            return (dt,)
        return op

    def stop(self):
        if self.sid:
            self.sbx.delete(self.sid)
            self.sid = None


# ---------------------------------------------------------------- podman

class PodmanFork(Podman):
    """podman containers of the python image running the same server, checkpointed and
    restored by podman (runc, CRIU)."""

    def __init__(self, layout, prefix, workdir):
        super().__init__(layout, prefix, "python", tag="bench")
        self.workdir = workdir
        self.lo_down_seen = 0  # restores after which the container's loopback was down
        self.export_bytes = {}

    def ask(self, name, cmd="get"):
        r = run(["podman", "exec", name, "sh", "-c", CLIENT + f"'{cmd}'"], check=False,
                text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"the server in {name} did not answer {cmd!r}: "
                               f"{(r.stderr or r.stdout).strip()[-500:]}")
        return parse_reply(r.stdout)

    def start(self, mb, shape, timeout=60):
        name = self.new_name()
        if shape == "main":
            run(["podman", "run", "-d", "--name", name] + PODMAN_OPTS +
                ["-e", f"DATA_MB={mb}", self.image, "python3", "-c", SERVER], timeout=120)
        else:  # idle, and the server started through exec, detached
            run(["podman", "run", "-d", "--name", name] + PODMAN_OPTS +
                [self.image, "sleep", "infinity"], timeout=120)
            run(["podman", "exec", "-d", "-e", f"DATA_MB={mb}", name, "sh", "-c", BACKGROUND],
                timeout=120)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.ask(name)
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        return name, self.ask(name, f"set {mb + 41}")

    def check_restored(self, name, want):
        """The restored server's state, untimed. runc restores into a new network namespace
        and podman (--network none) leaves its loopback down: bring it up to ask."""
        pid = run(["podman", "inspect", "-f", "{{.State.Pid}}", name], text=True).stdout.strip()
        link = run(["nsenter", "-t", pid, "-n", "ip", "-o", "link", "show", "lo"],
                   text=True).stdout
        if "UP" not in link.split(">")[0]:
            self.lo_down_seen += 1
            run(["nsenter", "-t", pid, "-n", "ip", "link", "set", "lo", "up"])
        same_state(self.ask(name), want, f"podman's restored {name}")

    def fork_op(self, src, want, what):
        def op():
            tar = os.path.join(self.workdir, f"{src}-export.tar")
            dt1, _ = timed_run(["podman", "container", "checkpoint", "--leave-running",
                                "--export", tar, src], timeout=SLOW_OP)
            self.export_bytes.setdefault(what, os.path.getsize(tar))
            new = self.new_name()
            try:
                dt2, _ = timed_run(["podman", "container", "restore", "--import", tar,
                                    "--name", new], timeout=SLOW_OP)
                self.check_restored(new, want)
            finally:
                self.delete(new)
                os.unlink(tar)
            return (dt1, dt2, dt1 + dt2)
        return op

    def hibernate_op(self, name, want):
        def op():
            dt1, _ = timed_run(["podman", "container", "checkpoint", name], timeout=SLOW_OP)
            dt2, _ = timed_run(["podman", "container", "restore", name], timeout=SLOW_OP)
            self.check_restored(name, want)
            return (dt1, dt2)
        return op


# ---------------------------------------------------------------- series and table

def new_rows(rows, bench, tools, mb, shape):
    made = [{"bench": bench, "tool": t, "shape": shape, "mb": mb, "samples": [], "error": None}
            for t in tools]
    rows.extend(made)
    return made


def series(name, out_rows, n, warmup, budget, op):
    """warmup untimed calls of op, then n timed ones; op returns one sample (ms) per row of
    out_rows, appended as they come. A failure is written into the rows (with the samples
    so far) and the run goes on; an interruption or the total time limit is raised."""
    deadline = time.monotonic() + budget
    log(f"{name}: {warmup} untimed + {n}")
    try:
        for _ in range(warmup):
            if time.monotonic() > deadline:
                raise RuntimeError(f"warmup did not finish in {budget} s")
            op()
        for i in range(n):
            if time.monotonic() > deadline:
                log(f"{name}: phase budget of {budget} s spent after {i} of {n} samples")
                break
            for row, sample in zip(out_rows, op()):
                row["samples"].append(sample)
    except (TotalTimeout, KeyboardInterrupt, Interrupted):
        raise
    except Exception as e:
        fail(name, out_rows, e)


def attempt(what, fn):
    """fn(), a step between series whose failure is logged (the cleanup at the end catches
    what it leaves); an interruption or the total time limit is raised."""
    try:
        fn()
    except (TotalTimeout, KeyboardInterrupt, Interrupted):
        raise
    except Exception as e:
        log(f"{what} failed: {type(e).__name__}: {e}")


def fail(name, out_rows, e):
    msg = f"{type(e).__name__}: {e}"
    log(f"{name} failed: {msg}")
    for row in out_rows:
        row["error"] = msg


def target_of(row):
    return TARGETS.get((row["bench"], row["tool"], row["mb"]))


def summarize(rows):
    head = (f"{'benchmark':<21} {'tool':<24} {'shape':<5} {'MB':>4} {'n':>3} {'p50 ms':>8} "
            f"{'p90 ms':>8} {'p99 ms':>8}  target")
    lines = [head]
    for r in rows:
        s = sorted(r["samples"])
        r["p50"], r["p90"], r["p99"] = (percentile(s, p) for p in (50, 90, 99))
        target = target_of(r)
        tcol = ""
        if target is not None:
            verdict = ("no samples" if not s else "met" if r["p50"] <= target else "MISSED")
            tcol = f"p50 <= {target:g}: {verdict}"
        left = f"{r['bench']:<21} {r['tool']:<24} {r['shape']:<5} {r['mb']:>4} {len(s):>3}"
        if r["error"] and not s:
            lines.append(f"{left}  FAILED: {short(r['error'])}")
            continue
        if not s:
            lines.append(f"{left}  not run")
            continue
        lines.append(f"{left} {r['p50']:>8.1f} {r['p90']:>8.1f} {r['p99']:>8.1f}  {tcol}")
        if r["error"]:
            lines.append(f"{'':<61}stopped after {len(s)}: {short(r['error'])}")
    return "\n".join(lines)


def short(msg, n=300):
    msg = " ".join(msg.split())
    return msg if len(msg) <= n else msg[:n] + " …"


def criu_log_summary(keep_dir):
    """Median run time of CRIU (the last timestamp of each dump.log/restore.log kept by
    --keep-criu-logs), per size and operation; warmups included."""
    runs = {}
    for d in sorted(os.listdir(keep_dir)):
        m = re.fullmatch(r"(\d+)mb-(.+)-(\d+)", d)
        if not m:
            continue
        for name in ("dump.log", "restore.log"):
            last = None
            try:
                with open(os.path.join(keep_dir, d, name), errors="replace") as f:
                    for line in f:
                        t = re.match(r"\((\d+\.\d+)\)", line)
                        if t:
                            last = float(t.group(1))
            except OSError:
                continue
            if last is not None:
                runs.setdefault((int(m.group(1)), m.group(2), name), []).append(last * 1000)
    lines = []
    for (mb, kind, name), ms in sorted(runs.items()):
        ms.sort()
        lines.append(f"  {kind:<14} {mb:>4} MB  {name:<12} n={len(ms):<3} median "
                     f"{percentile(ms, 50):6.1f} ms  (min {ms[0]:.1f}, max {ms[-1]:.1f})")
    return lines


def fs_of(path):
    try:
        # the last line: the mount on top when several are stacked there
        out = run(["findmnt", "-no", "FSTYPE", "-T", path], check=False, text=True).stdout
        return (out.split() or ["?"])[-1]
    except Exception:
        return "?"


# ---------------------------------------------------------------- the series of one size

def sandboxer_series(args, sbx, rows, shape, mb, keep_dir, runtime="runc"):
    warm, budget = args.fork_warmup, args.phase_timeout
    what = f"{shape} {mb} MB" + ("" if runtime == "runc" else f" on {runtime}")
    sf = SandboxerFork(sbx, mb, keep_dir, shape, runtime)
    tool = [tool_name(runtime)]
    fork_rows = new_rows(rows, "fork", tool, mb, shape)
    hib_rows = new_rows(rows, "hibernate", tool, mb, shape)
    wake_rows = new_rows(rows, "wake", tool, mb, shape)
    save_rows = new_rows(rows, "snapshot save", tool, mb, shape)
    snap_rows = new_rows(rows, "create from snapshot", tool, mb, shape)
    try:
        log(f"sandboxer {what}: starting the server (untimed; the first pulls)")
        sf.start()
    except (TotalTimeout, KeyboardInterrupt, Interrupted):
        raise
    except Exception as e:
        fail(f"sandboxer {what} server", fork_rows + hib_rows + wake_rows + save_rows +
             snap_rows, e)
        attempt(f"delete the {what} server", sf.stop)
        return
    series(f"sandboxer fork {what}", fork_rows, args.n_fork, warm, budget, sf.fork)
    series(f"sandboxer hibernate/wake {what}", hib_rows + wake_rows, args.n_hibernate, warm,
           budget, sf.hibernate_wake)
    name = f"bench-{shape}-{mb}mb-{runtime}"
    series(f"sandboxer snapshot {what}", save_rows, 1, 0, budget, lambda: sf.snapshot(name))
    if name in sbx.snapshots:
        series(f"sandboxer create from snapshot {what}", snap_rows, args.n_snapshot, warm,
               budget, sf.from_snapshot(name))
        attempt(f"delete snapshot {name}", lambda: (
            sbx.request("DELETE", f"/snapshots/{name}", expect=(200, 404)),
            sbx.snapshots.discard(name)))
    else:
        fail("create from snapshot", snap_rows, RuntimeError("no snapshot"))
    attempt(f"delete the {what} server", sf.stop)


def podman_series(args, pm, rows, shape, mb):
    warm, budget, what = args.fork_warmup, args.phase_timeout, f"{shape} {mb} MB"
    pfork_rows = new_rows(rows, "fork", ["podman ckpt --export", "podman restore --import",
                                         "podman sum"], mb, shape)
    phib_rows = new_rows(rows, "hibernate", ["podman checkpoint"], mb, shape)
    pwake_rows = new_rows(rows, "wake", ["podman restore"], mb, shape)
    try:
        log(f"podman {what}: starting the server (untimed)")
        src, want = pm.start(mb, shape)
    except (TotalTimeout, KeyboardInterrupt, Interrupted):
        raise
    except Exception as e:
        fail(f"podman {what} server", pfork_rows + phib_rows + pwake_rows, e)
        return
    series(f"podman checkpoint --export/restore --import {what}", pfork_rows, args.n_podman,
           warm, budget, pm.fork_op(src, want, what))
    series(f"podman checkpoint/restore {what}", phib_rows + pwake_rows, args.n_podman, warm,
           budget, pm.hibernate_op(src, want))
    pm.delete(src)


# ---------------------------------------------------------------- main

def main():
    args = parser("fork", __doc__).parse_args()
    check_prerequisites(args)
    rts = runtimes(args)
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    shapes = [x.strip() for x in args.workload.split(",") if x.strip()]
    if not shapes or any(x not in SHAPES for x in shapes):
        sys.exit(f"bench: --workload takes exec, main or exec,main, not {args.workload!r}")
    # runc (ours and podman's) finds criu on PATH; the patched one is in /usr/local/sbin
    path = os.environ.get("PATH", "/usr/bin:/bin").split(":")
    if "/usr/local/sbin" not in path:
        os.environ["PATH"] = ":".join(["/usr/local/sbin"] + path)
    criu = shutil.which("criu")
    info = machine_info(args.bin)
    info["criu"] = (run([criu, "--version"], check=False, text=True).stdout.split("\n")[0]
                    + f" ({criu})") if criu else "not found"
    keep_dir = os.path.abspath(args.keep_criu_logs) if args.keep_criu_logs else None
    if keep_dir and os.path.isdir(keep_dir) and os.listdir(keep_dir):
        sys.exit(f"bench: --keep-criu-logs {keep_dir} is not empty")
    session = Session(args.total_timeout)
    workdir = session.workdir
    info["disk"] = (f"state dir {fs_of(workdir)}, {CKPT_TMP} {fs_of('/dev/shm')}, "
                    f"podman {fs_of('/var/lib/containers')}")
    # CRIU keeps what it probed of the kernel in RUNDIR/criu.kdat, and only on a tmpfs; our
    # build's RUNDIR is /dev/shm (scripts/build-criu), a stock build's /run
    kdat = [p for p in ("/dev/shm/criu.kdat", "/run/criu.kdat") if os.path.exists(p)]
    info["criu kdat cache"] = ", ".join(kdat) if kdat else "none"
    reg = sbx = pm = failed = None
    session.on_cleanup("the daemon's log", keep_log_cleanup(lambda: sbx, args.keep_log))
    rows = []
    platform = "?"  # runsc's, read from the daemon's log before the cleanup removes it
    try:
        build = registry._build_module()
        layout = build.ensure("python")
        log(f"python layout: {layout}")
        reg, sbx = session.start_sandboxer(args, "fork", python=True)
        if not args.no_podman:
            pm = PodmanFork(layout, session.prefix, os.path.join(workdir, "podman"))
            os.makedirs(pm.workdir)
            session.on_cleanup("podman", pm.cleanup)
            pm.load()

        for shape in shapes:
            for mb in sizes:
                for rt in rts:
                    sandboxer_series(args, sbx, rows, shape, mb, keep_dir, rt)
                if pm:
                    podman_series(args, pm, rows, shape, mb)
        platform = sbx.runsc_platform()
    except (Exception, KeyboardInterrupt, Interrupted) as e:
        failed = session.stopped(e, sbx)
    finally:
        session.close()

    print_header(info, session.t_start)
    print(summarize(rows))
    print()
    print("fork (sandboxer): POST /sandboxes/{id}/fork until the child runs and its agent "
          "answers")
    print("shape exec: an idle sandbox (podman: sleep infinity), the server started through "
          "exec as `nohup python3 -c SERVER >/dev/null 2>&1 &`; main: the server is the main "
          "process")
    if "runsc" in rts:
        print(f"sandboxer runsc: gVisor on platform {platform}; a fork or snapshot "
              "stops the source, checkpoints it and restores it (docs/runsc.md)")
    if pm:
        print("podman sum: checkpoint --leave-running --export + restore --import --name, per "
              "sample; podman hibernate/wake: checkpoint CTR / restore CTR (runc, CRIU)")
        if pm.export_bytes:
            print("podman export size: " + ", ".join(
                f"{what} -> {b / 1e6:.2f} MB (zstd)" for what, b in pm.export_bytes.items()))
        if pm.lo_down_seen:
            print(f"podman: after {pm.lo_down_seen} restores the container's loopback was "
                  "down (runc restores into a new netns); brought up untimed to check state")
    if keep_dir and os.path.isdir(keep_dir):
        print(f"CRIU's own time (its logs, kept in {keep_dir}):")
        print("\n".join(criu_log_summary(keep_dir)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "rows": [
                {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()
                 if k != "samples"} | {"n": len(r["samples"]),
                                       "samples_ms": [round(x, 3) for x in r["samples"]]}
                for r in rows]}, f, indent=2)
    # a failed podman row is a finding about podman on this host, shown in the table
    if failed is not None or any(r["error"] and r["tool"].startswith("sandboxer") for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
