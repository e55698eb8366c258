/*
 * `sandboxer internal-shim`: one per sandbox, started detached by the daemon. It runs
 * `runc run` (or runsc's) in the foreground with the container's stdout/stderr on pipes it reads,
 * writes the main process's output to a size-capped, rotated log, and records the exit status when
 * the container ends. It outlives daemon restarts, so sandboxes and their logs do too.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/proc.h"
#include "common/util.h"
#include "runtime.h"

#define SHIM_GLOBALS_MAX 16

struct shim {
    const char *id, *bundle, *run_dir, *log_dir, *runtime, *root, *restore, *flavor;
    const char *globals[SHIM_GLOBALS_MAX + 1]; /* the runtime's options before the verb */
    size_t nglobals;
    uint64_t log_max;
    int run_fd, log_fd;
    uint64_t log_size;
    char err_tail[4096]; /* last bytes of stderr, to explain a failed start */
    size_t err_len;
};

static volatile sig_atomic_t forward_sig;

static void on_signal(int sig)
{
    forward_sig = sig;
}

/* Write a small file in the run dir atomically (tmp + rename). */
static void write_run_file(struct shim *s, const char *name, const char *text)
{
    char tmp[64];
    snprintf(tmp, sizeof(tmp), ".%s.tmp", name);
    int fd = openat(s->run_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return;
    /* No fsync: these files describe processes, which do not survive the machine either. */
    (void)!write(fd, text, strlen(text));
    close(fd);
    renameat(s->run_fd, tmp, s->run_fd, name);
}

static int open_log(struct shim *s)
{
    _cleanup_free_ char *path = xasprintf("%s/main.log", s->log_dir);
    s->log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
    struct stat st;
    s->log_size = (s->log_fd >= 0 && fstat(s->log_fd, &st) == 0) ? (uint64_t)st.st_size : 0;
    return s->log_fd;
}

/* Past log_max the current file becomes main.log.1 (replacing the older one). */
static void rotate_if_needed(struct shim *s)
{
    if (s->log_size < s->log_max)
        return;
    _cleanup_free_ char *cur = xasprintf("%s/main.log", s->log_dir);
    _cleanup_free_ char *old = xasprintf("%s/main.log.1", s->log_dir);
    rename(cur, old);
    close(s->log_fd);
    open_log(s);
}

static void keep_err_tail(struct shim *s, const char *p, size_t n)
{
    if (n >= sizeof(s->err_tail)) {
        p += n - sizeof(s->err_tail), n = sizeof(s->err_tail);
        s->err_len = 0;
    }
    if (s->err_len + n > sizeof(s->err_tail)) {
        size_t drop = s->err_len + n - sizeof(s->err_tail);
        memmove(s->err_tail, s->err_tail + drop, s->err_len - drop);
        s->err_len -= drop;
    }
    memcpy(s->err_tail + s->err_len, p, n);
    s->err_len += n;
}

/* Copy what is ready on fd into the log; false at EOF. */
static bool pump(struct shim *s, int fd, bool is_err)
{
    char chunk[65536];
    ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n < 0)
        return errno == EINTR || errno == EAGAIN;
    if (n == 0)
        return false;
    if (is_err)
        keep_err_tail(s, chunk, (size_t)n);
    /* Each file stays within log_max: what does not fit goes to the next one. */
    const char *p = chunk;
    size_t left = (size_t)n;
    while (left > 0 && s->log_fd >= 0) {
        size_t room = s->log_size < s->log_max ? (size_t)(s->log_max - s->log_size) : 0;
        size_t take = left < room ? left : room;
        if (take > 0) {
            ssize_t w = write(s->log_fd, p, take);
            if (w <= 0)
                break;
            s->log_size += (uint64_t)w;
            p += w, left -= (size_t)w;
        }
        rotate_if_needed(s);
    }
    return true;
}

/*
 * runsc (this build) refuses --network=sandbox in any netns on kernels >= 6.11: it takes a
 * netns for the host's own when /proc/sys/net/... shows a file only the root netns had before
 * (gVisor issue 10704). In a mount namespace of the shim's own, /proc/sys becomes a tmpfs with
 * only kernel, vm and fs bound back: the check passes, and runsc sees the sysctls it reads.
 */
static int hide_proc_sys_net(void)
{
    static const char *const keep[] = {"kernel", "vm", "fs"};
    int fds[3];
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
        return -1;
    for (size_t i = 0; i < 3; i++) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/sys/%s", keep[i]);
        fds[i] = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fds[i] < 0)
            return -1;
    }
    if (mount("tmpfs", "/proc/sys", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=555") < 0)
        return -1;
    for (size_t i = 0; i < 3; i++) {
        char path[64], src[64];
        snprintf(path, sizeof(path), "/proc/sys/%s", keep[i]);
        snprintf(src, sizeof(src), "/proc/self/fd/%d", fds[i]);
        if (mkdir(path, 0555) < 0 || mount(src, path, NULL, MS_BIND | MS_REC, NULL) < 0)
            return -1;
        close(fds[i]);
    }
    return 0;
}

/*
 * The container's stdin: /dev/null, or for an agent that proves itself with a token (runsc) a
 * pipe holding run/agent.token, which only the agent (PID 1) reads, at its start.
 */
static int container_stdin(struct shim *s)
{
    char token[128];
    if (s->restore || !read_small_file(s->run_fd, "agent.token", token, sizeof(token)))
        return open("/dev/null", O_RDONLY);
    int p[2];
    if (pipe(p) < 0)
        return open("/dev/null", O_RDONLY);
    size_t n = strlen(token);
    token[n++] = '\n';
    (void)!write(p[1], token, n); /* a pipe holds far more than a token */
    close(p[1]);
    return p[0];
}

/*
 * runsc's own process stays in the shim's mount namespace for the container's life, and that
 * namespace began as a copy of the host's: a copy of every other sandbox's overlay root and
 * netns file would stay mounted there after the host unmounted the original (its overlay then
 * refuses a new mount of the same upper dir, EBUSY; its netns would never go). Only this
 * sandbox's root is kept (and its netns file, under the state dir's netns/).
 */
static void detach_other_sandboxes(const struct shim *s)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return;
    _cleanup_free_ char *rootfs = xasprintf("%s/rootfs", s->bundle);
    char line[4096], mp[2048], type[64];
    char *points[4096];
    size_t n = 0;
    while (fgets(line, sizeof(line), f) && n < ARRAY_SIZE(points)) {
        const char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %*s %2047s", mp) != 1 ||
            sscanf(dash + 3, "%63s", type) != 1)
            continue;
        bool other_root = strcmp(type, "overlay") == 0 && strcmp(mp, rootfs) != 0;
        bool other_netns = strcmp(type, "nsfs") == 0 && !strstr(mp, s->id);
        if (other_root || other_netns)
            points[n++] = strdup(mp);
    }
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        umount2(points[i], MNT_DETACH);
        free(points[i]);
    }
}

static pid_t start_runc(struct shim *s, int out_w, int err_w)
{
    _cleanup_free_ char *pidfile = xasprintf("%s/init.pid", s->run_dir);
    _cleanup_free_ char *runclog = xasprintf("%s/runc.log", s->run_dir);
    bool runsc = s->flavor && strcmp(s->flavor, "runsc") == 0;
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    int in = container_stdin(s);
    dup2(in, 0);
    dup2(out_w, 1);
    dup2(err_w, 2);
    if (runsc && hide_proc_sys_net() < 0) {
        fprintf(stderr, "cannot hide /proc/sys/net from runsc: %s\n", strerror(errno));
        _exit(127);
    }
    if (runsc)
        detach_other_sandboxes(s);
    const char *argv[SHIM_GLOBALS_MAX + 24];
    size_t n = 0;
    argv[n++] = s->runtime;
    for (size_t i = 0; i < s->nglobals; i++)
        argv[n++] = s->globals[i];
    if (s->nglobals == 0) {
        argv[n++] = "--root";
        argv[n++] = s->root;
    }
    argv[n++] = "--log";
    argv[n++] = runclog;
    if (s->restore) {
        argv[n++] = "restore";
        argv[n++] = "--image-path";
        argv[n++] = s->restore;
        if (!runsc) { /* CRIU's own log goes next to its images' work dir: the run dir */
            argv[n++] = "--work-path";
            argv[n++] = s->run_dir;
            argv[n++] = "--file-locks";
        }
    } else {
        argv[n++] = "run";
    }
    argv[n++] = "--bundle";
    argv[n++] = s->bundle;
    argv[n++] = "--pid-file";
    argv[n++] = pidfile;
    argv[n++] = s->id;
    argv[n] = NULL;
    execvp(s->runtime, (char *const *)argv);
    fprintf(stderr, "cannot run %s: %s\n", s->runtime, strerror(errno));
    _exit(127);
}

static int parse_args(int argc, char **argv, struct shim *s)
{
    static const struct option opts[] = {
        {"id", 1, 0, 'i'},      {"bundle", 1, 0, 'b'},  {"run-dir", 1, 0, 'r'},
        {"log-dir", 1, 0, 'l'}, {"log-max", 1, 0, 'm'}, {"runtime", 1, 0, 't'},
        {"root", 1, 0, 'R'},    {"restore", 1, 0, 'x'}, {"flavor", 1, 0, 'f'},
        {"global", 1, 0, 'g'},  {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'i':
            s->id = optarg;
            break;
        case 'b':
            s->bundle = optarg;
            break;
        case 'r':
            s->run_dir = optarg;
            break;
        case 'l':
            s->log_dir = optarg;
            break;
        case 'm':
            s->log_max = strtoull(optarg, NULL, 10);
            break;
        case 't':
            s->runtime = optarg;
            break;
        case 'R':
            s->root = optarg;
            break;
        case 'x':
            s->restore = optarg;
            break;
        case 'f':
            s->flavor = optarg;
            break;
        case 'g':
            if (s->nglobals >= SHIM_GLOBALS_MAX)
                return -1;
            s->globals[s->nglobals++] = optarg;
            break;
        default:
            return -1;
        }
    }
    return s->id && s->bundle && s->run_dir && s->log_dir && s->runtime && s->root ? 0 : -1;
}

/* Copy output until both pipes close, forwarding SIGTERM/SIGINT to runc meanwhile. */
static void pump_until_eof(struct shim *s, int out_r, int err_r, pid_t runc_pid)
{
    bool out_open = true, err_open = true;
    while (out_open || err_open) {
        if (forward_sig) {
            kill(runc_pid, forward_sig);
            forward_sig = 0;
        }
        struct pollfd p[2] = {{out_open ? out_r : -1, POLLIN, 0},
                              {err_open ? err_r : -1, POLLIN, 0}};
        if (poll(p, 2, -1) < 0)
            continue;
        if (p[0].revents && !pump(s, out_r, false))
            out_open = false;
        if (p[1].revents && !pump(s, err_r, true))
            err_open = false;
    }
}

int shim_main(int argc, char **argv)
{
    struct shim s = {.log_max = 16 << 20, .runtime = "runc", .root = "/run/sandboxer/runc"};
    if (parse_args(argc, argv, &s) < 0) {
        fprintf(stderr, "usage: sandboxer internal-shim --id ID --bundle DIR --run-dir DIR "
                        "--log-dir DIR [--log-max N] [--runtime PATH] [--root DIR]\n"
                        "       [--flavor runc|runsc] [--global ARG]... [--restore DIR]\n");
        return 2;
    }
    s.run_fd = open(s.run_dir, O_DIRECTORY | O_CLOEXEC);
    if (s.run_fd < 0 || open_log(&s) < 0)
        return 1;
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    char pid[32];
    snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
    write_run_file(&s, "shim.pid", pid);
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0)
        return 1;
    pid_t runc_pid = start_runc(&s, po[1], pe[1]);
    close(po[1]);
    close(pe[1]);
    if (runc_pid < 0)
        return 1;
    pump_until_eof(&s, po[0], pe[0], runc_pid);
    int status = 0;
    while (waitpid(runc_pid, &status, 0) < 0 && errno == EINTR)
        ;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (faccessat(s.run_fd, "init.pid", F_OK, 0) != 0) {
        s.err_tail[s.err_len < sizeof(s.err_tail) ? s.err_len : sizeof(s.err_tail) - 1] = '\0';
        write_run_file(&s, "runc.err", s.err_tail);
    }
    char exit_text[32];
    snprintf(exit_text, sizeof(exit_text), "%d\n", code);
    write_run_file(&s, "exit", exit_text);
    return 0;
}
