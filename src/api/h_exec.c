/* Exec routes (execute: sh -c code; exec: argv form), JSON or ndjson, and the main log. */
#include <stdio.h>
#include <string.h>

#include "api_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "sandbox/sandbox.h"

/* One exec as the stream thread runs it. */
struct exec_job {
    sbx_mgr_t *sbx;
    user_t user;
    char *key;
    json_t *body; /* keeps the request's strings alive */
    struct sbx_exec_req q;
    struct api_stream *s;
    char carry[2][4]; /* an unfinished UTF-8 sequence per stream */
    size_t carry_len[2];
};

/* Length of the longest prefix of p[0..n) that ends on a UTF-8 character boundary. */
static size_t utf8_complete(const char *p, size_t n)
{
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)p[i - 1] & 0xC0) == 0x80)
        i--, back++;
    if (i == 0)
        return n;
    unsigned char lead = (unsigned char)p[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return back + 1 < need ? i - 1 : n;
}

static bool send_line(struct api_stream *s, json_t *obj)
{
    _cleanup_free_ char *line = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (!line)
        return true;
    size_t n = strlen(line);
    line[n] = '\n';
    return api_stream_write(s, line, n + 1);
}

static bool stream_chunk(void *ctx, int fd, const char *data, size_t len)
{
    struct exec_job *job = ctx;
    int k = fd == 2;
    buf_t b = {0};
    buf_append(&b, job->carry[k], job->carry_len[k]);
    buf_append(&b, data, len);
    size_t whole = utf8_complete(b.data, b.len);
    job->carry_len[k] = b.len - whole;
    memcpy(job->carry[k], b.data + whole, job->carry_len[k]);
    bool ok =
        whole == 0 ||
        send_line(job->s, json_pack("{s:s, s:o, s:i}", "type", k ? "stderr" : "stdout", "output",
                                    json_string_lossy(b.data, whole), "exit_code", -1));
    buf_free(&b);
    return ok;
}

static void exec_stream_main(struct api_stream *s, void *ctx)
{
    struct exec_job *job = ctx;
    job->s = s;
    if (s->client_fd >= 0) /* the client gone: kill the command */
        job->q.cancel_fd = &s->client_fd;
    struct sbx_exec_result res = {0};
    err_t err = {0};
    if (sbx_exec(job->sbx, &job->user, job->key, &job->q, stream_chunk, job, &res, &err) == 0) {
        for (int k = 0; k < 2; k++) /* whatever incomplete bytes are left */
            if (job->carry_len[k])
                send_line(s, json_pack("{s:s, s:o, s:i}", "type", k ? "stderr" : "stdout", "output",
                                       json_string_lossy(job->carry[k], job->carry_len[k]),
                                       "exit_code", -1));
        char msg[64];
        snprintf(msg, sizeof(msg), "Process exited with code %d", res.exit_code);
        send_line(s, json_pack("{s:s, s:s, s:i, s:b}", "type", "exit", "output", msg, "exit_code",
                               res.exit_code, "timed_out", res.timed_out));
    } else {
        send_line(s, json_pack("{s:s, s:s, s:i, s:s}", "type", "error", "output", err.msg,
                               "exit_code", -1, "code", err.code));
    }
    buf_free(&res.out);
    buf_free(&res.err);
    free(job->key);
    json_decref(job->body);
    free(job);
}

static json_t *result_json(const struct sbx_exec_result *res)
{
    return json_pack("{s:o, s:o, s:i, s:b, s:b, s:I}", "stdout",
                     json_string_lossy(res->out.data ? res->out.data : "", res->out.len), "stderr",
                     json_string_lossy(res->err.data ? res->err.data : "", res->err.len),
                     "exit_code", res->exit_code, "truncated",
                     res->stdout_truncated || res->stderr_truncated, "timed_out", res->timed_out,
                     "execution_id", (json_int_t)res->execution_id);
}

static bool want_stream(api_req_t *r)
{
    const char *v = api_query(r, "stream");
    return v && (strcmp(v, "true") == 0 || strcmp(v, "1") == 0);
}

/* Run q (whose strings live in body, which this takes) as JSON or as a stream. */
static int run_exec(api_req_t *r, json_t *body, struct sbx_exec_req *q, err_t *err)
{
    _cleanup_free_ char *key = api_param(r, "id");
    if (want_stream(r)) {
        struct exec_job *job = xcalloc(1, sizeof(*job));
        *job = (struct exec_job){
            .sbx = r->api->sbx, .user = r->user, .key = steal_pointer(&key), .body = body, .q = *q};
        if (sbx_exec_check(r->api->sbx, &r->user, job->key, err) < 0 ||
            api_reply_stream(r, "application/x-ndjson", exec_stream_main, job, err) < 0) {
            free(job->key);
            json_decref(body);
            free(job);
            return -1;
        }
        return 0;
    }
    struct sbx_exec_result res = {0};
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    int client_fd = ci ? ci->connect_fd : -1;
    q->cancel_fd = client_fd >= 0 ? &client_fd : NULL; /* a client that gives up kills it */
    int rc = sbx_exec(r->api->sbx, &r->user, key, q, NULL, NULL, &res, err);
    if (rc == 0)
        api_reply_json(r, 200, result_json(&res));
    buf_free(&res.out);
    buf_free(&res.err);
    json_decref(body);
    return rc;
}

struct execute_body {
    const char *code;
    double timeout;
};

static const struct jfield execute_fields[] = {
    {"code", JF_STRING, true, offsetof(struct execute_body, code), 1 << 20, 0, 0},
    {"timeout", JF_NUMBER, false, offsetof(struct execute_body, timeout), 0, 0, 0},
};

int h_execute(api_req_t *r, err_t *err)
{
    json_t *body = NULL;
    struct execute_body b = {0};
    if (api_body_object(r, false, &body, err) < 0)
        return -1;
    if (json_decode_fields(body, execute_fields, ARRAY_SIZE(execute_fields), &b, err) < 0) {
        json_decref(body);
        return -1;
    }
    struct sbx_exec_req q = {.command = b.code, .timeout_s = b.timeout};
    q.argv = json_pack("[s,s,s]", "/bin/sh", "-c", b.code);
    json_object_set_new(body, "_argv", q.argv); /* owned by body from here */
    return run_exec(r, body, &q, err);
}

struct exec_body {
    json_t *argv, *env;
    const char *cwd, *user, *stdin_data;
    int tty;
    double timeout;
};

static const struct jfield exec_fields[] = {
    {"argv", JF_ARRAY, true, offsetof(struct exec_body, argv), 0, 0, 0},
    {"env", JF_OBJECT, false, offsetof(struct exec_body, env), 0, 0, 0},
    {"cwd", JF_STRING, false, offsetof(struct exec_body, cwd), 4096, 0, 0},
    {"user", JF_STRING, false, offsetof(struct exec_body, user), 256, 0, 0},
    {"stdin", JF_STRING, false, offsetof(struct exec_body, stdin_data), 16 << 20, 0, 0},
    {"tty", JF_BOOL, false, offsetof(struct exec_body, tty), 0, 0, 0},
    {"timeout", JF_NUMBER, false, offsetof(struct exec_body, timeout), 0, 0, 0},
};

int h_exec(api_req_t *r, err_t *err)
{
    json_t *body = NULL;
    struct exec_body b = {.tty = -1};
    if (api_body_object(r, false, &body, err) < 0)
        return -1;
    if (json_decode_fields(body, exec_fields, ARRAY_SIZE(exec_fields), &b, err) < 0 ||
        sbx_check_exec_argv(b.argv, b.env, err) < 0 ||
        (b.tty == 1 && err_set(err, ERR_INVALID, 0, "unsupported",
                               "tty execs go through the WebSocket route") < 0)) {
        json_decref(body);
        return -1;
    }
    buf_t cmd = {0};
    for (size_t i = 0; i < json_array_size(b.argv); i++)
        buf_printf(&cmd, "%s%s", i ? " " : "", json_string_value(json_array_get(b.argv, i)));
    json_object_set_new(body, "_command", json_string_lossy(cmd.data, cmd.len));
    buf_free(&cmd);
    struct sbx_exec_req q = {
        .argv = b.argv,
        .command = json_string_value(json_object_get(body, "_command")),
        .env = b.env,
        .cwd = b.cwd,
        .user = b.user,
        .stdin_data = b.stdin_data,
        .stdin_len = b.stdin_data ? json_string_length(json_object_get(body, "stdin")) : 0,
        .has_stdin = b.stdin_data != NULL,
        .timeout_s = b.timeout,
    };
    return run_exec(r, body, &q, err);
}

/* ---- the main process's log ---- */

static void logs_stream_main(struct api_stream *s, void *ctx)
{
    sbx_log_reader_t *lr = ctx;
    char chunk[65536];
    for (;;) {
        ssize_t n = sbx_logs_read(lr, chunk, sizeof(chunk));
        if (n > 0) {
            if (!api_stream_write(s, chunk, (size_t)n))
                break;
            continue;
        }
        if (n < 0)
            break;
        bool running = sbx_logs_running(lr);
        if (!running && (n = sbx_logs_read(lr, chunk, sizeof(chunk))) <= 0)
            break; /* ended and fully read */
        if (n > 0 ? !api_stream_write(s, chunk, (size_t)n) : !api_stream_wait(s, 100))
            break;
    }
    sbx_logs_close(lr);
}

int h_logs(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    sbx_log_reader_t *lr = sbx_logs_open(r->api->sbx, &r->user, id, err);
    if (!lr)
        return -1;
    if (want_stream(r)) {
        if (api_reply_stream(r, "text/plain; charset=utf-8", logs_stream_main, lr, err) < 0) {
            sbx_logs_close(lr);
            return -1;
        }
        return 0;
    }
    buf_t text = {0};
    char chunk[65536];
    ssize_t n;
    while ((n = sbx_logs_read(lr, chunk, sizeof(chunk))) > 0)
        buf_append(&text, chunk, (size_t)n);
    sbx_logs_close(lr);
    api_reply_bytes(r, 200, "text/plain; charset=utf-8", text.data ? text.data : "", text.len);
    buf_free(&text);
    return 0;
}
