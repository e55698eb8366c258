/*
 * The nftables side: one table (family inet, default name "sandboxer") plus a table of the
 * same name in family arp, fed to `nft -f -` as a script on stdin. Every script runs as one
 * atomic transaction, so the tables are never seen half-built. Per-sandbox state lives in sets
 * and maps keyed by the sandbox's address; adding or removing a sandbox changes elements,
 * never rules. The inet table also keeps the address pool's own state across restarts: the
 * next-fit cursor and the quarantine of freed addresses (with kernel-side timeouts).
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "net_internal.h"

#define NFT_TIMEOUT_MS 30000
#define NFT_MAX_OUT    (64u << 20)

extern char **environ;

/* Ranges no sandbox may send to outside the bridge: RFC 1918, CGNAT, link-local (cloud
 * metadata at 169.254.169.254), loopback, "this network", multicast and reserved. Sandboxes
 * have no IPv6 at all, so fc00::/7, fe80::/10 and the rest of IPv6 are covered by dropping
 * every IPv6 packet from the bridge. 198.18.0.0/15 is deliberately absent: tests use it as
 * "the outside world". */
static const char *const private4[] = {
    "0.0.0.0/8",      "10.0.0.0/8",    "100.64.0.0/10",  "127.0.0.0/8",
    "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16", "224.0.0.0/3",
};

static void sets(buf_t *b, const char *t)
{
    /* "add" leaves an existing set and its elements alone: sandboxes keep their rules
     * across daemon restarts. */
    buf_printf(b, "add table inet %s\n", t);
    buf_printf(b, "add map inet %s owner { type ipv4_addr : mark; }\n", t);
    buf_printf(b, "add set inet %s member { type ipv4_addr . mark; }\n", t);
    buf_printf(b, "add set inet %s bound { type ipv4_addr . ether_addr; }\n", t);
    buf_printf(b, "add set inet %s egress_open { type ipv4_addr; }\n", t);
    buf_printf(b, "add set inet %s host_ports { type inet_service; }\n", t);
    buf_printf(b, "add set inet %s dns { type ipv4_addr; }\n", t);
    buf_printf(b, "add set inet %s private4 { type ipv4_addr; flags interval; }\n", t);
    buf_printf(b, "add set inet %s quarantine { type ipv4_addr; flags timeout; }\n", t);
    buf_printf(b, "add set inet %s cursor { type ipv4_addr; }\n", t);
    /* ARP is not an inet protocol: its filter is a table of the arp family. */
    buf_printf(b, "add table arp %s\n", t);
    buf_printf(b, "add set arp %s bound { type ipv4_addr . ether_addr; }\n", t);
}

static void constants(buf_t *b, const struct net_rules_cfg *c)
{
    const char *t = c->table;
    buf_printf(b, "flush set inet %s private4\nadd element inet %s private4 { ", t, t);
    for (size_t i = 0; i < ARRAY_SIZE(private4); i++)
        buf_printf(b, "%s%s", i ? ", " : "", private4[i]);
    buf_printf(b, " }\nflush set inet %s dns\n", t);
    for (int i = 0; i < c->n_dns; i++)
        buf_printf(b, "add element inet %s dns { %s }\n", t, c->dns[i]);
}

static const char *const chains[] = {
    "input { type filter hook input priority filter; policy accept; }",
    "forward { type filter hook forward priority filter; policy accept; }",
    "output { type filter hook output priority filter; policy accept; }",
    "postrouting { type nat hook postrouting priority srcnat; policy accept; }",
    "sandbox_to_host",
    "from_sandbox",
    "sandbox_to_sandbox",
    "to_sandbox",
};

static const char *const arp_chains[] = {
    "input { type filter hook input priority filter; policy accept; }",
    "from_sandbox",
};

/*
 * The rules, in words. "$BR" stands for the bridge and "$GW" for the gateway address.
 * Base chains accept by default: the table only ever decides about traffic to, from or
 * through the bridge, and leaves the rest of the host's traffic to whoever else filters it.
 * The bound check (address . MAC) comes before any "established" accept, and so does the
 * owner check between sandboxes: a flow the host tracked for an address that has since
 * changed hands is not a way in.
 */
static const char *const rules[] = {
    /* To the host itself (the gateway, any host address): only from the address bound to
     * the sender's MAC, then replies to connections the host opened (the daemon's proxy), and
     * the allowed host ports on the gateway. */
    "input iifname \"$BR\" jump sandbox_to_host",
    "sandbox_to_host meta nfproto != ipv4 counter drop",
    "sandbox_to_host ip saddr . ether saddr != @bound counter drop",
    "sandbox_to_host ct state established,related accept",
    "sandbox_to_host ip daddr $GW tcp dport @host_ports accept",
    "sandbox_to_host counter drop",
    "forward iifname \"$BR\" jump from_sandbox",
    "forward oifname \"$BR\" jump to_sandbox",
    /* Routed from a sandbox: IPv4 only, from the address bound to the sender's MAC (the
     * bridge port only admits that MAC), then peers of the same owner (every packet, not
     * only new flows), then the world. */
    "from_sandbox meta nfproto != ipv4 counter drop",
    "from_sandbox ip saddr . ether saddr != @bound counter drop",
    "from_sandbox ct state invalid drop",
    "from_sandbox oifname \"$BR\" goto sandbox_to_sandbox",
    "from_sandbox ct state established,related accept",
    "from_sandbox ip saddr @egress_open ip daddr @dns meta l4proto { tcp, udp } th dport 53 accept",
    "from_sandbox ip daddr @private4 counter drop",
    "from_sandbox ip saddr @egress_open accept",
    "from_sandbox counter drop",
    /* The sender's owner goes into the packet mark, then (destination, owner) must be a
     * member: one lookup each, however many owners and sandboxes there are. */
    "sandbox_to_sandbox meta mark set ip saddr map @owner ip daddr . meta mark @member accept",
    "sandbox_to_sandbox counter drop",
    /* Into the bridge from anywhere else: only replies (NAT'd egress, DNS), and only to a
     * sandbox whose egress is open now. */
    "to_sandbox ip daddr @egress_open ct state established,related accept",
    "to_sandbox counter drop",
    /* Sandbox-to-sandbox packets leave by the port they came in: the host would answer
     * with ICMP redirects ("talk directly"), which isolated ports make meaningless. */
    "output oifname \"$BR\" icmp type redirect drop",
    "postrouting ip saddr @egress_open oifname != \"$BR\" masquerade",
};

/* ARP the host receives from the bridge: the sender's (address, MAC) must be a bound pair, so
 * no sandbox can claim another's address (or a free one) in the host's neighbour table. */
static const char *const arp_rules[] = {
    "input iifname \"$BR\" jump from_sandbox",
    "from_sandbox arp htype 1 arp ptype ip arp hlen 6 arp plen 4 "
    "arp saddr ip . arp saddr ether @bound accept",
    "from_sandbox counter drop",
};

/* Append rule with $BR and $GW replaced. */
static void expand(buf_t *b, const char *rule, const char *bridge, const char *gw)
{
    for (const char *p = rule; *p;) {
        if (strncmp(p, "$BR", 3) == 0)
            buf_puts(b, bridge), p += 3;
        else if (strncmp(p, "$GW", 3) == 0)
            buf_puts(b, gw), p += 3;
        else
            buf_append(b, p++, 1);
    }
}

char *net_nft_ruleset(const struct net_rules_cfg *c)
{
    buf_t b = {0};
    char gw[16];
    net_ip_format(net_subnet_gateway(&c->sn), gw);
    sets(&b, c->table);
    constants(&b, c);
    for (size_t i = 0; i < ARRAY_SIZE(chains); i++)
        buf_printf(&b, "add chain inet %s %s\n", c->table, chains[i]);
    for (size_t i = 0; i < ARRAY_SIZE(chains); i++) /* rules are rebuilt, sets are kept */
        buf_printf(&b, "flush chain inet %s %.*s\n", c->table, (int)strcspn(chains[i], " "),
                   chains[i]);
    for (size_t i = 0; i < ARRAY_SIZE(rules); i++) {
        buf_printf(&b, "add rule inet %s ", c->table);
        expand(&b, rules[i], c->bridge, gw);
        buf_puts(&b, "\n");
    }
    for (size_t i = 0; i < ARRAY_SIZE(arp_chains); i++)
        buf_printf(&b, "add chain arp %s %s\n", c->table, arp_chains[i]);
    for (size_t i = 0; i < ARRAY_SIZE(arp_chains); i++)
        buf_printf(&b, "flush chain arp %s %.*s\n", c->table, (int)strcspn(arp_chains[i], " "),
                   arp_chains[i]);
    for (size_t i = 0; i < ARRAY_SIZE(arp_rules); i++) {
        buf_printf(&b, "add rule arp %s ", c->table);
        expand(&b, arp_rules[i], c->bridge, gw);
        buf_puts(&b, "\n");
    }
    return buf_steal(&b);
}

void net_nft_elements(buf_t *s, const char *table, const struct net_entry *e, bool add)
{
    char ip[16], mac[18];
    net_ip_format(e->ip, ip);
    net_mac_for_ip(e->ip, mac);
    const char *verb = add ? "add" : "delete";
    unsigned long long owner = (unsigned long long)e->owner;
    if (add)
        buf_printf(s, "add element inet %s owner { %s comment \"%s\" : %llu }\n", table, ip, e->id,
                   owner);
    else
        buf_printf(s, "delete element inet %s owner { %s }\n", table, ip);
    buf_printf(s, "%s element inet %s member { %s . %llu }\n", verb, table, ip, owner);
    buf_printf(s, "%s element inet %s bound { %s . %s }\n", verb, table, ip, mac);
    buf_printf(s, "%s element arp %s bound { %s . %s }\n", verb, table, ip, mac);
    if (e->open)
        buf_printf(s, "%s element inet %s egress_open { %s }\n", verb, table, ip);
}

void net_nft_arp_bound(buf_t *s, const char *table, const struct net_entry *e)
{
    char ip[16], mac[18];
    net_ip_format(e->ip, ip);
    net_mac_for_ip(e->ip, mac);
    buf_printf(s, "add element arp %s bound { %s . %s }\n", table, ip, mac);
}

void net_nft_quarantine(buf_t *s, const char *table, uint32_t ip, int seconds)
{
    char a[16];
    net_ip_format(ip, a);
    /* add, delete, add: a fresh timeout whether or not the element was there */
    buf_printf(s, "add element inet %s quarantine { %s timeout %ds }\n", table, a, seconds);
    buf_printf(s, "delete element inet %s quarantine { %s }\n", table, a);
    buf_printf(s, "add element inet %s quarantine { %s timeout %ds }\n", table, a, seconds);
}

void net_nft_cursor(buf_t *s, const char *table, uint32_t ip)
{
    char a[16];
    net_ip_format(ip, a);
    buf_printf(s, "flush set inet %s cursor\nadd element inet %s cursor { %s }\n", table, table, a);
}

/* ---- running nft ---- */

struct pipes {
    int in, out, err; /* our ends */
};

static int spawn_nft(char *const argv[], struct pipes *p, pid_t *pid, err_t *err)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, er[2] = {-1, -1};
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(er, O_CLOEXEC) < 0) {
        int saved = errno;
        for (int i = 0; i < 2; i++)
            close(in[i]), close(out[i]), close(er[i]);
        errno = saved;
        return err_sys(err, "pipe");
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, er[1], 2);
    int rc = posix_spawnp(pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]), close(out[1]), close(er[1]);
    *p = (struct pipes){in[1], out[0], er[0]};
    if (rc != 0) {
        close(in[1]), close(out[0]), close(er[0]);
        errno = rc;
        return err_sys(err, "run nft");
    }
    fcntl(p->in, F_SETFL, O_NONBLOCK);
    return 0;
}

static void drain(int *fd, buf_t *b)
{
    char chunk[16384];
    ssize_t n = read(*fd, chunk, sizeof(chunk));
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        close(*fd);
        *fd = -1;
    } else if (b->len < NFT_MAX_OUT) {
        buf_append(b, chunk, (size_t)n);
    }
}

/* Feed script, collect stdout/stderr until both close or the deadline passes. */
static bool pump(struct pipes *p, const char *script, buf_t *out, buf_t *errout)
{
    size_t len = strlen(script), off = 0;
    double deadline = now_mono_ms() + NFT_TIMEOUT_MS;
    while (p->out >= 0 || p->err >= 0) {
        int wait = (int)(deadline - now_mono_ms());
        if (wait <= 0)
            return false;
        struct pollfd fds[3] = {{p->out, POLLIN, 0}, {p->err, POLLIN, 0}, {p->in, POLLOUT, 0}};
        if (poll(fds, 3, wait) < 0 && errno != EINTR)
            return false;
        if (fds[0].revents)
            drain(&p->out, out);
        if (fds[1].revents)
            drain(&p->err, errout);
        if (p->in >= 0 && fds[2].revents) {
            ssize_t n = write(p->in, script + off, len - off);
            if (n > 0)
                off += (size_t)n;
            if ((n < 0 && errno != EAGAIN && errno != EINTR) || off == len) {
                close(p->in);
                p->in = -1;
            }
        }
    }
    return true;
}

/* Run argv with script (may be "") on stdin; stdout into out if not NULL. */
static int run(char *const argv[], const char *script, buf_t *out, err_t *err)
{
    struct pipes p;
    pid_t pid;
    if (spawn_nft(argv, &p, &pid, err) < 0)
        return -1;
    buf_t o = {0}, e = {0};
    bool done = pump(&p, script, &o, &e);
    if (!done)
        kill(pid, SIGKILL);
    for (int *fd = &p.in; fd <= &p.err; fd++)
        if (*fd >= 0)
            close(*fd);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    int rc = 0;
    if (!done)
        rc = err_set(err, ERR_RUNTIME, 0, "nft", "nft timed out after %d ms", NFT_TIMEOUT_MS);
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        rc = err_set(err, ERR_RUNTIME, 0, "nft", "nft failed: %.400s",
                     e.data ? e.data : "(no message)");
    if (rc == 0 && out)
        buf_append(out, o.data ? o.data : "", o.len);
    buf_free(&o);
    buf_free(&e);
    return rc;
}

int net_nft_run(const char *script, buf_t *out, err_t *err)
{
    char *argv[] = {"nft", "-f", "-", NULL};
    return run(argv, script, out, err);
}

/* ---- reading the table back ---- */

static bool name_is(json_t *j, const char *name)
{
    return json_is_string(j) && strcmp(json_string_value(j), name) == 0;
}

/* "10.88.0.2", or {"elem": {"val": "10.88.0.2", ...}} for an element with a comment. */
static const char *elem_value(json_t *it)
{
    if (json_is_string(it))
        return json_string_value(it);
    return json_string_value(json_object_get(json_object_get(it, "elem"), "val"));
}

static void load_owner(json_t *elems, struct net_pool *p)
{
    size_t i;
    json_t *it;
    json_array_foreach(elems, i, it)
    {
        /* [ {"elem": {"val": "10.88.0.2", "comment": "<id>"}}, 7 ] */
        json_t *key = json_array_get(it, 0), *val = json_array_get(it, 1);
        const char *ip_s = elem_value(key);
        const char *id =
            json_string_value(json_object_get(json_object_get(key, "elem"), "comment"));
        uint32_t ip;
        if (!ip_s || !id || !json_is_integer(val) || !net_ip_parse(ip_s, &ip) || !net_id_valid(id))
            continue;
        struct net_entry *e = net_pool_reserve(p, id, ip, NULL);
        if (e) {
            e->owner = json_integer_value(val);
            e->in_nft = true;
        }
    }
}

static void load_open(json_t *elems, struct net_pool *p)
{
    size_t i;
    json_t *it;
    json_array_foreach(elems, i, it)
    {
        const char *s = elem_value(it);
        uint32_t ip;
        struct net_entry *e = s && net_ip_parse(s, &ip) ? net_pool_find_ip(p, ip) : NULL;
        if (e)
            e->open = true;
    }
}

/* {"elem": {"val": "10.88.0.3", "timeout": 300, "expires": 299}}: in quarantine that long. */
static void load_quarantine(json_t *elems, struct net_pool *p)
{
    size_t i;
    json_t *it;
    double now = now_mono_ms();
    json_array_foreach(elems, i, it)
    {
        json_t *exp = json_object_get(json_object_get(it, "elem"), "expires");
        const char *s = elem_value(it);
        uint32_t ip;
        if (s && net_ip_parse(s, &ip) && json_is_number(exp))
            net_pool_quarantine(p, ip, now + json_number_value(exp) * 1000.0);
    }
}

static void load_cursor(json_t *elems, struct net_pool *p)
{
    const char *s = elem_value(json_array_get(elems, 0));
    uint32_t ip;
    if (s && net_ip_parse(s, &ip))
        net_pool_set_cursor(p, ip);
}

int net_nft_load(const char *table, struct net_pool *p, err_t *err)
{
    buf_t out = {0};
    /* With -j, -f would read JSON: the listing goes on the command line. */
    char *argv[] = {"nft", "-j", "list", "table", "inet", (char *)table, NULL};
    if (run(argv, "", &out, err) < 0)
        return -1;
    json_error_t je;
    json_t *doc _cleanup_json_ = json_loadb(out.data ? out.data : "", out.len, 0, &je);
    buf_free(&out);
    json_t *items = json_object_get(doc, "nftables");
    if (!json_is_array(items))
        return err_set(err, ERR_RUNTIME, 0, "nft", "cannot parse `nft -j list table`: %s", je.text);
    size_t i;
    json_t *it, *m;
    json_array_foreach(items, i, it)
    {
        if ((m = json_object_get(it, "map")) && name_is(json_object_get(m, "name"), "owner"))
            load_owner(json_object_get(m, "elem"), p);
    }
    json_array_foreach(items, i, it)
    {
        if (!(m = json_object_get(it, "set")))
            continue;
        json_t *name = json_object_get(m, "name"), *elems = json_object_get(m, "elem");
        if (name_is(name, "egress_open"))
            load_open(elems, p);
        else if (name_is(name, "quarantine"))
            load_quarantine(elems, p);
        else if (name_is(name, "cursor"))
            load_cursor(elems, p);
    }
    return 0;
}
