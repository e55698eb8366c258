/*
 * libFuzzer target over what the egress proxy parses from a sandbox (untrusted): a request
 * head (request line and header lines), the head it builds for upstream from it, and the
 * host name checked against an allow list. Input: a head ending in "\r\n\r\n".
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/buf.h"
#include "proxy/egress.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 16384) /* the proxy reads at most this much of a head */
        return 0;
    const char *head = (const char *)data;
    const char *end = memmem(head, size, "\r\n\r\n", 4);
    if (!end)
        return 0;
    size_t len = (size_t)(end - head) + 4;
    struct egress_request rq;
    if (egress_parse_request(head, len, &rq) != NULL)
        return 0;
    static json_t *allow;
    if (!allow)
        allow = json_pack("[s,s,s]", "pkgs.example.org", "*.example.test", "198.18.0.2");
    (void)egress_host_allowed(allow, rq.host);
    (void)egress_pattern_valid(rq.host);
    if (!rq.tunnel) {
        buf_t out = {0};
        egress_upstream_head(&rq, head, len, &out);
        /* one request line, the headers that passed, and our own end */
        if (out.len < 4 || memcmp(out.data + out.len - 4, "\r\n\r\n", 4) != 0)
            __builtin_trap();
        buf_free(&out);
    }
    return 0;
}
