"""A local OCI registry for pull tests: Debian's docker-registry on 127.0.0.1 with a
temporary storage dir, and the test images (tests/images/build.py) pushed into it.

    reg = start_registry()
    push_test_images(reg, ["hello-world", "busybox"])    # python=True adds python
    ... a daemon started with --registry-mirror reg.url pulls hello-world, busybox ...
    reg.stop()

Pushed as <host>/library/<name>:latest, so docker.io/library/<name> resolves through a
mirror at reg.url. Standard library only.
"""
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

REGISTRY_BIN = "/usr/bin/docker-registry"
SKOPEO = "/usr/bin/skopeo"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_PY = os.path.join(ROOT, "tests", "images", "build.py")
POLICY = '{"default": [{"type": "insecureAcceptAnything"}]}\n'


def _build_module():
    spec = importlib.util.spec_from_file_location("sandboxer_test_images", BUILD_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Registry:
    """A running docker-registry; stop() ends it and removes its storage."""

    def __init__(self, port, workdir, proc, own_workdir):
        self.port = port
        self.workdir = workdir
        self.proc = proc
        self._own_workdir = own_workdir
        self.policy = os.path.join(workdir, "policy.json")
        with open(self.policy, "w") as f:
            f.write(POLICY)

    @property
    def host(self):
        """host:port, as image references spell it."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self):
        """The mirror URL for the daemon's --registry-mirror."""
        return f"http://127.0.0.1:{self.port}"

    def ref(self, name, tag="latest"):
        """The reference of a pushed test image on this registry."""
        return f"{self.host}/library/{name}:{tag}"

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _ready(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start_registry(workdir=None, timeout=20):
    """Start docker-registry on a free loopback port with storage under workdir (a new
    temporary dir, removed by stop(), when None). Returns a Registry once /v2/ answers."""
    if not os.access(REGISTRY_BIN, os.X_OK):
        raise RuntimeError(f"{REGISTRY_BIN} is missing (Debian package docker-registry)")
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="sbx-registry-")
    last_error = ""
    for _ in range(3):  # the free port can be taken between the probe and the bind
        port = _free_port()
        config = os.path.join(workdir, "config.yml")
        with open(config, "w") as f:
            f.write("version: 0.1\n"
                    "log:\n  level: error\n  accesslog:\n    disabled: true\n"
                    f"storage:\n  filesystem:\n    rootdirectory: {workdir}/storage\n"
                    "  delete:\n    enabled: true\n"
                    f"http:\n  addr: 127.0.0.1:{port}\n")
        log_path = os.path.join(workdir, "registry.log")
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([REGISTRY_BIN, "serve", config], stdout=log, stderr=log,
                                    stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            if _ready(port):
                return Registry(port, workdir, proc, own)
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        with open(log_path, errors="replace") as f:
            last_error = f.read()[-2000:]
    if own:
        shutil.rmtree(workdir, ignore_errors=True)
    raise RuntimeError(f"docker-registry did not start: {last_error}")


def push_layout(reg, layout, name, tag="latest"):
    """Push the OCI layout dir (its :latest) to reg as library/<name>:<tag>."""
    dest = f"docker://{reg.ref(name, tag)}"
    r = subprocess.run([SKOPEO, "--policy", reg.policy, "copy", "--quiet",
                        "--dest-tls-verify=false", f"oci:{layout}:latest", dest],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"skopeo copy to {dest} failed: {r.stderr.strip()}")
    return reg.ref(name, tag)


def push_test_images(reg, names=("hello-world", "busybox", "webapp"), python=False,
                     cache_dir=None):
    """Build (or reuse from the cache) the test images and push them to reg. The python
    image is slow to build the first time: it is pushed only with python=True.
    Returns {name: reference on reg}."""
    build = _build_module()
    names = list(names) + (["python"] if python and "python" not in names else [])
    return {n: push_layout(reg, build.ensure(n, cache_dir), n) for n in names}


def inspect(reg, ref, config=False):
    """skopeo inspect of ref on reg (plain HTTP) as a dict: the summary, or with
    config=True the image config. LookupError if the registry does not serve it."""
    r = subprocess.run([SKOPEO, "--policy", reg.policy, "inspect", "--tls-verify=false"] +
                       (["--config"] if config else []) + [f"docker://{ref}"],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise LookupError(r.stderr.strip())
    return json.loads(r.stdout)
