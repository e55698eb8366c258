/* The CLI's HTTP client of the daemon's API: libcurl over a unix socket or TCP. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "common/buf.h"
#include "common/error.h"

#define CLIENT_DEFAULT_SOCKET    "/run/sandboxer/api.sock"
#define CLIENT_CONNECT_TIMEOUT_S 10
#define CLIENT_DEFAULT_TIMEOUT_S 60
#define CLIENT_MAX_BODY          (64u << 20) /* a buffered answer larger than this is an error */

/* Where the daemon is. Exactly one of url and socket is used; strings are copied. */
struct client_config {
    const char *url;    /* "http(s)://host:port[/prefix]" for TCP, or NULL */
    const char *socket; /* unix socket path, used when url is NULL */
    const char *token;  /* bearer token, or NULL to send none */
};

typedef struct client client_t;

/* One buffered answer: any HTTP status, the raw bytes, and the body parsed if it was JSON. */
typedef struct {
    long status;
    buf_t body;   /* exactly the bytes the server sent */
    json_t *json; /* the parsed body when Content-Type is JSON, else NULL */
} client_resp_t;

/* Make a client; fails only on a malformed config (e.g. a URL that is not http[s]://). */
client_t *client_new(const struct client_config *cfg, err_t *err);
/* Free the client (NULL is fine). */
void client_free(client_t *c);
/* Whole-request timeout in seconds for the following calls; 0 means none (streams). */
void client_set_timeout(client_t *c, long seconds);
/* A human description of the endpoint for messages: "unix socket /run/…" or the URL. */
const char *client_endpoint(const client_t *c);

/*
 * Send METHOD path (which starts with '/' and is already URL-encoded) with an optional JSON
 * body and buffer the answer in *resp, whatever its status. Fails (err set) only when no
 * HTTP answer came back: connection refused, timeout, an oversized or malformed body.
 */
int client_request(client_t *c, const char *method, const char *path, const json_t *body,
                   client_resp_t *resp, err_t *err);

/*
 * Like client_request, but an answer that is not 2xx becomes an error: kind from the status,
 * code and message from the server's {"detail", "code"}, the message ending "(HTTP <status>)".
 * A 2xx answer must be a JSON object; it is left in *resp.
 */
int client_call(client_t *c, const char *method, const char *path, const json_t *body,
                client_resp_t *resp, err_t *err);

/* Free what *resp holds and zero it. */
void client_resp_free(client_resp_t *resp);

/* URL-encode one path segment or query value into a new string (never NULL). */
char *client_escape(const char *s);

static inline void cleanup_clientp(client_t **c)
{
    client_free(*c);
}
static inline void cleanup_respp(client_resp_t *r)
{
    client_resp_free(r);
}
#define _cleanup_client_ __attribute__((cleanup(cleanup_clientp)))
#define _cleanup_resp_   __attribute__((cleanup(cleanup_respp)))
