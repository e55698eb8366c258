"""The code-interpreter template's server (port 49999), spoken to as E2B's code interpreter
SDKs speak to it, over plain HTTP through the daemon's inbound proxy: stateful cells,
stdout/stderr, errors with tracebacks, rich results (a matplotlib PNG, a pandas DataFrame's
text and HTML), contexts, env vars; and a context's variables kept through fork and
hibernation (branching a notebook)."""
import base64
import json
import time

import pytest

PORT = 49999


def wait_for(cond, timeout=120, step=0.2, what="condition"):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        v = cond()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")


class CI:
    """The code interpreter of one sandbox, through /sandboxes/{id}/proxy/...?port=49999."""

    def __init__(self, c, sid):
        self.c, self.sid = c, sid

    def url(self, path):
        return f"/sandboxes/{self.sid}/proxy{path}?port={PORT}"

    def request(self, method, path, **kw):
        return self.c.http.request(method, self.url(path), timeout=kw.pop("timeout", 120), **kw)

    def ready(self):
        try:
            r = self.request("GET", "/health", timeout=10)
        except Exception:  # noqa: BLE001 - not listening yet
            return False
        return r.status_code == 200 and r.json() == "OK"

    def run(self, code, **body):
        r = self.request("POST", "/execute", json={"code": code, **body})
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in r.text.splitlines() if line.strip()]
        assert lines[-1] == {"type": "end_of_execution"}, lines[-3:]
        return [x for x in lines[:-1] if x["type"] != "keepalive"]


def of(lines, kind):
    return [x for x in lines if x["type"] == kind]


def main_text(lines):
    return [x for x in of(lines, "result") if x["is_main_result"]][0]["text"]


@pytest.fixture(scope="module")
def ci_box(tpl_daemon):
    from conftest import Sandboxes
    c = Sandboxes(tpl_daemon.url, tpl_daemon.admin_token)
    r = c.http.post("/sandboxes", json={"template": "code-interpreter", "label": "ci"},
                    timeout=300)
    assert r.status_code == 200, r.text
    c.created.append(r.json()["id"])
    ci = CI(c, r.json()["id"])
    wait_for(ci.ready, 120, 0.5, "the code interpreter to listen")
    yield ci
    c.cleanup()


def test_cells_share_state_and_count_executions(ci_box):
    first = ci_box.run("x = 40\nprint('set', x)")
    assert of(first, "stdout")[0]["text"] == "set 40\n"
    assert of(first, "stdout")[0]["timestamp"]
    n = of(first, "number_of_executions")[0]["execution_count"]
    second = ci_box.run("x + 2")
    assert main_text(second) == "42"
    assert of(second, "number_of_executions")[0]["execution_count"] == n + 1
    assert of(second, "error") == []


def test_stdout_and_stderr_stream_separately(ci_box):
    lines = ci_box.run("import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert "".join(x["text"] for x in of(lines, "stdout")) == "out\n"
    assert "".join(x["text"] for x in of(lines, "stderr")) == "err\n"


def test_an_error_has_name_value_and_traceback(ci_box):
    lines = ci_box.run("def f():\n    return 1 / 0\nf()")
    [err] = of(lines, "error")
    assert err["name"] == "ZeroDivisionError" and err["value"] == "division by zero"
    assert "ZeroDivisionError" in err["traceback"] and "f()" in err["traceback"]
    assert "\x1b[" not in err["traceback"]  # plain text, no terminal colours
    assert of(ci_box.run("1 + 1"), "result")[0]["text"] == "2"  # the context goes on


def test_matplotlib_figures_come_as_png(ci_box):
    lines = ci_box.run("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\n"
                       "plt.title('squares')\nplt.show()", timeout=180)
    pngs = [x for x in of(lines, "result") if "png" in x]
    assert pngs and pngs[0]["is_main_result"] is False
    raw = base64.b64decode(pngs[0]["png"])
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) > 1000


def test_a_dataframe_comes_as_text_html_and_data(ci_box):
    lines = ci_box.run("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})",
                       timeout=180)
    [res] = [x for x in of(lines, "result") if x["is_main_result"]]
    assert "a" in res["text"] and "x" in res["text"]
    assert res["html"].lstrip().startswith("<div") and "<table" in res["html"]
    assert res["data"] == {"a": [1, 2], "b": ["x", "y"]}


def test_dicts_come_as_json_and_strings_unquoted(ci_box):
    [res] = of(ci_box.run("{'k': [1, 2]}"), "result")
    assert res["json"] == {"k": [1, 2]}
    assert main_text(ci_box.run("'plain'")) == "plain"


def test_env_vars_apply_to_one_execution(ci_box):
    lines = ci_box.run("import os\nos.environ.get('CI_VAR')", env_vars={"CI_VAR": "v1"})
    assert main_text(lines) == "v1"
    later = ci_box.run("import os\nprint(os.environ.get('CI_VAR'))")
    assert of(later, "stdout")[0]["text"] == "None\n"  # set for that execution only


def test_contexts_create_list_run_restart_delete(ci_box):
    r = ci_box.request("POST", "/contexts", json={"language": "python", "cwd": "/tmp"})
    assert r.status_code == 200, r.text
    ctx = r.json()
    assert ctx["language"] == "python" and ctx["cwd"] == "/tmp" and ctx["id"]
    ids = [c["id"] for c in ci_box.request("GET", "/contexts").json()]
    assert ctx["id"] in ids and len(ids) >= 2  # the default python context too
    assert main_text(ci_box.run("import os\ny = 5\nos.getcwd()", context_id=ctx["id"])) == "/tmp"
    # contexts do not share variables
    assert of(ci_box.run("y"), "error")[0]["name"] == "NameError"
    assert main_text(ci_box.run("y * 2", context_id=ctx["id"])) == "10"
    r = ci_box.request("POST", f"/contexts/{ctx['id']}/restart", timeout=120)
    assert r.status_code == 200, r.text
    assert of(ci_box.run("y", context_id=ctx["id"]), "error")[0]["name"] == "NameError"
    assert ci_box.request("DELETE", f"/contexts/{ctx['id']}").status_code == 200
    assert ctx["id"] not in [c["id"] for c in ci_box.request("GET", "/contexts").json()]
    r = ci_box.request("POST", "/execute", json={"code": "1", "context_id": ctx["id"]})
    assert r.status_code == 404 and ctx["id"] in r.text


def test_bad_requests(ci_box):
    r = ci_box.request("POST", "/execute", json={"code": "1", "language": "python",
                                                 "context_id": "x"})
    assert r.status_code == 400
    assert ci_box.request("POST", "/execute", json={"code": 1}).status_code == 400
    assert ci_box.request("POST", "/execute", json={"code": "1",
                                                    "language": "cobol"}).status_code == 400
    assert ci_box.request("POST", "/contexts", json={"cwd": "/no/such"}).status_code == 400
    assert ci_box.request("DELETE", "/contexts/nope").status_code == 404
    assert ci_box.request("POST", "/contexts/nope/restart").status_code == 404
    # the language the SDK sends by default works
    assert main_text(ci_box.run("3 * 3", language="python")) == "9"


def test_fork_keeps_a_contexts_variables_and_the_branches_diverge(ci_box):
    c, parent = ci_box.c, ci_box
    parent.run("notebook = ['cell-1']")
    r = c.post(f"/sandboxes/{parent.sid}/fork", json={"label": "branch"}, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["memory_preserved"] is True
    child = CI(c, r.json()["id"])
    c.created.append(child.sid)
    wait_for(child.ready, 60, 0.2, "the child's code interpreter")
    child.run("notebook.append('child')")
    parent.run("notebook.append('parent')")
    assert main_text(child.run("notebook")) == "['cell-1', 'child']"
    assert main_text(parent.run("notebook")) == "['cell-1', 'parent']"


def test_hibernate_and_wake_keep_a_contexts_variables(ci_box):
    ci_box.run("kept = {'n': 7}")
    c = ci_box.c
    r = c.post(f"/sandboxes/{ci_box.sid}/hibernate", timeout=300)
    assert r.status_code == 200, r.text
    assert c.get(f"/sandboxes/{ci_box.sid}").json()["status"] == "hibernated"
    r = c.post(f"/sandboxes/{ci_box.sid}/wake", timeout=300)
    assert r.status_code == 200 and r.json()["memory_preserved"] is True, r.text
    wait_for(ci_box.ready, 60, 0.2, "the woken code interpreter")
    assert main_text(ci_box.run("kept['n'] * 6")) == "42"
