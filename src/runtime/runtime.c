/*
 * The runtime table: one entry per OCI runtime (runc.c, runsc.c), each a struct of
 * operations, and the functions of runtime.h that dispatch to them. Starting a container
 * (the shim) is the same for both: only the shim's arguments differ.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/protocol.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/util.h"
#include "runtime_internal.h"

#define RUNTIME_ARGS_MAX 32

static struct runtime_config cfg = {"runc",           "runsc", "/var/lib/sandboxer",
                                    "/proc/self/exe", "auto",  NULL};

static struct runtime *const table[] = {&runtime_runc, &runtime_runsc};

extern char **environ;

void runtime_configure(const struct runtime_config *c)
{
    /* The platform probe's thread reads the agent's path after the caller's copy is gone
     * (sbx_open builds it on the heap): keep our own. The other strings live as long as the
     * daemon's configuration. */
    static char agent_bin[PATH_MAX];
    cfg = *c;
    if (c->agent_bin) {
        snprintf(agent_bin, sizeof(agent_bin), "%s", c->agent_bin);
        cfg.agent_bin = agent_bin;
    }
    runtime_runc.bin = cfg.runc;
    runtime_runsc.bin = cfg.runsc;
    for (size_t i = 0; i < ARRAY_SIZE(table); i++)
        snprintf(table[i]->root, sizeof(table[i]->root), "%s/%s", cfg.state_dir, table[i]->name);
    runtime_runsc_probe();
}

const struct runtime_config *runtime_cfg(void)
{
    return &cfg;
}

size_t runtime_state_prefix(const char **prefix)
{
    *prefix = cfg.state_dir;
    return strlen(cfg.state_dir);
}

const runtime_t *runtime_find(const char *name)
{
    for (size_t i = 0; name && i < ARRAY_SIZE(table); i++)
        if (strcmp(table[i]->name, name) == 0)
            return table[i];
    return NULL;
}

const char *runtime_name(const runtime_t *rt)
{
    return rt->name;
}

bool runtime_can(const runtime_t *rt, unsigned caps)
{
    unsigned have = rt->caps | (rt->host_caps ? rt->host_caps(rt) : 0);
    return (have & caps) == caps;
}

int runtime_usable(const runtime_t *rt, err_t *err)
{
    return rt->usable ? rt->usable(rt, err) : 0;
}

/* argv = BIN, the runtime's global args, then the caller's; returns the count. */
static size_t base_argv(const struct runtime *rt, const char **argv, size_t max)
{
    size_t n = 0;
    argv[n++] = rt->bin;
    rt->global_args(rt, argv + n, max - n - 1);
    while (argv[n])
        n++;
    return n;
}

int runtime_run(const struct runtime *rt, buf_t *out, int timeout_ms, err_t *err, ...)
{
    const char *argv[RUNTIME_ARGS_MAX] = {0};
    size_t n = base_argv(rt, argv, 16);
    va_list ap;
    va_start(ap, err);
    for (const char *a; n < RUNTIME_ARGS_MAX - 1 && (a = va_arg(ap, const char *));)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    return proc_run_ok((char *const *)argv, timeout_ms, out, err);
}

int runtime_kill(const runtime_t *rt, const char *id, int sig, bool all, err_t *err)
{
    return rt->kill(rt, id, sig, all, err);
}

int runtime_delete(const runtime_t *rt, const char *id, err_t *err)
{
    return rt->delete (rt, id, err);
}

int runtime_pause(const runtime_t *rt, const char *id, bool pause, err_t *err)
{
    return rt->pause(rt, id, pause, err);
}

int runtime_generic_state(const struct runtime *rt, const char *id, char *out, size_t size,
                          pid_t *pid, err_t *err)
{
    buf_t o = {0};
    err_t e = {0};
    if (runtime_run(rt, &o, 30000, &e, "state", id, NULL) < 0) {
        buf_free(&o);
        if (strstr(e.msg, "does not exist") || strstr(e.msg, "not found") ||
            strstr(e.msg, "cannot load container"))
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

int runtime_state(const runtime_t *rt, const char *id, char *out, size_t size, pid_t *pid,
                  err_t *err)
{
    return runtime_generic_state(rt, id, out, size, pid, err);
}

int runtime_checkpoint(const runtime_t *rt, const char *id, const char *image_dir,
                       const char *work_dir, bool leave_running, err_t *err)
{
    return rt->checkpoint(rt, id, image_dir, work_dir, leave_running, err);
}

int runtime_checkpoint_explain(const runtime_t *rt, const char *work_dir, const char *id,
                               err_t *err)
{
    return rt->checkpoint_explain(rt, work_dir, id, err);
}

int runtime_after_restore(const runtime_t *rt, const char *id, pid_t init_pid, const char *hostname,
                          err_t *err)
{
    return rt->after_restore ? rt->after_restore(rt, id, init_pid, hostname, err) : 0;
}

pid_t runtime_agent_peer(const runtime_t *rt, const char *bundle, pid_t init_pid)
{
    return rt->agent_peer ? rt->agent_peer(rt, bundle, init_pid) : init_pid;
}

int runtime_agent_resume(const runtime_t *rt, const char *id, err_t *err)
{
    if (!runtime_can(rt, RUNTIME_AGENT_QUIESCE))
        return 0;
    char sig[16];
    snprintf(sig, sizeof(sig), "%d", AGENT_RESUME_SIGNAL);
    return runtime_run(rt, NULL, 30000, err, "kill", id, sig, NULL);
}

bool runtime_criu_available(void)
{
    return runc_criu_available();
}

/* Start the shim detached: its own session, so a terminal's ^C never reaches sandboxes. */
static pid_t spawn_shim(const struct runtime *rt, const struct shim_paths *p, err_t *err)
{
    char logmax[32];
    snprintf(logmax, sizeof(logmax), "%llu", (unsigned long long)p->log_max);
    const char *argv[RUNTIME_ARGS_MAX * 2] = {
        cfg.self_exe, "internal-shim", "--id",      p->id,      "--bundle",  p->bundle,
        "--run-dir",  p->run_dir,      "--log-dir", p->log_dir, "--log-max", logmax,
        "--runtime",  rt->bin,         "--flavor",  rt->name};
    size_t n = 16;
    if (p->restore) {
        argv[n++] = "--restore";
        argv[n++] = p->restore;
    }
    const char *global[16] = {0};
    rt->global_args(rt, global, 15);
    for (size_t i = 0; global[i]; i++) {
        argv[n++] = "--global";
        argv[n++] = global[i];
    }
    argv[n] = NULL;
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
    int rc = posix_spawn(&pid, cfg.self_exe, &fa, &attr, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        errno = rc;
        return err_sys(err, "start the shim");
    }
    return pid;
}

/*
 * A start that failed or hangs (a restore that never finishes): end the shim, the runtime
 * under it (one process group) and whatever the container already holds, wait for the shim
 * and reap it, so nothing of the attempt is left to spin or to block the next one.
 */
static void abort_start(const struct runtime *rt, const char *id, pid_t shim)
{
    err_t e = {0};
    kill(-shim, SIGKILL);
    rt->kill(rt, id, SIGKILL, true, &e);
    int fd = proc_pidfd_open(shim);
    if (fd >= 0) {
        struct pollfd pfd = {fd, POLLIN, 0};
        poll(&pfd, 1, 5000);
        close(fd);
    }
    waitpid(shim, NULL, WNOHANG);
    rt->delete (rt, id, &e);
}

pid_t runtime_start(const runtime_t *rt, const struct shim_paths *p, int timeout_ms,
                    pid_t *init_pid, err_t *err)
{
    pid_t shim = spawn_shim(rt, p, err);
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
            break; /* the runtime gave up: the shim wrote the exit status */
        usleep(delay);
        if (delay < 1000) /* a restore takes ~50-100 ms: look at least every millisecond */
            delay *= 2;
    }
    bool timed_out = now_mono_ms() >= deadline;
    abort_start(rt, p->id, shim);
    char why[1024] = "", criu[512] = "";
    read_small_file(dirfd, "runc.err", why, sizeof(why));
    if (p->restore)
        criu_restore_error(dirfd, criu, sizeof(criu));
    return err_set(err, ERR_RUNTIME, 0, "runtime", "the container did not start%s%s%s%s%s",
                   timed_out ? " in time" : "", why[0] ? ": " : "", why, criu[0] ? "; CRIU: " : "",
                   criu);
}
