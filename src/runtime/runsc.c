/*
 * The runsc (gVisor) entry of the runtime table. What differs from runc, and why:
 *
 * - The platform (--runsc-platform auto|ptrace|kvm) is probed once at start-up by running the
 *   agent's --help in a throw-away container, bounded (PROBE_TIMEOUT_MS): KVM_RUN hangs on a
 *   nested VM, so a probe that does not finish is killed, its processes and files removed,
 *   and ptrace is used. The choice and the reason are logged.
 * - The agent's sockets (host unix sockets on the socket dir, --host-uds=all) are listened on
 *   by the container's gofer, for every process of the sandbox alike: SO_PEERCRED proves only
 *   that the listener is in this sandbox, so the agent also proves itself with a token
 *   (RUNTIME_AGENT_TOKEN, docs/runsc.md).
 * - A checkpoint is refused, and the container killed, while the sandbox holds a host unix
 *   socket: the agent lets go of them first (RUNTIME_AGENT_QUIESCE) and listens again when
 *   runtime_agent_resume signals it. --leave-running destroys and restores the sandbox
 *   internally, so it is not used: a fork stops and restores its source instead.
 * - runsc takes the interface's address in the netns and does not give it back
 *   (RUNTIME_NET_REAPPLY); the shim runs it in a mount namespace of its own where /proc/sys/net
 *   is hidden (see shim.c), because this build takes any netns on a kernel >= 6.11 for the root
 *   one (gVisor issue 10704).
 * - runsc leaves its cgroups behind when it is killed: delete removes them.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/util.h"
#include "runtime_internal.h"

#define RUNSC_TIMEOUT_MS 30000
#define PROBE_TIMEOUT_MS 3000
#define PROBE_TRIES      3

static struct {
    bool usable;
    char platform[16];
    char why[512];
    bool done;
    pthread_mutex_t lock;
    pthread_cond_t cond;
} probe = {
    false, "ptrace", "not probed", true, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

/* The probe runs in the background from start-up: wait for its answer (bounded by it). */
static void probe_wait(void)
{
    pthread_mutex_lock(&probe.lock);
    while (!probe.done)
        pthread_cond_wait(&probe.cond, &probe.lock);
    pthread_mutex_unlock(&probe.lock);
}

static void runsc_global_args(const struct runtime *rt, const char **out, size_t max)
{
    probe_wait();
    /* --net-raw: the spec's capabilities decide (CAP_NET_RAW only where net_raw asked). */
    const char *args[] = {"--root",  rt->root,     "--platform", probe.platform, "--network",
                          "sandbox", "--host-uds", "all",        "--net-raw",    NULL};
    for (size_t i = 0; i < ARRAY_SIZE(args) && i < max; i++)
        out[i] = args[i];
}

static int runsc_kill(const struct runtime *rt, const char *id, int sig, bool all, err_t *err)
{
    char s[16];
    snprintf(s, sizeof(s), "%d", sig);
    /* In a restored container `kill --all` reaches every process but the init: the init gets
     * the signal too (for SIGKILL that ends the sandbox). */
    err_t e = {0};
    int rc = all ? runtime_run(rt, NULL, RUNSC_TIMEOUT_MS, &e, "kill", "--all", id, s, NULL) : -1;
    if (runtime_run(rt, NULL, RUNSC_TIMEOUT_MS, err, "kill", id, s, NULL) == 0 || rc == 0)
        return 0;
    return -1;
}

/* Remove the cgroup leaf runsc made for id (cgroupsPath /sandboxer/<id>) in every hierarchy. */
static void remove_cgroups(const char *id)
{
    if (runtime_cgroup_mode() == CGROUP_V2) {
        _cleanup_free_ char *dir = xasprintf("/sys/fs/cgroup/sandboxer/%s", id);
        rmdir(dir);
        return;
    }
    DIR *d = opendir("/sys/fs/cgroup");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        _cleanup_free_ char *dir = xasprintf("/sys/fs/cgroup/%s/sandboxer/%s", e->d_name, id);
        if (rmdir(dir) < 0 && errno != ENOENT && errno != ENOTDIR)
            log_debug("runsc.cgroup_left", "dir=%s errno=%d", dir, errno);
    }
    if (d)
        closedir(d);
}

static bool gone(const char *msg)
{
    return strstr(msg, "does not exist") || strstr(msg, "not found") ||
           strstr(msg, "cannot load container") || strstr(msg, "no such file");
}

static int runsc_delete(const struct runtime *rt, const char *id, err_t *err)
{
    err_t e = {0};
    int rc = runtime_run(rt, NULL, RUNSC_TIMEOUT_MS, &e, "delete", "--force", id, NULL);
    remove_cgroups(id);
    if (rc == 0 || gone(e.msg))
        return 0;
    *err = e;
    return -1;
}

static int runsc_pause(const struct runtime *rt, const char *id, bool pause, err_t *err)
{
    return runtime_run(rt, NULL, RUNSC_TIMEOUT_MS, err, pause ? "pause" : "resume", id, NULL);
}

static int runsc_checkpoint(const struct runtime *rt, const char *id, const char *image_dir,
                            const char *work_dir, bool leave_running, err_t *err)
{
    if (leave_running)
        return err_set(err, ERR_INTERNAL, 0, "internal",
                       "runsc checkpoints only stopping the container");
    if (runtime_run(rt, NULL, 120000, err, "checkpoint", "--image-path", image_dir, id, NULL) < 0)
        return -1;
    return 0;
}

static int runsc_checkpoint_explain(const struct runtime *rt, const char *work_dir, const char *id,
                                    err_t *err)
{
    char msg[sizeof(err->msg)];
    snprintf(msg, sizeof(msg), "%s", err->msg);
    log_warn("runsc.checkpoint_failed", "container=%s msg=\"%s\"", id, msg);
    runtime_scrub_paths(msg);
    return err_set(err, ERR_CONFLICT, 0, "checkpoint_failed",
                   "the sandbox cannot be checkpointed: gVisor refused: %.300s", msg);
}

/*
 * gVisor keeps the hostname in its own kernel: setns from the host changes nothing. The
 * agent's binary sets it from inside, run by `runsc exec` with CAP_SYS_ADMIN for that one
 * call (the sandbox's processes never get it).
 */
static int runsc_after_restore(const struct runtime *rt, const char *id, pid_t init_pid,
                               const char *hostname, err_t *err)
{
    if (!hostname)
        return 0;
    if (runtime_run(rt, NULL, RUNSC_TIMEOUT_MS, err, "exec", "--cap", "CAP_SYS_ADMIN", id,
                    "/.sandboxer/sandboxer-agent", "--set-hostname", hostname, NULL) < 0)
        return err_prefix(err, "set the hostname of the restored sandbox");
    return 0;
}

/* The NUL-separated command line of pid, into buf; its length (0 if unreadable). */
static size_t read_cmdline(pid_t pid, char *buf, size_t size)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return (size_t)n;
}

/* True if the command line (n bytes) has the argument arg (whole, or as "--flag=arg"). */
static bool has_arg(const char *cmd, size_t n, const char *arg)
{
    for (size_t i = 0; i < n; i += strlen(cmd + i) + 1) {
        const char *a = cmd + i, *eq = strchr(a, '=');
        if (strcmp(a, arg) == 0 || (eq && strcmp(eq + 1, arg) == 0))
            return true;
    }
    return false;
}

/* Host pids whose command line is runsc's (argv[0] starting with prefix) and names both
 * args; the first into *out, returns how many (each killed when kill_them). */
static int find_runsc_procs(const char *prefix, const char *arg1, const char *arg2, bool kill_them,
                            pid_t *out)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    int found = 0;
    char cmd[4096];
    while (d && (e = readdir(d))) {
        pid_t pid = (pid_t)atoi(e->d_name);
        size_t n = pid > 0 ? read_cmdline(pid, cmd, sizeof(cmd)) : 0;
        if (n == 0 || strncmp(cmd, prefix, strlen(prefix)) != 0 || !has_arg(cmd, n, arg1) ||
            (arg2 && !has_arg(cmd, n, arg2)))
            continue;
        if (found++ == 0 && out)
            *out = pid;
        if (kill_them)
            kill(pid, SIGKILL);
    }
    if (d)
        closedir(d);
    return found;
}

static pid_t runsc_agent_peer(const struct runtime *rt, const char *bundle, pid_t init_pid)
{
    /* The gofer of this container: runsc's binary as "runsc-gofer", with our root and the
     * sandbox's bundle. Only the host makes such processes; the sandbox's code runs inside
     * the sentry (or in ptrace stubs whose every syscall the sentry intercepts). */
    pid_t pid = -1;
    return find_runsc_procs("runsc-gofer", rt->root, bundle, false, &pid) > 0 ? pid : -1;
}

static int runsc_usable(const struct runtime *rt, err_t *err)
{
    probe_wait();
    if (probe.usable)
        return 0;
    return err_set(err, ERR_INVALID, 0, "unsupported",
                   "runtime \"runsc\" is not usable on this host: %s", probe.why);
}

static unsigned runsc_host_caps(const struct runtime *rt)
{
    probe_wait();
    return probe.usable ? RUNTIME_KEEPS_MEMORY : 0;
}

void runtime_wait_probes(void)
{
    probe_wait();
}

const char *runtime_runsc_platform(const char **why)
{
    probe_wait();
    if (why)
        *why = probe.why;
    return probe.usable ? probe.platform : NULL;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    remove(path);
    return 0;
}

/* A throw-away bundle in dir: the agent's --help, which exits 2 after printing its usage. */
static int write_probe_bundle(const char *dir, const char *agent, err_t *err)
{
    _cleanup_free_ char *rootfs = xasprintf("%s/bundle/rootfs", dir);
    _cleanup_free_ char *target = xasprintf("%s/sandboxer-agent", rootfs);
    _cleanup_free_ char *config = xasprintf("%s/bundle/config.json", dir);
    if (!mkdir_p(rootfs, 0755))
        return err_sys(err, "create %s", rootfs);
    close(open(target, O_WRONLY | O_CREAT | O_CLOEXEC, 0755));
    FILE *f = fopen(config, "we");
    if (!f)
        return err_sys(err, "write %s", config);
    fprintf(f,
            "{\"ociVersion\":\"1.0.2\",\"process\":{\"user\":{\"uid\":0,\"gid\":0},"
            "\"args\":[\"/sandboxer-agent\",\"--help\"],\"env\":[\"PATH=/\"],\"cwd\":\"/\"},"
            "\"root\":{\"path\":\"rootfs\",\"readonly\":true},"
            "\"mounts\":[{\"destination\":\"/proc\",\"type\":\"proc\",\"source\":\"proc\"},"
            "{\"destination\":\"/sandboxer-agent\",\"type\":\"bind\",\"source\":\"%s\","
            "\"options\":[\"rbind\",\"ro\"]}],"
            "\"linux\":{\"namespaces\":[{\"type\":\"pid\"},{\"type\":\"ipc\"},{\"type\":\"uts\"},"
            "{\"type\":\"mount\"},{\"type\":\"network\"}]}}",
            agent);
    return fclose(f) == 0 ? 0 : err_sys(err, "write %s", config);
}

/* One bounded run of the probe on platform; 0 if the agent ran (its usage came out). */
static int probe_once(const char *bin, const char *dir, const char *platform, err_t *err)
{
    _cleanup_free_ char *root = xasprintf("%s/root", dir);
    _cleanup_free_ char *bundle = xasprintf("%s/bundle", dir);
    char id[32];
    snprintf(id, sizeof(id), "probe-%d", (int)getpid());
    char *argv[] = {
        (char *)bin, "--root",           root,  "--platform", (char *)platform, "--network",
        "none",      "--ignore-cgroups", "run", "--bundle",   bundle,           id,
        NULL};
    buf_t out = {0}, errout = {0};
    struct proc_result res = {0};
    double t0 = now_mono_ms();
    int rc = proc_run(argv, NULL, PROBE_TIMEOUT_MS, 8192, &out, &errout, &res, err);
    bool ran =
        rc == 0 && ((out.data && memmem(out.data, out.len, "usage: sandboxer-agent", 22)) ||
                    (errout.data && memmem(errout.data, errout.len, "usage: sandboxer-agent", 22)));
    /* What a killed run leaves: the sandbox and gofer (their own session), its state. */
    int left = find_runsc_procs("runsc", root, NULL, true, NULL);
    for (int i = 0; left > 0 && i < 100; i++) {
        usleep(20000);
        left = find_runsc_procs("runsc", root, NULL, true, NULL);
    }
    err_t e = {0};
    char *del[] = {(char *)bin, "--root", root, "delete", "--force", id, NULL};
    proc_run_ok(del, 5000, NULL, &e);
    if (!ran && rc == 0)
        err_set(err, ERR_RUNTIME, 0, "runtime", "%s after %.0f ms%s%.200s",
                res.timed_out ? "no answer (killed)" : "the probe failed", now_mono_ms() - t0,
                errout.len ? ": " : "", errout.data ? errout.data : "");
    buf_free(&out);
    buf_free(&errout);
    return ran ? 0 : -1;
}

/*
 * Try platform (up to PROBE_TRIES times while it fails fast: runsc's start sometimes loses
 * its sandbox on a loaded host, "cannot read client sync file"; a run that hung is not tried
 * again); on success record it with why.
 */
static bool try_platform(const char *bin, const char *dir, const char *platform, const char *why,
                         char *failed, size_t fsize)
{
    err_t err = {0};
    double t0 = now_mono_ms();
    int rc = -1;
    for (int i = 0; i < PROBE_TRIES && rc < 0; i++) {
        if (i > 0 && now_mono_ms() - t0 >= PROBE_TIMEOUT_MS)
            break;
        if (i > 0)
            log_info("runsc.probe_retry", "platform=%s msg=\"%s\"", platform, err.msg);
        err = (err_t){0};
        rc = probe_once(bin, dir, platform, &err);
    }
    if (rc == 0) {
        snprintf(probe.platform, sizeof(probe.platform), "%s", platform);
        snprintf(probe.why, sizeof(probe.why), "%s (probe ran in %.0f ms)", why,
                 now_mono_ms() - t0);
        probe.usable = true;
        return true;
    }
    size_t used = strlen(failed);
    snprintf(failed + used, fsize - used, "%s%s: %s", used ? "; " : "", platform, err.msg);
    return false;
}

static void run_probe(void)
{
    const struct runtime_config *c = runtime_cfg();
    const char *want = c->runsc_platform ? c->runsc_platform : "auto";
    probe.usable = false;
    if (!c->agent_bin) {
        snprintf(probe.why, sizeof(probe.why), "not probed");
        return;
    }
    _cleanup_free_ char *dir = xasprintf("%s/runsc-probe", c->state_dir);
    _cleanup_free_ char *root = xasprintf("%s/root", dir);
    find_runsc_procs("runsc", root, NULL, true, NULL); /* a daemon killed mid-probe */
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    err_t err = {0};
    char failed[1024] = "";
    if (write_probe_bundle(dir, c->agent_bin, &err) < 0) {
        snprintf(probe.why, sizeof(probe.why), "%s", err.msg);
    } else {
        bool kvm_first = strcmp(want, "ptrace") != 0 && access("/dev/kvm", R_OK | W_OK) == 0;
        if (strcmp(want, "kvm") == 0 && !kvm_first)
            snprintf(failed, sizeof(failed), "kvm: /dev/kvm is not usable");
        if (!(kvm_first &&
              try_platform(c->runsc, dir, "kvm",
                           strcmp(want, "kvm") == 0 ? "asked for" : "auto: /dev/kvm works", failed,
                           sizeof(failed))))
            try_platform(c->runsc, dir, "ptrace",
                         strcmp(want, "ptrace") == 0 ? "asked for" : "fallback: kvm did not run",
                         failed, sizeof(failed));
        if (probe.usable && failed[0]) {
            size_t used = strlen(probe.why);
            snprintf(probe.why + used, sizeof(probe.why) - used, "; %s", failed);
        } else if (!probe.usable) {
            snprintf(probe.why, sizeof(probe.why), "runsc did not run a container: %s", failed);
        }
    }
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (probe.usable)
        log_info("runsc.platform", "platform=%s asked=%s why=\"%s\"", probe.platform, want,
                 probe.why);
    else
        log_warn("runsc.unusable", "asked=%s why=\"%s\"", want, probe.why);
}

static void *probe_thread(void *arg)
{
    run_probe();
    pthread_mutex_lock(&probe.lock);
    probe.done = true;
    pthread_cond_broadcast(&probe.cond);
    pthread_mutex_unlock(&probe.lock);
    return NULL;
}

void runtime_runsc_probe(void)
{
    /* In the background: the kvm probe may take its whole bound (a nested VM hangs in
     * KVM_RUN), and the daemon's start waits for nothing runsc does. */
    pthread_t t;
    probe.done = false;
    if (pthread_create(&t, NULL, probe_thread, NULL) != 0) {
        probe_thread(NULL);
        return;
    }
    pthread_detach(t);
}

struct runtime runtime_runsc = {
    .name = "runsc",
    .bin = "runsc",
    .caps = RUNTIME_AGENT_QUIESCE | RUNTIME_NET_REAPPLY | RUNTIME_AGENT_TOKEN,
    .host_caps = runsc_host_caps,
    .usable = runsc_usable,
    .global_args = runsc_global_args,
    .kill = runsc_kill,
    .delete = runsc_delete,
    .pause = runsc_pause,
    .checkpoint = runsc_checkpoint,
    .checkpoint_explain = runsc_checkpoint_explain,
    .after_restore = runsc_after_restore,
    .agent_peer = runsc_agent_peer,
};
