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

/* A new record for a clone of spec/image, child of parent_id (or a root). */
static void clone_record(sandbox_rec_t *r, const user_t *owner, const json_t *spec,
                         const char *image, const char *parent_id, const char *label,
                         const char *hostname, const char *runtime)
{
    memset(r, 0, sizeof(*r));
    id_random_hex(r->id, 32);
    id_ulid(r->name);
    r->owner_id = owner->id;
    snprintf(r->label, sizeof(r->label), "%s", label ? label : "");
    snprintf(r->image, sizeof(r->image), "%s", image);
    r->status = SBX_CREATING;
    r->intent = SBX_INTENT_CREATE;
    snprintf(r->hostname, sizeof(r->hostname), "%.12s", r->id);
    if (hostname)
        snprintf(r->hostname, sizeof(r->hostname), "%s", hostname);
    snprintf(r->parent_id, sizeof(r->parent_id), "%s", parent_id ? parent_id : "");
    r->created_at = r->last_active_at = now_unix();
    snprintf(r->runtime, sizeof(r->runtime), "%s", runtime && *runtime ? runtime : "runc");
    r->spec = json_deep_copy(spec);
    json_object_del(r->spec, "runtime");       /* a snapshot's, now the column */
    json_object_del(r->spec, "memory_reason"); /* a snapshot's: why it kept no memory */
    /* A clone starts with no deadline and the default wake policy (deadline.c). */
    json_object_del(r->spec, "deadline");
    json_object_del(r->spec, "auto_wake");
    /* The console goes along with the processes (the spec says whether there is one). */
    r->interactive = json_is_true(json_object_get(spec, "interactive"));
}

/*
 * Start a prepared clone (dirs made, upper filled) from ckpt, or afresh when ckpt is NULL. A
 * restore that fails falls back to a fresh start from the files when cold_ok: *memory then
 * says false and why is in *why (and the log).
 */
static int start_clone(sbx_mgr_t *m, const sandbox_rec_t *r, const struct sbx_paths *p,
                       const char *ckpt, bool cold_ok, bool *memory, err_t *err)
{
    struct sbx_live *l = sbx_live_get(m, r->id, true);
    pthread_rwlock_wrlock(&l->lock);
    *memory = ckpt != NULL;
    int rc = sbx_start(m, l, r, p, ckpt, err);
    if (rc < 0 && ckpt && cold_ok) {
        log_warn("sandbox.restore_failed", "sandbox=%s msg=\"%s\" fallback=cold", r->id, err->msg);
        sbx_note(m, r->id, "restore", err->msg);
        *memory = false;
        rc = sbx_start_cold_after(m, l, r, p, err);
    }
    if (rc == 1) { /* a fresh start whose main process ended already */
        sbx_finish_exit(m, r->id);
        rc = 0;
    } else if (rc == 0) {
        rc = store_sandbox_set_status(m->store, r->id, SBX_RUNNING, SBX_INTENT_NONE, false, 0, err);
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

/* The JSON answer for a new clone: its object plus memory_preserved (and why not). */
static json_t *clone_json(sbx_mgr_t *m, const char *id, bool memory, const char *reason)
{
    sandbox_rec_t r;
    if (store_sandbox_get(m->store, -1, id, &r, NULL) < 0)
        return json_pack("{s:s}", "id", id);
    json_t *j = sbx_to_json(m, &r);
    json_object_set_new(j, "memory_preserved", json_boolean(memory));
    if (!memory && reason)
        json_object_set_new(j, "reason", json_string(reason));
    store_sandbox_rec_clear(&r);
    return j;
}

/* Make the child's row (intent create; counted against owner's quotas), dirs, network and
 * checkpoint dir. */
static int prepare_child(sbx_mgr_t *m, const user_t *owner, sandbox_rec_t *child,
                         const struct sbx_paths *cp, const char *ckpt, err_t *err)
{
    /* The child's row first, as intent: a crash from here on is undone on start. */
    if (sbx_quota_insert(m, owner, child, false, err) < 0 ||
        sbx_make_dirs(cp, child->hostname, err) < 0 ||
        /* its own namespace and address; a listener on 0.0.0.0 serves there too */
        sbx_net_setup(m, child, cp, NULL, err) < 0)
        return -1;
    if (ckpt && !mkdir_p(ckpt, 0700))
        return err_sys(err, "create %s", ckpt);
    return 0;
}

/* Capture the parent under its change (lock held, record re-read) into the child's dirs. */
static int capture_parent(sbx_mgr_t *m, struct sbx_change *pc, const sandbox_rec_t *child,
                          const struct sbx_paths *cp, const char *ckpt, err_t *err)
{
    struct sbx_capture cap = {ckpt, cp->layer, cp->run, sbx_spec_disk(pc->rec.spec)};
    if (sbx_capture(m, &pc->rec, &cap, "fork.after_checkpoint", err) == 0)
        return 0;
    /* The parent goes on as it was (CRIU lets a tree it could not dump run on, and capture
     * thawed what it froze); say why in the user's terms, keep CRIU's log in ours. A runtime
     * that stops to checkpoint explained it already. */
    if (ckpt && runtime_can(sbx_runtime(&pc->rec), RUNTIME_LIVE_CHECKPOINT))
        runtime_checkpoint_explain(sbx_runtime(&pc->rec), cp->run, pc->rec.id, err);
    return -1;
}

/* Begin op (fork or snapshot) on a sandbox that must run: a hibernated one wakes first, also
 * when it went to sleep between the wake and the lock. */
static int begin_on_running(sbx_mgr_t *m, const user_t *owner, const char *key, enum sbx_op op,
                            struct sbx_change *c, err_t *err)
{
    for (int round = 0; round < 3; round++) {
        if (sbx_wake_if_needed(m, owner, key, err) < 0)
            return -1;
        if (sbx_change_begin(m, owner, key, op, c, err) == 0)
            return 0;
        if (strcmp(err->code, "sandbox_hibernated") != 0)
            return -1;
    }
    return -1;
}

int sbx_fork(sbx_mgr_t *m, const user_t *owner, const char *key, const char *label,
             const char *hostname, json_t **out, err_t *err)
{
    struct sbx_change pc;
    if (begin_on_running(m, owner, key, SBX_OP_FORK, &pc, err) < 0)
        return -1;
    const runtime_t *rt = sbx_runtime(&pc.rec);
    bool memory = runtime_can(rt, RUNTIME_KEEPS_MEMORY);
    char reason[600] = "";
    if (!memory)
        snprintf(reason, sizeof(reason), "runtime %s cannot checkpoint on this host",
                 runtime_name(rt));
    sandbox_rec_t child;
    struct sbx_paths cp = {0};
    clone_record(&child, owner, pc.rec.spec, pc.rec.image, pc.rec.id, label ? label : pc.rec.label,
                 hostname, pc.rec.runtime);
    sbx_paths_init(m, child.id, &cp);
    const char *ckpt = memory ? cp.fork_ckpt : NULL;
    int rc = prepare_child(m, owner, &child, &cp, ckpt, err);
    if (rc == 0)
        rc = capture_parent(m, &pc, &child, &cp, ckpt, err);
    /* gVisor refuses some sandboxes' checkpoints (a connected TCP endpoint, a console): the
     * fork goes on with the files alone and says why. */
    if (rc < 0 && ckpt && !runtime_can(rt, RUNTIME_LIVE_CHECKPOINT) &&
        strcmp(err->code, "checkpoint_failed") == 0) {
        snprintf(reason, sizeof(reason), "%s", err->msg);
        memory = false;
        ckpt = NULL;
        rc = capture_parent(m, &pc, &child, &cp, NULL, err);
    }
    char parent_id[65];
    snprintf(parent_id, sizeof(parent_id), "%s", pc.id);
    sbx_change_end(&pc); /* the parent runs on while its child starts */
    if (rc == 0) {
        sbx_fault_point("fork.before_restore");
        rc = start_clone(m, &child, &cp, ckpt, false, &memory, err);
    }
    if (ckpt)
        storage_remove_tree(ckpt, NULL);
    if (rc < 0) {
        log_warn("sandbox.fork_failed", "parent=%s child=%s code=%s msg=\"%s\"", parent_id,
                 child.id, err->code, err->msg);
        undo_clone(m, child.id);
    } else {
        log_info("sandbox.forked", "parent=%s child=%s memory_preserved=%d", parent_id, child.id,
                 memory);
        *out = clone_json(m, child.id, memory, reason);
        sbx_event(m, owner->id, parent_id, "forked",
                  json_pack("{s:s, s:b}", "child_id", child.id, "memory_preserved", memory));
        sbx_event(m, owner->id, child.id, "created",
                  json_pack("{s:s, s:s}", "image", child.image, "parent_id", parent_id));
    }
    sbx_paths_free(&cp);
    store_sandbox_rec_clear(&child);
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
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:b, s:f}", "id", s->id, "name", s->name,
                          "source_id", s->source_id, "image", s->image, "memory_preserved",
                          s->memory_preserved, "created_at", s->created_at);
    json_t *reason = json_object_get(s->spec, "memory_reason");
    if (!s->memory_preserved && json_is_string(reason))
        json_object_set(j, "reason", reason);
    return j;
}

int sbx_snapshot_create(sbx_mgr_t *m, const user_t *owner, const char *key, const char *name,
                        json_t **out, err_t *err)
{
    if (!snapshot_name_valid(name))
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "field 'name' must be 1-128 characters of A-Z a-z 0-9 . - _");
    return sbx_snapshot_take(m, owner, key, name, out, err);
}

int sbx_snapshot_take(sbx_mgr_t *m, const user_t *owner, const char *key, const char *name,
                      json_t **out, err_t *err)
{
    snapshot_rec_t existing;
    if (store_snapshot_get(m->store, owner->id, name, &existing, NULL) == 0) {
        store_snapshot_rec_clear(&existing);
        return err_set(err, ERR_CONFLICT, 0, "snapshot_exists", "a snapshot called '%s' exists",
                       name);
    }
    struct sbx_change c;
    if (begin_on_running(m, owner, key, SBX_OP_SNAPSHOT, &c, err) < 0)
        return -1;
    snapshot_rec_t snap = {.owner_id = owner->id, .created_at = now_unix()};
    id_random_hex(snap.id, 32);
    snprintf(snap.name, sizeof(snap.name), "%s", name);
    snprintf(snap.source_id, sizeof(snap.source_id), "%s", c.rec.id);
    snprintf(snap.image, sizeof(snap.image), "%s", c.rec.image);
    snap.spec = json_deep_copy(c.rec.spec);
    json_object_del(snap.spec, "last_error");
    json_object_set_new(snap.spec, "runtime", json_string(c.rec.runtime));
    const runtime_t *rt = sbx_runtime(&c.rec);
    snap.memory_preserved = runtime_can(rt, RUNTIME_KEEPS_MEMORY);
    if (!snap.memory_preserved)
        json_object_set_new(
            snap.spec, "memory_reason",
            json_sprintf("runtime %s cannot checkpoint on this host", runtime_name(rt)));
    _cleanup_free_ char *dir = snapshot_dir(m, snap.id);
    _cleanup_free_ char *ckpt = xasprintf("%s/checkpoint", dir);
    _cleanup_free_ char *layer = xasprintf("%s/layer", dir);
    int rc = 0;
    if (!mkdir_p(ckpt, 0700))
        rc = err_sys(err, "create %s", dir);
    if (rc == 0) {
        struct sbx_capture cap = {snap.memory_preserved ? ckpt : NULL, layer, dir, 0};
        rc = sbx_capture(m, &c.rec, &cap, "snapshot.after_checkpoint", err);
        if (rc < 0 && snap.memory_preserved && runtime_can(rt, RUNTIME_LIVE_CHECKPOINT))
            runtime_checkpoint_explain(rt, dir, c.rec.id, err);
        if (rc < 0 && snap.memory_preserved && !runtime_can(rt, RUNTIME_LIVE_CHECKPOINT) &&
            strcmp(err->code, "checkpoint_failed") == 0) {
            /* gVisor refused it: a snapshot of the files alone, which says so */
            log_warn("sandbox.snapshot_files_only", "sandbox=%s msg=\"%s\"", c.rec.id, err->msg);
            snap.memory_preserved = false;
            json_object_set_new(snap.spec, "memory_reason", json_string(err->msg));
            cap.ckpt_dir = NULL;
            rc = sbx_capture(m, &c.rec, &cap, "snapshot.after_checkpoint", err);
        }
    }
    sbx_change_end(&c);
    /* Files first, row last: a crash leaves only a directory that start-up removes. */
    if (rc == 0)
        rc = store_snapshot_insert(m->store, &snap, err);
    if (rc < 0)
        storage_remove_tree(dir, NULL);
    else
        *out = snapshot_json(&snap);
    store_snapshot_rec_clear(&snap);
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
    const char *runtime = json_string_value(json_object_get(snap.spec, "runtime"));
    clone_record(&r, owner, snap.spec, snap.image, NULL, label ? label : snap.name, hostname,
                 runtime);
    struct sbx_paths p;
    sbx_paths_init(m, r.id, &p);
    int rc = sbx_quota_insert(m, owner, &r, false, err);
    if (rc == 0)
        rc = sbx_make_dirs(&p, r.hostname, err);
    if (rc == 0)
        rc = sbx_net_setup(m, &r, &p, NULL, err);
    if (rc == 0)
        rc = storage_layer_clone(m->driver, layer, p.layer, sbx_spec_disk(snap.spec), err);
    bool memory = false;
    /* A snapshot that cannot be restored (a kernel or CRIU change since) still starts, from
     * its files: memory_preserved says false and the sandbox's last_error says why. */
    if (rc == 0)
        rc = start_clone(m, &r, &p, snap.memory_preserved ? ckpt : NULL, true, &memory, err);
    if (rc < 0) {
        undo_clone(m, r.id);
    } else {
        *out = clone_json(m, r.id, memory, NULL);
        json_t *ev = json_pack("{s:s, s:s, s:b}", "image", r.image, "snapshot", name,
                               "memory_preserved", memory);
        if (!memory && snap.memory_preserved)
            json_object_set_new(ev, "reason",
                                json_string("the snapshot's memory could not be "
                                            "restored; started from its files"));
        sbx_event(m, owner->id, r.id, "created", ev);
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
