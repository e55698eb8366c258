/*
 * Templates from a Dockerfile (buildah, through the image store) or from a snapshot. The
 * Dockerfile and its context are written to a fresh directory under <state>/templates/, the
 * bases its FROM lines name are templates (loaded from their OCI layouts), the build's output
 * goes to the caller line by line, and only a build that succeeded becomes a template.
 */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/id.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "sandbox_internal.h"
#include "store/store_templates.h"
#include "template.h"

#define MAX_CONTEXT_FILES 1000
#define MAX_BUILDS        2 /* builds at once, daemon-wide (429 past it) */

static const struct jfield build_fields[] = {
    {"name", JF_STRING, true, offsetof(struct sbx_template_build_req, name), 64, 0, 0},
    {"dockerfile", JF_STRING, false, offsetof(struct sbx_template_build_req, dockerfile), 1 << 20,
     0, 0},
    {"context", JF_OBJECT, false, offsetof(struct sbx_template_build_req, context), 0, 0, 0},
    {"pool", JF_INT, false, offsetof(struct sbx_template_build_req, pool), 0, 0, SBX_POOL_MAX},
    {"setuid", JF_BOOL, false, offsetof(struct sbx_template_build_req, setuid), 0, 0, 0},
    {"global", JF_BOOL, false, offsetof(struct sbx_template_build_req, global), 0, 0, 0},
    {"network", JF_BOOL, false, offsetof(struct sbx_template_build_req, network), 0, 0, 0},
    {"snapshot", JF_STRING, false, offsetof(struct sbx_template_build_req, snapshot), 128, 0, 0},
};

/* A relative path without "..", ".", empty parts or a leading '/'. */
static bool context_path_valid(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n > 1024 || p[0] == '/' || strcmp(p, "Dockerfile") == 0)
        return false;
    for (const char *s = p; *s;) {
        const char *e = strchrnul(s, '/');
        size_t len = (size_t)(e - s);
        if (len == 0 || (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
            return false;
        s = *e ? e + 1 : e;
    }
    return true;
}

static int check_context(json_t *ctx, err_t *err)
{
    if (json_object_size(ctx) > MAX_CONTEXT_FILES)
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "field 'context' has more than %d files", MAX_CONTEXT_FILES);
    const char *k;
    json_t *v;
    json_object_foreach(ctx, k, v)
    {
        if (!context_path_valid(k))
            return err_set(err, ERR_INVALID, 0, "invalid_field",
                           "context path '%.200s' must be relative, without '.' or '..' parts "
                           "(and not Dockerfile)",
                           k);
        if (!json_is_string(v) && !json_is_string(json_object_get(v, "base64")))
            return err_set(err, ERR_INVALID, 0, "invalid_field",
                           "context['%.200s'] must be a string or {\"base64\": string}", k);
    }
    return 0;
}

int sbx_template_req_decode(json_t *body, struct sbx_template_build_req *q, err_t *err)
{
    *q = (struct sbx_template_build_req){.pool = -1, .setuid = -1, .global = -1, .network = -1};
    if (json_decode_fields(body, build_fields, ARRAY_SIZE(build_fields), q, err) < 0)
        return -1;
    if (!sbx_template_name_valid(q->name))
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "field 'name' must be 1-64 of a-z 0-9 - _ . starting with a letter or "
                       "digit");
    if (!q->dockerfile == !q->snapshot)
        return err_set(err, ERR_INVALID, 0, "missing_field",
                       "give exactly one of 'dockerfile' and 'snapshot'");
    if (q->dockerfile && !*q->dockerfile)
        return err_set(err, ERR_INVALID, 0, "invalid_field", "field 'dockerfile' is empty");
    if (q->snapshot && (q->context || q->network == 1 || q->pool > 0))
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "'context', 'network' and 'pool' go with a Dockerfile, not a snapshot "
                       "(whose sandboxes start with its memory already)");
    return q->context ? check_context(q->context, err) : 0;
}

/* ---- the build directory ---- */

static int write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n, len -= (size_t)n;
    }
    return 0;
}

static int write_file_at(const char *dir, const char *rel, const void *data, size_t len, err_t *err)
{
    _cleanup_free_ char *path = xasprintf("%s/%s", dir, rel);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    if (!mkdir_p(path, 0755))
        return err_sys(err, "create %s", path);
    *slash = '/';
    int fd _cleanup_close_ = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 || write_all(fd, data, len) < 0)
        return err_sys(err, "write %s", path);
    return 0;
}

static int write_context(const char *dir, const struct sbx_template_build_req *q, err_t *err)
{
    if (write_file_at(dir, "Dockerfile", q->dockerfile, strlen(q->dockerfile), err) < 0)
        return -1;
    const char *k;
    json_t *v;
    json_object_foreach(q->context, k, v)
    {
        if (json_is_string(v)) {
            if (write_file_at(dir, k, json_string_value(v), json_string_length(v), err) < 0)
                return -1;
            continue;
        }
        json_t *b64 = json_object_get(v, "base64");
        size_t n = json_string_length(b64);
        _cleanup_free_ unsigned char *raw = xmalloc(n / 4 * 3 + 4);
        int len = EVP_DecodeBlock(raw, (const unsigned char *)json_string_value(b64), (int)n);
        if (len < 0 || n % 4)
            return err_set(err, ERR_INVALID, 0, "invalid_field",
                           "context['%.200s'].base64 is not base64", k);
        const char *s = json_string_value(b64); /* EVP_DecodeBlock counts '=' padding as 0s */
        len -= (n >= 1 && s[n - 1] == '=') + (n >= 2 && s[n - 2] == '=');
        if (write_file_at(dir, k, raw, (size_t)len, err) < 0)
            return -1;
    }
    return 0;
}

/* The names of FROM lines that are templates owner sees, as (name, layout dir) pairs. */
static const char **find_bases(sbx_mgr_t *m, const user_t *owner, const char *dockerfile,
                               json_t *keep)
{
    json_t *seen _cleanup_json_ = json_object();
    _cleanup_free_ char *text = xstrdup(dockerfile);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *w = line + strspn(line, " \t");
        if (strncasecmp(w, "FROM", 4) != 0 || (w[4] != ' ' && w[4] != '\t'))
            continue;
        char *name = NULL, *tok, *s2 = NULL;
        for (tok = strtok_r(w + 4, " \t\r", &s2); tok; tok = strtok_r(NULL, " \t\r", &s2))
            if (strncmp(tok, "--", 2) != 0) {
                name = tok;
                break;
            }
        template_rec_t t;
        if (!name || json_object_get(seen, name) || sbx_template_find(m, owner, name, &t, NULL) < 0)
            continue;
        const char *dir = json_string_value(json_object_get(t.info, "layout"));
        if (dir)
            json_object_set_new(seen, name, json_string(dir));
        store_template_rec_clear(&t);
    }
    const char *k;
    json_t *val;
    json_object_foreach(seen, k, val)
    {
        json_array_append_new(keep, json_string(k));
        json_array_append(keep, val);
    }
    size_t n = json_array_size(keep);
    const char **v = xcalloc(n + 1, sizeof(*v)); /* name, dir, name, dir, ..., NULL */
    for (size_t i = 0; i < n; i++)
        v[i] = json_string_value(json_array_get(keep, i));
    return v;
}

/* ---- the build's output, as events ---- */

struct build_log {
    sbx_build_event_fn fn;
    void *ctx;
    bool gone;  /* the client went away: output is no longer sent */
    buf_t line; /* an unfinished line */
    buf_t tail; /* the last lines, for the error message */
    int steps;
};

static void emit_line(struct build_log *bl, const char *s, size_t n)
{
    int step, steps;
    buf_append(&bl->tail, s, n);
    buf_append(&bl->tail, "\n", 1);
    if (bl->tail.len > 4096) {
        size_t drop = bl->tail.len - 4096;
        memmove(bl->tail.data, bl->tail.data + drop, bl->tail.len - drop);
        bl->tail.len -= drop;
        bl->tail.data[bl->tail.len] = '\0';
    }
    if (bl->gone || !bl->fn)
        return;
    _cleanup_free_ char *text = xstrndup(s, n);
    json_t *ev;
    if (sscanf(text, "STEP %d/%d:", &step, &steps) == 2) {
        bl->steps = steps;
        ev = json_pack("{s:s, s:i, s:i, s:o}", "type", "step", "step", step, "steps", steps,
                       "output", json_string_lossy(s, n));
    } else {
        ev = json_pack("{s:s, s:o}", "type", "log", "output", json_string_lossy(s, n));
    }
    if (!bl->fn(bl->ctx, ev))
        bl->gone = true;
}

static void on_output(void *ctx, const char *data, size_t len)
{
    struct build_log *bl = ctx;
    buf_append(&bl->line, data, len);
    char *start = bl->line.data, *nl;
    while ((nl = memchr(start, '\n', bl->line.len - (size_t)(start - bl->line.data)))) {
        emit_line(bl, start, (size_t)(nl - start));
        start = nl + 1;
    }
    size_t rest = bl->line.len - (size_t)(start - bl->line.data);
    memmove(bl->line.data, start, rest);
    bl->line.len = rest;
    if (bl->line.data)
        bl->line.data[rest] = '\0';
}

/* ---- builds ---- */

/* Take a build slot and reserve owner/name; ERR_LIMIT or ERR_CONFLICT otherwise. */
static int build_begin(sbx_mgr_t *m, const char *key, err_t *err)
{
    pthread_mutex_lock(&m->tpl_lock);
    int rc = 0;
    if (json_object_get(m->tpl_building, key))
        rc = err_set(err, ERR_CONFLICT, 0, "template_building",
                     "a template of that name is being built");
    else if (json_object_size(m->tpl_building) >= MAX_BUILDS)
        rc = err_set(err, ERR_LIMIT, 0, "too_many_builds",
                     "%d templates are being built: try again later", MAX_BUILDS);
    else
        json_object_set_new(m->tpl_building, key, json_true());
    pthread_mutex_unlock(&m->tpl_lock);
    return rc;
}

static void build_end(sbx_mgr_t *m, const char *key)
{
    pthread_mutex_lock(&m->tpl_lock);
    json_object_del(m->tpl_building, key);
    pthread_mutex_unlock(&m->tpl_lock);
}

static void new_record(template_rec_t *t, const user_t *owner,
                       const struct sbx_template_build_req *q)
{
    memset(t, 0, sizeof(*t));
    id_random_hex(t->id, 16);
    snprintf(t->name, sizeof(t->name), "%s", q->name);
    t->owner_id = q->global == 1 ? 0 : owner->id;
    snprintf(t->source, sizeof(t->source), "%s", q->snapshot ? "snapshot" : "dockerfile");
    t->setuid = q->setuid != 0;
    t->pool = q->pool > 0 ? (int)q->pool : 0;
    t->created_at = t->updated_at = now_unix();
    t->info = json_object();
}

/* Run the build of t (dirs under <state>/templates/<id>/): context, layout. */
static int run_build(sbx_mgr_t *m, const user_t *owner, const struct sbx_template_build_req *q,
                     template_rec_t *t, struct build_log *bl, err_t *err)
{
    _cleanup_free_ char *dir = xasprintf("%s/templates/%s", m->cfg.state_dir, t->id);
    _cleanup_free_ char *ctx_dir = xasprintf("%s/context", dir);
    _cleanup_free_ char *layout = xasprintf("%s/layout", dir);
    if (!mkdir_p(ctx_dir, 0700))
        return err_sys(err, "create %s", ctx_dir);
    json_t *keep _cleanup_json_ = json_array();
    _cleanup_free_ const char **bases = NULL;
    int rc = write_context(ctx_dir, q, err);
    if (rc == 0) {
        bases = find_bases(m, owner, q->dockerfile, keep);
        _cleanup_free_ char *ref =
            xasprintf("localhost/templates/u%lld/%s:%s", (long long)t->owner_id, t->name, t->id);
        struct image_build_req br = {ctx_dir, ref, bases, q->network == 1, layout};
        image_t *img = NULL;
        double t0 = now_mono_ms();
        rc = image_build(m->images, &br, on_output, bl, &img, err);
        if (rc == 0) {
            snprintf(t->image, sizeof(t->image), "%s", img->ref);
            json_object_set_new(t->info, "digest", json_string(img->digest));
            json_object_set_new(t->info, "size", json_integer((json_int_t)img->size));
            json_object_set_new(t->info, "layout", json_string(layout));
            json_object_set_new(t->info, "steps", json_integer(bl->steps));
            json_object_set_new(t->info, "dockerfile", json_string(q->dockerfile));
            json_object_set_new(t->info, "built_in_ms",
                                json_integer((json_int_t)(now_mono_ms() - t0)));
        }
        image_free(img);
    }
    storage_remove_tree(ctx_dir, NULL);
    return rc;
}

/* The failure of a build, with the end of its output (where the failing step says why). */
static void build_failed(struct build_log *bl, err_t *err)
{
    if (bl->line.len)
        emit_line(bl, bl->line.data, bl->line.len);
    log_warn("template.build_failed", "code=%s msg=\"%s\"", err->code, err->msg);
}

static int check_rights(const user_t *owner, const struct sbx_template_build_req *q, err_t *err)
{
    if ((q->global == 1 || q->network == 1) && !owner->is_admin)
        return err_set(err, ERR_FORBIDDEN, 0, "forbidden",
                       "only admins make global templates or builds with network");
    if (q->global == 1 && q->snapshot)
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "a snapshot is its owner's: its template cannot be global");
    return 0;
}

int sbx_template_build(sbx_mgr_t *m, const user_t *owner, const struct sbx_template_build_req *q,
                       sbx_build_event_fn fn, void *ctx, json_t **out, err_t *err)
{
    if (check_rights(owner, q, err) < 0)
        return -1;
    template_rec_t t, existing;
    new_record(&t, owner, q);
    if (store_template_find(m->store, t.owner_id ? t.owner_id : -1, q->name, &existing, NULL) ==
            0 &&
        existing.owner_id == t.owner_id) {
        store_template_rec_clear(&existing);
        store_template_rec_clear(&t);
        return err_set(err, ERR_CONFLICT, 0, "template_exists", "a template called '%s' exists",
                       q->name);
    }
    char key[96];
    snprintf(key, sizeof(key), "%lld/%s", (long long)t.owner_id, t.name);
    if (build_begin(m, key, err) < 0) {
        store_template_rec_clear(&t);
        return -1;
    }
    struct build_log bl = {.fn = fn, .ctx = ctx};
    int rc;
    if (q->snapshot) {
        snapshot_rec_t snap;
        rc = store_snapshot_get(m->store, owner->id, q->snapshot, &snap, err);
        if (rc == 0) {
            snprintf(t.snapshot, sizeof(t.snapshot), "%s", q->snapshot);
            snprintf(t.image, sizeof(t.image), "%s", snap.image);
            store_snapshot_rec_clear(&snap);
        }
    } else {
        log_info("template.build", "template=%s id=%s user=%s", t.name, t.id, owner->name);
        rc = run_build(m, owner, q, &t, &bl, err);
    }
    if (rc == 0)
        rc = store_template_insert(m->store, &t, err);
    if (rc < 0) {
        build_failed(&bl, err);
        _cleanup_free_ char *dir = xasprintf("%s/templates/%s", m->cfg.state_dir, t.id);
        storage_remove_tree(dir, NULL);
        if (t.image[0] && !q->snapshot && !sbx_image_in_use(m, t.image))
            image_remove(m->images, t.image, NULL);
    } else {
        log_info("template.built", "template=%s id=%s", t.name, t.id);
        *out = sbx_template_json(m, &t);
        sbx_pool_kick(m);
    }
    build_end(m, key);
    buf_free(&bl.line);
    buf_free(&bl.tail);
    store_template_rec_clear(&t);
    return rc;
}
