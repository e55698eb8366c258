#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/util.h"
#include "storage.h"

/*
 * index=on,nfs_export=on: the overlay can open its files by handle (open_by_handle_at). CRIU
 * needs that to checkpoint an inotify or fanotify watch (a dev server watching its sources),
 * which it records by file handle. Where the kernel or the upper filesystem cannot (EINVAL),
 * the overlay is mounted without them, and such watches cannot be checkpointed.
 */
#define EXPORT_OPTS ",index=on,nfs_export=on"

/*
 * Mount, waiting a little while the kernel answers EBUSY: with index=on an upper dir still
 * used by an overlay is refused, and the previous mount of a sandbox that just hibernated
 * (detached) lives on until the last of its processes has finished exiting, which takes a
 * few milliseconds after its container is gone, and more than 2 s for a large process on a
 * loaded machine (a code interpreter's kernel under ASan while two suites run): up to 15 s.
 */
static int mount_busy_retry(const char *target, const char *data)
{
    for (int i = 0;; i++) {
        if (mount("overlay", target, "overlay", 0, data) == 0)
            return 0;
        if (errno != EBUSY || i >= 3000)
            return -1;
        usleep(5000);
    }
}

int storage_mount_overlay(char *const *layers, size_t n, const char *upper, const char *work,
                          const char *target, err_t *err)
{
    static bool no_export; /* the kernel refused EXPORT_OPTS once: do not ask again */
    if (n == 0)
        return err_set(err, ERR_INVALID, 0, "invalid_image", "an image needs at least one layer");
    buf_t opts = {0};
    buf_puts(&opts, "lowerdir=");
    for (size_t i = n; i-- > 0;) /* overlayfs lists the top layer first */
        buf_printf(&opts, "%s%s", layers[i], i ? ":" : "");
    buf_printf(&opts, ",upperdir=%s,workdir=%s", upper, work);
    size_t plain = opts.len;
    buf_puts(&opts, EXPORT_OPTS);
    /* mount(2) options are limited to a page. */
    if (opts.len >= 4000) {
        buf_free(&opts);
        return err_set(err, ERR_UNPROCESSABLE, 0, "too_many_layers",
                       "the image has too many layers (%zu) to stack", n);
    }
    int rc = no_export ? -1 : mount_busy_retry(target, opts.data);
    if (rc < 0 && (no_export || errno == EINVAL)) {
        no_export = true;
        opts.data[plain] = '\0';
        rc = mount_busy_retry(target, opts.data);
    }
    buf_free(&opts);
    if (rc < 0)
        return err_sys(err, "mount overlay at %s", target);
    return 0;
}

int storage_umount(const char *target, err_t *err)
{
    if (umount2(target, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
        return err_sys(err, "unmount %s", target);
    return 0;
}

bool storage_is_mounted(const char *path)
{
    struct stat a, b;
    _cleanup_free_ char *parent = xasprintf("%s/..", path);
    if (stat(path, &a) < 0 || stat(parent, &b) < 0)
        return false;
    return a.st_dev != b.st_dev || a.st_ino == b.st_ino;
}

static int remove_at(int parent, const char *name, uint64_t mnt, int depth, err_t *err);

/* The mount id of name in parent (not following links), or 0 if unknown. */
static uint64_t mount_id(int parent, const char *name)
{
    struct statx stx;
    if (statx(parent, name, AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &stx) < 0 ||
        !(stx.stx_mask & STATX_MNT_ID))
        return 0;
    return stx.stx_mnt_id;
}

/* Empty the directory fd (which it closes). */
static int empty_dir(int fd, uint64_t mnt, int depth, err_t *err)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return err_sys(err, "open directory");
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        rc = remove_at(dirfd(d), e->d_name, mnt, depth + 1, err);
    }
    closedir(d);
    return rc;
}

static int remove_at(int parent, const char *name, uint64_t mnt, int depth, err_t *err)
{
    if (depth > 4096)
        return err_set(err, ERR_INTERNAL, 0, "internal", "directory tree too deep to remove");
    struct stat st;
    if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : err_sys(err, "stat %s", name);
    if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(parent, name, 0) < 0 && errno != ENOENT)
            return err_sys(err, "remove %s", name);
        return 0;
    }
    /* A mount point: never descend into another mount (a btrfs subvolume is no mount). */
    if (mount_id(parent, name) != mnt)
        return err_set(err, ERR_INTERNAL, EBUSY, "internal", "%s is still a mount point", name);
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return err_sys(err, "open %s", name);
    fchmod(fd, 0700); /* overlayfs leaves work/work with mode 000 */
    if (empty_dir(fd, mnt, depth, err) < 0)
        return -1;
    if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        return err_sys(err, "remove %s", name);
    return 0;
}

int storage_remove_tree(const char *path, err_t *err)
{
    _cleanup_free_ char *copy = xstrdup(path);
    char *slash = strrchr(copy, '/');
    if (!slash || slash[1] == '\0')
        return err_set(err, ERR_INTERNAL, 0, "internal", "refusing to remove %s", path);
    *slash = '\0';
    int parent _cleanup_close_ = open(copy[0] ? copy : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (parent < 0)
        return errno == ENOENT ? 0 : err_sys(err, "open %s", copy);
    struct stat st;
    if (fstatat(parent, slash + 1, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : err_sys(err, "stat %s", path);
    return remove_at(parent, slash + 1, mount_id(parent, slash + 1), 0, err);
}
