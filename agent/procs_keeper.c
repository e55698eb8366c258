/*
 * The keeper of a background process's PTY. PID 1 must hold no end of a PTY (CRIU refuses
 * a checkpoint unless, walking the process tree parents first, the first holder of a
 * session's PTY is the process that made it its controlling terminal: agent.c's
 * fork_keeper says more), so the process's child forks the keeper before it starts its
 * session: the keeper is the process's child, in PID 1's session and group, every signal
 * blocked. It keeps the master and relays: the terminal's output to PID 1 through one pipe
 * (PID 1 reads it into the process's ring), and PID 1's frames (STDIN, STDIN_EOF, RESIZE)
 * from another to the terminal. When PID 1 closes the control pipe (the process ended, or
 * it was deleted) the keeper relays what the terminal still holds, bounded, and exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <termios.h>
#include <unistd.h>

#include "common/util.h"
#include "procs_internal.h"

#define KEEPER_OUT_MAX   (256 * 1024)  /* output waiting for PID 1: stop reading the master */
#define KEEPER_IN_MAX    (256 * 1024)  /* typed input waiting for the terminal: stop reading */
#define KEEPER_DRAIN_MS  1000          /* at the end, how long the terminal may still talk */
#define KEEPER_DRAIN_MAX (1024 * 1024) /* and how much of it is relayed */
#define KEEPER_IDLE_MS   50            /* at the end, a quiet terminal this long is done */

struct keeper {
    int master, relay, ctl;
    bool master_eof;
    buf_t out, in, ctl_in; /* for the relay, for the master, frames from PID 1 */
    size_t out_off, in_off;
};

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* Close every fd but those in keep (PID 1's sockets, pipes and other processes' stdin). */
static void close_all_but(int *keep, size_t n)
{
    qsort(keep, n, sizeof(*keep), cmp_int);
    unsigned lo = 0;
    for (size_t i = 0; i <= n; i++) {
        unsigned hi = i < n ? (unsigned)keep[i] : ~0u;
        if (hi > lo && close_range(lo, hi - 1, 0) < 0) {
            struct rlimit rl = {1024, 1024};
            getrlimit(RLIMIT_NOFILE, &rl);
            for (unsigned fd = lo; fd < hi && fd < rl.rlim_cur; fd++)
                close((int)fd);
        }
        if (i < n)
            lo = (unsigned)keep[i] + 1;
    }
}

/* Write what fd takes of q now; -1 if it failed (EAGAIN is not a failure). */
static int flush_q(int fd, buf_t *q, size_t *off)
{
    while (*off < q->len) {
        ssize_t w = write(fd, q->data + *off, q->len - *off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            return 0;
        if (w <= 0)
            return -1;
        *off += (size_t)w;
    }
    buf_reset(q);
    *off = 0;
    return 0;
}

static void flush_relay(struct keeper *k)
{
    if (flush_q(k->relay, &k->out, &k->out_off) < 0)
        _exit(0); /* PID 1 forgot the process: nobody reads any more */
}

/* Read the master once into the relay queue; 0 when it had nothing (or ended). */
static size_t read_master(struct keeper *k)
{
    char tmp[AGENT_MAX_CHUNK];
    ssize_t r = read(k->master, tmp, sizeof(tmp));
    if (r > 0) {
        buf_append(&k->out, tmp, (size_t)r);
        flush_relay(k);
        return (size_t)r;
    }
    if (r == 0 || (errno != EAGAIN && errno != EINTR))
        k->master_eof = true; /* EIO: nothing holds the terminal's other side any more */
    return 0;
}

/* The end: relay what the terminal still says (bounded), then leave. */
static _Noreturn void finish(struct keeper *k)
{
    double deadline = now_mono_ms() + KEEPER_DRAIN_MS;
    size_t total = 0;
    agent_set_nonblock(k->relay, false); /* PID 1 reads it, or closes it after its wait */
    while (!k->master_eof && total < KEEPER_DRAIN_MAX && now_mono_ms() < deadline) {
        size_t n = read_master(k);
        total += n;
        if (n == 0 && !k->master_eof) {
            struct pollfd p = {k->master, POLLIN, 0};
            if (poll(&p, 1, KEEPER_IDLE_MS) <= 0)
                break;
        }
    }
    flush_relay(k);
    _exit(0);
}

/* Act on the frames PID 1 sent; incomplete ones wait for more bytes. */
static void handle_ctl(struct keeper *k)
{
    size_t off = 0, used;
    struct agent_frame f;
    uint16_t cols, rows;
    while (agent_frame_parse((const uint8_t *)k->ctl_in.data + off, k->ctl_in.len - off, &f,
                             &used) == AGENT_PARSE_COMPLETE) {
        off += used;
        if (f.type == AGENT_STDIN) {
            buf_append(&k->in, f.payload, f.len);
        } else if (f.type == AGENT_STDIN_EOF) {
            struct termios t;
            char eof = tcgetattr(k->master, &t) == 0 && t.c_cc[VEOF] ? (char)t.c_cc[VEOF] : 4;
            buf_append(&k->in, &eof, 1);
        } else if (f.type == AGENT_RESIZE && agent_resize_decode(&f, &cols, &rows) == 0) {
            agent_pty_resize(k->master, cols, rows);
        }
    }
    memmove(k->ctl_in.data, k->ctl_in.data + off, k->ctl_in.len - off);
    k->ctl_in.len -= off;
}

static void read_ctl(struct keeper *k)
{
    char tmp[AGENT_MAX_CHUNK];
    ssize_t r = read(k->ctl, tmp, sizeof(tmp));
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
        finish(k); /* the process ended, or PID 1 forgot it */
    if (r > 0) {
        buf_append(&k->ctl_in, tmp, (size_t)r);
        handle_ctl(k);
    }
}

static _Noreturn void keeper_run(struct keeper *k)
{
    for (;;) {
        if (k->master_eof && k->out_off == k->out.len)
            finish(k); /* nothing holds the terminal: the process and its children are gone */
        bool out_room = k->out.len - k->out_off < KEEPER_OUT_MAX;
        bool in_room = k->in.len - k->in_off < KEEPER_IN_MAX;
        short m = (out_room ? POLLIN : 0) | (k->in_off < k->in.len ? POLLOUT : 0);
        struct pollfd p[3] = {{k->master_eof || !m ? -1 : k->master, m, 0},
                              {k->out_off < k->out.len ? k->relay : -1, POLLOUT, 0},
                              {in_room ? k->ctl : -1, POLLIN, 0}};
        if (poll(p, 3, -1) < 0)
            continue;
        if ((p[0].revents & POLLOUT) && flush_q(k->master, &k->in, &k->in_off) < 0) {
            buf_reset(&k->in); /* the terminal refuses input: dropped */
            k->in_off = 0;
        }
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR))
            read_master(k);
        if (p[1].revents)
            flush_relay(k);
        if (p[2].revents)
            read_ctl(k);
    }
}

void procs_keeper_fork(const struct agent_spawn *sp, void *arg)
{
    const struct procs_keeper_fds *fds = arg;
    (void)sp;
    pid_t pid = fork();
    if (pid < 0)
        agent_warn("pty keeper: fork: %s", strerror(errno));
    if (pid != 0)
        return;
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL); /* the terminal's ^C and hangup are not for us */
    prctl(PR_SET_NAME, "pty-keeper");
    int keep[] = {2, fds->master, fds->relay, fds->ctl};
    close_all_but(keep, 4);
    struct keeper k = {.master = fds->master, .relay = fds->relay, .ctl = fds->ctl};
    agent_set_nonblock(k.relay, true);
    agent_set_nonblock(k.ctl, true);
    keeper_run(&k);
}
