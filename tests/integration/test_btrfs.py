"""The btrfs storage driver, on a loop-mounted btrfs image made by the test: sandbox layers
are subvolumes and a fork snapshots them (no copy of the data)."""
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import Daemon, Sandboxes, cleanup_state
from test_fork import ask, fork, server_sandbox


@pytest.fixture(scope="module")
def btrfs_dir():
    tmp = tempfile.mkdtemp(prefix="sbx-btrfs-")
    img, mnt = os.path.join(tmp, "fs.img"), os.path.join(tmp, "mnt")
    os.mkdir(mnt)
    subprocess.run(["truncate", "-s", "4G", img], check=True)
    subprocess.run(["mkfs.btrfs", "-q", "-f", img], check=True, timeout=60)
    subprocess.run(["mount", "-o", "loop", img, mnt], check=True, timeout=60)
    try:
        yield mnt
    finally:
        cleanup_state(os.path.join(mnt, "w", "state"))
        subprocess.run(["umount", "-l", mnt], timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def on_btrfs(btrfs_dir, registry_url):
    work = os.path.join(btrfs_dir, "w")
    os.makedirs(work, exist_ok=True)
    d = Daemon(work, ["--registry-mirror", registry_url, "--storage-driver", "btrfs"])
    try:
        d.start()
        c = Sandboxes(d.url, d.admin_token)
        yield d, c
        c.cleanup()
    finally:
        d.kill()
        shutil.rmtree(work, ignore_errors=True)


def is_subvolume(path):
    return os.stat(path).st_ino == 256


def used_bytes(path):
    subprocess.run(["btrfs", "filesystem", "sync", path], capture_output=True, timeout=60)
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def test_fork_on_btrfs_snapshots_the_layer(on_btrfs):
    d, c = on_btrfs
    parent = server_sandbox(c, data_mb=8)["id"]
    layer = os.path.join(d.state_dir, "sandboxes", parent, "layer")
    assert is_subvolume(layer)
    c.sh(parent, "head -c 200000000 /dev/urandom > /root/big; sync")
    ask(c, parent, "set 9")
    before = used_bytes(d.state_dir)
    child = fork(c, parent)
    assert child["memory_preserved"] is True
    child_layer = os.path.join(d.state_dir, "sandboxes", child["id"], "layer")
    assert is_subvolume(child_layer)
    # a snapshot shares the 200 MB: the filesystem barely grows
    assert used_bytes(d.state_dir) - before < 40 << 20
    assert ask(c, child["id"])["x"] == 9
    sums = {sid: c.sh(sid, "md5sum /root/big")["stdout"].split()[0] for sid in (parent, child["id"])}
    assert sums[parent] == sums[child["id"]]
    c.sh(child["id"], "echo child > /root/only-child")
    assert "No such file" in c.sh(parent, "cat /root/only-child 2>&1")["stdout"]
    r = c.delete(f"/sandboxes/{child['id']}")
    assert r.status_code == 200 and not os.path.exists(child_layer)


def test_snapshot_on_btrfs(on_btrfs):
    d, c = on_btrfs
    src = server_sandbox(c, data_mb=4)["id"]
    ask(c, src, "set 3")
    assert c.post(f"/sandboxes/{src}/snapshots", json={"name": "b"}, timeout=120).status_code == 201
    r = c.post("/sandboxes", json={"snapshot": "b"}, timeout=120)
    assert r.status_code == 200, r.text
    c.created.append(r.json()["id"])
    assert ask(c, r.json()["id"])["x"] == 3
    assert c.delete("/snapshots/b").status_code == 200
