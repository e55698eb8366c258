/*
 * Background processes: the daemon's relay to a sandbox's agent (see processes.h). Each
 * call holds the sandbox's lock for reading for one short exchange on a fresh procs.sock
 * connection, which the agent closes before the call returns: nothing stays open into the
 * sandbox, so forks, hibernations and snapshots never wait long for a process call, and
 * CRIU never finds a connection to the host.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "processes.h"
#include "sandbox_internal.h"

#define CONNECT_MS     5000
#define FOLLOW_LOCK_MS 100 /* a follower waits this long for the lock, then tries later */

/* One exchange with a sandbox's procs.sock, the lock held for reading. */
struct pcall {
    sbx_mgr_t *m;
    struct sbx_live *l;
    bool counted; /* sbx_use_begin's: locked for reading, counted as work (the reaper waits) */
    bool locked;  /* a follower's: locked for reading only */
    int fd;
    int64_t owner_id;
    char id[65];
};

static int connect_procs(struct pcall *c, err_t *err)
{
    _cleanup_free_ char *sock = xasprintf("%s/%s/sock", c->m->sandboxes_dir, c->id);
    int dirfd _cleanup_close_ = open(sock, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    c->fd = agentc_connect(dirfd, AGENT_PROCS_SOCKET, &c->l->peer, CONNECT_MS, err);
    if (c->fd < 0 && err && err->errnum == ENOENT)
        return err_set(err, ERR_CONFLICT, 0, "unsupported",
                       "this sandbox's agent predates background processes (a daemon upgrade "
                       "since it started); start a new sandbox for them");
    return c->fd < 0 ? -1 : 0;
}

static void call_close(struct pcall *c, bool touch)
{
    agentc_close(c->fd); /* the agent closed first already: this returns at once */
    c->fd = -1;
    if (c->l && touch)
        store_sandbox_touch(c->m->store, c->id);
    if (c->l && c->counted) {
        sbx_use_end(c->m, c->l); /* the read lock and the count of work in it */
    } else if (c->l) {
        if (c->locked)
            pthread_rwlock_unlock(&c->l->lock);
        sbx_live_put(c->m, c->l);
    }
    c->l = NULL;
    c->locked = c->counted = false;
}

/* Wake the sandbox if it sleeps, lock it for reading as work inside it (the state machine's
 * "process" operation: it must run), connect to procs.sock. */
static int call_open(sbx_mgr_t *m, const user_t *owner, const char *key, struct pcall *c,
                     err_t *err)
{
    *c = (struct pcall){.m = m, .fd = -1};
    sandbox_rec_t r;
    if (sbx_use_begin(m, owner, key, &c->l, &r, err) < 0)
        return -1;
    c->counted = true;
    snprintf(c->id, sizeof(c->id), "%s", r.id);
    c->owner_id = r.owner_id;
    store_sandbox_rec_clear(&r);
    if (connect_procs(c, err) < 0) {
        call_close(c, false);
        return -1;
    }
    return 0;
}

/* The next request of the same call goes on a new connection (one request each). */
static int call_reconnect(struct pcall *c, err_t *err)
{
    agentc_close(c->fd);
    c->fd = -1;
    return connect_procs(c, err);
}

/* Take the record's JSON out of p into *out. */
static void take_record(struct agentc_proc *p, json_t **out)
{
    *out = steal_pointer(&p->json);
}

static int start_locked(struct pcall *c, const struct sbx_proc_req *q, struct agentc_proc *p,
                        err_t *err)
{
    _cleanup_free_ const char **argv = json_strv_borrow(q->argv);
    char **env = json_envv(q->env);
    struct agentc_proc_start ar = {.exec = {.argv = argv,
                                            .env = (const char *const *)env,
                                            .cwd = q->cwd,
                                            .user = q->user,
                                            .tty = q->tty,
                                            .cols = q->cols,
                                            .rows = q->rows,
                                            .stdin_pipe = q->stdin_pipe || q->stdin_data,
                                            .timeout_ms = q->timeout_ms},
                                   .tag = q->tag,
                                   .command = q->command};
    int rc = agentc_proc_start(c->fd, &ar, 0, p, err);
    json_strv_free(env);
    if (rc < 0 || !q->stdin_data || !p->running)
        return rc;
    /* The first input: text for a pipe (then its end, as exec does) or typed at a PTY. */
    struct agentc_proc fed = {0};
    if (call_reconnect(c, err) < 0 ||
        agentc_proc_stdin(c->fd, p->pid, q->stdin_data, q->stdin_len, !q->tty, 0, &fed, err) < 0)
        return err->kind == ERR_CONFLICT ? 0 : -1; /* it ended already: its record stands */
    agentc_proc_free(p);
    *p = fed;
    return 0;
}

int sbx_proc_start(sbx_mgr_t *m, const user_t *owner, const char *key, const struct sbx_proc_req *q,
                   json_t **out, err_t *err)
{
    struct pcall c;
    struct agentc_proc p = {0};
    if (q->stdin_len > AGENT_PROCS_STDIN_MAX)
        return err_set(err, ERR_TOO_LARGE, 0, "too_large", "stdin is at most %u KiB at start",
                       AGENT_PROCS_STDIN_MAX / 1024);
    if (call_open(m, owner, key, &c, err) < 0)
        return -1;
    int rc = start_locked(&c, q, &p, err);
    call_close(&c, true);
    if (rc == 0) {
        sbx_event(m, c.owner_id, c.id, "process_started",
                  json_pack("{s:i, s:O}", "pid", (int)p.pid, "command",
                            json_object_get(p.json, "command")));
        take_record(&p, out);
    }
    agentc_proc_free(&p);
    return rc;
}

int sbx_proc_list(sbx_mgr_t *m, const user_t *owner, const char *key, json_t **out, err_t *err)
{
    struct pcall c;
    if (call_open(m, owner, key, &c, err) < 0)
        return -1;
    json_t *list = agentc_proc_list(c.fd, 0, err);
    call_close(&c, false); /* looking is not activity (a console polls it) */
    if (!list)
        return -1;
    *out = json_pack("{s:o}", "processes", list);
    return 0;
}

/* What the calls on one process do, on the connection. */
enum proc_op { OP_GET, OP_STDIN, OP_SIGNAL, OP_RESIZE, OP_DELETE };

struct proc_args {
    enum proc_op op;
    pid_t pid;
    const void *data;
    size_t len;
    bool eof;
    int sig;
    uint16_t cols, rows;
};

static int proc_call(sbx_mgr_t *m, const user_t *owner, const char *key, const struct proc_args *a,
                     json_t **out, err_t *err)
{
    struct pcall c;
    struct agentc_proc p = {0};
    if (call_open(m, owner, key, &c, err) < 0)
        return -1;
    int rc;
    switch (a->op) {
    case OP_STDIN:
        rc = agentc_proc_stdin(c.fd, a->pid, a->data, a->len, a->eof, 0, &p, err);
        break;
    case OP_SIGNAL:
        rc = agentc_proc_signal(c.fd, a->pid, a->sig, 0, &p, err);
        break;
    case OP_RESIZE:
        rc = agentc_proc_resize(c.fd, a->pid, a->cols, a->rows, 0, &p, err);
        break;
    case OP_DELETE:
        rc = agentc_proc_delete(c.fd, a->pid, 0, err);
        break;
    default:
        rc = agentc_proc_get(c.fd, a->pid, 0, &p, err);
    }
    call_close(&c, a->op != OP_GET);
    if (rc == 0 && a->op == OP_DELETE)
        sbx_event(m, c.owner_id, c.id, "process_deleted", json_pack("{s:i}", "pid", (int)a->pid));
    if (rc == 0 && out)
        take_record(&p, out);
    agentc_proc_free(&p);
    return rc;
}

int sbx_proc_get(sbx_mgr_t *m, const user_t *owner, const char *key, pid_t pid, json_t **out,
                 err_t *err)
{
    struct proc_args a = {.op = OP_GET, .pid = pid};
    return proc_call(m, owner, key, &a, out, err);
}

int sbx_proc_stdin(sbx_mgr_t *m, const user_t *owner, const char *key, pid_t pid, const void *data,
                   size_t len, bool eof, json_t **out, err_t *err)
{
    struct proc_args a = {.op = OP_STDIN, .pid = pid, .data = data, .len = len, .eof = eof};
    return proc_call(m, owner, key, &a, out, err);
}

int sbx_proc_signal(sbx_mgr_t *m, const user_t *owner, const char *key, pid_t pid, int sig,
                    json_t **out, err_t *err)
{
    struct proc_args a = {.op = OP_SIGNAL, .pid = pid, .sig = sig};
    return proc_call(m, owner, key, &a, out, err);
}

int sbx_proc_resize(sbx_mgr_t *m, const user_t *owner, const char *key, pid_t pid, uint16_t cols,
                    uint16_t rows, json_t **out, err_t *err)
{
    struct proc_args a = {.op = OP_RESIZE, .pid = pid, .cols = cols, .rows = rows};
    return proc_call(m, owner, key, &a, out, err);
}

int sbx_proc_delete(sbx_mgr_t *m, const user_t *owner, const char *key, pid_t pid, err_t *err)
{
    struct proc_args a = {.op = OP_DELETE, .pid = pid};
    return proc_call(m, owner, key, &a, NULL, err);
}

int sbx_proc_output(sbx_mgr_t *m, const user_t *owner, const char *key, pid_t pid, uint64_t cursor,
                    size_t max, struct agentc_output *out, err_t *err)
{
    struct pcall c;
    if (call_open(m, owner, key, &c, err) < 0)
        return -1;
    struct agentc_output_req req = {.pid = pid, .cursor = cursor, .max = max};
    int rc = agentc_proc_output(c.fd, &req, out, err);
    call_close(&c, false);
    return rc;
}

/* --- following -------------------------------------------------------------------------- */

/* 0: r can be read now; SBX_FOLLOW_LATER: it may be later; -1: it has ended. */
static int follow_state(const sandbox_rec_t *r, err_t *err)
{
    if (r->intent != SBX_INTENT_NONE || r->status == SBX_HIBERNATED || r->status == SBX_PAUSED ||
        r->status == SBX_CREATING)
        return SBX_FOLLOW_LATER;
    if (sbx_op_allowed(SBX_OP_PROCESSES, r->status))
        return 0;
    return err_set(err, ERR_CONFLICT, 0, "sandbox_not_running", "the sandbox is %s",
                   sandbox_status_name(r->status));
}

/* The record again, under the lock. */
static int follow_recheck(sbx_mgr_t *m, const char *id, err_t *err)
{
    sandbox_rec_t r;
    if (store_sandbox_get(m->store, -1, id, &r, err) < 0)
        return -1;
    int rc = follow_state(&r, err);
    store_sandbox_rec_clear(&r);
    return rc;
}

static bool lock_briefly(struct sbx_live *l)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += FOLLOW_LOCK_MS * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    return atomic_load(&l->changing) == 0 && pthread_rwlock_timedrdlock(&l->lock, &ts) == 0;
}

struct follow_cut {
    struct sbx_live *l;
    const int *cancel_fd;
};

/* Let go at once when a lifecycle change wants the sandbox, or the client left. */
static bool follow_cut(void *arg)
{
    struct follow_cut *fc = arg;
    if (atomic_load(&fc->l->changing) > 0)
        return true;
    struct pollfd p = {fc->cancel_fd ? *fc->cancel_fd : -1, POLLRDHUP, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLRDHUP));
}

int sbx_proc_follow(sbx_mgr_t *m, const user_t *owner, const char *key, pid_t pid, uint64_t cursor,
                    size_t max, int wait_ms, const int *cancel_fd, struct agentc_output *out,
                    err_t *err)
{
    struct pcall c = {.m = m, .fd = -1};
    sandbox_rec_t r;
    if (sbx_lookup(m, owner, key, &r, err) < 0)
        return -1;
    snprintf(c.id, sizeof(c.id), "%s", r.id);
    int rc = follow_state(&r, err);
    store_sandbox_rec_clear(&r);
    if (rc != 0)
        return rc;
    if (!(c.l = sbx_live_get(m, c.id, false)))
        return SBX_FOLLOW_LATER; /* between a container and the next */
    if (!(c.locked = lock_briefly(c.l))) {
        call_close(&c, false);
        return SBX_FOLLOW_LATER;
    }
    rc = follow_recheck(m, c.id, err);
    if (rc == 0)
        rc = connect_procs(&c, err);
    if (rc == 0) {
        struct follow_cut fc = {c.l, cancel_fd};
        struct agentc_output_req req = {.pid = pid,
                                        .cursor = cursor,
                                        .max = max,
                                        .wait_ms = wait_ms,
                                        .cut = follow_cut,
                                        .cut_arg = &fc};
        rc = agentc_proc_output(c.fd, &req, out, err);
    }
    call_close(&c, false);
    return rc;
}
