/* Root filesystems of sandboxes: overlayfs over the image's read-only layers. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

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
