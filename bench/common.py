"""What the benchmarks share: the command line, the daemon under test (Sandboxer), podman,
timing and percentiles, the machine's facts, and one discipline for signals, time limits and
cleanup (Session). Standard library and python3-httpx only; imported by bench_*.py, which
bench/run starts with /usr/bin/python3 as root."""
import argparse
import glob
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
import registry  # noqa: E402,F401  (tests/integration/registry.py, re-exported)

TOKEN_RE = re.compile(r"\bsbx_[0-9a-f]{64}\b")
PODMAN_OPTS = ["--runtime", "runc", "--ulimit", "nofile=4096:4096", "--ulimit",
               "nproc=4096:4096", "--network", "none"]
OP_TIMEOUT = 60  # one request or one command
# The fork benchmark checkpoints here (src/sandbox/fork.c), outside the daemon's state dir.
CKPT_TMP = "/dev/shm/sandboxer-checkpoints"  # where the daemon checkpoints a fork's parent


def log(msg):
    try:
        print(f"bench: {msg}", file=sys.stderr, flush=True)
    except OSError:  # stderr gone (a closed pipe): the cleanup must go on regardless
        pass


class PhaseTimeout(Exception):
    pass


class TotalTimeout(PhaseTimeout):
    """The whole run's time limit (SIGALRM): everything stops and cleans up."""


class Interrupted(BaseException):
    """SIGTERM, turned into an exception so that the finally blocks clean up."""


# ---------------------------------------------------------------- command line

# Each script's own options. bench/run passes one command line to every script, so each
# script also accepts the others' options (hidden, ignored) and a typo still fails.
SCRIPT_ARGS = {
    "exec_create": [
        ("--n-exec", dict(type=int, default=500, help="Sandboxer exec samples")),
        ("--n-exec-runc", dict(type=int, default=200)),
        ("--n-exec-podman", dict(type=int, default=100)),
        ("--n-create", dict(type=int, default=30, help="Sandboxer create samples")),
        ("--n-create-runc", dict(type=int, default=30)),
        ("--n-create-podman", dict(type=int, default=20)),
        ("--warmup", dict(type=int, default=20, help="untimed execs before each series")),
        ("--n-many", dict(type=int, default=500, help="exec samples on an empty daemon and "
                          "then on one holding many sandboxes (0: skip that part)")),
        ("--many-exited", dict(type=int, default=50,
                               help="hello-world sandboxes left exited for it (default 50)")),
        ("--many-hibernated", dict(type=int, default=50,
                                   help="busybox sandboxes left hibernated for it (default 50)")),
        ("--idle-seconds", dict(type=float, default=5.0, help="how long the daemon's idle CPU "
                                "time is measured in each state (default 5)")),
    ],
    "fork": [
        ("--sizes", dict(default="50,200", help="MB of touched memory the server holds, "
                         "comma-separated (default 50,200)")),
        ("--workload", dict(default="exec", help="how the server runs, comma-separated: exec "
                            "(default: an idle sandbox, the server started through exec with "
                            "nohup ... &, as agents do) and/or main (the server is the "
                            "sandbox's main process)")),
        ("--n-fork", dict(type=int, default=10, help="Sandboxer fork samples per size")),
        ("--n-hibernate", dict(type=int, default=10,
                               help="Sandboxer hibernate/wake cycles per size")),
        ("--n-snapshot", dict(type=int, default=10,
                              help="Sandboxer creates from a snapshot per size")),
        ("--n-podman", dict(type=int, default=5,
                            help="podman checkpoint/restore samples per size and kind")),
        ("--fork-warmup", dict(type=int, default=1,
                               help="untimed operations before each series")),
        ("--keep-criu-logs", dict(metavar="DIR", help="copy CRIU's dump.log/restore.log "
                                  "of every Sandboxer operation into DIR")),
    ],
    "soak": [
        ("--ops", dict(type=int, default=2000, help="random lifecycle operations (default "
                       "2000; the prefill is not counted)")),
        ("--seed", dict(type=int, default=1, help="the RNG's seed (default 1, so that two "
                        "runs draw the same operations)")),
        ("--soak-sandboxes", dict(type=int, default=20,
                                  help="sandboxes the soak keeps around (default 20)")),
        ("--check-every", dict(type=int, default=100,
                               help="operations between leak checks (default 100)")),
        ("--soak-exec-samples", dict(type=int, default=100, help="exec samples for the "
                                     "p50 at each check, on each daemon (default 100)")),
        ("--exec-bound", dict(type=float, default=1.20, help="exec p50 (over an idle "
                              "control daemon's) at most this many times the first check's "
                              "(default 1.20)")),
        ("--rss-growth-mb", dict(type=int, default=32, help="the daemon's RSS at most this "
                                 "many MB above the first check's (default 32)")),
        ("--op-timeout", dict(type=int, default=120,
                              help="seconds for one request of an operation (default 120)")),
        ("--skip-ops", dict(default="", help="operations left out, comma-separated (e.g. "
                            "coalesce while a known bug in it would mask the rest)")),
        ("--soak-idle-seconds", dict(type=float, default=3.0, help="seconds of the daemon's "
                                     "idle CPU measured at each check (default 3)")),
    ],
    "proxy": [
        ("--n-small", dict(type=int, default=500,
                           help="1 KiB GETs per path (proxy, direct)")),
        ("--n-big", dict(type=int, default=5, help="big downloads per path and client")),
        ("--big-mb", dict(type=int, default=100, help="MB of the big file (default 100)")),
        ("--proxy-warmup", dict(type=int, default=50,
                                help="untimed small GETs per path before the series")),
    ],
    "seccomp": [
        ("--bin-old", dict(metavar="PATH", help="the other sandboxer binary to compare with "
                           "(e.g. one built before the allow list)")),
        ("--sc-rounds", dict(type=int, default=4, help="rounds, alternating the daemons")),
        ("--sc-n-exec", dict(type=int, default=200, help="exec samples per round")),
        ("--sc-n-create", dict(type=int, default=10, help="create samples per round")),
        ("--sc-n-fork", dict(type=int, default=5, help="fork samples per round")),
    ],
    "userns": [
        ("--un-rounds", dict(type=int, default=4, help="rounds, alternating the daemons")),
        ("--un-n-exec", dict(type=int, default=200, help="exec samples per round")),
        ("--un-n-create", dict(type=int, default=10,
                               help="create samples per round and tool")),
        ("--un-n-fork", dict(type=int, default=5, help="fork samples per round")),
        ("--un-n-hibernate", dict(type=int, default=5,
                                  help="hibernate/wake pairs per round")),
    ],
    "terminal": [
        ("--n-open", dict(type=int, default=100,
                          help="terminal open samples per tool (default 100)")),
        ("--n-key", dict(type=int, default=500,
                         help="keystroke echo samples for Sandboxer (default 500); runc and "
                         "podman take at most 200")),
    ],
}


def parser(script, doc):
    """The argument parser of bench_<script>.py: the shared options, its own, and the
    other scripts' as hidden no-ops."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--bin", default=os.environ.get(
        "SANDBOXER_BIN", os.path.join(ROOT, "build", "sandboxer")), help="sandboxer binary")
    ap.add_argument("--phase-timeout", type=int, default=300,
                    help="seconds per phase; a phase past it stops with the samples it has")
    ap.add_argument("--total-timeout", type=int, default=1800,
                    help="seconds for the whole run (setup included) before it gives up")
    ap.add_argument("--no-podman", action="store_true", help="skip the podman rows")
    ap.add_argument("--log-level", default="info", help="the daemon's --log-level")
    ap.add_argument("--keep-log", metavar="PATH", help="copy the daemon's log to PATH")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--userns", choices=("auto", "on", "off"), default="auto",
                    help="the daemon's --userns: compare runc sandboxes with and without user "
                    "namespaces by running a script twice")
    ap.add_argument("--runtimes", default="runc,runsc",
                    help="the sandbox runtimes to measure, comma-separated: runc and/or runsc "
                    "(gVisor, on the platform the daemon probes; left out with a note when "
                    "runsc is not installed; exec_create measures runc always); default runc,runsc")
    for name, specs in SCRIPT_ARGS.items():
        for flag, kw in specs:
            if name == script:
                ap.add_argument(flag, **kw)
            else:
                hidden = {k: v for k, v in kw.items() if k in ("type", "metavar")}
                ap.add_argument(flag, dest=f"_other_{flag[2:]}", help=argparse.SUPPRESS,
                                **hidden)
    return ap


RUNTIMES = ("runc", "runsc")


def runtimes(args):
    """The runtimes of --runtimes, in their order; runsc only where it is installed."""
    want = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    if not want or any(r not in RUNTIMES for r in want):
        sys.exit(f"bench: --runtimes takes runc and/or runsc, not {args.runtimes!r}")
    if "runsc" in want and not shutil.which("runsc"):
        log("runsc is not installed: its rows are left out (scripts/setup installs it)")
        want.remove("runsc")
    return want


def tool_name(runtime, base="sandboxer"):
    """The tool column of a Sandboxer row: "sandboxer" on runc (the targets are for it),
    "sandboxer runsc" on gVisor."""
    return base if runtime == "runc" else f"{base} {runtime}"


def check_prerequisites(args):
    if os.geteuid() != 0:
        sys.exit("bench: run as root (runc, podman and the daemon need it)")
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"bench: {args.bin} is not built (make build)")
    if not args.no_podman and not shutil.which("podman"):
        sys.exit("bench: podman is not installed (bench/run installs it; or --no-podman)")


# ---------------------------------------------------------------- timing

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


def cpu_ms(pid):
    """utime + stime of process pid (all its threads) in ms, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


def idle_cpu(pid, seconds):
    """CPU time (ms) process pid uses over seconds in which nobody asks it anything, and that
    as a share of one CPU (%)."""
    c0, t0 = cpu_ms(pid), time.monotonic()
    time.sleep(seconds)
    used, wall = cpu_ms(pid) - c0, time.monotonic() - t0
    return used, 100.0 * used / (wall * 1000.0)


def timed_run(argv, timeout=OP_TIMEOUT):
    """run(argv) and its wall time in ms."""
    t0 = time.perf_counter_ns()
    r = run(argv, timeout=timeout)
    return (time.perf_counter_ns() - t0) / 1e6, r


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


def interleaved(name, ops, n, warmup, budget):
    """warmup untimed rounds, then n timed ones, of each op in ops one after the other (the
    order flipping every round), so that the machine's load hits them alike; returns one
    list of samples (ms) per op. Stops early (and says so) past budget seconds."""
    deadline = time.monotonic() + budget
    for _ in range(warmup):
        for op in ops:
            op()
    samples = [[] for _ in ops]
    for i in range(n):
        if time.monotonic() > deadline:
            log(f"{name}: phase budget of {budget} s spent after {i} of {n} rounds")
            break
        for k in (range(len(ops)) if i % 2 == 0 else reversed(range(len(ops)))):
            samples[k].append(ops[k]())
    return samples


# ---------------------------------------------------------------- Sandboxer

class Sandboxer:
    """The daemon under test, on a free loopback port with its own state dir under workdir,
    and the sandboxes and snapshots made through it."""

    def __init__(self, binary, workdir, registry_url, log_level, extra_args=()):
        self.binary = binary
        self.extra_args = list(extra_args)
        self.workdir = workdir
        self.state_dir = os.path.join(workdir, "state")
        self.registry_url = registry_url
        self.log_level = log_level
        self.proc = None
        self.http = None
        self.http_nd = None
        self.ids = set()
        self.snapshots = set()
        self.stdout_path = os.path.join(workdir, "daemon.stdout")
        self.stderr_path = os.path.join(workdir, "daemon.log")

    def start(self, timeout=30):
        os.makedirs(self.workdir, exist_ok=True)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        args = [self.binary, "serve", "--listen", f"127.0.0.1:{port}", "--socket", "none",
                "--state-dir", self.state_dir, "--registry-mirror", self.registry_url,
                "--log-level", self.log_level] + self.extra_args
        if "--templates-dir" not in self.extra_args:
            # importing the built-in templates at start takes a minute of a core, a thread and
            # a child: not what the other benchmarks measure (bench_templates passes its own)
            args += ["--templates-dir", "none"]
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

    def request(self, method, path, expect=(200,), timeout=OP_TIMEOUT, client=None, **kw):
        """One API call; RuntimeError unless its status is in expect. Returns the response."""
        r = (client or self.http_nd).request(method, path, timeout=timeout, **kw)
        if r.status_code not in expect:
            raise RuntimeError(f"{method} {path}: {r.status_code} {r.text[:1000]}")
        return r

    def runsc_platform(self):
        """What the daemon's runsc platform probe chose, from its log ("?" before it says)."""
        try:
            with open(self.stderr_path, errors="replace") as f:
                m = re.search(r"event=runsc\.platform platform=(\w+)", f.read())
        except OSError:
            m = None
        return m.group(1) if m else "?"

    def create(self, client=None, body=None, timeout=300):
        """POST /sandboxes (busybox unless body says otherwise); returns the new id."""
        r = self.request("POST", "/sandboxes", expect=(200,), timeout=timeout, client=client,
                         json=body or {"image": "busybox"})
        sid = r.json()["id"]
        self.ids.add(sid)
        return sid

    def delete(self, sid):
        self.request("DELETE", f"/sandboxes/{sid}", expect=(200, 404))
        self.ids.discard(sid)

    def create_op(self, client, runtime="runc"):
        def op():
            t0 = time.perf_counter_ns()
            sid = self.create(client, body={"image": "busybox", "runtime": runtime})
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
        if self.http is not None and self.proc is not None and self.proc.poll() is None:
            # what it lists too: a child whose fork response was cut off is not in self.ids
            listed = set()
            try:
                listed = {s["id"] for s in self.request("GET", "/sandboxes").json()["sandboxes"]
                          if s.get("status") != "terminated"}
                self.snapshots |= {s["name"] for s in
                                   self.request("GET", "/snapshots").json()["snapshots"]}
            except Exception as e:
                log(f"cleanup: listing: {e}")
            for sid in self.ids | listed:
                try:
                    self.delete(sid)
                except Exception as e:  # keep going: the state sweep below catches it
                    log(f"cleanup: delete {sid}: {e}")
            for name in list(self.snapshots):
                try:
                    self.request("DELETE", f"/snapshots/{name}", expect=(200, 404))
                    self.snapshots.discard(name)
                except Exception as e:  # the state dir goes with the workdir anyway
                    log(f"cleanup: delete snapshot {name}: {e}")
        if self.http is not None:
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
    """Whatever a daemon on state_dir left behind: containers, shims, cgroups, and the
    fork checkpoints of its sandboxes in CKPT_TMP (a daemon stopped mid-fork leaves one)."""
    for rt in RUNTIMES:
        root = os.path.join(state_dir, rt)
        if not os.path.isdir(root) or not shutil.which(rt):
            continue
        ids = run([rt, "--root", root, "list", "-q"], check=False, text=True).stdout.split()
        for cid in ids:
            log(f"cleanup: {rt} sandbox container {cid} was left; removing it")
            run([rt, "--root", root, "kill", "--all", cid, "KILL"], check=False)
            run([rt, "--root", root, "delete", "--force", cid], check=False)
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
    for d in glob.glob(os.path.join(state_dir, "sandboxes", "*", "")):
        sid = os.path.basename(os.path.dirname(d))
        ckpt = os.path.join(CKPT_TMP, sid)
        if re.fullmatch(r"[0-9a-f]{32,64}", sid) and os.path.isdir(ckpt):
            log(f"cleanup: fork checkpoint {ckpt} was left; removing it")
            shutil.rmtree(ckpt, ignore_errors=True)


class OwnNetwork:
    """A bridge, nftables tables and subnet of this run only (serve's --bridge, --nft-table,
    --subnet), so that a daemon whose sandboxes are reached over the network stays apart from
    any other daemon on the host; cleanup() removes the bridge and the tables (register it
    before the daemon's cleanup: it runs after the daemon stopped)."""

    def __init__(self, tag, index=0):
        # index: a second daemon of the same run gets a bridge and table of its own
        suffix = chr(ord("a") + index) if index else ""
        self.bridge = f"sbb{os.getpid() % 100000}{suffix}"
        self.table = f"sbxbench_{tag}_{os.getpid()}{suffix}"
        used = run(["ip", "-4", "route", "show"], check=False, text=True).stdout
        for second in list(range(200, 250)) + list(range(100, 150)):
            if f"10.{second}." not in used:
                self.subnet = f"10.{second}.0.0/16"
                break
        else:
            raise RuntimeError("no free 10.x.0.0/16 subnet for the benchmark's bridge")

    def args(self):
        return ["--bridge", self.bridge, "--nft-table", self.table, "--subnet", self.subnet]

    def cleanup(self):
        for family in ("inet", "arp"):
            run(["nft", "delete", "table", family, self.table], check=False)
        run(["ip", "link", "del", self.bridge], check=False)


# ---------------------------------------------------------------- podman

class Podman:
    """An OCI layout loaded into podman's storage under a name of this run, and the
    containers of this run (all named PREFIX-…)."""

    def __init__(self, layout, prefix, image_name, tag="latest"):
        self.prefix = prefix
        self.image = f"localhost/{prefix}-{image_name}:{tag}"
        self.names = set()
        self.seq = 0
        self.layout = layout

    def load(self):
        # skopeo, not `podman pull oci:DIR`, which names the image after the directory
        run(["skopeo", "copy", "--quiet", f"oci:{self.layout}:latest",
             f"containers-storage:{self.image}"], timeout=300)

    def new_name(self):
        self.seq += 1
        name = f"{self.prefix}-{self.seq}"
        self.names.add(name)
        return name

    def delete(self, name):
        run(["podman", "rm", "-f", "-t", "0", name], check=False)
        self.names.discard(name)

    def cleanup(self):
        listed = run(["podman", "ps", "-a", "--format", "{{.Names}}", "--filter",
                      f"name=^{self.prefix}-"], check=False, text=True).stdout.split()
        for name in set(listed) | self.names:
            self.delete(name)
        if run(["podman", "image", "exists", self.image], check=False).returncode == 0:
            run(["podman", "rmi", "-f", self.image], check=False)


# ---------------------------------------------------------------- the run

class Session:
    """One benchmark run: SIGTERM and the total time limit become exceptions, a temporary
    workdir, and cleanups that run in reverse order of registration with signals ignored,
    then the workdir's mounts and the workdir go."""

    def start_sandboxer(self, args, tag, names=(), python=False):
        """A registry with the test images names (and python), and a daemon on its own
        network that pulls from it; both are cleaned up with the session."""
        os.makedirs(os.path.join(self.workdir, "registry"))
        reg = registry.start_registry(workdir=os.path.join(self.workdir, "registry"))
        self.on_cleanup("registry", reg.stop)
        registry.push_test_images(reg, names=names, python=python)
        return reg, self.start_daemon(args, tag, reg)

    def start_daemon(self, args, tag, reg):
        """One more daemon (the first is "sandboxer", the next "sandboxer-2" ...) pulling
        from reg, on a network of its own; cleaned up with the session."""
        self.daemons += 1
        net = OwnNetwork(tag, self.daemons - 1)
        self.on_cleanup("bridge and nftables table", net.cleanup)
        name = "sandboxer" if self.daemons == 1 else f"sandboxer-{self.daemons}"
        sbx = Sandboxer(args.bin, os.path.join(self.workdir, name), reg.url,
                        args.log_level, extra_args=net.args() + ["--userns", args.userns])
        self.on_cleanup(name, sbx.cleanup)
        sbx.start()
        return sbx

    def stopped(self, e, sbx):
        """A run ended by e: stop the time limits, say why (with the daemon's log tail when
        it is not an interruption) and return e for the caller's summary."""
        self.disarm()
        log(f"stopped: {type(e).__name__}: {e}")
        if sbx is not None and not isinstance(e, (KeyboardInterrupt, Interrupted)):
            log("daemon log tail:\n" + sbx.tail())
        return e

    def __init__(self, total_timeout):
        def on_signal(signum, frame):
            raise Interrupted(f"signal {signum}")

        def on_alarm(signum, frame):
            raise TotalTimeout(f"the whole run took more than {total_timeout} s")
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(total_timeout)
        self.prefix = f"sbx-bench-{os.getpid()}"
        self.workdir = tempfile.mkdtemp(prefix="sbx-bench-")
        os.chmod(self.workdir, 0o711)  # a sandbox's root (a user namespace's) reaches its dirs
        self.cleanups = []
        self.daemons = 0
        self.t_start = time.monotonic()

    def disarm(self):
        signal.alarm(0)

    def on_cleanup(self, what, fn):
        self.cleanups.append((what, fn))

    def close(self):
        signal.alarm(0)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut cleanup
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        log("cleanup")
        for what, fn in reversed(self.cleanups):
            try:
                fn()
            except Exception as ce:
                log(f"cleanup of {what} failed: {ce}")
        with open("/proc/mounts") as f:
            mounts = [line.split()[1] for line in f]
        for m in reversed(mounts):
            if m.startswith(self.workdir + "/"):
                run(["umount", "-l", m], check=False)
        shutil.rmtree(self.workdir, ignore_errors=True)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def keep_log_cleanup(sbx_getter, path):
    """A cleanup that copies the daemon's log to path (register it first: it runs last,
    after the daemon stopped, before the workdir goes)."""
    def fn():
        sbx = sbx_getter()
        if path and sbx is not None and os.path.exists(sbx.stderr_path):
            shutil.copy(sbx.stderr_path, path)
    return fn


# ---------------------------------------------------------------- machine

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
    runc_v = out(["runc", "--version"])
    return {
        "nproc": out(["nproc"]),
        "cpu": cpu,
        "kernel": out(["uname", "-r"]),
        "cgroup": cg,
        "runc": runc_v.splitlines()[0] if runc_v and runc_v != "?" else "?",
        "podman": out(["podman", "--version"]) if shutil.which("podman") else "not installed",
        "runsc": (out(["runsc", "--version"]).splitlines() or ["?"])[0]
        if shutil.which("runsc") else "not installed",
        # the commit of the tree the binary was built in (bench/ itself may be uncommitted)
        "sandboxer": out(["git", "-C", os.path.dirname(os.path.realpath(binary)), "describe",
                          "--always", "--dirty"]) or "?",
        "python": platform.python_version(),
        "loadavg": loadavg(),
        "cgroup move at start": cgroup_move_ms(),
    }


def cgroup_move_ms():
    """Median ms to move a process into a new cgroup (what each container start or restore
    does), and whether cgroup2 has favordynmods: the kernel makes a move wait for an RCU grace
    period unless that option is (or was, on newer kernels) on."""
    v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
    base = "/sys/fs/cgroup" if v2 else "/sys/fs/cgroup/cpuset"
    probe = os.path.join(base, f"sandboxer-bench-probe-{os.getpid()}")
    times = []
    try:
        os.mkdir(probe)
        if not v2:  # a v1 cpuset cgroup takes no task before it has CPUs and memory nodes
            for name in ("cpuset.cpus", "cpuset.mems"):
                with open(os.path.join(base, name)) as f, \
                        open(os.path.join(probe, name), "w") as g:
                    g.write(f.read())
        for _ in range(3):
            p = subprocess.Popen(["sleep", "10"])
            try:
                time.sleep(0.2)
                t = time.perf_counter()
                with open(os.path.join(probe, "cgroup.procs"), "w") as f:
                    f.write(str(p.pid))
                times.append((time.perf_counter() - t) * 1000)
            finally:
                p.kill()
                p.wait()
    except OSError:
        pass
    finally:
        time.sleep(0.1)
        try:
            os.rmdir(probe)
        except OSError:
            pass
    opts = "?"
    path = "/sys/fs/cgroup" if v2 else "/sys/fs/cgroup/unified"
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                rest = fields[fields.index("-") + 1:]
                if fields[4] == path and rest[0] == "cgroup2":
                    opts = "on" if "favordynmods" in rest[2].split(",") else "off"
    except (OSError, ValueError, IndexError):
        pass
    ms = f"{sorted(times)[len(times) // 2]:.2f} ms" if times else "?"
    return f"{ms} (favordynmods {opts})"


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def print_header(info, t_start):
    print()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    print(f"run took {time.monotonic() - t_start:.0f} s; load average at the start "
          f"{info['loadavg']}, at the end {loadavg()}; cgroup move at the end "
          f"{cgroup_move_ms()}")
    print()
