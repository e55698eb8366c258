/*
 * Directory watches (sandbox.h, sbx_fswatch_*): one connection to the sandbox's agent each,
 * on which the agent's WATCH session (agent/files_watch.c) sends inotify's events as they
 * come. The connection is held without the sandbox's lock, so a watch never keeps a
 * lifecycle change waiting; instead every open watch's fd is registered in the sandbox's live
 * entry, and a change closes them (sbx_fswatches_suspend, under the write lock) before it
 * checkpoints or ends the container: CRIU cannot save a socket connected to the host. The
 * owner of the watch notices the closed connection and reconnects once the sandbox runs.
 */
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "processes.h"
#include "sandbox_internal.h"

#define SUSPEND_WAIT_MS 2000 /* how long a change waits for the agent to let go of watches */
#define LOCK_TRY_MS     200  /* how long a reconnect waits for the read lock */

struct sbx_fswatch {
    sbx_mgr_t *m;
    user_t owner;
    char id[65];
    char path[AGENT_PATH_MAX];
    char *user;
    bool recursive;
    int fd; /* -1 while not connected */
    agentc_reader_t reader;
    struct sbx_live *l; /* referenced while fd is registered */
};

static int add_fd(struct sbx_live *l, int fd, err_t *err)
{
    pthread_mutex_lock(&l->fswatch_lock);
    int rc = 0;
    if (l->nfswatch >= SBX_FSWATCH_MAX)
        rc = err_set(err, ERR_LIMIT, 0, "too_many_watches",
                     "the sandbox has %d directory watches open already", SBX_FSWATCH_MAX);
    else
        l->fswatch_fds[l->nfswatch++] = fd;
    pthread_mutex_unlock(&l->fswatch_lock);
    return rc;
}

static void remove_fd(struct sbx_live *l, int fd)
{
    pthread_mutex_lock(&l->fswatch_lock);
    for (size_t i = 0; i < l->nfswatch; i++) {
        if (l->fswatch_fds[i] == fd) {
            l->fswatch_fds[i] = l->fswatch_fds[--l->nfswatch];
            break;
        }
    }
    pthread_mutex_unlock(&l->fswatch_lock);
}

void sbx_fswatches_suspend(struct sbx_live *l)
{
    pthread_mutex_lock(&l->fswatch_lock);
    for (size_t i = 0; i < l->nfswatch; i++)
        shutdown(l->fswatch_fds[i], SHUT_WR); /* the agent's session reads EOF and exits */
    double deadline = now_mono_ms() + SUSPEND_WAIT_MS;
    for (size_t i = 0; i < l->nfswatch; i++) {
        struct pollfd p = {l->fswatch_fds[i], POLLRDHUP, 0};
        while (now_mono_ms() < deadline && poll(&p, 1, 50) == 0)
            ;
    }
    l->nfswatch = 0; /* their owners find the connection closed and reconnect later */
    pthread_mutex_unlock(&l->fswatch_lock);
}

/* Drop the connection (unregistered first, so no change touches a closed fd). */
static void disconnect(struct sbx_fswatch *w)
{
    if (w->fd < 0)
        return;
    remove_fd(w->l, w->fd);
    agentc_close(w->fd);
    agentc_reader_free(&w->reader);
    w->fd = -1;
    sbx_live_put(w->m, w->l);
    w->l = NULL;
}

/* Connect and start the agent's watch; the caller holds l's lock for reading. */
static int attach(struct sbx_fswatch *w, struct sbx_live *l, err_t *err)
{
    _cleanup_free_ char *sock = xasprintf("%s/%s/sock", w->m->sandboxes_dir, l->id);
    int dirfd _cleanup_close_ = open(sock, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int fd = agentc_connect(dirfd, "agent.sock", &l->peer, 5000, err);
    if (fd < 0)
        return -1;
    struct agentc_file_req req = {.path = w->path, .user = w->user};
    if (agentc_watch_begin(fd, &req, w->recursive, &w->reader, err) < 0 || add_fd(l, fd, err) < 0) {
        agentc_reader_free(&w->reader);
        agentc_close(fd);
        return -1;
    }
    w->fd = fd;
    w->l = sbx_live_get(w->m, l->id, false);
    return 0;
}

sbx_fswatch_t *sbx_fswatch_open(sbx_mgr_t *m, const user_t *owner, const char *key,
                                const struct agentc_file_req *req, bool recursive, err_t *err)
{
    sandbox_rec_t r;
    struct sbx_live *l;
    char norm[AGENT_PATH_MAX];
    if (agent_path_normalize(req->path, strlen(req->path), norm, sizeof(norm)) < 0)
        return err_set(err, ERR_INVALID, 0, "invalid_path", "the path is too long or holds NUL"),
               NULL;
    if (sbx_use_begin(m, owner, key, &l, &r, err) < 0)
        return NULL;
    sbx_fswatch_t *w = xcalloc(1, sizeof(*w));
    *w = (sbx_fswatch_t){.m = m, .owner = *owner, .recursive = recursive, .fd = -1};
    snprintf(w->id, sizeof(w->id), "%s", r.id);
    snprintf(w->path, sizeof(w->path), "%s", norm);
    w->user = req->user ? xstrdup(req->user) : NULL;
    store_sandbox_rec_clear(&r);
    int rc = attach(w, l, err);
    sbx_use_end(m, l);
    if (rc < 0) {
        sbx_fswatch_close(w);
        return NULL;
    }
    return w;
}

/* Reconnect if the sandbox runs and no change wants it: 0, SBX_FOLLOW_LATER, or -1. */
static int reconnect(struct sbx_fswatch *w, err_t *err)
{
    sandbox_rec_t r;
    if (store_sandbox_get(w->m->store, w->owner.id, w->id, &r, err) < 0)
        return -1;
    sandbox_status_t st = r.status;
    store_sandbox_rec_clear(&r);
    if (st == SBX_EXITED || st == SBX_TERMINATED)
        return err_set(err, ERR_CONFLICT, 0, "sandbox_not_running", "the sandbox is %s",
                       sandbox_status_name(st));
    struct sbx_live *l = st == SBX_RUNNING ? sbx_live_get(w->m, w->id, false) : NULL;
    if (!l)
        return SBX_FOLLOW_LATER;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += LOCK_TRY_MS * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    int rc = SBX_FOLLOW_LATER;
    if (atomic_load(&l->changing) == 0 && pthread_rwlock_timedrdlock(&l->lock, &ts) == 0) {
        /* Under the lock the status cannot change: this read decides. */
        if (store_sandbox_get(w->m->store, -1, w->id, &r, NULL) == 0) {
            if (r.status == SBX_RUNNING)
                rc = attach(w, l, err);
            store_sandbox_rec_clear(&r);
        }
        pthread_rwlock_unlock(&l->lock);
    }
    sbx_live_put(w->m, l);
    return rc;
}

int sbx_fswatch_next(sbx_fswatch_t *w, int wait_ms, json_t *events, uint64_t *dropped, err_t *err)
{
    if (w->fd < 0) {
        int rc = reconnect(w, err);
        if (rc != 0)
            return rc;
    }
    err_t rerr = {0};
    int rc = agentc_watch_read(w->fd, &w->reader, wait_ms, events, dropped, &rerr);
    if (rc >= 0)
        return 0;
    disconnect(w);
    /* The connection closed: suspended by a change, or the container went. */
    if (strcmp(rerr.code, "agent_unavailable") == 0 || strcmp(rerr.code, "agent_timeout") == 0)
        return SBX_FOLLOW_LATER;
    *err = rerr;
    return -1;
}

void sbx_fswatch_close(sbx_fswatch_t *w)
{
    if (!w)
        return;
    disconnect(w);
    free(w->user);
    free(w);
}
