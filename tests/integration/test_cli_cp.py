"""`sandboxer cp` against the real daemon: files into and out of a sandbox, streamed."""
import hashlib
import json
import os
import subprocess

from conftest import BIN


def run(d, *args, check=True, cwd=None):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": d.workdir,
           "SANDBOXER_URL": d.url, "SANDBOXER_TOKEN": d.admin_token}
    p = subprocess.run([BIN, *args], env=env, capture_output=True, timeout=300, cwd=cwd)
    if check:
        assert p.returncode == 0, (args, p.returncode, p.stdout, p.stderr)
    return p


def umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def leftovers(directory):
    return sorted(n for n in os.listdir(directory) if ".tmp-" in n)


def test_cp_round_trip_of_5_megabytes(sbx_daemon, sbx, tmp_path):
    d = sbx_daemon
    sid = sbx.create("busybox")["id"]
    data = os.urandom(5 << 20)
    src = tmp_path / "data.bin"
    src.write_bytes(data)
    os.chmod(src, 0o640)

    # up, into directories that do not exist yet; the id's start names the sandbox
    p = run(d, "cp", str(src), f"{sid[:12]}:/tmp/deep/er/data.bin")
    assert p.stdout == b"" and p.stderr == b""
    st = sbx.get(f"/sandboxes/{sid}/files/tmp/deep/er/data.bin", params={"stat": "true"}).json()
    assert st["size"] == len(data) and st["mode"] == "0640"
    assert sbx.sh(sid, "sha256sum /tmp/deep/er/data.bin")["stdout"].split()[0] == \
        hashlib.sha256(data).hexdigest()

    # --json prints the daemon's answer
    p = run(d, "--json", "cp", str(src), f"{sid}:/tmp/again.bin")
    assert json.loads(p.stdout) == {"path": "/tmp/again.bin", "size": len(data)}

    # and down again, byte for byte, with the mode (less the umask, as cp does)
    out = tmp_path / "back.bin"
    p = run(d, "cp", f"{sid}:/tmp/deep/er/data.bin", str(out))
    assert p.stdout == b"" and p.stderr == b""
    assert out.read_bytes() == data
    assert os.stat(out).st_mode & 0o777 == 0o640 & ~umask()
    assert leftovers(tmp_path) == []

    # over an existing file: replaced whole
    out.write_bytes(b"old and longer than the new content" * 1000)
    sbx.sh(sid, "printf new > /tmp/small && chmod 755 /tmp/small")
    run(d, "cp", f"{sid}:/tmp/small", str(out))
    assert out.read_bytes() == b"new"
    assert os.stat(out).st_mode & 0o777 == 0o755 & ~umask()


def test_cp_into_and_out_of_directories(sbx_daemon, sbx, tmp_path):
    d = sbx_daemon
    sid = sbx.create("busybox")["id"]
    src = tmp_path / "notes.txt"
    src.write_bytes(b"some notes\n")

    # PATH ending in '/': the file keeps its name inside that directory (made if missing)
    run(d, "cp", str(src), f"{sid}:/tmp/into/")
    assert sbx.get(f"/sandboxes/{sid}/files/tmp/into/notes.txt").content == b"some notes\n"

    # an existing directory without the '/': the daemon refuses, and we say what to type
    p = run(d, "cp", str(src), f"{sid}:/tmp/into", check=False)
    assert p.returncode == 1 and b"end the path with '/'" in p.stderr, p.stderr

    # LOCAL a directory: the remote base name inside it, with or without a trailing '/'
    dest = tmp_path / "dest"
    dest.mkdir()
    run(d, "cp", f"{sid}:/tmp/into/notes.txt", str(dest))
    assert (dest / "notes.txt").read_bytes() == b"some notes\n"
    (dest / "notes.txt").unlink()
    run(d, "cp", f"{sid}:/tmp/into/notes.txt", str(dest) + "/")
    assert (dest / "notes.txt").read_bytes() == b"some notes\n"
    # a relative "." too
    run(d, "cp", f"{sid}:/etc/hostname", ".", cwd=str(dest))
    assert (dest / "hostname").read_bytes() == sbx.sh(sid, "cat /etc/hostname")["stdout"].encode()
    assert sorted(os.listdir(dest)) == ["hostname", "notes.txt"]


def test_cp_to_stdout_and_json_files_stay_bytes(sbx_daemon, sbx, tmp_path):
    d = sbx_daemon
    sid = sbx.create("busybox")["id"]
    data = os.urandom(300_000)
    src = tmp_path / "blob"
    src.write_bytes(data)
    run(d, "cp", str(src), f"{sid}:/tmp/blob")
    p = run(d, "cp", f"{sid}:/tmp/blob", "-")
    assert p.stdout == data and p.stderr == b""
    # the daemon serves *.json as application/json: it is still the file's bytes
    doc = b'{"entries": "not a listing", "x": [1, 2, 3]}\n'
    (tmp_path / "conf.json").write_bytes(doc)
    run(d, "cp", str(tmp_path / "conf.json"), f"{sid}:/tmp/conf.json")
    assert run(d, "cp", f"{sid}:/tmp/conf.json", "-").stdout == doc
    run(d, "cp", f"{sid}:/tmp/conf.json", str(tmp_path / "back.json"))
    assert (tmp_path / "back.json").read_bytes() == doc


def test_cp_errors_leave_nothing_behind(sbx_daemon, sbx, tmp_path):
    d = sbx_daemon
    sid = sbx.create("busybox")["id"]
    sbx.sh(sid, "mkdir -p /tmp/adir && echo x > /tmp/adir/f && mkfifo /tmp/fifo")
    dest = tmp_path / "dest"
    dest.mkdir()
    target = dest / "out"

    # a missing remote file: the daemon's detail, status 1
    p = run(d, "cp", f"{sid}:/tmp/nope", str(target), check=False)
    assert p.returncode == 1 and b"404" in p.stderr and b"nope" in p.stderr, p.stderr
    # a remote directory: refused clearly
    p = run(d, "cp", f"{sid}:/tmp/adir", str(target), check=False)
    assert p.returncode == 1 and b"is a directory" in p.stderr, p.stderr
    p = run(d, "cp", f"{sid}:/tmp/adir", "-", check=False)
    assert p.returncode == 1 and p.stdout == b""
    # a special file: the daemon refuses the download after the local file was begun
    p = run(d, "cp", f"{sid}:/tmp/fifo", str(target), check=False)
    assert p.returncode == 1 and b"400" in p.stderr and b"regular file" in p.stderr, p.stderr
    p = run(d, "cp", f"{sid}:/dev/null", str(dest), check=False)
    assert p.returncode == 1 and b"400" in p.stderr
    # a sandbox that does not exist
    p = run(d, "cp", f"{'0' * 64}:/etc/hostname", str(target), check=False)
    assert p.returncode == 1 and b"404" in p.stderr
    # a local directory that does not exist
    p = run(d, "cp", f"{sid}:/etc/hostname", str(tmp_path / "nodir") + "/", check=False)
    assert p.returncode == 1 and b"not a directory" in p.stderr
    assert os.listdir(dest) == [] and not os.path.exists(tmp_path / "nodir")
    assert leftovers(tmp_path) == []

    # uploads: a local directory is refused as not supported (usage, 2)
    p = run(d, "cp", str(dest), f"{sid}:/tmp/x", check=False)
    assert p.returncode == 2 and b"not supported" in p.stderr, p.stderr
    p = run(d, "cp", str(tmp_path / "missing"), f"{sid}:/tmp/x", check=False)
    assert p.returncode == 1 and b"No such file" in p.stderr
    # onto a special file in the sandbox: the daemon's 400
    (tmp_path / "small").write_bytes(b"x")
    p = run(d, "cp", str(tmp_path / "small"), f"{sid}:/tmp/fifo", check=False)
    assert p.returncode == 1 and b"400" in p.stderr, p.stderr
    assert sbx.get(f"/sandboxes/{sid}/files/tmp/x").status_code == 404

    # usage errors
    for args in (["a", "b"], [f"{sid}:/a", f"{sid}:/b"], [f"{sid}:rel", "x"], [":/a", "x"]):
        p = run(d, "cp", *args, check=False)
        assert p.returncode == 2, (args, p.stderr)
