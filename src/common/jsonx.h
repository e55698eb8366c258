/* JSON helpers over jansson: strict decoding of request bodies against a field table. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

static inline void cleanup_json_decref(json_t **j)
{
    if (*j)
        json_decref(*j);
}
#define _cleanup_json_ __attribute__((cleanup(cleanup_json_decref)))

/* The JSON type a field must have. */
enum jfield_type {
    JF_STRING, /* const char * borrowed from the document */
    JF_BOOL,   /* int: 1 or 0; initialise to -1 to tell "absent" */
    JF_INT,    /* int64_t, within [min, max] */
    JF_NUMBER, /* double (integers accepted) */
    JF_OBJECT, /* json_t * borrowed */
    JF_ARRAY,  /* json_t * borrowed */
    JF_SIZE,   /* uint64_t from an integer or a size string like "512M" */
};

/* One accepted field of a request body. */
struct jfield {
    const char *name;
    enum jfield_type type;
    bool required;
    size_t offset;    /* where in the output struct the value goes */
    size_t max_len;   /* strings: longest accepted length in bytes (0 = 4096) */
    int64_t min, max; /* JF_INT bounds (both 0 = any) */
};

/*
 * Parse body (len bytes) as one JSON object. On success *out holds a new reference.
 * Malformed JSON, a non-object or trailing data → ERR_INVALID "invalid_json".
 */
int json_parse_object(const char *body, size_t len, json_t **out, err_t *err);

/*
 * Check obj against fields and fill the struct at dst. Unknown fields, wrong types,
 * missing required fields, over-long or empty-but-required strings → ERR_INVALID.
 * Absent fields leave dst untouched: initialise it with defaults or sentinels.
 * String and json_t outputs borrow from obj: keep obj alive while dst is used.
 */
int json_decode_fields(json_t *obj, const struct jfield *fields, size_t nfields, void *dst,
                       err_t *err);

/* Dump j compactly into a new malloc'd string (never NULL). */
char *json_dump_compact(const json_t *j);

/* json_string that replaces invalid UTF-8 instead of failing (never NULL). */
json_t *json_string_lossy(const char *s, size_t len);

/* A NULL-terminated vector of the strings of array arr, borrowed from it (free the vector). */
const char **json_strv_borrow(const json_t *arr);
/* "K=V" strings of object env (NULL for NULL); free with json_strv_free. */
char **json_envv(const json_t *env);
/* Free a vector made by json_envv (and its strings). */
void json_strv_free(char **v);
