#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "util.h"

extern char **environ;

static int spawn(char *const argv[], char *const env[], int out_w, int err_w, pid_t *pid,
                 err_t *err)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out_w, 1);
    posix_spawn_file_actions_adddup2(&fa, err_w, 2);
    /* A clean signal state: the daemon blocks SIGTERM/SIGINT in its threads. */
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    int rc = posix_spawnp(pid, argv[0], &fa, &attr, argv, env ? env : environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        errno = rc;
        return err_sys(err, "run %s", argv[0]);
    }
    return 0;
}

static void drain(int fd, buf_t *b, size_t max, bool *open_)
{
    char chunk[16384];
    ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n <= 0) {
        if (n == 0 || (errno != EINTR && errno != EAGAIN))
            *open_ = false;
        return;
    }
    if (b && b->len < max)
        buf_append(b, chunk, (size_t)n > max - b->len ? max - b->len : (size_t)n);
}

static void fill_result(int status, bool timed_out, struct proc_result *res)
{
    res->timed_out = timed_out;
    res->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    res->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + res->signal;
}

int proc_run(char *const argv[], char *const env[], int timeout_ms, size_t max_out, buf_t *out,
             buf_t *errout, struct proc_result *res, err_t *err)
{
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) < 0)
        return err_sys(err, "pipe");
    if (pipe2(pe, O_CLOEXEC) < 0) {
        close(po[0]), close(po[1]);
        return err_sys(err, "pipe");
    }
    _cleanup_close_ int ro = po[0], re = pe[0];
    pid_t pid;
    int rc = spawn(argv, env, po[1], pe[1], &pid, err);
    close(po[1]), close(pe[1]);
    if (rc < 0)
        return -1;
    double deadline = timeout_ms > 0 ? now_mono_ms() + timeout_ms : 0;
    bool oopen = true, eopen = true, timed_out = false;
    while (oopen || eopen) {
        struct pollfd p[2] = {{oopen ? ro : -1, POLLIN, 0}, {eopen ? re : -1, POLLIN, 0}};
        int wait = deadline ? (int)(deadline - now_mono_ms()) : -1;
        if (deadline && wait <= 0) {
            timed_out = true;
            kill(pid, SIGKILL);
            break;
        }
        if (poll(p, 2, wait) < 0 && errno != EINTR)
            break;
        if (p[0].revents)
            drain(ro, out, max_out, &oopen);
        if (p[1].revents)
            drain(re, errout, max_out, &eopen);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    fill_result(status, timed_out, res);
    return 0;
}

int proc_run_ok(char *const argv[], int timeout_ms, buf_t *out, err_t *err)
{
    buf_t errout = {0};
    struct proc_result res;
    if (proc_run(argv, NULL, timeout_ms, 1 << 20, out, &errout, &res, err) < 0) {
        buf_free(&errout);
        return -1;
    }
    if (res.exit_code == 0 && !res.timed_out) {
        buf_free(&errout);
        return 0;
    }
    const char *msg = errout.data ? errout.data : "";
    size_t n = errout.len;
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
        n--;
    if (res.timed_out)
        err_set(err, ERR_RUNTIME, 0, "runtime", "%s timed out after %d ms", argv[0], timeout_ms);
    else
        err_set(err, ERR_RUNTIME, 0, "runtime", "%s failed (exit %d): %.*s", argv[0], res.exit_code,
                (int)(n > 400 ? 400 : n), msg);
    buf_free(&errout);
    return -1;
}

int proc_pidfd_open(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

bool read_small_file(int dirfd, const char *name, char *out, size_t size)
{
    int fd _cleanup_close_ = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, out, size - 1);
    if (n < 0)
        return false;
    out[n] = '\0';
    char *nl = strchr(out, '\n');
    if (nl)
        *nl = '\0';
    return true;
}
