/* The console of an interactive main process: see the comment below. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <termios.h>
#include <unistd.h>

#include "agent.h"
#include "agent/protocol.h"
#include "common/buf.h"
#include "common/cleanup.h"
#include "common/util.h"

/*
 * The console of an interactive main process (--tty), served on the console socket
 * (docs/agent-protocol.md, "Console") by the keeper process (agent.c says why it is a
 * process of its own), or by PID 1 if the keeper could not be made. It keeps the PTY's
 * master and, in its poll loop, copies what the process writes to fd 1 (the pipe the daemon's shim
 * stores as the sandbox's log), into a ring of the last CONSOLE_RING bytes (replayed to each
 * client that attaches) and to the clients of the console socket.
 *
 * Nothing here may block PID 1: the master, fd 1 and the clients are non-blocking and what
 * they do not take waits in queues, each bounded. The log is exact: while more than
 * LOG_QUEUE_MAX waits for fd 1 the master is not read, so the process blocks on its writes
 * as it would on a full pipe. Clients are best effort: one whose queue would pass
 * CLIENT_QUEUE_MAX is dropped. Typed input waits in one queue (the terminal is shared);
 * above STDIN_QUEUE_MAX no client is read until the process reads its terminal.
 */
#define CONSOLE_RING     AGENT_CONSOLE_REPLAY
#define CLIENT_QUEUE_MAX (1024 * 1024)
#define LOG_QUEUE_MAX    (256 * 1024)
#define STDIN_QUEUE_MAX  (256 * 1024)
#define DRAIN_MAX        (1024 * 1024) /* read after the process ended, at most */

enum { SLOT_MASTER, SLOT_LOG, SLOT_LISTEN, SLOT_CLIENT };

/* Bytes waiting for a non-blocking fd. */
struct outq {
    buf_t buf;
    size_t off; /* bytes of buf already written */
};

struct client {
    int fd; /* -1: a free slot */
    buf_t in;
    struct outq out;
};

struct agent_console {
    int master, listen_fd, log_fd; /* log_fd: 1, or -1 once it failed */
    bool master_eof;               /* EIO: nothing holds the PTY's other side any more */
    pid_t pid;
    struct outq log, stdin_q;
    char ring[CONSOLE_RING];
    size_t ring_start, ring_len;
    bool ring_wrapped; /* output was dropped from the ring's front */
    struct client clients[AGENT_CONSOLE_CLIENTS];
};

static size_t outq_pending(const struct outq *q)
{
    return q->buf.len - q->off;
}

static void outq_free(struct outq *q)
{
    buf_free(&q->buf);
    q->off = 0;
}

/* Write what fd takes now; -1 if it failed (EAGAIN is not a failure). */
static int outq_flush(struct outq *q, int fd)
{
    while (q->off < q->buf.len) {
        ssize_t w = write(fd, q->buf.data + q->off, q->buf.len - q->off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            break;
        if (w <= 0)
            return -1;
        q->off += (size_t)w;
    }
    if (q->off == q->buf.len) {
        buf_reset(&q->buf);
        q->off = 0;
    } else if (q->off > AGENT_MAX_CHUNK) {
        memmove(q->buf.data, q->buf.data + q->off, q->buf.len - q->off);
        q->buf.len -= q->off;
        q->off = 0;
    }
    return 0;
}

static void ring_push(struct agent_console *c, const char *p, size_t n)
{
    if (n >= CONSOLE_RING) {
        memcpy(c->ring, p + n - CONSOLE_RING, CONSOLE_RING);
        c->ring_wrapped |= n > CONSOLE_RING || c->ring_len > 0;
        c->ring_start = 0;
        c->ring_len = CONSOLE_RING;
        return;
    }
    size_t end = (c->ring_start + c->ring_len) % CONSOLE_RING;
    size_t first = n < CONSOLE_RING - end ? n : CONSOLE_RING - end;
    memcpy(c->ring + end, p, first);
    memcpy(c->ring, p + first, n - first);
    c->ring_len += n;
    if (c->ring_len > CONSOLE_RING) {
        c->ring_start = (c->ring_start + c->ring_len - CONSOLE_RING) % CONSOLE_RING;
        c->ring_len = CONSOLE_RING;
        c->ring_wrapped = true;
    }
}

/* The ring in order into out; once its front was cut, without a torn UTF-8 sequence. */
static size_t ring_copy(const struct agent_console *c, char out[CONSOLE_RING])
{
    size_t first =
        c->ring_len < CONSOLE_RING - c->ring_start ? c->ring_len : CONSOLE_RING - c->ring_start;
    memcpy(out, c->ring + c->ring_start, first);
    memcpy(out + first, c->ring, c->ring_len - first);
    size_t skip = 0;
    while (c->ring_wrapped && skip < 3 && skip < c->ring_len && ((uint8_t)out[skip] & 0xc0) == 0x80)
        skip++;
    memmove(out, out + skip, c->ring_len - skip);
    return c->ring_len - skip;
}

/* Read what the client already sent, so closing does not reset the connection. */
static void close_client(struct client *cl)
{
    char tmp[4096];
    while (recv(cl->fd, tmp, sizeof(tmp), MSG_DONTWAIT) > 0)
        ;
    close(cl->fd);
    cl->fd = -1;
    buf_free(&cl->in);
    outq_free(&cl->out);
}

static void flush_client(struct client *cl)
{
    if (outq_flush(&cl->out, cl->fd) < 0)
        close_client(cl);
}

/* Queue one frame for a client and write what it takes; a client too far behind is dropped. */
static void send_client(struct client *cl, uint8_t type, const void *p, size_t n)
{
    if (outq_pending(&cl->out) + AGENT_HEADER_LEN + n > CLIENT_QUEUE_MAX) {
        agent_warn("console client dropped: it fell %d KiB behind", CLIENT_QUEUE_MAX / 1024);
        close_client(cl);
        return;
    }
    uint8_t hdr[AGENT_HEADER_LEN];
    agent_frame_header(hdr, type, (uint32_t)n);
    buf_append(&cl->out.buf, hdr, sizeof(hdr));
    buf_append(&cl->out.buf, p, n);
    flush_client(cl);
}

/* An ERROR frame, written if the socket takes it now, then close. */
static void reject(int fd, const char *code, const char *message)
{
    buf_t b = {0};
    uint8_t hdr[AGENT_HEADER_LEN];
    buf_printf(&b, "{\"code\":\"%s\",\"message\":\"%s\"}", code, message);
    agent_frame_header(hdr, AGENT_ERROR, (uint32_t)b.len);
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {b.data, b.len}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    (void)sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    buf_free(&b);
}

static void flush_log(struct agent_console *c)
{
    if (c->log_fd < 0)
        return;
    /* Kept non-blocking even if a restore (CRIU) handed us the pipe in blocking mode. */
    int fl = fcntl(c->log_fd, F_GETFL);
    if (fl >= 0 && !(fl & O_NONBLOCK))
        (void)fcntl(c->log_fd, F_SETFL, fl | O_NONBLOCK);
    if (outq_flush(&c->log, c->log_fd) < 0) {
        /* The log's reader is gone (EPIPE): the console goes on without a log. */
        c->log_fd = -1;
        outq_free(&c->log);
    }
}

/* One chunk of the process's output: to the log, the ring and every client. */
static void output(struct agent_console *c, const char *p, size_t n)
{
    if (c->log_fd >= 0) {
        buf_append(&c->log.buf, p, n);
        flush_log(c);
    }
    ring_push(c, p, n);
    for (size_t i = 0; i < AGENT_CONSOLE_CLIENTS; i++)
        if (c->clients[i].fd >= 0)
            send_client(&c->clients[i], AGENT_STDOUT, p, n);
}

/* Read the master once and pass the output on; 0 when it had none (EAGAIN) or ended. */
static size_t read_master(struct agent_console *c)
{
    char tmp[AGENT_MAX_CHUNK];
    ssize_t r;
    do {
        r = read(c->master, tmp, sizeof(tmp));
    } while (r < 0 && errno == EINTR);
    if (r > 0) {
        output(c, tmp, (size_t)r);
        return (size_t)r;
    }
    if (r == 0 || errno != EAGAIN) {
        /* EIO: every holder of the other side closed it; typed input has no reader. */
        c->master_eof = true;
        outq_free(&c->stdin_q);
    }
    return 0;
}

/* Write typed input to the terminal; what it refuses (EIO: nothing reads it) is dropped. */
static void flush_stdin(struct agent_console *c)
{
    if (outq_flush(&c->stdin_q, c->master) < 0)
        outq_free(&c->stdin_q);
}

/* Act on one frame from a client; -1 if it is not one the console takes. */
static int handle_frame(struct agent_console *c, struct client *cl, const struct agent_frame *f)
{
    uint16_t cols, rows;
    switch (f->type) {
    case AGENT_STDIN:
        if (!c->master_eof) {
            buf_append(&c->stdin_q.buf, f->payload, f->len);
            flush_stdin(c);
        }
        return 0;
    case AGENT_RESIZE:
        if (agent_resize_decode(f, &cols, &rows) < 0)
            return -1;
        agent_pty_resize(c->master, cols, rows); /* the kernel sends SIGWINCH */
        return 0;
    case AGENT_PING:
        send_client(cl, AGENT_PONG, f->payload, f->len);
        return 0;
    case AGENT_SIGNAL:
        if (f->len != 1 || f->payload[0] == 0 || f->payload[0] >= _NSIG)
            return -1;
        /* Right after the fork the process may not lead its group yet: then it alone. */
        if (c->pid > 0 && kill(-c->pid, f->payload[0]) < 0)
            kill(c->pid, f->payload[0]);
        return 0;
    }
    return -1;
}

/* Handle every complete frame the client sent; a bad one closes it (after ERROR). */
static void handle_frames(struct agent_console *c, struct client *cl)
{
    size_t off = 0, used;
    struct agent_frame f;
    int r;
    while ((r = agent_frame_parse((const uint8_t *)cl->in.data + off, cl->in.len - off, &f,
                                  &used)) == AGENT_PARSE_COMPLETE) {
        off += used;
        if (handle_frame(c, cl, &f) < 0) {
            reject(cl->fd, "protocol", "the console takes STDIN, RESIZE, PING and SIGNAL");
            close_client(cl);
        }
        if (cl->fd < 0)
            return; /* closed, or dropped while answering a PING */
    }
    if (r == AGENT_PARSE_INVALID) {
        reject(cl->fd, "protocol", "invalid frame (length over 1 MiB or type 0)");
        close_client(cl);
        return;
    }
    memmove(cl->in.data, cl->in.data + off, cl->in.len - off);
    cl->in.len -= off;
}

static void on_client(struct agent_console *c, struct client *cl, short revents)
{
    if (revents & POLLIN) {
        char tmp[AGENT_MAX_CHUNK];
        ssize_t r = read(cl->fd, tmp, sizeof(tmp));
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            close_client(cl);
            return;
        }
        if (r > 0) {
            buf_append(&cl->in, tmp, (size_t)r);
            handle_frames(c, cl);
        }
    } else if (revents & (POLLHUP | POLLERR)) {
        close_client(cl);
    }
    if (cl->fd >= 0 && (revents & POLLOUT))
        flush_client(cl);
}

/* A new client gets the replay of recent output, then everything new. */
static void attach(struct agent_console *c, struct client *cl, int fd)
{
    static char replay[CONSOLE_RING];
    cl->fd = fd;
    size_t n = ring_copy(c, replay);
    if (n > 0)
        send_client(cl, AGENT_STDOUT, replay, n);
}

static void on_accept(struct agent_console *c)
{
    for (;;) {
        int fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return; /* EAGAIN, or a transient error: poll tells us again */
        if (agent_auth_gate(fd, 1000) < 0) {
            close(fd);
            continue;
        }
        struct client *free_slot = NULL;
        for (size_t i = 0; i < AGENT_CONSOLE_CLIENTS && !free_slot; i++)
            if (c->clients[i].fd < 0)
                free_slot = &c->clients[i];
        if (free_slot) {
            attach(c, free_slot, fd);
            continue;
        }
        reject(fd, "busy", "too many console clients attached already");
        close(fd);
    }
}

struct agent_console *agent_console_open(const char *path, int *slave, err_t *err)
{
    struct agent_console *c = xcalloc(1, sizeof(*c));
    for (size_t i = 0; i < AGENT_CONSOLE_CLIENTS; i++)
        c->clients[i].fd = -1;
    c->listen_fd = -1;
    if (agent_pty_open(&c->master, slave, 80, 24, err) < 0) {
        free(c);
        return NULL;
    }
    c->listen_fd = agent_listen(path);
    if (c->listen_fd < 0) {
        err_sys(err, "cannot listen on %s", path);
        close(*slave);
        close(c->master);
        free(c);
        return NULL;
    }
    /* The log pipe must not block PID 1: what it does not take waits in c->log. */
    c->log_fd = agent_set_nonblock(1, true) == 0 ? 1 : -1;
    return c;
}

void agent_console_set_pid(struct agent_console *c, pid_t pid)
{
    c->pid = pid;
}

void agent_console_poll_fill(struct agent_console *c, struct pollfd *p)
{
    bool log_room = outq_pending(&c->log) < LOG_QUEUE_MAX;
    bool in_room = outq_pending(&c->stdin_q) < STDIN_QUEUE_MAX;
    short master = (log_room ? POLLIN : 0) | (outq_pending(&c->stdin_q) ? POLLOUT : 0);
    p[SLOT_MASTER] = (struct pollfd){c->master_eof || !master ? -1 : c->master, master, 0};
    p[SLOT_LOG] = (struct pollfd){outq_pending(&c->log) ? c->log_fd : -1, POLLOUT, 0};
    p[SLOT_LISTEN] = (struct pollfd){c->listen_fd, POLLIN, 0};
    for (size_t i = 0; i < AGENT_CONSOLE_CLIENTS; i++) {
        struct client *cl = &c->clients[i];
        short ev = (in_room ? POLLIN : 0) | (outq_pending(&cl->out) ? POLLOUT : 0);
        p[SLOT_CLIENT + i] = (struct pollfd){cl->fd, ev, 0};
    }
}

void agent_console_dispatch(struct agent_console *c, const struct pollfd *p)
{
    short m = p[SLOT_MASTER].revents;
    if (m & POLLOUT)
        flush_stdin(c);
    if (m & (POLLIN | POLLHUP | POLLERR))
        (void)read_master(c);
    if (p[SLOT_LOG].revents)
        flush_log(c);
    for (size_t i = 0; i < AGENT_CONSOLE_CLIENTS; i++)
        if (c->clients[i].fd >= 0 && p[SLOT_CLIENT + i].revents)
            on_client(c, &c->clients[i], p[SLOT_CLIENT + i].revents);
    /* Last: a slot freed above must not be matched with the revents of its old client. */
    if (p[SLOT_LISTEN].revents)
        on_accept(c);
}

/* Write the log and the clients' queues until they are empty or the deadline passes. */
static void flush_until(struct agent_console *c, double deadline)
{
    for (;;) {
        struct pollfd p[1 + AGENT_CONSOLE_CLIENTS];
        nfds_t n = 0;
        if (c->log_fd >= 0 && outq_pending(&c->log))
            p[n++] = (struct pollfd){c->log_fd, POLLOUT, 0};
        for (size_t i = 0; i < AGENT_CONSOLE_CLIENTS; i++)
            if (c->clients[i].fd >= 0 && outq_pending(&c->clients[i].out))
                p[n++] = (struct pollfd){c->clients[i].fd, POLLOUT, 0};
        double left = deadline - now_mono_ms();
        if (n == 0 || left <= 0)
            return;
        if (poll(p, n, (int)left + 1) < 0 && errno != EINTR)
            return;
        flush_log(c);
        for (size_t i = 0; i < AGENT_CONSOLE_CLIENTS; i++)
            if (c->clients[i].fd >= 0)
                flush_client(&c->clients[i]);
    }
}

void agent_console_finish(struct agent_console *c, int st)
{
    /*
     * What the process wrote before it ended is readable now: a read that finds the PTY
     * empty first waits for the kernel's pending flip-buffer work. DRAIN_MAX bounds what a
     * background process that still holds the terminal can add.
     */
    size_t total = 0, n;
    while (!c->master_eof && total < DRAIN_MAX && (n = read_master(c)) > 0)
        total += n;
    char json[128];
    n = agent_exit_json(json, sizeof(json), st, false);
    for (size_t i = 0; i < AGENT_CONSOLE_CLIENTS; i++)
        if (c->clients[i].fd >= 0)
            send_client(&c->clients[i], AGENT_EXIT, json, n);
    flush_until(c, now_mono_ms() + AGENT_CONSOLE_FINISH_MS);
    for (size_t i = 0; i < AGENT_CONSOLE_CLIENTS; i++)
        if (c->clients[i].fd >= 0)
            close_client(&c->clients[i]);
    close(c->listen_fd);
    c->listen_fd = -1;
    if (c->log_fd >= 0)
        agent_set_nonblock(c->log_fd, false);
}

int agent_console_dup_listener(const struct agent_console *c)
{
    return c->listen_fd >= 0 ? fcntl(c->listen_fd, F_DUPFD_CLOEXEC, 3) : -1;
}

void agent_console_close_fds(struct agent_console *c)
{
    int *fds[2] = {&c->master, &c->listen_fd};
    for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
        if (*fds[i] >= 0)
            close(steal_fd(fds[i]));
    for (size_t i = 0; i < AGENT_CONSOLE_CLIENTS; i++)
        if (c->clients[i].fd >= 0)
            close(steal_fd(&c->clients[i].fd));
}
