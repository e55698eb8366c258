/* Reaching the daemon: endpoint and token from options, environment and the token file. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/util.h"

/* An environment variable, with an empty value counted as unset. */
static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

char *cli_token_path(void)
{
    const char *xdg = env("XDG_CONFIG_HOME");
    if (xdg && xdg[0] == '/') /* the spec says relative values are to be ignored */
        return xasprintf("%s/sandboxer/token", xdg);
    const char *home = env("HOME");
    if (!home) {
        struct passwd *pw = getpwuid(getuid());
        home = pw && pw->pw_dir ? pw->pw_dir : "/";
    }
    return xasprintf("%s/.config/sandboxer/token", home);
}

/* Wipe and free a string that held a secret. */
static void free_secret(char *s)
{
    if (s)
        explicit_bzero(s, strlen(s));
    free(s);
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
        s++;
    size_t n = strlen(s);
    while (n > 0 && strchr(" \t\r\n", s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* The first line of the token file, trimmed, in *out (NULL when there is no file). */
static int read_token_file(char **out, err_t *err)
{
    _cleanup_free_ char *path = cli_token_path();
    _cleanup_fclose_ FILE *f = fopen(path, "re");
    *out = NULL;
    if (!f)
        return errno == ENOENT ? 0 : err_sys(err, "cannot read the token file %s", path);
    char *line = NULL;
    size_t cap = 0;
    if (getline(&line, &cap, f) > 0) {
        char *t = trim(line);
        if (*t)
            *out = xstrdup(t);
    }
    free_secret(line);
    return 0;
}

/* Decide the token: --token, else SANDBOXER_TOKEN, else the token file. */
static int resolve_token(cli_t *cli, char **owned, err_t *err)
{
    *owned = NULL;
    if (cli->token) {
        cli->token_source = TOKEN_OPTION;
        return 0;
    }
    if ((cli->token = env("SANDBOXER_TOKEN"))) {
        cli->token_source = TOKEN_ENV;
        return 0;
    }
    if (read_token_file(owned, err) < 0)
        return -1;
    cli->token = *owned;
    cli->token_source = *owned ? TOKEN_FILE : TOKEN_NONE;
    return 0;
}

/* Options beat the environment; a URL beats a socket at the same level. */
static int resolve_endpoint(const cli_t *cli, struct client_config *cfg, err_t *err)
{
    cfg->url = cli->url;
    cfg->socket = cli->socket;
    if (!cfg->url && !cfg->socket) {
        cfg->url = env("SANDBOXER_URL");
        if (!cfg->url)
            cfg->socket = env("SANDBOXER_SOCKET");
    }
    if (cfg->url && strncmp(cfg->url, "unix:", 5) == 0) {
        cfg->socket = cfg->url + 5;
        cfg->url = NULL;
        if (!*cfg->socket)
            return err_set(err, ERR_INVALID, 0, "config",
                           "'unix:' needs a socket path, e.g. unix:" CLIENT_DEFAULT_SOCKET);
    }
    return 0;
}

client_t *cli_connect(cli_t *cli, bool auth, err_t *err)
{
    if (cli->client)
        return cli->client;
    struct client_config cfg = {0};
    char *owned = NULL;
    if (resolve_endpoint(cli, &cfg, err) < 0 || (auth && resolve_token(cli, &owned, err) < 0))
        return NULL;
    cfg.token = auth ? cli->token : NULL;
    cli->client = client_new(&cfg, err);
    if (cli->token == owned)
        cli->token = NULL; /* the client keeps its own copy; do not point at freed memory */
    free_secret(owned);
    return cli->client;
}

const char *cli_token_hint(const cli_t *cli)
{
    static char hint[1024];
    _cleanup_free_ char *path = cli_token_path();
    const char *from = cli->token_source == TOKEN_OPTION ? "given with --token"
                       : cli->token_source == TOKEN_ENV  ? "in SANDBOXER_TOKEN"
                                                         : NULL;
    if (cli->token_source == TOKEN_NONE)
        snprintf(hint, sizeof(hint),
                 "no token was found: pass --token, set SANDBOXER_TOKEN, or put it in %s "
                 "(the daemon prints an admin token on its first start)",
                 path);
    else if (from)
        snprintf(hint, sizeof(hint), "the token %s was refused", from);
    else
        snprintf(hint, sizeof(hint), "the token in %s was refused", path);
    return hint;
}

static int write_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Write, flush and close a new temporary file beside path; its name is left in tmp. */
static int write_temp(const char *path, const char *token, char **tmp, err_t *err)
{
    *tmp = xasprintf("%s.XXXXXX", path);
    _cleanup_close_ int fd = mkostemp(*tmp, O_CLOEXEC); /* mode 0600 */
    if (fd < 0)
        return err_sys(err, "cannot create a file beside %s", path);
    if (write_all(fd, token, strlen(token)) < 0 || write_all(fd, "\n", 1) < 0 || fsync(fd) < 0) {
        err_sys(err, "cannot write %s", *tmp);
        unlink(*tmp);
        return -1;
    }
    return 0;
}

int cli_token_save(const char *token, const char *path, err_t *err)
{
    _cleanup_free_ char *dir_copy = xstrdup(path);
    const char *dir = dirname(dir_copy);
    if (!mkdir_p(dir, 0700))
        return err_sys(err, "cannot make the directory %s", dir);
    _cleanup_free_ char *tmp = NULL;
    if (write_temp(path, token, &tmp, err) < 0)
        return -1;
    /* rename replaces the file (or a symlink in its place) without following anything. */
    if (rename(tmp, path) < 0) {
        err_sys(err, "cannot save the token to %s", path);
        unlink(tmp);
        return -1;
    }
    return 0;
}
