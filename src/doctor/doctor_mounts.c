/*
 * What only mounting tells: overlayfs on the state dir's filesystem, with the options the
 * daemon asks for (index=on,nfs_export=on, src/storage/overlay.c), and over an idmapped
 * lower layer (user namespaces with shared image layers). A child process tries them in a
 * private mount namespace of its own, so no probe mount can outlive it on the host; the
 * scratch directory beside the state dir is removed afterwards.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "doctor.h"
#include "storage/storage.h"

/* 0: worked, an errno: failed at that step, -1: not tried. */
struct mount_probe {
    int overlay, export_, userns, idmap, idmapped_overlay;
    char where[4096];
};

static int try_overlay(const char *tmp, const char *lower, const char *n, const char *extra)
{
    _cleanup_free_ char *upper = xasprintf("%s/upper%s", tmp, n);
    _cleanup_free_ char *work = xasprintf("%s/work%s", tmp, n);
    _cleanup_free_ char *merged = xasprintf("%s/merged%s", tmp, n);
    if (mkdir(upper, 0755) < 0 || mkdir(work, 0755) < 0 || mkdir(merged, 0755) < 0)
        return errno;
    _cleanup_free_ char *opts =
        xasprintf("lowerdir=%s,upperdir=%s,workdir=%s%s", lower, upper, work, extra);
    if (mount("overlay", merged, "overlay", 0, opts) < 0)
        return errno;
    umount2(merged, MNT_DETACH);
    return 0;
}

/* A user namespace mapping 0-65535 to host ids 100000-165535, as an fd; -errno. The helper
 * child that made it is gone once the fd is open (the fd keeps the namespace). */
static int make_userns(void)
{
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) < 0)
        return -errno;
    pid_t pid = fork();
    if (pid == 0) {
        char c = unshare(CLONE_NEWUSER) == 0 ? 0 : (char)errno;
        (void)!write(ready[1], &c, 1);
        pause();
        _exit(0);
    }
    close(ready[1]);
    char c = EIO;
    int rc = pid < 0 || read(ready[0], &c, 1) != 1 ? -EIO : c ? -c : 0;
    close(ready[0]);
    const char *maps[] = {"uid_map", "gid_map"};
    for (size_t i = 0; rc == 0 && i < 2; i++) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, maps[i]);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, "0 100000 65536\n", 15) != 15)
            rc = -errno;
        if (fd >= 0)
            close(fd);
    }
    if (rc == 0) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
        rc = open(path, O_RDONLY | O_CLOEXEC);
        if (rc < 0)
            rc = -errno;
    }
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    return rc;
}

/* lower, idmapped through userns_fd, attached at target. */
static int idmap_bind(const char *lower, const char *target, int userns_fd)
{
    int tree _cleanup_close_ = open_tree(AT_FDCWD, lower, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (__u64)userns_fd};
    if (tree < 0 || mkdir(target, 0755) < 0 ||
        mount_setattr(tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0 ||
        move_mount(tree, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        return errno;
    return 0;
}

static void probe_child(const char *tmp, struct mount_probe *p)
{
    _cleanup_free_ char *lower = xasprintf("%s/lower", tmp);
    _cleanup_free_ char *mapped = xasprintf("%s/lower-idmapped", tmp);
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
        p->overlay = errno;
        return;
    }
    if (mkdir(lower, 0755) < 0) {
        p->overlay = errno;
        return;
    }
    p->overlay = try_overlay(tmp, lower, "1", "");
    p->export_ = try_overlay(tmp, lower, "2", ",index=on,nfs_export=on");
    int userns = make_userns();
    p->userns = userns < 0 ? -userns : 0;
    if (userns < 0)
        return;
    p->idmap = idmap_bind(lower, mapped, userns);
    if (p->idmap == 0)
        p->idmapped_overlay = try_overlay(tmp, mapped, "3", "");
    close(userns);
}

/* Run the probe once (the three checks share it). */
static const struct mount_probe *probe(const struct doctor_opts *o)
{
    static struct mount_probe p;
    static bool done;
    if (done)
        return &p;
    done = true;
    p = (struct mount_probe){-1, -1, -1, -1, -1, ""};
    doctor_existing_dir(o->state_dir, p.where, sizeof(p.where));
    _cleanup_free_ char *tmp = xasprintf("%s/.sandboxer-doctor-XXXXXX", p.where);
    if (!mkdtemp(tmp)) {
        p.overlay = errno;
        return &p;
    }
    struct mount_probe *shared =
        mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t pid = shared == MAP_FAILED ? -1 : fork();
    if (pid == 0) {
        *shared = p;
        probe_child(tmp, shared);
        _exit(0);
    }
    if (pid > 0 && waitpid(pid, NULL, 0) == pid)
        p = *shared;
    else
        p.overlay = errno;
    if (shared != MAP_FAILED)
        munmap(shared, sizeof(*shared));
    err_t err = {0};
    storage_remove_tree(tmp, &err);
    return &p;
}

static void found(struct doctor_result *r, const char *where, int e, const char *what)
{
    r->ok = e == 0;
    SAY(r->value, "%s", e == 0 ? "ok" : e < 0 ? "untried" : "refused");
    if (e == 0)
        SAY(r->found, "%s works on %s", what, where);
    else if (e < 0)
        SAY(r->found, "%s not tried (an earlier step failed)", what);
    else
        SAY(r->found, "%s on %s: %s", what, where, strerror(e));
}

void doctor_overlay(const struct doctor_opts *o, const struct doctor_check *c,
                    struct doctor_result *r)
{
    (void)c;
    const struct mount_probe *p = probe(o);
    found(r, p->where, p->overlay, "overlayfs");
    SAY(r->fix, "put the state dir on a filesystem overlayfs takes as its upper layer (ext4, "
                "xfs, btrfs, tmpfs) and load the overlay module");
}

void doctor_overlay_export(const struct doctor_opts *o, const struct doctor_check *c,
                           struct doctor_result *r)
{
    (void)c;
    const struct mount_probe *p = probe(o);
    found(r, p->where, p->overlay ? -1 : p->export_, "index=on,nfs_export=on");
    SAY(r->fix, "a filesystem with file handles and xattrs for the state dir (ext4, xfs, "
                "btrfs); without it the daemon mounts overlays without the options and a "
                "sandbox with an inotify watch cannot be forked or hibernated");
}

void doctor_idmapped(const struct doctor_opts *o, const struct doctor_check *c,
                     struct doctor_result *r)
{
    (void)c;
    const struct mount_probe *p = probe(o);
    int e = p->overlay ? -1 : p->userns > 0 ? p->userns : p->idmap ? p->idmap : p->idmapped_overlay;
    found(r, p->where, e,
          p->userns > 0 ? "a user namespace"
          : p->idmap    ? "an idmapped mount"
                        : "overlayfs over an idmapped layer");
    SAY(r->fix, "Linux >= 5.19 with user namespaces, and a state dir filesystem that supports "
                "idmapped mounts (ext4, xfs, btrfs)");
}
