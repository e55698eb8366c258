#include <string.h>

#include "common/util.h"
#include "store_internal.h"

static void read_user(sqlite3_stmt *st, user_t *u)
{
    u->id = sqlite3_column_int64(st, 0);
    store_col_text(st, 1, u->name, sizeof(u->name));
    u->is_admin = sqlite3_column_int(st, 2) != 0;
    u->created_at = sqlite3_column_double(st, 3);
}

int store_user_count(store_t *s, int64_t *out, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "SELECT count(*) FROM users", &st, err) < 0)
        return -1;
    if (sqlite3_step(st) != SQLITE_ROW)
        return store_fail(s, "count users", err);
    *out = sqlite3_column_int64(st, 0);
    return 0;
}

int store_user_create(store_t *s, const char *name, bool is_admin, user_t *out, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "INSERT INTO users (name, is_admin, created_at) VALUES (?, ?, ?) "
                      "RETURNING id, name, is_admin, created_at",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 2, is_admin ? 1 : 0);
    sqlite3_bind_double(st, 3, now_unix());
    if (sqlite3_step(st) != SQLITE_ROW) {
        store_fail(s, "create user", err);
        if (err && err->kind == ERR_CONFLICT)
            err_set(err, ERR_CONFLICT, 0, "user_exists", "user '%s' already exists", name);
        return -1;
    }
    read_user(st, out);
    return 0;
}

int store_user_get_by_name(store_t *s, const char *name, user_t *out, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "SELECT id, name, is_admin, created_at FROM users WHERE name = ?", &st,
                      err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return err_set(err, ERR_NOT_FOUND, 0, "user_not_found", "no such user");
    if (rc != SQLITE_ROW)
        return store_fail(s, "get user", err);
    read_user(st, out);
    return 0;
}

int store_user_get_by_id(store_t *s, int64_t id, user_t *out, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "SELECT id, name, is_admin, created_at FROM users WHERE id = ?", &st,
                      err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return err_set(err, ERR_NOT_FOUND, 0, "user_not_found", "no such user");
    if (rc != SQLITE_ROW)
        return store_fail(s, "get user", err);
    read_user(st, out);
    return 0;
}
