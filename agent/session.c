/*
 * One connection from the daemon, served by a forked child of PID 1: optional HELLO/PING
 * frames, then one EXEC, whose process is pumped (stdin in, stdout/stderr out, signals,
 * resizes, timeout) until its EXIT frame; then the connection closes. (Or, instead of the
 * EXEC, one files request, served by files.c as the request's user.)
 *
 * The loop polls fixed slots and never sleeps: output is forwarded the moment a read
 * returns, and the EXIT frame is queued behind every output frame, so order is exact.
 * Buffers are bounded both ways: when the daemon does not read, the pipes are not read
 * either (the process blocks on its writes); when the process does not read its stdin,
 * the socket is not read beyond STDIN_QUEUE_MAX.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "agent.h"
#include "agent/protocol.h"
#include "common/buf.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "session_internal.h"

#define STDIN_QUEUE_MAX (1024 * 1024) /* stop reading the socket above this much stdin */
#define OUT_QUEUE_MAX   (256 * 1024)  /* stop reading the pipes above this much output */
#define DRAIN_MS        100 /* after the process exits, how long its pipes may stay open */
#define DRAIN_MAX       (1024 * 1024) /* then at most this much more of each is forwarded */

enum { SLOT_SOCK, SLOT_SIG, SLOT_TIMER, SLOT_OUT, SLOT_ERR, SLOT_IN, NSLOTS };

/* The connection is gone or broke the protocol: kill what we started and leave. */
__attribute__((noreturn)) static void abandon(struct session *s)
{
    if (s->pid > 0)
        kill(-s->pid, SIGKILL);
    _exit(0);
}

/* Read whatever the client already sent, so closing does not reset the connection. */
static void discard_input(int sock)
{
    char tmp[4096];
    while (recv(sock, tmp, sizeof(tmp), MSG_DONTWAIT) > 0)
        ;
}

__attribute__((noreturn)) void session_fail(struct session *s, const char *code, const char *msg)
{
    agent_set_nonblock(s->sock, false);
    if (s->out.len > s->out_off)
        (void)agent_write_all(s->sock, s->out.data + s->out_off, s->out.len - s->out_off);
    (void)agent_send_error(s->sock, code, msg);
    discard_input(s->sock);
    abandon(s);
}

/* Write as much queued output as the socket takes now. */
static void flush_out(struct session *s)
{
    while (s->out_off < s->out.len) {
        ssize_t w = write(s->sock, s->out.data + s->out_off, s->out.len - s->out_off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            break;
        if (w <= 0)
            abandon(s);
        s->out_off += (size_t)w;
    }
    if (s->out_off == s->out.len) {
        buf_reset(&s->out);
        s->out_off = 0;
    } else if (s->out_off > AGENT_MAX_CHUNK) {
        memmove(s->out.data, s->out.data + s->out_off, s->out.len - s->out_off);
        s->out.len -= s->out_off;
        s->out_off = 0;
    }
}

void session_queue(struct session *s, uint8_t type, const void *p, size_t n)
{
    uint8_t hdr[AGENT_HEADER_LEN];
    agent_frame_header(hdr, type, (uint32_t)n);
    buf_append(&s->out, hdr, sizeof(hdr));
    buf_append(&s->out, p, n);
    flush_out(s);
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Forward one read of a pipe (or the PTY) as a frame; EOF (EIO for a PTY) closes it. */
static void pump(struct session *s, int *fd, uint8_t type)
{
    char tmp[AGENT_MAX_CHUNK];
    ssize_t r = read(*fd, tmp, sizeof(tmp));
    if (r > 0)
        session_queue(s, type, tmp, (size_t)r);
    else if (r == 0 || (errno != EAGAIN && errno != EINTR))
        close_fd(fd);
}

/*
 * Read what the pipes hold right now, then close them (we stop waiting for their EOF).
 * Bounded: a writer that escaped the group kill (setsid) could otherwise feed us forever.
 */
static void drain_now(struct session *s)
{
    int *fds[2] = {&s->out_fd, &s->err_fd};
    uint8_t types[2] = {AGENT_STDOUT, AGENT_STDERR};
    agent_set_nonblock(s->sock, false); /* the rest goes out even if the daemon is slow */
    for (int i = 0; i < 2; i++) {
        char tmp[AGENT_MAX_CHUNK];
        ssize_t r;
        size_t total = 0;
        while (*fds[i] >= 0 && total < DRAIN_MAX && (r = read(*fds[i], tmp, sizeof(tmp))) > 0) {
            session_queue(s, types[i], tmp, (size_t)r);
            total += (size_t)r;
        }
        close_fd(fds[i]);
    }
    agent_set_nonblock(s->sock, true);
}

/* Write queued stdin; a process that closed its stdin just loses the rest. */
static void flush_stdin(struct session *s)
{
    while (s->in_fd >= 0 && s->stdin_off < s->stdin_q.len) {
        ssize_t w = write(s->in_fd, s->stdin_q.data + s->stdin_off, s->stdin_q.len - s->stdin_off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            return;
        if (w <= 0) {
            close_fd(&s->in_fd);
            break;
        }
        s->stdin_off += (size_t)w;
    }
    buf_reset(&s->stdin_q);
    s->stdin_off = 0;
    if (s->stdin_eof && !s->tty)
        close_fd(&s->in_fd);
}

static void arm_timer(struct session *s, int ms)
{
    struct itimerspec its = {.it_value = {ms / 1000, (long)(ms % 1000) * 1000000L}};
    timerfd_settime(s->timerfd, 0, &its, NULL);
}

/* Reap the process if it ended; then give its pipes DRAIN_MS to reach EOF. */
static void check_child(struct session *s)
{
    int st;
    if (s->exited || waitpid(s->pid, &st, WNOHANG) != s->pid)
        return;
    s->exited = true;
    s->status = st;
    if (s->out_fd >= 0 || s->err_fd >= 0)
        arm_timer(s, DRAIN_MS);
}

static void on_signal(struct session *s)
{
    struct signalfd_siginfo si;
    while (read(s->sigfd, &si, sizeof(si)) == sizeof(si)) {
        if (si.ssi_signo == SIGCHLD)
            check_child(s);
        else
            abandon(s); /* SIGTERM: the agent is going away */
    }
}

/* The timeout (process still running) or the drain deadline (process gone) passed. */
static void on_timer(struct session *s)
{
    uint64_t ticks;
    (void)!read(s->timerfd, &ticks, sizeof(ticks));
    check_child(s); /* it may have ended just now: then it did not time out */
    if (!s->exited) {
        kill(-s->pid, SIGKILL);
        s->timed_out = true;
    } else {
        /*
         * The process is gone but something it started in the background still holds the
         * pipes (a server started with `&`). It keeps running, as after `docker exec`; we
         * stop waiting for its output.
         */
        drain_now(s);
    }
}

/* Queue the EXIT frame behind all output, send everything and end the session. */
__attribute__((noreturn)) static void finish(struct session *s)
{
    char json[128];
    size_t n = agent_exit_json(json, sizeof(json), s->status, s->timed_out);
    agent_set_nonblock(s->sock, false);
    session_queue(s, AGENT_EXIT, json, n);
    discard_input(s->sock);
    _exit(0);
}

static void poll_slots(struct session *s, struct pollfd *p)
{
    bool out_room = s->out.len - s->out_off < OUT_QUEUE_MAX;
    /* PONGs grow the output queue too: stop reading requests while the client lags. */
    bool in_room = s->stdin_q.len - s->stdin_off < STDIN_QUEUE_MAX && out_room;
    p[SLOT_SOCK] = (struct pollfd){s->sock, POLLRDHUP, 0};
    p[SLOT_SOCK].events |= (in_room ? POLLIN : 0) | (s->out_off < s->out.len ? POLLOUT : 0);
    p[SLOT_SIG] = (struct pollfd){s->sigfd, POLLIN, 0};
    p[SLOT_TIMER] = (struct pollfd){s->timerfd, POLLIN, 0};
    p[SLOT_OUT] = (struct pollfd){out_room ? s->out_fd : -1, POLLIN, 0};
    p[SLOT_ERR] = (struct pollfd){out_room ? s->err_fd : -1, POLLIN, 0};
    bool want_in = s->stdin_off < s->stdin_q.len;
    p[SLOT_IN] = (struct pollfd){want_in ? s->in_fd : -1, POLLOUT, 0};
}

static void on_socket(struct session *s, short revents)
{
    if (revents & POLLIN) {
        if (session_read_client(s) <= 0)
            abandon(s);
        session_handle_frames(s);
    } else if (revents & (POLLRDHUP | POLLHUP | POLLERR)) {
        abandon(s);
    }
    if (revents & POLLOUT)
        flush_out(s);
}

__attribute__((noreturn)) static void run_loop(struct session *s)
{
    struct pollfd p[NSLOTS];
    session_handle_frames(s); /* frames that came with the EXEC */
    for (;;) {
        flush_stdin(s);
        if (s->exited && s->out_fd < 0 && s->err_fd < 0)
            finish(s);
        poll_slots(s, p);
        if (poll(p, NSLOTS, -1) < 0) {
            if (errno == EINTR)
                continue;
            abandon(s);
        }
        if (p[SLOT_SIG].revents)
            on_signal(s);
        if (p[SLOT_OUT].revents)
            pump(s, &s->out_fd, AGENT_STDOUT);
        if (p[SLOT_ERR].revents)
            pump(s, &s->err_fd, AGENT_STDERR);
        if (p[SLOT_TIMER].revents)
            on_timer(s);
        if (p[SLOT_SOCK].revents)
            on_socket(s, p[SLOT_SOCK].revents);
    }
}

/* The STDIN_EOF frame: close the pipe once queued bytes are written; ^D for a PTY. */
void session_stdin_eof(struct session *s)
{
    s->stdin_eof = true;
    if (s->tty && s->in_fd >= 0) {
        struct termios t;
        char eof = tcgetattr(s->in_fd, &t) == 0 && t.c_cc[VEOF] ? (char)t.c_cc[VEOF] : 4;
        buf_append(&s->stdin_q, &eof, 1);
    }
}

static int make_fds(struct session *s)
{
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGTERM);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    s->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    s->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    return s->sigfd < 0 || s->timerfd < 0 ? -1 : 0;
}

void agent_session_run(int sock, const struct agent_config *cfg)
{
    struct session s = {
        .cfg = cfg, .sock = sock, .out_fd = -1, .err_fd = -1, .in_fd = -1, .master = -1};
    /* SIGTERM reaches us if the agent dies first (outside a container it may). */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    /* In `ps` a session is not a second agent: PID 1 alone is "sandboxer-agent". */
    prctl(PR_SET_NAME, "agent-session");
    if (make_fds(&s) < 0)
        session_fail(&s, "internal", "cannot create the session's signalfd or timerfd");
    session_serve_requests(&s); /* returns once an EXEC has started a process */
    agent_set_nonblock(s.sock, true);
    run_loop(&s);
}
