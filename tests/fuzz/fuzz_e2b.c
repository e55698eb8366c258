/*
 * libFuzzer target over what E2B clients send that the daemon parses itself (untrusted: any
 * key holder, and for a non-secure sandbox anyone who knows its id). The first byte, mod 5,
 * picks:
 *   0  a Connect RPC request message with Content-Type application/json
 *   1  the same as application/connect+json (envelope: flags, 32-bit length, one message)
 *   2  a protobuf bytes member in base64 (standard or URL-safe, padded or not)
 *   3  a Host header and the E2B domain (lines), then the host's "<port>-<id>" label
 *   4  a signed file URL's query: path, user, token, expiry, signature, operation (lines)
 * and each result must keep its promise (an object, bounded output, a valid label).
 */
#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "e2b/e2b_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Split s (NUL-terminated, modified) at newlines into at most n fields. */
static size_t fields(char *s, char **out, size_t n)
{
    size_t k = 0;
    while (k < n) {
        out[k++] = s;
        char *nl = strchr(s, '\n');
        if (!nl)
            break;
        *nl = '\0';
        s = nl + 1;
    }
    return k;
}

static void rpc(const char *p, size_t n, bool enveloped)
{
    json_t *msg = NULL;
    err_t err = {0};
    const char *ct = enveloped ? "application/connect+json" : "application/json";
    if (e2b_rpc_parse(ct, p, n, &msg, &err) == 0) {
        if (!json_is_object(msg))
            abort();
        json_decref(msg);
    } else if (msg || !err.kind) {
        abort();
    }
}

static void base64(const char *s, size_t n)
{
    buf_t out = {0};
    if (e2b_base64_decode(s, &out) == 0 && out.len > n / 4 * 3 + 3)
        abort();
    buf_free(&out);
}

static void host(char *s)
{
    char *f[2] = {0};
    if (fields(s, f, 2) < 2)
        return;
    char label[96];
    if (!e2b_host_label(f[0], f[1], label, sizeof(label)))
        return;
    if (strchr(label, '.') || strlen(label) >= sizeof(label))
        abort();
    for (const char *c = label; *c; c++)
        if (isupper((unsigned char)*c))
            abort();
    int port = 0;
    char id[E2B_ID_LEN + 1];
    if (e2b_sandbox_label(label, &port, id) && (port < 1 || port > 65535 || !e2b_id_valid(id)))
        abort();
}

static void signature(char *s)
{
    char *f[6] = {0};
    if (fields(s, f, 6) < 6)
        return;
    err_t err = {0};
    const char *expires = *f[3] ? f[3] : NULL;
    if (e2b_signature_check(f[0], f[5], f[1], f[2], expires, f[4], 1.8e9, &err) == 0 &&
        strncmp(f[4], "v1_", 3) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536)
        return 0;
    _cleanup_free_ char *s = malloc(size);
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';
    switch (data[0] % 5) {
    case 0:
        rpc(s, size - 1, false);
        break;
    case 1:
        rpc(s, size - 1, true);
        break;
    case 2:
        base64(s, strlen(s));
        break;
    case 3:
        host(s);
        break;
    default:
        signature(s);
        break;
    }
    return 0;
}
