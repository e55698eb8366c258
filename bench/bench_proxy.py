#!/usr/bin/python3
"""The inbound proxy: GET /sandboxes/{id}/proxy/{path}?port=8080 against the same GET sent
directly to the sandbox's address (its "ip_address" on the daemon's bridge), in one run, on
the same machine, the same sandbox and the same server (python test image).

The server in the sandbox is Python's http.server (ThreadingHTTPServer, SimpleHTTPRequest-
Handler, HTTP/1.1 keep-alive, TCP_NODELAY: disable_nagle_algorithm) serving a 1 KiB file and a --big-mb MB file (default 100,
MB = 2^20 bytes) that it writes at start. Every request of a series goes over one
kept-alive connection of an httpx client (python3-httpx 0.23) with TCP_NODELAY on its socket
(as bench_exec_create.py's "nd" client); through the proxy it carries the owner's token.

  GET 1 KiB     GET /small: proxy and direct alternate request by request (which goes
                first alternates too), --n-small each after --proxy-warmup untimed ones;
                from sending the request until the whole body is read; status and size
                are checked. p50/p90/p99 in ms and the proxy's p50 overhead. A third
                series, interleaved too: direct with Connection: close, i.e. a new TCP
                connection (and server thread) per request, which is what the proxy does
                towards the sandbox (for reading the overhead, not a target).
  GET 100 MB    GET /big, streamed (1 MiB reads) until the last byte, --n-big each,
                alternating as above; the size is checked, and one untimed download per
                path is hashed and compared with the server's sha256 first. Median, min and
                max MB/s and the proxy/direct ratio of the medians. The same with curl
                (-o /dev/null, its own time_total), a client that costs less CPU than httpx.

Also the daemon's CPU time per proxied request (from /proc, over each series; the direct
requests do not reach the daemon). Traffic goes to 127.0.0.1 (the daemon) and to the
sandbox's address on a bridge of this run only. Everything it makes (the sandbox, the daemon
and its bridge, nftables table and state, the registry, temp dirs) is removed at the end, also
on error or Ctrl-C; every request has a time limit, every phase a budget, the run a total.
Run as root, through bench/run (make bench). Standard library and python3-httpx only.
"""
import hashlib
import json
import os
import statistics
import sys
import time

import httpx

from common import (Interrupted, Session, check_prerequisites,
                    keep_log_cleanup, log, machine_info, parser, percentile, print_header,
                    registry, run, set_nodelay, timed_loop)

PORT = 8080
TARGET_OVERHEAD_MS = 1.0  # p50 of the proxy minus p50 direct, 1 KiB GET
TARGET_RATIO = 0.70  # proxy MB/s over direct MB/s, big download
BIG_TIMEOUT = 120

SERVER = r"""
import functools, hashlib, http.server, os, sys
root = "/tmp/www"
os.makedirs(root, exist_ok=True)
with open(os.path.join(root, "small"), "wb") as f:
    f.write(bytes(range(256)) * 4)
block = os.urandom(1 << 20)
h = hashlib.sha256()
with open(os.path.join(root, "big.part"), "wb") as f:
    for _ in range(int(sys.argv[1])):
        f.write(block)
        h.update(block)
os.rename(os.path.join(root, "big.part"), os.path.join(root, "big"))
with open(os.path.join(root, "sha256"), "w") as f:
    f.write(h.hexdigest())
class H(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # TCP_NODELAY: its head and body are two writes
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", %d),
                                functools.partial(H, directory=root)).serve_forever()
""" % PORT


def cpu_seconds(pid):
    """utime + stime of pid, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client(base_url, headers=None):
    # trust_env=False: no *_PROXY variable may send this elsewhere
    return httpx.Client(base_url=base_url, headers=headers or {}, timeout=BIG_TIMEOUT,
                        trust_env=False, event_hooks={"response": [set_nodelay]})


def small_op(c, path):
    def op():
        t0 = time.perf_counter_ns()
        r = c.get(path)
        dt = (time.perf_counter_ns() - t0) / 1e6
        if r.status_code != 200 or len(r.content) != 1024:
            raise RuntimeError(f"GET {path}: {r.status_code}, {len(r.content)} bytes: "
                               f"{r.text[:300]}")
        return dt
    return op


def big_httpx(c, path, size, digest=None):
    """One download; seconds to the last byte. With digest, the body's sha256 must be it."""
    h = hashlib.sha256() if digest else None
    got = 0
    t0 = time.perf_counter_ns()
    with c.stream("GET", path) as r:
        if r.status_code != 200:
            raise RuntimeError(f"GET {path}: {r.status_code}")
        for part in r.iter_raw(1 << 20):
            got += len(part)
            if h:
                h.update(part)
    dt = (time.perf_counter_ns() - t0) / 1e9
    if got != size:
        raise RuntimeError(f"GET {path}: {got} bytes, expected {size}")
    if digest and h.hexdigest() != digest:
        raise RuntimeError(f"GET {path}: sha256 {h.hexdigest()}, expected {digest}")
    return dt


def big_curl(url, size, auth=None):
    """One download with curl to /dev/null; its own time_total in seconds. The token goes on
    stdin (-H @-), not on the command line."""
    r = run(["curl", "-sS", "--noproxy", "*", "-o", "/dev/null", "-H", "@-", "-w",
             "%{http_code} %{size_download} %{time_total}", url], timeout=BIG_TIMEOUT,
            input=(f"Authorization: {auth}\n" if auth else "X-Bench: 1\n").encode(),
            stdin=None, text=False)
    code, got, secs = r.stdout.decode().split()
    if code != "200" or int(got) != size:
        raise RuntimeError(f"curl {url}: {code}, {got} bytes, expected {size}")
    return float(secs)


def interleaved(name, n, warmup, budget, ops):
    """ops: [(label, op)]. Runs them alternately (the order flips every round), warmup
    untimed rounds first; returns {label: [results]}."""
    out = {label: [] for label, _ in ops}
    state = {"i": 0}

    def round_():
        order = ops if state["i"] % 2 == 0 else list(reversed(ops))
        state["i"] += 1
        return [(label, op()) for label, op in order]
    for rnd in timed_loop(name, n, warmup, budget, round_):
        for label, v in rnd:
            out[label].append(v)
    return out


def fmt_row(bench, path, clnt, samples, unit):
    s = sorted(samples)
    if unit == "ms":
        p = [percentile(s, q) for q in (50, 90, 99)]
        return (f"{bench:<11} {path:<7} {clnt:<9} {len(s):>4} {p[0]:>9.3f} {p[1]:>9.3f} "
                f"{p[2]:>9.3f}")
    if not s:
        return f"{bench:<11} {path:<7} {clnt:<9} {0:>4}"
    return (f"{bench:<11} {path:<7} {clnt:<9} {len(s):>4} {statistics.median(s):>9.0f} "
            f"{s[0]:>9.0f} {s[-1]:>9.0f}")


def main():
    args = parser("proxy", __doc__).parse_args()
    args.no_podman = True  # nothing of podman here
    check_prerequisites(args)
    info = machine_info(args.bin)
    session = Session(args.total_timeout)
    reg = sbx = failed = None
    session.on_cleanup("the daemon's log", keep_log_cleanup(lambda: sbx, args.keep_log))
    small = {}
    big = {}
    cpu = {}
    big_size = args.big_mb << 20
    sandbox = {}
    try:
        build = registry._build_module()
        log(f"python layout: {build.ensure('python')}")
        reg, sbx = session.start_sandboxer(args, "proxy", python=True)
        auth = sbx.http.headers["Authorization"]

        log("sandboxer: creating the server sandbox (pulls the python image, untimed)")
        r = sbx.request("POST", "/sandboxes", expect=(200,), timeout=300, json={
            "image": "python", "args": ["python3", "-c", SERVER, str(args.big_mb)],
            "ports": [PORT]})
        sandbox = r.json()
        sid, ip = sandbox["id"], sandbox.get("ip_address")
        sbx.ids.add(sid)
        if not ip:
            raise RuntimeError(f"the create answer has no ip_address: {sandbox}")
        log(f"sandbox {sid} at {ip}")
        proxy_c = client(sbx.http.base_url, {"Authorization": auth})
        direct_c = client(f"http://{ip}:{PORT}")
        # a new connection per request, as the proxy makes towards the sandbox
        close_c = client(f"http://{ip}:{PORT}", {"Connection": "close"})
        session.on_cleanup("clients", lambda: (proxy_c.close(), direct_c.close(),
                                               close_c.close()))
        proxy_path = f"/sandboxes/{sid}/proxy/%s?port={PORT}"
        deadline = time.monotonic() + 120
        while True:  # the server is up once it has written both files
            try:
                if direct_c.get("/sha256", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server at {ip}:{PORT} did not answer in 120 s")
            time.sleep(0.2)
        digest = direct_c.get("/sha256").text.strip()
        via_proxy = proxy_c.get(proxy_path % "sha256")
        if via_proxy.status_code != 200 or via_proxy.text.strip() != digest:
            raise RuntimeError(f"proxy: {via_proxy.status_code} {via_proxy.text[:300]}")

        # ---- small GET, alternating
        log(f"GET 1 KiB: proxy and direct x{args.n_small}")
        pid = sbx.proc.pid
        c0 = cpu_seconds(pid)
        small = interleaved("GET 1 KiB", args.n_small, args.proxy_warmup, args.phase_timeout,
                            [("proxy", small_op(proxy_c, proxy_path % "small")),
                             ("direct", small_op(direct_c, "/small")),
                             ("direct close", small_op(close_c, "/small"))])
        cpu["small"] = (cpu_seconds(pid) - c0) / (len(small["proxy"]) + args.proxy_warmup)

        # ---- big download
        log(f"GET {args.big_mb} MB: checking one download per path (sha256, untimed)")
        big_httpx(proxy_c, proxy_path % "big", big_size, digest)
        big_httpx(direct_c, "/big", big_size, digest)
        log(f"GET {args.big_mb} MB: httpx proxy and direct x{args.n_big}")
        c0 = cpu_seconds(pid)
        got = interleaved(f"GET {args.big_mb} MB httpx", args.n_big, 0, args.phase_timeout,
                          [("proxy", lambda: big_httpx(proxy_c, proxy_path % "big", big_size)),
                           ("direct", lambda: big_httpx(direct_c, "/big", big_size))])
        cpu["big httpx"] = (cpu_seconds(pid) - c0) / max(1, len(got["proxy"]))
        big["httpx"] = {k: [args.big_mb / s for s in v] for k, v in got.items()}
        log(f"GET {args.big_mb} MB: curl proxy and direct x{args.n_big}")
        base = str(sbx.http.base_url).rstrip("/")
        c0 = cpu_seconds(pid)
        got = interleaved(
            f"GET {args.big_mb} MB curl", args.n_big, 1, args.phase_timeout,
            [("proxy", lambda: big_curl(base + proxy_path % "big", big_size, auth)),
             ("direct", lambda: big_curl(f"http://{ip}:{PORT}/big", big_size))])
        cpu["big curl"] = (cpu_seconds(pid) - c0) / max(1, len(got["proxy"]) + 1)
        big["curl"] = {k: [args.big_mb / s for s in v] for k, v in got.items()}
    except (Exception, KeyboardInterrupt, Interrupted) as e:
        failed = session.stopped(e, sbx)
    finally:
        session.close()

    print_header(info, session.t_start)
    results = {}
    print(f"{'benchmark':<11} {'path':<7} {'client':<9} {'n':>4} {'p50 ms':>9} {'p90 ms':>9} "
          f"{'p99 ms':>9}")
    for path in ("proxy", "direct"):
        print(fmt_row("GET 1 KiB", path, "httpx nd", small.get(path, []), "ms"))
    print(fmt_row("GET 1 KiB", "direct", "nd close", small.get("direct close", []), "ms"))
    if small.get("proxy") and small.get("direct"):
        p50 = {k: percentile(sorted(v), 50) for k, v in small.items() if v}
        over = p50["proxy"] - p50["direct"]
        results["small_overhead_p50_ms"] = over
        print(f"proxy overhead at p50: {over:.3f} ms  (target <= {TARGET_OVERHEAD_MS:g} ms: "
              f"{'met' if over <= TARGET_OVERHEAD_MS else 'MISSED'})")
    print()
    print(f"{'benchmark':<11} {'path':<7} {'client':<9} {'n':>4} {'med MB/s':>9} "
          f"{'min MB/s':>9} {'max MB/s':>9}")
    bench = f"GET {args.big_mb} MB"
    for clnt, rows in big.items():
        for path in ("proxy", "direct"):
            print(fmt_row(bench, path, clnt, rows.get(path, []), "MB/s"))
    for clnt, rows in big.items():
        if rows.get("proxy") and rows.get("direct"):
            ratio = statistics.median(rows["proxy"]) / statistics.median(rows["direct"])
            results[f"big_ratio_{clnt}"] = ratio
            print(f"{clnt}: proxy/direct {ratio * 100:.0f} % of direct  (target >= "
                  f"{TARGET_RATIO * 100:.0f} %: {'met' if ratio >= TARGET_RATIO else 'MISSED'})")
    print()
    print("MB = 2^20 bytes. httpx nd: python3-httpx 0.23, one keep-alive connection per path, "
          "TCP_NODELAY;")
    print("nd close: the same with Connection: close, a new TCP connection (and a new server "
          "thread) per request, as the proxy makes towards the sandbox")
    print("proxy = GET /sandboxes/{id}/proxy/{path}?port=8080 on 127.0.0.1 with the owner's "
          "token; direct = GET http://{ip_address}:8080/{path}")
    if cpu:
        print("daemon CPU per proxied request: " + ", ".join(
            f"{k} {v * 1000:.2f} ms" for k, v in cpu.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "results": results, "daemon_cpu_s": cpu,
                       "small_ms": small, "big_mb_s": big}, f, indent=2)
    if failed is not None:
        sys.exit(1)


if __name__ == "__main__":
    main()
