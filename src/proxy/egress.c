/*
 * The egress proxy (egress.h). A thread accepts; each connection gets a detached thread that
 * reads one request head, checks the client's allow list, connects and relays both ways until
 * either side is done. Everything is bounded: the head's size, how long it may take to come,
 * how long a tunnel may idle, how many connections run at once, in all and per sandbox (a
 * client address is one sandbox's: the bridge binds each address to its sandbox's port).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "egress.h"
#include "upstream.h"

#define HEAD_MAX         16384  /* a request head larger than this is refused */
#define HEAD_TIMEOUT_S   10     /* to send the head */
#define CONNECT_MS       10000  /* to reach the destination */
#define IDLE_TIMEOUT_MS  300000 /* a tunnel with no traffic either way for this long ends */
#define MAX_CONNS        256
#define MAX_CONNS_CLIENT 32

/* How many connections one client address holds. */
struct client_count {
    uint32_t addr;
    int n;
};

struct egress {
    struct egress_config cfg;
    int listen_fd, stop_fd;
    pthread_t thread;
    /* Connection threads are detached: the last one out frees the proxy once it is stopped,
     * and none asks the policy (the daemon's sandboxes) after egress_stop returns. */
    pthread_mutex_t lock;
    int conns;
    struct client_count *clients; /* at most cfg.max_conns: each holds a connection */
    size_t n_clients;
    bool stopped;
};

struct conn {
    egress_t *e;
    int fd;
    uint32_t addr;
    char client[INET_ADDRSTRLEN];
};

/* ---- the pure parts: patterns, matching, which addresses are out of bounds ---- */

static bool hostname_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253 || s[0] == '.' || s[n - 1] == '.' || s[0] == '-' || strstr(s, ".."))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-' ||
              s[i] == '.'))
            return false;
    return true;
}

bool egress_pattern_valid(const char *p)
{
    struct in_addr a;
    if (!p || strlen(p) > 253)
        return false;
    if (strncmp(p, "*.", 2) == 0)
        return hostname_valid(p + 2);
    return inet_pton(AF_INET, p, &a) == 1 || hostname_valid(p);
}

bool egress_host_allowed(const json_t *allow, const char *host)
{
    char h[256];
    size_t n = strlen(host);
    if (n == 0 || n >= sizeof(h))
        return false;
    for (size_t i = 0; i <= n; i++)
        h[i] = (char)tolower((unsigned char)host[i]);
    if (n > 1 && h[n - 1] == '.') /* "example.com." is example.com */
        h[--n] = '\0';
    size_t i;
    json_t *v;
    json_array_foreach(allow, i, v)
    {
        const char *p = json_string_value(v);
        if (!p)
            continue;
        if (strncmp(p, "*.", 2) == 0) {
            size_t sl = strlen(p + 1); /* ".example.com" */
            if (n > sl && strcmp(h + n - sl, p + 1) == 0)
                return true;
        } else if (strcmp(h, p) == 0) {
            return true;
        }
    }
    return false;
}

bool egress_address_public(uint32_t addr)
{
    /* The ranges of the nftables set private4 (src/net/nft.c), which egress "open" may not
     * reach either, and the limited broadcast. */
    static const struct {
        uint32_t net, mask;
    } blocked[] = {
        {0x00000000, 0xff000000}, /* 0.0.0.0/8 */
        {0x0a000000, 0xff000000}, /* 10.0.0.0/8 */
        {0x64400000, 0xffc00000}, /* 100.64.0.0/10 */
        {0x7f000000, 0xff000000}, /* 127.0.0.0/8 */
        {0xa9fe0000, 0xffff0000}, /* 169.254.0.0/16 */
        {0xac100000, 0xfff00000}, /* 172.16.0.0/12 */
        {0xc0a80000, 0xffff0000}, /* 192.168.0.0/16 */
        {0xe0000000, 0xe0000000}, /* 224.0.0.0/3: multicast, reserved, broadcast */
    };
    uint32_t a = ntohl(addr);
    for (size_t i = 0; i < ARRAY_SIZE(blocked); i++)
        if ((a & blocked[i].mask) == blocked[i].net)
            return false;
    return true;
}

/* ---- one connection ---- */

static void reply(int fd, int status, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void reply(int fd, int status, const char *reason, const char *fmt, ...)
{
    char body[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof(body), fmt, ap);
    va_end(ap);
    _cleanup_free_ char *msg = xasprintf(
        "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n"
        "Connection: close\r\n\r\n%s\n",
        status, reason, strlen(body) + 1, body);
    err_t err = {0};
    upstream_write(fd, msg, strlen(msg), &err);
}

/* Read until the blank line that ends the head; what came after it stays in b too. */
static ssize_t read_head(int fd, buf_t *b)
{
    char chunk[4096];
    while (b->len < HEAD_MAX) {
        ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
        if (n <= 0)
            return -1;
        buf_append(b, chunk, (size_t)n);
        const char *end = memmem(b->data, b->len, "\r\n\r\n", 4);
        if (end)
            return end + 4 - b->data;
    }
    return -1;
}

/* host[:port] into host and port (default_port when absent); false if malformed. */
static bool split_authority(const char *a, size_t n, char *host, size_t hsize, int *port,
                            int default_port)
{
    const char *colon = memchr(a, ':', n);
    size_t hl = colon ? (size_t)(colon - a) : n;
    if (hl == 0 || hl >= hsize || memchr(a, '@', n) || memchr(a, '[', n))
        return false;
    memcpy(host, a, hl);
    host[hl] = '\0';
    *port = default_port;
    if (colon) {
        char p[8];
        size_t pl = n - hl - 1;
        long long v;
        if (pl == 0 || pl >= sizeof(p))
            return false;
        memcpy(p, colon + 1, pl);
        p[pl] = '\0';
        if (!parse_int(p, 1, 65535, &v))
            return false;
        *port = (int)v;
    }
    return true;
}

/* May the proxy connect to addr: public, and not one of the host's own (asked each time, under
 * the lock, as the policy is: the network layer is not asked once the proxy is stopped). */
static bool reachable(egress_t *e, uint32_t addr)
{
    if (!egress_address_public(addr))
        return false;
    if (!e->cfg.refuse)
        return true;
    pthread_mutex_lock(&e->lock);
    bool ok = !e->stopped && !e->cfg.refuse(e->cfg.refuse_ctx, addr);
    pthread_mutex_unlock(&e->lock);
    return ok;
}

/* The first IPv4 address of host the proxy may connect to; false (and why) if none. */
static bool resolve(egress_t *e, const char *host, char *ip, const char **why)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) {
        *why = "it does not resolve";
        return false;
    }
    bool found = false;
    for (struct addrinfo *r = res; r && !found; r = r->ai_next) {
        struct sockaddr_in *sa = (struct sockaddr_in *)r->ai_addr;
        if (reachable(e, sa->sin_addr.s_addr)) {
            inet_ntop(AF_INET, &sa->sin_addr, ip, INET_ADDRSTRLEN);
            found = true;
        }
    }
    freeaddrinfo(res);
    if (!found)
        *why = "it resolves only to private, loopback, reserved or this host's own addresses";
    return found;
}

/* Copy between a and b until both directions end or nothing moves for IDLE_TIMEOUT_MS. */
static void relay(int a, int b)
{
    bool a_open = true, b_open = true;
    char chunk[65536];
    while (a_open || b_open) {
        struct pollfd p[2] = {{a_open ? a : -1, POLLIN, 0}, {b_open ? b : -1, POLLIN, 0}};
        int r = poll(p, 2, IDLE_TIMEOUT_MS);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return;
        for (int i = 0; i < 2; i++) {
            if (!p[i].revents)
                continue;
            int from = i == 0 ? a : b, to = i == 0 ? b : a;
            ssize_t n = recv(from, chunk, sizeof(chunk), 0);
            err_t err = {0};
            if (n > 0 && upstream_write(to, chunk, (size_t)n, &err) == 0)
                continue;
            if (n > 0) /* the other side stopped taking data */
                return;
            shutdown(to, SHUT_WR); /* pass the end on; the other direction may go on */
            if (i == 0)
                a_open = false;
            else
                b_open = false;
        }
    }
}

/* Headers a proxy must not pass on (RFC 9110, 7.6.1), and the client's own connection. */
static bool hop_by_hop(const char *line, size_t n)
{
    static const char *const names[] = {
        "connection:", "proxy-connection:", "keep-alive:", "proxy-authorization:",
        "te:",         "upgrade:"};
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        size_t l = strlen(names[i]);
        if (n >= l && strncasecmp(line, names[i], l) == 0)
            return true;
    }
    return false;
}

const char *egress_parse_request(const char *head, size_t len, struct egress_request *rq)
{
    memset(rq, 0, sizeof(*rq));
    const char *line_end = memmem(head, len, "\r\n", 2);
    if (!line_end || (size_t)(line_end - head) >= 2100)
        return "no request line, or one too long";
    /* METHOD SP TARGET SP VERSION */
    char target[2048], rest;
    _cleanup_free_ char *line = xstrndup(head, (size_t)(line_end - head));
    if (sscanf(line, "%15s %2047s %15s %c", rq->method, target, rq->version, &rest) != 3 ||
        strncmp(rq->version, "HTTP/1.", 7) != 0)
        return "not an HTTP/1 request line";
    rq->headers = line_end + 2;
    rq->tunnel = strcmp(rq->method, "CONNECT") == 0;
    if (rq->tunnel) {
        if (!split_authority(target, strlen(target), rq->host, sizeof(rq->host), &rq->port, -1) ||
            rq->port < 0)
            return "CONNECT wants host:port";
        return NULL;
    }
    if (strncasecmp(target, "http://", 7) != 0)
        return "send http://host/... through the proxy, or CONNECT host:port (https)";
    const char *a = target + 7;
    size_t al = strcspn(a, "/?#");
    if (!split_authority(a, al, rq->host, sizeof(rq->host), &rq->port, 80))
        return "bad host in the request's URL";
    snprintf(rq->path, sizeof(rq->path), "%s", a[al] == '/' ? a + al : "/");
    return NULL;
}

void egress_upstream_head(const struct egress_request *rq, const char *head, size_t len, buf_t *out)
{
    buf_printf(out, "%s %s %s\r\n", rq->method, rq->path, rq->version);
    const char *p = rq->headers, *end = head + len;
    while (p < end) {
        const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
        size_t n = eol ? (size_t)(eol - p) : (size_t)(end - p);
        if (n == 0)
            break;
        if (!hop_by_hop(p, n)) {
            buf_append(out, p, n);
            buf_puts(out, "\r\n");
        }
        p += n + 2;
    }
    buf_puts(out, "Connection: close\r\n\r\n");
}

/* The client's allow list, unless the proxy is stopping. */
static json_t *policy(egress_t *e, const char *client)
{
    pthread_mutex_lock(&e->lock);
    json_t *allow = e->stopped ? NULL : e->cfg.policy(e->cfg.ctx, client);
    pthread_mutex_unlock(&e->lock);
    return allow;
}

static void serve(struct conn *c, buf_t *b, buf_t *out)
{
    json_t *allow _cleanup_json_ = policy(c->e, c->client);
    if (!allow) {
        reply(c->fd, 403, "Forbidden", "sandboxer: this sandbox's network is not \"proxy\"");
        return;
    }
    struct timeval tv = {HEAD_TIMEOUT_S, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ssize_t head = read_head(c->fd, b);
    if (head < 0) {
        reply(c->fd, 400, "Bad Request", "sandboxer: no complete request head");
        return;
    }
    tv.tv_sec = 0;
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct egress_request rq;
    const char *bad = egress_parse_request(b->data, (size_t)head, &rq);
    if (bad) {
        reply(c->fd, 400, "Bad Request", "sandboxer: %s", bad);
        return;
    }
    const char *host = rq.host, *method = rq.method;
    int port = rq.port;
    if (!egress_host_allowed(allow, host)) {
        log_info("egress.denied", "client=%s host=%s port=%d", c->client, host, port);
        reply(c->fd, 403, "Forbidden", "sandboxer: %s is not on this sandbox's allow list", host);
        return;
    }
    char ip[INET_ADDRSTRLEN];
    const char *why = "";
    if (!resolve(c->e, host, ip, &why)) {
        log_info("egress.denied", "client=%s host=%s port=%d why=\"%s\"", c->client, host, port,
                 why);
        reply(c->fd, 403, "Forbidden", "sandboxer: %s is not reachable: %s", host, why);
        return;
    }
    err_t err = {0};
    int up _cleanup_close_ = upstream_connect(ip, port, CONNECT_MS, &err);
    if (up < 0) {
        reply(c->fd, 502, "Bad Gateway", "sandboxer: cannot connect to %s:%d: %s", host, port,
              err.msg);
        return;
    }
    log_info("egress.allowed", "client=%s host=%s ip=%s port=%d method=%s", c->client, host, ip,
             port, method);
    if (rq.tunnel) {
        const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
        if (upstream_write(c->fd, ok, sizeof(ok) - 1, &err) < 0)
            return;
    } else {
        egress_upstream_head(&rq, b->data, (size_t)head, out);
    }
    buf_append(out, b->data + head, b->len - (size_t)head); /* what came after the head */
    if (out->len && upstream_write(up, out->data, out->len, &err) < 0)
        return;
    relay(c->fd, up);
}

static void egress_free(egress_t *e)
{
    if (e->listen_fd >= 0)
        close(e->listen_fd);
    if (e->stop_fd >= 0)
        close(e->stop_fd);
    pthread_mutex_destroy(&e->lock);
    free(e->clients);
    free(e);
}

/* addr's count, or NULL. Called with the lock held. */
static struct client_count *client_find(egress_t *e, uint32_t addr)
{
    for (size_t i = 0; i < e->n_clients; i++)
        if (e->clients[i].addr == addr)
            return &e->clients[i];
    return NULL;
}

/* Count a new connection of addr: 0, or 503 (all connections taken) or 429 (its share). */
static int conn_admit(egress_t *e, uint32_t addr)
{
    pthread_mutex_lock(&e->lock);
    struct client_count *c = client_find(e, addr);
    int status = 0;
    if (e->conns >= e->cfg.max_conns)
        status = 503;
    else if (c && c->n >= e->cfg.max_conns_per_client)
        status = 429;
    if (status == 0) {
        if (!c) { /* fewer clients than connections, and conns < max_conns: there is room */
            c = &e->clients[e->n_clients++];
            *c = (struct client_count){addr, 0};
        }
        c->n++;
        e->conns++;
    }
    pthread_mutex_unlock(&e->lock);
    return status;
}

/* One connection of addr fewer; true if it was the last of a stopped proxy (the caller frees
 * it). */
static bool conn_done(egress_t *e, uint32_t addr)
{
    pthread_mutex_lock(&e->lock);
    struct client_count *c = client_find(e, addr);
    if (c && --c->n == 0)
        *c = e->clients[--e->n_clients];
    bool last = --e->conns == 0 && e->stopped;
    pthread_mutex_unlock(&e->lock);
    return last;
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    egress_t *e = c->e;
    uint32_t addr = c->addr;
    buf_t b = {0}, out = {0};
    serve(c, &b, &out);
    buf_free(&b);
    buf_free(&out);
    close(c->fd);
    free(c);
    if (conn_done(e, addr))
        egress_free(e);
    return NULL;
}

/* Answer a connection over a limit and close it. The answer cannot block the accepting
 * thread for long: a fresh socket's send buffer takes it whole. */
static void refuse(const egress_t *e, int fd, int status, uint32_t addr)
{
    char client[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &addr, client, sizeof(client));
    if (status == 429) {
        log_debug("egress.limit", "client=%s limit=per_sandbox max=%d", client,
                  e->cfg.max_conns_per_client);
        reply(fd, 429, "Too Many Requests",
              "sandboxer: this sandbox already has %d proxied connections open (its share)",
              e->cfg.max_conns_per_client);
    } else {
        log_debug("egress.limit", "client=%s limit=all max=%d", client, e->cfg.max_conns);
        reply(fd, 503, "Service Unavailable", "sandboxer: too many proxied connections");
    }
    close(fd);
}

static void *accept_main(void *arg)
{
    egress_t *e = arg;
    for (;;) {
        struct pollfd p[2] = {{e->listen_fd, POLLIN, 0}, {e->stop_fd, POLLIN, 0}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents)
            break;
        struct sockaddr_in sa;
        socklen_t sl = sizeof(sa);
        int fd = accept4(e->listen_fd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        int refused = conn_admit(e, sa.sin_addr.s_addr);
        if (refused) {
            refuse(e, fd, refused, sa.sin_addr.s_addr);
            continue;
        }
        struct conn *c = xcalloc(1, sizeof(*c));
        c->e = e;
        c->fd = fd;
        c->addr = sa.sin_addr.s_addr;
        inet_ntop(AF_INET, &sa.sin_addr, c->client, sizeof(c->client));
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, conn_main, c) != 0) {
            close(fd);
            free(c);
            conn_done(e, sa.sin_addr.s_addr); /* not the last: the proxy is not stopped while
                                                  this thread runs */
        }
        pthread_attr_destroy(&attr);
    }
    return NULL;
}

egress_t *egress_start(const struct egress_config *cfg, err_t *err)
{
    egress_t *e = xcalloc(1, sizeof(*e));
    e->cfg = *cfg;
    if (e->cfg.max_conns <= 0)
        e->cfg.max_conns = MAX_CONNS;
    if (e->cfg.max_conns_per_client <= 0)
        e->cfg.max_conns_per_client = MAX_CONNS_CLIENT;
    e->clients = xcalloc((size_t)e->cfg.max_conns, sizeof(*e->clients));
    pthread_mutex_init(&e->lock, NULL);
    e->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    e->stop_fd = eventfd(0, EFD_CLOEXEC);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port)};
    int one = 1;
    if (e->listen_fd < 0 || e->stop_fd < 0 ||
        inet_pton(AF_INET, cfg->listen_ip, &sa.sin_addr) != 1 ||
        setsockopt(e->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(e->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(e->listen_fd, 128) < 0) {
        err_sys(err, "listen for the egress proxy on %s:%d", cfg->listen_ip, cfg->port);
        egress_stop(e);
        return NULL;
    }
    if (pthread_create(&e->thread, NULL, accept_main, e) != 0) {
        err_sys(err, "start the egress proxy");
        egress_stop(e);
        return NULL;
    }
    log_info("egress.ready", "listen=%s:%d max_conns=%d max_conns_per_sandbox=%d", cfg->listen_ip,
             cfg->port, e->cfg.max_conns, e->cfg.max_conns_per_client);
    return e;
}

void egress_stop(egress_t *e)
{
    if (!e)
        return;
    if (e->thread) {
        uint64_t one = 1;
        (void)!write(e->stop_fd, &one, sizeof(one));
        pthread_join(e->thread, NULL);
    }
    if (e->listen_fd >= 0) { /* nobody accepts any more */
        close(e->listen_fd);
        e->listen_fd = -1;
    }
    pthread_mutex_lock(&e->lock);
    e->stopped = true;
    bool idle = e->conns == 0;
    pthread_mutex_unlock(&e->lock);
    if (idle) /* else the last connection frees it */
        egress_free(e);
}
