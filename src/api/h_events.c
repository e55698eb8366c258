/*
 * GET /events: Server-Sent Events of the caller's sandboxes, resumable with Last-Event-ID.
 * Without it, all stored events come first, unless ?since=UNIX_TIME (those from then on)
 * or ?since=now (only new ones).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "store/store_events.h"

#define EVENTS_BATCH     100
#define EVENTS_POLL_MS   200
#define EVENTS_HEARTBEAT 15000.0 /* ms: a comment line keeps proxies from closing the stream */

struct follow {
    store_t *store;
    int64_t owner_id;
    int64_t last_id;
};

/* Send one batch; the number sent, or -1 once the client is gone. */
static int send_batch(struct api_stream *s, struct follow *f)
{
    json_t *events _cleanup_json_ =
        store_event_list(f->store, f->owner_id, f->last_id, EVENTS_BATCH, NULL);
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e)
    {
        f->last_id = json_integer_value(json_object_get(e, "id"));
        json_object_del(e, "id");
        _cleanup_free_ char *data = json_dumps(e, JSON_COMPACT);
        _cleanup_free_ char *msg =
            xasprintf("id: %lld\nevent: %s\ndata: %s\n\n", (long long)f->last_id,
                      json_string_value(json_object_get(e, "type")), data ? data : "{}");
        if (!api_stream_write(s, msg, strlen(msg)))
            return -1;
    }
    return (int)json_array_size(events);
}

/*
 * Read from the store in batches as the client takes them: a slow client holds back the
 * next batch (the pipe fills), never makes the daemon buffer more.
 */
static void follow_main(struct api_stream *s, void *ctx)
{
    struct follow *f = ctx;
    double last_beat = now_mono_ms();
    static const char hello[] = ": sandboxer events\n\n";
    if (api_stream_write(s, hello, sizeof(hello) - 1)) {
        for (;;) {
            int n = send_batch(s, f);
            if (n < 0)
                break;
            if (n > 0)
                continue;
            if (now_mono_ms() - last_beat > EVENTS_HEARTBEAT) {
                if (!api_stream_write(s, ": ping\n\n", 8))
                    break;
                last_beat = now_mono_ms();
            }
            if (!api_stream_wait(s, EVENTS_POLL_MS))
                break;
        }
    }
    free(f);
}

int h_events(api_req_t *r, err_t *err)
{
    const char *last = api_header(r, "Last-Event-ID");
    if (!last)
        last = api_query(r, "last_event_id");
    long long after = 0;
    if (last && !parse_int(last, 0, INT64_MAX, &after))
        return err_set(err, ERR_INVALID, 0, "invalid_query", "Last-Event-ID must be an event id");
    const char *since = api_query(r, "since");
    if (since && !last) {
        char *end = NULL;
        double t = strcmp(since, "now") == 0 ? 1e300 : strtod(since, &end);
        if (end && (end == since || *end || !(t >= 0)))
            return err_set(err, ERR_INVALID, 0, "invalid_query",
                           "since must be a Unix time in seconds or \"now\"");
        after = store_event_cursor_before(r->api->store, t);
    }
    struct follow *f = xcalloc(1, sizeof(*f));
    *f = (struct follow){r->api->store, r->user.id, after};
    if (api_reply_stream(r, "text/event-stream", follow_main, f, err) < 0) {
        free(f);
        return -1;
    }
    return 0;
}
