/* Shared by the API's own files: the request, the route table and the reply helpers. */
#pragma once

#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "api.h"
#include "common/buf.h"
#include "common/error.h"
#include "route.h"
#include "store/store.h"

#define API_MAX_URL  8192
#define API_RID_SIZE 40

typedef struct api_req api_req_t;

/* Whose protocol a request speaks: ours, or E2B's (src/e2b: its control plane, its envd's
 * HTTP routes, its envd's Connect RPCs). Errors are answered in the dialect's shape. */
enum api_dialect { API_NATIVE, API_E2B_CONTROL, API_E2B_ENVD, API_E2B_RPC };

/* A handler: reply through api_reply_* and return 0, or return -1 with err set. */
typedef int (*api_handler_fn)(api_req_t *r, err_t *err);

enum route_flags {
    ROUTE_AUTH = 0,        /* a valid token is required (the default) */
    ROUTE_PUBLIC = 1 << 0, /* no token needed */
    ROUTE_ADMIN = 1 << 1,  /* only admins */
    ROUTE_PROXY = 1 << 2,  /* a token if one is sent; without, only public sandboxes answer */
    /* A WebSocket route that also takes the token as the subprotocol bearer.<token>, for
       browsers (they cannot set Authorization on a WebSocket). Never on the proxy, whose
       headers reach the sandbox. */
    ROUTE_WS_TOKEN = 1 << 3,
    ROUTE_E2B_KEY = 1 << 4, /* E2B's control plane: an E2B API key (X-API-KEY: e2b_...) */
};

/* Streamed request bodies: begin runs once the headers are in, chunk per piece of body. */
typedef int (*api_begin_fn)(api_req_t *r, err_t *err);
typedef int (*api_chunk_fn)(api_req_t *r, const char *data, size_t len, err_t *err);

/*
 * One row of the static route table. A route with begin/chunk takes its body as a stream
 * (no body limit, bounded memory) and handler runs at its end; others get r->body whole.
 */
struct route {
    const char *method;
    const char *pattern;
    api_handler_fn handler;
    unsigned flags;
    const char *summary;
    api_begin_fn begin;
    api_chunk_fn chunk;
};

extern const struct route api_routes[];
extern const size_t api_routes_count;

/*
 * Find the route for method and path. NULL if none; then *path_known tells whether the
 * path exists with another method (405) or not at all (404).
 */
const struct route *api_route_find(const char *method, const char *path, size_t len,
                                   struct route_params *params, bool *path_known);

struct api {
    struct api_config cfg;
    store_t *store;
    struct sbx_mgr *sbx;
    struct image_store *images;
    struct MHD_Daemon *tcp;
    struct MHD_Daemon *unix_sock;
    int tcp_fd, unix_fd;
    unsigned tcp_port;
    atomic_int inflight;
    atomic_int streams;         /* producer threads of streamed replies */
    atomic_bool draining;       /* refuse new requests */
    atomic_bool stopping;       /* in-flight streams should end now */
    atomic_ullong responses[6]; /* finished requests by status class (index 1-5: 1xx-5xx) */
    double started_at;          /* Unix time the server started (for /metrics) */
};

/* One HTTP request, from its first byte to its completion. */
struct api_req {
    api_t *api;
    struct MHD_Connection *conn;
    const char *method;
    char *path;
    const struct route *route;
    struct route_params params;
    buf_t body;
    bool too_large;
    uint64_t drained; /* bytes of a refused body read and dropped */
    bool authed;
    user_t user;
    token_info_t token;
    char rid[API_RID_SIZE];
    double t0;
    unsigned status;
    struct MHD_Response *resp;
    void *ctx;                   /* a streaming route's state */
    void (*ctx_free)(void *ctx); /* called when the request ends */
    err_t stream_err;            /* the first failure of begin/chunk, replied at the end */
    int vhost_port;              /* a port named by the subdomain (<name>-<port>.<vhost>) */
    bool sandbox_origin;         /* asked for a sandbox's own host (<name>[-<port>].<vhost>) */
    char *origin_host;           /* that host, lower case, without port (sandbox_origin only) */
    bool sandbox_answer;         /* the response is a sandbox's (status and headers) */
    enum api_dialect dialect;    /* whose protocol the request speaks (src/e2b) */
    char e2b_id[24];             /* E2B sandbox hosts: the sandbox's E2B id */
    int e2b_port;                /* ... and the port the host names */
};

/* The route parameter name as a new string, or NULL if the route has none. */
char *api_param(const api_req_t *r, const char *name);
/* A query argument (borrowed, NUL-terminated) or NULL. */
const char *api_query(const api_req_t *r, const char *name);
/* A request header (borrowed) or NULL. */
const char *api_header(const api_req_t *r, const char *name);
/*
 * The body as a JSON object (new reference). An empty body is {} when allow_empty,
 * else an error.
 */
int api_body_object(api_req_t *r, bool allow_empty, json_t **out, err_t *err);

/* Reply with status and a JSON value (the reference is stolen). */
void api_reply_json(api_req_t *r, unsigned status, json_t *body);
/* Reply with status and bytes of a content type (copied). */
void api_reply_bytes(api_req_t *r, unsigned status, const char *type, const void *data, size_t len);
/* Reply with the JSON error for err (kind → status, internal details logged, not sent). */
void api_reply_error(api_req_t *r, const err_t *err);
/* The HTTP status for an error kind: the one place that maps them. */
unsigned api_status_for(err_kind_t kind);

/* The writing end of a streamed reply. */
struct api_stream {
    int fd;
    api_t *api;
    int client_fd; /* a copy of the client's socket (or -1): a producer that waits long polls it
                      to notice the client going away (MHD notices only when it next writes) */
    atomic_bool aborted; /* api_stream_abort: the body ends cut short, not complete */
};

/* A producer of a streamed body; runs on its own thread, the stream closes when it returns. */
typedef void (*api_stream_fn)(struct api_stream *s, void *ctx);

/* Reply 200 with a body that fn produces (ctx is fn's to free). */
int api_reply_stream(api_req_t *r, const char *type, api_stream_fn fn, void *ctx, err_t *err);
/* Like api_reply_stream with a status and, when size >= 0, a Content-Length. */
int api_reply_stream_sized(api_req_t *r, unsigned status, const char *type, int64_t size,
                           api_stream_fn fn, void *ctx, err_t *err);
/* Like api_reply_stream_sized; with abortable, a producer may call api_stream_abort before it
 * returns, and the client then sees the body cut short (no final chunk: the connection
 * closes) rather than complete. */
int api_reply_stream_ex(api_req_t *r, unsigned status, const char *type, int64_t size,
                        bool abortable, api_stream_fn fn, void *ctx, err_t *err);
/* Mark the stream to end cut short (see api_reply_stream_ex). */
void api_stream_abort(struct api_stream *s);
/* The response being built (to add headers), or NULL. */
static inline struct MHD_Response *api_response(api_req_t *r)
{
    return r->resp;
}
/* Write to the stream; false once the client is gone or the daemon stops. */
bool api_stream_write(struct api_stream *s, const void *data, size_t len);
/* Sleep up to ms; false once the client is gone or the daemon stops. */
bool api_stream_wait(struct api_stream *s, int ms);

/* True if the request carries a Sandboxer token (Authorization: Bearer sbx_..., spaced, any case).
 */
bool api_has_token(const api_req_t *r);
/*
 * Authenticate the request's bearer token; fills r->user and r->token. On a ROUTE_WS_TOKEN
 * route's upgrade without an Authorization header, the token may come as the
 * Sec-WebSocket-Protocol entry bearer.<token> instead (same checks, same errors).
 */
int api_authenticate(api_req_t *r, err_t *err);
/* Authenticate an E2B API key (X-API-KEY: e2b_...): a token of kind "e2b", never a bearer
 * token. Fills r->user and r->token like api_authenticate. */
int api_authenticate_e2b(api_req_t *r, const char *key, err_t *err);
/* True if the client offers the WebSocket subprotocol name (Sec-WebSocket-Protocol). */
bool api_ws_protocol_offered(const api_req_t *r, const char *name);

/* The embedded OpenAPI document. */
extern const char api_openapi_json[];
extern const unsigned long api_openapi_json_len;

/* Handlers. */
int h_healthz(api_req_t *r, err_t *err);
int h_readyz(api_req_t *r, err_t *err);
int h_metrics(api_req_t *r, err_t *err);
int h_stats(api_req_t *r, err_t *err);
int h_openapi(api_req_t *r, err_t *err);
int h_token_create(api_req_t *r, err_t *err);
int h_token_list(api_req_t *r, err_t *err);
int h_token_delete(api_req_t *r, err_t *err);
int h_me(api_req_t *r, err_t *err);
int h_user_limits_get(api_req_t *r, err_t *err);
int h_user_limits_set(api_req_t *r, err_t *err);
int h_sandbox_create(api_req_t *r, err_t *err);
int h_sandbox_list(api_req_t *r, err_t *err);
int h_sandbox_get(api_req_t *r, err_t *err);
int h_sandbox_patch(api_req_t *r, err_t *err);
int h_sandbox_delete(api_req_t *r, err_t *err);
int h_execute(api_req_t *r, err_t *err);
int h_exec(api_req_t *r, err_t *err);
int h_logs(api_req_t *r, err_t *err);
int h_execution_logs(api_req_t *r, err_t *err);
int h_command_executions(api_req_t *r, err_t *err);
int h_command_execution_logs(api_req_t *r, err_t *err);
int h_image_list(api_req_t *r, err_t *err);
int h_image_pull(api_req_t *r, err_t *err);
int h_image_delete(api_req_t *r, err_t *err);
int h_image_import(api_req_t *r, err_t *err);
int h_fork(api_req_t *r, err_t *err);
int h_tree(api_req_t *r, err_t *err);
int h_coalesce(api_req_t *r, err_t *err);
int h_pause(api_req_t *r, err_t *err);
int h_unpause(api_req_t *r, err_t *err);
int h_hibernate(api_req_t *r, err_t *err);
int h_wake(api_req_t *r, err_t *err);
int h_snapshot_create(api_req_t *r, err_t *err);
int h_snapshot_list(api_req_t *r, err_t *err);
int h_snapshot_delete(api_req_t *r, err_t *err);
int h_template_create(api_req_t *r, err_t *err);
int h_template_list(api_req_t *r, err_t *err);
int h_template_get(api_req_t *r, err_t *err);
int h_template_patch(api_req_t *r, err_t *err);
int h_template_delete(api_req_t *r, err_t *err);
int h_files_get(api_req_t *r, err_t *err);
int h_files_put_begin(api_req_t *r, err_t *err);
int h_files_put_chunk(api_req_t *r, const char *data, size_t len, err_t *err);
int h_files_put(api_req_t *r, err_t *err);
int h_files_post_begin(api_req_t *r, err_t *err);
int h_files_post_chunk(api_req_t *r, const char *data, size_t len, err_t *err);
int h_files_post(api_req_t *r, err_t *err);
int h_files_delete(api_req_t *r, err_t *err);
int h_events(api_req_t *r, err_t *err);
int h_exec_pty(api_req_t *r, err_t *err);
/* A terminal's text frame {"resize":{"cols":N,"rows":M}} (1-1000 each); false otherwise. */
bool api_term_parse_resize(const uint8_t *p, size_t n, uint16_t *cols, uint16_t *rows);
int h_attach(api_req_t *r, err_t *err);
int h_web_root(api_req_t *r, err_t *err);
int h_web_page(api_req_t *r, err_t *err);
int h_web_asset(api_req_t *r, err_t *err);
int h_proxy_begin(api_req_t *r, err_t *err);
int h_proxy_chunk(api_req_t *r, const char *data, size_t len, err_t *err);
int h_proxy(api_req_t *r, err_t *err);
