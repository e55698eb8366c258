"""The examples in examples/ run against a real daemon and do what they say."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))

import sandboxer  # noqa: E402


def run_example(d, name, *args, image=None, timeout=240):
    """Run examples/<name> as a user would: a subprocess with SANDBOXER_URL/TOKEN, the SDK
    found from the checkout (no PYTHONPATH). Returns its stdout; fails on a non-zero exit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOXER_")}
    env.pop("PYTHONPATH", None)
    env.update(SANDBOXER_URL=d.url, SANDBOXER_TOKEN=d.admin_token, HOME=d.workdir)
    if image:
        env["SANDBOXER_IMAGE"] = image
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", name), *args], env=env,
                       capture_output=True, text=True, timeout=timeout, cwd=d.workdir)
    assert p.returncode == 0, f"{name} failed:\n{p.stdout}\n{p.stderr}"
    return p.stdout


def assert_nothing_left(d):
    c = sandboxer.Sandboxer(d.url, d.admin_token)
    try:
        alive = [(s.label, s.status) for s in c.list() if s.status != "terminated"]
        assert alive == [], alive
    finally:
        c.close()


@pytest.fixture
def d(sbx_daemon):
    yield sbx_daemon
    c = sandboxer.Sandboxer(sbx_daemon.url, sbx_daemon.admin_token)  # whatever a failure left
    for s in c.list():
        if s.status != "terminated":
            s.terminate()
    c.close()


def test_fork_and_coalesce(d):
    out = run_example(d, "fork_and_coalesce.py")
    assert "baseline: 6/7 passed" in out
    assert "branch numpy-sieve: 0/7 passed" in out
    assert "branch sieve-off-by-one: 4/7 passed" in out
    assert "branch sieve: 7/7 passed" in out
    assert "winner: sieve (" in out
    assert "coalesced onto" in out and ": 4 sandboxes deleted" in out
    assert "final check in the kept sandbox: 7/7 passed" in out
    assert "/work/solution.py is the 'sieve' attempt: True" in out
    assert_nothing_left(d)


def test_code_interpreter_keeps_state(d):
    out = run_example(d, "code_interpreter.py")
    assert "    x is 21\n" in out
    assert "    -> 42.0\n" in out
    assert "    -> [3.14, 12.57, 28.27]\n" in out
    assert "!! ZeroDivisionError: division by zero" in out
    assert "!! TimeoutError: interrupted after 2 s" in out
    assert "    -> (42, True)\n" in out  # state kept across the interrupt
    assert "hibernated: hibernated" in out
    assert "    -> (21, True)\n" in out  # state kept across hibernate/wake
    assert "fork: x = 100 there, x = 21 here" in out
    assert_nothing_left(d)


def test_serve_web_app(d):
    out = run_example(d, "serve_web_app.py", "--public")
    assert "serves python3 http.server on port 8080" in out
    assert "GET / -> 200 text/html" in out and "Hello from a sandbox" in out
    assert "GET /static/style.css -> 200" in out
    assert "GET /api/hello?name=agent -> hello, agent (hit 1," in out
    assert "GET /api/hello?name=again -> hello, again (hit 2," in out
    assert 'POST /api/echo -> {"echo": {"ok": true, "n": 42}}' in out
    assert f"URL: {d.url}/sandboxes/" in out
    assert "public: GET without a token -> 200" in out
    out = run_example(d, "serve_web_app.py", image="busybox")
    assert "serves busybox httpd on port 8080" in out and "GET / -> 200" in out
    assert_nothing_left(d)
