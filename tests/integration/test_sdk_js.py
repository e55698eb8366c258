"""The TypeScript SDK (sdk/js) against the real daemon: `npm test` there (tsc, then Node's
test runner over sdk/js/test/*.test.mjs) with the daemon's URL, the admin token, a second
user's token and the busybox image. npm ci runs first when node_modules is missing or older
than package-lock.json."""
import fcntl
import os
import shutil
import signal
import subprocess

import httpx
import pytest

from conftest import ROOT

SDK = os.path.join(ROOT, "sdk", "js")
NPM_TIMEOUT = 600
TEST_TIMEOUT = 600


def npm_env(extra=None):
    env = dict(os.environ, NO_UPDATE_NOTIFIER="1", NPM_CONFIG_UPDATE_NOTIFIER="false",
               NPM_CONFIG_FUND="false", NPM_CONFIG_AUDIT="false")
    env.update(extra or {})
    return env


def ensure_node_modules(where=SDK):
    """npm ci in where when node_modules is missing or package-lock.json is newer than what
    npm installed (node_modules/.package-lock.json); one pytest process at a time."""
    with open("/tmp/sandboxer-npm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        installed = os.path.join(where, "node_modules", ".package-lock.json")
        lockfile = os.path.join(where, "package-lock.json")
        if os.path.exists(installed) and os.path.getmtime(installed) >= os.path.getmtime(lockfile):
            return
        p = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefer-offline"],
                           cwd=where, env=npm_env(), capture_output=True, text=True,
                           timeout=NPM_TIMEOUT)
        assert p.returncode == 0, f"npm ci failed ({p.returncode}):\n{p.stdout[-5000:]}\n" \
                                  f"{p.stderr[-5000:]}"


def live_sandboxes(url, token):
    r = httpx.get(url + "/sandboxes", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert r.status_code == 200, r.text
    return [s for s in r.json()["sandboxes"] if s["status"] != "terminated"]


def _interesting(log):
    """The daemon log's warnings and errors, and every sandbox's start, exit and restore."""
    keep = [line for line in log.splitlines()
            if any(w in line for w in ("level=warn", "level=error", "\"level\":\"warn\"",
                                       "\"level\":\"error\"",
                                       "exited", "restore", "fallback", "criu"))]
    return "\n".join(keep[-150:])


def test_typescript_sdk(sbx_daemon):
    # Not a skip: a machine without Node.js must not pass this test silently.
    assert shutil.which("npm") and shutil.which("node"), \
        "Node.js 20+ and npm are needed for the TypeScript SDK's tests (see scripts/setup)"
    version = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout
    assert int(version.lstrip("v").split(".")[0]) >= 20, f"the SDK needs Node.js 20+, not {version}"
    d = sbx_daemon
    r = httpx.post(d.url + "/auth/tokens", json={"user": "sdk-js-other", "name": "sdk-js"},
                   headers={"Authorization": f"Bearer {d.admin_token}"}, timeout=30)
    assert r.status_code == 201, r.text
    other = r.json()["token"]

    ensure_node_modules()
    env = npm_env({"SANDBOXER_URL": d.url, "SANDBOXER_TOKEN": d.admin_token,
                   "SANDBOXER_OTHER_TOKEN": other, "SANDBOXER_IMAGE": "busybox"})
    # its own process group, so that a timeout ends node's test processes too
    p = subprocess.Popen(["npm", "test"], cwd=SDK, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = p.communicate(timeout=TEST_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        output, _ = p.communicate()
        pytest.fail(f"npm test did not finish in {TEST_TIMEOUT} s:\n{output[-20000:]}")
    print(output[-3000:])
    # the daemon's log says why a sandbox ended or a restore fell back, when a test fails
    assert p.returncode == 0, (f"npm test failed ({p.returncode}):\n{output[-20000:]}\n"
                               f"--- the daemon's log, its end:\n"
                               f"{_interesting(d.log(tail=400000))}")
    assert "ℹ fail 0" in output, output[-5000:]

    # every test deleted what it made, failed or not
    for token in (d.admin_token, other):
        left = live_sandboxes(d.url, token)
        assert not left, [(s["id"], s["label"], s["status"]) for s in left]
