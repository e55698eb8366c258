/* sandboxer fork | tree | coalesce: trees of sandboxes, each forked from its parent. */
#include <stdio.h>
#include <string.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"

/* Set obj[key] to the string value, if given; text that is not UTF-8 is a usage error. */
static int put_str(json_t *obj, const char *key, const char *value, err_t *err)
{
    if (value && json_object_set_new(obj, key, json_string(value)) < 0)
        return cli_usage(err, "fork: the %s '%s' is not UTF-8 text", key, value);
    return 0;
}

/* The child's id on stdout, for `CHILD=$(sandboxer fork ID)`; what was kept on stderr. */
static void print_fork(const json_t *child, const char *parent_key)
{
    const char *id = cli_jstr(child, "id", "?");
    _cleanup_free_ char *shown = cli_safe(id);
    _cleanup_free_ char *parent = cli_safe(cli_jstr(child, "parent_id", parent_key));
    bool memory = json_is_true(json_object_get(child, "memory_preserved"));
    printf("%s\n", shown);
    fflush(stdout);
    fprintf(stderr, "forked %.*s -> %.*s (%s)\n", CLI_ID_SHORT, parent, CLI_ID_SHORT, shown,
            memory ? "memory preserved" : "files only: memory not preserved");
}

int cmd_fork(cli_t *cli, const cli_args_t *args, err_t *err)
{
    _cleanup_json_ json_t *body = json_object();
    _cleanup_free_ char *path = NULL;
    _cleanup_resp_ client_resp_t resp = {0};
    if (put_str(body, "label", cli_opt_str(args, "label"), err) < 0 ||
        put_str(body, "hostname", cli_opt_str(args, "hostname"), err) < 0)
        return -1;
    client_t *c = cli_connect(cli, true, err);
    if (!c || cli_sandbox_path(c, cli_arg(args, 0), "/fork", &path, err) < 0)
        return -1;
    client_set_timeout(c, CLI_CHECKPOINT_TIMEOUT_S);
    if (client_call(c, "POST", path, body, &resp, err) < 0)
        return -1;
    if (!cli_jstr(resp.json, "id", NULL))
        return err_set(err, ERR_INTERNAL, 0, "bad_response", "the daemon's answer holds no id");
    if (cli->json)
        cli_print_raw(&resp);
    else
        print_fork(resp.json, cli_arg(args, 0));
    return 0;
}

int cmd_tree(cli_t *cli, const cli_args_t *args, err_t *err)
{
    _cleanup_free_ char *path = NULL;
    _cleanup_resp_ client_resp_t resp = {0};
    client_t *c = cli_connect(cli, true, err);
    if (!c || cli_sandbox_path(c, cli_arg(args, 0), "/tree", &path, err) < 0 ||
        client_call(c, "GET", path, NULL, &resp, err) < 0)
        return -1;
    const char *tree = cli_jstr(resp.json, "tree", NULL);
    if (!tree)
        return err_set(err, ERR_INTERNAL, 0, "bad_response", "the daemon's answer holds no tree");
    if (cli->json) {
        cli_print_raw(&resp);
        return 0;
    }
    /* Labels are other people's text: keep the newlines of the drawing, no other controls. */
    _cleanup_free_ char *shown = cli_safe_lines(tree);
    size_t len = strlen(shown);
    fputs(shown, stdout);
    if (len == 0 || shown[len - 1] != '\n')
        putchar('\n');
    return 0;
}

/* The message on stderr, then each deleted id on stdout: `… | xargs` gets only the ids. */
static void print_coalesce(const json_t *out)
{
    _cleanup_free_ char *msg = cli_safe(cli_jstr(out, "message", "coalesced"));
    const json_t *gone = json_object_get(out, "terminated_sandboxes");
    size_t i;
    const json_t *id;
    fprintf(stderr, "%s\n", msg);
    json_array_foreach(gone, i, id)
    {
        _cleanup_free_ char *shown = cli_safe(json_is_string(id) ? json_string_value(id) : "?");
        printf("%s\n", shown);
    }
}

int cmd_coalesce(cli_t *cli, const cli_args_t *args, err_t *err)
{
    _cleanup_free_ char *final = NULL;
    _cleanup_free_ char *path = NULL;
    _cleanup_resp_ client_resp_t resp = {0};
    client_t *c = cli_connect(cli, true, err);
    if (!c || cli_sandbox_id(c, cli_arg(args, 1), &final, err) < 0)
        return -1;
    _cleanup_free_ char *esc = client_escape(final);
    _cleanup_free_ char *suffix = xasprintf("/coalesce/%s", esc);
    if (cli_sandbox_path(c, cli_arg(args, 0), suffix, &path, err) < 0)
        return -1;
    client_set_timeout(c, CLI_CHECKPOINT_TIMEOUT_S); /* it deletes a whole subtree */
    if (client_call(c, "POST", path, NULL, &resp, err) < 0)
        return -1;
    if (cli->json)
        cli_print_raw(&resp);
    else
        print_coalesce(resp.json);
    return 0;
}
