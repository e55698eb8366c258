"""The reference Sandboxer's clients: its base routes answered with the same status codes and
fields, in the call shapes its CLI test script and SDKs use (issue 14, section 5)."""
import httpx

from conftest import wait_for


def call(c, method, path, expect=200, **kw):
    r = c.http.request(method, path, timeout=120, **kw)
    assert r.status_code == expect, (method, path, r.status_code, r.text)
    return r.json()


def test_base_routes_answer_as_the_reference_does(sbx):
    # create: {image, label, interactive} -> 200 with id, name, label, hostname
    s = call(sbx, "POST", "/sandboxes",
             json={"image": "busybox", "label": "compat", "interactive": True})
    sbx.created.append(s["id"])
    assert len(s["id"]) == 64 and s["label"] == "compat" and s["name"] and s["hostname"]
    sid = s["id"]
    assert call(sbx, "GET", f"/sandboxes/{sid}")["status"] == "running"
    r = call(sbx, "POST", f"/sandboxes/{sid}/execute", json={"code": "echo ref > /tmp/f; cat /tmp/f"})
    assert (r["stdout"], r["stderr"], r["exit_code"]) == ("ref\n", "", 0), r
    assert call(sbx, "PATCH", f"/sandboxes/{sid}", json={"label": "renamed"})["label"] == "renamed"

    # fork: {label} -> 200 with the child's id and memory_preserved
    child = call(sbx, "POST", f"/sandboxes/{sid}/fork", json={"label": "branch"})
    sbx.created.append(child["id"])
    assert child["id"] != sid and isinstance(child["memory_preserved"], bool)
    assert call(sbx, "POST", f"/sandboxes/{child['id']}/execute",
                json={"code": "cat /tmp/f"})["stdout"] == "ref\n"
    tree = call(sbx, "GET", f"/sandboxes/{sid}/tree")
    assert [k["id"] for k in tree["tree_json"]["children"]] == [child["id"]] and tree["tree"]

    # pause and unpause with the freezer
    assert call(sbx, "PUT", f"/sandboxes/{sid}/pause")["status"] == "paused"
    assert call(sbx, "DELETE", f"/sandboxes/{sid}/pause")["status"] == "running"

    # coalesce onto the child: the final sandbox plus message and terminated_sandboxes
    out = call(sbx, "POST", f"/sandboxes/{sid}/coalesce/{child['id']}")
    assert out["id"] == child["id"] and out["message"]
    assert sid in out["terminated_sandboxes"]

    # delete answers {id, status: terminated}; the row stays listed as terminated
    assert call(sbx, "DELETE", f"/sandboxes/{child['id']}") == {"id": child["id"],
                                                                "status": "terminated"}
    listed = {x["id"]: x["status"] for x in call(sbx, "GET", "/sandboxes")["sandboxes"]}
    assert listed[child["id"]] == "terminated" and listed[sid] == "terminated"


def test_the_reference_cli_flow_hello_world(sbx):
    """The reference's CLI test script: create a non-interactive sandbox from an image whose
    program exits, read its logs, delete it; every step 200."""
    s = call(sbx, "POST", "/sandboxes",
             json={"image": "hello-world", "label": "hello", "interactive": False})
    sbx.created.append(s["id"])
    wait_for("the program to exit",
             lambda: call(sbx, "GET", f"/sandboxes/{s['id']}")["status"] == "exited", 60)
    logs = sbx.http.get(f"/sandboxes/{s['id']}/logs", timeout=30)
    assert logs.status_code == 200 and "Hello from Sandboxer!" in logs.text
    hist = call(sbx, "GET", f"/sandboxes/{s['id']}/execution-logs")
    assert isinstance(hist["executions"], list)
    assert call(sbx, "DELETE", f"/sandboxes/{s['id']}")["status"] == "terminated"


def test_errors_keep_the_reference_shape(sbx):
    r = sbx.http.post("/sandboxes", content=b"{not json", timeout=30,
                      headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and set(r.json()) >= {"detail", "code"}
    r = sbx.http.post(f"/sandboxes/{'0' * 64}/fork", json={"label": "x"}, timeout=30)
    assert r.status_code == 404 and r.json()["detail"]
    r = httpx.post(sbx.http.base_url.join("/sandboxes"), json={"image": "busybox"}, timeout=30)
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
