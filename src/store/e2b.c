/* Typed accessors of the e2b_sandboxes table (migration 6). */
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "common/util.h"
#include "store_e2b.h"
#include "store_internal.h"

#define E2B_COLS                                                                                   \
    "e2b_id, sandbox_id, owner_id, template_id, metadata, env, access_token, public_traffic, "     \
    "started_at"

/* A JSON object from column col (an empty one if it is not one). */
static json_t *col_object(sqlite3_stmt *st, int col)
{
    const char *text = (const char *)sqlite3_column_text(st, col);
    json_t *j = json_loads(text ? text : "{}", 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        j = json_object();
    }
    return j;
}

static void read_row(sqlite3_stmt *st, e2b_sandbox_rec_t *r)
{
    memset(r, 0, sizeof(*r));
    store_col_text(st, 0, r->e2b_id, sizeof(r->e2b_id));
    store_col_text(st, 1, r->sandbox_id, sizeof(r->sandbox_id));
    r->owner_id = sqlite3_column_int64(st, 2);
    store_col_text(st, 3, r->template_id, sizeof(r->template_id));
    r->metadata = col_object(st, 4);
    r->env = col_object(st, 5);
    store_col_text(st, 6, r->access_token, sizeof(r->access_token));
    r->public_traffic = sqlite3_column_int(st, 7) != 0;
    r->started_at = sqlite3_column_double(st, 8);
}

static void bind_object(sqlite3_stmt *st, int col, const json_t *j)
{
    sqlite3_bind_text(st, col, j ? json_dump_compact(j) : xstrdup("{}"), -1, free);
}

int store_e2b_insert(store_t *s, const e2b_sandbox_rec_t *r, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "INSERT INTO e2b_sandboxes (" E2B_COLS ") VALUES (?,?,?,?,?,?,?,?,?)", &st,
                      err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, r->e2b_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, r->sandbox_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, r->owner_id);
    sqlite3_bind_text(st, 4, r->template_id, -1, SQLITE_TRANSIENT);
    bind_object(st, 5, r->metadata);
    bind_object(st, 6, r->env);
    sqlite3_bind_text(st, 7, r->access_token, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 8, r->public_traffic);
    sqlite3_bind_double(st, 9, r->started_at);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "insert e2b sandbox", err);
    return 0;
}

/* Step a one-row query; ERR_NOT_FOUND when it has none. */
static int one_row(store_t *s, sqlite3_stmt *st, e2b_sandbox_rec_t *out, err_t *err)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return err_set(err, ERR_NOT_FOUND, 0, "sandbox_not_found", "no such sandbox");
    if (rc != SQLITE_ROW)
        return store_fail(s, "get e2b sandbox", err);
    read_row(st, out);
    return 0;
}

int store_e2b_get(store_t *s, int64_t owner_id, const char *e2b_id, e2b_sandbox_rec_t *out,
                  err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "SELECT " E2B_COLS " FROM e2b_sandboxes WHERE e2b_id = ?1 AND "
                      "(?2 < 0 OR owner_id = ?2)",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, e2b_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, owner_id);
    return one_row(s, st, out, err);
}

int store_e2b_get_by_sandbox(store_t *s, const char *sandbox_id, e2b_sandbox_rec_t *out, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "SELECT " E2B_COLS " FROM e2b_sandboxes WHERE sandbox_id = ?", &st, err) <
        0)
        return -1;
    sqlite3_bind_text(st, 1, sandbox_id, -1, SQLITE_TRANSIENT);
    return one_row(s, st, out, err);
}

int store_e2b_list(store_t *s, int64_t owner_id, e2b_sandbox_rec_t **out, size_t *n, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "SELECT " E2B_COLS " FROM e2b_sandboxes WHERE owner_id = ? "
                      "ORDER BY started_at, e2b_id",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, owner_id);
    e2b_sandbox_rec_t *items = NULL;
    size_t count = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == cap) {
            cap = cap ? cap * 2 : 16;
            items = xrealloc(items, cap * sizeof(*items));
        }
        read_row(st, &items[count++]);
    }
    if (rc != SQLITE_DONE) {
        store_e2b_list_free(items, count);
        return store_fail(s, "list e2b sandboxes", err);
    }
    *out = items;
    *n = count;
    return 0;
}

int store_e2b_set_env(store_t *s, const char *e2b_id, const json_t *env, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "UPDATE e2b_sandboxes SET env = ? WHERE e2b_id = ?", &st, err) < 0)
        return -1;
    bind_object(st, 1, env);
    sqlite3_bind_text(st, 2, e2b_id, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "update e2b sandbox", err);
    return 0;
}

int store_e2b_delete(store_t *s, const char *e2b_id, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "DELETE FROM e2b_sandboxes WHERE e2b_id = ?", &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, e2b_id, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "delete e2b sandbox", err);
    return 0;
}

void store_e2b_rec_clear(e2b_sandbox_rec_t *r)
{
    json_decref(r->metadata);
    json_decref(r->env);
    r->metadata = r->env = NULL;
}

void store_e2b_list_free(e2b_sandbox_rec_t *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        store_e2b_rec_clear(&items[i]);
    free(items);
}
