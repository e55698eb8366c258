/* Host checks read from the kernel: version, cgroups, user namespaces, /dev/kvm, quotas. */
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <linux/magic.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/utsname.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/proc.h"
#include "common/util.h"
#include "doctor.h"
#include "runtime/runtime.h"
#include "storage/storage.h"

void doctor_root(const struct doctor_opts *o, const struct doctor_check *c, struct doctor_result *r)
{
    (void)o, (void)c;
    uid_t uid = geteuid();
    r->ok = uid == 0;
    SAY(r->value, "%u", (unsigned)uid);
    SAY(r->found, "uid %u", (unsigned)uid);
    SAY(r->fix, "run as root (sudo sandboxer doctor): the daemon needs root, and so do most "
                "of these checks");
}

void doctor_kernel(const struct doctor_opts *o, const struct doctor_check *c,
                   struct doctor_result *r)
{
    (void)o, (void)c;
    struct utsname u;
    uname(&u);
    int v = doctor_kernel_version();
    SAY(r->value, "%s", u.release);
    /* close_range (5.9) in the agent, pidfds, overlayfs in containers: 5.10 is the oldest
     * long-term kernel with all of it. */
    r->ok = v >= 5010;
    SAY(r->found, "%s", u.release);
    SAY(r->fix, "boot Linux 5.10 or newer (Debian 12's 6.1 is fine)");
}

/* "v2", "hybrid" or "v1", from the filesystems mounted at /sys/fs/cgroup. */
const char *doctor_cgroup_mode(void)
{
    struct statfs fs;
    if (statfs("/sys/fs/cgroup", &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC)
        return "v2";
    if (statfs("/sys/fs/cgroup/unified", &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC)
        return "hybrid";
    return "v1";
}

static bool v1_controller(const char *name)
{
    _cleanup_free_ char *p = xasprintf("/sys/fs/cgroup/%s", name);
    struct statfs fs;
    return statfs(p, &fs) == 0 && fs.f_type == CGROUP_SUPER_MAGIC;
}

/* True if the space-separated list has word. */
static bool has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || p[n] == '\0'))
            return true;
    return false;
}

void doctor_cgroups(const struct doctor_opts *o, const struct doctor_check *c,
                    struct doctor_result *r)
{
    (void)o, (void)c;
    const char *mode = doctor_cgroup_mode();
    const char *want[] = {"memory", "cpu", "pids"};
    char missing[64] = "", have[256] = "";
    if (strcmp(mode, "v2") == 0) {
        int dir = open("/sys/fs/cgroup", O_PATH | O_DIRECTORY | O_CLOEXEC);
        read_small_file(dir, "cgroup.controllers", have, sizeof(have));
        if (dir >= 0)
            close(dir);
    }
    for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
        bool ok = strcmp(mode, "v2") == 0 ? has_word(have, want[i]) : v1_controller(want[i]);
        if (!ok)
            snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), " %s", want[i]);
    }
    r->ok = !missing[0];
    SAY(r->value, "%s", mode);
    SAY(r->found, "%s%s%s",
        strcmp(mode, "v2") == 0       ? "v2 (unified)"
        : strcmp(mode, "hybrid") == 0 ? "hybrid (v1 controllers, cgroup2 at /sys/fs/cgroup/unified)"
                                      : "v1",
        missing[0] ? "; missing:" : "", missing);
    SAY(r->fix, "mount the memory, cpu and pids controllers (systemd does; check the kernel's "
                "cgroup_disable= and cgroup_no_v1= boot options)");
}

void doctor_cgroup_v2(const struct doctor_opts *o, const struct doctor_check *c,
                      struct doctor_result *r)
{
    (void)o, (void)c;
    const char *mode = doctor_cgroup_mode();
    r->ok = strcmp(mode, "v2") == 0;
    SAY(r->value, "%s", mode);
    SAY(r->found, "%s", mode);
    SAY(r->fix, "boot with systemd.unified_cgroup_hierarchy=1 (v1 and hybrid keep working)");
}

void doctor_favordynmods(const struct doctor_opts *o, const struct doctor_check *c,
                         struct doctor_result *r)
{
    (void)o, (void)c;
    const char *where = "";
    int on = runtime_cgroup_favordynmods_on(&where);
    if (doctor_kernel_version() < 6000) {
        SAY(r->value, "unsupported");
        SAY(r->found, "Linux < 6.0 has no favordynmods");
        SAY(r->fix, "boot Linux 6.0 or newer: each cgroup move otherwise waits for an RCU "
                    "grace period (10-25 ms)");
        return;
    }
    if (on < 0) {
        SAY(r->value, "absent");
        SAY(r->found, "no cgroup2 hierarchy (%s)", where);
        SAY(r->fix, "mount cgroup2 (a hybrid or v2 host), then the daemon turns it on at start");
        return;
    }
    r->ok = on == 1;
    SAY(r->value, "%s", on ? "on" : "off");
    SAY(r->found, "%s at %s", on ? "on" : "off", where);
    SAY(r->fix,
        "the daemon turns it on at start (--cgroup-favordynmods on, the default); by "
        "hand: mount -o remount,favordynmods %s",
        where);
}

void doctor_userns(const struct doctor_opts *o, const struct doctor_check *c,
                   struct doctor_result *r)
{
    (void)o, (void)c;
    char max[32] = "absent";
    doctor_read_sysctl("user.max_user_namespaces", max, sizeof(max));
    SAY(r->value, "%s", max);
    pid_t pid = fork();
    if (pid == 0)
        _exit(unshare(CLONE_NEWUSER) == 0 ? 0 : (errno & 0xff));
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0)
        st = -1;
    int e = st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : EIO;
    r->ok = atol(max) > 0 && e == 0;
    SAY(r->found, "user.max_user_namespaces=%s; making one: %s", max, e ? strerror(e) : "ok");
    SAY(r->fix, "sysctl -w user.max_user_namespaces=15000 (and a kernel built with "
                "CONFIG_USER_NS)");
}

void doctor_kvm(const struct doctor_opts *o, const struct doctor_check *c, struct doctor_result *r)
{
    (void)o, (void)c;
    int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    int e = errno;
    int api = fd >= 0 ? ioctl(fd, KVM_GET_API_VERSION, 0) : -1;
    if (fd >= 0)
        close(fd);
    r->ok = api == KVM_API_VERSION;
    SAY(r->value, "%s", r->ok ? "usable" : fd < 0 && e == ENOENT ? "absent" : "unusable");
    if (fd < 0)
        SAY(r->found, "/dev/kvm: %s", strerror(e));
    else
        SAY(r->found, "/dev/kvm: API version %d", api);
    SAY(r->fix, "load kvm_intel or kvm_amd (on a VM: enable nested virtualization); only runsc "
                "--platform=kvm needs it");
}

/* ---- disk quotas ---- */

/* The running kernel's build configuration (/boot/config-*, or /proc/config.gz), or "". */
static const char *kconfig(void)
{
    static buf_t text;
    static bool read_;
    if (read_)
        return text.data ? text.data : "";
    read_ = true;
    struct utsname u;
    uname(&u);
    _cleanup_free_ char *boot = xasprintf("/boot/config-%s", u.release);
    FILE *f = fopen(boot, "re");
    char chunk[4096];
    size_t n;
    while (f && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        buf_append(&text, chunk, n);
    if (f)
        fclose(f);
    if (!f && access("/proc/config.gz", R_OK) == 0) {
        char *argv[] = {"gzip", "-dc", "/proc/config.gz", NULL};
        struct proc_result res;
        err_t err = {0};
        proc_run(argv, NULL, 10000, 1 << 22, &text, NULL, &res, &err);
    }
    buf_append(&text, "", 1);
    return text.data;
}

/* 'y', 'm' or 'n' for CONFIG_<name>, '?' when the configuration cannot be read. */
static char kconfig_has(const char *name)
{
    const char *cfg = kconfig();
    if (!*cfg)
        return '?';
    _cleanup_free_ char *key = xasprintf("\nCONFIG_%s=", name);
    const char *p = strstr(cfg, key);
    return p ? p[strlen(key)] : 'n';
}

/* The kernel options a filesystem's project quotas need that this kernel lacks ("" if none or
 * unknown). */
static void missing_quota_options(long fs_type, char *out, size_t size)
{
    const char *need[3] = {"QUOTA", NULL, NULL};
    if (fs_type == EXT4_SUPER_MAGIC)
        need[1] = "QFMT_V2"; /* ext4's quota feature keeps its files in that format */
    else if (fs_type == XFS_SUPER_MAGIC)
        need[1] = "XFS_QUOTA";
    out[0] = '\0';
    for (size_t i = 0; i < ARRAY_SIZE(need) && need[i]; i++)
        if (kconfig_has(need[i]) == 'n')
            snprintf(out + strlen(out), size - strlen(out), "%sCONFIG_%s", out[0] ? ", " : "",
                     need[i]);
}

static const char *fs_name(long t)
{
    return t == EXT4_SUPER_MAGIC    ? "ext4"
           : t == XFS_SUPER_MAGIC   ? "xfs"
           : t == BTRFS_SUPER_MAGIC ? "btrfs"
           : t == TMPFS_MAGIC       ? "tmpfs"
                                    : "another filesystem";
}

void doctor_quota(const struct doctor_opts *o, const struct doctor_check *c,
                  struct doctor_result *r)
{
    (void)c;
    char dir[4096];
    doctor_existing_dir(o->state_dir, dir, sizeof(dir));
    struct statfs fs = {0};
    statfs(dir, &fs);
    enum storage_driver d = STORAGE_OVERLAY;
    err_t err = {0};
    storage_detect(dir, "auto", &d, &err);
    enum storage_quota q = storage_quota_detect(d, dir);
    r->ok = q != STORAGE_QUOTA_NONE;
    SAY(r->value, "%s", storage_quota_name(q));
    char missing[128];
    missing_quota_options((long)fs.f_type, missing, sizeof(missing));
    SAY(r->found, "%s on %s (%s)%s%s", storage_quota_name(q), fs_name((long)fs.f_type), dir,
        missing[0] ? "; this kernel is built without " : "", missing);
    if (missing[0])
        SAY(r->fix,
            "no project quotas with this kernel (no %s): put the state dir on btrfs "
            "(qgroups), or boot a kernel with them",
            missing);
    else if ((long)fs.f_type == EXT4_SUPER_MAGIC)
        SAY(r->fix, "tune2fs -O quota,project on the (unmounted) filesystem and mount it with "
                    "prjquota; or put the state dir on btrfs");
    else if ((long)fs.f_type == XFS_SUPER_MAGIC)
        SAY(r->fix, "mount the filesystem with prjquota; or put the state dir on btrfs");
    else
        SAY(r->fix, "put the state dir on btrfs (qgroups), or on ext4/xfs with project quotas");
}
