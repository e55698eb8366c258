/*
 * The idle reaper: once a second it hibernates each running sandbox that has been idle
 * longer than its idle_timeout (from create; else the daemon's --idle-timeout; 0: never).
 * Idle means no exec, file operation, proxied request or terminal traffic touched it
 * (last_active_at) and none is in progress now. The next request wakes it transparently.
 * It also acts on deadlines that passed (deadline.c), CRIU or not.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/util.h"
#include "runtime/runtime.h"
#include "sandbox_internal.h"

#define REAPER_INTERVAL_S 1

/* The sandbox's idle timeout in seconds; 0 for never. */
static int64_t idle_timeout(const sbx_mgr_t *m, const sandbox_rec_t *r)
{
    json_t *t = json_object_get(r->spec, "idle_timeout");
    if (json_is_integer(t) && json_integer_value(t) >= 0)
        return json_integer_value(t);
    return m->cfg.idle_timeout_s;
}

/* No exec or terminal session holds it now (a hint: hibernation checks again). */
static bool quiet(sbx_mgr_t *m, const char *id)
{
    struct sbx_live *l = sbx_live_get(m, id, false);
    if (!l)
        return false;
    bool q = atomic_load(&l->execs) == 0;
    sbx_live_put(m, l);
    return q;
}

static void reap_one(sbx_mgr_t *m, const sandbox_rec_t *r, double now)
{
    int64_t timeout = idle_timeout(m, r);
    if (timeout <= 0 || r->status != SBX_RUNNING || r->intent != SBX_INTENT_NONE ||
        now - r->last_active_at < (double)timeout || !quiet(m, r->id))
        return;
    /* A sandbox whose last idle hibernation failed is not tried every second: it waits a
     * whole idle period again (last_error's time counts as activity here). */
    json_t *last = json_object_get(r->spec, "last_error");
    const char *op = json_string_value(json_object_get(last, "op"));
    double at = json_number_value(json_object_get(last, "at"));
    if (op && strcmp(op, "hibernate") == 0 && now - at < (double)timeout)
        return;
    err_t err = {0};
    int rc = sbx_hibernate_if_idle(m, r->id, (double)timeout, &err);
    if (rc == 0)
        log_info("sandbox.idle_hibernated", "sandbox=%s idle_s=%.0f", r->id,
                 now - r->last_active_at);
    else if (rc < 0 && err.kind != ERR_CONFLICT)
        log_warn("sandbox.idle_hibernate_failed", "sandbox=%s code=%s msg=\"%s\"", r->id, err.code,
                 err.msg);
    else if (rc < 0 && strcmp(err.code, "checkpoint_failed") == 0)
        log_warn("sandbox.idle_hibernate_failed", "sandbox=%s code=%s msg=\"%s\"", r->id, err.code,
                 err.msg);
}

static void reap_once(sbx_mgr_t *m)
{
    sbx_deadlines_reap(m);
    if (!runtime_criu_available())
        return; /* no idle hibernation without CRIU */
    sandbox_rec_t *items = NULL;
    size_t n = 0;
    if (store_sandbox_list_reapable(m->store, m->cfg.idle_timeout_s > 0, &items, &n, NULL) < 0)
        return;
    double now = now_unix();
    for (size_t i = 0; i < n; i++)
        reap_one(m, &items[i], now);
    store_sandbox_list_free(items, n);
}

static void *reaper(void *arg)
{
    sbx_mgr_t *m = arg;
    pthread_mutex_lock(&m->reaper_lock);
    while (!m->reaper_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += REAPER_INTERVAL_S;
        if (pthread_cond_timedwait(&m->reaper_cond, &m->reaper_lock, &ts) != ETIMEDOUT)
            continue;
        pthread_mutex_unlock(&m->reaper_lock);
        reap_once(m);
        pthread_mutex_lock(&m->reaper_lock);
    }
    pthread_mutex_unlock(&m->reaper_lock);
    return NULL;
}

int sbx_reaper_start(sbx_mgr_t *m, err_t *err)
{
    pthread_mutex_init(&m->reaper_lock, NULL);
    pthread_cond_init(&m->reaper_cond, NULL);
    if (!runtime_criu_available())
        log_warn("sandbox.reaper_off", "msg=\"CRIU does not work here: idle sandboxes stay up\"");
    if (pthread_create(&m->reaper, NULL, reaper, m) != 0)
        return err_sys(err, "start the idle reaper");
    m->reaping = true;
    return 0;
}

void sbx_reaper_stop(sbx_mgr_t *m)
{
    if (!m->reaping)
        return;
    pthread_mutex_lock(&m->reaper_lock);
    m->reaper_stop = true;
    pthread_cond_signal(&m->reaper_cond);
    pthread_mutex_unlock(&m->reaper_lock);
    pthread_join(m->reaper, NULL);
    m->reaping = false;
}
