/* Pieces of the networking layer shared between its files (and its unit tests). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include "common/buf.h"
#include "common/error.h"

#define NET_ID_MAX 64 /* longest sandbox id: file name of the netns, nft comment */

/* ---- addresses (pool.c): pure logic, no host access ---- */

/* An IPv4 subnet in host byte order. */
struct net_subnet {
    uint32_t net; /* network address */
    int prefix;   /* 8..29 */
};

/* Parse "a.b.c.d/p" (p 8..29, host bits zero); false if malformed. */
bool net_subnet_parse(const char *cidr, struct net_subnet *out);
/* Parse a dotted IPv4 address into host byte order; false if malformed. */
bool net_ip_parse(const char *s, uint32_t *out);
/* Format a host-byte-order IPv4 address into out (16 bytes). */
void net_ip_format(uint32_t ip, char *out);
/* The bridge's address: the subnet's first host. */
uint32_t net_subnet_gateway(const struct net_subnet *sn);
/* True if ip is a sandbox address of sn: inside, not network, gateway or broadcast. */
bool net_subnet_assignable(const struct net_subnet *sn, uint32_t ip);
/* The eth0 MAC for ip: 02:53 (local, unicast) then the four address bytes. out: 18 bytes. */
void net_mac_for_ip(uint32_t ip, char *out);
/* True if id may name a sandbox here: 1..64 of [A-Za-z0-9_-]. */
bool net_id_valid(const char *id);
/* The host veth name for id on bridge: "sbx" + 12 hex of a hash of both (out: 16 bytes). */
void net_ifname_for(const char *bridge, const char *id, char *out);

/* One sandbox known to the pool, with what the nft table holds for it. */
struct net_entry {
    char id[NET_ID_MAX + 1];
    uint32_t ip;
    int64_t owner; /* -1: unknown (reserved, no rules seen yet) */
    bool open;     /* in the egress_open set */
    bool in_nft;   /* its elements are in the table */
};

/* A freed address that is not handed out again before until_ms (CLOCK_MONOTONIC). */
struct net_quarantine {
    uint32_t ip;
    double until_ms;
};

/* Addresses in use: a bitmap over the subnet plus the id -> entry list. */
struct net_pool {
    struct net_subnet sn;
    uint8_t *used; /* one bit per address offset in the subnet */
    uint8_t *quar; /* one bit per offset: has an entry in quarantine (maybe expired) */
    uint32_t size; /* addresses in the subnet */
    uint32_t next; /* next-fit cursor: addresses are reused as late as possible */
    struct net_entry *ents;
    size_t n, cap;
    struct net_quarantine *q;
    size_t n_q, cap_q;
};

/* Start an empty pool over sn. */
void net_pool_init(struct net_pool *p, const struct net_subnet *sn);
/* Free the pool's memory. */
void net_pool_free(struct net_pool *p);
/* id's entry, or NULL. */
struct net_entry *net_pool_find(struct net_pool *p, const char *id);
/* The entry holding ip, or NULL. */
struct net_entry *net_pool_find_ip(struct net_pool *p, uint32_t ip);
/* Give id the next free address not in quarantine (next-fit); ERR_LIMIT when none is left. */
struct net_entry *net_pool_alloc(struct net_pool *p, const char *id, err_t *err);
/* Give id exactly ip; ERR_CONFLICT if another id holds it or id holds another address. */
struct net_entry *net_pool_reserve(struct net_pool *p, const char *id, uint32_t ip, err_t *err);
/* Forget id and free its address (no-op if unknown). */
void net_pool_release(struct net_pool *p, const char *id);
/* Keep ip from being allocated before until_ms (now_mono_ms() clock); extends, never shortens. */
void net_pool_quarantine(struct net_pool *p, uint32_t ip, double until_ms);
/* True if ip is in quarantine at now_ms (expired entries are forgotten on the way). */
bool net_pool_quarantined(struct net_pool *p, uint32_t ip, double now_ms);
/* The cursor as an address (what to persist), and setting it back from one (ignored if outside
 * the subnet). */
uint32_t net_pool_cursor(const struct net_pool *p);
void net_pool_set_cursor(struct net_pool *p, uint32_t ip);

/* ---- nftables (nft.c) ---- */

/* What the table's chains refer to. */
struct net_rules_cfg {
    const char *table, *bridge;
    struct net_subnet sn;
    char dns[4][16]; /* host nameservers sandboxes with open egress may query on port 53 */
    int n_dns;
};

/* The idempotent script that (re)creates the table, its sets and rebuilds its chains. */
char *net_nft_ruleset(const struct net_rules_cfg *c);
/* Run `nft -f -` with script on stdin (one atomic transaction); stdout into out if not NULL. */
int net_nft_run(const char *script, buf_t *out, err_t *err);
/* Append the element add (add=true) or delete commands of entry e to script. */
void net_nft_elements(buf_t *script, const char *table, const struct net_entry *e, bool add);
/* Append commands that put ip in the quarantine set for seconds. */
void net_nft_quarantine(buf_t *script, const char *table, uint32_t ip, int seconds);
/* Append commands that record the pool's cursor (an address) in the table. */
void net_nft_cursor(buf_t *script, const char *table, uint32_t ip);
/* Append the ARP table's bound element of e (add, as after an upgrade: existing ones stay). */
void net_nft_arp_bound(buf_t *script, const char *table, const struct net_entry *e);
/* Read every sandbox element, the quarantine and the cursor of the table into the pool. */
int net_nft_load(const char *table, struct net_pool *p, err_t *err);

/* ---- /etc files (etc.c) ---- */

/* Nameservers a sandbox with open egress can use, from resolv.conf text: IPv4, not loopback. */
int net_resolv_nameservers(const char *text, char out[][16], int max);
/* The host's usable nameservers: /etc/resolv.conf, else systemd-resolved's upstream list. */
int net_host_nameservers(char out[][16], int max);

/* ---- rtnetlink (rtnl.c) ---- */

/* A NETLINK_ROUTE socket (or another netlink family), bound to the netns it was created in. */
struct net_rtnl {
    int fd;
    uint32_t seq;
};

/* One netlink request being built. */
typedef struct {
    union {
        struct nlmsghdr h;
        char raw[2048];
    };
} net_nlreq_t;

/* Called for each message of a reply; < 0 (an errno) stops. */
typedef int (*net_nl_reply_fn)(const struct nlmsghdr *h, void *ctx);

/* Start request q: type, flags (NLM_F_REQUEST is added), then a family header; returns it. */
void *net_nl_init(net_nlreq_t *q, uint16_t type, uint16_t flags, const void *hdr, size_t len);
/* Append an attribute (abort()s past the buffer: requests are built from bounded data). */
void net_nl_put(net_nlreq_t *q, uint16_t type, const void *data, size_t len);
/* Send q and read its replies (a dump's until DONE); 0 or a negative errno. */
int net_nl_exchange(struct net_rtnl *r, net_nlreq_t *q, net_nl_reply_fn fn, void *ctx, bool dump);
/* Index attributes a..len by type (nested flag masked) into tb[0..max]. */
void net_nl_attrs(struct rtattr *tb[], int max, struct rtattr *a, int len);

/* Open an rtnetlink socket in the calling thread's netns. */
int net_rtnl_open(struct net_rtnl *r, err_t *err);
/* Adopt fd (an rtnetlink socket made elsewhere, e.g. inside a sandbox's netns). */
void net_rtnl_adopt(struct net_rtnl *r, int fd);
/* Close the socket. */
void net_rtnl_close(struct net_rtnl *r);
/* ifindex of name (> 0), or -ENODEV; kind (if not NULL, 16 bytes) gets its link kind. */
int net_rtnl_link_get(struct net_rtnl *r, const char *name, char *kind, int *master);
/* Create a bridge (EEXIST is not an error). */
int net_rtnl_bridge_add(struct net_rtnl *r, const char *name);
/* Create veth host<->peer, host attached to master (down), peer moved into netns_fd. */
int net_rtnl_veth_add(struct net_rtnl *r, const char *host, int master, const char *peer,
                      const unsigned char mac[6], int netns_fd);
/* Set a link up or down. */
int net_rtnl_link_up(struct net_rtnl *r, int ifindex, bool up);
/* Set a link's MAC address. */
int net_rtnl_link_mac(struct net_rtnl *r, int ifindex, const unsigned char mac[6]);
/* Delete a link by name (a missing one is not an error). */
int net_rtnl_link_del(struct net_rtnl *r, const char *name);
/* Set ip/prefix on ifindex (replacing an existing identical address). */
int net_rtnl_addr_set(struct net_rtnl *r, int ifindex, uint32_t ip, int prefix);
/* Set the default route via gw (replacing one). */
int net_rtnl_route_default(struct net_rtnl *r, uint32_t gw);
/* Make a bridge port private: isolated, locked to static MACs, no learning, no flooding. */
int net_rtnl_port_lock(struct net_rtnl *r, int ifindex);
/* Add a static bridge FDB entry mac -> port ifindex. */
int net_rtnl_fdb_add(struct net_rtnl *r, int ifindex, const unsigned char mac[6]);
/* Set a permanent neighbour entry ip -> mac on ifindex (replacing a learned one). */
int net_rtnl_neigh_set(struct net_rtnl *r, int ifindex, uint32_t ip, const unsigned char mac[6]);
/* Delete the neighbour entry of ip on ifindex (a missing one is not an error). */
int net_rtnl_neigh_del(struct net_rtnl *r, int ifindex, uint32_t ip);
/* The type of the host's route to ip (RTN_LOCAL, RTN_UNICAST, ...), or a negative errno. */
int net_rtnl_route_type(struct net_rtnl *r, uint32_t ip);
/* Call fn with the name of every link whose master is master (fn may not use r). */
int net_rtnl_ports(struct net_rtnl *r, int master, void (*fn)(const char *name, void *ctx),
                   void *ctx);

/* ---- connection tracking (conntrack.c) ---- */

/* Delete the host's conntrack entries with ip on either side (original or reply direction);
 * the number found (>= 0), or -1 with err set. */
int net_ct_flush(uint32_t ip, err_t *err);

/* ---- network namespaces and sysctls (netns.c) ---- */

/* Make dir exist and be a shared mount, like /run/netns for `ip netns`. */
int net_netns_prepare_dir(const char *dir, err_t *err);
/*
 * Make (or, if it exists, enter) the netns bound at path, with IPv6 off and lo up, and
 * return an rtnetlink socket inside it in *nl_fd; *created tells which.
 */
int net_netns_ensure(const char *path, int *nl_fd, bool *created, err_t *err);
/* Unmount and remove the netns file at path (missing is fine). */
int net_netns_remove(const char *path, err_t *err);
/* Make path the network namespace of process pid (the one there before is let go). */
int net_netns_adopt(const char *path, pid_t pid, err_t *err);
/* Write value to /proc/sys/<key> in the host's netns ("net/ipv4/ip_forward"). */
int net_sysctl_write(const char *key, const char *value, err_t *err);
/* Read /proc/sys/<key> into out; false if unreadable. */
bool net_sysctl_read(const char *key, char *out, size_t size);
