/*
 * WebSocket connections (RFC 6455) over wslay, for both ends: the daemon's terminal routes
 * and the CLI's `shell`/`attach`. wslay does the framing, masking, ping → pong and the close
 * handshake; the caller owns the socket and its poll loop and calls ws_handle when poll
 * says the socket is ready for what ws_poll_events asked.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define WS_OP_TEXT   0x1
#define WS_OP_BINARY 0x2
#define WS_OP_CLOSE  0x8
#define WS_OP_PING   0x9
#define WS_OP_PONG   0xa

#define WS_ACCEPT_SIZE 29 /* base64 of a SHA-1, with its NUL */

typedef struct ws ws_t;

/* A complete message from the peer (text, binary, ping or pong; close is handled here). */
typedef void (*ws_msg_fn)(void *data, int opcode, const uint8_t *p, size_t n);

/*
 * The transport: non-blocking reads and writes that return the bytes moved, 0 for the
 * peer's end of stream (recv only), or -1 with errno (EAGAIN when they would block).
 * NULL io in ws_new means plain recv/send on fd.
 */
struct ws_io {
    ssize_t (*recv)(void *io, void *buf, size_t n);
    ssize_t (*send)(void *io, const void *buf, size_t n);
    void *io;
};

/* A connection on fd (non-blocking) as a server or client. Messages over max_msg bytes
 * close the connection with 1009. */
ws_t *ws_new(bool client, int fd, const struct ws_io *io, size_t max_msg, ws_msg_fn on_msg,
             void *data);
void ws_free(ws_t *w);
/* POLLIN and/or POLLOUT as the connection needs; 0 once it is over. */
short ws_poll_events(ws_t *w);
/* Read and/or write as revents allow; -1 once the connection failed (the peer vanished,
 * a protocol error). */
int ws_handle(ws_t *w, short revents);
/* True once the connection has nothing more to read or write (closed both ways or failed). */
bool ws_done(ws_t *w);
/* Queue a message (copied); -1 after a close was queued. */
int ws_send(ws_t *w, int opcode, const void *p, size_t n);
/* Queue the close frame with a status code and a reason (at most 123 bytes are sent). */
int ws_close(ws_t *w, uint16_t code, const char *reason);
/* Bytes queued and not yet written: callers stop producing above their bound. */
size_t ws_queued(ws_t *w);
/* The status code of the peer's close frame (0: none yet or none given) and its reason
 * (NUL-terminated, possibly empty). */
uint16_t ws_peer_close_code(const ws_t *w);
const char *ws_peer_close_reason(const ws_t *w);
/* True once the peer's close frame came. */
bool ws_peer_closed(ws_t *w);
/* Sec-WebSocket-Accept for a Sec-WebSocket-Key. */
void ws_accept_key(const char *key, char out[WS_ACCEPT_SIZE]);
/* A fresh Sec-WebSocket-Key (base64 of 16 random bytes). */
void ws_client_key(char out[25]);
