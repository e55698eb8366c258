/* sandboxer token create | ls | rm: API tokens over /auth/tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"

static void set_if(json_t *obj, const char *key, const char *value)
{
    if (value)
        json_object_set_new(obj, key, json_string(value));
}

/* Tell, on stderr so that stdout holds only the secret, what was made and where it went. */
static void note_created(const json_t *tok, const char *saved_to)
{
    _cleanup_free_ char *id = cli_safe(cli_jstr(tok, "id", "?"));
    _cleanup_free_ char *user = cli_safe(cli_jstr(tok, "user", "?"));
    bool admin = json_is_true(json_object_get(tok, "admin"));
    fprintf(stderr, "created %s for %suser %s; it is shown once\n", id, admin ? "admin " : "",
            user);
    if (saved_to)
        fprintf(stderr, "saved to %s\n", saved_to);
}

int cmd_token_create(cli_t *cli, const cli_args_t *args, err_t *err)
{
    _cleanup_json_ json_t *body = json_object();
    set_if(body, "name", cli_opt_str(args, "name"));
    set_if(body, "user", cli_opt_str(args, "user"));
    if (cli_opt_flag(args, "admin"))
        json_object_set_new(body, "admin", json_true());
    _cleanup_resp_ client_resp_t resp = {0};
    client_t *c = cli_connect(cli, true, err);
    if (!c || client_call(c, "POST", "/auth/tokens", body, &resp, err) < 0)
        return -1;
    const char *secret = cli_answer_str(&resp, "token", err);
    if (!secret)
        return -1;
    /* Show the secret before saving it, so a failed save does not lose it. */
    if (cli->json)
        cli_print_raw(&resp);
    else
        printf("%s\n", secret);
    fflush(stdout);
    _cleanup_free_ char *path = cli_opt_flag(args, "save") ? cli_token_path() : NULL;
    if (path && cli_token_save(secret, path, err) < 0)
        return -1;
    if (!cli->json)
        note_created(resp.json, path);
    return 0;
}

/* The query string for token ls: ?user=NAME, ?all=true or none. */
static int list_path(const cli_args_t *args, char **path, err_t *err)
{
    const char *user = cli_opt_str(args, "user");
    bool all = cli_opt_flag(args, "all");
    if (user && all)
        return cli_usage(err, "token ls: --user and --all exclude each other");
    if (all) {
        *path = xstrdup("/auth/tokens?all=true");
    } else if (user) {
        _cleanup_free_ char *u = client_escape(user);
        *path = xasprintf("/auth/tokens?user=%s", u);
    } else {
        *path = xstrdup("/auth/tokens");
    }
    return 0;
}

static void add_token(cli_table_t *t, const json_t *tok, const cli_args_t *args)
{
    (void)args;
    char created[32], used[32];
    const char *name = cli_jstr(tok, "name", "");
    const char *cells[] = {
        cli_jstr(tok, "id", "?"),
        *name ? name : "-",
        cli_jstr(tok, "user", "?"),
        cli_format_time(json_object_get(tok, "created_at"), created, sizeof(created)),
        cli_format_time(json_object_get(tok, "last_used_at"), used, sizeof(used)),
    };
    cli_table_add(t, cells);
}

int cmd_token_ls(cli_t *cli, const cli_args_t *args, err_t *err)
{
    static const char *const headers[] = {"ID", "NAME", "USER", "CREATED", "LAST USED", NULL};
    _cleanup_free_ char *path = NULL;
    if (list_path(args, &path, err) < 0)
        return -1;
    return cli_list(cli, args, path, "tokens", headers, add_token, err);
}

static int remove_one(cli_t *cli, client_t *c, const char *id, err_t *err)
{
    _cleanup_free_ char *esc = client_escape(id);
    _cleanup_free_ char *path = xasprintf("/auth/tokens/%s", esc);
    return cli_delete(cli, c, path, "id", id, err);
}

int cmd_token_rm(cli_t *cli, const cli_args_t *args, err_t *err)
{
    return cli_each_arg(cli, args, remove_one, err);
}
