/* sandboxer doctor: the host checks of src/doctor/ as a table, JSON or one summary line. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "doctor/doctor.h"

#define DEFAULT_STATE_DIR "/var/lib/sandboxer"
#define MAX_CHECKS        64

/* The checks asked for (all without arguments), with their results. */
struct run {
    const struct doctor_check *checks[MAX_CHECKS];
    struct doctor_result results[MAX_CHECKS];
    size_t n;
    json_t *fixed; /* [{id, from, to}] */
    bool fix_failed;
};

static int select_checks(const cli_args_t *args, struct run *run, err_t *err)
{
    size_t n;
    const struct doctor_check *all = doctor_checks(&n);
    if (cli_nargs(args) == 0) {
        for (size_t i = 0; i < n && i < MAX_CHECKS; i++)
            run->checks[run->n++] = &all[i];
        return 0;
    }
    for (int i = 0; i < cli_nargs(args) && run->n < MAX_CHECKS; i++) {
        const struct doctor_check *c = doctor_find(cli_arg(args, i));
        if (!c)
            return cli_usage(err, "doctor: no check '%s' (`sandboxer doctor` lists them)",
                             cli_arg(args, i));
        run->checks[run->n++] = c;
    }
    return 0;
}

static bool fixable(const struct doctor_check *c, const struct doctor_result *r)
{
    return c->sysctl && !r->ok && strcmp(r->value, "absent") != 0;
}

/* --fix: set each selected sysctl that is off; what changed goes to run->fixed. */
static void fix(const struct doctor_opts *o, struct run *run, bool quiet)
{
    for (size_t i = 0; i < run->n; i++) {
        const struct doctor_check *c = run->checks[i];
        struct doctor_result r;
        if (!c->sysctl)
            continue;
        doctor_run(o, c, &r);
        if (!fixable(c, &r))
            continue;
        char from[64];
        err_t err = {0};
        if (doctor_fix_sysctl(c, from, sizeof(from), &err) < 0) {
            fprintf(stderr, "sandboxer: doctor: cannot set %s: %s\n", c->sysctl, err.msg);
            run->fix_failed = true;
            continue;
        }
        json_array_append_new(run->fixed, json_pack("{s:s, s:s, s:I}", "id", c->id, "from", from,
                                                    "to", (json_int_t)c->set));
        if (!quiet)
            printf("fixed %s: %s -> %ld (also in %s)\n", c->sysctl, from, c->set,
                   DOCTOR_SYSCTL_CONF);
    }
}

static const char *status_word(const struct doctor_check *c, const struct doctor_result *r)
{
    if (r->skipped)
        return "skip";
    if (r->ok)
        return "ok";
    return c->need == DOCTOR_REQUIRED ? "FAIL" : c->need == DOCTOR_RECOMMENDED ? "WARN" : "no";
}

/* Print text from column indent on, wrapped before column 100. */
static void print_wrapped(const char *prefix, const char *text, int indent)
{
    int col = printf("%*s%s", indent, "", prefix);
    for (const char *p = text; *p;) {
        while (*p == ' ')
            p++;
        int len = (int)strcspn(p, " ");
        if (col + 1 + len > 100 && col > indent + (int)strlen(prefix)) {
            col = printf("\n%*s", indent + (int)strlen(prefix), "") - 1;
        } else if (p != text) {
            col += printf(" ");
        }
        col += printf("%.*s", len, p);
        p += len;
    }
    printf("\n");
}

static int count(const struct run *run, enum doctor_need need, json_t *ids)
{
    int missing = 0;
    for (size_t i = 0; i < run->n; i++)
        if (run->checks[i]->need == need && !run->results[i].ok && !run->results[i].skipped) {
            missing++;
            if (ids)
                json_array_append_new(ids, json_string(run->checks[i]->id));
        }
    return missing;
}

static void print_table(const struct run *run, const struct doctor_opts *o)
{
    struct utsname u;
    uname(&u);
    printf("sandboxer doctor: Linux %s, state dir %s\n\n", u.release, o->state_dir);
    printf("%-6s  %-34s %-12s %s\n", "STATUS", "CHECK", "NEED", "FOUND");
    int sysctls = 0;
    for (size_t i = 0; i < run->n; i++) {
        const struct doctor_check *c = run->checks[i];
        const struct doctor_result *r = &run->results[i];
        _cleanup_free_ char *found = cli_safe(r->found);
        printf("%-6s  %-34s %-12s %s\n", status_word(c, r), c->id, doctor_need_name(c->need),
               found);
        if (!r->ok && !r->skipped && r->fix[0])
            print_wrapped("fix: ", r->fix, 8);
        sysctls += fixable(c, r);
    }
    int req = count(run, DOCTOR_REQUIRED, NULL), rec = count(run, DOCTOR_RECOMMENDED, NULL),
        opt = count(run, DOCTOR_OPTIONAL, NULL);
    printf("\nRequired: %s. Recommended: %d to change", req ? "MISSING" : "all ok", rec);
    if (sysctls)
        printf(" (`sandboxer doctor --fix` sets the %d sysctl%s among them)", sysctls,
               sysctls == 1 ? "" : "s");
    printf(". Optional: %d not here.\n", opt);
}

/* One or two lines, for `make run`. */
static void print_short(const struct run *run)
{
    json_t *req _cleanup_json_ = json_array(), *rec _cleanup_json_ = json_array();
    count(run, DOCTOR_REQUIRED, req);
    count(run, DOCTOR_RECOMMENDED, rec);
    printf("sandboxer doctor: required %s", json_array_size(req) ? "MISSING:" : "ok");
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v) printf(" %s", json_string_value(v));
    if (json_array_size(rec)) {
        printf("; recommended to change:");
        json_array_foreach(rec, i, v) printf(" %s", json_string_value(v));
    }
    printf(" (`sandboxer doctor` says how)\n");
}

static void print_json(const struct run *run, const struct doctor_opts *o)
{
    struct utsname u;
    uname(&u);
    json_t *checks = json_array();
    for (size_t i = 0; i < run->n; i++) {
        const struct doctor_check *c = run->checks[i];
        const struct doctor_result *r = &run->results[i];
        json_array_append_new(checks, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s?, s:b}", "id",
                                                c->id, "need", doctor_need_name(c->need), "what",
                                                c->what, "status",
                                                r->skipped ? "skipped"
                                                : r->ok    ? "ok"
                                                           : "missing",
                                                "value", r->value, "found", r->found, "fix",
                                                r->ok ? NULL : r->fix, "fixable", fixable(c, r)));
    }
    json_t *req = json_array(), *rec = json_array(), *opt = json_array();
    count(run, DOCTOR_REQUIRED, req);
    count(run, DOCTOR_RECOMMENDED, rec);
    count(run, DOCTOR_OPTIONAL, opt);
    json_t *out _cleanup_json_ = json_pack(
        "{s:s, s:s, s:b, s:o, s:O, s:o, s:o, s:o}", "kernel", u.release, "state_dir", o->state_dir,
        "ok", json_array_size(req) == 0, "checks", checks, "fixed", run->fixed, "required_missing",
        req, "recommended_missing", rec, "optional_missing", opt);
    cli_print_json(out);
}

int cmd_doctor(cli_t *cli, const cli_args_t *args, err_t *err)
{
    struct doctor_opts o = {.timeout_ms = 5000, .quick = cli_opt_flag(args, "short")};
    const char *env_dir = getenv("SANDBOXER_STATE_DIR");
    o.state_dir = cli_opt_str(args, "state-dir");
    if (!o.state_dir)
        o.state_dir = env_dir && *env_dir ? env_dir : DEFAULT_STATE_DIR;
    const char *t = cli_opt_str(args, "timeout");
    long long secs = 5;
    if (t && !parse_int(t, 1, 600, &secs))
        return cli_usage(err, "doctor: --timeout wants seconds (1 to 600), not '%s'", t);
    o.timeout_ms = (int)secs * 1000;
    struct run run = {.fixed = json_array()};
    if (select_checks(args, &run, err) < 0) {
        json_decref(run.fixed);
        return -1;
    }
    if (cli_opt_flag(args, "fix"))
        fix(&o, &run, cli->json || cli_opt_flag(args, "short"));
    for (size_t i = 0; i < run.n; i++)
        doctor_run(&o, run.checks[i], &run.results[i]);
    if (cli->json)
        print_json(&run, &o);
    else if (cli_opt_flag(args, "short"))
        print_short(&run);
    else
        print_table(&run, &o);
    json_decref(run.fixed);
    bool required_missing = count(&run, DOCTOR_REQUIRED, NULL) > 0;
    return required_missing || run.fix_failed ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
