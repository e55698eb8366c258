#!/usr/bin/python3
"""Build Sandboxer's local templates as OCI image layouts from Debian's packages, without any
registry (the only network used is the Debian mirror apt already uses):

  base              Debian 12 (debootstrap minbase) with bash, python3 and `python`
                    (python-is-python3), pip, nodejs and npm, git, curl, sudo, ca-certificates,
                    procps, and a user `user` (uid 1000, home /home/user, passwordless sudo), as
                    E2B's base template has. User "user", WorkingDir /home/user, Cmd none: a
                    sandbox from it idles, ready for exec.
  code-interpreter  base's packages plus a Jupyter kernel stack (python3-ipykernel,
                    python3-jupyter-client, python3-matplotlib, python3-pandas, python3-numpy)
                    in one layer, and a second small layer with our code interpreter server
                    (templates/code-interpreter/) as the Cmd, on port 49999. User root (its
                    kernels run as root, as E2B's do), WorkingDir /home/user.

The operating-system layer of each is cached on a key of its recipe only, so editing the server
costs seconds, not a debootstrap. Layouts go to <cache>/<name>/ (the OS layers' to <cache>/.os/; default
/var/cache/sandboxer/templates, where `sandboxer serve --templates-dir` looks by default), each
with <name>.key beside it. The layout helpers are tests/images/build.py's (that file is not
changed, so the test images keep their cache keys).

Usage: build.py [--cache-dir DIR] [NAME ...]   (prints "NAME PATH" lines; default: all)
Python 3 standard library only; run as root (debootstrap, chroot).
"""
import argparse
import glob
import hashlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "images"))
import build as images  # noqa: E402  (tests/images/build.py: Layout, apt_mirror, locked)

DEFAULT_CACHE = "/var/cache/sandboxer/templates"
TEMPLATES = ("base", "code-interpreter")
USER_UID = 1000
PATH_ENV = images.PATH_ENV

BASE_PACKAGES = ["bash", "ca-certificates", "curl", "git", "sudo", "procps", "less",
                 "python3", "python3-pip", "python3-venv", "python-is-python3", "nodejs", "npm"]
CI_PACKAGES = ["python3-ipykernel", "python3-jupyter-client", "python3-matplotlib",
               "python3-pandas", "python3-numpy", "python3-pil"]
# Bumped by hand when the recipe changes in a way the code below does not show.
OS_RECIPE = "templates os v1: bookworm minbase, apt-get install, user 1000 with sudo"
CI_DIR = os.path.join(HERE, "code-interpreter")
CI_PREFIX = "opt/sandboxer/code-interpreter"


def log(msg):
    print(f"templates: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the OS layer

def chroot(rootfs, *argv, env=None):
    e = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive",
         "LANG": "C.UTF-8", "HOME": "/root"}
    subprocess.run(["chroot", rootfs, *argv], check=True, env=dict(e, **(env or {})),
                   stdout=subprocess.DEVNULL)


def apt_install(rootfs, packages):
    """apt-get install in the chroot with /proc mounted and services kept from starting."""
    policy = os.path.join(rootfs, "usr", "sbin", "policy-rc.d")
    with open(policy, "w") as f:
        f.write("#!/bin/sh\nexit 101\n")
    os.chmod(policy, 0o755)
    proc = os.path.join(rootfs, "proc")
    subprocess.run(["mount", "-t", "proc", "proc", proc], check=True)
    try:
        chroot(rootfs, "apt-get", "update", "-q")
        chroot(rootfs, "apt-get", "install", "-y", "-q", "--no-install-recommends", *packages)
        chroot(rootfs, "apt-get", "clean")
    finally:
        subprocess.run(["umount", "-l", proc], check=False)
        os.unlink(policy)


def add_user(rootfs):
    chroot(rootfs, "useradd", "--create-home", "--shell", "/bin/bash", "--uid", str(USER_UID),
           "--user-group", "user")
    sudoers = os.path.join(rootfs, "etc", "sudoers.d", "user")
    with open(sudoers, "w") as f:
        # use_pty off: a command run by sudo keeps its caller's pipes (no terminal of its own
        # that a checkpoint would have to carry).
        f.write("user ALL=(ALL) NOPASSWD: ALL\nDefaults:user !use_pty\n")
    os.chmod(sudoers, 0o440)


def strip_rootfs(rootfs):
    """What a container gets from its runtime, and caches that only make the layer bigger."""
    for pattern in ("dev/*", "proc/*", "sys/*", "run/*", "tmp/*", "var/tmp/*",
                    "var/cache/apt/*.bin", "var/cache/apt/archives/*.deb",
                    "var/lib/apt/lists/*", "var/log/*.log", "var/log/apt/*",
                    "var/cache/debconf/*-old", "root/.cache", "root/.npm", "debootstrap"):
        for p in glob.glob(os.path.join(rootfs, pattern)):
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            elif os.path.lexists(p):
                os.unlink(p)


def build_os(layout_dir, work, packages):
    """debootstrap, then apt-get install packages: one layer. Returns (descriptor, diff_id)."""
    rootfs = os.path.join(work, "rootfs")
    mirror = images.apt_mirror()
    log(f"debootstrap bookworm minbase from {mirror}, then {len(packages)} packages; "
        "this takes minutes")
    t0 = time.monotonic()
    subprocess.run(["debootstrap", "--variant=minbase", "--include=ca-certificates", "bookworm",
                    rootfs, mirror], check=True, stdout=subprocess.DEVNULL)
    log(f"debootstrap done in {time.monotonic() - t0:.0f} s; apt-get install")
    apt_install(rootfs, packages)
    add_user(rootfs)
    strip_rootfs(rootfs)
    log(f"packages installed in {time.monotonic() - t0:.0f} s; writing the layer")
    return images.Layout(layout_dir).add_layer(rootfs)


# ---------------------------------------------------------------- layouts

def read_layout(path):
    """(manifest, config) of the single image of an OCI layout."""
    with open(os.path.join(path, "index.json")) as f:
        desc = json.load(f)["manifests"][0]

    def blob(d):
        with open(os.path.join(path, "blobs", "sha256", d["digest"].split(":", 1)[1])) as f:
            return json.load(f)

    manifest = blob(desc)
    return manifest, blob(manifest["config"])


def finish(layout, name, layers, diff_ids, config, history):
    """Like tests/images/build.py's Layout.finish, with our own history lines."""
    cfg = {
        "created": images.CREATED,
        "architecture": images.oci_arch(),
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created": images.CREATED, "created_by": h} for h in history],
    }
    cdesc = layout.add_blob(json.dumps(cfg, indent=2, sort_keys=True).encode())
    manifest = {"schemaVersion": 2, "mediaType": images.MT_MANIFEST,
                "config": dict(mediaType=images.MT_CONFIG, **cdesc), "layers": layers}
    mdesc = layout.add_blob(json.dumps(manifest, indent=2).encode())
    index = {"schemaVersion": 2, "mediaType": images.MT_INDEX,
             "manifests": [dict(mediaType=images.MT_MANIFEST, **mdesc, annotations={
                 "org.opencontainers.image.ref.name": "latest",
                 "org.opencontainers.image.title": name})]}
    with open(os.path.join(layout.path, "index.json"), "w") as f:
        json.dump(index, f, indent=2)


def copy_blobs(src_layout, dst_layout, descs):
    for d in descs:
        hexd = d["digest"].split(":", 1)[1]
        dst = os.path.join(dst_layout, "blobs", "sha256", hexd)
        if not os.path.exists(dst):
            src = os.path.join(src_layout, "blobs", "sha256", hexd)
            try:
                os.link(src, dst)
            except OSError:
                shutil.copyfile(src, dst)


def user_config(cmd=None, env=()):
    cfg = {"Env": [PATH_ENV, "LANG=C.UTF-8", *env], "WorkingDir": "/home/user", "User": "user",
           "Labels": {"org.sandboxer.template": "true"}}
    if cmd:
        cfg["Cmd"] = list(cmd)
    return cfg


# ---------------------------------------------------------------- templates

def build_base_os(layout_dir, work):
    layout = images.Layout(layout_dir)
    desc, diff_id = build_os(layout_dir, work, BASE_PACKAGES)
    finish(layout, "base-os", [desc], [diff_id], user_config(), ["templates/build.py base"])


def build_ci_os(layout_dir, work):
    layout = images.Layout(layout_dir)
    desc, diff_id = build_os(layout_dir, work, BASE_PACKAGES + CI_PACKAGES)
    finish(layout, "ci-os", [desc], [diff_id], user_config(), ["templates/build.py ci-os"])


def build_base(layout_dir, work, deps):
    manifest, config = read_layout(deps["base-os"])
    layout = images.Layout(layout_dir)
    copy_blobs(deps["base-os"], layout_dir, manifest["layers"])
    finish(layout, "base", manifest["layers"], config["rootfs"]["diff_ids"], user_config(),
           [f"templates/build.py base: {' '.join(BASE_PACKAGES)}"])


def ci_files(top):
    """The server and the kernel's IPython profile (root's: the kernels run as root, as E2B's
    do), as the second layer's tree."""
    dst = os.path.join(top, CI_PREFIX)
    os.makedirs(dst)
    for name in sorted(os.listdir(CI_DIR)):
        if name.endswith(".py"):
            shutil.copy(os.path.join(CI_DIR, name), os.path.join(dst, name))
    profile = os.path.join(top, "root", ".ipython", "profile_default")
    os.makedirs(os.path.join(profile, "startup"))
    shutil.copy(os.path.join(CI_DIR, "profile", "ipython_kernel_config.py"), profile)
    shutil.copy(os.path.join(CI_DIR, "profile", "startup.py"),
                os.path.join(profile, "startup", "00-sandboxer.py"))
    mpl = os.path.join(top, "root", ".config", "matplotlib")
    os.makedirs(mpl)
    shutil.copy(os.path.join(CI_DIR, "profile", "matplotlibrc"), mpl)


def build_code_interpreter(layout_dir, work, deps):
    manifest, config = read_layout(deps["ci-os"])
    layout = images.Layout(layout_dir)
    copy_blobs(deps["ci-os"], layout_dir, manifest["layers"])
    top = os.path.join(work, "top")
    ci_files(top)

    desc, diff_id = layout.add_layer(top, owner=lambda name: (0, 0))
    cmd = ["python3", "/" + CI_PREFIX + "/server.py"]
    # The server and its kernels run as root, as E2B's do (and CRIU can then checkpoint them
    # on hosts whose root lacks CAP_SYS_RESOURCE); the working directory is still /home/user.
    finish(layout, "code-interpreter", manifest["layers"] + [desc],
           config["rootfs"]["diff_ids"] + [diff_id],
           dict(user_config(cmd), User="root", ExposedPorts={"49999/tcp": {}}),
           [f"templates/build.py code-interpreter: {' '.join(BASE_PACKAGES + CI_PACKAGES)}",
            "templates/build.py code-interpreter: the server on port 49999"])


# name -> (builder, dependencies); names starting with a letter are templates, the *-os ones
# are their cached operating-system layers.
BUILDERS = {
    "base-os": (build_base_os, ()),
    "ci-os": (build_ci_os, ()),
    "base": (build_base, ("base-os",)),
    "code-interpreter": (build_code_interpreter, ("ci-os",)),
}


def tree_hash(h, path):
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            p = os.path.join(root, name)
            h.update(os.path.relpath(p, path).encode())
            h.update(images.sha256_file(p).encode())


def input_key(name, dep_keys):
    h = hashlib.sha256()
    h.update(name.encode())
    h.update(images.oci_arch().encode())
    for k in dep_keys:
        h.update(k.encode())
    if name.endswith("-os"):
        h.update(OS_RECIPE.encode())
        h.update(json.dumps(BASE_PACKAGES + (CI_PACKAGES if name == "ci-os" else [])).encode())
        for fn in (build_os, apt_install, add_user, strip_rootfs):
            h.update(inspect.getsource(fn).encode())
    else:
        for fn in (BUILDERS[name][0], user_config, finish, ci_files):
            h.update(inspect.getsource(fn).encode())
        if name == "code-interpreter":
            tree_hash(h, CI_DIR)
    return h.hexdigest()


def ensure(name, cache_dir=None):
    """(path, key) of an up-to-date layout of name, building it (and its dependencies)."""
    if name not in BUILDERS:
        raise ValueError(f"unknown template {name!r}; known: {', '.join(TEMPLATES)}")
    cache_dir = cache_dir or os.environ.get("SANDBOXER_TEMPLATES_CACHE", DEFAULT_CACHE)
    os.makedirs(cache_dir, exist_ok=True)
    builder, dep_names = BUILDERS[name]
    deps, dep_keys = {}, []
    for d in dep_names:
        deps[d], k = ensure(d, cache_dir)
        dep_keys.append(k)
    # the operating-system layers are not templates: out of the daemon's sight
    final = os.path.join(cache_dir, ".os", name) if name.endswith("-os") else \
        os.path.join(cache_dir, name)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    keyfile = final + ".key"
    key = input_key(name, dep_keys)
    with images.locked(os.path.join(cache_dir, f".{name}.lock")):
        try:
            with open(keyfile) as f:
                if f.read().strip() == key and os.path.exists(os.path.join(final, "index.json")):
                    return final, key
        except OSError:
            pass
        log(f"building {name}")
        t0 = time.monotonic()
        work = tempfile.mkdtemp(prefix=f".{name}.build-", dir=cache_dir)
        try:
            layout_dir = os.path.join(work, "layout")
            if dep_names:
                builder(layout_dir, work, deps)
            else:
                builder(layout_dir, work)
            if os.path.exists(final):
                shutil.rmtree(final)
            os.rename(layout_dir, final)
            with open(keyfile + ".new", "w") as f:
                f.write(key + "\n")
            os.rename(keyfile + ".new", keyfile)
        finally:
            for m in ("proc",):  # a failed apt step must not leave a mount behind
                subprocess.run(["umount", "-l", os.path.join(work, "rootfs", m)],
                               stderr=subprocess.DEVNULL, check=False)
            shutil.rmtree(work, ignore_errors=True)
        log(f"built {name} in {time.monotonic() - t0:.1f} s -> {final}")
        return final, key


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache-dir", default=None, help=f"default {DEFAULT_CACHE}")
    ap.add_argument("names", nargs="*", help=f"templates to build (default: {' '.join(TEMPLATES)})")
    args = ap.parse_args(argv)
    for name in args.names or TEMPLATES:
        path, _ = ensure(name, args.cache_dir)
        print(name, path, flush=True)


if __name__ == "__main__":
    main()
