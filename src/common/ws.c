/* WebSocket connections over wslay's event API (see ws.h). */
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <wslay/wslay.h>

#include "util.h"
#include "ws.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

struct ws {
    wslay_event_context_ptr ctx;
    int fd;
    struct ws_io io;
    ws_msg_fn on_msg;
    void *data;
    bool failed;
    uint16_t peer_code;
    char peer_reason[128];
};

static ssize_t fd_recv(void *io, void *buf, size_t n)
{
    return recv(*(int *)io, buf, n, MSG_DONTWAIT);
}

static ssize_t fd_send(void *io, const void *buf, size_t n)
{
    return send(*(int *)io, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

static ssize_t on_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
    (void)flags;
    struct ws *w = user;
    ssize_t n = w->io.recv(w->io.io, buf, len);
    if (n > 0)
        return n;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
    else
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
    return -1;
}

static ssize_t on_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
                       void *user)
{
    (void)flags;
    struct ws *w = user;
    ssize_t n = w->io.send(w->io.io, data, len);
    if (n >= 0)
        return n;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
    else
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
    return -1;
}

static int on_genmask(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *user)
{
    (void)user;
    if (random_bytes(buf, len))
        return 0;
    wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
    return -1;
}

static void on_msg_recv(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg,
                        void *user)
{
    (void)ctx;
    struct ws *w = user;
    if (arg->opcode == WSLAY_CONNECTION_CLOSE) {
        /* The payload is the 2-byte code then the reason. */
        w->peer_code = arg->status_code;
        size_t n = arg->msg_length > 2 ? arg->msg_length - 2 : 0;
        if (n >= sizeof(w->peer_reason))
            n = sizeof(w->peer_reason) - 1;
        if (n)
            memcpy(w->peer_reason, arg->msg + 2, n);
        w->peer_reason[n] = '\0';
        return;
    }
    if (w->on_msg)
        w->on_msg(w->data, arg->opcode, arg->msg, arg->msg_length);
}

ws_t *ws_new(bool client, int fd, const struct ws_io *io, size_t max_msg, ws_msg_fn on_msg,
             void *data)
{
    struct ws *w = xcalloc(1, sizeof(*w));
    w->fd = fd;
    w->io = io ? *io : (struct ws_io){fd_recv, fd_send, &w->fd};
    w->on_msg = on_msg;
    w->data = data;
    struct wslay_event_callbacks cb = {.recv_callback = on_recv,
                                       .send_callback = on_send,
                                       .genmask_callback = on_genmask,
                                       .on_msg_recv_callback = on_msg_recv};
    int rc = client ? wslay_event_context_client_init(&w->ctx, &cb, w)
                    : wslay_event_context_server_init(&w->ctx, &cb, w);
    if (rc != 0) {
        free(w);
        return NULL;
    }
    wslay_event_config_set_max_recv_msg_length(w->ctx, max_msg);
    return w;
}

void ws_free(ws_t *w)
{
    if (!w)
        return;
    wslay_event_context_free(w->ctx);
    free(w);
}

short ws_poll_events(ws_t *w)
{
    if (w->failed)
        return 0;
    short ev = 0;
    if (wslay_event_want_read(w->ctx))
        ev |= POLLIN;
    if (wslay_event_want_write(w->ctx))
        ev |= POLLOUT;
    return ev;
}

int ws_handle(ws_t *w, short revents)
{
    if (w->failed)
        return -1;
    if ((revents & (POLLIN | POLLHUP | POLLERR)) && wslay_event_want_read(w->ctx) &&
        wslay_event_recv(w->ctx) != 0)
        w->failed = true;
    /* Also after reading: a ping or close that came wants its answer out now. */
    if (!w->failed && wslay_event_want_write(w->ctx) && wslay_event_send(w->ctx) != 0)
        w->failed = true;
    return w->failed ? -1 : 0;
}

bool ws_done(ws_t *w)
{
    return w->failed || (!wslay_event_want_read(w->ctx) && !wslay_event_want_write(w->ctx));
}

int ws_send(ws_t *w, int opcode, const void *p, size_t n)
{
    struct wslay_event_msg m = {(uint8_t)opcode, p, n};
    if (w->failed || wslay_event_queue_msg(w->ctx, &m) != 0)
        return -1;
    /* Try at once: most messages leave without another trip through poll. */
    if (wslay_event_send(w->ctx) != 0)
        w->failed = true;
    return w->failed ? -1 : 0;
}

int ws_close(ws_t *w, uint16_t code, const char *reason)
{
    size_t n = reason ? strlen(reason) : 0;
    if (n > 123)
        n = 123;
    if (w->failed || wslay_event_queue_close(w->ctx, code, (const uint8_t *)reason, n) != 0)
        return -1;
    if (wslay_event_send(w->ctx) != 0)
        w->failed = true;
    return 0;
}

size_t ws_queued(ws_t *w)
{
    return wslay_event_get_queued_msg_length(w->ctx);
}

uint16_t ws_peer_close_code(const ws_t *w)
{
    return w->peer_code;
}

const char *ws_peer_close_reason(const ws_t *w)
{
    return w->peer_reason;
}

bool ws_peer_closed(ws_t *w)
{
    return wslay_event_get_close_received(w->ctx) != 0;
}

void ws_accept_key(const char *key, char out[WS_ACCEPT_SIZE])
{
    unsigned char sha[SHA_DIGEST_LENGTH];
    char *cat = xasprintf("%s%s", key, WS_GUID);
    SHA1((const unsigned char *)cat, strlen(cat), sha);
    free(cat);
    EVP_EncodeBlock((unsigned char *)out, sha, sizeof(sha));
}

void ws_client_key(char out[25])
{
    unsigned char raw[16];
    if (!random_bytes(raw, sizeof(raw)))
        memset(raw, 0x5a, sizeof(raw)); /* the key is a nonce, not a secret */
    EVP_EncodeBlock((unsigned char *)out, raw, sizeof(raw));
}
