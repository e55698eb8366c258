/*
 * GET /sandboxes/{id}/processes/{pid}/output: a background process's output from a cursor
 * (an absolute byte offset in everything it wrote, both streams together), as JSON, or with
 * ?stream=true followed as ndjson:
 *
 *   {"type":"stdout"|"stderr","output":"...","cursor":N}  N: the offset just after it
 *   {"type":"dropped","bytes":D,"cursor":N}  D bytes the agent no longer kept; on from N
 *   {"type":"waiting","cursor":N}  the sandbox is hibernated, paused or being changed
 *   {"type":"ping","cursor":N}     after 15 s without a line
 *   {"type":"exit","output":"Process exited with code C","exit_code":C,"signal":S|null,
 *    "cursor":N}                   the last line, after all output
 *   {"type":"error","output":"...","code":"...","cursor":N}  the last line: it cannot go on
 *
 * The stream holds no connection into the sandbox: it is a loop of short long-polls (at
 * most FOLLOW_WAIT_MS each), so it goes on across a fork of the sandbox, waits without
 * waking it while it is hibernated (not counting as activity) and goes on when it runs
 * again; a client cut off (or a daemon restart) reconnects with ?cursor= of its last line.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "h_processes.h"
#include "sandbox/processes.h"

#define OUTPUT_DEFAULT  (256u * 1024u) /* bytes a JSON answer or a stream step reads at most */
#define FOLLOW_WAIT_MS  1000           /* one long-poll: the read lock is held this long at most */
#define FOLLOW_LATER_MS 250            /* between looks at a sandbox that cannot be read now */
#define FOLLOW_PING_MS  15000          /* a line at least this often */
#define FOLLOW_RETRIES  40 /* agent failures in a row (FOLLOW_LATER_MS apart) before giving up */

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

static const char *stream_name(uint8_t stream)
{
    return stream == 2 ? "stderr" : "stdout";
}

/* --- JSON ------------------------------------------------------------------------------- */

/* {pid, start, dropped, next_cursor, done, chunks: [{stream, data, cursor}], process}. */
static json_t *output_json(pid_t pid, const struct agentc_output *o)
{
    uint64_t end = o->cursor + o->data.len;
    bool done = !o->proc.running && end >= o->proc.output_end;
    size_t keep = o->data.len;
    if (!done && o->nchunks) { /* a character cut in two waits for its end */
        const struct agentc_output_chunk *last = &o->chunks[o->nchunks - 1];
        keep = last->off + utf8_complete(o->data.data + last->off, last->len);
    }
    json_t *chunks = json_array();
    for (size_t i = 0; i < o->nchunks && o->chunks[i].off < keep; i++) {
        const struct agentc_output_chunk *c = &o->chunks[i];
        size_t len = c->off + c->len <= keep ? c->len : keep - c->off;
        json_array_append_new(chunks,
                              json_pack("{s:s, s:o, s:I}", "stream", stream_name(c->stream), "data",
                                        json_string_lossy(o->data.data + c->off, len), "cursor",
                                        (json_int_t)(o->cursor + c->off + len)));
    }
    return json_pack("{s:i, s:I, s:I, s:I, s:b, s:o, s:O}", "pid", (int)pid, "start",
                     (json_int_t)o->cursor, "dropped", (json_int_t)o->dropped, "next_cursor",
                     (json_int_t)(o->cursor + keep), "done", done, "chunks", chunks, "process",
                     o->proc.json);
}

/* --- the stream ------------------------------------------------------------------------- */

struct follow {
    sbx_mgr_t *sbx;
    user_t user;
    char *key;
    pid_t pid;
    uint64_t cursor; /* the next byte to ask the agent for */
    char carry[4];   /* the start of a character cut in two, not sent yet */
    size_t carry_len;
    uint8_t carry_stream;
    struct agentc_output first; /* read before the answer started */
    bool has_first, done;
    struct api_stream *s;
    double last_line;
};

/* Where a client resumes: after what was sent. */
static uint64_t resume_at(const struct follow *f)
{
    return f->cursor - f->carry_len;
}

static bool send_line(struct follow *f, json_t *obj)
{
    _cleanup_free_ char *line = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    f->last_line = now_mono_ms();
    if (!line)
        return true;
    size_t n = strlen(line);
    line[n] = '\n';
    return api_stream_write(f->s, line, n + 1);
}

static bool send_text(struct follow *f, uint8_t stream, const char *p, size_t n)
{
    return send_line(f, json_pack("{s:s, s:o, s:I}", "type", stream_name(stream), "output",
                                  json_string_lossy(p, n), "cursor", (json_int_t)resume_at(f)));
}

/* The held bytes go out as they are (a character that will not be completed). */
static bool flush_carry(struct follow *f)
{
    size_t n = f->carry_len;
    f->carry_len = 0;
    return n == 0 || send_text(f, f->carry_stream, f->carry, n);
}

static bool send_chunk(struct follow *f, uint8_t stream, const char *p, size_t n)
{
    if (f->carry_len && f->carry_stream != stream && !flush_carry(f))
        return false;
    buf_t b = {0};
    buf_append(&b, f->carry, f->carry_len);
    buf_append(&b, p, n);
    size_t whole = utf8_complete(b.data, b.len);
    f->carry_len = b.len - whole;
    f->carry_stream = stream;
    memcpy(f->carry, b.data + whole, f->carry_len);
    f->cursor += n;
    bool ok = whole == 0 || send_text(f, stream, b.data, whole);
    buf_free(&b);
    return ok;
}

static bool send_exit(struct follow *f, const struct agentc_proc *p)
{
    char msg[64];
    snprintf(msg, sizeof(msg), "Process exited with code %d", p->exit_code);
    f->done = true;
    return flush_carry(f) &&
           send_line(f, json_pack("{s:s, s:s, s:i, s:o, s:I}", "type", "exit", "output", msg,
                                  "exit_code", p->exit_code, "signal",
                                  p->signal ? json_integer(p->signal) : json_null(), "cursor",
                                  (json_int_t)f->cursor));
}

/* One read's lines: what was dropped, the chunks, and the exit once all output is out. */
static bool send_output(struct follow *f, const struct agentc_output *o)
{
    if (o->dropped &&
        (!flush_carry(f) ||
         !send_line(f, json_pack("{s:s, s:I, s:I}", "type", "dropped", "bytes",
                                 (json_int_t)o->dropped, "cursor", (json_int_t)o->cursor))))
        return false;
    f->cursor = o->cursor;
    for (size_t i = 0; i < o->nchunks; i++)
        if (!send_chunk(f, o->chunks[i].stream, o->data.data + o->chunks[i].off, o->chunks[i].len))
            return false;
    if (!o->proc.running && f->cursor >= o->proc.output_end)
        return send_exit(f, &o->proc);
    return true;
}

static bool send_state(struct follow *f, const char *type)
{
    return send_line(f, json_pack("{s:s, s:I}", "type", type, "cursor", (json_int_t)resume_at(f)));
}

static bool send_error(struct follow *f, const err_t *err)
{
    return flush_carry(f) &&
           send_line(f, json_pack("{s:s, s:s, s:s, s:I}", "type", "error", "output", err->msg,
                                  "code", err->code, "cursor", (json_int_t)resume_at(f)));
}

static bool client_gone(const struct api_stream *s)
{
    struct pollfd p = {s->client_fd, POLLRDHUP, 0};
    return s->client_fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLRDHUP));
}

/* A failure worth another try: the agent did not answer (a container restarting), or
 * had all its procs.sock connections busy (many followers at once). */
static bool transient(const err_t *err)
{
    if (err->kind == ERR_LIMIT)
        return strcmp(err->code, "agent_busy") == 0;
    return err->kind == ERR_RUNTIME &&
           (strcmp(err->code, "agent_unavailable") == 0 || strcmp(err->code, "agent_timeout") == 0);
}

/* One turn of the loop: false once the stream is over. */
static bool follow_step(struct follow *f, bool *waiting, int *fails)
{
    struct agentc_output o = {0};
    err_t err = {0};
    int rc = sbx_proc_follow(f->sbx, &f->user, f->key, f->pid, f->cursor, OUTPUT_DEFAULT,
                             FOLLOW_WAIT_MS, &f->s->client_fd, &o, &err);
    bool ok = true;
    if (rc == 0) {
        *fails = 0;
        *waiting = false;
        ok = send_output(f, &o);
    } else if (rc == SBX_FOLLOW_LATER || (transient(&err) && ++*fails < FOLLOW_RETRIES)) {
        if (rc == SBX_FOLLOW_LATER && !*waiting)
            ok = send_state(f, "waiting");
        *waiting = rc == SBX_FOLLOW_LATER;
        ok = ok && api_stream_wait(f->s, FOLLOW_LATER_MS);
    } else {
        send_error(f, &err);
        ok = false;
    }
    agentc_output_free(&o);
    if (ok && !f->done && now_mono_ms() - f->last_line > FOLLOW_PING_MS)
        ok = send_state(f, "ping");
    /* The client left, or the daemon stops: a stream of a quiet process notices here. */
    return ok && !f->done && api_stream_wait(f->s, 0) && !client_gone(f->s);
}

static void follow_main(struct api_stream *s, void *ctx)
{
    struct follow *f = ctx;
    f->s = s;
    f->last_line = now_mono_ms();
    bool ok = !f->has_first || send_output(f, &f->first);
    bool waiting = false;
    int fails = 0;
    while (ok && !f->done && follow_step(f, &waiting, &fails))
        ;
    agentc_output_free(&f->first);
    free(f->key);
    free(f);
}

/* --- the route -------------------------------------------------------------------------- */

static int query_u64(api_req_t *r, const char *name, long long min, long long max, long long dflt,
                     long long *out, err_t *err)
{
    const char *v = api_query(r, name);
    *out = dflt;
    if (v && !parse_int(v, min, max, out))
        return err_set(err, ERR_INVALID, 0,
                       strcmp(name, "cursor") == 0 ? "invalid_cursor" : "invalid_query",
                       "?%s must be a number %lld-%lld", name, min, max);
    return 0;
}

/* Start following: read once now (an unknown pid is a 404, a cursor from the future a
 * 400) unless the sandbox cannot be read now, then stream. */
static int start_follow(api_req_t *r, const char *id, pid_t pid, uint64_t cursor, err_t *err)
{
    struct follow *f = xcalloc(1, sizeof(*f));
    *f = (struct follow){.sbx = r->api->sbx, .user = r->user, .pid = pid, .cursor = cursor};
    int rc =
        sbx_proc_follow(f->sbx, &f->user, id, pid, cursor, OUTPUT_DEFAULT, 0, NULL, &f->first, err);
    f->has_first = rc == 0;
    f->key = xstrdup(id);
    if (rc < 0 || api_reply_stream(r, "application/x-ndjson", follow_main, f, err) < 0) {
        agentc_output_free(&f->first);
        free(f->key);
        free(f);
        return -1;
    }
    return 0;
}

int h_proc_output(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    pid_t pid;
    long long cursor, limit;
    if (api_proc_pid(r, &pid, err) < 0 ||
        query_u64(r, "cursor", 0, 1LL << 62, 0, &cursor, err) < 0 ||
        query_u64(r, "limit", 1, AGENT_PROCS_OUTPUT_MAX, OUTPUT_DEFAULT, &limit, err) < 0)
        return -1;
    const char *stream = api_query(r, "stream");
    if (stream && (strcmp(stream, "true") == 0 || strcmp(stream, "1") == 0))
        return start_follow(r, id, pid, (uint64_t)cursor, err);
    struct agentc_output o = {0};
    if (sbx_proc_output(r->api->sbx, &r->user, id, pid, (uint64_t)cursor, (size_t)limit, &o, err) <
        0)
        return -1;
    api_reply_json(r, 200, output_json(pid, &o));
    agentc_output_free(&o);
    return 0;
}
