/* The sandbox a request names, E2B's error shapes, ids and times. */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/cleanup.h"
#include "common/id.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "e2b_internal.h"

void e2b_new_id(char out[E2B_ID_LEN + 1])
{
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    size_t n = 0;
    while (n < E2B_ID_LEN) {
        unsigned char rnd[32];
        if (!random_bytes(rnd, sizeof(rnd)))
            continue;
        for (size_t i = 0; i < sizeof(rnd) && n < E2B_ID_LEN; i++)
            if (rnd[i] < 252) /* 7 × 36: no bias */
                out[n++] = alphabet[rnd[i] % 36];
    }
    out[E2B_ID_LEN] = '\0';
}

bool e2b_id_valid(const char *s)
{
    return s && strlen(s) == E2B_ID_LEN &&
           strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789") == E2B_ID_LEN;
}

json_t *e2b_time_json(double t)
{
    time_t secs = (time_t)t;
    struct tm tm;
    char out[40];
    gmtime_r(&secs, &tm);
    size_t n = strftime(out, sizeof(out), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, sizeof(out) - n, ".%03dZ", (int)((t - (double)secs) * 1000) % 1000);
    return json_string(out);
}

void e2b_reply_none(api_req_t *r)
{
    api_reply_bytes(r, 204, NULL, "", 0);
}

int e2b_string_map(json_t *body, const char *name, json_t **out, err_t *err)
{
    json_t *m = json_object_get(body, name);
    const char *k;
    json_t *v;
    *out = NULL;
    if (!m || json_is_null(m))
        return 0;
    if (!json_is_object(m) || json_object_size(m) > 256)
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "'%s' must be an object of strings (at most 256)", name);
    json_object_foreach(m, k, v)
    {
        if (!json_is_string(v) || strlen(k) > 1024 || json_string_length(v) > 65536)
            return err_set(err, ERR_INVALID, 0, "invalid_field", "'%s' must map names to strings",
                           name);
    }
    *out = m;
    return 0;
}

bool e2b_state_running(const struct sbx_life *life)
{
    return strcmp(life->status, "running") == 0 || strcmp(life->status, "creating") == 0;
}

bool e2b_state_paused(const struct sbx_life *life)
{
    return strcmp(life->status, "paused") == 0 || strcmp(life->status, "hibernated") == 0;
}

void e2b_box_clear(struct e2b_box *b)
{
    store_e2b_rec_clear(&b->rec);
}

/* The record, the owner and the life of the row's sandbox; an ended one is forgotten. */
static int load(api_req_t *r, int64_t owner_id, const char *e2b_id, struct e2b_box *b, err_t *err)
{
    memset(b, 0, sizeof(*b));
    if (!e2b_id_valid(e2b_id) || store_e2b_get(r->api->store, owner_id, e2b_id, &b->rec, err) < 0)
        return err_set(err, ERR_NOT_FOUND, 0, "sandbox_not_found", "sandbox %.32s not found",
                       e2b_id ? e2b_id : "");
    err_t lerr = {0};
    if (store_user_get_by_id(r->api->store, b->rec.owner_id, &b->owner, &lerr) < 0 ||
        sbx_life_get(r->api->sbx, &b->owner, b->rec.sandbox_id, &b->life, &lerr) < 0 ||
        (!e2b_state_running(&b->life) && !e2b_state_paused(&b->life))) {
        store_e2b_delete(r->api->store, b->rec.e2b_id, NULL); /* it ended: E2B knows it no more */
        e2b_box_clear(b);
        return err_set(err, ERR_NOT_FOUND, 0, "sandbox_not_found", "sandbox %s not found", e2b_id);
    }
    return 0;
}

int e2b_box_get(api_req_t *r, const char *e2b_id, struct e2b_box *b, err_t *err)
{
    return load(r, r->user.id, e2b_id, b, err);
}

/* A paused sandbox wakes for traffic when its lifecycle asked for auto-resume; else 502. */
static int awake(api_req_t *r, struct e2b_box *b, err_t *err)
{
    if (e2b_state_running(&b->life))
        return 0;
    if (!b->life.auto_wake)
        return err_set(err, ERR_BAD_GATEWAY, 0, "sandbox_paused",
                       "the sandbox %s is paused: connect to it to resume it", b->rec.e2b_id);
    json_t *out = NULL;
    int rc = strcmp(b->life.status, "paused") == 0
                 ? sbx_pause(r->api->sbx, &b->owner, b->rec.sandbox_id, false, &out, err)
                 : sbx_wake(r->api->sbx, &b->owner, b->rec.sandbox_id, false, &out, err);
    json_decref(out);
    return rc < 0 ? -1 : sbx_life_get(r->api->sbx, &b->owner, b->rec.sandbox_id, &b->life, err);
}

int e2b_box_envd(api_req_t *r, struct e2b_box *b, bool allow_signed, err_t *err)
{
    if (load(r, -1, r->e2b_id, b, err) < 0)
        return err_set(err, ERR_BAD_GATEWAY, 0, "sandbox_not_found", "the sandbox %s was not found",
                       r->e2b_id);
    const char *tok = api_header(r, "X-Access-Token");
    b->token_ok = !b->rec.access_token[0] || (tok && token_equal(tok, b->rec.access_token));
    if (!b->token_ok && !allow_signed) {
        e2b_box_clear(b);
        return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized",
                       "unauthorized access, please provide a valid access token or method "
                       "signing if supported");
    }
    if (awake(r, b, err) < 0) {
        e2b_box_clear(b);
        return -1;
    }
    return 0;
}

/* ---- errors ---------------------------------------------------------------------------- */

static unsigned envd_status(const api_req_t *r, const err_t *err)
{
    if (strcmp(err->code, "sandbox_paused") == 0 || strcmp(err->code, "sandbox_not_found") == 0)
        return r->dialect == API_E2B_CONTROL ? (err->kind == ERR_NOT_FOUND ? 404 : 409) : 502;
    if (strcmp(err->code, "no_space") == 0)
        return 507; /* envd's answer to a full disk: the SDK's NotEnoughSpaceError */
    return api_status_for(err->kind);
}

/* A streaming RPC's error: 200 and one end-of-stream envelope holding it. */
static void stream_error(api_req_t *r, const char *code, const char *detail)
{
    _cleanup_json_ json_t *end = json_pack("{s:{s:s, s:o}}", "error", "code", code, "message",
                                           json_string_lossy(detail, strlen(detail)));
    _cleanup_free_ char *text = json_dump_compact(end);
    size_t n = strlen(text);
    buf_t b = {0};
    unsigned char head[5] = {0x02, (unsigned char)(n >> 24), (unsigned char)(n >> 16),
                             (unsigned char)(n >> 8), (unsigned char)n};
    buf_append(&b, head, sizeof(head));
    buf_append(&b, text, n);
    api_reply_bytes(r, 200, "application/connect+json", b.data, b.len);
    buf_free(&b);
}

static bool streaming(const api_req_t *r)
{
    const char *ct = api_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    return ct && strncasecmp(ct, "application/connect+", 20) == 0;
}

void e2b_reply_error(api_req_t *r, const err_t *err, const char *detail)
{
    if (r->dialect == API_E2B_RPC) {
        const char *code = e2b_rpc_code(err);
        if (streaming(r)) {
            stream_error(r, code, detail);
            return;
        }
        api_reply_json(r, e2b_rpc_status(code),
                       json_pack("{s:s, s:o}", "code", code, "message",
                                 json_string_lossy(detail, strlen(detail))));
        return;
    }
    unsigned status = envd_status(r, err);
    json_t *body = json_pack("{s:i, s:o}", "code", (int)status, "message",
                             json_string_lossy(detail, strlen(detail)));
    if (status == 502 && r->e2b_id[0])
        json_object_set_new(body, "sandboxId", json_string(r->e2b_id));
    api_reply_json(r, status, body);
}
