/* sandboxer fork | tree | coalesce: trees of sandboxes, each forked from its parent. */
#include <stdio.h>
#include <string.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"

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
    _cleanup_resp_ client_resp_t resp = {0};
    if (cli_put_str(body, "label", cli_opt_str(args, "label"), "fork: ", err) < 0 ||
        cli_put_str(body, "hostname", cli_opt_str(args, "hostname"), "fork: ", err) < 0)
        return -1;
    if (cli_checkpoint_post(cli, cli_arg(args, 0), "/fork", body, &resp, err) < 0 ||
        !cli_answer_str(&resp, "id", err))
        return -1;
    if (cli->json)
        cli_print_raw(&resp);
    else
        print_fork(resp.json, cli_arg(args, 0));
    return 0;
}

int cmd_tree(cli_t *cli, const cli_args_t *args, err_t *err)
{
    _cleanup_resp_ client_resp_t resp = {0};
    client_t *c = cli_connect(cli, true, err);
    if (!c || cli_sandbox_call(c, cli_arg(args, 0), "GET", "/tree", NULL, &resp, err) < 0)
        return -1;
    const char *tree = cli_answer_str(&resp, "tree", err);
    if (!tree)
        return -1;
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
    _cleanup_resp_ client_resp_t resp = {0};
    client_t *c = cli_connect(cli, true, err);
    if (!c || cli_sandbox_id(c, cli_arg(args, 1), &final, err) < 0)
        return -1;
    _cleanup_free_ char *esc = client_escape(final);
    _cleanup_free_ char *suffix = xasprintf("/coalesce/%s", esc);
    /* With the long timeout: it deletes a whole subtree. */
    if (cli_checkpoint_post(cli, cli_arg(args, 0), suffix, NULL, &resp, err) < 0)
        return -1;
    if (cli->json)
        cli_print_raw(&resp);
    else
        print_coalesce(resp.json);
    return 0;
}
