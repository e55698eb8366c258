/* sandboxer snapshot create | ls | rm: named checkpoints to start sandboxes from. */
#include <stdio.h>
#include <string.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"

/* NAME on stdout, for scripts; what was kept on stderr, as fork does. */
static void print_snapshot(const json_t *snap, const char *given)
{
    _cleanup_free_ char *name = cli_safe(cli_jstr(snap, "name", given));
    _cleanup_free_ char *source = cli_safe(cli_jstr(snap, "source_id", "?"));
    bool memory = json_is_true(json_object_get(snap, "memory_preserved"));
    printf("%s\n", name);
    fflush(stdout);
    fprintf(stderr, "snapshot %s of %.*s (%s)\n", name, CLI_ID_SHORT, source,
            memory ? "memory preserved" : "files only: memory not preserved");
}

int cmd_snapshot_create(cli_t *cli, const cli_args_t *args, err_t *err)
{
    const char *name = cli_arg(args, 1);
    _cleanup_resp_ client_resp_t resp = {0};
    _cleanup_json_ json_t *body = json_object();
    if (!*name || json_object_set_new(body, "name", json_string(name)) < 0)
        return cli_usage(err, "snapshot create: '%s' is not a snapshot name", name);
    if (cli_checkpoint_post(cli, cli_arg(args, 0), "/snapshots", body, &resp, err) < 0)
        return -1;
    if (cli->json)
        cli_print_raw(&resp);
    else
        print_snapshot(resp.json, name);
    return 0;
}

static void add_snapshot(cli_table_t *t, const json_t *s, const cli_args_t *args)
{
    (void)args;
    char source[CLI_ID_SHORT + 1], created[32];
    snprintf(source, sizeof(source), "%s", cli_jstr(s, "source_id", "-"));
    const char *cells[] = {
        cli_jstr(s, "name", "?"),
        source,
        cli_jstr(s, "image", "-"),
        json_is_true(json_object_get(s, "memory_preserved")) ? "yes" : "no",
        cli_format_time(json_object_get(s, "created_at"), created, sizeof(created)),
    };
    cli_table_add(t, cells);
}

int cmd_snapshot_ls(cli_t *cli, const cli_args_t *args, err_t *err)
{
    static const char *const headers[] = {"NAME", "SOURCE", "IMAGE", "MEMORY", "CREATED", NULL};
    return cli_list(cli, args, "/snapshots", "snapshots", headers, add_snapshot, err);
}

static int remove_one(cli_t *cli, client_t *c, const char *name, err_t *err)
{
    _cleanup_free_ char *esc = client_escape(name);
    _cleanup_free_ char *path = xasprintf("/snapshots/%s", esc);
    return cli_delete(cli, c, path, "name", name, err);
}

int cmd_snapshot_rm(cli_t *cli, const cli_args_t *args, err_t *err)
{
    return cli_each_arg(cli, args, remove_one, err);
}
