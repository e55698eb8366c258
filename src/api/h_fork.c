/* Fork, tree, coalesce, pause, hibernate/wake and snapshot routes. */
#include <stddef.h>
#include <string.h>

#include "api_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "sandbox/sandbox.h"

struct fork_body {
    const char *label;
    const char *hostname;
};

static const struct jfield fork_fields[] = {
    {"label", JF_STRING, false, offsetof(struct fork_body, label), 128, 0, 0},
    {"hostname", JF_STRING, false, offsetof(struct fork_body, hostname), 63, 0, 0},
};

int h_fork(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    json_t *body _cleanup_json_ = NULL;
    struct fork_body b = {0};
    json_t *out = NULL;
    if (api_body_object(r, true, &body, err) < 0 ||
        json_decode_fields(body, fork_fields, ARRAY_SIZE(fork_fields), &b, err) < 0)
        return -1;
    if (b.hostname && sbx_check_hostname(b.hostname, err) < 0)
        return -1;
    if (sbx_fork(r->api->sbx, &r->user, id, b.label, b.hostname, &out, err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

int h_tree(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    json_t *out = NULL;
    if (sbx_tree(r->api->sbx, &r->user, id, &out, err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

int h_coalesce(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *parent = api_param(r, "id");
    _cleanup_free_ char *final = api_param(r, "final");
    json_t *out = NULL;
    if (sbx_coalesce(r->api->sbx, &r->user, parent, final, &out, err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

/* The routes that take no body and answer {id, status}. */
static int state_change(api_req_t *r, int which, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    json_t *out = NULL;
    sbx_mgr_t *m = r->api->sbx;
    int rc = which == 0   ? sbx_pause(m, &r->user, id, true, &out, err)
             : which == 1 ? sbx_pause(m, &r->user, id, false, &out, err)
                          : sbx_hibernate(m, &r->user, id, &out, err);
    if (rc < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

int h_pause(api_req_t *r, err_t *err)
{
    return state_change(r, 0, err);
}

int h_unpause(api_req_t *r, err_t *err)
{
    return state_change(r, 1, err);
}

int h_hibernate(api_req_t *r, err_t *err)
{
    return state_change(r, 2, err);
}

struct wake_body {
    int cold;
};

static const struct jfield wake_fields[] = {
    {"cold", JF_BOOL, false, offsetof(struct wake_body, cold), 0, 0, 0},
};

/* POST /sandboxes/{id}/wake [{"cold": true}]: restore, or start from the files only. */
int h_wake(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    json_t *body _cleanup_json_ = NULL;
    struct wake_body b = {.cold = -1};
    json_t *out = NULL;
    if (api_body_object(r, true, &body, err) < 0 ||
        (body && json_decode_fields(body, wake_fields, ARRAY_SIZE(wake_fields), &b, err) < 0) ||
        sbx_wake(r->api->sbx, &r->user, id, b.cold == 1, &out, err) < 0)
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

struct snapshot_body {
    const char *name;
};

static const struct jfield snapshot_fields[] = {
    {"name", JF_STRING, true, offsetof(struct snapshot_body, name), 128, 0, 0},
};

int h_snapshot_create(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    json_t *body _cleanup_json_ = NULL;
    struct snapshot_body b = {0};
    json_t *out = NULL;
    if (api_body_object(r, false, &body, err) < 0 ||
        json_decode_fields(body, snapshot_fields, ARRAY_SIZE(snapshot_fields), &b, err) < 0 ||
        sbx_snapshot_create(r->api->sbx, &r->user, id, b.name, &out, err) < 0)
        return -1;
    api_reply_json(r, 201, out);
    return 0;
}

int h_snapshot_list(api_req_t *r, err_t *err)
{
    json_t *arr = NULL;
    if (sbx_snapshot_list(r->api->sbx, &r->user, &arr, err) < 0)
        return -1;
    api_reply_json(r, 200, json_pack("{s:o}", "snapshots", arr));
    return 0;
}

int h_snapshot_delete(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *name = api_param(r, "name");
    if (sbx_snapshot_delete(r->api->sbx, &r->user, name, err) < 0)
        return -1;
    api_reply_json(r, 200, json_pack("{s:s, s:b}", "name", name, "deleted", 1));
    return 0;
}
