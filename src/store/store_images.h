/* The store's image table: one row per normalised reference. Used by src/image/ only. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "store.h"

/* One recorded image. */
typedef struct {
    char ref[512];   /* normalised reference, the key */
    char digest[80]; /* manifest digest, sha256:... */
    char *config;    /* malloc'd: the image config JSON as pulled */
    char *layers;    /* malloc'd: JSON array of layer diff_ids, bottom first */
    uint64_t size;   /* uncompressed bytes of all layers */
    double created_at;
    double pulled_at;
} store_image_t;

/* Insert or replace the row of img->ref. */
int store_image_put(store_t *s, const store_image_t *img, err_t *err);
/* The row of ref (ERR_NOT_FOUND "image_not_found" if none); free with store_image_clear. */
int store_image_get(store_t *s, const char *ref, store_image_t *out, err_t *err);
/* Every row, sorted by ref, into a malloc'd array; free with store_image_list_free. */
int store_image_list(store_t *s, store_image_t **out, size_t *n, err_t *err);
/* Delete the row of ref (ERR_NOT_FOUND "image_not_found" if none). */
int store_image_delete(store_t *s, const char *ref, err_t *err);
/* Free the strings of one row. */
void store_image_clear(store_image_t *img);
/* Free an array from store_image_list. */
void store_image_list_free(store_image_t *items, size_t n);
