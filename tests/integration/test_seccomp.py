"""The default seccomp profile, an allow list (src/runtime/seccomp.c), seen from inside.

A static probe (probes/seccomp_probe.c, built here with gcc -static and copied in through
the files API) tries each refused syscall, with arguments for which the kernel itself would
answer something else than EPERM wherever it can, and the basics every program needs; the
expectations below are the profile's design: EPERM for what is refused on purpose, ENOSYS
for clone3 (so libc falls back to clone) and for anything the profile does not list,
EAFNOSUPPORT for the AF_ALG and AF_VSOCK socket families. Fork and hibernation keep the
filter (CRIU restores it). Then real programs in a Debian sandbox (the `devtools` test image):
Python, Node, git, gcc, dpkg/apt, pip and npm.
"""
import ctypes
import json
import os
import subprocess
import tempfile
import time

import pytest
import websocket

import registry
from conftest import Daemon, Sandboxes, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE_SRC = os.path.join(HERE, "probes", "seccomp_probe.c")

REFUSED_EPERM = [
    "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd", "bpf",
    "perf_event_open", "add_key", "request_key", "keyctl", "unshare", "unshare_newuser",
    "setns", "clone_newuser", "clone_newns", "clone_newnet", "clone_newpid", "clone_newuts",
    "clone_newipc", "clone_newcgroup", "mount", "umount2", "fsopen", "fsconfig", "fsmount",
    "fspick", "move_mount", "open_tree", "mount_setattr", "pivot_root", "init_module",
    "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "ptrace_traceme", "ptrace_peek", "process_vm_readv", "process_vm_writev", "kcmp",
    "pidfd_getfd", "open_by_handle_at", "settimeofday", "clock_settime", "syslog", "swapon",
    "acct", "iopl", "ioperm", "sethostname", "get_mempolicy",
]
REFUSED_ENOSYS = ["clone3", "personality_no_aslr", "ustat"]
REFUSED_EAFNOSUPPORT = ["socket_vsock", "socket_alg"]
ALLOWED = [
    "clone_plain", "fork_setsid_setuid", "thread", "vfork_exec", "pipe2", "eventfd",
    "signalfd", "timerfd", "epoll", "socket_inet", "socket_unix", "socket_netlink",
    "socket_inet6_dgram", "openat2", "statx", "getrandom", "memfd_create", "prctl", "pty",
    "mkfifo", "shmget", "io_setup", "personality_query", "landlock", "seccomp", "chroot",
    "sched_getaffinity", "mprotect",
]
EXPECTED = {**{n: "EPERM" for n in REFUSED_EPERM}, **{n: "ENOSYS" for n in REFUSED_ENOSYS},
            **{n: "EAFNOSUPPORT" for n in REFUSED_EAFNOSUPPORT}, **{n: "ok" for n in ALLOWED}}


def kernel_runs_x32():
    """True if this kernel takes x32 syscalls (CONFIG_X86_X32_ABI, not off at boot)."""
    return ctypes.CDLL(None, use_errno=True).syscall(0x40000000 | 39) >= 0  # x32 getpid


# Where the kernel runs x32, the filter covers it like x86_64; elsewhere the architecture is
# not in the filter and an x32 call (which only a program setting the x32 bit on purpose can
# make: the kernel does not even exec x32 binaries) gets the filter's bad-architecture
# answer, SIGSYS.
EXPECTED["x32_getpid"] = "ok" if kernel_runs_x32() else "killed-by-31"
ARCHES = ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"] + (["SCMP_ARCH_X32"] if kernel_runs_x32() else [])



@pytest.fixture(scope="module")
def sc_registry():
    """A registry of its own with busybox; devtools is pushed by the test that needs it."""
    reg = registry.start_registry()
    try:
        registry.push_test_images(reg, ("busybox",))
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="module")
def devtools(sc_registry):
    """The devtools image on the registry (built once and cached: minutes the first time)."""
    registry.push_layout(sc_registry, registry._build_module().ensure("devtools"), "devtools")
    return "devtools"


@pytest.fixture(scope="module")
def sc_daemon(sc_registry, tmp_path_factory):
    d = Daemon(str(tmp_path_factory.mktemp("seccomp")), ["--registry-mirror", sc_registry.url])
    try:
        d.start()
        yield d
    finally:
        d.kill()


@pytest.fixture
def sbx(sc_daemon):
    c = Sandboxes(sc_daemon.url, sc_daemon.admin_token)
    c.daemon = sc_daemon
    yield c
    c.cleanup()


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    out = tmp_path_factory.mktemp("probe") / "seccomp_probe"
    subprocess.run(["gcc", "-static", "-O2", "-o", str(out), PROBE_SRC], check=True,
                   timeout=120)
    with open(out, "rb") as f:
        return f.read()


def put(c, sid, path, data, mode="644"):
    r = c.put(f"/sandboxes/{sid}/files{path}", params={"mkdir": "true", "mode": mode},
              content=data, timeout=60)
    assert r.status_code in (200, 201), r.text


def run_probe(c, sid):
    r = c.sh(sid, "/tmp/seccomp_probe")
    assert r["exit_code"] == 0 and r["stdout"].endswith("done\n"), r
    return dict(line.split(" ", 1) for line in r["stdout"].splitlines()[:-1])


def assert_profile_holds(got):
    wrong = {n: (got.get(n), want) for n, want in EXPECTED.items() if got.get(n) != want}
    assert not wrong, f"syscall: (got, expected): {wrong}"
    assert set(got) == set(EXPECTED), set(got) ^ set(EXPECTED)


def test_refused_syscalls_answer_as_designed_and_basics_work(sbx, probe):
    sid = sbx.create("busybox")["id"]
    put(sbx, sid, "/tmp/seccomp_probe", probe, mode="755")
    assert_profile_holds(run_probe(sbx, sid))
    # The same for a user other than root, and in every process: the filter is inherited.
    r = sbx.post(f"/sandboxes/{sid}/exec", json={"argv": ["/tmp/seccomp_probe"],
                                                "user": "1000"}, timeout=60).json()
    got = dict(line.split(" ", 1) for line in r["stdout"].splitlines()[:-1])
    assert got["io_uring_setup"] == "EPERM" and got["clone3"] == "ENOSYS", got
    status = sbx.sh(sid, "grep -E '^(Seccomp|NoNewPrivs):' /proc/1/status /proc/self/status")
    assert status["stdout"].count("Seccomp:\t2") == 2, status
    assert status["stdout"].count("NoNewPrivs:\t1") == 2, status


def test_the_spec_carries_an_allow_list(sbx, sc_daemon):
    sid = sbx.create("busybox")["id"]
    path = os.path.join(sc_daemon.state_dir, "sandboxes", sid, "bundle", "config.json")
    with open(path) as f:
        sc = json.load(f)["linux"]["seccomp"]
    assert sc["defaultAction"] == "SCMP_ACT_ERRNO" and sc["defaultErrnoRet"] == 38
    assert sc["architectures"] == ARCHES
    by_name = {}
    for rule in sc["syscalls"]:
        for name in rule["names"]:
            by_name.setdefault(name, []).append(rule)
    for name in ("io_uring_setup", "bpf", "keyctl", "unshare", "mount", "ptrace",
                 "kexec_load", "init_module", "userfaultfd", "perf_event_open", "setns"):
        assert [(r["action"], r.get("errnoRet"), "args" in r) for r in by_name[name]] == \
            [("SCMP_ACT_ERRNO", 1, False)], name
    for name in ("read", "execve", "openat", "epoll_pwait", "setresuid", "prctl"):
        assert [r["action"] for r in by_name[name]] == ["SCMP_ACT_ALLOW"], name
    clone = by_name["clone"]  # allowed without namespace flags, EPERM with any
    assert sum(r["action"] == "SCMP_ACT_ALLOW" for r in clone) == 1
    assert sum(r.get("errnoRet") == 1 for r in clone) == 7
    names = [n for r in sc["syscalls"] for n in r["names"] if "args" not in r]
    assert len(names) == len(set(names)), "a syscall is in two groups"


def test_fork_and_hibernation_keep_the_filter(sbx, probe):
    """CRIU dumps the filter and installs it again at the end of a restore: a fork and a
    woken sandbox refuse what their source refused."""
    sid = sbx.create("busybox")["id"]
    put(sbx, sid, "/tmp/seccomp_probe", probe, mode="755")
    sbx.sh(sid, "sleep 100000 >/dev/null 2>&1 &")
    r = sbx.post(f"/sandboxes/{sid}/fork", json={"label": "sc-child"}, timeout=120)
    assert r.status_code == 200 and r.json()["memory_preserved"] is True, r.text
    child = r.json()["id"]
    sbx.created.append(child)
    assert_profile_holds(run_probe(sbx, child))
    # The restored processes themselves (not only new ones): the sleep carries a filter.
    r = sbx.sh(child, "for p in $(pidof sleep); do grep '^Seccomp:' /proc/$p/status; done")
    assert r["stdout"] == "Seccomp:\t2\n", r
    assert sbx.post(f"/sandboxes/{sid}/hibernate", timeout=120).json()["status"] == "hibernated"
    woken = sbx.post(f"/sandboxes/{sid}/wake", timeout=120).json()
    assert woken["memory_preserved"] is True, woken
    assert_profile_holds(run_probe(sbx, sid))


def test_the_agent_works_under_the_profile(sbx, sc_daemon):
    """PID 1's own needs: exec as another user (setgroups, setresuid), files, background
    processes (fork, setsid, pipes, signalfd) and a terminal (ptmx, TIOCGPTPEER, setsid)."""
    sid = sbx.create("busybox")["id"]
    r = sbx.post(f"/sandboxes/{sid}/exec", json={"argv": ["id", "-u"], "user": "sbx"}).json()
    assert r["stdout"] == "1000\n", r
    put(sbx, sid, "/home/sbx/a.txt", b"agent files\n")
    assert sbx.get(f"/sandboxes/{sid}/files/home/sbx/a.txt").text == "agent files\n"
    p = sbx.post(f"/sandboxes/{sid}/processes", json={"code": "echo from-bg; sleep 100"},
                 timeout=60).json()
    wait_for("background output", timeout=60, fn=lambda: "from-bg" in sbx.get(
        f"/sandboxes/{sid}/processes/{p['pid']}/output").text)
    assert sbx.post(f"/sandboxes/{sid}/processes/{p['pid']}/signal",
                    json={"signal": "TERM"}).status_code == 200
    url = sc_daemon.url.replace("http://", "ws://") + f"/sandboxes/{sid}/exec/pty?cmd=tty"
    ws = websocket.create_connection(url, timeout=30,
                                     header=[f"Authorization: Bearer {sc_daemon.admin_token}"])
    out = b""
    try:
        while True:
            op, data = ws.recv_data(control_frame=True)
            if op == websocket.ABNF.OPCODE_BINARY:
                out += data
            elif op == websocket.ABNF.OPCODE_CLOSE:
                break
    finally:
        ws.close()
    assert b"/dev/pts/" in out, out


DEB_CONTROL = """Package: sbx-probe
Version: 1.0
Architecture: all
Maintainer: Sandboxer tests <tests@invalid>
Description: a package built by test_seccomp.py
"""
DEB_POSTINST = """#!/bin/sh
set -e
getent passwd sbxprobe >/dev/null || useradd --system --no-create-home sbxprobe
echo installed > /var/lib/sbx-probe.state
"""


def test_debian_tools_work_under_the_profile(sbx, devtools):
    """Python, Node, git, gcc, and package installs in a Debian sandbox (devtools image).

    Without a network the installs are of local packages, which exercises the same
    syscalls as a download would once the files are there: dpkg-deb builds a .deb in the
    sandbox, `dpkg -i` unpacks it, runs its postinst (useradd: shadow files, locks, fsync)
    and records it; `apt-get install ./x.deb` resolves and installs through apt as well;
    pip builds a wheel from a local source tree (setuptools, no build isolation) and
    installs it; npm packs a local package and installs the tarball offline."""
    sid = sbx.create(devtools)["id"]

    def ok(code, timeout=120):
        r = sbx.sh(sid, code, timeout=timeout)
        assert r["exit_code"] == 0, r
        return r["stdout"]

    assert ok("python3 -c 'import os, threading, subprocess, asyncio; "
              "print(subprocess.run([\"true\"]).returncode, asyncio.run(asyncio.sleep(0, 7)))'") \
        == "0 7\n"
    assert ok("node -e 'require(\"child_process\").execFileSync(\"true\"); "
              "require(\"fs\").promises.readFile(\"/etc/hostname\").then(b => "
              "console.log(b.length > 0, require(\"os\").cpus().length > 0))'") == "true true\n"
    ok("mkdir /tmp/repo && cd /tmp/repo && git init -q && git config user.email t@t && "
       "git config user.name t && echo hi > f && git add f && git commit -qm one && "
       "git log --oneline | grep -q one && git gc -q")
    ok("printf '#include <stdio.h>\\n#include <pthread.h>\\nstatic void *f(void *a) "
       "{ return a; }\\nint main(void) { pthread_t t; pthread_create(&t, 0, f, 0); "
       "pthread_join(t, 0); puts(\"compiled\"); return 0; }\\n' > /tmp/c.c && "
       "gcc -O2 -pthread -o /tmp/c /tmp/c.c && /tmp/c | grep -qx compiled")
    put(sbx, sid, "/tmp/deb/DEBIAN/control", DEB_CONTROL.encode())
    put(sbx, sid, "/tmp/deb/DEBIAN/postinst", DEB_POSTINST.encode(), mode="755")
    put(sbx, sid, "/tmp/deb/usr/share/sbx-probe/README", b"probe\n")
    ok("dpkg-deb --root-owner-group --build /tmp/deb /tmp/sbx-probe.deb && "
       "dpkg -i /tmp/sbx-probe.deb && dpkg -s sbx-probe | grep -q 'Status: install ok' && "
       "getent passwd sbxprobe && test -f /var/lib/sbx-probe.state && "
       "dpkg -r sbx-probe && apt-get install -y -q /tmp/sbx-probe.deb && "
       "dpkg -s sbx-probe | grep -q 'Status: install ok'", timeout=300)
    put(sbx, sid, "/tmp/pyprobe/pyproject.toml", b'[build-system]\nrequires = ["setuptools"]\n'
        b'build-backend = "setuptools.build_meta"\n[project]\nname = "pyprobe"\n'
        b'version = "1.0"\n')
    put(sbx, sid, "/tmp/pyprobe/pyprobe.py", b"ANSWER = 42\n")
    ok("cd /tmp && pip install -q --no-index --no-build-isolation --break-system-packages "
       "./pyprobe && cd / && python3 -c 'import pyprobe; print(pyprobe.ANSWER)' | grep -qx 42",
       timeout=300)
    put(sbx, sid, "/tmp/jsprobe/package.json", b'{"name": "jsprobe", "version": "1.0.0", '
        b'"main": "index.js"}\n')
    put(sbx, sid, "/tmp/jsprobe/index.js", b"module.exports = 42;\n")
    ok("cd /tmp/jsprobe && npm pack --silent && mkdir /tmp/app && cd /tmp/app && "
       "npm init -y >/dev/null && npm install --offline --no-audit --no-fund "
       "/tmp/jsprobe/jsprobe-1.0.0.tgz && node -e 'console.log(require(\"jsprobe\"))' | "
       "grep -qx 42", timeout=300)
