/* Sandbox routes: create, list, get, patch, delete, logs, execution history. */
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "sandbox/sandbox.h"

int h_sandbox_create(api_req_t *r, err_t *err)
{
    json_t *body _cleanup_json_ = NULL;
    struct sbx_create_req q;
    json_t *out = NULL;
    if (api_body_object(r, false, &body, err) < 0 || sbx_create_req_decode(body, &q, err) < 0 ||
        sbx_create(r->api->sbx, &r->user, &q, &out, err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

int h_sandbox_list(api_req_t *r, err_t *err)
{
    json_t *arr = NULL;
    if (sbx_list(r->api->sbx, &r->user, &arr, err) < 0)
        return -1;
    api_reply_json(r, 200, json_pack("{s:o}", "sandboxes", arr));
    return 0;
}

int h_sandbox_get(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    json_t *out = NULL;
    if (sbx_get(r->api->sbx, &r->user, id, &out, err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

int h_stats(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    json_t *out = NULL;
    if (sbx_stats(r->api->sbx, &r->user, id, &out, err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

struct patch_req {
    const char *label;
    int is_public;
};

static const struct jfield patch_fields[] = {
    {"label", JF_STRING, false, offsetof(struct patch_req, label), 128, 0, 0},
    {"public", JF_BOOL, false, offsetof(struct patch_req, is_public), 0, 0, 0},
};

int h_sandbox_patch(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    json_t *body _cleanup_json_ = NULL;
    struct patch_req q = {.is_public = -1};
    if (api_body_object(r, false, &body, err) < 0 ||
        json_decode_fields(body, patch_fields, ARRAY_SIZE(patch_fields), &q, err) < 0)
        return -1;
    if (q.label && !*q.label)
        return err_set(err, ERR_INVALID, 0, "invalid_field", "field 'label' must not be empty");
    if (!q.label && q.is_public < 0)
        return err_set(err, ERR_INVALID, 0, "invalid_field", "give 'label' and/or 'public'");
    json_t *out = NULL;
    if (sbx_update(r->api->sbx, &r->user, id, q.label, q.is_public, &out, err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

int h_sandbox_delete(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    json_t *out = NULL;
    if (sbx_delete(r->api->sbx, &r->user, id, &out, err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

/* ?name=N within [min, max], default def; garbage → ERR_INVALID. */
static int query_int(api_req_t *r, const char *name, long long def, long long min, long long max,
                     long long *out, err_t *err)
{
    const char *v = api_query(r, name);
    *out = def;
    if (v && !parse_int(v, min, max, out))
        return err_set(err, ERR_INVALID, 0, "invalid_query",
                       "query parameter '%s' must be an integer between %lld and %lld", name, min,
                       max);
    return 0;
}

/* A page of history being streamed. */
struct history_job {
    sbx_mgr_t *sbx;
    char id[65];
    struct sbx_history_req q;
};

static bool history_write(void *ctx, const void *data, size_t len)
{
    return api_stream_write(ctx, data, len);
}

static void history_stream_main(struct api_stream *s, void *ctx)
{
    struct history_job *job = ctx;
    sbx_exec_history_write(job->sbx, job->id, &job->q, history_write, s);
    free(job);
}

/* ?limit= and ?cursor= (an execution id), then the page, streamed in bounded memory. */
static int history(api_req_t *r, bool newest_first, long long def_limit, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    long long limit, cursor;
    struct history_job *job = xcalloc(1, sizeof(*job));
    if (query_int(r, "limit", def_limit, 1, 10000, &limit, err) < 0 ||
        query_int(r, "cursor", -1, 0, INT64_MAX, &cursor, err) < 0 ||
        sbx_exec_history_open(r->api->sbx, &r->user, id, job->id, err) < 0) {
        free(job);
        return -1;
    }
    job->sbx = r->api->sbx;
    job->q =
        (struct sbx_history_req){(int)limit, newest_first, api_query(r, "cursor") != NULL, cursor};
    if (api_reply_stream(r, "application/json; charset=utf-8", history_stream_main, job, err) < 0) {
        free(job);
        return -1;
    }
    return 0;
}

int h_execution_logs(api_req_t *r, err_t *err)
{
    return history(r, false, 1000, err);
}

int h_command_executions(api_req_t *r, err_t *err)
{
    return history(r, true, 100, err);
}

int h_command_execution_logs(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    _cleanup_free_ char *eid_s = api_param(r, "eid");
    long long eid, start, limit;
    json_t *out = NULL;
    if (!parse_int(eid_s, 1, INT64_MAX, &eid))
        return err_set(err, ERR_NOT_FOUND, 0, "execution_not_found", "no such execution");
    if (query_int(r, "start_id", 0, 0, INT64_MAX, &start, err) < 0 ||
        query_int(r, "limit", 1000, 1, 10000, &limit, err) < 0 ||
        sbx_exec_logs(r->api->sbx, &r->user, id, eid, start, (int)limit, &out, err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}
