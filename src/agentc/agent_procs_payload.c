/*
 * procs.sock payloads, daemon side: strict decoding of what the agent sends (untrusted: a
 * sandbox can replace its agent). Every member is checked for type and range and the API
 * object is rebuilt from the checked values; unknown members are ignored.
 */
#include <math.h>
#include <string.h>

#include "agent_procs.h"
#include "agentc_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"

#define CURSOR_MAX  (1ull << 62)
#define ARGV_MAX    4096        /* strings in a record's argv */
#define ARGV_BYTES  (64 * 1024) /* their bytes together */
#define COMMAND_MAX (8 * 1024)
#define TAG_MAX     256

static json_t *time_json(json_t *v)
{
    double t = json_number_value(v);
    return json_is_number(v) && isfinite(t) && t >= 0 && t < 1e11 ? json_real(t) : NULL;
}

/* A string member of at most max bytes (or null when nullable); NULL for a bad one. */
static json_t *string_json(json_t *v, size_t max, bool nullable)
{
    if (nullable && json_is_null(v))
        return json_null();
    if (!json_is_string(v) || json_string_length(v) > max)
        return NULL;
    return json_stringn(json_string_value(v), json_string_length(v));
}

static json_t *argv_json(json_t *v)
{
    size_t i, total = 0;
    json_t *s;
    if (!json_is_array(v) || json_array_size(v) > ARGV_MAX)
        return NULL;
    json_array_foreach(v, i, s)
    {
        if (!json_is_string(s) || (total += json_string_length(s)) > ARGV_BYTES)
            return NULL;
    }
    return json_deep_copy(v);
}

/* status, exit_code and signal, which must agree. */
static int decode_end(json_t *j, struct agentc_proc *p)
{
    const char *status = json_string_value(json_object_get(j, "status"));
    json_t *code = json_object_get(j, "exit_code"), *sig = json_object_get(j, "signal");
    json_int_t c = -1, s = 0;
    if (!status || (strcmp(status, "running") != 0 && strcmp(status, "exited") != 0))
        return -1;
    p->running = strcmp(status, "running") == 0;
    if (p->running ? !json_is_null(code) : !agentc_get_int(j, "exit_code", 0, 255, &c))
        return -1;
    if (!json_is_null(sig) && (p->running || !agentc_get_int(j, "signal", 1, 64, &s)))
        return -1;
    p->exit_code = (int)c;
    p->signal = (int)s;
    return 0;
}

/* The members besides status: the rebuilt object's, or -1. */
static int decode_members(json_t *j, struct agentc_proc *p, json_t *out)
{
    json_int_t pid, start, end;
    json_t *tty = json_object_get(j, "tty"), *in = json_object_get(j, "stdin");
    json_t *trunc = json_object_get(j, "argv_truncated");
    json_t *ended = json_object_get(j, "ended_at");
    if (!agentc_get_int(j, "pid", 1, 0x7fffffff, &pid) || !json_is_boolean(tty) ||
        !json_is_boolean(in) || !agentc_get_int(j, "output_start", 0, CURSOR_MAX, &start) ||
        !agentc_get_int(j, "output_end", start, CURSOR_MAX, &end) ||
        (trunc && !json_is_boolean(trunc)))
        return -1;
    *p = (struct agentc_proc){.pid = (pid_t)pid,
                              .tty = json_is_true(tty),
                              .stdin_open = json_is_true(in),
                              .output_start = (uint64_t)start,
                              .output_end = (uint64_t)end};
    json_t *parts[] = {argv_json(json_object_get(j, "argv")),
                       string_json(json_object_get(j, "command"), COMMAND_MAX, false),
                       string_json(json_object_get(j, "tag"), TAG_MAX, true),
                       time_json(json_object_get(j, "started_at")),
                       json_is_null(ended) ? json_null() : time_json(ended)};
    static const char *const names[] = {"argv", "command", "tag", "started_at", "ended_at"};
    int rc = 0;
    for (size_t i = 0; i < ARRAY_SIZE(parts); i++) {
        if (!parts[i])
            rc = -1;
        else
            json_object_set_new(out, names[i], parts[i]);
    }
    json_object_set_new(out, "argv_truncated", json_boolean(json_is_true(trunc)));
    /* Killed at its START's timeout_ms (absent from older agents: false). */
    json_t *timed_out = json_object_get(j, "timed_out");
    if (timed_out && !json_is_boolean(timed_out))
        rc = -1;
    p->timed_out = json_is_true(timed_out);
    json_object_set_new(out, "timed_out", json_boolean(p->timed_out));
    return rc;
}

int agentc_decode_process(const struct agent_frame *f, struct agentc_proc *out, err_t *err)
{
    _cleanup_json_ json_t *j = f->type == AGENT_PROCESS ? agentc_payload_object(f) : NULL;
    _cleanup_json_ json_t *o = json_object();
    struct agentc_proc p = {0};
    if (!j || decode_members(j, &p, o) < 0 || decode_end(j, &p) < 0)
        return agentc_bad_payload(err, "PROCESS");
    json_object_set_new(o, "pid", json_integer(p.pid));
    json_object_set_new(o, "tty", json_boolean(p.tty));
    json_object_set_new(o, "stdin", json_boolean(p.stdin_open && p.running));
    json_object_set_new(o, "status", json_string(p.running ? "running" : "exited"));
    json_object_set_new(o, "exit_code", p.running ? json_null() : json_integer(p.exit_code));
    json_object_set_new(o, "signal", p.signal ? json_integer(p.signal) : json_null());
    json_object_set_new(o, "output_start", json_integer((json_int_t)p.output_start));
    json_object_set_new(o, "output_end", json_integer((json_int_t)p.output_end));
    if (p.running)
        json_object_set_new(o, "ended_at", json_null());
    p.json = steal_pointer(&o);
    *out = p;
    return 0;
}

void agentc_proc_free(struct agentc_proc *p)
{
    if (p->json)
        json_decref(p->json);
    p->json = NULL;
}

int agentc_decode_output_info(const struct agent_frame *f, uint64_t *cursor, uint64_t *dropped,
                              err_t *err)
{
    _cleanup_json_ json_t *j = f->type == AGENT_OUTPUT_INFO ? agentc_payload_object(f) : NULL;
    json_int_t c, d;
    if (!j || !agentc_get_int(j, "cursor", 0, CURSOR_MAX, &c) ||
        !agentc_get_int(j, "dropped", 0, c, &d))
        return agentc_bad_payload(err, "OUTPUT_INFO");
    *cursor = (uint64_t)c;
    *dropped = (uint64_t)d;
    return 0;
}

static const struct {
    const char *agent;
    err_kind_t kind;
    const char *code;
} proc_errors[] = {
    {"no_process", ERR_NOT_FOUND, "process_not_found"},
    {"too_many", ERR_LIMIT, "too_many_processes"},
    {"cursor_future", ERR_INVALID, "invalid_cursor"},
    {"exited", ERR_CONFLICT, "process_exited"},
    {"not_tty", ERR_CONFLICT, "not_a_tty"},
    {"no_stdin", ERR_CONFLICT, "stdin_closed"},
    {"stdin_full", ERR_LIMIT, "stdin_full"},
    {"invalid", ERR_INVALID, "invalid"},
    {"bad_cwd", ERR_INVALID, "bad_cwd"},
    {"bad_user", ERR_INVALID, "bad_user"},
    {"busy", ERR_LIMIT, "agent_busy"},
    {"too_large", ERR_TOO_LARGE, "too_large"},
    {"unsupported", ERR_CONFLICT, "unsupported"},
};

int agentc_proc_error(const struct agent_frame *f, err_t *err)
{
    char code[32], msg[400];
    if (agentc_decode_error(f, code, sizeof(code), msg, sizeof(msg), err) < 0)
        return -1;
    for (size_t i = 0; i < ARRAY_SIZE(proc_errors); i++)
        if (strcmp(code, proc_errors[i].agent) == 0)
            return err_set(err, proc_errors[i].kind, 0, proc_errors[i].code, "%s", msg);
    return err_set(err, ERR_RUNTIME, 0, "agent_error", "agent: %s: %s", code, msg);
}
