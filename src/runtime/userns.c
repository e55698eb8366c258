/*
 * User namespaces of runc sandboxes (docs/security.md, "User namespaces").
 *
 * A sandbox's root is host uid <base>: its user namespace maps ids [0, 65536) to
 * [base, base + 65536), uids and gids alike. runc makes that namespace from the spec's
 * mappings. The daemon needs one of its own with the same mapping for idmapped mounts of the
 * image's layers: a short-lived child unshares a user namespace, the daemon writes its maps
 * and keeps an fd of it, and the child exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "runtime.h"

static int write_map(pid_t pid, const char *name, uint32_t base)
{
    char path[64], map[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
    int n = snprintf(map, sizeof(map), "0 %u %u\n", base, RUNTIME_USERNS_SIZE);
    int fd _cleanup_close_ = open(path, O_WRONLY | O_CLOEXEC);
    return fd >= 0 && write(fd, map, (size_t)n) == n ? 0 : -1;
}

pid_t runtime_userns_hold(uint32_t base, bool with_net, int *release, err_t *err)
{
    int ready[2], done[2];
    *release = -1;
    if (pipe2(ready, O_CLOEXEC) < 0)
        return err_sys(err, "pipe");
    if (pipe2(done, O_CLOEXEC) < 0) {
        close(ready[0]);
        close(ready[1]);
        return err_sys(err, "pipe");
    }
    pid_t pid = fork();
    if (pid == 0) { /* async-signal-safe calls only: the daemon has threads */
        close(ready[0]);
        close(done[1]); /* the parent's close of its end is then our EOF */
        char c = unshare(CLONE_NEWUSER) == 0 ? 'u' : 'e';
        if (write(ready[1], &c, 1) != 1 || c != 'u')
            _exit(1);
        if (with_net) { /* once the maps are written: root here owns the new netns */
            if (read(done[0], &c, 1) != 1)
                _exit(1);
            c = unshare(CLONE_NEWNET) == 0 ? 'n' : 'e';
            if (write(ready[1], &c, 1) != 1 || c != 'n')
                _exit(1);
        }
        (void)!read(done[0], &c, 1);
        _exit(0);
    }
    close(ready[1]);
    close(done[0]);
    int saved = 0;
    char c = 0;
    if (pid < 0)
        saved = errno;
    else if (read(ready[0], &c, 1) != 1 || c != 'u')
        saved = EPERM;
    else if (write_map(pid, "uid_map", base) < 0 || write_map(pid, "gid_map", base) < 0)
        saved = errno;
    else if (with_net && (write(done[1], "m", 1) != 1 || read(ready[0], &c, 1) != 1 || c != 'n'))
        saved = EPERM;
    close(ready[0]);
    if (pid > 0 && saved == 0) {
        *release = done[1];
        return pid;
    }
    close(done[1]);
    if (pid > 0)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
    errno = saved;
    return err_sys(err, "make a user namespace for uids %u-%u", base,
                   base + RUNTIME_USERNS_SIZE - 1);
}

void runtime_userns_release(pid_t pid, int release)
{
    if (release >= 0)
        close(release);
    if (pid > 0)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
}

int runtime_userns_open(uint32_t base, err_t *err)
{
    int release;
    pid_t pid = runtime_userns_hold(base, false, &release, err);
    if (pid < 0)
        return -1;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int saved = errno;
    runtime_userns_release(pid, release);
    if (fd < 0) {
        errno = saved;
        return err_sys(err, "open the user namespace of process %d", (int)pid);
    }
    return fd;
}

int runtime_idmap_mount(const char *src, const char *dst, int userns_fd, err_t *err)
{
    int tree _cleanup_close_ =
        (int)syscall(SYS_open_tree, AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (tree < 0)
        return err_sys(err, "clone the mount of %s", src);
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)userns_fd};
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
        return err_sys(err, "idmap the mount of %s", src);
    if (syscall(SYS_move_mount, tree, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        return err_sys(err, "mount the idmapped %s at %s", src, dst);
    return 0;
}

bool runtime_userns_probe(const char *dir, char *why, size_t size)
{
    err_t err = {0};
    int ns = runtime_userns_open(RUNTIME_USERNS_PROBE_BASE, &err);
    if (ns < 0) {
        snprintf(why, size, "%s", err.msg);
        return false;
    }
    _cleanup_free_ char *src = xasprintf("%s/.userns-probe-src", dir);
    _cleanup_free_ char *dst = xasprintf("%s/.userns-probe-dst", dir);
    mkdir(src, 0755);
    mkdir(dst, 0755);
    bool ok = runtime_idmap_mount(src, dst, ns, &err) == 0;
    struct stat st;
    if (ok && (stat(dst, &st) < 0 || st.st_uid != RUNTIME_USERNS_PROBE_BASE)) {
        ok = false;
        snprintf(err.msg, sizeof(err.msg), "an idmapped mount does not map its owner");
    }
    umount2(dst, MNT_DETACH);
    rmdir(dst);
    rmdir(src);
    close(ns);
    if (!ok)
        snprintf(why, size, "%s", err.msg);
    return ok;
}

int runtime_userns_own_images(const char *dir, uint32_t base, err_t *err)
{
    int fd _cleanup_close_ = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return err_sys(err, "open %s", dir);
    if (fchown(fd, base, 0) < 0 || fchmod(fd, 0750) < 0)
        return err_sys(err, "hand %s to the sandbox's root", dir);
    _cleanup_closedir_ DIR *d = fdopendir(dup(fd));
    if (!d)
        return err_sys(err, "list %s", dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_type != DT_REG)
            continue;
        if (fchownat(fd, e->d_name, base, 0, AT_SYMLINK_NOFOLLOW) < 0 ||
            fchmodat(fd, e->d_name, 0640, 0) < 0)
            return err_sys(err, "hand %s/%s to the sandbox's root", dir, e->d_name);
    }
    return 0;
}
