/* sandboxer events: follow the caller's sandbox events (GET /events, Server-Sent Events). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"

/* One "data: {...}" line of the stream: print it raw (--json) or as a readable line. */
static int on_event_line(void *data, const char *line, size_t len, err_t *err)
{
    (void)err;
    cli_t *cli = data;
    if (len < 6 || strncmp(line, "data: ", 6) != 0)
        return 0; /* id:, event: and comment lines carry nothing new */
    if (cli->json) {
        printf("%s\n", line + 6);
        fflush(stdout);
        return 0;
    }
    json_t *ev _cleanup_json_ = json_loadb(line + 6, len - 6, 0, NULL);
    if (!ev)
        return 0;
    char when[32];
    time_t t = (time_t)json_number_value(json_object_get(ev, "timestamp"));
    struct tm tm;
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
    _cleanup_free_ char *details = json_dumps(json_object_get(ev, "data"), JSON_COMPACT);
    _cleanup_free_ char *shown = cli_safe(details ? details : "{}");
    _cleanup_free_ char *type = cli_safe(cli_jstr(ev, "type", "?"));
    _cleanup_free_ char *id = cli_safe(cli_jstr(ev, "container_id", "?"));
    printf("%s  %-10s %.12s %s\n", when, type, id, shown);
    fflush(stdout);
    return 0;
}

int cmd_events(cli_t *cli, const cli_args_t *args, err_t *err)
{
    const char *since = cli_opt_str(args, "since");
    client_t *c = cli_connect(cli, true, err);
    if (!c)
        return -1;
    _cleanup_free_ char *path =
        since ? xasprintf("/events?last_event_id=%s", since) : xstrdup("/events");
    client_set_timeout(c, 0); /* follows until interrupted */
    struct client_stream_cb cb = {.on_line = on_event_line, .data = cli};
    return client_stream(c, "GET", path, NULL, &cb, err) < 0 ? -1 : 0;
}
