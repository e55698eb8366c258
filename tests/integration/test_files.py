"""The files API: inside the sandbox, through its agent, streamed both ways."""
import hashlib
import pytest
import json
import os
import threading
import time

import httpx

from conftest import wait_for



@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_put_get_delete_round_trip(sbx):
    sid = sbx.create("busybox")["id"]
    data = os.urandom(300_000)
    r = sbx.put(f"/sandboxes/{sid}/files/tmp/a/b/data.bin", content=data,
                params={"mkdir": "true", "mode": "0600"})
    assert r.status_code == 201, r.text
    assert r.json() == {"path": "/tmp/a/b/data.bin", "size": len(data)}
    got = sbx.get(f"/sandboxes/{sid}/files/tmp/a/b/data.bin")
    assert got.status_code == 200 and got.content == data
    assert int(got.headers["content-length"]) == len(data)
    st = sbx.get(f"/sandboxes/{sid}/files/tmp/a/b/data.bin", params={"stat": "true"}).json()
    assert st["size"] == len(data) and st["mode"].endswith("600") and st["is_dir"] is False
    assert sbx.sh(sid, "md5sum /tmp/a/b/data.bin")["stdout"].split()[0] == \
        hashlib.md5(data).hexdigest()
    listing = sbx.get(f"/sandboxes/{sid}/files/tmp/a/b").json()
    assert [e["name"] for e in listing["entries"]] == ["data.bin"]
    e = listing["entries"][0]
    assert {"name", "is_dir", "size", "path", "mode", "mtime"} <= set(e)
    assert sbx.delete(f"/sandboxes/{sid}/files/tmp/a").status_code == 400  # not empty
    assert sbx.delete(f"/sandboxes/{sid}/files/tmp/a", params={"recursive": "true"}).json() \
        == {"path": "/tmp/a", "deleted": True}
    assert sbx.get(f"/sandboxes/{sid}/files/tmp/a/b/data.bin").status_code == 404


def test_range_requests(sbx):
    sid = sbx.create("busybox")["id"]
    data = bytes(range(256)) * 100
    sbx.put(f"/sandboxes/{sid}/files/tmp/r.bin", content=data)
    r = sbx.get(f"/sandboxes/{sid}/files/tmp/r.bin", headers={"Range": "bytes=10-19"})
    assert r.status_code == 206 and r.content == data[10:20]
    assert r.headers["content-range"] == f"bytes 10-19/{len(data)}"
    r = sbx.get(f"/sandboxes/{sid}/files/tmp/r.bin", headers={"Range": "bytes=-5"})
    assert r.content == data[-5:]
    r = sbx.get(f"/sandboxes/{sid}/files/tmp/r.bin", headers={"Range": f"bytes={len(data)}-"})
    assert r.status_code == 416 and r.json()["code"] == "range_not_satisfiable"
    assert r.headers["content-range"] == f"bytes */{len(data)}"


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_multipart_upload_of_several_files(sbx):
    sid = sbx.create("busybox")["id"]
    files = [("files", ("one.txt", b"first file\n")), ("files", ("two.bin", os.urandom(70000))),
             ("files", ("empty", b""))]
    r = sbx.post(f"/sandboxes/{sid}/files/tmp/up", files=files)
    assert r.status_code == 201, r.text
    assert r.json()["uploaded"] == ["/tmp/up/one.txt", "/tmp/up/two.bin", "/tmp/up/empty"]
    for _, (name, content) in files:
        assert sbx.get(f"/sandboxes/{sid}/files/tmp/up/{name}").content == content
    bad = sbx.post(f"/sandboxes/{sid}/files/tmp/up", files=[("files", ("../evil", b"x"))])
    assert bad.status_code == 400


def test_multipart_sent_in_tiny_pieces_lists_each_file_once(sbx_daemon, sbx):
    """Part boundaries split across reads: each file is written whole and listed once."""
    import socket
    import time
    sid = sbx.create("busybox")["id"]
    parts = [("a.txt", b"alpha\n"), ("empty", b""), ("b.bin", bytes(range(256)) + b"tail")]
    boundary = "sbxTestBoundary7"
    body = b"".join(
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; "
        f"filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n".encode()
        + data + b"\r\n" for name, data in parts) + f"--{boundary}--\r\n".encode()
    head = (f"POST /sandboxes/{sid}/files/tmp/tiny HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {sbx_daemon.admin_token}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", sbx_daemon.port), timeout=30) as s:
        s.sendall(head)
        for i in range(0, len(body), 3):
            s.sendall(body[i:i + 3])
            time.sleep(0.002)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 201"), answer[:300]
    listed = json.loads(answer.split(b"\r\n\r\n", 1)[1])["uploaded"]
    assert listed == [f"/tmp/tiny/{n}" for n, _ in parts]
    for name, data in parts:
        assert sbx.get(f"/sandboxes/{sid}/files/tmp/tiny/{name}").content == data


def test_symlink_to_etc_hostname_reads_the_sandboxs_file(sbx):
    sid = sbx.create("busybox", hostname="inside-box")["id"]
    sbx.sh(sid, "ln -s /etc/hostname /tmp/link")
    r = sbx.get(f"/sandboxes/{sid}/files/tmp/link")
    assert r.status_code == 200 and r.text == "inside-box\n"
    with open("/etc/hostname") as f:
        assert f.read() != r.text


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_dotdot_cannot_leave_the_root(sbx):
    sid = sbx.create("busybox")["id"]
    sbx.put(f"/sandboxes/{sid}/files/tmp/x.txt", content=b"mine")
    # raw paths with .. segments, sent as written (http.client does not normalise them)
    import http.client
    url = httpx.URL(str(sbx.http.base_url))
    conn = http.client.HTTPConnection(url.host, url.port, timeout=30)
    conn.request("GET", f"/sandboxes/{sid}/files/tmp/../../../../etc/hostname",
                 headers={"Authorization": sbx.http.headers["authorization"]})
    resp = conn.getresponse()
    r = httpx.Response(resp.status, content=resp.read())
    conn.close()
    assert r.status_code == 200
    assert r.text == sbx.sh(sid, "cat /etc/hostname")["stdout"]  # the sandbox's, not the host's
    r = sbx.get(f"/sandboxes/{sid}/files/" + "%2e%2e/" * 6 + "tmp/x.txt")
    assert r.status_code == 200 and r.content == b"mine"


def test_special_files_are_refused(sbx):
    sid = sbx.create("busybox")["id"]
    sbx.sh(sid, "mkfifo /tmp/fifo")
    assert sbx.get(f"/sandboxes/{sid}/files/tmp/fifo").status_code == 400
    assert sbx.get(f"/sandboxes/{sid}/files/dev/null").status_code == 400
    r = sbx.put(f"/sandboxes/{sid}/files/tmp/fifo", content=b"x")
    assert r.status_code == 400


def test_read_only_location_is_a_clear_4xx(sbx):
    sid = sbx.create("busybox")["id"]
    r = sbx.put(f"/sandboxes/{sid}/files/proc/sys/kernel/hostname", content=b"x")
    assert 400 <= r.status_code < 500, r.text
    r = sbx.put(f"/sandboxes/{sid}/files/etc/passwd", content=b"x", params={"user": "sbx"})
    assert r.status_code == 403 and r.json()["code"] == "permission_denied"


def test_other_owner_gets_404(sbx, sbx_user):
    sid = sbx.create("busybox")["id"]
    bob = sbx_user("bob")
    assert bob.get(f"/sandboxes/{sid}/files/etc/hostname").status_code == 404
    assert bob.put(f"/sandboxes/{sid}/files/tmp/x", content=b"x").status_code == 404


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_200_megabytes_both_ways_in_bounded_memory(sbx_daemon, sbx):
    sid = sbx.create("busybox")["id"]
    size = 200 << 20
    chunk = os.urandom(1 << 20)
    digest = hashlib.sha256()

    def body():
        for _ in range(size // len(chunk)):
            digest.update(chunk)
            yield chunk

    peak = [rss_kb(sbx_daemon.proc.pid)]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_kb(sbx_daemon.proc.pid))
            time.sleep(0.05)
    t = threading.Thread(target=watch)
    t.start()
    try:
        r = sbx.put(f"/sandboxes/{sid}/files/tmp/big", content=body(), timeout=300)
        assert r.status_code == 201 and r.json()["size"] == size, r.text
        back = hashlib.sha256()
        n = 0
        with sbx.stream("GET", f"/sandboxes/{sid}/files/tmp/big", timeout=300) as resp:
            for part in resp.iter_bytes():
                back.update(part)
                n += len(part)
        assert n == size and back.hexdigest() == digest.hexdigest()
    finally:
        stop.set()
        t.join()
    assert peak[0] < 100 * 1024, f"daemon RSS peaked at {peak[0]} KiB"


def test_a_file_the_user_may_not_read_is_403_before_any_body(sbx):
    sid = sbx.create("busybox")["id"]
    sbx.sh(sid, "echo secret > /tmp/private && chmod 600 /tmp/private")
    r = sbx.get(f"/sandboxes/{sid}/files/tmp/private", params={"user": "65534"})
    assert r.status_code == 403 and r.json()["code"] == "permission_denied", r.text
    # root (the sandbox's default user here) reads it whole
    assert sbx.get(f"/sandboxes/{sid}/files/tmp/private").content == b"secret\n"


def test_a_file_rewritten_while_it_is_read_is_answered_whole(sbx):
    """A counter rewritten all the time (`echo $i > f` truncates, then writes): every GET is a
    complete answer whose body matches its Content-Length, never a cut connection."""
    sid = sbx.create("busybox")["id"]
    r = sbx.post(f"/sandboxes/{sid}/processes", json={
        "code": "i=100000; while true; do i=$((i+1)); echo $i > /tmp/count; done"})
    assert r.status_code == 201, r.text
    wait_for("the counter to start", lambda: sbx.get(f"/sandboxes/{sid}/files/tmp/count"
                                                      ).status_code == 200)
    seen = set()
    for _ in range(300):
        r = sbx.get(f"/sandboxes/{sid}/files/tmp/count")  # raises on a short body
        assert r.status_code == 200, r.text
        assert int(r.headers["content-length"]) == len(r.content)
        assert r.content == b"" or (r.content.endswith(b"\n") and r.content[:-1].isdigit()), \
            r.content
        seen.add(r.content)
        r = sbx.get(f"/sandboxes/{sid}/files/tmp/count", headers={"Range": "bytes=0-2"})
        assert r.status_code in (206, 416), r.text
        if r.status_code == 206:
            assert len(r.content) == 3 and r.content.isdigit(), r.content
    assert len(seen) > 3, seen  # it did change under us
