"""The CLI's fork-tree verbs against the real daemon: fork, tree, coalesce, pause/unpause,
hibernate/wake, snapshot create/ls/rm and create --snapshot."""
import json
import re

import pytest

from test_cli_sandboxes import run

ID_RE = re.compile(r"[0-9a-f]{64}")
MISSING = "0" * 64


def create(d, sbx, *args):
    sid = run(d, "create", *args).stdout.strip()
    assert ID_RE.fullmatch(sid), sid
    sbx.created.append(sid)
    return sid


def fork(d, sbx, key, *args):
    p = run(d, "fork", key, *args)
    child = p.stdout.strip()
    assert ID_RE.fullmatch(child), p.stdout
    sbx.created.append(child)
    return child, p.stderr


def status(d, sid):
    return json.loads(run(d, "inspect", sid).stdout)["status"]


def test_cli_fork_makes_a_child_that_runs_and_tree_shows_both(sbx_daemon, sbx):
    d = sbx_daemon
    parent = create(d, sbx, "busybox", "--label", "root")
    run(d, "exec", parent, "--code", "echo before > /tmp/f")
    child, note = fork(d, sbx, parent[:12], "--label", "kid", "--hostname", "kid-host")
    assert child != parent
    assert re.fullmatch(rf"forked {parent[:12]} -> {child[:12]} \((memory preserved|files only: "
                        r"memory not preserved)\)\n", note), note
    assert run(d, "exec", child, "--", "echo", "hi").stdout == "hi\n"
    assert run(d, "exec", child, "--", "cat", "/tmp/f").stdout == "before\n"
    assert run(d, "exec", child, "--", "hostname").stdout == "kid-host\n"
    info = json.loads(run(d, "inspect", child).stdout)
    assert info["parent_id"] == parent and info["label"] == "kid"

    tree = run(d, "tree", child[:12]).stdout
    lines = tree.splitlines()
    assert len(lines) == 2, tree
    assert lines[0].startswith(parent[:12]) and "(root)" in lines[0]
    assert child[:12] in lines[1] and "(kid)" in lines[1]
    t = json.loads(run(d, "tree", parent, "--json").stdout)
    assert t["tree"] == tree
    assert t["tree_json"]["id"] == parent
    assert [k["id"] for k in t["tree_json"]["children"]] == [child]


def test_cli_fork_json_says_whether_memory_was_kept(sbx_daemon, sbx):
    d = sbx_daemon
    parent = create(d, sbx, "busybox")
    out = json.loads(run(d, "fork", parent, "--json").stdout)
    sbx.created.append(out["id"])
    assert out["parent_id"] == parent and isinstance(out["memory_preserved"], bool)
    p = run(d, "fork", MISSING, check=False)
    assert p.returncode == 1 and "404" in p.stderr and p.stdout == ""


def test_cli_pause_and_unpause(sbx_daemon, sbx):
    d = sbx_daemon
    a = create(d, sbx, "busybox")
    b = create(d, sbx, "busybox")
    assert run(d, "pause", a[:12], b).stdout == f"{a} paused\n{b} paused\n"
    assert status(d, a) == "paused" and status(d, b) == "paused"
    p = run(d, "exec", a, "--", "true", check=False)
    assert p.returncode == 1 and "409" in p.stderr
    # one bad id is reported, the others still change, and the status says so
    p = run(d, "unpause", MISSING, a, b, check=False)
    assert p.returncode == 1 and "404" in p.stderr and MISSING in p.stderr
    assert p.stdout == f"{a} running\n{b} running\n"
    assert run(d, "exec", a, "--", "echo", "back").stdout == "back\n"
    assert json.loads(run(d, "pause", a, "--json").stdout) == {"id": a, "status": "paused"}
    run(d, "unpause", a)


def test_cli_hibernate_and_wake_keep_files(sbx_daemon, sbx):
    d = sbx_daemon
    sid = create(d, sbx, "busybox")
    run(d, "exec", sid, "--code", "echo kept > /tmp/f")
    assert run(d, "hibernate", sid).stdout == f"{sid} hibernated\n"
    assert status(d, sid) == "hibernated"
    assert run(d, "hibernate", sid).stdout == f"{sid} hibernated\n"  # already: no change
    assert run(d, "wake", sid[:12]).stdout == f"{sid} running\n"
    assert run(d, "exec", sid, "--", "cat", "/tmp/f").stdout == "kept\n"
    out = json.loads(run(d, "hibernate", sid, "--json").stdout)
    assert out == {"id": sid, "status": "hibernated"}
    assert json.loads(run(d, "wake", sid, "--json").stdout)["status"] == "running"


def test_cli_snapshot_create_ls_rm_and_create_from_it(sbx_daemon, sbx):
    d = sbx_daemon
    src = create(d, sbx, "busybox")
    run(d, "exec", src, "--code", "echo from-snapshot > /tmp/marker")
    p = run(d, "snapshot", "create", src[:12], "warm")
    assert p.stdout == "warm\n" and f"snapshot warm of {src[:12]}" in p.stderr
    table = run(d, "snapshot", "ls").stdout.splitlines()
    assert table[0].split() == ["NAME", "SOURCE", "IMAGE", "MEMORY", "CREATED"]
    row = next(line for line in table[1:] if line.startswith("warm "))
    cells = row.split()
    assert cells[1] == src[:12] and "busybox" in cells[2] and cells[3] in ("yes", "no")
    listed = json.loads(run(d, "snapshot", "ls", "--json").stdout)["snapshots"]
    assert [s["name"] for s in listed] == ["warm"] and listed[0]["source_id"] == src
    p = run(d, "snapshot", "create", src, "warm", check=False)
    assert p.returncode == 1 and "409" in p.stderr

    made = create(d, sbx, "--snapshot", "warm", "--label", "w1", "--hostname", "warm-host")
    assert made != src
    assert run(d, "exec", made, "--", "cat", "/tmp/marker").stdout == "from-snapshot\n"
    assert run(d, "exec", made, "--", "hostname").stdout == "warm-host\n"
    assert json.loads(run(d, "inspect", made).stdout)["label"] == "w1"

    p = run(d, "snapshot", "rm", "warm", "nope", check=False)
    assert p.returncode == 1 and p.stdout == "warm\n" and "nope" in p.stderr
    assert "warm" not in run(d, "snapshot", "ls").stdout
    p = run(d, "create", "--snapshot", "warm", check=False)
    assert p.returncode == 1 and "404" in p.stderr


def test_cli_create_without_image_names_the_missing_default_template(sbx_daemon):
    # this daemon runs with --templates-dir none, so the default template 'base' is absent:
    # `create` alone is valid (it means 'base') and fails with a hint, not a usage error
    p = run(sbx_daemon, "create", check=False)
    assert p.returncode == 1, p
    assert "default template 'base' is not available" in p.stderr
    assert "scripts/setup" in p.stderr and "404" in p.stderr


@pytest.mark.parametrize("args", [
    ["create", "busybox", "--snapshot", "warm"],
    ["create", "--snapshot", "warm", "--env", "A=1"],
    ["create", "--snapshot", ""],
    ["fork"],
    ["coalesce", "a"],
    ["pause"],
    ["snapshot", "create", "a"],
    ["snapshot", "rm"],
])
def test_cli_fork_verbs_usage_errors(sbx_daemon, args):
    p = run(sbx_daemon, *args, check=False)
    assert p.returncode == 2 and "--help" in p.stderr, (args, p.stderr)


def test_cli_fork_verbs_have_help(sbx_daemon):
    overview = run(sbx_daemon, "--help").stdout
    for verb in ["fork", "tree", "coalesce", "pause", "unpause", "hibernate", "wake",
                 "snapshot create", "snapshot ls", "snapshot rm"]:
        assert f"\n  {verb} " in overview, verb
        assert "Usage: sandboxer " + verb in run(sbx_daemon, *verb.split(), "--help").stdout
    assert "--snapshot NAME" in run(sbx_daemon, "create", "--help").stdout


def test_cli_coalesce_keeps_final_and_deletes_the_rest(sbx_daemon, sbx):
    d = sbx_daemon
    a = create(d, sbx, "busybox", "--label", "a")
    b, _ = fork(d, sbx, a, "--label", "b")
    c, _ = fork(d, sbx, a, "--label", "c")
    final, _ = fork(d, sbx, b, "--label", "final")
    other = create(d, sbx, "busybox", "--label", "other")
    p = run(d, "coalesce", b, c, check=False)  # c does not descend from b
    assert p.returncode == 1 and "400" in p.stderr
    name = json.loads(run(d, "inspect", final).stdout)["name"]
    p = run(d, "coalesce", a[:12], name)
    assert sorted(p.stdout.split()) == sorted([a, b, c])
    assert final[:12] in p.stderr or final in p.stderr
    for sid in (a, b, c):
        assert status(d, sid) == "terminated"
    assert run(d, "exec", final, "--", "echo", "alive").stdout == "alive\n"
    assert run(d, "exec", other, "--", "echo", "untouched").stdout == "untouched\n"
    assert run(d, "tree", final).stdout.splitlines() == [f"{final[:12]} (final) [running]"]
    p = run(d, "coalesce", final, final, check=False)  # nothing descends from itself
    assert p.returncode == 1 and p.stdout == ""
