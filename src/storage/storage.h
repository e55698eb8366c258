/* Root filesystems of sandboxes: overlayfs over the image's read-only layers. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* Mount overlayfs at target: layers bottom first (read-only), upper and work writable. */
int storage_mount_overlay(char *const *layers, size_t n, const char *upper, const char *work,
                          const char *target, err_t *err);

/* Unmount target (lazily); fine if nothing is mounted there. */
int storage_umount(const char *target, err_t *err);

/* True if path is a mount point (a different mount than its parent). */
bool storage_is_mounted(const char *path);

/*
 * Remove path and everything below it without following any symlink and without crossing
 * into other mounts; every step is relative to an fd opened with O_NOFOLLOW.
 */
int storage_remove_tree(const char *path, err_t *err);

/* How writable layers are made and cloned. */
enum storage_driver { STORAGE_OVERLAY = 0, STORAGE_BTRFS };

/* "overlay" or "btrfs". */
const char *storage_driver_name(enum storage_driver d);
/* Pick the driver for dir: want "auto" (btrfs when dir is on btrfs), "overlay" or "btrfs". */
int storage_detect(const char *dir, const char *want, enum storage_driver *out, err_t *err);
/*
 * Disk quotas of writable layers: btrfs qgroups with the btrfs driver, else project quotas
 * where the state dir's filesystem enforces them (ext4 mounted with prjquota, xfs with
 * pquota), else none.
 */
enum storage_quota { STORAGE_QUOTA_NONE = 0, STORAGE_QUOTA_BTRFS, STORAGE_QUOTA_PROJECT };
/* What layers under dir made by driver d can be limited with. */
enum storage_quota storage_quota_detect(enum storage_driver d, const char *dir);
/* "btrfs-qgroups", "project-quotas" or "none". */
const char *storage_quota_name(enum storage_quota q);

/* Make an empty writable layer at path (with upper/ and work/) holding at most quota bytes
 * (0: no limit; only where storage_quota_detect found a way). */
int storage_layer_create(enum storage_driver d, const char *path, uint64_t quota, err_t *err);
/* Make dst a copy of the layer src (a snapshot with btrfs, a reflink copy otherwise), limited
 * to quota bytes as storage_layer_create. */
int storage_layer_clone(enum storage_driver d, const char *src, const char *dst, uint64_t quota,
                        err_t *err);
