/* The inbound proxy's side towards a sandbox: a TCP connection and an HTTP/1.1 response. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"

/* Connect to ip:port within timeout_ms; a connected, blocking, O_CLOEXEC socket or -1. */
int upstream_connect(const char *ip, int port, int timeout_ms, err_t *err);
/* Send all of p (bounded wait); -1 with err when the sandbox stops taking it. */
int upstream_write(int fd, const void *p, size_t n, err_t *err);

/* The head of a response: status and header lines, parsed from a bounded read. */
struct upstream_head {
    int status;
    buf_t raw;       /* everything read so far: the head, then maybe some body */
    size_t head_len; /* bytes of raw that are the head (through the blank line) */
    int64_t length;  /* Content-Length, or -1 */
    bool chunked;    /* Transfer-Encoding: chunked */
};

/* Read and parse the response head (at most 64 KiB, timeout_ms); ERR_RUNTIME "bad_gateway". */
int upstream_read_head(int fd, int timeout_ms, struct upstream_head *h, err_t *err);
/* Parse h->raw (its first head_len bytes: a complete head) into status, length, chunked. */
int upstream_parse_head(struct upstream_head *h, err_t *err);
/* Call fn(name, value) for each header line of h (value trimmed); names as sent. */
void upstream_each_header(const struct upstream_head *h,
                          void (*fn)(void *ctx, const char *name, const char *value), void *ctx);

/* An incremental decoder of a chunked body. */
struct chunked {
    int state;
    uint64_t left;
    char line[32];
    size_t line_len;
};
/*
 * Decode n bytes of chunked body from in, calling out(ctx, data, len) for payload bytes.
 * Returns 1 at the end of the body, 0 for more to come, -1 on a malformed body.
 */
int chunked_decode(struct chunked *c, const char *in, size_t n,
                   bool (*out)(void *ctx, const char *p, size_t len), void *ctx);
