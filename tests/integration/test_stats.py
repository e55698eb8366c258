"""GET /sandboxes/{id}/stats and GET /metrics against the real daemon."""
import re
import pytest
import time


def test_stats_report_cpu_memory_pids_disk_and_network(sbx_rt, sbx_user, runtime):
    sbx = sbx_rt
    # under gVisor the limits hold its own kernel too (docs/runsc.md): room for it
    mem = 64 << 20 if runtime == "runc" else 256 << 20
    pids = 100 if runtime == "runc" else 400
    sid = sbx.create("busybox", memory=str(mem), pids=pids)["id"]
    before = sbx.get(f"/sandboxes/{sid}/stats").json()
    # burn some CPU, write 3 MB, start a few processes (not in /tmp: gVisor keeps it a tmpfs
    # in its own memory, so the writable layer would not see it)
    sbx.sh(sid, "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; "
                "dd if=/dev/zero of=/blob bs=1M count=3 2>/dev/null; "
                "for n in 1 2 3; do sleep 30 & done")
    st = sbx.get(f"/sandboxes/{sid}/stats").json()
    assert st["id"] == sid and st["status"] == "running"
    assert st["cpu"]["usage_seconds"] > before["cpu"]["usage_seconds"]
    assert st["memory"]["limit_bytes"] == mem
    assert 0 < st["memory"]["usage_bytes"] <= st["memory"]["peak_bytes"]
    assert st["pids"]["limit"] == pids and st["pids"]["current"] >= 4  # agent + 3 sleeps
    assert st["disk"]["used_bytes"] >= 3 << 20 and st["disk"]["partial"] is False
    assert st["network"]["rx_bytes"] is not None and st["network"]["tx_bytes"] is not None
    # another user cannot see it
    assert sbx_user("eve").get(f"/sandboxes/{sid}/stats").status_code == 404
    # hibernated: not woken; only the disk is known
    assert sbx.post(f"/sandboxes/{sid}/hibernate", timeout=120).status_code == 200
    st = sbx.get(f"/sandboxes/{sid}/stats").json()
    assert st["status"] == "hibernated" and st["cpu"] is None and st["memory"] is None
    assert st["disk"]["used_bytes"] >= 3 << 20
    assert sbx.get(f"/sandboxes/{sid}").json()["status"] == "hibernated"


def metric(text, name, labels=""):
    m = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def test_metrics_are_prometheus_text_for_admins(sbx, sbx_user):
    sid = sbx.create("busybox")["id"]
    sbx.sh(sid, "true")
    r = sbx.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert metric(text, "sandboxer_sandboxes", '{status="running"}') >= 1
    assert metric(text, "sandboxer_executions") >= 1
    assert metric(text, "sandboxer_http_responses_total", '{code="2xx"}') >= 2
    assert metric(text, "sandboxer_uptime_seconds") > 0
    assert "# TYPE sandboxer_http_responses_total counter" in text
    # every sample line is NAME{labels} VALUE
    for line in text.splitlines():
        assert line.startswith("#") or re.match(r"^[a-z_]+(\{[a-z_]+=\"[^\"]*\"\})? [0-9.e+-]+$",
                                                line), line
    # the counter moves
    time.sleep(0.1)
    again = sbx.get("/metrics").text
    assert metric(again, "sandboxer_http_responses_total", '{code="2xx"}') > \
        metric(text, "sandboxer_http_responses_total", '{code="2xx"}')
    # users who are not admins get 403
    assert sbx_user("mallory").get("/metrics").status_code == 403
