/*
 * A sandbox's writable layer: <sandbox>/layer holding overlayfs's upper/ and work/. With the
 * btrfs driver the layer is a subvolume and a clone is a snapshot (O(1) in the layer's
 * size); with the overlay driver it is a directory and a clone is a copy that shares
 * extents (reflink) where the filesystem can.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/proc.h"
#include "common/util.h"
#include "storage.h"

const char *storage_driver_name(enum storage_driver d)
{
    return d == STORAGE_BTRFS ? "btrfs" : "overlay";
}

int storage_detect(const char *dir, const char *want, enum storage_driver *out, err_t *err)
{
    struct statfs fs;
    if (statfs(dir, &fs) < 0)
        return err_sys(err, "statfs %s", dir);
    bool btrfs = fs.f_type == BTRFS_SUPER_MAGIC;
    if (!want || !*want || strcmp(want, "auto") == 0) {
        *out = btrfs ? STORAGE_BTRFS : STORAGE_OVERLAY;
        return 0;
    }
    if (strcmp(want, "overlay") == 0) {
        *out = STORAGE_OVERLAY;
        return 0;
    }
    if (strcmp(want, "btrfs") == 0) {
        if (!btrfs)
            return err_set(err, ERR_INVALID, 0, "invalid_option",
                           "--storage-driver btrfs needs the state dir on btrfs (%s is not)", dir);
        *out = STORAGE_BTRFS;
        return 0;
    }
    return err_set(err, ERR_INVALID, 0, "invalid_option",
                   "--storage-driver: auto, overlay or btrfs (not '%s')", want);
}

/* Split path into an open parent dir fd and the last component. */
static int open_parent(const char *path, const char **name, err_t *err)
{
    const char *slash = strrchr(path, '/');
    if (!slash || !slash[1])
        return err_set(err, ERR_INTERNAL, 0, "internal", "bad layer path %s", path);
    _cleanup_free_ char *dir = xstrndup(path, (size_t)(slash - path));
    int fd = open(*dir ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return err_sys(err, "open %s", dir);
    *name = slash + 1;
    return fd;
}

static int btrfs_subvol_create(const char *path, err_t *err)
{
    const char *name;
    int fd _cleanup_close_ = open_parent(path, &name, err);
    if (fd < 0)
        return -1;
    struct btrfs_ioctl_vol_args args = {0};
    snprintf(args.name, sizeof(args.name), "%s", name);
    if (ioctl(fd, BTRFS_IOC_SUBVOL_CREATE, &args) < 0)
        return err_sys(err, "create btrfs subvolume %s", path);
    return 0;
}

static int btrfs_snapshot(const char *src, const char *dst, err_t *err)
{
    int sfd _cleanup_close_ = open(src, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sfd < 0)
        return err_sys(err, "open %s", src);
    const char *name;
    int dfd _cleanup_close_ = open_parent(dst, &name, err);
    if (dfd < 0)
        return -1;
    struct btrfs_ioctl_vol_args_v2 args = {.fd = sfd};
    snprintf(args.name, sizeof(args.name), "%s", name);
    if (ioctl(dfd, BTRFS_IOC_SNAP_CREATE_V2, &args) < 0)
        return err_sys(err, "snapshot %s", src);
    return 0;
}

static int make_sub(const char *layer, const char *sub, mode_t mode, err_t *err)
{
    _cleanup_free_ char *p = xasprintf("%s/%s", layer, sub);
    if (mkdir(p, mode) < 0 && errno != EEXIST)
        return err_sys(err, "create %s", p);
    return 0;
}

int storage_layer_create(enum storage_driver d, const char *layer, err_t *err)
{
    if (d == STORAGE_BTRFS ? btrfs_subvol_create(layer, err) < 0
                           : (mkdir(layer, 0755) < 0 ? err_sys(err, "create %s", layer) : 0) < 0)
        return -1;
    return make_sub(layer, "upper", 0755, err) < 0 || make_sub(layer, "work", 0755, err) < 0 ? -1
                                                                                             : 0;
}

int storage_layer_clone(enum storage_driver d, const char *src, const char *dst, err_t *err)
{
    if (d == STORAGE_BTRFS) {
        if (btrfs_snapshot(src, dst, err) < 0)
            return -1;
        /* overlayfs wants an empty work dir: the snapshot's may hold leftovers. */
        _cleanup_free_ char *work = xasprintf("%s/work", dst);
        if (storage_remove_tree(work, err) < 0)
            return -1;
        return make_sub(dst, "work", 0755, err);
    }
    if (storage_layer_create(d, dst, err) < 0)
        return -1;
    _cleanup_free_ char *from = xasprintf("%s/upper/.", src);
    _cleanup_free_ char *to = xasprintf("%s/upper", dst);
    char *argv[] = {"cp", "-a", "--reflink=auto", from, to, NULL};
    return proc_run_ok(argv, 600000, NULL, err);
}
