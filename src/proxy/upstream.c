#include "upstream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEAD_MAX (64 * 1024)

int upstream_connect(const char *ip, int port, int timeout_ms, err_t *err)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
        return err_set(err, ERR_BAD_GATEWAY, 0, "bad_gateway", "the sandbox has no address");
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return err_sys(err, "socket");
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    if (rc < 0 && errno == EINPROGRESS) {
        struct pollfd p = {fd, POLLOUT, 0};
        int soerr = 0;
        socklen_t len = sizeof(soerr);
        rc = poll(&p, 1, timeout_ms) == 1 &&
                     getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr == 0
                 ? 0
                 : -1;
        errno = soerr ? soerr : ETIMEDOUT;
    }
    if (rc < 0) {
        int e = errno;
        close(fd);
        return err_set(err, ERR_BAD_GATEWAY, e, "bad_gateway",
                       "nothing answers on port %d in the sandbox (%s)", port, strerror(e));
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct timeval tv = {60, 0}; /* a sandbox that stops reading or writing: give up */
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

int upstream_write(int fd, const void *p, size_t n, err_t *err)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return err_set(err, ERR_BAD_GATEWAY, errno, "bad_gateway",
                           "the sandbox's server stopped reading the request");
        c += w, n -= (size_t)w;
    }
    return 0;
}

int upstream_parse_head(struct upstream_head *h, err_t *err)
{
    const char *s = h->raw.data;
    if (strncmp(s, "HTTP/1.", 7) != 0 || h->raw.len < 12 || s[8] != ' ')
        return err_set(err, ERR_BAD_GATEWAY, 0, "bad_gateway", "the sandbox's answer is not HTTP");
    h->status = atoi(s + 9);
    if (h->status < 100 || h->status > 599)
        return err_set(err, ERR_BAD_GATEWAY, 0, "bad_gateway",
                       "the sandbox's answer has no status");
    h->length = -1;
    for (const char *line = strstr(s, "\r\n") + 2; line < s + h->head_len - 2;) {
        const char *end = strstr(line, "\r\n");
        if (!end)
            break;
        if (strncasecmp(line, "Content-Length:", 15) == 0)
            h->length = strtoll(line + 15, NULL, 10);
        else if (strncasecmp(line, "Transfer-Encoding:", 18) == 0 && strstr(line, "chunked") &&
                 strstr(line, "chunked") < end)
            h->chunked = true;
        line = end + 2;
    }
    return 0;
}

int upstream_read_head(int fd, int timeout_ms, struct upstream_head *h, err_t *err)
{
    memset(h, 0, sizeof(*h));
    char chunk[8192];
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, timeout_ms) != 1)
            return err_set(err, ERR_BAD_GATEWAY, 0, "gateway_timeout",
                           "the sandbox's server did not answer in time");
        ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
        if (n <= 0)
            return err_set(err, ERR_BAD_GATEWAY, 0, "bad_gateway",
                           "the sandbox's server closed the connection without an answer");
        buf_append(&h->raw, chunk, (size_t)n);
        char *end = strstr(h->raw.data, "\r\n\r\n");
        if (end) {
            h->head_len = (size_t)(end - h->raw.data) + 4;
            return upstream_parse_head(h, err);
        }
        if (h->raw.len > HEAD_MAX)
            return err_set(err, ERR_BAD_GATEWAY, 0, "bad_gateway",
                           "the sandbox's answer head is too big");
    }
}

void upstream_each_header(const struct upstream_head *h,
                          void (*fn)(void *ctx, const char *name, const char *value), void *ctx)
{
    char *copy = strndup(h->raw.data, h->head_len);
    if (!copy)
        return;
    char *save = NULL;
    char *line = strtok_r(copy, "\r\n", &save); /* the status line */
    while ((line = strtok_r(NULL, "\r\n", &save)) != NULL) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        *colon = '\0';
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        fn(ctx, line, v);
    }
    free(copy);
}

enum { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER, CH_DONE };

int chunked_decode(struct chunked *c, const char *in, size_t n,
                   bool (*out)(void *ctx, const char *p, size_t len), void *ctx)
{
    size_t i = 0;
    while (i < n && c->state != CH_DONE) {
        if (c->state == CH_DATA) {
            size_t take = n - i < c->left ? n - i : (size_t)c->left;
            if (!out(ctx, in + i, take))
                return -1;
            i += take, c->left -= take;
            if (c->left == 0)
                c->state = CH_DATA_END;
            continue;
        }
        char ch = in[i++];
        if (ch != '\n') {
            if (ch != '\r' && c->line_len + 1 < sizeof(c->line))
                c->line[c->line_len++] = ch;
            else if (ch != '\r')
                return -1;
            continue;
        }
        c->line[c->line_len] = '\0';
        size_t len = c->line_len;
        c->line_len = 0;
        if (c->state == CH_SIZE) {
            char *end = NULL;
            c->left = strtoull(c->line, &end, 16);
            if (end == c->line)
                return -1;
            c->state = c->left ? CH_DATA : CH_TRAILER;
        } else if (c->state == CH_DATA_END) {
            if (len != 0)
                return -1;
            c->state = CH_SIZE;
        } else if (c->state == CH_TRAILER && len == 0) {
            c->state = CH_DONE;
        }
    }
    return c->state == CH_DONE ? 1 : 0;
}
