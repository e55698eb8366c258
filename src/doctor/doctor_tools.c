/*
 * The tools the daemon drives: runc, CRIU (and whether it is our build), runsc and its
 * platforms. Every run has a timeout: `runsc --platform=kvm` hangs in KVM_RUN on a nested VM,
 * so its probe runs in a session of its own that is killed, and cleaned up after, when the
 * time is up.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/proc.h"
#include "common/util.h"
#include "config.h"
#include "doctor.h"
#include "storage/storage.h"

#define CRIU_STAMP "/usr/local/share/sandboxer/criu.build"
#define CRIU_OURS  "/usr/local/sbin/criu"

/* The path of name on PATH, in out; false if none. */
static bool which(const char *name, char *out, size_t size)
{
    const char *path = getenv("PATH");
    _cleanup_free_ char *copy = xstrdup(path ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
    for (char *save, *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        snprintf(out, size, "%s/%s", *dir ? dir : ".", name);
        if (access(out, X_OK) == 0)
            return true;
    }
    return false;
}

/* Run argv; its stdout's first line (or the error) in line. True if it exited 0 in time. */
static bool run_line(char *const argv[], int timeout_ms, char *line, size_t size)
{
    buf_t out = {0}, errout = {0};
    struct proc_result res = {0};
    err_t err = {0};
    bool ok = proc_run(argv, NULL, timeout_ms, 1 << 16, &out, &errout, &res, &err) == 0 &&
              res.exit_code == 0 && !res.timed_out;
    const char *text = ok || !errout.data ? out.data : errout.data;
    if (res.timed_out)
        snprintf(line, size, "timed out after %d ms", timeout_ms);
    else
        snprintf(line, size, "%.*s", text ? (int)strcspn(text, "\n") : 0, text ? text : "");
    if (!ok && !line[0])
        snprintf(line, size, "%.200s", err.msg[0] ? err.msg : "failed");
    buf_free(&out);
    buf_free(&errout);
    return ok;
}

void doctor_runc(const struct doctor_opts *o, const struct doctor_check *c, struct doctor_result *r)
{
    (void)c;
    char path[4096], line[256];
    SAY(r->fix, "apt-get install runc");
    if (!which("runc", path, sizeof(path))) {
        SAY(r->value, "absent");
        SAY(r->found, "no runc on PATH");
        return;
    }
    char *argv[] = {path, "--version", NULL};
    r->ok = run_line(argv, o->timeout_ms, line, sizeof(line));
    const char *v = strncmp(line, "runc version ", 13) == 0 ? line + 13 : line;
    SAY(r->value, "%s", r->ok ? v : "broken");
    SAY(r->found, "%s (%s)", line, path);
}

void doctor_criu(const struct doctor_opts *o, const struct doctor_check *c, struct doctor_result *r)
{
    (void)c;
    char path[4096], line[256] = "", check[256];
    SAY(r->fix, "scripts/setup (or scripts/build-criu) builds and installs CRIU 4 as " CRIU_OURS
                "; put /usr/local/sbin first in PATH (runc looks criu up there)");
    if (!which("criu", path, sizeof(path))) {
        SAY(r->value, "absent");
        SAY(r->found, "no criu on PATH: forks keep files only, no hibernation");
        return;
    }
    buf_t out = {0};
    char *vargv[] = {path, "--version", NULL};
    err_t err = {0};
    proc_run_ok(vargv, o->timeout_ms, &out, &err);
    const char *ver = out.data ? strstr(out.data, "Version: ") : NULL;
    snprintf(line, sizeof(line), "%.*s", ver ? (int)strcspn(ver + 9, "\n") : 0, ver ? ver + 9 : "");
    buf_free(&out);
    char *cargv[] = {path, "check", NULL};
    bool checked = run_line(cargv, o->timeout_ms * 3, check, sizeof(check));
    int major = atoi(line);
    r->ok = major >= 4 && checked;
    SAY(r->value, "%s", line[0] ? line : "unknown");
    SAY(r->found, "%s at %s; criu check: %s", line[0] ? line : "unknown version", path,
        checked ? "ok" : check);
}

void doctor_criu_build(const struct doctor_opts *o, const struct doctor_check *c,
                       struct doctor_result *r)
{
    (void)o, (void)c;
    char path[4096] = "", stamp[128] = "";
    which("criu", path, sizeof(path));
    int dir = open("/usr/local/share/sandboxer", O_PATH | O_DIRECTORY | O_CLOEXEC);
    bool have = dir >= 0 && read_small_file(dir, "criu.build", stamp, sizeof(stamp));
    if (dir >= 0)
        close(dir);
    const char *want = SANDBOXER_CRIU_BUILD;
    r->ok = have && (!*want || strcmp(stamp, want) == 0) && strcmp(path, CRIU_OURS) == 0;
    SAY(r->value, "%s", have ? stamp : "absent");
    SAY(r->found, "%s%s%s; criu on PATH: %s", have ? stamp : "no " CRIU_STAMP,
        *want ? ", this sandboxer wants " : "", want, path[0] ? path : "none");
    SAY(r->fix, "scripts/setup rebuilds and installs it (scripts/build-criu: CRIU 4.1.1 with "
                "scripts/criu-patches); /usr/local/sbin first in PATH");
}

void doctor_runsc(const struct doctor_opts *o, const struct doctor_check *c,
                  struct doctor_result *r)
{
    (void)c;
    char path[4096], line[256];
    SAY(r->fix, "apt-get install runsc (gVisor): the hardened runtime, for the public's code");
    if (!which("runsc", path, sizeof(path))) {
        SAY(r->value, "absent");
        SAY(r->found, "no runsc on PATH");
        return;
    }
    char *argv[] = {path, "--version", NULL};
    r->ok = run_line(argv, o->timeout_ms, line, sizeof(line));
    const char *v = strncmp(line, "runsc version ", 14) == 0 ? line + 14 : line;
    SAY(r->value, "%s", r->ok ? v : "broken");
    SAY(r->found, "%s (%s)", line, path);
}

/* ---- runsc platform probes ---- */

/* Remove the cgroup name from every hierarchy (runsc leaves it when killed). */
static void remove_cgroups(const char *name)
{
    _cleanup_free_ char *top = xasprintf("/sys/fs/cgroup/%s", name);
    DIR *d = opendir("/sys/fs/cgroup");
    for (int i = 0; i < 100; i++) { /* a killed sandbox takes a moment to leave its cgroup */
        bool busy = rmdir(top) < 0 && errno == EBUSY;
        struct dirent *de;
        if (d)
            rewinddir(d);
        while (d && (de = readdir(d))) {
            _cleanup_free_ char *p = xasprintf("/sys/fs/cgroup/%s/%s", de->d_name, name);
            if (de->d_name[0] != '.' && rmdir(p) < 0 && errno == EBUSY)
                busy = true;
        }
        if (!busy)
            break;
        usleep(20000);
    }
    if (d)
        closedir(d);
}

static bool write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "we");
    bool ok = f && fputs(text, f) >= 0;
    return f ? fclose(f) == 0 && ok : false;
}

/* Start argv in a session of its own (so that the whole tree can be killed), output to log. */
static pid_t spawn_session(char *const argv[], char *const env[], const char *log)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, &attr, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    return rc == 0 ? pid : -1;
}

/* Wait for pid until timeout_ms; its exit status, or -1 on timeout (it is then killed,
 * with its whole session). */
static int wait_or_kill(pid_t pid, int timeout_ms)
{
    double deadline = now_mono_ms() + timeout_ms;
    int st;
    while (now_mono_ms() < deadline) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(10000);
    }
    kill(-pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* The last line of a file, for an error message. */
static void last_line(const char *path, char *out, size_t size)
{
    FILE *f = fopen(path, "re");
    char line[512];
    out[0] = '\0';
    while (f && fgets(line, sizeof(line), f))
        if (line[strspn(line, " \n")])
            snprintf(out, size, "%.*s", (int)strcspn(line, "\n"), line);
    if (f)
        fclose(f);
}

/* `runsc --platform=P run` of /bin/true over the host's root (read-only) in a scratch dir.
 * 0: it ran; -1: timed out; else its exit status (msg says why). */
static int runsc_probe(const char *runsc, const char *platform, int timeout_ms, char *msg,
                       size_t size)
{
    char tmp[] = "/tmp/sandboxer-doctor-XXXXXX";
    if (!mkdtemp(tmp))
        return snprintf(msg, size, "mkdtemp: %s", strerror(errno)), 1;
    _cleanup_free_ char *id = xasprintf("sandboxer-doctor-%d-%s", (int)getpid(), platform);
    _cleanup_free_ char *bundle = xasprintf("%s/bundle", tmp);
    _cleanup_free_ char *root = xasprintf("%s/root", tmp);
    _cleanup_free_ char *config = xasprintf("%s/config.json", bundle);
    _cleanup_free_ char *log = xasprintf("%s/log", tmp);
    _cleanup_free_ char *spec = xasprintf(
        "{\"ociVersion\": \"1.0.2\", \"process\": {\"args\": [\"/bin/true\"], \"cwd\": \"/\", "
        "\"user\": {\"uid\": 0, \"gid\": 0}, \"env\": [\"PATH=/usr/bin:/bin\"]}, "
        "\"root\": {\"path\": \"/\", \"readonly\": true}, \"linux\": {\"cgroupsPath\": \"/%s\", "
        "\"namespaces\": [{\"type\": \"pid\"}, {\"type\": \"mount\"}, {\"type\": \"ipc\"}, "
        "{\"type\": \"uts\"}, {\"type\": \"network\"}]}}\n",
        id);
    int rc = 1;
    if (mkdir(bundle, 0700) < 0 || mkdir(root, 0700) < 0 || !write_file(config, spec)) {
        snprintf(msg, size, "scratch dir: %s", strerror(errno));
    } else {
        _cleanup_free_ char *plat = xasprintf("--platform=%s", platform);
        _cleanup_free_ char *tmpdir = xasprintf("TMPDIR=%s", tmp);
        char *argv[] = {(char *)runsc, "--root",   root,   plat, "--network=none",
                        "run",         "--bundle", bundle, id,   NULL};
        char *env[] = {tmpdir, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                       NULL};
        pid_t pid = spawn_session(argv, env, log);
        rc = pid < 0 ? 1 : wait_or_kill(pid, timeout_ms);
        if (rc > 0)
            last_line(log, msg, size);
        char *del[] = {(char *)runsc, "--root", root, "delete", "--force", id, NULL};
        char ignored[64];
        run_line(del, 10000, ignored, sizeof(ignored));
    }
    remove_cgroups(id);
    err_t err = {0};
    storage_remove_tree(tmp, &err);
    return rc;
}

void doctor_runsc_platform(const struct doctor_opts *o, const struct doctor_check *c,
                           struct doctor_result *r)
{
    const char *platform = strchr(c->id, '-') + 1;
    char runsc[4096], msg[256] = "";
    bool kvm = strcmp(platform, "kvm") == 0;
    SAY(r->fix, "%s",
        kvm ? "use --platform=ptrace here (on a nested VM, KVM_RUN hangs), or a "
              "host with working /dev/kvm"
            : "see runsc's debug log (runsc --debug --debug-log=DIR ...)");
    if (o->quick || !which("runsc", runsc, sizeof(runsc)) ||
        (kvm && access("/dev/kvm", R_OK | W_OK) != 0)) {
        r->skipped = true;
        SAY(r->value, "skipped");
        SAY(r->found, "%s",
            o->quick                   ? "not probed (--short)"
            : access(runsc, X_OK) != 0 ? "no runsc"
                                       : "no usable /dev/kvm");
        return;
    }
    double t0 = now_mono_ms();
    int rc = runsc_probe(runsc, platform, o->timeout_ms, msg, sizeof(msg));
    r->ok = rc == 0;
    SAY(r->value, "%s", rc == 0 ? "ok" : rc < 0 ? "timeout" : "failed");
    if (rc == 0)
        SAY(r->found, "ran a container in %.0f ms", now_mono_ms() - t0);
    else if (rc < 0)
        SAY(r->found, "no answer in %d ms: killed (a hang in KVM_RUN, as on a nested VM)",
            o->timeout_ms);
    else
        SAY(r->found, "failed (exit %d): %s", rc, msg);
}
