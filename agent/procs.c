/*
 * Background processes: the table in PID 1's memory, starting a process (pipes, or a PTY
 * whose master a keeper holds), its fds in PID 1's poll loop, its end.
 *
 * A process runs in its own session and process group (setsid), started as an EXEC would
 * be (the same request members, user, cwd, environment). Its stdout and stderr are pipes
 * PID 1 reads whenever they have data, into the process's output ring (ring.h): the
 * process never blocks on its output, and the oldest output goes when the ring is full.
 * Its stdin is /dev/null or a pipe PID 1 writes from a bounded queue. With a PTY, a keeper
 * process (procs_keeper.c) holds the master and relays: PID 1 holds no end of any PTY.
 *
 * A process is "running" until PID 1 reaped it and its output ended (the pipes reached
 * EOF, or PROCS_DRAIN_MS passed: what a background child of it still writes is not
 * waited for); then "exited", kept with its output until AGENT_PROCS_EXITED newer ones
 * ended, or a DELETE.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "procs_internal.h"

/* --- the table -------------------------------------------------------------------------- */

struct proc *procs_find(struct agent_procs *ps, pid_t pid)
{
    for (size_t i = ps->nprocs; i-- > 0;)
        if (ps->procs[i]->pid == pid)
            return ps->procs[i];
    return NULL;
}

static bool in_table(const struct agent_procs *ps, const struct proc *pr)
{
    for (size_t i = 0; i < ps->nprocs; i++)
        if (ps->procs[i] == pr)
            return true;
    return false;
}

size_t procs_running(const struct agent_procs *ps)
{
    size_t n = 0;
    for (size_t i = 0; i < ps->nprocs; i++)
        n += !ps->procs[i]->done;
    return n;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static void free_proc(struct proc *pr)
{
    close_fd(&pr->out_fd);
    close_fd(&pr->err_fd);
    close_fd(&pr->in_fd);
    close_fd(&pr->report_fd);
    buf_free(&pr->in_q);
    ring_free(&pr->ring);
    json_decref(pr->argv);
    free(pr->command);
    free(pr->tag);
    free(pr);
}

void procs_forget(struct agent_procs *ps, struct proc *pr)
{
    if (!pr->reaped && pr->pid > 0 && kill(-pr->pid, SIGKILL) < 0)
        kill(pr->pid, SIGKILL);
    procs_conns_drop(ps, pr);
    for (size_t i = 0; i < ps->nprocs; i++) {
        if (ps->procs[i] == pr) {
            memmove(&ps->procs[i], &ps->procs[i + 1], (ps->nprocs - i - 1) * sizeof(pr));
            ps->nprocs--;
            break;
        }
    }
    free_proc(pr);
}

/* Keep at most AGENT_PROCS_EXITED ended processes: the one that ended first goes. */
static void evict_exited(struct agent_procs *ps)
{
    for (;;) {
        struct proc *oldest = NULL;
        size_t done = 0;
        for (size_t i = 0; i < ps->nprocs; i++) {
            struct proc *pr = ps->procs[i];
            if (pr->done && (done++, !oldest || pr->end_seq < oldest->end_seq))
                oldest = pr;
        }
        if (done <= AGENT_PROCS_EXITED)
            return;
        procs_forget(ps, oldest);
    }
}

/* The longest prefix of s, at most max bytes, that does not cut a UTF-8 sequence. */
static size_t utf8_cut(const char *s, size_t max)
{
    while (max > 0 && ((unsigned char)s[max] & 0xc0) == 0x80)
        max--;
    return max;
}

/* What a record shows of argv: its strings while they fit in PROCS_ARGV_SHOWN bytes. */
static json_t *shown_argv(char *const *argv, bool *truncated)
{
    json_t *a = json_array();
    size_t budget = PROCS_ARGV_SHOWN;
    for (size_t i = 0; argv[i]; i++) {
        size_t n = strlen(argv[i]);
        if (n > budget) {
            *truncated = true;
            if (budget > 0)
                json_array_append_new(a, json_string_lossy(argv[i], utf8_cut(argv[i], budget)));
            break;
        }
        json_array_append_new(a, json_string_lossy(argv[i], n));
        budget -= n;
    }
    return a;
}

/* The command line a record shows: the request's, else argv joined; at most 1 KiB. */
static char *shown_command(const char *command, char *const *argv)
{
    buf_t b = {0};
    if (command)
        buf_puts(&b, command);
    for (size_t i = 0; !command && argv[i] && b.len <= PROCS_COMMAND_SHOWN; i++)
        buf_printf(&b, "%s%s", i ? " " : "", argv[i]);
    if (b.len > PROCS_COMMAND_SHOWN) {
        b.len = utf8_cut(b.data, PROCS_COMMAND_SHOWN);
        b.data[b.len] = '\0';
        buf_puts(&b, "\u2026");
    }
    return buf_steal(&b);
}

char *procs_record(const struct proc *pr)
{
    _cleanup_json_ json_t *j =
        json_pack("{s:i, s:O, s:b, s:o, s:o, s:b, s:b, s:s, s:f, s:I, s:I}", "pid", (int)pr->pid,
                  "argv", pr->argv, "argv_truncated", pr->argv_truncated, "command",
                  json_string_lossy(pr->command, strlen(pr->command)), "tag",
                  pr->tag ? json_string_lossy(pr->tag, strlen(pr->tag)) : json_null(), "tty",
                  pr->tty, "stdin", pr->stdin_open && !pr->reaped, "status",
                  pr->done ? "exited" : "running", "started_at", pr->started_at, "output_start",
                  (json_int_t)pr->ring.start, "output_end", (json_int_t)pr->ring.end);
    json_object_set_new(j, "timed_out", json_boolean(pr->timed_out));
    int sig = pr->done && WIFSIGNALED(pr->status) ? WTERMSIG(pr->status) : 0;
    int code = sig ? 128 + sig : WEXITSTATUS(pr->status);
    json_object_set_new(j, "exit_code", pr->done ? json_integer(code) : json_null());
    json_object_set_new(j, "signal", sig ? json_integer(sig) : json_null());
    json_object_set_new(j, "ended_at", pr->done ? json_real(pr->ended_at) : json_null());
    return json_dump_compact(j);
}

/* --- starting --------------------------------------------------------------------------- */

/* A non-blocking parent end and a blocking child end, both O_CLOEXEC. */
static int make_pipe(int *parent, int *child, bool parent_writes)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -1;
    *parent = fds[parent_writes ? 1 : 0];
    *child = fds[parent_writes ? 0 : 1];
    return agent_set_nonblock(*parent, true);
}

static int open_pipes(struct proc *pr, const struct exec_plan *p, int child[3], err_t *err)
{
    if (make_pipe(&pr->out_fd, &child[1], false) < 0 ||
        make_pipe(&pr->err_fd, &child[2], false) < 0)
        return err_set(err, ERR_RUNTIME, errno, "spawn_failed", "pipe: %s", strerror(errno));
    if (p->want_stdin) {
        pr->stdin_open = true;
        if (make_pipe(&pr->in_fd, &child[0], true) < 0)
            return err_set(err, ERR_RUNTIME, errno, "spawn_failed", "pipe: %s", strerror(errno));
        return 0;
    }
    child[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return child[0] < 0 ? err_set(err, ERR_RUNTIME, errno, "spawn_failed", "/dev/null") : 0;
}

/* The PTY (for the process) and two pipes between PID 1 and the keeper, which keeps the
 * master: PID 1 closes its copies of the PTY once the process is forked. */
static int open_tty(struct proc *pr, const struct exec_plan *p, int child[3],
                    struct procs_keeper_fds *k, err_t *err)
{
    int slave;
    if (agent_pty_open(&k->master, &slave, p->cols, p->rows, err) < 0)
        return err_set(err, ERR_RUNTIME, 0, "spawn_failed", "%s", err->msg);
    child[0] = child[1] = child[2] = slave;
    pr->tty = pr->stdin_open = true;
    if (make_pipe(&pr->out_fd, &k->relay, false) < 0 || make_pipe(&pr->in_fd, &k->ctl, true) < 0)
        return err_set(err, ERR_RUNTIME, errno, "spawn_failed", "pipe: %s", strerror(errno));
    return 0;
}

static void close_spawn_fds(int child[3], struct procs_keeper_fds *k, int report_w)
{
    for (int i = 0; i < 3; i++)
        if (child[i] >= 0 && (i == 0 || child[i] != child[i - 1]))
            close(child[i]);
    close_fd(&k->master);
    close_fd(&k->relay);
    close_fd(&k->ctl);
    if (report_w >= 0)
        close(report_w);
}

/* Fork and exec; the report pipe then tells (in the poll loop) whether exec happened. */
static int launch(struct proc *pr, const struct exec_plan *p, err_t *err)
{
    int child[3] = {-1, -1, -1}, rep[2] = {-1, -1};
    struct procs_keeper_fds k = {-1, -1, -1};
    int rc = p->tty ? open_tty(pr, p, child, &k, err) : open_pipes(pr, p, child, err);
    if (rc == 0 && pipe2(rep, O_CLOEXEC) < 0)
        rc = err_set(err, ERR_RUNTIME, errno, "spawn_failed", "pipe: %s", strerror(errno));
    if (rc == 0) {
        struct agent_spawn sp = {.argv = p->argv,
                                 .envp = p->env,
                                 .cwd = p->cwd,
                                 .user = p->has_user ? &p->user : NULL,
                                 .stdin_fd = child[0],
                                 .stdout_fd = child[1],
                                 .stderr_fd = child[2],
                                 .ctty = p->tty,
                                 .report_fd = rep[1],
                                 .before_session = p->tty ? procs_keeper_fork : NULL,
                                 .hook_arg = &k};
        pr->pid = agent_spawn(&sp, err);
        if (pr->pid < 0)
            rc = err_set(err, ERR_RUNTIME, errno, "spawn_failed", "fork: %s", strerror(errno));
    }
    close_spawn_fds(child, &k, rep[1]);
    if (rc == 0) {
        pr->report_fd = rep[0];
        agent_set_nonblock(rep[0], true);
    } else if (rep[0] >= 0) {
        close(rep[0]);
    }
    return rc;
}

/* Take the START members EXEC does not know out of obj: "tag", "command". */
static int take_extras(json_t *obj, char **tag, char **command, err_t *err)
{
    json_t *t = json_object_get(obj, "tag"), *c = json_object_get(obj, "command");
    if ((t && !json_is_null(t) && (!json_is_string(t) || json_string_length(t) > 256)) ||
        (c && (!json_is_string(c) || json_string_length(c) > (1u << 20))))
        return err_set(err, ERR_INVALID, 0, "invalid",
                       "tag must be a string of at most 256 bytes, command a string");
    *tag = json_is_string(t) ? xstrdup(json_string_value(t)) : NULL;
    *command = c ? xstrdup(json_string_value(c)) : NULL;
    json_object_del(obj, "tag");
    json_object_del(obj, "command");
    return 0;
}

static struct proc *new_proc(struct agent_procs *ps, struct exec_plan *p, char *tag,
                             const char *command)
{
    struct proc *pr = xcalloc(1, sizeof(*pr));
    pr->out_fd = pr->err_fd = pr->in_fd = pr->report_fd = -1;
    pr->seq = ++ps->seq;
    pr->argv = shown_argv(p->argv, &pr->argv_truncated);
    pr->command = shown_command(command, p->argv);
    pr->tag = tag;
    pr->started_at = now_unix();
    /* Wall-clock time, so that a deadline that passed while the sandbox slept (hibernated,
     * or restored elsewhere) has passed when it wakes. */
    if (p->timeout_ms > 0)
        pr->kill_at = pr->started_at * 1000 + (double)p->timeout_ms;
    ring_init(&pr->ring, AGENT_PROCS_RING, PROCS_RING_RUNS);
    if (p->tty && !agent_env_get(p->env, "TERM"))
        agent_env_put(&p->env, "TERM=xterm");
    return pr;
}

struct proc *procs_start(struct agent_procs *ps, json_t *obj, err_t *err)
{
    char *tag = NULL;
    _cleanup_free_ char *command = NULL;
    struct exec_plan p = {0};
    if (procs_running(ps) >= AGENT_PROCS_RUNNING) {
        err_set(err, ERR_LIMIT, 0, "too_many", "%d background processes run already",
                AGENT_PROCS_RUNNING);
        return NULL;
    }
    if (take_extras(obj, &tag, &command, err) < 0 ||
        agent_exec_plan_decode(obj, ps->cfg, &p, err) < 0) {
        if (strcmp(err->code, "bad_user") != 0)
            snprintf(err->code, sizeof(err->code), "invalid");
        free(tag);
        agent_exec_plan_free(&p);
        return NULL;
    }
    struct proc *pr = new_proc(ps, &p, tag, command);
    int rc = launch(pr, &p, err);
    agent_exec_plan_free(&p);
    if (rc < 0) {
        free_proc(pr);
        return NULL;
    }
    struct proc *old = procs_find(ps, pr->pid); /* an ended one whose pid came round again */
    if (old)
        procs_forget(ps, old);
    evict_exited(ps);
    ps->procs[ps->nprocs++] = pr;
    return pr;
}

/* --- requests on a process -------------------------------------------------------------- */

int procs_stdin(struct proc *pr, const void *p, size_t n, bool eof, err_t *err)
{
    if (pr->reaped)
        return err_set(err, ERR_CONFLICT, 0, "exited", "the process has ended");
    if (!pr->stdin_open || pr->in_fd < 0)
        return err_set(err, ERR_CONFLICT, 0, "no_stdin",
                       "the process's stdin is closed (or it was started without one)");
    size_t pending = pr->in_q.len - pr->in_off;
    if (pending + n + 2 * AGENT_HEADER_LEN > PROCS_STDIN_MAX)
        return err_set(err, ERR_LIMIT, 0, "stdin_full",
                       "%d KiB of stdin already wait for the process to read them",
                       PROCS_STDIN_MAX / 1024);
    if (!pr->tty) {
        buf_append(&pr->in_q, p, n);
        pr->in_eof = eof;
        pr->stdin_open = !eof;
        /* Nothing left to write: EOF now, as no POLLOUT will come to close it later. */
        if (eof && pr->in_off >= pr->in_q.len)
            close_fd(&pr->in_fd);
        return 0;
    }
    /* The keeper takes frames: STDIN in 64 KiB pieces, then STDIN_EOF (it types ^D). */
    for (size_t off = 0; off < n; off += AGENT_MAX_CHUNK) {
        size_t len = n - off < AGENT_MAX_CHUNK ? n - off : AGENT_MAX_CHUNK;
        uint8_t hdr[AGENT_HEADER_LEN];
        agent_frame_header(hdr, AGENT_STDIN, (uint32_t)len);
        buf_append(&pr->in_q, hdr, sizeof(hdr));
        buf_append(&pr->in_q, (const char *)p + off, len);
    }
    if (eof) {
        uint8_t hdr[AGENT_HEADER_LEN];
        agent_frame_header(hdr, AGENT_STDIN_EOF, 0);
        buf_append(&pr->in_q, hdr, sizeof(hdr));
    }
    return 0;
}

int procs_signal(struct proc *pr, int sig, err_t *err)
{
    if (pr->reaped)
        return err_set(err, ERR_CONFLICT, 0, "exited", "the process has ended");
    /* Right after the fork the process may not lead its group yet: then it alone. */
    if (kill(-pr->pid, sig) < 0)
        kill(pr->pid, sig);
    return 0;
}

int procs_resize(struct proc *pr, uint16_t cols, uint16_t rows, err_t *err)
{
    if (!pr->tty)
        return err_set(err, ERR_CONFLICT, 0, "not_tty", "the process has no terminal");
    if (pr->reaped || pr->in_fd < 0)
        return err_set(err, ERR_CONFLICT, 0, "exited", "the process has ended");
    if (pr->in_q.len - pr->in_off > PROCS_STDIN_MAX) /* its keeper does not read: bounded */
        return err_set(err, ERR_LIMIT, 0, "stdin_full", "the terminal's input queue is full");
    uint8_t frame[AGENT_HEADER_LEN + 4];
    agent_frame_header(frame, AGENT_RESIZE, 4);
    agent_resize_encode(frame + AGENT_HEADER_LEN, cols, rows);
    buf_append(&pr->in_q, frame, sizeof(frame));
    return 0;
}

/* --- the fds ---------------------------------------------------------------------------- */

/* Done: reaped, and nothing more will come out of it. */
static void settle(struct agent_procs *ps, struct proc *pr)
{
    if (pr->done || !pr->reaped || pr->out_fd >= 0 || pr->err_fd >= 0 || pr->report_fd >= 0)
        return;
    pr->done = true;
    pr->end_seq = ++ps->seq;
    close_fd(&pr->in_fd);
    buf_free(&pr->in_q);
    pr->in_off = 0;
    procs_notify(ps, pr);
    evict_exited(ps); /* may free pr: the last use */
}

/* One read of an output fd into the ring; EOF (EIO for a PTY's relay: never) closes it. */
static size_t read_output(struct agent_procs *ps, struct proc *pr, int *fd, uint8_t stream)
{
    static char tmp[AGENT_MAX_CHUNK];
    ssize_t r = read(*fd, tmp, sizeof(tmp));
    if (r > 0) {
        ring_append(&pr->ring, stream, tmp, (size_t)r);
        procs_notify(ps, pr);
        return (size_t)r;
    }
    if (r == 0 || (errno != EAGAIN && errno != EINTR))
        close_fd(fd);
    return 0;
}

/* Write queued stdin (or keeper frames); a reader that went away just loses the rest. */
static void flush_in(struct proc *pr)
{
    while (pr->in_fd >= 0 && pr->in_off < pr->in_q.len) {
        ssize_t w = write(pr->in_fd, pr->in_q.data + pr->in_off, pr->in_q.len - pr->in_off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            return;
        if (w <= 0) {
            close_fd(&pr->in_fd);
            pr->stdin_open = false;
            break;
        }
        pr->in_off += (size_t)w;
    }
    buf_reset(&pr->in_q);
    pr->in_off = 0;
    if (pr->in_eof && !pr->tty)
        close_fd(&pr->in_fd);
}

/* The spawn report: EOF means exec happened; a record says why it did not. */
static void read_report(struct agent_procs *ps, struct proc *pr)
{
    struct agent_spawn_failure f;
    ssize_t n = read(pr->report_fd, &f, sizeof(f));
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    close_fd(&pr->report_fd);
    if (n == (ssize_t)sizeof(f)) {
        pr->failed = true;
        pr->fail_stage = f.stage;
        pr->fail_errno = f.errnum;
        char msg[600];
        int len = snprintf(msg, sizeof(msg), "sandboxer-agent: %s %s: %s\n",
                           agent_spawn_stage_name(f.stage),
                           json_string_value(json_array_get(pr->argv, 0)), strerror(f.errnum));
        if (len > 0)
            ring_append(&pr->ring, 2, msg, (size_t)len < sizeof(msg) ? (size_t)len : sizeof(msg));
    }
    procs_notify(ps, pr);
    /* It never ran (a bad cwd or user): its START got ERROR, no record stays. A missing
     * program is a record: the process exits 127 (126 for other exec failures). */
    if (pr->failed && pr->fail_stage != SPAWN_STAGE_EXEC)
        procs_forget(ps, pr);
}

size_t procs_fill_procs(struct agent_procs *ps, struct pollfd *p, size_t at)
{
    size_t n = at;
    for (size_t i = 0; i < ps->nprocs; i++) {
        struct proc *pr = ps->procs[i];
        struct {
            int fd;
            short events;
            uint8_t kind;
        } want[4] = {{pr->out_fd, POLLIN, PS_OUT},
                     {pr->err_fd, POLLIN, PS_ERR},
                     {pr->in_off < pr->in_q.len ? pr->in_fd : -1, POLLOUT, PS_IN},
                     {pr->report_fd, POLLIN, PS_REPORT}};
        for (size_t k = 0; k < 4; k++) {
            if (want[k].fd < 0 || n >= AGENT_PROCS_SLOTS)
                continue;
            p[n] = (struct pollfd){want[k].fd, want[k].events, 0};
            ps->slots[n++] = (struct pslot){want[k].kind, pr, want[k].fd};
        }
    }
    return n - at;
}

void procs_on_proc_slot(struct agent_procs *ps, const struct pslot *s, short revents)
{
    struct proc *pr = s->obj;
    if (!revents || !in_table(ps, pr))
        return; /* forgotten meanwhile (a stale slot acts on nothing: every fd is read) */
    if (s->kind == PS_OUT && pr->out_fd == s->fd)
        read_output(ps, pr, &pr->out_fd, 1);
    else if (s->kind == PS_ERR && pr->err_fd == s->fd)
        read_output(ps, pr, &pr->err_fd, 2);
    else if (s->kind == PS_IN && pr->in_fd == s->fd)
        flush_in(pr);
    else if (s->kind == PS_REPORT && pr->report_fd == s->fd)
        read_report(ps, pr);
    if (in_table(ps, pr))
        settle(ps, pr);
}

/* The wait for the output's end is over: take what the pipes hold now and close them. */
static void drain_now(struct agent_procs *ps, struct proc *pr)
{
    int *fds[2] = {&pr->out_fd, &pr->err_fd};
    for (int i = 0; i < 2; i++) {
        size_t total = 0, n;
        while (*fds[i] >= 0 && total < PROCS_DRAIN_MAX &&
               (n = read_output(ps, pr, fds[i], (uint8_t)(i + 1))) > 0)
            total += n;
        close_fd(fds[i]);
    }
    close_fd(&pr->report_fd);
    settle(ps, pr);
}

/* Kill pr's group if its timeout passed; the ms until it does (-1: no timeout pending). */
static double timeout_check(struct proc *pr)
{
    if (pr->kill_at <= 0 || pr->reaped)
        return -1;
    double left = pr->kill_at - now_unix() * 1000;
    if (left > 0)
        return left;
    pr->kill_at = 0;
    pr->timed_out = true;
    if (kill(-pr->pid, SIGKILL) < 0)
        kill(pr->pid, SIGKILL);
    return -1;
}

int procs_proc_timers(struct agent_procs *ps, double now)
{
    double next = -1;
    for (size_t i = 0; i < ps->nprocs; i++) {
        struct proc *pr = ps->procs[i];
        double kill_left = timeout_check(pr);
        if (kill_left >= 0 && (next < 0 || kill_left < next))
            next = kill_left;
        if (!pr->reaped || pr->done)
            continue;
        double left = pr->drain_deadline - now;
        /* A clock that jumped (a restore on another host) ends the wait rather than
         * stretching it. */
        if (left <= 0 || left > PROCS_TTY_DRAIN_MS) {
            drain_now(ps, pr);
            return 0; /* the table may have changed: the caller polls again at once */
        }
        if (next < 0 || left < next)
            next = left;
    }
    return next < 0 ? -1 : (int)(next > 60000 ? 60000 : next) + 1;
}

bool agent_procs_reaped(struct agent_procs *ps, pid_t pid, int st)
{
    for (size_t i = 0; ps && i < ps->nprocs; i++) {
        struct proc *pr = ps->procs[i];
        if (pr->pid != pid || pr->reaped)
            continue;
        pr->reaped = true;
        pr->status = st;
        pr->ended_at = now_unix();
        pr->stdin_open = false;
        /* A keeper takes its control pipe's end as the end of the process: it reads what
         * the terminal still holds, relays it and exits. */
        close_fd(&pr->in_fd);
        buf_free(&pr->in_q);
        pr->in_off = 0;
        pr->drain_deadline = now_mono_ms() + (pr->tty ? PROCS_TTY_DRAIN_MS : PROCS_DRAIN_MS);
        settle(ps, pr);
        return true;
    }
    return false;
}

void agent_procs_close_fds(struct agent_procs *ps)
{
    if (!ps)
        return;
    close_fd(&ps->listen_fd);
    for (size_t i = 0; i < AGENT_PROCS_CONNS; i++)
        close_fd(&ps->conns[i].fd);
    for (size_t i = 0; i < ps->nprocs; i++) {
        struct proc *pr = ps->procs[i];
        close_fd(&pr->out_fd);
        close_fd(&pr->err_fd);
        close_fd(&pr->in_fd);
        close_fd(&pr->report_fd);
    }
}
