/*
 * WebSockets to the daemon (`shell`, `attach`): libcurl connects (TCP, TLS or the unix
 * socket) with CONNECT_ONLY, the handshake is written here, and the frames go through
 * common/ws over curl_easy_send/recv, so TLS works the same as plain TCP.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include "client.h"
#include "client_priv.h"
#include "common/cleanup.h"
#include "common/util.h"

#define HEAD_MAX (16u * 1024u)

struct client_ws {
    CURL *curl;
    int fd;
    buf_t early; /* bytes that came after the 101's head */
    size_t early_off;
    ws_t *ws;
};

static ssize_t io_recv(void *io, void *buf, size_t n)
{
    struct client_ws *w = io;
    if (w->early_off < w->early.len) {
        size_t k = w->early.len - w->early_off < n ? w->early.len - w->early_off : n;
        memcpy(buf, w->early.data + w->early_off, k);
        w->early_off += k;
        return (ssize_t)k;
    }
    size_t got = 0;
    CURLcode rc = curl_easy_recv(w->curl, buf, n, &got);
    if (rc == CURLE_AGAIN)
        return errno = EAGAIN, -1;
    return rc == CURLE_OK ? (ssize_t)got : (errno = ECONNRESET, -1);
}

static ssize_t io_send(void *io, const void *buf, size_t n)
{
    struct client_ws *w = io;
    size_t sent = 0;
    CURLcode rc = curl_easy_send(w->curl, buf, n, &sent);
    if (rc == CURLE_AGAIN)
        return errno = EAGAIN, -1;
    return rc == CURLE_OK ? (ssize_t)sent : (errno = EPIPE, -1);
}

/* Wait for the socket (bounded): false on timeout or error. */
static bool wait_fd(int fd, short ev, int ms)
{
    struct pollfd p = {fd, ev, 0};
    return poll(&p, 1, ms) == 1;
}

static int send_all(struct client_ws *w, const char *p, size_t n, err_t *err)
{
    while (n > 0) {
        ssize_t k = io_send(w, p, n);
        if (k < 0 && errno == EAGAIN && wait_fd(w->fd, POLLOUT, CLIENT_CONNECT_TIMEOUT_S * 1000))
            continue;
        if (k <= 0)
            return err_set(err, ERR_UNAVAILABLE, errno, "unreachable",
                           "the daemon closed the connection");
        p += k, n -= (size_t)k;
    }
    return 0;
}

/* Read until the end of the answer's head; the rest stays in w->early. */
static int read_head(struct client_ws *w, size_t *head_len, err_t *err)
{
    char chunk[4096];
    for (;;) {
        const char *end = w->early.len ? memmem(w->early.data, w->early.len, "\r\n\r\n", 4) : NULL;
        if (end) {
            *head_len = (size_t)(end - w->early.data) + 4;
            return 0;
        }
        if (w->early.len > HEAD_MAX)
            return err_set(err, ERR_INTERNAL, 0, "bad_response", "the daemon's answer is garbled");
        size_t got = 0;
        CURLcode rc = curl_easy_recv(w->curl, chunk, sizeof(chunk), &got);
        if (rc == CURLE_AGAIN) {
            if (!wait_fd(w->fd, POLLIN, 60000))
                return err_set(err, ERR_UNAVAILABLE, 0, "timeout", "the daemon did not answer");
            continue;
        }
        if (rc != CURLE_OK || got == 0)
            return err_set(err, ERR_UNAVAILABLE, 0, "unreachable",
                           "the daemon closed the connection");
        buf_append(&w->early, chunk, got);
    }
}

/* A refusal (4xx/5xx with a JSON body) as err: the body follows the head, Content-Length. */
static int refusal(struct client_ws *w, size_t head_len, long status, err_t *err)
{
    const char *cl = strcasestr(w->early.data, "\r\nContent-Length:");
    long long want = cl ? strtoll(cl + 17, NULL, 10) : 0;
    if (want < 0 || want > 65536)
        want = 0;
    while ((long long)(w->early.len - head_len) < want) {
        char chunk[4096];
        size_t got = 0;
        CURLcode rc = curl_easy_recv(w->curl, chunk, sizeof(chunk), &got);
        if (rc == CURLE_AGAIN && wait_fd(w->fd, POLLIN, 10000))
            continue;
        if (rc != CURLE_OK || got == 0)
            break;
        buf_append(&w->early, chunk, got);
    }
    client_resp_t resp = {.status = status};
    buf_append(&resp.body, w->early.data + head_len, w->early.len - head_len);
    buf_append(&resp.body, "", 0); /* a string even when empty */
    resp.json = json_loadb(resp.body.data, resp.body.len, 0, NULL);
    int rc = client_status_error(&resp, err);
    client_resp_free(&resp);
    return rc;
}

/* Check the 101 (status and accept key); other answers become errors. */
static int check_answer(struct client_ws *w, size_t head_len, const char *key, err_t *err)
{
    long status = 0;
    if (sscanf(w->early.data, "HTTP/1.%*d %ld", &status) != 1)
        return err_set(err, ERR_INTERNAL, 0, "bad_response", "the daemon's answer is garbled");
    if (status != 101)
        return refusal(w, head_len, status, err);
    char want[WS_ACCEPT_SIZE];
    ws_accept_key(key, want);
    const char *acc = strcasestr(w->early.data, "\r\nSec-WebSocket-Accept:");
    if (!acc || !strstr(acc, want))
        return err_set(err, ERR_INTERNAL, 0, "bad_response",
                       "the daemon's WebSocket handshake does not match");
    /* Keep only what followed the head. */
    memmove(w->early.data, w->early.data + head_len, w->early.len - head_len);
    w->early.len -= head_len;
    return 0;
}

/* The request target and Host header for path, from the base URL (which may carry a prefix). */
static void target_of(const client_t *c, const char *path, char **target, char **host)
{
    const char *rest = strstr(c->base, "://");
    rest = rest ? rest + 3 : c->base;
    size_t hl = strcspn(rest, "/");
    *host = xstrndup(rest, hl);
    *target = xasprintf("%s%s", rest + hl, path);
}

static int handshake(client_t *c, struct client_ws *w, const char *path, err_t *err)
{
    _cleanup_free_ char *target = NULL;
    _cleanup_free_ char *host = NULL;
    target_of(c, path, &target, &host);
    char key[25];
    ws_client_key(key);
    _cleanup_free_ char *req = xasprintf(
        "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nUser-Agent: sandboxer-cli\r\n"
        "%s%s\r\n",
        target, host, key, c->auth ? c->auth : "", c->auth ? "\r\n" : "");
    size_t head_len = 0;
    int rc = send_all(w, req, strlen(req), err);
    explicit_bzero(req, strlen(req)); /* it held the token */
    if (rc < 0 || read_head(w, &head_len, err) < 0)
        return -1;
    return check_answer(w, head_len, key, err);
}

client_ws_t *client_ws_open(client_t *c, const char *path, ws_msg_fn on_msg, void *data, err_t *err)
{
    char detail[CURL_ERROR_SIZE] = "";
    _cleanup_free_ char *url = xasprintf("%s/", c->base);
    curl_easy_reset(c->curl);
    curl_easy_setopt(c->curl, CURLOPT_URL, url);
    if (c->socket)
        curl_easy_setopt(c->curl, CURLOPT_UNIX_SOCKET_PATH, c->socket);
    curl_easy_setopt(c->curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c->curl, CURLOPT_CONNECT_ONLY, 1L);
    curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT, (long)CLIENT_CONNECT_TIMEOUT_S);
    curl_easy_setopt(c->curl, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, detail);
    CURLcode rc = curl_easy_perform(c->curl);
    curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, NULL);
    if (rc != CURLE_OK) {
        client_transport_error(c, rc, detail, err);
        return NULL;
    }
    struct client_ws *w = xcalloc(1, sizeof(*w));
    w->curl = c->curl;
    curl_socket_t s = CURL_SOCKET_BAD;
    curl_easy_getinfo(c->curl, CURLINFO_ACTIVESOCKET, &s);
    w->fd = (int)s;
    struct ws_io io = {io_recv, io_send, w};
    if (w->fd < 0 || handshake(c, w, path, err) < 0 ||
        !(w->ws = ws_new(true, w->fd, &io, 1u << 20, on_msg, data))) {
        if (!err->msg[0])
            err_set(err, ERR_INTERNAL, 0, "internal", "cannot open the WebSocket");
        client_ws_close(w);
        return NULL;
    }
    /* Frames that came with the 101 are already off the socket, where no poll will see
     * them: hand them over now (an attach's replay often arrives that early). */
    if (w->early_off < w->early.len && ws_handle(w->ws, POLLIN) < 0) {
        err_set(err, ERR_UNAVAILABLE, 0, "connection_lost",
                "the connection to the daemon was lost");
        client_ws_close(w);
        return NULL;
    }
    return w;
}

ws_t *client_ws_conn(client_ws_t *w)
{
    return w->ws;
}

int client_ws_fd(const client_ws_t *w)
{
    return w->fd;
}

void client_ws_close(client_ws_t *w)
{
    if (!w)
        return;
    ws_free(w->ws);
    buf_free(&w->early);
    free(w);
}
