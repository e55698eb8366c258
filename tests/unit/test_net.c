/* Networking pure logic: subnets, the address pool, names, nameservers, the nft script. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "net/net_internal.h"
#include "tap.h"

static uint32_t ip_of(const char *s)
{
    uint32_t ip = 0;
    net_ip_parse(s, &ip);
    return ip;
}

static const char *fmt(uint32_t ip)
{
    static char buf[16];
    net_ip_format(ip, buf);
    return buf;
}

static void test_subnet_parse_accepts_networks_and_refuses_the_rest(void)
{
    struct net_subnet sn;
    ok(net_subnet_parse("10.88.0.0/16", &sn) && sn.net == ip_of("10.88.0.0") && sn.prefix == 16,
       "10.88.0.0/16 parses");
    ok(net_subnet_parse("192.168.7.8/29", &sn) && sn.prefix == 29, "/29 parses");
    const char *bad[] = {"10.88.0.1/16",  "10.88.0.0/30", "10.0.0.0/7", "10.88.0.0", "10.88.0.0/",
                         "10.88.0.0/16x", "10.88.0/16",   "::1/64",     "",          "10.88.0.0/-1",
                         "300.1.1.0/24"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
        ok(!net_subnet_parse(bad[i], &sn), "'%s' is refused", bad[i]);
    ok(!net_subnet_parse(NULL, &sn), "NULL is refused");
}

static void test_gateway_and_assignable_addresses(void)
{
    struct net_subnet sn;
    net_subnet_parse("10.88.0.0/16", &sn);
    is_str(fmt(net_subnet_gateway(&sn)), "10.88.0.1", "gateway is the first host");
    ok(!net_subnet_assignable(&sn, ip_of("10.88.0.0")), "network address is not assignable");
    ok(!net_subnet_assignable(&sn, ip_of("10.88.0.1")), "gateway is not assignable");
    ok(net_subnet_assignable(&sn, ip_of("10.88.0.2")), "first sandbox address");
    ok(net_subnet_assignable(&sn, ip_of("10.88.255.254")), "last sandbox address");
    ok(!net_subnet_assignable(&sn, ip_of("10.88.255.255")), "broadcast is not assignable");
    ok(!net_subnet_assignable(&sn, ip_of("10.89.0.2")), "outside the subnet");
}

static void test_ip_format_and_mac(void)
{
    uint32_t ip;
    ok(net_ip_parse("10.88.1.2", &ip) && ip == 0x0a580102, "parse in host order");
    is_str(fmt(0xc0a80001), "192.168.0.1", "format");
    ok(!net_ip_parse("10.88.1", &ip) && !net_ip_parse("a.b.c.d", &ip), "malformed refused");
    char mac[18];
    net_mac_for_ip(ip_of("10.88.1.2"), mac);
    is_str(mac, "02:53:0a:58:01:02", "MAC is 02:53 + the address (local, unicast)");
}

static void test_ids_and_interface_names(void)
{
    ok(net_id_valid("a1") && net_id_valid("0123456789abcdef-_X"), "plain ids are valid");
    char long_id[70];
    memset(long_id, 'a', 64);
    long_id[64] = '\0';
    ok(net_id_valid(long_id), "64 characters is valid");
    long_id[64] = 'a', long_id[65] = '\0';
    ok(!net_id_valid(long_id), "65 characters is not");
    const char *bad[] = {"", ".", "..", "a/b", "a b", "a\"b", "a.b", "ä"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
        ok(!net_id_valid(bad[i]), "id '%s' is refused", bad[i]);
    ok(!net_id_valid(NULL), "NULL id is refused");

    char a[16], b[16], c[16], d[16];
    net_ifname_for("sbx0", "a1", a);
    net_ifname_for("sbx0", "a1", b);
    net_ifname_for("sbx0", "a2", c);
    net_ifname_for("sbxt0", "a1", d);
    ok(strlen(a) == 15 && strncmp(a, "sbx", 3) == 0, "name '%s' fits IFNAMSIZ", a);
    is_str(a, b, "names are stable");
    ok(strcmp(a, c) != 0, "ids differ: names differ");
    ok(strcmp(a, d) != 0, "bridges differ: names differ");
}

static void test_pool_allocates_next_fit_and_reuses_late(void)
{
    struct net_subnet sn;
    struct net_pool p;
    err_t err = {0};
    net_subnet_parse("10.9.0.0/29", &sn); /* .2 .. .6: five sandboxes */
    net_pool_init(&p, &sn);
    const char *ids[] = {"s1", "s2", "s3", "s4", "s5"};
    for (int i = 0; i < 5; i++) {
        struct net_entry *e = net_pool_alloc(&p, ids[i], &err);
        char want[16];
        snprintf(want, sizeof(want), "10.9.0.%d", i + 2);
        ok(e && tap_streq(fmt(e->ip), want), "%s gets %s", ids[i], want);
    }
    ok(!net_pool_alloc(&p, "s6", &err) && err.kind == ERR_LIMIT, "a full subnet says limit");
    net_pool_release(&p, "s2");
    ok(!net_pool_find(&p, "s2") && !net_pool_find_ip(&p, ip_of("10.9.0.3")), "s2 released");
    struct net_entry *e = net_pool_alloc(&p, "s6", &err);
    ok(e && e->ip == ip_of("10.9.0.3"), "the only free address after wrapping");
    net_pool_release(&p, "s1");
    net_pool_release(&p, "s4");
    e = net_pool_alloc(&p, "s7", &err);
    ok(e && e->ip == ip_of("10.9.0.5"), "next-fit: after the last one handed out, not lowest");
    ok(net_pool_find(&p, "s5") && net_pool_find(&p, "s5")->ip == ip_of("10.9.0.6"),
       "entries survive releases of others");
    ok(net_pool_find_ip(&p, ip_of("10.9.0.4")) == net_pool_find(&p, "s3"), "find by address");
    net_pool_free(&p);
}

static void test_pool_reserve_conflicts(void)
{
    struct net_subnet sn;
    struct net_pool p;
    err_t err = {0};
    net_subnet_parse("10.88.0.0/16", &sn);
    net_pool_init(&p, &sn);
    struct net_entry *e = net_pool_reserve(&p, "a", ip_of("10.88.7.7"), &err);
    ok(e && e->owner == -1 && !e->in_nft, "reserve a known address");
    ok(net_pool_reserve(&p, "a", ip_of("10.88.7.7"), &err) == e, "reserving again is a no-op");
    ok(!net_pool_reserve(&p, "b", ip_of("10.88.7.7"), &err) && err.kind == ERR_CONFLICT,
       "another id cannot take it");
    ok(!net_pool_reserve(&p, "a", ip_of("10.88.7.8"), &err) && err.kind == ERR_CONFLICT,
       "an id keeps one address");
    ok(!net_pool_reserve(&p, "c", ip_of("10.88.0.1"), &err) && err.kind == ERR_INVALID,
       "the gateway cannot be reserved");
    ok(!net_pool_reserve(&p, "c", ip_of("10.89.0.5"), &err) && err.kind == ERR_INVALID,
       "an address outside the subnet cannot be reserved");
    for (int i = 0; i < 3000; i++) {
        char id[16];
        snprintf(id, sizeof(id), "x%d", i);
        if (!net_pool_alloc(&p, id, &err))
            break;
    }
    ok(p.n == 3001 && !net_pool_find_ip(&p, ip_of("10.88.0.1")), "thousands of sandboxes");
    bool skipped = true;
    for (size_t i = 0; i < p.n; i++)
        if (p.ents[i].ip == ip_of("10.88.7.7") && strcmp(p.ents[i].id, "a") != 0)
            skipped = false;
    ok(skipped, "allocation skips reserved addresses");
    net_pool_free(&p);
}

static void test_pool_quarantine_and_cursor(void)
{
    struct net_subnet sn;
    struct net_pool p;
    err_t err = {0};
    net_subnet_parse("10.9.0.0/29", &sn); /* .2 .. .6 */
    net_pool_init(&p, &sn);
    double now = now_mono_ms();
    net_pool_quarantine(&p, ip_of("10.9.0.2"), now + 60000);
    net_pool_quarantine(&p, ip_of("10.9.0.3"), now - 1); /* already over */
    ok(net_pool_quarantined(&p, ip_of("10.9.0.2"), now), "a quarantined address is");
    ok(!net_pool_quarantined(&p, ip_of("10.9.0.3"), now), "an expired quarantine is not");
    struct net_entry *e = net_pool_alloc(&p, "a", &err);
    ok(e && e->ip == ip_of("10.9.0.3"), "allocation skips the quarantined address");
    net_pool_quarantine(&p, ip_of("10.9.0.2"), now + 1000); /* never shortens */
    ok(net_pool_quarantined(&p, ip_of("10.9.0.2"), now + 30000), "quarantine kept its end");
    const char *more[] = {"b", "c", "d"}; /* .4 .5 .6 */
    for (size_t i = 0; i < sizeof(more) / sizeof(*more); i++)
        net_pool_alloc(&p, more[i], &err);
    ok(!net_pool_alloc(&p, "e", &err) && err.kind == ERR_LIMIT && strstr(err.msg, "quarantine"),
       "only a quarantined address left: limit, and says why");
    ok(net_pool_cursor(&p) == ip_of("10.9.0.7"), "cursor after the last handed out (%s)",
       fmt(net_pool_cursor(&p)));
    net_pool_free(&p);

    net_pool_init(&p, &sn);
    net_pool_set_cursor(&p, ip_of("10.9.0.5"));
    e = net_pool_alloc(&p, "a", &err);
    ok(e && e->ip == ip_of("10.9.0.5"), "a restored cursor: allocation goes on from there");
    net_pool_set_cursor(&p, ip_of("10.10.0.2"));
    e = net_pool_alloc(&p, "b", &err);
    ok(e && e->ip == ip_of("10.9.0.6"), "a cursor outside the subnet is ignored");
    net_pool_free(&p);
}

static void test_nameservers_skip_loopback_and_ipv6(void)
{
    char ns[4][16];
    int n = net_resolv_nameservers("# comment\nnameserver 127.0.0.53\noptions edns0\n", ns, 4);
    ok(n == 0, "systemd-resolved's stub alone gives none");
    n = net_resolv_nameservers("search example.com\nnameserver 10.0.0.2\n"
                               "nameserver ::1\n  nameserver\t1.1.1.1\nnameserver 127.0.0.1\n"
                               "nameserver 2001:db8::1\nnameserver 8.8.8.8",
                               ns, 4);
    ok(n == 3 && tap_streq(ns[0], "10.0.0.2") && tap_streq(ns[1], "1.1.1.1") &&
           tap_streq(ns[2], "8.8.8.8"),
       "IPv4, not loopback, in order, last line without newline");
    n = net_resolv_nameservers("nameserver 1.1.1.1\nnameserver 1.0.0.1\nnameserver 9.9.9.9\n", ns,
                               2);
    ok(n == 2, "bounded by max");
    ok(net_resolv_nameservers("", ns, 4) == 0, "empty text");
}

static void test_elements_script(void)
{
    struct net_entry e = {.id = "sbx1", .ip = ip_of("10.88.0.5"), .owner = 42, .open = true};
    buf_t s = {0};
    net_nft_elements(&s, "sandboxer", &e, true);
    ok(strstr(s.data, "add element inet sandboxer owner { 10.88.0.5 comment \"sbx1\" : 42 }") &&
           strstr(s.data, "add element inet sandboxer member { 10.88.0.5 . 42 }") &&
           strstr(s.data, "add element inet sandboxer bound { 10.88.0.5 . 02:53:0a:58:00:05 }") &&
           strstr(s.data, "add element inet sandboxer egress_open { 10.88.0.5 }") &&
           strstr(s.data, "add element arp sandboxer bound { 10.88.0.5 . 02:53:0a:58:00:05 }"),
       "add: owner (with the id), member, bound (inet and arp), egress_open");
    buf_reset(&s);
    e.open = false;
    net_nft_elements(&s, "sandboxer", &e, false);
    ok(strstr(s.data, "delete element inet sandboxer owner { 10.88.0.5 }") &&
           !strstr(s.data, "egress_open"),
       "delete: no egress_open element for egress none");
    buf_reset(&s);
    net_nft_quarantine(&s, "sandboxer", ip_of("10.88.0.5"), 300);
    net_nft_cursor(&s, "sandboxer", ip_of("10.88.0.6"));
    ok(strstr(s.data, "add element inet sandboxer quarantine { 10.88.0.5 timeout 300s }") &&
           strstr(s.data, "add element inet sandboxer cursor { 10.88.0.6 }"),
       "quarantine with a timeout, cursor as one element");
    buf_free(&s);
}

/* The generated script must be accepted by the kernel: `nft -c` checks without applying. */
static void test_ruleset_is_valid_nft(void)
{
    struct net_rules_cfg c = {.table = "sbxunit", .bridge = "sbxu0", .n_dns = 1};
    net_subnet_parse("10.77.0.0/16", &c.sn);
    snprintf(c.dns[0], sizeof(c.dns[0]), "10.0.0.2");
    char *script = net_nft_ruleset(&c);
    ok(strstr(script, "iifname \"sbxu0\" jump from_sandbox") &&
           strstr(script, "ip daddr 10.77.0.1 tcp dport @host_ports") &&
           strstr(script, "add element inet sbxunit dns { 10.0.0.2 }") &&
           strstr(script, "169.254.0.0/16") && !strstr(script, "198.18.") &&
           strstr(script, "add rule arp sbxunit input iifname \"sbxu0\" jump from_sandbox"),
       "script names the bridge, gateway, DNS servers and private ranges");
    /* The bound check, and the owner check between sandboxes, come before "established". */
    const char *est = strstr(script, "from_sandbox ct state established");
    const char *bound = strstr(script, "from_sandbox ip saddr . ether saddr != @bound");
    const char *owner = strstr(script, "from_sandbox oifname \"sbxu0\" goto sandbox_to_sandbox");
    const char *host_est = strstr(script, "sandbox_to_host ct state established");
    const char *host_bound = strstr(script, "sandbox_to_host ip saddr . ether saddr != @bound");
    ok(est && bound && owner && bound < est && owner < est && host_bound && host_est &&
           host_bound < host_est,
       "bound and owner checks precede the established accepts");
    if (geteuid() != 0 || system("command -v nft >/dev/null 2>&1") != 0) {
        ok(1, "# SKIP nft check needs root and nft");
        free(script);
        return;
    }
    char path[] = "/tmp/test_net_XXXXXX";
    int fd = mkstemp(path);
    ok(fd >= 0 && write(fd, script, strlen(script)) == (ssize_t)strlen(script), "script saved");
    close(fd);
    char *cmd = xasprintf("nft -c -f %s", path);
    ok(system(cmd) == 0, "nft -c accepts the script");
    free(cmd);
    unlink(path);
    free(script);
}

int main(void)
{
    test_subnet_parse_accepts_networks_and_refuses_the_rest();
    test_gateway_and_assignable_addresses();
    test_ip_format_and_mac();
    test_ids_and_interface_names();
    test_pool_allocates_next_fit_and_reuses_late();
    test_pool_reserve_conflicts();
    test_pool_quarantine_and_cursor();
    test_nameservers_skip_loopback_and_ipv6();
    test_elements_script();
    test_ruleset_is_valid_nft();
    return tap_done();
}
