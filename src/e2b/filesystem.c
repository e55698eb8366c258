/*
 * envd's filesystem.Filesystem (unary calls) over our files operations (sandbox.h): each runs
 * inside the sandbox through its agent, as the request's user. Paths resolve as envd's do
 * ("~" and relative ones from the user's home); entries are envd's EntryInfo, with the
 * file's E2B metadata (its user.e2b.* extended attributes).
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "agent/path.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "e2b_internal.h"

#define LIST_MAX  10000 /* entries ListDir answers at most */
#define DEPTH_MAX 32

/* ---- EntryInfo -------------------------------------------------------------------------- */

static const char *file_type(const char *type)
{
    return !type                          ? "FILE_TYPE_UNSPECIFIED"
           : strcmp(type, "file") == 0    ? "FILE_TYPE_FILE"
           : strcmp(type, "dir") == 0     ? "FILE_TYPE_DIRECTORY"
           : strcmp(type, "symlink") == 0 ? "FILE_TYPE_SYMLINK"
                                          : "FILE_TYPE_UNSPECIFIED";
}

/* Go's FileMode.String() of a file of type with permission bits mode: "-rw-r--r--". */
static void permissions(const char *type, unsigned mode, char out[16])
{
    static const char rwx[] = "rwxrwxrwx";
    char *p = out;
    char t = strcmp(type, "dir") == 0       ? 'd'
             : strcmp(type, "symlink") == 0 ? 'L'
             : strcmp(type, "fifo") == 0    ? 'p'
             : strcmp(type, "socket") == 0  ? 'S'
             : strcmp(type, "block") == 0   ? 'D'
             : strcmp(type, "char") == 0    ? 'c'
                                            : 0;
    if (t == 'c')
        *p++ = 'D';
    if (t)
        *p++ = t;
    if (mode & S_ISUID)
        *p++ = 'u';
    if (mode & S_ISGID)
        *p++ = 'g';
    if (mode & S_ISVTX)
        *p++ = 't';
    if (p == out)
        *p++ = '-';
    for (int i = 0; i < 9; i++)
        *p++ = mode & (1u << (8 - i)) ? rwx[i] : '-';
    *p = '\0';
}

/* A symlink's target as an absolute path (envd resolves it; this joins and normalises). */
static json_t *link_target(const char *path, const char *target)
{
    char joined[AGENT_PATH_MAX * 2], norm[AGENT_PATH_MAX];
    if (target[0] == '/')
        snprintf(joined, sizeof(joined), "%s", target);
    else
        snprintf(joined, sizeof(joined), "%.*s/%s", (int)(strrchr(path, '/') - path), path, target);
    if (agent_path_normalize(joined, strlen(joined), norm, sizeof(norm)) < 0)
        return json_string_lossy(target, strlen(target));
    return json_string(norm);
}

json_t *e2b_entry_info(api_req_t *r, struct e2b_box *b, json_t *info, json_t *metadata)
{
    const char *type = json_string_value(json_object_get(info, "type"));
    const char *target_type = json_string_value(json_object_get(info, "target_type"));
    const char *path = json_string_value(json_object_get(info, "path"));
    const char *name = json_string_value(json_object_get(info, "name"));
    const char *mode_s = json_string_value(json_object_get(info, "mode"));
    unsigned mode = mode_s ? (unsigned)strtoul(mode_s, NULL, 8) : 0;
    bool link = type && strcmp(type, "symlink") == 0;
    char perms[16], owner[64], group[64], size[32];
    permissions(type ? type : "file", mode, perms);
    json_t *uid = json_object_get(info, "uid"), *gid = json_object_get(info, "gid");
    e2b_owner_names(r, b, uid ? json_integer_value(uid) : -1, gid ? json_integer_value(gid) : -1,
                    owner, sizeof(owner), group, sizeof(group));
    snprintf(size, sizeof(size), "%lld",
             (long long)json_integer_value(json_object_get(info, "size")));
    json_t *e =
        json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:s, s:s, s:o}", "name", name ? name : "", "type",
                  file_type(link ? target_type : type), "path", path ? path : "", "size", size,
                  "mode", (int)(mode & 0777), "permissions", perms, "owner", owner, "group", group,
                  "modifiedTime", e2b_time_json(json_number_value(json_object_get(info, "mtime"))));
    const char *target = json_string_value(json_object_get(info, "link_target"));
    if (link && target)
        json_object_set_new(e, "symlinkTarget", link_target(path ? path : "/", target));
    if (metadata && json_object_size(metadata))
        json_object_set(e, "metadata", metadata);
    return e;
}

/* {key: value} of attrs (the user.e2b. names), or NULL when there are none. */
static json_t *strip_prefix(json_t *attrs)
{
    if (!json_is_object(attrs) || json_object_size(attrs) == 0)
        return NULL;
    json_t *m = json_object(), *v;
    const char *k;
    size_t plen = strlen(E2B_META_PREFIX);
    json_object_foreach(attrs, k, v)
    {
        json_object_set(m, k + plen, v);
    }
    return m;
}

json_t *e2b_file_metadata(api_req_t *r, struct e2b_box *b, const struct e2b_user *u,
                          const char *path)
{
    struct agentc_file_req q = {.path = "/", .user = u->name};
    json_t *paths _cleanup_json_ = json_pack("[s]", path);
    json_t *out _cleanup_json_ = NULL;
    if (sbx_file_xattr_get(r->api->sbx, &b->owner, b->rec.sandbox_id, &q, paths, E2B_META_PREFIX,
                           &out, NULL) < 0)
        return NULL;
    return strip_prefix(json_array_get(out, 0));
}

/* ---- the calls -------------------------------------------------------------------------- */

/* The message, its sandbox, its user and the path in member (resolved into path). */
static int prologue(api_req_t *r, json_t **msg, struct e2b_box *b, struct e2b_user *u,
                    const char *member, char *path, err_t *err)
{
    if (e2b_rpc_message(r, msg, err) < 0 || e2b_box_envd(r, b, false, err) < 0)
        return -1;
    json_t *p = e2b_rpc_get(*msg, member, NULL);
    if (e2b_user_of(r, b, NULL, u, err) < 0 ||
        (!json_is_string(p)
             ? err_set(err, ERR_INVALID, 0, "invalid_argument", "%s is required", member)
             : e2b_resolve_path(u, json_string_value(p), path, err)) < 0) {
        e2b_box_clear(b);
        return -1;
    }
    return 0;
}

/* The EntryInfo of path, with its metadata. */
static int entry_of(api_req_t *r, struct e2b_box *b, const struct e2b_user *u, const char *path,
                    json_t **out, err_t *err)
{
    struct agentc_file_req q = {.path = path, .user = u->name};
    json_t *info _cleanup_json_ = NULL;
    if (sbx_file_stat(r->api->sbx, &b->owner, b->rec.sandbox_id, &q, &info, err) < 0)
        return -1;
    json_t *meta _cleanup_json_ = e2b_file_metadata(r, b, u, path);
    *out = e2b_entry_info(r, b, info, meta);
    return 0;
}

int e2b_rpc_fs_stat(api_req_t *r, err_t *err)
{
    json_t *msg _cleanup_json_ = NULL;
    struct e2b_box b;
    struct e2b_user u;
    char path[AGENT_PATH_MAX];
    json_t *entry = NULL;
    if (prologue(r, &msg, &b, &u, "path", path, err) < 0)
        return -1;
    int rc = entry_of(r, &b, &u, path, &entry, err);
    if (rc == 0)
        e2b_rpc_reply(r, json_pack("{s:o}", "entry", entry));
    e2b_box_clear(&b);
    return rc;
}

int e2b_rpc_fs_make_dir(api_req_t *r, err_t *err)
{
    json_t *msg _cleanup_json_ = NULL;
    struct e2b_box b;
    struct e2b_user u;
    char path[AGENT_PATH_MAX];
    json_t *entry = NULL, *info _cleanup_json_ = NULL;
    if (prologue(r, &msg, &b, &u, "path", path, err) < 0)
        return -1;
    struct agentc_file_req q = {.path = path, .user = u.name, .parents = true};
    int rc = 0;
    if (sbx_file_stat(r->api->sbx, &b.owner, b.rec.sandbox_id, &q, &info, NULL) == 0)
        rc = err_set(err, ERR_CONFLICT, 0, "file_exists", "directory already exists: %s", path);
    if (rc == 0)
        rc = sbx_file_mkdir(r->api->sbx, &b.owner, b.rec.sandbox_id, &q, err);
    if (rc == 0)
        rc = entry_of(r, &b, &u, path, &entry, err);
    if (rc == 0)
        e2b_rpc_reply(r, json_pack("{s:o}", "entry", entry));
    e2b_box_clear(&b);
    return rc;
}

int e2b_rpc_fs_move(api_req_t *r, err_t *err)
{
    json_t *msg _cleanup_json_ = NULL;
    struct e2b_box b;
    struct e2b_user u;
    char from[AGENT_PATH_MAX], to[AGENT_PATH_MAX], parent[AGENT_PATH_MAX];
    json_t *entry = NULL;
    if (prologue(r, &msg, &b, &u, "source", from, err) < 0)
        return -1;
    json_t *dst = e2b_rpc_get(msg, "destination", NULL);
    int rc = !json_is_string(dst)
                 ? err_set(err, ERR_INVALID, 0, "invalid_argument", "destination is required")
                 : e2b_resolve_path(&u, json_string_value(dst), to, err);
    snprintf(parent, sizeof(parent), "%.*s", (int)(strrchr(to, '/') - to), to);
    struct agentc_file_req mk = {.path = parent[0] ? parent : "/", .user = u.name, .parents = true};
    struct agentc_file_req q = {.path = from, .user = u.name, .to = to};
    if (rc == 0) /* envd makes the destination's directory */
        rc = sbx_file_mkdir(r->api->sbx, &b.owner, b.rec.sandbox_id, &mk, err);
    if (rc == 0)
        rc = sbx_file_rename(r->api->sbx, &b.owner, b.rec.sandbox_id, &q, err);
    if (rc == 0)
        rc = entry_of(r, &b, &u, to, &entry, err);
    if (rc == 0)
        e2b_rpc_reply(r, json_pack("{s:o}", "entry", entry));
    e2b_box_clear(&b);
    return rc;
}

int e2b_rpc_fs_remove(api_req_t *r, err_t *err)
{
    json_t *msg _cleanup_json_ = NULL;
    struct e2b_box b;
    struct e2b_user u;
    char path[AGENT_PATH_MAX];
    if (prologue(r, &msg, &b, &u, "path", path, err) < 0)
        return -1;
    struct agentc_file_req q = {.path = path, .user = u.name, .recursive = true};
    int rc = sbx_file_delete(r->api->sbx, &b.owner, b.rec.sandbox_id, &q, err);
    if (rc < 0 && err->kind == ERR_NOT_FOUND) /* envd's RemoveAll: nothing there is fine */
        rc = 0;
    if (rc == 0)
        e2b_rpc_reply(r, json_object());
    e2b_box_clear(&b);
    return rc;
}

/* ---- ListDir ---------------------------------------------------------------------------- */

struct walk {
    api_req_t *r;
    struct e2b_box *b;
    const struct e2b_user *u;
    json_t *entries; /* EntryInfo messages */
    json_t *infos;   /* the agent's file objects, in the same order */
};

/* List dir (depth levels below it), appending to w. */
static int walk(struct walk *w, const char *dir, uint32_t depth, err_t *err)
{
    struct agentc_file_req q = {.path = dir, .user = w->u->name};
    json_t *listing _cleanup_json_ = NULL;
    if (sbx_file_list(w->r->api->sbx, &w->b->owner, w->b->rec.sandbox_id, &q, &listing, err) < 0)
        return -1;
    json_t *e;
    size_t i;
    json_array_foreach(json_object_get(listing, "entries"), i, e)
    {
        if (json_array_size(w->infos) >= LIST_MAX)
            return 0;
        json_array_append(w->infos, e);
        const char *type = json_string_value(json_object_get(e, "type"));
        const char *path = json_string_value(json_object_get(e, "path"));
        err_t ignored = {0}; /* a subdirectory that cannot be read is listed, not walked */
        if (depth > 1 && type && strcmp(type, "dir") == 0 && path)
            walk(w, path, depth - 1, &ignored);
    }
    return 0;
}

int e2b_rpc_fs_list_dir(api_req_t *r, err_t *err)
{
    json_t *msg _cleanup_json_ = NULL;
    struct e2b_box b;
    struct e2b_user u;
    char path[AGENT_PATH_MAX];
    if (prologue(r, &msg, &b, &u, "path", path, err) < 0)
        return -1;
    json_int_t depth = json_integer_value(e2b_rpc_get(msg, "depth", NULL));
    depth = depth < 1 ? 1 : depth > DEPTH_MAX ? DEPTH_MAX : depth;
    struct walk w = {r, &b, &u, json_array(), json_array()};
    json_t *info _cleanup_json_ = NULL;
    struct agentc_file_req q = {.path = path, .user = u.name};
    int rc = sbx_file_stat(r->api->sbx, &b.owner, b.rec.sandbox_id, &q, &info, err);
    if (rc == 0 && !json_is_true(json_object_get(info, "is_dir")))
        rc = err_set(err, ERR_INVALID, 0, "invalid_argument", "path is not a directory: %s", path);
    if (rc == 0)
        rc = walk(&w, path, (uint32_t)depth, err);
    json_t *paths _cleanup_json_ = json_array(), *attrs _cleanup_json_ = NULL, *e;
    size_t i;
    json_array_foreach(w.infos, i, e)
    {
        json_array_append(paths, json_object_get(e, "path"));
    }
    if (rc == 0 && json_array_size(paths) &&
        sbx_file_xattr_get(r->api->sbx, &b.owner, b.rec.sandbox_id, &q, paths, E2B_META_PREFIX,
                           &attrs, NULL) < 0)
        attrs = NULL; /* metadata is a bonus: a listing answers without it */
    json_array_foreach(w.infos, i, e)
    {
        json_t *meta _cleanup_json_ = strip_prefix(json_array_get(attrs, i));
        json_array_append_new(w.entries, e2b_entry_info(r, &b, e, meta));
    }
    if (rc == 0)
        e2b_rpc_reply(r, json_pack("{s:O}", "entries", w.entries));
    json_decref(w.entries);
    json_decref(w.infos);
    e2b_box_clear(&b);
    return rc;
}
