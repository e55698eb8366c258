"""`sandboxer doctor`: every check against this machine's real state, read here on our own
(/proc, /sys, uname, the tools), its JSON, its text table, and --fix on a sysctl, which is
always put back (value and /etc/sysctl.d file) even when the test fails."""
import fcntl
import glob
import gzip
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import BIN, ROOT, host_exclusive


@pytest.fixture(scope="module", autouse=True)
def one_run_at_a_time():
    """This module's fixed names and probes are host-wide: one test run at a time."""
    with host_exclusive("doctor"):
        yield


CONF = "/etc/sysctl.d/90-sandboxer.conf"
SYSCTLS = {  # check id: the value it wants at least
    "kernel.dmesg_restrict": 1, "kernel.kptr_restrict": 1,
    "kernel.unprivileged_bpf_disabled": 1, "kernel.perf_event_paranoid": 2,
    "fs.protected_symlinks": 1, "fs.protected_hardlinks": 1, "fs.protected_fifos": 1,
    "fs.protected_regular": 1,
}
STATUS_WORDS = {"ok", "FAIL", "WARN", "no", "skip"}


def doctor(*args, check=False, timeout=120):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout,
                          check=check)


def doctor_json(*args):
    p = doctor("--json", "doctor", *args)
    assert p.returncode in (0, 1), p.stderr
    out = json.loads(p.stdout)
    assert p.returncode == (0 if out["ok"] else 1), (p.returncode, out["required_missing"])
    return out


@pytest.fixture(scope="module")
def report():
    """One full run (the runsc probes too), shared by the checks below."""
    return doctor_json("--state-dir", "/var/lib/sandboxer")


def by_id(report):
    return {c["id"]: c for c in report["checks"]}


def sysctl(name):
    try:
        with open("/proc/sys/" + name.replace(".", "/")) as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


def fs_type(path):
    return subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True,
                          check=True).stdout.strip()


def first_line(argv):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return p.returncode, (p.stdout.splitlines() or [""])[0]


def existing_dir(path):
    while not os.path.isdir(path):
        path = os.path.dirname(path)
    return path


def test_json_shape(report):
    assert set(report) == {"kernel", "state_dir", "ok", "checks", "fixed", "required_missing",
                           "recommended_missing", "optional_missing"}
    assert report["state_dir"] == "/var/lib/sandboxer" and report["fixed"] == []
    ids = [c["id"] for c in report["checks"]]
    assert len(ids) == len(set(ids))
    for c in report["checks"]:
        assert set(c) == {"id", "need", "what", "status", "value", "found", "fix", "fixable"}, c
        assert c["need"] in ("required", "recommended", "optional")
        assert c["status"] in ("ok", "missing", "skipped")
        assert (c["fix"] is None) == (c["status"] == "ok"), c
        assert c["fixable"] == (c["id"] in SYSCTLS and c["status"] == "missing"), c
    for need in ("required", "recommended", "optional"):
        assert report[f"{need}_missing"] == [c["id"] for c in report["checks"] if
                                            c["need"] == need and c["status"] == "missing"]
    assert report["ok"] == (report["required_missing"] == [])
    required = {c["id"] for c in report["checks"] if c["need"] == "required"}
    assert required == {"root", "kernel", "cgroups", "runc", "overlay"}


def test_kernel_cgroups_and_namespaces_match_the_host(report):
    c = by_id(report)
    release = os.uname().release
    major, minor = (int(x) for x in re.match(r"(\d+)\.(\d+)", release).groups())
    assert c["root"]["status"] == ("ok" if os.geteuid() == 0 else "missing")
    assert c["kernel"]["value"] == release == report["kernel"]
    assert c["kernel"]["status"] == ("ok" if (major, minor) >= (5, 10) else "missing")
    if fs_type("/sys/fs/cgroup") == "cgroup2fs":
        mode, v2path = "v2", "/sys/fs/cgroup"
    elif os.path.isdir("/sys/fs/cgroup/unified") and \
            fs_type("/sys/fs/cgroup/unified") == "cgroup2fs":
        mode, v2path = "hybrid", "/sys/fs/cgroup/unified"
    else:
        mode, v2path = "v1", None
    assert c["cgroups"]["value"] == mode and c["cgroup-v2"]["value"] == mode
    assert c["cgroup-v2"]["status"] == ("ok" if mode == "v2" else "missing")
    opts = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ")
            if left.split()[4] == v2path and right.split()[0] == "cgroup2":
                opts = right.split()[2].split(",")
    if (major, minor) < (6, 0):
        assert c["favordynmods"]["value"] == "unsupported"
    elif opts is None:
        assert c["favordynmods"]["value"] == "absent"
    else:
        assert c["favordynmods"]["value"] == ("on" if "favordynmods" in opts else "off")
    assert c["userns"]["value"] == sysctl("user.max_user_namespaces")
    clone = sysctl("kernel.unprivileged_userns_clone")
    assert c["kernel.unprivileged_userns_clone"]["value"] == (clone or "absent")


def test_sysctls_match_the_host(report):
    c = by_id(report)
    for name, want in SYSCTLS.items():
        value = sysctl(name)
        assert c[name]["value"] == (value if value is not None else "absent"), name
        ok = value is None or int(value) >= want
        assert c[name]["status"] == ("ok" if ok else "missing"), name


def test_tools_match_the_host(report):
    c = by_id(report)
    rc, line = first_line(["runc", "--version"])
    assert c["runc"]["value"] == line.removeprefix("runc version ") and rc == 0
    criu = shutil.which("criu")
    if criu is None:
        assert c["criu"]["value"] == "absent" and c["criu"]["status"] == "missing"
    else:
        out = subprocess.run([criu, "--version"], capture_output=True, text=True).stdout
        version = re.search(r"Version: (\S+)", out).group(1)
        checked = subprocess.run([criu, "check"], capture_output=True, timeout=60).returncode
        assert c["criu"]["value"] == version
        ok = int(version.split(".")[0]) >= 4 and checked == 0
        assert c["criu"]["status"] == ("ok" if ok else "missing")
    try:
        with open("/usr/local/share/sandboxer/criu.build") as f:
            stamp = f.read().strip()
    except FileNotFoundError:
        stamp = None
    want = subprocess.run([os.path.join(ROOT, "scripts", "build-criu"), "--build-id"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert c["criu-build"]["value"] == (stamp or "absent")
    ours = stamp == want and criu == "/usr/local/sbin/criu"
    assert c["criu-build"]["status"] == ("ok" if ours else "missing")
    runsc = shutil.which("runsc")
    if runsc is None:
        assert c["runsc"]["value"] == "absent" and c["runsc"]["status"] == "missing"
        for p in ("runsc-ptrace", "runsc-kvm"):
            assert c[p]["status"] == "skipped" and c[p]["found"] == "no runsc", c[p]
    else:
        assert c["runsc"]["value"] == first_line([runsc, "--version"])[1].removeprefix(
            "runsc version ")
        assert c["runsc-ptrace"]["value"] in ("ok", "failed", "timeout")


def kvm_usable():
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return fcntl.ioctl(fd, 0xAE00) == 12  # KVM_GET_API_VERSION
    finally:
        os.close(fd)


def test_kvm_matches_the_host(report):
    c = by_id(report)
    usable = kvm_usable()
    assert c["kvm"]["status"] == ("ok" if usable else "missing")
    assert c["kvm"]["value"] == ("usable" if usable else
                                 "absent" if not os.path.exists("/dev/kvm") else "unusable")
    if not usable:
        assert c["runsc-kvm"]["status"] == "skipped"


def kernel_config():
    path = f"/boot/config-{os.uname().release}"
    if os.path.exists(path):
        with open(path) as f:
            return f.read()
    if os.path.exists("/proc/config.gz"):
        with gzip.open("/proc/config.gz", "rt") as f:
            return f.read()
    return None


def test_storage_checks_match_the_host(report):
    """Overlay and its export options, tried here with mount(8) in a mount namespace of our
    own; disk quotas from the filesystem, its mount options and the kernel's config."""
    c = by_id(report)
    where = existing_dir("/var/lib/sandboxer")
    with tempfile.TemporaryDirectory(dir=where, prefix=".test-doctor-") as tmp:
        script = ("mount --make-rprivate / && cd $0 && mkdir l u1 w1 m1 u2 w2 m2 && "
                  "mount -t overlay o -o lowerdir=l,upperdir=u1,workdir=w1 m1 && echo plain; "
                  "mount -t overlay o -o lowerdir=l,upperdir=u2,workdir=w2,index=on,nfs_export=on"
                  " m2 && echo export; true")
        out = subprocess.run(["unshare", "--mount", "sh", "-c", script, tmp],
                             capture_output=True, text=True, timeout=60).stdout.split()
    assert c["overlay"]["status"] == ("ok" if "plain" in out else "missing")
    assert c["overlay-export"]["status"] == ("ok" if "export" in out else "missing")
    assert where in c["overlay"]["found"]
    kind = fs_type(where)
    quota = c["disk-quota"]
    if kind == "btrfs":
        assert quota["value"] == "btrfs-qgroups"
    else:
        with open("/proc/mounts") as f:
            mounts = [l.split() for l in f]
        best = max((m for m in mounts if where == m[1] or where.startswith(m[1].rstrip("/") + "/")),
                   key=lambda m: len(m[1]))
        enforced = any(o in best[3].split(",") for o in ("prjquota", "pquota", "pqnoenforce"))
        assert quota["value"] == ("project-quotas" if enforced else "none"), (quota, best)
    config = kernel_config()
    if config is not None and kind == "ext2/ext3":
        for opt in ("CONFIG_QUOTA", "CONFIG_QFMT_V2"):
            missing = f"\n{opt}=" not in config
            assert (opt in quota["found"]) == missing, (opt, quota)
    # The idmapped probe needs a kernel that has idmapped overlay layers at all.
    if c["idmapped-overlay"]["status"] == "ok":
        release = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", os.uname().release).groups())
        assert release >= (5, 19) and c["userns"]["status"] == "ok"


def test_probes_leave_nothing_behind(report):
    assert not glob.glob("/tmp/sandboxer-doctor-*")
    assert not glob.glob(os.path.join(existing_dir("/var/lib/sandboxer"), ".sandboxer-doctor-*"))
    assert not glob.glob("/sys/fs/cgroup/*/sandboxer-doctor-*") + \
        glob.glob("/sys/fs/cgroup/sandboxer-doctor-*")
    with open("/proc/mounts") as f:
        assert "sandboxer-doctor" not in f.read()


def test_text_table_says_the_same(report):
    p = doctor("doctor")
    assert p.returncode == (0 if report["ok"] else 1), p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith(f"sandboxer doctor: Linux {os.uname().release}, state dir ")
    rows = {}
    for i, line in enumerate(lines):
        words = line.split()
        if words and words[0] in STATUS_WORDS and len(words) >= 3:
            rows[words[1]] = (words[0], words[2], lines[i + 1] if i + 1 < len(lines) else "")
    for c in report["checks"]:
        if c["id"].startswith("runsc-"):
            continue  # probed again: a timing may differ between the runs
        status, need, after = rows[c["id"]]
        want = {"ok": "ok", "skipped": "skip"}.get(c["status"]) or \
            {"required": "FAIL", "recommended": "WARN", "optional": "no"}[c["need"]]
        assert (status, need) == (want, c["need"]), c
        assert after.strip().startswith("fix: ") == (c["status"] == "missing" and
                                                     bool(c["fix"])), (c, after)
    summary = lines[-1]
    assert summary.startswith("Required: " + ("all ok" if report["ok"] else "MISSING"))
    assert f"Recommended: {len(report['recommended_missing'])} to change" in summary


def test_short_form_and_usage_errors(report):
    t0 = time.monotonic()
    p = doctor("doctor", "--short")
    assert time.monotonic() - t0 < 30  # no runsc platform probe
    assert p.returncode == (0 if report["ok"] else 1)
    assert len(p.stdout.splitlines()) == 1 and p.stdout.startswith("sandboxer doctor: required ")
    for rec in report["recommended_missing"]:
        if not rec.startswith("runsc-"):
            assert f" {rec}" in p.stdout
    assert doctor("doctor", "no-such-check").returncode == 2
    assert doctor("doctor", "--timeout", "0").returncode == 2
    made = subprocess.run(["make", "-n", "run", "SETUP_DONE=1"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60).stdout
    assert made.count("sandboxer doctor --short") == 1, made


def test_runsc_kvm_probe_is_bounded():
    """`runsc --platform=kvm` hangs in KVM_RUN on a nested VM: the probe is killed at the
    timeout and cleaned up, never waited for."""
    t0 = time.monotonic()
    out = doctor_json("--timeout", "2", "runsc-kvm", "runsc-ptrace")
    took = time.monotonic() - t0
    assert took < 2 * 2 + 20, took
    c = by_id(out)
    if shutil.which("runsc") is None:
        assert c["runsc-kvm"]["status"] == "skipped"
    elif c["runsc-kvm"]["value"] == "timeout":
        assert "killed" in c["runsc-kvm"]["found"]
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "sandboxer-doctor-" not in ps
    assert not glob.glob("/tmp/sandboxer-doctor-*")
    assert not glob.glob("/sys/fs/cgroup/*/sandboxer-doctor-*")


@pytest.fixture
def restore_sysctl():
    """Remember fs.protected_fifos and the sysctl.d file, and put both back afterwards."""
    name = "fs.protected_fifos"
    path = "/proc/sys/fs/protected_fifos"
    before = sysctl(name)
    try:
        with open(CONF) as f:
            conf = f.read()
    except FileNotFoundError:
        conf = None
    try:
        yield name, path
    finally:
        with open(path, "w") as f:
            f.write(before)
        if conf is None:
            if os.path.exists(CONF):
                os.unlink(CONF)
        else:
            with open(CONF, "w") as f:
                f.write(conf)
        assert sysctl(name) == before


def test_fix_sets_the_sysctl_now_and_in_sysctl_d(restore_sysctl):
    name, path = restore_sysctl
    with open(path, "w") as f:
        f.write("0")  # off, whatever it was: the fixture puts the old value back
    if not os.path.exists(CONF):  # a line of someone else's: --fix keeps it
        with open(CONF, "w") as f:
            f.write("# kept\nvm.swappiness=61\n")
    with open(CONF) as f:
        kept = f.read()
    p = doctor("doctor", "--fix", name)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == f"fixed {name}: 0 -> 1 (also in {CONF})"
    assert re.search(rf"^ok +{re.escape(name)} ", p.stdout, re.M), p.stdout
    assert sysctl(name) == "1"
    with open(CONF) as f:
        conf = f.read()
    assert f"{name} = 1\n" in conf
    for line in kept.splitlines():
        if not line.startswith(name):
            assert line in conf.splitlines(), (line, conf)
    # Once set, --fix has nothing to do; with --json it says what it changed.
    with open(path, "w") as f:
        f.write("0")
    out = doctor_json("--fix", name)
    assert out["fixed"] == [{"id": name, "from": "0", "to": 1}]
    assert out["checks"][0]["status"] == "ok"
    with open(CONF) as f:
        assert f.read().count(f"{name} = 1") == 1  # replaced, not added twice
    assert doctor_json("--fix", name)["fixed"] == []
