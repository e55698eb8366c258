/*
 * The egress proxy: sandboxes with network "proxy" reach the outside only through it, and only
 * the hosts on their allow list. It listens on the bridge's gateway address; a client is known
 * by its source address (the nftables rules bind each address to its sandbox's veth). It
 * speaks HTTP CONNECT (any TCP, e.g. HTTPS, tunnelled) and absolute-form plain HTTP requests.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"

/* The allow list of the sandbox at client_ip (a JSON array of patterns, the caller's to
 * decref), or NULL when that sandbox does not go out through the proxy. */
typedef json_t *(*egress_policy_fn)(void *ctx, const char *client_ip);

/* True if the proxy must not connect to addr (IPv4, network byte order) although it is public:
 * the host's own addresses, the sandboxes' subnet. */
typedef bool (*egress_refuse_fn)(void *ctx, uint32_t addr);

struct egress_config {
    const char *listen_ip; /* the gateway */
    int port;
    egress_policy_fn policy;
    void *ctx;
    egress_refuse_fn refuse; /* NULL: only the fixed private ranges are refused */
    void *refuse_ctx;
    int max_conns;            /* connections at once, all sandboxes (0: 256) */
    int max_conns_per_client; /* connections at once of one sandbox (0: 32) */
};

typedef struct egress egress_t;

/* Listen and serve on a thread of its own. */
egress_t *egress_start(const struct egress_config *cfg, err_t *err);
/* Stop accepting; connections in flight end on their own (bounded by timeouts). */
void egress_stop(egress_t *e);

/* A valid allow-list pattern: a host name ("pkgs.example.org"), "*." and a domain (its subdomains),
 * or an IPv4 address; lowercase, at most 253 characters. */
bool egress_pattern_valid(const char *p);
/* Does host (a name or an IPv4 address, any case) match one of allow's patterns? */
bool egress_host_allowed(const json_t *allow, const char *host);
/* May the proxy connect to this IPv4 address (network byte order)? Not to the host, the
 * sandboxes' or any private, loopback, link-local, shared, multicast or reserved range. */
bool egress_address_public(uint32_t addr);

/* A request head as the proxy reads it from a sandbox (untrusted). */
struct egress_request {
    bool tunnel; /* CONNECT host:port */
    char method[16], version[16];
    char host[256];
    int port;
    char path[2048];     /* plain requests: the origin-form target */
    const char *headers; /* in the head given to egress_parse_request: after the request line */
};

/* Parse head (len bytes, through the blank line that ends it): NULL when it is a CONNECT or
 * an absolute-form http:// request, else what is wrong with it. */
const char *egress_parse_request(const char *head, size_t len, struct egress_request *rq);
/* The head to send upstream for a plain request: origin form, hop-by-hop headers dropped,
 * Connection: close. */
void egress_upstream_head(const struct egress_request *rq, const char *head, size_t len,
                          buf_t *out);
