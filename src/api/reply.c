/* Replies, errors and request accessors. */
#include <string.h>

#include "api_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "e2b/e2b.h"

unsigned api_status_for(err_kind_t kind)
{
    switch (kind) {
    case ERR_NONE:
        return MHD_HTTP_OK;
    case ERR_INVALID:
        return MHD_HTTP_BAD_REQUEST;
    case ERR_UNAUTHORIZED:
        return MHD_HTTP_UNAUTHORIZED;
    case ERR_FORBIDDEN:
        return MHD_HTTP_FORBIDDEN;
    case ERR_NOT_FOUND:
        return MHD_HTTP_NOT_FOUND;
    case ERR_NOT_ALLOWED:
        return MHD_HTTP_METHOD_NOT_ALLOWED;
    case ERR_CONFLICT:
        return MHD_HTTP_CONFLICT;
    case ERR_TOO_LARGE:
        return MHD_HTTP_CONTENT_TOO_LARGE;
    case ERR_UNPROCESSABLE:
        return MHD_HTTP_UNPROCESSABLE_CONTENT;
    case ERR_LIMIT:
        return MHD_HTTP_TOO_MANY_REQUESTS;
    case ERR_UNAVAILABLE:
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    case ERR_BAD_GATEWAY:
        return MHD_HTTP_BAD_GATEWAY;
    case ERR_RANGE:
        return MHD_HTTP_RANGE_NOT_SATISFIABLE;
    case ERR_RUNTIME:
    case ERR_INTERNAL:
        break;
    }
    return MHD_HTTP_INTERNAL_SERVER_ERROR;
}

static void set_response(api_req_t *r, unsigned status, struct MHD_Response *resp)
{
    if (r->resp)
        MHD_destroy_response(r->resp);
    r->resp = resp;
    r->status = status;
}

void api_reply_bytes(api_req_t *r, unsigned status, const char *type, const void *data, size_t len)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (type)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    set_response(r, status, resp);
}

void api_reply_json(api_req_t *r, unsigned status, json_t *body)
{
    if (!body) {
        api_reply_bytes(r, status, NULL, "", 0);
        return;
    }
    _cleanup_free_ char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text) {
        static const char oops[] = "{\"detail\":\"cannot encode the reply\",\"code\":\"internal\"}";
        api_reply_bytes(r, 500, "application/json; charset=utf-8", oops, sizeof(oops) - 1);
        return;
    }
    size_t n = strlen(text);
    text[n] = '\n';
    api_reply_bytes(r, status, "application/json; charset=utf-8", text, n + 1);
}

void api_reply_error(api_req_t *r, const err_t *err)
{
    unsigned status = api_status_for(err->kind);
    char detail[600];
    if (status >= 500 && err->kind != ERR_UNAVAILABLE && err->kind != ERR_BAD_GATEWAY) {
        /* Details of internal failures (host paths, errno) go to the log, not the client. */
        char q[600];
        log_error("http.error", "kind=%s code=%s errno=%d msg=%s", err_kind_name(err->kind),
                  err->code, err->errnum, log_quote(q, sizeof(q), err->msg));
        snprintf(detail, sizeof(detail), "internal error; the daemon's log has request %s", r->rid);
    } else {
        snprintf(detail, sizeof(detail), "%s", err->msg);
    }
    if (r->dialect != API_NATIVE) { /* E2B's clients read E2B's error shapes */
        e2b_reply_error(r, err, detail);
        return;
    }
    json_t *body = json_pack("{s:o, s:s}", "detail", json_string_lossy(detail, strlen(detail)),
                             "code", err->code[0] ? err->code : err_kind_name(err->kind));
    api_reply_json(r, status, body);
}

char *api_param(const api_req_t *r, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < r->params.n; i++) {
        const struct route_param *p = &r->params.p[i];
        if (p->name_len == n && memcmp(p->name, name, n) == 0)
            return xstrndup(p->value, p->value_len);
    }
    return NULL;
}

const char *api_query(const api_req_t *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *api_header(const api_req_t *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

int api_body_object(api_req_t *r, bool allow_empty, json_t **out, err_t *err)
{
    if (r->body.len == 0 && allow_empty) {
        *out = json_object();
        return 0;
    }
    return json_parse_object(r->body.data ? r->body.data : "", r->body.len, out, err);
}
