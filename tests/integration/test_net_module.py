"""The networking module (src/net/) on real network namespaces, driven through net_tool.

Everything here uses a test-only bridge, subnet and nft table, so it never touches a real
daemon's network. Traffic goes only to 127.0.0.0/8 and to addresses of namespaces and
links this file makes itself. 198.18.0.0/15 (the benchmarking range, which the module does
not treat as private) stands for "the outside world": a namespace the test makes, behind a
veth of its own. Every namespace, link, mount, nft table and process is removed even when a
test fails, and ip_forward is put back as it was.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import pytest

from conftest import host_exclusive, SLOW


@pytest.fixture(scope="module", autouse=True)
def one_run_at_a_time():
    """Its bridge, table, links and addresses are fixed: one test run at a time on the host
    (shared with test_egress and test_net_security, whose links use 198.18.0.0/15 too)."""
    with host_exclusive("host-net"):
        yield


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SANDBOXER_BIN", os.path.join(ROOT, "build", "sandboxer"))
NET_TOOL = os.environ.get(
    "SANDBOXER_NET_TOOL", os.path.join(os.path.dirname(BIN), "tests", "unit", "net_tool"))

BRIDGE, SUBNET, TABLE, GATEWAY = "sbxt0", "10.213.0.0/16", "sbxtest", "10.213.0.1"
OUT_IF = "sbxtout0"  # host end of the link to the "outside" namespace
OUT_HOST, OUT_NS = "198.18.0.1", "198.18.0.2"  # "the internet" (test-only, RFC 2544 range)
PRIV_HOST, PRIV_NS = "192.168.213.1", "192.168.213.2"  # a private network behind the host
PORT = 18080
PY = sys.executable
ENV = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
    pytest.mark.skipif(not os.access(NET_TOOL, os.X_OK), reason=f"no {NET_TOOL} (build first)"),
    pytest.mark.skipif(not (shutil.which("nft") and shutil.which("nsenter")
                            and shutil.which("busybox")),
                       reason="needs nft, nsenter and busybox"),
]

# A one-line-per-connection HTTP server: answers with the client's address (to see NAT).
SERVER = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(16)
print("ready", flush=True)
while True:
    c, a = s.accept()
    c.settimeout(2)
    try:
        c.recv(4096)
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + a[0].encode())
    except OSError:
        pass
    c.close()
"""

CLIENT = r"""
import sys, urllib.request
try:
    url = "http://%s:%s/" % (sys.argv[1], sys.argv[2])
    print(urllib.request.urlopen(url, timeout=float(sys.argv[3])).read().decode())
except Exception as e:
    print("ERR", e, file=sys.stderr)
    sys.exit(1)
"""


def sh(*argv, check=True, timeout=30):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=ENV)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr}{r.stdout}")
    return r


def nft_table():
    r = sh("nft", "list", "table", "inet", TABLE, check=False)
    return r.stdout if r.returncode == 0 else None


def set_elements(name, family="inet", table=TABLE):
    """The elements of a set (or a map's keys) as strings: "10.213.0.2", "10.213.0.2 . 1"."""
    r = sh("nft", "-j", "list", "set" if name != "owner" else "map", family, table, name,
           check=False)
    if r.returncode != 0:
        return []
    out = []
    for item in json.loads(r.stdout)["nftables"]:
        body = item.get("set") or item.get("map")
        for e in (body or {}).get("elem", []):
            if isinstance(e, list):  # a map: [key, value]
                e = e[0]
            if isinstance(e, dict) and "elem" in e:
                e = e["elem"]["val"]
            if isinstance(e, dict) and "concat" in e:
                e = " . ".join(str(x) for x in e["concat"])
            out.append(str(e))
    return out


def sandbox_elements(ip, table=TABLE):
    """Every element naming ip in the sets that make up a sandbox's rules."""
    found = []
    for family, name in (("inet", "owner"), ("inet", "member"), ("inet", "bound"),
                         ("inet", "egress_open"), ("arp", "bound")):
        found += [f"{family} {name} {e}" for e in set_elements(name, family, table)
                  if e == ip or e.startswith(ip + " ")]
    return found


def link_exists(name):
    return sh("ip", "link", "show", "dev", name, check=False).returncode == 0


class Net:
    """One test's view of the module: net_tool calls and processes inside namespaces."""

    def __init__(self, workdir):
        self.workdir = str(workdir)
        self.netns_dir = os.path.join(self.workdir, "netns")
        self.procs = []
        self.outside_pid = None

    def tool(self, *args, check=True):
        return sh(NET_TOOL, "-d", self.netns_dir, "-s", SUBNET, "-b", BRIDGE, "-t", TABLE,
                  *args, check=check)

    def setup(self, sid, owner, egress="none", ip=None):
        return json.loads(self.tool("setup", sid, str(owner), egress,
                                    *([ip] if ip else [])).stdout)

    def path(self, sid):
        return os.path.join(self.netns_dir, sid)

    def in_ns(self, sid):
        return ["nsenter", f"--net={self.path(sid)}"]

    def start(self, argv):
        """Start a server (argv prints "ready" once listening); killed at the end."""
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL, text=True, env=ENV)
        self.procs.append(p)
        deadline = time.monotonic() + 10 * SLOW
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if "ready" in line:
                return p
            if p.poll() is not None:
                break
        raise AssertionError(f"server {argv} did not start")

    def serve(self, sid, ip, port=PORT):
        return self.start(self.in_ns(sid) + [PY, "-u", "-c", SERVER, ip, str(port)])

    def serve_host(self, ip, port=PORT):
        return self.start([PY, "-u", "-c", SERVER, ip, str(port)])

    def get(self, sid, ip, port=PORT, timeout=1.5):
        """GET http://ip:port/ from inside sid's netns: the body, or None if unreachable."""
        r = sh(*self.in_ns(sid), PY, "-c", CLIENT, ip, str(port), str(timeout), check=False,
               timeout=timeout + 10)
        return r.stdout.strip() if r.returncode == 0 else None

    def ping(self, sid, ip):
        r = sh(*self.in_ns(sid), "busybox", "ping", "-c", "1", "-W", "1", ip, check=False)
        return r.returncode == 0

    def make_outside(self):
        """A namespace standing for the world: 198.18.0.2 (public) and 192.168.213.2 (a
        private network), both behind the host's veth OUT_IF."""
        p = self.start(["unshare", "--net", PY, "-u", "-c", SERVER, "0.0.0.0", str(PORT)])
        self.outside_pid = p.pid
        pid = str(p.pid)
        sh("ip", "link", "add", OUT_IF, "type", "veth", "peer", "name", "eth0", "netns", pid)
        sh("ip", "addr", "add", f"{OUT_HOST}/24", "dev", OUT_IF)
        sh("ip", "addr", "add", f"{PRIV_HOST}/24", "dev", OUT_IF)
        sh("ip", "link", "set", OUT_IF, "up")
        for cmd in (["addr", "add", f"{OUT_NS}/24", "dev", "eth0"],
                    ["addr", "add", f"{PRIV_NS}/24", "dev", "eth0"],
                    ["link", "set", "eth0", "up"], ["link", "set", "lo", "up"]):
            sh("nsenter", "-t", pid, "-n", "ip", *cmd)

    def cleanup(self):
        for p in self.procs:
            p.kill()
            p.wait(timeout=10)
        self.tool("destroy", check=False)
        purge(self.netns_dir)


def purge(netns_dir=None):
    """Remove whatever a crashed run may have left: the tables, the links, the mounts."""
    sh("nft", "delete", "table", "inet", TABLE, check=False)
    sh("nft", "delete", "table", "arp", TABLE, check=False)
    for name in (OUT_IF, BRIDGE):
        sh("ip", "link", "del", name, check=False)
    if netns_dir and os.path.isdir(netns_dir):
        sh("umount", "--recursive", "--lazy", netns_dir, check=False)


def routed_elsewhere(ip):
    """True if the host already routes ip somewhere other than its default route."""
    r = sh("ip", "route", "get", ip, check=False)
    return r.returncode != 0 or (" via " not in r.stdout and "dev lo" not in r.stdout)


@pytest.fixture
def net(tmp_path):
    purge()
    with open("/proc/sys/net/ipv4/ip_forward") as f:
        forward = f.read().strip()
    n = Net(tmp_path)
    try:
        yield n
    finally:
        try:
            n.cleanup()
        finally:
            with open("/proc/sys/net/ipv4/ip_forward", "w") as f:
                f.write(forward)


def test_same_owner_sandboxes_reach_each_other_other_owners_do_not(net):
    a1, a2, b1 = net.setup("a1", 1), net.setup("a2", 1), net.setup("b1", 2)
    assert len({a1["ip"], a2["ip"], b1["ip"]}) == 3
    assert a1["gateway"] == GATEWAY and a1["prefix"] == 16
    net.serve("a2", a2["ip"])
    net.serve("b1", b1["ip"])
    net.serve("a1", a1["ip"])

    assert net.ping("a1", a2["ip"]) and net.ping("a2", a1["ip"])
    assert net.get("a1", a2["ip"]) == a1["ip"]  # no NAT between sandboxes
    assert net.get("a2", a1["ip"]) == a2["ip"]

    assert not net.ping("b1", a2["ip"]) and not net.ping("a1", b1["ip"])
    assert net.get("b1", a2["ip"]) is None
    assert net.get("a1", b1["ip"]) is None
    assert net.get("b1", a1["ip"]) is None


def test_sandbox_cannot_reach_the_host(net):
    a1 = net.setup("a1", 1, "open")
    net.serve_host("127.0.0.1")
    net.serve_host(GATEWAY, PORT + 1)
    # Controls: both servers answer the host itself.
    assert sh(PY, "-c", CLIENT, "127.0.0.1", str(PORT), "2").returncode == 0
    assert sh(PY, "-c", CLIENT, GATEWAY, str(PORT + 1), "2").returncode == 0

    assert net.get("a1", "127.0.0.1") is None  # its own loopback: nothing listens
    assert net.get("a1", GATEWAY, PORT + 1) is None
    assert net.get("a1", GATEWAY, PORT) is None
    assert not net.ping("a1", GATEWAY)

    # The seam for the daemon's proxy ports: a port in host_ports opens, on the gateway only.
    sh("nft", "add", "element", "inet", TABLE, "host_ports", f"{{ {PORT + 1} }}")
    assert net.get("a1", GATEWAY, PORT + 1) == a1["ip"]
    sh("nft", "delete", "element", "inet", TABLE, "host_ports", f"{{ {PORT + 1} }}")
    assert net.get("a1", GATEWAY, PORT + 1) is None


def test_open_egress_reaches_the_outside_none_does_not(net):
    for ip in (OUT_NS, PRIV_NS):
        if routed_elsewhere(ip):
            pytest.skip(f"{ip} is already routed on this host")
    net.make_outside()
    op = net.setup("op", 1, "open")
    no = net.setup("no", 1, "none")
    with open("/proc/sys/net/ipv4/ip_forward") as f:
        assert f.read().strip() == "1"
    # Masqueraded: the outside sees the host's address on that link.
    assert net.get("op", OUT_NS) == OUT_HOST
    assert net.ping("op", OUT_NS)
    assert net.get("no", OUT_NS) is None
    assert not net.ping("no", OUT_NS)
    # Private ranges stay closed even with open egress, and so do host addresses.
    assert net.get("op", PRIV_NS) is None
    net.serve_host(OUT_HOST, PORT + 2)
    assert net.get("op", OUT_HOST, PORT + 2) is None
    # Egress changes on a second setup of the same sandbox, in both directions.
    assert net.setup("no", 1, "open")["ip"] == no["ip"]
    assert net.get("no", OUT_NS) == OUT_HOST
    assert net.setup("op", 1, "none")["ip"] == op["ip"]
    assert net.get("op", OUT_NS) is None


def test_teardown_leaves_no_veth_rule_or_netns(net):
    a1 = net.setup("a1", 1, "open")
    keep = net.setup("keep", 1)
    assert link_exists(a1["host_if"]) and os.path.exists(a1["netns_path"])
    assert a1["ip"] in nft_table()
    net.tool("teardown", "a1")
    assert not link_exists(a1["host_if"])
    assert not os.path.exists(a1["netns_path"])
    table = nft_table()
    assert sandbox_elements(a1["ip"]) == [] and '"a1"' not in table and a1["mac"] not in table
    assert a1["ip"] in set_elements("quarantine")  # not handed out again for a while
    assert len(sandbox_elements(keep["ip"])) == 4
    net.tool("teardown", "a1")  # idempotent
    net.tool("reserve", "other", a1["ip"])  # the address is free again


def test_setup_is_idempotent_and_addresses_survive_a_restart(net):
    # Each net_tool call is a fresh process: the allocation is read back from the table.
    a1 = net.setup("a1", 1)
    assert net.setup("a1", 1) == a1
    a2 = net.setup("a2", 1)
    assert a2["ip"] != a1["ip"]
    assert net.tool("reserve", "a3", a1["ip"], check=False).returncode != 0
    assert net.setup("a1", 1, ip=a1["ip"]) == a1
    assert net.tool("setup", "a1", "1", "none", a2["ip"], check=False).returncode != 0
    # A lost veth is made again; connectivity comes back.
    sh("ip", "link", "del", a1["host_if"])
    assert net.setup("a1", 1) == a1
    net.serve("a2", a2["ip"])
    assert net.get("a1", a2["ip"]) == a1["ip"]
    # A restarted daemon that knows the address from its store gives it back.
    net.tool("teardown", "a1")
    assert net.setup("a1", 1, ip=a1["ip"])["ip"] == a1["ip"]


def test_reconcile_removes_strays(net):
    s1, s2, s3 = net.setup("s1", 1), net.setup("s2", 1), net.setup("s3", 2)
    # A port on the bridge that no sandbox owns, and a netns file with nothing else.
    sh("ip", "link", "add", "sbxtstray0", "type", "veth", "peer", "name", "sbxtstray1")
    sh("ip", "link", "set", "sbxtstray0", "master", BRIDGE)
    with open(os.path.join(net.netns_dir, "lonely"), "w"):
        pass
    removed = int(net.tool("reconcile", "s2").stdout)
    assert removed == 4  # s1, s3, lonely, the stray port
    assert not link_exists("sbxtstray0") and not link_exists("sbxtstray1")
    assert sorted(os.listdir(net.netns_dir)) == ["s2"]
    for gone in (s1, s3):
        assert not link_exists(gone["host_if"]) and sandbox_elements(gone["ip"]) == []
    assert link_exists(s2["host_if"]) and sandbox_elements(s2["ip"])
    assert int(net.tool("reconcile", "s2").stdout) == 0


def test_spoofed_source_address_or_mac_is_dropped(net):
    a1, a2, _ = net.setup("a1", 1), net.setup("a2", 1), net.setup("b1", 2)
    net.serve("a2", a2["ip"])
    # b1 (another owner) claims a1's address as its source.
    sh(*net.in_ns("b1"), "ip", "addr", "add", f"{a1['ip']}/32", "dev", "eth0")
    r = sh(*net.in_ns("b1"), "busybox", "ping", "-c", "1", "-W", "1", "-I", a1["ip"], a2["ip"],
           check=False)
    assert r.returncode != 0
    # a1 with another MAC: the locked bridge port drops its frames.
    assert net.get("a1", a2["ip"]) == a1["ip"]
    sh(*net.in_ns("a1"), "ip", "link", "set", "eth0", "address", "02:53:00:00:00:99")
    sh(*net.in_ns("a1"), "ip", "neigh", "flush", "all")
    assert net.get("a1", a2["ip"]) is None


def test_destroy_removes_table_bridge_and_mounts(net):
    a1 = net.setup("a1", 1, "open")
    net.tool("destroy")
    assert nft_table() is None
    assert sh("nft", "list", "table", "arp", TABLE, check=False).returncode != 0
    assert not link_exists(BRIDGE) and not link_exists(a1["host_if"])
    assert os.listdir(net.netns_dir) == []
    mounts = open("/proc/self/mountinfo").read()
    assert net.netns_dir not in mounts


def host_nameservers():
    def read(path):
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            return []
        found = re.findall(r"^\s*nameserver\s+(\d+\.\d+\.\d+\.\d+)\s*$", text, re.M)
        return [ip for ip in found if not ip.startswith("127.")][:3]
    return read("/etc/resolv.conf") or read("/run/systemd/resolve/resolv.conf")


def test_etc_files(net, tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    net.tool("etc", str(etc), "box1", "10.213.0.9", "none")
    assert (etc / "hostname").read_text() == "box1\n"
    hosts = (etc / "hosts").read_text()
    assert "127.0.0.1\tlocalhost\n" in hosts and "10.213.0.9\tbox1\n" in hosts
    assert "nameserver" not in (etc / "resolv.conf").read_text().replace("# no nameserver", "")
    net.tool("etc", str(etc), "box1", "10.213.0.9", "open")
    servers = re.findall(r"^nameserver (\S+)$", (etc / "resolv.conf").read_text(), re.M)
    assert servers == host_nameservers()
    assert net.tool("etc", str(etc), "bad host", check=False).returncode != 0
    # A symlink where a file goes is replaced, never followed.
    (etc / "hosts").unlink()
    (etc / "hosts").symlink_to(tmp_path / "victim")
    net.tool("etc", str(etc), "box1")
    assert not (tmp_path / "victim").exists() and not (etc / "hosts").is_symlink()


# UDP for the address-reuse test. ECHO answers every datagram on ip:9999; TALK sends to
# target:9999 from port 40000 every 50 ms and prints who answered what (once per kind: the
# pipe is read only at the end); PEER (the next holder of the address) sends to target:40000
# from its port 9999 and prints what it receives, likewise.
UDP_ECHO = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 9999))
print("ready", flush=True)
while True:
    data, addr = s.recvfrom(2048)
    s.sendto(b"echo", addr)
"""

UDP_TALK = r"""
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 40000))
s.settimeout(0.05)
print("ready", flush=True)
seen = set()
while True:
    s.sendto(b"talk", (sys.argv[1], 9999))
    try:
        data, addr = s.recvfrom(2048)
        if (addr[0], data) not in seen:
            seen.add((addr[0], data))
            print("reply", addr[0], data.decode(), flush=True)
    except socket.timeout:
        continue
    time.sleep(0.05)
"""

UDP_PEER = r"""
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 9999))
s.settimeout(0.05)
print("ready", flush=True)
seen = set()
while True:
    s.sendto(b"from-next-holder", (sys.argv[2], 40000))
    try:
        data, addr = s.recvfrom(2048)
        if (addr[0], data) not in seen:
            seen.add((addr[0], data))
            print("got", addr[0], data.decode(), flush=True)
    except socket.timeout:
        continue
    time.sleep(0.05)
"""


def conntrack_entries(ip):
    with open("/proc/net/nf_conntrack") as f:
        return [line for line in f if re.search(rf"(src|dst)={re.escape(ip)}\s", line)]


def wait_for(cond, what, timeout=10):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def flow_entries(ip):
    """The conntrack entries of the talker's flow to ip (a1:40000 -> ip:9999)."""
    return [e for e in conntrack_entries(ip)
            if re.search(rf"dst={re.escape(ip)} sport=40000 dport=9999\s", e)]


def next_line(p, timeout):
    """The next line p prints (its pipe's reader may hold it already), within timeout."""
    out = []
    t = threading.Thread(target=lambda: out.append(p.stdout.readline()), daemon=True)
    t.start()
    t.join(timeout)
    assert out, f"no line from {p.args} in {timeout} s"
    return out[0]


def output_of(p):
    p.kill()
    out, _ = p.communicate(timeout=10)
    return out


def test_a_reused_address_inherits_no_flow(net):
    """Owner 1's UDP flow between a1 and a2 is established; a2 goes and another owner's b1
    gets its address at once (as a known address would after a restart): nothing of the old
    flow reaches b1, and nothing b1 sends on it reaches a1."""
    a1, a2 = net.setup("a1", 1), net.setup("a2", 1)
    echo = net.start(net.in_ns("a2") + [PY, "-u", "-c", UDP_ECHO, a2["ip"]])
    talk = net.start(net.in_ns("a1") + [PY, "-u", "-c", UDP_TALK, a2["ip"]])
    # a1 hears a2 (its first reply), and the host tracks this flow (a1:40000 -> a2:9999)
    heard = next_line(talk, 10 * SLOW)
    assert heard.startswith(f"reply {a2['ip']} echo"), heard
    wait_for(lambda: [e for e in flow_entries(a2["ip"]) if "ASSURED" in e],
             f"the flow is tracked both ways: {conntrack_entries(a2['ip'])}")
    echo.kill()
    net.tool("teardown", "a2")
    # The flow both ways is gone. a1's talker goes on sending to the address, so entries for
    # it come back at once (a1 still has a2's MAC): new ones, unanswered, never ASSURED.
    wait_for(lambda: not [e for e in flow_entries(a2["ip"]) if "ASSURED" in e],
             f"teardown flushes the address's flows: {conntrack_entries(a2['ip'])}", timeout=10)
    assert a2["ip"] in set_elements("quarantine")
    b1 = net.setup("b1", 2, ip=a2["ip"])
    peer = net.start(net.in_ns("b1") + [PY, "-u", "-c", UDP_PEER, b1["ip"], a1["ip"]])
    time.sleep(2)  # 40 datagrams each way
    got, talked = output_of(peer), output_of(talk)
    assert "got" not in got, got
    assert "from-next-holder" not in talked, talked


def test_the_cursor_and_quarantine_survive_a_restart(net):
    a1 = net.setup("a1", 1)
    a2 = net.setup("a2", 1)
    net.tool("teardown", "a2")
    # each net_tool call is a fresh process, as a restarted daemon
    b1 = net.setup("b1", 2)
    assert b1["ip"] not in (a1["ip"], a2["ip"])
    assert set_elements("cursor") and a2["ip"] in set_elements("quarantine")
