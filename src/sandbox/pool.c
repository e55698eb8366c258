/*
 * Warm pools. A template with pool N > 0 keeps N sandboxes ready to hand out: its sandbox is
 * started once from its image (and, when the image exposes a port, until that port listens:
 * the code interpreter's kernel is then up), snapshotted with its memory, and deleted; every
 * pooled sandbox is that snapshot restored (with user namespaces: started from the image in
 * the same way, see fills_from_image), left running idle (never hibernated: its
 * idle_timeout is 0). A create from the template takes one: its record is given to the caller
 * (owner, label, created_at) and answered at once; its network rules follow the new owner a
 * moment later on a thread of their own (until then it reaches no other sandbox: each pooled
 * sandbox has an owner mark of its own). This thread restores a new one behind it, a second
 * after the last claim, so that the caller's first commands do not share the CPU with a
 * restore. A pooled sandbox whose container ended while it waited is deleted (by the next
 * round, or by the claim that finds it), never handed out.
 *
 * Pooled sandboxes and warm snapshots belong to a hidden user ".pool" (no API user can have a
 * name starting with '.'), so nobody sees them before they are handed over. Their label
 * "pool:<template id>:<image digest>" lets a restarted daemon adopt the paused ones; anything
 * else of that user is deleted at start.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "net/net.h"
#include "sandbox_internal.h"
#include "template.h"

#define POOL_USER      ".pool"
#define POOL_TOTAL_MAX 32   /* pooled sandboxes of all templates together */
#define READY_WAIT_S   120  /* how long a template's first sandbox may take to listen */
#define RETRY_S        30   /* after a failure, the template waits this long */
#define CLAIM_QUIET_MS 1000 /* refills wait this long after a claim */

struct pool_entry {
    char id[65];
    char tpl[33];
    char digest[16]; /* the first hex digits of the image digest it was made from */
    struct pool_entry *next;
};

struct sbx_pool {
    pthread_t thread;
    bool running, stop, kicked;
    double last_claim;    /* monotonic ms */
    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t cond;
    struct pool_entry *ready;
    user_t owner;    /* the hidden user */
    json_t *errors;  /* template id → {"error", "at"} of its last failure */
    json_t *filling; /* template id → true while one of its sandboxes is being made */
};

/* The short form of a template's image digest its pool's sandboxes are tagged with. */
static void short_digest(const template_rec_t *t, char out[16])
{
    const char *d = json_string_value(json_object_get(t->info, "digest"));
    snprintf(out, 16, "%.12s", d && strlen(d) > 7 ? d + 7 : "none");
}

static void snapshot_name(const template_rec_t *t, char *out, size_t size)
{
    char d[16];
    short_digest(t, d);
    snprintf(out, size, ".pool-%s-%s", t->id, d);
}

static size_t count_ready(struct sbx_pool *p, const char *tpl, size_t *total)
{
    size_t n = 0;
    *total = 0;
    for (struct pool_entry *e = p->ready; e; e = e->next) {
        (*total)++;
        n += strcmp(e->tpl, tpl) == 0;
    }
    return n;
}

/* Take the first entry of tpl (any, when tpl is NULL) made from digest (any when NULL). */
static struct pool_entry *take(struct sbx_pool *p, const char *tpl, const char *digest, bool same)
{
    for (struct pool_entry **pp = &p->ready; *pp; pp = &(*pp)->next) {
        struct pool_entry *e = *pp;
        bool match = (!tpl || strcmp(e->tpl, tpl) == 0) &&
                     (!digest || (strcmp(e->digest, digest) == 0) == same);
        if (match) {
            *pp = e->next;
            return e;
        }
    }
    return NULL;
}

/* Take the entry of sandbox id, if it is still in the pool. */
static struct pool_entry *take_id(struct sbx_pool *p, const char *id)
{
    for (struct pool_entry **pp = &p->ready; *pp; pp = &(*pp)->next) {
        struct pool_entry *e = *pp;
        if (strcmp(e->id, id) == 0) {
            *pp = e->next;
            return e;
        }
    }
    return NULL;
}

/* Whether a pooled sandbox still runs: while it waits its container can end (a crash, the
 * OOM killer, a kill from the host), and an ended one is no warm sandbox to hand out. */
static bool still_running(sbx_mgr_t *m, const char *id)
{
    sandbox_rec_t r;
    if (store_sandbox_get(m->store, m->pool->owner.id, id, &r, NULL) < 0)
        return false;
    bool up = r.status == SBX_RUNNING;
    store_sandbox_rec_clear(&r);
    return up;
}

/* Take the first entry whose sandbox no longer runs (the store is asked without the lock). */
static struct pool_entry *take_stopped(sbx_mgr_t *m)
{
    struct sbx_pool *p = m->pool;
    char ids[POOL_TOTAL_MAX][65];
    size_t n = 0;
    pthread_mutex_lock(&p->lock);
    for (struct pool_entry *e = p->ready; e && n < POOL_TOTAL_MAX; e = e->next)
        snprintf(ids[n++], sizeof(ids[0]), "%s", e->id);
    pthread_mutex_unlock(&p->lock);
    for (size_t i = 0; i < n; i++) {
        if (still_running(m, ids[i]))
            continue;
        pthread_mutex_lock(&p->lock);
        struct pool_entry *e = take_id(p, ids[i]);
        pthread_mutex_unlock(&p->lock);
        if (e)
            return e;
    }
    return NULL;
}

static void delete_quietly(sbx_mgr_t *m, const char *id)
{
    json_t *out = NULL;
    err_t err = {0};
    if (sbx_delete(m, &m->pool->owner, id, &out, &err) < 0)
        log_warn("pool.delete_failed", "sandbox=%s msg=\"%s\"", id, err.msg);
    json_decref(out);
}

static void note_error(sbx_mgr_t *m, const template_rec_t *t, const err_t *err)
{
    struct sbx_pool *p = m->pool;
    log_warn("pool.fill_failed", "template=%s code=%s msg=\"%s\"", t->name, err->code, err->msg);
    pthread_mutex_lock(&p->lock);
    json_object_set_new(p->errors, t->id,
                        json_pack("{s:s, s:f}", "error", err->msg, "at", now_unix()));
    pthread_mutex_unlock(&p->lock);
}

/* ---- the warm snapshot ---- */

/* The port the image says it serves ("49999/tcp" → 49999), or 0. */
static int exposed_port(sbx_mgr_t *m, const template_rec_t *t)
{
    image_t *img = NULL;
    if (image_get(m->images, t->image, &img, NULL) < 0)
        return 0;
    int port = 0;
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(img->config, "ExposedPorts"), k, v)
    {
        if (!port)
            port = atoi(k);
    }
    image_free(img);
    return port;
}

static bool wait_listening(sbx_mgr_t *m, const char *id, int port)
{
    double until = now_mono_ms() + READY_WAIT_S * 1000.0;
    while (now_mono_ms() < until && !m->pool->stop) {
        if (sbx_listening_port(m, &m->pool->owner, id) == port)
            return true;
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return false;
}

/* Start t's sandbox from its image (labelled label), wait until it serves. Its idle_timeout is
 * 0 (a restore from its snapshot keeps that); a claim gives it the daemon's default. */
static int start_from_image(sbx_mgr_t *m, const template_rec_t *t, const char *label, json_t **out,
                            err_t *err)
{
    struct sbx_create_req q = {.image = t->image,
                               .interactive = -1,
                               .cpus = -1,
                               .pids = -1,
                               .is_public = -1,
                               .idle_timeout = 0, /* never hibernated while pooled */
                               .net_raw = -1,
                               .setuid = t->setuid ? 1 : 0,
                               .label = label};
    if (sbx_create(m, &m->pool->owner, &q, out, err) < 0)
        return -1;
    const char *id = json_string_value(json_object_get(*out, "id"));
    int port = exposed_port(m, t);
    if (port && !wait_listening(m, id, port)) {
        err_set(err, ERR_RUNTIME, 0, "template_not_ready",
                "the template's sandbox did not listen on port %d within %d s", port, READY_WAIT_S);
        delete_quietly(m, id);
        return -1;
    }
    return 0;
}

/* Start t's sandbox from its image, wait until it serves, snapshot it, delete it. */
static int make_snapshot(sbx_mgr_t *m, const template_rec_t *t, const char *name, err_t *err)
{
    json_t *j _cleanup_json_ = NULL;
    double t0 = now_mono_ms();
    if (start_from_image(m, t, "pool-source", &j, err) < 0)
        return -1;
    char id[65];
    snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(j, "id")));
    json_t *snap _cleanup_json_ = NULL;
    int rc = sbx_snapshot_take(m, &m->pool->owner, id, name, &snap, err);
    delete_quietly(m, id);
    if (rc == 0)
        log_info("pool.snapshot", "template=%s snapshot=%s ms=%.0f", t->name, name,
                 now_mono_ms() - t0);
    return rc;
}

/* Remove t's warm snapshots except keep (NULL: all). */
static void drop_snapshots(sbx_mgr_t *m, const char *tpl_id, const char *keep)
{
    json_t *arr _cleanup_json_ = NULL;
    if (sbx_snapshot_list(m, &m->pool->owner, &arr, NULL) < 0)
        return;
    _cleanup_free_ char *prefix = xasprintf(".pool-%s-", tpl_id);
    size_t i;
    json_t *s;
    json_array_foreach(arr, i, s)
    {
        const char *name = json_string_value(json_object_get(s, "name"));
        if (name && strncmp(name, prefix, strlen(prefix)) == 0 && (!keep || strcmp(name, keep)))
            sbx_snapshot_delete(m, &m->pool->owner, name, NULL);
    }
}

/*
 * With user namespaces, each sandbox must get a range of its own, and a restore keeps the
 * range it was dumped with: sandboxes restored from one warm snapshot would share one range
 * across the owners that claim them. So the pool starts each from the image instead, and
 * waits until it serves, as make_snapshot does (more CPU per fill, in the background; a claim
 * is as fast: the sandbox runs already).
 */
static bool fills_from_image(sbx_mgr_t *m)
{
    return sbx_userns_for(m, runtime_find(m->cfg.runtime));
}

/* Remove warm snapshots whose template is gone or keeps no pool (live: template id → the
 * pool size wanted), unless one of its sandboxes is being made; all of them when the pool fills
 * from images (one a run without user namespaces made). */
static void gc_snapshots(sbx_mgr_t *m, json_t *live)
{
    bool from_image = fills_from_image(m);
    json_t *arr _cleanup_json_ = NULL;
    if (sbx_snapshot_list(m, &m->pool->owner, &arr, NULL) < 0)
        return;
    size_t i;
    json_t *s;
    json_array_foreach(arr, i, s)
    {
        const char *name = json_string_value(json_object_get(s, "name"));
        char tpl[33] = "";
        if (!name || sscanf(name, ".pool-%32[0-9a-f]-", tpl) != 1)
            continue;
        pthread_mutex_lock(&m->pool->lock);
        bool busy = json_object_get(m->pool->filling, tpl) != NULL;
        pthread_mutex_unlock(&m->pool->lock);
        if (!busy && (from_image || json_integer_value(json_object_get(live, tpl)) <= 0))
            sbx_snapshot_delete(m, &m->pool->owner, name, NULL);
    }
}

/* ---- filling ---- */

/* Start one pooled sandbox of t: restored from its warm snapshot, or from its image. */
static int fill_one(sbx_mgr_t *m, const template_rec_t *t, err_t *err)
{
    char name[128], digest[16];
    snapshot_name(t, name, sizeof(name));
    short_digest(t, digest);
    char label[96];
    snprintf(label, sizeof(label), "pool:%s:%s", t->id, digest);
    json_t *j _cleanup_json_ = NULL;
    if (fills_from_image(m)) { /* gc_snapshots removes a warm snapshot of an earlier run */
        if (start_from_image(m, t, label, &j, err) < 0)
            return -1;
    } else {
        snapshot_rec_t snap;
        if (store_snapshot_get(m->store, m->pool->owner.id, name, &snap, NULL) == 0) {
            store_snapshot_rec_clear(&snap);
        } else {
            drop_snapshots(m, t->id, NULL);
            if (make_snapshot(m, t, name, err) < 0)
                return -1;
        }
        if (sbx_snapshot_start(m, &m->pool->owner, name, label, NULL, &j, err) < 0)
            return -1;
    }
    const char *id = json_string_value(json_object_get(j, "id"));
    struct pool_entry *e = xcalloc(1, sizeof(*e));
    snprintf(e->id, sizeof(e->id), "%s", id);
    snprintf(e->tpl, sizeof(e->tpl), "%s", t->id);
    snprintf(e->digest, sizeof(e->digest), "%s", digest);
    pthread_mutex_lock(&m->pool->lock);
    e->next = m->pool->ready;
    m->pool->ready = e;
    pthread_mutex_unlock(&m->pool->lock);
    log_info("pool.filled", "template=%s sandbox=%s", t->name, id);
    return 0;
}

/* Whether t may be filled now: not after a recent failure. */
static bool may_fill(struct sbx_pool *p, const template_rec_t *t)
{
    json_t *e = json_object_get(p->errors, t->id);
    return !e || now_unix() - json_number_value(json_object_get(e, "at")) >= RETRY_S;
}

/* One round over the templates: drop what is stale or too many, add at most one sandbox.
 * true if there is more to do. */
static bool round_once(sbx_mgr_t *m)
{
    struct sbx_pool *p = m->pool;
    template_rec_t *items = NULL;
    size_t n = 0;
    if (store_template_list(m->store, -1, &items, &n, NULL) < 0)
        return false;
    json_t *live _cleanup_json_ = json_object(); /* template id → wanted size */
    const template_rec_t *todo = NULL;
    for (size_t i = 0; i < n; i++) {
        const template_rec_t *t = &items[i];
        int want = t->image[0] && !t->snapshot[0] ? t->pool : 0;
        json_object_set_new(live, t->id, json_integer(want));
        char digest[16];
        short_digest(t, digest);
        pthread_mutex_lock(&p->lock);
        struct pool_entry *stale = take(p, t->id, digest, false);
        size_t total, have = count_ready(p, t->id, &total);
        struct pool_entry *extra = have > (size_t)want ? take(p, t->id, NULL, true) : NULL;
        pthread_mutex_unlock(&p->lock);
        if (stale || extra) {
            delete_quietly(m, stale ? stale->id : extra->id);
            free(stale ? stale : extra);
            if (stale && extra) {
                pthread_mutex_lock(&p->lock);
                extra->next = p->ready, p->ready = extra;
                pthread_mutex_unlock(&p->lock);
            }
            store_template_list_free(items, n);
            return true;
        }
        if (!todo && have < (size_t)want && total < POOL_TOTAL_MAX && may_fill(p, t))
            todo = t;
    }
    /* entries of templates that are gone, then those whose sandbox stopped */
    pthread_mutex_lock(&p->lock);
    struct pool_entry *orphan = NULL;
    for (struct pool_entry *e = p->ready; e && !orphan; e = e->next)
        if (!json_object_get(live, e->tpl))
            orphan = take(p, e->tpl, NULL, true);
    pthread_mutex_unlock(&p->lock);
    if (!orphan && (orphan = take_stopped(m)))
        log_warn("pool.stopped", "sandbox=%s msg=\"it stopped while pooled: deleted\"", orphan->id);
    if (orphan) {
        delete_quietly(m, orphan->id);
        free(orphan);
        store_template_list_free(items, n);
        return true;
    }
    bool more = false;
    if (todo) {
        err_t err = {0};
        pthread_mutex_lock(&p->lock);
        json_object_set_new(p->filling, todo->id, json_true());
        pthread_mutex_unlock(&p->lock);
        if (fill_one(m, todo, &err) < 0)
            note_error(m, todo, &err);
        else
            more = true;
        pthread_mutex_lock(&p->lock);
        json_object_del(p->filling, todo->id);
        if (more)
            json_object_del(p->errors, todo->id);
        pthread_cond_broadcast(&p->cond); /* sbx_pool_drain may wait for this fill */
        pthread_mutex_unlock(&p->lock);
    } else {
        gc_snapshots(m, live);
    }
    store_template_list_free(items, n);
    return more;
}

/* At start: adopt the sandboxes a previous run pooled (still running); delete anything else. */
static void adopt(sbx_mgr_t *m)
{
    sandbox_rec_t *items = NULL;
    size_t n = 0;
    if (store_sandbox_list(m->store, m->pool->owner.id, &items, &n, NULL) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        sandbox_rec_t *r = &items[i];
        if (r->status == SBX_TERMINATED)
            continue;
        char tpl[33] = "", digest[16] = "";
        if (r->status == SBX_RUNNING &&
            sscanf(r->label, "pool:%32[0-9a-f]:%15[0-9a-z]", tpl, digest) == 2) {
            struct pool_entry *e = xcalloc(1, sizeof(*e));
            snprintf(e->id, sizeof(e->id), "%s", r->id);
            snprintf(e->tpl, sizeof(e->tpl), "%s", tpl);
            snprintf(e->digest, sizeof(e->digest), "%s", digest);
            e->next = m->pool->ready;
            m->pool->ready = e;
            continue;
        }
        delete_quietly(m, r->id);
    }
    store_sandbox_list_free(items, n);
}

static void *pool_main(void *arg)
{
    sbx_mgr_t *m = arg;
    struct sbx_pool *p = m->pool;
    adopt(m);
    pthread_mutex_lock(&p->lock);
    while (!p->stop) {
        p->kicked = false;
        pthread_mutex_unlock(&p->lock);
        bool more = !m->tpl_importing && round_once(m);
        pthread_mutex_lock(&p->lock);
        double quiet = p->last_claim + CLAIM_QUIET_MS - now_mono_ms();
        if ((more || p->kicked) && quiet <= 0)
            continue;
        if (p->stop)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ms = quiet > 0 ? (long)quiet + 1 : 2000;
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L)
            ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&p->cond, &p->lock, &ts);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int sbx_pool_user(sbx_mgr_t *m, user_t *out, err_t *err)
{
    if (store_user_get_by_name(m->store, POOL_USER, out, NULL) < 0 &&
        store_user_create(m->store, POOL_USER, false, out, err) < 0)
        return -1;
    m->pool_uid = out->id;
    return 0;
}

int sbx_pool_start(sbx_mgr_t *m, err_t *err)
{
    struct sbx_pool *p = xcalloc(1, sizeof(*p));
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->errors = json_object();
    p->filling = json_object();
    m->pool = p;
    if (sbx_pool_user(m, &p->owner, err) < 0)
        return -1;
    if (pthread_create(&p->thread, NULL, pool_main, m) != 0)
        return err_sys(err, "start the pool thread");
    p->running = true;
    return 0;
}

void sbx_pool_stop(sbx_mgr_t *m)
{
    struct sbx_pool *p = m->pool;
    if (!p)
        return;
    if (p->running) {
        pthread_mutex_lock(&p->lock);
        p->stop = true;
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);
        pthread_join(p->thread, NULL);
    }
    /* Pooled sandboxes go on running: the next start adopts them. */
    while (p->ready) {
        struct pool_entry *e = p->ready;
        p->ready = e->next;
        free(e);
    }
    json_decref(p->errors);
    json_decref(p->filling);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
    free(p);
    m->pool = NULL;
}

void sbx_pool_kick(sbx_mgr_t *m)
{
    struct sbx_pool *p = m->pool;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->kicked = true;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

void sbx_pool_drain(sbx_mgr_t *m, const char *template_id)
{
    struct sbx_pool *p = m->pool;
    if (!p)
        return;
    /* A fill of this template under way would add a sandbox, or make the warm snapshot
     * again, after the drain: wait for it (the template no longer wants a pool, so no
     * other fill of it starts). A fill is bounded by its restore's and READY_WAIT_S. */
    pthread_mutex_lock(&p->lock);
    while (p->running && json_object_get(p->filling, template_id))
        pthread_cond_wait(&p->cond, &p->lock);
    pthread_mutex_unlock(&p->lock);
    for (;;) {
        pthread_mutex_lock(&p->lock);
        struct pool_entry *e = take(p, template_id, NULL, true);
        pthread_mutex_unlock(&p->lock);
        if (!e)
            break;
        delete_quietly(m, e->id);
        free(e);
    }
    drop_snapshots(m, template_id, NULL);
}

json_t *sbx_pool_json(sbx_mgr_t *m, const template_rec_t *t)
{
    struct sbx_pool *p = m->pool;
    json_t *j = json_pack("{s:i, s:i, s:b}", "size", t->pool, "ready", 0, "filling", 0);
    if (!p)
        return j;
    pthread_mutex_lock(&p->lock);
    size_t total, ready = count_ready(p, t->id, &total);
    json_object_set_new(j, "ready", json_integer((json_int_t)ready));
    json_object_set_new(j, "filling", json_boolean(json_object_get(p->filling, t->id) != NULL));
    json_t *e = json_object_get(p->errors, t->id);
    json_object_set_new(j, "last_error",
                        e ? json_deep_copy(json_object_get(e, "error")) : json_null());
    pthread_mutex_unlock(&p->lock);
    return j;
}

/* Bring a handed-over sandbox's network rules to its new owner. */
struct rekey {
    sbx_mgr_t *m;
    user_t owner;
    char id[65];
};

static void *rekey_main(void *arg)
{
    struct rekey *k = arg;
    struct sbx_live *l = NULL;
    sandbox_rec_t r;
    err_t err = {0};
    /* Held like an exec's: a delete waits, so rules are never made for a sandbox gone. */
    if (sbx_use_begin(k->m, &k->owner, k->id, &l, &r, &err) == 0) {
        if (net_sandbox_set_owner(k->m->cfg.net, k->id, sbx_pool_net_owner(k->m, &r), &err) < 0)
            log_warn("pool.rekey_failed", "sandbox=%s msg=\"%s\"", k->id, err.msg);
        store_sandbox_rec_clear(&r);
        sbx_use_end(k->m, l);
    }
    free(k);
    return NULL;
}

static void rekey_later(sbx_mgr_t *m, const user_t *owner, const char *id)
{
    struct rekey *k = xcalloc(1, sizeof(*k));
    k->m = m;
    k->owner = *owner;
    snprintf(k->id, sizeof(k->id), "%s", id);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    if (pthread_create(&t, &attr, rekey_main, k) != 0)
        rekey_main(k); /* no thread: do it now */
    pthread_attr_destroy(&attr);
}

/* Give the pooled sandbox id to owner (its record; its rules follow). */
static int hand_over(sbx_mgr_t *m, const user_t *owner, const template_rec_t *t,
                     const struct sbx_create_req *q, const char *id, err_t *err)
{
    int rc = store_sandbox_hand_over(m->store, id, owner->id, q->label ? q->label : t->name,
                                     q->is_public == 1, now_unix(), err);
    json_t *name _cleanup_json_ = json_string(t->name);
    json_t *idle _cleanup_json_ = json_integer(-1); /* the daemon's default from now on */
    if (rc == 0)
        rc = store_sandbox_set_spec_field(m->store, id, "template", name, err);
    if (rc == 0)
        rc = store_sandbox_set_spec_field(m->store, id, "idle_timeout", idle, err);
    if (rc == 0)
        rekey_later(m, owner, id);
    return rc;
}

int64_t sbx_pool_net_owner(sbx_mgr_t *m, const sandbox_rec_t *r)
{
    if (m->pool_uid <= 0 || r->owner_id != m->pool_uid)
        return r->owner_id;
    /* An owner mark of its own (above any user id): it reaches no other sandbox. */
    unsigned v = 0;
    sscanf(r->id, "%7x", &v);
    return 0x80000000LL + v;
}

int sbx_pool_claim(sbx_mgr_t *m, const user_t *owner, const template_rec_t *t,
                   const struct sbx_create_req *q, json_t **out)
{
    struct sbx_pool *p = m->pool;
    if (!p || t->pool <= 0)
        return 1;
    char digest[16];
    short_digest(t, digest);
    struct pool_entry *e;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        e = take(p, t->id, digest, true);
        p->last_claim = now_mono_ms();
        pthread_mutex_unlock(&p->lock);
        if (!e || still_running(m, e->id))
            break;
        log_warn("pool.stopped", "sandbox=%s msg=\"it stopped while pooled: deleted\"", e->id);
        delete_quietly(m, e->id);
        free(e);
    }
    sbx_pool_kick(m);
    if (!e)
        return 1;
    err_t err = {0};
    double t0 = now_mono_ms();
    int rc = hand_over(m, owner, t, q, e->id, &err);
    if (rc == 0)
        rc = sbx_get(m, owner, e->id, out, &err);
    if (rc < 0) {
        log_warn("pool.claim_failed", "template=%s sandbox=%s msg=\"%s\"", t->name, e->id, err.msg);
        json_t *o = NULL;
        if (sbx_delete(m, owner, e->id, &o, NULL) < 0)
            delete_quietly(m, e->id);
        json_decref(o);
        free(e);
        return 1;
    }
    log_info("pool.claimed", "template=%s sandbox=%s user=%s ms=%.2f", t->name, e->id, owner->name,
             now_mono_ms() - t0);
    sbx_event(m, owner->id, e->id, "created",
              json_pack("{s:s, s:s, s:b}", "template", t->name, "image", t->image, "pooled", 1));
    free(e);
    return 0;
}
