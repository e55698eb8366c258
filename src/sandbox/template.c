/*
 * Templates: lookup, list, get, delete, the warm pool's size, and the import of the built-in
 * templates (OCI layouts that scripts/setup builds into the templates dir) at start. Builds
 * from a Dockerfile are in template_build.c, warm pools in pool.c.
 */
#include "template.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/id.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "sandbox_internal.h"
#include "store/store_templates.h"

#define IMPORT_WAIT_S 900 /* how long a create waits for the built-in templates' import */

bool sbx_template_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
            return false;
    }
    return true;
}

/* Wait (bounded) while the built-in template name (any, when NULL) is being imported at
 * start; other names never wait. */
static void wait_for_import(sbx_mgr_t *m, const char *name)
{
    pthread_mutex_lock(&m->tpl_lock);
    double until = now_mono_ms() + IMPORT_WAIT_S * 1000.0;
    while (m->tpl_importing && (!name || json_object_get(m->tpl_pending, name)) &&
           now_mono_ms() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&m->tpl_cond, &m->tpl_lock, &ts);
    }
    pthread_mutex_unlock(&m->tpl_lock);
}

int sbx_template_find(sbx_mgr_t *m, const user_t *owner, const char *name, template_rec_t *out,
                      err_t *err)
{
    if (!sbx_template_name_valid(name))
        return err_set(err, ERR_NOT_FOUND, 0, "template_not_found", "no template called '%.64s'",
                       name);
    wait_for_import(m, name);
    if (store_template_find(m->store, owner->id, name, out, err) < 0) {
        if (err && err->kind == ERR_NOT_FOUND)
            err_set(err, ERR_NOT_FOUND, 0, "template_not_found", "no template called '%s'", name);
        return -1;
    }
    return 0;
}

json_t *sbx_template_json(sbx_mgr_t *m, const template_rec_t *t)
{
    json_t *j = json_pack("{s:s, s:s, s:s, s:b, s:b, s:f, s:f}", "id", t->id, "name", t->name,
                          "source", t->source, "global", t->owner_id == 0, "setuid", t->setuid,
                          "created_at", t->created_at, "updated_at", t->updated_at);
    json_object_set_new(j, "image", t->image[0] ? json_string(t->image) : json_null());
    json_object_set_new(j, "snapshot", t->snapshot[0] ? json_string(t->snapshot) : json_null());
    const char *keys[] = {"digest", "size", "steps", "dockerfile", "built_in_ms"};
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
        json_t *v = json_object_get(t->info, keys[i]);
        if (v)
            json_object_set(j, keys[i], v);
    }
    json_object_set_new(j, "pool", sbx_pool_json(m, t));
    return j;
}

int sbx_template_list(sbx_mgr_t *m, const user_t *owner, json_t **out, err_t *err)
{
    wait_for_import(m, NULL);
    template_rec_t *items = NULL;
    size_t n = 0;
    if (store_template_list(m->store, owner->id, &items, &n, err) < 0)
        return -1;
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        /* a global one hidden by the caller's own of the same name is not listed */
        if (i > 0 && strcmp(items[i].name, items[i - 1].name) == 0)
            continue;
        json_array_append_new(arr, sbx_template_json(m, &items[i]));
    }
    store_template_list_free(items, n);
    *out = json_pack("{s:o}", "templates", arr);
    return 0;
}

int sbx_template_get(sbx_mgr_t *m, const user_t *owner, const char *name, json_t **out, err_t *err)
{
    template_rec_t t;
    if (sbx_template_find(m, owner, name, &t, err) < 0)
        return -1;
    *out = sbx_template_json(m, &t);
    store_template_rec_clear(&t);
    return 0;
}

/* Find owner's template name for a change: a global one needs an admin (403 otherwise). */
static int find_for_change(sbx_mgr_t *m, const user_t *owner, const char *name, template_rec_t *t,
                           err_t *err)
{
    if (sbx_template_find(m, owner, name, t, err) < 0)
        return -1;
    if (t->owner_id == 0 && !owner->is_admin) {
        store_template_rec_clear(t);
        return err_set(err, ERR_FORBIDDEN, 0, "forbidden",
                       "template '%s' is global: only admins change it", name);
    }
    return 0;
}

int sbx_template_set_pool(sbx_mgr_t *m, const user_t *owner, const char *name, int64_t pool,
                          json_t **out, err_t *err)
{
    if (pool < 0 || pool > SBX_POOL_MAX)
        return err_set(err, ERR_INVALID, 0, "invalid_field", "field 'pool' must be 0-%d",
                       SBX_POOL_MAX);
    template_rec_t t;
    if (find_for_change(m, owner, name, &t, err) < 0)
        return -1;
    if (t.snapshot[0] && pool > 0) {
        store_template_rec_clear(&t);
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "template '%s' is a snapshot: its sandboxes start with its memory "
                       "already, so it keeps no warm pool",
                       name);
    }
    t.pool = (int)pool;
    t.updated_at = now_unix();
    int rc = store_template_update(m->store, &t, err);
    if (rc == 0) {
        log_info("template.pool", "template=%s id=%s pool=%d", t.name, t.id, t.pool);
        if (t.pool == 0) /* its sandboxes and its warm snapshot go now */
            sbx_pool_drain(m, t.id);
        sbx_pool_kick(m);
        *out = sbx_template_json(m, &t);
    }
    store_template_rec_clear(&t);
    return rc;
}

/* Forget the image a deleted Dockerfile template was built into, and remove its files that
 * nothing needs: sandboxes started from it keep the layers they mount (the GC keeps those). */
static void release_image(sbx_mgr_t *m, const template_rec_t *t)
{
    if (!t->image[0] || strcmp(t->source, "dockerfile") != 0)
        return;
    err_t e = {0};
    if (image_remove(m->images, t->image, &e) < 0) {
        log_warn("template.image_keep", "template=%s image=%s msg=\"%s\"", t->name, t->image,
                 e.msg);
        return;
    }
    json_t *keep_set _cleanup_json_ = NULL;
    if (sbx_layers_in_use(m, &keep_set, &e) < 0)
        return;
    size_t n = json_object_size(keep_set), i = 0;
    _cleanup_free_ const char **keep = xcalloc(n + 1, sizeof(*keep));
    const char *dir;
    json_t *v;
    json_object_foreach(keep_set, dir, v) keep[i++] = dir;
    struct image_gc_stats st = {0};
    if (image_gc(m->images, keep, n, &st, &e) == 0)
        log_info("image.gc", "blobs_removed=%zu layers_removed=%zu", st.blobs_removed,
                 st.layers_removed);
}

int sbx_template_delete(sbx_mgr_t *m, const user_t *owner, const char *name, err_t *err)
{
    template_rec_t t;
    if (find_for_change(m, owner, name, &t, err) < 0)
        return -1;
    int rc = 0;
    if (strcmp(t.source, "builtin") == 0)
        rc = err_set(err, ERR_CONFLICT, 0, "template_builtin",
                     "template '%s' is built in: it cannot be deleted (its pool can be set to 0)",
                     name);
    if (rc == 0)
        rc = store_template_delete(m->store, t.id, err);
    if (rc == 0) {
        sbx_pool_drain(m, t.id);
        release_image(m, &t);
        _cleanup_free_ char *dir = xasprintf("%s/templates/%s", m->cfg.state_dir, t.id);
        storage_remove_tree(dir, NULL);
        log_info("template.deleted", "template=%s id=%s user=%s", t.name, t.id, owner->name);
    }
    store_template_rec_clear(&t);
    return rc;
}

/* ---- the built-in templates: OCI layouts in the templates dir, imported at start ---- */

/* The manifest digest an OCI layout's index.json names first, into out. */
static bool layout_digest(const char *dir, char *out, size_t size)
{
    _cleanup_free_ char *path = xasprintf("%s/index.json", dir);
    json_t *idx _cleanup_json_ = json_load_file(path, 0, NULL);
    const char *d = json_string_value(
        json_object_get(json_array_get(json_object_get(idx, "manifests"), 0), "digest"));
    if (!d || strlen(d) >= size)
        return false;
    snprintf(out, size, "%s", d);
    return true;
}

/* Make (or bring up to date) the global template name from the layout at dir. */
static int import_builtin(sbx_mgr_t *m, const char *name, const char *dir, err_t *err)
{
    char digest[80];
    if (!layout_digest(dir, digest, sizeof(digest)))
        return err_set(err, ERR_INVALID, 0, "template_invalid", "%s: no OCI image index", dir);
    template_rec_t t;
    bool have = store_template_find(m->store, -1, name, &t, NULL) == 0;
    image_t *img = NULL;
    const char *known = have ? json_string_value(json_object_get(t.info, "layout_digest")) : NULL;
    if (have && known && strcmp(known, digest) == 0 &&
        image_get(m->images, t.image, &img, NULL) == 0) {
        image_free(img);
        store_template_rec_clear(&t);
        return 0;
    }
    _cleanup_free_ char *ref = xasprintf("localhost/templates/%s:latest", name);
    double t0 = now_mono_ms();
    log_info("template.import", "template=%s layout=%s", name, dir);
    if (image_import(m->images, dir, ref, &img, err) < 0) {
        if (have)
            store_template_rec_clear(&t);
        return -1;
    }
    if (!have) {
        memset(&t, 0, sizeof(t));
        id_random_hex(t.id, 16);
        snprintf(t.name, sizeof(t.name), "%.64s", name);
        snprintf(t.source, sizeof(t.source), "builtin");
        t.setuid = true;
        t.created_at = now_unix();
        t.info = json_object();
    }
    snprintf(t.image, sizeof(t.image), "%s", img->ref);
    t.updated_at = now_unix();
    json_object_set_new(t.info, "layout_digest", json_string(digest));
    json_object_set_new(t.info, "layout", json_string(dir)); /* what FROM name loads */
    json_object_set_new(t.info, "digest", json_string(img->digest));
    json_object_set_new(t.info, "size", json_integer((json_int_t)img->size));
    image_free(img);
    int rc =
        have ? store_template_update(m->store, &t, err) : store_template_insert(m->store, &t, err);
    if (rc == 0)
        log_info("template.imported", "template=%s id=%s ms=%.0f", name, t.id, now_mono_ms() - t0);
    store_template_rec_clear(&t);
    return rc;
}

static bool layout_dir(const char *dir)
{
    _cleanup_free_ char *p = xasprintf("%s/oci-layout", dir);
    return access(p, F_OK) == 0;
}

/* The names of the template layouts in the templates dir, as the keys of an object. */
static json_t *scan(const char *root)
{
    json_t *names = json_object();
    DIR *d _cleanup_closedir_ = root && *root ? opendir(root) : NULL;
    if (!d) {
        if (root && *root)
            log_warn("template.dir_missing",
                     "dir=%s msg=\"no built-in templates (run "
                     "scripts/setup to build them)\"",
                     root);
        return names;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !sbx_template_name_valid(e->d_name))
            continue;
        _cleanup_free_ char *dir = xasprintf("%s/%s", root, e->d_name);
        if (layout_dir(dir))
            json_object_set_new(names, e->d_name, json_string(dir));
    }
    return names;
}

static void import_all(sbx_mgr_t *m)
{
    pthread_mutex_lock(&m->tpl_lock);
    json_t *names _cleanup_json_ = json_deep_copy(m->tpl_pending);
    pthread_mutex_unlock(&m->tpl_lock);
    const char *name;
    json_t *dir;
    json_object_foreach(names, name, dir)
    {
        err_t err = {0};
        if (import_builtin(m, name, json_string_value(dir), &err) < 0)
            log_warn("template.import_failed", "template=%s code=%s msg=\"%s\"", name, err.code,
                     err.msg);
        pthread_mutex_lock(&m->tpl_lock);
        json_object_del(m->tpl_pending, name);
        pthread_cond_broadcast(&m->tpl_cond);
        pthread_mutex_unlock(&m->tpl_lock);
    }
}

static void *import_main(void *arg)
{
    sbx_mgr_t *m = arg;
    import_all(m);
    pthread_mutex_lock(&m->tpl_lock);
    m->tpl_importing = false;
    pthread_cond_broadcast(&m->tpl_cond);
    pthread_mutex_unlock(&m->tpl_lock);
    sbx_pool_kick(m);
    return NULL;
}

int sbx_templates_start(sbx_mgr_t *m, err_t *err)
{
    /* The names are known before the first request: a create of one of them waits for its
     * import, any other create never does. */
    json_t *names _cleanup_json_ = scan(m->cfg.templates_dir);
    json_object_update(m->tpl_pending, names);
    m->tpl_importing = true;
    if (pthread_create(&m->tpl_import, NULL, import_main, m) != 0) {
        m->tpl_importing = false;
        return err_sys(err, "start the template import");
    }
    m->tpl_import_started = true;
    return sbx_pool_start(m, err);
}

void sbx_templates_stop(sbx_mgr_t *m)
{
    if (m->tpl_import_started) {
        pthread_join(m->tpl_import, NULL);
        m->tpl_import_started = false;
    }
    sbx_pool_stop(m);
}
