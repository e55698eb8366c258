/*
 * Background process routes: /sandboxes/{id}/processes[/{pid}[/stdin|signal]]. The output
 * routes are in h_proc_output.c. The processes belong to the sandbox's agent; these
 * handlers validate the request and relay it through sandbox/processes.h.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "h_processes.h"
#include "sandbox/processes.h"

int api_proc_pid(api_req_t *r, pid_t *pid, err_t *err)
{
    _cleanup_free_ char *s = api_param(r, "pid");
    long long v;
    if (!s || !parse_int(s, 1, 0x7fffffff, &v))
        return err_set(err, ERR_INVALID, 0, "invalid_pid", "a process id is a number 1-2147483647");
    *pid = (pid_t)v;
    return 0;
}

/* The members of POST /processes besides stdin (which may be a bool or a string). */
struct start_body {
    json_t *argv, *env;
    const char *code, *cwd, *user, *tag;
    int tty;
    int64_t cols, rows;
};

static const struct jfield start_fields[] = {
    {"argv", JF_ARRAY, false, offsetof(struct start_body, argv), 0, 0, 0},
    {"code", JF_STRING, false, offsetof(struct start_body, code), AGENT_PROCS_STDIN_MAX, 0, 0},
    {"env", JF_OBJECT, false, offsetof(struct start_body, env), 0, 0, 0},
    {"cwd", JF_STRING, false, offsetof(struct start_body, cwd), 4096, 0, 0},
    {"user", JF_STRING, false, offsetof(struct start_body, user), 256, 0, 0},
    {"tag", JF_STRING, false, offsetof(struct start_body, tag), 256, 0, 0},
    {"tty", JF_BOOL, false, offsetof(struct start_body, tty), 0, 0, 0},
    {"cols", JF_INT, false, offsetof(struct start_body, cols), 0, 1, 1000},
    {"rows", JF_INT, false, offsetof(struct start_body, rows), 0, 1, 1000},
};

/* "stdin": true (a pipe to write later), false, or a string written first. */
static int take_stdin(json_t *body, struct sbx_proc_req *q, err_t *err)
{
    json_t *in = json_object_get(body, "stdin");
    if (!in || json_is_null(in))
        return 0;
    if (json_is_boolean(in)) {
        q->stdin_pipe = json_is_true(in);
        return 0;
    }
    if (!json_is_string(in))
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "field 'stdin' must be a boolean or a string");
    if (json_string_length(in) > AGENT_PROCS_STDIN_MAX)
        return err_set(err, ERR_TOO_LARGE, 0, "too_large",
                       "field 'stdin' is at most %u KiB; send more through /stdin",
                       AGENT_PROCS_STDIN_MAX / 1024);
    q->stdin_data = json_string_value(in);
    q->stdin_len = json_string_length(in);
    return 0;
}

/* argv, or code as sh -c code (owned by body from here). */
static int start_argv(json_t *body, const struct start_body *b, struct sbx_proc_req *q, err_t *err)
{
    if (!b->argv == !b->code)
        return err_set(err, ERR_INVALID, 0, "missing_field",
                       "give exactly one of 'argv' and 'code'");
    if (b->code && !*b->code)
        return err_set(err, ERR_INVALID, 0, "invalid_field", "field 'code' must not be empty");
    q->argv = b->argv;
    if (b->code) {
        q->argv = json_pack("[s,s,s]", "/bin/sh", "-c", b->code);
        json_object_set_new(body, "_argv", q->argv);
        q->command = b->code;
    }
    return sbx_check_exec_argv(q->argv, b->env, err);
}

static int decode_start(json_t *body, struct sbx_proc_req *q, err_t *err)
{
    struct start_body b = {.tty = -1};
    _cleanup_json_ json_t *in = json_incref(json_object_get(body, "stdin"));
    json_object_del(body, "stdin");
    if (json_decode_fields(body, start_fields, ARRAY_SIZE(start_fields), &b, err) < 0)
        return -1;
    json_object_set(body, "stdin", in ? in : json_null()); /* keeps a stdin string alive */
    *q = (struct sbx_proc_req){.env = b.env,
                               .cwd = b.cwd,
                               .user = b.user,
                               .tag = b.tag,
                               .tty = b.tty == 1,
                               .cols = (uint16_t)b.cols,
                               .rows = (uint16_t)b.rows};
    return start_argv(body, &b, q, err) < 0 ? -1 : take_stdin(body, q, err);
}

int h_proc_start(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    json_t *body _cleanup_json_ = NULL;
    struct sbx_proc_req q;
    json_t *out = NULL;
    if (api_body_object(r, false, &body, err) < 0 || decode_start(body, &q, err) < 0 ||
        sbx_proc_start(r->api->sbx, &r->user, id, &q, &out, err) < 0)
        return -1;
    api_reply_json(r, 201, out);
    return 0;
}

int h_proc_list(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    json_t *out = NULL;
    if (sbx_proc_list(r->api->sbx, &r->user, id, &out, err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

int h_proc_get(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    json_t *out = NULL;
    pid_t pid;
    if (api_proc_pid(r, &pid, err) < 0 ||
        sbx_proc_get(r->api->sbx, &r->user, id, pid, &out, err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

struct resize_body {
    int64_t cols, rows;
};

static const struct jfield resize_fields[] = {
    {"cols", JF_INT, true, offsetof(struct resize_body, cols), 0, 1, 1000},
    {"rows", JF_INT, true, offsetof(struct resize_body, rows), 0, 1, 1000},
};

int h_proc_patch(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    json_t *body _cleanup_json_ = NULL;
    struct resize_body b = {0};
    json_t *out = NULL;
    pid_t pid;
    if (api_proc_pid(r, &pid, err) < 0 || api_body_object(r, false, &body, err) < 0 ||
        json_decode_fields(body, resize_fields, ARRAY_SIZE(resize_fields), &b, err) < 0 ||
        sbx_proc_resize(r->api->sbx, &r->user, id, pid, (uint16_t)b.cols, (uint16_t)b.rows, &out,
                        err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

int h_proc_delete(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    pid_t pid;
    if (api_proc_pid(r, &pid, err) < 0 || sbx_proc_delete(r->api->sbx, &r->user, id, pid, err) < 0)
        return -1;
    api_reply_json(r, 200, json_pack("{s:i, s:b}", "pid", (int)pid, "deleted", true));
    return 0;
}

static bool query_true(api_req_t *r, const char *name)
{
    const char *v = api_query(r, name);
    return v && (strcmp(v, "true") == 0 || strcmp(v, "1") == 0);
}

int h_proc_stdin(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    json_t *out = NULL;
    pid_t pid;
    if (api_proc_pid(r, &pid, err) < 0)
        return -1;
    if (r->body.len > AGENT_PROCS_STDIN_MAX)
        return err_set(err, ERR_TOO_LARGE, 0, "too_large",
                       "at most %u KiB of stdin per request: send it in parts",
                       AGENT_PROCS_STDIN_MAX / 1024);
    if (sbx_proc_stdin(r->api->sbx, &r->user, id, pid, r->body.data, r->body.len,
                       query_true(r, "eof"), &out, err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

/* Signal names without SIG (case-insensitive), as `kill -l` prints the common ones. */
static const struct {
    const char *name;
    int sig;
} signals[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"ABRT", SIGABRT}, {"KILL", SIGKILL},
    {"USR1", SIGUSR1}, {"SEGV", SIGSEGV}, {"USR2", SIGUSR2}, {"PIPE", SIGPIPE}, {"ALRM", SIGALRM},
    {"TERM", SIGTERM}, {"CONT", SIGCONT}, {"STOP", SIGSTOP}, {"TSTP", SIGTSTP}, {"WINCH", SIGWINCH},
};

/* A signal as a number 1-64, or a name ("TERM", "SIGTERM"); 0 if it is neither. */
int api_parse_signal(json_t *v)
{
    if (json_is_integer(v))
        return json_integer_value(v) >= 1 && json_integer_value(v) <= 64
                   ? (int)json_integer_value(v)
                   : 0;
    const char *s = json_string_value(v);
    if (!s)
        return 0;
    if (strncasecmp(s, "SIG", 3) == 0)
        s += 3;
    for (size_t i = 0; i < ARRAY_SIZE(signals); i++)
        if (strcasecmp(s, signals[i].name) == 0)
            return signals[i].sig;
    return 0;
}

int h_proc_signal(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    json_t *body _cleanup_json_ = NULL;
    json_t *out = NULL;
    pid_t pid;
    if (api_proc_pid(r, &pid, err) < 0 || api_body_object(r, false, &body, err) < 0)
        return -1;
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) if (strcmp(key, "signal") != 0) return err_set(
        err, ERR_INVALID, 0, "unknown_field", "unknown field '%s'", key);
    int sig = api_parse_signal(json_object_get(body, "signal"));
    if (!sig)
        return err_set(err, ERR_INVALID, 0, "invalid_signal",
                       "field 'signal' must be a number 1-64 or a name such as \"TERM\"");
    if (sbx_proc_signal(r->api->sbx, &r->user, id, pid, sig, &out, err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}
