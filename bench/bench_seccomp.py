#!/usr/bin/python3
"""The cost of the seccomp profile: this build's daemon against another binary's (--bin-old,
e.g. one built before the allow list, whose profile was a deny list), in the same run,
rounds alternating between the two so that the load of a shared machine falls on both.

  filter size         BPF instructions of the filter the kernel holds for the sandbox
  syscalls            bench/seccomp_syscalls.c, static, run inside a busybox sandbox: ns per
                      getppid (answered by the kernel's seccomp action cache), socket+close
                      and fork+wait (their argument rules run the filter), best of 20
                      batches
  exec echo hi        POST /sandboxes/{id}/execute {"code":"echo hi"}, TCP_NODELAY client
  create -> running   POST /sandboxes {"image":"busybox"}, deleted after each sample
  fork (CRIU)         POST /sandboxes/{id}/fork of an idle busybox sandbox (the child is
                      restored by CRIU, which installs the filter it dumped: runc does not
                      compile it), the child deleted after each sample

Prints the median of the rounds for the syscalls and p50/p90 of all samples for exec, create
and fork, per daemon, with the profile its config.json carries. Run as root; cleans up
everything it made, also on error or Ctrl-C.
"""
import ctypes
import json
import os
import statistics
import subprocess
import time

from common import (Interrupted, OwnNetwork, Sandboxer, Session, log, machine_info, parser,
                    percentile, print_header, registry, timed_loop)

HERE = os.path.dirname(os.path.abspath(__file__))


def start_daemon(session, binary, reg, tag, args):
    net = OwnNetwork(tag)
    session.on_cleanup(f"network {tag}", net.cleanup)
    sbx = Sandboxer(binary, os.path.join(session.workdir, tag), reg.url, args.log_level,
                    extra_args=net.args())
    session.on_cleanup(f"sandboxer {tag}", sbx.cleanup)
    sbx.start()
    return sbx


def profile_of(sbx, sid):
    with open(os.path.join(sbx.state_dir, "sandboxes", sid, "bundle", "config.json")) as f:
        sc = json.load(f)["linux"]["seccomp"]
    kind = "allow list" if sc["defaultAction"] != "SCMP_ACT_ALLOW" else "deny list"
    return f"{kind}, {len(sc['syscalls'])} rules"


def filter_size(sbx, sid):
    """The BPF instructions of the filter the sandbox's init runs under, as the kernel holds
    it (PTRACE_SECCOMP_GET_FILTER from the host; the agent stops for a moment)."""
    with open(os.path.join(sbx.state_dir, "sandboxes", sid, "run", "init.pid")) as f:
        pid = int(f.read())
    libc = ctypes.CDLL(None, use_errno=True)
    ptrace = libc.ptrace
    ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    if ptrace(0x4206, pid, None, None) < 0:  # PTRACE_SEIZE
        return -1
    try:
        ptrace(0x4207, pid, None, None)  # PTRACE_INTERRUPT
        os.waitpid(pid, 0x40000000)  # __WALL
        return ptrace(0x420c, pid, None, None)  # PTRACE_SECCOMP_GET_FILTER, index 0: its size
    finally:
        ptrace(17, pid, None, None)  # PTRACE_DETACH


def syscalls(sbx, sid, probe):
    with open(probe, "rb") as f:
        sbx.request("PUT", f"/sandboxes/{sid}/files/tmp/seccomp_syscalls", expect=(200, 201),
                    params={"mode": "755"}, content=f.read())
    r = sbx.request("POST", f"/sandboxes/{sid}/exec", timeout=300,
                    json={"argv": ["/tmp/seccomp_syscalls"]}).json()
    if r["exit_code"] != 0:
        raise RuntimeError(f"seccomp_syscalls: {r}")
    return {name: float(ns) for name, ns in (line.split() for line in r["stdout"].splitlines())}


def fork_op(sbx, sid):
    def op():
        t0 = time.perf_counter_ns()
        r = sbx.request("POST", f"/sandboxes/{sid}/fork", expect=(200,), json={}, timeout=300)
        dt = (time.perf_counter_ns() - t0) / 1e6
        sbx.ids.add(r.json()["id"])
        sbx.delete(r.json()["id"])
        return dt
    return op


def one_round(sbx, probe, args, results):
    sid = sbx.create(sbx.http_nd)
    results.setdefault("profile", profile_of(sbx, sid))
    results.setdefault("bpf", [filter_size(sbx, sid)])
    for name, ns in syscalls(sbx, sid, probe).items():
        results.setdefault(name, []).append(ns)
    results.setdefault("exec", []).extend(timed_loop(
        "exec", args.sc_n_exec, 20, args.phase_timeout, sbx.exec_op(sid, sbx.http_nd)))
    results.setdefault("fork", []).extend(timed_loop(
        "fork", args.sc_n_fork, 1, args.phase_timeout, fork_op(sbx, sid)))
    sbx.delete(sid)
    results.setdefault("create", []).extend(timed_loop(
        "create", args.sc_n_create, 2, args.phase_timeout, sbx.create_op(sbx.http_nd)))


def table(daemons):
    lines = [f"{'measure':<22} {'daemon':<8} {'profile':<24} {'value':>18}"]
    for metric in ("bpf", "getppid", "socket+close", "fork+wait", "exec", "create", "fork"):
        for label, res in daemons.items():
            v = res.get(metric, [])
            if not v:
                continue
            if metric == "bpf":
                val, name = f"{v[0]} instructions", "filter size"
            elif metric in ("exec", "create", "fork"):
                s = sorted(v)
                val = f"p50 {percentile(s, 50):.2f} p90 {percentile(s, 90):.2f} ms"
                name = {"exec": "exec echo hi", "create": "create -> running",
                        "fork": "fork (CRIU)"}[metric]
            else:
                val = f"{statistics.median(v):.1f} ns/call"
                name = metric
            lines.append(f"{name:<22} {label:<8} {res['profile']:<24} {val:>18}")
    return "\n".join(lines)


def main():
    args = parser("seccomp", __doc__).parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench: run as root")
    info = machine_info(args.bin)
    session = Session(args.total_timeout)
    daemons, failed = {}, None
    try:
        probe = os.path.join(session.workdir, "seccomp_syscalls")
        subprocess.run(["gcc", "-static", "-O2", "-o", probe,
                        os.path.join(HERE, "seccomp_syscalls.c")], check=True, timeout=120)
        os.makedirs(os.path.join(session.workdir, "registry"))
        reg = registry.start_registry(workdir=os.path.join(session.workdir, "registry"))
        session.on_cleanup("registry", reg.stop)
        registry.push_test_images(reg, names=("busybox",))
        bins = {"new": args.bin}
        if args.bin_old:
            bins["old"] = args.bin_old
        sbxs = {label: start_daemon(session, b, reg, f"sc{label}", args)
                for label, b in bins.items()}
        for sbx in sbxs.values():
            sbx.delete(sbx.create(sbx.http_nd))  # pulls busybox, untimed
        for r in range(args.sc_rounds):
            order = list(sbxs) if r % 2 == 0 else list(reversed(sbxs))
            for label in order:
                log(f"round {r + 1}/{args.sc_rounds}: {label}")
                one_round(sbxs[label], probe, args, daemons.setdefault(label, {}))
    except (Exception, KeyboardInterrupt, Interrupted) as e:
        failed = session.stopped(e, None)
    finally:
        session.close()
    print_header(info, session.t_start)
    print(table(daemons))
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
