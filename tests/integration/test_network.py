"""Sandbox networks through the daemon: an address each, isolation by owner, fork gets its own
address, nothing left after delete. (The rules themselves: test_net_module.py.)"""
import ipaddress
import pytest
import os
import subprocess
import time

from test_fork import fork

from conftest import SLOW

HTTPD = ["sh", "-c", "mkdir -p /www && echo served-by-$(hostname) > /www/index.html && "
         "exec httpd -f -p 8080 -h /www"]


def fetch(c, sid, ip, port=8080, timeout=2):
    # busybox-static's wget crashes without NSS: a raw request through nc instead
    return c.sh(sid, f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w {timeout} {ip} {port} 2>&1; "
                     "echo rc=$?")["stdout"]


def wait_http(c, sid, ip):
    deadline = time.monotonic() + 15 * SLOW
    while "served-by" not in (out := fetch(c, sid, ip)):
        assert time.monotonic() < deadline, out
        time.sleep(0.2)
    return out


def sandbox_rules(table):
    """The rules' per-sandbox elements (inet owner/member/bound/egress_open, arp bound) as
    text; the quarantine of freed addresses is left out."""
    text = ""
    for family, kind, name in (("inet", "map", "owner"), ("inet", "set", "member"),
                               ("inet", "set", "bound"), ("inet", "set", "egress_open"),
                               ("arp", "set", "bound")):
        text += subprocess.run(["nft", "list", kind, family, table, name],
                               capture_output=True, text=True).stdout
    return text


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_each_sandbox_has_an_address_in_the_subnet(sbx_daemon, sbx):
    s = sbx.create("busybox")
    assert ipaddress.ip_address(s["ip_address"]) in ipaddress.ip_network(sbx_daemon.subnet)
    r = sbx.sh(s["id"], "ip -4 addr show eth0; cat /etc/hosts")
    assert s["ip_address"] in r["stdout"]


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_same_owner_reaches_other_owner_does_not(sbx, sbx_user):
    a1 = sbx.create("busybox", args=HTTPD)
    # BusyBox 1.35's ping opens only raw sockets: these two ask for CAP_NET_RAW (ping
    # without it, through an ICMP datagram socket: test_net_security.py)
    a2 = sbx.create("busybox", net_raw=True)
    bob = sbx_user("bob")
    b1 = bob.create("busybox", net_raw=True)
    assert "served-by" in wait_http(sbx, a2["id"], a1["ip_address"])
    assert "served-by" not in fetch(bob, b1["id"], a1["ip_address"])
    r = bob.sh(b1["id"], f"ping -c 1 -W 1 {a1['ip_address']} >/dev/null 2>&1; echo $?")
    assert r["stdout"].strip() != "0"
    r = sbx.sh(a2["id"], f"ping -c 1 -W 2 {a1['ip_address']} >/dev/null 2>&1; echo $?")
    assert r["stdout"].strip() == "0"


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_sandbox_cannot_reach_the_host(sbx_daemon, sbx):
    s = sbx.create("busybox")
    gateway = str(next(ipaddress.ip_network(sbx_daemon.subnet).hosts()))
    # the daemon's API and anything else on the host: refused or dropped
    out = fetch(sbx, s["id"], gateway, port=sbx_daemon.port)
    assert "HTTP/1" not in out, out
    out = fetch(sbx, s["id"], "169.254.169.254", port=80)
    assert "HTTP/1" not in out, out


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_fork_gets_its_own_address_and_serves_there(sbx):
    parent = sbx.create("busybox", args=HTTPD)
    client = sbx.create("busybox")
    wait_http(sbx, client["id"], parent["ip_address"])
    child = fork(sbx, parent["id"], hostname="forked")
    assert child["ip_address"] and child["ip_address"] != parent["ip_address"]
    # the listener forked with the process answers at the child's own address
    assert "served-by" in wait_http(sbx, client["id"], child["ip_address"])
    assert "served-by" in fetch(sbx, client["id"], parent["ip_address"])


@pytest.mark.usefixtures("sbx_rt")  # runc and runsc
def test_no_network_pieces_left_after_delete(sbx_daemon, sbx):
    s = sbx.create("busybox")
    netns = os.path.join(sbx_daemon.state_dir, "netns", s["id"])
    assert os.path.exists(netns)
    sbx.delete(f"/sandboxes/{s['id']}")
    assert not os.path.exists(netns)
    links = subprocess.run(["ip", "-o", "link", "show", "master", sbx_daemon.bridge],
                           capture_output=True, text=True).stdout
    assert links.strip() == ""
    assert s["ip_address"] not in sandbox_rules(sbx_daemon.table)
    neigh = subprocess.run(["ip", "neigh", "show", s["ip_address"], "dev", sbx_daemon.bridge],
                           capture_output=True, text=True).stdout
    assert neigh.strip() == ""


def test_no_network_pieces_left_after_a_restart(sbx_daemon, sbx):
    keep = sbx.create("busybox")
    gone = sbx.create("busybox")
    sbx.delete(f"/sandboxes/{gone['id']}")
    assert sbx_daemon.stop() == 0
    sbx_daemon.start()
    links = subprocess.run(["ip", "-o", "link", "show", "master", sbx_daemon.bridge],
                           capture_output=True, text=True).stdout.strip().splitlines()
    assert len(links) == 1  # only the sandbox that still exists
    rules = sandbox_rules(sbx_daemon.table)
    assert keep["ip_address"] in rules and gone["ip_address"] not in rules
    # its netns file, and the file of the user namespace that owns it where it has one
    want = [keep["id"]] + ([keep["id"] + ".user"] if keep["user_namespace"] else [])
    assert sorted(os.listdir(os.path.join(sbx_daemon.state_dir, "netns"))) == sorted(want)
    c = type(sbx)(sbx_daemon.url, sbx_daemon.admin_token)
    try:
        assert c.sh(keep["id"], "ip -4 addr show eth0")["stdout"].count(keep["ip_address"]) == 1
    finally:
        c.close()
