/* sandboxer version, sandboxer whoami. */
#include <stdio.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "config.h"

#define HEALTH_TIMEOUT_S 10

/* The daemon's version from GET /healthz (no auth) as a new JSON string, or NULL with err. */
static json_t *server_version(client_t *c, err_t *err)
{
    _cleanup_resp_ client_resp_t resp = {0};
    client_set_timeout(c, HEALTH_TIMEOUT_S);
    if (client_call(c, "GET", "/healthz", NULL, &resp, err) < 0)
        return NULL;
    json_t *v = json_object_get(resp.json, "version");
    if (!json_is_string(v)) {
        err_set(err, ERR_INTERNAL, 0, "bad_response", "the daemon's /healthz names no version");
        return NULL;
    }
    return json_incref(v);
}

int cmd_version(cli_t *cli, const cli_args_t *args, err_t *err)
{
    (void)args;
    client_t *c = cli_connect(cli, false, err);
    if (!c)
        return -1; /* a malformed --url or SANDBOXER_URL: worth failing for */
    if (!cli->json) {
        printf("sandboxer %s\n", SANDBOXER_VERSION);
        fflush(stdout); /* shown even if the daemon is slow to answer */
    }
    err_t serr = {0};
    _cleanup_json_ json_t *server = server_version(c, &serr);
    if (cli->json) {
        _cleanup_json_ json_t *out =
            json_pack("{s:s, s:O?}", "client", SANDBOXER_VERSION, "server", server);
        cli_print_json(out);
    } else if (server) {
        _cleanup_free_ char *v = cli_safe(json_string_value(server));
        printf("server %s\n", v);
    }
    if (!server) {
        _cleanup_free_ char *msg = cli_safe(serr.msg);
        fprintf(stderr, "sandboxer: no server version: %s\n", msg);
    }
    return 0;
}

int cmd_whoami(cli_t *cli, const cli_args_t *args, err_t *err)
{
    (void)args;
    _cleanup_resp_ client_resp_t resp = {0};
    client_t *c = cli_connect(cli, true, err);
    if (!c || client_call(c, "GET", "/auth/me", NULL, &resp, err) < 0)
        return -1;
    if (cli->json) {
        cli_print_raw(&resp);
        return 0;
    }
    const json_t *tok = json_object_get(resp.json, "token");
    _cleanup_free_ char *user = cli_safe(cli_jstr(resp.json, "name", "?"));
    _cleanup_free_ char *tid = cli_safe(cli_jstr(tok, "id", "?"));
    _cleanup_free_ char *tname = cli_safe(cli_jstr(tok, "name", ""));
    printf("%s%s token %s", user,
           json_is_true(json_object_get(resp.json, "admin")) ? " (admin)" : "", tid);
    if (*tname)
        printf(" \"%s\"", tname);
    putchar('\n');
    return 0;
}
