"""What a daemon under test holds on the host, read from /proc, /sys and nft, for the soak
benchmark (bench_soak.py): its own fds and threads, the mounts under its state dir, netns
files, veths on its bridge, cgroup dirs, the elements of its nftables table, checkpoint
dirs, and the shims, runc, CRIU and other processes that belong to it. Each check compares
what is there with what the live sandboxes should have (an Expect) and returns problems as
strings. Standard library only; read-only (it never changes what it looks at)."""
import collections
import glob
import json
import os
import re

from common import CKPT_TMP, run

HEX64 = re.compile(r"\b[0-9a-f]{64}\b")
IFNAME = re.compile(r"event=net\.sandbox_setup .*?sandbox=([0-9a-f]{64}) .*?if=(\S+)")
IPV4 = re.compile(r"^\d+\.\d+\.\d+\.\d+$")
QUARANTINE_S = 300  # src/net/net.c: a freed address stays out of the pool this long
TCP_STATES = {"01": "established", "08": "close_wait", "0A": "listen"}


class Expect:
    """What the host should hold for the daemon's sandboxes as GET /sandboxes lists them."""

    def __init__(self, listed, snapshots):
        self.status = {s["id"]: s["status"] for s in listed}
        self.ip = {s["id"]: s.get("ip_address") for s in listed}
        self.live = {i for i, st in self.status.items() if st in ("running", "paused")}
        self.hibernated = {i for i, st in self.status.items() if st == "hibernated"}
        # everything not deleted keeps its network, its dirs and its live entry
        self.kept = {i for i, st in self.status.items() if st != "terminated"}
        self.snapshots = snapshots

    @classmethod
    def nothing(cls):
        return cls([], 0)


def _read(path, mode="r"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return None


class Probe:
    """The resources of one daemon (pid, state dir, bridge, nft table), and the baseline of
    its own fds and threads taken by baseline() on an otherwise empty daemon."""

    def __init__(self, pid, state_dir, bridge, table, log_path):
        self.pid = pid
        self.state_dir = state_dir.rstrip("/")
        self.bridge = bridge
        self.table = table
        self.log_path = log_path
        self.base_fds = None
        self.base_threads = None
        self.base_conns = None
        self.base_nft = None
        self.base_mounts = None
        self._log_pos = 0
        self.ours = set()  # every sandbox id the daemon's log ever named
        self.ifnames = {}  # id -> host veth name, from the log

    # ---- the daemon's log: which ids are ours, and their veth names

    def read_log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                f.seek(self._log_pos)
                text = f.read()
                self._log_pos = f.tell()
        except OSError:
            return
        self.ours.update(HEX64.findall(text))
        self.ifnames.update(IFNAME.findall(text))

    # ---- the daemon's own fds and threads

    def _sockets(self):
        """socket inode -> kind, from the daemon's network namespace's tables."""
        kinds = {}
        for name in ("tcp", "tcp6"):
            for line in (_read(f"/proc/{self.pid}/net/{name}") or "").splitlines()[1:]:
                f = line.split()
                if len(f) > 9:
                    kinds[f[9]] = "tcp " + TCP_STATES.get(f[3], "state " + f[3])
        for line in (_read(f"/proc/{self.pid}/net/unix") or "").splitlines()[1:]:
            f = line.split()
            if len(f) > 6:
                kinds[f[6]] = "unix" + (" listen" if f[5] == "01" and f[3] == "00010000" else "")
        for line in (_read(f"/proc/{self.pid}/net/netlink") or "").splitlines()[1:]:
            f = line.split()
            if f:
                kinds[f[-1]] = "netlink"
        return kinds

    def fds(self):
        """A Counter of the daemon's fds by kind: 'pidfd', 'file PATH', 'pipe', 'anon NAME',
        'tcp established' ... ('socket ?' for a socket found in no table)."""
        out = collections.Counter()
        socks = None
        for fd in os.listdir(f"/proc/{self.pid}/fd"):
            try:
                t = os.readlink(f"/proc/{self.pid}/fd/{fd}")
            except OSError:
                continue
            if t == "anon_inode:[pidfd]":
                out["pidfd"] += 1
            elif t.startswith("anon_inode:"):
                out["anon " + t[11:]] += 1
            elif t.startswith("pipe:"):
                out["pipe"] += 1
            elif t.startswith("socket:["):
                socks = socks if socks is not None else self._sockets()
                out[socks.get(t[8:-1], "socket ?")] += 1
            else:
                out["file " + t] += 1
        return out

    def threads(self):
        names = collections.Counter()
        for t in os.listdir(f"/proc/{self.pid}/task"):
            names[(_read(f"/proc/{self.pid}/task/{t}/comm") or "?").strip()] += 1
        return names

    def rss_kb(self):
        m = re.search(r"^VmRSS:\s+(\d+)", _read(f"/proc/{self.pid}/status") or "", re.M)
        return int(m.group(1)) if m else 0

    def baseline(self):
        """The daemon's fds, threads, nft sets and mounts with only the soak's reference
        sandbox (and one keep-alive API connection): what it must come back to."""
        fds = self.fds()
        self.base_conns = fds["tcp established"]
        self.base_fds = fds - collections.Counter({"pidfd": fds["pidfd"],
                                                   "tcp established": self.base_conns})
        self.base_threads = sum(self.threads().values())
        self.base_nft = self.nft_sets()

    def check_fds_threads(self, exp):
        """fds: pidfds (one per live entry: at least the running and paused sandboxes, at
        most every sandbox not deleted), API connections, and the rest exactly as at the
        baseline; threads: the baseline's plus one per extra API connection."""
        problems = []
        fds = self.fds()
        pidfds, conns = fds.pop("pidfd", 0), fds.pop("tcp established", 0)
        if not len(exp.live) <= pidfds <= len(exp.kept):
            problems.append(f"fds: {pidfds} pidfds for {len(exp.live)} running/paused and "
                            f"{len(exp.kept)} kept sandboxes")
        if conns > self.base_conns + 3:
            problems.append(f"fds: {conns} established API connections (baseline "
                            f"{self.base_conns}; the soak uses one)")
        extra = fds - self.base_fds
        if extra:
            problems.append("fds: more than at the baseline: " + ", ".join(
                f"{k} +{v}" for k, v in sorted(extra.items())))
        names = self.threads()
        n = sum(names.values())
        if n > self.base_threads + max(0, conns - self.base_conns):
            problems.append(f"threads: {n}, baseline {self.base_threads} with "
                            f"{self.base_conns} connections, now {conns} connections "
                            f"({dict(names)})")
        return problems, {"fds": sum(fds.values()) + pidfds + conns, "pidfds": pidfds,
                          "threads": n}

    # ---- mounts, netns files, dirs, checkpoints

    def mounts(self):
        out = []
        for line in (_read("/proc/self/mounts") or "").splitlines():
            mp = line.split()[1].replace("\\040", " ")
            if mp.startswith(self.state_dir + "/"):
                out.append(mp[len(self.state_dir) + 1:])
        return out

    def check_mounts(self, exp):
        """Under the state dir: the netns dir, a netns file per kept sandbox, and a rootfs
        overlay and a socket-dir tmpfs per running or paused one; nothing else."""
        problems = []
        want = collections.Counter(["netns"] + [f"netns/{i}" for i in exp.kept] +
                                   [f"sandboxes/{i}/bundle/rootfs" for i in exp.live] +
                                   [f"sandboxes/{i}/sock" for i in exp.live])
        have = collections.Counter(self.mounts())
        extra, missing = have - want, want - have
        if extra:
            problems.append(f"mounts: {sum(extra.values())} left over: " +
                            ", ".join(sorted(self._short(m) for m in extra)))
        if missing:
            problems.append(f"mounts: {sum(missing.values())} missing: " +
                            ", ".join(sorted(self._short(m) for m in missing)))
        return problems, {"mounts": sum(have.values())}

    @staticmethod
    def _short(path):
        return HEX64.sub(lambda m: m.group(0)[:12], path)

    def check_dirs(self, exp):
        """netns files = kept sandboxes; sandbox dirs = kept; checkpoint/ = hibernated;
        no fork checkpoint of ours in /dev/shm; snapshot dirs = the listed snapshots."""
        problems = []
        netns = set(os.listdir(os.path.join(self.state_dir, "netns")))
        self._compare(problems, "netns files", netns, exp.kept)
        sdir = os.path.join(self.state_dir, "sandboxes")
        dirs = set(os.listdir(sdir)) if os.path.isdir(sdir) else set()
        self._compare(problems, "sandbox dirs", dirs, exp.kept)
        ckpts = {i for i in dirs if os.path.isdir(os.path.join(sdir, i, "checkpoint"))}
        self._compare(problems, "hibernation checkpoints", ckpts, exp.hibernated)
        kept = {i for i in dirs if os.path.isdir(os.path.join(sdir, i, "checkpoint.kept"))}
        if kept - exp.kept:
            problems.append(f"checkpoint.kept of deleted sandboxes: {self._ids(kept - exp.kept)}")
        self.read_log()
        tmp = set(os.listdir(CKPT_TMP)) if os.path.isdir(CKPT_TMP) else set()
        forks = tmp & self.ours
        if forks:
            problems.append(f"fork checkpoints left in {CKPT_TMP}: {self._ids(forks)}")
        snaps = os.path.join(self.state_dir, "snapshots")
        nsnap = len(os.listdir(snaps)) if os.path.isdir(snaps) else 0
        if nsnap != exp.snapshots:
            problems.append(f"snapshot dirs: {nsnap} for {exp.snapshots} snapshots")
        return problems, {"netns": len(netns), "ckpt": len(ckpts) + len(forks),
                          "kept_ckpt": len(kept)}

    @staticmethod
    def _ids(ids):
        ids = sorted(i[:12] for i in ids)
        return ", ".join(ids[:8]) + (f" … ({len(ids)})" if len(ids) > 8 else "")

    def _compare(self, problems, what, have, want):
        if have - want:
            problems.append(f"{what}: left over for {self._ids(have - want)}")
        if want - have:
            problems.append(f"{what}: missing for {self._ids(want - have)}")

    # ---- network: veths, nft elements

    def check_net(self, exp):
        """Host veths (bridge ports, and any link named after one of our sandboxes) = kept
        sandboxes; the owner/member/bound set elements = the kept sandboxes' addresses, the
        other sets as at the baseline."""
        problems = []
        self.read_log()
        ports = set(os.listdir(f"/sys/class/net/{self.bridge}/brif")) \
            if os.path.isdir(f"/sys/class/net/{self.bridge}/brif") else set()
        links = set(os.listdir("/sys/class/net"))
        by_name = {v: k for k, v in self.ifnames.items()}
        want = {self.ifnames[i] for i in exp.kept if i in self.ifnames}
        ours = {n for n in links if n in by_name} | ports
        if ours - want:
            problems.append("veths left over: " + ", ".join(
                f"{n} ({by_name.get(n, '?')[:12]})" for n in sorted(ours - want)))
        if want - ports:
            problems.append("veths missing from the bridge: " + ", ".join(
                f"{n} ({by_name.get(n, '?')[:12]})" for n in sorted(want - ports)))
        sets = self.nft_sets()
        ips = collections.Counter(ip for i, ip in exp.ip.items() if i in exp.kept and ip)
        nelem = 0
        for name, elems in sets.items():
            nelem += len(elems)
            have = collections.Counter(elems)
            if name == "quarantine":
                # freed addresses, each with a kernel-side timeout (net.c QUARANTINE_S): they
                # come and go by design; bounded by the timeout, never a kept sandbox's address
                stale = [e for e in self.quarantine if not 0 < e[1] <= QUARANTINE_S]
                if stale:
                    problems.append(f"nft set quarantine: elements without a timeout of at "
                                    f"most {QUARANTINE_S} s: {stale[:8]}")
                if set(elems) & set(ips):
                    problems.append("nft set quarantine: holds addresses in use: "
                                    f"{sorted(set(elems) & set(ips))}")
                continue
            if name == "cursor":  # the pool's next-fit cursor, kept across restarts
                if len(elems) != 1:
                    problems.append(f"nft set cursor: {len(elems)} elements, not 1")
                continue
            if name in ("owner", "member", "bound"):
                want_set = ips
            else:
                want_set = collections.Counter(self.base_nft.get(name, []))
            if have - want_set:
                problems.append(f"nft set {name}: left over {sorted((have - want_set).elements())}")
            if want_set - have:
                problems.append(f"nft set {name}: missing {sorted((want_set - have).elements())}")
        return problems, {"veths": len(ports), "nft": nelem}

    def nft_sets(self):
        """{set or map name: [the address (or first value) of each element]}."""
        r = run(["nft", "-j", "list", "table", "inet", self.table], check=False, text=True)
        out = {}
        self.quarantine = []  # (address, expires in s) of the quarantine set
        if r.returncode != 0:
            return out
        for item in json.loads(r.stdout).get("nftables", []):
            body = item.get("set") or item.get("map")
            if body:
                out[body["name"]] = [self._elem_key(e) for e in body.get("elem", [])]
                if body["name"] == "quarantine":
                    self.quarantine = [
                        (self._elem_key(e), (e.get("elem") or {}).get("expires", 0)
                         if isinstance(e, dict) else 0) for e in body.get("elem", [])]
        return out

    @classmethod
    def _elem_key(cls, e):
        """The first IPv4 address inside an element (a map's key, a concatenation's first
        part, an element with a comment), else its JSON."""
        found = []

        def walk(x):
            if isinstance(x, str) and IPV4.match(x):
                found.append(x)
            elif isinstance(x, dict):
                for k in ("elem", "val", "concat", "prefix", "addr", "range"):
                    if k in x:
                        walk(x[k])
            elif isinstance(x, list):
                for y in x:
                    walk(y)
        walk(e)
        return found[0] if found else json.dumps(e, sort_keys=True)

    # ---- cgroups

    def check_cgroups(self, exp):
        """A dir sandboxer/<id> in any hierarchy for each running or paused sandbox of ours
        and none for another of ours (other daemons' ids are not looked at)."""
        problems = []
        self.read_log()
        found = collections.defaultdict(list)
        for d in glob.glob("/sys/fs/cgroup/*/sandboxer/*/") + \
                glob.glob("/sys/fs/cgroup/sandboxer/*/"):
            sid = os.path.basename(d.rstrip("/"))
            if sid in self.ours:
                hierarchy = d.split("/")[4]
                found[sid].append("v2" if hierarchy == "sandboxer" else hierarchy)
        have = set(found)
        if have - exp.live:
            problems.append("cgroups left over: " + ", ".join(
                f"{i[:12]} ({exp.status.get(i, 'unknown')}; {','.join(sorted(found[i]))})"
                for i in sorted(have - exp.live)))
        if exp.live - have:
            problems.append(f"cgroups missing for {self._ids(exp.live - have)}")
        return problems, {"cgroups": len(have)}

    # ---- processes

    def _procs(self):
        procs = {}
        for d in glob.glob("/proc/[0-9]*"):
            pid = int(d[6:])
            stat = _read(d + "/stat")
            cmd = _read(d + "/cmdline", "rb")
            if not stat or cmd is None:
                continue
            head, rest = stat.rsplit(")", 1)
            fields = rest.split()
            procs[pid] = {"comm": head.split("(", 1)[1], "state": fields[0],
                          "ppid": int(fields[1]),
                          "argv": [a.decode(errors="replace") for a in cmd.split(b"\0") if a]}
        return procs

    def check_processes(self, exp):
        """One shim and one runc (run or restore, in the foreground) per running or paused
        sandbox and nothing else of ours: no other runc (exec, checkpoint, kill...), no CRIU,
        no other child or zombie of the daemon, no process in the cgroup of a sandbox that
        is not running; `runc list` = running and paused sandboxes."""
        problems = []
        self.read_log()
        procs = self._procs()
        root = os.path.join(self.state_dir, "runc")
        shims, runcs, other = {}, collections.Counter(), []
        mine = {self.pid}
        for pid, p in procs.items():
            a = p["argv"]
            if len(a) > 1 and a[1] == "internal-shim" and self.state_dir + "/" in " ".join(a):
                sid = a[a.index("--id") + 1] if "--id" in a else "?"
                shims[sid] = pid
                mine.add(pid)
            elif a and os.path.basename(a[0]) == "runc" and "--root" in a and \
                    a[a.index("--root") + 1] == root:
                sub = next((x for x in a[a.index("--root") + 2:] if not x.startswith("-")
                            and not x.startswith("/")), "?")
                runcs[sub] += 1
                mine.add(pid)
                if sub not in ("run", "restore"):
                    other.append(f"runc {sub} (pid {pid})")
        self._compare(problems, "shims", set(shims), exp.live)
        if runcs["run"] + runcs["restore"] != len(exp.live):
            problems.append(f"runc: {runcs['run']} run + {runcs['restore']} restore for "
                            f"{len(exp.live)} running/paused sandboxes")
        children = collections.defaultdict(list)
        for pid, p in procs.items():
            if p["ppid"] == self.pid and pid not in shims.values():
                what = "zombie children" if p["state"] == "Z" else "children"
                children[f"{what} of the daemon ({p['comm']})"].append(pid)
            elif p["comm"] == "criu" and self._descends(procs, pid, mine):
                children["criu"].append(pid)
        for what, pids in sorted(children.items()):
            pids.sort()
            other.append(f"{len(pids)} {what}: pids {', '.join(map(str, pids[:8]))}"
                         f"{' …' if len(pids) > 8 else ''}")
        stray = collections.Counter()
        for pid in procs:
            cg = _read(f"/proc/{pid}/cgroup") or ""
            for sid in set(re.findall(r"/sandboxer/([0-9a-f]{64})", cg)):
                if sid in self.ours and sid not in exp.live:
                    stray[sid] += 1
        if stray:
            other.append("processes in the cgroups of sandboxes that do not run: " + ", ".join(
                f"{n} in {i[:12]} ({exp.status.get(i, 'unknown')})" for i, n in stray.items()))
        listed = set(run(["runc", "--root", root, "list", "-q"], check=False,
                         text=True).stdout.split()) if os.path.isdir(root) else set()
        self._compare(problems, "runc containers", listed, exp.live)
        problems += ["processes: " + o for o in other]
        return problems, {"shims": len(shims), "runc": sum(runcs.values())}

    @staticmethod
    def _descends(procs, pid, roots):
        for _ in range(64):
            p = procs.get(pid)
            if not p:
                return False
            if p["ppid"] in roots:
                return True
            pid = p["ppid"]
        return False

    # ---- all of it

    CHECKS = ("check_fds_threads", "check_mounts", "check_dirs", "check_net", "check_cgroups",
              "check_processes")

    def check(self, exp):
        """(problems, counts) of every check against exp."""
        problems, counts = [], {}
        for name in self.CHECKS:
            p, c = getattr(self, name)(exp)
            problems += p
            counts.update(c)
        counts["rss_kb"] = self.rss_kb()
        return problems, counts
