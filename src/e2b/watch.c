/*
 * envd's directory watches over sandbox.h's (inotify in the sandbox's agent): WatchDir
 * streams the events; CreateWatcher / GetWatcherEvents / RemoveWatcher keep a watch between
 * calls, its events queued (bounded) until asked for. A watch outlives a fork, snapshot or
 * hibernation of its sandbox (changes while it sleeps are not reported).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/id.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "e2b_internal.h"

#define WATCH_STEP_MS   1000
#define WATCH_LATER_MS  250
#define WATCHERS_MAX    64     /* CreateWatcher's watches, all sandboxes together */
#define WATCHER_IDLE_MS 600000 /* one not asked for events this long is removed */
#define EVENTS_MAX      10000  /* events one GetWatcherEvents answers at most */

static const char *event_type(const char *t)
{
    return strcmp(t, "create") == 0   ? "EVENT_TYPE_CREATE"
           : strcmp(t, "write") == 0  ? "EVENT_TYPE_WRITE"
           : strcmp(t, "remove") == 0 ? "EVENT_TYPE_REMOVE"
           : strcmp(t, "rename") == 0 ? "EVENT_TYPE_RENAME"
           : strcmp(t, "chmod") == 0  ? "EVENT_TYPE_CHMOD"
                                      : "EVENT_TYPE_UNSPECIFIED";
}

/* A FilesystemEvent for the agent's {name, type} under root (with its entry if asked). */
static json_t *fs_event(api_req_t *r, struct e2b_box *b, const struct e2b_user *u, const char *root,
                        json_t *e, bool include_entry)
{
    const char *name = json_string_value(json_object_get(e, "name"));
    const char *type = json_string_value(json_object_get(e, "type"));
    json_t *ev = json_pack("{s:s, s:s}", "name", name, "type", event_type(type));
    if (include_entry &&
        (strcmp(type, "create") == 0 || strcmp(type, "write") == 0 || strcmp(type, "chmod") == 0)) {
        char path[AGENT_PATH_MAX * 2];
        struct agentc_file_req q = {.path = path, .user = u->name};
        json_t *info _cleanup_json_ = NULL;
        snprintf(path, sizeof(path), "%s/%s", root, name);
        if (sbx_file_stat(r->api->sbx, &b->owner, b->rec.sandbox_id, &q, &info, NULL) == 0) {
            json_t *meta _cleanup_json_ = e2b_file_metadata(r, b, u, path);
            json_object_set_new(ev, "entry", e2b_entry_info(r, b, info, meta));
        }
    }
    return ev;
}

/* What WatchDir and CreateWatcher ask for, checked, and the watch opened. */
struct watch_req {
    struct e2b_box box;
    struct e2b_user user;
    char path[AGENT_PATH_MAX];
    bool include_entry;
    sbx_fswatch_t *w;
};

static int open_watch(api_req_t *r, struct watch_req *q, err_t *err)
{
    json_t *msg _cleanup_json_ = NULL;
    if (e2b_rpc_message(r, &msg, err) < 0 || e2b_box_envd(r, &q->box, false, err) < 0)
        return -1;
    json_t *p = e2b_rpc_get(msg, "path", NULL);
    bool recursive = json_is_true(e2b_rpc_get(msg, "recursive", NULL));
    q->include_entry = json_is_true(e2b_rpc_get(msg, "includeEntry", "include_entry"));
    struct agentc_file_req fq = {.path = q->path, .user = q->user.name};
    if (e2b_user_of(r, &q->box, NULL, &q->user, err) < 0 ||
        (!json_is_string(p) ? err_set(err, ERR_INVALID, 0, "invalid_argument", "path is required")
                            : e2b_resolve_path(&q->user, json_string_value(p), q->path, err)) < 0 ||
        !(q->w = sbx_fswatch_open(r->api->sbx, &q->box.owner, q->box.rec.sandbox_id, &fq, recursive,
                                  err))) {
        e2b_box_clear(&q->box);
        return -1;
    }
    return 0;
}

/* ---- WatchDir: a stream ----------------------------------------------------------------- */

struct watch_stream {
    api_t *api;
    struct watch_req q;
    double deadline;
    int keepalive_ms;
};

/* A request of our own for the events' entries (the owner and sandbox of the watch). */
static api_req_t *fake_req(api_t *api)
{
    api_req_t *r = xcalloc(1, sizeof(*r));
    r->api = api;
    return r;
}

static bool watch_step(struct e2b_stream *st, struct watch_stream *ws, api_req_t *fr)
{
    double now = now_mono_ms();
    err_t err = {0};
    if (ws->deadline && now >= ws->deadline) {
        err_set(&err, ERR_UNAVAILABLE, 0, "deadline_exceeded", "the watch's deadline passed");
        e2b_rpc_end(st, &err);
        return false;
    }
    int wait = ws->deadline && ws->deadline - now < WATCH_STEP_MS ? (int)(ws->deadline - now) + 1
                                                                  : WATCH_STEP_MS;
    json_t *events _cleanup_json_ = json_array(), *e;
    uint64_t dropped = 0;
    int rc = sbx_fswatch_next(ws->q.w, wait, events, &dropped, &err);
    size_t i;
    if (rc < 0) {
        if (strcmp(err.code, "sandbox_not_running") == 0)
            e2b_rpc_abort(st); /* the sandbox went: the connection drops */
        else
            e2b_rpc_end(st, &err);
        return false;
    }
    json_array_foreach(events, i, e)
    {
        json_t *ev = fs_event(fr, &ws->q.box, &ws->q.user, ws->q.path, e, ws->q.include_entry);
        /* WatchDirResponse's oneof is named event: its member is the JSON field */
        if (!e2b_rpc_send(st, json_pack("{s:o}", "filesystem", ev)))
            return false;
    }
    if (rc == SBX_FOLLOW_LATER && !api_stream_wait(st->s, WATCH_LATER_MS))
        return false;
    if (now_mono_ms() - st->last_sent >= ws->keepalive_ms &&
        !e2b_rpc_send(st, json_pack("{s:{}}", "keepalive")))
        return false;
    return api_stream_wait(st->s, 0);
}

static void watch_main(struct api_stream *s, void *ctx)
{
    struct watch_stream *ws = ctx;
    struct e2b_stream st = {s, now_mono_ms()};
    api_req_t *fr = fake_req(ws->api);
    if (e2b_rpc_send(&st, json_pack("{s:{}}", "start")))
        while (watch_step(&st, ws, fr))
            ;
    free(fr);
    sbx_fswatch_close(ws->q.w);
    e2b_box_clear(&ws->q.box);
    free(ws);
}

int e2b_rpc_fs_watch_dir(api_req_t *r, err_t *err)
{
    struct watch_stream *ws = xcalloc(1, sizeof(*ws));
    ws->api = r->api;
    ws->deadline = e2b_rpc_deadline(r);
    ws->keepalive_ms = e2b_rpc_keepalive_ms(r);
    if (open_watch(r, &ws->q, err) < 0) {
        free(ws);
        return -1;
    }
    if (e2b_rpc_stream(r, watch_main, ws, err) < 0) {
        sbx_fswatch_close(ws->q.w);
        e2b_box_clear(&ws->q.box);
        free(ws);
        return -1;
    }
    return 0;
}

/* ---- the watcher trio: a watch kept between calls --------------------------------------- */

struct watcher {
    char id[40];
    char e2b_id[E2B_ID_LEN + 1];
    struct watch_req q;
    double used;          /* now_mono_ms() of its last call */
    pthread_mutex_t lock; /* one GetWatcherEvents at a time */
};

static struct watcher *watchers[WATCHERS_MAX];
static pthread_mutex_t watchers_lock = PTHREAD_MUTEX_INITIALIZER;

static void watcher_free(struct watcher *w)
{
    sbx_fswatch_close(w->q.w);
    e2b_box_clear(&w->q.box);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

/* Take the watcher id of the request's sandbox out of the table (remove), or find it; the
 * idle ones go on the way. */
static struct watcher *lookup(api_req_t *r, const char *id, bool remove)
{
    struct watcher *found = NULL, *idle[WATCHERS_MAX];
    size_t nidle = 0;
    double now = now_mono_ms();
    pthread_mutex_lock(&watchers_lock);
    for (size_t i = 0; i < WATCHERS_MAX; i++) {
        struct watcher *w = watchers[i];
        if (!w)
            continue;
        if (id && strcmp(w->id, id) == 0 && strcmp(w->e2b_id, r->e2b_id) == 0) {
            found = w;
            w->used = now;
            if (remove)
                watchers[i] = NULL;
        } else if (now - w->used > WATCHER_IDLE_MS) {
            idle[nidle++] = w;
            watchers[i] = NULL;
        }
    }
    pthread_mutex_unlock(&watchers_lock);
    for (size_t i = 0; i < nidle; i++)
        watcher_free(idle[i]);
    return found;
}

int e2b_rpc_fs_create_watcher(api_req_t *r, err_t *err)
{
    struct watcher *w = xcalloc(1, sizeof(*w));
    pthread_mutex_init(&w->lock, NULL);
    w->used = now_mono_ms();
    snprintf(w->e2b_id, sizeof(w->e2b_id), "%.*s", E2B_ID_LEN, r->e2b_id);
    if (!id_random_hex(w->id, 16) || open_watch(r, &w->q, err) < 0) {
        free(w);
        return err->kind ? -1 : err_set(err, ERR_INTERNAL, 0, "internal", "no randomness");
    }
    lookup(r, NULL, false); /* room made from idle ones */
    pthread_mutex_lock(&watchers_lock);
    size_t slot = WATCHERS_MAX;
    for (size_t i = 0; i < WATCHERS_MAX && slot == WATCHERS_MAX; i++)
        if (!watchers[i])
            slot = i;
    if (slot < WATCHERS_MAX)
        watchers[slot] = w;
    pthread_mutex_unlock(&watchers_lock);
    if (slot == WATCHERS_MAX) {
        watcher_free(w);
        return err_set(err, ERR_LIMIT, 0, "too_many_watches", "%d watchers exist already",
                       WATCHERS_MAX);
    }
    e2b_rpc_reply(r, json_pack("{s:s}", "watcherId", w->id));
    return 0;
}

/* The watcher the message names, for the request's sandbox (its token checked). */
static struct watcher *named(api_req_t *r, bool remove, err_t *err)
{
    json_t *msg _cleanup_json_ = NULL;
    struct e2b_box b;
    if (e2b_rpc_message(r, &msg, err) < 0 || e2b_box_envd(r, &b, false, err) < 0)
        return NULL;
    e2b_box_clear(&b);
    const char *id = json_string_value(e2b_rpc_get(msg, "watcherId", "watcher_id"));
    struct watcher *w = id ? lookup(r, id, remove) : NULL;
    if (!w)
        err_set(err, ERR_NOT_FOUND, 0, "watcher_not_found", "watcher %.40s not found",
                id ? id : "");
    return w;
}

int e2b_rpc_fs_get_watcher_events(api_req_t *r, err_t *err)
{
    struct watcher *w = named(r, false, err);
    if (!w)
        return -1;
    pthread_mutex_lock(&w->lock);
    json_t *events _cleanup_json_ = json_array(), *e;
    uint64_t dropped = 0;
    err_t werr = {0};
    /* What the agent sent since the last call, without waiting. */
    for (int i = 0; i < 64 && json_array_size(events) < EVENTS_MAX; i++) {
        size_t before = json_array_size(events);
        if (sbx_fswatch_next(w->q.w, 0, events, &dropped, &werr) != 0 ||
            json_array_size(events) == before)
            break;
    }
    json_t *out = json_array();
    size_t i;
    json_array_foreach(events, i, e)
    {
        json_array_append_new(out,
                              fs_event(r, &w->q.box, &w->q.user, w->q.path, e, w->q.include_entry));
    }
    pthread_mutex_unlock(&w->lock);
    e2b_rpc_reply(r, json_pack("{s:o}", "events", out));
    return 0;
}

int e2b_rpc_fs_remove_watcher(api_req_t *r, err_t *err)
{
    struct watcher *w = named(r, true, err);
    if (!w)
        return -1;
    watcher_free(w);
    e2b_rpc_reply(r, json_object());
    return 0;
}
