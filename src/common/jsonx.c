#include "jsonx.h"

#include <string.h>

#include "util.h"

int json_parse_object(const char *body, size_t len, json_t **out, err_t *err)
{
    json_error_t jerr;
    if (len == 0)
        return err_set(err, ERR_INVALID, 0, "invalid_json",
                       "request body is empty; expected a JSON object");
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!j)
        return err_set(err, ERR_INVALID, 0, "invalid_json",
                       "malformed JSON at line %d column %d: %s", jerr.line, jerr.column,
                       jerr.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return err_set(err, ERR_INVALID, 0, "invalid_json", "request body must be a JSON object");
    }
    *out = j;
    return 0;
}

static const char *type_name(enum jfield_type t)
{
    switch (t) {
    case JF_STRING:
        return "a string";
    case JF_BOOL:
        return "a boolean";
    case JF_INT:
        return "an integer";
    case JF_NUMBER:
        return "a number";
    case JF_OBJECT:
        return "an object";
    case JF_ARRAY:
        return "an array";
    case JF_SIZE:
        return "a size (bytes as an integer, or a string like \"512M\")";
    }
    return "a value";
}

static int decode_one(const struct jfield *f, json_t *v, char *dst, err_t *err)
{
    switch (f->type) {
    case JF_STRING: {
        if (!json_is_string(v))
            break;
        size_t max = f->max_len ? f->max_len : 4096;
        if (json_string_length(v) > max)
            return err_set(err, ERR_INVALID, 0, "invalid_field",
                           "field '%s' is longer than %zu bytes", f->name, max);
        if (strlen(json_string_value(v)) != json_string_length(v))
            return err_set(err, ERR_INVALID, 0, "invalid_field", "field '%s' contains a NUL byte",
                           f->name);
        *(const char **)(dst + f->offset) = json_string_value(v);
        return 0;
    }
    case JF_BOOL:
        if (!json_is_boolean(v))
            break;
        *(int *)(dst + f->offset) = json_is_true(v) ? 1 : 0;
        return 0;
    case JF_INT: {
        if (!json_is_integer(v))
            break;
        json_int_t i = json_integer_value(v);
        if ((f->min || f->max) && (i < f->min || i > f->max))
            return err_set(err, ERR_INVALID, 0, "invalid_field",
                           "field '%s' must be between %lld and %lld", f->name, (long long)f->min,
                           (long long)f->max);
        *(int64_t *)(dst + f->offset) = i;
        return 0;
    }
    case JF_NUMBER:
        if (!json_is_number(v))
            break;
        *(double *)(dst + f->offset) = json_number_value(v);
        return 0;
    case JF_OBJECT:
        if (!json_is_object(v))
            break;
        *(json_t **)(dst + f->offset) = v;
        return 0;
    case JF_ARRAY:
        if (!json_is_array(v))
            break;
        *(json_t **)(dst + f->offset) = v;
        return 0;
    case JF_SIZE: {
        uint64_t n;
        if (json_is_integer(v) && json_integer_value(v) >= 0)
            n = (uint64_t)json_integer_value(v);
        else if (!json_is_string(v) || !parse_size(json_string_value(v), &n))
            break;
        *(uint64_t *)(dst + f->offset) = n;
        return 0;
    }
    }
    return err_set(err, ERR_INVALID, 0, "invalid_field", "field '%s' must be %s", f->name,
                   type_name(f->type));
}

int json_decode_fields(json_t *obj, const struct jfield *fields, size_t nfields, void *dst,
                       err_t *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        size_t i;
        for (i = 0; i < nfields; i++)
            if (strcmp(fields[i].name, key) == 0)
                break;
        if (i == nfields) {
            char shown[80];
            snprintf(shown, sizeof(shown), "%.64s", key);
            return err_set(err, ERR_INVALID, 0, "unknown_field", "unknown field '%s'", shown);
        }
    }
    for (size_t i = 0; i < nfields; i++) {
        const struct jfield *f = &fields[i];
        v = json_object_get(obj, f->name);
        if (!v || json_is_null(v)) {
            if (f->required)
                return err_set(err, ERR_INVALID, 0, "missing_field", "field '%s' is required",
                               f->name);
            continue;
        }
        if (decode_one(f, v, dst, err) < 0)
            return -1;
        if (f->required && f->type == JF_STRING && json_string_length(v) == 0)
            return err_set(err, ERR_INVALID, 0, "invalid_field", "field '%s' must not be empty",
                           f->name);
    }
    return 0;
}

char *json_dump_compact(const json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    return s ? s : xstrdup("null");
}

json_t *json_string_lossy(const char *s, size_t len)
{
    json_t *j = json_stringn(s, len);
    if (j)
        return j;
    /* Invalid UTF-8: replace every non-ASCII byte so the result always encodes. */
    char *copy = xmalloc(len + 1);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        copy[i] = (c >= 0x80 || c == 0) ? '?' : (char)c;
    }
    j = json_stringn(copy, len);
    free(copy);
    return j;
}

const char **json_strv_borrow(const json_t *arr)
{
    const char **v = xcalloc(json_array_size(arr) + 1, sizeof(*v));
    for (size_t i = 0; i < json_array_size(arr); i++)
        v[i] = json_string_value(json_array_get(arr, i));
    return v;
}

char **json_envv(const json_t *env)
{
    if (!env)
        return NULL;
    char **v = xcalloc(json_object_size(env) + 1, sizeof(*v));
    size_t i = 0;
    const char *k;
    json_t *val;
    json_object_foreach((json_t *)env, k, val) v[i++] =
        xasprintf("%s=%s", k, json_string_value(val));
    return v;
}

void json_strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}
