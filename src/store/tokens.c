#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/id.h"
#include "common/util.h"
#include "store_internal.h"

#define TOKEN_COLS                                                                                 \
    "t.id, t.user_id, u.name, t.name, t.created_at, coalesce(t.last_used_at, 0), t.kind"

static void read_token(sqlite3_stmt *st, int col, token_info_t *t)
{
    store_col_text(st, col, t->id, sizeof(t->id));
    t->user_id = sqlite3_column_int64(st, col + 1);
    store_col_text(st, col + 2, t->user_name, sizeof(t->user_name));
    store_col_text(st, col + 3, t->name, sizeof(t->name));
    t->created_at = sqlite3_column_double(st, col + 4);
    t->last_used_at = sqlite3_column_double(st, col + 5);
    store_col_text(st, col + 6, t->kind, sizeof(t->kind));
}

int store_token_insert(store_t *s, const char *id, int64_t user_id, const char *name,
                       const char *hash, token_info_t *out, err_t *err)
{
    return store_token_insert_kind(s, id, user_id, name, "sbx", hash, out, err);
}

int store_token_insert_kind(store_t *s, const char *id, int64_t user_id, const char *name,
                            const char *kind, const char *hash, token_info_t *out, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "INSERT INTO tokens (id, user_id, name, hash, created_at, kind) "
                      "VALUES (?, ?, ?, ?, ?, ?)",
                      &st, err) < 0)
        return -1;
    double now = now_unix();
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, user_id);
    sqlite3_bind_text(st, 3, name ? name : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, hash, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 5, now);
    sqlite3_bind_text(st, 6, kind, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "insert token", err);
    if (out) {
        memset(out, 0, sizeof(*out));
        snprintf(out->id, sizeof(out->id), "%s", id);
        out->user_id = user_id;
        snprintf(out->name, sizeof(out->name), "%s", name ? name : "");
        snprintf(out->kind, sizeof(out->kind), "%s", kind);
        out->created_at = now;
    }
    return 0;
}

int store_token_lookup(store_t *s, const char *hash, user_t *user, token_info_t *tok, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "SELECT t.hash, u.id, u.name, u.is_admin, u.created_at, " TOKEN_COLS
                      " FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = ?",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, hash, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized", "invalid token");
    if (rc != SQLITE_ROW)
        return store_fail(s, "look up token", err);
    /* The index found the row; compare the full hash in constant time all the same. */
    char stored[TOKEN_HASH_LEN + 1];
    store_col_text(st, 0, stored, sizeof(stored));
    if (!token_equal(stored, hash))
        return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized", "invalid token");
    user->id = sqlite3_column_int64(st, 1);
    store_col_text(st, 2, user->name, sizeof(user->name));
    user->is_admin = sqlite3_column_int(st, 3) != 0;
    user->created_at = sqlite3_column_double(st, 4);
    read_token(st, 5, tok);
    return 0;
}

void store_token_touch(store_t *s, const token_info_t *tok)
{
    double now = now_unix();
    if (now - tok->last_used_at < 60.0)
        return;
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "UPDATE tokens SET last_used_at = ? WHERE id = ?", &st, NULL) < 0)
        return;
    sqlite3_bind_double(st, 1, now);
    sqlite3_bind_text(st, 2, tok->id, -1, SQLITE_TRANSIENT);
    sqlite3_step(st);
}

int store_token_list(store_t *s, int64_t user_id, token_info_t **out, size_t *n, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "SELECT " TOKEN_COLS " FROM tokens t JOIN users u ON u.id = t.user_id "
                      "WHERE ?1 < 0 OR t.user_id = ?1 ORDER BY t.created_at, t.id",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, user_id);
    token_info_t *items = NULL;
    size_t count = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == cap) {
            cap = cap ? cap * 2 : 8;
            items = xrealloc(items, cap * sizeof(*items));
        }
        read_token(st, 0, &items[count++]);
    }
    if (rc != SQLITE_DONE) {
        free(items);
        return store_fail(s, "list tokens", err);
    }
    *out = items;
    *n = count;
    return 0;
}

int store_token_delete(store_t *s, const char *id, int64_t user_id, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "DELETE FROM tokens WHERE id = ?1 AND (?2 < 0 OR user_id = ?2)", &st,
                      err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, user_id);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "delete token", err);
    if (sqlite3_changes(s->db) == 0)
        return err_set(err, ERR_NOT_FOUND, 0, "token_not_found", "no such token");
    return 0;
}
