/* Templates: a name that new sandboxes start from (an image, or a snapshot), with a warm pool. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "store.h"

/* One template. owner_id 0: global (the built-in ones, and admins' global ones). */
typedef struct {
    char id[33];
    char name[65];
    int64_t owner_id;
    char source[16];    /* "builtin", "dockerfile" or "snapshot" */
    char image[512];    /* the image ref in the store ("" for a snapshot's) */
    char snapshot[129]; /* the owner's snapshot (source "snapshot"), else "" */
    bool setuid;        /* sandboxes from it may gain privileges through setuid (sudo) */
    int pool;           /* warm pool size asked for */
    double created_at;
    double updated_at;
    json_t *info; /* owned: digest, dockerfile, steps, … (never NULL once read) */
} template_rec_t;

/* Insert a template; a name the owner (or, global, anyone global) uses is ERR_CONFLICT. */
int store_template_insert(store_t *s, const template_rec_t *r, err_t *err);
/* The template name as owner sees it: owner's own first, else the global one (owner < 0:
 * global only); ERR_NOT_FOUND "template_not_found" otherwise. */
int store_template_find(store_t *s, int64_t owner_id, const char *name, template_rec_t *out,
                        err_t *err);
/* The template with this id (any owner). */
int store_template_get(store_t *s, const char *id, template_rec_t *out, err_t *err);
/* The templates owner sees (its own and the global ones; owner < 0: every template), sorted
 * by name, owner's own before a global one of the same name; a malloc'd array. */
int store_template_list(store_t *s, int64_t owner_id, template_rec_t **out, size_t *n, err_t *err);
/* Write image, setuid, pool, info and updated_at of the template r->id. */
int store_template_update(store_t *s, const template_rec_t *r, err_t *err);
/* Delete the template with this id (ERR_NOT_FOUND if none). */
int store_template_delete(store_t *s, const char *id, err_t *err);
/* Free a record's info / a list of records. */
void store_template_rec_clear(template_rec_t *r);
void store_template_list_free(template_rec_t *items, size_t n);
