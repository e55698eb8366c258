/*
 * The inbound proxy: ANY /sandboxes/{id|name}/proxy/{path} to a port of the sandbox, bodies
 * streamed both ways (a request body goes out as it arrives, the answer comes back as the
 * sandbox sends it). The caller's own sandbox, or anyone's public one without a token.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api_internal.h"
#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "proxy/inbound.h"
#include "proxy/upstream.h"
#include "sandbox/sandbox.h"

struct proxy {
    int fd;
    bool websocket;    /* an Upgrade: websocket request, passed through as bytes after 101 */
    bool chunked_body; /* the request body goes out chunk-encoded */
    struct upstream_head head;
};

static void proxy_free(void *ctx)
{
    struct proxy *p = ctx;
    if (p->fd >= 0)
        close(p->fd);
    buf_free(&p->head.raw);
    free(p);
}

/* Percent-encode s (len bytes) into b, keeping unreserved characters (and '/' if keep_slash). */
static void escape(buf_t *b, const char *s, bool keep_slash)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (isalnum(c) || strchr("-._~!$&'()*+,;=:@", c) || (keep_slash && c == '/'))
            buf_append(b, s, 1);
        else
            buf_printf(b, "%%%02X", c);
    }
}

struct head_ctx {
    buf_t *b;
    bool first_arg;
    const char *connection; /* the client's Connection header: the headers it names stay */
    bool api_origin;
    bool e2b;        /* E2B's sandbox host: E2B's own headers (its tokens) stop here */
    buf_t protocols; /* Sec-WebSocket-Protocol entries that go on */
};

static enum MHD_Result add_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *value)
{
    (void)kind;
    struct head_ctx *h = cls;
    if (strcmp(key, "port") == 0) /* ours: which port; not the sandbox's business */
        return MHD_YES;
    buf_puts(h->b, h->first_arg ? "?" : "&");
    h->first_arg = false;
    escape(h->b, key, false);
    if (value) {
        buf_puts(h->b, "=");
        escape(h->b, value, false);
    }
    return MHD_YES;
}

/* Copy a client's header unless it is hop-by-hop, ours to set, or holds a token. */
static enum MHD_Result add_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    (void)kind;
    struct head_ctx *h = cls;
    if (!value)
        return MHD_YES;
    if (h->e2b && (strcasecmp(key, "X-Access-Token") == 0 ||
                   strcasecmp(key, "e2b-traffic-access-token") == 0 ||
                   strcasecmp(key, "X-API-KEY") == 0 || strncasecmp(key, "E2b-Sandbox-", 12) == 0))
        return MHD_YES;
    if (strcasecmp(key, "Sec-WebSocket-Protocol") == 0)
        inbound_ws_protocols(value, &h->protocols);
    else if (inbound_request_header_ok(key, value, h->connection, h->api_origin))
        buf_printf(h->b, "%s: %s\r\n", key, value);
    return MHD_YES;
}

/* The client's address as the daemon sees it (not as the client claims it). */
static void client_ip(api_req_t *r, char *out, size_t size)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    snprintf(out, size, "127.0.0.1"); /* the unix socket */
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)size);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)size);
}

/* The request line and headers as they go to the sandbox. */
static void request_head(api_req_t *r, const char *path, struct proxy *p, buf_t *b)
{
    buf_printf(b, "%s /", r->method);
    escape(b, path ? path : "", true);
    struct head_ctx h = {b,
                         true,
                         api_header(r, MHD_HTTP_HEADER_CONNECTION),
                         !r->sandbox_origin,
                         r->dialect != API_NATIVE,
                         {0}};
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, add_arg, &h);
    buf_puts(b, " HTTP/1.1\r\n");
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, add_header, &h);
    if (h.protocols.len)
        buf_printf(b, "Sec-WebSocket-Protocol: %s\r\n", h.protocols.data);
    buf_free(&h.protocols);
    char ip[INET6_ADDRSTRLEN];
    client_ip(r, ip, sizeof(ip));
    inbound_forwarded_headers(b, ip, api_header(r, MHD_HTTP_HEADER_HOST), "http");
    const char *cl = api_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *te = api_header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    /* server.c refused any other framing (both headers, other codings) before we got here */
    if (cl)
        buf_printf(b, "Content-Length: %s\r\n", cl);
    else if (te)
        p->chunked_body = true, buf_puts(b, "Transfer-Encoding: chunked\r\n");
    buf_puts(b, p->websocket ? "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
                             : "Connection: close\r\n\r\n");
}

static enum MHD_Result arg_has_token(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    (void)kind;
    bool *found = cls;
    *found =
        inbound_has_token(key, strlen(key)) || (value && inbound_has_token(value, strlen(value)));
    return *found ? MHD_NO : MHD_YES;
}

/* A token in the URL would reach the sandbox: refuse the request instead. */
static int check_url(api_req_t *r, const char *path, err_t *err)
{
    bool found = path && inbound_has_token(path, strlen(path));
    if (!found)
        MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, arg_has_token, &found);
    if (found)
        return err_set(err, ERR_INVALID, 0, "token_in_url",
                       "the URL holds a Sandboxer token, which must not reach the sandbox: send "
                       "it in the Authorization header");
    return 0;
}

static bool wants_websocket(api_req_t *r)
{
    const char *up = api_header(r, MHD_HTTP_HEADER_UPGRADE);
    const char *conn = api_header(r, MHD_HTTP_HEADER_CONNECTION);
    return up && strcasecmp(up, "websocket") == 0 && conn && strcasestr(conn, "upgrade");
}

int h_proxy_begin(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *key = api_param(r, "id");
    _cleanup_free_ char *path = api_param(r, "path");
    long long port = 0;
    const char *q = api_query(r, "port");
    if (q && !parse_int(q, 1, 65535, &port))
        return err_set(err, ERR_INVALID, 0, "invalid_query", "port must be 1-65535");
    if (!port)
        port = r->vhost_port;
    if (check_url(r, path, err) < 0)
        return -1;
    struct sbx_target t;
    if (sbx_proxy_target(r->api->sbx, r->authed ? &r->user : NULL, key, (int)port, &t, err) < 0)
        return -1;
    struct proxy *p = xcalloc(1, sizeof(*p));
    p->fd = -1;
    p->websocket = wants_websocket(r);
    r->ctx = p;
    r->ctx_free = proxy_free;
    if ((p->fd = upstream_connect(t.ip, t.port, 5000, err)) < 0)
        return -1;
    if (t.abortive_close) /* what the sandbox's end must not keep: TIME_WAIT, see sbx_target */
        setsockopt(p->fd, SOL_SOCKET, SO_LINGER, &(struct linger){1, 0}, sizeof(struct linger));
    buf_t head = {0};
    request_head(r, path, p, &head);
    int rc = upstream_write(p->fd, head.data, head.len, err);
    buf_free(&head);
    return rc;
}

int h_proxy_chunk(api_req_t *r, const char *data, size_t len, err_t *err)
{
    struct proxy *p = r->ctx;
    if (!p->chunked_body)
        return upstream_write(p->fd, data, len, err);
    char size[32];
    int n = snprintf(size, sizeof(size), "%zx\r\n", len);
    return upstream_write(p->fd, size, (size_t)n, err) < 0 ||
                   upstream_write(p->fd, data, len, err) < 0 ||
                   upstream_write(p->fd, "\r\n", 2, err) < 0
               ? -1
               : 0;
}

/* The answer's body as the stream thread copies it. */
struct relay {
    int fd;
    struct upstream_head head;
    bool no_body;
    struct chunked ch;
    struct api_stream *s;
};

static bool relay_out(void *ctx, const char *p, size_t n)
{
    struct relay *rl = ctx;
    return api_stream_write(rl->s, p, n);
}

/* Pass n bytes on: decoded when chunked; false once done or the client is gone. */
static bool relay_bytes(struct relay *rl, const char *p, size_t n, int64_t *left)
{
    if (rl->head.chunked)
        return chunked_decode(&rl->ch, p, n, relay_out, rl) == 0;
    if (*left >= 0 && (int64_t)n > *left)
        n = (size_t)*left;
    if (*left >= 0)
        *left -= (int64_t)n;
    return relay_out(rl, p, n) && *left != 0;
}

static void relay_main(struct api_stream *s, void *ctx)
{
    struct relay *rl = ctx;
    rl->s = s;
    int64_t left = rl->head.length;
    bool more = !rl->no_body && left != 0;
    size_t early = rl->head.raw.len - rl->head.head_len;
    if (more && early)
        more = relay_bytes(rl, rl->head.raw.data + rl->head.head_len, early, &left);
    char chunk[65536];
    while (more) {
        ssize_t n = recv(rl->fd, chunk, sizeof(chunk), 0);
        if (n <= 0)
            break;
        more = relay_bytes(rl, chunk, (size_t)n, &left);
    }
    close(rl->fd);
    buf_free(&rl->head.raw);
    free(rl);
}

struct answer_ctx {
    struct MHD_Response *resp;
    const char *host; /* the sandbox origin's host name, or NULL on the API's origin */
};

static void copy_header(void *ctx, const char *name, const char *value)
{
    struct answer_ctx *a = ctx;
    if (inbound_response_header_ok(name, value, a->host, a->host == NULL))
        MHD_add_response_header(a->resp, name, value);
}

/*
 * The sandbox's answer headers that may pass. On the API's origin (where the console keeps
 * its token) the answer runs no script and gets a unique origin, whatever the sandbox sent.
 */
static void answer_headers(api_req_t *r, const struct upstream_head *h, struct MHD_Response *resp)
{
    struct answer_ctx a = {resp, r->sandbox_origin ? r->origin_host : NULL};
    upstream_each_header(h, copy_header, &a);
    if (!r->sandbox_origin) {
        MHD_add_response_header(resp, "Content-Security-Policy", INBOUND_API_ORIGIN_CSP);
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    }
    r->sandbox_answer = true;
}

/* A WebSocket after its 101: bytes both ways until either side closes. */
struct tunnel {
    int up;      /* to the sandbox */
    buf_t early; /* bytes the sandbox sent right after its 101 */
    int client;
    struct MHD_UpgradeResponseHandle *urh;
};

static bool send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            struct pollfd pf = {fd, POLLOUT, 0};
            if (poll(&pf, 1, 60000) != 1)
                return false;
            continue;
        }
        if (w <= 0)
            return false;
        p += w, n -= (size_t)w;
    }
    return true;
}

static void *tunnel_main(void *arg)
{
    struct tunnel *t = arg;
    bool ok = t->early.len == 0 || send_all(t->client, t->early.data, t->early.len);
    char chunk[65536];
    while (ok) {
        struct pollfd pf[2] = {{t->client, POLLIN, 0}, {t->up, POLLIN, 0}};
        if (poll(pf, 2, -1) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2 && ok; i++) {
            if (!pf[i].revents)
                continue;
            ssize_t n = recv(pf[i].fd, chunk, sizeof(chunk), MSG_DONTWAIT);
            if (n < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            ok = n > 0 && send_all(i ? t->client : t->up, chunk, (size_t)n);
        }
    }
    close(t->up);
    MHD_upgrade_action(t->urh, MHD_UPGRADE_ACTION_CLOSE);
    buf_free(&t->early);
    free(t);
    return NULL;
}

static void on_upgraded(void *cls, struct MHD_Connection *conn, void *req_cls, const char *extra_in,
                        size_t extra_in_size, MHD_socket sock,
                        struct MHD_UpgradeResponseHandle *urh)
{
    (void)conn, (void)req_cls;
    struct tunnel *t = cls;
    t->client = sock;
    t->urh = urh;
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if ((extra_in_size && !send_all(t->up, extra_in, extra_in_size)) ||
        pthread_create(&th, &attr, tunnel_main, t) != 0) {
        close(t->up);
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        buf_free(&t->early);
        free(t);
    }
    pthread_attr_destroy(&attr);
}

/* The sandbox said 101: answer 101 with its headers and hand both sockets to a tunnel. */
static int reply_upgrade(api_req_t *r, struct proxy *p)
{
    struct tunnel *t = xcalloc(1, sizeof(*t));
    t->up = p->fd;
    buf_append(&t->early, p->head.raw.data + p->head.head_len, p->head.raw.len - p->head.head_len);
    struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgraded, t);
    if (!resp) {
        buf_free(&t->early);
        free(t);
        return -1;
    }
    p->fd = -1; /* the tunnel owns it now */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, "websocket");
    answer_headers(r, &p->head, resp);
    if (r->resp)
        MHD_destroy_response(r->resp);
    r->resp = resp;
    r->status = MHD_HTTP_SWITCHING_PROTOCOLS;
    return 0;
}

/*
 * A body that is not chunked, pulled by libmicrohttpd straight from the sandbox's socket in
 * the connection's own thread: no relay thread, no pipe, one copy fewer each way.
 */
struct direct {
    int fd;
    buf_t early; /* body bytes that came in with the head */
    size_t early_off;
    int64_t left; /* Content-Length still to come, or -1: until the sandbox closes */
};

static ssize_t read_direct(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct direct *d = cls;
    if (d->left == 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    size_t want = d->left > 0 && (uint64_t)d->left < max ? (size_t)d->left : max;
    ssize_t n;
    if (d->early_off < d->early.len) {
        n = (ssize_t)(d->early.len - d->early_off < want ? d->early.len - d->early_off : want);
        memcpy(buf, d->early.data + d->early_off, (size_t)n);
        d->early_off += (size_t)n;
    } else {
        do
            n = recv(d->fd, buf, want, 0);
        while (n < 0 && errno == EINTR);
        if (n == 0 && d->left < 0)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (n <= 0) /* cut short: the client sees a truncated body, not a complete one */
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    if (d->left > 0)
        d->left -= n;
    return n;
}

static void free_direct(void *cls)
{
    struct direct *d = cls;
    close(d->fd);
    buf_free(&d->early);
    free(d);
}

/* Answer with the sandbox's status and headers and a body read by read_direct. */
static int reply_direct(api_req_t *r, struct proxy *p, bool no_body, err_t *err)
{
    struct direct *d = xcalloc(1, sizeof(*d));
    d->fd = p->fd;
    d->left = no_body ? 0 : p->head.length;
    buf_append(&d->early, p->head.raw.data + p->head.head_len, p->head.raw.len - p->head.head_len);
    uint64_t size = d->left >= 0 ? (uint64_t)d->left : MHD_SIZE_UNKNOWN;
    struct MHD_Response *resp =
        MHD_create_response_from_callback(size, 64 * 1024, read_direct, d, free_direct);
    if (!resp) {
        buf_free(&d->early);
        free(d);
        return err_set(err, ERR_INTERNAL, 0, "internal", "cannot make the response");
    }
    p->fd = -1; /* the response owns it now */
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    answer_headers(r, &p->head, resp);
    if (r->resp)
        MHD_destroy_response(r->resp);
    r->resp = resp;
    r->status = (unsigned)p->head.status;
    return 0;
}

int h_proxy(api_req_t *r, err_t *err)
{
    struct proxy *p = r->ctx;
    if (p->chunked_body && upstream_write(p->fd, "0\r\n\r\n", 5, err) < 0)
        return -1;
    if (upstream_read_head(p->fd, 60000, &p->head, err) < 0) {
        err->kind = ERR_BAD_GATEWAY;
        return -1;
    }
    if (p->websocket && p->head.status == 101) {
        if (reply_upgrade(r, p) == 0)
            return 0;
        return err_set(err, ERR_INTERNAL, 0, "internal", "cannot pass the WebSocket on");
    }
    int st = p->head.status;
    bool no_body = strcmp(r->method, "HEAD") == 0 || st < 200 || st == 204 || st == 304;
    if (no_body || !p->head.chunked)
        return reply_direct(r, p, no_body, err);
    struct relay *rl = xcalloc(1, sizeof(*rl));
    rl->fd = p->fd;
    rl->head = p->head;
    rl->no_body = no_body;
    int64_t size = rl->no_body ? 0 : (p->head.chunked ? -1 : p->head.length);
    /* The relay thread owns (and frees) the head once it starts: keep the headers apart. */
    struct upstream_head headers = {.head_len = p->head.head_len};
    buf_append(&headers.raw, p->head.raw.data, p->head.head_len);
    if (api_reply_stream_sized(r, (unsigned)st, NULL, size, relay_main, rl, err) < 0) {
        free(rl);
        buf_free(&headers.raw);
        return -1;
    }
    p->fd = -1; /* the relay thread owns it now */
    p->head = (struct upstream_head){0};
    answer_headers(r, &headers, api_response(r));
    buf_free(&headers.raw);
    return 0;
}
