/* The runc driver: every invocation of the OCI runtime goes through here. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/util.h"
#include "runtime.h"
#include "runtime_internal.h"

#define RUNC_TIMEOUT_MS 30000

static struct runtime_config cfg = {"runc", "/run/sandboxer/runc", "/proc/self/exe"};

extern char **environ;

void runtime_configure(const struct runtime_config *c)
{
    cfg = *c;
}

size_t runtime_state_prefix(const char **prefix)
{
    /* runc's root is <state dir>/runc: the state dir is what comes before its last slash. */
    const char *slash = strrchr(cfg.root, '/');
    *prefix = cfg.root;
    return slash && slash != cfg.root ? (size_t)(slash - cfg.root) : strlen(cfg.root);
}

/* Run `runc --root ROOT <args...>` and fail with its stderr when it fails. */
static int runc(buf_t *out, err_t *err, const char *a0, const char *a1, const char *a2,
                const char *a3)
{
    char *argv[] = {(char *)cfg.runtime, "--root",   (char *)cfg.root, (char *)a0,
                    (char *)a1,          (char *)a2, (char *)a3,       NULL};
    return proc_run_ok(argv, RUNC_TIMEOUT_MS, out, err);
}

int runtime_kill(const char *id, int sig, bool all, err_t *err)
{
    char s[16];
    snprintf(s, sizeof(s), "%d", sig);
    return all ? runc(NULL, err, "kill", "--all", id, s) : runc(NULL, err, "kill", id, s, NULL);
}

int runtime_delete(const char *id, err_t *err)
{
    err_t e = {0};
    if (runc(NULL, &e, "delete", "--force", id, NULL) == 0)
        return 0;
    if (strstr(e.msg, "does not exist") || strstr(e.msg, "not found"))
        return 0;
    *err = e;
    return -1;
}

int runtime_pause(const char *id, bool pause, err_t *err)
{
    if (!pause)
        return runc(NULL, err, "resume", id, NULL, NULL);
    /* runc gives up freezing after a short while when a task does not stop at once (a busy
     * host, a task in the middle of a fork) and thaws again: "unable to freeze". Try again a
     * few times, waiting a little longer each time. */
    for (int attempt = 0;; attempt++) {
        err_t e = {0};
        if (runc(NULL, &e, "pause", id, NULL, NULL) == 0)
            return 0;
        if (!strstr(e.msg, "unable to freeze")) {
            *err = e;
            return -1;
        }
        if (attempt >= 5)
            return err_set(err, ERR_CONFLICT, 0, "freeze_failed",
                           "the sandbox's processes could not be frozen (the host is busy, or "
                           "a process keeps forking); try again");
        log_warn("runtime.freeze_retry", "container=%s attempt=%d", id, attempt + 1);
        usleep(10000u << attempt);
    }
}

int runtime_state(const char *id, char *out, size_t size, pid_t *pid, err_t *err)
{
    buf_t o = {0};
    err_t e = {0};
    if (runc(&o, &e, "state", id, NULL, NULL) < 0) {
        buf_free(&o);
        if (strstr(e.msg, "does not exist") || strstr(e.msg, "not found"))
            return err_set(err, ERR_NOT_FOUND, 0, "not_found", "no container %s", id);
        *err = e;
        return -1;
    }
    json_t *st _cleanup_json_ = json_loadb(o.data ? o.data : "", o.len, 0, NULL);
    buf_free(&o);
    const char *status = json_string_value(json_object_get(st, "status"));
    snprintf(out, size, "%s", status ? status : "unknown");
    if (pid)
        *pid = (pid_t)json_integer_value(json_object_get(st, "pid"));
    return 0;
}

/* Start the shim detached: its own session, so a terminal's ^C never reaches sandboxes. */
static pid_t spawn_shim(const struct shim_paths *p, err_t *err)
{
    char logmax[32];
    snprintf(logmax, sizeof(logmax), "%llu", (unsigned long long)p->log_max);
    char *argv[] = {(char *)cfg.self_exe,
                    "internal-shim",
                    "--id",
                    (char *)p->id,
                    "--bundle",
                    (char *)p->bundle,
                    "--run-dir",
                    (char *)p->run_dir,
                    "--log-dir",
                    (char *)p->log_dir,
                    "--log-max",
                    logmax,
                    "--runtime",
                    (char *)cfg.runtime,
                    "--root",
                    (char *)cfg.root,
                    p->restore ? "--restore" : NULL,
                    (char *)p->restore,
                    NULL};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr,
                             POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSID);
    pid_t pid;
    int rc = posix_spawn(&pid, cfg.self_exe, &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        errno = rc;
        return err_sys(err, "start the shim");
    }
    return pid;
}

/*
 * A start that failed or hangs (a restore that never finishes): end the shim, runc and CRIU
 * under it (one process group) and whatever the container already holds, wait for the shim
 * and reap it, so nothing of the attempt is left to spin or to block the next one.
 */
static void abort_start(const char *id, pid_t shim)
{
    err_t e = {0};
    kill(-shim, SIGKILL);
    runtime_kill(id, SIGKILL, true, &e);
    int fd = proc_pidfd_open(shim);
    if (fd >= 0) {
        struct pollfd pfd = {fd, POLLIN, 0};
        poll(&pfd, 1, 5000);
        close(fd);
    }
    waitpid(shim, NULL, WNOHANG);
    runtime_delete(id, &e);
}

pid_t runtime_start(const struct shim_paths *p, int timeout_ms, pid_t *init_pid, err_t *err)
{
    pid_t shim = spawn_shim(p, err);
    if (shim < 0)
        return -1;
    int dirfd _cleanup_close_ = open(p->run_dir, O_DIRECTORY | O_CLOEXEC);
    double deadline = now_mono_ms() + timeout_ms;
    char line[64];
    unsigned delay = 200;
    while (now_mono_ms() < deadline) {
        if (read_small_file(dirfd, "init.pid", line, sizeof(line)) && atoi(line) > 0) {
            *init_pid = atoi(line);
            return shim;
        }
        if (read_small_file(dirfd, "exit", line, sizeof(line)))
            break; /* runc gave up: the shim wrote the exit status */
        usleep(delay);
        if (delay < 1000) /* a restore takes ~50-100 ms: look at least every millisecond */
            delay *= 2;
    }
    bool timed_out = now_mono_ms() >= deadline;
    abort_start(p->id, shim);
    char why[1024] = "", criu[512] = "";
    read_small_file(dirfd, "runc.err", why, sizeof(why));
    if (p->restore)
        criu_restore_error(dirfd, criu, sizeof(criu));
    return err_set(err, ERR_RUNTIME, 0, "runtime", "the container did not start%s%s%s%s%s",
                   timed_out ? " in time" : "", why[0] ? ": " : "", why, criu[0] ? "; CRIU: " : "",
                   criu);
}

int runtime_checkpoint(const char *id, const char *image_dir, const char *work_dir,
                       bool leave_running, err_t *err)
{
    char *argv[16];
    int n = 0;
    char *fixed[] = {(char *)cfg.runtime, "--root",         (char *)cfg.root,
                     "checkpoint",        "--image-path",   (char *)image_dir,
                     "--work-path",       (char *)work_dir, "--file-locks"};
    for (size_t i = 0; i < ARRAY_SIZE(fixed); i++)
        argv[n++] = fixed[i];
    if (leave_running)
        argv[n++] = "--leave-running";
    argv[n++] = (char *)id;
    argv[n] = NULL;
    if (proc_run_ok(argv, 120000, NULL, err) < 0)
        return err_prefix(err, "checkpoint (CRIU log in %s/dump.log)", work_dir);
    return 0;
}

struct uts_job {
    int ns_fd;
    const char *hostname;
    int errnum;
};

/* setns changes only the calling thread: a short-lived one, so the daemon's stay put. */
static void *uts_thread(void *arg)
{
    struct uts_job *j = arg;
    if (setns(j->ns_fd, CLONE_NEWUTS) < 0 || sethostname(j->hostname, strlen(j->hostname)) < 0)
        j->errnum = errno;
    return NULL;
}

int runtime_after_restore(pid_t init_pid, const char *hostname, err_t *err)
{
    /* The restored tree is in the sandbox's own netns (its loopback was brought up when the
     * namespace was made); only the hostname, restored from the images, is the source's. */
    if (!hostname)
        return 0;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/uts", (int)init_pid);
    struct uts_job j = {.ns_fd = open(path, O_RDONLY | O_CLOEXEC), .hostname = hostname};
    if (j.ns_fd < 0)
        return err_sys(err, "open %s", path);
    pthread_t t;
    int rc = pthread_create(&t, NULL, uts_thread, &j);
    if (rc == 0)
        pthread_join(t, NULL);
    close(j.ns_fd);
    errno = rc ? rc : j.errnum;
    if (rc || j.errnum)
        return err_sys(err, "set the hostname of the restored sandbox");
    return 0;
}

static bool criu_ok;
static pthread_once_t criu_once = PTHREAD_ONCE_INIT;

static void check_criu(void)
{
    char *argv[] = {"criu", "check", NULL};
    err_t err = {0};
    criu_ok = proc_run_ok(argv, 30000, NULL, &err) == 0;
    if (!criu_ok)
        log_warn("runtime.criu_unavailable", "msg=\"fork keeps files only; no hibernate\"");
}

bool runtime_criu_available(void)
{
    pthread_once(&criu_once, check_criu);
    return criu_ok;
}
