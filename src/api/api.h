/* The HTTP API server: libmicrohttpd, a static route table, auth, limits. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "store/store.h"

struct sbx_mgr;
struct image_store;

/* How the server listens and what it bounds. Strings are borrowed for the server's life. */
struct api_config {
    const char *listen;               /* "HOST:PORT", "[v6]:PORT" or NULL for none */
    const char *socket_path;          /* unix socket path or NULL for none */
    uint64_t body_limit;              /* largest request body in bytes (413 past it) */
    unsigned max_connections;         /* concurrent connections */
    unsigned conn_timeout_s;          /* idle connection timeout */
    unsigned terminal_idle_timeout_s; /* a terminal WebSocket without traffic closes (0: never) */
    unsigned shutdown_timeout_s;      /* how long a stop waits for in-flight requests */
    const char *vhost;                /* "example.com": <name>[-<port>].example.com is proxied */
    const char *e2b_domain; /* E2B's SDKs' domain: api.<it> and <port>-<id>.<it> (src/e2b) */
};

typedef struct api api_t;

/* Bind the sockets and start serving the store, the sandboxes and the images. */
api_t *api_start(const struct api_config *cfg, store_t *store, struct sbx_mgr *sbx,
                 struct image_store *images, err_t *err);
/* The TCP port actually bound (useful with port 0), or 0 when not listening on TCP. */
unsigned api_tcp_port(const api_t *api);
/*
 * Stop accepting, let in-flight requests finish (bounded), then free everything. Returns
 * false if stream threads were still running at the end (the caller must not free what
 * they use).
 */
bool api_stop(api_t *api);
