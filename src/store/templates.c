/* Typed accessors of the templates table (migration 4). */
#include <string.h>

#include "common/jsonx.h"
#include "common/util.h"
#include "store_internal.h"
#include "store_templates.h"

#define TPL_COLS                                                                                   \
    "id, name, owner_id, source, image, snapshot, setuid, pool, created_at, updated_at, info"

static void read_tpl(sqlite3_stmt *st, template_rec_t *r)
{
    memset(r, 0, sizeof(*r));
    store_col_text(st, 0, r->id, sizeof(r->id));
    store_col_text(st, 1, r->name, sizeof(r->name));
    r->owner_id = sqlite3_column_int64(st, 2);
    store_col_text(st, 3, r->source, sizeof(r->source));
    store_col_text(st, 4, r->image, sizeof(r->image));
    store_col_text(st, 5, r->snapshot, sizeof(r->snapshot));
    r->setuid = sqlite3_column_int(st, 6) != 0;
    r->pool = sqlite3_column_int(st, 7);
    r->created_at = sqlite3_column_double(st, 8);
    r->updated_at = sqlite3_column_double(st, 9);
    const char *info = (const char *)sqlite3_column_text(st, 10);
    r->info = json_loads(info ? info : "{}", 0, NULL);
    if (!r->info)
        r->info = json_object();
}

int store_template_insert(store_t *s, const template_rec_t *r, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "INSERT INTO templates (" TPL_COLS ") VALUES (?,?,?,?,?,?,?,?,?,?,?)", &st,
                      err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, r->id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, r->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, r->owner_id);
    sqlite3_bind_text(st, 4, r->source, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 5, r->image, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 6, r->snapshot, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 7, r->setuid);
    sqlite3_bind_int(st, 8, r->pool);
    sqlite3_bind_double(st, 9, r->created_at);
    sqlite3_bind_double(st, 10, r->updated_at);
    sqlite3_bind_text(st, 11, r->info ? json_dump_compact(r->info) : xstrdup("{}"), -1, free);
    if (sqlite3_step(st) != SQLITE_DONE) {
        store_fail(s, "insert template", err);
        if (err && err->kind == ERR_CONFLICT)
            err_set(err, ERR_CONFLICT, 0, "template_exists", "a template called '%s' exists",
                    r->name);
        return -1;
    }
    return 0;
}

/* Run a one-row query bound by bind; ERR_NOT_FOUND when it has no row. */
static int one_row(store_t *s, sqlite3_stmt *st, template_rec_t *out, err_t *err)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return err_set(err, ERR_NOT_FOUND, 0, "template_not_found", "no such template");
    if (rc != SQLITE_ROW)
        return store_fail(s, "get template", err);
    read_tpl(st, out);
    return 0;
}

int store_template_find(store_t *s, int64_t owner_id, const char *name, template_rec_t *out,
                        err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    /* The caller's own (owner_id = ?) sorts before the global one (0). */
    if (store_prepare(s,
                      "SELECT " TPL_COLS " FROM templates WHERE name = ? AND "
                      "(owner_id = ? OR owner_id = 0) ORDER BY owner_id = 0 LIMIT 1",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, owner_id < 0 ? 0 : owner_id);
    return one_row(s, st, out, err);
}

int store_template_get(store_t *s, const char *id, template_rec_t *out, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "SELECT " TPL_COLS " FROM templates WHERE id = ?", &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    return one_row(s, st, out, err);
}

int store_template_list(store_t *s, int64_t owner_id, template_rec_t **out, size_t *n, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "SELECT " TPL_COLS " FROM templates WHERE ? < 0 OR owner_id = ? OR "
                      "owner_id = 0 ORDER BY name, owner_id = 0, owner_id",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, owner_id);
    sqlite3_bind_int64(st, 2, owner_id);
    template_rec_t *items = NULL;
    size_t count = 0, cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (count == cap) {
            cap = cap ? cap * 2 : 8;
            items = xrealloc(items, cap * sizeof(*items));
        }
        read_tpl(st, &items[count++]);
    }
    *out = items;
    *n = count;
    return 0;
}

int store_template_update(store_t *s, const template_rec_t *r, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "UPDATE templates SET image = ?, setuid = ?, pool = ?, info = ?, "
                      "updated_at = ? WHERE id = ?",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, r->image, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 2, r->setuid);
    sqlite3_bind_int(st, 3, r->pool);
    sqlite3_bind_text(st, 4, r->info ? json_dump_compact(r->info) : xstrdup("{}"), -1, free);
    sqlite3_bind_double(st, 5, r->updated_at);
    sqlite3_bind_text(st, 6, r->id, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "update template", err);
    if (sqlite3_changes(s->db) == 0)
        return err_set(err, ERR_NOT_FOUND, 0, "template_not_found", "no such template");
    return 0;
}

int store_template_delete(store_t *s, const char *id, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "DELETE FROM templates WHERE id = ?", &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "delete template", err);
    if (sqlite3_changes(s->db) == 0)
        return err_set(err, ERR_NOT_FOUND, 0, "template_not_found", "no such template");
    return 0;
}

void store_template_rec_clear(template_rec_t *r)
{
    if (r->info)
        json_decref(r->info);
    r->info = NULL;
}

void store_template_list_free(template_rec_t *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        store_template_rec_clear(&items[i]);
    free(items);
}
