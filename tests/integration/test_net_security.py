"""Attacks on the network layer between tenants (issue 11, findings 2, 3, 4 and 10), each
reproduced through the daemon, as a user with root in their own sandboxes would try it:

- ARP spoofing: a sandbox with raw sockets claims another owner's address; the host's
  neighbour entry must not move and the victim's traffic must not reach the attacker.
- NET_RAW is not given by default (ping still works); `net_raw: true` grants it, checked,
  and forks, snapshot starts and wakes keep it.
- Address reuse: a freed address is not handed out again after a restart, its tracked flows
  are gone, and it waits in quarantine.
- The egress proxy never connects to the host's own addresses, even public ones.
- One sandbox cannot take every connection of the egress proxy.

Traffic goes only to 127.0.0.0/8, to the sandboxes' bridge, to a dummy link this file adds
(198.18.77.1, removed afterwards) and to the "outside" namespace of test_egress.py."""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import httpx
import pytest

from conftest import Daemon, Sandboxes, host_exclusive, SLOW
from test_egress import OUT_HOST, PORT, gateway, get_via, outside, via_proxy  # noqa: F401
from test_fork import fork
from test_network import HTTPD, fetch, wait_http


@pytest.fixture(scope="module", autouse=True)
def one_run_at_a_time():
    """The "outside" namespace and links have fixed names and addresses: one test run at a
    time on the host (shared with test_net_module, whose addresses are in 198.18.0.0/15 too)."""
    with host_exclusive("host-net"):
        yield


NET_RAW_BIT = 1 << 13


def sh(*argv, check=True):
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=check)


def mac_of(ip):
    return "02:53:" + ":".join(f"{int(b):02x}" for b in ip.split("."))


def cap_eff(c, sid):
    out = c.sh(sid, "grep CapEff /proc/self/status")["stdout"]
    return int(out.split()[1], 16)


def host_neigh(bridge, ip):
    """The host's neighbour entry for ip on the bridge: "lladdr ... STATE", or ""."""
    return sh("ip", "neigh", "show", ip, "dev", bridge).stdout.strip()


def wait_file(c, sid, path, pattern, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        out = c.sh(sid, f"cat {path} 2>/dev/null")["stdout"]
        m = re.search(pattern, out)
        if m:
            return m
        assert time.monotonic() < deadline, f"{path}: {out!r}"
        time.sleep(0.2)


# ---- finding 2: NET_RAW and ARP spoofing ----

# What ping does without CAP_NET_RAW (iputils' ping, and anything else using an ICMP datagram
# socket, allowed by net.ipv4.ping_group_range): one echo request, "reply" if answered.
PING = r"""
import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
s.settimeout(3)
s.sendto(struct.pack("!BBHHH", 8, 0, 0, 0, 1) + b"sandboxer", (sys.argv[1], 0))
print("reply" if s.recvfrom(1024)[0][0] == 0 else "other")
"""

RAW = r"""
import socket
try:
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    print("packet socket")
except PermissionError:
    print("denied")
"""


def test_net_raw_is_off_by_default_and_ping_still_works(sbx):
    a = sbx.create("python")
    b = sbx.create("busybox")
    assert a["net_raw"] is False
    assert cap_eff(sbx, a["id"]) & NET_RAW_BIT == 0
    r = sbx.sh(a["id"], f"python3 -c '{PING}' {b['ip_address']}")
    assert r["stdout"].strip() == "reply", r
    assert sbx.sh(a["id"], f"python3 -c '{RAW}'")["stdout"].strip() == "denied"
    raw = sbx.create("python", net_raw=True)
    assert sbx.sh(raw["id"], f"python3 -c '{RAW}'")["stdout"].strip() == "packet socket"


def test_net_raw_true_is_kept_by_forks_snapshots_and_wake(sbx):
    s = sbx.create("busybox", net_raw=True)
    assert s["net_raw"] is True and cap_eff(sbx, s["id"]) & NET_RAW_BIT
    child = fork(sbx, s["id"])
    assert child["net_raw"] is True and cap_eff(sbx, child["id"]) & NET_RAW_BIT
    r = sbx.post(f"/sandboxes/{s['id']}/snapshots", json={"name": "rawsnap"}, timeout=120)
    assert r.status_code == 201, r.text
    r = sbx.post("/sandboxes", json={"snapshot": "rawsnap"}, timeout=120)
    assert r.status_code == 200, r.text
    sbx.created.append(r.json()["id"])
    assert r.json()["net_raw"] is True and cap_eff(sbx, r.json()["id"]) & NET_RAW_BIT
    assert sbx.post(f"/sandboxes/{s['id']}/hibernate", timeout=120).status_code == 200
    assert sbx.post(f"/sandboxes/{s['id']}/wake", timeout=120).status_code == 200
    assert cap_eff(sbx, s["id"]) & NET_RAW_BIT
    # and a default one's fork stays without
    plain = sbx.create("busybox")
    assert fork(sbx, plain["id"])["net_raw"] is False


def test_net_raw_from_the_cli_and_the_python_sdk(sbx_daemon, sbx):
    from test_cli_more import run
    sid = run(sbx_daemon, "create", "busybox", "--net-raw").stdout.strip()
    sbx.created.append(sid)
    assert sbx.get(f"/sandboxes/{sid}").json()["net_raw"] is True
    bad = run(sbx_daemon, "create", "--snapshot", "x", "--net-raw", check=False)
    assert bad.returncode == 2 and "--net-raw does not go with --snapshot" in bad.stderr
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "sdk", "python"))
    from sandboxer import Sandboxer
    with Sandboxer(sbx_daemon.url, sbx_daemon.admin_token) as client:
        with client.create("busybox", net_raw=True) as sb:
            assert sb.net_raw is True
        with client.create("busybox") as sb:
            assert sb.net_raw is False


@pytest.mark.parametrize("body", [
    {"image": "busybox", "net_raw": "yes"},
    {"image": "busybox", "net_raw": 1},
    {"image": "busybox", "net_raw": "true"},
    {"snapshot": "whatever", "net_raw": True},
])
def test_net_raw_must_be_a_boolean(sbx, body):
    before = sbx.get("/sandboxes").json()["sandboxes"]
    r = sbx.post("/sandboxes", json=body)
    assert r.status_code == 400 and r.json()["code"] == "invalid_field", r.text
    assert sbx.get("/sandboxes").json()["sandboxes"] == before


# Sends forged ARP claiming `victim` (and a free address) for `seconds`, and counts the IPv4
# packets for those addresses that reach this sandbox. Writes "started" at once, a JSON
# summary at the end.
SPOOF = r"""
import json, socket, struct, sys, time
victim, free, gw, seconds, out = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind(("eth0", 0))
me = s.getsockname()[4]
gw_mac = bytes([2, 0x53] + [int(x) for x in gw.split(".")])
bcast = b"\xff" * 6
def arp(dst, op, spa, tha, tpa):
    return (dst + me + b"\x08\x06" + struct.pack("!HHBBH", 1, 0x0800, 6, 4, op) + me
            + socket.inet_aton(spa) + tha + socket.inet_aton(tpa))
frames = []
for claim in (victim, free):
    frames += [arp(bcast, 2, claim, bcast, claim),          # gratuitous reply
               arp(gw_mac, 2, claim, gw_mac, gw),           # unsolicited reply to the host
               arp(bcast, 1, claim, b"\0" * 6, gw)]         # "who has gw? tell <claim>"
s.settimeout(0.05)
sent = stolen = 0
targets = {socket.inet_aton(victim), socket.inet_aton(free)}
open(out, "w").write("started\n")
end = time.monotonic() + seconds
next_send = 0
while time.monotonic() < end:
    if time.monotonic() >= next_send:
        for f in frames:
            s.send(f)
            sent += 1
        next_send = time.monotonic() + 0.1
    try:
        pkt = s.recv(65536)
    except socket.timeout:
        continue
    if len(pkt) >= 34 and pkt[12:14] == b"\x08\x00" and pkt[30:34] in targets:
        stolen += 1
open(out, "w").write(json.dumps({"sent": sent, "stolen": stolen}) + "\n")
"""


def test_forged_arp_moves_no_neighbour_entry_and_steals_no_traffic(sbx_daemon, sbx, sbx_user):
    bridge = sbx_daemon.bridge
    victim = sbx.create("busybox", args=HTTPD, ports=[8080])
    peer = sbx.create("busybox")
    mallory = sbx_user("mallory")
    attacker = mallory.create("python", net_raw=True)
    vip, gw = victim["ip_address"], gateway(sbx_daemon)
    free = re.sub(r"\.\d+\.\d+$", ".250.250", vip)  # an address nobody holds
    wait_http(sbx, peer["id"], vip)
    mallory.sh(attacker["id"], f"cat > /tmp/spoof.py <<'EOF'\n{SPOOF}\nEOF")
    mallory.sh(attacker["id"], f"python3 /tmp/spoof.py {vip} {free} {gw} 8 /tmp/spoof.out "
                               ">/tmp/spoof.err 2>&1 &")
    wait_file(mallory, attacker["id"], "/tmp/spoof.out", "started")
    deadline = time.monotonic() + 4 * SLOW
    while time.monotonic() < deadline:
        entry = host_neigh(bridge, vip)
        assert mac_of(vip) in entry and "PERMANENT" in entry, entry
        assert host_neigh(bridge, free) == "", host_neigh(bridge, free)
        # the victim's traffic: its owner's proxied requests, and its peer's
        r = sbx.get(f"/sandboxes/{victim['id']}/proxy/?port=8080", timeout=10)
        assert r.status_code == 200 and "served-by" in r.text, r.text
        assert "served-by" in fetch(sbx, peer["id"], vip)
        time.sleep(0.2)
    m = wait_file(mallory, attacker["id"], "/tmp/spoof.out", r"\{.*\}")
    result = json.loads(m.group(0))
    assert result["sent"] > 0 and result["stolen"] == 0, result
    # the bridge's ARP filter saw (and dropped) the forged frames
    table = sh("nft", "list", "table", "arp", sbx_daemon.table).stdout
    drops = re.search(r"counter packets (\d+)", table)
    assert drops and int(drops.group(1)) > 0, table


# ---- finding 3: a freed address and its tracked flows ----

UDP_ECHO = r"""
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 9999))
while True:
    data, addr = s.recvfrom(2048)
    s.sendto(b"echo:" + data, addr)
"""

# Sends a datagram to argv[1]:9999 every 0.1 s from a fixed port for argv[2] seconds, and logs
# each answer with who sent it.
UDP_TALK = r"""
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 40000))
s.settimeout(0.1)
end = time.monotonic() + float(sys.argv[2])
with open("/tmp/talk.log", "a") as log:
    while time.monotonic() < end:
        s.sendto(b"ping", (sys.argv[1], 9999))
        try:
            data, addr = s.recvfrom(2048)
            log.write("%s %s\n" % (addr[0], data.decode()))
            log.flush()
        except socket.timeout:
            pass
"""


def conntrack_entries(ip):
    with open("/proc/net/nf_conntrack") as f:
        return [line for line in f if re.search(rf"(src|dst)={re.escape(ip)}\s", line)]


def test_a_freed_address_is_not_reused_after_a_restart_nor_its_flows(sbx_daemon, sbx,
                                                                      sbx_user):
    a1 = sbx.create("python")
    a2 = sbx.create("python", args=["python3", "-c", UDP_ECHO])
    a2_ip = a2["ip_address"]
    sbx.sh(a1["id"], f"cat > /tmp/talk.py <<'EOF'\n{UDP_TALK}\nEOF")
    sbx.sh(a1["id"], f"python3 /tmp/talk.py {a2_ip} 120 >/dev/null 2>&1 &")
    wait_file(sbx, a1["id"], "/tmp/talk.log", rf"{re.escape(a2_ip)} echo:ping")
    assert conntrack_entries(a2_ip), "the flow is tracked"
    assert sbx.delete(f"/sandboxes/{a2['id']}").status_code == 200
    # its flows are gone at once (a1 goes on sending: those packets are dropped untracked)
    deadline = time.monotonic() + 5 * SLOW
    while conntrack_entries(a2_ip):
        assert time.monotonic() < deadline, conntrack_entries(a2_ip)
        time.sleep(0.1)
    quarantine = sh("nft", "list", "set", "inet", sbx_daemon.table, "quarantine").stdout
    assert a2_ip in quarantine
    # a restart does not start over at the lowest free address
    assert sbx_daemon.stop() == 0
    sbx_daemon.start()
    bob = sbx_user("bob")
    b1 = bob.create("python", args=["python3", "-c", UDP_ECHO])
    assert b1["ip_address"] != a2_ip
    # and a1's flow reaches nobody: no answer from anyone but (earlier) a2
    time.sleep(1)
    log = sbx.sh(a1["id"], "cat /tmp/talk.log")["stdout"]
    assert all(line.startswith(a2_ip + " ") for line in log.splitlines()), log


# ---- finding 4: the egress proxy and the host's own addresses ----

LINK, PEER, LOCAL_IP, HOST_PORT = "sbxeglo0", "sbxeglo1", "198.18.77.1", 18091

HOST_SERVER = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)
print("ready", flush=True)
while True:
    c, a = s.accept()
    c.settimeout(2)
    try:
        c.recv(4096)
        c.sendall(b"HTTP/1.0 200 OK\r\n\r\nhost-service")
    except OSError:
        pass
    c.close()
"""


@pytest.fixture
def host_public_address():
    """A public-looking address of the host itself, added while the daemon runs (on a veth
    pair of the host's, as this kernel has no dummy links), with a service on 0.0.0.0 behind
    it; all removed afterwards."""
    sh("ip", "link", "del", LINK, check=False)
    server = subprocess.Popen([sys.executable, "-u", "-c", HOST_SERVER, str(HOST_PORT)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert "ready" in server.stdout.readline()
        sh("ip", "link", "add", LINK, "type", "veth", "peer", "name", PEER)
        sh("ip", "addr", "add", f"{LOCAL_IP}/32", "dev", LINK)
        sh("ip", "link", "set", LINK, "up")
        sh("ip", "link", "set", PEER, "up")
        # control: the service answers there, from the host
        r = httpx.get(f"http://{LOCAL_IP}:{HOST_PORT}/", timeout=5)
        assert "host-service" in r.text
        yield LOCAL_IP
    finally:
        server.kill()
        server.wait(timeout=10)
        sh("ip", "link", "del", LINK, check=False)


def test_the_proxy_refuses_the_hosts_own_public_address(sbx_daemon, sbx, host_public_address):
    gw = gateway(sbx_daemon)
    s = sbx.create("busybox", network="proxy", egress_allow=[host_public_address])
    out = via_proxy(sbx, s["id"], gw, get_via(host_public_address, port=HOST_PORT))
    assert "403 Forbidden" in out and "own" in out and "host-service" not in out, out
    out = via_proxy(sbx, s["id"], gw, f"CONNECT {host_public_address}:{HOST_PORT} HTTP/1.1"
                                      f"\\r\\n\\r\\nGET / HTTP/1.0\\r\\n\\r\\n")
    assert "403 Forbidden" in out and "host-service" not in out, out
    # the sandboxes' own subnet is refused too, whatever the subnet is
    s2 = sbx.create("busybox", network="proxy", egress_allow=[s["ip_address"]])
    out = via_proxy(sbx, s2["id"], gw, get_via(s["ip_address"]))
    assert "403 Forbidden" in out, out


# ---- finding 10: one sandbox's share of the egress proxy ----

# Opens argv[2] connections to the proxy and keeps the ones it answers nothing on open (a
# request head that never ends, a byte every 2 s) for argv[3] seconds. Writes a JSON summary.
HOLD = r"""
import json, socket, sys, time
gw, n, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
socks = [socket.create_connection((gw, 3128), timeout=5) for _ in range(n)]
time.sleep(1)
counts = {"open": 0, "429": 0, "503": 0, "other": 0}
held = []
for s in socks:
    s.setblocking(False)
    try:
        data = s.recv(4096)
    except BlockingIOError:
        counts["open"] += 1
        held.append(s)
        continue
    key = "429" if b" 429 " in data else "503" if b" 503 " in data else "other"
    counts[key] += 1
    s.close()
open("/tmp/hold.out", "w").write(json.dumps(counts) + "\n")
end = time.monotonic() + seconds
while time.monotonic() < end:
    for s in held:
        try:
            s.send(b"G")
        except OSError:
            pass
    time.sleep(2)
"""


def hold(c, sid, gw, n, seconds=60):
    c.sh(sid, f"cat > /tmp/hold.py <<'EOF'\n{HOLD}\nEOF")
    c.sh(sid, f"python3 /tmp/hold.py {gw} {n} {seconds} >/tmp/hold.err 2>&1 &")
    return json.loads(wait_file(c, sid, "/tmp/hold.out", r"\{.*\}").group(0))


# A request through the proxy from a sandbox without nc: the first line of the answer.
PY_VIA = r"""
import socket, sys
s = socket.create_connection((sys.argv[1], 3128), timeout=5)
s.sendall(sys.argv[2].replace("\\r\\n", "\r\n").encode())
print(s.recv(4096).decode().splitlines()[0])
"""


def test_one_sandbox_cannot_take_every_proxy_connection(sbx_daemon, sbx, outside):
    gw = gateway(sbx_daemon)
    greedy = sbx.create("python", network="proxy", egress_allow=[outside])
    counts = hold(sbx, greedy["id"], gw, 300)
    assert counts == {"open": 32, "429": 268, "503": 0, "other": 0}, counts
    other = sbx.create("busybox", network="proxy", egress_allow=[outside])
    out = via_proxy(sbx, other["id"], gw, f"CONNECT {outside}:{PORT} HTTP/1.1\\r\\n\\r\\n"
                                          f"GET /fair HTTP/1.0\\r\\n\\r\\n")
    assert "200 Connection established" in out and "seen: GET /fair" in out, out
    req = f"GET http://{outside}:{PORT}/ HTTP/1.1\r\nHost: x\r\n\r\n"
    out = sbx.sh(greedy["id"], f"python3 -c '{PY_VIA}' {gw} '{req}'")["stdout"]
    assert "429 Too Many Requests" in out, out


@pytest.fixture
def small_proxy_daemon(registry_url):
    with tempfile.TemporaryDirectory(prefix="sbx-test-") as workdir:
        d = Daemon(workdir, ["--registry-mirror", registry_url, "--egress-max-conns", "6",
                             "--egress-max-conns-per-sandbox", "3"])
        try:
            d.start()
            yield d
        finally:
            d.kill()


def test_the_global_cap_stays_a_backstop(small_proxy_daemon, outside):
    c = Sandboxes(small_proxy_daemon.url, small_proxy_daemon.admin_token)
    try:
        gw = gateway(small_proxy_daemon)
        a = c.create("python", network="proxy", egress_allow=[outside])
        b = c.create("python", network="proxy", egress_allow=[outside])
        assert hold(c, a["id"], gw, 5) == {"open": 3, "429": 2, "503": 0, "other": 0}
        assert hold(c, b["id"], gw, 3) == {"open": 3, "429": 0, "503": 0, "other": 0}
        third = c.create("busybox", network="proxy", egress_allow=[outside])
        out = via_proxy(c, third["id"], gw, get_via(outside))
        assert "503 Service Unavailable" in out, out
    finally:
        c.cleanup()
