/* The runc + CRIU entry of the runtime table: every invocation of runc goes through here. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/util.h"
#include "runtime_internal.h"

#define RUNC_TIMEOUT_MS 30000

static void runc_global_args(const struct runtime *rt, const char **out, size_t max)
{
    if (max >= 3) {
        out[0] = "--root";
        out[1] = rt->root;
        out[2] = NULL;
    }
}

static int runc_kill(const struct runtime *rt, const char *id, int sig, bool all, err_t *err)
{
    char s[16];
    snprintf(s, sizeof(s), "%d", sig);
    return all ? runtime_run(rt, NULL, RUNC_TIMEOUT_MS, err, "kill", "--all", id, s, NULL)
               : runtime_run(rt, NULL, RUNC_TIMEOUT_MS, err, "kill", id, s, NULL);
}

static int runc_delete(const struct runtime *rt, const char *id, err_t *err)
{
    err_t e = {0};
    if (runtime_run(rt, NULL, RUNC_TIMEOUT_MS, &e, "delete", "--force", id, NULL) == 0)
        return 0;
    if (strstr(e.msg, "does not exist") || strstr(e.msg, "not found"))
        return 0;
    *err = e;
    return -1;
}

static int runc_pause(const struct runtime *rt, const char *id, bool pause, err_t *err)
{
    if (!pause)
        return runtime_run(rt, NULL, RUNC_TIMEOUT_MS, err, "resume", id, NULL);
    /* runc gives up freezing after a short while when a task does not stop at once (a busy
     * host, a task in the middle of a fork) and thaws again: "unable to freeze". Try again a
     * few times, waiting a little longer each time. */
    for (int attempt = 0;; attempt++) {
        err_t e = {0};
        if (runtime_run(rt, NULL, RUNC_TIMEOUT_MS, &e, "pause", id, NULL) == 0)
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

static int runc_checkpoint(const struct runtime *rt, const char *id, const char *image_dir,
                           const char *work_dir, bool leave_running, err_t *err)
{
    int rc = leave_running
                 ? runtime_run(rt, NULL, 120000, err, "checkpoint", "--image-path", image_dir,
                               "--work-path", work_dir, "--file-locks", "--leave-running", id, NULL)
                 : runtime_run(rt, NULL, 120000, err, "checkpoint", "--image-path", image_dir,
                               "--work-path", work_dir, "--file-locks", id, NULL);
    if (rc < 0)
        return err_prefix(err, "checkpoint (CRIU log in %s/dump.log)", work_dir);
    return 0;
}

static int runc_checkpoint_explain(const struct runtime *rt, const char *work_dir, const char *id,
                                   err_t *err)
{
    return runtime_criu_checkpoint_explain(work_dir, id, err);
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

static int runc_after_restore(const struct runtime *rt, const char *id, pid_t init_pid,
                              const char *hostname, err_t *err)
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

bool runc_criu_available(void)
{
    pthread_once(&criu_once, check_criu);
    return criu_ok;
}

static unsigned runc_host_caps(const struct runtime *rt)
{
    return runc_criu_available() ? RUNTIME_KEEPS_MEMORY : 0;
}

struct runtime runtime_runc = {
    .name = "runc",
    .bin = "runc",
    .caps = RUNTIME_LIVE_CHECKPOINT,
    .host_caps = runc_host_caps,
    .global_args = runc_global_args,
    .kill = runc_kill,
    .delete = runc_delete,
    .pause = runc_pause,
    .checkpoint = runc_checkpoint,
    .checkpoint_explain = runc_checkpoint_explain,
    .after_restore = runc_after_restore,
};
