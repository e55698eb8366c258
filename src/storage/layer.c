/*
 * A sandbox's writable layer: <sandbox>/layer holding overlayfs's upper/ and work/. With the
 * btrfs driver the layer is a subvolume and a clone is a snapshot (O(1) in the layer's
 * size); with the overlay driver it is a directory and a clone is a copy that shares
 * extents (reflink) where the filesystem can.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/dqblk_xfs.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/quota.h>
#include <sys/syscall.h>
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

/* ---- disk quotas ---- */

static long quotactl_fd_(int fd, unsigned cmd, int id, void *addr)
{
    return syscall(SYS_quotactl_fd, fd, cmd, id, addr);
}

enum storage_quota storage_quota_detect(enum storage_driver d, const char *dir)
{
    if (d == STORAGE_BTRFS) /* qgroups: turned on when the first layer gets a limit */
        return STORAGE_QUOTA_BTRFS;
    int fd _cleanup_close_ = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    /* Project quotas that are enforced, not only counted (ext4 mounted with prjquota, xfs
     * with pquota): a limit the kernel only counts would be a promise we do not keep. */
    struct fs_quota_statv qs = {.qs_version = FS_QSTATV_VERSION1};
    if (fd < 0 || quotactl_fd_(fd, QCMD(Q_XGETQSTATV, PRJQUOTA), 0, &qs) < 0 ||
        !(qs.qs_flags & FS_QUOTA_PDQ_ENFD))
        return STORAGE_QUOTA_NONE;
    return STORAGE_QUOTA_PROJECT;
}

const char *storage_quota_name(enum storage_quota q)
{
    return q == STORAGE_QUOTA_BTRFS     ? "btrfs-qgroups"
           : q == STORAGE_QUOTA_PROJECT ? "project-quotas"
                                        : "none";
}

static int btrfs_limit(int fd, const char *layer, uint64_t bytes, err_t *err)
{
    /* Turning quotas on when they are on already changes nothing; the first time, the
     * kernel counts what exists (a rescan), which we wait for so the limit starts right. */
    struct btrfs_ioctl_quota_ctl_args q = {.cmd = BTRFS_QUOTA_CTL_ENABLE};
    if (ioctl(fd, BTRFS_IOC_QUOTA_CTL, &q) < 0)
        return err_sys(err, "turn on btrfs quotas for %s", layer);
    if (ioctl(fd, BTRFS_IOC_QUOTA_RESCAN_WAIT) < 0 && errno != EINVAL)
        return err_sys(err, "wait for the btrfs quota rescan");
    /* qgroupid 0: the subvolume fd is in. Referenced bytes: all the layer shows, shared
     * with a snapshot's source or not. */
    struct btrfs_ioctl_qgroup_limit_args l = {
        .qgroupid = 0, .lim = {.flags = BTRFS_QGROUP_LIMIT_MAX_RFER, .max_rfer = bytes}};
    if (ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &l) < 0)
        return err_sys(err, "limit the btrfs qgroup of %s", layer);
    return 0;
}

static int set_project(int dirfd, const char *sub, uint32_t id, err_t *err)
{
    int fd _cleanup_close_ =
        sub ? openat(dirfd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : dup(dirfd);
    struct fsxattr fsx;
    if (fd < 0 || ioctl(fd, FS_IOC_FSGETXATTR, &fsx) < 0)
        return err_sys(err, "read the attributes of %s", sub ? sub : "the layer");
    fsx.fsx_projid = id;
    fsx.fsx_xflags |= FS_XFLAG_PROJINHERIT; /* what is made below is charged to id too */
    if (ioctl(fd, FS_IOC_FSSETXATTR, &fsx) < 0)
        return err_sys(err, "set the project of %s", sub ? sub : "the layer");
    return 0;
}

static int project_limit(int fd, const char *layer, uint64_t bytes, err_t *err)
{
    /* The layer directory's inode number is its project id: unique on the filesystem while
     * the layer exists, and no table to keep. */
    struct stat st;
    if (fstat(fd, &st) < 0)
        return err_sys(err, "stat %s", layer);
    if (st.st_ino == 0 || st.st_ino >= UINT32_MAX)
        return err_set(err, ERR_RUNTIME, 0, "runtime",
                       "%s has an inode number too large for a project id", layer);
    uint32_t id = (uint32_t)st.st_ino;
    /* upper and work both: overlayfs renames from work into upper, which the kernel refuses
     * (EXDEV) between directories of different projects. */
    if (set_project(fd, NULL, id, err) < 0 || set_project(fd, "upper", id, err) < 0 ||
        set_project(fd, "work", id, err) < 0)
        return -1;
    struct dqblk dq = {.dqb_bhardlimit = (bytes + 1023) / 1024, .dqb_valid = QIF_BLIMITS};
    if (quotactl_fd_(fd, QCMD(Q_SETQUOTA, PRJQUOTA), (int)id, &dq) < 0)
        return err_sys(err, "set the project quota of %s", layer);
    return 0;
}

static int layer_limit(enum storage_driver d, const char *layer, uint64_t bytes, err_t *err)
{
    if (!bytes)
        return 0;
    int fd _cleanup_close_ = open(layer, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return err_sys(err, "open %s", layer);
    return d == STORAGE_BTRFS ? btrfs_limit(fd, layer, bytes, err)
                              : project_limit(fd, layer, bytes, err);
}

int storage_layer_create(enum storage_driver d, const char *layer, uint64_t quota, err_t *err)
{
    if (d == STORAGE_BTRFS ? btrfs_subvol_create(layer, err) < 0
                           : (mkdir(layer, 0755) < 0 ? err_sys(err, "create %s", layer) : 0) < 0)
        return -1;
    if (make_sub(layer, "upper", 0755, err) < 0 || make_sub(layer, "work", 0755, err) < 0)
        return -1;
    return layer_limit(d, layer, quota, err);
}

int storage_layer_clone(enum storage_driver d, const char *src, const char *dst, uint64_t quota,
                        err_t *err)
{
    if (d == STORAGE_BTRFS) {
        if (btrfs_snapshot(src, dst, err) < 0)
            return -1;
        /* overlayfs wants an empty work dir: the snapshot's may hold leftovers. */
        _cleanup_free_ char *work = xasprintf("%s/work", dst);
        if (storage_remove_tree(work, err) < 0 || make_sub(dst, "work", 0755, err) < 0)
            return -1;
        return layer_limit(d, dst, quota, err);
    }
    /* The limit first, so that what is copied in is charged to the new layer. */
    if (storage_layer_create(d, dst, quota, err) < 0)
        return -1;
    _cleanup_free_ char *from = xasprintf("%s/upper/.", src);
    _cleanup_free_ char *to = xasprintf("%s/upper", dst);
    char *argv[] = {"cp", "-a", "--reflink=auto", from, to, NULL};
    return proc_run_ok(argv, 600000, NULL, err);
}
