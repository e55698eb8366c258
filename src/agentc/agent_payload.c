/*
 * JSON payloads of the agent protocol, daemon side: decoding what the agent sends (untrusted:
 * strict types and bounds, unknown fields ignored for forward compatibility) and encoding EXEC.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_client.h"
#include "agentc_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"

int agentc_bad_payload(err_t *err, const char *what)
{
    return err_set(err, ERR_RUNTIME, 0, "agent_protocol", "malformed %s frame from the agent",
                   what);
}

json_t *agentc_payload_object(const struct agent_frame *f)
{
    json_error_t jerr;
    json_t *j = json_loadb((const char *)f->payload, f->len, JSON_REJECT_DUPLICATES, &jerr);
    if (j && !json_is_object(j)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

bool agentc_get_int(json_t *obj, const char *key, json_int_t min, json_int_t max, json_int_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return false;
    *out = json_integer_value(v);
    return true;
}

int agentc_decode_exit(const struct agent_frame *f, struct agentc_exit *out, err_t *err)
{
    _cleanup_json_ json_t *j = f->type == AGENT_EXIT ? agentc_payload_object(f) : NULL;
    json_int_t code, sig = 0;
    json_t *s = j ? json_object_get(j, "signal") : NULL;
    json_t *t = j ? json_object_get(j, "timed_out") : NULL;
    if (!j || !agentc_get_int(j, "exit_code", 0, 255, &code) || !json_is_boolean(t))
        return agentc_bad_payload(err, "EXIT");
    if (s && !json_is_null(s) && !agentc_get_int(j, "signal", 1, 64, &sig))
        return agentc_bad_payload(err, "EXIT");
    *out = (struct agentc_exit){(int)code, (int)sig, json_is_true(t)};
    return 0;
}

int agentc_decode_started(const struct agent_frame *f, pid_t *pid, err_t *err)
{
    _cleanup_json_ json_t *j = f->type == AGENT_STARTED ? agentc_payload_object(f) : NULL;
    json_int_t v;
    if (!j || !agentc_get_int(j, "pid", 1, 0x7fffffff, &v))
        return agentc_bad_payload(err, "STARTED");
    *pid = (pid_t)v;
    return 0;
}

/* Copy s into out: codes keep [a-z0-9_] only, messages lose control characters. */
static void copy_clean(char *out, size_t size, const char *s, bool is_code)
{
    size_t n = 0;
    for (; *s && n + 1 < size; s++) {
        unsigned char c = (unsigned char)*s;
        if (is_code ? (islower(c) || isdigit(c) || c == '_') : (c >= 0x20 && c != 0x7f))
            out[n++] = (char)c;
        else if (is_code)
            return (void)snprintf(out, size, "agent_error");
    }
    out[n] = '\0';
}

int agentc_decode_error(const struct agent_frame *f, char *code, size_t code_size, char *msg,
                        size_t msg_size, err_t *err)
{
    _cleanup_json_ json_t *j = f->type == AGENT_ERROR ? agentc_payload_object(f) : NULL;
    const char *c = j ? json_string_value(json_object_get(j, "code")) : NULL;
    const char *m = j ? json_string_value(json_object_get(j, "message")) : NULL;
    if (!c || !m || !c[0])
        return agentc_bad_payload(err, "ERROR");
    copy_clean(code, code_size, c, true);
    copy_clean(msg, msg_size, m, false);
    return 0;
}

/* A NULL-terminated string vector as a JSON array; false if an entry is not valid UTF-8. */
static json_t *string_array(const char *const *v)
{
    json_t *a = json_array();
    for (size_t i = 0; v && v[i]; i++) {
        json_t *s = json_string(v[i]);
        if (!s) {
            json_decref(a);
            return NULL;
        }
        json_array_append_new(a, s);
    }
    return a;
}

/* The optional members of EXEC; -1 if a string is not valid UTF-8. */
static int encode_options(json_t *j, const struct agentc_exec_req *req)
{
    if (req->env) {
        json_t *env = string_array(req->env);
        if (!env)
            return -1;
        json_object_set_new(j, "env", env);
    }
    if (req->cwd && json_object_set_new(j, "cwd", json_string(req->cwd)) < 0)
        return -1;
    if (req->user && json_object_set_new(j, "user", json_string(req->user)) < 0)
        return -1;
    json_object_set_new(j, "tty", json_boolean(req->tty));
    json_object_set_new(j, "stdin", json_boolean(req->stdin_pipe));
    if (req->timeout_ms > 0)
        json_object_set_new(j, "timeout_ms", json_integer(req->timeout_ms));
    if (req->tty && req->cols && req->rows) {
        json_object_set_new(j, "cols", json_integer(req->cols));
        json_object_set_new(j, "rows", json_integer(req->rows));
    }
    return 0;
}

int agentc_encode_exec(const struct agentc_exec_req *req, char **out, err_t *err)
{
    if (!req->argv || !req->argv[0] || !req->argv[0][0])
        return err_set(err, ERR_INVALID, 0, "invalid_field", "argv must not be empty");
    _cleanup_json_ json_t *j = json_object();
    json_t *argv = string_array(req->argv);
    if (!argv || json_object_set_new(j, "argv", argv) < 0 || encode_options(j, req) < 0)
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "argv, env, cwd and user must be valid UTF-8");
    char *s = json_dump_compact(j);
    if (strlen(s) > AGENT_MAX_FRAME) {
        free(s);
        return err_set(err, ERR_TOO_LARGE, 0, "too_large", "the exec request is over 1 MiB");
    }
    *out = s;
    return 0;
}

int agentc_send_exec(int fd, const struct agentc_exec_req *req, err_t *err)
{
    _cleanup_free_ char *json = NULL;
    if (agentc_encode_exec(req, &json, err) < 0)
        return -1;
    return agentc_send(fd, AGENT_EXEC, json, strlen(json), err);
}
