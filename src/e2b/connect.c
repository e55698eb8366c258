/*
 * Connect RPC with JSON, as envd speaks it to E2B's SDKs (https://connectrpc.com/docs/protocol):
 * a unary call is a POST of application/json answered with the message, or an error
 * {"code", "message"} with the HTTP status Connect gives the code; a server-streaming call
 * is a POST of application/connect+json holding one enveloped message (1 byte of flags, a
 * 4-byte big-endian length, the JSON), answered 200 with enveloped messages and a last one
 * flagged end-of-stream: {} or {"error": {"code", "message"}}.
 */
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "e2b_internal.h"

#define FLAG_COMPRESSED 0x01
#define FLAG_END        0x02

static const struct {
    const char *code;
    unsigned status;
} statuses[] = {
    {"canceled", 499},
    {"unknown", 500},
    {"invalid_argument", 400},
    {"deadline_exceeded", 504},
    {"not_found", 404},
    {"already_exists", 409},
    {"permission_denied", 403},
    {"resource_exhausted", 429},
    {"failed_precondition", 400},
    {"aborted", 409},
    {"out_of_range", 400},
    {"unimplemented", 501},
    {"internal", 500},
    {"unavailable", 503},
    {"data_loss", 500},
    {"unauthenticated", 401},
};

unsigned e2b_rpc_status(const char *code)
{
    for (size_t i = 0; i < ARRAY_SIZE(statuses); i++)
        if (strcmp(statuses[i].code, code) == 0)
            return statuses[i].status;
    return 500;
}

const char *e2b_rpc_code(const err_t *err)
{
    if (strcmp(err->code, "file_exists") == 0)
        return "already_exists";
    if (strcmp(err->code, "deadline_exceeded") == 0)
        return "deadline_exceeded";
    if (strcmp(err->code, "sandbox_paused") == 0 || strcmp(err->code, "sandbox_not_found") == 0)
        return "unavailable";
    switch (err->kind) {
    case ERR_INVALID:
    case ERR_UNPROCESSABLE:
    case ERR_TOO_LARGE:
        return "invalid_argument";
    case ERR_UNAUTHORIZED:
        return "unauthenticated";
    case ERR_FORBIDDEN:
        return "permission_denied";
    case ERR_NOT_FOUND:
        return "not_found";
    case ERR_CONFLICT:
        return "failed_precondition";
    case ERR_LIMIT:
        return "resource_exhausted";
    case ERR_UNAVAILABLE:
    case ERR_BAD_GATEWAY:
        return "unavailable";
    case ERR_NOT_ALLOWED:
        return "unimplemented";
    case ERR_RANGE:
        return "out_of_range";
    default:
        return "internal";
    }
}

int e2b_rpc_message(api_req_t *r, json_t **out, err_t *err)
{
    return e2b_rpc_parse(api_header(r, MHD_HTTP_HEADER_CONTENT_TYPE), r->body.data, r->body.len,
                         out, err);
}

int e2b_rpc_parse(const char *ct, const char *p, size_t n, json_t **out, err_t *err)
{
    if (!p)
        p = "", n = 0;
    if (ct && strncasecmp(ct, "application/connect+json", 24) == 0) {
        const unsigned char *u = (const unsigned char *)p;
        if (n < 5)
            return err_set(err, ERR_INVALID, 0, "invalid_message", "no enveloped message");
        uint32_t len = (uint32_t)u[1] << 24 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 8 | u[4];
        if (u[0] & FLAG_COMPRESSED)
            return err_set(err, ERR_NOT_ALLOWED, 0, "unimplemented",
                           "compressed messages are not supported");
        if (len != n - 5)
            return err_set(err, ERR_INVALID, 0, "invalid_message", "one message was expected");
        p += 5, n -= 5;
    } else if (!ct || strncasecmp(ct, "application/json", 16) != 0) {
        return err_set(err, ERR_INVALID, 0, "invalid_message",
                       "Content-Type must be application/json or application/connect+json");
    }
    if (n == 0) {
        *out = json_object();
        return 0;
    }
    return json_parse_object(p, n, out, err);
}

void e2b_rpc_reply(api_req_t *r, json_t *msg)
{
    api_reply_json(r, 200, msg);
}

json_t *e2b_rpc_get(json_t *msg, const char *json_name, const char *proto_name)
{
    json_t *v = json_object_get(msg, json_name);
    if (!v && proto_name)
        v = json_object_get(msg, proto_name);
    return json_is_null(v) ? NULL : v;
}

double e2b_rpc_deadline(api_req_t *r)
{
    const char *t = api_header(r, "Connect-Timeout-Ms");
    long long ms;
    return t && parse_int(t, 1, 9999999999LL, &ms) ? now_mono_ms() + (double)ms : 0;
}

int e2b_rpc_keepalive_ms(api_req_t *r)
{
    const char *t = api_header(r, "Keepalive-Ping-Interval");
    long long s;
    return t && parse_int(t, 1, 3600, &s) ? (int)s * 1000 : 90000; /* envd's default */
}

int e2b_rpc_stream(api_req_t *r, api_stream_fn fn, void *ctx, err_t *err)
{
    return api_reply_stream_ex(r, 200, "application/connect+json", -1, true, fn, ctx, err);
}

static bool send_envelope(struct e2b_stream *st, unsigned char flags, json_t *msg)
{
    _cleanup_free_ char *text = json_dump_compact(msg);
    json_decref(msg);
    size_t n = strlen(text);
    unsigned char head[5] = {flags, (unsigned char)(n >> 24), (unsigned char)(n >> 16),
                             (unsigned char)(n >> 8), (unsigned char)n};
    st->last_sent = now_mono_ms();
    return api_stream_write(st->s, head, sizeof(head)) && api_stream_write(st->s, text, n);
}

bool e2b_rpc_send(struct e2b_stream *st, json_t *msg)
{
    return send_envelope(st, 0, msg);
}

void e2b_rpc_end(struct e2b_stream *st, const err_t *err)
{
    json_t *end = err ? json_pack("{s:{s:s, s:o}}", "error", "code", e2b_rpc_code(err), "message",
                                  json_string_lossy(err->msg, strlen(err->msg)))
                      : json_object();
    send_envelope(st, FLAG_END, end);
}

void e2b_rpc_abort(struct e2b_stream *st)
{
    api_stream_abort(st->s);
}

json_t *e2b_base64_json(const void *p, size_t n)
{
    char *out = xmalloc(4 * ((n + 2) / 3) + 1);
    EVP_EncodeBlock((unsigned char *)out, p, (int)n);
    json_t *j = json_string(out);
    free(out);
    return j;
}

int e2b_base64_decode(const char *s, buf_t *out)
{
    size_t n = strlen(s);
    _cleanup_free_ char *std = xmalloc(n + 4);
    for (size_t i = 0; i < n; i++)
        std[i] = s[i] == '-' ? '+' : s[i] == '_' ? '/' : s[i];
    while (n % 4)
        std[n++] = '=';
    std[n] = '\0';
    size_t pad = n >= 1 && std[n - 1] == '=' ? (n >= 2 && std[n - 2] == '=' ? 2 : 1) : 0;
    unsigned char *dec = xmalloc(n / 4 * 3 + 1);
    int len = EVP_DecodeBlock(dec, (const unsigned char *)std, (int)n);
    if (len < 0 || (size_t)len < pad) {
        free(dec);
        return -1;
    }
    buf_append(out, dec, (size_t)len - pad);
    free(dec);
    return 0;
}
