"""The CLI's sandbox verbs against the real daemon: create, ls, inspect, exec, logs, rm."""
import json
import os
import subprocess

from conftest import BIN


def run(d, *args, check=True, stdin=None):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": d.workdir,
           "SANDBOXER_URL": d.url, "SANDBOXER_TOKEN": d.admin_token}
    p = subprocess.run([BIN, *args], env=env, capture_output=True, text=True, timeout=300,
                       input=stdin)
    if check:
        assert p.returncode == 0, (args, p.returncode, p.stdout, p.stderr)
    return p


def test_cli_sandbox_lifecycle(sbx_daemon, sbx):
    d = sbx_daemon
    sid = run(d, "create", "busybox", "--label", "cli", "--env", "A=1", "--env", "B=two").stdout.strip()
    sbx.created.append(sid)
    assert len(sid) == 64
    assert sid[:12] in run(d, "ls").stdout
    info = json.loads(run(d, "inspect", sid).stdout)
    assert info["label"] == "cli" and info["status"] == "running"
    p = run(d, "exec", sid, "--", "sh", "-c", "echo $A $B; echo oops >&2; exit 4", check=False)
    assert p.returncode == 4 and p.stdout == "1 two\n" and p.stderr == "oops\n"
    p = run(d, "exec", sid, "--stdin", "--", "wc", "-c", stdin="12345")
    assert p.stdout.strip() == "5"
    assert run(d, "exec", sid, "--code", "echo via code").stdout == "via code\n"
    run(d, "rm", sid)
    assert sid[:12] not in run(d, "ls").stdout
    assert sid[:12] in run(d, "ls", "--all").stdout


def test_cli_create_on_runsc(sbx_daemon, sbx):
    d = sbx_daemon
    sid = run(d, "create", "busybox", "--runtime", "runsc").stdout.strip()
    sbx.created.append(sid)
    assert json.loads(run(d, "inspect", sid).stdout)["runtime"] == "runsc"
    assert "gVisor" in run(d, "exec", sid, "--", "dmesg").stdout
    p = run(d, "create", "--snapshot", "s", "--runtime", "runsc", check=False)
    assert p.returncode == 2 and "--runtime does not go with --snapshot" in p.stderr, p.stderr


def test_cli_logs_of_hello_world(sbx_daemon, sbx):
    d = sbx_daemon
    sid = run(d, "create", "hello-world").stdout.strip()
    sbx.created.append(sid)
    out = run(d, "logs", sid, "--follow").stdout
    assert "Hello from Sandboxer!" in out


def test_cli_exec_errors(sbx_daemon):
    p = run(sbx_daemon, "exec", "0" * 64, "--", "true", check=False)
    assert p.returncode == 1 and "404" in p.stderr


def test_cli_image_import_then_run_then_remove(sbx_daemon, sbx, sbx_user):
    import registry
    layout = registry._build_module().ensure("busybox")
    d = sbx_daemon
    ref = run(d, "image", "import", layout, "--name", "localhost/imported:v1").stdout.strip()
    assert ref == "localhost/imported:v1"
    assert ref in run(d, "image", "ls").stdout
    sid = sbx.create(ref)["id"]
    assert sbx.sh(sid, "echo from-import")["stdout"] == "from-import\n"
    p = run(d, "image", "rm", ref, check=False)
    assert p.returncode == 1 and "409" in p.stderr  # in use
    sbx.delete(f"/sandboxes/{sid}")
    run(d, "image", "rm", ref)
    assert ref not in run(d, "image", "ls").stdout
    bob = sbx_user("bob")
    r = bob.post("/images/import", json={"path": layout})
    assert r.status_code == 403
