/*
 * User namespaces of sandboxes: whether new runc sandboxes get one, and which host ids.
 *
 * Each sandbox made from an image gets a range of RUNTIME_USERNS_SIZE host ids of its own out
 * of --userns-range; its root is the range's first. The range is recorded in its spec
 * ("userns"), so that whatever is made from it keeps it: a fork, a snapshot, a sandbox started
 * from that snapshot, a template made from it and that template's pool. CRIU restores a tree
 * into the mapping it was dumped with, and the writable layer's files carry the range's ids.
 * A range is free again once no sandbox that is not terminated and no snapshot has it.
 *
 * The daemon makes the sandbox's user namespace and, owned by it, its network namespace (a
 * helper process unshares both; their files are <state>/netns/<id>.user and <id>), plumbs the
 * network from the host, and runc joins both. A restore gets both new from CRIU (the mapping
 * it dumped, an empty network namespace: container.c), which the daemon then adopts.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "net/net.h"
#include "runtime/runtime.h"
#include "sandbox_internal.h"
#include "storage/storage.h"

/* The first dir on the way to dir that other users cannot search (a sandbox's root, an
 * unprivileged host uid, could not reach its root filesystem), or NULL. */
static char *unsearchable(const char *dir)
{
    char *path = realpath(dir, NULL);
    for (char *slash = path; path && slash; slash = strchr(slash + 1, '/')) {
        char keep = slash[1];
        slash[1] = '\0';
        struct stat st;
        bool ok = stat(path, &st) == 0 && (st.st_mode & S_IXOTH);
        slash[1] = keep;
        if (!ok) {
            if (slash != path)
                *slash = '\0';
            return path;
        }
    }
    free(path);
    return NULL;
}

int sbx_userns_setup(sbx_mgr_t *m, err_t *err)
{
    pthread_mutex_init(&m->userns_lock, NULL);
    const char *want = m->cfg.userns ? m->cfg.userns : "auto";
    if (strcmp(want, "off") == 0) {
        log_info("userns.off", "msg=\"sandboxes run without a user namespace (--userns off)\"");
        return 0;
    }
    char why[256] = "";
    _cleanup_free_ char *closed = unsearchable(m->sandboxes_dir);
    bool ok = !closed;
    if (closed)
        snprintf(why, sizeof(why),
                 "%.150s is not searchable by other users (chmod o+x): a sandbox's root could "
                 "not reach its files",
                 closed);
    else
        ok = runtime_userns_probe(m->sandboxes_dir, why, sizeof(why));
    if (!ok && strcmp(want, "on") == 0)
        return err_set(err, ERR_INVALID, 0, "invalid_option",
                       "--userns on: this host cannot give sandboxes user namespaces: %s", why);
    if (!ok) {
        log_warn("userns.unavailable", "msg=\"sandboxes run without a user namespace\" why=\"%s\"",
                 why);
        return 0;
    }
    m->userns = true;
    m->userns_first = m->cfg.userns_first;
    m->userns_count = m->cfg.userns_count / RUNTIME_USERNS_SIZE;
    log_info("userns.on", "first=%u ranges=%u size=%u", m->userns_first, m->userns_count,
             RUNTIME_USERNS_SIZE);
    return 0;
}

bool sbx_userns_for(sbx_mgr_t *m, const runtime_t *rt)
{
    return m->userns && rt && strcmp(runtime_name(rt), "runc") == 0;
}

int sbx_userns_alloc(sbx_mgr_t *m, const runtime_t *rt, uint32_t *base, err_t *err)
{
    *base = 0;
    if (!sbx_userns_for(m, rt))
        return 0;
    pthread_mutex_lock(&m->userns_lock);
    int rc = err_set(err, ERR_LIMIT, 0, "userns_exhausted",
                     "every user namespace range of --userns-range is taken");
    /* From where the last one was taken: a freed range is not given out again at once. */
    for (uint32_t i = 0; i < m->userns_count; i++) {
        uint32_t slot = (m->userns_cursor + i) % m->userns_count;
        uint32_t b = m->userns_first + slot * RUNTIME_USERNS_SIZE;
        bool taken = true;
        if (store_userns_taken(m->store, b, &taken, err) < 0) {
            rc = -1;
            break;
        }
        if (!taken) {
            *base = b;
            m->userns_cursor = slot + 1;
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&m->userns_lock);
    return rc;
}

char *sbx_userns_file(sbx_mgr_t *m, const char *id)
{
    return net_userns_path(m->cfg.net, id);
}

int sbx_userns_netns(sbx_mgr_t *m, const sandbox_rec_t *r, err_t *err)
{
    uint32_t base = sbx_userns_base(r);
    if (!base)
        return 0;
    _cleanup_free_ char *user = sbx_userns_file(m, r->id);
    struct statfs sf;
    if (statfs(user, &sf) == 0 && (unsigned long)sf.f_type == (unsigned long)NSFS_MAGIC)
        return 0; /* made before, and still its netns's owner */
    int release;
    pid_t pid = runtime_userns_hold(base, true, &release, err);
    if (pid < 0)
        return -1;
    char src[64];
    snprintf(src, sizeof(src), "/proc/%d/ns/user", (int)pid);
    int rc = net_sandbox_adopt_netns(m->cfg.net, r->id, pid, err);
    if (rc == 0) {
        umount2(user, MNT_DETACH | UMOUNT_NOFOLLOW);
        int fd = open(user, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0444);
        if (fd < 0 || mount(src, user, NULL, MS_BIND, NULL) < 0)
            rc = err_sys(err, "bind-mount the user namespace at %s", user);
        if (fd >= 0)
            close(fd);
    }
    runtime_userns_release(pid, release);
    return rc;
}

void sbx_userns_forget(sbx_mgr_t *m, const char *id)
{
    _cleanup_free_ char *user = sbx_userns_file(m, id);
    while (umount2(user, MNT_DETACH | UMOUNT_NOFOLLOW) == 0) {
    }
    unlink(user);
}
