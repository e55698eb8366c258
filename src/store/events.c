/* Events: what happened to an owner's sandboxes, kept so a reconnecting client resumes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "common/util.h"
#include "store_events.h"
#include "store_internal.h"

int64_t store_event_add(store_t *s, int64_t owner_id, const char *sandbox_id, const char *type,
                        json_t *data)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "INSERT INTO events (owner_id, sandbox_id, type, timestamp, data) "
                      "VALUES (?,?,?,?,?)",
                      &st, NULL) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, owner_id);
    sqlite3_bind_text(st, 2, sandbox_id ? sandbox_id : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, type, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 4, now_unix());
    sqlite3_bind_text(st, 5, data ? json_dump_compact(data) : strdup("{}"), -1, free);
    if (sqlite3_step(st) != SQLITE_DONE)
        return -1;
    return sqlite3_last_insert_rowid(s->db);
}

json_t *store_event_list(store_t *s, int64_t owner_id, int64_t after_id, int limit, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "SELECT id, sandbox_id, type, timestamp, data FROM events "
                      "WHERE owner_id = ? AND id > ? ORDER BY id LIMIT ?",
                      &st, err) < 0)
        return NULL;
    sqlite3_bind_int64(st, 1, owner_id);
    sqlite3_bind_int64(st, 2, after_id);
    sqlite3_bind_int(st, 3, limit);
    json_t *arr = json_array();
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t *data = json_loads((const char *)sqlite3_column_text(st, 4), 0, NULL);
        json_array_append_new(
            arr,
            json_pack("{s:I, s:s, s:s, s:f, s:o}", "id", (json_int_t)sqlite3_column_int64(st, 0),
                      "type", (const char *)sqlite3_column_text(st, 2), "container_id",
                      (const char *)sqlite3_column_text(st, 1), "timestamp",
                      sqlite3_column_double(st, 3), "data", data ? data : json_object()));
    }
    return arr;
}

int64_t store_event_cursor_before(store_t *s, double before)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    /* Over all owners: ids only grow, so the largest id before the time is a cursor any owner
     * can start from (their own events come after it). */
    if (store_prepare(s, "SELECT COALESCE(MAX(id), 0) FROM events WHERE timestamp < ?", &st, NULL) <
        0)
        return 0;
    sqlite3_bind_double(st, 1, before);
    return sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
}
