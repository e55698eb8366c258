/* envd's own HTTP routes besides /files: /health, /envs, /metrics. */
#include <math.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "e2b_internal.h"

int e2b_h_health(api_req_t *r, err_t *err)
{
    struct e2b_box b;
    /* No token needed (envd's own rule); a sandbox that is gone or asleep is 502. */
    if (e2b_box_envd(r, &b, true, err) < 0)
        return -1;
    e2b_box_clear(&b);
    e2b_reply_none(r);
    return 0;
}

int e2b_h_envs(api_req_t *r, err_t *err)
{
    struct e2b_box b;
    if (e2b_box_envd(r, &b, false, err) < 0)
        return -1;
    api_reply_json(r, 200, json_incref(b.rec.env));
    e2b_box_clear(&b);
    return 0;
}

int e2b_h_envd_metrics(api_req_t *r, err_t *err)
{
    struct e2b_box b;
    json_t *st _cleanup_json_ = NULL;
    if (e2b_box_envd(r, &b, false, err) < 0)
        return -1;
    int rc = sbx_stats(r->api->sbx, &b.owner, b.rec.sandbox_id, &st, err);
    if (rc == 0) {
        json_t *mem = json_object_get(st, "memory"), *disk = json_object_get(st, "disk");
        double up = now_unix() - b.life.created_at;
        double cpu =
            json_number_value(json_object_get(json_object_get(st, "cpu"), "usage_seconds"));
        int cpus = (int)fmax(1, ceil(b.life.cpus));
        api_reply_json(r, 200,
                       json_pack("{s:I, s:i, s:f, s:I, s:I, s:I, s:I}", "ts",
                                 (json_int_t)now_unix(), "cpu_count", cpus, "cpu_used_pct",
                                 up > 0 ? fmin(100.0, 100.0 * cpu / up / cpus) : 0.0, "mem_total",
                                 (json_int_t)b.life.memory, "mem_used",
                                 json_integer_value(json_object_get(mem, "usage_bytes")),
                                 "disk_used",
                                 json_integer_value(json_object_get(disk, "used_bytes")),
                                 "disk_total", (json_int_t)b.life.disk));
    }
    e2b_box_clear(&b);
    return rc;
}
