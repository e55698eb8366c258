/*
 * The lifecycle as one state machine: a table of which operation may start from which status
 * (docs/lifecycle.md draws it), and the one change protocol every operation follows — take
 * the sandbox's lock, re-read its record, check the transition, write the intent, do the
 * work, commit or roll back. A status read before the lock is only ever a hint.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "runtime/runtime.h"
#include "sandbox_internal.h"

#define QUIESCE_TIMEOUT_S 10
#define BIT(s)            (1u << (s))
#define LIVE              (BIT(SBX_RUNNING) | BIT(SBX_PAUSED))

/* One row of the transition table. */
struct transition {
    const char *name;        /* in messages: "fork", "hibernate" ... */
    unsigned from;           /* statuses the operation may start from */
    unsigned noop;           /* statuses in which it has nothing to do (answered as done) */
    sandbox_intent_t intent; /* written while it works (NONE: a quick change) */
    bool preempt;            /* kill the container before taking the lock (delete, coalesce) */
    bool wait_forever;       /* take the lock without the quiesce timeout (the exit watcher) */
};

static const struct transition table[SBX_OP_COUNT] = {
    [SBX_OP_PAUSE] = {"pause", BIT(SBX_RUNNING), BIT(SBX_PAUSED), SBX_INTENT_NONE},
    [SBX_OP_UNPAUSE] = {"unpause", BIT(SBX_PAUSED), BIT(SBX_RUNNING), SBX_INTENT_NONE},
    [SBX_OP_HIBERNATE] = {"hibernate", LIVE, BIT(SBX_HIBERNATED), SBX_INTENT_HIBERNATE},
    [SBX_OP_WAKE] = {"wake", BIT(SBX_HIBERNATED), LIVE, SBX_INTENT_WAKE},
    [SBX_OP_FORK] = {"fork", LIVE, 0, SBX_INTENT_NONE},
    [SBX_OP_SNAPSHOT] = {"snapshot", LIVE, 0, SBX_INTENT_NONE},
    [SBX_OP_DELETE] = {"delete", LIVE | BIT(SBX_HIBERNATED) | BIT(SBX_EXITED) | BIT(SBX_CREATING),
                       BIT(SBX_TERMINATED), SBX_INTENT_DELETE, true},
    [SBX_OP_COALESCE] = {"coalesce", LIVE | BIT(SBX_HIBERNATED) | BIT(SBX_EXITED),
                         BIT(SBX_TERMINATED), SBX_INTENT_COALESCE, true},
    [SBX_OP_EXIT] = {"exit", LIVE, 0, SBX_INTENT_NONE, false, true},
    [SBX_OP_PROCESSES] = {"process", BIT(SBX_RUNNING), 0, SBX_INTENT_NONE},
};

const char *sbx_op_name(enum sbx_op op)
{
    return (unsigned)op < SBX_OP_COUNT ? table[op].name : "change";
}

bool sbx_op_allowed(enum sbx_op op, sandbox_status_t from)
{
    return (unsigned)op < SBX_OP_COUNT && (table[op].from & BIT(from));
}

bool sbx_op_noop(enum sbx_op op, sandbox_status_t from)
{
    return (unsigned)op < SBX_OP_COUNT && (table[op].noop & BIT(from));
}

int sbx_require_status(enum sbx_op op, const sandbox_rec_t *r, err_t *err)
{
    if (r->intent != SBX_INTENT_NONE)
        return err_set(err, ERR_CONFLICT, 0, "sandbox_busy",
                       "the sandbox is busy: a %s of it is under way",
                       sandbox_intent_name(r->intent));
    if (sbx_op_allowed(op, r->status))
        return 0;
    if (r->status == SBX_PAUSED)
        return err_set(err, ERR_CONFLICT, 0, "sandbox_paused",
                       "the sandbox is paused; unpause it first");
    if (r->status == SBX_HIBERNATED)
        return err_set(err, ERR_CONFLICT, 0, "sandbox_hibernated",
                       "cannot %s a hibernated sandbox; wake it first", sbx_op_name(op));
    return err_set(err, ERR_CONFLICT, 0, "sandbox_not_running", "cannot %s a sandbox that is %s",
                   sbx_op_name(op), sandbox_status_name(r->status));
}

int sbx_lock_quiesced(struct sbx_live *l, err_t *err)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += QUIESCE_TIMEOUT_S;
    atomic_fetch_add(&l->changing, 1); /* followers of process output let go for it */
    int rc = pthread_rwlock_timedwrlock(&l->lock, &ts);
    atomic_fetch_sub(&l->changing, 1);
    if (rc != 0)
        return err_set(err, ERR_CONFLICT, 0, "sandbox_busy",
                       "execs or terminal sessions are still open in the sandbox; try again "
                       "when they end");
    return 0;
}

/* Lock c's sandbox for a change (bounded unless the operation must wait). */
static int lock_for(struct sbx_change *c, err_t *err)
{
    if (table[c->op].wait_forever) {
        pthread_rwlock_wrlock(&c->l->lock);
        sbx_fswatches_suspend(c->l);
        return 0;
    }
    if (sbx_lock_quiesced(c->l, err) < 0)
        return -1;
    sbx_fswatches_suspend(c->l);
    return 0;
}

int sbx_change_begin(sbx_mgr_t *m, const user_t *owner, const char *key, enum sbx_op op,
                     struct sbx_change *c, err_t *err)
{
    memset(c, 0, sizeof(*c));
    c->m = m;
    c->op = op;
    sandbox_rec_t hint;
    int rc = owner ? sbx_lookup(m, owner, key, &hint, err)
                   : store_sandbox_get(m->store, -1, key, &hint, err);
    if (rc < 0)
        return -1;
    snprintf(c->id, sizeof(c->id), "%s", hint.id);
    c->l = sbx_live_get(m, c->id, true);
    /* A delete ends the execs that hold the lock for reading by ending the container. The
     * exit watcher may see that end before this change has the lock: counted here, the end
     * is left to this change to record (a delete, not an exit). */
    if (table[op].preempt && hint.status != SBX_TERMINATED) {
        err_t ignored = {0};
        atomic_fetch_add(&c->l->preempting, 1);
        c->preempting = true;
        runtime_kill(sbx_runtime(&hint), c->id, SIGKILL, true, &ignored);
    }
    store_sandbox_rec_clear(&hint);
    sbx_barrier("change.before_lock");
    if (lock_for(c, err) < 0) {
        if (c->preempting)
            atomic_fetch_sub(&c->l->preempting, 1);
        sbx_live_put(m, c->l);
        c->l = NULL;
        return -1;
    }
    c->locked = true;
    /* The record as it is now that nobody else can change it. */
    if (store_sandbox_get(m->store, -1, c->id, &c->rec, err) < 0) {
        sbx_change_end(c);
        return -1;
    }
    c->from = c->rec.status;
    if (c->rec.intent == SBX_INTENT_NONE && sbx_op_noop(op, c->rec.status))
        return 1;
    /* A change recorded ahead for many sandboxes at once (coalesce marks every victim in one
     * transaction) is carried out here: its own intent does not make the sandbox busy. */
    if (table[op].intent != SBX_INTENT_NONE && c->rec.intent == table[op].intent) {
        c->intent_written = true;
        return 0;
    }
    if (sbx_require_status(op, &c->rec, err) < 0) {
        sbx_change_end(c);
        return -1;
    }
    if (table[op].intent != SBX_INTENT_NONE) {
        if (store_sandbox_set_status(m->store, c->id, c->from, table[op].intent, false, 0, err) <
            0) {
            sbx_change_end(c);
            return -1;
        }
        c->intent_written = true;
    }
    return 0;
}

int sbx_change_commit(struct sbx_change *c, sandbox_status_t to, err_t *err)
{
    if (store_sandbox_set_status(c->m->store, c->id, to, SBX_INTENT_NONE, false, 0, err) < 0)
        return -1;
    c->intent_written = false;
    c->rec.status = to;
    c->rec.intent = SBX_INTENT_NONE;
    return 0;
}

void sbx_change_rollback(struct sbx_change *c)
{
    if (c->intent_written)
        store_sandbox_set_status(c->m->store, c->id, c->from, SBX_INTENT_NONE, false, 0, NULL);
    c->intent_written = false;
}

void sbx_change_end(struct sbx_change *c)
{
    if (c->intent_written)
        sbx_change_rollback(c);
    if (c->preempting && c->l)
        atomic_fetch_sub(&c->l->preempting, 1);
    c->preempting = false;
    if (c->locked)
        pthread_rwlock_unlock(&c->l->lock);
    c->locked = false;
    /* A deleted sandbox never runs again: its live entry (which this change may have made
     * anew after the delete dropped it) goes, or it would stay for good. */
    if (c->l && c->rec.id[0] && c->rec.status == SBX_TERMINATED)
        sbx_live_remove(c->m, c->id);
    if (c->l)
        sbx_live_put(c->m, c->l);
    c->l = NULL;
    store_sandbox_rec_clear(&c->rec);
}

/* ---- test points (crash-safety and race tests only; inert unless the environment asks) ---- */

void sbx_fault_point(const char *name)
{
    const char *want = getenv("SANDBOXER_FAULT");
    if (want && strcmp(want, name) == 0) {
        log_warn("fault.injected", "point=%s", name);
        raise(SIGKILL);
    }
}

void sbx_barrier(const char *name)
{
    /* SANDBOXER_BARRIER=NAME:DIR: once the test creates DIR/NAME.armed, the next thread to pass
     * point NAME takes it (unlinks it), creates DIR/NAME.reached and waits (at most 60 s)
     * until the test creates DIR/NAME.go. */
    const char *want = getenv("SANDBOXER_BARRIER");
    const char *colon = want ? strchr(want, ':') : NULL;
    if (!colon || (size_t)(colon - want) != strlen(name) || strncmp(want, name, strlen(name)))
        return;
    char *armed = xasprintf("%s/%s.armed", colon + 1, name);
    char *reached = xasprintf("%s/%s.reached", colon + 1, name);
    char *go = xasprintf("%s/%s.go", colon + 1, name);
    if (unlink(armed) == 0) {
        close(open(reached, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
        log_warn("barrier.reached", "point=%s", name);
        for (int i = 0; i < 60000 && access(go, F_OK) != 0; i++)
            usleep(1000);
        log_warn("barrier.passed", "point=%s", name);
    }
    free(armed);
    free(reached);
    free(go);
}
