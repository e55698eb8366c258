/* sandboxer create | ls | inspect | rm: sandboxes over /sandboxes, and naming one by its id. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"

#define ID_LEN        64 /* hex digits of a full sandbox id */
#define MIN_ID_PREFIX 4  /* a shorter hex word is too likely to match by accident */

/* --- naming a sandbox ------------------------------------------------------------------- */

static bool is_id_prefix(const char *key)
{
    size_t n = strspn(key, "0123456789abcdef");
    return key[n] == '\0' && n >= MIN_ID_PREFIX && n < ID_LEN;
}

/* The one id in sandboxes that starts with key, or NULL if none does; a name equal to key
 * wins (the daemon takes names too), and two matching ids are an error. */
static int match_prefix(const json_t *sandboxes, const char *key, const char **id, err_t *err)
{
    size_t i, n = strlen(key);
    const json_t *s;
    int matches = 0;
    *id = NULL;
    json_array_foreach(sandboxes, i, s)
    {
        const char *sid = cli_jstr(s, "id", "");
        if (strcmp(cli_jstr(s, "name", ""), key) == 0) {
            *id = sid;
            return 0;
        }
        if (strncmp(sid, key, n) == 0 && matches++ == 0)
            *id = sid;
    }
    if (matches > 1)
        return err_set(err, ERR_INVALID, 0, "ambiguous_id",
                       "'%s' is the start of %d sandbox ids; give more of the id", key, matches);
    return 0;
}

/* key, or the full id it is a unique prefix of, as a new string. */
static int resolve_key(client_t *c, const char *key, char **out, err_t *err)
{
    _cleanup_resp_ client_resp_t resp = {0};
    const char *id = NULL;
    if (is_id_prefix(key)) {
        if (client_call(c, "GET", "/sandboxes", NULL, &resp, err) < 0 ||
            match_prefix(json_object_get(resp.json, "sandboxes"), key, &id, err) < 0)
            return -1;
    }
    *out = xstrdup(id && *id ? id : key);
    return 0;
}

int cli_sandbox_id(client_t *c, const char *key, char **out, err_t *err)
{
    if (!*key)
        return cli_usage(err, "an empty sandbox id");
    return resolve_key(c, key, out, err);
}

int cli_sandbox_path(client_t *c, const char *key, const char *suffix, char **out, err_t *err)
{
    _cleanup_free_ char *id = NULL;
    if (cli_sandbox_id(c, key, &id, err) < 0)
        return -1;
    _cleanup_free_ char *esc = client_escape(id);
    *out = xasprintf("/sandboxes/%s%s", esc, suffix);
    return 0;
}

int cli_sandbox_call(client_t *c, const char *key, const char *method, const char *suffix,
                     const json_t *body, client_resp_t *resp, err_t *err)
{
    _cleanup_free_ char *path = NULL;
    if (cli_sandbox_path(c, key, suffix, &path, err) < 0)
        return -1;
    return client_call(c, method, path, body, resp, err);
}

int cli_checkpoint_post(cli_t *cli, const char *key, const char *suffix, const json_t *body,
                        client_resp_t *resp, err_t *err)
{
    client_t *c = cli_connect(cli, true, err);
    if (!c)
        return -1;
    client_set_timeout(c, CLI_CHECKPOINT_TIMEOUT_S);
    return cli_sandbox_call(c, key, "POST", suffix, body, resp, err);
}

/* --- create ----------------------------------------------------------------------------- */

/* Bytes as an integer, a size like "512M" as the string (the daemon reads it the same way). */
static int put_size(json_t *body, const char *key, const char *v, err_t *err)
{
    long long bytes;
    uint64_t size;
    if (!v)
        return 0;
    if (parse_int(v, 1, LLONG_MAX, &bytes))
        json_object_set_new(body, key, json_integer(bytes));
    else if (parse_size(v, &size) && size > 0)
        json_object_set_new(body, key, json_string(v));
    else
        return cli_usage(err, "create: --%s wants a size like 512M or 2G, not '%s'", key, v);
    return 0;
}

static int put_pids(json_t *body, const char *v, err_t *err)
{
    long long pids;
    if (!v)
        return 0;
    if (!parse_int(v, 1, INT_MAX, &pids))
        return cli_usage(err, "create: --pids wants a positive integer, not '%s'", v);
    json_object_set_new(body, "pids", json_integer(pids));
    return 0;
}

static int put_ports(json_t *body, const cli_args_t *args, err_t *err)
{
    const char *v;
    long long port;
    json_t *ports = NULL;
    for (int i = 0; (v = cli_opt_nth(args, "port", i)); i++) {
        if (!parse_int(v, 1, 65535, &port)) {
            json_decref(ports);
            return cli_usage(err, "create: --port wants a TCP port (1-65535), not '%s'", v);
        }
        if (!ports)
            ports = json_array();
        json_array_append_new(ports, json_integer(port));
    }
    if (ports)
        json_object_set_new(body, "ports", ports);
    return 0;
}

/* --network MODE and, for "proxy", each --allow HOST into egress_allow (the daemon checks
 * the names). */
static int put_network(json_t *body, const cli_args_t *args, err_t *err)
{
    const char *net = cli_opt_str(args, "network");
    if (net && strcmp(net, "none") != 0 && strcmp(net, "open") != 0 && strcmp(net, "proxy") != 0)
        return cli_usage(err, "create: --network is none, open or proxy, not '%s'", net);
    if (net)
        json_object_set_new(body, "network", json_string(net));
    const char *v;
    json_t *allow = NULL;
    for (int i = 0; (v = cli_opt_nth(args, "allow", i)); i++) {
        if (!allow)
            allow = json_array();
        json_array_append_new(allow, json_string(v));
    }
    if (allow && (!net || strcmp(net, "proxy") != 0)) {
        json_decref(allow);
        return cli_usage(err, "create: --allow goes with --network proxy");
    }
    if (allow)
        json_object_set_new(body, "egress_allow", allow);
    return 0;
}

/* The words after IMAGE (after "--" or not) as the main process's args. */
static int put_args(json_t *body, const cli_args_t *args, err_t *err)
{
    if (cli_nargs(args) < 2)
        return 0;
    return cli_put_args(body, "args", args, "create", err);
}

static void put_flags(json_t *body, const cli_args_t *args)
{
    if (cli_opt_flag(args, "interactive"))
        json_object_set_new(body, "interactive", json_true());
    if (cli_opt_flag(args, "public"))
        json_object_set_new(body, "public", json_true());
    if (cli_opt_flag(args, "net-raw"))
        json_object_set_new(body, "net_raw", json_true());
    if (cli_opt_flag(args, "setuid"))
        json_object_set_new(body, "setuid", json_true());
}

/* Options that shape a sandbox made from an image; one made from a snapshot takes its
 * process, environment and limits from the snapshot, so they would be silently ignored. */
static const char *const image_only_opts[] = {
    "interactive", "env",     "cpus",  "memory",  "pids",   "disk",     "public",
    "port",        "network", "allow", "net-raw", "setuid", "template", "runtime"};

/* --snapshot NAME: {"snapshot", "label"?, "hostname"?}. */
static int snapshot_body(const cli_args_t *args, const char *snapshot, json_t *body, err_t *err)
{
    if (cli_nargs(args) > 0)
        return cli_usage(err, "create: give an IMAGE or --snapshot, not both");
    if (!*snapshot)
        return cli_usage(err, "create: an empty snapshot name");
    for (size_t i = 0; i < ARRAY_SIZE(image_only_opts); i++)
        if (cli_opt_flag(args, image_only_opts[i]))
            return cli_usage(err,
                             "create: --%s does not go with --snapshot, which takes only "
                             "--label and --hostname",
                             image_only_opts[i]);
    if (cli_put_str(body, "snapshot", snapshot, "", err) < 0 ||
        cli_put_str(body, "label", cli_opt_str(args, "label"), "", err) < 0 ||
        cli_put_str(body, "hostname", cli_opt_str(args, "hostname"), "", err) < 0)
        return -1;
    return 0;
}

static int create_body(const cli_args_t *args, json_t *body, err_t *err)
{
    json_t *env = NULL;
    const char *snapshot = cli_opt_str(args, "snapshot");
    if (snapshot)
        return snapshot_body(args, snapshot, body, err);
    const char *tpl = cli_opt_str(args, "template");
    if (tpl && cli_nargs(args) > 0)
        return cli_usage(err, "create: give an IMAGE or --template, not both");
    if (cli_nargs(args) > 0 && !*cli_arg(args, 0))
        return cli_usage(err, "create: an empty image name");
    if (cli_opt_env(args, "env", &env, err) < 0)
        return -1;
    if (env)
        json_object_set_new(body, "env", env);
    /* no IMAGE: the daemon's default template (base) */
    if ((cli_nargs(args) > 0 && cli_put_str(body, "image", cli_arg(args, 0), "", err) < 0) ||
        (tpl && cli_put_str(body, "template", tpl, "", err) < 0) ||
        cli_put_str(body, "label", cli_opt_str(args, "label"), "", err) < 0 ||
        cli_put_str(body, "hostname", cli_opt_str(args, "hostname"), "", err) < 0 ||
        cli_put_str(body, "runtime", cli_opt_str(args, "runtime"), "", err) < 0 ||
        cli_put_positive(body, "cpus", cli_opt_str(args, "cpus"), "create",
                         "a positive number, like 0.5 or 2", err) < 0 ||
        put_size(body, "memory", cli_opt_str(args, "memory"), err) < 0 ||
        put_size(body, "disk", cli_opt_str(args, "disk"), err) < 0 ||
        put_pids(body, cli_opt_str(args, "pids"), err) < 0 || put_ports(body, args, err) < 0 ||
        put_network(body, args, err) < 0 || put_args(body, args, err) < 0)
        return -1;
    put_flags(body, args);
    return 0;
}

int cmd_create(cli_t *cli, const cli_args_t *args, err_t *err)
{
    _cleanup_json_ json_t *body = json_object();
    _cleanup_resp_ client_resp_t resp = {0};
    if (create_body(args, body, err) < 0)
        return -1;
    client_t *c = cli_connect(cli, true, err);
    if (!c)
        return -1;
    /* The daemon may pull the image first, or restore the snapshot's memory. */
    client_set_timeout(c, CLI_PULL_TIMEOUT_S);
    if (client_call(c, "POST", "/sandboxes", body, &resp, err) < 0)
        return -1;
    const char *id = cli_answer_str(&resp, "id", err);
    if (!id)
        return -1;
    if (cli->json) {
        cli_print_raw(&resp);
    } else {
        _cleanup_free_ char *shown = cli_safe(id);
        printf("%s\n", shown);
    }
    return 0;
}

/* --- ls, inspect, rm -------------------------------------------------------------------- */

/* A terminated sandbox is shown only with --all. */
static void add_sandbox(cli_table_t *t, const json_t *s, const cli_args_t *args)
{
    char id[CLI_ID_SHORT + 1], created[32];
    const char *status = cli_jstr(s, "status", "?");
    const char *label = cli_jstr(s, "label", "");
    if (!cli_opt_flag(args, "all") && strcmp(status, "terminated") == 0)
        return;
    snprintf(id, sizeof(id), "%s", cli_jstr(s, "id", "?"));
    const char *cells[] = {
        id,
        cli_jstr(s, "name", "-"),
        *label ? label : "-",
        cli_jstr(s, "image", "-"),
        status,
        cli_format_time(json_object_get(s, "created_at"), created, sizeof(created)),
    };
    cli_table_add(t, cells);
}

int cmd_ls(cli_t *cli, const cli_args_t *args, err_t *err)
{
    static const char *const headers[] = {"ID",     "NAME",    "LABEL", "IMAGE",
                                          "STATUS", "CREATED", NULL};
    return cli_list(cli, args, "/sandboxes", "sandboxes", headers, add_sandbox, err);
}

int cmd_inspect(cli_t *cli, const cli_args_t *args, err_t *err)
{
    _cleanup_resp_ client_resp_t resp = {0};
    client_t *c = cli_connect(cli, true, err);
    if (!c || cli_sandbox_call(c, cli_arg(args, 0), "GET", "", NULL, &resp, err) < 0)
        return -1;
    cli_print_json(resp.json); /* indented either way: it is read by people and scripts alike */
    return 0;
}

static int remove_one(cli_t *cli, client_t *c, const char *key, err_t *err)
{
    _cleanup_free_ char *path = NULL;
    if (cli_sandbox_path(c, key, "", &path, err) < 0)
        return -1;
    return cli_delete(cli, c, path, "id", key, err);
}

int cmd_rm(cli_t *cli, const cli_args_t *args, err_t *err)
{
    return cli_each_arg(cli, args, remove_one, err);
}
