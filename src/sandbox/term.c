/*
 * Terminal sessions: a shell (or any command) on a PTY in the sandbox, and the console of an
 * interactive sandbox's main process. Like an exec, a session holds the sandbox's lock for
 * reading while it is open, so a fork, hibernate or pause waits for it (and gives up with
 * 409 after a while: CRIU cannot checkpoint a connection to the host), and a delete, which
 * kills the container first, ends it.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "sandbox_internal.h"

#define TERM_START_TIMEOUT_MS 10000

struct sbx_term {
    sbx_mgr_t *m;
    struct sbx_live *l;
    int64_t owner_id;
    int fd;
    agentc_reader_t reader;
    int64_t eid; /* the execution's history row; 0 for attach */
};

/* Wait for STARTED; ERROR (the command is missing, a bad user or cwd) becomes err. */
static int await_started(sbx_term_t *t, err_t *err)
{
    double deadline = now_mono_ms() + TERM_START_TIMEOUT_MS;
    struct agent_frame f;
    if (agentc_read_frame(t->fd, &t->reader, &f, deadline, err) < 0)
        return -1;
    pid_t pid;
    if (f.type == AGENT_STARTED)
        return agentc_decode_started(&f, &pid, err);
    if (f.type != AGENT_ERROR)
        return err_set(err, ERR_RUNTIME, 0, "agent_protocol", "unexpected frame 0x%02x", f.type);
    char code[32], msg[256];
    if (agentc_decode_error(&f, code, sizeof(code), msg, sizeof(msg), err) < 0)
        return -1;
    bool user_error = strcmp(code, "not_found") == 0 || strcmp(code, "permission") == 0 ||
                      strcmp(code, "invalid") == 0 || strcmp(code, "bad_cwd") == 0 ||
                      strcmp(code, "bad_user") == 0;
    return err_set(err, user_error ? ERR_INVALID : ERR_RUNTIME, 0,
                   strcmp(code, "not_found") == 0 ? "command_not_found" : code, "%s", msg);
}

static int start_exec(sbx_term_t *t, const struct sbx_term_req *q, err_t *err)
{
    struct agentc_exec_req ar = {.argv = q->argv,
                                 .env = q->env,
                                 .cwd = q->cwd,
                                 .user = q->user,
                                 .tty = true,
                                 .cols = q->cols,
                                 .rows = q->rows,
                                 .stdin_pipe = true};
    if (agentc_send_exec(t->fd, &ar, err) < 0 || await_started(t, err) < 0)
        return -1;
    return store_exec_begin(t->m->store, t->l->id, q->command, &t->eid, err);
}

/* Connect to the agent (or the console) of the sandbox t holds (for reading). */
static int connect_agent(sbx_term_t *t, bool attach, err_t *err)
{
    _cleanup_free_ char *sock = xasprintf("%s/%s/sock", t->m->sandboxes_dir, t->l->id);
    int dirfd _cleanup_close_ = open(sock, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    t->fd = agentc_connect(dirfd, attach ? "console.sock" : "agent.sock", &t->l->peer, 5000, err);
    if (t->fd < 0 && attach && (!err || strcmp(err->code, "agent_impostor") != 0))
        return err_set(err, ERR_CONFLICT, 0, "no_console",
                       "the sandbox's main process has no console (it has ended)");
    return t->fd < 0 ? -1 : 0;
}

sbx_term_t *sbx_term_open(sbx_mgr_t *m, const user_t *owner, const char *key,
                          const struct sbx_term_req *q, err_t *err)
{
    sandbox_rec_t r;
    struct sbx_live *l;
    if (sbx_use_begin(m, owner, key, &l, &r, err) < 0)
        return NULL;
    bool attach = q->argv == NULL;
    int rc = 0;
    if (attach && (!r.interactive || json_array_size(json_object_get(r.spec, "args")) == 0))
        rc = err_set(err, ERR_CONFLICT, 0, "not_interactive",
                     "only an interactive sandbox with a main process has a console to attach to");
    sbx_term_t *t = xcalloc(1, sizeof(*t));
    *t = (sbx_term_t){.m = m, .l = l, .owner_id = r.owner_id, .fd = -1};
    agentc_reader_init(&t->reader);
    if (rc == 0)
        rc = connect_agent(t, attach, err);
    if (rc == 0 && !attach)
        rc = start_exec(t, q, err);
    store_sandbox_rec_clear(&r);
    if (rc < 0) {
        sbx_term_close(t, -1);
        return NULL;
    }
    log_info("term.opened", "sandbox=%s kind=%s", t->l->id, attach ? "attach" : "pty");
    return t;
}

int sbx_term_fd(const sbx_term_t *t)
{
    return t->fd;
}

agentc_reader_t *sbx_term_reader(sbx_term_t *t)
{
    return &t->reader;
}

const char *sbx_term_id(const sbx_term_t *t)
{
    return t->l->id;
}

void sbx_term_touch(sbx_term_t *t)
{
    store_sandbox_touch(t->m->store, t->l->id);
}

void sbx_term_finish(sbx_term_t *t, int exit_code)
{
    if (!t || !t->eid)
        return;
    store_exec_end(t->m->store, t->eid, exit_code, NULL);
    sbx_event(t->m, t->owner_id, t->l->id, "exec",
              json_pack("{s:I, s:s, s:i}", "execution_id", (json_int_t)t->eid, "command", "pty",
                        "exit_code", exit_code));
    t->eid = 0;
}

void sbx_term_close(sbx_term_t *t, int exit_code)
{
    if (!t)
        return;
    /* The agent kills the process group of an exec whose connection closes. */
    agentc_close(t->fd);
    sbx_term_finish(t, exit_code);
    store_sandbox_touch(t->m->store, t->l->id);
    sbx_use_end(t->m, t->l);
    agentc_reader_free(&t->reader);
    free(t);
}
