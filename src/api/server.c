/* libmicrohttpd glue: sockets, the per-request state machine, limits, logging. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "api_internal.h"
#include "common/cleanup.h"
#include "common/id.h"
#include "common/log.h"
#include "common/util.h"
#include "e2b/e2b.h"

/* Split "host:port" / "[v6]:port" into its parts. */
static int split_host_port(const char *spec, char *host, size_t hsize, char *port, size_t psize,
                           err_t *err)
{
    const char *colon;
    if (spec[0] == '[') {
        const char *close = strchr(spec, ']');
        if (!close || close[1] != ':')
            return err_set(err, ERR_INVALID, 0, "invalid_listen", "bad listen address '%s'", spec);
        snprintf(host, hsize, "%.*s", (int)(close - spec - 1), spec + 1);
        colon = close + 1;
    } else {
        colon = strrchr(spec, ':');
        if (!colon)
            return err_set(err, ERR_INVALID, 0, "invalid_listen",
                           "listen address '%s' needs HOST:PORT", spec);
        snprintf(host, hsize, "%.*s", (int)(colon - spec), spec);
    }
    snprintf(port, psize, "%s", colon + 1);
    return 0;
}

static int listen_tcp(const char *spec, unsigned *bound_port, err_t *err)
{
    char host[256], port[16];
    if (split_host_port(spec, host, sizeof(host), port, sizeof(port), err) < 0)
        return -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (rc != 0)
        return err_set(err, ERR_INVALID, 0, "invalid_listen", "listen address '%s': %s", spec,
                       gai_strerror(rc));
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        freeaddrinfo(res);
        return err_sys(err, "socket");
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 512) < 0) {
        err_sys(err, "listen on %s", spec);
        freeaddrinfo(res);
        close(fd);
        return -1;
    }
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

/* True if something accepts connections on the unix socket at path. */
static bool unix_socket_live(const struct sockaddr_un *addr)
{
    int fd _cleanup_close_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    return fd >= 0 && connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) == 0;
}

static int listen_unix(const char *path, err_t *err)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(addr.sun_path))
        return err_set(err, ERR_INVALID, 0, "invalid_socket", "socket path too long: %s", path);
    strcpy(addr.sun_path, path);
    _cleanup_free_ char *dir = xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        if (!mkdir_p(dir, 0755))
            return err_sys(err, "create socket directory %s", dir);
    }
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return err_set(err, ERR_CONFLICT, 0, "socket_in_use", "%s exists and is not a socket",
                           path);
        if (unix_socket_live(&addr))
            return err_set(err, ERR_CONFLICT, 0, "socket_in_use", "another daemon is serving %s",
                           path);
        unlink(path); /* stale socket of a daemon that died */
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return err_sys(err, "socket");
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || chmod(path, 0660) < 0 ||
        listen(fd, 512) < 0) {
        err_sys(err, "listen on %s", path);
        close(fd);
        return -1;
    }
    return fd;
}

static bool rid_acceptable(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= API_RID_SIZE)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return false;
    }
    return true;
}

static api_req_t *req_new(api_t *api, struct MHD_Connection *conn, const char *url,
                          const char *method)
{
    api_req_t *r = xcalloc(1, sizeof(*r));
    r->api = api;
    r->conn = conn;
    r->method = method;
    r->path = xstrndup(url, API_MAX_URL + 1);
    r->t0 = now_mono_ms();
    const char *given = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Request-Id");
    if (given && rid_acceptable(given))
        snprintf(r->rid, sizeof(r->rid), "%s", given);
    else if (!id_random_hex(r->rid, 8))
        snprintf(r->rid, sizeof(r->rid), "%08lx", (unsigned long)r->t0);
    atomic_fetch_add(&api->inflight, 1);
    return r;
}

static void req_free(api_req_t *r)
{
    if (r->ctx_free)
        r->ctx_free(r->ctx);
    if (r->resp)
        MHD_destroy_response(r->resp);
    buf_free(&r->body);
    free(r->origin_host);
    free(r->path);
    free(r);
}

/* Drain at most this much of a refused body before closing the connection instead. */
#define API_MAX_DRAIN (64ull << 20)

static void too_large_error(api_req_t *r, err_t *err)
{
    err_set(err, ERR_TOO_LARGE, 0, "body_too_large",
            "the request body is larger than the limit of %llu bytes",
            (unsigned long long)r->api->cfg.body_limit);
}

static bool declared_too_large(api_req_t *r)
{
    const char *cl = api_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    uint64_t n;
    /* Streamed bodies have no limit here: they never sit in the daemon's memory. */
    return cl && parse_size(cl, &n) && n > r->api->cfg.body_limit && !r->route->chunk;
}

/*
 * With --vhost, a request for <name>.<vhost> or <name>-<port>.<vhost> is the proxy of
 * sandbox <name>: its path is rewritten to /sandboxes/<name>/proxy/<path>. Every host below
 * the vhost is a sandbox's origin, never the API's: one that is not a single label of a
 * name reaches no sandbox (the same answer as an unknown name), never the API or console.
 */
static void route_vhost(api_req_t *r)
{
    const char *vhost = r->api->cfg.vhost;
    const char *host = api_header(r, MHD_HTTP_HEADER_HOST);
    if (!vhost || !host || host[0] == '[')
        return;
    size_t hl = strcspn(host, ":"), vl = strlen(vhost);
    if (hl && host[hl - 1] == '.') /* the same host, fully qualified */
        hl--;
    if (hl <= vl + 1 || host[hl - vl - 1] != '.' || strncasecmp(host + hl - vl, vhost, vl) != 0)
        return;
    r->sandbox_origin = true;
    r->origin_host = xstrndup(host, hl);
    for (char *c = r->origin_host; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    size_t ll = hl - vl - 1;
    char label[64] = "-";
    if (ll < sizeof(label) && strspn(r->origin_host, "abcdefghijklmnopqrstuvwxyz0123456789-") >= ll)
        snprintf(label, sizeof(label), "%.*s", (int)ll, r->origin_host);
    char *dash = strrchr(label, '-');
    long long port;
    if (dash && parse_int(dash + 1, 1, 65535, &port)) {
        *dash = '\0';
        r->vhost_port = (int)port;
    }
    char *path = xasprintf("/sandboxes/%s/proxy%s", label, r->path);
    free(r->path);
    r->path = path;
}

struct framing {
    int cl, te;
    const char *cl_value, *te_value;
};

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    (void)kind;
    struct framing *f = cls;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
        f->cl++, f->cl_value = value ? value : "";
    else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0)
        f->te++, f->te_value = value ? value : "";
    return MHD_YES;
}

/*
 * One way to frame a body, so that what the daemon reads is what a sandbox behind the proxy
 * reads: Content-Length (once, digits) or Transfer-Encoding: chunked, never both (RFC 9112
 * 6.3 lets a server refuse that; a proxy that passes it on is how requests are smuggled).
 */
static int check_framing(api_req_t *r, err_t *err)
{
    struct framing f = {0};
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, count_framing, &f);
    if (f.cl && f.te)
        return err_set(err, ERR_INVALID, 0, "bad_framing",
                       "a request with both Content-Length and Transfer-Encoding is refused");
    size_t tl = f.te ? strlen(f.te_value) : 0;
    while (tl && isspace((unsigned char)f.te_value[tl - 1]))
        tl--;
    if (f.te && (f.te > 1 || tl != 7 || strncasecmp(f.te_value, "chunked", 7) != 0))
        return err_set(err, ERR_INVALID, 0, "bad_framing",
                       "the only Transfer-Encoding taken is chunked");
    if (f.cl &&
        (f.cl > 1 || !*f.cl_value || strspn(f.cl_value, "0123456789") != strlen(f.cl_value)))
        return err_set(err, ERR_INVALID, 0, "bad_framing",
                       "Content-Length must be given once, as digits");
    return 0;
}

/* Checks that need only the request line and headers: route, auth, declared size. */
static void on_headers(api_req_t *r)
{
    err_t err = {0};
    bool known = false, e2b = false;
    const struct route *e2b_found = NULL;
    if (strlen(r->path) <= API_MAX_URL && !(e2b = e2b_route(r, &e2b_found, &known)))
        route_vhost(r);
    size_t len = strlen(r->path);
    if (atomic_load(&r->api->draining)) {
        err_set(&err, ERR_UNAVAILABLE, 0, "shutting_down", "the daemon is shutting down");
    } else if (check_framing(r, &err) < 0) {
        /* refused before anything reads the body */
    } else if (len > API_MAX_URL) {
        err_set(&err, ERR_INVALID, 0, "uri_too_long", "the request path is longer than %d bytes",
                API_MAX_URL);
    } else if (!(r->route = e2b ? e2b_found
                                : api_route_find(r->method, r->path, len, &r->params, &known))) {
        if (known)
            err_set(&err, ERR_NOT_ALLOWED, 0, "method_not_allowed",
                    "method %s is not allowed on this path", r->method);
        else
            err_set(&err, ERR_NOT_FOUND, 0, "route_not_found", "no route for %s", r->method);
    } else if (r->route->flags & ROUTE_E2B_KEY) {
        api_authenticate_e2b(r, api_header(r, "X-API-KEY"), &err);
    } else if ((r->route->flags & ROUTE_PROXY) && (r->authed || !api_has_token(r))) {
        /* anonymous: the handler lets only public sandboxes answer (or E2B's router vouched
           for the caller: r->authed) */
    } else if (!(r->route->flags & ROUTE_PUBLIC) && api_authenticate(r, &err) == 0 &&
               (r->route->flags & ROUTE_ADMIN) && !r->user.is_admin) {
        err_set(&err, ERR_FORBIDDEN, 0, "admin_only", "this route is for admins only");
    }
    if (err.kind == ERR_NONE && declared_too_large(r)) {
        /*
         * A client that waits for "100 Continue" gets the 413 before sending anything.
         * Others are already sending: the body is drained (bounded) and then refused, so
         * they read the 413 instead of a reset connection.
         */
        const char *expect = api_header(r, MHD_HTTP_HEADER_EXPECT);
        if (expect && strcasecmp(expect, "100-continue") == 0)
            too_large_error(r, &err);
        else
            r->too_large = true;
    }
    if (err.kind != ERR_NONE)
        api_reply_error(r, &err);
}

static void run_handler(api_req_t *r)
{
    err_t err = {0};
    if (r->too_large) {
        too_large_error(r, &err);
        api_reply_error(r, &err);
        return;
    }
    if (r->stream_err.kind != ERR_NONE) {
        api_reply_error(r, &r->stream_err);
        return;
    }
    if (r->route->handler(r, &err) < 0)
        api_reply_error(r, &err);
    else if (!r->resp)
        api_reply_json(r, 204, NULL);
}

static enum MHD_Result queue(api_req_t *r)
{
    MHD_add_response_header(r->resp, "X-Request-Id", r->rid);
    /* The daemon's own answers are never sniffed into something else (a sandbox's are its own). */
    if (!r->sandbox_answer && !MHD_get_response_header(r->resp, "X-Content-Type-Options"))
        MHD_add_response_header(r->resp, "X-Content-Type-Options", "nosniff");
    if (r->status == MHD_HTTP_UNAUTHORIZED && !r->sandbox_answer && r->dialect == API_NATIVE)
        MHD_add_response_header(r->resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                "Bearer realm=\"sandboxer\"");
    if (r->status == MHD_HTTP_METHOD_NOT_ALLOWED && r->dialect == API_NATIVE) {
        /* A 405 must say which methods the path takes. */
        buf_t allow = {0};
        struct route_params p;
        for (size_t i = 0; i < api_routes_count; i++) {
            if (!route_pattern_match(api_routes[i].pattern, r->path, strlen(r->path), &p))
                continue;
            bool listed = false; /* two patterns may match with the same method */
            for (size_t j = 0; j < i && !listed; j++)
                listed = strcmp(api_routes[j].method, api_routes[i].method) == 0 &&
                         route_pattern_match(api_routes[j].pattern, r->path, strlen(r->path), &p);
            if (!listed)
                buf_printf(&allow, "%s%s", allow.len ? ", " : "", api_routes[i].method);
        }
        MHD_add_response_header(r->resp, MHD_HTTP_HEADER_ALLOW, allow.data ? allow.data : "");
        buf_free(&allow);
    }
    return MHD_queue_response(r->conn, r->status, r->resp);
}

/*
 * Acknowledge at once: a client that sends headers and body in two segments (Nagle) waits
 * for our ACK of the first, which the kernel would otherwise delay by ~40 ms.
 */
static void quick_ack(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    int one = 1;
    if (ci)
        setsockopt(ci->connect_fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    (void)version;
    api_t *api = cls;
    api_req_t *r = *req_cls;
    if (!r) {
        r = *req_cls = req_new(api, conn, url, method);
        log_set_request_id(r->rid);
        quick_ack(conn);
        on_headers(r);
        if (r->resp)
            return queue(r);
        if (r->route->begin && r->route->begin(r, &r->stream_err) < 0 &&
            r->stream_err.kind == ERR_NONE)
            err_set(&r->stream_err, ERR_INTERNAL, 0, "internal", "the upload could not start");
        return MHD_YES;
    }
    log_set_request_id(r->rid);
    if (*upload_data_size && r->route && r->route->chunk) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->stream_err.kind == ERR_NONE) {
            if (r->route->chunk(r, upload_data, n, &r->stream_err) < 0 &&
                r->stream_err.kind == ERR_NONE)
                err_set(&r->stream_err, ERR_INTERNAL, 0, "internal", "the upload failed");
            return MHD_YES;
        }
        /* Refused already: drop the rest, up to a bound, then close the connection. */
        r->drained += n;
        return r->drained > API_MAX_DRAIN ? MHD_NO : MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->too_large || r->body.len + n > r->api->cfg.body_limit) {
            r->too_large = true;
            buf_free(&r->body);
            r->drained += n;
            /* Past the drain bound the client gets no answer: the connection closes. */
            return r->drained > r->api->cfg.body_limit + API_MAX_DRAIN ? MHD_NO : MHD_YES;
        }
        buf_append(&r->body, upload_data, n);
        return MHD_YES;
    }
    if (r->resp) /* replied early; MHD calls once more after discarding the body */
        return MHD_YES;
    run_handler(r);
    return queue(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    api_t *api = cls;
    api_req_t *r = *req_cls;
    if (!r)
        return;
    char qpath[512];
    log_msg(r->status >= 500 ? LOG_ERROR : LOG_INFO, "http.request",
            "method=%s path=%s status=%u ms=%.2f user=%s%s", r->method,
            log_quote(qpath, sizeof(qpath), r->path), r->status, now_mono_ms() - r->t0,
            r->authed ? r->user.name : "-",
            toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " aborted=true");
    log_set_request_id(NULL);
    unsigned cls_idx = r->status / 100;
    if (cls_idx >= 1 && cls_idx <= 5)
        atomic_fetch_add(&api->responses[cls_idx], 1);
    req_free(r);
    *req_cls = NULL;
    atomic_fetch_sub(&api->inflight, 1);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512], q[600];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    log_warn("http.server", "msg=%s", log_quote(q, sizeof(q), msg));
}

static struct MHD_Daemon *start_daemon(api_t *api, int fd)
{
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG | MHD_ALLOW_UPGRADE;
    return MHD_start_daemon(flags, 0, NULL, NULL, on_request, api, MHD_OPTION_LISTEN_SOCKET, fd,
                            MHD_OPTION_CONNECTION_LIMIT, api->cfg.max_connections,
                            MHD_OPTION_CONNECTION_TIMEOUT, api->cfg.conn_timeout_s,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, api,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, api, MHD_OPTION_END);
}

api_t *api_start(const struct api_config *cfg, store_t *store, struct sbx_mgr *sbx,
                 struct image_store *images, err_t *err)
{
    api_t *api = xcalloc(1, sizeof(*api));
    api->cfg = *cfg;
    api->started_at = now_unix();
    api->store = store;
    api->sbx = sbx;
    api->images = images;
    api->tcp_fd = api->unix_fd = -1;
    if (cfg->listen && (api->tcp_fd = listen_tcp(cfg->listen, &api->tcp_port, err)) < 0)
        goto fail;
    if (cfg->socket_path && (api->unix_fd = listen_unix(cfg->socket_path, err)) < 0)
        goto fail;
    if (api->tcp_fd >= 0 && !(api->tcp = start_daemon(api, api->tcp_fd))) {
        err_set(err, ERR_INTERNAL, 0, "internal", "cannot start the HTTP server on %s",
                cfg->listen);
        goto fail;
    }
    if (api->unix_fd >= 0 && !(api->unix_sock = start_daemon(api, api->unix_fd))) {
        err_set(err, ERR_INTERNAL, 0, "internal", "cannot start the HTTP server on %s",
                cfg->socket_path);
        goto fail;
    }
    return api;
fail:
    if (api->tcp)
        MHD_stop_daemon(api->tcp);
    if (api->tcp_fd >= 0)
        close(api->tcp_fd);
    if (api->unix_fd >= 0) {
        close(api->unix_fd);
        unlink(cfg->socket_path);
    }
    free(api);
    return NULL;
}

unsigned api_tcp_port(const api_t *api)
{
    return api->tcp_fd >= 0 ? api->tcp_port : 0;
}

bool api_stop(api_t *api)
{
    /* New requests, even on kept-alive connections, get 503 from now on. */
    atomic_store(&api->draining, true);
    /* Stop accepting: the listening sockets close, in-flight requests go on. */
    if (api->tcp)
        close(MHD_quiesce_daemon(api->tcp));
    if (api->unix_sock) {
        close(MHD_quiesce_daemon(api->unix_sock));
        unlink(api->cfg.socket_path);
    }
    double deadline = now_mono_ms() + api->cfg.shutdown_timeout_s * 1000.0;
    while (atomic_load(&api->inflight) > 0 && now_mono_ms() < deadline)
        usleep(20 * 1000);
    int left = atomic_load(&api->inflight);
    if (left > 0)
        log_warn("http.shutdown", "inflight=%d msg=\"shutdown timeout; ending them\"", left);
    /* Streams end at their next write or wait; give them a moment to notice. */
    atomic_store(&api->stopping, true);
    deadline = now_mono_ms() + 2000;
    while (atomic_load(&api->streams) > 0 && now_mono_ms() < deadline)
        usleep(20 * 1000);
    bool clean = atomic_load(&api->streams) == 0;
    if (api->tcp)
        MHD_stop_daemon(api->tcp);
    if (api->unix_sock)
        MHD_stop_daemon(api->unix_sock);
    if (clean)
        free(api);
    return clean;
}
