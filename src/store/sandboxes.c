#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "common/util.h"
#include "store_internal.h"
#include "store_sandboxes.h"

static const char *const status_names[SBX_STATUS_COUNT] = {
    [SBX_CREATING] = "creating",     [SBX_RUNNING] = "running", [SBX_PAUSED] = "paused",
    [SBX_HIBERNATED] = "hibernated", [SBX_EXITED] = "exited",   [SBX_TERMINATED] = "terminated",
};

static const char *const intent_names[SBX_INTENT_COUNT] = {
    [SBX_INTENT_NONE] = "",
    [SBX_INTENT_CREATE] = "create",
    [SBX_INTENT_DELETE] = "delete",
    [SBX_INTENT_COALESCE] = "coalesce",
    [SBX_INTENT_HIBERNATE] = "hibernate",
    [SBX_INTENT_WAKE] = "wake",
};

const char *sandbox_status_name(sandbox_status_t st)
{
    return (unsigned)st < SBX_STATUS_COUNT ? status_names[st] : "unknown";
}

int sandbox_status_parse(const char *name)
{
    for (int i = 0; name && i < SBX_STATUS_COUNT; i++)
        if (strcmp(name, status_names[i]) == 0)
            return i;
    return -1;
}

const char *sandbox_intent_name(sandbox_intent_t i)
{
    return (unsigned)i < SBX_INTENT_COUNT ? intent_names[i] : "";
}

int sandbox_intent_parse(const char *name)
{
    if (!name || !*name)
        return SBX_INTENT_NONE;
    for (int i = 1; i < SBX_INTENT_COUNT; i++)
        if (strcmp(name, intent_names[i]) == 0)
            return i;
    return -1;
}

#define SBX_COLS                                                                                   \
    "id, name, owner_id, label, image, status, coalesce(intent, ''), exit_code, "                  \
    "coalesce(hostname, ''), coalesce(ip_address, ''), coalesce(parent_id, ''), created_at, "      \
    "last_active_at, coalesce(deleted_at, 0), coalesce(delete_reason, ''), is_public, "            \
    "interactive, runtime, spec"

static void read_rec(sqlite3_stmt *st, sandbox_rec_t *r)
{
    memset(r, 0, sizeof(*r));
    store_col_text(st, 0, r->id, sizeof(r->id));
    store_col_text(st, 1, r->name, sizeof(r->name));
    r->owner_id = sqlite3_column_int64(st, 2);
    store_col_text(st, 3, r->label, sizeof(r->label));
    store_col_text(st, 4, r->image, sizeof(r->image));
    /* A name this build does not know (a newer daemon's) reads as exited: kept, never run. */
    int status = sandbox_status_parse((const char *)sqlite3_column_text(st, 5));
    int intent = sandbox_intent_parse((const char *)sqlite3_column_text(st, 6));
    r->status = status >= 0 ? (sandbox_status_t)status : SBX_EXITED;
    r->intent = intent >= 0 ? (sandbox_intent_t)intent : SBX_INTENT_NONE;
    r->has_exit_code = sqlite3_column_type(st, 7) != SQLITE_NULL;
    r->exit_code = sqlite3_column_int(st, 7);
    store_col_text(st, 8, r->hostname, sizeof(r->hostname));
    store_col_text(st, 9, r->ip_address, sizeof(r->ip_address));
    store_col_text(st, 10, r->parent_id, sizeof(r->parent_id));
    r->created_at = sqlite3_column_double(st, 11);
    r->last_active_at = sqlite3_column_double(st, 12);
    r->deleted_at = sqlite3_column_double(st, 13);
    store_col_text(st, 14, r->delete_reason, sizeof(r->delete_reason));
    r->is_public = sqlite3_column_int(st, 15) != 0;
    r->interactive = sqlite3_column_int(st, 16) != 0;
    store_col_text(st, 17, r->runtime, sizeof(r->runtime));
    const char *spec = (const char *)sqlite3_column_text(st, 18);
    r->spec = json_loads(spec ? spec : "{}", 0, NULL);
    if (!r->spec)
        r->spec = json_object();
}

void store_sandbox_rec_clear(sandbox_rec_t *r)
{
    if (r->spec)
        json_decref(r->spec);
    r->spec = NULL;
}

static void bind_text_or_null(sqlite3_stmt *st, int i, const char *v)
{
    if (v && *v)
        sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

int store_sandbox_insert(store_t *s, const sandbox_rec_t *r, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "INSERT INTO sandboxes (id, name, owner_id, label, image, status, intent, "
                      "hostname, parent_id, created_at, last_active_at, is_public, interactive, "
                      "runtime, spec) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                      &st, err) < 0)
        return -1;
    char *spec = json_dump_compact(r->spec);
    sqlite3_bind_text(st, 1, r->id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, r->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, r->owner_id);
    sqlite3_bind_text(st, 4, r->label, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 5, r->image, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 6, sandbox_status_name(r->status), -1, SQLITE_STATIC);
    bind_text_or_null(st, 7, sandbox_intent_name(r->intent));
    bind_text_or_null(st, 8, r->hostname);
    bind_text_or_null(st, 9, r->parent_id);
    sqlite3_bind_double(st, 10, r->created_at);
    sqlite3_bind_double(st, 11, r->last_active_at);
    sqlite3_bind_int(st, 12, r->is_public);
    sqlite3_bind_int(st, 13, r->interactive);
    sqlite3_bind_text(st, 14, r->runtime, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 15, spec, -1, free);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "insert sandbox", err);
    return 0;
}

/* Run a one-statement update binding id as ?1; ERR_NOT_FOUND when no row changed. */
static int exec_on_id(store_t *s, const char *sql, const char *id, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, sql, &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "update sandbox", err);
    return 0;
}

int store_sandbox_purge(store_t *s, const char *id, err_t *err)
{
    return exec_on_id(s,
                      "DELETE FROM execution_logs WHERE execution_id IN "
                      "(SELECT id FROM executions WHERE sandbox_id = ?1);",
                      id, err) < 0 ||
                   exec_on_id(s, "DELETE FROM executions WHERE sandbox_id = ?1", id, err) < 0 ||
                   exec_on_id(s, "DELETE FROM sandboxes WHERE id = ?1", id, err) < 0
               ? -1
               : 0;
}

int store_sandbox_get(store_t *s, int64_t owner_id, const char *key, sandbox_rec_t *out, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "SELECT " SBX_COLS " FROM sandboxes WHERE (id = ?1 OR name = ?1) "
                      "AND (?2 < 0 OR owner_id = ?2)",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, owner_id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return err_set(err, ERR_NOT_FOUND, 0, "sandbox_not_found", "no such sandbox");
    if (rc != SQLITE_ROW)
        return store_fail(s, "get sandbox", err);
    read_rec(st, out);
    return 0;
}

int store_sandbox_get_by_ip(store_t *s, const char *ip, sandbox_rec_t *out, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    /* An address belongs to one sandbox that is not terminated (the pool hands it out again
     * only after a delete). */
    if (store_prepare(s,
                      "SELECT " SBX_COLS " FROM sandboxes WHERE ip_address = ?1 AND "
                      "status <> 'terminated' ORDER BY created_at DESC LIMIT 1",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, ip, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return err_set(err, ERR_NOT_FOUND, 0, "sandbox_not_found", "no sandbox at %s", ip);
    if (rc != SQLITE_ROW)
        return store_fail(s, "get sandbox by address", err);
    read_rec(st, out);
    return 0;
}

static int list_query(store_t *s, const char *sql, int64_t owner_id, sandbox_rec_t **out, size_t *n,
                      err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, sql, &st, err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, owner_id);
    sandbox_rec_t *items = NULL;
    size_t count = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == cap) {
            cap = cap ? cap * 2 : 16;
            items = xrealloc(items, cap * sizeof(*items));
        }
        read_rec(st, &items[count++]);
    }
    if (rc != SQLITE_DONE) {
        store_sandbox_list_free(items, count);
        return store_fail(s, "list sandboxes", err);
    }
    *out = items;
    *n = count;
    return 0;
}

int store_sandbox_list(store_t *s, int64_t owner_id, sandbox_rec_t **out, size_t *n, err_t *err)
{
    return list_query(s,
                      "SELECT " SBX_COLS " FROM sandboxes WHERE ?1 < 0 OR owner_id = ?1 "
                      "ORDER BY created_at, id",
                      owner_id, out, n, err);
}

int store_sandbox_list_live(store_t *s, sandbox_rec_t **out, size_t *n, err_t *err)
{
    return list_query(s,
                      "SELECT " SBX_COLS " FROM sandboxes WHERE ?1 < 0 AND "
                      "status <> 'terminated' ORDER BY created_at, id",
                      -1, out, n, err);
}

int store_sandbox_list_reapable(store_t *s, bool any_timeout, sandbox_rec_t **out, size_t *n,
                                err_t *err)
{
    /* Without a daemon-wide timeout only sandboxes that set their own can be reaped: most
     * rounds then read no row at all. */
    return list_query(s,
                      "SELECT " SBX_COLS " FROM sandboxes WHERE status = 'running' AND "
                      "(intent IS NULL OR intent = '') AND (?1 OR "
                      "json_extract(spec, '$.idle_timeout') > 0) ORDER BY created_at, id",
                      any_timeout, out, n, err);
}

int store_sandbox_list_due(store_t *s, double now, sandbox_rec_t **out, size_t *n, err_t *err)
{
    /* A deadline that hibernates has nothing to do for a sandbox that sleeps or ended. */
    return list_query(s,
                      "SELECT " SBX_COLS " FROM sandboxes WHERE status <> 'terminated' AND "
                      "(intent IS NULL OR intent = '') AND "
                      "json_extract(spec, '$.deadline.end_at') * 1000 <= ?1 AND NOT "
                      "(status IN ('hibernated', 'exited') AND "
                      "json_extract(spec, '$.deadline.action') = 'hibernate') "
                      "ORDER BY created_at, id",
                      (int64_t)(now * 1000), out, n, err);
}

void store_sandbox_list_free(sandbox_rec_t *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        store_sandbox_rec_clear(&items[i]);
    free(items);
}

int store_sandbox_set_status(store_t *s, const char *id, sandbox_status_t status,
                             sandbox_intent_t intent, bool has_exit, int exit_code, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "UPDATE sandboxes SET status = ?2, intent = ?3, "
                      "exit_code = CASE WHEN ?4 THEN ?5 ELSE exit_code END WHERE id = ?1",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, sandbox_status_name(status), -1, SQLITE_STATIC);
    bind_text_or_null(st, 3, sandbox_intent_name(intent));
    sqlite3_bind_int(st, 4, has_exit);
    sqlite3_bind_int(st, 5, exit_code);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "set sandbox status", err);
    return 0;
}

int store_sandbox_set_spec_field(store_t *s, const char *id, const char *field, const json_t *value,
                                 err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      value ? "UPDATE sandboxes SET spec = json_set(spec, '$.' || ?2, json(?3)) "
                              "WHERE id = ?1"
                            : "UPDATE sandboxes SET spec = json_remove(spec, '$.' || ?2) "
                              "WHERE id = ?1",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, field, -1, SQLITE_TRANSIENT);
    if (value)
        sqlite3_bind_text(st, 3, json_dump_compact(value), -1, free);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "set a sandbox's spec field", err);
    return 0;
}

static int mark_deleted(store_t *s, const char *id, const char *reason, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "UPDATE sandboxes SET status = 'terminated', intent = NULL, "
                      "deleted_at = ?2, delete_reason = ?3 WHERE id = ?1",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 2, now_unix());
    sqlite3_bind_text(st, 3, reason, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "delete sandbox", err);
    return 0;
}

int store_sandbox_set_deleted(store_t *s, const char *id, const char *reason, err_t *err)
{
    /* History first: a crash in between leaves a sandbox still being deleted, which the
     * next start finishes. */
    return store_exec_forget(s, id, err) < 0 ? -1 : mark_deleted(s, id, reason, err);
}

int store_sandbox_update(store_t *s, const char *id, const char *label, int is_public, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "UPDATE sandboxes SET label = coalesce(?2, label), "
                      "is_public = CASE WHEN ?3 >= 0 THEN ?3 ELSE is_public END WHERE id = ?1",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    bind_text_or_null(st, 2, label);
    sqlite3_bind_int(st, 3, is_public);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "update sandbox", err);
    return 0;
}

int store_sandbox_hand_over(store_t *s, const char *id, int64_t owner_id, const char *label,
                            bool is_public, double now, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "UPDATE sandboxes SET owner_id = ?2, label = ?3, is_public = ?4, "
                      "created_at = ?5, last_active_at = ?5 WHERE id = ?1",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, owner_id);
    sqlite3_bind_text(st, 3, label, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 4, is_public);
    sqlite3_bind_double(st, 5, now);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "hand over sandbox", err);
    return 0;
}

void store_sandbox_touch(store_t *s, const char *id)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "UPDATE sandboxes SET last_active_at = ?2 WHERE id = ?1", &st, NULL) < 0)
        return;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 2, now_unix());
    sqlite3_step(st);
}

json_t *store_sandbox_child_ids(store_t *s, const char *id)
{
    json_t *arr = json_array();
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "SELECT id FROM sandboxes WHERE parent_id = ? ORDER BY created_at", &st,
                      NULL) < 0)
        return arr;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    while (sqlite3_step(st) == SQLITE_ROW)
        json_array_append_new(arr, json_string((const char *)sqlite3_column_text(st, 0)));
    return arr;
}

int store_userns_taken(store_t *s, uint32_t base, bool *taken, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "SELECT 1 FROM sandboxes WHERE status != 'terminated' AND "
                      "json_extract(spec, '$.userns') = ?1 UNION ALL "
                      "SELECT 1 FROM snapshots WHERE json_extract(spec, '$.userns') = ?1 LIMIT 1",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)base);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return store_fail(s, "look up a user namespace range", err);
    *taken = rc == SQLITE_ROW;
    return 0;
}
