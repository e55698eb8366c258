/* Operations routes: liveness, readiness, the OpenAPI document, Prometheus metrics. */
#include <stdio.h>

#include "api_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
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

/* One metric in the Prometheus text format, with its HELP and TYPE lines. */
static void metric_head(buf_t *b, const char *name, const char *type, const char *help)
{
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void store_metrics(buf_t *b, const json_t *c)
{
    metric_head(b, "sandboxer_sandboxes", "gauge", "Sandboxes by status (terminated included).");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)json_object_get(c, "sandboxes"), k, v) buf_printf(
        b, "sandboxer_sandboxes{status=\"%s\"} %lld\n", k, (long long)json_integer_value(v));
    static const char *const counts[][2] = {
        {"users", "Users."},
        {"executions", "Executions recorded (exec, execute and terminals)."},
        {"snapshots", "Snapshots kept."},
    };
    for (size_t i = 0; i < ARRAY_SIZE(counts); i++) {
        char name[64];
        snprintf(name, sizeof(name), "sandboxer_%s", counts[i][0]);
        metric_head(b, name, "gauge", counts[i][1]);
        buf_printf(b, "%s %lld\n", name,
                   (long long)json_integer_value(json_object_get(c, counts[i][0])));
    }
}

int h_metrics(api_req_t *r, err_t *err)
{
    json_t *c _cleanup_json_ = NULL;
    if (store_counts(r->api->store, &c, err) < 0)
        return -1;
    buf_t b = {0};
    metric_head(&b, "sandboxer_build_info", "gauge", "The daemon's version.");
    buf_printf(&b, "sandboxer_build_info{version=\"%s\"} 1\n", SANDBOXER_VERSION);
    metric_head(&b, "sandboxer_uptime_seconds", "gauge", "Seconds since the daemon started.");
    buf_printf(&b, "sandboxer_uptime_seconds %.3f\n", now_unix() - r->api->started_at);
    store_metrics(&b, c);
    metric_head(&b, "sandboxer_http_responses_total", "counter",
                "HTTP requests answered, by status class.");
    for (int i = 1; i <= 5; i++)
        buf_printf(&b, "sandboxer_http_responses_total{code=\"%dxx\"} %llu\n", i,
                   (unsigned long long)atomic_load(&r->api->responses[i]));
    metric_head(&b, "sandboxer_http_inflight", "gauge", "HTTP requests being served now.");
    buf_printf(&b, "sandboxer_http_inflight %d\n", atomic_load(&r->api->inflight));
    metric_head(&b, "sandboxer_streams", "gauge",
                "Streamed answers and terminal sessions open now.");
    buf_printf(&b, "sandboxer_streams %d\n", atomic_load(&r->api->streams));
    api_reply_bytes(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len);
    buf_free(&b);
    return 0;
}
