/* Per-user limits (NULL columns: the daemon's defaults) and what a user holds now. */
#include <string.h>

#include "common/util.h"
#include "store_internal.h"

#define LIMIT_COLS                                                                                 \
    "max_running, max_sandboxes, max_cpus, max_memory, max_pids, max_disk, "                       \
    "max_creates_per_minute"

void store_limits_unset(user_limits_t *l)
{
    *l = (user_limits_t){-1, -1, -1, -1, -1, -1, -1};
}

static int64_t col_int(sqlite3_stmt *st, int col)
{
    return sqlite3_column_type(st, col) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, col);
}

static void bind_int(sqlite3_stmt *st, int i, int64_t v)
{
    if (v < 0)
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_int64(st, i, v);
}

int store_user_limits_get(store_t *s, int64_t user_id, user_limits_t *out, err_t *err)
{
    STORE_LOCK(s);
    store_limits_unset(out);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "SELECT " LIMIT_COLS " FROM user_limits WHERE user_id = ?", &st, err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, user_id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return 0;
    if (rc != SQLITE_ROW)
        return store_fail(s, "get user limits", err);
    out->max_running = col_int(st, 0);
    out->max_sandboxes = col_int(st, 1);
    out->max_cpus = sqlite3_column_type(st, 2) == SQLITE_NULL ? -1 : sqlite3_column_double(st, 2);
    out->max_memory = col_int(st, 3);
    out->max_pids = col_int(st, 4);
    out->max_disk = col_int(st, 5);
    out->max_creates_per_minute = col_int(st, 6);
    return 0;
}

int store_user_limits_set(store_t *s, int64_t user_id, const user_limits_t *l, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "INSERT OR REPLACE INTO user_limits (user_id, " LIMIT_COLS
                      ", updated_at) VALUES (?,?,?,?,?,?,?,?,?)",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, user_id);
    bind_int(st, 2, l->max_running);
    bind_int(st, 3, l->max_sandboxes);
    if (l->max_cpus < 0)
        sqlite3_bind_null(st, 4);
    else
        sqlite3_bind_double(st, 4, l->max_cpus);
    bind_int(st, 5, l->max_memory);
    bind_int(st, 6, l->max_pids);
    bind_int(st, 7, l->max_disk);
    bind_int(st, 8, l->max_creates_per_minute);
    sqlite3_bind_double(st, 9, now_unix());
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "set user limits", err);
    return 0;
}

int store_user_usage(store_t *s, int64_t user_id, double since, user_usage_t *out, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "SELECT "
                      "  coalesce(sum(status IN ('creating', 'running', 'paused')), 0),"
                      "  coalesce(sum(status <> 'terminated'), 0),"
                      "  coalesce(sum(created_at >= ?2), 0) "
                      "FROM sandboxes WHERE owner_id = ?1",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, user_id);
    sqlite3_bind_double(st, 2, since);
    if (sqlite3_step(st) != SQLITE_ROW)
        return store_fail(s, "count the user's sandboxes", err);
    out->running = sqlite3_column_int64(st, 0);
    out->sandboxes = sqlite3_column_int64(st, 1);
    out->created_recently = sqlite3_column_int64(st, 2);
    return 0;
}

double store_user_oldest_create_since(store_t *s, int64_t user_id, double since)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "SELECT min(created_at) FROM sandboxes WHERE owner_id = ?1 AND "
                      "created_at >= ?2",
                      &st, NULL) < 0)
        return since;
    sqlite3_bind_int64(st, 1, user_id);
    sqlite3_bind_double(st, 2, since);
    return sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL
               ? sqlite3_column_double(st, 0)
               : since;
}
