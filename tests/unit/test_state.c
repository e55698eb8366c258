/* The lifecycle's state machine: the name tables and the transition table (state.c), checked
 * against what docs/lifecycle.md promises. */
#include "sandbox/sandbox_internal.h"
#include "tap.h"

static void names_round_trip(void)
{
    for (int s = 0; s < SBX_STATUS_COUNT; s++)
        ok(sandbox_status_parse(sandbox_status_name((sandbox_status_t)s)) == s, "status %s",
           sandbox_status_name((sandbox_status_t)s));
    for (int i = 0; i < SBX_INTENT_COUNT; i++)
        ok(sandbox_intent_parse(sandbox_intent_name((sandbox_intent_t)i)) == i, "intent '%s'",
           sandbox_intent_name((sandbox_intent_t)i));
    ok(sandbox_status_parse("sleeping") == -1, "an unknown status is -1");
    ok(sandbox_status_parse(NULL) == -1, "no status is -1");
    ok(sandbox_intent_parse(NULL) == SBX_INTENT_NONE, "no intent is none");
    ok(sandbox_intent_parse("explode") == -1, "an unknown intent is -1");
    is_str(sandbox_status_name(SBX_STATUS_COUNT), "unknown", "out of range names unknown");
}

/* Which operations may start from which status: the table docs/lifecycle.md draws. */
static void transitions(void)
{
    static const struct {
        enum sbx_op op;
        sandbox_status_t from;
        bool allowed, noop;
    } cases[] = {
        {SBX_OP_PAUSE, SBX_RUNNING, true, false},
        {SBX_OP_PAUSE, SBX_PAUSED, false, true},
        {SBX_OP_PAUSE, SBX_HIBERNATED, false, false},
        {SBX_OP_UNPAUSE, SBX_PAUSED, true, false},
        {SBX_OP_UNPAUSE, SBX_RUNNING, false, true},
        {SBX_OP_HIBERNATE, SBX_RUNNING, true, false},
        {SBX_OP_HIBERNATE, SBX_PAUSED, true, false},
        {SBX_OP_HIBERNATE, SBX_HIBERNATED, false, true},
        {SBX_OP_HIBERNATE, SBX_EXITED, false, false},
        {SBX_OP_WAKE, SBX_HIBERNATED, true, false},
        {SBX_OP_WAKE, SBX_RUNNING, false, true},
        {SBX_OP_WAKE, SBX_EXITED, false, false},
        {SBX_OP_FORK, SBX_RUNNING, true, false},
        {SBX_OP_FORK, SBX_PAUSED, true, false},
        {SBX_OP_FORK, SBX_HIBERNATED, false, false},
        {SBX_OP_FORK, SBX_EXITED, false, false},
        {SBX_OP_SNAPSHOT, SBX_PAUSED, true, false},
        {SBX_OP_DELETE, SBX_EXITED, true, false},
        {SBX_OP_DELETE, SBX_HIBERNATED, true, false},
        {SBX_OP_DELETE, SBX_TERMINATED, false, true},
        {SBX_OP_EXIT, SBX_RUNNING, true, false},
        {SBX_OP_EXIT, SBX_HIBERNATED, false, false},
        {SBX_OP_EXIT, SBX_TERMINATED, false, false},
        {SBX_OP_PROCESSES, SBX_RUNNING, true, false},
        {SBX_OP_PROCESSES, SBX_PAUSED, false, false},
        {SBX_OP_PROCESSES, SBX_CREATING, false, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ok(sbx_op_allowed(cases[i].op, cases[i].from) == cases[i].allowed, "%s from %s: %s",
           sbx_op_name(cases[i].op), sandbox_status_name(cases[i].from),
           cases[i].allowed ? "allowed" : "refused");
        ok(sbx_op_noop(cases[i].op, cases[i].from) == cases[i].noop, "%s from %s: %s",
           sbx_op_name(cases[i].op), sandbox_status_name(cases[i].from),
           cases[i].noop ? "nothing to do" : "not a no-op");
    }
    /* No operation is both allowed and a no-op in one status. */
    for (int op = 0; op < SBX_OP_COUNT; op++)
        for (int s = 0; s < SBX_STATUS_COUNT; s++)
            if (sbx_op_allowed((enum sbx_op)op, (sandbox_status_t)s) &&
                sbx_op_noop((enum sbx_op)op, (sandbox_status_t)s))
                ok(0, "%s from %s is both", sbx_op_name((enum sbx_op)op),
                   sandbox_status_name((sandbox_status_t)s));
}

/* What the refusals say, and that a change under way refuses everything. */
static void refusals(void)
{
    sandbox_rec_t r = {.status = SBX_PAUSED};
    err_t err = {0};
    ok(sbx_require_status(SBX_OP_PROCESSES, &r, &err) < 0 && tap_streq(err.code, "sandbox_paused"),
       "work in a paused sandbox: sandbox_paused");
    r.status = SBX_HIBERNATED;
    ok(sbx_require_status(SBX_OP_FORK, &r, &err) < 0 && tap_streq(err.code, "sandbox_hibernated") &&
           err.kind == ERR_CONFLICT,
       "fork of a hibernated one: 409 sandbox_hibernated");
    r.status = SBX_EXITED;
    ok(sbx_require_status(SBX_OP_HIBERNATE, &r, &err) < 0 &&
           tap_streq(err.code, "sandbox_not_running") && strstr(err.msg, "exited"),
       "hibernate of an exited one names its status");
    r.status = SBX_RUNNING;
    r.intent = SBX_INTENT_HIBERNATE;
    ok(sbx_require_status(SBX_OP_PROCESSES, &r, &err) < 0 && tap_streq(err.code, "sandbox_busy") &&
           strstr(err.msg, "hibernate"),
       "a change under way: sandbox_busy naming it");
    r.intent = SBX_INTENT_NONE;
    ok(sbx_require_status(SBX_OP_PROCESSES, &r, &err) == 0, "a running one takes work");
}

int main(void)
{
    names_round_trip();
    transitions();
    refusals();
    return tap_done();
}
