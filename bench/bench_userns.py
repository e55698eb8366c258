#!/usr/bin/python3
"""The cost of user namespaces (issue 13, part 2): two daemons of one binary, `--userns off`
and `--userns on`, in the same run, rounds alternating between them so that the load of a
shared machine falls on both; beside them bare runc and podman, each without and with a user
namespace of 65,536 ids, on the same busybox image.

  create -> running   Sandboxer: POST /sandboxes {"image":"busybox"} until it answers
                      (running, agent up), deleted after each sample; runc: `runc run -d` of
                      a prepared bundle (with a user namespace: uid/gid mappings and the
                      bundle's rootfs chowned to the range beforehand, untimed); podman: `podman
                      run -d` (with a user namespace: --uidmap/--gidmap 0:R:65536)
  exec echo hi        POST /sandboxes/{id}/execute {"code":"echo hi"}, TCP_NODELAY client
  fork                POST /sandboxes/{id}/fork of a busybox sandbox in which `sleep` was
                      started through exec with `setsid … &` (as agents do; busybox-static
                      has no nohup), child deleted
  hibernate / wake    POST /hibernate, then POST /wake of that sandbox, each until it answers;
                      the sleep is checked to be there after each wake

Prints p50/p90 in ms of all samples per tool, and the ratio on/off of Sandboxer's p50. Run as
root; cleans up everything it made (daemons, sandboxes, runc and podman containers, bundles),
also on error or Ctrl-C. Not in `bench/run`'s default set: `bench/run --only userns`.
"""
import json
import os
import time

from bench_exec_create import PodmanIdle, Runc
from common import (PODMAN_OPTS, Interrupted, OwnNetwork, Sandboxer, Session,
                    check_prerequisites, log, machine_info, parser, percentile, print_header,
                    registry, run, timed_loop)

SLOW_OP = 180
HOST_ID = 134217728  # bare runc's and podman's range: 2^27, below the daemon's default range
SIZE = 65536


class RuncUserns(Runc):
    """Bare runc with a user namespace: the template's mapping is HOST_ID for 65,536 ids and
    each bundle's rootfs is chowned to it while it is prepared (untimed), as runc needs."""

    def __init__(self, layout, workdir, prefix):
        super().__init__(layout, workdir, prefix)
        cfg_path = os.path.join(self.template, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["linux"]["namespaces"].append({"type": "user"})
        cfg["linux"]["uidMappings"] = [{"containerID": 0, "hostID": HOST_ID, "size": SIZE}]
        cfg["linux"]["gidMappings"] = [{"containerID": 0, "hostID": HOST_ID, "size": SIZE}]
        # runc spec's mounts that a user namespace cannot make (sysfs of another netns is
        # fine; the cgroup mount with the host's cgroupns is not): as rootless specs do
        cfg["mounts"] = [m for m in cfg["mounts"] if m["type"] != "cgroup"]
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        os.chmod(workdir, 0o711)

    def prepare(self):
        cid, bundle = super().prepare()
        rootfs = os.path.join(bundle, "rootfs")
        for dirpath, dirnames, filenames in os.walk(rootfs):
            for name in [dirpath] + [os.path.join(dirpath, n) for n in dirnames + filenames]:
                st = os.lstat(name)
                os.lchown(name, HOST_ID + st.st_uid, HOST_ID + st.st_gid)
        os.chmod(bundle, 0o711)
        return cid, bundle


class PodmanUserns(PodmanIdle):
    USERNS = ["--uidmap", f"0:{HOST_ID}:{SIZE}", "--gidmap", f"0:{HOST_ID}:{SIZE}"]

    def start(self):
        name = self.new_name()
        run(["podman", "run", "-d", "--name", name] + PODMAN_OPTS + self.USERNS +
            [self.image, "sleep", "1000000"])
        return name


def start_daemon(session, args, reg, tag, mode, index):
    net = OwnNetwork(tag, index)
    session.on_cleanup(f"network {tag}", net.cleanup)
    sbx = Sandboxer(args.bin, os.path.join(session.workdir, tag), reg.url, args.log_level,
                    extra_args=net.args() + ["--userns", mode])
    session.on_cleanup(f"sandboxer {tag}", sbx.cleanup)
    sbx.start()
    # the workdir's parents must be searchable for a sandbox's root to reach its rootfs
    os.chmod(session.workdir, 0o711)
    os.chmod(os.path.join(session.workdir, tag), 0o711)
    return sbx


def userns_of(sbx, sid):
    u = sbx.request("GET", f"/sandboxes/{sid}").json().get("user_namespace")
    return f"uid {u['host_id']}+{u['size']}" if u else "none"


def sleeping(sbx, sid):
    r = sbx.request("POST", f"/sandboxes/{sid}/execute", timeout=SLOW_OP,
                    json={"code": "pidof sleep >/dev/null && echo yes"}).json()
    return r.get("stdout") == "yes\n"


def fork_op(sbx, sid):
    def op():
        t0 = time.perf_counter_ns()
        r = sbx.request("POST", f"/sandboxes/{sid}/fork", json={}, timeout=SLOW_OP)
        dt = (time.perf_counter_ns() - t0) / 1e6
        child = r.json()["id"]
        sbx.ids.add(child)
        if not r.json().get("memory_preserved", True) or not sleeping(sbx, child):
            raise RuntimeError(f"fork lost the sleep: {r.text[:500]}")
        sbx.delete(child)
        return dt
    return op


def hibernate_wake_op(sbx, sid, out):
    """One hibernate and one wake; the wake's ms go to out["wake"], the hibernate's are
    returned."""
    def op():
        t0 = time.perf_counter_ns()
        r = sbx.request("POST", f"/sandboxes/{sid}/hibernate", timeout=SLOW_OP)
        dt = (time.perf_counter_ns() - t0) / 1e6
        if r.json().get("status") != "hibernated":
            raise RuntimeError(f"hibernate answered {r.text[:500]}")
        t1 = time.perf_counter_ns()
        r = sbx.request("POST", f"/sandboxes/{sid}/wake", timeout=SLOW_OP)
        out.append((time.perf_counter_ns() - t1) / 1e6)
        if r.json().get("status") != "running" or not sleeping(sbx, sid):
            raise RuntimeError(f"wake lost the sleep: {r.text[:500]}")
        return dt
    return op


def one_round(sbx, args, res):
    sid = sbx.create(sbx.http_nd)
    res.setdefault("userns", userns_of(sbx, sid))
    res.setdefault("exec", []).extend(timed_loop(
        "exec", args.un_n_exec, 20, args.phase_timeout, sbx.exec_op(sid, sbx.http_nd)))
    sbx.request("POST", f"/sandboxes/{sid}/execute",
                json={"code": "setsid sleep 100000 >/dev/null 2>&1 &"})
    deadline = time.monotonic() + 30
    while not sleeping(sbx, sid):  # sh forks, the child execs sleep a moment later
        if time.monotonic() > deadline:
            raise RuntimeError("the sleep did not start")
        time.sleep(0.05)
    res.setdefault("fork", []).extend(timed_loop(
        "fork", args.un_n_fork, 1, args.phase_timeout, fork_op(sbx, sid)))
    wakes = []
    res.setdefault("hibernate", []).extend(timed_loop(
        "hibernate/wake", args.un_n_hibernate, 0, args.phase_timeout,
        hibernate_wake_op(sbx, sid, wakes)))
    res.setdefault("wake", []).extend(wakes)
    sbx.delete(sid)
    res.setdefault("create", []).extend(timed_loop(
        "create", args.un_n_create, 2, args.phase_timeout, sbx.create_op(sbx.http_nd)))


def stats(v):
    s = sorted(v)
    return len(s), percentile(s, 50), percentile(s, 90)


def table(rows):
    lines = [f"{'measure':<18} {'tool':<26} {'user namespace':<22} {'n':>4} {'p50 ms':>8} "
             f"{'p90 ms':>8} {'on/off':>7}"]
    for metric in ("create", "exec", "fork", "hibernate", "wake"):
        p50_off = None
        for tool, ns, res in rows:
            v = res.get(metric, [])
            if not v:
                continue
            n, p50, p90 = stats(v)
            ratio = ""
            if tool.endswith("userns off"):
                p50_off = p50
            elif tool.endswith("userns on") and p50_off:
                ratio = f"{p50 / p50_off:.2f}"
            name = {"create": "create -> running", "exec": "exec echo hi"}.get(metric, metric)
            lines.append(f"{name:<18} {tool:<26} {ns:<22} {n:>4} {p50:>8.2f} {p90:>8.2f} "
                         f"{ratio:>7}")
    return "\n".join(lines)


def main():
    args = parser("userns", __doc__).parse_args()
    check_prerequisites(args)
    info = machine_info(args.bin)
    session = Session(args.total_timeout)
    results = {"off": {}, "on": {}}
    bare = {}
    failed = None
    try:
        build = registry._build_module()
        layout = build.ensure("busybox")
        os.makedirs(os.path.join(session.workdir, "registry"))
        reg = registry.start_registry(workdir=os.path.join(session.workdir, "registry"))
        session.on_cleanup("registry", reg.stop)
        registry.push_test_images(reg, names=("busybox",))
        sbxs = {mode: start_daemon(session, args, reg, f"un{mode}", mode, i)
                for i, mode in enumerate(("off", "on"))}
        for sbx in sbxs.values():
            sbx.delete(sbx.create(sbx.http_nd))  # pulls busybox, untimed
        runcs = {"off": Runc(layout, os.path.join(session.workdir, "runc-off"),
                             session.prefix + "-off"),
                 "on": RuncUserns(layout, os.path.join(session.workdir, "runc-on"),
                                  session.prefix + "-on")}
        for r in runcs.values():
            session.on_cleanup("runc", r.cleanup)
        pms = {}
        if not args.no_podman:
            pms = {"off": PodmanIdle(layout, session.prefix + "-pm"),
                   "on": PodmanUserns(layout, session.prefix + "-pmu")}
            for p in pms.values():
                session.on_cleanup("podman", p.cleanup)
                p.load()
        for r in range(args.un_rounds):
            order = ["off", "on"] if r % 2 == 0 else ["on", "off"]
            for mode in order:
                log(f"round {r + 1}/{args.un_rounds}: userns {mode}")
                one_round(sbxs[mode], args, results[mode])
                bare.setdefault(("runc", mode), []).extend(timed_loop(
                    f"runc {mode}", args.un_n_create, 1, args.phase_timeout,
                    runcs[mode].timed_create))
                if mode in pms:
                    bare.setdefault(("podman", mode), []).extend(timed_loop(
                        f"podman {mode}", args.un_n_create, 1, args.phase_timeout,
                        pms[mode].timed_create))
    except (Exception, KeyboardInterrupt, Interrupted) as e:
        failed = session.stopped(e, None)
    finally:
        session.close()
    print_header(info, session.t_start)
    rows = [(f"sandboxer userns {mode}", results[mode].get("userns", "?"), results[mode])
            for mode in ("off", "on")]
    for tool, cmd in (("runc", "runc run -d"), ("podman", "podman run -d")):
        for mode in ("off", "on"):
            if (tool, mode) in bare:
                rows.append((f"{cmd} userns {mode}",
                             f"uid {HOST_ID}+{SIZE}" if mode == "on" else "none",
                             {"create": bare[(tool, mode)]}))
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "rows": [
                {"tool": tool, "user_namespace": ns,
                 "samples_ms": {k: v for k, v in res.items() if isinstance(v, list)}}
                for tool, ns, res in rows]}, f, indent=1)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
