/* envd's process.Process, the unary calls: List, SendInput, SendSignal, Update, CloseStdin;
 * and the client stream StreamInput. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "e2b_internal.h"

#define STREAM_INPUT_MAX (1024 * 1024) /* a StreamInput message's bytes at most */

/* The message, its sandbox and its process. */
static int prologue(api_req_t *r, json_t **msg, struct e2b_box *b, pid_t *pid, err_t *err)
{
    if (e2b_rpc_message(r, msg, err) < 0 || e2b_box_envd(r, b, false, err) < 0)
        return -1;
    if (e2b_process_select(r, b, *msg, pid, err) < 0) {
        e2b_box_clear(b);
        return -1;
    }
    return 0;
}

/* An ended process is no process to envd: not_found, as for one it never had. */
static int gone_is_not_found(int rc, err_t *err)
{
    if (rc < 0 && strcmp(err->code, "process_exited") == 0)
        err->kind = ERR_NOT_FOUND;
    return rc;
}

static json_t *process_info(json_t *rec)
{
    json_t *argv = json_object_get(rec, "argv");
    json_t *args = json_array(), *v;
    size_t i;
    json_array_foreach(argv, i, v)
    {
        if (i > 0)
            json_array_append(args, v);
    }
    json_t *config =
        json_pack("{s:O, s:o, s:{}}", "cmd", json_array_get(argv, 0), "args", args, "envs");
    json_t *info = json_pack("{s:o, s:O}", "config", config, "pid", json_object_get(rec, "pid"));
    json_t *tag = json_object_get(rec, "tag");
    if (json_is_string(tag))
        json_object_set(info, "tag", tag);
    return info;
}

int e2b_rpc_process_list(api_req_t *r, err_t *err)
{
    json_t *msg _cleanup_json_ = NULL;
    json_t *list _cleanup_json_ = NULL;
    struct e2b_box b;
    if (e2b_rpc_message(r, &msg, err) < 0 || e2b_box_envd(r, &b, false, err) < 0)
        return -1;
    int rc = sbx_proc_list(r->api->sbx, &b.owner, b.rec.sandbox_id, &list, err);
    if (rc == 0) {
        json_t *out = json_array(), *v;
        size_t i;
        json_array_foreach(json_object_get(list, "processes"), i, v)
        {
            const char *st = json_string_value(json_object_get(v, "status"));
            if (st && strcmp(st, "running") == 0) /* envd lists the live ones */
                json_array_append_new(out, process_info(v));
        }
        e2b_rpc_reply(r, json_pack("{s:o}", "processes", out));
    }
    e2b_box_clear(&b);
    return rc;
}

/* The bytes of an input message ({"stdin": b64} or {"pty": b64}) into data. */
static int input_bytes(json_t *input, buf_t *data, err_t *err)
{
    json_t *v = e2b_rpc_get(input, "stdin", NULL);
    if (!v)
        v = e2b_rpc_get(input, "pty", NULL);
    if (!json_is_string(v) || e2b_base64_decode(json_string_value(v), data) < 0)
        return err_set(err, ERR_INVALID, 0, "invalid_argument", "input must be stdin or pty bytes");
    return 0;
}

/* Write data to pid's stdin in pieces procs.sock takes (eof: then close it). */
static int write_stdin(api_req_t *r, struct e2b_box *b, pid_t pid, const buf_t *data, bool eof,
                       err_t *err)
{
    size_t off = 0;
    do {
        size_t n =
            data->len - off > AGENT_PROCS_STDIN_MAX ? AGENT_PROCS_STDIN_MAX : data->len - off;
        json_t *out = NULL;
        bool last = off + n == data->len;
        if ((n || (eof && last)) &&
            sbx_proc_stdin(r->api->sbx, &b->owner, b->rec.sandbox_id, pid,
                           data->data ? data->data + off : "", n, eof && last, &out, err) < 0)
            return gone_is_not_found(-1, err);
        json_decref(out);
        off += n;
    } while (off < data->len);
    return 0;
}

int e2b_rpc_process_send_input(api_req_t *r, err_t *err)
{
    json_t *msg _cleanup_json_ = NULL;
    struct e2b_box b;
    pid_t pid;
    buf_t data = {0};
    if (prologue(r, &msg, &b, &pid, err) < 0)
        return -1;
    int rc = input_bytes(e2b_rpc_get(msg, "input", NULL), &data, err);
    if (rc == 0)
        rc = write_stdin(r, &b, pid, &data, false, err);
    if (rc == 0)
        e2b_rpc_reply(r, json_object());
    buf_free(&data);
    e2b_box_clear(&b);
    return rc;
}

int e2b_rpc_process_close_stdin(api_req_t *r, err_t *err)
{
    json_t *msg _cleanup_json_ = NULL;
    struct e2b_box b;
    pid_t pid;
    buf_t none = {0};
    if (prologue(r, &msg, &b, &pid, err) < 0)
        return -1;
    int rc = write_stdin(r, &b, pid, &none, true, err);
    if (rc == 0)
        e2b_rpc_reply(r, json_object());
    e2b_box_clear(&b);
    return rc;
}

/* SIGNAL_SIGKILL / SIGNAL_SIGTERM, or their numbers. */
static int signal_of(json_t *v)
{
    const char *s = json_string_value(v);
    if (json_is_integer(v))
        return json_integer_value(v) == SIGKILL || json_integer_value(v) == SIGTERM
                   ? (int)json_integer_value(v)
                   : 0;
    return !s                                 ? 0
           : strcmp(s, "SIGNAL_SIGKILL") == 0 ? SIGKILL
           : strcmp(s, "SIGNAL_SIGTERM") == 0 ? SIGTERM
                                              : 0;
}

int e2b_rpc_process_send_signal(api_req_t *r, err_t *err)
{
    json_t *msg _cleanup_json_ = NULL;
    struct e2b_box b;
    pid_t pid;
    if (prologue(r, &msg, &b, &pid, err) < 0)
        return -1;
    int sig = signal_of(e2b_rpc_get(msg, "signal", NULL)), rc;
    json_t *out = NULL;
    if (!sig)
        rc = err_set(err, ERR_INVALID, 0, "invalid_argument", "signal must be SIGKILL or SIGTERM");
    else
        rc = gone_is_not_found(
            sbx_proc_signal(r->api->sbx, &b.owner, b.rec.sandbox_id, pid, sig, &out, err), err);
    json_decref(out);
    if (rc == 0)
        e2b_rpc_reply(r, json_object());
    e2b_box_clear(&b);
    return rc;
}

int e2b_rpc_process_update(api_req_t *r, err_t *err)
{
    json_t *msg _cleanup_json_ = NULL;
    struct e2b_box b;
    pid_t pid;
    if (prologue(r, &msg, &b, &pid, err) < 0)
        return -1;
    json_t *size = e2b_rpc_get(e2b_rpc_get(msg, "pty", NULL), "size", NULL);
    json_int_t cols = json_integer_value(e2b_rpc_get(size, "cols", NULL));
    json_int_t rows = json_integer_value(e2b_rpc_get(size, "rows", NULL));
    json_t *out = NULL;
    int rc = 0;
    if (size && (cols < 1 || cols > 1000 || rows < 1 || rows > 1000))
        rc = err_set(err, ERR_INVALID, 0, "invalid_argument", "a size is 1-1000 cols and rows");
    else if (size)
        rc = gone_is_not_found(sbx_proc_resize(r->api->sbx, &b.owner, b.rec.sandbox_id, pid,
                                               (uint16_t)cols, (uint16_t)rows, &out, err),
                               err);
    json_decref(out);
    if (rc == 0)
        e2b_rpc_reply(r, json_object());
    e2b_box_clear(&b);
    return rc;
}

/* ---- StreamInput: enveloped messages in, one empty message out -------------------------- */

struct stream_input {
    struct e2b_box box;
    bool have_box;
    pid_t pid; /* from the StartEvent */
    buf_t pending;
};

static void stream_input_free(void *ctx)
{
    struct stream_input *si = ctx;
    if (si->have_box)
        e2b_box_clear(&si->box);
    buf_free(&si->pending);
    free(si);
}

int e2b_rpc_process_stream_input_begin(api_req_t *r, err_t *err)
{
    struct stream_input *si = xcalloc(1, sizeof(*si));
    r->ctx = si;
    r->ctx_free = stream_input_free;
    if (e2b_box_envd(r, &si->box, false, err) < 0)
        return -1;
    si->have_box = true;
    return 0;
}

/* One message of the stream: start {process}, data {input}, or keepalive. */
static int stream_message(api_req_t *r, struct stream_input *si, json_t *m, err_t *err)
{
    json_t *start = e2b_rpc_get(m, "start", NULL), *data = e2b_rpc_get(m, "data", NULL);
    if (start)
        return e2b_process_select(r, &si->box, start, &si->pid, err);
    if (!data)
        return 0; /* a keepalive */
    if (!si->pid)
        return err_set(err, ERR_INVALID, 0, "invalid_argument", "the stream must start first");
    buf_t bytes = {0};
    int rc = input_bytes(e2b_rpc_get(data, "input", NULL), &bytes, err);
    if (rc == 0)
        rc = write_stdin(r, &si->box, si->pid, &bytes, false, err);
    buf_free(&bytes);
    return rc;
}

int e2b_rpc_process_stream_input_chunk(api_req_t *r, const char *data, size_t len, err_t *err)
{
    struct stream_input *si = r->ctx;
    buf_append(&si->pending, data, len);
    for (;;) {
        const unsigned char *u = (const unsigned char *)si->pending.data;
        if (si->pending.len < 5)
            return 0;
        uint32_t n = (uint32_t)u[1] << 24 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 8 | u[4];
        if (n > STREAM_INPUT_MAX || (u[0] & 0x01))
            return err_set(err, ERR_INVALID, 0, "invalid_argument",
                           "messages are uncompressed and at most 1 MiB");
        if (si->pending.len < 5 + (size_t)n)
            return 0;
        json_t *m _cleanup_json_ = NULL;
        if (json_parse_object(si->pending.data + 5, n, &m, err) < 0 ||
            stream_message(r, si, m, err) < 0)
            return -1;
        memmove(si->pending.data, si->pending.data + 5 + n, si->pending.len - 5 - n);
        si->pending.len -= 5 + n;
    }
}

int e2b_rpc_process_stream_input(api_req_t *r, err_t *err)
{
    static const unsigned char answer[] = {0, 0, 0, 0, 2, '{', '}', 2, 0, 0, 0, 2, '{', '}'};
    api_reply_bytes(r, 200, "application/connect+json", answer, sizeof(answer));
    return 0;
}
