/* Operations routes: liveness, readiness, the OpenAPI document. */
#include "api_internal.h"
#include "config.h"

int h_healthz(api_req_t *r, err_t *err)
{
    (void)err;
    api_reply_json(r, 200, json_pack("{s:s, s:s}", "status", "ok", "version", SANDBOXER_VERSION));
    return 0;
}

int h_readyz(api_req_t *r, err_t *err)
{
    if (atomic_load(&r->api->draining))
        return err_set(err, ERR_UNAVAILABLE, 0, "shutting_down", "the daemon is shutting down");
    if (!store_ping(r->api->store))
        return err_set(err, ERR_UNAVAILABLE, 0, "store_unavailable", "the store does not answer");
    api_reply_json(r, 200,
                   json_pack("{s:s, s:i}", "status", "ready", "schema_version",
                             store_schema_version(r->api->store)));
    return 0;
}

int h_openapi(api_req_t *r, err_t *err)
{
    (void)err;
    api_reply_bytes(r, 200, "application/json; charset=utf-8", api_openapi_json,
                    api_openapi_json_len);
    return 0;
}
