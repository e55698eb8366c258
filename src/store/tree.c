/* Sandbox trees (parent_id links), coalesce marking, and snapshots. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "common/util.h"
#include "store_internal.h"
#include "store_sandboxes.h"

/* UPDATE sandboxes SET <column> = value (NULL when value is) WHERE id. */
static int set_text_column(store_t *s, const char *sql, const char *id, const char *value,
                           err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, sql, &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    if (value)
        sqlite3_bind_text(st, 2, value, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, 2);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "update sandbox", err);
    return 0;
}

int store_sandbox_set_ip(store_t *s, const char *id, const char *ip, err_t *err)
{
    return set_text_column(s, "UPDATE sandboxes SET ip_address = ?2 WHERE id = ?1", id, ip, err);
}

int store_sandbox_subtree(store_t *s, const char *root_id, sandbox_rec_t **out, size_t *n,
                          err_t *err)
{
    /* Ids of the subtree, breadth first, then the rows in that order. */
    json_t *ids = json_array();
    json_array_append_new(ids, json_string(root_id));
    for (size_t i = 0; i < json_array_size(ids); i++) {
        json_t *kids = store_sandbox_child_ids(s, json_string_value(json_array_get(ids, i)));
        json_array_extend(ids, kids);
        json_decref(kids);
        if (json_array_size(ids) > 100000)
            break; /* a cycle cannot happen, but never loop without end */
    }
    sandbox_rec_t *items = xcalloc(json_array_size(ids), sizeof(*items));
    size_t count = 0;
    for (size_t i = 0; i < json_array_size(ids); i++)
        if (store_sandbox_get(s, -1, json_string_value(json_array_get(ids, i)), &items[count],
                              NULL) == 0)
            count++;
    json_decref(ids);
    if (count == 0) {
        free(items);
        return err_set(err, ERR_NOT_FOUND, 0, "sandbox_not_found", "no such sandbox");
    }
    *out = items;
    *n = count;
    return 0;
}

int store_sandbox_mark_coalesce(store_t *s, const char *final_id, const char *const *victims,
                                size_t n, err_t *err)
{
    STORE_LOCK(s);
    char *msg = NULL;
    if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, &msg) != SQLITE_OK) {
        sqlite3_free(msg);
        return store_fail(s, "begin", err);
    }
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    int rc = store_prepare(s,
                           "UPDATE sandboxes SET intent = 'coalesce' WHERE id = ? "
                           "AND status <> 'terminated'",
                           &st, err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, victims[i], -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = store_fail(s, "mark for coalesce", err);
    }
    sqlite3_stmt *up _cleanup_stmt_ = NULL;
    if (rc == 0 && (rc = store_prepare(s, "UPDATE sandboxes SET parent_id = NULL WHERE id = ?", &up,
                                       err)) == 0) {
        sqlite3_bind_text(up, 1, final_id, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(up) != SQLITE_DONE)
            rc = store_fail(s, "make final a root", err);
    }
    sqlite3_exec(s->db, rc == 0 ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

/* ---- snapshots ---- */

#define SNAP_COLS "id, name, owner_id, source_id, image, spec, memory_preserved, created_at"

static void read_snap(sqlite3_stmt *st, snapshot_rec_t *r)
{
    memset(r, 0, sizeof(*r));
    store_col_text(st, 0, r->id, sizeof(r->id));
    store_col_text(st, 1, r->name, sizeof(r->name));
    r->owner_id = sqlite3_column_int64(st, 2);
    store_col_text(st, 3, r->source_id, sizeof(r->source_id));
    store_col_text(st, 4, r->image, sizeof(r->image));
    const char *spec = (const char *)sqlite3_column_text(st, 5);
    r->spec = json_loads(spec ? spec : "{}", 0, NULL);
    if (!r->spec)
        r->spec = json_object();
    r->memory_preserved = sqlite3_column_int(st, 6) != 0;
    r->created_at = sqlite3_column_double(st, 7);
}

void store_snapshot_rec_clear(snapshot_rec_t *r)
{
    if (r->spec)
        json_decref(r->spec);
    r->spec = NULL;
}

void store_snapshot_list_free(snapshot_rec_t *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        store_snapshot_rec_clear(&items[i]);
    free(items);
}

int store_snapshot_insert(store_t *s, const snapshot_rec_t *r, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "INSERT INTO snapshots (" SNAP_COLS ") VALUES (?,?,?,?,?,?,?,?)", &st,
                      err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, r->id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, r->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, r->owner_id);
    sqlite3_bind_text(st, 4, r->source_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 5, r->image, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 6, json_dump_compact(r->spec), -1, free);
    sqlite3_bind_int(st, 7, r->memory_preserved);
    sqlite3_bind_double(st, 8, r->created_at);
    if (sqlite3_step(st) != SQLITE_DONE) {
        store_fail(s, "insert snapshot", err);
        if (err && err->kind == ERR_CONFLICT)
            err_set(err, ERR_CONFLICT, 0, "snapshot_exists", "a snapshot called '%s' exists",
                    r->name);
        return -1;
    }
    return 0;
}

int store_snapshot_get(store_t *s, int64_t owner_id, const char *name, snapshot_rec_t *out,
                       err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "SELECT " SNAP_COLS " FROM snapshots WHERE owner_id = ? AND name = ?", &st,
                      err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, owner_id);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return err_set(err, ERR_NOT_FOUND, 0, "snapshot_not_found", "no such snapshot");
    if (rc != SQLITE_ROW)
        return store_fail(s, "get snapshot", err);
    read_snap(st, out);
    return 0;
}

int store_snapshot_list(store_t *s, int64_t owner_id, snapshot_rec_t **out, size_t *n, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "SELECT " SNAP_COLS " FROM snapshots WHERE owner_id = ? "
                      "ORDER BY created_at, name",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, owner_id);
    snapshot_rec_t *items = NULL;
    size_t count = 0, cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (count == cap) {
            cap = cap ? cap * 2 : 8;
            items = xrealloc(items, cap * sizeof(*items));
        }
        read_snap(st, &items[count++]);
    }
    *out = items;
    *n = count;
    return 0;
}

int store_snapshot_delete(store_t *s, int64_t owner_id, const char *name, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "DELETE FROM snapshots WHERE owner_id = ? AND name = ?", &st, err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, owner_id);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "delete snapshot", err);
    if (sqlite3_changes(s->db) == 0)
        return err_set(err, ERR_NOT_FOUND, 0, "snapshot_not_found", "no such snapshot");
    return 0;
}

bool store_snapshot_exists(store_t *s, const char *id)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "SELECT 1 FROM snapshots WHERE id = ?", &st, NULL) < 0)
        return true; /* when in doubt, keep it */
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    return sqlite3_step(st) == SQLITE_ROW;
}

int store_snapshot_layers(store_t *s, json_t *set, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "SELECT spec FROM snapshots", &st, err) < 0)
        return -1;
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t *spec = json_loads((const char *)sqlite3_column_text(st, 0), 0, NULL);
        json_t *dir;
        size_t i;
        json_array_foreach(json_object_get(spec, "layers"), i, dir) if (json_is_string(dir))
            json_object_set_new(set, json_string_value(dir), json_true());
        json_decref(spec);
    }
    return 0;
}
