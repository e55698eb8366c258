/* What verbs share: a GET that lists, a DELETE of one item, a string the answer must hold. */
#include <stdio.h>

#include "cli_internal.h"
#include "common/cleanup.h"

static void print_table(const json_t *items, const cli_args_t *args, const char *const *headers,
                        cli_row_fn row)
{
    int ncols = 0;
    while (headers[ncols])
        ncols++;
    _cleanup_table_ cli_table_t *t = cli_table_new(ncols, headers);
    size_t i;
    const json_t *item;
    json_array_foreach(items, i, item)
    {
        row(t, item, args);
    }
    cli_table_print(t, stdout);
}

int cli_list(cli_t *cli, const cli_args_t *args, const char *path, const char *key,
             const char *const *headers, cli_row_fn row, err_t *err)
{
    _cleanup_resp_ client_resp_t resp = {0};
    client_t *c = cli_connect(cli, true, err);
    if (!c || client_call(c, "GET", path, NULL, &resp, err) < 0)
        return -1;
    const json_t *items = json_object_get(resp.json, key);
    if (!json_is_array(items))
        return err_set(err, ERR_INTERNAL, 0, "bad_response", "the daemon's answer lists no %s",
                       key);
    if (cli->json)
        cli_print_raw(&resp);
    else
        print_table(items, args, headers, row);
    return 0;
}

int cli_delete(cli_t *cli, client_t *c, const char *path, const char *key, const char *item,
               err_t *err)
{
    _cleanup_resp_ client_resp_t resp = {0};
    if (client_call(c, "DELETE", path, NULL, &resp, err) < 0)
        return -1;
    if (cli->json) {
        cli_print_raw(&resp);
    } else {
        _cleanup_free_ char *shown = cli_safe(cli_jstr(resp.json, key, item));
        printf("%s\n", shown);
    }
    return 0;
}

const char *cli_answer_str(const client_resp_t *resp, const char *key, err_t *err)
{
    const char *v = cli_jstr(resp->json, key, NULL);
    if (!v)
        err_set(err, ERR_INTERNAL, 0, "bad_response", "the daemon's answer holds no %s", key);
    return v;
}
