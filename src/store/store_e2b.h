/* The E2B facade's own rows (migration 6): E2B's sandbox ids and what E2B's create set. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "store.h"

#define E2B_ID_LEN 20 /* E2B's sandbox ids: 20 lowercase letters and digits */

/* One sandbox made (or forked) through E2B's API. */
typedef struct {
    char e2b_id[E2B_ID_LEN + 1];
    char sandbox_id[65]; /* ours */
    int64_t owner_id;
    char template_id[129]; /* as the client asked ("base", "code-interpreter-v1", a snapshot) */
    json_t *metadata;      /* owned: an object of strings (never NULL once read) */
    json_t *env;           /* owned: the environment of its commands (never NULL once read) */
    char access_token[80]; /* the envd access token of a secure sandbox, else "" */
    bool public_traffic;   /* its ports answer without the access token */
    double started_at;
} e2b_sandbox_rec_t;

/* Insert a row; an e2b_id or sandbox_id already used is ERR_CONFLICT. */
int store_e2b_insert(store_t *s, const e2b_sandbox_rec_t *r, err_t *err);
/* The row of e2b_id, owner_id's (any owner's when < 0); ERR_NOT_FOUND "sandbox_not_found". */
int store_e2b_get(store_t *s, int64_t owner_id, const char *e2b_id, e2b_sandbox_rec_t *out,
                  err_t *err);
/* The row of our sandbox sandbox_id (any owner); ERR_NOT_FOUND if it has none. */
int store_e2b_get_by_sandbox(store_t *s, const char *sandbox_id, e2b_sandbox_rec_t *out,
                             err_t *err);
/* owner_id's rows, oldest started first; a malloc'd array. */
int store_e2b_list(store_t *s, int64_t owner_id, e2b_sandbox_rec_t **out, size_t *n, err_t *err);
/* Replace the environment of e2b_id's commands (a new object). */
int store_e2b_set_env(store_t *s, const char *e2b_id, const json_t *env, err_t *err);
/* Forget e2b_id (its sandbox was deleted); a missing row is fine. */
int store_e2b_delete(store_t *s, const char *e2b_id, err_t *err);
/* Free what a record owns / a list of records. */
void store_e2b_rec_clear(e2b_sandbox_rec_t *r);
void store_e2b_list_free(e2b_sandbox_rec_t *items, size_t n);
