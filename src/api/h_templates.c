/* Template routes: build (JSON, or its log as ndjson), list, get, set the pool, delete. */
#include <string.h>

#include "api_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "sandbox/template.h"

/* One build as the stream thread runs it. */
struct build_job {
    sbx_mgr_t *sbx;
    user_t user;
    json_t *body; /* keeps the request's strings alive */
    struct sbx_template_build_req q;
    struct api_stream *s;
};

static bool send_line(struct api_stream *s, json_t *obj)
{
    _cleanup_free_ char *line = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (!line)
        return true;
    size_t n = strlen(line);
    line[n] = '\n';
    return api_stream_write(s, line, n + 1);
}

static bool on_event(void *ctx, json_t *ev)
{
    struct build_job *job = ctx;
    return send_line(job->s, ev);
}

static void build_stream_main(struct api_stream *s, void *ctx)
{
    struct build_job *job = ctx;
    job->s = s;
    json_t *out = NULL;
    err_t err = {0};
    if (sbx_template_build(job->sbx, &job->user, &job->q, on_event, job, &out, &err) == 0)
        send_line(s, json_pack("{s:s, s:o}", "type", "done", "template", out));
    else
        send_line(s, json_pack("{s:s, s:s, s:s, s:i}", "type", "error", "output", err.msg, "code",
                               err.code, "status", (int)api_status_for(err.kind)));
    json_decref(job->body);
    free(job);
}

static bool want_stream(api_req_t *r)
{
    const char *v = api_query(r, "stream");
    return v && (strcmp(v, "true") == 0 || strcmp(v, "1") == 0);
}

int h_template_create(api_req_t *r, err_t *err)
{
    json_t *body = NULL;
    struct sbx_template_build_req q;
    if (api_body_object(r, false, &body, err) < 0)
        return -1;
    if (sbx_template_req_decode(body, &q, err) < 0) {
        json_decref(body);
        return -1;
    }
    if (want_stream(r)) {
        struct build_job *job = xcalloc(1, sizeof(*job));
        *job = (struct build_job){.sbx = r->api->sbx, .user = r->user, .body = body, .q = q};
        if (api_reply_stream(r, "application/x-ndjson", build_stream_main, job, err) < 0) {
            json_decref(body);
            free(job);
            return -1;
        }
        return 0;
    }
    json_t *out = NULL;
    int rc = sbx_template_build(r->api->sbx, &r->user, &q, NULL, NULL, &out, err);
    json_decref(body);
    if (rc < 0)
        return -1;
    api_reply_json(r, 201, out);
    return 0;
}

int h_template_list(api_req_t *r, err_t *err)
{
    json_t *out = NULL;
    if (sbx_template_list(r->api->sbx, &r->user, &out, err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

int h_template_get(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *name = api_param(r, "name");
    json_t *out = NULL;
    if (sbx_template_get(r->api->sbx, &r->user, name, &out, err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

struct patch_body {
    int64_t pool;
};

static const struct jfield patch_fields[] = {
    {"pool", JF_INT, true, offsetof(struct patch_body, pool), 0, 0, SBX_POOL_MAX},
};

int h_template_patch(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *name = api_param(r, "name");
    json_t *body _cleanup_json_ = NULL;
    struct patch_body b = {0};
    json_t *out = NULL;
    if (api_body_object(r, false, &body, err) < 0 ||
        json_decode_fields(body, patch_fields, ARRAY_SIZE(patch_fields), &b, err) < 0 ||
        sbx_template_set_pool(r->api->sbx, &r->user, name, b.pool, &out, err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

int h_template_delete(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *name = api_param(r, "name");
    if (sbx_template_delete(r->api->sbx, &r->user, name, err) < 0)
        return -1;
    api_reply_json(r, 200, json_pack("{s:s, s:b}", "name", name, "deleted", 1));
    return 0;
}
