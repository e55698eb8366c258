/* Store: execution history bounded per sandbox and removed with it; per-user limits. */
#include <string.h>

#include "common/util.h"
#include "store/store.h"
#include "store/store_sandboxes.h"
#include "tap.h"

static void add_sandbox(store_t *s, int64_t owner, const char *id, const char *status)
{
    sandbox_rec_t r = {0};
    snprintf(r.id, sizeof(r.id), "%s", id);
    snprintf(r.name, sizeof(r.name), "n-%s", id);
    r.owner_id = owner;
    snprintf(r.status, sizeof(r.status), "%s", status);
    snprintf(r.runtime, sizeof(r.runtime), "runc");
    r.created_at = r.last_active_at = now_unix();
    r.spec = json_object();
    err_t err = {0};
    ok(store_sandbox_insert(s, &r, &err) == 0, "insert sandbox %s (%s)", id, err.msg);
    json_decref(r.spec);
}

/* Bytes of output the store keeps for eid, and whether it is marked truncated. */
static size_t kept(store_t *s, const char *sid, int64_t eid, bool *truncated)
{
    json_t *e = NULL, *logs = NULL;
    size_t n = 0;
    if (store_exec_get(s, sid, eid, &e, NULL) < 0) {
        *truncated = true;
        return 0;
    }
    *truncated = json_is_true(json_object_get(e, "truncated"));
    store_exec_log_rows(s, eid, 0, 100000, SIZE_MAX, &logs, NULL);
    size_t i;
    json_t *row;
    json_array_foreach(logs, i, row) n += json_string_length(json_object_get(row, "content"));
    json_decref(logs);
    json_decref(e);
    return n;
}

static void test_history_cap(store_t *s, int64_t owner)
{
    err_t err = {0};
    add_sandbox(s, owner, "capped", "running");
    add_sandbox(s, owner, "other", "running");
    store_set_exec_log_max(s, 10000);
    static char chunk[1000];
    memset(chunk, 'x', sizeof(chunk));
    int64_t eids[4];
    for (int i = 0; i < 4; i++) { /* 4 executions of 4000 bytes each into 10000 */
        ok(store_exec_begin(s, "capped", "cmd", &eids[i], &err) == 0, "begin %d", i);
        for (int k = 0; k < 4; k++)
            store_exec_log(s, eids[i], 1, chunk, sizeof(chunk), &err);
        store_exec_end(s, eids[i], 0, &err);
    }
    int64_t total = store_exec_log_bytes(s, "capped");
    ok(total > 0 && total <= 10000, "the sandbox keeps at most its cap (%lld)", (long long)total);
    bool t0, t3;
    size_t k0 = kept(s, "capped", eids[0], &t0), k3 = kept(s, "capped", eids[3], &t3);
    ok(k0 == 0 && t0, "the oldest output went first and is marked truncated");
    ok(k3 == 4000 && !t3, "the newest is whole and not marked");
    /* another sandbox's history is not touched by this one's cap */
    int64_t o;
    store_exec_begin(s, "other", "x", &o, &err);
    store_exec_log(s, o, 2, "hello", 5, &err);
    bool to;
    ok(kept(s, "other", o, &to) == 5 && !to, "another sandbox keeps its own");
    /* output alone cannot keep commands forever: old executions go whole once empty */
    store_set_exec_log_max(s, 100);
    int64_t last = 0;
    for (int i = 0; i < 50; i++)
        store_exec_begin(s, "capped", "a command of some bytes", &last, &err);
    json_t *rows = NULL;
    store_exec_rows(s, "capped", 0, false, 1000, &rows, &err);
    ok(json_array_size(rows) <= 5 && store_exec_log_bytes(s, "capped") <= 100,
       "at most the cap in commands too (%zu executions)", json_array_size(rows));
    json_decref(rows);
    store_set_exec_log_max(s, 0);
}

static void test_history_goes_with_the_sandbox(store_t *s, int64_t owner)
{
    err_t err = {0};
    add_sandbox(s, owner, "gone", "running");
    int64_t eid;
    store_exec_begin(s, "gone", "echo", &eid, &err);
    store_exec_log(s, eid, 1, "out\n", 4, &err);
    ok(store_sandbox_set_deleted(s, "gone", "deleted", &err) == 0, "delete the sandbox");
    json_t *rows = NULL;
    ok(store_exec_rows(s, "gone", 0, false, 100, &rows, &err) == 0 && json_array_size(rows) == 0,
       "its executions are gone");
    json_decref(rows);
    ok(store_exec_log_rows(s, eid, 0, 100, 1 << 20, &rows, &err) == 0 && json_array_size(rows) == 0,
       "and their output");
    json_decref(rows);
    ok(store_exec_log(s, eid, 1, "late", 4, &err) == 0 && store_exec_log_bytes(s, "gone") == 0,
       "output arriving later is dropped");
    sandbox_rec_t r;
    ok(store_sandbox_get(s, -1, "gone", &r, &err) == 0 && strcmp(r.status, "terminated") == 0,
       "the row stays, terminated");
    store_sandbox_rec_clear(&r);
}

static void test_pages(store_t *s, int64_t owner)
{
    err_t err = {0};
    add_sandbox(s, owner, "paged", "running");
    int64_t ids[5];
    for (int i = 0; i < 5; i++)
        store_exec_begin(s, "paged", "c", &ids[i], &err);
    json_t *rows = NULL;
    store_exec_rows(s, "paged", ids[1], false, 2, &rows, &err);
    ok(json_array_size(rows) == 2 &&
           json_integer_value(json_object_get(json_array_get(rows, 0), "id")) == ids[2],
       "oldest first after a cursor");
    json_decref(rows);
    store_exec_rows(s, "paged", ids[3], true, 10, &rows, &err);
    ok(json_array_size(rows) == 3 &&
           json_integer_value(json_object_get(json_array_get(rows, 0), "id")) == ids[2],
       "newest first before a cursor");
    json_decref(rows);
    ok(store_exec_window_start(s, "paged", 2) == ids[3] - 1, "the window of the newest 2");
    static char big[3000];
    memset(big, 'b', sizeof(big));
    for (int i = 0; i < 4; i++)
        store_exec_log(s, ids[4], 1, big, sizeof(big), &err);
    store_exec_log_rows(s, ids[4], 0, 100, 5000, &rows, &err);
    ok(json_array_size(rows) == 1, "a page of output stops at its byte budget");
    json_decref(rows);
    store_exec_log_rows(s, ids[4], 0, 100, 10, &rows, &err);
    ok(json_array_size(rows) == 1, "but always holds one row");
    json_decref(rows);
}

int main(void)
{
    err_t err = {0};
    store_t *s = store_open(":memory:", &err);
    user_t u;
    store_user_create(s, "alice", false, &u, &err);
    test_history_cap(s, u.id);
    test_history_goes_with_the_sandbox(s, u.id);
    test_pages(s, u.id);
    store_close(s);
    return tap_done();
}
