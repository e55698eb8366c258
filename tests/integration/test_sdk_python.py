"""The Python SDK (sdk/python, package `sandboxer`) against the real daemon: sync and async
clients, exec (plain and streamed), files, fork/tree/coalesce, pause, hibernate/wake,
snapshots, events with resume, typed errors, context managers, terminals, the unix socket,
tokens and images, and an offline pip install."""
import asyncio
import io
import os
import shutil
import subprocess
import sys
import time

import httpx
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))

import sandboxer  # noqa: E402
from sandboxer import (AsyncSandboxer, ExecResult, Sandbox, Sandboxer)  # noqa: E402


def run(coro, timeout=120):
    """Run a coroutine with an overall bound."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture
def client(sbx_daemon):
    """The admin's SDK client; every sandbox still alive at the end is deleted."""
    c = Sandboxer(sbx_daemon.url, sbx_daemon.admin_token, timeout=60)
    yield c
    try:
        for s in c.list():
            if s.status != "terminated":
                try:
                    s.terminate()
                except sandboxer.SandboxerError:
                    pass
    finally:
        c.close()


@pytest.fixture
def bob(sbx_daemon, client):
    tok = client.create_token(user="bob", name="sdk-test")
    c = Sandboxer(sbx_daemon.url, tok.token)
    yield c
    for s in c.list():
        if s.status != "terminated":
            s.terminate()
    c.close()


def test_create_exec_and_the_sandbox_object(client):
    with client.create("busybox", label="sdk", env={"GREETING": "hello world"},
                       hostname="sdk-box", cpus=0.5, memory="256M", pids=128,
                       network="none") as sb:
        assert isinstance(sb, Sandbox) and len(sb.id) == 64 and sb.status == "running"
        assert sb.label == "sdk" and sb.hostname == "sdk-box" and sb.parent_id is None
        assert sb.resources["memory"] == 256 << 20 and sb.resources["pids"] == 128
        assert sb.data["image"] == "docker.io/library/busybox:latest"
        # a string is shell code (POST /execute); the result is a dict with attributes too
        r = sb.exec('echo "$GREETING"; hostname; echo oops >&2; exit 3')
        assert isinstance(r, ExecResult) and isinstance(r, dict)
        assert r == {**r, "stdout": "hello world\nsdk-box\n", "stderr": "oops\n", "exit_code": 3}
        assert r.exit_code == 3 and not r.ok and r.execution_id >= 1
        with pytest.raises(sandboxer.CommandFailed) as e:
            sb.exec("echo bad >&2; exit 4", check=True)
        assert e.value.exit_code == 4 and "bad" in str(e.value)
        # a list is an argv (POST /exec), with env, cwd, user and stdin
        assert sb.exec(["echo", "a b", "c"]).stdout == "a b c\n"
        r = sb.exec(["sh", "-c", 'pwd; echo "$X"; id -u; cat'], env={"X": "y"}, cwd="/tmp",
                    user="sbx", stdin="from stdin\n")
        assert r.stdout == "/tmp\ny\n1000\nfrom stdin\n"
        assert sb.exec("cat", stdin=b"bytes in").stdout == "bytes in"
        assert sb.exec(["no-such-program"]).exit_code == 127
        assert sb.execute("echo $((6*7))").stdout == "42\n"
        t0 = time.monotonic()
        r = sb.exec("sleep 30; echo never", timeout=1)
        assert r.timed_out and r.exit_code == 137 and time.monotonic() - t0 < 15
        # get by id and by name, list with filters, update
        assert client.get(sb.name).id == sb.id
        assert sb.id in [s.id for s in client.list(status="running", label="sdk")]
        assert sb.set_label("renamed") == {"id": sb.id, "label": "renamed"}
        assert sb.refresh().label == "renamed"
        assert sb.set_public(True)["public"] is True and sb.is_public is True
        # history: the established logs(limit) shape, and typed executions
        hist = sb.logs(limit=100)
        logs = hist["executions"][0]["logs"]  # chunks as they came: their borders vary
        assert logs[0]["content"].startswith("hello world\n")
        assert "".join(x["content"] for x in logs if x["fd"] == "stdout") == "hello world\nsdk-box\n"
        newest = sb.executions(limit=2, newest_first=True)
        assert newest[0].command.startswith("sleep 30") and newest[0].exit_code == 137
        first = sb.executions()[0]
        assert first.stdout == "hello world\nsdk-box\n" and first.stderr == "oops\n"
        page = sb.execution_logs(first.id)
        assert page.execution.id == first.id and page.logs[0].content.startswith("hello world\n")
        assert "".join(x.content for x in page.logs if x.fd == "stdout") == "hello world\nsdk-box\n"
        assert sb.execution_logs(first.id, start_id=page.next_start_id).logs == []
    # the with block deleted it
    assert client.get(sb.id).status == "terminated"
    assert sb.status == "terminated"
    with pytest.raises(sandboxer.Conflict):
        sb.exec("true")
    assert sb.terminate()["status"] == "terminated"  # deleting again is fine


def test_main_process_output_and_wait(client):
    with client.create("busybox", args=["sh", "-c", "for i in 1 2 3; do echo tick $i; "
                                                    "sleep 0.3; done"]) as sb:
        followed = "".join(sb.follow_output())
        assert followed == "tick 1\ntick 2\ntick 3\n"
        sb.wait("exited", timeout=20)
        assert sb.status == "exited" and sb.exit_code == 0
        assert sb.output() == followed
    with client.create("hello-world", label="hello", interactive=False) as hello:
        hello.wait(timeout=20)
        assert "Hello from Sandboxer!" in hello.output()


def test_exec_stream_yields_typed_chunks_live(client):
    with client.create("busybox") as sb:
        t0 = time.monotonic()
        stream = sb.exec_stream("echo one; echo two >&2; sleep 2; echo three; exit 5")
        first = next(iter(stream))
        assert first.type == "stdout" and first.output == "one\n" and first.exit_code == -1
        assert time.monotonic() - t0 < 1.5  # it came before the sleep ended
        rest = list(stream)
        assert rest[-1].type == "exit" and rest[-1].is_exit and rest[-1].exit_code == 5
        assert [c.type for c in rest[:-1]] == ["stderr", "stdout"]
        assert stream.result == {"stdout": "one\nthree\n", "stderr": "two\n", "exit_code": 5,
                                 "timed_out": False}
        assert stream.exit_code == 5
        # argv form, collect(), and an early close
        assert sb.exec_stream(["sh", "-c", "seq 3"]).collect().stdout == "1\n2\n3\n"
        with sb.exec_stream("yes | head -c 2000000") as s:
            assert next(iter(s)).type == "stdout"
        assert sb.exec("echo still fine").stdout == "still fine\n"


def test_files_round_trip(client, tmp_path):
    with client.create("busybox") as sb:
        data = os.urandom(300_000)
        assert sb.write_file("/tmp/a/b/data.bin", data, mkdir=True, mode=0o600) == \
            {"path": "/tmp/a/b/data.bin", "size": len(data)}
        assert sb.read_file("/tmp/a/b/data.bin") == data
        assert sb.read_file("/tmp/a/b/data.bin", offset=10, length=10) == data[10:20]
        assert sb.read_file("/tmp/a/b/data.bin", offset=-5) == data[-5:]
        assert b"".join(sb.iter_file("/tmp/a/b/data.bin", chunk_size=4096)) == data
        st = sb.stat("/tmp/a/b/data.bin")
        assert st.size == len(data) and st.mode == "0600" and st.is_dir is False
        # text, a file object (streamed), chunks, and a string mode
        sb.write_file("/tmp/t.txt", "héllo\n")
        assert sb.read_text("/tmp/t.txt") == "héllo\n"
        sb.write_file("/tmp/f.bin", io.BytesIO(data[:70000]))
        assert sb.read_file("/tmp/f.bin") == data[:70000]
        sb.write_file("/tmp/run.sh", (b"#!/bin/sh\n", b"echo ran\n"), mode="755")
        assert sb.exec(["/tmp/run.sh"]).stdout == "ran\n"
        # download to a local path, streamed
        local = tmp_path / "out.bin"
        assert sb.download("/tmp/a/b/data.bin", local) == len(data)
        assert local.read_bytes() == data
        # upload several files: local paths, (name, content) pairs, a dict
        p = tmp_path / "local.txt"
        p.write_text("from disk\n")
        assert sb.upload("/tmp/up", [str(p), ("pair.txt", b"pair\n")]) == \
            ["/tmp/up/local.txt", "/tmp/up/pair.txt"]
        assert sb.upload("/tmp/up", {"d.txt": "dict\n", "e.bin": b"\x00\x01"}) == \
            ["/tmp/up/d.txt", "/tmp/up/e.bin"]
        assert sb.read_text("/tmp/up/local.txt") == "from disk\n"
        names = sorted(e.name for e in sb.list_files("/tmp/up"))
        assert names == ["d.txt", "e.bin", "local.txt", "pair.txt"]
        assert sb.exists("/tmp/up/d.txt") and not sb.exists("/tmp/nope")
        # errors: typed, with the daemon's code
        with pytest.raises(sandboxer.NotFound) as e:
            sb.read_file("/tmp/nope")
        assert e.value.status == 404 and e.value.code == "file_not_found"
        with pytest.raises(sandboxer.InvalidRequest) as e:
            sb.read_file("/tmp/up")
        assert e.value.code == "is_directory"
        with pytest.raises(sandboxer.InvalidRequest):
            sb.list_files("/tmp/t.txt")
        with pytest.raises(sandboxer.InvalidRequest) as e:
            sb.delete_file("/tmp/up")  # not empty
        assert e.value.code == "not_empty"
        assert sb.delete_file("/tmp/up", recursive=True) == {"path": "/tmp/up", "deleted": True}
        assert not sb.exists("/tmp/up")
        with pytest.raises(sandboxer.Forbidden):
            sb.write_file("/etc/passwd", "x", user="sbx")
        # names that need encoding
        sb.write_file("/tmp/sp ace/q?#%.txt", "odd", mkdir=True)
        assert sb.read_text("/tmp/sp ace/q?#%.txt") == "odd"
        assert [e.name for e in sb.list_files("/tmp/sp ace")] == ["q?#%.txt"]


def test_fork_tree_coalesce_pause_hibernate_snapshots(client):
    root = client.create("busybox", label="root")
    root.exec("echo base > /tmp/state")
    a = root.fork("a")
    b = root.fork(label="b", hostname="bee")
    assert a.parent_id == root.id and a.label == "a" and a.memory_preserved in (True, False)
    assert b.hostname == "bee" and b.exec("hostname").stdout == "bee\n"
    assert sorted(root.refresh().child_ids) == sorted([a.id, b.id])
    a.exec("echo from-a > /tmp/state")
    assert root.exec("cat /tmp/state").stdout == "base\n"
    assert b.exec("cat /tmp/state").stdout == "base\n"
    tree = a.tree()
    assert tree.root.id == root.id and sorted(tree.root.ids()) == sorted([root.id, a.id, b.id])
    assert tree["tree"] == tree.text and "(a)" in str(tree)
    # pause blocks execs (409), unpause resumes
    assert a.pause() == {"id": a.id, "status": "paused"} and a.status == "paused"
    with pytest.raises(sandboxer.Conflict) as e:
        a.exec("true")
    assert e.value.status == 409
    assert a.unpause()["status"] == "running"
    # hibernate frees memory; wake (or just an exec) restores
    assert a.hibernate()["status"] == "hibernated"
    assert client.get(a.id).status == "hibernated"
    assert a.wake()["status"] == "running"
    a.hibernate()
    assert a.exec("cat /tmp/state").stdout == "from-a\n"
    assert a.refresh().status == "running"
    # snapshots: keep one, start sandboxes from it
    snap = a.snapshot("sdk-warm")
    assert snap.name == "sdk-warm" and snap.source_id == a.id
    assert "sdk-warm" in [s.name for s in client.snapshots()]
    with pytest.raises(sandboxer.Conflict):
        a.snapshot("sdk-warm")
    with client.from_snapshot("sdk-warm", label="warm") as w:
        assert w.exec("cat /tmp/state").stdout == "from-a\n" and w.label == "warm"
    with client.create(snapshot="sdk-warm") as w2:
        assert w2.exec("cat /tmp/state").stdout == "from-a\n"
    assert client.delete_snapshot("sdk-warm")["deleted"] is True
    with pytest.raises(sandboxer.NotFound):
        client.create(snapshot="sdk-warm")
    # coalesce onto a: everything else of the tree goes
    kept = root.coalesce(a)
    assert kept.id == a.id and kept.parent_id is None and kept.message
    assert sorted(kept.terminated_sandboxes) == sorted([root.id, b.id])
    assert root.status == "terminated" and client.get(b.id).status == "terminated"
    assert client.get(b.id).delete_reason == "coalesced"
    assert a.exec("cat /tmp/state").stdout == "from-a\n"
    with pytest.raises(sandboxer.InvalidRequest):  # not a descendant
        other = client.create("busybox")
        a.coalesce(other)
    other.terminate()
    a.terminate()


def test_async_client_and_the_established_surface(sbx_daemon):
    url, token = sbx_daemon.url, sbx_daemon.admin_token

    async def main():
        async with AsyncSandboxer(url, token) as ac:
            assert (await ac.me()).name == "admin"
            async with ac.create("busybox", label="async") as sb:
                assert isinstance(sb, sandboxer.AsyncSandbox)
                r = await sb.exec("echo hi; exit 2")
                assert r.stdout == "hi\n" and r.exit_code == 2
                assert (await sb.exec(["cat"], stdin="in")).stdout == "in"
                chunks = [c async for c in sb.exec_stream("echo a; echo b >&2")]
                assert [c.type for c in chunks] == ["stdout", "stderr", "exit"]
                s = sb.exec_stream(["seq", "2"])
                assert (await s.collect()).stdout == "1\n2\n"
                await sb.write_file("/tmp/x/y", b"async bytes", mkdir=True)
                assert await sb.read_file("/tmp/x/y") == b"async bytes"
                assert b"".join([c async for c in sb.iter_file("/tmp/x/y")]) == b"async bytes"
                assert await sb.upload("/tmp/u", {"f": "F"}) == ["/tmp/u/f"]
                assert [e.name for e in await sb.list_files("/tmp/u")] == ["f"]
                assert await sb.exists("/tmp/u/f")
                child = await sb.fork("async-child")
                assert isinstance(child, sandboxer.AsyncSandbox) and child.parent_id == sb.id
                assert (await child.tree()).root.id == sb.id
                assert (await child.hibernate())["status"] == "hibernated"
                assert (await child.exec("cat /tmp/x/y")).stdout == "async bytes"
                kept = await sb.coalesce(child)
                assert kept.id == child.id and sb.status == "terminated"
                got = [e async for e in ac.events(sandbox=child, max_events=1)]
                assert got[0].type == "created" and got[0].container_id == child.id
                await kept.terminate()
                sid = sb.id
            assert (await ac.get(sid)).status == "terminated"

        # the established SDK's surface: Sandboxer(base_url, token), create/acreate(image,
        # label, interactive) -> Sandbox with exec/aexec (dicts), fork/afork, terminate,
        # tree, coalesce(final), logs(limit)
        c = Sandboxer(url, token)
        sb = await c.acreate("busybox", "compat", False)
        assert isinstance(sb, Sandbox) and sb.label == "compat" and sb.interactive is False
        out = await sb.aexec("echo compat")
        assert out["stdout"] == "compat\n" and out["exit_code"] == 0 and out["stderr"] == ""
        kid = await sb.afork("kid")
        assert isinstance(kid, Sandbox) and kid.id != sb.id
        assert "kid" in (await sb.atree())["tree"]
        kept = await sb.acoalesce(kid)
        assert kept.id == kid.id
        assert (await kid.alogs(10))["executions"] == []
        await kid.aterminate()
        async with c.acreate("busybox", "compat-cm") as sb2:
            assert (await sb2.aexec("echo cm"))["stdout"] == "cm\n"
        assert (await c.aget(sb2.id)).status == "terminated"
        await c.aclose()

    run(main(), timeout=180)

    c = Sandboxer(url, token)
    sb = c.create("busybox", "compat-sync", interactive=False)
    out = sb.exec("echo x")
    assert (out["stdout"], out["stderr"], out["exit_code"]) == ("x\n", "", 0)
    assert [e["command"] for e in sb.logs(limit=10)["executions"]] == ["echo x"]
    kid = sb.fork("kid")
    assert "tree" in sb.tree() and sb.coalesce(kid).id == kid.id
    kid.terminate()
    c.close()


def test_events_resume_without_loss(client):
    sb = client.create("busybox")
    sb.exec("echo one")
    child = sb.fork("ev-child")
    child.terminate()
    events = list(client.events(max_events=5, timeout=30))
    kinds = [(e.type, e.container_id) for e in events]
    assert kinds == [("created", sb.id), ("exec", sb.id), ("forked", sb.id),
                     ("created", child.id), ("deleted", child.id)], kinds
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert events[2].data["child_id"] == child.id and isinstance(events[0].timestamp, float)
    # resume after the last one seen: exactly what came next
    sb.pause()
    sb.unpause()
    stream = client.events(last_event_id=events[-1].id, timeout=30)
    missed = [next(stream), next(stream)]
    stream.close()
    assert [e.type for e in missed] == ["paused", "unpaused"]
    assert stream.last_event_id == missed[-1].id
    # filters, and a timeout that ends the iteration
    mine = list(sb.events(types=["exec"], timeout=2))
    assert [e.data["command"] for e in mine] == ["echo one"]
    t0 = time.monotonic()
    assert list(client.events(last_event_id=missed[-1].id, timeout=1)) == []
    assert time.monotonic() - t0 < 10
    assert list(client.events(since=time.time() + 3600, timeout=1)) == []
    # live: an event that happens while we listen
    import threading
    got = []
    stream = client.events(last_event_id=missed[-1].id, timeout=30, max_events=1)
    t = threading.Thread(target=lambda: got.extend(stream))
    t.start()
    time.sleep(0.3)
    sb.set_label("live")
    t.join(30)
    assert got and got[0].type == "updated" and got[0].container_id == sb.id
    with pytest.raises(sandboxer.InvalidRequest):
        next(iter(client.events(last_event_id="nope")))
    sb.terminate()


def test_typed_errors(sbx_daemon, client, bob):
    sb = client.create("busybox")
    # another owner's sandbox is a 404, whatever the route
    with pytest.raises(sandboxer.SandboxNotFound) as e:
        bob.get(sb.id)
    err = e.value
    assert isinstance(err, sandboxer.NotFound) and isinstance(err, sandboxer.SandboxerError)
    assert isinstance(err, httpx.HTTPStatusError) and err.response.status_code == 404
    assert (err.status, err.code) == (404, "sandbox_not_found") and err.detail
    theirs = bob.sandbox(sb.id)
    for call in (lambda: theirs.exec("id"), lambda: theirs.read_file("/etc/hostname"),
                 lambda: theirs.fork(), lambda: theirs.hibernate(), lambda: theirs.tree(),
                 lambda: theirs.terminate(), lambda: list(theirs.exec_stream("id"))):
        with pytest.raises(sandboxer.NotFound):
            call()
    assert sb.id not in [s.id for s in bob.list()]
    # bad input: 400 InvalidRequest with the daemon's code; 422 for an image that is not there
    for kwargs in ({"cpus": "x"}, {"memory": "lots"}, {"hostname": "bad_host!"},
                   {"extra": {"bogus": 1}}, {"network": "sideways"}):
        with pytest.raises(sandboxer.InvalidRequest) as e:
            client.create("busybox", **kwargs)
        assert e.value.status == 400 and e.value.code and e.value.detail
    with pytest.raises(sandboxer.InvalidRequest):
        client.create("Not A Ref!!")
    with pytest.raises(sandboxer.UnprocessableEntity) as e:
        client.create("no-such-image-here")
    assert e.value.status == 422
    with pytest.raises(sandboxer.InvalidRequest):
        sb.exec("")
    with pytest.raises(sandboxer.InvalidRequest):
        sb.set_label("")
    with pytest.raises(sandboxer.NotFound) as e:  # the template base: not on this daemon
        client.create()
    assert e.value.code == "template_not_found"
    # auth and transport
    with pytest.raises(sandboxer.Unauthorized) as e:
        Sandboxer(sbx_daemon.url, "sbx_" + "0" * 64).me()
    assert e.value.status == 401
    with pytest.raises(sandboxer.Forbidden):
        bob.create_token(user="mallory")
    with pytest.raises(sandboxer.ConnectionFailed) as e:
        Sandboxer("http://127.0.0.1:9", "x").health()
    assert e.value.status == 0
    assert sb.exec("echo unharmed").stdout == "unharmed\n"
    sb.terminate()


def test_terminals_pty_and_attach(client, bob):
    sb = client.create("busybox")
    with sb.pty(cols=100, rows=30) as term:
        term.send("stty size; echo m1-$((6*7))\n")
        assert b"30 100" in term.read_until("m1-42", timeout=30)
        term.resize(132, 43)
        term.sendline("stty size; echo m2-$((6*7))")
        assert b"43 132" in term.read_until("m2-42", timeout=30)
        term.send(b"exit 3\n")
        assert term.wait(timeout=30) == 3
    assert term.close_code == 1000 and term.signal is None and term.closed
    with sb.pty("echo from-cmd; exit 5") as t2:
        assert t2.wait(timeout=30) == 5
        assert b"from-cmd" in t2.read_all(timeout=5)
    with pytest.raises(sandboxer.NotFound):
        bob.sandbox(sb.id).pty()
    with pytest.raises(sandboxer.InvalidRequest):
        sb.pty(cols=0)
    with pytest.raises(sandboxer.Conflict):
        sb.attach()  # not interactive: no console
    # attach to an interactive sandbox's console; detaching leaves it running
    inter = client.create("busybox", interactive=True, args=["/bin/sh"])
    with inter.attach() as t:
        t.send("echo first-$((10+1))\n")
        t.read_until("first-11")
    assert inter.refresh().status == "running"
    t = inter.attach()
    assert b"first-11" in t.read_until("first-11")  # the recent output is replayed
    t.send("exit 7\n")
    assert t.wait(timeout=30) == 7
    t.close()
    inter.wait("exited", timeout=20)
    assert inter.exit_code == 7

    async def apty():
        term = await sb.apty("exit 4")
        try:
            return term.wait(timeout=30)
        finally:
            term.close()
    assert run(apty()) == 4
    inter.terminate()
    sb.terminate()


def test_unix_socket_and_environment_defaults(sbx_daemon, monkeypatch):
    monkeypatch.delenv("SANDBOXER_URL", raising=False)
    monkeypatch.setenv("SANDBOXER_SOCKET", sbx_daemon.socket)
    monkeypatch.setenv("SANDBOXER_TOKEN", sbx_daemon.admin_token)
    c = Sandboxer()  # no URL: the socket from the environment
    assert c.socket == sbx_daemon.socket and c.me().name == "admin"
    with c.create("busybox") as sb:
        assert sb.exec("echo over-uds").stdout == "over-uds\n"
        assert sb.read_file("/etc/hostname") == sb.exec("cat /etc/hostname").stdout.encode()
        with sb.pty("exit 6") as t:  # the WebSocket goes over the socket too
            assert t.wait(timeout=30) == 6

        async def main():
            async with AsyncSandboxer(f"unix:{sbx_daemon.socket}") as ac:
                return (await ac.sandbox(sb.id).exec("echo async-uds")).stdout
        assert run(main()) == "async-uds\n"
    monkeypatch.setenv("SANDBOXER_URL", sbx_daemon.url)
    c2 = Sandboxer()
    assert c2.socket is None and c2.base_url == sbx_daemon.url and c2.me().name == "admin"
    c.close()
    c2.close()


def test_web_app_through_the_proxy(sbx_daemon, client):
    with client.create("busybox", ports=[8080]) as sb:
        sb.write_file("/www/index.html", "<h1>hi from the sandbox</h1>\n", mkdir=True)
        sb.exec("httpd -p 8080 -h /www")  # busybox httpd daemonizes
        r = sb.wait_for_http("/index.html", timeout=20)
        assert r.status_code == 200 and "hi from the sandbox" in r.text
        assert sb.proxy("GET", "/nope.html").status_code == 404
        url = sb.proxy_url("/index.html")
        assert url == f"{sbx_daemon.url}/sandboxes/{sb.id}/proxy/index.html"
        assert httpx.get(url).status_code == 401  # private: the token is needed
        sb.set_public(True)
        assert "hi from" in httpx.get(url).text
        assert sb.proxy_url("/", port=8080).endswith("/proxy/?port=8080")


def test_tokens_images_and_the_daemon(client):
    assert client.health()["status"] == "ok" and client.ready()["status"] == "ready"
    assert "/sandboxes/{id}/exec" in client.openapi()["paths"]
    me = client.me()
    assert me.name == "admin" and me.admin is True and me.token["name"]
    new = client.create_token(name="ci", user="carol")
    assert new.token.startswith("sbx_") and new.user == "carol" and new.admin is False
    carol = Sandboxer(client.base_url, new.token)
    assert carol.me().name == "carol" and [t.name for t in carol.tokens()] == ["ci"]
    assert new.id in [t.id for t in client.tokens(all=True)]
    assert [t.id for t in client.tokens(user="carol")] == [new.id]
    assert client.delete_token(new.id) == {"id": new.id, "deleted": True}
    with pytest.raises(sandboxer.Unauthorized):
        carol.me()
    with pytest.raises(sandboxer.NotFound):
        client.delete_token(new.id)
    img = client.pull_image("hello-world")
    assert img.digest.startswith("sha256:") and img.ref.endswith("hello-world:latest")
    assert img.ref in [i.ref for i in client.images()]
    with pytest.raises(sandboxer.UnprocessableEntity):
        client.pull_image("nope-nothing")
    with client.create("busybox"):
        with pytest.raises(sandboxer.Conflict) as e:
            client.delete_image("docker.io/library/busybox:latest")
        assert e.value.code == "image_in_use"
    carol.close()


def test_pip_install_offline_into_a_venv(tmp_path):
    """`pip install ./sdk/python` works without an index (Debian's httpx from the system)."""
    src = tmp_path / "src"
    shutil.copytree(os.path.join(ROOT, "sdk", "python"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__",
                                                  ".mypy_cache"))
    venv = tmp_path / "venv"
    r = subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, "python3 -m venv failed (Debian: python3-venv): " + r.stderr
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation",
                        "--no-deps", str(src)], capture_output=True, text=True, timeout=300,
                       env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    code = ("import os, sandboxer, sandboxer.terminal; "
            "d = os.path.dirname(sandboxer.__file__); "
            "print(sandboxer.__version__, d, os.path.exists(os.path.join(d, 'py.typed')))")
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True,
                       text=True, timeout=60, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    version, where, typed = r.stdout.split()
    assert version == sandboxer.__version__ and where.startswith(str(venv)) and typed == "True"


def test_stats_and_metrics(sbx_daemon, sbx):
    client = Sandboxer(sbx_daemon.url, sbx_daemon.admin_token)
    box = client.create("busybox", memory="64M")
    try:
        box.exec("dd if=/dev/zero of=/tmp/blob bs=1M count=2 2>/dev/null")
        st = box.stats()
        assert st["memory"]["limit_bytes"] == 64 << 20 and st["cpu"]["usage_seconds"] > 0
        assert st["disk"]["used_bytes"] >= 2 << 20
        assert 'sandboxer_sandboxes{status="running"}' in client.metrics()
    finally:
        box.terminate()


def _until(pred, timeout=30, what="condition"):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_background_processes(client):
    with client.create("busybox") as sb:
        p = sb.start_process("echo hi; sleep 0.3; echo bye >&2; exit 3", tag="job")
        assert isinstance(p, sandboxer.Process) and p.pid > 1 and p.running and p.tag == "job"
        chunks = list(p.iter_output())
        assert [(c.stream, c.data) for c in chunks] == [("stdout", "hi\n"), ("stderr", "bye\n")]
        assert chunks[-1].cursor == 7 and p.status == "exited" and p.exit_code == 3
        assert p.wait() == 3
        out = p.output()
        assert out.stdout == "hi\n" and out.stderr == "bye\n" and out.done
        assert p.read_output(3).chunks[0]["data"] == "bye\n"
        # stdin, the list, one by pid
        cat = sb.start_process(["cat"], stdin=True)
        cat.send_stdin("hello\n")
        cat.send_stdin(b"bytes\n", eof=True)
        assert cat.wait(timeout=30) == 0 and cat.output().stdout == "hello\nbytes\n"
        sleeper = sb.start_process(["sleep", "100"])
        assert [x.pid for x in sb.processes()] == [p.pid, cat.pid, sleeper.pid]
        assert sb.process(sleeper.pid).command == "sleep 100"
        with pytest.raises(sandboxer.NotFound):
            sb.process(999999)
        with pytest.raises(sandboxer.Timeout):
            sleeper.wait(timeout=1)
        sleeper.kill()
        assert sleeper.wait(timeout=30) == 137 and sleeper.signal == 9
        with pytest.raises(sandboxer.Conflict):
            sleeper.send_signal("TERM")
        sleeper.delete()
        with pytest.raises(sandboxer.NotFound):
            sleeper.refresh()
        assert sb.start_process(["no-such-program"]).exit_code == 127
        # a terminal
        sh = sb.start_process("sh", tty=True, cols=100, rows=30)
        sh.send_stdin("stty size; echo $((6*7))\r")
        _until(lambda: "42" in sh.output().stdout, what="the shell's answer")
        assert "30 100" in sh.output().stdout
        sh.resize(120, 40)
        sh.send_stdin("exit 5\r")
        assert sh.wait(timeout=30) == 5


def test_process_output_resumes_across_a_daemon_restart(sbx_daemon, client):
    import threading
    with client.create("busybox") as sb:
        p = sb.start_process("i=0; while [ $i -lt 60 ]; do i=$((i+1)); echo n$i; sleep 0.1; "
                             "done")
        got = []
        reader = threading.Thread(target=lambda: got.extend(p.iter_output()), daemon=True)
        reader.start()
        _until(lambda: len(got) >= 5, what="output")
        sbx_daemon.stop()
        time.sleep(1)
        sbx_daemon.start()
        reader.join(120)
        assert not reader.is_alive()
        assert "".join(c.data for c in got) == "".join(f"n{i}\n" for i in range(1, 61))
        assert p.exit_code == 0


def test_background_processes_async(sbx_daemon):
    async def main():
        async with AsyncSandboxer(sbx_daemon.url, sbx_daemon.admin_token) as c:
            sb = await c.create("busybox")
            try:
                p = await sb.start_process(["sh", "-c", "echo a; echo b; exit 2"])
                assert isinstance(p, sandboxer.AsyncProcess)
                text = "".join([ch.data async for ch in p.iter_output()])
                assert text == "a\nb\n" and await p.wait() == 2
                cat = await sb.start_process("cat", stdin=True)
                await cat.send_stdin("x\n", eof=True)
                assert await cat.wait(timeout=30) == 0
                assert (await cat.read_output()).stdout == "x\n"
                s = await sb.start_process(["sleep", "100"])
                await s.kill("TERM")
                assert await s.wait(timeout=30) == 143
                assert [x.pid for x in await sb.processes()] == [p.pid, cat.pid, s.pid]
                assert (await sb.process(s.pid)).exit_code == 143
            finally:
                await sb.terminate()
    run(main())
    # the sync client's coroutine twins
    c = Sandboxer(sbx_daemon.url, sbx_daemon.admin_token)
    try:
        with c.create("busybox") as sb:
            async def twins():
                p = await sb.astart_process("echo twin")
                assert await p.wait(timeout=30) == 0
                return (await p.read_output()).stdout
            assert run(twins()) == "twin\n"
            p = sb.start_process("exit 4")
            assert run(p.await_exit(timeout=30)) == 4
    finally:
        c.close()
