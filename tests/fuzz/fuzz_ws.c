/*
 * libFuzzer target over what a terminal WebSocket reads from its peer (untrusted: any
 * client of the API, or the daemon for the CLI): wslay's framing as common/ws.c drives it,
 * in server or client mode, fed in pieces, and the resize text frame's JSON. Input: a mode
 * byte (bit 0: client; bits 1-7: the size of each read), then the bytes on the wire.
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "api/api_internal.h"
#include "common/ws.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct wire {
    const uint8_t *p;
    size_t left, piece;
};

static ssize_t wire_recv(void *io, void *buf, size_t n)
{
    struct wire *w = io;
    if (w->left == 0)
        return 0; /* the peer closed */
    size_t k = n < w->piece ? n : w->piece;
    k = k < w->left ? k : w->left;
    memcpy(buf, w->p, k);
    w->p += k, w->left -= k;
    return (ssize_t)k;
}

static ssize_t wire_send(void *io, const void *buf, size_t n)
{
    (void)io, (void)buf;
    return (ssize_t)n; /* answers (pong, close) go nowhere */
}

static void on_msg(void *data, int opcode, const uint8_t *p, size_t n)
{
    size_t *seen = data;
    uint16_t cols, rows;
    *seen += n;
    if (opcode == WS_OP_TEXT && api_term_parse_resize(p, n, &cols, &rows) &&
        (cols < 1 || cols > 1000 || rows < 1 || rows > 1000))
        __builtin_trap(); /* the bounds the agent relies on */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 << 20)
        return 0;
    struct wire w = {data + 1, size - 1, (size_t)(data[0] >> 1) + 1};
    struct ws_io io = {wire_recv, wire_send, &w};
    size_t seen = 0;
    ws_t *ws = ws_new(data[0] & 1, -1, &io, 64 * 1024, on_msg, &seen);
    if (!ws)
        return 0;
    for (int i = 0; i < 10000 && !ws_done(ws); i++)
        if (ws_handle(ws, POLLIN) < 0)
            break;
    (void)ws_peer_close_reason(ws);
    ws_free(ws);
    return 0;
}
