/*
 * envd's process.Process over our background processes (sandbox/processes.h): the sandbox's
 * agent keeps them, their PIDs are the sandbox's own, and their output rings outlive a
 * client, a fork or a hibernation. Start and Connect stream a process's events: its pid,
 * its output as it comes (stdout/stderr, or pty), keepalives, and its end, as envd does:
 *
 *   {"event": {"start": {"pid": N}}}
 *   {"event": {"data": {"stdout" | "stderr" | "pty": "<base64>"}}}
 *   {"event": {"keepalive": {}}}
 *   {"event": {"end": {"exitCode": C, "exited": true, "status": "exit status C"}}}
 *
 * A Start's Connect-Timeout-Ms is the process's timeout too: the agent kills its group then,
 * and the stream ends with deadline_exceeded. A client that goes away leaves the process
 * running (E2B's background commands); Connect follows it again from the output then.
 */
#include <ctype.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "e2b_internal.h"

#define FOLLOW_WAIT_MS  1000 /* one long-poll of the process's output */
#define FOLLOW_LATER_MS 250  /* between looks at a sandbox that cannot be read now */
#define FOLLOW_RETRIES  40   /* agent failures in a row before the stream gives up */
#define OUTPUT_STEP     (256u * 1024u)

/* ---- events ------------------------------------------------------------------------------ */

static json_t *event(const char *kind, json_t *v)
{
    return json_pack("{s:{s:o}}", "event", kind, v);
}

/* Go's (*os.ProcessState).String(), which envd reports: "exit status 1", "signal: killed". */
static void status_text(const struct agentc_proc *p, char *out, size_t size)
{
    if (!p->signal) {
        snprintf(out, size, "exit status %d", p->exit_code);
        return;
    }
    const char *name = strsignal(p->signal);
    snprintf(out, size, "signal: %s", name ? name : "unknown");
    out[8] = (char)tolower((unsigned char)out[8]);
}

static json_t *end_event(const struct agentc_proc *p)
{
    char status[64];
    status_text(p, status, sizeof(status));
    bool failed = p->signal || p->exit_code != 0;
    json_t *end = json_pack("{s:i, s:b, s:s}", "exitCode", p->signal ? -1 : p->exit_code, "exited",
                            p->signal == 0, "status", status);
    if (failed)
        json_object_set_new(end, "error", json_string(status));
    return event("end", end);
}

/* ---- following a process ----------------------------------------------------------------- */

struct follow {
    sbx_mgr_t *m;
    user_t owner;
    char sid[65];
    pid_t pid;
    bool tty;
    uint64_t cursor;
    double deadline; /* now_mono_ms(); 0: none */
    int keepalive_ms;
};

static bool client_gone(const struct api_stream *s)
{
    struct pollfd p = {s->client_fd, POLLRDHUP, 0};
    return s->client_fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLRDHUP));
}

static bool transient(const err_t *err)
{
    return (err->kind == ERR_LIMIT && strcmp(err->code, "agent_busy") == 0) ||
           (err->kind == ERR_RUNTIME && (strcmp(err->code, "agent_unavailable") == 0 ||
                                         strcmp(err->code, "agent_timeout") == 0));
}

/* Send one read's output; at the end, the end event (true: the stream is over). */
static bool send_output(struct e2b_stream *st, struct follow *f, const struct agentc_output *o,
                        bool *over)
{
    f->cursor = o->cursor;
    for (size_t i = 0; i < o->nchunks; i++) {
        const struct agentc_output_chunk *c = &o->chunks[i];
        const char *kind = f->tty ? "pty" : c->stream == 2 ? "stderr" : "stdout";
        /* DataEvent's oneof output: its member (stdout, stderr or pty) is the JSON field */
        if (!e2b_rpc_send(st,
                          event("data", json_pack("{s:o}", kind,
                                                  e2b_base64_json(o->data.data + c->off, c->len)))))
            return false;
        f->cursor += c->len;
    }
    *over = !o->proc.running && f->cursor >= o->proc.output_end;
    if (!*over)
        return true;
    if (o->proc.timed_out) { /* killed at the deadline: the call timed out, as envd says it */
        err_t err = {0};
        err_set(&err, ERR_UNAVAILABLE, 0, "deadline_exceeded", "the command's deadline passed");
        e2b_rpc_end(st, &err);
        return true;
    }
    bool ok = e2b_rpc_send(st, end_event(&o->proc));
    if (ok)
        e2b_rpc_end(st, NULL);
    return ok;
}

/* One look at the process: false once the stream is over. */
static bool follow_step(struct e2b_stream *st, struct follow *f, int *fails)
{
    double now = now_mono_ms();
    if (f->deadline && now >= f->deadline) {
        err_t err = {0};
        err_set(&err, ERR_UNAVAILABLE, 0, "deadline_exceeded", "the request's deadline passed");
        e2b_rpc_end(st, &err);
        return false;
    }
    int wait = FOLLOW_WAIT_MS;
    if (f->deadline && f->deadline - now < wait)
        wait = (int)(f->deadline - now) + 1;
    struct agentc_output o = {0};
    err_t err = {0};
    int rc = sbx_proc_follow(f->m, &f->owner, f->sid, f->pid, f->cursor, OUTPUT_STEP, wait,
                             &st->s->client_fd, &o, &err);
    bool more = true, over = false;
    if (rc == 0) {
        *fails = 0;
        more = send_output(st, f, &o, &over) && !over;
    } else if (rc == SBX_FOLLOW_LATER || (transient(&err) && ++*fails < FOLLOW_RETRIES)) {
        more = api_stream_wait(st->s, FOLLOW_LATER_MS);
    } else if (strcmp(err.code, "sandbox_not_running") == 0 ||
               strcmp(err.code, "sandbox_not_found") == 0) {
        /* The sandbox went: the connection drops, as it does when E2B's sandbox dies. */
        e2b_rpc_abort(st);
        more = false;
    } else {
        e2b_rpc_end(st, &err);
        more = false;
    }
    agentc_output_free(&o);
    if (more && now_mono_ms() - st->last_sent >= f->keepalive_ms)
        more = e2b_rpc_send(st, event("keepalive", json_object()));
    return more && api_stream_wait(st->s, 0) && !client_gone(st->s);
}

static void follow_main(struct api_stream *s, void *ctx)
{
    struct follow *f = ctx;
    struct e2b_stream st = {s, now_mono_ms()};
    int fails = 0;
    if (e2b_rpc_send(&st, event("start", json_pack("{s:i}", "pid", (int)f->pid))))
        while (follow_step(&st, f, &fails))
            ;
    free(f);
}

static int stream_process(api_req_t *r, struct e2b_box *b, pid_t pid, bool tty, uint64_t cursor,
                          err_t *err)
{
    struct follow *f = xcalloc(1, sizeof(*f));
    *f = (struct follow){.m = r->api->sbx,
                         .owner = b->owner,
                         .pid = pid,
                         .tty = tty,
                         .cursor = cursor,
                         .deadline = e2b_rpc_deadline(r),
                         .keepalive_ms = e2b_rpc_keepalive_ms(r)};
    snprintf(f->sid, sizeof(f->sid), "%s", b->rec.sandbox_id);
    if (e2b_rpc_stream(r, follow_main, f, err) < 0) {
        free(f);
        return -1;
    }
    return 0;
}

/* ---- Start ------------------------------------------------------------------------------ */

/* The env of a Start: HOME and USER of its user, then the request's envs. */
static json_t *start_env(const struct e2b_user *u, json_t *envs)
{
    json_t *env = json_pack("{s:s, s:s}", "HOME", u->home, "USER", u->name);
    if (json_is_object(envs))
        json_object_update(env, envs);
    return env;
}

/* argv: cmd then args. */
static json_t *start_argv(json_t *proc, err_t *err)
{
    json_t *cmd = e2b_rpc_get(proc, "cmd", NULL), *args = e2b_rpc_get(proc, "args", NULL);
    if (!json_is_string(cmd) || !json_string_length(cmd) || (args && !json_is_array(args))) {
        err_set(err, ERR_INVALID, 0, "invalid_argument", "process.cmd is required");
        return NULL;
    }
    json_t *argv = json_pack("[O]", cmd);
    if (args)
        json_array_extend(argv, args);
    return argv;
}

int e2b_rpc_process_start(api_req_t *r, err_t *err)
{
    json_t *msg _cleanup_json_ = NULL;
    struct e2b_box b;
    struct e2b_user u;
    if (e2b_rpc_message(r, &msg, err) < 0 || e2b_box_envd(r, &b, false, err) < 0)
        return -1;
    json_t *proc = e2b_rpc_get(msg, "process", NULL), *pty = e2b_rpc_get(msg, "pty", NULL);
    json_t *size = e2b_rpc_get(pty, "size", NULL), *in = e2b_rpc_get(msg, "stdin", NULL);
    json_t *cwd = e2b_rpc_get(proc, "cwd", NULL), *tag = e2b_rpc_get(msg, "tag", NULL);
    char dir[AGENT_PATH_MAX];
    json_t *argv _cleanup_json_ = start_argv(proc, err);
    json_t *env _cleanup_json_ = NULL;
    json_t *out _cleanup_json_ = NULL;
    int rc = argv && e2b_user_of(r, &b, NULL, &u, err) == 0 &&
                     (!json_is_string(cwd) ||
                      e2b_resolve_path(&u, json_string_value(cwd), dir, err) == 0)
                 ? 0
                 : -1;
    if (rc == 0) {
        env = start_env(&u, e2b_rpc_get(proc, "envs", NULL));
        double deadline = e2b_rpc_deadline(r);
        struct sbx_proc_req q = {
            .argv = argv,
            .env = env,
            .cwd = json_is_string(cwd) ? dir : NULL,
            .user = u.name,
            .tty = pty != NULL,
            .cols = (uint16_t)json_integer_value(e2b_rpc_get(size, "cols", NULL)),
            .rows = (uint16_t)json_integer_value(e2b_rpc_get(size, "rows", NULL)),
            .stdin_pipe = !in || json_is_true(in), /* envd's default: a stdin */
            .tag = json_string_value(tag),
            .timeout_ms = deadline > 0 ? (int64_t)(deadline - now_mono_ms()) + 1 : 0};
        if (q.cols > 1000 || q.rows > 1000)
            q.cols = q.rows = 0;
        rc = sbx_check_exec_argv(argv, env, err) < 0
                 ? -1
                 : sbx_proc_start(r->api->sbx, &b.owner, b.rec.sandbox_id, &q, &out, err);
    }
    if (rc == 0)
        rc = stream_process(r, &b, (pid_t)json_integer_value(json_object_get(out, "pid")),
                            pty != NULL, 0, err);
    e2b_box_clear(&b);
    return rc;
}

/* ---- the process a request selects: {"pid": N} or {"tag": "..."} ------------------------- */

int e2b_process_select(api_req_t *r, struct e2b_box *b, json_t *msg, pid_t *pid, err_t *err)
{
    json_t *sel = e2b_rpc_get(msg, "process", NULL);
    json_t *p = e2b_rpc_get(sel, "pid", NULL), *tag = e2b_rpc_get(sel, "tag", NULL);
    if (json_is_integer(p) && json_integer_value(p) > 0 && json_integer_value(p) < 0x7fffffff) {
        *pid = (pid_t)json_integer_value(p);
        return 0;
    }
    if (!json_is_string(tag))
        return err_set(err, ERR_INVALID, 0, "invalid_argument", "select a process by pid or tag");
    json_t *list _cleanup_json_ = NULL;
    if (sbx_proc_list(r->api->sbx, &b->owner, b->rec.sandbox_id, &list, err) < 0)
        return -1;
    json_t *v;
    size_t i;
    *pid = 0;
    json_array_foreach(json_object_get(list, "processes"), i, v)
    {
        const char *t = json_string_value(json_object_get(v, "tag"));
        if (t && strcmp(t, json_string_value(tag)) == 0)
            *pid = (pid_t)json_integer_value(json_object_get(v, "pid")); /* the latest */
    }
    return *pid ? 0
                : err_set(err, ERR_NOT_FOUND, 0, "process_not_found",
                          "process with tag %.64s not found", json_string_value(tag));
}

int e2b_rpc_process_connect(api_req_t *r, err_t *err)
{
    json_t *msg _cleanup_json_ = NULL;
    json_t *rec _cleanup_json_ = NULL;
    struct e2b_box b;
    pid_t pid;
    if (e2b_rpc_message(r, &msg, err) < 0 || e2b_box_envd(r, &b, false, err) < 0)
        return -1;
    int rc = e2b_process_select(r, &b, msg, &pid, err);
    if (rc == 0)
        rc = sbx_proc_get(r->api->sbx, &b.owner, b.rec.sandbox_id, pid, &rec, err);
    if (rc == 0) /* what comes from now on, as envd's Connect */
        rc = stream_process(r, &b, pid, json_is_true(json_object_get(rec, "tty")),
                            (uint64_t)json_integer_value(json_object_get(rec, "output_end")), err);
    e2b_box_clear(&b);
    return rc;
}
