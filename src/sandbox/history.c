/*
 * Execution history, read in bounded pages and written out as it is read: a page holds at
 * most `limit` executions and ends after the execution that brings its output past
 * HISTORY_PAGE_BYTES; rows come from the store in small batches (the store's lock is held
 * per batch, never while the client reads), so the daemon's memory stays bounded however
 * much a sandbox printed. A cursor (an execution id) continues where a page ended.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "sandbox_internal.h"

#define HISTORY_PAGE_BYTES (4u << 20) /* output per page, past its first execution */
#define EXEC_BATCH         64         /* executions read from the store at once */
#define LOG_BATCH_ROWS     256        /* output rows read at once ... */
#define LOG_BATCH_BYTES    (1u << 20) /* ... and their bytes */

/* Where a page goes, and whether it still goes anywhere. */
struct out {
    sbx_write_fn write;
    void *ctx;
    bool ok;
};

static void put(struct out *o, const char *s, size_t n)
{
    if (o->ok)
        o->ok = o->write(o->ctx, s, n);
}

/* j as compact JSON, without its last byte when open (an object to add keys to). */
static void put_json(struct out *o, const json_t *j, bool open)
{
    char *t = json_dumps(j, JSON_COMPACT);
    if (t) {
        size_t n = strlen(t);
        put(o, t, open && n ? n - 1 : n);
    }
    free(t);
}

/* ,"logs":[...]} for execution eid; returns the bytes of output written. */
static uint64_t put_logs(sbx_mgr_t *m, int64_t eid, struct out *o)
{
    uint64_t bytes = 0;
    int64_t after = 0;
    bool first = true;
    put(o, ",\"logs\":[", 9);
    while (o->ok) {
        json_t *rows = NULL;
        if (store_exec_log_rows(m->store, eid, after, LOG_BATCH_ROWS, LOG_BATCH_BYTES, &rows,
                                NULL) < 0)
            break;
        size_t i;
        json_t *row;
        json_array_foreach(rows, i, row)
        {
            put(o, ",", first ? 0 : 1);
            first = false;
            put_json(o, row, false);
            bytes += json_string_length(json_object_get(row, "content"));
            after = json_integer_value(json_object_get(row, "id"));
        }
        size_t n = json_array_size(rows);
        json_decref(rows);
        if (n == 0)
            break;
    }
    put(o, "]}", 2);
    return bytes;
}

int sbx_exec_history_open(sbx_mgr_t *m, const user_t *owner, const char *key, char id[65],
                          err_t *err)
{
    sandbox_rec_t rec;
    if (sbx_lookup(m, owner, key, &rec, err) < 0)
        return -1;
    snprintf(id, 65, "%s", rec.id);
    store_sandbox_rec_clear(&rec);
    return 0;
}

/* The page's executions; sets *pos to the last one written and *more if one follows. */
static void put_executions(sbx_mgr_t *m, const char *id, const struct sbx_history_req *q,
                           struct out *o, int64_t *pos, bool *more)
{
    int done = 0;
    uint64_t bytes = 0;
    while (o->ok && !*more) {
        int want = q->limit - done + 1 < EXEC_BATCH ? q->limit - done + 1 : EXEC_BATCH;
        json_t *rows = NULL;
        if (store_exec_rows(m->store, id, *pos, q->newest_first, want, &rows, NULL) < 0)
            return;
        size_t i, n = json_array_size(rows);
        json_t *e;
        json_array_foreach(rows, i, e)
        {
            if (done >= q->limit || bytes >= HISTORY_PAGE_BYTES || !o->ok) {
                *more = o->ok;
                break;
            }
            put(o, ",", done ? 1 : 0);
            put_json(o, e, true);
            *pos = json_integer_value(json_object_get(e, "id"));
            bytes += put_logs(m, *pos, o);
            done++;
        }
        json_decref(rows);
        if ((int)n < want)
            return;
    }
}

bool sbx_exec_history_write(sbx_mgr_t *m, const char *id, const struct sbx_history_req *q,
                            sbx_write_fn write, void *ctx)
{
    struct out o = {write, ctx, true};
    int64_t pos = q->has_cursor     ? q->cursor
                  : q->newest_first ? INT64_MAX
                                    : store_exec_window_start(m->store, id, q->limit);
    bool more = false;
    put(&o, "{\"executions\":[", 15);
    put_executions(m, id, q, &o, &pos, &more);
    char tail[96];
    if (pos == INT64_MAX)
        snprintf(tail, sizeof(tail), "],\"next_cursor\":null,\"has_more\":false}\n");
    else
        snprintf(tail, sizeof(tail), "],\"next_cursor\":%" PRId64 ",\"has_more\":%s}\n", pos,
                 more ? "true" : "false");
    put(&o, tail, strlen(tail));
    return o.ok;
}

int sbx_exec_logs(sbx_mgr_t *m, const user_t *owner, const char *key, int64_t eid, int64_t start_id,
                  int limit, json_t **out, err_t *err)
{
    char id[65];
    json_t *execution = NULL, *logs = NULL;
    if (sbx_exec_history_open(m, owner, key, id, err) < 0 ||
        store_exec_get(m->store, id, eid, &execution, err) < 0)
        return -1;
    if (store_exec_log_rows(m->store, eid, start_id, limit, HISTORY_PAGE_BYTES, &logs, err) < 0) {
        json_decref(execution);
        return -1;
    }
    json_t *last = json_array_get(logs, json_array_size(logs) - 1);
    json_int_t cursor = last ? json_integer_value(json_object_get(last, "id")) : start_id;
    *out =
        json_pack("{s:o, s:o, s:I}", "execution", execution, "logs", logs, "next_start_id", cursor);
    return 0;
}
