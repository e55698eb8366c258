#!/usr/bin/python3
"""Exec round trip and create -> running: Sandboxer against podman and bare runc, in one run,
on the same machine and the same busybox test image (tests/images/build.py).

  exec echo hi        Sandboxer: POST /sandboxes/{id}/execute {"code":"echo hi"} on one
                      keep-alive httpx connection (also POST /exec {"argv":["echo","hi"]},
                      which skips the shell); `runc exec CTR echo hi` on a bare runc
                      container; `podman exec CTR echo hi`.
  create -> running   Sandboxer: POST /sandboxes {"image":"busybox"} until its response (the
                      sandbox is running and its agent answers), image already cached;
                      `podman run -d` until it returns; `runc run -d` on a prepared bundle
                      until it returns (copying the rootfs is not timed). Each is deleted
                      after its sample, untimed.

Prints a table of p50/p90/p99 in ms (linear interpolation between the closest ranks) with
the targets. Everything it makes (sandboxes, daemon, registry, podman containers and image,
runc containers, temp dirs, mounts) is removed at the end, also on error or Ctrl-C; every
phase has a time limit. Run as root, through bench/run (make bench). Standard library and
python3-httpx only.
"""
import argparse
import glob
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import registry  # noqa: E402  (tests/integration/registry.py)

TOKEN_RE = re.compile(r"\bsbx_[0-9a-f]{64}\b")
PODMAN_OPTS = ["--runtime", "runc", "--ulimit", "nofile=4096:4096", "--ulimit",
               "nproc=4096:4096", "--network", "none"]
IDLE = ["sleep", "1000000"]
TARGETS = {("exec echo hi", "sandboxer"): 5.0, ("exec echo hi", "sandboxer nd"): 5.0,
           ("create -> running", "sandboxer"): 150.0,
           ("create -> running", "sandboxer nd"): 150.0}
OP_TIMEOUT = 60  # one request or one command


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


class PhaseTimeout(Exception):
    pass


class Interrupted(BaseException):
    """SIGTERM, turned into an exception so that the finally blocks clean up."""


def percentile(sorted_ms, p):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_ms:
        return float("nan")
    k = (len(sorted_ms) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(sorted_ms) - 1)
    return sorted_ms[lo] + (sorted_ms[hi] - sorted_ms[lo]) * (k - lo)


def run(argv, timeout=OP_TIMEOUT, check=True, **kw):
    kw.setdefault("stdin", subprocess.DEVNULL)
    kw.setdefault("capture_output", True)
    r = subprocess.run(argv, timeout=timeout, **kw)
    if check and r.returncode != 0:
        err = r.stderr.decode(errors="replace") if isinstance(r.stderr, bytes) else r.stderr
        raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}: {(err or '').strip()}")
    return r


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed_loop(name, n, warmup, budget, op):
    """Run op() warmup times untimed, then n times timed; returns the samples in ms. Stops
    early (and says so) when the phase runs past budget seconds."""
    deadline = time.monotonic() + budget
    for _ in range(warmup):
        if time.monotonic() > deadline:
            raise PhaseTimeout(f"{name}: warmup did not finish in {budget} s")
        op()
    samples = []
    for _ in range(n):
        if time.monotonic() > deadline:
            log(f"{name}: phase budget of {budget} s spent after {len(samples)} of {n} samples")
            break
        samples.append(op())
    return samples


# ---------------------------------------------------------------- Sandboxer

class Sandboxer:
    def __init__(self, binary, workdir, registry_url, log_level):
        self.binary = binary
        self.workdir = workdir
        self.state_dir = os.path.join(workdir, "state")
        self.registry_url = registry_url
        self.log_level = log_level
        self.proc = None
        self.http = None
        self.ids = set()
        self.stdout_path = os.path.join(workdir, "daemon.stdout")
        self.stderr_path = os.path.join(workdir, "daemon.log")

    def start(self, timeout=30):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        args = [self.binary, "serve", "--listen", f"127.0.0.1:{port}", "--socket", "none",
                "--state-dir", self.state_dir, "--registry-mirror", self.registry_url,
                "--log-level", self.log_level]
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            # its own session: a Ctrl-C reaches only this script, which then deletes the
            # sandboxes through the daemon before stopping it
            self.proc = subprocess.Popen(args, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}: {self.tail()}")
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("daemon did not become healthy: " + self.tail())
            time.sleep(0.05)
        with open(self.stdout_path, errors="replace") as f:
            m = TOKEN_RE.search(f.read())
        if not m:
            raise RuntimeError("the daemon's first start printed no admin token")
        headers = {"Authorization": f"Bearer {m.group(0)}"}
        # as the brief has it: httpx as it comes (no TCP_NODELAY in httpx 0.23)
        self.http = httpx.Client(base_url=url, timeout=OP_TIMEOUT, headers=headers)
        # the same with TCP_NODELAY on its socket, as curl, Go and urllib3 do by default
        self.http_nd = httpx.Client(base_url=url, timeout=OP_TIMEOUT, headers=headers,
                                    event_hooks={"response": [set_nodelay]})

    def tail(self, n=3000):
        try:
            with open(self.stderr_path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def create(self, client=None):
        r = (client or self.http_nd).post("/sandboxes", json={"image": "busybox"}, timeout=300)
        if r.status_code != 201:
            raise RuntimeError(f"POST /sandboxes: {r.status_code} {r.text}")
        sid = r.json()["id"]
        self.ids.add(sid)
        return sid

    def delete(self, sid):
        r = self.http_nd.delete(f"/sandboxes/{sid}")
        if r.status_code not in (200, 404):
            raise RuntimeError(f"DELETE /sandboxes/{sid}: {r.status_code} {r.text}")
        self.ids.discard(sid)

    def create_op(self, client):
        def op():
            t0 = time.perf_counter_ns()
            sid = self.create(client)
            dt = (time.perf_counter_ns() - t0) / 1e6
            self.delete(sid)
            return dt
        return op

    def exec_op(self, sid, client):
        def op():
            t0 = time.perf_counter_ns()
            r = client.post(f"/sandboxes/{sid}/execute", json={"code": "echo hi"})
            dt = (time.perf_counter_ns() - t0) / 1e6
            if r.status_code != 200 or r.json().get("stdout") != "hi\n":
                raise RuntimeError(f"execute: {r.status_code} {r.text[:500]}")
            return dt
        return op

    def exec_argv_op(self, sid, client):
        def op():
            t0 = time.perf_counter_ns()
            r = client.post(f"/sandboxes/{sid}/exec", json={"argv": ["echo", "hi"]})
            dt = (time.perf_counter_ns() - t0) / 1e6
            if r.status_code != 200 or r.json().get("stdout") != "hi\n":
                raise RuntimeError(f"exec: {r.status_code} {r.text[:500]}")
            return dt
        return op

    def cleanup(self):
        if self.http is not None:
            for sid in list(self.ids):
                try:
                    self.delete(sid)
                except Exception as e:  # keep going: the state sweep below catches it
                    log(f"cleanup: delete {sid}: {e}")
            self.http.close()
            self.http_nd.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        sweep_state(self.state_dir)


def set_nodelay(response):
    """httpx response hook: TCP_NODELAY on the (kept-alive) connection's socket."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def pids_mentioning(path):
    """Processes whose command line names something under path (the daemon's shims)."""
    found = []
    needle = (path.rstrip("/") + "/").encode()
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/cmdline", "rb") as f:
                if needle in f.read():
                    found.append(int(os.path.basename(d)))
        except OSError:
            pass
    return [p for p in found if p != os.getpid()]


def sweep_state(state_dir):
    """Whatever a daemon on state_dir left behind: containers, shims, cgroups."""
    root = os.path.join(state_dir, "runc")
    if os.path.isdir(root):
        ids = run(["runc", "--root", root, "list", "-q"], check=False,
                  text=True).stdout.split()
        for cid in ids:
            log(f"cleanup: sandbox container {cid} was left; removing it")
            run(["runc", "--root", root, "kill", "--all", cid, "KILL"], check=False)
            run(["runc", "--root", root, "delete", "--force", cid], check=False)
            for base in glob.glob("/sys/fs/cgroup/*/sandboxer") + ["/sys/fs/cgroup/sandboxer"]:
                try:
                    os.rmdir(os.path.join(base, cid))
                except OSError:
                    pass
    for pid in pids_mentioning(state_dir):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ---------------------------------------------------------------- bare runc

def layout_layers(layout):
    """The layer blobs of the :latest manifest of an OCI layout, bottom first."""
    with open(os.path.join(layout, "index.json")) as f:
        mdigest = json.load(f)["manifests"][0]["digest"].split(":", 1)[1]
    with open(os.path.join(layout, "blobs", "sha256", mdigest)) as f:
        manifest = json.load(f)
    return [os.path.join(layout, "blobs", "sha256", lyr["digest"].split(":", 1)[1])
            for lyr in manifest["layers"]]


class Runc:
    """Bare runc containers with their own --root and bundles under workdir."""

    def __init__(self, layout, workdir, prefix):
        self.workdir = workdir
        self.root = os.path.join(workdir, "runc-root")
        self.prefix = prefix
        self.template = os.path.join(workdir, "template")
        self.ids = set()
        self.seq = 0
        rootfs = os.path.join(self.template, "rootfs")
        os.makedirs(rootfs)
        for blob in layout_layers(layout):
            run(["tar", "-xzf", blob, "-C", rootfs, "--numeric-owner"])
        run(["runc", "spec"], cwd=self.template)
        cfg_path = os.path.join(self.template, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["process"]["terminal"] = False
        cfg["process"]["args"] = IDLE
        cfg["root"]["readonly"] = False  # a fresh copy per container, like a writable layer
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)

    def prepare(self):
        """A new bundle (copy of the template); not timed."""
        self.seq += 1
        cid = f"{self.prefix}-{self.seq}"
        bundle = os.path.join(self.workdir, "bundles", cid)
        os.makedirs(os.path.dirname(bundle), exist_ok=True)
        run(["cp", "-a", self.template, bundle])
        return cid, bundle

    def start(self, cid, bundle):
        """runc run -d. Its stdio is the container's: /dev/null, and a file for errors
        (a pipe would stay open in the container and never reach EOF)."""
        self.ids.add(cid)
        errlog = os.path.join(self.workdir, "bundles", cid + ".stderr")
        with open(errlog, "wb") as err:
            r = run(["runc", "--root", self.root, "run", "-d", "--bundle", bundle, cid],
                    check=False, capture_output=False, stdout=subprocess.DEVNULL, stderr=err)
        if r.returncode != 0:
            with open(errlog, errors="replace") as f:
                raise RuntimeError(f"runc run -d {cid} exited {r.returncode}: {f.read()[-2000:]}")

    def delete(self, cid):
        run(["runc", "--root", self.root, "delete", "-f", cid], check=False)
        self.ids.discard(cid)
        shutil.rmtree(os.path.join(self.workdir, "bundles", cid), ignore_errors=True)
        try:
            os.unlink(os.path.join(self.workdir, "bundles", cid + ".stderr"))
        except OSError:
            pass

    def timed_create(self):
        cid, bundle = self.prepare()
        t0 = time.perf_counter_ns()
        self.start(cid, bundle)
        dt = (time.perf_counter_ns() - t0) / 1e6
        self.delete(cid)
        return dt

    def exec_op(self, cid):
        def op():
            t0 = time.perf_counter_ns()
            r = run(["runc", "--root", self.root, "exec", cid, "echo", "hi"])
            dt = (time.perf_counter_ns() - t0) / 1e6
            if r.stdout != b"hi\n":
                raise RuntimeError(f"runc exec printed {r.stdout!r}")
            return dt
        return op

    def cleanup(self):
        if os.path.isdir(self.root):
            listed = run(["runc", "--root", self.root, "list", "-q"], check=False,
                         text=True).stdout.split()
            for cid in set(listed) | self.ids:
                run(["runc", "--root", self.root, "delete", "-f", cid], check=False)
        self.ids.clear()


# ---------------------------------------------------------------- podman

class Podman:
    def __init__(self, layout, prefix):
        self.prefix = prefix
        self.image = f"localhost/{prefix}-busybox:latest"
        self.names = set()
        self.seq = 0
        self.layout = layout

    def load(self):
        # skopeo, not `podman pull oci:DIR`, which names the image after the directory
        run(["skopeo", "copy", "--quiet", f"oci:{self.layout}:latest",
             f"containers-storage:{self.image}"], timeout=300)

    def start(self):
        self.seq += 1
        name = f"{self.prefix}-{self.seq}"
        self.names.add(name)
        run(["podman", "run", "-d", "--name", name] + PODMAN_OPTS + [self.image] + IDLE)
        return name

    def delete(self, name):
        run(["podman", "rm", "-f", "-t", "0", name], check=False)
        self.names.discard(name)

    def timed_create(self):
        t0 = time.perf_counter_ns()
        name = self.start()
        dt = (time.perf_counter_ns() - t0) / 1e6
        self.delete(name)
        return dt

    def exec_op(self, name):
        def op():
            t0 = time.perf_counter_ns()
            r = run(["podman", "exec", name, "echo", "hi"])
            dt = (time.perf_counter_ns() - t0) / 1e6
            if r.stdout != b"hi\n":
                raise RuntimeError(f"podman exec printed {r.stdout!r}")
            return dt
        return op

    def cleanup(self):
        listed = run(["podman", "ps", "-a", "--format", "{{.Names}}", "--filter",
                      f"name=^{self.prefix}-"], check=False, text=True).stdout.split()
        for name in set(listed) | self.names:
            self.delete(name)
        if run(["podman", "image", "exists", self.image], check=False).returncode == 0:
            run(["podman", "rmi", "-f", self.image], check=False)


# ---------------------------------------------------------------- main

def machine_info(binary):
    def out(argv):
        try:
            return run(argv, check=False, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return "?"
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cg = "v2" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else "v1/hybrid"
    return {
        "nproc": out(["nproc"]),
        "cpu": cpu,
        "kernel": out(["uname", "-r"]),
        "cgroup": cg,
        "runc": out(["runc", "--version"]).splitlines()[0] if out(["runc", "--version"]) else "?",
        "podman": out(["podman", "--version"]) if shutil.which("podman") else "not installed",
        # the commit of the tree the binary was built in (bench/ itself may be uncommitted)
        "sandboxer": out(["git", "-C", os.path.dirname(os.path.realpath(binary)), "describe",
                          "--always", "--dirty"]) or "?",
        "python": platform.python_version(),
        "loadavg": loadavg(),
    }


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def summarize(rows):
    lines = [f"{'benchmark':<18} {'tool':<17} {'n':>4} {'p50 ms':>8} {'p90 ms':>8} "
             f"{'p99 ms':>8}  target"]
    for r in rows:
        s = sorted(r["samples"])
        r["p50"], r["p90"], r["p99"] = (percentile(s, p) for p in (50, 90, 99))
        target = TARGETS.get((r["bench"], r["tool"]))
        if target is None:
            tcol = ""
        elif not s:
            tcol = f"p50 <= {target:g}: no samples"
        else:
            tcol = f"p50 <= {target:g}: {'met' if r['p50'] <= target else 'MISSED'}"
        lines.append(f"{r['bench']:<18} {r['tool']:<17} {len(s):>4} {r['p50']:>8.2f} "
                     f"{r['p90']:>8.2f} {r['p99']:>8.2f}  {tcol}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.environ.get(
        "SANDBOXER_BIN", os.path.join(ROOT, "build", "sandboxer")), help="sandboxer binary")
    ap.add_argument("--n-exec", type=int, default=500, help="Sandboxer exec samples")
    ap.add_argument("--n-exec-runc", type=int, default=200)
    ap.add_argument("--n-exec-podman", type=int, default=100)
    ap.add_argument("--n-create", type=int, default=30, help="Sandboxer create samples")
    ap.add_argument("--n-create-runc", type=int, default=30)
    ap.add_argument("--n-create-podman", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=20, help="untimed execs before each series")
    ap.add_argument("--phase-timeout", type=int, default=300,
                    help="seconds per phase; a phase past it stops with the samples it has")
    ap.add_argument("--total-timeout", type=int, default=1800,
                    help="seconds for the whole run (setup included) before it gives up")
    ap.add_argument("--no-podman", action="store_true", help="skip the podman rows")
    ap.add_argument("--log-level", default="info", help="the daemon's --log-level")
    ap.add_argument("--keep-log", metavar="PATH", help="copy the daemon's log to PATH")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = ap.parse_args()

    if os.geteuid() != 0:
        sys.exit("bench: run as root (runc, podman and the daemon need it)")
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"bench: {args.bin} is not built (make build)")
    if not args.no_podman and not shutil.which("podman"):
        sys.exit("bench: podman is not installed (bench/run installs it; or --no-podman)")

    def on_signal(signum, frame):
        raise Interrupted(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)

    def on_alarm(signum, frame):
        raise PhaseTimeout(f"the whole run took more than {args.total_timeout} s")
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(args.total_timeout)

    info = machine_info(args.bin)
    prefix = f"sbx-bench-{os.getpid()}"
    workdir = tempfile.mkdtemp(prefix="sbx-bench-")
    reg = sbx = rc = pm = failed = None
    rows = []
    t_start = time.monotonic()
    try:
        build = registry._build_module()
        layout = build.ensure("busybox")
        log(f"busybox layout: {layout}")
        os.makedirs(os.path.join(workdir, "registry"))
        reg = registry.start_registry(workdir=os.path.join(workdir, "registry"))
        registry.push_test_images(reg, names=("hello-world", "busybox"))
        sbx = Sandboxer(args.bin, os.path.join(workdir, "sandboxer"), reg.url, args.log_level)
        os.makedirs(sbx.workdir)
        sbx.start()
        rc = Runc(layout, os.path.join(workdir, "runc"), prefix)
        if not args.no_podman:
            pm = Podman(layout, prefix)
            pm.load()

        # the image is pulled by the first create, before any timing
        log("sandboxer: pulling busybox (untimed)")
        sbx.delete(sbx.create())

        # ---- exec round trip, one long-lived container per tool
        log(f"exec: sandboxer x{args.n_exec}")
        sid = sbx.create()
        for tool, make in (("sandboxer", sbx.exec_op), ("sandboxer nd", sbx.exec_op),
                           ("sandboxer nd argv", sbx.exec_argv_op)):
            client = sbx.http if tool == "sandboxer" else sbx.http_nd
            rows.append({"bench": "exec echo hi", "tool": tool, "samples": timed_loop(
                f"{tool} exec", args.n_exec, args.warmup, args.phase_timeout,
                make(sid, client))})
        sbx.delete(sid)

        log(f"exec: runc x{args.n_exec_runc}")
        cid, bundle = rc.prepare()
        rc.start(cid, bundle)
        rows.append({"bench": "exec echo hi", "tool": "runc exec", "samples": timed_loop(
            "runc exec", args.n_exec_runc, args.warmup, args.phase_timeout, rc.exec_op(cid))})
        rc.delete(cid)

        if pm:
            log(f"exec: podman x{args.n_exec_podman}")
            name = pm.start()
            rows.append({"bench": "exec echo hi", "tool": "podman exec", "samples": timed_loop(
                "podman exec", args.n_exec_podman, min(args.warmup, 5), args.phase_timeout,
                pm.exec_op(name))})
            pm.delete(name)

        # ---- create -> running, each deleted after its sample (untimed)
        log(f"create: sandboxer x{args.n_create}")
        for tool, client in (("sandboxer", sbx.http), ("sandboxer nd", sbx.http_nd)):
            rows.append({"bench": "create -> running", "tool": tool, "samples": timed_loop(
                f"{tool} create", args.n_create, 2, args.phase_timeout,
                sbx.create_op(client))})
        log(f"create: runc x{args.n_create_runc}")
        rows.append({"bench": "create -> running", "tool": "runc run -d", "samples": timed_loop(
            "runc create", args.n_create_runc, 2, args.phase_timeout, rc.timed_create)})
        if pm:
            log(f"create: podman x{args.n_create_podman}")
            rows.append({"bench": "create -> running", "tool": "podman run -d",
                         "samples": timed_loop("podman create", args.n_create_podman, 2,
                                               args.phase_timeout, pm.timed_create)})
    except (Exception, KeyboardInterrupt, Interrupted) as e:
        signal.alarm(0)
        failed = e
        log(f"stopped: {type(e).__name__}: {e}")
        if sbx is not None and not isinstance(e, (KeyboardInterrupt, Interrupted)):
            log("daemon log tail:\n" + sbx.tail())
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut cleanup
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        log("cleanup")
        for what, fn in (("sandboxer", sbx and sbx.cleanup), ("runc", rc and rc.cleanup),
                         ("podman", pm and pm.cleanup), ("registry", reg and reg.stop)):
            if fn:
                try:
                    fn()
                except Exception as ce:
                    log(f"cleanup of {what} failed: {ce}")
        if args.keep_log and sbx is not None and os.path.exists(sbx.stderr_path):
            shutil.copy(sbx.stderr_path, args.keep_log)
        with open("/proc/mounts") as f:
            mounts = [line.split()[1] for line in f]
        for m in reversed(mounts):
            if m.startswith(workdir + "/"):
                run(["umount", "-l", m], check=False)
        shutil.rmtree(workdir, ignore_errors=True)

    print()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    print(f"run took {time.monotonic() - t_start:.0f} s; load average at the start "
          f"{info['loadavg']}, at the end {loadavg()}")
    print()
    print(summarize(rows))
    print()
    print("sandboxer:    httpx 0.23 client as it comes, one keep-alive connection")
    print("sandboxer nd: the same client with TCP_NODELAY set on its socket")
    print("nd argv:      POST /sandboxes/{id}/exec {\"argv\":[\"echo\",\"hi\"]} (no sh -c)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "rows": [
                {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()
                 if k != "samples"} | {"n": len(r["samples"]),
                                       "samples_ms": [round(x, 3) for x in r["samples"]]}
                for r in rows]}, f, indent=2)
    if failed is not None:
        sys.exit(1)


if __name__ == "__main__":
    main()
