/* Strict decoding of request bodies. */
#include <stddef.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "tap.h"

struct req {
    const char *image;
    const char *label;
    int interactive;
    int64_t cpus;
    uint64_t memory;
    json_t *env;
};

static const struct jfield fields[] = {
    {"image", JF_STRING, true, offsetof(struct req, image), 256, 0, 0},
    {"label", JF_STRING, false, offsetof(struct req, label), 64, 0, 0},
    {"interactive", JF_BOOL, false, offsetof(struct req, interactive), 0, 0, 0},
    {"cpus", JF_INT, false, offsetof(struct req, cpus), 0, 1, 64},
    {"memory", JF_SIZE, false, offsetof(struct req, memory), 0, 0, 0},
    {"env", JF_OBJECT, false, offsetof(struct req, env), 0, 0, 0},
};

static int decode(const char *text, struct req *q, err_t *err)
{
    json_t *j = NULL;
    *q = (struct req){.interactive = -1, .cpus = -1};
    if (json_parse_object(text, strlen(text), &j, err) < 0)
        return -1;
    int rc = json_decode_fields(j, fields, ARRAY_SIZE(fields), q, err);
    json_decref(j);
    return rc;
}

int main(void)
{
    struct req q;
    err_t err = {0};
    json_t *j = NULL;
    ok(json_parse_object("{\"image\":\"x\"}", 13, &j, &err) == 0, "parse a small object");
    struct req keep = {.interactive = -1};
    ok(json_decode_fields(j, fields, ARRAY_SIZE(fields), &keep, &err) == 0 &&
           strcmp(keep.image, "x") == 0 && keep.interactive == -1,
       "absent bool stays -1");
    json_decref(j);
    ok(decode("{\"image\":\"busybox\",\"interactive\":true,\"cpus\":2,\"memory\":\"512M\"}", &q,
              &err) == 0,
       "decode a full body");
    ok(q.interactive == 1 && q.cpus == 2 && q.memory == 512ull << 20, "values decoded");
    ok(decode("{\"image\":\"b\",\"memory\":1048576}", &q, &err) == 0 && q.memory == 1048576,
       "size as integer");
    ok(decode("{\"image\":", &q, &err) < 0 && strcmp(err.code, "invalid_json") == 0,
       "malformed JSON: invalid_json");
    ok(decode("[1,2]", &q, &err) < 0 && strcmp(err.code, "invalid_json") == 0,
       "array body: invalid_json");
    ok(decode("{\"image\":\"a\"} x", &q, &err) < 0, "trailing garbage rejected");
    ok(decode("{}", &q, &err) < 0 && strcmp(err.code, "missing_field") == 0, "missing image");
    ok(decode("{\"image\":\"\"}", &q, &err) < 0 && strcmp(err.code, "invalid_field") == 0,
       "empty required string");
    ok(decode("{\"image\":5}", &q, &err) < 0 && strcmp(err.code, "invalid_field") == 0,
       "wrong type");
    ok(decode("{\"image\":\"a\",\"cpus\":\"2\"}", &q, &err) < 0, "string for int rejected");
    ok(decode("{\"image\":\"a\",\"cpus\":100}", &q, &err) < 0, "int out of range rejected");
    ok(decode("{\"image\":\"a\",\"memroy\":1}", &q, &err) < 0 &&
           strcmp(err.code, "unknown_field") == 0,
       "unknown field rejected");
    ok(decode("{\"image\":\"a\",\"image\":\"b\"}", &q, &err) < 0, "duplicate key rejected");
    ok(decode("{\"image\":\"a\\u0000b\"}", &q, &err) < 0, "NUL in string rejected");
    ok(decode("{\"image\":\"a\",\"memory\":\"lots\"}", &q, &err) < 0, "bad size rejected");
    ok(decode("{\"image\":\"a\",\"env\":[]}", &q, &err) < 0, "array for object rejected");
    ok(decode("{\"image\":\"a\",\"label\":null}", &q, &err) == 0 && q.label == NULL,
       "null is absent");
    char big[200];
    memset(big, 'x', sizeof(big));
    char body[300];
    snprintf(body, sizeof(body), "{\"image\":\"a\",\"label\":\"%.*s\"}", 100, big);
    ok(decode(body, &q, &err) < 0, "over-long string rejected");
    ok(json_parse_object("", 0, &j, &err) < 0, "empty body rejected");
    json_t *s = json_string_lossy("\xff\xfeok", 4);
    ok(s && strcmp(json_string_value(s), "??ok") == 0, "invalid UTF-8 replaced");
    json_decref(s);
    uint64_t n;
    ok(parse_size("16M", &n) && n == 16u << 20, "parse 16M");
    ok(parse_size("2GiB", &n) && n == 2ull << 30, "parse 2GiB");
    ok(!parse_size("-1", &n) && !parse_size("12Q", &n) && !parse_size("", &n), "bad sizes");
    ok(!parse_size("99999999999999999999", &n), "overflow rejected");
    return tap_done();
}
