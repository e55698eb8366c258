/*
 * Payloads of the files requests, daemon side: decoding what the agent answers (untrusted:
 * strict types and bounds, unknown members ignored) into values and into JSON rebuilt from
 * those values only, and mapping its ERROR codes to err kinds.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_client.h"
#include "agentc_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"

#define NAME_MAX_BYTES 255 /* a file name, as the kernel bounds it */
#define MAX_FILE_SIZE  (1LL << 62)

static const char *const file_types[] = {"file",   "dir",  "symlink", "fifo",
                                         "socket", "char", "block"};

static json_t *load_object(const struct agent_frame *f, uint8_t type)
{
    return f->type == type ? agentc_payload_object(f) : NULL;
}

/* The static name of a file type, or NULL. */
static const char *known_type(json_t *v)
{
    const char *s = json_string_value(v);
    for (size_t i = 0; s && i < ARRAY_SIZE(file_types); i++)
        if (strcmp(s, file_types[i]) == 0)
            return file_types[i];
    return NULL;
}

/* A string member without NUL bytes, at most max bytes; NULL otherwise. */
static const char *plain_string(json_t *v, size_t max)
{
    if (!json_is_string(v) || json_string_length(v) > max ||
        strlen(json_string_value(v)) != json_string_length(v))
        return NULL;
    return json_string_value(v);
}

static bool get_u64(json_t *obj, const char *key, uint64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > MAX_FILE_SIZE)
        return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

/* "0644": 1 to 4 octal digits. */
static bool get_mode(json_t *obj, uint32_t *out)
{
    const char *s = plain_string(json_object_get(obj, "mode"), 4);
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || strspn(s, "01234567") != n)
        return false;
    *out = (uint32_t)strtoul(s, NULL, 8);
    return true;
}

/* One file name: 1-255 bytes, no '/', not "." or "..". */
static bool valid_name(const char *s)
{
    return s && s[0] && strlen(s) <= NAME_MAX_BYTES && !strchr(s, '/') && strcmp(s, ".") != 0 &&
           strcmp(s, "..") != 0;
}

/* The symlink members: link_target (optional text) and target_type (a type or null). */
static bool decode_link(json_t *in, json_t *out, bool *is_dir)
{
    json_t *lt = json_object_get(in, "link_target");
    json_t *tt = json_object_get(in, "target_type");
    const char *target = plain_string(lt, AGENT_PATH_MAX - 1);
    const char *ttype = known_type(tt);
    if ((lt && !target) || (tt && !json_is_null(tt) && !ttype))
        return false;
    if (target)
        json_object_set_new(out, "link_target", json_string_lossy(target, strlen(target)));
    json_object_set_new(out, "target_type", ttype ? json_string(ttype) : json_null());
    *is_dir = ttype && strcmp(ttype, "dir") == 0;
    return true;
}

/* Validate one file object and rebuild it with the given name and path. is_dir follows from
 * the types (a directory, or a symlink to one), whatever the agent said. */
static int decode_info(json_t *in, const char *name, const char *path, struct agentc_file_info *out)
{
    json_t *mtime = json_object_get(in, "mtime");
    *out = (struct agentc_file_info){.type = known_type(json_object_get(in, "type"))};
    if (!out->type || !json_is_boolean(json_object_get(in, "is_dir")) ||
        !get_u64(in, "size", &out->size) || !get_mode(in, &out->mode) || !json_is_number(mtime) ||
        !isfinite(json_number_value(mtime)))
        return -1;
    out->mtime = json_number_value(mtime);
    out->is_dir = strcmp(out->type, "dir") == 0;
    char mode[8];
    snprintf(mode, sizeof(mode), "%04o", (unsigned)out->mode);
    json_t *j = json_object();
    json_object_set_new(j, "name", json_string_lossy(name, strlen(name)));
    json_object_set_new(j, "path", json_string_lossy(path, strlen(path)));
    json_object_set_new(j, "type", json_string(out->type));
    json_object_set_new(j, "size", json_integer((json_int_t)out->size));
    json_object_set_new(j, "mode", json_string(mode));
    json_object_set_new(j, "mtime", json_real(out->mtime));
    /* Owner and group ids (older agents send none). */
    static const char *const ids[] = {"uid", "gid"};
    for (size_t i = 0; i < ARRAY_SIZE(ids); i++) {
        uint64_t id;
        if (json_object_get(in, ids[i]) && get_u64(in, ids[i], &id) && id <= UINT32_MAX)
            json_object_set_new(j, ids[i], json_integer((json_int_t)id));
    }
    if (strcmp(out->type, "symlink") == 0 && !decode_link(in, j, &out->is_dir)) {
        json_decref(j);
        return -1;
    }
    json_object_set_new(j, "is_dir", json_boolean(out->is_dir));
    out->json = j;
    return 0;
}

void agentc_file_info_free(struct agentc_file_info *info)
{
    if (info->json)
        json_decref(info->json);
    info->json = NULL;
}

int agentc_decode_file_info(const struct agent_frame *f, const char *path,
                            struct agentc_file_info *out, err_t *err)
{
    _cleanup_json_ json_t *j = load_object(f, AGENT_FILE_INFO);
    uint64_t offset = 0, length = 0;
    json_t *o = j ? json_object_get(j, "offset") : NULL;
    json_t *l = j ? json_object_get(j, "length") : NULL;
    if (!j || (o && !get_u64(j, "offset", &offset)) || (l && !get_u64(j, "length", &length)) ||
        decode_info(j, agent_path_base(path), path, out) < 0)
        return agentc_bad_payload(err, "FILE_INFO");
    out->offset = offset;
    out->length = length;
    return 0;
}

int agentc_decode_dir_entries(const struct agent_frame *f, const char *dir, json_t *entries,
                              size_t max, bool *truncated, err_t *err)
{
    _cleanup_json_ json_t *j = load_object(f, AGENT_DIR_ENTRIES);
    json_t *list = j ? json_object_get(j, "entries") : NULL;
    json_t *e;
    size_t i;
    if (!json_is_array(list))
        return agentc_bad_payload(err, "DIR_ENTRIES");
    const char *sep = strcmp(dir, "/") == 0 ? "" : dir;
    json_array_foreach(list, i, e)
    {
        const char *name = plain_string(json_object_get(e, "name"), NAME_MAX_BYTES);
        struct agentc_file_info info;
        if (!json_is_object(e) || !valid_name(name))
            return agentc_bad_payload(err, "DIR_ENTRIES");
        if (json_array_size(entries) >= max) {
            *truncated = true;
            return 0;
        }
        char path[AGENT_PATH_MAX + NAME_MAX_BYTES + 2];
        snprintf(path, sizeof(path), "%s/%s", sep, name);
        if (decode_info(e, name, path, &info) < 0)
            return agentc_bad_payload(err, "DIR_ENTRIES");
        json_array_append_new(entries, info.json);
    }
    return 0;
}

int agentc_decode_list_end(const struct agent_frame *f, bool *truncated, err_t *err)
{
    _cleanup_json_ json_t *j = load_object(f, AGENT_FILE_END);
    json_t *t = j ? json_object_get(j, "truncated") : NULL;
    if (!j || (t && !json_is_boolean(t)))
        return agentc_bad_payload(err, "FILE_END");
    *truncated = json_is_true(t);
    return 0;
}

int agentc_decode_ok(const struct agent_frame *f, struct agentc_ok *out, err_t *err)
{
    _cleanup_json_ json_t *j = load_object(f, AGENT_OK);
    json_t *ready = j ? json_object_get(j, "ready") : NULL;
    json_t *size = j ? json_object_get(j, "size") : NULL;
    *out = (struct agentc_ok){0};
    if (!j || (ready && !json_is_boolean(ready)) || (size && !get_u64(j, "size", &out->size)))
        return agentc_bad_payload(err, "OK");
    out->ready = json_is_true(ready);
    out->has_size = size != NULL;
    return 0;
}

/* Agent ERROR code → err kind and code. */
static const struct {
    const char *agent;
    err_kind_t kind;
    const char *code;
} file_errors[] = {
    {"not_found", ERR_NOT_FOUND, "file_not_found"},
    {"permission", ERR_FORBIDDEN, "permission_denied"},
    {"no_space", ERR_LIMIT, "no_space"},
    {"read_only", ERR_CONFLICT, "read_only"},
    {"exists", ERR_CONFLICT, "file_exists"},
    {"in_use", ERR_CONFLICT, "in_use"},
    {"too_large", ERR_TOO_LARGE, "file_too_large"},
    {"is_directory", ERR_INVALID, "is_directory"},
    {"not_directory", ERR_INVALID, "not_directory"},
    {"special_file", ERR_INVALID, "special_file"},
    {"not_empty", ERR_INVALID, "not_empty"},
    {"invalid_path", ERR_INVALID, "invalid_path"},
    {"invalid", ERR_INVALID, "invalid"},
    {"bad_user", ERR_INVALID, "bad_user"},
    {"cross_device", ERR_INVALID, "cross_device"},
    {"busy", ERR_LIMIT, "agent_busy"},
    {"io_error", ERR_RUNTIME, "io_error"},
};

int agentc_file_error(const struct agent_frame *f, err_t *err)
{
    char code[32], msg[400];
    if (agentc_decode_error(f, code, sizeof(code), msg, sizeof(msg), err) < 0)
        return -1;
    for (size_t i = 0; i < ARRAY_SIZE(file_errors); i++)
        if (strcmp(code, file_errors[i].agent) == 0)
            return err_set(err, file_errors[i].kind, 0, file_errors[i].code, "%s", msg);
    return err_set(err, ERR_RUNTIME, 0, "agent_error", "agent: %s: %s", code, msg);
}
