/*
 * Requests on procs.sock, one per connection (see agent_procs.h). Each sends its frame,
 * reads the answer's frames within its deadline, and then reads until the agent closes,
 * so that the agent holds no connection to the host once the call returns.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "agent_procs.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"

#define CUT_POLL_MS 50   /* how often a waiting OUTPUT asks whether to cut the wait short */
#define CLOSE_MS    1000 /* how long the agent may take to close after its answer */
#define LIST_MAX    (AGENT_PROCS_RUNNING + AGENT_PROCS_EXITED)

/* One request on one connection. */
struct call {
    int fd;
    double deadline;
    agentc_reader_t reader;
    bool (*cut)(void *arg);
    void *cut_arg;
    bool shut; /* our side is half-closed */
};

static void call_init(struct call *c, int fd, int timeout_ms)
{
    *c = (struct call){.fd = fd};
    c->deadline = now_mono_ms() + (timeout_ms > 0 ? timeout_ms : AGENTC_PROCS_TIMEOUT_MS);
    agentc_reader_init(&c->reader);
}

static int unexpected(const struct agent_frame *f, err_t *err)
{
    return err_set(err, ERR_RUNTIME, 0, "agent_protocol",
                   "unexpected frame 0x%02x from the agent on procs.sock", f->type);
}

/* Wait until fd is readable; meanwhile ask c->cut, and half-close once it says so. */
static int wait_readable(struct call *c, err_t *err)
{
    for (;;) {
        double left = c->deadline - now_mono_ms();
        if (left <= 0)
            return err_set(err, ERR_RUNTIME, 0, "agent_timeout", "the agent did not answer");
        int ms = (int)left + 1;
        if (c->cut && !c->shut && ms > CUT_POLL_MS)
            ms = CUT_POLL_MS;
        struct pollfd p = {c->fd, POLLIN, 0};
        int n = poll(&p, 1, ms);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return err_set(err, ERR_RUNTIME, errno, "agent_unavailable", "poll: %s",
                           strerror(errno));
        if (c->cut && !c->shut && c->cut(c->cut_arg)) {
            shutdown(c->fd, SHUT_WR); /* the agent answers at once */
            c->shut = true;
        }
    }
}

/* The next frame; an ERROR frame becomes err. */
static int next_frame(struct call *c, struct agent_frame *f, err_t *err)
{
    for (;;) {
        int rc = agentc_reader_next(&c->reader, f);
        if (rc == AGENT_PARSE_COMPLETE)
            return f->type == AGENT_ERROR ? agentc_proc_error(f, err) : 0;
        if (rc == AGENT_PARSE_INVALID)
            return err_set(err, ERR_RUNTIME, 0, "agent_protocol", "invalid frame from the agent");
        if (wait_readable(c, err) < 0)
            return -1;
        size_t room = agentc_reader_space(&c->reader, 64 * 1024);
        ssize_t n = recv(c->fd, c->reader.data + c->reader.len, room, MSG_DONTWAIT);
        if (n == 0)
            return err_set(err, ERR_RUNTIME, 0, "agent_unavailable",
                           "the agent closed procs.sock before answering");
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return err_set(err, ERR_RUNTIME, errno, "agent_unavailable", "recv: %s",
                           strerror(errno));
        if (n > 0)
            c->reader.len += (size_t)n;
    }
}

/* The answer is in: wait (briefly) for the agent to close its end, then free the call. */
static void call_end(struct call *c)
{
    char tmp[512];
    double end = now_mono_ms() + CLOSE_MS;
    shutdown(c->fd, SHUT_WR);
    for (;;) {
        int left = (int)(end - now_mono_ms());
        struct pollfd p = {c->fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, left) <= 0 || recv(c->fd, tmp, sizeof(tmp), 0) <= 0)
            break;
    }
    agentc_reader_free(&c->reader);
}

/*
 * Send the request. A busy agent answers ERROR and closes before it reads anything, so a
 * send can meet a closed socket with that answer already waiting: it is the answer.
 */
static int call_send(struct call *c, uint8_t type, const void *payload, size_t len, err_t *err)
{
    if (agentc_send(c->fd, type, payload, len, err) == 0)
        return 0;
    if (err->errnum != EPIPE && err->errnum != ECONNRESET)
        return -1;
    err_t sent = *err;
    for (;;) {
        struct agent_frame f;
        if (agentc_reader_next(&c->reader, &f) == AGENT_PARSE_COMPLETE) {
            if (f.type != AGENT_ERROR)
                break;
            return agentc_proc_error(&f, err);
        }
        size_t room = agentc_reader_space(&c->reader, 64 * 1024);
        ssize_t n = recv(c->fd, c->reader.data + c->reader.len, room, MSG_DONTWAIT);
        if (n <= 0)
            break;
        c->reader.len += (size_t)n;
    }
    *err = sent;
    return -1;
}

static int send_json(struct call *c, uint8_t type, json_t *j, err_t *err)
{
    _cleanup_free_ char *s = json_dump_compact(j);
    json_decref(j);
    if (strlen(s) > AGENT_MAX_FRAME)
        return err_set(err, ERR_TOO_LARGE, 0, "too_large", "the request is over 1 MiB");
    return call_send(c, type, s, strlen(s), err);
}

/* Send a request and read its PROCESS answer (OK for DELETE, when rec is NULL). */
static int simple_call(int fd, uint8_t type, const void *payload, size_t len, int timeout_ms,
                       struct agentc_proc *rec, err_t *err)
{
    struct call c;
    struct agent_frame f;
    call_init(&c, fd, timeout_ms);
    int rc = call_send(&c, type, payload, len, err);
    if (rc == 0)
        rc = next_frame(&c, &f, err);
    if (rc == 0 && f.type != (rec ? AGENT_PROCESS : AGENT_OK))
        rc = unexpected(&f, err);
    if (rc == 0 && rec)
        rc = agentc_decode_process(&f, rec, err);
    call_end(&c);
    return rc;
}

static int pid_call(int fd, uint8_t type, json_t *j, int timeout_ms, struct agentc_proc *rec,
                    err_t *err)
{
    _cleanup_free_ char *s = json_dump_compact(j);
    json_decref(j);
    struct agentc_proc tmp = {0};
    int rc = simple_call(fd, type, s, strlen(s), timeout_ms,
                         type == AGENT_PROC_DELETE ? NULL
                         : rec                     ? rec
                                                   : &tmp,
                         err);
    agentc_proc_free(&tmp);
    return rc;
}

int agentc_proc_get(int fd, pid_t pid, int timeout_ms, struct agentc_proc *out, err_t *err)
{
    return pid_call(fd, AGENT_PROC_GET, json_pack("{s:i}", "pid", (int)pid), timeout_ms, out, err);
}

int agentc_proc_signal(int fd, pid_t pid, int sig, int timeout_ms, struct agentc_proc *out,
                       err_t *err)
{
    if (sig < 1 || sig > 64)
        return err_set(err, ERR_INVALID, 0, "invalid_signal", "a signal is a number 1-64");
    return pid_call(fd, AGENT_PROC_SIGNAL, json_pack("{s:i, s:i}", "pid", (int)pid, "signal", sig),
                    timeout_ms, out, err);
}

int agentc_proc_resize(int fd, pid_t pid, uint16_t cols, uint16_t rows, int timeout_ms,
                       struct agentc_proc *out, err_t *err)
{
    if (!cols || !rows)
        return err_set(err, ERR_INVALID, 0, "invalid_field", "cols and rows must be 1-65535");
    return pid_call(fd, AGENT_PROC_RESIZE,
                    json_pack("{s:i, s:i, s:i}", "pid", (int)pid, "cols", cols, "rows", rows),
                    timeout_ms, out, err);
}

int agentc_proc_delete(int fd, pid_t pid, int timeout_ms, err_t *err)
{
    return pid_call(fd, AGENT_PROC_DELETE, json_pack("{s:i}", "pid", (int)pid), timeout_ms, NULL,
                    err);
}

int agentc_proc_stdin(int fd, pid_t pid, const void *p, size_t n, bool eof, int timeout_ms,
                      struct agentc_proc *out, err_t *err)
{
    if (n > AGENT_PROCS_STDIN_MAX)
        return err_set(err, ERR_TOO_LARGE, 0, "too_large", "at most %u KiB of stdin at a time",
                       AGENT_PROCS_STDIN_MAX / 1024);
    _cleanup_free_ uint8_t *payload = xmalloc(n + 5);
    agent_proc_stdin_head(payload, (uint32_t)pid, eof ? AGENT_PROC_STDIN_EOF : 0);
    if (n)
        memcpy(payload + 5, p, n);
    struct agentc_proc tmp = {0};
    int rc = simple_call(fd, AGENT_PROC_STDIN, payload, n + 5, timeout_ms, out ? out : &tmp, err);
    agentc_proc_free(&tmp);
    return rc;
}

int agentc_proc_start(int fd, const struct agentc_proc_start *req, int timeout_ms,
                      struct agentc_proc *out, err_t *err)
{
    _cleanup_free_ char *exec = NULL;
    if (req->tag && strlen(req->tag) > 256)
        return err_set(err, ERR_INVALID, 0, "invalid_field", "a tag is at most 256 bytes");
    if (agentc_encode_exec(&req->exec, &exec, err) < 0)
        return -1;
    _cleanup_json_ json_t *j = json_loads(exec, 0, NULL);
    json_t *tag = req->tag ? json_string(req->tag) : NULL;
    json_t *command = req->command ? json_string(req->command) : NULL;
    if (tag)
        json_object_set_new(j, "tag", tag);
    if (command)
        json_object_set_new(j, "command", command);
    if (!j || (req->tag && !tag) || (req->command && !command))
        return err_set(err, ERR_INVALID, 0, "invalid_field", "tag and command must be UTF-8");
    _cleanup_free_ char *s = json_dump_compact(j);
    if (strlen(s) > AGENT_PROCS_STDIN_MAX) /* procs.sock takes requests of 256 KiB at most */
        return err_set(err, ERR_TOO_LARGE, 0, "too_large",
                       "the process's argv, env and command are over 256 KiB together");
    return simple_call(fd, AGENT_PROC_START, s, strlen(s), timeout_ms, out, err);
}

json_t *agentc_proc_list(int fd, int timeout_ms, err_t *err)
{
    struct call c;
    struct agent_frame f;
    call_init(&c, fd, timeout_ms);
    _cleanup_json_ json_t *arr = json_array();
    int rc = call_send(&c, AGENT_PS, NULL, 0, err);
    while (rc == 0 && (rc = next_frame(&c, &f, err)) == 0 && f.type == AGENT_PROCESS) {
        struct agentc_proc p;
        if (json_array_size(arr) >= LIST_MAX)
            rc = err_set(err, ERR_RUNTIME, 0, "agent_protocol", "the agent lists too many");
        else if ((rc = agentc_decode_process(&f, &p, err)) == 0)
            json_array_append_new(arr, p.json);
    }
    if (rc == 0 && f.type != AGENT_PROCESSES)
        rc = unexpected(&f, err);
    call_end(&c);
    return rc == 0 ? steal_pointer(&arr) : NULL;
}

/* --- output ----------------------------------------------------------------------------- */

void agentc_output_free(struct agentc_output *o)
{
    buf_free(&o->data);
    free(o->chunks);
    agentc_proc_free(&o->proc);
    *o = (struct agentc_output){0};
}

static void add_chunk(struct agentc_output *o, uint8_t stream, const uint8_t *p, size_t n)
{
    struct agentc_output_chunk *last = o->nchunks ? &o->chunks[o->nchunks - 1] : NULL;
    if (last && last->stream == stream) {
        last->len += n; /* consecutive frames of one stream make one chunk */
    } else {
        o->chunks = xrealloc(o->chunks, (o->nchunks + 1) * sizeof(*o->chunks));
        o->chunks[o->nchunks++] = (struct agentc_output_chunk){stream, o->data.len, n};
    }
    buf_append(&o->data, p, n);
}

/* OUTPUT_INFO, the data frames (within max), then PROCESS, all consistent with req. */
static int read_output(struct call *c, const struct agentc_output_req *req, size_t max,
                       struct agentc_output *o, err_t *err)
{
    struct agent_frame f;
    if (next_frame(c, &f, err) < 0)
        return -1;
    if (f.type != AGENT_OUTPUT_INFO)
        return unexpected(&f, err);
    if (agentc_decode_output_info(&f, &o->cursor, &o->dropped, err) < 0)
        return -1;
    if (o->cursor != req->cursor + o->dropped)
        return err_set(err, ERR_RUNTIME, 0, "agent_protocol", "OUTPUT_INFO does not fit");
    while (next_frame(c, &f, err) == 0) {
        if (f.type == AGENT_PROCESS) {
            if (agentc_decode_process(&f, &o->proc, err) < 0)
                return -1;
            if (o->proc.pid != req->pid || o->proc.output_end < o->cursor + o->data.len)
                return err_set(err, ERR_RUNTIME, 0, "agent_protocol", "the record does not fit");
            return 0;
        }
        if ((f.type != AGENT_STDOUT && f.type != AGENT_STDERR) || o->data.len + f.len > max)
            return f.type == AGENT_STDOUT || f.type == AGENT_STDERR
                       ? err_set(err, ERR_RUNTIME, 0, "agent_protocol", "more output than asked")
                       : unexpected(&f, err);
        add_chunk(o, f.type == AGENT_STDERR ? 2 : 1, f.payload, f.len);
    }
    return -1;
}

int agentc_proc_output(int fd, const struct agentc_output_req *req, struct agentc_output *out,
                       err_t *err)
{
    size_t max = req->max ? req->max : 256 * 1024;
    int wait = req->wait_ms > 0 ? req->wait_ms : 0;
    *out = (struct agentc_output){0};
    if (max > AGENT_PROCS_OUTPUT_MAX || wait > 10000 || req->cursor > (1ull << 62))
        return err_set(err, ERR_INVALID, 0, "invalid", "max, wait or cursor out of range");
    struct call c;
    call_init(&c, fd, (req->timeout_ms > 0 ? req->timeout_ms : AGENTC_PROCS_TIMEOUT_MS) + wait);
    c.cut = req->cut;
    c.cut_arg = req->cut_arg;
    json_t *j = json_pack("{s:i, s:I, s:I, s:i}", "pid", (int)req->pid, "cursor",
                          (json_int_t)req->cursor, "max", (json_int_t)max, "wait_ms", wait);
    int rc = send_json(&c, AGENT_PROC_OUTPUT, j, err);
    if (rc == 0)
        rc = read_output(&c, req, max, out, err);
    call_end(&c);
    if (rc < 0)
        agentc_output_free(out);
    return rc;
}
