/*
 * The request side of a session: frames from the daemon, the EXEC request (JSON, decoded
 * strictly: an unknown field is an error, so a newer daemon never silently loses a setting),
 * and starting the process with pipes or a PTY.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/protocol.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "session_internal.h"

extern char **environ;

#define MAX_ARGV    65536
#define MAX_ENV     4096
#define TIMEOUT_MAX (7 * 24 * 3600 * 1000LL) /* a week, in ms */

/* The EXEC fields other than "env", which may be an object or an array. */
struct exec_json {
    json_t *argv;
    const char *cwd, *user;
    int tty, want_stdin;
    int64_t timeout_ms, cols, rows;
};

static const struct jfield exec_fields[] = {
    {"argv", JF_ARRAY, true, offsetof(struct exec_json, argv), 0, 0, 0},
    {"cwd", JF_STRING, false, offsetof(struct exec_json, cwd), 4096, 0, 0},
    {"user", JF_STRING, false, offsetof(struct exec_json, user), 256, 0, 0},
    {"tty", JF_BOOL, false, offsetof(struct exec_json, tty), 0, 0, 0},
    {"stdin", JF_BOOL, false, offsetof(struct exec_json, want_stdin), 0, 0, 0},
    {"timeout_ms", JF_INT, false, offsetof(struct exec_json, timeout_ms), 0, 0, TIMEOUT_MAX},
    {"cols", JF_INT, false, offsetof(struct exec_json, cols), 0, 1, 65535},
    {"rows", JF_INT, false, offsetof(struct exec_json, rows), 0, 1, 65535},
};

/* A JSON string without NUL bytes, or NULL. */
static const char *plain_string(json_t *v)
{
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
        return NULL;
    return json_string_value(v);
}

static int build_argv(json_t *arr, struct exec_plan *p, err_t *err)
{
    size_t n = json_array_size(arr);
    if (n == 0 || n > MAX_ARGV)
        return err_set(err, ERR_INVALID, 0, "invalid", "argv must hold 1 to %d strings", MAX_ARGV);
    p->argv = xcalloc(n + 1, sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        const char *a = plain_string(json_array_get(arr, i));
        if (!a || (i == 0 && !a[0]))
            return err_set(err, ERR_INVALID, 0, "invalid",
                           "argv[%zu] must be a non-empty string without NUL bytes", i);
        p->argv[i] = xstrdup(a);
    }
    return 0;
}

/* Merge one "K=V" over the environment after checking it. */
static int put_env(struct exec_plan *p, const char *kv, err_t *err)
{
    const char *eq = kv ? strchr(kv, '=') : NULL;
    if (!eq || eq == kv)
        return err_set(err, ERR_INVALID, 0, "invalid", "env entries must look like K=V");
    agent_env_put(&p->env, kv);
    return 0;
}

static int put_env_pair(struct exec_plan *p, const char *key, json_t *v, err_t *err)
{
    const char *val = plain_string(v);
    if (!val || !key[0] || strchr(key, '='))
        return err_set(err, ERR_INVALID, 0, "invalid",
                       "env values must be strings and keys non-empty without '='");
    _cleanup_free_ char *kv = xasprintf("%s=%s", key, val);
    return put_env(p, kv, err);
}

/* Merge the request's env over p->env (the agent's, with HOME for the user). */
static int merge_env(json_t *env, struct exec_plan *p, err_t *err)
{
    if (!env || json_is_null(env))
        return 0;
    if (!json_is_object(env) && !json_is_array(env))
        return err_set(err, ERR_INVALID, 0, "invalid", "env must be an object or an array");
    if (json_is_object(env) ? json_object_size(env) > MAX_ENV : json_array_size(env) > MAX_ENV)
        return err_set(err, ERR_INVALID, 0, "invalid", "env holds more than %d entries", MAX_ENV);
    const char *key;
    json_t *v;
    size_t i;
    if (json_is_object(env)) {
        json_object_foreach(env, key, v) if (put_env_pair(p, key, v, err) < 0) return -1;
        return 0;
    }
    json_array_foreach(env, i, v) if (put_env(p, plain_string(v), err) < 0) return -1;
    return 0;
}

/* The user to run as (the request's, else the agent's --user, else unchanged) and HOME. */
static int resolve_user(const char *spec, struct exec_plan *p, err_t *err)
{
    if (spec) {
        if (agent_user_resolve(spec, &p->user, err) < 0)
            return -1;
        p->has_user = true;
        agent_env_home(&p->env, &p->user);
        return 0;
    }
    if (!agent_env_get(p->env, "HOME")) {
        struct agent_user me;
        _cleanup_free_ char *uid = xasprintf("%u", (unsigned)getuid());
        if (agent_user_resolve(uid, &me, NULL) == 0) {
            agent_env_home(&p->env, &me);
            agent_user_free(&me);
        }
    }
    return 0;
}

int agent_exec_plan_decode(json_t *obj, const struct agent_config *cfg, struct exec_plan *p,
                           err_t *err)
{
    _cleanup_json_ json_t *env = json_incref(json_object_get(obj, "env"));
    json_object_del(obj, "env");
    struct exec_json j = {0};
    if (json_decode_fields(obj, exec_fields, ARRAY_SIZE(exec_fields), &j, err) < 0 ||
        build_argv(j.argv, p, err) < 0)
        return -1;
    p->env = agent_env_copy(environ);
    if (resolve_user(j.user ? j.user : cfg->user, p, err) < 0 || merge_env(env, p, err) < 0)
        return -1;
    agent_env_default_path(&p->env);
    p->cwd = j.cwd ? xstrdup(j.cwd) : cfg->workdir ? xstrdup(cfg->workdir) : NULL;
    p->tty = j.tty == 1;
    p->want_stdin = j.want_stdin == 1;
    p->timeout_ms = j.timeout_ms;
    p->cols = (uint16_t)j.cols;
    p->rows = (uint16_t)j.rows;
    return 0;
}

void agent_exec_plan_free(struct exec_plan *p)
{
    for (size_t i = 0; p->argv && p->argv[i]; i++)
        free(p->argv[i]);
    free(p->argv);
    agent_env_free(p->env);
    free(p->cwd);
    if (p->has_user)
        agent_user_free(&p->user);
    memset(p, 0, sizeof(*p));
}

static int decode_exec(const struct agent_frame *f, const struct agent_config *cfg,
                       struct exec_plan *p, err_t *err)
{
    _cleanup_json_ json_t *obj = NULL;
    if (json_parse_object((const char *)f->payload, f->len, &obj, err) < 0)
        return -1;
    return agent_exec_plan_decode(obj, cfg, p, err);
}

/* A non-blocking parent end and a blocking child end. */
static int make_pipe(int *parent, int *child, bool parent_writes)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -1;
    *parent = fds[parent_writes ? 1 : 0];
    *child = fds[parent_writes ? 0 : 1];
    return agent_set_nonblock(*parent, true);
}

static int open_pipes(struct session *s, const struct exec_plan *p, int child[3], err_t *err)
{
    if (make_pipe(&s->out_fd, &child[1], false) < 0 || make_pipe(&s->err_fd, &child[2], false) < 0)
        return err_sys(err, "pipe");
    if (p->want_stdin)
        return make_pipe(&s->in_fd, &child[0], true) < 0 ? err_sys(err, "pipe") : 0;
    child[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return child[0] < 0 ? err_sys(err, "opening /dev/null") : 0;
}

static int open_tty(struct session *s, const struct exec_plan *p, int child[3], err_t *err)
{
    int slave;
    if (agent_pty_open(&s->master, &slave, p->cols, p->rows, err) < 0)
        return -1;
    child[0] = child[1] = child[2] = slave;
    s->tty = true;
    s->out_fd = s->master;
    if (p->want_stdin && (s->in_fd = fcntl(s->master, F_DUPFD_CLOEXEC, 3)) < 0)
        return err_sys(err, "dup");
    return 0;
}

static void close_child_fds(int child[3])
{
    for (int i = 0; i < 3; i++)
        if (child[i] >= 0 && (i == 0 || child[i] != child[i - 1]))
            close(child[i]);
}

/* Wait for exec (the report pipe closes) or a failure record, and answer it. */
static void check_report(struct session *s, int rfd)
{
    struct agent_spawn_failure f;
    ssize_t n;
    do {
        n = read(rfd, &f, sizeof(f));
    } while (n < 0 && errno == EINTR);
    close(rfd);
    if (n != sizeof(f))
        return;
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
    static const char *const codes[] = {[SPAWN_STAGE_FDS] = "spawn_failed",
                                        [SPAWN_STAGE_TTY] = "spawn_failed",
                                        [SPAWN_STAGE_CWD] = "bad_cwd",
                                        [SPAWN_STAGE_USER] = "bad_user",
                                        [SPAWN_STAGE_EXEC] = "permission"};
    const char *code =
        f.stage >= SPAWN_STAGE_FDS && f.stage <= SPAWN_STAGE_EXEC ? codes[f.stage] : "spawn_failed";
    if (agent_spawn_exit_code(f.stage, f.errnum) == 127)
        code = "not_found";
    char msg[512];
    snprintf(msg, sizeof(msg), "%s: %s", agent_spawn_stage_name(f.stage), strerror(f.errnum));
    session_fail(s, code, msg);
}

static void launch(struct session *s, const struct exec_plan *p)
{
    err_t err = {0};
    int child[3] = {-1, -1, -1}, rep[2];
    if ((p->tty ? open_tty(s, p, child, &err) : open_pipes(s, p, child, &err)) < 0)
        session_fail(s, "spawn_failed", err.msg);
    if (pipe2(rep, O_CLOEXEC) < 0)
        session_fail(s, "spawn_failed", "cannot create a pipe");
    struct agent_spawn sp = {.argv = p->argv,
                             .envp = p->env,
                             .cwd = p->cwd,
                             .user = p->has_user ? &p->user : NULL,
                             .stdin_fd = child[0],
                             .stdout_fd = child[1],
                             .stderr_fd = child[2],
                             .ctty = p->tty,
                             .report_fd = rep[1]};
    s->pid = agent_spawn(&sp, &err);
    close_child_fds(child);
    close(rep[1]);
    if (s->pid < 0) {
        s->pid = 0;
        session_fail(s, "spawn_failed", err.msg);
    }
    check_report(s, rep[0]);
}

static void start_exec(struct session *s, const struct agent_frame *f)
{
    struct exec_plan p = {0};
    err_t err = {0};
    if (decode_exec(f, s->cfg, &p, &err) < 0)
        session_fail(s, strcmp(err.code, "bad_user") == 0 ? "bad_user" : "invalid", err.msg);
    launch(s, &p);
    if (p.timeout_ms > 0) {
        struct itimerspec its = {
            .it_value = {p.timeout_ms / 1000, (p.timeout_ms % 1000) * 1000000}};
        timerfd_settime(s->timerfd, 0, &its, NULL);
    }
    char json[64];
    int n = snprintf(json, sizeof(json), "{\"pid\":%d}", (int)s->pid);
    session_queue(s, AGENT_STARTED, json, (size_t)n);
}

ssize_t session_read_client(struct session *s)
{
    char tmp[AGENT_MAX_CHUNK];
    ssize_t r = read(s->sock, tmp, sizeof(tmp));
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return 1;
    if (r > 0)
        buf_append(&s->in, tmp, (size_t)r);
    return r;
}

/* Drop the first n parsed bytes of s->in. */
static void consume(struct session *s, size_t n)
{
    if (n == 0)
        return;
    memmove(s->in.data, s->in.data + n, s->in.len - n);
    s->in.len -= n;
}

/* Parse the frame at *off in s->in; INVALID ends the session with an ERROR. */
static bool next_frame(struct session *s, size_t *off, struct agent_frame *f)
{
    size_t used;
    int r = agent_frame_parse((const uint8_t *)s->in.data + *off, s->in.len - *off, f, &used);
    if (r == AGENT_PARSE_INVALID)
        session_fail(s, "protocol", "invalid frame (length over 1 MiB or type 0)");
    if (r == AGENT_PARSE_COMPLETE)
        *off += used;
    return r == AGENT_PARSE_COMPLETE;
}

static void handle_exec_frame(struct session *s, const struct agent_frame *f)
{
    uint16_t cols, rows;
    switch (f->type) {
    case AGENT_STDIN:
        if (!s->stdin_eof && s->in_fd >= 0)
            buf_append(&s->stdin_q, f->payload, f->len);
        break;
    case AGENT_STDIN_EOF:
        session_stdin_eof(s);
        break;
    case AGENT_SIGNAL:
        if (f->len == 1 && f->payload[0] >= 1 && f->payload[0] < _NSIG && !s->exited)
            kill(-s->pid, f->payload[0]);
        break;
    case AGENT_RESIZE:
        if (s->tty && agent_resize_decode(f, &cols, &rows) == 0)
            agent_pty_resize(s->master, cols, rows);
        break;
    case AGENT_PING:
        session_queue(s, AGENT_PONG, f->payload, f->len);
        break;
    default:
        session_fail(s, "protocol", "unexpected frame type during an exec");
    }
}

void session_handle_frames(struct session *s)
{
    struct agent_frame f;
    size_t off = 0;
    while (next_frame(s, &off, &f))
        handle_exec_frame(s, &f);
    consume(s, off);
}

/* Answer one frame before the EXEC; true once a process started. */
static bool handle_request(struct session *s, const struct agent_frame *f)
{
    static const char hello[] = "{\"version\":1}";
    switch (f->type) {
    case AGENT_EXEC:
        start_exec(s, f);
        return true;
    case AGENT_HELLO:
        session_queue(s, AGENT_HELLO_OK, hello, sizeof(hello) - 1);
        return false;
    case AGENT_PING:
        session_queue(s, AGENT_PONG, f->payload, f->len);
        return false;
    }
    if (f->type >= AGENT_STAT && f->type < 0x80)
        session_fail(s, "unsupported", "this request type is not implemented by this agent");
    session_fail(s, "protocol", "expected HELLO, PING or EXEC");
}

/* Wait for the client's next bytes; false if the agent asked us to stop (SIGTERM). */
static bool wait_client(struct session *s)
{
    struct pollfd p[2] = {{s->sock, POLLIN, 0}, {s->sigfd, POLLIN, 0}};
    while (poll(p, 2, -1) < 0)
        if (errno != EINTR)
            return false;
    return p[1].revents == 0;
}

void session_serve_requests(struct session *s)
{
    for (;;) {
        struct agent_frame f;
        size_t off = 0;
        if (!next_frame(s, &off, &f)) {
            if (!wait_client(s) || session_read_client(s) <= 0)
                _exit(0);
            continue;
        }
        if (agent_files_handles(f.type)) { /* a files request is the connection's last */
            char *payload = xmalloc(f.len + 1);
            memcpy(payload, f.payload, f.len);
            payload[f.len] = '\0';
            consume(s, off); /* what follows (FILE_DATA) stays in s->in */
            agent_files_serve(s, f.type, payload, f.len);
        }
        bool started = handle_request(s, &f);
        consume(s, off);
        if (started)
            return;
    }
}
