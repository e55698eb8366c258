/*
 * Pause (cgroup freezer), hibernate (CRIU checkpoint to disk: the memory is released) and
 * wake (restore). Each records its intent first so a daemon killed half-way is reconciled.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "runtime/runtime.h"
#include "sandbox_internal.h"
#include "storage/storage.h"

/* The owner's record and its live entry, write-locked, for a state change. */
static int begin_change(sbx_mgr_t *m, const user_t *owner, const char *key, sandbox_rec_t *r,
                        struct sbx_live **l, err_t *err)
{
    if (sbx_lookup(m, owner, key, r, err) < 0)
        return -1;
    *l = sbx_live_get(m, r->id, true);
    if (sbx_lock_quiesced(*l, err) < 0) {
        store_sandbox_rec_clear(r);
        sbx_live_put(m, *l);
        return -1;
    }
    /* Re-read under the lock: another change may have finished meanwhile. */
    store_sandbox_rec_clear(r);
    if (store_sandbox_get(m->store, -1, (*l)->id, r, err) == 0 && !r->intent[0])
        return 0;
    if (r->intent[0])
        err_set(err, ERR_CONFLICT, 0, "sandbox_busy", "the sandbox is being %sd", r->intent);
    pthread_rwlock_unlock(&(*l)->lock);
    sbx_live_put(m, *l);
    return -1;
}

static void end_change(sbx_mgr_t *m, sandbox_rec_t *r, struct sbx_live *l)
{
    pthread_rwlock_unlock(&l->lock);
    sbx_live_put(m, l);
    store_sandbox_rec_clear(r);
}

/* The answer {id, status}, and the event of the change. */
static json_t *status_json(sbx_mgr_t *m, const sandbox_rec_t *r, const char *status,
                           const char *event)
{
    if (event)
        sbx_event(m, r->owner_id, r->id, event, NULL);
    return json_pack("{s:s, s:s}", "id", r->id, "status", status);
}

int sbx_pause(sbx_mgr_t *m, const user_t *owner, const char *key, bool pause, json_t **out,
              err_t *err)
{
    sandbox_rec_t r;
    struct sbx_live *l;
    if (begin_change(m, owner, key, &r, &l, err) < 0)
        return -1;
    const char *from = pause ? "running" : "paused", *to = pause ? "paused" : "running";
    int rc = 0;
    bool changed = strcmp(r.status, to) != 0;
    if (changed) {
        if (strcmp(r.status, from) != 0)
            rc = err_set(err, ERR_CONFLICT, 0, "sandbox_not_running", "the sandbox is %s, not %s",
                         r.status, from);
        if (rc == 0)
            rc = runtime_pause(r.id, pause, err);
        if (rc == 0)
            rc = store_sandbox_set_status(m->store, r.id, to, NULL, false, 0, err);
    }
    if (rc == 0)
        *out = status_json(m, &r, to, changed ? (pause ? "paused" : "unpaused") : NULL);
    end_change(m, &r, l);
    return rc;
}

/* run/hibernated exists exactly while a complete checkpoint waits to be restored. */
static void touch_marker(const char *run_dir, bool present)
{
    int dirfd _cleanup_close_ = open(run_dir, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0)
        return;
    if (present)
        close(openat(dirfd, "hibernated", O_CREAT | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600));
    else
        unlinkat(dirfd, "hibernated", 0);
}

static char *ckpt_dir(sbx_mgr_t *m, const char *id)
{
    return xasprintf("%s/%s/checkpoint", m->sandboxes_dir, id);
}

/* Checkpoint r to disk and release its container; the caller holds the lock. */
static int hibernate_locked(sbx_mgr_t *m, const sandbox_rec_t *r, err_t *err)
{
    if (!runtime_criu_available())
        return err_set(err, ERR_CONFLICT, 0, "unsupported",
                       "hibernation needs CRIU, which does not work on this host");
    if (strcmp(r->status, "running") != 0 && strcmp(r->status, "paused") != 0)
        return err_set(err, ERR_CONFLICT, 0, "sandbox_not_running", "the sandbox is %s", r->status);
    _cleanup_free_ char *dir = ckpt_dir(m, r->id);
    struct sbx_paths p;
    sbx_paths_init(m, r->id, &p);
    int rc = store_sandbox_set_status(m->store, r->id, r->status, "hibernate", false, 0, err);
    if (rc == 0) {
        storage_remove_tree(dir, NULL);
        if (!mkdir_p(dir, 0700))
            rc = err_sys(err, "create %s", dir);
    }
    if (rc == 0 && (rc = runtime_checkpoint(r->id, dir, p.run, false, err)) == 0) {
        /* The images are complete: from here on a crash still ends hibernated. */
        touch_marker(p.run, true);
        sbx_fault_point("hibernate.after_checkpoint");
        rc = sbx_teardown(m, r->id, false, err);
    }
    if (rc == 0)
        rc = store_sandbox_set_status(m->store, r->id, "hibernated", NULL, false, 0, err);
    else
        store_sandbox_set_status(m->store, r->id, r->status, NULL, false, 0, NULL);
    sbx_paths_free(&p);
    return rc;
}

int sbx_hibernate(sbx_mgr_t *m, const user_t *owner, const char *key, json_t **out, err_t *err)
{
    sandbox_rec_t r;
    struct sbx_live *l;
    if (begin_change(m, owner, key, &r, &l, err) < 0)
        return -1;
    bool asleep = strcmp(r.status, "hibernated") == 0;
    int rc = asleep ? 0 : hibernate_locked(m, &r, err);
    if (rc == 0) {
        log_info("sandbox.hibernated", "sandbox=%s", r.id);
        *out = status_json(m, &r, "hibernated", asleep ? NULL : "hibernated");
    }
    end_change(m, &r, l);
    return rc;
}

int sbx_wake(sbx_mgr_t *m, const user_t *owner, const char *key, json_t **out, err_t *err)
{
    sandbox_rec_t r;
    struct sbx_live *l;
    if (begin_change(m, owner, key, &r, &l, err) < 0)
        return -1;
    int rc = 0;
    bool woke = strcmp(r.status, "hibernated") == 0;
    if (!woke) {
        if (strcmp(r.status, "running") != 0 && strcmp(r.status, "paused") != 0)
            rc = err_set(err, ERR_CONFLICT, 0, "sandbox_not_hibernated", "the sandbox is %s",
                         r.status);
    } else {
        _cleanup_free_ char *dir = ckpt_dir(m, r.id);
        struct sbx_paths p;
        sbx_paths_init(m, r.id, &p);
        rc = sbx_quota_check_wake(m, r.owner_id, err);
        if (rc == 0)
            rc = store_sandbox_set_status(m->store, r.id, "hibernated", "wake", false, 0, err);
        if (rc == 0) /* after a host reboot its namespace must be made again */
            rc = sbx_net_setup(m, &r, &p, r.ip_address, err);
        if (rc == 0)
            rc = sbx_mount_rootfs(&r, &p, err);
        if (rc == 0)
            rc = sbx_boot(m, l, &p, dir, r.hostname, err);
        if (rc == 0) {
            rc = store_sandbox_set_status(m->store, r.id, "running", NULL, false, 0, err);
            store_sandbox_touch(m->store, r.id); /* woken counts as active: no instant reaping */
            storage_remove_tree(dir, NULL);
            touch_marker(p.run, false);
            log_info("sandbox.woken", "sandbox=%s", r.id);
        } else {
            /* The checkpoint is still there: it stays hibernated, a later wake may work. */
            err_t e = {0};
            runtime_delete(r.id, &e);
            store_sandbox_set_status(m->store, r.id, "hibernated", NULL, false, 0, NULL);
        }
        sbx_paths_free(&p);
    }
    if (rc == 0)
        *out = status_json(m, &r, "running", woke ? "woken" : NULL);
    end_change(m, &r, l);
    return rc;
}

int sbx_wake_if_needed(sbx_mgr_t *m, const user_t *owner, const char *key, err_t *err)
{
    sandbox_rec_t r;
    if (sbx_lookup(m, owner, key, &r, err) < 0)
        return -1;
    bool asleep = strcmp(r.status, "hibernated") == 0;
    store_sandbox_rec_clear(&r);
    json_t *out = NULL;
    if (!asleep)
        return 0;
    int rc = sbx_wake(m, owner, key, &out, err);
    if (out)
        json_decref(out);
    return rc;
}
