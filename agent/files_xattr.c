/*
 * XATTR_SET and XATTR_GET: a file's extended attributes in the "user." namespace (E2B's file
 * metadata: the daemon names them "user.e2b.<key>"), as the request's user. Nothing outside
 * "user." can be named: not security.*, trusted.* or system.*.
 *
 * Bounded: at most XATTR_MAX attributes set at once, names of XATTR_KEY_MAX bytes, values of
 * XATTR_VALUE_MAX bytes; XATTR_GET answers for at most XATTR_PATHS paths, and for each the
 * first XATTR_MAX attributes of the prefix.
 */
#include <errno.h>
#include <string.h>
#include <sys/xattr.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "files_internal.h"

#define XATTR_MAX       64
#define XATTR_KEY_MAX   255
#define XATTR_VALUE_MAX 4096
#define XATTR_PATHS     10000
#define XATTR_NAMES_MAX (64 * 1024)

static bool user_name(const char *name)
{
    size_t n = strlen(name);
    return n > 5 && n <= XATTR_KEY_MAX && strncmp(name, "user.", 5) == 0;
}

void files_do_xattr_set(struct session *s, struct file_req *r)
{
    const char *name;
    json_t *v;
    if (json_object_size(r->attrs) > XATTR_MAX)
        files_fail(s, "invalid", "at most %d attributes at once", XATTR_MAX);
    json_object_foreach(r->attrs, name, v)
    {
        if (!user_name(name) || !json_is_string(v) || json_string_length(v) > XATTR_VALUE_MAX)
            files_fail(s, "invalid",
                       "attributes are user.* names (up to %d bytes) with string values (up "
                       "to %d bytes)",
                       XATTR_KEY_MAX, XATTR_VALUE_MAX);
    }
    json_object_foreach(r->attrs, name, v)
    {
        if (lsetxattr(r->norm, name, json_string_value(v), json_string_length(v), 0) < 0)
            files_fail_errno(s, errno, "setting an attribute of", r->norm);
    }
    files_send_ok(s, r->norm);
}

/* The attributes of path whose names start with prefix, or null if it cannot be read. */
static json_t *attrs_of(const char *path, const char *prefix)
{
    char names[XATTR_NAMES_MAX];
    ssize_t n = llistxattr(path, names, sizeof(names));
    if (n < 0)
        return errno == ENOTSUP ? json_object() : json_null();
    json_t *out = json_object();
    size_t plen = strlen(prefix);
    for (char *name = names; name < names + n && json_object_size(out) < XATTR_MAX;
         name += strlen(name) + 1) {
        char value[XATTR_VALUE_MAX];
        if (strncmp(name, prefix, plen) != 0)
            continue;
        ssize_t len = lgetxattr(path, name, value, sizeof(value));
        if (len >= 0)
            json_object_set_new(out, name, json_string_lossy(value, (size_t)len));
    }
    return out;
}

void files_do_xattr_get(struct session *s, struct file_req *r)
{
    if (!user_name(r->prefix) && strcmp(r->prefix, "user.") != 0)
        files_fail(s, "invalid", "the prefix must start with \"user.\"");
    if (json_array_size(r->paths) > XATTR_PATHS)
        files_fail(s, "invalid", "at most %d paths at once", XATTR_PATHS);
    json_t *list = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(r->paths, i, p)
    {
        char norm[AGENT_PATH_MAX];
        const char *in = json_string_value(p);
        if (!in || agent_path_normalize(in, strlen(in), norm, sizeof(norm)) < 0)
            json_array_append_new(list, json_null());
        else
            json_array_append_new(list, attrs_of(norm, r->prefix));
    }
    json_t *j = json_pack("{s:o}", "attrs", list);
    /* An answer over a frame is cut to what fits: the client sees fewer entries. */
    _cleanup_free_ char *text = json_dump_compact(j);
    while (strlen(text) > AGENT_MAX_FRAME && json_array_size(list) > 0) {
        json_array_remove(list, json_array_size(list) - 1);
        free(text);
        text = json_dump_compact(j);
    }
    files_send(s, AGENT_OK, text, strlen(text));
    json_decref(j);
}
