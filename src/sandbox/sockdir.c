/*
 * The agent's socket dir, sandboxes/<id>/sock, bound read-write at /run/sandboxer: a tmpfs of
 * its own, mounted on the host before the container starts (create, fork, snapshot start,
 * wake) and unmounted when the container goes (exit, hibernate, delete).
 *
 * The sandbox writes there (its agent binds agent.sock, console.sock and the like), so a
 * directory of the host's state dir would take whatever the sandbox puts in it, outside its
 * disk limit and its stats. A tmpfs of SOCKDIR_SIZE and SOCKDIR_INODES holds the few sockets
 * and nothing much else; its pages are charged to the memory cgroup of the process that
 * writes them (the sandbox's). It also makes /proc/self/mountinfo inside show a tmpfs root
 * instead of a path of the host's state dir. Being a bind mount of the host's, CRIU leaves
 * it out of checkpoints: a restore recreates the agent's listening sockets in a fresh one.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/statfs.h>

#include "sandbox_internal.h"
#include "storage/storage.h"

#define SOCKDIR_SIZE   "64k" /* a few sockets take no blocks: this is for stray files */
#define SOCKDIR_INODES "16"  /* the dir and its sockets, with room for more sockets */
#define SOCKDIR_SOURCE "sandboxer-sock"

int sbx_sockdir_mount(const struct sbx_paths *p, uint32_t owner, err_t *err)
{
    if (storage_is_mounted(p->sock))
        return 0;
    /* Its root is the agent's, which is owner on the host in a user namespace. */
    char opts[128];
    snprintf(opts, sizeof(opts),
             "size=" SOCKDIR_SIZE ",nr_inodes=" SOCKDIR_INODES ",mode=0755,uid=%u,gid=%u", owner,
             owner);
    if (mount(SOCKDIR_SOURCE, p->sock, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) < 0)
        return err_sys(err, "mount the socket dir %s", p->sock);
    return 0;
}

int sbx_sockdir_umount(const struct sbx_paths *p, err_t *err)
{
    if (umount2(p->sock, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL && errno != ENOENT)
        return err_sys(err, "unmount %s", p->sock);
    return 0;
}

int64_t sbx_sockdir_used(const struct sbx_paths *p)
{
    struct statfs st;
    if (!storage_is_mounted(p->sock) || statfs(p->sock, &st) < 0 ||
        st.f_type != 0x01021994 /* TMPFS_MAGIC */)
        return -1;
    return (int64_t)(st.f_blocks - st.f_bfree) * (int64_t)st.f_bsize;
}
