"""The CLI's update, history, files and completion verbs against the real daemon."""
import json
import os
import re
import subprocess

from conftest import BIN


def run(d, *args, check=True):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": d.workdir,
           "SANDBOXER_URL": d.url, "SANDBOXER_TOKEN": d.admin_token}
    p = subprocess.run([BIN, *args], env=env, capture_output=True, text=True, timeout=120)
    if check:
        assert p.returncode == 0, (args, p.returncode, p.stdout, p.stderr)
    return p


def test_cli_update_changes_label_and_public(sbx_daemon, sbx):
    d = sbx_daemon
    sid = sbx.create("busybox", label="before")["id"]
    out = json.loads(run(d, "update", sid[:12], "--label", "after", "--public").stdout)
    assert out["label"] == "after" and out["public"] is True
    got = sbx.get(f"/sandboxes/{sid}").json()
    assert got["label"] == "after"
    run(d, "update", sid, "--private")
    assert sbx.get(f"/sandboxes/{sid}").json()["label"] == "after"
    for bad in (["update", sid], ["update", sid, "--public", "--private"]):
        p = run(d, *bad, check=False)
        assert p.returncode == 2, p
    p = run(d, "update", sid, "--label", "", check=False)
    assert p.returncode == 1 and "label" in p.stderr


def test_cli_history_lists_executions_and_prints_one(sbx_daemon, sbx):
    d = sbx_daemon
    sid = sbx.create("busybox")["id"]
    sbx.sh(sid, "echo first")
    sbx.sh(sid, "echo out; echo err >&2; exit 3")
    table = run(d, "history", sid).stdout.splitlines()
    assert table[0].split()[:3] == ["EID", "EXIT", "STARTED"]
    newest = table[1].split()
    assert newest[1] == "3" and "exit 3" in table[1]
    p = run(d, "history", sid, newest[0])
    assert p.stdout == "out\n" and p.stderr == "err\n"
    listed = json.loads(run(d, "--json", "history", sid, "--limit", "1").stdout)
    assert len(listed["executions"]) == 1
    assert run(d, "history", sid, "nope", check=False).returncode == 2


def test_cli_files_ls_stat_rm(sbx_daemon, sbx):
    d = sbx_daemon
    sid = sbx.create("busybox")["id"]
    sbx.sh(sid, "mkdir -p /work/sub && printf hello > /work/a.txt && touch /work/sub/x")
    lines = run(d, "files", "ls", sid, "/work").stdout.splitlines()
    assert lines[0].split() == ["MODE", "TYPE", "SIZE", "MODIFIED", "NAME"]
    names = [ln.split()[-1] for ln in lines[1:]]
    assert names == ["a.txt", "sub/"]
    st = json.loads(run(d, "files", "stat", sid, "/work/a.txt").stdout)
    assert st["size"] == 5 and st["type"] == "file"
    p = run(d, "files", "rm", sid, "/work/sub", check=False)
    assert p.returncode == 1 and "not empty" in p.stderr
    assert run(d, "files", "rm", sid, "/work/sub", "-r").stdout.strip() == "/work/sub"
    assert sbx.sh(sid, "ls /work")["stdout"] == "a.txt\n"
    p = run(d, "files", "stat", sid, "/nope", check=False)
    assert p.returncode == 1 and re.search("not found|no such", p.stderr, re.I)


def test_cli_bash_completion(daemon):
    script = run(daemon, "completion", "bash").stdout
    probe = script + """
COMP_WORDS=(sandboxer sna); COMP_CWORD=1; _sandboxer; echo "1:${COMPREPLY[*]}"
COMP_WORDS=(sandboxer snapshot ""); COMP_CWORD=2; _sandboxer; echo "2:${COMPREPLY[*]}"
COMP_WORDS=(sandboxer create busybox --inter); COMP_CWORD=3; _sandboxer; echo "3:${COMPREPLY[*]}"
COMP_WORDS=(sandboxer files rm ID /x --rec); COMP_CWORD=5; _sandboxer; echo "4:${COMPREPLY[*]}"
"""
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True,
                         timeout=10).stdout.splitlines()
    assert out == ["1:snapshot", "2:create ls rm", "3:--interactive", "4:--recursive"], out
    assert run(daemon, "completion", "zsh", check=False).returncode == 2


def test_docs_cli_md_is_generated_from_the_current_help():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    gen = subprocess.run(["python3", os.path.join(root, "tools", "gen_cli_md.py"), BIN],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    with open(os.path.join(root, "docs", "cli.md")) as f:
        assert f.read() == gen, "docs/cli.md is stale: run tools/gen_cli_md.py build/sandboxer"


def test_docs_cli_md_session_runs(sbx_daemon, sbx, tmp_path):
    """The walk-through at the top of docs/cli.md, as written (less the daemon and the shell)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "cli.md")) as f:
        doc = f.read()
    session = doc.split("## A session", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [ln for ln in session.splitlines()
             if not ln.startswith(("make run", "export ", "sandboxer shell"))]
    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    d = sbx_daemon
    env = {"PATH": f"{os.path.dirname(BIN)}:{os.environ.get('PATH', '/usr/bin:/bin')}",
           "HOME": d.workdir, "SANDBOXER_URL": d.url, "SANDBOXER_TOKEN": d.admin_token}
    p = subprocess.run(["bash", "-euo", "pipefail", "-c",
                        "\n".join(lines) + "\necho \"IDS $ID $CHILD\""],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    ids = [ln for ln in p.stdout.splitlines() if ln.startswith("IDS ")]
    if ids:
        sbx.created.extend(ids[0].split()[1:])
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "42\n" in p.stdout and "data.csv" in p.stdout


def test_cli_stats(sbx_daemon, sbx):
    d = sbx_daemon
    sid = sbx.create("busybox", memory="64M")["id"]
    out = run(d, "stats", sid[:12]).stdout
    assert re.search(r"^MEMORY +\S+ \S+ / 67\.1 MB", out, re.M), out
    assert re.search(r"^STATUS +running$", out, re.M)
    assert json.loads(run(d, "--json", "stats", sid).stdout)["id"] == sid
