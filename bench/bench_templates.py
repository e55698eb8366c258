#!/usr/bin/python3
"""Create -> first command answered, from a template: cold (its image) against a warm pool.

  base              POST /sandboxes {"template": "base"} until its answer (create), then
                    POST /sandboxes/{id}/exec {"argv": ["true"]} until its answer (first exec)
  code-interpreter  the same create, then POST .../proxy/execute?port=49999 {"code": "1+1"}
                    until its end_of_execution (first cell: the kernel started, or restored)

each cold (pool 0: a container started from the image) and warm (pool 2: a sandbox restored
ahead from the template's warm snapshot is handed over), and each through our API (httpx)
and through the official E2B JS SDK (bench/e2b_tti.cjs: Sandbox.create, then
commands.run('true') or runCode('1+1'); the SDK of tests/e2b, installed by npm ci if
missing), against the same daemon (--e2b-domain e2b.localhost, an E2B key of its own). Before each warm sample the pool is
let refill, so every sample takes a ready sandbox. Each sandbox is deleted after its sample,
untimed. Prints p50/p90 in ms; the issue's target is <= 10 ms from a warm pool.

The numbers are this machine's at the time: other work on it (2 cores) moves them a lot, so
the run prints the load average before and after. Runs its own daemon (tests/integration's
fixture code) on a temporary state dir with the built-in templates (built first if needed, as
scripts/setup does), and removes everything at the end. As root; standard library, httpx.

Usage: bench/bench_templates.py [--n N] [--only base|code-interpreter] [--via api|e2b]
                                [--json PATH]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from conftest import Daemon, ensure_templates  # noqa: E402
from test_sdk_js import ensure_node_modules, npm_env  # noqa: E402

E2B_DOMAIN = "e2b.localhost"

POOL = 2


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def wait_for(cond, timeout, what):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if cond():
            return
        time.sleep(0.1)
    raise TimeoutError(what)


def first_exec(c, sid):
    r = c.post(f"/sandboxes/{sid}/exec", json={"argv": ["true"]})
    assert r.status_code == 200 and r.json()["exit_code"] == 0, r.text


def first_cell(c, sid):
    """The first cell's answer; a cold sandbox's server is not listening at first."""
    until = time.monotonic() + 120
    while True:
        r = c.post(f"/sandboxes/{sid}/proxy/execute?port=49999", json={"code": "1+1"})
        if r.status_code == 200:
            assert '"text": "2"' in r.text, r.text
            return
        if time.monotonic() > until:
            raise TimeoutError(r.text)
        time.sleep(0.02)


def sample(c, template, then):
    t0 = time.perf_counter()
    r = c.post("/sandboxes", json={"template": template})
    t1 = time.perf_counter()
    assert r.status_code == 200, r.text
    sid = r.json()["id"]
    then(c, sid)
    t2 = time.perf_counter()
    c.delete(f"/sandboxes/{sid}")
    return (t1 - t0) * 1000, (t2 - t1) * 1000, (t2 - t0) * 1000


class E2BSdk:
    """bench/e2b_tti.cjs under Node: one sample a line."""

    def __init__(self, d):
        ensure_node_modules(os.path.join(ROOT, "tests", "e2b"))
        r = httpx.post(d.url + "/auth/tokens", json={"user": "bench-e2b", "kind": "e2b"},
                       headers={"Authorization": f"Bearer {d.admin_token}"}, timeout=30)
        assert r.status_code == 201, r.text
        env = npm_env({"E2B_API_KEY": r.json()["token"], "E2B_API_URL": d.url,
                       "E2B_SANDBOX_URL": d.url, "E2B_DOMAIN": E2B_DOMAIN})
        self.p = subprocess.Popen(["node", os.path.join(ROOT, "bench", "e2b_tti.cjs")],
                                  env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)

    def sample(self, template):
        self.p.stdin.write(json.dumps({"template": template}) + "\n")
        self.p.stdin.flush()
        out = json.loads(self.p.stdout.readline())
        if "error" in out:
            raise RuntimeError(out["error"])
        return out["create_ms"], out["first_ms"], out["total_ms"]

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


def series(c, template, take, n, warm):
    c.patch(f"/templates/{template}", json={"pool": POOL if warm else 0})
    out = []
    for _ in range(n):
        if warm:
            wait_for(lambda: c.get(f"/templates/{template}").json()["pool"]["ready"] == POOL,
                     300, "the pool to fill")
            time.sleep(1.5)  # the refill of the last claim has settled
        out.append(take())
    c.patch(f"/templates/{template}", json={"pool": 0})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10, help="samples per series")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--only", choices=("base", "code-interpreter"), help="one template")
    ap.add_argument("--via", choices=("api", "e2b"), help="one client (default: both)")
    args = ap.parse_args()
    cache = ensure_templates()
    rows = []
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="sbx-bench-tpl-") as work:
        d = Daemon(work, ["--templates-dir", cache, "--e2b-domain", E2B_DOMAIN])
        sdk = None
        try:
            d.start()
            with httpx.Client(base_url=d.url, timeout=600,
                              headers={"Authorization": f"Bearer {d.admin_token}"}) as c:
                c.get("/templates")  # the import at start
                if args.via != "api":
                    sdk = E2BSdk(d)
                for template, then, what in (("base", first_exec, "exec true"),
                                             ("code-interpreter", first_cell, "cell 1+1")):
                    if args.only and template != args.only:
                        continue
                    for via, warm in (("api", False), ("e2b", False), ("api", True),
                                      ("e2b", True)):
                        if args.via and via != args.via:
                            continue
                        if via == "api":
                            take = lambda t=template, f=then: sample(c, t, f)  # noqa: E731
                        else:
                            take = lambda t=template: sdk.sample(t)  # noqa: E731
                        s = series(c, template, take, args.n, warm)
                        rows.append({"template": template, "via": via,
                                     "pool": POOL if warm else 0, "first": what,
                                     "create_p50": pct([x[0] for x in s], 50),
                                     "first_p50": pct([x[1] for x in s], 50),
                                     "total_p50": pct([x[2] for x in s], 50),
                                     "total_p90": pct([x[2] for x in s], 90), "n": len(s)})
        finally:
            if sdk:
                sdk.close()
            d.kill()
    load1 = os.getloadavg()
    print(f"create -> first command, ms (n={args.n} each; load average "
          f"{load0[0]:.1f} before, {load1[0]:.1f} after)")
    print(f"{'template':18} {'via':4} {'pool':>4} {'first':10} {'create p50':>10} "
          f"{'first p50':>10} {'total p50':>10} {'total p90':>10}")
    for r in rows:
        print(f"{r['template']:18} {r['via']:4} {r['pool']:>4} {r['first']:10} "
              f"{r['create_p50']:>10.1f} "
              f"{r['first_p50']:>10.1f} {r['total_p50']:>10.1f} {r['total_p90']:>10.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "load": [load0, load1]}, f, indent=1)


if __name__ == "__main__":
    main()
