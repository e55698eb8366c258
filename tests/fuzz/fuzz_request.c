/*
 * libFuzzer target over the daemon's parsers of untrusted request data: route matching of
 * the request line and strict decoding of JSON request bodies. Input: a method byte, a path
 * up to '\n', then the body.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "api/api_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"

struct body {
    const char *image;
    const char *label;
    int interactive;
    int64_t cpus;
    uint64_t memory;
    json_t *env;
    json_t *args;
    double timeout;
};

static const struct jfield fields[] = {
    {"image", JF_STRING, true, offsetof(struct body, image), 512, 0, 0},
    {"label", JF_STRING, false, offsetof(struct body, label), 128, 0, 0},
    {"interactive", JF_BOOL, false, offsetof(struct body, interactive), 0, 0, 0},
    {"cpus", JF_INT, false, offsetof(struct body, cpus), 0, 1, 64},
    {"memory", JF_SIZE, false, offsetof(struct body, memory), 0, 0, 0},
    {"env", JF_OBJECT, false, offsetof(struct body, env), 0, 0, 0},
    {"args", JF_ARRAY, false, offsetof(struct body, args), 0, 0, 0},
    {"timeout", JF_NUMBER, false, offsetof(struct body, timeout), 0, 0, 0},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const methods[] = {"GET", "POST", "PUT", "PATCH", "DELETE"};
    if (size < 1)
        return 0;
    const char *method = methods[data[0] % 5];
    const char *rest = (const char *)data + 1;
    size_t n = size - 1;
    const char *nl = memchr(rest, '\n', n);
    size_t plen = nl ? (size_t)(nl - rest) : n;
    struct route_params params;
    bool known;
    const struct route *r = api_route_find(method, rest, plen, &params, &known);
    for (size_t i = 0; r && i < params.n; i++) /* params must lie inside the path */
        if (params.p[i].value < rest || params.p[i].value + params.p[i].value_len > rest + plen)
            __builtin_trap();
    if (!nl)
        return 0;
    json_t *obj _cleanup_json_ = NULL;
    err_t err = {0};
    if (json_parse_object(nl + 1, n - plen - 1, &obj, &err) == 0) {
        struct body b = {.interactive = -1};
        json_decode_fields(obj, fields, ARRAY_SIZE(fields), &b, &err);
    }
    return 0;
}
