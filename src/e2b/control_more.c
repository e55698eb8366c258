/* E2B's control plane, the rest: fork, snapshots, metrics, the API's health. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/id.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "e2b_internal.h"

#define FORK_MAX 16 /* forks one request may ask for */

int e2b_h_api_health(api_req_t *r, err_t *err)
{
    api_reply_json(r, 200, json_pack("{s:s}", "message", "Health check successful"));
    return 0;
}

/* The route's box. */
static int route_box(api_req_t *r, struct e2b_box *b, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    return e2b_box_get(r, id, b, err);
}

/* One fork of b: our fork (memory included), then its E2B row; a result object either way. */
static json_t *fork_one(api_req_t *r, struct e2b_box *b, int64_t timeout)
{
    err_t err = {0};
    char e2b_id[E2B_ID_LEN + 1], label[32];
    e2b_new_id(e2b_id);
    snprintf(label, sizeof(label), "e2b-%s", e2b_id);
    json_t *child _cleanup_json_ = NULL;
    struct e2b_box cb;
    int rc = sbx_fork(r->api->sbx, &r->user, b->rec.sandbox_id, label, NULL, &child, &err);
    const char *sid = rc == 0 ? json_string_value(json_object_get(child, "id")) : NULL;
    if (rc == 0 && (e2b_adopt(r, sid, e2b_id, b->rec.template_id, b->rec.metadata, b->rec.env,
                              b->rec.access_token[0] != '\0', b->rec.public_traffic, timeout,
                              b->life.action == SBX_END_HIBERNATE, b->life.auto_wake, &err) < 0 ||
                    e2b_box_get(r, e2b_id, &cb, &err) < 0)) {
        json_t *none = NULL;
        sbx_delete(r->api->sbx, &r->user, sid, &none, NULL);
        json_decref(none);
        store_e2b_delete(r->api->store, e2b_id, NULL);
        rc = -1;
    }
    if (rc < 0)
        return json_pack("{s:{s:i, s:s}}", "error", "code", (int)api_status_for(err.kind),
                         "message", err.msg);
    json_t *out = json_pack("{s:o}", "sandbox", e2b_sandbox_json(r, &cb));
    e2b_box_clear(&cb);
    return out;
}

int e2b_h_fork(api_req_t *r, err_t *err)
{
    json_t *body _cleanup_json_ = NULL;
    struct e2b_box b;
    if (api_body_object(r, true, &body, err) < 0)
        return -1;
    json_t *t = json_object_get(body, "timeout"), *c = json_object_get(body, "count");
    if ((t && !json_is_null(t) &&
         (!json_is_integer(t) || json_integer_value(t) < 0 ||
          json_integer_value(t) > E2B_MAX_TIMEOUT)) ||
        (c && !json_is_null(c) &&
         (!json_is_integer(c) || json_integer_value(c) < 1 || json_integer_value(c) > FORK_MAX)))
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "timeout must be 0-%d seconds and count 1-%d", E2B_MAX_TIMEOUT, FORK_MAX);
    if (route_box(r, &b, err) < 0)
        return -1;
    if (!e2b_state_running(&b.life)) {
        e2b_box_clear(&b);
        return err_set(err, ERR_CONFLICT, 0, "sandbox_paused", "only a running sandbox forks");
    }
    int64_t timeout = json_is_integer(t) ? json_integer_value(t) : 15;
    int64_t count = json_is_integer(c) ? json_integer_value(c) : 1;
    json_t *results = json_array();
    for (int64_t i = 0; i < count; i++)
        json_array_append_new(results, fork_one(r, &b, timeout));
    e2b_box_clear(&b);
    api_reply_json(r, 201, results);
    return 0;
}

/* ---- snapshots: ours, named; E2B's snapshotID is the name (a templateID for create) ---- */

static json_t *snapshot_info(const char *name)
{
    return json_pack("{s:s, s:[s]}", "snapshotID", name, "names", name);
}

int e2b_h_snapshot_create(api_req_t *r, err_t *err)
{
    json_t *body _cleanup_json_ = NULL;
    struct e2b_box b;
    if (api_body_object(r, true, &body, err) < 0)
        return -1;
    json_t *n = json_object_get(body, "name");
    if (n && !json_is_null(n) && !json_is_string(n))
        return err_set(err, ERR_INVALID, 0, "invalid_field", "name must be a string");
    char name[129];
    if (json_is_string(n)) {
        snprintf(name, sizeof(name), "%s", json_string_value(n));
    } else {
        memcpy(name, "snapshot-", 9);
        e2b_new_id(name + 9);
    }
    if (route_box(r, &b, err) < 0)
        return -1;
    json_t *out = NULL;
    int rc = sbx_snapshot_create(r->api->sbx, &r->user, b.rec.sandbox_id, name, &out, err);
    json_decref(out);
    e2b_box_clear(&b);
    if (rc < 0)
        return -1;
    api_reply_json(r, 201, snapshot_info(name));
    return 0;
}

int e2b_h_snapshot_list(api_req_t *r, err_t *err)
{
    const char *sandbox = api_query(r, "sandboxID"), *name = api_query(r, "name");
    char source[65] = "";
    if (sandbox) { /* the E2B id names one of ours */
        struct e2b_box b;
        if (e2b_box_get(r, sandbox, &b, NULL) == 0) {
            snprintf(source, sizeof(source), "%s", b.rec.sandbox_id);
            e2b_box_clear(&b);
        } else {
            snprintf(source, sizeof(source), "-");
        }
    }
    json_t *list _cleanup_json_ = NULL;
    if (sbx_snapshot_list(r->api->sbx, &r->user, &list, err) < 0)
        return -1;
    json_t *arr = json_array(), *s;
    size_t i;
    json_array_foreach(list, i, s)
    {
        const char *sn = json_string_value(json_object_get(s, "name"));
        const char *src = json_string_value(json_object_get(s, "source_id"));
        if (!sn || sn[0] == '.' || (source[0] && (!src || strcmp(src, source) != 0)) ||
            (name && strcmp(name, sn) != 0))
            continue;
        json_array_append_new(arr, snapshot_info(sn));
    }
    api_reply_json(r, 200, arr);
    return 0;
}

int e2b_h_snapshot_delete(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    if (sbx_snapshot_delete(r->api->sbx, &r->user, id, err) < 0)
        return -1;
    e2b_reply_none(r);
    return 0;
}

/* ---- metrics ---------------------------------------------------------------------------- */

static int64_t member(json_t *j, const char *a, const char *b)
{
    return json_integer_value(json_object_get(json_object_get(j, a), b));
}

/* A SandboxMetric of b now; CPU use is the average since it started. */
static json_t *metric(api_req_t *r, struct e2b_box *b)
{
    json_t *st _cleanup_json_ = NULL;
    err_t err = {0};
    if (sbx_stats(r->api->sbx, &b->owner, b->rec.sandbox_id, &st, &err) < 0)
        return NULL;
    double now = now_unix(), up = now - b->life.created_at;
    double cpu = json_number_value(json_object_get(json_object_get(st, "cpu"), "usage_seconds"));
    int cpus = (int)fmax(1, ceil(b->life.cpus));
    double pct = up > 0 ? fmin(100.0, 100.0 * cpu / up / cpus) : 0;
    int64_t mem_total = member(st, "memory", "limit_bytes");
    return json_pack("{s:o, s:I, s:i, s:f, s:I, s:I, s:i, s:I, s:I}", "timestamp",
                     e2b_time_json(now), "timestampUnix", (json_int_t)now, "cpuCount", cpus,
                     "cpuUsedPct", pct, "memUsed", (json_int_t)member(st, "memory", "usage_bytes"),
                     "memTotal", (json_int_t)(mem_total > 0 ? mem_total : (int64_t)b->life.memory),
                     "memCache", 0, "diskUsed", (json_int_t)member(st, "disk", "used_bytes"),
                     "diskTotal", (json_int_t)b->life.disk);
}

int e2b_h_metrics(api_req_t *r, err_t *err)
{
    struct e2b_box b;
    if (route_box(r, &b, err) < 0)
        return -1;
    json_t *arr = json_array(), *m = metric(r, &b);
    if (m)
        json_array_append_new(arr, m);
    e2b_box_clear(&b);
    api_reply_json(r, 200, arr);
    return 0;
}

int e2b_h_metrics_many(api_req_t *r, err_t *err)
{
    const char *ids = api_query(r, "sandbox_ids");
    json_t *out = json_object();
    _cleanup_free_ char *copy = xstrdup(ids ? ids : "");
    char *save = NULL;
    int n = 0;
    for (char *id = strtok_r(copy, ",", &save); id && n < 100; id = strtok_r(NULL, ",", &save)) {
        struct e2b_box b;
        json_t *m;
        n++;
        if (e2b_box_get(r, id, &b, NULL) < 0)
            continue;
        if ((m = metric(r, &b)))
            json_object_set_new(out, b.rec.e2b_id, m);
        e2b_box_clear(&b);
    }
    api_reply_json(r, 200, json_pack("{s:o}", "sandboxes", out));
    return 0;
}
