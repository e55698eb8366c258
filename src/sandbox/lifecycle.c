/* Reading, updating and deleting sandboxes; exits; reconcile after a restart. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/util.h"
#include "runtime/runtime.h"
#include "sandbox_internal.h"
#include "net/net.h"
#include "store/store_events.h"
#include "storage/storage.h"

void sbx_event(sbx_mgr_t *m, int64_t owner_id, const char *id, const char *type, json_t *data)
{
    sandbox_rec_t r;
    if (owner_id < 0 && store_sandbox_get(m->store, -1, id, &r, NULL) == 0) {
        owner_id = r.owner_id;
        store_sandbox_rec_clear(&r);
    }
    if (owner_id >= 0)
        store_event_add(m->store, owner_id, id, type, data);
    if (data)
        json_decref(data);
}

int sbx_lookup(sbx_mgr_t *m, const user_t *owner, const char *key, sandbox_rec_t *rec, err_t *err)
{
    /* Unknown and foreign ids get the same answer (DESIGN invariant 2). */
    if (!key || !*key || strlen(key) > 64)
        return err_set(err, ERR_NOT_FOUND, 0, "sandbox_not_found", "no such sandbox");
    return store_sandbox_get(m->store, owner->id, key, rec, err);
}

static json_t *num_or_null(bool has, double v)
{
    return has ? json_real(v) : json_null();
}

json_t *sbx_to_json(sbx_mgr_t *m, const sandbox_rec_t *r)
{
    json_t *res = json_object_get(r->spec, "resources");
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "id", r->id, "name", r->name, "label",
                          r->label, "image", r->image, "status", sandbox_status_name(r->status),
                          "runtime", r->runtime);
    json_object_set_new(j, "exit_code",
                        r->has_exit_code ? json_integer(r->exit_code) : json_null());
    json_object_set_new(j, "hostname", json_string(r->hostname));
    json_object_set_new(j, "ip_address",
                        r->ip_address[0] ? json_string(r->ip_address) : json_null());
    json_object_set_new(j, "parent_id", r->parent_id[0] ? json_string(r->parent_id) : json_null());
    json_object_set_new(j, "child_ids", store_sandbox_child_ids(m->store, r->id));
    json_object_set_new(j, "created_at", json_real(r->created_at));
    json_object_set_new(j, "last_active_at", json_real(r->last_active_at));
    json_object_set_new(j, "deleted_at", num_or_null(r->deleted_at > 0, r->deleted_at));
    json_object_set_new(j, "delete_reason",
                        r->delete_reason[0] ? json_string(r->delete_reason) : json_null());
    json_object_set_new(j, "is_public", json_boolean(r->is_public));
    json_object_set_new(j, "interactive", json_boolean(r->interactive));
    json_object_set_new(j, "url", json_null()); /* set once the inbound proxy exists */
    json_object_set_new(j, "resources", res ? json_deep_copy(res) : json_object());
    json_t *net = json_object_get(r->spec, "network");
    json_object_set_new(j, "network", net ? json_deep_copy(net) : json_null());
    json_t *allow = json_object_get(r->spec, "egress_allow");
    json_object_set_new(j, "egress_allow", allow ? json_deep_copy(allow) : json_null());
    json_object_set_new(j, "net_raw",
                        json_boolean(json_is_true(json_object_get(r->spec, "net_raw"))));
    json_object_set_new(j, "setuid",
                        json_boolean(json_is_true(json_object_get(r->spec, "setuid"))));
    json_t *tpl = json_object_get(r->spec, "template");
    json_object_set_new(j, "template", tpl ? json_deep_copy(tpl) : json_null());
    /* Its root's host uid and gid (and the size of its range), or null: no user namespace. */
    uint32_t base = sbx_userns_base(r);
    json_object_set_new(j, "user_namespace",
                        base ? json_pack("{s:I, s:I}", "host_id", (json_int_t)base, "size",
                                         (json_int_t)RUNTIME_USERNS_SIZE)
                             : json_null());
    /* Why the last change failed or fell back (a wake that could not keep memory, an idle
     * hibernation that failed): the sandbox kept working, and this says what happened. */
    json_t *last = json_object_get(r->spec, "last_error");
    json_object_set_new(j, "last_error", last ? json_deep_copy(last) : json_null());
    return j;
}

json_t *sbx_egress_allow(sbx_mgr_t *m, const char *ip)
{
    sandbox_rec_t r;
    if (store_sandbox_get_by_ip(m->store, ip, &r, NULL) < 0)
        return NULL;
    json_t *out = NULL;
    const char *net = json_string_value(json_object_get(r.spec, "network"));
    json_t *allow = json_object_get(r.spec, "egress_allow");
    if (net && strcmp(net, "proxy") == 0 && json_is_array(allow))
        out = json_deep_copy(allow);
    store_sandbox_rec_clear(&r);
    return out;
}

int sbx_get(sbx_mgr_t *m, const user_t *owner, const char *key, json_t **out, err_t *err)
{
    sandbox_rec_t r;
    if (sbx_lookup(m, owner, key, &r, err) < 0)
        return -1;
    *out = sbx_to_json(m, &r);
    store_sandbox_rec_clear(&r);
    return 0;
}

int sbx_list(sbx_mgr_t *m, const user_t *owner, json_t **out, err_t *err)
{
    sandbox_rec_t *items = NULL;
    size_t n = 0;
    if (store_sandbox_list(m->store, owner->id, &items, &n, err) < 0)
        return -1;
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, sbx_to_json(m, &items[i]));
    store_sandbox_list_free(items, n);
    *out = arr;
    return 0;
}

int sbx_update(sbx_mgr_t *m, const user_t *owner, const char *key, const char *label, int is_public,
               json_t **out, err_t *err)
{
    sandbox_rec_t r;
    if (sbx_lookup(m, owner, key, &r, err) < 0)
        return -1;
    int rc = store_sandbox_update(m->store, r.id, label, is_public, err);
    if (rc == 0) {
        *out = json_pack("{s:s}", "id", r.id);
        if (label)
            json_object_set_new(*out, "label", json_string(label));
        if (is_public >= 0)
            json_object_set_new(*out, "public", json_boolean(is_public));
        sbx_event(m, r.owner_id, r.id, "updated", json_deep_copy(*out));
    }
    store_sandbox_rec_clear(&r);
    return rc;
}

int sbx_delete(sbx_mgr_t *m, const user_t *owner, const char *key, json_t **out, err_t *err)
{
    struct sbx_change c;
    int rc = sbx_change_begin(m, owner, key, SBX_OP_DELETE, &c, err);
    if (rc < 0)
        return -1;
    if (rc == 0) { /* the intent is recorded: a daemon killed mid-way finishes it on start */
        rc = sbx_teardown(m, c.id, true, err);
        if (rc == 0)
            rc = store_sandbox_set_deleted(m->store, c.id, "deleted", err);
        if (rc == 0) {
            c.intent_written = false;
            log_info("sandbox.deleted", "sandbox=%s user=%s", c.id, owner->name);
            sbx_event(m, c.rec.owner_id, c.id, "deleted", json_pack("{s:s}", "reason", "deleted"));
        }
    }
    char id[65];
    snprintf(id, sizeof(id), "%s", c.id);
    sbx_change_end(&c);
    if (rc < 0)
        return -1;
    sbx_live_remove(m, id);
    *out = json_pack("{s:s, s:s}", "id", id, "status", "terminated");
    return 0;
}

/* Mark an ended container exited and release what it held, keeping its files and logs. */
void sbx_finish_exit(sbx_mgr_t *m, const char *id)
{
    err_t err = {0};
    int code = sbx_recorded_exit(m, id);
    store_sandbox_set_status(m->store, id, SBX_EXITED, SBX_INTENT_NONE, code >= 0, code, &err);
    if (sbx_teardown(m, id, false, &err) < 0)
        log_warn("sandbox.cleanup_failed", "sandbox=%s msg=\"%s\"", id, err.msg);
    log_info("sandbox.exited", "sandbox=%s exit_code=%d", id, code);
    sbx_event(m, -1, id, "exited", code >= 0 ? json_pack("{s:i}", "exit_code", code) : NULL);
}

void sbx_on_exit(sbx_mgr_t *m, const char *id, pid_t shim_pid)
{
    struct sbx_live *l = sbx_live_get(m, id, false);
    if (!l)
        return;
    /* The shim of an earlier run (before a hibernate and wake, or a cold start) is no news. */
    bool current = l->shim_pid == shim_pid;
    /* A delete that killed the container records its end itself: wait for it (it may not
     * have the lock yet), then the exit below finds the sandbox terminated and does nothing.
     * Bounded: a delete waits at most this long for execs to let go. */
    for (int waited = 0; current && atomic_load(&l->preempting) > 0 && waited < 120000;
         waited += 20)
        usleep(20 * 1000);
    sbx_live_put(m, l);
    struct sbx_change c;
    err_t err = {0};
    /* Only a running (or paused) sandbox with no change under way exits: a hibernation or a
     * delete ends its container on purpose, and the exit transition is refused then. */
    if (current && sbx_change_begin(m, NULL, id, SBX_OP_EXIT, &c, &err) == 0) {
        if (c.l->shim_pid == shim_pid) {
            sbx_finish_exit(m, id);
            sbx_unwatch(m, c.l); /* no fd kept for a sandbox that has exited */
        }
        sbx_change_end(&c);
    }
}

void sbx_note(sbx_mgr_t *m, const char *id, const char *op, const char *detail)
{
    char text[600];
    snprintf(text, sizeof(text), "%s", detail ? detail : "");
    runtime_scrub_paths(text);
    json_t *v =
        op ? json_pack("{s:s, s:s, s:f}", "op", op, "detail", text, "at", now_unix()) : NULL;
    store_sandbox_set_spec_field(m->store, id, "last_error", v, NULL);
    json_decref(v);
}
