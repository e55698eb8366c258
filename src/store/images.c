/* The images table (migration 2): typed accessors for src/image/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "store_images.h"
#include "store_internal.h"

#define IMAGE_COLS "ref, digest, config, layers, size, created_at, pulled_at"

static void read_image(sqlite3_stmt *st, store_image_t *img)
{
    memset(img, 0, sizeof(*img));
    store_col_text(st, 0, img->ref, sizeof(img->ref));
    store_col_text(st, 1, img->digest, sizeof(img->digest));
    const unsigned char *config = sqlite3_column_text(st, 2);
    const unsigned char *layers = sqlite3_column_text(st, 3);
    img->config = xstrdup(config ? (const char *)config : "{}");
    img->layers = xstrdup(layers ? (const char *)layers : "[]");
    sqlite3_int64 size = sqlite3_column_int64(st, 4);
    img->size = size > 0 ? (uint64_t)size : 0;
    img->created_at = sqlite3_column_double(st, 5);
    img->pulled_at = sqlite3_column_double(st, 6);
}

int store_image_put(store_t *s, const store_image_t *img, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s,
                      "INSERT INTO images (" IMAGE_COLS ") VALUES (?, ?, ?, ?, ?, ?, ?) "
                      "ON CONFLICT(ref) DO UPDATE SET digest = excluded.digest, "
                      "config = excluded.config, layers = excluded.layers, "
                      "size = excluded.size, created_at = excluded.created_at, "
                      "pulled_at = excluded.pulled_at",
                      &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, img->ref, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, img->digest, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, img->config, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, img->layers, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)img->size);
    sqlite3_bind_double(st, 6, img->created_at);
    sqlite3_bind_double(st, 7, img->pulled_at);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "record image", err);
    return 0;
}

int store_image_get(store_t *s, const char *ref, store_image_t *out, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "SELECT " IMAGE_COLS " FROM images WHERE ref = ?", &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, ref, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return err_set(err, ERR_NOT_FOUND, 0, "image_not_found", "no image %.400s", ref);
    if (rc != SQLITE_ROW)
        return store_fail(s, "get image", err);
    read_image(st, out);
    return 0;
}

int store_image_list(store_t *s, store_image_t **out, size_t *n, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "SELECT " IMAGE_COLS " FROM images ORDER BY ref", &st, err) < 0)
        return -1;
    store_image_t *items = NULL;
    size_t count = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == cap) {
            cap = cap ? cap * 2 : 8;
            items = xrealloc(items, cap * sizeof(*items));
        }
        read_image(st, &items[count++]);
    }
    if (rc != SQLITE_DONE) {
        store_image_list_free(items, count);
        return store_fail(s, "list images", err);
    }
    *out = items;
    *n = count;
    return 0;
}

int store_image_delete(store_t *s, const char *ref, err_t *err)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "DELETE FROM images WHERE ref = ?", &st, err) < 0)
        return -1;
    sqlite3_bind_text(st, 1, ref, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_fail(s, "delete image", err);
    if (sqlite3_changes(s->db) == 0)
        return err_set(err, ERR_NOT_FOUND, 0, "image_not_found", "no image %.400s", ref);
    return 0;
}

void store_image_clear(store_image_t *img)
{
    free(img->config);
    free(img->layers);
    img->config = img->layers = NULL;
}

void store_image_list_free(store_image_t *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        store_image_clear(&items[i]);
    free(items);
}
