"""Disk limits (`disk` at create): the sandbox's writable layer holds at most that much, by
btrfs qgroups on a loop-mounted btrfs made by the test; a daemon on a filesystem without
quotas refuses the field. (The project-quota path, for ext4 with prjquota or xfs with
pquota, cannot run here: this kernel is built without CONFIG_QUOTA, and ext4 refuses to
mount an image with the quota feature.)"""
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from conftest import Daemon, Sandboxes, cleanup_state
from test_fork import fork

MB = 1 << 20


@pytest.fixture(scope="module")
def quota_fs():
    tmp = tempfile.mkdtemp(prefix="sbx-quota-")
    img, mnt = os.path.join(tmp, "fs.img"), os.path.join(tmp, "mnt")
    try:
        os.mkdir(mnt)
        subprocess.run(["truncate", "-s", "2G", img], check=True)
        subprocess.run(["mkfs.btrfs", "-q", "-f", img], check=True, capture_output=True,
                       timeout=120)
        subprocess.run(["mount", "-o", "loop", img, mnt], check=True, timeout=60)
        yield "btrfs", mnt
    finally:
        cleanup_state(os.path.join(mnt, "w", "state"))
        subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def on_quota_fs(quota_fs, registry_url):
    kind, mnt = quota_fs
    work = os.path.join(mnt, "w")
    os.makedirs(work, exist_ok=True)
    d = Daemon(work, ["--registry-mirror", registry_url])
    try:
        d.start()
        c = Sandboxes(d.url, d.admin_token)
        yield kind, d, c
        c.cleanup()
    finally:
        d.kill()
        shutil.rmtree(work, ignore_errors=True)


def write_mb(c, sid, path, mb):
    """Write mb MiB to path in the sandbox: (exit code, MiB that landed, stderr)."""
    r = c.sh(sid, f"dd if=/dev/zero of={path} bs=1M count={mb} conv=fsync 2>&1 >/dev/null;"
                  f" e=$?; sync; echo; echo $e $(stat -c %s {path})")
    code, size = r["stdout"].split()[-2:]
    return int(code), int(size) / MB, r["stdout"]


def test_a_sandbox_writes_up_to_its_disk_limit(on_quota_fs):
    kind, d, c = on_quota_fs
    assert f"disk_quotas={'btrfs-qgroups' if kind == 'btrfs' else 'project-quotas'}" \
        in d.log()
    limited = c.create("busybox", disk="24M")
    assert limited["resources"]["disk"] == 24 * MB
    sid = limited["id"]
    free = c.create("busybox")["id"]
    code, size, out = write_mb(c, sid, "/big", 60)
    assert code != 0 and size <= 25, out
    assert "Disk quota exceeded" in out, out
    # the limit is on this sandbox only
    code, size, out = write_mb(c, free, "/big", 60)
    assert code == 0 and size == 60, out
    # room again once the file is gone; the daemon and the sandbox are fine
    c.sh(sid, "rm /big; sync")
    code, size, out = write_mb(c, sid, "/small", 8)
    assert code == 0 and size == 8, out
    st = c.get(f"/sandboxes/{sid}/stats").json()
    assert st["disk"]["limit_bytes"] == 24 * MB
    assert c.get(f"/sandboxes/{free}/stats").json()["disk"]["limit_bytes"] is None


def test_a_fork_keeps_the_limit_and_counts_on_its_own(on_quota_fs):
    kind, d, c = on_quota_fs
    parent = c.create("busybox", disk="24M")["id"]
    code, _, out = write_mb(c, parent, "/half", 12)
    assert code == 0, out
    child = fork(c, parent)
    assert child["resources"]["disk"] == 24 * MB
    # the child holds the parent's 12 MB too: only ~12 more fit
    code, size, out = write_mb(c, child["id"], "/more", 30)
    assert code != 0 and size <= 13, out
    # the parent's room is its own
    code, size, out = write_mb(c, parent, "/more", 8)
    assert code == 0 and size == 8, out


def test_disk_limit_values_are_checked(on_quota_fs):
    _, _, c = on_quota_fs
    for bad in ("1K", -5, "lots", 1 << 50):
        r = c.post("/sandboxes", json={"image": "busybox", "disk": bad})
        assert r.status_code == 400, (bad, r.text)


def test_without_quotas_the_daemon_refuses_a_disk_limit(sbx):
    # the default test daemon's state dir is on the root filesystem: no project quotas
    r = sbx.post("/sandboxes", json={"image": "busybox", "disk": "1G"})
    assert r.status_code == 400 and r.json()["code"] == "unsupported", r.text
    assert "quota" in r.json()["detail"]
    assert sbx.get("/sandboxes").json()["sandboxes"] == [] or all(
        s.get("resources", {}).get("disk") is None for s in sbx.get("/sandboxes").json()["sandboxes"])


def test_cli_create_with_a_disk_limit(on_quota_fs):
    from test_cli_more import run
    _, d, c = on_quota_fs
    sid = run(d, "create", "busybox", "--disk", "24M").stdout.strip()
    c.created.append(sid)
    assert c.get(f"/sandboxes/{sid}").json()["resources"]["disk"] == 24 * MB
    assert re.search(r"^DISK +\S+ \S+ / 25\.2 MB", run(d, "stats", sid).stdout, re.M)
    bad = run(d, "create", "busybox", "--disk", "lots", check=False)
    assert bad.returncode == 2 and "--disk wants a size" in bad.stderr
