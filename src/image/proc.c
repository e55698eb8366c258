/*
 * Child processes of the image store (skopeo, internal-unpack-layer). The daemon is
 * multi-threaded, so children start with posix_spawn (no fork of a threaded process), an
 * explicit environment, default signal dispositions, their own process group (a timeout
 * kills the whole group) and a bounded capture of stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image_internal.h"

/* Append to b, keeping only the last max bytes (the end of stderr says what failed). */
static void append_tail(buf_t *b, const char *p, size_t n, size_t max)
{
    if (n >= max) {
        buf_reset(b);
        buf_append(b, p + n - max, max);
        return;
    }
    if (b->len + n > max) {
        size_t drop = b->len + n - max;
        memmove(b->data, b->data + drop, b->len - drop);
        b->len -= drop;
        b->data[b->len] = '\0';
    }
    buf_append(b, p, n);
}

/* Where a child's output goes besides the kept tail: a callback, or nowhere. */
struct out_sink {
    image_output_fn fn;
    void *ctx;
};

/* Read what the pipe has now; false at EOF or error. */
static bool drain(int fd, buf_t *b, const struct out_sink *sink)
{
    char chunk[4096];
    for (;;) {
        ssize_t r = read(fd, chunk, sizeof(chunk));
        if (r > 0) {
            append_tail(b, chunk, (size_t)r, IMAGE_STDERR_MAX);
            if (sink && sink->fn)
                sink->fn(sink->ctx, chunk, (size_t)r);
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        return r < 0 && errno == EAGAIN;
    }
}

static int spawn(const char *const *argv, const char *const *envp, int errfd, bool merge,
                 pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (merge)
        posix_spawn_file_actions_adddup2(&fa, errfd, 1);
    else
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, errfd, 2);
    /* Nothing else of the daemon's (listening sockets, other children's pipes) leaks in. */
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    posix_spawnattr_init(&at);
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    static const int sigs[] = {SIGPIPE, SIGCHLD, SIGINT,  SIGTERM, SIGHUP,  SIGQUIT,
                               SIGUSR1, SIGUSR2, SIGALRM, SIGTTIN, SIGTTOU, SIGXFSZ};
    for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
        sigaddset(&dfl, sigs[i]);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
    int rc = posix_spawn(pid, argv[0], &fa, &at, (char *const *)argv, (char *const *)envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    return rc;
}

/* Wait for pid, reading its stderr, killing its group at the deadline. */
static void supervise(pid_t pid, int rfd, unsigned timeout_s, const struct out_sink *sink,
                      struct image_proc_result *res)
{
    int pidfd _cleanup_close_ = (int)syscall(SYS_pidfd_open, pid, 0);
    double deadline = now_mono_ms() + timeout_s * 1000.0;
    bool pipe_open = true;
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR) { /* someone else reaped it: the outcome is lost */
            status = 255 << 8;
            break;
        }
        double left = deadline - now_mono_ms();
        if (left <= 0 && !res->timed_out) {
            kill(-pid, SIGKILL);
            res->timed_out = true;
        }
        struct pollfd p[2] = {{.fd = pipe_open ? rfd : -1, .events = POLLIN},
                              {.fd = pidfd, .events = POLLIN}};
        /* Without a pidfd (old kernel), look at the child every 50 ms. */
        int wait_ms = pidfd >= 0 ? (left > 0 ? (int)left + 1 : 1000) : 50;
        if (poll(p, 2, wait_ms) > 0 && pipe_open && (p[0].revents & (POLLIN | POLLHUP)))
            pipe_open = drain(rfd, &res->err, sink);
    }
    if (pipe_open)
        drain(rfd, &res->err,
              sink); /* what is left; a grandchild holding the pipe cannot block us */
    if (WIFEXITED(status))
        res->status = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
        res->status = 128 + WTERMSIG(status);
    else
        res->status = 255;
}

static int run(const char *const *argv, const char *const *envp, unsigned timeout_s,
               const struct out_sink *sink, struct image_proc_result *res, err_t *err)
{
    memset(res, 0, sizeof(*res));
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        return err_sys(err, "pipe");
    int rfd _cleanup_close_ = fds[0];
    pid_t pid;
    int rc = spawn(argv, envp, fds[1], sink != NULL, &pid);
    close(fds[1]);
    if (rc != 0) {
        errno = rc;
        return err_sys(err, "start %s", argv[0]);
    }
    fcntl(rfd, F_SETFL, O_NONBLOCK);
    supervise(pid, rfd, timeout_s, sink, res);
    return 0;
}

int image_proc_run(const char *const *argv, const char *const *envp, unsigned timeout_s,
                   struct image_proc_result *res, err_t *err)
{
    return run(argv, envp, timeout_s, NULL, res, err);
}

int image_proc_run_output(const char *const *argv, const char *const *envp, unsigned timeout_s,
                          image_output_fn fn, void *ctx, struct image_proc_result *res, err_t *err)
{
    struct out_sink sink = {fn, ctx};
    return run(argv, envp, timeout_s, &sink, res, err);
}

void image_proc_result_free(struct image_proc_result *res)
{
    buf_free(&res->err);
}

/* The last non-empty line of text, as [*start, *end). */
static void last_line(const char *text, const char **start, const char **end)
{
    const char *e = text + strlen(text);
    while (e > text && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' '))
        e--;
    const char *s = e;
    while (s > text && s[-1] != '\n')
        s--;
    *start = s;
    *end = e;
}

/* Unquote logrus' msg="..." field into b; false if the line has none. */
static bool logrus_msg(const char *s, const char *e, buf_t *b)
{
    const char *m = memmem(s, (size_t)(e - s), "msg=\"", 5);
    if (!m)
        return false;
    for (const char *p = m + 5; p < e && *p != '"'; p++) {
        if (*p == '\\' && p + 1 < e) {
            p++;
            buf_append(b, *p == 'n' || *p == 't' ? " " : p, 1);
        } else {
            buf_append(b, p, 1);
        }
    }
    return true;
}

void image_proc_reason(const char *stderr_text, const char *hide, char *out, size_t size)
{
    const char *s, *e;
    last_line(stderr_text ? stderr_text : "", &s, &e);
    buf_t line = {0}, clean = {0};
    if (!logrus_msg(s, e, &line))
        buf_append(&line, s, (size_t)(e - s));
    size_t hlen = hide ? strlen(hide) : 0;
    for (size_t i = 0; line.data && i < line.len;) {
        if (hlen && strncmp(line.data + i, hide, hlen) == 0) {
            buf_puts(&clean, "…");
            i += hlen;
            continue;
        }
        unsigned char c = (unsigned char)line.data[i++];
        buf_append(&clean, c < 0x20 || c == 0x7f ? " " : (const char *)&c, 1);
    }
    const char *text = clean.len ? clean.data : "no reason given";
    size_t n = strlen(text);
    if (n >= size) { /* cut at a UTF-8 character boundary */
        n = size - 1;
        while (n > 0 && ((unsigned char)text[n] & 0xc0) == 0x80)
            n--;
    }
    memcpy(out, text, n);
    out[n] = '\0';
    buf_free(&line);
    buf_free(&clean);
}
