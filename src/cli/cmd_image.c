/* sandboxer image pull | ls | rm: the daemon's image store over /images. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"

#define DIGEST_SHORT 12 /* hex digits of a digest that `image ls` shows */

/* "sha256:0123…" as its first DIGEST_SHORT hex digits, into out. */
static const char *short_digest(const char *digest, char *out, size_t size)
{
    const char *colon = strchr(digest, ':');
    snprintf(out, size, "%.*s", DIGEST_SHORT, colon ? colon + 1 : digest);
    return out;
}

/* POST path with body (long timeout) and print the stored ref: pull and import alike. */
static int store_image(cli_t *cli, const char *path, json_t *body, const char *verb,
                       const char *given, err_t *err)
{
    _cleanup_resp_ client_resp_t resp = {0};
    client_t *c = cli_connect(cli, true, err);
    if (!c)
        return -1;
    client_set_timeout(c, CLI_PULL_TIMEOUT_S);
    if (client_call(c, "POST", path, body, &resp, err) < 0)
        return -1;
    if (cli->json) {
        cli_print_raw(&resp);
        return 0;
    }
    /* The ref as the daemon stored it on stdout, for scripts; what was stored on stderr. */
    char digest[DIGEST_SHORT + 1], size[32];
    _cleanup_free_ char *shown = cli_safe(cli_jstr(resp.json, "ref", given));
    _cleanup_free_ char *dg =
        cli_safe(short_digest(cli_jstr(resp.json, "digest", "-"), digest, sizeof(digest)));
    printf("%s\n", shown);
    fflush(stdout);
    fprintf(stderr, "%s %s, digest %s, %s\n", verb, shown, dg,
            cli_format_size(json_object_get(resp.json, "size"), size, sizeof(size)));
    return 0;
}

int cmd_image_pull(cli_t *cli, const cli_args_t *args, err_t *err)
{
    const char *ref = cli_arg(args, 0);
    _cleanup_json_ json_t *body = json_object();
    if (!*ref || json_object_set_new(body, "image", json_string(ref)) < 0)
        return cli_usage(err, "image pull: '%s' is not an image reference", ref);
    return store_image(cli, "/images/pull", body, "pulled", ref, err);
}

int cmd_image_import(cli_t *cli, const cli_args_t *args, err_t *err)
{
    const char *path = cli_arg(args, 0);
    const char *name = cli_opt_str(args, "name");
    _cleanup_free_ char *abs = realpath(path, NULL);
    if (!abs)
        return err_set(err, ERR_INVALID, errno, "usage", "image import: %s: %s", path,
                       strerror(errno));
    _cleanup_json_ json_t *body = json_pack("{s:s}", "path", abs);
    if (name && json_object_set_new(body, "ref", json_string(name)) < 0)
        return cli_usage(err, "image import: '%s' is not an image reference", name);
    return store_image(cli, "/images/import", body, "imported", path, err);
}

static void add_image(cli_table_t *t, const json_t *img, const cli_args_t *args)
{
    (void)args;
    char digest[DIGEST_SHORT + 1], size[32], pulled[32];
    const char *cells[] = {
        cli_jstr(img, "ref", "?"),
        short_digest(cli_jstr(img, "digest", "-"), digest, sizeof(digest)),
        cli_format_size(json_object_get(img, "size"), size, sizeof(size)),
        cli_format_time(json_object_get(img, "pulled_at"), pulled, sizeof(pulled)),
    };
    cli_table_add(t, cells);
}

int cmd_image_ls(cli_t *cli, const cli_args_t *args, err_t *err)
{
    static const char *const headers[] = {"REF", "DIGEST", "SIZE", "PULLED", NULL};
    return cli_list(cli, args, "/images", "images", headers, add_image, err);
}

static int remove_one(cli_t *cli, client_t *c, const char *ref, err_t *err)
{
    /* A ref spans path segments (docker.io/library/busybox:latest): keep its slashes. */
    _cleanup_free_ char *esc = client_escape_path(ref);
    _cleanup_free_ char *path = xasprintf("/images/%s", esc);
    return cli_delete(cli, c, path, "ref", ref, err);
}

int cmd_image_rm(cli_t *cli, const cli_args_t *args, err_t *err)
{
    return cli_each_arg(cli, args, remove_one, err);
}
