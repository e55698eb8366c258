/*
 * libFuzzer target over what the inbound proxy parses from a sandbox and a client (both
 * untrusted): the response head, its header lines and a chunked body, and the header rules
 * of src/proxy/inbound.c on every header line (as a request's and as an answer's: tokens,
 * Basic credentials, Connection lists, WebSocket subprotocols, Set-Cookie attributes).
 * Input: a head, "\r\n\r\n", a body.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/buf.h"
#include "proxy/inbound.h"
#include "proxy/upstream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool sink(void *ctx, const char *p, size_t len)
{
    size_t *total = ctx;
    (void)p;
    *total += len;
    return true;
}

static void count_header(void *ctx, const char *name, const char *value)
{
    size_t *n = ctx;
    *n += strlen(name) + strlen(value);
    bool token = inbound_has_token(value, strlen(value));
    if (token && inbound_request_header_ok(name, value, value, false))
        __builtin_trap(); /* a header holding a token went to the sandbox */
    inbound_request_header_ok(name, value, name, true);
    inbound_response_header_ok(name, value, "app.sbx.test", false);
    inbound_response_header_ok(name, value, NULL, true);
    if (inbound_response_header_ok("Set-Cookie", value, "app.sbx.test", false) !=
        inbound_cookie_ok(value, "app.sbx.test"))
        __builtin_trap();
    buf_t b = {0};
    inbound_ws_protocols(value, &b);
    if (b.len && inbound_has_token(b.data, b.len))
        __builtin_trap(); /* a subprotocol entry holding a token went on */
    buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 20 || memchr(data, '\0', size))
        return 0;
    struct upstream_head h = {0};
    buf_append(&h.raw, data, size);
    char *end = strstr(h.raw.data, "\r\n\r\n");
    if (end) {
        h.head_len = (size_t)(end - h.raw.data) + 4;
        err_t err = {0};
        if (upstream_parse_head(&h, &err) == 0) {
            size_t n = 0;
            upstream_each_header(&h, count_header, &n);
            struct chunked c = {0};
            size_t total = 0;
            chunked_decode(&c, h.raw.data + h.head_len, h.raw.len - h.head_len, sink, &total);
            if (total > h.raw.len)
                __builtin_trap(); /* decoded more than came in */
        }
    }
    buf_free(&h.raw);
    return 0;
}
