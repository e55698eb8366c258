/* Per-verb argument parsing driven by the option spec string of the verb's table row. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/util.h"

#define MAX_OPTS 32

struct optspec {
    char short_name; /* 0 if none */
    char name[32];
    bool has_value;
};

struct given {
    int spec;          /* index into specs */
    const char *value; /* borrowed from argv; NULL for a flag */
};

struct cli_args {
    const char *verb;
    struct optspec specs[MAX_OPTS];
    int nspecs;
    bool stop_at_positional;
    int fixed_args; /* with stop_at_positional: positionals that do not stop option parsing */
    struct given *given;
    int ngiven;
    char **pos; /* borrowed from argv */
    int npos;
};

/* Parse one spec item: "name", "name=", "n|name" or "n|name=". */
static void spec_item(struct optspec *s, const char *item, size_t len)
{
    if (len > 2 && item[1] == '|') {
        s->short_name = item[0];
        item += 2;
        len -= 2;
    }
    if (len > 0 && item[len - 1] == '=') {
        s->has_value = true;
        len--;
    }
    if (len >= sizeof(s->name))
        len = sizeof(s->name) - 1;
    memcpy(s->name, item, len);
    s->name[len] = '\0';
}

static void parse_spec(cli_args_t *a, const char *spec)
{
    if (!spec)
        return;
    if (*spec == '+') {
        a->stop_at_positional = true;
        spec++;
    }
    while (*spec && a->nspecs < MAX_OPTS) {
        size_t len = strcspn(spec, ",");
        if (len > 0)
            spec_item(&a->specs[a->nspecs++], spec, len);
        spec += len + (spec[len] == ',');
    }
}

static int find_long(const cli_args_t *a, const char *name, size_t len)
{
    for (int i = 0; i < a->nspecs; i++)
        if (strlen(a->specs[i].name) == len && strncmp(a->specs[i].name, name, len) == 0)
            return i;
    return -1;
}

static int find_short(const cli_args_t *a, char c)
{
    for (int i = 0; i < a->nspecs; i++)
        if (a->specs[i].short_name == c)
            return i;
    return -1;
}

static void add_given(cli_args_t *a, int spec, const char *value)
{
    a->given = xrealloc(a->given, sizeof(*a->given) * (size_t)(a->ngiven + 1));
    a->given[a->ngiven++] = (struct given){spec, value};
}

/* Take the option's value from "=value"/"-nVALUE" (inline) or the next word; -1 if none. */
static int take_value(cli_args_t *a, int spec, const char *inline_value, int argc, char **argv,
                      int *i, err_t *err)
{
    const struct optspec *s = &a->specs[spec];
    if (!s->has_value) {
        if (inline_value)
            return cli_usage(err, "%s: option --%s takes no value", a->verb, s->name);
        add_given(a, spec, NULL);
        return 0;
    }
    if (!inline_value) {
        if (*i + 1 >= argc)
            return cli_usage(err, "%s: option --%s needs a value", a->verb, s->name);
        inline_value = argv[++*i];
    }
    add_given(a, spec, inline_value);
    return 0;
}

static int long_option(cli_args_t *a, int argc, char **argv, int *i, err_t *err)
{
    const char *name = argv[*i] + 2;
    const char *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    int spec = find_long(a, name, len);
    if (spec < 0)
        return cli_usage(err, "%s: unknown option '--%.*s'", a->verb, (int)len, name);
    return take_value(a, spec, eq ? eq + 1 : NULL, argc, argv, i, err);
}

static int short_option(cli_args_t *a, int argc, char **argv, int *i, err_t *err)
{
    const char *word = argv[*i];
    int spec = find_short(a, word[1]);
    if (spec < 0)
        return cli_usage(err, "%s: unknown option '%s'", a->verb, word);
    if (word[2] && !a->specs[spec].has_value)
        return cli_usage(err, "%s: unknown option '%s'", a->verb, word);
    return take_value(a, spec, word[2] ? word + 2 : NULL, argc, argv, i, err);
}

/* Options every verb takes; true if word was one of them. */
static bool common_option(cli_t *cli, const cli_args_t *a, const char *word, bool *help)
{
    if (strcmp(word, "--json") == 0 && find_long(a, "json", 4) < 0) {
        cli->json = true;
        return true;
    }
    if (strcmp(word, "--help") == 0 || (strcmp(word, "-h") == 0 && find_short(a, 'h') < 0)) {
        *help = true;
        return true;
    }
    return false;
}

static int check_count(const cli_args_t *a, const struct cli_verb *verb, err_t *err)
{
    if (a->npos < verb->min_args)
        return cli_usage(err, "%s: missing argument (%s)", a->verb, verb->synopsis);
    if (verb->max_args >= 0 && a->npos > verb->max_args)
        return cli_usage(err, "%s: unexpected argument '%s'", a->verb, a->pos[verb->max_args]);
    return 0;
}

static int parse_words(cli_t *cli, cli_args_t *a, int argc, char **argv, bool *help, err_t *err)
{
    bool options_done = false;
    for (int i = 0; i < argc; i++) {
        const char *w = argv[i];
        int r = 0;
        if (options_done || w[0] != '-' || w[1] == '\0') {
            a->pos[a->npos++] = argv[i];
            options_done = options_done || (a->stop_at_positional && a->npos > a->fixed_args);
        } else if (strcmp(w, "--") == 0) {
            options_done = true;
        } else if (common_option(cli, a, w, help)) {
            continue;
        } else if (w[1] == '-') {
            r = long_option(a, argc, argv, &i, err);
        } else {
            r = short_option(a, argc, argv, &i, err);
        }
        if (r < 0)
            return -1;
    }
    return 0;
}

int cli_args_parse(cli_t *cli, const struct cli_verb *verb, int argc, char **argv, cli_args_t **out,
                   bool *help, err_t *err)
{
    cli_args_t *a = xcalloc(1, sizeof(*a));
    a->verb = verb->name;
    a->pos = xcalloc((size_t)argc + 1, sizeof(*a->pos));
    a->fixed_args = verb->fixed_args > verb->min_args ? verb->fixed_args : verb->min_args;
    parse_spec(a, verb->opts);
    *help = false;
    if (parse_words(cli, a, argc, argv, help, err) < 0 ||
        (!*help && check_count(a, verb, err) < 0)) {
        cli_args_free(a);
        return -1;
    }
    *out = a;
    return 0;
}

void cli_args_free(cli_args_t *a)
{
    if (!a)
        return;
    free(a->given);
    free(a->pos);
    free(a);
}

/* The spec index of name; asking for an option the verb does not declare is a bug. */
static int spec_of(const cli_args_t *a, const char *name)
{
    int spec = find_long(a, name, strlen(name));
    if (spec < 0) {
        fprintf(stderr, "sandboxer: bug: verb '%s' has no option --%s\n", a->verb, name);
        abort();
    }
    return spec;
}

const char *cli_opt_str(const cli_args_t *a, const char *name)
{
    int spec = spec_of(a, name);
    for (int i = a->ngiven - 1; i >= 0; i--)
        if (a->given[i].spec == spec)
            return a->given[i].value;
    return NULL;
}

const char *cli_opt_nth(const cli_args_t *a, const char *name, int n)
{
    int spec = spec_of(a, name);
    for (int i = 0; i < a->ngiven; i++)
        if (a->given[i].spec == spec && n-- == 0)
            return a->given[i].value;
    return NULL;
}

int cli_opt_env(const cli_args_t *a, const char *name, json_t **out, err_t *err)
{
    const char *kv;
    *out = NULL;
    for (int i = 0; (kv = cli_opt_nth(a, name, i)); i++) {
        const char *eq = strchr(kv, '=');
        if (!eq || eq == kv) {
            json_decref(steal_pointer(out));
            return cli_usage(err, "%s: --%s wants KEY=VALUE, not '%s'", a->verb, name, kv);
        }
        if (!*out)
            *out = json_object();
        _cleanup_free_ char *key = xstrndup(kv, (size_t)(eq - kv));
        if (json_object_set_new(*out, key, json_string(eq + 1)) < 0) {
            json_decref(steal_pointer(out));
            return cli_usage(err, "%s: --%s %s is not UTF-8 text", a->verb, name, key);
        }
    }
    return 0;
}

bool cli_opt_flag(const cli_args_t *a, const char *name)
{
    int spec = spec_of(a, name);
    for (int i = 0; i < a->ngiven; i++)
        if (a->given[i].spec == spec)
            return true;
    return false;
}

int cli_nargs(const cli_args_t *a)
{
    return a->npos;
}

const char *cli_arg(const cli_args_t *a, int i)
{
    return i >= 0 && i < a->npos ? a->pos[i] : NULL;
}

/* An error about one item (absent, not ours, in the wrong state) lets the others go on. */
static bool error_is_per_item(const err_t *e)
{
    return e->kind == ERR_NOT_FOUND || e->kind == ERR_FORBIDDEN || e->kind == ERR_INVALID ||
           e->kind == ERR_CONFLICT;
}

int cli_put_str(json_t *obj, const char *key, const char *value, const char *prefix, err_t *err)
{
    if (value && json_object_set_new(obj, key, json_string(value)) < 0)
        return cli_usage(err, "%sthe %s '%s' is not UTF-8 text", prefix, key, value);
    return 0;
}

int cli_put_positive(json_t *obj, const char *key, const char *v, const char *verb,
                     const char *want, err_t *err)
{
    char *end;
    double n = v ? strtod(v, &end) : 0;
    if (!v)
        return 0;
    if (end == v || *end || !isfinite(n) || n <= 0)
        return cli_usage(err, "%s: --%s wants %s, not '%s'", verb, key, want, v);
    json_object_set_new(obj, key, json_real(n));
    return 0;
}

int cli_put_args(json_t *obj, const char *key, const cli_args_t *args, const char *verb, err_t *err)
{
    json_t *arr = json_array();
    json_object_set_new(obj, key, arr);
    for (int i = 1; i < cli_nargs(args); i++)
        if (json_array_append_new(arr, json_string(cli_arg(args, i))) < 0)
            return cli_usage(err, "%s: the argument '%s' is not UTF-8 text", verb,
                             cli_arg(args, i));
    return 0;
}

int cli_each_arg(cli_t *cli, const cli_args_t *args, cli_item_fn fn, err_t *err)
{
    int failed = 0;
    client_t *c = cli_connect(cli, true, err);
    if (!c)
        return -1;
    for (int i = 0; i < cli_nargs(args); i++)
        if (!*cli_arg(args, i))
            return cli_usage(err, "%s: an empty argument", args->verb);
    for (int i = 0; i < cli_nargs(args); i++) {
        err_t e = {0};
        if (fn(cli, c, cli_arg(args, i), &e) == 0)
            continue;
        if (!error_is_per_item(&e)) {
            *err = e;
            return -1;
        }
        err_prefix(&e, "%s", cli_arg(args, i));
        cli_print_error(cli, &e);
        failed++;
    }
    return failed ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
