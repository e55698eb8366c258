"""Templates: the built-in base and code-interpreter (no registry anywhere: the daemon has no
mirror), Dockerfile builds with buildah, list/get/delete, owner scoping, warm pools, bad input.

One daemon for the session (tpl_daemon): importing the templates takes a while. Every test
deletes what it made (sandboxes, templates), and the last ones check that nothing is left:
no container, no buildah container or build image, no pooled sandbox."""
import json
import os
import subprocess
import time

import httpx
import pytest

from conftest import BIN, Sandboxes

DOCKERFILE = """FROM base
ENV GREETING=hello-from-env
USER root
WORKDIR /srv/app
COPY app.py /srv/app/app.py
COPY data/numbers.txt /srv/app/numbers.txt
RUN python3 app.py > /srv/app/built.txt && chown -R user:user /srv/app
USER user
"""
CONTEXT = {"app.py": "print(sum(int(x) for x in open('numbers.txt')))\n",
           "data/numbers.txt": "1\n2\n3\n"}


def wait_for(cond, timeout=120, step=0.2, what="condition"):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        v = cond()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")


def ndjson(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def build(c, name, dockerfile=DOCKERFILE, context=CONTEXT, stream=True, **extra):
    body = {"name": name, "dockerfile": dockerfile, "context": context, **extra}
    url = "/templates?stream=true" if stream else "/templates"
    return c.http.post(url, json=body, timeout=900)


def delete_template(c, name):
    r = c.http.delete(f"/templates/{name}", timeout=300)
    assert r.status_code in (200, 404), r.text


def runc_ids(daemon):
    root = os.path.join(daemon.state_dir, "runc")
    return set(subprocess.run(["runc", "--root", root, "list", "-q"], capture_output=True,
                              text=True, timeout=30).stdout.split())


def buildah(daemon, *args):
    images = os.path.join(daemon.state_dir, "images", "buildah")
    return subprocess.run(["buildah", "--root", f"{images}/storage", "--runroot", f"{images}/run",
                           "--storage-driver", "overlay", *args], capture_output=True, text=True,
                          timeout=120)


# ---- the built-in templates, with no registry ----

def test_quick_start_creates_from_base_without_any_registry(tpl):
    r = tpl.http.post("/sandboxes", json={}, timeout=300)
    assert r.status_code == 200, r.text
    sb = r.json()
    tpl.created.append(sb["id"])
    assert sb["status"] == "running" and sb["template"] == "base" and sb["setuid"] is True
    out = tpl.sh(sb["id"], "id -un; pwd; python3 -c 'print(6*7)'; python -c 'print(1+1)'; "
                           "node -e 'console.log(40+2)'; git --version; curl --version | head -1;"
                           " sudo -n true && echo sudo-ok; sudo -n id -u; npm --version")
    lines = out["stdout"].splitlines()
    assert out["exit_code"] == 0, out
    assert lines[0] == "user" and lines[1] == "/home/user"
    assert lines[2] == "42" and lines[3] == "2" and lines[4] == "42"
    assert lines[5].startswith("git version") and lines[6].startswith("curl ")
    assert lines[7] == "sudo-ok" and lines[8] == "0"


def test_a_bare_image_name_that_is_a_template_means_the_template(tpl):
    sb = tpl.create("base")
    assert sb["template"] == "base" and sb["image"].startswith("localhost/templates/base")
    r = tpl.http.post("/sandboxes", json={"template": "code-interpreter"}, timeout=300)
    assert r.status_code == 200, r.text
    tpl.created.append(r.json()["id"])
    assert r.json()["template"] == "code-interpreter"
    names = {t["name"]: t for t in tpl.get("/templates").json()["templates"]}
    assert names["base"]["source"] == "builtin" and names["base"]["global"] is True
    assert names["code-interpreter"]["image"].startswith("localhost/templates/code-interpreter")


def test_cli_create_without_an_image_uses_base(tpl_daemon, tpl):
    env = dict(os.environ, SANDBOXER_URL=tpl_daemon.url, SANDBOXER_TOKEN=tpl_daemon.admin_token)
    run = lambda *a: subprocess.run([BIN, *a], capture_output=True, text=True, env=env,  # noqa
                                    timeout=300)
    r = run("create", "--label", "cli")
    assert r.returncode == 0, r.stderr
    sid = r.stdout.strip()
    tpl.created.append(sid)
    r = run("exec", sid, "--", "python3", "-c", "import os; print(os.getcwd())")
    assert r.returncode == 0 and r.stdout.strip() == "/home/user", r.stderr
    r = run("template", "ls")
    assert r.returncode == 0 and "code-interpreter" in r.stdout and "builtin" in r.stdout


# ---- Dockerfile builds ----

def test_cli_builds_lists_pools_and_removes_a_template(tpl_daemon, tpl, tmp_path):
    env = dict(os.environ, SANDBOXER_URL=tpl_daemon.url, SANDBOXER_TOKEN=tpl_daemon.admin_token)
    run = lambda *a: subprocess.run([BIN, *a], capture_output=True, text=True, env=env,  # noqa
                                    timeout=900)
    ctx = tmp_path / "ctx"
    (ctx / "lib").mkdir(parents=True)
    (ctx / "lib" / "msg.txt").write_text("from the context\n")
    (ctx / "Dockerfile").write_text("FROM base\nCOPY lib/msg.txt /home/user/msg.txt\n")
    try:
        r = run("template", "build", "t-cli", str(ctx))
        assert r.returncode == 0 and r.stdout == "t-cli\n", r.stderr
        assert "STEP 2/2: COPY lib/msg.txt" in r.stderr
        sid = run("create", "t-cli").stdout.strip()
        tpl.created.append(sid)
        assert run("exec", sid, "--", "cat", "msg.txt").stdout == "from the context\n"
        r = run("template", "pool", "t-cli", "0")
        assert r.returncode == 0 and r.stdout.startswith("t-cli pool 0"), r.stderr
        bad = tmp_path / "Bad.Dockerfile"
        bad.write_text("FROM base\nRUN false\n")
        r = run("template", "build", "-f", str(bad), "t-cli-bad")
        assert r.returncode != 0 and "the build failed" in r.stderr and r.stdout == ""
        assert "t-cli-bad" not in run("template", "ls").stdout
    finally:
        r = run("template", "rm", "t-cli")
    assert r.returncode == 0 and r.stdout == "t-cli\n", r.stderr



def test_dockerfile_build_streams_its_log_and_makes_a_template(tpl):
    name = "t-build"
    try:
        r = build(tpl, name)
        assert r.status_code == 200 and r.headers["content-type"].startswith(
            "application/x-ndjson"), r.text
        events = ndjson(r.text)
        steps = [e for e in events if e["type"] == "step"]
        assert [s["step"] for s in steps] == list(range(1, 9)) and steps[0]["steps"] == 8
        assert steps[0]["output"] == "STEP 1/8: FROM base"
        assert any(e["type"] == "log" for e in events)
        done = events[-1]
        assert done["type"] == "done", events[-3:]
        t = done["template"]
        assert t["name"] == name and t["source"] == "dockerfile" and t["global"] is False
        assert t["steps"] == 8 and t["digest"].startswith("sha256:")
        assert tpl.get(f"/templates/{name}").json()["id"] == t["id"]
        sb = tpl.create(name)  # a bare image name that is a template
        assert sb["template"] == name
        out = tpl.sh(sb["id"], "echo $GREETING; pwd; id -un; cat built.txt; ls")
        assert out["stdout"].split("\n")[:4] == ["hello-from-env", "/srv/app", "user", "6"]
    finally:
        delete_template(tpl, name)


def test_a_failing_run_step_is_a_clear_error_and_leaves_no_template(tpl_daemon, tpl):
    bad = "FROM base\nRUN echo before && exit 3\nRUN echo never\n"
    r = build(tpl, "t-fail", dockerfile=bad, context={})
    events = ndjson(r.text)
    err = events[-1]
    assert err["type"] == "error" and err["code"] == "template_build_failed", events[-3:]
    assert err["status"] == 422
    assert "exit 3" in err["output"] and "STEP" in err["output"]
    assert any(e.get("output") == "before" for e in events)
    assert not any(e.get("output") == "never" for e in events)
    assert tpl.get("/templates/t-fail").status_code == 404
    r = build(tpl, "t-fail", dockerfile=bad, context={}, stream=False)
    assert r.status_code == 422 and r.json()["code"] == "template_build_failed", r.text
    assert tpl.get("/templates/t-fail").status_code == 404
    assert buildah(tpl_daemon, "containers", "-q").stdout.strip() == ""


def test_templates_are_their_owners(tpl, tpl_daemon):
    tok = tpl.post("/auth/tokens", json={"user": "tplbob"}).json()["token"]
    bob = Sandboxes(tpl_daemon.url, tok)
    try:
        r = build(bob, "bobs", dockerfile="FROM base\nENV WHO=bob\n", context={}, stream=False)
        assert r.status_code == 201, r.text
        assert r.json()["global"] is False
        assert [t["name"] for t in bob.get("/templates").json()["templates"]] == \
            ["base", "bobs", "code-interpreter"]
        # the admin sees only global templates of others: not bob's
        assert tpl.get("/templates/bobs").status_code == 404
        assert tpl.http.post("/sandboxes", json={"template": "bobs"}).status_code == 404
        # bob cannot change global ones; nobody deletes a built-in one
        assert bob.http.delete("/templates/base").status_code == 403
        assert bob.http.patch("/templates/base", json={"pool": 1}).status_code == 403
        r = tpl.http.delete("/templates/base")
        assert r.status_code == 409 and r.json()["code"] == "template_builtin"
        sb = bob.create("bobs")
        assert bob.sh(sb["id"], "echo $WHO")["stdout"] == "bob\n"
        # bob's own template of the name "base" would hide the global one for bob only
        r = bob.http.delete("/templates/bobs")
        assert r.status_code == 200 and r.json() == {"name": "bobs", "deleted": True}
        assert bob.get("/templates/bobs").status_code == 404
    finally:
        bob.cleanup()


def test_a_snapshot_becomes_a_template_that_keeps_memory(tpl):
    sb = tpl.create("base")
    # as the template's user (not root): CRIU reads such a process's limits from /proc where
    # the host's root lacks CAP_SYS_RESOURCE (this test VM's does; scripts/criu-patches/0009)
    r = tpl.post(f"/sandboxes/{sb['id']}/exec", json={"argv": [
        "sh", "-c", "nohup sh -c 'while :; do sleep 1; done' >/dev/null 2>&1 & echo $! >/tmp/pid"]})
    assert r.status_code == 200 and r.json()["exit_code"] == 0, r.text
    assert tpl.post(f"/sandboxes/{sb['id']}/snapshots", json={"name": "snap1"},
                    timeout=300).status_code in (200, 201)
    try:
        r = tpl.post("/templates", json={"name": "t-snap", "snapshot": "snap1", "pool": 1})
        assert r.status_code == 400, r.text  # its sandboxes start with its memory already
        r = tpl.post("/templates", json={"name": "t-snap", "snapshot": "snap1"})
        assert r.status_code == 201 and r.json()["source"] == "snapshot", r.text
        assert tpl.http.patch("/templates/t-snap", json={"pool": 1}).status_code == 400
        r = tpl.http.post("/sandboxes", json={"template": "t-snap"}, timeout=300)
        assert r.status_code == 200, r.text
        tpl.created.append(r.json()["id"])
        assert r.json()["memory_preserved"] is True
        out = tpl.sh(r.json()["id"], "test -d /proc/$(cat /tmp/pid) && echo alive")
        assert out["stdout"] == "alive\n"
    finally:
        delete_template(tpl, "t-snap")
        tpl.http.delete("/snapshots/snap1")


@pytest.mark.parametrize("body, status", [
    ({"name": "x"}, 400),                                           # neither dockerfile nor snap
    ({"name": "x", "dockerfile": "FROM base", "snapshot": "s"}, 400),
    ({"name": "Bad Name", "dockerfile": "FROM base"}, 400),
    ({"name": "-x", "dockerfile": "FROM base"}, 400),
    ({"name": "x", "dockerfile": ""}, 400),
    ({"name": "x", "dockerfile": "FROM base", "context": {"../evil": "x"}}, 400),
    ({"name": "x", "dockerfile": "FROM base", "context": {"/abs": "x"}}, 400),
    ({"name": "x", "dockerfile": "FROM base", "context": {"a": 5}}, 400),
    ({"name": "x", "dockerfile": "FROM base", "pool": 99}, 400),
    ({"name": "x", "dockerfile": "FROM base", "bogus": 1}, 400),
    ({"name": "base", "dockerfile": "FROM base", "global": True}, 409),  # the built-in's name
    ({"name": "x", "snapshot": "no-such-snapshot"}, 404),
])
def test_bad_template_requests_are_4xx(tpl, body, status):
    r = tpl.http.post("/templates", json=body, timeout=120)
    assert r.status_code == status, r.text
    assert "detail" in r.json() and "code" in r.json()


def test_bad_creates_and_patches_are_4xx(tpl, tpl_daemon):
    r = tpl.http.post("/sandboxes", json={"template": "no-such"})
    assert r.status_code == 404 and r.json()["code"] == "template_not_found"
    assert tpl.http.post("/sandboxes", json={"template": "base",
                                              "image": "busybox"}).status_code == 400
    assert tpl.http.post("/sandboxes", json={"template": ""}).status_code == 400
    assert tpl.http.post("/sandboxes", json={"setuid": "yes"}).status_code == 400
    assert tpl.http.patch("/templates/base", json={"pool": -1}).status_code == 400
    assert tpl.http.patch("/templates/base", json={"pool": 9}).status_code == 400
    assert tpl.http.patch("/templates/base", json={}).status_code == 400
    assert tpl.http.patch("/templates/nope", json={"pool": 1}).status_code == 404
    assert tpl.http.delete("/templates/nope").status_code == 404
    tok = tpl.post("/auth/tokens", json={"user": "tplcarol"}).json()["token"]
    with httpx.Client(base_url=tpl_daemon.url, headers={"Authorization": f"Bearer {tok}"}) as c:
        r = c.post("/templates", json={"name": "g", "dockerfile": "FROM base", "global": True})
        assert r.status_code == 403
        r = c.post("/templates", json={"name": "g", "dockerfile": "FROM base", "network": True})
        assert r.status_code == 403


# ---- warm pools ----

def pool_of(c, name):
    return c.get(f"/templates/{name}").json()["pool"]


def test_a_warm_pool_hands_out_running_sandboxes_and_refills(tpl, tpl_daemon):
    snap_dir = os.path.join(tpl_daemon.state_dir, "snapshots")
    snaps_before = set(os.listdir(snap_dir)) if os.path.isdir(snap_dir) else set()
    try:
        r = tpl.http.patch("/templates/base", json={"pool": 1})
        assert r.status_code == 200 and r.json()["pool"]["size"] == 1
        wait_for(lambda: pool_of(tpl, "base")["ready"] == 1, 180, what="the pool to fill")
        before = runc_ids(tpl_daemon)
        t0 = time.monotonic()
        r = tpl.http.post("/sandboxes", json={"label": "warm"}, timeout=120)
        took = time.monotonic() - t0
        assert r.status_code == 200, r.text
        sb = r.json()
        tpl.created.append(sb["id"])
        assert sb["status"] == "running" and sb["template"] == "base" and sb["label"] == "warm"
        assert sb["id"] in before  # it was started before the create: the pooled one
        assert took < 5, took
        assert tpl.sh(sb["id"], "id -un")["stdout"] == "user\n"
        assert sb["id"] in {s["id"] for s in tpl.get("/sandboxes").json()["sandboxes"]}
        # another user cannot see it; the pool refills behind it
        tok = tpl.post("/auth/tokens", json={"user": "tpldave"}).json()["token"]
        with httpx.Client(base_url=tpl_daemon.url,
                          headers={"Authorization": f"Bearer {tok}"}) as dave:
            assert dave.get(f"/sandboxes/{sb['id']}").status_code == 404
        wait_for(lambda: pool_of(tpl, "base")["ready"] == 1, 180, what="the pool to refill")
        # another user's claim gets a user namespace range of its own (not one shared through
        # a warm snapshot: with user namespaces the pool starts each from the image)
        mine = tpl.get(f"/sandboxes/{sb['id']}").json()["user_namespace"]
        before = runc_ids(tpl_daemon)
        with httpx.Client(base_url=tpl_daemon.url, timeout=120,
                          headers={"Authorization": f"Bearer {tok}"}) as dave:
            r = dave.post("/sandboxes", json={"label": "daves"})
            assert r.status_code == 200, r.text
            theirs = r.json()
            try:
                assert theirs["id"] in before and theirs["template"] == "base"
                if mine is not None:
                    assert theirs["user_namespace"]["host_id"] != mine["host_id"], (mine, theirs)
                    # and no warm snapshot was made
                    snaps = set(os.listdir(snap_dir)) if os.path.isdir(snap_dir) else set()
                    assert snaps <= snaps_before, snaps - snaps_before
                else:
                    assert theirs["user_namespace"] is None  # --userns off: warm snapshot
            finally:
                assert dave.delete(f"/sandboxes/{theirs['id']}").status_code == 200
        wait_for(lambda: pool_of(tpl, "base")["ready"] == 1, 180, what="the pool to refill")
        # a create asking for what a pooled sandbox cannot give starts one cold
        r = tpl.http.post("/sandboxes", json={"env": {"A": "b"}}, timeout=300)
        assert r.status_code == 200 and r.json()["id"] not in before, r.text
        tpl.created.append(r.json()["id"])
        assert tpl.sh(r.json()["id"], "echo $A")["stdout"] == "b\n"
    finally:
        tpl.http.patch("/templates/base", json={"pool": 0})
    wait_for(lambda: pool_of(tpl, "base")["ready"] == 0, 120, what="the pool to drain")


def test_a_pooled_sandbox_that_stopped_is_not_handed_out(tpl, tpl_daemon):
    """Its container can end while it waits (a crash, the OOM killer, a kill from the host):
    the pool deletes it and makes another, and a create gets a running sandbox."""
    root = os.path.join(tpl_daemon.state_dir, "runc")
    before = runc_ids(tpl_daemon)
    try:
        assert tpl.http.patch("/templates/base", json={"pool": 1}).status_code == 200
        wait_for(lambda: pool_of(tpl, "base")["ready"] == 1, 180, what="the pool to fill")
        pooled = runc_ids(tpl_daemon) - before
        assert len(pooled) == 1, pooled
        dead = pooled.pop()
        k = subprocess.run(["runc", "--root", root, "kill", dead, "KILL"], capture_output=True,
                           text=True, timeout=30)
        assert k.returncode == 0, k.stderr
        # the pool deletes it (its files go with it) rather than keep it as ready
        gone = os.path.join(tpl_daemon.state_dir, "sandboxes", dead)
        wait_for(lambda: not os.path.exists(gone), 60, what="the stopped one to be deleted")
        wait_for(lambda: pool_of(tpl, "base")["ready"] == 1, 180, what="the pool to refill")
        r = tpl.http.post("/sandboxes", json={}, timeout=300)
        assert r.status_code == 200, r.text
        sb = r.json()
        tpl.created.append(sb["id"])
        assert sb["id"] != dead and sb["status"] == "running", sb
        assert tpl.sh(sb["id"], "echo up")["stdout"] == "up\n"
    finally:
        tpl.http.patch("/templates/base", json={"pool": 0})
    wait_for(lambda: pool_of(tpl, "base")["ready"] == 0, 120, what="the pool to drain")


def test_deleting_a_pooled_template_drains_its_pool_and_nothing_leaks(tpl, tpl_daemon):
    for sid in tpl.created:
        tpl.http.delete(f"/sandboxes/{sid}", timeout=60)
    tpl.created.clear()
    wait_for(lambda: not runc_ids(tpl_daemon), 120, what="earlier sandboxes to go")
    r = build(tpl, "t-pool", dockerfile="FROM base\nENV POOLED=yes\n", context={},
              stream=False, pool=2)
    assert r.status_code == 201, r.text
    assert r.json()["pool"]["size"] == 2
    wait_for(lambda: pool_of(tpl, "t-pool")["ready"] == 2, 240, what="the pool to fill")
    pooled = runc_ids(tpl_daemon)
    assert len(pooled) == 2
    sb = tpl.create("t-pool")
    assert sb["id"] in pooled and tpl.sh(sb["id"], "echo $POOLED")["stdout"] == "yes\n"
    r = tpl.http.delete("/templates/t-pool", timeout=300)
    assert r.status_code == 200, r.text
    # the handed-out sandbox stays; the pooled ones (and the refill, if any) go
    wait_for(lambda: runc_ids(tpl_daemon) == {sb["id"]}, 120, what="the pool to drain")
    assert tpl.sh(sb["id"], "echo still")["stdout"] == "still\n"
    tpl.http.delete(f"/sandboxes/{sb['id']}", timeout=60)
    tpl.created.remove(sb["id"])
    wait_for(lambda: not runc_ids(tpl_daemon), 60, what="the last sandbox to go")
    assert buildah(tpl_daemon, "containers", "-q").stdout.strip() == ""
    assert "sandboxer-build" not in buildah(tpl_daemon, "images").stdout
    # no template image kept for a deleted template
    refs = [i["ref"] for i in tpl.get("/images").json()["images"]]
    assert sorted(refs) == ["localhost/templates/base:latest",
                            "localhost/templates/code-interpreter:latest"], refs
    # warm snapshots of t-pool are gone (base's pool is 0 too); with user namespaces the pool
    # makes none, and no snapshot dir may exist at all
    snap_dir = os.path.join(tpl_daemon.state_dir, "snapshots")
    snaps = os.listdir(snap_dir) if os.path.isdir(snap_dir) else []
    assert snaps == [], snaps
