/* The CLI's HTTP client of the daemon's API: libcurl over a unix socket or TCP. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"

#define CLIENT_DEFAULT_SOCKET    "/run/sandboxer/api.sock"
#define CLIENT_CONNECT_TIMEOUT_S 10
#define CLIENT_DEFAULT_TIMEOUT_S 60
#define CLIENT_MAX_BODY          (64u << 20) /* a buffered answer larger than this is an error */
#define CLIENT_MAX_LINE          (8u << 20)  /* so is a longer line of an ndjson stream */
#define CLIENT_STALL_S           60 /* an upload or download that moves nothing this long fails */

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

/*
 * What to do with a streamed answer; set exactly one of on_line and on_raw. Each returns 0 to
 * go on, or -1 with err set to stop the transfer (client_stream then fails with that err).
 */
struct client_stream_cb {
    /* Lines (ndjson): each complete line, NUL-terminated, without its "\n" or "\r\n"; blank
     * lines are skipped, and a last line without a newline is delivered at the end. */
    int (*on_line)(void *data, const char *line, size_t len, err_t *err);
    /* Raw bytes (text): each piece as it arrives. */
    int (*on_raw)(void *data, const char *bytes, size_t len, err_t *err);
    void *data;
};

/*
 * Send METHOD path like client_request and hand a 2xx answer that is not JSON to cb as it
 * arrives. The daemon refuses a stream with a JSON error instead (404, 409, …): that becomes
 * an error as in client_call, and so does a 2xx JSON answer. The client's timeout applies as
 * to any call: set 0 with client_set_timeout for a stream that may run for long.
 */
int client_stream(client_t *c, const char *method, const char *path, const json_t *body,
                  const struct client_stream_cb *cb, err_t *err);

/*
 * Like client_call, but the request's body is the next size bytes read from fd, sent as
 * application/octet-stream as they are read (never held in memory whole). The file must not
 * become shorter meanwhile. Set the timeout to 0 for a large file: the transfer then fails
 * only if it stalls for CLIENT_STALL_S.
 */
int client_upload(client_t *c, const char *method, const char *path, int fd, uint64_t size,
                  client_resp_t *resp, err_t *err);

/*
 * GET path and hand a 2xx answer to cb->on_raw as it arrives, whatever its Content-Type (a
 * file's bytes may be JSON too); an answer that is not 2xx becomes an error as in client_call.
 * Set the timeout to 0 for a large file: the transfer then fails only if it stalls for
 * CLIENT_STALL_S.
 */
int client_download(client_t *c, const char *path, const struct client_stream_cb *cb, err_t *err);

/* Free what *resp holds and zero it. */
void client_resp_free(client_resp_t *resp);

/* URL-encode one path segment or query value into a new string (never NULL). */
char *client_escape(const char *s);
/* URL-encode each '/'-separated segment of s, keeping the slashes (new string, never NULL):
 * for a path parameter that spans segments, like an image ref "docker.io/library/x:1". */
char *client_escape_path(const char *s);

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

/* --- WebSockets (`shell`, `attach`) ------------------------------------------------------ */
#include "common/ws.h"

typedef struct client_ws client_ws_t;
/*
 * Open a WebSocket to path: the daemon answered 101. A refusal (404, 409 ...) becomes err
 * as for client_call. The connection uses c's handle: make no other call on c meanwhile.
 */
client_ws_t *client_ws_open(client_t *c, const char *path, ws_msg_fn on_msg, void *data,
                            err_t *err);
/* The WebSocket (to send, close, poll) and the socket to poll. */
ws_t *client_ws_conn(client_ws_t *w);
int client_ws_fd(const client_ws_t *w);
/* Free it (the connection itself closes with c). */
void client_ws_close(client_ws_t *w);
