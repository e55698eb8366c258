/*
 * Where pulls from registries other than the mirror and the insecure ones go out: skopeo runs
 * in a network namespace of its own (loopback only, made once per daemon), where the only
 * thing it can reach is this daemon's CONNECT proxy, listening on that namespace's
 * 127.0.0.1. The proxy resolves each target itself and connects only to public addresses:
 * never to loopback, private, link-local, multicast or reserved ones, nor to any address of
 * this host. Every connection skopeo makes goes through it, redirects included, so a
 * registry cannot send a pull to an internal URL, and a name that resolves elsewhere the
 * second time (DNS rebinding) meets the same check. A redirect to a loopback literal (which
 * Go dials without a proxy) reaches the namespace's own empty loopback.
 *
 * The proxy takes only CONNECT with the per-daemon secret in Proxy-Authorization, and answers
 * a refused target with a bare 403: what skopeo then reports is the same whether anything
 * listens there or not.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "common/cleanup.h"
#include "common/id.h"
#include "common/log.h"
#include "common/util.h"
#include "image_internal.h"

#define HEAD_MAX         8192
#define HEAD_TIMEOUT_MS  10000
#define CONNECT_TIMEOUT  10000
#define IDLE_TIMEOUT_MS  (5 * 60 * 1000)
#define MAX_CONNECTIONS  64
#define PROXY_USER       "sandboxer"
#define SECRET_HEX_BYTES 16

struct image_pullnet {
    int nsfd;      /* the namespace */
    int listen_fd; /* the proxy's socket, made in the namespace */
    int stop_fd;   /* a pipe: closing its write end stops the accept loop */
    int stop_w;
    int port;
    char secret[2 * SECRET_HEX_BYTES + 1];
    char auth[200]; /* "Basic <base64(user:secret)>" */
    pthread_t thread;
    bool running;
    int active; /* connections being served (atomic) */
};

/* ---- which addresses a pull may reach ---- */

static bool v4_public(uint32_t host_order)
{
    static const struct {
        uint32_t net, mask;
    } blocked[] = {
        {0x00000000, 0xff000000}, /* 0.0.0.0/8: this network */
        {0x0a000000, 0xff000000}, /* 10.0.0.0/8 */
        {0x64400000, 0xffc00000}, /* 100.64.0.0/10: carrier-grade NAT */
        {0x7f000000, 0xff000000}, /* 127.0.0.0/8: loopback */
        {0xa9fe0000, 0xffff0000}, /* 169.254.0.0/16: link-local, cloud metadata */
        {0xac100000, 0xfff00000}, /* 172.16.0.0/12 */
        {0xc0000000, 0xffffff00}, /* 192.0.0.0/24: protocol assignments */
        {0xc0a80000, 0xffff0000}, /* 192.168.0.0/16 */
        {0xc6120000, 0xfffe0000}, /* 198.18.0.0/15: benchmarking */
        {0xe0000000, 0xe0000000}, /* 224.0.0.0/3: multicast, reserved, broadcast */
    };
    for (size_t i = 0; i < ARRAY_SIZE(blocked); i++)
        if ((host_order & blocked[i].mask) == blocked[i].net)
            return false;
    return true;
}

static bool v6_public(const struct in6_addr *a)
{
    const uint8_t *b = a->s6_addr;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    if (memcmp(b, mapped, 12) == 0 || memcmp(b, nat64, 12) == 0) /* an IPv4 address inside */
        return v4_public((uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 |
                         b[15]);
    if (IN6_IS_ADDR_UNSPECIFIED(a) || IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_V4COMPAT(a))
        return false;
    if ((b[0] & 0xfe) == 0xfc || (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) || b[0] == 0xff)
        return false; /* fc00::/7 unique local, fe80::/10 link-local, ff00::/8 multicast */
    if (b[0] == 0x01 && b[1] == 0 && memcmp(b + 2, "\0\0\0\0\0\0", 6) == 0)
        return false; /* 100::/64 discard */
    return b[0] != 0x20 || b[1] != 0x02 ||
           v4_public((uint32_t)b[2] << 24 | (uint32_t)b[3] << 16 | (uint32_t)b[4] << 8 |
                     b[5]); /* 6to4 */
}

/* True if sa is one of this host's own addresses (any interface, any state). */
static bool host_local(const struct sockaddr *sa)
{
    struct ifaddrs *ifs = NULL, *i;
    bool local = false;
    if (getifaddrs(&ifs) < 0)
        return true; /* cannot tell: refuse */
    for (i = ifs; i && !local; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != sa->sa_family)
            continue;
        if (sa->sa_family == AF_INET)
            local = ((const struct sockaddr_in *)sa)->sin_addr.s_addr ==
                    ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
        else
            local = memcmp(&((const struct sockaddr_in6 *)sa)->sin6_addr,
                           &((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16) == 0;
    }
    freeifaddrs(ifs);
    return local;
}

bool image_addr_public(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return v4_public(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr)) &&
               !host_local(sa);
    if (sa->sa_family == AF_INET6)
        return v6_public(&((const struct sockaddr_in6 *)sa)->sin6_addr) && !host_local(sa);
    return false;
}

int image_resolve_public(const char *host, const char *port, struct addrinfo **out, err_t *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0)
        return err_set(err, ERR_UNPROCESSABLE, 0, "registry_unreachable",
                       "the registry's name %.200s does not resolve", host);
    for (struct addrinfo *a = res; a; a = a->ai_next)
        if (!image_addr_public(a->ai_addr)) {
            freeaddrinfo(res);
            return err_set(err, ERR_FORBIDDEN, 0, "registry_address_refused",
                           "registry %.200s is on a loopback, private, link-local or local "
                           "address: only the configured mirror and insecure registries may be",
                           host);
        }
    *out = res;
    return 0;
}

/* ---- the proxy ---- */

/* Read the request head (up to the blank line) within HEAD_TIMEOUT_MS. */
static ssize_t read_head(int fd, char *buf, size_t size)
{
    size_t n = 0;
    double deadline = now_mono_ms() + HEAD_TIMEOUT_MS;
    while (n + 1 < size) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)(deadline - now_mono_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return -1;
        ssize_t r = recv(fd, buf + n, size - 1 - n, 0);
        if (r <= 0)
            return -1;
        n += (size_t)r;
        buf[n] = '\0';
        if (strstr(buf, "\r\n\r\n"))
            return (ssize_t)n;
    }
    return -1;
}

static void answer(int fd, const char *status)
{
    char line[96];
    int n = snprintf(line, sizeof(line), "HTTP/1.1 %s\r\nContent-Length: 0\r\n\r\n", status);
    (void)!send(fd, line, (size_t)n, MSG_NOSIGNAL);
}

/* The Proxy-Authorization header of head equals want (in constant time). */
static bool authorized(const char *head, const char *want)
{
    const char *h = strcasestr(head, "\r\nProxy-Authorization:");
    if (!h)
        return false;
    h += strlen("\r\nProxy-Authorization:");
    while (*h == ' ' || *h == '\t')
        h++;
    size_t n = strcspn(h, "\r\n"), w = strlen(want);
    unsigned char diff = n != w;
    for (size_t i = 0; i < w; i++)
        diff |= (unsigned char)(i < n ? h[i] : 0) ^ (unsigned char)want[i];
    return diff == 0;
}

/* CONNECT host:port → host and port (an IPv6 literal in brackets). */
static bool connect_target(const char *head, char *host, size_t hsize, char *port, size_t psize)
{
    if (strncmp(head, "CONNECT ", 8) != 0)
        return false;
    const char *t = head + 8, *end = strchr(t, ' ');
    if (!end || end - t >= 300)
        return false;
    const char *colon = t[0] == '[' ? strstr(t, "]:") : memrchr(t, ':', (size_t)(end - t));
    if (!colon || colon >= end)
        return false;
    const char *h = t[0] == '[' ? t + 1 : t, *p = t[0] == '[' ? colon + 2 : colon + 1;
    snprintf(host, hsize, "%.*s", (int)(colon - h), h);
    snprintf(port, psize, "%.*s", (int)(end - p), p);
    long long pn;
    return host[0] && parse_int(port, 1, 65535, &pn);
}

/* A connected socket to the first address of res that answers, or -1. */
static int dial(const struct addrinfo *res)
{
    for (const struct addrinfo *a = res; a; a = a->ai_next) {
        int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            return fd;
        struct pollfd p = {fd, POLLOUT, 0};
        int e = 0;
        socklen_t len = sizeof(e);
        if (errno == EINPROGRESS && poll(&p, 1, CONNECT_TIMEOUT) == 1 &&
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) == 0 && e == 0)
            return fd;
        close(fd);
    }
    return -1;
}

/* Copy both ways until one side ends or nothing moves for IDLE_TIMEOUT_MS. */
static void relay(int a, int b)
{
    char buf[65536];
    for (;;) {
        struct pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
        if (poll(p, 2, IDLE_TIMEOUT_MS) <= 0)
            return;
        for (int i = 0; i < 2; i++) {
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t n = recv(p[i].fd, buf, sizeof(buf), MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                return;
            for (ssize_t off = 0; n > 0 && off < n;) {
                ssize_t w = send(p[1 - i].fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
                if (w < 0 && errno == EAGAIN) {
                    struct pollfd q = {p[1 - i].fd, POLLOUT, 0};
                    if (poll(&q, 1, IDLE_TIMEOUT_MS) <= 0)
                        return;
                    continue;
                }
                if (w <= 0)
                    return;
                off += w;
            }
        }
    }
}

struct conn {
    struct image_pullnet *pn;
    int fd;
};

static void serve(struct image_pullnet *pn, int fd)
{
    char head[HEAD_MAX], host[300], port[8];
    if (read_head(fd, head, sizeof(head)) < 0)
        return;
    if (!authorized(head, pn->auth))
        return answer(fd, "407 Proxy Authentication Required");
    if (!connect_target(head, host, sizeof(host), port, sizeof(port))) {
        log_warn("image.pull_blocked", "reason=\"not a CONNECT\"");
        return answer(fd, "403 Forbidden");
    }
    struct addrinfo *res = NULL;
    err_t err = {0};
    char q[400];
    if (image_resolve_public(host, port, &res, &err) < 0) {
        log_warn("image.pull_blocked", "target=%s:%s reason=%s", log_quote(q, sizeof(q), host),
                 port, err.code);
        return answer(fd, "403 Forbidden");
    }
    int up _cleanup_close_ = dial(res);
    freeaddrinfo(res);
    if (up < 0)
        return answer(fd, "502 Bad Gateway");
    static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    if (send(fd, ok, sizeof(ok) - 1, MSG_NOSIGNAL) != (ssize_t)sizeof(ok) - 1)
        return;
    relay(fd, up);
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    serve(c->pn, c->fd);
    close(c->fd);
    __atomic_sub_fetch(&c->pn->active, 1, __ATOMIC_RELAXED);
    free(c);
    return NULL;
}

static void *accept_main(void *arg)
{
    struct image_pullnet *pn = arg;
    for (;;) {
        struct pollfd p[2] = {{pn->listen_fd, POLLIN, 0}, {pn->stop_fd, POLLIN, 0}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            return NULL;
        if (p[1].revents)
            return NULL;
        int fd = accept4(pn->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        if (__atomic_add_fetch(&pn->active, 1, __ATOMIC_RELAXED) > MAX_CONNECTIONS) {
            __atomic_sub_fetch(&pn->active, 1, __ATOMIC_RELAXED);
            answer(fd, "503 Service Unavailable");
            close(fd);
            continue;
        }
        struct conn *c = xcalloc(1, sizeof(*c));
        *c = (struct conn){pn, fd};
        pthread_attr_t at;
        pthread_t t;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, conn_main, c) != 0) {
            __atomic_sub_fetch(&pn->active, 1, __ATOMIC_RELAXED);
            close(fd);
            free(c);
        }
        pthread_attr_destroy(&at);
    }
}

/* ---- the namespace ---- */

/* In a thread of its own: a new network namespace with lo up and the proxy's socket in it. */
static void *ns_main(void *arg)
{
    struct image_pullnet *pn = arg;
    if (unshare(CLONE_NEWNET) < 0)
        return (void *)(intptr_t)errno;
    int s _cleanup_close_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr = {0};
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        return (void *)(intptr_t)errno;
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
        return (void *)(intptr_t)errno;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    pn->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (pn->listen_fd < 0 || bind(pn->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(pn->listen_fd, 64) < 0 || getsockname(pn->listen_fd, (struct sockaddr *)&sa, &len))
        return (void *)(intptr_t)errno;
    pn->port = ntohs(sa.sin_port);
    pn->nsfd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    return pn->nsfd < 0 ? (void *)(intptr_t)errno : NULL;
}

static void make_auth(struct image_pullnet *pn)
{
    unsigned char raw[SECRET_HEX_BYTES];
    random_bytes(raw, sizeof(raw));
    hex_encode(raw, sizeof(raw), pn->secret);
    char plain[96];
    int n = snprintf(plain, sizeof(plain), PROXY_USER ":%s", pn->secret);
    unsigned char b64[128];
    EVP_EncodeBlock(b64, (const unsigned char *)plain, n);
    snprintf(pn->auth, sizeof(pn->auth), "Basic %s", b64);
}

void image_pullnet_close(struct image_pullnet *pn)
{
    if (!pn)
        return;
    if (pn->running) {
        close(pn->stop_w);
        pthread_join(pn->thread, NULL);
        /* Connections end with their pull, and no pull runs by now: wait (bounded) for the
         * threads that serve them to let go of pn. */
        for (int i = 0; i < 200 && __atomic_load_n(&pn->active, __ATOMIC_RELAXED) > 0; i++)
            usleep(10000);
        if (__atomic_load_n(&pn->active, __ATOMIC_RELAXED) > 0)
            return; /* leaked rather than freed under a thread still using it */
    }
    int fds[] = {pn->nsfd, pn->listen_fd, pn->stop_fd};
    for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(pn);
}

struct image_pullnet *image_pullnet_open(err_t *err)
{
    if (access(IMAGE_NSENTER, X_OK) < 0) {
        err_sys(err, "find %s (util-linux)", IMAGE_NSENTER);
        return NULL;
    }
    struct image_pullnet *pn = xcalloc(1, sizeof(*pn));
    *pn = (struct image_pullnet){.nsfd = -1, .listen_fd = -1, .stop_fd = -1, .stop_w = -1};
    pthread_t t;
    void *rc = NULL;
    if (pthread_create(&t, NULL, ns_main, pn) != 0 || pthread_join(t, &rc) != 0 || rc) {
        errno = (int)(intptr_t)rc;
        err_sys(err, "make the pulls' network namespace");
        image_pullnet_close(pn);
        return NULL;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        err_sys(err, "pipe");
        image_pullnet_close(pn);
        return NULL;
    }
    pn->stop_fd = p[0];
    pn->stop_w = p[1];
    make_auth(pn);
    if (pthread_create(&pn->thread, NULL, accept_main, pn) != 0) {
        err_sys(err, "start the pulls' proxy");
        close(pn->stop_w);
        image_pullnet_close(pn);
        return NULL;
    }
    pn->running = true;
    log_info("image.pull_proxy", "port=%d msg=\"pulls from other registries go through it\"",
             pn->port);
    return pn;
}

char *image_pullnet_ns_path(const struct image_pullnet *pn)
{
    return xasprintf("/proc/%d/fd/%d", (int)getpid(), pn->nsfd);
}

char *image_pullnet_proxy_url(const struct image_pullnet *pn)
{
    return xasprintf("http://" PROXY_USER ":%s@127.0.0.1:%d", pn->secret, pn->port);
}
