#!/usr/bin/python3
"""Build Sandboxer's test images as OCI image layouts, without any network but the
Debian mirror apt already uses (and that only for the optional python image).

  hello-world  a static C program (hello.c) that greets and exits 0; Cmd ["/hello"]
  busybox      Debian's busybox-static with an applet symlink for each command in /bin,
               /etc/passwd and /etc/group (root, nobody 65534, sbx 1000), /tmp 1777; Cmd ["sh"]
  python       debootstrap --variant=minbase --include=python3 bookworm + user sbx 1000;
               Cmd ["python3"]. Takes minutes the first time: build it only when asked.
  node         the python image with Debian's nodejs too; Cmd ["node"]. Built only when
               asked, like python.
  devtools     the python recipe with what developers' sandboxes run: git, gcc and
               libc6-dev, python3-pip, nodejs and npm, ca-certificates; Cmd ["bash"]. Built
               only when asked (the seccomp tests use it); larger and slower than python.

Each image is one gzip layer with a proper config (architecture, os, rootfs.diff_ids,
history) and manifest, under <cache>/<name>/ (default /var/cache/sandboxer/test-images).
A layout is rebuilt only when its inputs change: the key of hello-world and busybox hashes
this script and their inputs; the key of python hashes only its own recipe, so editing the
rest of this script does not cost a debootstrap.

Usage: build.py [--cache-dir DIR] [--python] [NAME ...]   (prints "NAME PATH" lines)
Python 3 standard library only.
"""
import argparse
import contextlib
import fcntl
import glob
import gzip
import hashlib
import inspect
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CACHE = "/var/cache/sandboxer/test-images"
IMAGES = ("hello-world", "busybox", "python", "node", "webapp", "devtools")
CREATED = "2024-01-01T00:00:00Z"
EPOCH = 1704067200  # CREATED as Unix time: every entry's mtime, for reproducible layers
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PYTHON_RECIPE = "python v1: bookworm minbase +python3, user sbx 1000, no apt lists/caches"
NODE_RECIPE = "node v1: the python recipe +nodejs"
DEVTOOLS_RECIPE = "devtools v1: the python recipe +git gcc libc6-dev python3-pip nodejs npm"
DEVTOOLS_PACKAGES = "python3,python3-pip,git,gcc,libc6-dev,ca-certificates,nodejs"

MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"

PASSWD = ("root:x:0:0:root:/root:/bin/sh\n"
          "sbx:x:1000:1000:sbx:/home/sbx:/bin/sh\n"
          "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
GROUP = "root:x:0:\nsbx:x:1000:\nnogroup:x:65534:\n"


def log(msg):
    print(f"build.py: {msg}", file=sys.stderr, flush=True)


def oci_arch():
    m = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64", "i686": "386"}.get(m, m)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- layouts

class Layout:
    """An OCI image layout being written into a directory."""

    def __init__(self, path):
        self.path = path
        os.makedirs(os.path.join(path, "blobs", "sha256"), exist_ok=True)
        with open(os.path.join(path, "oci-layout"), "w") as f:
            json.dump({"imageLayoutVersion": "1.0.0"}, f)

    def add_blob(self, data):
        digest = hashlib.sha256(data).hexdigest()
        with open(os.path.join(self.path, "blobs", "sha256", digest), "wb") as f:
            f.write(data)
        return {"digest": "sha256:" + digest, "size": len(data)}

    def add_layer(self, rootfs, owner=None):
        """Tar rootfs (sorted, reproducible), gzip it; returns (descriptor, diff_id)."""
        with tempfile.TemporaryFile(dir=self.path) as raw:
            write_tar(rootfs, raw, owner)
            raw.seek(0)
            diff = hashlib.sha256()
            tmp = os.path.join(self.path, "layer.tmp")
            with open(tmp, "wb") as out:
                with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0,
                                   compresslevel=6) as gz:
                    for chunk in iter(lambda: raw.read(1 << 20), b""):
                        diff.update(chunk)
                        gz.write(chunk)
        digest = sha256_file(tmp)
        size = os.path.getsize(tmp)
        os.rename(tmp, os.path.join(self.path, "blobs", "sha256", digest))
        desc = {"mediaType": MT_LAYER, "digest": "sha256:" + digest, "size": size}
        return desc, "sha256:" + diff.hexdigest()

    def finish(self, name, layers, diff_ids, config):
        cfg = {
            "created": CREATED,
            "architecture": oci_arch(),
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": [{"created": CREATED, "created_by": f"tests/images/build.py {name}"}],
        }
        cdesc = self.add_blob(json.dumps(cfg, indent=2, sort_keys=True).encode())
        manifest = {
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "config": dict(mediaType=MT_CONFIG, **cdesc),
            "layers": layers,
        }
        mdesc = self.add_blob(json.dumps(manifest, indent=2).encode())
        index = {
            "schemaVersion": 2,
            "mediaType": MT_INDEX,
            "manifests": [dict(mediaType=MT_MANIFEST, **mdesc, annotations={
                "org.opencontainers.image.ref.name": "latest",
                "io.containerd.image.name": f"docker.io/library/{name}:latest",
            })],
        }
        with open(os.path.join(self.path, "index.json"), "w") as f:
            json.dump(index, f, indent=2)


def write_tar(rootfs, fileobj, owner=None):
    """The tree under rootfs as a PAX tar with relative names (no "./"), sorted.
    owner maps a relative path to (uid, gid); by default files keep theirs on disk."""
    def fix(ti):
        ti.mtime = EPOCH if owner is not None else ti.mtime
        if owner is not None:
            ti.uid, ti.gid = owner(ti.name)
            ti.uname = ti.gname = ""
        return ti

    with tarfile.open(fileobj=fileobj, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(os.listdir(rootfs)):
            tar.add(os.path.join(rootfs, entry), arcname=entry, recursive=True, filter=fix)


# ---------------------------------------------------------------- images

def build_hello(layout, work):
    rootfs = os.path.join(work, "rootfs")
    os.makedirs(rootfs)
    exe = os.path.join(rootfs, "hello")
    subprocess.run(["gcc", "-static", "-Os", "-s", "-o", exe, os.path.join(HERE, "hello.c")],
                   check=True)
    os.chmod(exe, 0o755)
    desc, diff_id = layout.add_layer(rootfs, owner=lambda name: (0, 0))
    layout.finish("hello-world", [desc], [diff_id],
                  {"Env": [PATH_ENV], "Cmd": ["/hello"], "WorkingDir": "/"})


def busybox_path():
    for p in ("/bin/busybox", "/usr/bin/busybox"):
        if os.path.exists(p):
            return p
    raise SystemExit("build.py: busybox-static is not installed")


def build_busybox(layout, work):
    rootfs = os.path.join(work, "rootfs")
    bb = busybox_path()
    for d in ("bin", "etc", "root", "tmp", "home/sbx", "usr/bin", "var", "dev", "proc", "sys"):
        os.makedirs(os.path.join(rootfs, d), exist_ok=True)
    shutil.copy(bb, os.path.join(rootfs, "bin", "busybox"))
    os.chmod(os.path.join(rootfs, "bin", "busybox"), 0o755)
    applets = subprocess.run([bb, "--list"], check=True, capture_output=True,
                             text=True).stdout.split()
    for a in applets:
        if a != "busybox" and "/" not in a:
            os.symlink("busybox", os.path.join(rootfs, "bin", a))
    os.symlink("../../bin/busybox", os.path.join(rootfs, "usr", "bin", "env"))
    with open(os.path.join(rootfs, "etc", "passwd"), "w") as f:
        f.write(PASSWD)
    with open(os.path.join(rootfs, "etc", "group"), "w") as f:
        f.write(GROUP)
    os.chmod(os.path.join(rootfs, "tmp"), 0o1777)
    os.chmod(os.path.join(rootfs, "root"), 0o700)
    desc, diff_id = layout.add_layer(
        rootfs, owner=lambda name: (1000, 1000) if name.startswith("home/sbx") else (0, 0))
    layout.finish("busybox", [desc], [diff_id],
                  {"Env": [PATH_ENV], "Cmd": ["sh"], "WorkingDir": "/"})


def build_webapp(layout, work):
    """busybox's layer plus a second one: /app owned by sbx, a file of the first layer
    deleted (a whiteout), and a config that sets every field the daemon honours."""
    build_busybox(layout, work)
    base = json.load(open(os.path.join(layout.path, "index.json")))["manifests"][0]
    manifest = json.load(open(os.path.join(layout.path, "blobs", "sha256",
                                           base["digest"].split(":")[1])))
    config = json.load(open(os.path.join(layout.path, "blobs", "sha256",
                                         manifest["config"]["digest"].split(":")[1])))
    top = os.path.join(work, "top")
    os.makedirs(os.path.join(top, "app"))
    os.makedirs(os.path.join(top, "etc"))
    with open(os.path.join(top, "app", "run.sh"), "w") as f:
        f.write('echo "app in $(pwd) as $(id -un) mode=$APP_MODE args=$*"\nexec sleep 1000000\n')
    open(os.path.join(top, "etc", ".wh.group"), "w").close()  # whiteout: /etc/group goes
    desc, diff_id = layout.add_layer(
        top, owner=lambda name: (1000, 1000) if name.startswith("app") else (0, 0))
    layout.finish("webapp", manifest["layers"] + [desc],
                  config["rootfs"]["diff_ids"] + [diff_id],
                  {"Env": [PATH_ENV, "APP_MODE=test"], "Entrypoint": ["sh", "/app/run.sh"],
                   "Cmd": ["default-arg"], "WorkingDir": "/app", "User": "sbx",
                   "ExposedPorts": {"8080/tcp": {}}})


def apt_mirror(suite="bookworm"):
    """The URI apt uses for `suite main` (sources.list, *.list and deb822 *.sources)."""
    files = ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")) + \
        sorted(glob.glob("/etc/apt/sources.list.d/*.sources"))
    for path in files:
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        if path.endswith(".sources"):
            for para in text.split("\n\n"):
                fields = {}
                for line in para.splitlines():
                    if ":" in line and not line.startswith(("#", " ")):
                        k, v = line.split(":", 1)
                        fields[k.strip().lower()] = v.split()
                if ("deb" in fields.get("types", []) and suite in fields.get("suites", [])
                        and "main" in fields.get("components", [])
                        and fields.get("enabled", ["yes"])[0] != "no" and fields.get("uris")):
                    return fields["uris"][0]
        else:
            for line in text.splitlines():
                words = line.split("#", 1)[0].split()
                if words[:1] != ["deb"]:
                    continue
                words = [w for w in words[1:] if not w.startswith("[")
                         and not w.endswith("]")]
                if len(words) >= 3 and words[1] == suite and "main" in words[2:]:
                    return words[0]
    raise SystemExit(f"build.py: no apt source for '{suite} main' found")


def build_python(layout, work, name="python", packages="python3", cmd=("python3",)):
    rootfs = os.path.join(work, "rootfs")
    mirror = apt_mirror()
    log(f"debootstrap bookworm (minbase + {packages}) from {mirror}; this takes minutes")
    subprocess.run(["debootstrap", "--variant=minbase", "--include=" + packages, "bookworm",
                    rootfs, mirror], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(rootfs, "etc", "passwd"), "a") as f:
        f.write("sbx:x:1000:1000:sbx:/home/sbx:/bin/sh\n")
    with open(os.path.join(rootfs, "etc", "group"), "a") as f:
        f.write("sbx:x:1000:\n")
    os.makedirs(os.path.join(rootfs, "home", "sbx"), exist_ok=True)
    os.chown(os.path.join(rootfs, "home", "sbx"), 1000, 1000)
    # What a container gets from its runtime, and caches that only make the layer bigger.
    for pattern in ("dev/*", "proc/*", "sys/*", "run/*", "tmp/*", "var/cache/apt/*.bin",
                    "var/cache/apt/archives/*.deb", "var/lib/apt/lists/*", "var/log/*.log",
                    "var/log/apt/*", "var/log/bootstrap.log", "debootstrap"):
        for p in glob.glob(os.path.join(rootfs, pattern)):
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            elif os.path.lexists(p):
                os.unlink(p)
    desc, diff_id = layout.add_layer(rootfs)
    layout.finish(name, [desc], [diff_id],
                  {"Env": [PATH_ENV, "LANG=C.UTF-8"], "Cmd": list(cmd), "WorkingDir": "/"})


def build_node(layout, work):
    build_python(layout, work, "node", "python3,nodejs", ("node",))


def build_devtools(layout, work):
    """debootstrap cannot resolve npm's dependencies (virtual packages): apt installs it in
    the new root afterwards. Its own code rather than a change to build_python, whose source
    is the python image's cache key."""
    rootfs = os.path.join(work, "rootfs")
    mirror = apt_mirror()
    log(f"debootstrap bookworm (minbase + {DEVTOOLS_PACKAGES}) from {mirror}, then npm; "
        "this takes minutes")
    subprocess.run(["debootstrap", "--variant=minbase", "--include=" + DEVTOOLS_PACKAGES,
                    "bookworm", rootfs, mirror], check=True, stdout=subprocess.DEVNULL)
    env = {"PATH": PATH_ENV[5:], "DEBIAN_FRONTEND": "noninteractive", "LANG": "C.UTF-8"}
    for cmd in (["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", "npm"]):
        subprocess.run(["chroot", rootfs] + cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    with open(os.path.join(rootfs, "etc", "passwd"), "a") as f:
        f.write("sbx:x:1000:1000:sbx:/home/sbx:/bin/sh\n")
    with open(os.path.join(rootfs, "etc", "group"), "a") as f:
        f.write("sbx:x:1000:\n")
    os.makedirs(os.path.join(rootfs, "home", "sbx"), exist_ok=True)
    os.chown(os.path.join(rootfs, "home", "sbx"), 1000, 1000)
    for pattern in ("dev/*", "proc/*", "sys/*", "run/*", "tmp/*", "var/cache/apt/*.bin",
                    "var/cache/apt/archives/*.deb", "var/lib/apt/lists/*", "var/log/*.log",
                    "var/log/apt/*", "var/log/bootstrap.log", "debootstrap"):
        for p in glob.glob(os.path.join(rootfs, pattern)):
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            elif os.path.lexists(p):
                os.unlink(p)
    desc, diff_id = layout.add_layer(rootfs)
    layout.finish("devtools", [desc], [diff_id],
                  {"Env": [PATH_ENV, "LANG=C.UTF-8"], "Cmd": ["bash"], "WorkingDir": "/"})


BUILDERS = {"hello-world": build_hello, "busybox": build_busybox, "python": build_python,
            "node": build_node, "webapp": build_webapp, "devtools": build_devtools}


def input_key(name):
    h = hashlib.sha256()
    if name == "devtools":  # like python's: its own recipe only, no debootstrap for edits
        for part in (DEVTOOLS_RECIPE, DEVTOOLS_PACKAGES, inspect.getsource(build_devtools),
                     oci_arch()):
            h.update(part.encode())
        return h.hexdigest()
    if name in ("python", "node"):
        h.update(PYTHON_RECIPE.encode())
        h.update(inspect.getsource(build_python).encode())
        h.update(oci_arch().encode())
        if name == "node":
            h.update(NODE_RECIPE.encode())
            h.update(inspect.getsource(build_node).encode())
        return h.hexdigest()
    with open(os.path.abspath(__file__), "rb") as f:
        h.update(f.read())
    h.update(name.encode())
    if name == "hello-world":
        with open(os.path.join(HERE, "hello.c"), "rb") as f:
            h.update(f.read())
        h.update(subprocess.run(["gcc", "--version"], capture_output=True).stdout)
    elif name in ("busybox", "webapp"):
        h.update(sha256_file(busybox_path()).encode())
    return h.hexdigest()


@contextlib.contextmanager
def locked(path):
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure(name, cache_dir=None):
    """The path of an up-to-date OCI layout of test image name, building it if needed."""
    if name not in BUILDERS:
        raise ValueError(f"unknown test image {name!r}; known: {', '.join(IMAGES)}")
    cache_dir = cache_dir or os.environ.get("SANDBOXER_TEST_IMAGES", DEFAULT_CACHE)
    os.makedirs(cache_dir, exist_ok=True)
    final = os.path.join(cache_dir, name)
    keyfile = final + ".key"
    key = input_key(name)
    with locked(os.path.join(cache_dir, f".{name}.lock")):
        try:
            with open(keyfile) as f:
                if f.read().strip() == key and os.path.exists(os.path.join(final, "index.json")):
                    return final
        except OSError:
            pass
        t0 = time.monotonic()
        work = tempfile.mkdtemp(prefix=f".{name}.build-", dir=cache_dir)
        try:
            layout_dir = os.path.join(work, "layout")
            BUILDERS[name](Layout(layout_dir), work)
            if os.path.exists(final):
                shutil.rmtree(final)
            os.rename(layout_dir, final)
            with open(keyfile + ".new", "w") as f:
                f.write(key + "\n")
            os.rename(keyfile + ".new", keyfile)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        log(f"built {name} in {time.monotonic() - t0:.1f} s -> {final}")
        return final


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache-dir", default=None, help=f"default {DEFAULT_CACHE}")
    ap.add_argument("--python", action="store_true", help="also build the python image")
    ap.add_argument("names", nargs="*", help="images to build (default hello-world busybox)")
    args = ap.parse_args(argv)
    names = args.names or ["hello-world", "busybox"] + (["python"] if args.python else [])
    for name in names:
        print(name, ensure(name, args.cache_dir), flush=True)


if __name__ == "__main__":
    main()
