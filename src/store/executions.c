/*
 * Executions and their output. Every sandbox's history is bounded: sandboxes.exec_log_bytes
 * counts the bytes of its commands and output, and once it passes the store's cap (the
 * daemon's --exec-log-max-per-sandbox) the oldest output goes first, then the oldest
 * executions themselves; an execution that lost output is marked truncated. Readers take
 * bounded pages (rows and bytes), so no answer needs the whole history in memory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "common/util.h"
#include "store_internal.h"
#include "store_sandboxes.h"

#define EVICT_BATCH 32 /* log rows looked at per round of eviction */

void store_set_exec_log_max(store_t *s, uint64_t max)
{
    s->exec_log_max = max;
}

/* BEGIN IMMEDIATE; the caller holds the lock. */
static int begin(store_t *s, err_t *err)
{
    if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        return store_fail(s, "begin", err);
    return 0;
}

/* COMMIT when rc is 0, else ROLLBACK; returns rc (or -1 if the commit failed). */
static int end(store_t *s, int rc, err_t *err)
{
    if (rc == 0 && sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        rc = store_fail(s, "commit", err);
    if (rc < 0)
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

/* Run sql binding text a (?1) and, if b is not NULL, int64 *b (?2). */
static int run(store_t *s, const char *sql, const char *a, const int64_t *b, err_t *err)
{
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, sql, &st, err) < 0)
        return -1;
    if (a)
        sqlite3_bind_text(st, 1, a, -1, SQLITE_TRANSIENT);
    if (b)
        sqlite3_bind_int64(st, 2, *b);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "update execution history", err);
    return 0;
}

/* One int64 from a query binding ?1 as text and ?2 as int64; def if it has no row. */
static int64_t query_int(store_t *s, const char *sql, const char *a, int64_t b, int64_t def)
{
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, sql, &st, NULL) < 0)
        return def;
    if (a)
        sqlite3_bind_text(st, 1, a, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, b);
    return sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL
               ? sqlite3_column_int64(st, 0)
               : def;
}

/* Drop the oldest output rows of sandbox_id, up to EVICT_BATCH of them, until *total fits. */
static int evict_output(store_t *s, const char *sandbox_id, int64_t *total, bool *any, err_t *err)
{
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "SELECT l.id, l.execution_id, length(l.content) FROM executions e "
                      "JOIN execution_logs l ON l.execution_id = e.id WHERE e.sandbox_id = ?1 "
                      "ORDER BY e.id, l.id LIMIT ?2",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, sandbox_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 2, EVICT_BATCH);
    int64_t ids[EVICT_BATCH][2];
    int n = 0;
    while (n<EVICT_BATCH && * total>(int64_t) s->exec_log_max && sqlite3_step(st) == SQLITE_ROW) {
        ids[n][0] = sqlite3_column_int64(st, 0);
        ids[n][1] = sqlite3_column_int64(st, 1);
        *total -= sqlite3_column_int64(st, 2);
        n++;
    }
    sqlite3_finalize(st);
    st = NULL;
    *any = n > 0;
    for (int i = 0; i < n; i++)
        if (run(s, "DELETE FROM execution_logs WHERE id = ?2", NULL, &ids[i][0], err) < 0 ||
            run(s, "UPDATE executions SET truncated = 1 WHERE id = ?2", NULL, &ids[i][1], err) < 0)
            return -1;
    return 0;
}

/* With no output left to drop: the oldest execution other than keep, whole. */
static int evict_execution(store_t *s, const char *sandbox_id, int64_t keep, int64_t *total,
                           bool *any, err_t *err)
{
    int64_t id = query_int(s,
                           "SELECT id FROM executions WHERE sandbox_id = ?1 AND id <> ?2 "
                           "ORDER BY id LIMIT 1",
                           sandbox_id, keep, -1);
    *any = id >= 0;
    if (id < 0)
        return 0;
    *total -= query_int(s, "SELECT length(CAST(command AS BLOB)) FROM executions WHERE id = ?2",
                        NULL, id, 0);
    return run(s, "DELETE FROM executions WHERE id = ?2", NULL, &id, err);
}

/* Add delta to sandbox_id's history bytes, then drop the oldest until it fits the cap. */
static int account(store_t *s, const char *sandbox_id, int64_t keep, int64_t delta, err_t *err)
{
    if (run(s, "UPDATE sandboxes SET exec_log_bytes = exec_log_bytes + ?2 WHERE id = ?1",
            sandbox_id, &delta, err) < 0)
        return -1;
    if (s->exec_log_max == 0)
        return 0;
    int64_t total =
        query_int(s, "SELECT exec_log_bytes FROM sandboxes WHERE id = ?1", sandbox_id, 0, 0);
    if (total <= (int64_t)s->exec_log_max)
        return 0;
    bool any = true;
    while (total > (int64_t)s->exec_log_max && any) {
        if (evict_output(s, sandbox_id, &total, &any, err) < 0)
            return -1;
        if (!any && evict_execution(s, sandbox_id, keep, &total, &any, err) < 0)
            return -1;
    }
    if (total < 0)
        total = 0;
    return run(s, "UPDATE sandboxes SET exec_log_bytes = ?2 WHERE id = ?1", sandbox_id, &total,
               err);
}

int store_exec_begin(store_t *s, const char *sandbox_id, const char *command, int64_t *eid,
                     err_t *err)
{
    STORE_LOCK(s);
    if (begin(s, err) < 0)
        return -1;
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    int rc = store_prepare(
        s, "INSERT INTO executions (sandbox_id, command, executed_at) VALUES (?,?,?)", &st, err);
    if (rc == 0) {
        sqlite3_bind_text(st, 1, sandbox_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, command, -1, SQLITE_TRANSIENT);
        sqlite3_bind_double(st, 3, now_unix());
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = store_fail(s, "record execution", err);
    }
    if (rc == 0) {
        *eid = sqlite3_last_insert_rowid(s->db);
        rc = account(s, sandbox_id, *eid, (int64_t)strlen(command), err);
    }
    return end(s, rc, err);
}

int store_exec_log(store_t *s, int64_t eid, int fd, const void *data, size_t len, err_t *err)
{
    STORE_LOCK(s);
    char sandbox_id[65] = "";
    sqlite3_stmt *q _cleanup_stmt_ = NULL;
    if (store_prepare(s, "SELECT sandbox_id FROM executions WHERE id = ?", &q, err) < 0)
        return -1;
    sqlite3_bind_int64(q, 1, eid);
    if (sqlite3_step(q) != SQLITE_ROW) /* evicted, or its sandbox deleted: nothing to keep */
        return 0;
    store_col_text(q, 0, sandbox_id, sizeof(sandbox_id));
    if (begin(s, err) < 0)
        return -1;
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    int rc = store_prepare(s,
                           "INSERT INTO execution_logs (execution_id, fd, content, created_at) "
                           "VALUES (?,?,?,?)",
                           &st, err);
    if (rc == 0) {
        sqlite3_bind_int64(st, 1, eid);
        sqlite3_bind_int(st, 2, fd);
        sqlite3_bind_blob(st, 3, data, (int)len, SQLITE_TRANSIENT);
        sqlite3_bind_double(st, 4, now_unix());
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = store_fail(s, "record execution output", err);
    }
    if (rc == 0)
        rc = account(s, sandbox_id, eid, (int64_t)len, err);
    return end(s, rc, err);
}

int store_exec_end(store_t *s, int64_t eid, int exit_code, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "UPDATE executions SET exit_code = ?2, finished_at = ?3 WHERE id = ?1",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, eid);
    sqlite3_bind_int(st, 2, exit_code);
    sqlite3_bind_double(st, 3, now_unix());
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "finish execution", err);
    return 0;
}

int store_exec_set_truncated(store_t *s, int64_t eid, err_t *err)
{
    STORE_LOCK(s);
    return run(s, "UPDATE executions SET truncated = 1 WHERE id = ?2", NULL, &eid, err);
}

int store_exec_forget(store_t *s, const char *sandbox_id, err_t *err)
{
    STORE_LOCK(s);
    if (begin(s, err) < 0)
        return -1;
    int rc = run(s,
                 "DELETE FROM execution_logs WHERE execution_id IN "
                 "(SELECT id FROM executions WHERE sandbox_id = ?1)",
                 sandbox_id, NULL, err);
    if (rc == 0)
        rc = run(s, "DELETE FROM executions WHERE sandbox_id = ?1", sandbox_id, NULL, err);
    if (rc == 0)
        rc = run(s, "UPDATE sandboxes SET exec_log_bytes = 0 WHERE id = ?1", sandbox_id, NULL, err);
    return end(s, rc, err);
}

int64_t store_exec_log_bytes(store_t *s, const char *sandbox_id)
{
    STORE_LOCK(s);
    return query_int(s, "SELECT exec_log_bytes FROM sandboxes WHERE id = ?1", sandbox_id, 0, -1);
}

#define EXEC_COLS "id, command, executed_at, exit_code, finished_at, truncated"

static json_t *exec_json(sqlite3_stmt *st)
{
    json_t *e =
        json_pack("{s:I, s:o, s:f}", "id", (json_int_t)sqlite3_column_int64(st, 0), "command",
                  json_string_lossy((const char *)sqlite3_column_text(st, 1),
                                    (size_t)sqlite3_column_bytes(st, 1)),
                  "executed_at", sqlite3_column_double(st, 2));
    json_object_set_new(e, "exit_code",
                        sqlite3_column_type(st, 3) == SQLITE_NULL
                            ? json_null()
                            : json_integer(sqlite3_column_int(st, 3)));
    json_object_set_new(e, "finished_at",
                        sqlite3_column_type(st, 4) == SQLITE_NULL
                            ? json_null()
                            : json_real(sqlite3_column_double(st, 4)));
    json_object_set_new(e, "truncated", json_boolean(sqlite3_column_int(st, 5) != 0));
    return e;
}

int store_exec_rows(store_t *s, const char *sandbox_id, int64_t cursor, bool newest_first, int n,
                    json_t **out, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    const char *sql = newest_first ? "SELECT " EXEC_COLS " FROM executions WHERE sandbox_id = ?1 "
                                     "AND id < ?2 ORDER BY id DESC LIMIT ?3"
                                   : "SELECT " EXEC_COLS " FROM executions WHERE sandbox_id = ?1 "
                                     "AND id > ?2 ORDER BY id LIMIT ?3";
    if (store_prepare(s, sql, &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, sandbox_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, cursor);
    sqlite3_bind_int(st, 3, n);
    json_t *arr = json_array();
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        json_array_append_new(arr, exec_json(st));
    if (rc != SQLITE_DONE) {
        json_decref(arr);
        return store_fail(s, "list executions", err);
    }
    *out = arr;
    return 0;
}

int64_t store_exec_window_start(store_t *s, const char *sandbox_id, int n)
{
    STORE_LOCK(s);
    int64_t first = query_int(s,
                              "SELECT min(id) FROM (SELECT id FROM executions WHERE "
                              "sandbox_id = ?1 ORDER BY id DESC LIMIT ?2)",
                              sandbox_id, n, 1);
    return first - 1;
}

int store_exec_log_rows(store_t *s, int64_t eid, int64_t after, int max_rows, size_t max_bytes,
                        json_t **out, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "SELECT id, fd, content, created_at FROM execution_logs "
                      "WHERE execution_id = ? AND id > ? ORDER BY id LIMIT ?",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, eid);
    sqlite3_bind_int64(st, 2, after);
    sqlite3_bind_int(st, 3, max_rows);
    json_t *arr = json_array();
    size_t bytes = 0;
    /* At least one row, then rows while the page stays within max_bytes. */
    while (sqlite3_step(st) == SQLITE_ROW) {
        size_t n = (size_t)sqlite3_column_bytes(st, 2);
        if (json_array_size(arr) > 0 && bytes + n > max_bytes)
            break;
        bytes += n;
        int fd = sqlite3_column_int(st, 1);
        json_array_append_new(
            arr, json_pack("{s:I, s:s, s:o, s:f}", "id", (json_int_t)sqlite3_column_int64(st, 0),
                           "fd", fd == 2 ? "stderr" : "stdout", "content",
                           json_string_lossy((const char *)sqlite3_column_blob(st, 2), n),
                           "created_at", sqlite3_column_double(st, 3)));
    }
    *out = arr;
    return 0;
}

int store_exec_get(store_t *s, const char *sandbox_id, int64_t eid, json_t **execution, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "SELECT " EXEC_COLS " FROM executions WHERE id = ? AND sandbox_id = ?",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, eid);
    sqlite3_bind_text(st, 2, sandbox_id, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) != SQLITE_ROW)
        return err_set(err, ERR_NOT_FOUND, 0, "execution_not_found", "no such execution");
    *execution = exec_json(st);
    return 0;
}
