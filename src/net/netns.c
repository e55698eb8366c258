/*
 * Named network namespaces as files: an nsfs bind mount at <netns_dir>/<id>, the way
 * `ip netns add` makes /run/netns/<name>, so the namespace outlives its processes and the
 * daemon, and runc joins it by path.
 *
 * Entering a namespace happens on a short-lived thread: setns/unshare change only the
 * calling thread, and the daemon's other threads must stay in the host's namespace. The
 * thread hands back an rtnetlink socket, which stays bound to the namespace it was opened
 * in, so the rest of the configuration runs from the caller's thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <linux/netlink.h>

#include "common/cleanup.h"
#include "common/proc.h"
#include "common/util.h"
#include "net_internal.h"

static int write_file(const char *path, const char *value)
{
    int fd _cleanup_close_ = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t n = strlen(value);
    return write(fd, value, n) == (ssize_t)n ? 0 : -1;
}

int net_sysctl_write(const char *key, const char *value, err_t *err)
{
    char path[256];
    snprintf(path, sizeof(path), "/proc/sys/%s", key);
    if (write_file(path, value) < 0)
        return err_sys(err, "set sysctl %s=%s", key, value);
    return 0;
}

bool net_sysctl_read(const char *key, char *out, size_t size)
{
    char path[256];
    snprintf(path, sizeof(path), "/proc/sys/%s", key);
    return read_small_file(AT_FDCWD, path, out, size);
}

int net_netns_prepare_dir(const char *dir, err_t *err)
{
    if (!mkdir_p(dir, 0755))
        return err_sys(err, "create %s", dir);
    /* Shared, so unmounting a netns file here also unmounts its copies in mount namespaces
     * made while it existed (iproute2 does the same for /run/netns). */
    if (mount("", dir, "none", MS_SHARED | MS_REC, NULL) == 0)
        return 0;
    if (errno != EINVAL)
        return err_sys(err, "make %s a shared mount", dir);
    if (mount(dir, dir, "none", MS_BIND | MS_REC, NULL) < 0)
        return err_sys(err, "bind-mount %s on itself", dir);
    if (mount("", dir, "none", MS_SHARED | MS_REC, NULL) < 0)
        return err_sys(err, "make %s a shared mount", dir);
    return 0;
}

static bool is_nsfs(const char *path)
{
    struct statfs sf;
    return statfs(path, &sf) == 0 && (unsigned long)sf.f_type == (unsigned long)NSFS_MAGIC;
}

struct ns_job {
    const char *path;
    bool create;
    int nl_fd;
    int errnum;
    const char *step;
};

static void *job_fail(struct ns_job *j, const char *step)
{
    j->errnum = errno;
    j->step = step;
    return NULL;
}

static void *ns_thread(void *arg)
{
    struct ns_job *j = arg;
    if (j->create) {
        if (unshare(CLONE_NEWNET) < 0)
            return job_fail(j, "unshare the network namespace");
        /* thread-self, not self: /proc/self/ns/net is the main thread's namespace. */
        if (mount("/proc/thread-self/ns/net", j->path, "none", MS_BIND, NULL) < 0)
            return job_fail(j, "bind-mount the network namespace");
    } else {
        int fd _cleanup_close_ = open(j->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0 || setns(fd, CLONE_NEWNET) < 0)
            return job_fail(j, "enter the network namespace");
    }
    /* The sandbox gets no IPv6 address: no link-local ones either, so nothing speaks v6.
     * /proc/sys/net resolves against the opening thread's namespace: this one. A kernel
     * without IPv6 has no such file, which is just as good. */
    write_file("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1");
    write_file("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
    /* ping without CAP_NET_RAW for every group (also those of a sandbox's user namespace,
     * whose runtime may not write this namespace's sysctls). */
    write_file("/proc/sys/net/ipv4/ping_group_range", "0 2147483647");
    j->nl_fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (j->nl_fd < 0)
        return job_fail(j, "open rtnetlink in the namespace");
    return NULL;
}

static int run_job(struct ns_job *j, err_t *err)
{
    pthread_t t;
    int rc = pthread_create(&t, NULL, ns_thread, j);
    if (rc != 0) {
        errno = rc;
        return err_sys(err, "start a thread");
    }
    pthread_join(t, NULL);
    if (j->step) {
        errno = j->errnum;
        return err_sys(err, "%s %s", j->step, j->path);
    }
    return 0;
}

static int create_file(const char *path, err_t *err)
{
    /* A plain file left by a crash between create and mount is reused. */
    int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0444);
    if (fd < 0)
        return err_sys(err, "create %s", path);
    close(fd);
    return 0;
}

int net_netns_ensure(const char *path, int *nl_fd, bool *created, err_t *err)
{
    struct ns_job j = {.path = path, .create = !is_nsfs(path), .nl_fd = -1};
    *created = j.create;
    if (j.create && create_file(path, err) < 0)
        return -1;
    if (run_job(&j, err) < 0) {
        if (j.create && j.nl_fd < 0)
            net_netns_remove(path, NULL);
        return -1;
    }
    struct net_rtnl r;
    net_rtnl_adopt(&r, j.nl_fd);
    int lo = net_rtnl_link_get(&r, "lo", NULL, NULL);
    if (lo < 0 || (lo = net_rtnl_link_up(&r, lo, true)) < 0) {
        net_rtnl_close(&r);
        errno = -lo;
        return err_sys(err, "bring up lo in %s", path);
    }
    *nl_fd = j.nl_fd;
    return 0;
}

int net_netns_remove(const char *path, err_t *err)
{
    /* Stacked mounts (from an earlier crash) come off one at a time. */
    for (int i = 0; i < 16; i++) {
        if (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
            continue;
        if (errno == EINVAL || errno == ENOENT)
            break;
        return err_sys(err, "unmount %s", path);
    }
    if (unlink(path) < 0 && errno != ENOENT)
        return err_sys(err, "remove %s", path);
    return 0;
}

int net_netns_adopt(const char *path, pid_t pid, err_t *err)
{
    if (net_netns_remove(path, err) < 0 || create_file(path, err) < 0)
        return -1;
    char src[64];
    snprintf(src, sizeof(src), "/proc/%d/ns/net", (int)pid);
    if (mount(src, path, NULL, MS_BIND, NULL) < 0) {
        err_sys(err, "bind-mount the network namespace of process %d", (int)pid);
        net_netns_remove(path, NULL);
        return -1;
    }
    return 0;
}
