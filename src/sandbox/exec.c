/* Exec: through the sandbox's agent, recorded with its output in the store. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentc/agent_client.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "sandbox_internal.h"

int sbx_check_exec_argv(json_t *argv, json_t *env, err_t *err)
{
    if (sbx_check_argv(argv, "argv", true, err) < 0)
        return -1;
    if (json_string_length(json_array_get(argv, 0)) == 0)
        return err_set(err, ERR_INVALID, 0, "invalid_field", "argv[0] must not be empty");
    const char *k;
    json_t *v;
    json_object_foreach(env, k, v)
    {
        if (!*k || strchr(k, '=') || !json_is_string(v) ||
            strlen(json_string_value(v)) != json_string_length(v))
            return err_set(err, ERR_INVALID, 0, "invalid_field",
                           "env must map names (no '=') to strings without NUL bytes");
    }
    return 0;
}

int sbx_exec_check(sbx_mgr_t *m, const user_t *owner, const char *key, err_t *err)
{
    sandbox_rec_t r;
    if (sbx_wake_if_needed(m, owner, key, err) < 0 || sbx_lookup(m, owner, key, &r, err) < 0)
        return -1;
    int rc = sbx_require_status(SBX_OP_PROCESSES, &r, err);
    store_sandbox_rec_clear(&r);
    return rc;
}

/* Where output goes while an exec runs. */
struct exec_ctx {
    sbx_mgr_t *m;
    int64_t eid;
    sbx_output_fn sink;
    void *sink_ctx;
    struct sbx_exec_result *res;
    uint64_t seen[2];
};

static int on_output(void *data, uint8_t type, const uint8_t *p, size_t n)
{
    struct exec_ctx *c = data;
    int k = type == AGENT_STDERR;
    uint64_t max = c->m->cfg.exec_output_max;
    size_t keep = c->seen[k] >= max ? 0 : (size_t)(max - c->seen[k] < n ? max - c->seen[k] : n);
    c->seen[k] += n;
    if (keep < n)
        *(k ? &c->res->stderr_truncated : &c->res->stdout_truncated) = true;
    if (keep == 0)
        return 0; /* past the cap: dropped, the process keeps running */
    store_exec_log(c->m->store, c->eid, k + 1, p, keep, NULL);
    if (c->sink)
        return c->sink(c->sink_ctx, k + 1, (const char *)p, keep) ? 0 : -1;
    buf_append(k ? &c->res->err : &c->res->out, p, keep);
    return 0;
}

static int run_agent_exec(sbx_mgr_t *m, struct sbx_live *l, const struct sbx_exec_req *q,
                          struct exec_ctx *c, err_t *err)
{
    _cleanup_free_ char *sock = xasprintf("%s/%s/sock", m->sandboxes_dir, l->id);
    int dirfd _cleanup_close_ = open(sock, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int fd = agentc_connect(dirfd, "agent.sock", &l->peer, 5000, err);
    if (fd < 0)
        return -1;
    _cleanup_free_ const char **argv = json_strv_borrow(q->argv);
    char **env = json_envv(q->env);
    struct agentc_exec_req ar = {
        .argv = argv,
        .env = (const char *const *)env,
        .cwd = q->cwd,
        .user = q->user,
        .timeout_ms = q->timeout_s > 0 ? (int64_t)(q->timeout_s * 1000) : 0,
        .stdin_pipe = q->has_stdin,
        .stdin_data = q->stdin_data,
        .stdin_len = q->stdin_len,
        .cancel_fd = q->cancel_fd,
    };
    struct agentc_exec_result ares = {0};
    int wait_ms = ar.timeout_ms > 0 ? (int)(ar.timeout_ms + 10000) : 0;
    int rc = agentc_exec(fd, &ar, on_output, c, wait_ms, &ares, err);
    json_strv_free(env);
    /* Until the agent's session lets go of it too: a checkpoint may follow at once. */
    agentc_close(fd);
    if (rc == 0) {
        c->res->exit_code = ares.exit.exit_code;
        c->res->timed_out = ares.exit.timed_out;
        if (ares.error_code[0] && c->sink == NULL) /* "not found": say why on stderr */
            buf_printf(&c->res->err, "%s\n", ares.error_msg);
        else if (ares.error_code[0])
            c->sink(c->sink_ctx, 2, ares.error_msg, strlen(ares.error_msg));
    }
    return rc;
}

/* Under l's read lock: 0 if the work may go on, 1 if the sandbox went to sleep meanwhile. */
static int check_use(sbx_mgr_t *m, struct sbx_live *l, sandbox_rec_t *rec, err_t *err)
{
    /* Under the lock the status cannot change: this read decides. */
    if (store_sandbox_get(m->store, -1, l->id, rec, err) < 0)
        return -1;
    int rc = rec->status == SBX_HIBERNATED ? 1 : sbx_require_status(SBX_OP_PROCESSES, rec, err);
    if (rc == 0 && atomic_load(&l->execs) > (int)m->cfg.max_execs)
        rc = err_set(err, ERR_LIMIT, 0, "too_many_execs", "the sandbox already runs %u execs",
                     m->cfg.max_execs);
    if (rc != 0)
        store_sandbox_rec_clear(rec);
    return rc;
}

int sbx_use_begin(sbx_mgr_t *m, const user_t *owner, const char *key, struct sbx_live **out,
                  sandbox_rec_t *rec, err_t *err)
{
    /* A hibernated sandbox wakes first; one that is hibernated again between the wake and
     * the lock (the idle reaper) wakes again: at most a few rounds. */
    for (int round = 0; round < 3; round++) {
        sandbox_rec_t hint;
        if (sbx_wake_if_needed(m, owner, key, err) < 0 || sbx_lookup(m, owner, key, &hint, err) < 0)
            return -1;
        sbx_barrier("use.before_lock");
        struct sbx_live *l = sbx_live_get(m, hint.id, true);
        store_sandbox_rec_clear(&hint);
        pthread_rwlock_rdlock(&l->lock);
        atomic_fetch_add(&l->execs, 1); /* counted at once: the reaper sees it busy */
        int rc = check_use(m, l, rec, err);
        if (rc == 0) {
            *out = l;
            return 0;
        }
        sbx_use_end(m, l);
        if (rc < 0)
            return -1;
    }
    return err_set(err, ERR_CONFLICT, 0, "sandbox_busy",
                   "the sandbox keeps being hibernated; try again");
}

void sbx_use_end(sbx_mgr_t *m, struct sbx_live *l)
{
    atomic_fetch_sub(&l->execs, 1);
    pthread_rwlock_unlock(&l->lock);
    sbx_live_put(m, l);
}

/* An exec whose agent went away because the whole sandbox ended (its main process exited, or
 * under gVisor a limit ended it) is a conflict with the sandbox's state, not a server fault. */
static int explain_lost_agent(sbx_mgr_t *m, const char *id, err_t *err)
{
    if (strcmp(err->code, "agent_unavailable") != 0)
        return -1;
    struct sbx_paths p;
    sbx_paths_init(m, id, &p);
    int run_fd _cleanup_close_ = open(p.run, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    sbx_paths_free(&p);
    if (run_fd < 0 || !sbx_wait_exit_file(run_fd))
        return -1;
    log_warn("sandbox.exec_lost", "sandbox=%s msg=\"%s\"", id, err->msg);
    return err_set(err, ERR_CONFLICT, 0, "sandbox_not_running",
                   "the sandbox ended while the command ran (its main process exited, or the "
                   "sandbox went past a limit)");
}

int sbx_exec(sbx_mgr_t *m, const user_t *owner, const char *key, const struct sbx_exec_req *q,
             sbx_output_fn sink, void *ctx, struct sbx_exec_result *res, err_t *err)
{
    sandbox_rec_t r;
    struct sbx_live *l;
    if (sbx_use_begin(m, owner, key, &l, &r, err) < 0)
        return -1;
    struct exec_ctx c = {m, 0, sink, ctx, res, {0, 0}};
    int rc = store_exec_begin(m->store, r.id, q->command, &c.eid, err);
    if (rc == 0) {
        res->execution_id = c.eid;
        rc = run_agent_exec(m, l, q, &c, err);
        if (rc < 0)
            explain_lost_agent(m, r.id, err);
        store_exec_end(m->store, c.eid, rc == 0 ? res->exit_code : -1, NULL);
        if (res->stdout_truncated || res->stderr_truncated)
            store_exec_set_truncated(m->store, c.eid, NULL);
        sbx_event(m, r.owner_id, r.id, "exec",
                  json_pack("{s:I, s:s, s:i}", "execution_id", (json_int_t)c.eid, "command",
                            q->command, "exit_code", rc == 0 ? res->exit_code : -1));
        store_sandbox_touch(m->store, r.id);
    }
    sbx_use_end(m, l);
    store_sandbox_rec_clear(&r);
    return rc;
}

/* The first port of the create-time "ports", else of the image's ExposedPorts, else 0. */
static int default_port(const sandbox_rec_t *r)
{
    json_t *ports = json_object_get(r->spec, "ports");
    if (json_array_size(ports) > 0)
        return (int)json_integer_value(json_array_get(ports, 0));
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(r->spec, "exposed_ports"), key, v)
    {
        int p = atoi(key);
        if (p > 0 && p < 65536 && strstr(key, "/udp") == NULL)
            return p;
    }
    return 0;
}

/* True if anyone may reach port of public sandbox r: one it declared, as default_port reads. */
static bool public_port(const sandbox_rec_t *r, int port)
{
    json_t *ports = json_object_get(r->spec, "ports");
    size_t i;
    json_t *v;
    json_array_foreach(ports, i, v)
    {
        if (json_integer_value(v) == port)
            return true;
    }
    if (json_array_size(ports) > 0)
        return false;
    const char *key;
    json_object_foreach(json_object_get(r->spec, "exposed_ports"), key, v)
    {
        if (atoi(key) == port && strstr(key, "/udp") == NULL)
            return true;
    }
    return false;
}

/*
 * Not the caller's and not open to them. Without a token an unknown name, a private sandbox
 * and a port a public one did not declare answer alike (nothing tells which); with a token,
 * the 404 of any other owner's sandbox.
 */
static int not_open(const user_t *caller, err_t *err)
{
    if (caller)
        return err_set(err, ERR_NOT_FOUND, 0, "sandbox_not_found", "no such sandbox");
    return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized",
                   "no public sandbox port here: send the sandbox owner's token");
}

int sbx_proxy_target(sbx_mgr_t *m, const user_t *caller, const char *key, int port,
                     struct sbx_target *out, err_t *err)
{
    sandbox_rec_t r;
    bool mine = caller && sbx_lookup(m, caller, key, &r, NULL) == 0;
    if (!mine) {
        /* Someone else's (or no token): only a public sandbox's declared ports answer. */
        if (!key || strlen(key) > 64 || store_sandbox_get(m->store, -1, key, &r, NULL) < 0)
            return not_open(caller, err);
        if (!port)
            port = default_port(&r);
        if (!r.is_public || !public_port(&r, port)) {
            store_sandbox_rec_clear(&r);
            return not_open(caller, err);
        }
    }
    user_t owner = {.id = r.owner_id};
    snprintf(out->id, sizeof(out->id), "%s", r.id);
    int dflt = default_port(&r);
    store_sandbox_rec_clear(&r);
    /* A hibernated sandbox wakes for the request, which waits. */
    if (sbx_exec_check(m, &owner, out->id, err) < 0 || sbx_lookup(m, &owner, out->id, &r, err) < 0)
        return -1;
    snprintf(out->ip, sizeof(out->ip), "%s", r.ip_address);
    out->abortive_close = runtime_can(sbx_runtime(&r), RUNTIME_AGENT_QUIESCE);
    store_sandbox_touch(m->store, r.id);
    store_sandbox_rec_clear(&r);
    out->port = port > 0 ? port : dflt > 0 ? dflt : sbx_listening_port(m, &owner, out->id);
    if (out->port <= 0)
        return err_set(err, ERR_BAD_GATEWAY, 0, "bad_gateway",
                       "no port to proxy to: nothing listens, no ?port=, no ports at create");
    return 0;
}

int sbx_wait_serving(sbx_mgr_t *m, const user_t *owner, const char *key, int timeout_ms, err_t *err)
{
    sandbox_rec_t r;
    if (sbx_lookup(m, owner, key, &r, err) < 0)
        return -1;
    int port = default_port(&r);
    store_sandbox_rec_clear(&r);
    if (port <= 0)
        return 0;
    /* Polled through /proc/net/tcp: each look is one short exec in the sandbox. */
    double until = now_mono_ms() + timeout_ms;
    while (!sbx_port_listening(m, owner, key, port)) {
        if (now_mono_ms() >= until)
            return err_set(err, ERR_RUNTIME, 0, "sandbox_not_ready",
                           "nothing listened on port %d within %d ms", port, timeout_ms);
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}
