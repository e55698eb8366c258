/*
 * Sandbox networking: bridge, one network namespace + veth + address per sandbox, and the
 * nftables table that isolates owners and applies each sandbox's egress policy.
 * Only this module touches netlink and nftables. See docs/networking.md.
 *
 * Thread safety: calls for different sandbox ids may run concurrently; the caller serializes
 * calls for one id (its per-sandbox lock) and runs net_reconcile before serving requests.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* An open networking layer: the bridge, the nft table and the in-memory address table. */
typedef struct net net_t;

/* Where and how the layer lives on the host; NULL fields take the defaults shown. */
struct net_config {
    const char *subnet;    /* IPv4 CIDR, prefix 8..29: "10.88.0.0/16"; gateway = first host */
    const char *bridge;    /* bridge device: "sbx0" */
    const char *netns_dir; /* where named netns files are bind-mounted: required, <state>/netns */
    const char *table;     /* nftables table in family inet: "sandboxer" */
    int host_port;         /* a TCP port on the gateway every sandbox may reach (0: none) */
};

/* What net_sandbox_setup made: join netns_path, the sandbox answers at ip. */
struct net_sandbox {
    char netns_path[256]; /* <netns_dir>/<id>: an nsfs bind mount, for the OCI spec */
    char ip[48];          /* the sandbox's address on eth0, "10.88.0.2" */
    char gateway[48];     /* the bridge's address, the sandbox's default route */
    int prefix;           /* prefix length of ip on eth0 (the subnet's) */
    char mac[18];         /* eth0's MAC, derived from ip */
    char host_if[16];     /* the host-side veth */
    char egress[8];       /* "none" or "open" */
};

/* Open the layer: make the bridge and (re)load the nft table's chains idempotently. */
net_t *net_open(const struct net_config *cfg, err_t *err);

/* The gateway's address (the bridge's), "10.88.0.1". */
void net_gateway(const net_t *n, char out[16]);

/* Free memory only: bridge, table, veths and netns files stay (sandboxes outlive the daemon). */
void net_close(net_t *n);

/* Remove everything net_open and setup made: every sandbox's network, the table, the bridge. */
int net_destroy(net_t *n, err_t *err);

/* Give sandbox id its netns, veth, address (ip, or a free one if NULL) and rules. Idempotent. */
int net_sandbox_setup(net_t *n, const char *id, int64_t owner_id, const char *egress,
                      const char *ip, struct net_sandbox *out, err_t *err);

/* Move the rules of sandbox id (which has its address) to owner_id: one nftables run, no
 * change to its links or address. */
int net_sandbox_set_owner(net_t *n, const char *id, int64_t owner_id, err_t *err);
/*
 * id's processes run in a network namespace of their own now (a restore into a user namespace
 * made it, empty): it becomes id's netns, and the one before goes with its veth. Its address
 * and rules stay; net_sandbox_setup with that address plumbs the new namespace.
 */
int net_sandbox_adopt_netns(net_t *n, const char *id, pid_t pid, err_t *err);
/* <netns dir>/<id>.user: the bind of the user namespace that owns id's netns, where the
 * sandbox has one (the teardown removes it with the netns). Caller frees. */
char *net_userns_path(const net_t *n, const char *id);
/* Remove id's veth, rules and netns file and free its address. Idempotent. */
int net_sandbox_teardown(net_t *n, const char *id, err_t *err);

/* Mark ip as id's (an address known from the store after a restart). */
int net_reserve(net_t *n, const char *id, const char *ip, err_t *err);

/* Remove the veths, netns files, rules and addresses of every id not in live_ids; >= 0 removed. */
int net_reconcile(net_t *n, const char *const *live_ids, size_t n_live, err_t *err);

/* True if a connection from the host to addr (IPv4, network byte order) would reach the host
 * itself (a local, broadcast or multicast route, looked up now) or the sandboxes' subnet:
 * what the egress proxy must never connect to. Thread-safe. */
bool net_address_on_host(const net_t *n, uint32_t addr);

/* The host-side veth name of id on this layer's bridge (out: at least 16 bytes). */
void net_host_ifname(const net_t *n, const char *id, char *out);

/* Write hosts, hostname and resolv.conf into etc_dir (host-only dir); ns NULL: no network. */
int net_write_etc(const char *etc_dir, const char *hostname, const struct net_sandbox *ns,
                  err_t *err);
