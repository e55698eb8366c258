"""Egress through the proxy (network "proxy"): a sandbox reaches only the hosts on its
egress_allow list, through the daemon's egress proxy on the gateway (plain HTTP requests and
CONNECT tunnels), never directly; private and loopback destinations stay closed even when
listed. "The outside world" is a network namespace the test makes, at 198.18.1.2 (the
benchmarking range, RFC 2544), behind a veth of its own."""
import ipaddress
import os
import subprocess
import sys
import time

import pytest

from conftest import host_exclusive
from test_fork import fork


@pytest.fixture(scope="module", autouse=True)
def one_run_at_a_time():
    """The "outside" namespace and links have fixed names and addresses: one test run at a
    time on the host (shared with test_net_module, whose addresses are in 198.18.0.0/15 too)."""
    with host_exclusive("host-net"):
        yield


OUT_IF = "sbxegout0"
OUT_HOST, OUT_NS, OTHER_NS = "198.18.1.1", "198.18.1.2", "198.18.1.3"
PORT = 18081

# Answers every request with its request line and the client's address.
SERVER = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)
print("ready", flush=True)
while True:
    c, a = s.accept()
    c.settimeout(3)
    try:
        head = c.recv(65536).split(b"\r\n")[0]
        body = b"seen: " + head + b" from " + a[0].encode()
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + body)
    except OSError:
        pass
    c.close()
"""


def sh(*argv, check=True):
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=check)


@pytest.fixture(scope="module")
def outside():
    sh("ip", "link", "del", OUT_IF, check=False)
    p = subprocess.Popen(["unshare", "--net", sys.executable, "-u", "-c", SERVER, str(PORT)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert "ready" in p.stdout.readline()
        pid = str(p.pid)
        sh("ip", "link", "add", OUT_IF, "type", "veth", "peer", "name", "eth0", "netns", pid)
        sh("ip", "addr", "add", f"{OUT_HOST}/24", "dev", OUT_IF)
        sh("ip", "link", "set", OUT_IF, "up")
        for cmd in (["addr", "add", f"{OUT_NS}/24", "dev", "eth0"],
                    ["link", "set", "eth0", "up"], ["link", "set", "lo", "up"]):
            sh("nsenter", "-t", pid, "-n", "ip", *cmd)
        yield OUT_NS
    finally:
        p.kill()
        p.wait(timeout=10)
        sh("ip", "link", "del", OUT_IF, check=False)


def gateway(d):
    return str(next(ipaddress.ip_network(d.subnet).hosts()))


def via_proxy(c, sid, gw, request, timeout=3):
    """Send raw bytes to the egress proxy from inside the sandbox; what comes back."""
    r = c.sh(sid, f"printf '{request}' | nc -w {timeout} {gw} 3128 2>&1; echo rc=$?")
    return r["stdout"]


def get_via(host, path="/x", port=PORT):
    return f"GET http://{host}:{port}{path} HTTP/1.1\\r\\nHost: {host}\\r\\n\\r\\n"


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_a_proxy_sandbox_reaches_its_allowed_hosts_only(sbx_daemon, sbx, outside):
    gw = gateway(sbx_daemon)
    s = sbx.create("busybox", network="proxy", egress_allow=[outside, "*.example.test"])
    assert s["network"] == "proxy" and s["egress_allow"] == [outside, "*.example.test"]
    sid = s["id"]
    env = sbx.sh(sid, "echo $http_proxy $HTTPS_PROXY")["stdout"].split()
    assert env == [f"http://{gw}:3128"] * 2
    # plain HTTP: forwarded in origin form, from the host's side
    out = via_proxy(sbx, sid, gw, get_via(outside, "/hello"))
    assert f"seen: GET /hello HTTP/1.1 from {OUT_HOST}" in out, out
    # CONNECT: a tunnel to the same host (what HTTPS clients use)
    out = via_proxy(sbx, sid, gw, f"CONNECT {outside}:{PORT} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"
                                  f"GET /tunnel HTTP/1.0\\r\\n\\r\\n")
    assert "200 Connection established" in out and "seen: GET /tunnel" in out, out
    # not on the list: refused by the proxy, before any connection
    out = via_proxy(sbx, sid, gw, get_via(OTHER_NS))
    assert "403 Forbidden" in out and "not on this sandbox's allow list" in out, out
    out = via_proxy(sbx, sid, gw, "CONNECT example.test:443 HTTP/1.1\\r\\n\\r\\n")
    assert "403 Forbidden" in out, out  # *.example.test is its subdomains, not itself
    # and never directly
    out = sbx.sh(sid, f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 {outside} {PORT} 2>&1;"
                      " echo rc=$?")["stdout"]
    assert "seen:" not in out, out


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_open_reaches_the_outside_directly_and_none_does_not(sbx, outside):
    """network "open" is NAT: the outside sees the host's address on its link; "none" (the
    daemon's default) lets nothing out, neither directly nor through the egress proxy."""
    op = sbx.create("busybox", network="open")["id"]
    no = sbx.create("busybox")
    assert no["network"] == "none"
    direct = "printf 'GET /{} HTTP/1.0\\r\\n\\r\\n' | nc -w {} {} {} 2>&1; echo rc=$?"
    out = sbx.sh(op, direct.format("open", 5, outside, PORT))["stdout"]
    assert f"seen: GET /open HTTP/1.0 from {OUT_HOST}" in out, out
    out = sbx.sh(no["id"], direct.format("none", 2, outside, PORT))["stdout"]
    assert "seen:" not in out, out


def test_the_proxy_refuses_private_destinations_and_other_sandboxes(sbx_daemon, sbx, outside):
    gw = gateway(sbx_daemon)
    s = sbx.create("busybox", network="proxy", egress_allow=["127.0.0.1", gw, "10.1.2.3"])
    for host in ("127.0.0.1", gw, "10.1.2.3"):
        out = via_proxy(sbx, s["id"], gw, get_via(host, port=sbx_daemon.port))
        assert "403 Forbidden" in out and "private" in out, (host, out)
    # a sandbox whose network is not "proxy" gets nothing from it
    none = sbx.create("busybox")
    out = via_proxy(sbx, none["id"], gw, get_via(outside))
    assert "403 Forbidden" in out and "not \"proxy\"" in out, out
    # garbage is a 400, and the proxy goes on serving
    out = via_proxy(sbx, s["id"], gw, "HELLO\\r\\n\\r\\n")
    assert "400 Bad Request" in out, out


def test_a_fork_keeps_its_way_out(sbx_daemon, sbx, outside):
    gw = gateway(sbx_daemon)
    parent = sbx.create("busybox", network="proxy", egress_allow=[outside])["id"]
    child = fork(sbx, parent)
    assert child["network"] == "proxy" and child["egress_allow"] == [outside]
    out = via_proxy(sbx, child["id"], gw, get_via(outside, "/from-child"))
    assert "seen: GET /from-child" in out, out


@pytest.mark.parametrize("body", [
    {"network": "proxy"},
    {"network": "proxy", "egress_allow": []},
    {"network": "none", "egress_allow": ["pkgs.example.org"]},
    {"network": "proxy", "egress_allow": ["Pkgs.Example.org"]},
    {"network": "proxy", "egress_allow": ["http://pkgs.example.org"]},
    {"network": "proxy", "egress_allow": ["*."]},
    {"network": "proxy", "egress_allow": [7]},
    {"network": "proxy", "egress_allow": "pkgs.example.org"},
    {"network": "tor"},
])
def test_egress_fields_are_checked(sbx, body):
    r = sbx.post("/sandboxes", json={"image": "busybox", **body})
    assert r.status_code == 400, (body, r.text)


def test_cli_create_with_network_proxy(sbx_daemon, sbx, outside):
    from test_cli_more import run
    sid = run(sbx_daemon, "create", "busybox", "--network", "proxy", "--allow", outside,
              "--allow", "*.example.test").stdout.strip()
    sbx.created.append(sid)
    s = sbx.get(f"/sandboxes/{sid}").json()
    assert s["network"] == "proxy" and s["egress_allow"] == [outside, "*.example.test"]
    out = via_proxy(sbx, sid, gateway(sbx_daemon), get_via(outside, "/cli"))
    assert "seen: GET /cli" in out, out
    bad = run(sbx_daemon, "create", "busybox", "--allow", outside, check=False)
    assert bad.returncode == 2 and "--allow goes with --network proxy" in bad.stderr
    bad = run(sbx_daemon, "create", "busybox", "--network", "tor", check=False)
    assert bad.returncode == 2 and "--network is none, open or proxy" in bad.stderr


def test_python_sdk_creates_a_proxy_sandbox(sbx_daemon, outside):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "sdk", "python"))
    from sandboxer import Sandboxer
    with Sandboxer(sbx_daemon.url, sbx_daemon.admin_token) as client:
        with client.create("busybox", network="proxy", egress_allow=(outside,)) as sb:
            assert sb.network == "proxy" and sb.egress_allow == [outside]
            out = sb.exec(f"printf '{get_via(outside, '/sdk')}' | nc -w 3 $(echo $http_proxy"
                          " | sed 's,http://,,; s,:, ,')")["stdout"]
            assert "seen: GET /sdk" in out, out
