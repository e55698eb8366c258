/*
 * A sandbox's deadline and its wake policy (both in its spec). At its deadline the reaper
 * deletes the sandbox, or hibernates it (memory kept); E2B's timeouts are deadlines (the E2B
 * facade sets and moves them: docs/e2b.md). A sandbox whose policy says "no implicit wake"
 * stays hibernated when a request (exec, files, processes, the proxy) reaches it: only an
 * explicit wake (POST /wake, E2B's connect) restores it. Forks and snapshot starts begin
 * without either (clone_record drops them).
 */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "sandbox_internal.h"

static const char *action_name(enum sbx_end_action a)
{
    return a == SBX_END_HIBERNATE ? "hibernate" : "delete";
}

int sbx_set_deadline(sbx_mgr_t *m, const user_t *owner, const char *key, double end_at,
                     enum sbx_end_action action, err_t *err)
{
    sandbox_rec_t r;
    if (sbx_lookup(m, owner, key, &r, err) < 0)
        return -1;
    json_t *v = end_at > 0
                    ? json_pack("{s:f, s:s}", "end_at", end_at, "action", action_name(action))
                    : NULL;
    int rc = r.status == SBX_TERMINATED
                 ? err_set(err, ERR_NOT_FOUND, 0, "sandbox_not_found", "no such sandbox")
                 : store_sandbox_set_spec_field(m->store, r.id, "deadline", v, err);
    json_decref(v);
    store_sandbox_rec_clear(&r);
    return rc;
}

int sbx_set_auto_wake(sbx_mgr_t *m, const user_t *owner, const char *key, bool wake, err_t *err)
{
    sandbox_rec_t r;
    if (sbx_lookup(m, owner, key, &r, err) < 0)
        return -1;
    json_t *v = wake ? NULL : json_false();
    int rc = store_sandbox_set_spec_field(m->store, r.id, "auto_wake", v, err);
    json_decref(v);
    store_sandbox_rec_clear(&r);
    return rc;
}

bool sbx_spec_auto_wake(const json_t *spec)
{
    return !json_is_false(json_object_get(spec, "auto_wake"));
}

double sbx_spec_deadline(const json_t *spec, enum sbx_end_action *action)
{
    json_t *d = json_object_get(spec, "deadline");
    const char *a = json_string_value(json_object_get(d, "action"));
    if (action)
        *action = a && strcmp(a, "hibernate") == 0 ? SBX_END_HIBERNATE : SBX_END_DELETE;
    return json_number_value(json_object_get(d, "end_at"));
}

int sbx_life_get(sbx_mgr_t *m, const user_t *owner, const char *key, struct sbx_life *out,
                 err_t *err)
{
    sandbox_rec_t r;
    if (sbx_lookup(m, owner, key, &r, err) < 0)
        return -1;
    json_t *res = json_object_get(r.spec, "resources");
    *out = (struct sbx_life){.status = sandbox_status_name(r.status),
                             .created_at = r.created_at,
                             .auto_wake = sbx_spec_auto_wake(r.spec),
                             .cpus = json_number_value(json_object_get(res, "cpus")),
                             .memory = (uint64_t)json_integer_value(json_object_get(res, "memory")),
                             .disk = sbx_spec_disk(r.spec)};
    out->end_at = sbx_spec_deadline(r.spec, &out->action);
    const char *user = json_string_value(json_object_get(r.spec, "user"));
    snprintf(out->user, sizeof(out->user), "%s", user ? user : "");
    snprintf(out->id, sizeof(out->id), "%s", r.id);
    store_sandbox_rec_clear(&r);
    return 0;
}

/* Act on r's deadline if it is still due (re-read: a client may just have moved it). */
static void end_one(sbx_mgr_t *m, const char *id, double now)
{
    sandbox_rec_t r;
    if (store_sandbox_get(m->store, -1, id, &r, NULL) < 0)
        return;
    enum sbx_end_action action;
    double end_at = sbx_spec_deadline(r.spec, &action);
    user_t owner;
    err_t err = {0};
    json_t *out = NULL;
    int rc = 0;
    bool due = end_at > 0 && end_at <= now && r.status != SBX_TERMINATED;
    if (due && store_user_get_by_id(m->store, r.owner_id, &owner, &err) == 0) {
        if (action == SBX_END_HIBERNATE && r.status != SBX_HIBERNATED && r.status != SBX_EXITED)
            rc = sbx_hibernate(m, &owner, r.id, &out, &err);
        else if (action == SBX_END_DELETE)
            rc = sbx_delete(m, &owner, r.id, &out, &err);
        log_msg(rc < 0 ? LOG_WARN : LOG_INFO, "sandbox.deadline", "sandbox=%s action=%s%s%s", r.id,
                action_name(action), rc < 0 ? " code=" : "", rc < 0 ? err.code : "");
        /* A hibernation that failed (last_error says why, the sandbox runs on) is not tried
         * again; one that worked keeps its deadline, the time it went to sleep. */
        if (rc < 0 && action == SBX_END_HIBERNATE)
            store_sandbox_set_spec_field(m->store, r.id, "deadline", NULL, NULL);
        if (rc < 0)
            sbx_note(m, r.id, action_name(action), err.msg);
    }
    json_decref(out);
    store_sandbox_rec_clear(&r);
}

void sbx_deadlines_reap(sbx_mgr_t *m)
{
    sandbox_rec_t *items = NULL;
    size_t n = 0;
    double now = now_unix();
    if (store_sandbox_list_due(m->store, now, &items, &n, NULL) < 0)
        return;
    for (size_t i = 0; i < n; i++)
        end_one(m, items[i].id, now);
    store_sandbox_list_free(items, n);
}
