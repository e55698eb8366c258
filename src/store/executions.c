#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "common/util.h"
#include "store_internal.h"
#include "store_sandboxes.h"

int store_exec_begin(store_t *s, const char *sandbox_id, const char *command, int64_t *eid,
                     err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "INSERT INTO executions (sandbox_id, command, executed_at) VALUES (?,?,?)",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, sandbox_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, command, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 3, now_unix());
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "record execution", err);
    *eid = sqlite3_last_insert_rowid(s->db);
    return 0;
}

int store_exec_log(store_t *s, int64_t eid, int fd, const void *data, size_t len, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "INSERT INTO execution_logs (execution_id, fd, content, created_at) "
                      "VALUES (?,?,?,?)",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, eid);
    sqlite3_bind_int(st, 2, fd);
    sqlite3_bind_blob(st, 3, data, (int)len, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 4, now_unix());
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "record execution output", err);
    return 0;
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

static json_t *exec_json(sqlite3_stmt *st)
{
    json_t *e = json_pack("{s:I, s:s, s:f}", "id", (json_int_t)sqlite3_column_int64(st, 0),
                          "command", (const char *)sqlite3_column_text(st, 1), "executed_at",
                          sqlite3_column_double(st, 2));
    json_object_set_new(e, "exit_code",
                        sqlite3_column_type(st, 3) == SQLITE_NULL
                            ? json_null()
                            : json_integer(sqlite3_column_int(st, 3)));
    json_object_set_new(e, "finished_at",
                        sqlite3_column_type(st, 4) == SQLITE_NULL
                            ? json_null()
                            : json_real(sqlite3_column_double(st, 4)));
    return e;
}

/* Append the log rows of execution eid with id > start_id (at most limit) to arr. */
static int read_logs(store_t *s, int64_t eid, int64_t start_id, int limit, json_t *arr, err_t *err)
{
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "SELECT id, fd, content, created_at FROM execution_logs "
                      "WHERE execution_id = ? AND id > ? ORDER BY id LIMIT ?",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, eid);
    sqlite3_bind_int64(st, 2, start_id);
    sqlite3_bind_int(st, 3, limit);
    while (sqlite3_step(st) == SQLITE_ROW) {
        int fd = sqlite3_column_int(st, 1);
        json_array_append_new(
            arr, json_pack("{s:I, s:s, s:o, s:f}", "id", (json_int_t)sqlite3_column_int64(st, 0),
                           "fd", fd == 2 ? "stderr" : "stdout", "content",
                           json_string_lossy((const char *)sqlite3_column_blob(st, 2),
                                             (size_t)sqlite3_column_bytes(st, 2)),
                           "created_at", sqlite3_column_double(st, 3)));
    }
    return 0;
}

int store_exec_list(store_t *s, const char *sandbox_id, int limit, bool newest_first,
                    bool with_logs, json_t **out, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    const char *sql = newest_first
                          ? "SELECT id, command, executed_at, exit_code, finished_at FROM "
                            "executions WHERE sandbox_id = ? ORDER BY id DESC LIMIT ?"
                          : "SELECT * FROM (SELECT id, command, executed_at, exit_code, "
                            "finished_at FROM executions WHERE sandbox_id = ? ORDER BY id DESC "
                            "LIMIT ?) ORDER BY id";
    if (store_prepare(s, sql, &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, sandbox_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 2, limit);
    json_t *arr = json_array();
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t *e = exec_json(st);
        if (with_logs) {
            json_t *logs = json_array();
            read_logs(s, sqlite3_column_int64(st, 0), 0, 100000, logs, NULL);
            json_object_set_new(e, "logs", logs);
        }
        json_array_append_new(arr, e);
    }
    *out = arr;
    return 0;
}

int store_exec_logs(store_t *s, const char *sandbox_id, int64_t eid, int64_t start_id, int limit,
                    json_t **execution, json_t **logs, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "SELECT id, command, executed_at, exit_code, finished_at FROM executions "
                      "WHERE id = ? AND sandbox_id = ?",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, eid);
    sqlite3_bind_text(st, 2, sandbox_id, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) != SQLITE_ROW)
        return err_set(err, ERR_NOT_FOUND, 0, "execution_not_found", "no such execution");
    json_t *arr = json_array();
    if (read_logs(s, eid, start_id, limit, arr, err) < 0) {
        json_decref(arr);
        return -1;
    }
    *execution = exec_json(st);
    *logs = arr;
    return 0;
}
