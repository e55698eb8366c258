/* Store: execution history bounded per sandbox and removed with it; per-user limits. */
#include <string.h>

#include "common/util.h"
#include "sandbox/sandbox.h"
#include "store/store.h"
#include "store/store_sandboxes.h"
#include "tap.h"

static void add_sandbox(store_t *s, int64_t owner, const char *id, const char *status)
{
    sandbox_rec_t r = {0};
    snprintf(r.id, sizeof(r.id), "%s", id);
    snprintf(r.name, sizeof(r.name), "n-%s", id);
    r.owner_id = owner;
    r.status = (sandbox_status_t)sandbox_status_parse(status);
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
    ok(store_sandbox_get(s, -1, "gone", &r, &err) == 0 && r.status == SBX_TERMINATED,
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

static void test_limits_store(store_t *s)
{
    err_t err = {0};
    user_t bob;
    store_user_create(s, "bob", false, &bob, &err);
    user_limits_t l;
    ok(store_user_limits_get(s, bob.id, &l, &err) == 0 && l.max_running < 0 && l.max_cpus < 0,
       "a user without limits has every one unset");
    l.max_running = 3;
    l.max_cpus = 1.5;
    l.max_memory = 1 << 30;
    ok(store_user_limits_set(s, bob.id, &l, &err) == 0, "set limits");
    user_limits_t got;
    store_user_limits_get(s, bob.id, &got, &err);
    ok(got.max_running == 3 && got.max_cpus == 1.5 && got.max_memory == 1 << 30 &&
           got.max_pids < 0 && got.max_disk < 0,
       "limits round-trip, unset stays unset");
    add_sandbox(s, bob.id, "b1", "running");
    add_sandbox(s, bob.id, "b2", "hibernated");
    add_sandbox(s, bob.id, "b3", "terminated");
    user_usage_t u;
    ok(store_user_usage(s, bob.id, now_unix() - 60, &u, &err) == 0 && u.running == 1 &&
           u.sandboxes == 2 && u.created_recently == 3,
       "usage: 1 running, 2 not deleted, 3 made in the last minute (%lld %lld %lld)",
       (long long)u.running, (long long)u.sandboxes, (long long)u.created_recently);
    ok(store_user_usage(s, bob.id, now_unix() + 10, &u, &err) == 0 && u.created_recently == 0,
       "none made in the future");
}

static void test_limits_logic(void)
{
    err_t err = {0};
    user_limits_t l;
    store_limits_unset(&l);
    json_t *body = json_pack("{s:i, s:s, s:f, s:n}", "max_running", 2, "max_memory", "512M",
                             "max_cpus", 1.5, "max_pids", NULL);
    ok(sbx_limits_parse(body, &l, &err) == 0 && l.max_running == 2 && l.max_memory == 512 << 20 &&
           l.max_cpus == 1.5 && l.max_pids < 0,
       "limits parse: integers, sizes, numbers, null");
    json_decref(body);
    user_limits_t before = l;
    const char *bad[] = {"{\"max_running\": -1}",      "{\"max_cpus\": \"x\"}",
                         "{\"max_memory\": \"lots\"}", "{\"nope\": 1}",
                         "{\"max_pids\": 2.5}",        "{\"max_running\": 1, \"max_disk\": 0}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *j = json_loads(bad[i], 0, NULL);
        ok(sbx_limits_parse(j, &l, &err) < 0 && err.kind == ERR_INVALID &&
               memcmp(&l, &before, sizeof(l)) == 0,
           "refused, nothing changed: %s", bad[i]);
        json_decref(j);
    }
    ok(sbx_limits_check_size(&l, 1.5, 512 << 20, 100000, 0, &err) == 0, "at the limits: fits");
    ok(sbx_limits_check_size(&l, 2, 1, 1, 0, &err) < 0 && err.kind == ERR_FORBIDDEN &&
           strstr(err.msg, "max_cpus"),
       "over max_cpus: 403 naming it");
    ok(sbx_limits_check_size(&l, 1, (512 << 20) + 1, 1, 0, &err) < 0 &&
           strstr(err.msg, "max_memory"),
       "over max_memory: named");
    user_usage_t u = {.running = 2, .sandboxes = 2, .created_recently = 0};
    ok(sbx_limits_check_counts(&l, &u, true, &err) < 0 && err.kind == ERR_LIMIT &&
           strstr(err.msg, "max_running"),
       "a third running: 429 naming max_running");
    l.max_running = -1;
    l.max_creates_per_minute = 5;
    u.created_recently = 5;
    ok(sbx_limits_check_counts(&l, &u, true, &err) < 0 && strcmp(err.code, "rate_limited") == 0,
       "the sixth create of a minute: rate_limited");
    ok(sbx_limits_check_counts(&l, &u, false, &err) == 0, "a wake is no create");
    ok(sbx_check_host_size(100000, 0, &err) < 0 && strstr(err.msg, "host"),
       "more CPUs than the host: refused");
    ok(sbx_check_host_size(-1, 1ull << 50, &err) < 0, "more memory than the host: refused");
    ok(sbx_check_host_size(0.5, 64 << 20, &err) == 0, "a small sandbox fits");
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
    test_limits_store(s);
    store_close(s);
    test_limits_logic();
    return tap_done();
}
