/*
 * Per-user limits (quotas). An admin sets them per user (POST /auth/users/{name}/limits, or
 * with the user's token); what is not set comes from the daemon's --user-max-* options.
 * Admins are held to none of them. Two kinds:
 *
 *   - the size of one sandbox (max_cpus, max_memory, max_pids, max_disk): a create, fork or
 *     snapshot start asking more is refused with 403 limit_exceeded;
 *   - what a user holds and makes (max_running, max_sandboxes, max_creates_per_minute):
 *     counted from the store when a new row is about to be inserted (create, fork, snapshot
 *     start) or a hibernated sandbox wakes; past them 429 quota_exceeded / rate_limited.
 *
 * The count and the insert happen under one lock, so concurrent creates cannot both take
 * the last place. Every sandbox, whoever asks, must also fit the host (sbx_check_host_size).
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "sandbox_internal.h"

#define RATE_WINDOW_S 60.0

static pthread_mutex_t quota_lock = PTHREAD_MUTEX_INITIALIZER;

int sbx_check_host_size(double cpus, uint64_t memory, err_t *err)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t mem = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    if (ncpu > 0 && cpus > (double)ncpu)
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "field 'cpus' (%g) is more than this host has (%ld CPUs)", cpus, ncpu);
    if (mem > 0 && memory > mem)
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "field 'memory' (%llu MiB) is more than this host has (%llu MiB)",
                       (unsigned long long)(memory >> 20), (unsigned long long)(mem >> 20));
    return 0;
}

/* An admin, known by the caller's record or (a user made up from an owner id) the store. */
static bool is_admin(sbx_mgr_t *m, const user_t *u)
{
    user_t row;
    if (u->is_admin)
        return true;
    return store_user_get_by_id(m->store, u->id, &row, NULL) == 0 && row.is_admin;
}

void sbx_user_limits(sbx_mgr_t *m, const user_t *u, user_limits_t *eff)
{
    store_limits_unset(eff);
    if (is_admin(m, u))
        return;
    user_limits_t set;
    if (store_user_limits_get(m->store, u->id, &set, NULL) < 0)
        store_limits_unset(&set);
    const user_limits_t *d = &m->cfg.user_limits;
    eff->max_running = set.max_running >= 0 ? set.max_running : d->max_running;
    eff->max_sandboxes = set.max_sandboxes >= 0 ? set.max_sandboxes : d->max_sandboxes;
    eff->max_cpus = set.max_cpus >= 0 ? set.max_cpus : d->max_cpus;
    eff->max_memory = set.max_memory >= 0 ? set.max_memory : d->max_memory;
    eff->max_pids = set.max_pids >= 0 ? set.max_pids : d->max_pids;
    eff->max_disk = set.max_disk >= 0 ? set.max_disk : d->max_disk;
    eff->max_creates_per_minute =
        set.max_creates_per_minute >= 0 ? set.max_creates_per_minute : d->max_creates_per_minute;
}

int sbx_limits_check_size(const user_limits_t *l, double cpus, uint64_t memory, int64_t pids,
                          uint64_t disk, err_t *err)
{
    const char *fix = "ask for less, or have an admin raise the limit";
    if (l->max_cpus >= 0 && cpus > l->max_cpus)
        return err_set(err, ERR_FORBIDDEN, 0, "limit_exceeded",
                       "cpus %g is over your limit max_cpus (%g); %s", cpus, l->max_cpus, fix);
    if (l->max_memory >= 0 && memory > (uint64_t)l->max_memory)
        return err_set(err, ERR_FORBIDDEN, 0, "limit_exceeded",
                       "memory %llu MiB is over your limit max_memory (%llu MiB); %s",
                       (unsigned long long)(memory >> 20),
                       (unsigned long long)(l->max_memory >> 20), fix);
    if (l->max_pids >= 0 && pids > l->max_pids)
        return err_set(err, ERR_FORBIDDEN, 0, "limit_exceeded",
                       "pids %lld is over your limit max_pids (%lld); %s", (long long)pids,
                       (long long)l->max_pids, fix);
    if (l->max_disk >= 0 && disk > (uint64_t)l->max_disk)
        return err_set(err, ERR_FORBIDDEN, 0, "limit_exceeded",
                       "disk %llu MiB is over your limit max_disk (%llu MiB); %s",
                       (unsigned long long)(disk >> 20), (unsigned long long)(l->max_disk >> 20),
                       fix);
    return 0;
}

int sbx_limits_check_counts(const user_limits_t *l, const user_usage_t *u, bool new_row, err_t *err)
{
    if (new_row && l->max_sandboxes >= 0 && u->sandboxes >= l->max_sandboxes)
        return err_set(err, ERR_LIMIT, 0, "quota_exceeded",
                       "your limit max_sandboxes (%lld sandboxes not deleted) is reached; "
                       "delete one first",
                       (long long)l->max_sandboxes);
    if (l->max_running >= 0 && u->running >= l->max_running)
        return err_set(err, ERR_LIMIT, 0, "quota_exceeded",
                       "your limit max_running (%lld sandboxes running at once) is reached; "
                       "hibernate or delete one first",
                       (long long)l->max_running);
    if (new_row && l->max_creates_per_minute >= 0 &&
        u->created_recently >= l->max_creates_per_minute)
        return err_set(err, ERR_LIMIT, 0, "rate_limited",
                       "your limit max_creates_per_minute (%lld creates, forks and snapshot "
                       "starts a minute) is reached; try again in a minute",
                       (long long)l->max_creates_per_minute);
    return 0;
}

/* cpus, memory, pids and disk of a spec's resources against l. */
static int check_spec(const user_limits_t *l, const json_t *spec, err_t *err)
{
    json_t *res = json_object_get(spec, "resources");
    return sbx_limits_check_size(l, json_number_value(json_object_get(res, "cpus")),
                                 (uint64_t)json_integer_value(json_object_get(res, "memory")),
                                 json_integer_value(json_object_get(res, "pids")),
                                 sbx_spec_disk(spec), err);
}

int sbx_quota_check_request(sbx_mgr_t *m, const user_t *owner, const struct sbx_create_req *q,
                            err_t *err)
{
    if (q->snapshot) /* the snapshot's own resources are checked when its row is made */
        return 0;
    user_limits_t l;
    sbx_user_limits(m, owner, &l);
    return sbx_limits_check_size(&l, q->cpus > 0 ? q->cpus : m->cfg.default_cpus,
                                 q->memory ? q->memory : m->cfg.default_memory,
                                 q->pids > 0 ? q->pids : m->cfg.default_pids, q->disk, err);
}

int sbx_quota_insert(sbx_mgr_t *m, const user_t *owner, sandbox_rec_t *r, bool fresh, err_t *err)
{
    user_limits_t l;
    sbx_user_limits(m, owner, &l);
    json_t *res = json_object_get(r->spec, "resources");
    /* A user bounded in disk gets that bound where none was asked for and the host can. */
    if (fresh && l.max_disk >= 0 && sbx_spec_disk(r->spec) == 0 && m->quota != STORAGE_QUOTA_NONE &&
        json_is_object(res))
        json_object_set_new(res, "disk", json_integer((json_int_t)l.max_disk));
    if (check_spec(&l, r->spec, err) < 0)
        return -1;
    pthread_mutex_lock(&quota_lock);
    user_usage_t u;
    int rc = store_user_usage(m->store, owner->id, now_unix() - RATE_WINDOW_S, &u, err);
    if (rc == 0)
        rc = sbx_limits_check_counts(&l, &u, true, err);
    if (rc == 0)
        rc = store_sandbox_insert(m->store, r, err);
    pthread_mutex_unlock(&quota_lock);
    return rc;
}

int sbx_quota_check_wake(sbx_mgr_t *m, int64_t owner_id, err_t *err)
{
    user_t owner = {.id = owner_id};
    user_limits_t l;
    sbx_user_limits(m, &owner, &l);
    if (l.max_running < 0)
        return 0;
    pthread_mutex_lock(&quota_lock);
    user_usage_t u;
    int rc = store_user_usage(m->store, owner_id, now_unix() - RATE_WINDOW_S, &u, err);
    if (rc == 0)
        rc = sbx_limits_check_counts(&l, &u, false, err);
    pthread_mutex_unlock(&quota_lock);
    return rc;
}

/* ---- limits as JSON ---- */

static json_t *int_or_null(int64_t v)
{
    return v >= 0 ? json_integer((json_int_t)v) : json_null();
}

json_t *sbx_limits_json(const user_limits_t *l)
{
    json_t *j = json_object();
    json_object_set_new(j, "max_running", int_or_null(l->max_running));
    json_object_set_new(j, "max_sandboxes", int_or_null(l->max_sandboxes));
    json_object_set_new(j, "max_cpus", l->max_cpus >= 0 ? json_real(l->max_cpus) : json_null());
    json_object_set_new(j, "max_memory", int_or_null(l->max_memory));
    json_object_set_new(j, "max_pids", int_or_null(l->max_pids));
    json_object_set_new(j, "max_disk", int_or_null(l->max_disk));
    json_object_set_new(j, "max_creates_per_minute", int_or_null(l->max_creates_per_minute));
    return j;
}

enum limit_kind { LIMIT_COUNT, LIMIT_CPUS, LIMIT_SIZE };

/* One field of a limits body: its name, kind, bounds and place. */
static const struct limit_field {
    const char *name;
    enum limit_kind kind;
    double min, max;
    size_t offset;
} limit_fields[] = {
    {"max_running", LIMIT_COUNT, 0, 1e6, offsetof(user_limits_t, max_running)},
    {"max_sandboxes", LIMIT_COUNT, 0, 1e6, offsetof(user_limits_t, max_sandboxes)},
    {"max_cpus", LIMIT_CPUS, 0.01, 4096, offsetof(user_limits_t, max_cpus)},
    {"max_memory", LIMIT_SIZE, 6 << 20, (double)(1ull << 50), offsetof(user_limits_t, max_memory)},
    {"max_pids", LIMIT_COUNT, 16, 1 << 22, offsetof(user_limits_t, max_pids)},
    {"max_disk", LIMIT_SIZE, 1 << 20, (double)(1ull << 50), offsetof(user_limits_t, max_disk)},
    {"max_creates_per_minute", LIMIT_COUNT, 0, 1e6,
     offsetof(user_limits_t, max_creates_per_minute)},
};

/* The number v says for field f (a size may be a string like "4G"); false if it is not one. */
static bool limit_value(const struct limit_field *f, json_t *v, double *out)
{
    uint64_t n;
    if (f->kind == LIMIT_SIZE && json_is_string(v) && parse_size(json_string_value(v), &n)) {
        *out = (double)n;
        return true;
    }
    if (f->kind == LIMIT_CPUS ? !json_is_number(v) : !json_is_integer(v))
        return false;
    *out = json_number_value(v);
    return true;
}

static int set_field(const struct limit_field *f, json_t *v, user_limits_t *l, err_t *err)
{
    char *dst = (char *)l + f->offset;
    double d = -1;
    if (!json_is_null(v) && (!limit_value(f, v, &d) || d < f->min || d > f->max))
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "field '%s' must be null (the daemon's default) or %s from %g to %g",
                       f->name,
                       f->kind == LIMIT_SIZE   ? "a size (bytes, or like \"4G\")"
                       : f->kind == LIMIT_CPUS ? "a number"
                                               : "an integer",
                       f->min, f->max);
    if (f->kind == LIMIT_CPUS)
        *(double *)dst = d;
    else
        *(int64_t *)dst = (int64_t)d;
    return 0;
}

int sbx_limits_parse(json_t *body, user_limits_t *l, err_t *err)
{
    if (!json_is_object(body))
        return err_set(err, ERR_INVALID, 0, "invalid_field", "limits must be a JSON object");
    user_limits_t next = *l;
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
    {
        const struct limit_field *f = NULL;
        for (size_t i = 0; i < ARRAY_SIZE(limit_fields) && !f; i++)
            if (strcmp(limit_fields[i].name, k) == 0)
                f = &limit_fields[i];
        if (!f)
            return err_set(err, ERR_INVALID, 0, "unknown_field", "unknown limit '%.64s'", k);
        if (set_field(f, v, &next, err) < 0)
            return -1;
    }
    *l = next;
    return 0;
}
