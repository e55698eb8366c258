/*
 * Fork and snapshots. The source is quiesced (no exec in flight), frozen, checkpointed by
 * CRIU with --leave-running and its writable layer copied while frozen, so memory and files
 * agree; then it thaws and the copy is restored as a new sandbox with its own id, cgroup,
 * network namespace and hostname. Without a working CRIU a fork copies the files and starts
 * the main process afresh, and says memory_preserved: false.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/id.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/util.h"
#include "runtime/runtime.h"
#include "sandbox_internal.h"
#include "storage/storage.h"

#define QUIESCE_TIMEOUT_S 10

void sbx_fault_point(const char *name)
{
    const char *want = getenv("SANDBOXER_FAULT");
    if (want && strcmp(want, name) == 0) {
        log_warn("fault.injected", "point=%s", name);
        raise(SIGKILL);
    }
}

int sbx_lock_quiesced(struct sbx_live *l, err_t *err)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += QUIESCE_TIMEOUT_S;
    if (pthread_rwlock_timedwrlock(&l->lock, &ts) != 0)
        return err_set(err, ERR_CONFLICT, 0, "sandbox_busy",
                       "execs or terminal sessions are still open in the sandbox; try again "
                       "when they end");
    return 0;
}

/* Where the source of a clone is captured. */
struct capture {
    const char *ckpt_dir; /* CRIU images; NULL: files only */
    const char *layer;    /* where the writable layer is cloned to */
    const char *work_dir; /* CRIU's log */
    uint64_t quota;       /* the clone's disk limit (0: none) */
};

/*
 * Freeze the source, checkpoint it (leaving it running) and copy its writable layer, then
 * thaw it. The caller holds the source's lock. fault names the crash-test points.
 */
static int capture(sbx_mgr_t *m, const sandbox_rec_t *src, const struct capture *c,
                   const char *fault, err_t *err)
{
    bool was_paused = strcmp(src->status, "paused") == 0;
    struct sbx_paths sp;
    sbx_paths_init(m, src->id, &sp);
    int rc = 0;
    if (!was_paused)
        rc = runtime_pause(src->id, true, err);
    if (rc == 0 && c->ckpt_dir)
        rc = runtime_checkpoint(src->id, c->ckpt_dir, c->work_dir, true, err);
    if (rc == 0) {
        sbx_fault_point(fault);
        rc = storage_layer_clone(m->driver, sp.layer, c->layer, c->quota, err);
    }
    err_t e = {0};
    if (!was_paused && runtime_pause(src->id, false, &e) < 0 && rc == 0) {
        *err = e;
        rc = -1;
    }
    sbx_paths_free(&sp);
    return rc;
}

/* A new record for a clone of spec/image, child of parent_id (or a root). */
static void clone_record(sandbox_rec_t *r, const user_t *owner, const json_t *spec,
                         const char *image, const char *parent_id, const char *label,
                         const char *hostname)
{
    memset(r, 0, sizeof(*r));
    id_random_hex(r->id, 32);
    id_ulid(r->name);
    r->owner_id = owner->id;
    snprintf(r->label, sizeof(r->label), "%s", label ? label : "");
    snprintf(r->image, sizeof(r->image), "%s", image);
    snprintf(r->status, sizeof(r->status), "creating");
    snprintf(r->intent, sizeof(r->intent), "create");
    snprintf(r->hostname, sizeof(r->hostname), "%.12s", r->id);
    if (hostname)
        snprintf(r->hostname, sizeof(r->hostname), "%s", hostname);
    snprintf(r->parent_id, sizeof(r->parent_id), "%s", parent_id ? parent_id : "");
    r->created_at = r->last_active_at = now_unix();
    snprintf(r->runtime, sizeof(r->runtime), "runc");
    r->spec = json_deep_copy(spec);
    /* The console goes along with the processes (the spec says whether there is one). */
    r->interactive = json_is_true(json_object_get(spec, "interactive"));
}

/* Start a prepared clone (dirs made, upper filled) from ckpt (or afresh when NULL). */
static int start_clone(sbx_mgr_t *m, const sandbox_rec_t *r, const struct sbx_paths *p,
                       const char *ckpt, err_t *err)
{
    struct sbx_live *l = sbx_live_get(m, r->id, true);
    pthread_rwlock_wrlock(&l->lock);
    int rc = sbx_mount_rootfs(r, p, err);
    if (rc == 0)
        rc = sbx_write_bundle(m, r, p, err);
    if (rc == 0)
        rc = sbx_boot(m, l, p, ckpt, r->hostname, err);
    if (rc == 1) { /* a fresh start whose main process ended already */
        sbx_finish_exit(m, r->id);
        rc = 0;
    } else if (rc == 0) {
        rc = store_sandbox_set_status(m->store, r->id, "running", NULL, false, 0, err);
    }
    pthread_rwlock_unlock(&l->lock);
    sbx_live_put(m, l);
    return rc;
}

/* Undo a clone that failed half-way: nothing half-made survives. */
static void undo_clone(sbx_mgr_t *m, const char *id)
{
    sbx_teardown(m, id, true, NULL);
    store_sandbox_purge(m->store, id, NULL);
    sbx_live_remove(m, id);
}

/* The JSON answer for a new clone: its object plus memory_preserved. */
static json_t *clone_json(sbx_mgr_t *m, const char *id, bool memory)
{
    sandbox_rec_t r;
    if (store_sandbox_get(m->store, -1, id, &r, NULL) < 0)
        return json_pack("{s:s}", "id", id);
    json_t *j = sbx_to_json(m, &r);
    json_object_set_new(j, "memory_preserved", json_boolean(memory));
    store_sandbox_rec_clear(&r);
    return j;
}

int sbx_fork(sbx_mgr_t *m, const user_t *owner, const char *key, const char *label,
             const char *hostname, json_t **out, err_t *err)
{
    if (sbx_wake_if_needed(m, owner, key, err) < 0)
        return -1;
    sandbox_rec_t parent;
    if (sbx_lookup(m, owner, key, &parent, err) < 0)
        return -1;
    int rc = 0;
    if ((strcmp(parent.status, "running") != 0 && strcmp(parent.status, "paused") != 0) ||
        parent.intent[0])
        rc = err_set(err, ERR_CONFLICT, 0, "sandbox_not_running",
                     "only a running or paused sandbox can be forked (this one is %s)",
                     parent.status);
    bool memory = runtime_criu_available();
    sandbox_rec_t child = {0};
    struct sbx_paths cp = {0};
    const char *ckpt = NULL;
    if (rc == 0) {
        clone_record(&child, owner, parent.spec, parent.image, parent.id,
                     label ? label : parent.label, hostname);
        sbx_paths_init(m, child.id, &cp);
        ckpt = memory ? cp.fork_ckpt : NULL;
        /* The child's row first, as intent: a crash from here on is undone on start. */
        rc = sbx_quota_insert(m, owner, &child, false, err);
        if (rc == 0)
            rc = sbx_make_dirs(&cp, child.hostname, err);
        if (rc == 0) /* its own namespace and address; a listener on 0.0.0.0 serves there too */
            rc = sbx_net_setup(m, &child, &cp, NULL, err);
        if (rc == 0 && ckpt && !mkdir_p(ckpt, 0700))
            rc = err_sys(err, "create %s", ckpt);
    }
    if (rc == 0) {
        struct sbx_live *pl = sbx_live_get(m, parent.id, true);
        if ((rc = sbx_lock_quiesced(pl, err)) == 0) {
            struct capture c = {ckpt, cp.layer, cp.run, sbx_spec_disk(parent.spec)};
            rc = capture(m, &parent, &c, "fork.after_checkpoint", err);
            pthread_rwlock_unlock(&pl->lock);
        }
        sbx_live_put(m, pl);
    }
    if (rc == 0) {
        sbx_fault_point("fork.before_restore");
        rc = start_clone(m, &child, &cp, ckpt, err);
    }
    if (ckpt)
        storage_remove_tree(ckpt, NULL);
    if (rc < 0 && child.id[0]) {
        log_warn("sandbox.fork_failed", "parent=%s child=%s code=%s", parent.id, child.id,
                 err->code);
        undo_clone(m, child.id);
    }
    if (rc == 0) {
        log_info("sandbox.forked", "parent=%s child=%s memory_preserved=%d", parent.id, child.id,
                 memory);
        *out = clone_json(m, child.id, memory);
        sbx_event(m, owner->id, parent.id, "forked",
                  json_pack("{s:s, s:b}", "child_id", child.id, "memory_preserved", memory));
        sbx_event(m, owner->id, child.id, "created",
                  json_pack("{s:s, s:s}", "image", child.image, "parent_id", parent.id));
    }
    sbx_paths_free(&cp);
    store_sandbox_rec_clear(&child);
    store_sandbox_rec_clear(&parent);
    return rc;
}

/* ---- snapshots ---- */

static char *snapshot_dir(sbx_mgr_t *m, const char *id)
{
    return xasprintf("%s/snapshots/%s", m->cfg.state_dir, id);
}

/* Names: 1-128 of [A-Za-z0-9._-], not starting with '.' or '-'. */
static bool snapshot_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128 || s[0] == '.' || s[0] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '-' || s[i] == '_'))
            return false;
    return true;
}

static json_t *snapshot_json(const snapshot_rec_t *s)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:b, s:f}", "id", s->id, "name", s->name, "source_id",
                     s->source_id, "image", s->image, "memory_preserved", s->memory_preserved,
                     "created_at", s->created_at);
}

int sbx_snapshot_create(sbx_mgr_t *m, const user_t *owner, const char *key, const char *name,
                        json_t **out, err_t *err)
{
    if (!snapshot_name_valid(name))
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "field 'name' must be 1-128 characters of A-Z a-z 0-9 . - _");
    snapshot_rec_t existing;
    if (store_snapshot_get(m->store, owner->id, name, &existing, NULL) == 0) {
        store_snapshot_rec_clear(&existing);
        return err_set(err, ERR_CONFLICT, 0, "snapshot_exists", "a snapshot called '%s' exists",
                       name);
    }
    if (sbx_wake_if_needed(m, owner, key, err) < 0)
        return -1;
    sandbox_rec_t src;
    if (sbx_lookup(m, owner, key, &src, err) < 0)
        return -1;
    snapshot_rec_t snap = {.owner_id = owner->id, .created_at = now_unix()};
    id_random_hex(snap.id, 32);
    snprintf(snap.name, sizeof(snap.name), "%s", name);
    snprintf(snap.source_id, sizeof(snap.source_id), "%s", src.id);
    snprintf(snap.image, sizeof(snap.image), "%s", src.image);
    snap.spec = json_deep_copy(src.spec);
    snap.memory_preserved = runtime_criu_available();
    _cleanup_free_ char *dir = snapshot_dir(m, snap.id);
    _cleanup_free_ char *ckpt = xasprintf("%s/checkpoint", dir);
    _cleanup_free_ char *layer = xasprintf("%s/layer", dir);
    int rc = 0;
    if ((strcmp(src.status, "running") != 0 && strcmp(src.status, "paused") != 0) || src.intent[0])
        rc = err_set(err, ERR_CONFLICT, 0, "sandbox_not_running",
                     "only a running or paused sandbox can be snapshotted (this one is %s)",
                     src.status);
    if (rc == 0 && !mkdir_p(ckpt, 0700))
        rc = err_sys(err, "create %s", dir);
    if (rc == 0) {
        struct sbx_live *l = sbx_live_get(m, src.id, true);
        if ((rc = sbx_lock_quiesced(l, err)) == 0) {
            struct capture c = {snap.memory_preserved ? ckpt : NULL, layer, dir, 0};
            rc = capture(m, &src, &c, "snapshot.after_checkpoint", err);
            pthread_rwlock_unlock(&l->lock);
        }
        sbx_live_put(m, l);
    }
    /* Files first, row last: a crash leaves only a directory that start-up removes. */
    if (rc == 0)
        rc = store_snapshot_insert(m->store, &snap, err);
    if (rc < 0)
        storage_remove_tree(dir, NULL);
    else
        *out = snapshot_json(&snap);
    store_snapshot_rec_clear(&snap);
    store_sandbox_rec_clear(&src);
    return rc;
}

int sbx_snapshot_start(sbx_mgr_t *m, const user_t *owner, const char *name, const char *label,
                       const char *hostname, json_t **out, err_t *err)
{
    snapshot_rec_t snap;
    if (store_snapshot_get(m->store, owner->id, name, &snap, err) < 0)
        return -1;
    _cleanup_free_ char *dir = snapshot_dir(m, snap.id);
    _cleanup_free_ char *ckpt = xasprintf("%s/checkpoint", dir);
    _cleanup_free_ char *layer = xasprintf("%s/layer", dir);
    sandbox_rec_t r;
    clone_record(&r, owner, snap.spec, snap.image, NULL, label ? label : snap.name, hostname);
    struct sbx_paths p;
    sbx_paths_init(m, r.id, &p);
    int rc = sbx_quota_insert(m, owner, &r, false, err);
    if (rc == 0)
        rc = sbx_make_dirs(&p, r.hostname, err);
    if (rc == 0)
        rc = sbx_net_setup(m, &r, &p, NULL, err);
    if (rc == 0)
        rc = storage_layer_clone(m->driver, layer, p.layer, sbx_spec_disk(snap.spec), err);
    if (rc == 0)
        rc = start_clone(m, &r, &p, snap.memory_preserved ? ckpt : NULL, err);
    if (rc < 0) {
        undo_clone(m, r.id);
    } else {
        *out = clone_json(m, r.id, snap.memory_preserved);
        sbx_event(m, owner->id, r.id, "created",
                  json_pack("{s:s, s:s}", "image", r.image, "snapshot", name));
    }
    sbx_paths_free(&p);
    store_sandbox_rec_clear(&r);
    store_snapshot_rec_clear(&snap);
    return rc;
}

int sbx_snapshot_list(sbx_mgr_t *m, const user_t *owner, json_t **out, err_t *err)
{
    snapshot_rec_t *items = NULL;
    size_t n = 0;
    if (store_snapshot_list(m->store, owner->id, &items, &n, err) < 0)
        return -1;
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, snapshot_json(&items[i]));
    store_snapshot_list_free(items, n);
    *out = arr;
    return 0;
}

int sbx_snapshot_delete(sbx_mgr_t *m, const user_t *owner, const char *name, err_t *err)
{
    snapshot_rec_t snap;
    if (store_snapshot_get(m->store, owner->id, name, &snap, err) < 0)
        return -1;
    _cleanup_free_ char *dir = snapshot_dir(m, snap.id);
    int rc = store_snapshot_delete(m->store, owner->id, name, err);
    if (rc == 0)
        storage_remove_tree(dir, NULL);
    store_snapshot_rec_clear(&snap);
    return rc;
}
