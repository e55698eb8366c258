/*
 * E2B's control plane, the lifecycle routes: create, get, list, kill, timeout, connect,
 * pause. A sandbox made here is one of ours (created through sandbox.h, a template's warm
 * pool included) with a row of E2B's own: its E2B id, template, metadata, envVars, access
 * token. Its timeout is a deadline of the sandbox layer: at endAt the reaper kills it, or
 * with autoPause hibernates it (memory kept). connect and setTimeout move endAt as E2B
 * documents; nothing else does.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cleanup.h"
#include "common/id.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "e2b_internal.h"

#define DEFAULT_TIMEOUT 15 /* seconds, E2B's when a create names none */

/* ---- answers -------------------------------------------------------------------------- */

json_t *e2b_sandbox_json(api_req_t *r, const struct e2b_box *b)
{
    const char *domain = r->api->cfg.e2b_domain;
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s}", "templateID", b->rec.template_id,
                          "sandboxID", b->rec.e2b_id, "alias", b->rec.template_id, "clientID",
                          "sandboxer", "envdVersion", E2B_ENVD_VERSION);
    if (b->rec.access_token[0])
        json_object_set_new(j, "envdAccessToken", json_string(b->rec.access_token));
    json_object_set_new(j, "trafficAccessToken", json_null());
    json_object_set_new(j, "domain", domain ? json_string(domain) : json_null());
    return j;
}

static const char *state_of(const struct sbx_life *life)
{
    return e2b_state_paused(life) ? "paused" : "running";
}

/* The members ListedSandbox and SandboxDetail share. */
static json_t *listed_json(const struct e2b_box *b)
{
    const struct sbx_life *l = &b->life;
    double end = l->end_at > 0 ? l->end_at : b->rec.started_at;
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:i, s:I, s:I, s:O, s:s, s:s}",
                          "templateID", b->rec.template_id, "alias", b->rec.template_id,
                          "sandboxID", b->rec.e2b_id, "clientID", "sandboxer", "startedAt",
                          e2b_time_json(b->rec.started_at), "endAt", e2b_time_json(end), "cpuCount",
                          (int)fmax(1, ceil(l->cpus)), "memoryMB", (json_int_t)(l->memory >> 20),
                          "diskSizeMB", (json_int_t)(l->disk >> 20), "metadata", b->rec.metadata,
                          "state", state_of(l), "envdVersion", E2B_ENVD_VERSION);
    json_object_set_new(j, "volumeMounts", json_array());
    return j;
}

static json_t *detail_json(api_req_t *r, const struct e2b_box *b)
{
    json_t *j = listed_json(b);
    if (b->rec.access_token[0])
        json_object_set_new(j, "envdAccessToken", json_string(b->rec.access_token));
    const char *domain = r->api->cfg.e2b_domain;
    json_object_set_new(j, "domain", domain ? json_string(domain) : json_null());
    json_object_set_new(j, "allowInternetAccess", json_null());
    json_object_set_new(j, "lifecycle",
                        json_pack("{s:b, s:s}", "autoResume", b->life.auto_wake, "onTimeout",
                                  b->life.action == SBX_END_HIBERNATE ? "pause" : "kill"));
    json_object_set_new(j, "network",
                        json_pack("{s:b}", "allowPublicTraffic", b->rec.public_traffic));
    return j;
}

/* ---- create ---------------------------------------------------------------------------- */

/* A "timeout" member: 0-E2B_MAX_TIMEOUT seconds (absent: dflt). */
static int timeout_of(json_t *body, int64_t dflt, int64_t *out, err_t *err)
{
    json_t *t = json_object_get(body, "timeout");
    *out = dflt;
    if (!t || json_is_null(t))
        return 0;
    if (!json_is_integer(t) || json_integer_value(t) < 0)
        return err_set(err, ERR_INVALID, 0, "invalid_field", "timeout must be a number of seconds");
    if (json_integer_value(t) > E2B_MAX_TIMEOUT)
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "timeout cannot be greater than %d hours", E2B_MAX_TIMEOUT / 3600);
    *out = json_integer_value(t);
    return 0;
}

/* A boolean member (absent or null: dflt). */
static int bool_of(json_t *obj, const char *name, int dflt, int *out, err_t *err)
{
    json_t *v = json_object_get(obj, name);
    *out = dflt;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return err_set(err, ERR_INVALID, 0, "invalid_field", "%s must be a boolean", name);
    *out = json_is_true(v);
    return 0;
}

/* What an E2B create asks for, checked. */
struct create_req {
    const char *template_id;
    int64_t timeout;
    int auto_pause, auto_resume, secure, internet, public_traffic;
    json_t *metadata, *env;
};

/* The features E2B has and this server has not: refused rather than ignored. */
static int refuse_unsupported(json_t *body, err_t *err)
{
    json_t *net = json_object_get(body, "network");
    json_t *vm = json_object_get(body, "volumeMounts");
    json_t *mcp = json_object_get(body, "mcp");
    if (json_array_size(vm) > 0)
        return err_set(err, ERR_INVALID, 0, "unsupported", "volume mounts are not supported");
    if (mcp && !json_is_null(mcp))
        return err_set(err, ERR_INVALID, 0, "unsupported", "the MCP gateway is not supported");
    if (json_object_get(net, "allowOut") || json_object_get(net, "denyOut") ||
        json_object_get(net, "rules") || json_object_get(net, "egressProxy") ||
        json_object_get(net, "maskRequestHost"))
        return err_set(err, ERR_INVALID, 0, "unsupported",
                       "network rules are not supported: use allow_internet_access");
    return 0;
}

static int decode_create(json_t *body, struct create_req *q, err_t *err)
{
    json_t *tpl = json_object_get(body, "templateID");
    json_t *resume = json_object_get(body, "autoResume");
    if (!json_is_string(tpl) || !json_string_length(tpl) || json_string_length(tpl) > 128)
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       tpl ? "templateID must be a string of 1-128 characters"
                           : "templateID is required");
    q->template_id = json_string_value(tpl);
    if (refuse_unsupported(body, err) < 0 ||
        timeout_of(body, DEFAULT_TIMEOUT, &q->timeout, err) < 0 ||
        bool_of(body, "autoPause", 0, &q->auto_pause, err) < 0 ||
        bool_of(resume, "enabled", 0, &q->auto_resume, err) < 0 ||
        bool_of(body, "secure", 1, &q->secure, err) < 0 ||
        bool_of(body, "allow_internet_access", -1, &q->internet, err) < 0 ||
        bool_of(json_object_get(body, "network"), "allowPublicTraffic", 1, &q->public_traffic,
                err) < 0 ||
        e2b_string_map(body, "metadata", &q->metadata, err) < 0 ||
        e2b_string_map(body, "envVars", &q->env, err) < 0)
        return -1;
    if (q->auto_resume && !q->auto_pause)
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "autoResume can only be enabled with autoPause");
    return 0;
}

/* Our template for E2B's templateID: a tag (":default") dropped, E2B's alias of the code
 * interpreter ("code-interpreter-v1") is ours. */
static void template_name(const char *id, char *out, size_t size)
{
    snprintf(out, size, "%.*s", (int)strcspn(id, ":"), id);
    if (strcmp(out, "code-interpreter-v1") == 0)
        snprintf(out, size, "code-interpreter");
}

/* Start the sandbox: the template of that name, else the caller's snapshot of that name. */
static int start(api_req_t *r, const struct create_req *q, const char *label, json_t **out,
                 err_t *err)
{
    char name[129];
    template_name(q->template_id, name, sizeof(name));
    _cleanup_json_ json_t *body = json_pack("{s:s, s:s}", "template", name, "label", label);
    if (q->env && json_object_size(q->env))
        json_object_set(body, "env", q->env); /* a cold start: pools hold no one's env */
    if (q->internet >= 0)
        json_object_set_new(body, "network", json_string(q->internet ? "open" : "none"));
    struct sbx_create_req c;
    if (sbx_create_req_decode(body, &c, err) < 0)
        return -1;
    err_t terr = {0};
    if (sbx_create(r->api->sbx, &r->user, &c, out, &terr) == 0)
        return 0;
    if (strcmp(terr.code, "template_not_found") != 0) {
        *err = terr;
        return -1;
    }
    json_object_del(body, "template");
    json_object_set_new(body, "snapshot", json_string(q->template_id));
    if (sbx_create_req_decode(body, &c, err) < 0)
        return -1;
    if (sbx_create(r->api->sbx, &r->user, &c, out, err) == 0)
        return 0;
    if (err->kind == ERR_NOT_FOUND)
        err_set(err, ERR_NOT_FOUND, 0, "template_not_found", "template '%s' not found",
                q->template_id);
    return -1;
}

/* The E2B row and lifecycle of a sandbox just started as our sandbox_id. */
int e2b_adopt(api_req_t *r, const char *sandbox_id, const char *e2b_id, const char *template_id,
              json_t *metadata, json_t *env, bool secure, bool public_traffic, int64_t timeout,
              bool auto_pause, bool auto_resume, err_t *err)
{
    e2b_sandbox_rec_t rec = {.owner_id = r->user.id,
                             .metadata = metadata,
                             .env = env,
                             .public_traffic = public_traffic,
                             .started_at = now_unix()};
    snprintf(rec.e2b_id, sizeof(rec.e2b_id), "%s", e2b_id);
    snprintf(rec.sandbox_id, sizeof(rec.sandbox_id), "%s", sandbox_id);
    snprintf(rec.template_id, sizeof(rec.template_id), "%s", template_id);
    if (secure && !id_random_hex(rec.access_token, 24))
        return err_set(err, ERR_INTERNAL, 0, "internal", "no randomness for a token");
    enum sbx_end_action action = auto_pause ? SBX_END_HIBERNATE : SBX_END_DELETE;
    if (store_e2b_insert(r->api->store, &rec, err) < 0 ||
        sbx_set_deadline(r->api->sbx, &r->user, sandbox_id, rec.started_at + (double)timeout,
                         action, err) < 0 ||
        sbx_set_auto_wake(r->api->sbx, &r->user, sandbox_id, auto_resume, err) < 0)
        return -1;
    return 0;
}

int e2b_h_create(api_req_t *r, err_t *err)
{
    json_t *body _cleanup_json_ = NULL;
    struct create_req q = {0};
    if (api_body_object(r, false, &body, err) < 0 || decode_create(body, &q, err) < 0)
        return -1;
    char e2b_id[E2B_ID_LEN + 1], label[32];
    e2b_new_id(e2b_id);
    snprintf(label, sizeof(label), "e2b-%s", e2b_id);
    json_t *made _cleanup_json_ = NULL;
    if (start(r, &q, label, &made, err) < 0)
        return -1;
    const char *sid = json_string_value(json_object_get(made, "id"));
    json_t *none _cleanup_json_ = NULL;
    if (e2b_adopt(r, sid, e2b_id, q.template_id, q.metadata, q.env, q.secure, q.public_traffic,
                  q.timeout, q.auto_pause, q.auto_resume, err) < 0) {
        sbx_delete(r->api->sbx, &r->user, sid, &none, NULL);
        store_e2b_delete(r->api->store, e2b_id, NULL);
        return -1;
    }
    /* E2B hands a sandbox over once its template's start command serves (the code
       interpreter's port 49999): a client's first request must find it answering. */
    if (sbx_wait_serving(r->api->sbx, &r->user, sid, E2B_READY_WAIT_MS, err) < 0) {
        sbx_delete(r->api->sbx, &r->user, sid, &none, NULL);
        store_e2b_delete(r->api->store, e2b_id, NULL);
        return -1;
    }
    struct e2b_box b;
    if (e2b_box_get(r, e2b_id, &b, err) < 0)
        return -1;
    log_info("e2b.created", "sandbox=%s e2b_id=%s template=%s timeout=%lld", sid, e2b_id,
             q.template_id, (long long)q.timeout);
    api_reply_json(r, 201, e2b_sandbox_json(r, &b));
    e2b_box_clear(&b);
    return 0;
}

/* ---- one sandbox ----------------------------------------------------------------------- */

/* The box of the route's {id}. */
static int route_box(api_req_t *r, struct e2b_box *b, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    return e2b_box_get(r, id, b, err);
}

int e2b_h_get(api_req_t *r, err_t *err)
{
    struct e2b_box b;
    if (route_box(r, &b, err) < 0)
        return -1;
    api_reply_json(r, 200, detail_json(r, &b));
    e2b_box_clear(&b);
    return 0;
}

int e2b_h_kill(api_req_t *r, err_t *err)
{
    struct e2b_box b;
    json_t *out = NULL;
    if (route_box(r, &b, err) < 0)
        return -1;
    int rc = sbx_delete(r->api->sbx, &r->user, b.rec.sandbox_id, &out, err);
    json_decref(out);
    if (rc == 0) {
        store_e2b_delete(r->api->store, b.rec.e2b_id, NULL);
        e2b_reply_none(r);
    }
    e2b_box_clear(&b);
    return rc;
}

/* Move b's deadline to end_at, keeping its action. */
static int set_end(api_req_t *r, struct e2b_box *b, double end_at, err_t *err)
{
    return sbx_set_deadline(r->api->sbx, &r->user, b->rec.sandbox_id, end_at, b->life.action, err);
}

int e2b_h_timeout(api_req_t *r, err_t *err)
{
    json_t *body _cleanup_json_ = NULL;
    struct e2b_box b;
    int64_t t;
    if (api_body_object(r, false, &body, err) < 0 || timeout_of(body, -1, &t, err) < 0)
        return -1;
    if (t < 0)
        return err_set(err, ERR_INVALID, 0, "invalid_field", "timeout is required");
    if (route_box(r, &b, err) < 0)
        return -1;
    /* From now, shorter or longer: E2B's setTimeout overwrites the time to live. */
    int rc = set_end(r, &b, now_unix() + (double)t, err);
    if (rc == 0)
        e2b_reply_none(r);
    e2b_box_clear(&b);
    return rc;
}

int e2b_h_refresh(api_req_t *r, err_t *err)
{
    json_t *body _cleanup_json_ = NULL;
    struct e2b_box b;
    json_t *d = NULL;
    if (api_body_object(r, true, &body, err) < 0)
        return -1;
    d = json_object_get(body, "duration");
    if (d && (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) > 3600))
        return err_set(err, ERR_INVALID, 0, "invalid_field", "duration must be 0-3600 seconds");
    if (route_box(r, &b, err) < 0)
        return -1;
    double end = now_unix() + (double)(d ? json_integer_value(d) : DEFAULT_TIMEOUT);
    int rc = end > b.life.end_at ? set_end(r, &b, end, err) : 0;
    if (rc == 0)
        e2b_reply_none(r);
    e2b_box_clear(&b);
    return rc;
}

/* Bring a paused sandbox back (unfreeze, or restore its memory). */
static int resume(api_req_t *r, struct e2b_box *b, err_t *err)
{
    json_t *out = NULL;
    int rc = strcmp(b->life.status, "paused") == 0
                 ? sbx_pause(r->api->sbx, &r->user, b->rec.sandbox_id, false, &out, err)
                 : sbx_wake(r->api->sbx, &r->user, b->rec.sandbox_id, false, &out, err);
    json_decref(out);
    return rc;
}

int e2b_h_connect(api_req_t *r, err_t *err)
{
    json_t *body _cleanup_json_ = NULL;
    struct e2b_box b;
    int64_t t;
    if (api_body_object(r, true, &body, err) < 0 ||
        timeout_of(body, DEFAULT_TIMEOUT, &t, err) < 0 || route_box(r, &b, err) < 0)
        return -1;
    bool paused = e2b_state_paused(&b.life);
    double end = now_unix() + (double)t;
    /* Running: the time to live only grows. Paused: it resumes with the timeout from now. */
    int rc = paused ? resume(r, &b, err) : 0;
    if (rc == 0 && (paused || end > b.life.end_at))
        rc = set_end(r, &b, end, err);
    if (rc == 0)
        api_reply_json(r, paused ? 201 : 200, e2b_sandbox_json(r, &b));
    e2b_box_clear(&b);
    return rc;
}

int e2b_h_resume(api_req_t *r, err_t *err)
{
    json_t *body _cleanup_json_ = NULL;
    struct e2b_box b;
    int64_t t;
    if (api_body_object(r, true, &body, err) < 0 ||
        timeout_of(body, DEFAULT_TIMEOUT, &t, err) < 0 || route_box(r, &b, err) < 0)
        return -1;
    int rc = e2b_state_paused(&b.life)
                 ? resume(r, &b, err)
                 : err_set(err, ERR_CONFLICT, 0, "already_running", "the sandbox is running");
    if (rc == 0)
        rc = set_end(r, &b, now_unix() + (double)t, err);
    if (rc == 0)
        api_reply_json(r, 201, e2b_sandbox_json(r, &b));
    e2b_box_clear(&b);
    return rc;
}

int e2b_h_pause(api_req_t *r, err_t *err)
{
    struct e2b_box b;
    json_t *out = NULL;
    if (route_box(r, &b, err) < 0)
        return -1;
    int rc = strcmp(b.life.status, "hibernated") == 0
                 ? err_set(err, ERR_CONFLICT, 0, "already_paused", "the sandbox is paused")
                 : sbx_hibernate(r->api->sbx, &r->user, b.rec.sandbox_id, &out, err);
    json_decref(out);
    if (rc == 0)
        e2b_reply_none(r);
    e2b_box_clear(&b);
    return rc;
}

/* ---- lists ----------------------------------------------------------------------------- */

/* One percent-decoding of s in place (form encoding: '+' is a space). */
static void unescape(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        unsigned v;
        if (*p == '%' && sscanf(p + 1, "%2x", &v) == 1 && p[1] && p[2]) {
            *o++ = (char)v;
            p += 2;
        } else {
            *o++ = *p == '+' ? ' ' : *p;
        }
    }
    *o = '\0';
}

/* The ?metadata= filter ("k=v&k2=v2", its keys and values encoded once more) as an object. */
static json_t *metadata_filter(api_req_t *r)
{
    const char *q = api_query(r, "metadata");
    if (!q || !*q)
        return NULL;
    json_t *f = json_object();
    _cleanup_free_ char *copy = xstrdup(q);
    char *save = NULL;
    for (char *pair = strtok_r(copy, "&", &save); pair; pair = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(pair, '=');
        if (!eq)
            continue;
        *eq = '\0';
        char *k = pair, *v = eq + 1;
        unescape(k), unescape(k), unescape(v), unescape(v);
        json_object_set_new(f, k, json_string_lossy(v, strlen(v)));
    }
    return f;
}

static bool metadata_matches(const json_t *meta, json_t *filter)
{
    const char *k;
    json_t *v;
    json_object_foreach(filter, k, v)
    {
        const char *have = json_string_value(json_object_get(meta, k));
        if (!have || strcmp(have, json_string_value(v)) != 0)
            return false;
    }
    return true;
}

/* The caller's E2B sandboxes that still live (ended ones are forgotten on the way). */
static int live_boxes(api_req_t *r, struct e2b_box **out, size_t *n, err_t *err)
{
    e2b_sandbox_rec_t *rows = NULL;
    size_t count = 0;
    if (store_e2b_list(r->api->store, r->user.id, &rows, &count, err) < 0)
        return -1;
    struct e2b_box *boxes = xcalloc(count ? count : 1, sizeof(*boxes));
    size_t k = 0;
    for (size_t i = 0; i < count; i++)
        if (e2b_box_get(r, rows[i].e2b_id, &boxes[k], NULL) == 0)
            k++;
    store_e2b_list_free(rows, count);
    *out = boxes;
    *n = k;
    return 0;
}

static void free_boxes(struct e2b_box *boxes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        e2b_box_clear(&boxes[i]);
    free(boxes);
}

int e2b_h_list_v1(api_req_t *r, err_t *err)
{
    struct e2b_box *boxes;
    size_t n;
    _cleanup_json_ json_t *filter = metadata_filter(r);
    if (live_boxes(r, &boxes, &n, err) < 0)
        return -1;
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        if (e2b_state_running(&boxes[i].life) &&
            (!filter || metadata_matches(boxes[i].rec.metadata, filter)))
            json_array_append_new(arr, listed_json(&boxes[i]));
    free_boxes(boxes, n);
    api_reply_json(r, 200, arr);
    return 0;
}

/* The v2 list's query: filters, order and the page. */
struct list_query {
    json_t *metadata;
    bool running, paused, desc;
    double started_after;
    const char *template_id;
    long long limit;
    const char *next; /* "<started_at>:<e2b id>" of the last item of the page before */
};

static int list_query(api_req_t *r, struct list_query *q, err_t *err)
{
    const char *state = api_query(r, "state"), *order = api_query(r, "order");
    const char *after = api_query(r, "startedAfter"), *limit = api_query(r, "limit");
    *q = (struct list_query){.metadata = metadata_filter(r),
                             .running = !state || strstr(state, "running"),
                             .paused = !state || strstr(state, "paused"),
                             .desc = !order || strcmp(order, "asc") != 0,
                             .template_id = api_query(r, "template"),
                             .limit = 100,
                             .next = api_query(r, "nextToken")};
    if (limit && !parse_int(limit, 1, 100, &q->limit))
        return err_set(err, ERR_INVALID, 0, "invalid_query", "limit must be 1-100");
    struct tm tm = {0};
    if (after && *after) {
        if (!strptime(after, "%Y-%m-%dT%H:%M:%S", &tm))
            return err_set(err, ERR_INVALID, 0, "invalid_query", "startedAfter must be RFC 3339");
        q->started_after = (double)timegm(&tm);
    }
    return 0;
}

static bool wanted(const struct list_query *q, const struct e2b_box *b)
{
    bool paused = e2b_state_paused(&b->life);
    return (paused ? q->paused : q->running) && b->rec.started_at >= q->started_after &&
           (!q->metadata || metadata_matches(b->rec.metadata, q->metadata)) &&
           (!q->template_id || strcmp(q->template_id, b->rec.template_id) == 0);
}

/* Its start time in whole microseconds: what a cursor carries, compared exactly. */
static long long start_us(const struct e2b_box *b)
{
    return llround(b->rec.started_at * 1e6);
}

static char *cursor_of(const struct e2b_box *b)
{
    return xasprintf("%lld:%s", start_us(b), b->rec.e2b_id);
}

/* True if b comes after the cursor in the list's order (the cursor's own item need not
 * exist any more). */
static bool after_cursor(const struct e2b_box *b, const char *cursor, bool desc)
{
    char *end = NULL;
    long long t = strtoll(cursor, &end, 10), us = start_us(b);
    const char *id = end && *end == ':' ? end + 1 : "";
    int c = us < t ? -1 : us > t ? 1 : strcmp(b->rec.e2b_id, id);
    return desc ? c < 0 : c > 0;
}

int e2b_h_list_v2(api_req_t *r, err_t *err)
{
    struct list_query q;
    struct e2b_box *boxes;
    size_t n;
    if (list_query(r, &q, err) < 0 || live_boxes(r, &boxes, &n, err) < 0) {
        json_decref(q.metadata);
        return -1;
    }
    /* rows come oldest first: walk them in the order asked, from after the cursor */
    json_t *arr = json_array();
    char *last = NULL;
    const struct e2b_box *listed = NULL; /* the page's last item so far */
    for (size_t k = 0; k < n; k++) {
        const struct e2b_box *b = &boxes[q.desc ? n - 1 - k : k];
        if ((q.next && !after_cursor(b, q.next, q.desc)) || !wanted(&q, b))
            continue;
        if ((long long)json_array_size(arr) == q.limit) {
            /* one more exists: the page ends with a cursor after its last item */
            last = cursor_of(listed);
            break;
        }
        json_array_append_new(arr, listed_json(b));
        listed = b;
    }
    free_boxes(boxes, n);
    json_decref(q.metadata);
    api_reply_json(r, 200, arr);
    if (last)
        MHD_add_response_header(api_response(r), "X-Next-Token", last);
    free(last);
    return 0;
}
