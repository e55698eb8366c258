/*
 * procs.sock, served by PID 1 in its poll loop (docs/agent-protocol.md, "Processes"): each
 * connection carries one request and gets its answer, then the agent closes it. Nothing
 * here blocks: sockets are non-blocking, a request is at most PROCS_REQ_MAX bytes, an
 * answer at most AGENT_PROCS_OUTPUT_MAX bytes of output plus a record, and every state has
 * a deadline. An OUTPUT request with nothing new to say may wait (at most PROCS_WAIT_MAX):
 * it is answered when the process writes or ends, when the wait is over, or at once when
 * the client half-closes its side (the daemon does so when a lifecycle change wants the
 * sandbox). The agent closes first, so a checkpoint never finds a connection to the host.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "procs_internal.h"

#define OUTPUT_DEFAULT (256u * 1024u) /* output in an answer when the request names no max */

/* The members of the requests that name a process (each type takes some of them). */
struct preq {
    int64_t pid, signal, cols, rows, cursor, max, wait_ms;
};

#define F_PID                                                                                      \
    {                                                                                              \
        "pid", JF_INT, true, offsetof(struct preq, pid), 0, 1, 0x7fffffff                          \
    }

static const struct jfield pid_fields[] = {F_PID};
static const struct jfield signal_fields[] = {
    F_PID, {"signal", JF_INT, true, offsetof(struct preq, signal), 0, 1, 64}};
static const struct jfield resize_fields[] = {
    F_PID,
    {"cols", JF_INT, true, offsetof(struct preq, cols), 0, 1, 65535},
    {"rows", JF_INT, true, offsetof(struct preq, rows), 0, 1, 65535}};
static const struct jfield output_fields[] = {
    F_PID,
    {"cursor", JF_INT, true, offsetof(struct preq, cursor), 0, 0, INT64_MAX},
    {"max", JF_INT, false, offsetof(struct preq, max), 0, 1, AGENT_PROCS_OUTPUT_MAX},
    {"wait_ms", JF_INT, false, offsetof(struct preq, wait_ms), 0, 0, PROCS_WAIT_MAX}};

/* --- answering -------------------------------------------------------------------------- */

static void conn_close(struct pconn *c)
{
    char tmp[4096];
    while (recv(c->fd, tmp, sizeof(tmp), MSG_DONTWAIT) > 0)
        ; /* what the client sent and we did not read: closing then does not reset */
    close(c->fd);
    buf_free(&c->in);
    buf_free(&c->out);
    *c = (struct pconn){.fd = -1, .state = PC_FREE};
}

static void queue_frame(struct pconn *c, uint8_t type, const void *p, size_t n)
{
    uint8_t hdr[AGENT_HEADER_LEN];
    agent_frame_header(hdr, type, (uint32_t)n);
    buf_append(&c->out, hdr, sizeof(hdr));
    buf_append(&c->out, p, n);
}

/* Write what the socket takes; the connection closes once the answer is out (or broke). */
static void conn_flush(struct pconn *c)
{
    while (c->out_off < c->out.len) {
        ssize_t w = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            return;
        if (w <= 0)
            break;
        c->out_off += (size_t)w;
    }
    conn_close(c);
}

/* The answer is queued: send it. */
static void answer(struct pconn *c)
{
    c->state = PC_WRITE;
    c->proc = NULL;
    c->deadline = now_mono_ms() + PROCS_IO_MS;
    conn_flush(c);
}

static void answer_error(struct pconn *c, const char *code, const char *msg)
{
    _cleanup_json_ json_t *j =
        json_pack("{s:s, s:o}", "code", code, "message", json_string_lossy(msg, strlen(msg)));
    _cleanup_free_ char *s = json_dump_compact(j);
    queue_frame(c, AGENT_ERROR, s, strlen(s));
    answer(c);
}

static void queue_record(struct pconn *c, const struct proc *pr)
{
    _cleanup_free_ char *rec = procs_record(pr);
    queue_frame(c, AGENT_PROCESS, rec, strlen(rec));
}

static void answer_record(struct pconn *c, const struct proc *pr)
{
    queue_record(c, pr);
    answer(c);
}

/* OUTPUT's answer: where the bytes start (and what was dropped), the bytes, the record. */
static void answer_output(struct pconn *c, const struct proc *pr, uint64_t cursor, size_t max)
{
    static uint8_t tmp[AGENT_MAX_CHUNK];
    uint64_t from = cursor < pr->ring.start ? pr->ring.start : cursor, at = from;
    char info[96];
    int n = snprintf(info, sizeof(info), "{\"cursor\":%llu,\"dropped\":%llu}",
                     (unsigned long long)from, (unsigned long long)(from - cursor));
    queue_frame(c, AGENT_OUTPUT_INFO, info, (size_t)n);
    size_t sent = 0, len;
    uint8_t stream;
    while (sent < max && (len = ring_read(&pr->ring, &at, &stream, tmp,
                                          max - sent < sizeof(tmp) ? max - sent : sizeof(tmp)))) {
        queue_frame(c, stream == 2 ? AGENT_STDERR : AGENT_STDOUT, tmp, len);
        sent += len;
    }
    answer_record(c, pr);
}

/* A START in progress: answer once exec happened, or failed (see procs.c). */
static void start_progress(struct pconn *c)
{
    struct proc *pr = c->proc;
    if (pr->report_fd >= 0 || (pr->failed && pr->fail_stage == SPAWN_STAGE_EXEC && !pr->done))
        return; /* not yet; a missing program's record is answered once it ended (127) */
    if (!pr->failed || pr->fail_stage == SPAWN_STAGE_EXEC) {
        answer_record(c, pr);
        return;
    }
    const char *code = pr->fail_stage == SPAWN_STAGE_CWD    ? "bad_cwd"
                       : pr->fail_stage == SPAWN_STAGE_USER ? "bad_user"
                                                            : "spawn_failed";
    char msg[300];
    snprintf(msg, sizeof(msg), "%s: %s", agent_spawn_stage_name(pr->fail_stage),
             strerror(pr->fail_errno));
    answer_error(c, code, msg); /* read_report then forgets it: it never ran */
}

void procs_notify(struct agent_procs *ps, struct proc *pr)
{
    for (size_t i = 0; i < AGENT_PROCS_CONNS; i++) {
        struct pconn *c = &ps->conns[i];
        if (c->proc != pr)
            continue;
        if (c->state == PC_WAIT && (pr->ring.end > c->cursor || pr->done))
            answer_output(c, pr, c->cursor, c->max);
        else if (c->state == PC_START)
            start_progress(c);
    }
}

void procs_conns_drop(struct agent_procs *ps, struct proc *pr)
{
    for (size_t i = 0; i < AGENT_PROCS_CONNS; i++)
        if (ps->conns[i].proc == pr && ps->conns[i].state != PC_FREE)
            answer_error(&ps->conns[i], "no_process", "the process was deleted");
}

/* --- requests --------------------------------------------------------------------------- */

/* Decode a JSON request's members; an ERROR answer if they do not fit. */
static int decode(struct pconn *c, const struct agent_frame *f, const struct jfield *fields,
                  size_t n, struct preq *q)
{
    err_t err = {0};
    _cleanup_json_ json_t *obj = NULL;
    if (json_parse_object((const char *)f->payload, f->len, &obj, &err) < 0 ||
        json_decode_fields(obj, fields, n, q, &err) < 0) {
        answer_error(c, "invalid", err.msg);
        return -1;
    }
    return 0;
}

/* The process a request names; an ERROR answer if there is none. */
static struct proc *named(struct agent_procs *ps, struct pconn *c, int64_t pid)
{
    struct proc *pr = procs_find(ps, (pid_t)pid);
    if (!pr)
        answer_error(c, "no_process", "no background process has that pid");
    return pr;
}

static void on_start(struct agent_procs *ps, struct pconn *c, const struct agent_frame *f)
{
    err_t err = {0};
    json_t *obj = NULL;
    struct proc *pr = NULL;
    if (json_parse_object((const char *)f->payload, f->len, &obj, &err) == 0)
        pr = procs_start(ps, obj, &err);
    else
        snprintf(err.code, sizeof(err.code), "invalid");
    json_decref(obj);
    if (!pr) {
        answer_error(c, err.code, err.msg);
        return;
    }
    c->state = PC_START;
    c->proc = pr;
    c->deadline = now_mono_ms() + PROCS_START_MS;
    start_progress(c);
}

static void on_output(struct agent_procs *ps, struct pconn *c, const struct agent_frame *f)
{
    struct preq q = {.max = OUTPUT_DEFAULT};
    struct proc *pr;
    if (decode(c, f, output_fields, ARRAY_SIZE(output_fields), &q) < 0 ||
        !(pr = named(ps, c, q.pid)))
        return;
    if ((uint64_t)q.cursor > pr->ring.end) {
        answer_error(c, "cursor_future", "the cursor is past the end of the output");
        return;
    }
    if ((uint64_t)q.cursor < pr->ring.end || pr->done || q.wait_ms == 0) {
        answer_output(c, pr, (uint64_t)q.cursor, (size_t)q.max);
        return;
    }
    c->state = PC_WAIT; /* nothing new yet: until it comes, or the wait is over */
    c->proc = pr;
    c->cursor = (uint64_t)q.cursor;
    c->max = (size_t)q.max;
    c->deadline = now_mono_ms() + (double)q.wait_ms;
}

static void on_stdin(struct agent_procs *ps, struct pconn *c, const struct agent_frame *f)
{
    err_t err = {0};
    if (f->len < 5) {
        answer_error(c, "invalid", "PROC_STDIN starts with a pid and a flags byte");
        return;
    }
    const uint8_t *p = f->payload;
    uint32_t pid = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    struct proc *pr = named(ps, c, pid);
    if (!pr)
        return;
    if (procs_stdin(pr, p + 5, f->len - 5, p[4] & AGENT_PROC_STDIN_EOF, &err) < 0)
        answer_error(c, err.code, err.msg);
    else
        answer_record(c, pr);
}

/* GET, SIGNAL, RESIZE, DELETE: a process and maybe an act on it. */
static void on_simple(struct agent_procs *ps, struct pconn *c, const struct agent_frame *f)
{
    struct preq q = {0};
    err_t err = {0};
    const struct jfield *fields = f->type == AGENT_PROC_SIGNAL   ? signal_fields
                                  : f->type == AGENT_PROC_RESIZE ? resize_fields
                                                                 : pid_fields;
    size_t n = f->type == AGENT_PROC_SIGNAL   ? ARRAY_SIZE(signal_fields)
               : f->type == AGENT_PROC_RESIZE ? ARRAY_SIZE(resize_fields)
                                              : ARRAY_SIZE(pid_fields);
    struct proc *pr;
    if (decode(c, f, fields, n, &q) < 0 || !(pr = named(ps, c, q.pid)))
        return;
    int rc = 0;
    if (f->type == AGENT_PROC_SIGNAL)
        rc = procs_signal(pr, (int)q.signal, &err);
    else if (f->type == AGENT_PROC_RESIZE)
        rc = procs_resize(pr, (uint16_t)q.cols, (uint16_t)q.rows, &err);
    if (rc < 0) {
        answer_error(c, err.code, err.msg);
    } else if (f->type == AGENT_PROC_DELETE) {
        char ok[48];
        int len = snprintf(ok, sizeof(ok), "{\"pid\":%d}", (int)pr->pid);
        procs_forget(ps, pr);
        queue_frame(c, AGENT_OK, ok, (size_t)len);
        answer(c);
    } else {
        answer_record(c, pr);
    }
}

static void on_list(struct agent_procs *ps, struct pconn *c)
{
    for (size_t i = 0; i < ps->nprocs; i++)
        queue_record(c, ps->procs[i]);
    char end[32];
    int n = snprintf(end, sizeof(end), "{\"count\":%zu}", ps->nprocs);
    queue_frame(c, AGENT_PROCESSES, end, (size_t)n);
    answer(c);
}

/*
 * Before a gVisor checkpoint: the sandbox may hold no host socket (and no TCP endpoint but a
 * listener). Say why not when it must, and let go of nothing then; else close every listener
 * and connection to the host but this one, which closes once QUIESCED is out.
 */
static void on_quiesce(struct agent_procs *ps, struct pconn *c)
{
    char reason[300] = "";
    int tcp = agent_tcp_busy();
    bool ok = false;
    if (tcp > 0)
        snprintf(reason, sizeof(reason),
                 "%d TCP connection%s of the sandbox %s open or closing (TIME_WAIT), which gVisor "
                 "cannot checkpoint",
                 tcp, tcp == 1 ? "" : "s", tcp == 1 ? "is" : "are");
    else if (agent_quiesce(reason, sizeof(reason)) == 0)
        ok = true;
    if (ok)
        agent_procs_quiesce(ps, c->fd);
    _cleanup_json_ json_t *j = json_pack("{s:b, s:i}", "ok", ok, "tcp", tcp);
    if (!ok)
        json_object_set_new(j, "reason", json_string(reason));
    _cleanup_free_ char *s = json_dump_compact(j);
    queue_frame(c, AGENT_QUIESCED, s, strlen(s));
    answer(c);
}

void agent_procs_quiesce(struct agent_procs *ps, int keep_fd)
{
    for (size_t i = 0; i < AGENT_PROCS_CONNS; i++)
        if (ps->conns[i].state != PC_FREE && ps->conns[i].fd != keep_fd)
            conn_close(&ps->conns[i]);
    if (ps->listen_fd >= 0) {
        close(ps->listen_fd);
        ps->listen_fd = -1;
        unlink(ps->path);
    }
}

void agent_procs_resume(struct agent_procs *ps)
{
    if (ps && ps->listen_fd < 0)
        ps->listen_fd = agent_listen(ps->path);
}

static void handle_request(struct agent_procs *ps, struct pconn *c, const struct agent_frame *f)
{
    switch (f->type) {
    case AGENT_PING:
        queue_frame(c, AGENT_PONG, f->payload, f->len);
        answer(c);
        return;
    case AGENT_PS:
        on_list(ps, c);
        return;
    case AGENT_PROC_START:
        on_start(ps, c, f);
        return;
    case AGENT_PROC_OUTPUT:
        on_output(ps, c, f);
        return;
    case AGENT_PROC_STDIN:
        on_stdin(ps, c, f);
        return;
    case AGENT_QUIESCE:
        on_quiesce(ps, c);
        return;
    case AGENT_PROC_GET:
    case AGENT_PROC_SIGNAL:
    case AGENT_PROC_RESIZE:
    case AGENT_PROC_DELETE:
        on_simple(ps, c, f);
        return;
    }
    answer_error(c, "protocol", "procs.sock takes PING, PS and the PROC_* requests");
}

/* Read the request; once it is whole, act on it (bytes after it are ignored). */
static void on_readable(struct agent_procs *ps, struct pconn *c)
{
    size_t room = AGENT_HEADER_LEN + PROCS_REQ_MAX - c->in.len;
    char tmp[AGENT_MAX_CHUNK];
    ssize_t r = recv(c->fd, tmp, room < sizeof(tmp) ? room : sizeof(tmp), MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        conn_close(c);
        return;
    }
    if (r > 0)
        buf_append(&c->in, tmp, (size_t)r);
    struct agent_frame f;
    size_t used;
    int rc = agent_frame_parse((const uint8_t *)c->in.data, c->in.len, &f, &used);
    const uint8_t *h = (const uint8_t *)c->in.data;
    if (c->in.len >= 4 &&
        ((uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3]) > PROCS_REQ_MAX)
        answer_error(c, "too_large", "a procs.sock request is at most 256 KiB");
    else if (rc == AGENT_PARSE_INVALID)
        answer_error(c, "protocol", "invalid frame (type 0)");
    else if (rc == AGENT_PARSE_COMPLETE)
        handle_request(ps, c, &f);
}

/* A waiting OUTPUT whose client half-closed (or sent more) is answered now. */
static void on_waiting_input(struct pconn *c)
{
    char tmp[256];
    ssize_t r = recv(c->fd, tmp, sizeof(tmp), MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    answer_output(c, c->proc, c->cursor, c->max);
}

/* --- the listening socket and the slots ------------------------------------------------- */

/* Refuse a connection with ERROR busy, if its socket takes the frame now. */
static void reject(int fd)
{
    static const char busy[] =
        "{\"code\":\"busy\",\"message\":\"too many procs.sock connections\"}";
    uint8_t hdr[AGENT_HEADER_LEN];
    agent_frame_header(hdr, AGENT_ERROR, sizeof(busy) - 1);
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)busy, sizeof(busy) - 1}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    (void)sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    close(fd);
}

static void on_accept(struct agent_procs *ps)
{
    for (;;) {
        int fd = accept4(ps->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return; /* EAGAIN, or a transient error: poll tells us again */
        if (agent_auth_gate(fd, 1000) < 0) {
            close(fd);
            continue;
        }
        struct pconn *c = NULL;
        for (size_t i = 0; i < AGENT_PROCS_CONNS && !c; i++)
            if (ps->conns[i].state == PC_FREE)
                c = &ps->conns[i];
        if (!c) {
            reject(fd);
            continue;
        }
        *c = (struct pconn){.fd = fd, .state = PC_READ, .deadline = now_mono_ms() + PROCS_IO_MS};
    }
}

size_t procs_fill_conns(struct agent_procs *ps, struct pollfd *p, size_t at)
{
    size_t n = at;
    for (size_t i = 0; i < AGENT_PROCS_CONNS; i++) {
        struct pconn *c = &ps->conns[i];
        short ev = c->state == PC_READ    ? POLLIN
                   : c->state == PC_WAIT  ? POLLIN | POLLRDHUP
                   : c->state == PC_WRITE ? POLLOUT
                                          : 0;
        if (!ev || n >= AGENT_PROCS_SLOTS - 1)
            continue;
        p[n] = (struct pollfd){c->fd, ev, 0};
        ps->slots[n++] = (struct pslot){PS_CONN, c, c->fd};
    }
    /* Last: a slot freed above must not be matched with the revents of a new client. */
    if (ps->listen_fd >= 0) {
        p[n] = (struct pollfd){ps->listen_fd, POLLIN, 0};
        ps->slots[n++] = (struct pslot){PS_LISTEN, NULL, ps->listen_fd};
    }
    return n - at;
}

void procs_on_conn_slot(struct agent_procs *ps, const struct pslot *s, short revents)
{
    if (!revents)
        return;
    if (s->kind == PS_LISTEN) {
        on_accept(ps);
        return;
    }
    struct pconn *c = s->obj;
    if (c->fd != s->fd)
        return; /* closed (and maybe reused) meanwhile */
    if (c->state == PC_READ)
        on_readable(ps, c);
    else if (c->state == PC_WAIT)
        on_waiting_input(c);
    else if (c->state == PC_WRITE)
        conn_flush(c);
}

int procs_conn_timers(struct agent_procs *ps, double now)
{
    for (size_t i = 0; i < AGENT_PROCS_CONNS; i++) {
        struct pconn *c = &ps->conns[i];
        double left = c->deadline - now;
        /* Longer than any wait: the clock jumped (a restore elsewhere); it is over too. */
        if (c->state == PC_FREE || (left > 0 && left <= PROCS_IO_MS))
            continue;
        if (c->state == PC_WAIT)
            answer_output(c, c->proc, c->cursor, c->max);
        else if (c->state == PC_START)
            answer_record(c, c->proc); /* exec has not happened yet: it runs, as far as we know */
        else
            conn_close(c); /* a client that does not send its request, or read its answer */
    }
    double next = -1;
    for (size_t i = 0; i < AGENT_PROCS_CONNS; i++) {
        double left = ps->conns[i].deadline - now;
        if (ps->conns[i].state != PC_FREE && (next < 0 || left < next))
            next = left > 0 ? left : 0;
    }
    return next < 0 ? -1 : (int)next + 1;
}

/* --- PID 1's view ----------------------------------------------------------------------- */

struct agent_procs *agent_procs_open(const char *path, const struct agent_config *cfg, err_t *err)
{
    int fd = agent_listen(path);
    if (fd < 0)
        return err_sys(err, "cannot listen on %s", path), NULL;
    struct agent_procs *ps = xcalloc(1, sizeof(*ps));
    ps->cfg = cfg;
    ps->path = xstrdup(path);
    ps->listen_fd = fd;
    for (size_t i = 0; i < AGENT_PROCS_CONNS; i++)
        ps->conns[i] = (struct pconn){.fd = -1, .state = PC_FREE};
    return ps;
}

size_t agent_procs_poll_fill(struct agent_procs *ps, struct pollfd *p)
{
    /* The processes' slots first: dispatch reads their output before answering anyone. */
    size_t n = procs_fill_procs(ps, p, 0);
    n += procs_fill_conns(ps, p, n);
    ps->nslots = n;
    return n;
}

int agent_procs_timeout(struct agent_procs *ps)
{
    double now = now_mono_ms();
    int a, b = procs_conn_timers(ps, now);
    while ((a = procs_proc_timers(ps, now)) == 0)
        ; /* each round ends one process's wait */
    return a < 0 ? b : b < 0 || a < b ? a : b;
}

void agent_procs_dispatch(struct agent_procs *ps, const struct pollfd *p, size_t n)
{
    for (size_t i = 0; i < n && i < ps->nslots; i++) {
        const struct pslot *s = &ps->slots[i];
        if (s->kind == PS_LISTEN || s->kind == PS_CONN)
            procs_on_conn_slot(ps, s, p[i].revents);
        else
            procs_on_proc_slot(ps, s, p[i].revents);
    }
    ps->nslots = 0;
}

void agent_procs_unlink(struct agent_procs *ps)
{
    if (ps)
        unlink(ps->path);
}
