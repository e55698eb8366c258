/*
 * Who runs an envd request and where its paths lead, as envd decides: the user of the
 * request's Basic credentials ("name:") or the `username` query, else the sandbox's default
 * user; "~" and relative paths start at that user's home. The sandbox's /etc/passwd and
 * /etc/group are read through its agent (never on the host) and kept a moment per sandbox.
 */
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "agent/path.h"
#include "common/util.h"
#include "e2b_internal.h"

#define CACHE_SLOTS 16
#define CACHE_MS    2000
#define DB_MAX      (256 * 1024) /* bytes of /etc/passwd or /etc/group read at most */

struct db {
    char id[65];
    double at;
    buf_t passwd, group;
};

static struct db cache[CACHE_SLOTS];
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

static int collect(void *ctx, const uint8_t *p, size_t n)
{
    buf_t *b = ctx;
    if (b->len + n > DB_MAX)
        return -1;
    buf_append(b, p, n);
    return 0;
}

static void read_db(api_req_t *r, struct e2b_box *b, const char *path, buf_t *out)
{
    struct agentc_file_req q = {.path = path, .user = "root"};
    err_t err = {0};
    buf_reset(out);
    if (sbx_file_read(r->api->sbx, &b->owner, b->rec.sandbox_id, &q, NULL, collect, out, &err) < 0)
        buf_reset(out);
}

/* A copy of the sandbox's passwd and group (cached CACHE_MS). */
static void databases(api_req_t *r, struct e2b_box *b, buf_t *passwd, buf_t *group)
{
    pthread_mutex_lock(&cache_lock);
    struct db *d = NULL, *oldest = &cache[0];
    for (size_t i = 0; i < CACHE_SLOTS && !d; i++) {
        if (strcmp(cache[i].id, b->rec.sandbox_id) == 0)
            d = &cache[i];
        else if (cache[i].at < oldest->at)
            oldest = &cache[i];
    }
    bool fresh = d && now_mono_ms() - d->at < CACHE_MS;
    if (fresh) {
        buf_append(passwd, d->passwd.data, d->passwd.len);
        buf_append(group, d->group.data, d->group.len);
    }
    pthread_mutex_unlock(&cache_lock);
    if (fresh)
        return;
    read_db(r, b, "/etc/passwd", passwd);
    read_db(r, b, "/etc/group", group);
    pthread_mutex_lock(&cache_lock);
    d = d ? d : oldest;
    snprintf(d->id, sizeof(d->id), "%s", b->rec.sandbox_id);
    d->at = now_mono_ms();
    buf_reset(&d->passwd);
    buf_reset(&d->group);
    buf_append(&d->passwd, passwd->data, passwd->len);
    buf_append(&d->group, group->data, group->len);
    pthread_mutex_unlock(&cache_lock);
}

/* Field i (0-based, ':'-separated) of line into out; false if it has fewer. */
static bool field(const char *line, size_t len, int i, char *out, size_t size)
{
    const char *p = line, *end = line + len;
    for (; i > 0 && p < end; i--) {
        const char *c = memchr(p, ':', (size_t)(end - p));
        if (!c)
            return false;
        p = c + 1;
    }
    const char *c = memchr(p, ':', (size_t)(end - p));
    size_t n = (size_t)((c ? c : end) - p);
    if (i > 0 || n >= size)
        return false;
    memcpy(out, p, n);
    out[n] = '\0';
    return true;
}

/* The line of db whose field key_field is key; its fields out_a (and out_b) copied. */
static bool lookup(const buf_t *db, int key_field, const char *key, int out_a, char *a,
                   size_t asize, int out_b, char *b, size_t bsize)
{
    const char *p = db->data, *end = db->data ? db->data + db->len : NULL;
    while (p && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = (size_t)((nl ? nl : end) - p);
        char k[256];
        if (field(p, len, key_field, k, sizeof(k)) && strcmp(k, key) == 0 &&
            field(p, len, out_a, a, asize) && (!b || field(p, len, out_b, b, bsize)))
            return true;
        p = nl ? nl + 1 : end;
    }
    return false;
}

/* The user named by "Authorization: Basic base64(name:)", into out. */
static bool basic_user(api_req_t *r, char *out, size_t size)
{
    const char *h = api_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Basic ", 6) != 0)
        return false;
    unsigned char dec[256];
    size_t n = strlen(h + 6);
    if (n == 0 || n % 4 || n > 4 * 80)
        return false;
    int len = EVP_DecodeBlock(dec, (const unsigned char *)h + 6, (int)n);
    if (len <= 0)
        return false;
    char *colon = memchr(dec, ':', (size_t)len);
    size_t name_len = colon ? (size_t)(colon - (char *)dec) : 0;
    if (!colon || name_len >= size)
        return false;
    memcpy(out, dec, name_len);
    out[name_len] = '\0';
    return out[0] != '\0';
}

int e2b_user_of(api_req_t *r, struct e2b_box *b, const char *username, struct e2b_user *u,
                err_t *err)
{
    memset(u, 0, sizeof(*u));
    u->named = (username && *username && snprintf(u->name, sizeof(u->name), "%s", username) > 0) ||
               basic_user(r, u->name, sizeof(u->name));
    if (!u->named) /* the sandbox's default: its image's User (a name or uid, maybe ":group") */
        snprintf(u->name, sizeof(u->name), "%.*s", (int)strcspn(b->life.user, ":"),
                 b->life.user[0] ? b->life.user : "root");
    if (strspn(u->name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
        strlen(u->name))
        return err_set(err, ERR_UNAUTHORIZED, 0, "invalid_user", "invalid username: '%.64s'",
                       u->name);
    buf_t passwd = {0}, group = {0};
    databases(r, b, &passwd, &group);
    char uid[32];
    bool numeric = strspn(u->name, "0123456789") == strlen(u->name);
    bool found =
        lookup(&passwd, numeric ? 2 : 0, u->name, 5, u->home, sizeof(u->home), 0, uid, sizeof(uid));
    if (found && numeric)
        snprintf(u->name, sizeof(u->name), "%s", uid); /* the name of that uid */
    buf_free(&passwd);
    buf_free(&group);
    if (!found && strcmp(u->name, "root") == 0)
        snprintf(u->home, sizeof(u->home), "/root"), found = true;
    if (!found)
        return err_set(err, ERR_UNAUTHORIZED, 0, "invalid_user", "invalid username: '%.64s'",
                       u->name);
    return 0;
}

int e2b_resolve_path(const struct e2b_user *u, const char *path, char *out, err_t *err)
{
    char joined[AGENT_PATH_MAX * 2];
    if (!path || !*path)
        snprintf(joined, sizeof(joined), "%s", u->home);
    else if (path[0] == '~' && (path[1] == '\0' || path[1] == '/'))
        snprintf(joined, sizeof(joined), "%s%s", u->home, path + 1);
    else if (path[0] == '~')
        return err_set(err, ERR_INVALID, 0, "invalid_path", "cannot expand user-specific home dir");
    else if (path[0] != '/')
        snprintf(joined, sizeof(joined), "%s/%s", u->home, path);
    else
        snprintf(joined, sizeof(joined), "%s", path);
    if (agent_path_normalize(joined, strlen(joined), out, AGENT_PATH_MAX) < 0)
        return err_set(err, ERR_INVALID, 0, "invalid_path", "the path is too long or holds NUL");
    return 0;
}

void e2b_owner_names(api_req_t *r, struct e2b_box *b, int64_t uid, int64_t gid, char *owner,
                     size_t osize, char *group, size_t gsize)
{
    buf_t passwd = {0}, grp = {0};
    char key[32];
    databases(r, b, &passwd, &grp);
    snprintf(key, sizeof(key), "%lld", (long long)uid);
    if (uid < 0 || !lookup(&passwd, 2, key, 0, owner, osize, 0, NULL, 0))
        snprintf(owner, osize, "%s", uid == 0 ? "root" : "");
    snprintf(key, sizeof(key), "%lld", (long long)gid);
    if (gid < 0 || !lookup(&grp, 2, key, 0, group, gsize, 0, NULL, 0))
        snprintf(group, gsize, "%s", gid == 0 ? "root" : "");
    buf_free(&passwd);
    buf_free(&grp);
}
