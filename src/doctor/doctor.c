/* The table of host checks, the sysctl checks and --fix (DOCTOR_SYSCTL_CONF). */
#include "doctor.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/util.h"

#define REQ DOCTOR_REQUIRED
#define REC DOCTOR_RECOMMENDED
#define OPT DOCTOR_OPTIONAL

static const struct doctor_check checks[] = {
    {"root", REQ, "the daemon runs as root (and so do these checks)", doctor_root},
    {"kernel", REQ, "Linux >= 5.10", doctor_kernel},
    {"cgroups", REQ, "memory, cpu and pids controllers, for each sandbox's limits", doctor_cgroups},
    {"cgroup-v2", REC, "one unified hierarchy (user namespaces and runsc delegate better)",
     doctor_cgroup_v2},
    {"favordynmods", REC, "cgroup2 favordynmods: fast cgroup moves at every start and restore",
     doctor_favordynmods},
    {"runc", REQ, "the OCI runtime", doctor_runc},
    {"criu", REC, "CRIU >= 4.0 that passes `criu check`: fork, hibernate, snapshots", doctor_criu},
    {"criu-build", REC, "our CRIU build (scripts/criu-patches: TCP on Linux >= 6.16, speed)",
     doctor_criu_build},
    {"overlay", REQ, "overlayfs on the state dir's filesystem: every sandbox's root",
     doctor_overlay},
    {"overlay-export", REC,
     "overlayfs index=on,nfs_export=on: CRIU checkpoints inotify/fanotify watches",
     doctor_overlay_export},
    {"disk-quota", REC, "disk limits (create's `disk`): btrfs qgroups or project quotas",
     doctor_quota},
    {"userns", REC, "user namespaces (root in a sandbox as an unprivileged host uid; planned)",
     doctor_userns},
    {"idmapped-overlay", REC, "idmapped mounts under overlayfs (shared layers with user ns)",
     doctor_idmapped},
    {"kvm", OPT, "/dev/kvm, for runsc --platform=kvm", doctor_kvm},
    {"runsc", OPT, "gVisor, the hardened runtime", doctor_runsc},
    {"runsc-ptrace", OPT, "runsc --platform=ptrace runs a container", doctor_runsc_platform},
    {"runsc-kvm", OPT, "runsc --platform=kvm runs a container (hangs in nested VMs)",
     doctor_runsc_platform},
    {"kernel.dmesg_restrict", REC, "the kernel log is for root only", doctor_sysctl,
     "kernel.dmesg_restrict", 1, 1},
    {"kernel.kptr_restrict", REC, "kernel addresses hidden from processes without CAP_SYSLOG",
     doctor_sysctl, "kernel.kptr_restrict", 1, 1},
    /* 2, not 1: 1 cannot be undone until a reboot, 2 can. */
    {"kernel.unprivileged_bpf_disabled", REC, "no eBPF for unprivileged users", doctor_sysctl,
     "kernel.unprivileged_bpf_disabled", 1, 2},
    {"kernel.perf_event_paranoid", REC, "no kernel profiling for unprivileged users", doctor_sysctl,
     "kernel.perf_event_paranoid", 2, 2},
    {"fs.protected_symlinks", REC, "no following others' symlinks in sticky directories",
     doctor_sysctl, "fs.protected_symlinks", 1, 1},
    {"fs.protected_hardlinks", REC, "no hard links to files one cannot write", doctor_sysctl,
     "fs.protected_hardlinks", 1, 1},
    {"fs.protected_fifos", REC, "no writing others' FIFOs in sticky directories", doctor_sysctl,
     "fs.protected_fifos", 1, 1},
    {"fs.protected_regular", REC, "no O_CREAT on others' files in sticky directories",
     doctor_sysctl, "fs.protected_regular", 1, 1},
    {"kernel.unprivileged_userns_clone", OPT,
     "user namespaces for unprivileged host users (Debian kernels)", doctor_userns_clone},
};

const struct doctor_check *doctor_checks(size_t *n)
{
    *n = ARRAY_SIZE(checks);
    return checks;
}

const struct doctor_check *doctor_find(const char *id)
{
    for (size_t i = 0; i < ARRAY_SIZE(checks); i++)
        if (strcmp(checks[i].id, id) == 0)
            return &checks[i];
    return NULL;
}

const char *doctor_need_name(enum doctor_need n)
{
    return n == DOCTOR_REQUIRED ? "required" : n == DOCTOR_RECOMMENDED ? "recommended" : "optional";
}

void doctor_run(const struct doctor_opts *o, const struct doctor_check *c, struct doctor_result *r)
{
    memset(r, 0, sizeof(*r));
    c->run(o, c, r);
    if (r->ok)
        r->fix[0] = '\0';
}

void doctor_say(char *field, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(field, size, fmt, ap);
    va_end(ap);
}

int doctor_kernel_version(void)
{
    struct utsname u;
    int major = 0, minor = 0;
    if (uname(&u) < 0 || sscanf(u.release, "%d.%d", &major, &minor) != 2)
        return 0;
    return major * 1000 + minor;
}

void doctor_existing_dir(const char *path, char *out, size_t size)
{
    snprintf(out, size, "%s", path && *path ? path : "/");
    struct stat st;
    while (stat(out, &st) < 0 || !S_ISDIR(st.st_mode)) {
        char *slash = strrchr(out, '/');
        if (!slash || slash == out) {
            snprintf(out, size, "/");
            return;
        }
        *slash = '\0';
    }
}

/* "kernel.kptr_restrict" -> "/proc/sys/kernel/kptr_restrict" (new string). */
static char *sysctl_path(const char *name)
{
    char *p = xasprintf("/proc/sys/%s", name);
    for (char *s = p + 10; *s; s++)
        if (*s == '.')
            *s = '/';
    return p;
}

bool doctor_read_sysctl(const char *name, char *out, size_t size)
{
    _cleanup_free_ char *path = sysctl_path(name);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    bool ok = fgets(out, (int)size, f) != NULL;
    fclose(f);
    if (ok)
        out[strcspn(out, "\n")] = '\0';
    return ok;
}

void doctor_sysctl(const struct doctor_opts *o, const struct doctor_check *c,
                   struct doctor_result *r)
{
    (void)o;
    char v[64];
    if (!doctor_read_sysctl(c->sysctl, v, sizeof(v))) {
        SAY(r->value, "absent");
        SAY(r->found, "not in this kernel");
        r->ok = true; /* nothing to set: the kernel has no such knob */
        return;
    }
    SAY(r->value, "%s", v);
    r->ok = atol(v) >= c->min;
    SAY(r->found, "%s (want >= %ld)", v, c->min);
    SAY(r->fix, "sysctl -w %s=%ld, and `%s = %ld` in %s (`sandboxer doctor --fix` does both)",
        c->sysctl, c->set, c->sysctl, c->set, DOCTOR_SYSCTL_CONF);
}

void doctor_userns_clone(const struct doctor_opts *o, const struct doctor_check *c,
                         struct doctor_result *r)
{
    (void)o, (void)c;
    char v[64];
    if (!doctor_read_sysctl("kernel.unprivileged_userns_clone", v, sizeof(v))) {
        r->ok = true;
        SAY(r->value, "absent");
        SAY(r->found, "not in this kernel (user.max_user_namespaces governs)");
        return;
    }
    SAY(r->value, "%s", v);
    r->ok = atol(v) == 0;
    SAY(r->found, "%s", v);
    SAY(r->fix, "sysctl -w kernel.unprivileged_userns_clone=0 if no host user needs "
                "unprivileged user namespaces (rootless containers, browser sandboxes); "
                "sandboxes cannot make them anyway (seccomp), the daemon is root");
}

static bool write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w, n -= (size_t)w;
    }
    return true;
}

/* DOCTOR_SYSCTL_CONF with `name = value` set: other lines kept, written atomically. */
static int write_conf(const char *name, long value, err_t *err)
{
    buf_t out = {0};
    bool done = false;
    FILE *f = fopen(DOCTOR_SYSCTL_CONF, "re");
    if (!f)
        buf_puts(&out, "# Written by `sandboxer doctor --fix`: sysctls for a sandbox host "
                       "(docs/security.md).\n");
    char line[512];
    while (f && fgets(line, sizeof(line), f)) {
        char key[256];
        if (sscanf(line, " %255[^= \t]", key) == 1 && strcmp(key, name) == 0) {
            if (!done)
                buf_printf(&out, "%s = %ld\n", name, value);
            done = true;
            continue;
        }
        buf_puts(&out, line);
    }
    if (f)
        fclose(f);
    if (!done)
        buf_printf(&out, "%s = %ld\n", name, value);
    _cleanup_free_ char *tmp = xasprintf("%s.tmp", DOCTOR_SYSCTL_CONF);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    bool ok = fd >= 0 && write_all(fd, out.data, out.len) && fsync(fd) == 0;
    if (fd >= 0)
        close(fd);
    buf_free(&out);
    if (!ok || rename(tmp, DOCTOR_SYSCTL_CONF) < 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return err_sys(err, "write %s", DOCTOR_SYSCTL_CONF);
    }
    return 0;
}

int doctor_fix_sysctl(const struct doctor_check *c, char *from, size_t size, err_t *err)
{
    if (!c->sysctl)
        return err_set(err, ERR_INVALID, 0, "invalid", "%s is not a sysctl", c->id);
    if (!doctor_read_sysctl(c->sysctl, from, size))
        return err_set(err, ERR_NOT_FOUND, 0, "not_found", "this kernel has no %s", c->sysctl);
    _cleanup_free_ char *path = sysctl_path(c->sysctl);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    char v[32];
    int n = snprintf(v, sizeof(v), "%ld\n", c->set);
    bool ok = fd >= 0 && write(fd, v, (size_t)n) == n;
    int e = errno;
    if (fd >= 0)
        close(fd);
    if (!ok) {
        errno = e;
        return err_sys(err, "set %s", c->sysctl);
    }
    return write_conf(c->sysctl, c->set, err);
}
