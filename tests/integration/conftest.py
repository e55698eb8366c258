"""Fixtures that run the real daemon on a temporary state dir and a free port."""
import contextlib
import fcntl
import glob
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import httpx
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SANDBOXER_BIN", os.path.join(ROOT, "build", "sandboxer"))
TOKEN_RE = re.compile(r"\bsbx_[0-9a-f]{64}\b")
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


# The sanitizer build runs 2-5 times slower, and CI runs it beside the plain suite on two
# cores: every wait on a condition gets this much longer there (a bound, not a sleep).
SLOW = 3 if os.environ.get("SANDBOXER_SANITIZED") else 1


def wait_for(what, fn, timeout=30, interval=0.05):
    """fn() until it returns something true (which is returned); fail saying what was awaited
    and what fn last returned after timeout seconds (times SLOW). Tests wait on conditions,
    not sleeps."""
    deadline = time.monotonic() + timeout * SLOW
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


_HOST_LOCKS = {}  # name -> [open lock file, holders in this process]


@contextlib.contextmanager
def host_exclusive(name, timeout=1800):
    """Hold a host-wide lock while a module uses fixed host resources (a bridge, an nft table,
    links and addresses of its own, the doctor's probe names): CI runs the plain and the
    sanitizer suites side by side, and two runs of such a module would tear down or answer
    for each other. Re-entrant within this process; gives up after timeout seconds."""
    held = _HOST_LOCKS.get(name)
    if held:
        held[1] += 1
    else:
        lockdir = "/run/lock" if os.path.isdir("/run/lock") else tempfile.gettempdir()
        f = open(os.path.join(lockdir, f"sandboxer-tests-{name}.lock"), "w")
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    f.close()
                    raise AssertionError(f"another test run held the {name} lock for {timeout} s")
                time.sleep(0.2)
        held = _HOST_LOCKS[name] = [f, 1]
    try:
        yield
    finally:
        held[1] -= 1
        if held[1] == 0:
            del _HOST_LOCKS[name]
            held[0].close()  # releases the lock


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_daemons = itertools.count()


def own_subnet(n):
    """A 10.x.0.0/16 (x in 150-199) no route uses yet and no other test daemon holds, picked
    from a start that differs per test process, and the open lock file that holds it (closed
    by Daemon.kill). Two pytest runs side by side (CI's plain and sanitizer suites) could
    both see a subnet free before either's bridge had its route: the lock decides."""
    used = subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True).stdout
    start = (os.getpid() * 7 + n) % 50
    for i in range(50):
        second = 150 + (start + i) % 50
        if f"10.{second}." in used:
            continue
        lock = open(f"/run/lock/sandboxer-test-subnet-10.{second}", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        return f"10.{second}.0.0/16", lock
    raise RuntimeError("no free 10.x.0.0/16 subnet in 10.150-199")


class Daemon:
    """One `sandboxer serve` process; start/stop can be repeated on the same state dir.
    Each gets its own bridge, nftables table and subnet, removed again by kill()."""

    def __init__(self, workdir, extra_args=(), env=None):
        self.workdir = workdir
        self.env = env
        n = next(_daemons)
        self.bridge = f"sbt{os.getpid() % 10000}x{n}"
        self.table = f"sbxtest_{os.getpid()}_{n}"
        self.subnet, self.subnet_lock = own_subnet(n)
        self.state_dir = os.path.join(workdir, "state")
        self.socket = os.path.join(workdir, "api.sock")
        self.extra_args = list(extra_args)
        # SANDBOXER_TEST_USERNS=on|auto runs every test daemon with that --userns.
        if os.environ.get("SANDBOXER_TEST_USERNS") and "--userns" not in self.extra_args:
            self.extra_args += ["--userns", os.environ["SANDBOXER_TEST_USERNS"]]
        self.port = None
        self.proc = None
        self.stdout_path = None
        self.stderr_path = None
        self.starts = 0
        self.admin_token = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def searchable(self):
        """Make the work dir and its parents searchable by others, as /var/lib is: a
        sandbox's root (an unprivileged host uid in its user namespace) must reach its dirs
        in the state dir (mkdtemp makes them 0700, and pytest's tmp_path sits in a 0700
        /tmp/pytest-of-root)."""
        d = os.path.abspath(self.workdir)
        while d not in ("/", "/tmp"):
            st = os.stat(d)
            if not st.st_mode & 0o001:
                os.chmod(d, (st.st_mode & 0o7777) | 0o711)
            d = os.path.dirname(d)

    def start(self, timeout=20):
        if self.port is None:  # a restart keeps the address, so clients keep working
            self.port = free_port()
        self.searchable()
        self.starts += 1
        self.stdout_path = os.path.join(self.workdir, f"stdout.{self.starts}")
        self.stderr_path = os.path.join(self.workdir, f"stderr.{self.starts}")
        # ptrace unless a test asks: the kvm probe takes its whole bound on this nested VM.
        platform = [] if any(a.startswith("--runsc-platform") for a in self.extra_args) \
            else ["--runsc-platform", "ptrace"]
        args = [BIN, "serve", "--listen", f"127.0.0.1:{self.port}", "--socket", self.socket,
                "--state-dir", self.state_dir, "--bridge", self.bridge, "--nft-table",
                self.table, "--subnet", self.subnet] + platform + self.extra_args
        if "--templates-dir" not in self.extra_args:  # importing templates takes a minute
            args += ["--templates-dir", "none"]
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            env = dict(os.environ, **(self.env or {}))
            self.proc = subprocess.Popen(args, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}: {self.log()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    m = TOKEN_RE.search(self.stdout())
                    if m and not self.admin_token:  # printed on the first start only
                        self.admin_token = m.group(0)
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("daemon did not become healthy: " + self.log())

    def stdout(self):
        with open(self.stdout_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def log(self, tail=4000):
        try:
            with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-tail:]
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if not self.proc or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.keep_logs()
        cleanup_state(self.state_dir)
        for family in ("inet", "arp"):
            subprocess.run(["nft", "delete", "table", family, self.table], capture_output=True,
                           timeout=30)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)
        self.subnet_lock.close()  # the subnet is free for another test daemon
        self.check_sanitizers()

    def keep_logs(self):
        """With SANDBOXER_TEST_LOGS=DIR, copy this daemon's logs there (named after the test)
        before its work dir goes: a failure's daemon side can be read afterwards."""
        keep = os.environ.get("SANDBOXER_TEST_LOGS")
        if not keep:
            return
        os.makedirs(keep, exist_ok=True)
        test = os.environ.get("PYTEST_CURRENT_TEST", "unknown").split(" ")[0]
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", test)[-150:]
        for n in range(1, self.starts + 1):
            src = os.path.join(self.workdir, f"stderr.{n}")
            if os.path.exists(src):
                shutil.copyfile(src, os.path.join(keep, f"{name}.{os.getpid()}.{n}.log"))

    def check_sanitizers(self):
        """Under ASan/UBSan a report in any run's stderr fails the test."""
        for n in range(1, self.starts + 1):
            path = os.path.join(self.workdir, f"stderr.{n}")
            if not os.path.exists(path):
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            for marker in SANITIZER_MARKERS:
                assert marker not in text, f"sanitizer report in daemon log:\n{text[-6000:]}"


def cleanup_state(state_dir):
    """Remove every container, shim, mount and cgroup a daemon on state_dir left behind."""
    root = os.path.join(state_dir, "runc")
    if os.path.isdir(root):
        ids = subprocess.run(["runc", "--root", root, "list", "-q"], capture_output=True,
                             text=True, timeout=30).stdout.split()
        for cid in ids:
            subprocess.run(["runc", "--root", root, "kill", "--all", cid, "KILL"],
                           capture_output=True, timeout=30)
            subprocess.run(["runc", "--root", root, "delete", "--force", cid],
                           capture_output=True, timeout=30)
            remove_cgroups(cid)
    root = os.path.join(state_dir, "runsc")
    if os.path.isdir(root) and shutil.which("runsc"):
        ids = subprocess.run(["runsc", "--root", root, "list", "-q"], capture_output=True,
                             text=True, timeout=30).stdout.split()
        for cid in ids:
            subprocess.run(["runsc", "--root", root, "delete", "--force", cid],
                           capture_output=True, timeout=30)
            remove_cgroups(cid)
    for pid in runsc_pids(state_dir):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    subprocess.run(["pkill", "-KILL", "-f", f"internal-shim .*{state_dir}/"],
                   capture_output=True, timeout=30)
    # The daemon's own dir of fork checkpoints in /dev/shm (named by its state dir).
    import hashlib
    shutil.rmtree(os.path.join("/dev/shm/sandboxer-checkpoints",
                               hashlib.sha256(state_dir.encode()).hexdigest()[:16]),
                  ignore_errors=True)
    with open("/proc/mounts") as f:
        mounts = [line.split()[1] for line in f]
    for m in reversed(mounts):
        if m.startswith(state_dir + "/"):
            subprocess.run(["umount", "-l", m], capture_output=True, timeout=30)


def runsc_pids(state_dir):
    """Host pids of runsc processes (the sandbox, its gofer, a probe) of a daemon's state dir."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if args and args[0].startswith(b"runsc") and \
                any(state_dir.encode() + b"/" in a for a in args):
            pids.append(int(entry))
    return pids


def remove_cgroups(cid):
    for base in glob.glob("/sys/fs/cgroup/*/sandboxer") + ["/sys/fs/cgroup/sandboxer"]:
        path = os.path.join(base, cid)
        if os.path.isdir(path):
            try:
                os.rmdir(path)
            except OSError:
                pass


def leftover_cgroups(cid):
    paths = glob.glob(f"/sys/fs/cgroup/*/sandboxer/{cid}") + \
        glob.glob(f"/sys/fs/cgroup/sandboxer/{cid}")
    return [p for p in paths if os.path.isdir(p)]


class Client:
    """httpx with the base URL and a bearer token."""

    def __init__(self, url, token=None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.token = token
        self.http = httpx.Client(base_url=url, headers=headers, timeout=30)

    def __getattr__(self, name):
        return getattr(self.http, name)

    def close(self):
        self.http.close()


@pytest.fixture
def daemon():
    """A fresh daemon on its own state dir; its admin token is in daemon.admin_token."""
    with tempfile.TemporaryDirectory(prefix="sbx-test-") as workdir:
        d = Daemon(workdir)
        try:
            d.start()
            assert d.admin_token, "first start must print the admin token"
            yield d
        finally:
            d.kill()


@pytest.fixture
def admin(daemon):
    c = Client(daemon.url, daemon.admin_token)
    yield c
    c.close()


@pytest.fixture
def make_user(daemon, admin):
    """make_user("alice") → a Client authenticated as a new (non-admin) user."""
    clients = []

    def make(name):
        r = admin.post("/auth/tokens", json={"user": name, "name": "test"})
        assert r.status_code == 201, r.text
        c = Client(daemon.url, r.json()["token"])
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


# ---- sandboxes: a local registry with the test images, and a daemon that pulls from it ----

@pytest.fixture(scope="session")
def registry_url():
    """A docker-registry on 127.0.0.1 holding hello-world, busybox, webapp, python and node
    (the Debian images are built once and cached: see tests/images/build.py)."""
    import registry
    reg = registry.start_registry()
    try:
        registry.push_test_images(reg, ("hello-world", "busybox", "webapp", "node"), python=True)
        yield reg.url
    finally:
        reg.stop()


@pytest.fixture
def sbx_daemon(registry_url):
    with tempfile.TemporaryDirectory(prefix="sbx-test-") as workdir:
        d = Daemon(workdir, ["--registry-mirror", registry_url])
        try:
            d.start()
            yield d
        finally:
            d.kill()


class Sandboxes(Client):
    """A client that deletes the sandboxes it created when the test ends."""

    def __init__(self, url, token):
        super().__init__(url, token)
        self.created = []

    runtime = None  # set by the sbx_rt fixture: every create asks for it

    def create(self, image="busybox", expect=200, **body):
        body["image"] = image
        if self.runtime and "snapshot" not in body:
            body.setdefault("runtime", self.runtime)
        r = self.http.post("/sandboxes", json=body, timeout=300)
        assert r.status_code == expect, r.text
        if r.status_code == 200:
            self.created.append(r.json()["id"])
        return r.json()

    def sh(self, sid, code, expect=200, **extra):
        r = self.http.post(f"/sandboxes/{sid}/execute", json={"code": code, **extra},
                           timeout=120)
        assert r.status_code == expect, r.text
        return r.json()

    def cleanup(self):
        for sid in self.created:
            try:
                self.http.delete(f"/sandboxes/{sid}", timeout=60)
            except httpx.HTTPError:
                pass
        self.close()


@pytest.fixture
def sbx(sbx_daemon):
    c = Sandboxes(sbx_daemon.url, sbx_daemon.admin_token)
    yield c
    c.cleanup()


RUNTIMES = ["runc", "runsc"]


@pytest.fixture(params=RUNTIMES)
def runtime(request):
    """Each runtime in turn: the lifecycle on runc + CRIU and on runsc (gVisor). runsc is
    installed by scripts/setup; a host without it fails here rather than skipping."""
    assert request.param != "runsc" or shutil.which("runsc"), "runsc is not installed"
    return request.param


@pytest.fixture
def sbx_rt(sbx, runtime):
    """sbx whose creates ask for the parametrized runtime."""
    sbx.runtime = runtime
    return sbx


@pytest.fixture
def sbx_user(sbx_daemon, sbx):
    """sbx_user("bob") → a Sandboxes client for a new user."""
    made = []

    def make(name):
        tok = sbx.post("/auth/tokens", json={"user": name}).json()["token"]
        c = Sandboxes(sbx_daemon.url, tok)
        made.append(c)
        return c

    yield make
    for c in made:
        c.cleanup()


# ---- templates: base and code-interpreter, built by templates/build.py as setup does ----

# tpl_daemon's --e2b-domain: E2B's SDKs reach it by api.<domain> and <port>-<id>.<domain>.
E2B_DOMAIN = "e2b.localhost"
TEMPLATES_CACHE = os.environ.get("SANDBOXER_TEMPLATES_CACHE", "/var/cache/sandboxer/templates")


def ensure_templates(names=("base", "code-interpreter")):
    """Build (or find cached) the built-in templates through scripts/setup's code path;
    returns their cache dir. The first build takes minutes (debootstrap)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "sandboxer_templates_build", os.path.join(ROOT, "templates", "build.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name in names:
        mod.ensure(name, TEMPLATES_CACHE)
    return TEMPLATES_CACHE


@pytest.fixture(scope="session")
def tpl_daemon():
    """One daemon (for the session) with the built-in templates imported and NO registry
    mirror: what a fresh install that reaches no registry has. It answers E2B's SDKs below
    E2B_DOMAIN too (tests/integration/test_e2b_*.py)."""
    cache = ensure_templates()
    with tempfile.TemporaryDirectory(prefix="sbx-tpl-") as workdir:
        d = Daemon(workdir, ["--templates-dir", cache, "--e2b-domain", E2B_DOMAIN])
        try:
            d.start()
            with httpx.Client(base_url=d.url, timeout=900,
                              headers={"Authorization": f"Bearer {d.admin_token}"}) as c:
                r = c.get("/templates")  # waits for the import at start
                assert r.status_code == 200, r.text
                names = {t["name"] for t in r.json()["templates"]}
                assert {"base", "code-interpreter"} <= names, names
            yield d
        finally:
            d.kill()


@pytest.fixture
def tpl(tpl_daemon):
    """An admin client of tpl_daemon that deletes the sandboxes it created."""
    c = Sandboxes(tpl_daemon.url, tpl_daemon.admin_token)
    yield c
    c.cleanup()
