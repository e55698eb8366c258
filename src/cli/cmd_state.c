/* sandboxer pause | unpause | hibernate | wake: freezing a sandbox in memory or on disk. */
#include <stdbool.h>
#include <stdio.h>

#include "cli_internal.h"
#include "common/cleanup.h"

/* One state change: the method and the path after /sandboxes/{id}. */
struct state_change {
    const char *method;
    const char *suffix;
};

static const struct state_change pause_change = {"PUT", "/pause"};
static const struct state_change unpause_change = {"DELETE", "/pause"};
static const struct state_change hibernate_change = {"POST", "/hibernate"};
static const struct state_change wake_change = {"POST", "/wake"};

/* wake's body: {"cold": true} with --cold (the CLI runs one verb, so a file-scope value). */
static json_t *wake_body;

/* Ask for the change on one sandbox and print "ID status" (or the answer, with --json); a
 * wake that could not keep memory says so. */
static int change_one(cli_t *cli, client_t *c, const char *key, const struct state_change *sc,
                      err_t *err)
{
    _cleanup_resp_ client_resp_t resp = {0};
    const json_t *body = sc == &wake_change ? wake_body : NULL;
    if (cli_sandbox_call(c, key, sc->method, sc->suffix, body, &resp, err) < 0)
        return -1;
    if (cli->json) {
        cli_print_raw(&resp);
    } else {
        _cleanup_free_ char *id = cli_safe(cli_jstr(resp.json, "id", key));
        _cleanup_free_ char *status = cli_safe(cli_jstr(resp.json, "status", "?"));
        bool cold = json_is_false(json_object_get(resp.json, "memory_preserved"));
        printf("%s %s%s\n", id, status, cold ? " (started from its files; memory not kept)" : "");
    }
    return 0;
}

static int pause_one(cli_t *cli, client_t *c, const char *key, err_t *err)
{
    return change_one(cli, c, key, &pause_change, err);
}

static int unpause_one(cli_t *cli, client_t *c, const char *key, err_t *err)
{
    return change_one(cli, c, key, &unpause_change, err);
}

static int hibernate_one(cli_t *cli, client_t *c, const char *key, err_t *err)
{
    return change_one(cli, c, key, &hibernate_change, err);
}

static int wake_one(cli_t *cli, client_t *c, const char *key, err_t *err)
{
    return change_one(cli, c, key, &wake_change, err);
}

/* Each id in turn; a checkpoint or a restore of a big sandbox takes a while. */
static int change_each(cli_t *cli, const cli_args_t *args, cli_item_fn fn, err_t *err)
{
    client_t *c = cli_connect(cli, true, err);
    if (!c)
        return -1;
    client_set_timeout(c, CLI_CHECKPOINT_TIMEOUT_S);
    return cli_each_arg(cli, args, fn, err);
}

int cmd_pause(cli_t *cli, const cli_args_t *args, err_t *err)
{
    return change_each(cli, args, pause_one, err);
}

int cmd_unpause(cli_t *cli, const cli_args_t *args, err_t *err)
{
    return change_each(cli, args, unpause_one, err);
}

int cmd_hibernate(cli_t *cli, const cli_args_t *args, err_t *err)
{
    return change_each(cli, args, hibernate_one, err);
}

int cmd_wake(cli_t *cli, const cli_args_t *args, err_t *err)
{
    wake_body = cli_opt_flag(args, "cold") ? json_pack("{s:b}", "cold", 1) : NULL;
    int rc = change_each(cli, args, wake_one, err);
    json_decref(wake_body);
    return rc;
}
