/*
 * The files side of the agent protocol as pure units: the lexical path normaliser shared by
 * the agent and agentc, the strict decoders of the files answers, the mapping of ERROR codes
 * to err kinds, and agentc's bounds against a fake (hostile) agent on a socketpair.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agentc/agent_client.h"
#include "common/cleanup.h"
#include "common/util.h"
#include "tap.h"

static bool norm_is(const char *in, const char *want)
{
    char out[AGENT_PATH_MAX];
    int n = agent_path_normalize(in, strlen(in), out, sizeof(out));
    return n >= 0 && strcmp(out, want) == 0 && (size_t)n == strlen(want);
}

static void test_path_normalize(void)
{
    static const char *const cases[][2] = {
        {"/", "/"},
        {"", "/"},
        {"a/b", "/a/b"},
        {"//a///b//", "/a/b"},
        {"/a/./b/.", "/a/b"},
        {"/a/b/../c", "/a/c"},
        {"/a/..", "/"},
        {"...", "/..."},
        {".x/..y/x..", "/.x/..y/x.."},
    };
    bool all = true;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
        all &= norm_is(cases[i][0], cases[i][1]);
    ok(all, "normalisation: relative to /, // collapsed, . dropped, .. resolved, no trailing /");
    ok(norm_is("/../../etc/passwd", "/etc/passwd") && norm_is("../../../x/../y", "/y") &&
           norm_is("/tmp/../../../..", "/"),
       ".. never goes above /");
    char out[AGENT_PATH_MAX];
    ok(agent_path_normalize("/a\0b", 4, out, sizeof(out)) < 0, "a NUL byte is refused");
    char *big = xmalloc(8192);
    memset(big, 'a', 8191);
    big[8191] = '\0';
    ok(agent_path_normalize(big, 4096, out, sizeof(out)) < 0 &&
           agent_path_normalize(big, 4095, out, sizeof(out)) < 0 &&
           agent_path_normalize(big, 4094, out, sizeof(out)) == 4095,
       "inputs and results of PATH_MAX bytes or more are refused");
    big[0] = '/';
    ok(agent_path_normalize(big, 4095, out, sizeof(out)) == 4095, "a 4095-byte path fits");
    free(big);
    char again[AGENT_PATH_MAX];
    int n = agent_path_normalize("x//y/../z/./", 12, out, sizeof(out));
    ok(n > 0 && agent_path_normalize(out, (size_t)n, again, sizeof(again)) == n &&
           strcmp(out, again) == 0,
       "normalising is idempotent");
    ok(strcmp(agent_path_base("/a/b"), "b") == 0 && strcmp(agent_path_base("/"), "/") == 0,
       "agent_path_base");
}

static struct agent_frame json_frame(uint8_t type, const char *json)
{
    return (struct agent_frame){type, (uint32_t)strlen(json), (const uint8_t *)json};
}

static const char *jstr(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static void test_decode_file_info(void)
{
    struct agentc_file_info fi;
    struct agent_frame f = json_frame(
        AGENT_FILE_INFO, "{\"name\":\"evil\",\"path\":\"/evil\",\"type\":\"file\",\"is_dir\":true,"
                         "\"size\":12,\"mode\":\"0640\",\"mtime\":1.5,\"offset\":2,\"length\":3,"
                         "\"extra\":[1]}");
    ok(agentc_decode_file_info(&f, "/a/b.txt", &fi, NULL) == 0 && strcmp(fi.type, "file") == 0 &&
           !fi.is_dir && fi.size == 12 && fi.mode == 0640 && fi.mtime == 1.5 && fi.offset == 2 &&
           fi.length == 3 && tap_streq(jstr(fi.json, "path"), "/a/b.txt") &&
           tap_streq(jstr(fi.json, "name"), "b.txt") && tap_streq(jstr(fi.json, "mode"), "0640") &&
           !json_object_get(fi.json, "extra"),
       "FILE_INFO decodes; name and path come from the request; a file is never is_dir");
    agentc_file_info_free(&fi);
    f = json_frame(AGENT_FILE_INFO, "{\"type\":\"symlink\",\"is_dir\":false,\"size\":4,\"mode\":"
                                    "\"0777\",\"mtime\":2,\"link_target\":\"/etc\","
                                    "\"target_type\":\"dir\"}");
    ok(agentc_decode_file_info(&f, "/l", &fi, NULL) == 0 && fi.is_dir &&
           tap_streq(jstr(fi.json, "link_target"), "/etc") &&
           tap_streq(jstr(fi.json, "target_type"), "dir"),
       "a symlink to a directory is is_dir, with link_target and target_type");
    agentc_file_info_free(&fi);
    const char *bad[] = {
        "{\"type\":\"door\",\"is_dir\":false,\"size\":1,\"mode\":\"0644\",\"mtime\":1}",
        "{\"type\":\"file\",\"is_dir\":false,\"size\":-1,\"mode\":\"0644\",\"mtime\":1}",
        "{\"type\":\"file\",\"is_dir\":false,\"size\":1,\"mode\":\"0964\",\"mtime\":1}",
        "{\"type\":\"file\",\"is_dir\":false,\"size\":1,\"mode\":\"01777\",\"mtime\":1}",
        "{\"type\":\"file\",\"is_dir\":0,\"size\":1,\"mode\":\"0644\",\"mtime\":1}",
        "{\"type\":\"file\",\"is_dir\":false,\"size\":1,\"mode\":\"0644\",\"mtime\":\"1\"}",
        "{\"type\":\"file\",\"is_dir\":false,\"size\":1,\"mode\":\"0644\",\"mtime\":1,"
        "\"offset\":-1}",
        "{\"type\":\"symlink\",\"is_dir\":false,\"size\":1,\"mode\":\"0644\",\"mtime\":1,"
        "\"target_type\":\"x\"}",
        "[1]",
        "{\"type\":\"file\"",
    };
    bool all = true;
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        err_t err = {0};
        f = json_frame(AGENT_FILE_INFO, bad[i]);
        all &= agentc_decode_file_info(&f, "/x", &fi, &err) < 0 &&
               strcmp(err.code, "agent_protocol") == 0;
    }
    ok(all, "malformed FILE_INFO payloads are protocol errors");
}

static void test_decode_entries_ok_error(void)
{
    json_t *entries = json_array();
    bool truncated = false;
    struct agent_frame f = json_frame(
        AGENT_DIR_ENTRIES, "{\"entries\":[{\"name\":\"a\",\"path\":\"/elsewhere\",\"type\":\"dir\","
                           "\"is_dir\":true,\"size\":4096,\"mode\":\"0755\",\"mtime\":3},"
                           "{\"name\":\"b\",\"type\":\"file\",\"is_dir\":false,\"size\":1,"
                           "\"mode\":\"0644\",\"mtime\":3}]}");
    ok(agentc_decode_dir_entries(&f, "/d", entries, 10, &truncated, NULL) == 0 &&
           json_array_size(entries) == 2 && !truncated &&
           tap_streq(jstr(json_array_get(entries, 0), "path"), "/d/a"),
       "DIR_ENTRIES decodes; each path is the directory's plus the name");
    ok(agentc_decode_dir_entries(&f, "/d", entries, 3, &truncated, NULL) == 0 &&
           json_array_size(entries) == 3 && truncated,
       "entries beyond the maximum are dropped and reported as truncated");
    json_decref(entries);
    const char *names[] = {"..", ".", "a/b", ""};
    bool all = true;
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        char json[256];
        snprintf(json, sizeof(json),
                 "{\"entries\":[{\"name\":\"%s\",\"type\":\"file\",\"is_dir\":false,\"size\":1,"
                 "\"mode\":\"0644\",\"mtime\":3}]}",
                 names[i]);
        entries = json_array();
        f = json_frame(AGENT_DIR_ENTRIES, json);
        all &= agentc_decode_dir_entries(&f, "/d", entries, 10, &truncated, NULL) < 0;
        json_decref(entries);
    }
    ok(all, "entry names \"..\", \".\", with a slash or empty are protocol errors");
    struct agentc_ok okv;
    f = json_frame(AGENT_OK, "{\"path\":\"/x\",\"size\":5}");
    ok(agentc_decode_ok(&f, &okv, NULL) == 0 && okv.has_size && okv.size == 5 && !okv.ready,
       "OK decodes size");
    f = json_frame(AGENT_OK, "{\"ready\":1}");
    ok(agentc_decode_ok(&f, &okv, NULL) < 0, "OK with a non-boolean ready is refused");
    static const struct {
        const char *agent, *code;
        err_kind_t kind;
    } map[] = {{"not_found", "file_not_found", ERR_NOT_FOUND},
               {"permission", "permission_denied", ERR_FORBIDDEN},
               {"no_space", "no_space", ERR_LIMIT},
               {"read_only", "read_only", ERR_CONFLICT},
               {"special_file", "special_file", ERR_INVALID},
               {"not_empty", "not_empty", ERR_INVALID},
               {"whatever", "agent_error", ERR_RUNTIME}};
    all = true;
    for (size_t i = 0; i < ARRAY_SIZE(map); i++) {
        char json[128];
        err_t err = {0};
        snprintf(json, sizeof(json), "{\"code\":\"%s\",\"message\":\"m\"}", map[i].agent);
        f = json_frame(AGENT_ERROR, json);
        all &= agentc_file_error(&f, &err) < 0 && err.kind == map[i].kind &&
               strcmp(err.code, map[i].code) == 0;
    }
    ok(all, "agent ERROR codes map to err kinds and codes");
}

/* A fake agent: a socketpair whose far end already sent `stream` (and keeps its end open). */
static int fake_agent(const void *stream, size_t len, int *far)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    (void)!write(sv[1], stream, len);
    *far = sv[1];
    return sv[0];
}

static size_t put_frame(uint8_t *out, uint8_t type, const char *payload, size_t len)
{
    agent_frame_header(out, type, (uint32_t)len);
    memcpy(out + AGENT_HEADER_LEN, payload, len);
    return AGENT_HEADER_LEN + len;
}

static int count_bytes(void *p, const uint8_t *d, size_t n)
{
    *(size_t *)p += n;
    return 0;
}

static void test_hostile_agent(void)
{
    static const char info[] = "{\"type\":\"file\",\"is_dir\":false,\"size\":4,\"mode\":\"0644\","
                               "\"mtime\":1,\"offset\":0,\"length\":4}";
    uint8_t buf[512];
    size_t total = 0;
    int far;
    err_t err = {0};
    struct agentc_file_req req = {.path = "/f", .timeout_ms = 100};
    struct agentc_file_info fi;
    int fd = fake_agent("", 0, &far);
    double t0 = now_mono_ms();
    ok(agentc_stat(fd, &req, &fi, &err) < 0 && strcmp(err.code, "agent_timeout") == 0 &&
           now_mono_ms() - t0 < 1000,
       "an agent that never answers: agent_timeout after timeout_ms");
    close(fd);
    close(far);
    size_t n = put_frame(buf, AGENT_FILE_INFO, info, strlen(info));
    n += put_frame(buf + n, AGENT_FILE_DATA, "abcdef", 6);
    fd = fake_agent(buf, n, &far);
    ok(agentc_read(fd, &req, NULL, count_bytes, &total, &err) < 0 &&
           strcmp(err.code, "agent_protocol") == 0 && total == 0,
       "more data than announced is a protocol error, and none of it is passed on");
    close(fd);
    close(far);
    n = put_frame(buf, AGENT_FILE_INFO, info, strlen(info));
    n += put_frame(buf + n, AGENT_FILE_DATA, "ab", 2);
    n += put_frame(buf + n, AGENT_FILE_END, "", 0);
    fd = fake_agent(buf, n, &far);
    ok(agentc_read(fd, &req, NULL, count_bytes, &total, &err) < 0 && err.kind == ERR_CONFLICT &&
           strcmp(err.code, "file_changed") == 0 && total == 2,
       "fewer bytes than announced: ERR_CONFLICT file_changed");
    close(fd);
    close(far);
    req.offset = 1;
    n = put_frame(buf, AGENT_FILE_INFO, info, strlen(info));
    fd = fake_agent(buf, n, &far);
    ok(agentc_read(fd, &req, NULL, count_bytes, &total, &err) < 0 &&
           strcmp(err.code, "agent_protocol") == 0,
       "a range other than the one asked for is a protocol error");
    close(fd);
    close(far);
}

int main(void)
{
    test_path_normalize();
    test_decode_file_info();
    test_decode_entries_ok_error();
    test_hostile_agent();
    return tap_done();
}
