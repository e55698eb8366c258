/*
 * The networking layer's API: the bridge and table at open, one sandbox's network at
 * setup/teardown, and reconcile after a restart. The design and every rule are explained in
 * docs/networking.md.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "net.h"
#include "net_internal.h"

/* How long a freed address is not handed out again, at least: longer than the egress proxy
 * keeps a silent tunnel open, so a host socket of the old holder has had time to go. */
#define QUARANTINE_S 300

struct net {
    char *bridge, *netns_dir, *table;
    struct net_subnet sn;
    int host_port;        /* the one TCP port on the gateway sandboxes may reach (0: none) */
    pthread_mutex_t lock; /* guards pool, and keeps it in step with the table's elements */
    struct net_pool pool;
};

/* ---- small helpers ---- */

static bool name_ok(const char *s, size_t max, bool dots)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || (dots && (c == '-' || c == '.'))))
            return false;
    }
    return true;
}

static void mac_bytes(uint32_t ip, unsigned char mac[6])
{
    mac[0] = 0x02, mac[1] = 0x53;
    mac[2] = (unsigned char)(ip >> 24), mac[3] = (unsigned char)(ip >> 16);
    mac[4] = (unsigned char)(ip >> 8), mac[5] = (unsigned char)ip;
}

/* A negative errno from rtnl into err. */
static int rt_fail(err_t *err, int rc, const char *what, const char *name)
{
    errno = -rc;
    return err_set(err, ERR_RUNTIME, -rc, "network", "%s %s: %s", what, name, strerror(-rc));
}

static char *netns_path(const net_t *n, const char *id)
{
    return xasprintf("%s/%s", n->netns_dir, id);
}

char *net_userns_path(const net_t *n, const char *id)
{
    return xasprintf("%s/%s.user", n->netns_dir, id);
}

void net_host_ifname(const net_t *n, const char *id, char *out)
{
    net_ifname_for(n->bridge, id, out);
}

/* ---- host settings ---- */

/* Routing between sandboxes happens on the bridge, so it must forward; this flag is per
 * interface and changes nothing for the host's other interfaces. */
static int bridge_sysctls(const net_t *n, err_t *err)
{
    char key[128];
    static const char *const v4[][2] = {
        {"conf/%s/forwarding", "1"},      /* sandbox -> host -> sandbox */
        {"conf/%s/proxy_arp_pvlan", "1"}, /* answer ARP for peers on isolated ports */
        {"neigh/%s/proxy_delay", "0"},    /* ... at once, not after a random delay */
        {"conf/%s/send_redirects", "0"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(v4); i++) {
        int len = snprintf(key, sizeof(key), "net/ipv4/");
        snprintf(key + len, sizeof(key) - (size_t)len, v4[i][0], n->bridge);
        if (net_sysctl_write(key, v4[i][1], err) < 0)
            return -1;
    }
    snprintf(key, sizeof(key), "net/ipv6/conf/%s/disable_ipv6", n->bridge);
    net_sysctl_write(key, "1", NULL); /* no IPv6 on the bridge; fine if IPv6 is off */
    return 0;
}

/* Open egress needs the host to forward replies arriving on its uplink: global forwarding. */
static int ensure_ip_forward(err_t *err)
{
    char v[8] = "";
    if (net_sysctl_read("net/ipv4/ip_forward", v, sizeof(v)) && strcmp(v, "1") == 0)
        return 0;
    if (net_sysctl_write("net/ipv4/ip_forward", "1", err) < 0)
        return -1;
    log_warn("net.host_change", "sysctl=net.ipv4.ip_forward old=%s new=1 reason=open_egress",
             v[0] ? v : "unknown");
    return 0;
}

static int ensure_bridge(const net_t *n, struct net_rtnl *r, err_t *err)
{
    char kind[16];
    int idx = net_rtnl_link_get(r, n->bridge, kind, NULL);
    if (idx > 0 && strcmp(kind, "bridge") != 0)
        return err_set(err, ERR_CONFLICT, 0, "network", "%s exists and is not a bridge", n->bridge);
    if (idx < 0) {
        int rc = net_rtnl_bridge_add(r, n->bridge);
        if (rc < 0 || (idx = net_rtnl_link_get(r, n->bridge, NULL, NULL)) < 0)
            return rt_fail(err, rc < 0 ? rc : idx, "create bridge", n->bridge);
        log_info("net.host_change", "bridge=%s created=1", n->bridge);
    }
    /* A fixed MAC: otherwise the bridge takes its lowest port's and the gateway's MAC would
     * change under every sandbox whenever a sandbox comes or goes. */
    unsigned char mac[6];
    uint32_t gw = net_subnet_gateway(&n->sn);
    mac_bytes(gw, mac);
    int rc = net_rtnl_link_mac(r, idx, mac);
    if (rc == 0)
        rc = net_rtnl_addr_set(r, idx, gw, n->sn.prefix);
    if (rc == 0)
        rc = net_rtnl_link_up(r, idx, true);
    return rc < 0 ? rt_fail(err, rc, "configure bridge", n->bridge) : 0;
}

/* The sandboxes found in the table get their ARP binding and permanent neighbour entry again
 * (both are idempotent): a daemon from before they existed left running sandboxes without. */
static int pin_known(net_t *n, err_t *err)
{
    buf_t s = {0};
    struct net_rtnl r;
    if (net_rtnl_open(&r, err) < 0)
        return -1;
    int bridge = net_rtnl_link_get(&r, n->bridge, NULL, NULL), rc = bridge < 0 ? bridge : 0;
    for (size_t i = 0; rc == 0 && i < n->pool.n; i++) {
        const struct net_entry *e = &n->pool.ents[i];
        if (!e->in_nft)
            continue;
        unsigned char mac[6];
        mac_bytes(e->ip, mac);
        net_nft_arp_bound(&s, n->table, e);
        rc = net_rtnl_neigh_set(&r, bridge, e->ip, mac);
    }
    net_rtnl_close(&r);
    if (rc < 0) {
        buf_free(&s);
        return rt_fail(err, rc, "pin the neighbour entries on", n->bridge);
    }
    rc = s.len ? net_nft_run(s.data, NULL, err) : 0;
    buf_free(&s);
    return rc < 0 ? err_prefix(err, "bind the known sandboxes' ARP") : 0;
}

static int load_table(net_t *n, err_t *err)
{
    struct net_rules_cfg rc = {.table = n->table, .bridge = n->bridge, .sn = n->sn};
    rc.n_dns = net_host_nameservers(rc.dns, 4);
    _cleanup_free_ char *script = net_nft_ruleset(&rc);
    if (net_nft_run(script, NULL, err) < 0)
        return err_prefix(err, "load nft table inet %s", n->table);
    /* The set is kept across reloads: it holds exactly this daemon's port (the egress proxy). */
    _cleanup_free_ char *ports = n->host_port > 0
                                     ? xasprintf("flush set inet %s host_ports\n"
                                                 "add element inet %s host_ports { %d }\n",
                                                 n->table, n->table, n->host_port)
                                     : xasprintf("flush set inet %s host_ports\n", n->table);
    if (net_nft_run(ports, NULL, err) < 0)
        return err_prefix(err, "set the host ports of nft table inet %s", n->table);
    if (net_nft_load(n->table, &n->pool, err) < 0 || pin_known(n, err) < 0)
        return -1;
    for (size_t i = 0; i < n->pool.n; i++)
        if (n->pool.ents[i].open)
            return ensure_ip_forward(err);
    return 0;
}

/* ---- open / close / destroy ---- */

static int check_config(const struct net_config *c, struct net_subnet *sn, err_t *err)
{
    if (!net_subnet_parse(c->subnet, sn))
        return err_set(err, ERR_INVALID, 0, "bad_subnet",
                       "subnet '%s' is not an IPv4 network a.b.c.d/8..29", c->subnet);
    if (!name_ok(c->bridge, 15, true))
        return err_set(err, ERR_INVALID, 0, "bad_bridge", "bad bridge name '%s'", c->bridge);
    if (!name_ok(c->table, 32, false))
        return err_set(err, ERR_INVALID, 0, "bad_table", "bad nft table name '%s'", c->table);
    if (!c->netns_dir || c->netns_dir[0] != '/' || strlen(c->netns_dir) > 160)
        return err_set(err, ERR_INVALID, 0, "bad_netns_dir",
                       "netns_dir must be an absolute path of at most 160 bytes");
    return 0;
}

net_t *net_open(const struct net_config *cfg, err_t *err)
{
    struct net_config c = *cfg;
    c.subnet = c.subnet ? c.subnet : "10.88.0.0/16";
    c.bridge = c.bridge ? c.bridge : "sbx0";
    c.table = c.table ? c.table : "sandboxer";
    struct net_subnet sn;
    if (check_config(&c, &sn, err) < 0)
        return NULL;
    net_t *n = xcalloc(1, sizeof(*n));
    n->bridge = xstrdup(c.bridge);
    n->netns_dir = xstrdup(c.netns_dir);
    n->table = xstrdup(c.table);
    n->sn = sn;
    n->host_port = c.host_port > 0 && c.host_port < 65536 ? c.host_port : 0;
    pthread_mutex_init(&n->lock, NULL);
    net_pool_init(&n->pool, &sn);
    struct net_rtnl r = {.fd = -1};
    if (net_netns_prepare_dir(n->netns_dir, err) < 0 || net_rtnl_open(&r, err) < 0 ||
        ensure_bridge(n, &r, err) < 0 || bridge_sysctls(n, err) < 0 || load_table(n, err) < 0) {
        net_rtnl_close(&r);
        net_close(n);
        return NULL;
    }
    net_rtnl_close(&r);
    log_info("net.open", "bridge=%s subnet=%s table=%s sandboxes=%zu", n->bridge, c.subnet,
             n->table, n->pool.n);
    return n;
}

void net_gateway(const net_t *n, char out[16])
{
    net_ip_format(net_subnet_gateway(&n->sn), out);
}

void net_close(net_t *n)
{
    if (!n)
        return;
    net_pool_free(&n->pool);
    pthread_mutex_destroy(&n->lock);
    free(n->bridge);
    free(n->netns_dir);
    free(n->table);
    free(n);
}

int net_destroy(net_t *n, err_t *err)
{
    if (net_reconcile(n, NULL, 0, err) < 0)
        return -1;
    const char *families[] = {"inet", "arp"};
    for (size_t i = 0; i < ARRAY_SIZE(families); i++) {
        _cleanup_free_ char *script = xasprintf("delete table %s %s\n", families[i], n->table);
        err_t e2;
        if (net_nft_run(script, NULL, &e2) < 0 && !strstr(e2.msg, "No such file"))
            return err_set(err, e2.kind, 0, e2.code, "%s", e2.msg);
    }
    struct net_rtnl r;
    if (net_rtnl_open(&r, err) < 0)
        return -1;
    int rc = net_rtnl_link_del(&r, n->bridge);
    net_rtnl_close(&r);
    if (rc < 0)
        return rt_fail(err, rc, "delete bridge", n->bridge);
    /* The shared self-bind net_open put on the directory. */
    if (umount2(n->netns_dir, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
        return err_sys(err, "unmount %s", n->netns_dir);
    log_info("net.destroy", "bridge=%s table=%s ip_forward=unchanged", n->bridge, n->table);
    return 0;
}

/* ---- addresses and rules of one sandbox ---- */

/* Find or make id's entry: ip_s if given (must match a known one), else a free address. */
static struct net_entry *claim(net_t *n, const char *id, const char *ip_s, err_t *err)
{
    uint32_t ip;
    if (ip_s && !net_ip_parse(ip_s, &ip)) {
        err_set(err, ERR_INVALID, 0, "bad_address", "'%s' is not an IPv4 address", ip_s);
        return NULL;
    }
    if (ip_s)
        return net_pool_reserve(&n->pool, id, ip, err);
    struct net_entry *e = net_pool_find(&n->pool, id);
    return e ? e : net_pool_alloc(&n->pool, id, err);
}

/* Bring the table's elements for id to (owner, open), and record the pool's cursor if it
 * moved; the pool follows only on success. */
static int sync_rules(net_t *n, struct net_entry *e, int64_t owner, bool open, bool moved,
                      err_t *err)
{
    if (e->in_nft && e->owner == owner && e->open == open)
        return 0;
    buf_t s = {0};
    if (moved) /* kept across restarts: a restarted daemon does not start over at the lowest */
        net_nft_cursor(&s, n->table, net_pool_cursor(&n->pool));
    if (e->in_nft)
        net_nft_elements(&s, n->table, e, false);
    struct net_entry next = *e;
    next.owner = owner;
    next.open = open;
    net_nft_elements(&s, n->table, &next, true);
    int rc = net_nft_run(s.data, NULL, err);
    buf_free(&s);
    if (rc < 0)
        return err_prefix(err, "add rules of sandbox %s", e->id);
    *e = next;
    e->in_nft = true;
    return 0;
}

/* Keep ip from being handed out again for a while, in memory and in the table (so a restart
 * keeps it too). */
static void quarantine(net_t *n, uint32_t ip, buf_t *script)
{
    net_pool_quarantine(&n->pool, ip, now_mono_ms() + QUARANTINE_S * 1000.0);
    net_nft_quarantine(script, n->table, ip, QUARANTINE_S);
}

/* Remove id's elements and quarantine its address; if the batch fails (one already gone),
 * each command on its own. */
static void drop_rules(net_t *n, struct net_entry *e)
{
    buf_t s = {0};
    quarantine(n, e->ip, &s);
    if (e->in_nft)
        net_nft_elements(&s, n->table, e, false);
    if (net_nft_run(s.data, NULL, NULL) < 0) {
        char *save = NULL;
        for (char *line = strtok_r(s.data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            _cleanup_free_ char *one = xasprintf("%s\n", line);
            net_nft_run(one, NULL, NULL);
        }
    }
    buf_free(&s);
    e->in_nft = false;
}

/*
 * The address of a sandbox new here: ip_s if given (a known sandbox's), else the next free one
 * the host tracks no flow of; one that still has some goes back to quarantine. Either way no
 * flow of an earlier holder survives: a new owner never inherits an "established" one.
 */
static struct net_entry *claim_new(net_t *n, const char *id, const char *ip_s, err_t *err)
{
    for (int tries = 0; tries < 16; tries++) {
        struct net_entry *e = claim(n, id, ip_s, err);
        if (!e)
            return NULL;
        uint32_t ip = e->ip;
        int found = net_ct_flush(ip, err);
        if (found == 0 || (found > 0 && ip_s))
            return e;
        net_pool_release(&n->pool, id);
        if (found < 0)
            return NULL;
        char a[16];
        net_ip_format(ip, a);
        log_info("net.quarantine", "ip=%s tracked_flows=%d msg=\"flows remain: not handed out\"", a,
                 found);
        buf_t s = {0};
        quarantine(n, ip, &s);
        net_nft_run(s.data, NULL, NULL); /* best effort: memory holds it for this run */
        buf_free(&s);
    }
    err_set(err, ERR_LIMIT, 0, "no_address", "no free address without tracked flows left");
    return NULL;
}

/* Address and rules, under the lock; *fresh tells whether id had no address before. */
static int setup_rules(net_t *n, const char *id, int64_t owner, bool open, const char *ip,
                       uint32_t *out_ip, bool *fresh, err_t *err)
{
    pthread_mutex_lock(&n->lock);
    *fresh = net_pool_find(&n->pool, id) == NULL;
    struct net_entry *e = *fresh ? claim_new(n, id, ip, err) : claim(n, id, ip, err);
    int rc = e ? sync_rules(n, e, owner, open, *fresh && !ip, err) : -1;
    if (rc == 0)
        *out_ip = e->ip;
    else if (e && *fresh)
        net_pool_release(&n->pool, id);
    if (rc == 0 && open)
        rc = ensure_ip_forward(err);
    pthread_mutex_unlock(&n->lock);
    return rc;
}

/* ---- links of one sandbox ---- */

struct plumb {
    const char *id, *path;
    char ifname[16];
    uint32_t ip;
    unsigned char mac[6];
    struct net_rtnl host, ns;
    bool ns_created;
};

/* The host end: created with its peer (eth0, in the netns), or kept if already paired. */
static int host_veth(const net_t *n, struct plumb *p, int bridge, err_t *err)
{
    int master = 0, idx = net_rtnl_link_get(&p->host, p->ifname, NULL, &master);
    bool paired = idx > 0 && master == bridge && !p->ns_created &&
                  net_rtnl_link_get(&p->ns, "eth0", NULL, NULL) > 0;
    if (paired)
        return idx;
    if (idx > 0) /* a leftover whose peer is not in this netns */
        net_rtnl_link_del(&p->host, p->ifname);
    int fd _cleanup_close_ = open(p->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return err_sys(err, "open %s", p->path);
    int rc = net_rtnl_veth_add(&p->host, p->ifname, bridge, "eth0", p->mac, fd);
    if (rc < 0 || (idx = net_rtnl_link_get(&p->host, p->ifname, NULL, NULL)) < 0)
        return rt_fail(err, rc < 0 ? rc : idx, "create veth", p->ifname);
    return idx;
}

/* Lock the port to the sandbox's MAC, then (only then) bring it up. */
static int host_port(struct plumb *p, int idx, err_t *err)
{
    int rc = net_rtnl_port_lock(&p->host, idx);
    if (rc == 0)
        rc = net_rtnl_fdb_add(&p->host, idx, p->mac);
    if (rc == 0)
        rc = net_rtnl_link_up(&p->host, idx, true);
    return rc < 0 ? rt_fail(err, rc, "configure bridge port", p->ifname) : 0;
}

static int inside(const net_t *n, struct plumb *p, err_t *err)
{
    int idx = net_rtnl_link_get(&p->ns, "eth0", NULL, NULL);
    int rc = idx < 0 ? idx : net_rtnl_addr_set(&p->ns, idx, p->ip, n->sn.prefix);
    if (rc == 0)
        rc = net_rtnl_link_up(&p->ns, idx, true);
    if (rc == 0)
        rc = net_rtnl_route_default(&p->ns, net_subnet_gateway(&n->sn));
    return rc < 0 ? rt_fail(err, rc, "configure eth0 of", p->id) : 0;
}

static int plumb(net_t *n, struct plumb *p, err_t *err)
{
    int nl_fd;
    if (net_netns_ensure(p->path, &nl_fd, &p->ns_created, err) < 0)
        return -1;
    net_rtnl_adopt(&p->ns, nl_fd);
    if (net_rtnl_open(&p->host, err) < 0)
        return -1;
    int bridge = net_rtnl_link_get(&p->host, n->bridge, NULL, NULL);
    if (bridge < 0)
        return rt_fail(err, bridge, "find bridge", n->bridge);
    int idx = host_veth(n, p, bridge, err);
    if (idx < 0 || host_port(p, idx, err) < 0 || inside(n, p, err) < 0)
        return -1;
    /* The host's entry for the address is fixed: nothing a sandbox sends can move it. */
    int rc = net_rtnl_neigh_set(&p->host, bridge, p->ip, p->mac);
    if (rc < 0)
        return rt_fail(err, rc, "set the neighbour entry of", p->id);
    /* Re-asserted on every setup: writing net.ipv4.ip_forward resets it. */
    return bridge_sysctls(n, err);
}

static void fill_out(const net_t *n, const struct plumb *p, bool open, struct net_sandbox *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->netns_path, sizeof(out->netns_path), "%s", p->path);
    net_ip_format(p->ip, out->ip);
    net_ip_format(net_subnet_gateway(&n->sn), out->gateway);
    out->prefix = n->sn.prefix;
    net_mac_for_ip(p->ip, out->mac);
    snprintf(out->host_if, sizeof(out->host_if), "%s", p->ifname);
    snprintf(out->egress, sizeof(out->egress), "%s", open ? "open" : "none");
}

static int check_setup_args(const char *id, int64_t owner, const char *egress, err_t *err)
{
    if (!net_id_valid(id))
        return err_set(err, ERR_INVALID, 0, "bad_id", "bad sandbox id for networking");
    if (owner < 0 || owner > 0xffffffffLL)
        return err_set(err, ERR_INVALID, 0, "bad_owner", "owner id %lld is out of range",
                       (long long)owner);
    if (!egress || (strcmp(egress, "none") != 0 && strcmp(egress, "open") != 0))
        return err_set(err, ERR_INVALID, 0, "bad_egress", "egress must be \"none\" or \"open\"");
    return 0;
}

int net_sandbox_setup(net_t *n, const char *id, int64_t owner_id, const char *egress,
                      const char *ip, struct net_sandbox *out, err_t *err)
{
    if (check_setup_args(id, owner_id, egress, err) < 0)
        return -1;
    bool open = strcmp(egress, "open") == 0, fresh;
    _cleanup_free_ char *path = netns_path(n, id);
    struct plumb p = {.id = id, .path = path, .host = {-1, 0}, .ns = {-1, 0}};
    if (setup_rules(n, id, owner_id, open, ip, &p.ip, &fresh, err) < 0)
        return -1;
    net_ifname_for(n->bridge, id, p.ifname);
    mac_bytes(p.ip, p.mac);
    int rc = plumb(n, &p, err);
    net_rtnl_close(&p.host);
    net_rtnl_close(&p.ns);
    if (rc < 0) {
        if (fresh) /* roll back what this call made; a known sandbox keeps its address */
            net_sandbox_teardown(n, id, NULL);
        return err_prefix(err, "network of sandbox %s", id);
    }
    fill_out(n, &p, open, out);
    log_info("net.sandbox_setup", "sandbox=%s ip=%s owner=%lld egress=%s if=%s", id, out->ip,
             (long long)owner_id, out->egress, p.ifname);
    return 0;
}

int net_sandbox_set_owner(net_t *n, const char *id, int64_t owner_id, err_t *err)
{
    if (owner_id < 0 || owner_id > 0xffffffffLL)
        return err_set(err, ERR_INVALID, 0, "bad_owner", "owner id %lld is out of range",
                       (long long)owner_id);
    pthread_mutex_lock(&n->lock);
    struct net_entry *e = net_pool_find(&n->pool, id);
    int rc = e ? sync_rules(n, e, owner_id, e->open, false, err)
               : err_set(err, ERR_NOT_FOUND, 0, "no_network", "sandbox %s has no address", id);
    pthread_mutex_unlock(&n->lock);
    if (rc == 0)
        log_info("net.owner", "sandbox=%s owner=%lld", id, (long long)owner_id);
    return rc;
}

int net_sandbox_adopt_netns(net_t *n, const char *id, pid_t pid, err_t *err)
{
    if (!net_id_valid(id))
        return err_set(err, ERR_INVALID, 0, "bad_id", "bad sandbox id for networking");
    char ifname[16];
    net_ifname_for(n->bridge, id, ifname);
    struct net_rtnl r;
    if (net_rtnl_open(&r, err) < 0)
        return -1;
    int rc = net_rtnl_link_del(&r, ifname); /* takes eth0 in the old netns with it */
    net_rtnl_close(&r);
    if (rc < 0)
        return rt_fail(err, rc, "delete veth", ifname);
    _cleanup_free_ char *path = netns_path(n, id);
    return net_netns_adopt(path, pid, err);
}

int net_sandbox_teardown(net_t *n, const char *id, err_t *err)
{
    if (!net_id_valid(id))
        return err_set(err, ERR_INVALID, 0, "bad_id", "bad sandbox id for networking");
    char ifname[16];
    net_ifname_for(n->bridge, id, ifname);
    struct net_rtnl r;
    if (net_rtnl_open(&r, err) < 0)
        return -1;
    int rc = net_rtnl_link_del(&r, ifname); /* takes eth0 in the netns with it */
    if (rc < 0) {
        net_rtnl_close(&r);
        return rt_fail(err, rc, "delete veth", ifname);
    }
    pthread_mutex_lock(&n->lock);
    struct net_entry *e = net_pool_find(&n->pool, id);
    uint32_t ip = e ? e->ip : 0;
    if (e)
        drop_rules(n, e);
    net_pool_release(&n->pool, id);
    pthread_mutex_unlock(&n->lock);
    int bridge = ip ? net_rtnl_link_get(&r, n->bridge, NULL, NULL) : -1;
    if (bridge > 0)
        net_rtnl_neigh_del(&r, bridge, ip);
    net_rtnl_close(&r);
    /* After the veth: nothing of the sandbox's own makes new entries any more. A failure
     * does not keep the rest here: the address is in quarantine, and the allocator checks
     * (and flushes) an address's flows again before handing it out. */
    err_t ct_err = {0};
    if (ip && net_ct_flush(ip, &ct_err) < 0)
        log_warn("net.conntrack", "sandbox=%s msg=\"%s\"", id, ct_err.msg);
    _cleanup_free_ char *path = netns_path(n, id);
    /* and the file of the user namespace that owns it, where the sandbox has one */
    _cleanup_free_ char *user = net_userns_path(n, id);
    if (net_netns_remove(path, err) < 0 || net_netns_remove(user, err) < 0)
        return -1;
    log_info("net.sandbox_teardown", "sandbox=%s if=%s", id, ifname);
    return 0;
}

bool net_address_on_host(const net_t *n, uint32_t addr)
{
    uint32_t ip = ntohl(addr);
    uint32_t mask = 0xffffffffu << (32 - n->sn.prefix);
    if ((ip & mask) == n->sn.net) /* the bridge, the sandboxes, the subnet's broadcast */
        return true;
    struct net_rtnl r;
    if (net_rtnl_open(&r, NULL) < 0)
        return true; /* cannot tell: refuse */
    int type = net_rtnl_route_type(&r, ip);
    net_rtnl_close(&r);
    if (type == -ENETUNREACH || type == -EHOSTUNREACH)
        return false; /* no route: the connect fails on its own */
    /* A fresh lookup each time: it follows addresses as interfaces come, go and change. */
    return type != RTN_UNICAST;
}

int net_reserve(net_t *n, const char *id, const char *ip, err_t *err)
{
    if (!net_id_valid(id))
        return err_set(err, ERR_INVALID, 0, "bad_id", "bad sandbox id for networking");
    if (!ip)
        return err_set(err, ERR_INVALID, 0, "bad_address", "no address to reserve");
    pthread_mutex_lock(&n->lock);
    struct net_entry *e = claim(n, id, ip, err);
    pthread_mutex_unlock(&n->lock);
    return e ? 0 : -1;
}

/* ---- reconcile ---- */

struct idset {
    const char **v;
    size_t n;
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool idset_has(const struct idset *s, const char *id)
{
    return s->n && bsearch(&id, s->v, s->n, sizeof(*s->v), cmp_str);
}

struct strays {
    const struct idset *live_if;
    char (*names)[16];
    size_t n, cap;
};

static void on_port(const char *name, void *ctx)
{
    struct strays *s = ctx;
    if (idset_has(s->live_if, name))
        return;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->names = xrealloc(s->names, s->cap * sizeof(*s->names));
    }
    snprintf(s->names[s->n++], 16, "%s", name);
}

/* Ports of our bridge that belong to no live sandbox (their netns may be long gone). */
static int reap_ports(net_t *n, const struct idset *live, err_t *err)
{
    char(*ifs)[16] = xcalloc(live->n + 1, 16);
    const char **ptrs = xcalloc(live->n + 1, sizeof(*ptrs));
    for (size_t i = 0; i < live->n; i++) {
        net_ifname_for(n->bridge, live->v[i], ifs[i]);
        ptrs[i] = ifs[i];
    }
    struct idset live_if = {ptrs, live->n};
    qsort(ptrs, live->n, sizeof(*ptrs), cmp_str);
    struct strays s = {.live_if = &live_if};
    struct net_rtnl r;
    int rc = net_rtnl_open(&r, err);
    int bridge = rc < 0 ? -1 : net_rtnl_link_get(&r, n->bridge, NULL, NULL);
    if (bridge > 0 && (rc = net_rtnl_ports(&r, bridge, on_port, &s)) < 0)
        rt_fail(err, rc, "list ports of", n->bridge);
    for (size_t i = 0; rc >= 0 && i < s.n; i++) {
        net_rtnl_link_del(&r, s.names[i]);
        log_info("net.reconcile", "stray_port=%s", s.names[i]);
    }
    if (r.fd >= 0)
        net_rtnl_close(&r);
    int removed = rc < 0 ? -1 : (int)s.n;
    free(s.names);
    free(ptrs);
    free(ifs);
    return removed;
}

struct idlist {
    char **v;
    size_t n, cap;
};

static void idlist_add(struct idlist *l, const char *id)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i], id) == 0)
            return;
    if (l->n == l->cap)
        l->v = xrealloc(l->v, (l->cap = l->cap ? l->cap * 2 : 16) * sizeof(*l->v));
    l->v[l->n++] = xstrdup(id);
}

/* Ids with an address or a netns file here that are not live. */
static void stray_ids(net_t *n, const struct idset *live, struct idlist *out)
{
    pthread_mutex_lock(&n->lock);
    for (size_t i = 0; i < n->pool.n; i++)
        if (!idset_has(live, n->pool.ents[i].id))
            idlist_add(out, n->pool.ents[i].id);
    pthread_mutex_unlock(&n->lock);
    DIR *d _cleanup_closedir_ = opendir(n->netns_dir);
    for (struct dirent *de; d && (de = readdir(d));)
        if (net_id_valid(de->d_name) && !idset_has(live, de->d_name))
            idlist_add(out, de->d_name);
}

int net_reconcile(net_t *n, const char *const *live_ids, size_t n_live, err_t *err)
{
    struct idset live = {xcalloc(n_live + 1, sizeof(char *)), n_live};
    for (size_t i = 0; i < n_live; i++)
        live.v[i] = live_ids[i];
    qsort(live.v, n_live, sizeof(char *), cmp_str);
    struct idlist strays = {0};
    stray_ids(n, &live, &strays);
    int removed = 0, rc = 0;
    for (size_t i = 0; i < strays.n; i++) {
        if (rc == 0 && net_sandbox_teardown(n, strays.v[i], err) < 0)
            rc = -1;
        else if (rc == 0)
            removed++, log_info("net.reconcile", "stray_sandbox=%s", strays.v[i]);
        free(strays.v[i]);
    }
    free(strays.v);
    int ports = rc < 0 ? -1 : reap_ports(n, &live, err);
    free(live.v);
    return rc < 0 || ports < 0 ? -1 : removed + ports;
}
