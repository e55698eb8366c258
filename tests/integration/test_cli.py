"""The CLI against the real daemon, over the unix socket and over TCP."""
import json
import os
import subprocess

from conftest import BIN, TOKEN_RE


def cli(daemon, *args, token=None, via="socket", env_extra=None, check=True):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": daemon.workdir}
    if via == "socket":
        env["SANDBOXER_SOCKET"] = daemon.socket
    else:
        env["SANDBOXER_URL"] = daemon.url
    if token:
        env["SANDBOXER_TOKEN"] = token
    env.update(env_extra or {})
    p = subprocess.run([BIN, *args], env=env, capture_output=True, text=True, timeout=30)
    if check:
        assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    return p


def test_version_names_client_and_server(daemon):
    p = cli(daemon, "version", "--json")
    v = json.loads(p.stdout)
    assert v["client"] and v["server"] == v["client"]


def test_whoami_over_socket_and_tcp(daemon):
    for via in ("socket", "tcp"):
        p = cli(daemon, "whoami", "--json", token=daemon.admin_token, via=via)
        assert json.loads(p.stdout)["name"] == "admin"
    p = cli(daemon, "whoami", token=daemon.admin_token)
    assert "admin" in p.stdout


def test_token_lifecycle(daemon):
    p = cli(daemon, "token", "create", "--user", "carol", "--name", "laptop",
            token=daemon.admin_token)
    secret = p.stdout.strip()
    assert TOKEN_RE.fullmatch(secret), p.stdout
    me = json.loads(cli(daemon, "whoami", "--json", token=secret).stdout)
    assert me["name"] == "carol" and me["admin"] is False
    listing = json.loads(cli(daemon, "token", "ls", "--json", token=secret).stdout)
    assert [t["name"] for t in listing["tokens"]] == ["laptop"]
    table = cli(daemon, "token", "ls", token=secret).stdout
    assert "laptop" in table and "carol" in table
    cli(daemon, "token", "rm", listing["tokens"][0]["id"], token=secret)
    p = cli(daemon, "whoami", token=secret, check=False)
    assert p.returncode == 1 and "401" in p.stderr


def test_token_file_is_used_and_save_writes_it(daemon):
    p = cli(daemon, "token", "create", "--save", token=daemon.admin_token)
    path = os.path.join(daemon.workdir, ".config", "sandboxer", "token")
    with open(path) as f:
        assert f.read().strip() == p.stdout.strip()
    assert os.stat(path).st_mode & 0o777 == 0o600
    me = json.loads(cli(daemon, "whoami", "--json").stdout)  # no env token: the file
    assert me["name"] == "admin"


def test_errors_and_usage(daemon):
    p = cli(daemon, "whoami", check=False, token="sbx_" + "0" * 64)
    assert p.returncode == 1 and "invalid token" in p.stderr
    p = cli(daemon, "no-such-verb", check=False)
    assert p.returncode == 2
    p = cli(daemon, "token", "rm", "tok_doesnotexist", token=daemon.admin_token, check=False)
    assert p.returncode == 1 and "404" in p.stderr
    p = cli(daemon, "whoami", check=False, token=daemon.admin_token,
            env_extra={"SANDBOXER_SOCKET": "/nonexistent/api.sock"})
    assert p.returncode == 1 and "/nonexistent/api.sock" in p.stderr


def test_every_verb_has_help(daemon):
    overview = cli(daemon, "--help").stdout
    for verb in ["serve", "version", "whoami", "token"]:
        assert verb in overview
    # each section's verbs stand together under one heading
    headings = [line for line in overview.splitlines() if line.endswith(":") and
                not line.startswith(" ")]
    assert "Sandboxes:" in headings and len(headings) == len(set(headings)), headings
    for args in (["version"], ["whoami"], ["token", "create"], ["token", "ls"], ["token", "rm"]):
        p = cli(daemon, *args, "--help")
        assert "usage" in p.stdout.lower(), args
    p = subprocess.run([BIN, "serve", "--help"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0 and "--state-dir" in p.stdout
