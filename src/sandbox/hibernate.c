/*
 * Pause (cgroup freezer), hibernate (CRIU checkpoint to disk: the memory is released) and
 * wake (restore). Each follows the change protocol of state.c. A wake never leaves a sandbox
 * stuck: when its memory cannot be restored it starts cold from its files, keeps the
 * checkpoint for a retry, and says so (memory_preserved: false, an event, last_error).
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

/* The answer {id, status}, and the event of the change. */
static json_t *status_json(sbx_mgr_t *m, const sandbox_rec_t *r, sandbox_status_t status,
                           const char *event, json_t *data)
{
    if (event)
        sbx_event(m, r->owner_id, r->id, event, data);
    else if (data)
        json_decref(data);
    return json_pack("{s:s, s:s}", "id", r->id, "status", sandbox_status_name(status));
}

int sbx_pause(sbx_mgr_t *m, const user_t *owner, const char *key, bool pause, json_t **out,
              err_t *err)
{
    struct sbx_change c;
    int rc = sbx_change_begin(m, owner, key, pause ? SBX_OP_PAUSE : SBX_OP_UNPAUSE, &c, err);
    if (rc < 0)
        return -1;
    sandbox_status_t to = pause ? SBX_PAUSED : SBX_RUNNING;
    bool changed = rc == 0;
    rc = 0;
    if (changed && (rc = runtime_pause(sbx_runtime(&c.rec), c.id, pause, err)) == 0)
        rc = sbx_change_commit(&c, to, err);
    if (rc == 0)
        *out = status_json(m, &c.rec, to, changed ? (pause ? "paused" : "unpaused") : NULL, NULL);
    sbx_change_end(&c);
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

/* Where a hibernated sandbox's checkpoint is, and where one that could not be restored is
 * kept for a retry. */
static char *ckpt_dir(sbx_mgr_t *m, const char *id, bool kept)
{
    return xasprintf("%s/%s/checkpoint%s", m->sandboxes_dir, id, kept ? ".kept" : "");
}

/* Checkpoint c's sandbox to disk and release its container (the change holds the lock). */
static int hibernate_locked(sbx_mgr_t *m, struct sbx_change *c, err_t *err)
{
    if (!runtime_can(sbx_runtime(&c->rec), RUNTIME_KEEPS_MEMORY))
        return err_set(err, ERR_CONFLICT, 0, "unsupported",
                       "hibernation needs checkpoints (CRIU, or runsc), which do not work on "
                       "this host");
    _cleanup_free_ char *dir = ckpt_dir(m, c->id, false);
    _cleanup_free_ char *kept = ckpt_dir(m, c->id, true);
    struct sbx_paths p;
    sbx_paths_init(m, c->id, &p);
    storage_remove_tree(dir, NULL);
    int rc = mkdir_p(dir, 0700) ? 0 : err_sys(err, "create %s", dir);
    c->l->rt = sbx_runtime(&c->rec);
    if (rc == 0)
        rc = sbx_checkpoint_stop(m, c->l, &c->rec, &p, dir, p.run, err);
    if (rc == 0) {
        /* The images are complete: from here on a crash still ends hibernated. */
        touch_marker(p.run, true);
        storage_remove_tree(kept, NULL); /* a newer checkpoint replaces one kept for a retry */
        sbx_fault_point("hibernate.after_checkpoint");
        rc = sbx_teardown(m, c->id, false, err);
        sbx_unwatch(m, c->l); /* its shim ended with the container: no fd kept while asleep */
    }
    if (rc == 0)
        rc = sbx_change_commit(c, SBX_HIBERNATED, err);
    else
        storage_remove_tree(dir, NULL); /* CRIU let the tree run on: it still does */
    sbx_paths_free(&p);
    return rc;
}

int sbx_hibernate(sbx_mgr_t *m, const user_t *owner, const char *key, json_t **out, err_t *err)
{
    struct sbx_change c;
    int rc = sbx_change_begin(m, owner, key, SBX_OP_HIBERNATE, &c, err);
    if (rc < 0)
        return -1;
    bool asleep = rc == 1;
    rc = asleep ? 0 : hibernate_locked(m, &c, err);
    if (rc == 0) {
        if (!asleep)
            sbx_note(m, c.id, NULL, NULL);
        log_info("sandbox.hibernated", "sandbox=%s", c.id);
        *out = status_json(m, &c.rec, SBX_HIBERNATED, asleep ? NULL : "hibernated", NULL);
    }
    sbx_change_end(&c);
    return rc;
}

int sbx_hibernate_if_idle(sbx_mgr_t *m, const char *id, double idle_s, err_t *err)
{
    struct sbx_change c;
    int rc = sbx_change_begin(m, NULL, id, SBX_OP_HIBERNATE, &c, err);
    if (rc != 0)
        return rc < 0 ? -1 : 1;
    /* Re-read under the lock: a request may have touched it since the reaper looked. */
    rc = 1;
    if (c.rec.status == SBX_RUNNING && now_unix() - c.rec.last_active_at >= idle_s) {
        rc = hibernate_locked(m, &c, err);
        if (rc == 0) {
            sbx_note(m, c.id, NULL, NULL);
            sbx_event(m, c.rec.owner_id, c.id, "hibernated", json_pack("{s:s}", "reason", "idle"));
        } else {
            sbx_note(m, c.id, "hibernate", err->msg); /* it runs on; this says why */
        }
    }
    sbx_change_end(&c);
    return rc;
}

/* Start c's hibernated sandbox again: from its checkpoint, or cold (from its files) when
 * asked or when the restore fails. */
static int wake_locked(sbx_mgr_t *m, struct sbx_change *c, bool cold, bool *memory, err_t *err)
{
    _cleanup_free_ char *dir = ckpt_dir(m, c->id, false);
    _cleanup_free_ char *kept = ckpt_dir(m, c->id, true);
    struct sbx_paths p;
    sbx_paths_init(m, c->id, &p);
    char why[600] = "";
    /* After a host reboot its namespace must be made again. */
    int rc = sbx_net_setup(m, &c->rec, &p, c->rec.ip_address, err);
    *memory = !cold;
    if (rc == 0 && cold) {
        rc = sbx_start(m, c->l, &c->rec, &p, NULL, err);
    } else if (rc == 0 && (rc = sbx_start(m, c->l, &c->rec, &p, dir, err)) < 0) {
        snprintf(why, sizeof(why), "its memory could not be restored: %s", err->msg);
        log_warn("sandbox.restore_failed", "sandbox=%s msg=\"%s\" fallback=cold", c->id, err->msg);
        *memory = false;
        rc = sbx_start_cold_after(m, c->l, &c->rec, &p, err);
    }
    if (rc >= 0) {
        /* The checkpoint is spent, or (cold) kept beside for a retry. */
        storage_remove_tree(kept, NULL);
        if (*memory)
            storage_remove_tree(dir, NULL);
        else
            rename(dir, kept);
        touch_marker(p.run, false);
        /* A restore that failed is worth knowing about; a cold wake asked for is not. */
        sbx_note(m, c->id, *memory || cold ? NULL : "wake", *memory || cold ? NULL : why);
        store_sandbox_touch(m->store, c->id); /* woken counts as active: no instant reaping */
    }
    sbx_paths_free(&p);
    return rc;
}

int sbx_wake(sbx_mgr_t *m, const user_t *owner, const char *key, bool cold, json_t **out,
             err_t *err)
{
    struct sbx_change c;
    int rc = sbx_change_begin(m, owner, key, SBX_OP_WAKE, &c, err);
    if (rc < 0)
        return -1;
    if (rc == 1) { /* it runs already */
        *out = status_json(m, &c.rec, c.rec.status, NULL, NULL);
        sbx_change_end(&c);
        return 0;
    }
    bool memory = false;
    rc = sbx_quota_check_wake(m, c.rec.owner_id, err); /* it counts as running again */
    if (rc == 0)
        rc = wake_locked(m, &c, cold, &memory, err);
    if (rc == 1) /* started cold, and its main process ended at once */
        sbx_finish_exit(m, c.id);
    else if (rc == 0)
        rc = sbx_change_commit(&c, SBX_RUNNING, err);
    if (rc >= 0) {
        rc = 0;
        c.intent_written = false;
        sandbox_status_t now = c.rec.status == SBX_HIBERNATED ? SBX_EXITED : c.rec.status;
        json_t *ev = json_pack("{s:b}", "memory_preserved", memory);
        if (!memory)
            json_object_set_new(ev, "reason",
                                json_string(cold
                                                ? "a cold wake was asked for"
                                                : "its memory could not be restored; it started "
                                                  "again from its files (the checkpoint is kept)"));
        log_info("sandbox.woken", "sandbox=%s memory_preserved=%d", c.id, memory);
        *out = status_json(m, &c.rec, now, "woken", ev);
        json_object_set_new(*out, "memory_preserved", json_boolean(memory));
    }
    sbx_change_end(&c);
    return rc;
}

int sbx_wake_if_needed(sbx_mgr_t *m, const user_t *owner, const char *key, err_t *err)
{
    sandbox_rec_t r;
    if (sbx_lookup(m, owner, key, &r, err) < 0)
        return -1;
    bool asleep = r.status == SBX_HIBERNATED, may_wake = sbx_spec_auto_wake(r.spec);
    store_sandbox_rec_clear(&r);
    json_t *out = NULL;
    if (!asleep)
        return 0;
    if (!may_wake)
        return err_set(err, ERR_CONFLICT, 0, "sandbox_paused",
                       "the sandbox is paused and resumes only when asked to (wake, connect)");
    int rc = sbx_wake(m, owner, key, false, &out, err);
    if (out)
        json_decref(out);
    return rc;
}
