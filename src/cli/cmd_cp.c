/*
 * sandboxer cp: one regular file between here and a sandbox, streamed both ways through the
 * files API (PUT and GET /sandboxes/{id}/files/{path}) without holding it in memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/util.h"

/* One side of cp: a local path, or a sandbox and an absolute path inside it. */
struct cp_end {
    const char *arg;  /* as given */
    char *key;        /* the sandbox's id, name or id prefix; NULL for a local path */
    const char *path; /* the local path, or the path in the sandbox (points into arg) */
};

/* ID:PATH when a ':' comes before any '/' (as with docker cp: write ./a:b for a local a:b). */
static void split_end(const char *arg, struct cp_end *e)
{
    const char *colon = strchr(arg, ':');
    const char *slash = strchr(arg, '/');
    *e = (struct cp_end){.arg = arg, .path = arg};
    if (colon && (!slash || colon < slash)) {
        e->key = xstrndup(arg, (size_t)(colon - arg));
        e->path = colon + 1;
    }
}

static int check_remote(const struct cp_end *e, err_t *err)
{
    if (!*e->key)
        return cli_usage(err, "cp: '%s' names no sandbox before the ':'", e->arg);
    if (e->path[0] != '/')
        return cli_usage(err, "cp: the path in the sandbox must be absolute, like %s:/tmp/file",
                         e->key);
    return 0;
}

static bool ends_with_slash(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && s[n - 1] == '/';
}

/* The last segment of path, trailing slashes ignored (new string, possibly empty). */
static char *base_name(const char *path)
{
    size_t n = strlen(path);
    while (n > 0 && path[n - 1] == '/')
        n--;
    size_t start = n;
    while (start > 0 && path[start - 1] != '/')
        start--;
    return xstrndup(path + start, n - start);
}

static bool plain_name(const char *name)
{
    return *name && !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

/* "/sandboxes/<id>" (as cli_sandbox_path makes it) + "/files/<path, escaped>" + query: the
 * route's path parameter takes the path without its leading '/'. */
static char *files_url(const char *sandbox, const char *path, const char *query)
{
    while (*path == '/')
        path++;
    _cleanup_free_ char *esc = client_escape_path(path);
    return xasprintf("%s/files/%s%s", sandbox, esc, query);
}

/* --- upload: cp LOCAL ID:PATH ----------------------------------------------------------- */

/* Open the local file to send: a regular file only, for now. */
static int open_source(const char *path, struct stat *st, err_t *err)
{
    if (strcmp(path, "-") == 0)
        return cli_usage(err, "cp: copying from stdin is not supported; name a local file");
    /* O_NONBLOCK: opening a FIFO must not wait for a writer before it can be refused. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return err_sys(err, "cp: cannot open %s", path);
    if (fstat(fd, st) < 0) {
        int r = err_sys(err, "cp: cannot stat %s", path);
        close(fd);
        return r;
    }
    if (S_ISREG(st->st_mode))
        return fd;
    close(fd);
    if (S_ISDIR(st->st_mode))
        return cli_usage(err, "cp: %s is a directory; copying directories is not supported yet",
                         path);
    return cli_usage(err, "cp: %s is not a regular file; only regular files can be copied", path);
}

/* The daemon's is_directory refusal, with what to type instead. */
static int into_directory_hint(const struct cp_end *dst, err_t *err)
{
    char msg[sizeof(err->msg)];
    snprintf(msg, sizeof(msg), "%s", err->msg);
    return err_set(err, err->kind, err->errnum, "is_directory",
                   "%s; to copy into that directory, end the path with '/': %s:%s/", msg, dst->key,
                   dst->path);
}

static int upload(cli_t *cli, const struct cp_end *src, const struct cp_end *dst, err_t *err)
{
    struct stat st;
    _cleanup_close_ int fd = open_source(src->path, &st, err);
    if (fd < 0)
        return -1;
    /* PATH/ means "inside that directory", under the local file's name. */
    _cleanup_free_ char *base = base_name(src->path);
    _cleanup_free_ char *rpath =
        ends_with_slash(dst->path) ? xasprintf("%s%s", dst->path, base) : xstrdup(dst->path);
    char query[48];
    snprintf(query, sizeof(query), "?mkdir=true&mode=0%03o", (unsigned)(st.st_mode & 0777));
    _cleanup_free_ char *sandbox = NULL;
    _cleanup_resp_ client_resp_t resp = {0};
    client_t *c = cli_connect(cli, true, err);
    if (!c || cli_sandbox_path(c, dst->key, "", &sandbox, err) < 0)
        return -1;
    _cleanup_free_ char *url = files_url(sandbox, rpath, query);
    client_set_timeout(c, 0); /* a big file takes its time; a stalled transfer still fails */
    if (client_upload(c, "PUT", url, fd, (uint64_t)st.st_size, &resp, err) < 0)
        return strcmp(err->code, "is_directory") == 0 && !ends_with_slash(dst->path)
                   ? into_directory_hint(dst, err)
                   : -1;
    if (cli->json)
        cli_print_raw(&resp);
    return 0;
}

/* --- download: cp ID:PATH LOCAL --------------------------------------------------------- */

/*
 * The temporary file being written, so that an interrupt (Ctrl-C, SIGTERM) removes it too
 * and no partial file is left behind.
 */
static const char *volatile partial_path;

static void on_fatal_signal(int sig)
{
    const char *p = partial_path;
    if (p)
        unlink(p);
    signal(sig, SIG_DFL);
    raise(sig);
}

static const int fatal_signals[] = {SIGINT, SIGTERM, SIGHUP};

static void guard_partial(const char *path)
{
    partial_path = path;
    for (size_t i = 0; i < ARRAY_SIZE(fatal_signals); i++)
        signal(fatal_signals[i], path ? on_fatal_signal : SIG_DFL);
}

/* Where the file goes: LOCAL, or LOCAL/<name> when LOCAL is a directory (new string). */
static int local_target(const char *local, const json_t *info, char **out, err_t *err)
{
    struct stat st;
    if (stat(local, &st) == 0 && S_ISDIR(st.st_mode)) {
        const char *name = cli_jstr(info, "name", "");
        if (!plain_name(name))
            return err_set(err, ERR_INVALID, 0, "no_name",
                           "cp: the file in the sandbox has no name to use in %s; name the "
                           "local file",
                           local);
        *out = xasprintf("%s%s%s", local, ends_with_slash(local) ? "" : "/", name);
        return 0;
    }
    if (ends_with_slash(local))
        return err_set(err, ERR_NOT_FOUND, 0, "no_directory", "cp: %s is not a directory", local);
    *out = xstrdup(local);
    return 0;
}

/* The new file's mode: the remote one's permissions less our umask, as cp does. */
static mode_t local_mode(const json_t *info)
{
    mode_t mask = umask(0);
    umask(mask);
    const char *mode = cli_jstr(info, "mode", NULL);
    const char *type = cli_jstr(info, "type", "");
    char *end = NULL;
    unsigned long v = mode ? strtoul(mode, &end, 8) : 0;
    /* A symlink's own mode (0777) says nothing about its target's. */
    if (!mode || !*mode || *end || strcmp(type, "file") != 0)
        v = 0666;
    return (mode_t)(v & 0777) & ~mask;
}

struct sink_fd {
    int fd;
    const char *name; /* for messages */
};

static int on_file_bytes(void *data, const char *bytes, size_t len, err_t *err)
{
    struct sink_fd *s = data;
    while (len > 0) {
        ssize_t n = write(s->fd, bytes, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return err_sys(err, "cp: cannot write %s", s->name);
        bytes += n;
        len -= (size_t)n;
    }
    return 0;
}

static int on_stdout_bytes(void *data, const char *bytes, size_t len, err_t *err)
{
    (void)data;
    return cli_write(stdout, bytes, len, err);
}

/* Download into target.tmp-XXXXXX, then rename it over target; on failure remove it. */
static int download_to_file(client_t *c, const char *url, const char *target, const json_t *info,
                            err_t *err)
{
    _cleanup_free_ char *tmp = xasprintf("%s.tmp-XXXXXX", target);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return err_sys(err, "cp: cannot create a file beside %s", target);
    guard_partial(tmp);
    struct sink_fd sink = {fd, target};
    struct client_stream_cb cb = {.on_raw = on_file_bytes, .data = &sink};
    int r = 0;
    if (fchmod(fd, local_mode(info)) < 0)
        r = err_sys(err, "cp: cannot set the mode of %s", tmp);
    if (r == 0)
        r = client_download(c, url, &cb, err);
    if (close(fd) < 0 && r == 0)
        r = err_sys(err, "cp: cannot write %s", target);
    if (r == 0 && rename(tmp, target) < 0)
        r = err_sys(err, "cp: cannot replace %s", target);
    if (r < 0)
        unlink(tmp);
    guard_partial(NULL);
    return r;
}

static int download(cli_t *cli, const struct cp_end *src, const struct cp_end *dst, err_t *err)
{
    bool to_stdout = strcmp(dst->path, "-") == 0;
    _cleanup_free_ char *sandbox = NULL, *target = NULL;
    _cleanup_resp_ client_resp_t info = {0};
    client_t *c = cli_connect(cli, true, err);
    if (!c || cli_sandbox_path(c, src->key, "", &sandbox, err) < 0)
        return -1;
    /* Ask first what PATH is: a directory's answer is a JSON listing, not its bytes. */
    _cleanup_free_ char *stat_url = files_url(sandbox, src->path, "?stat=true");
    if (client_call(c, "GET", stat_url, NULL, &info, err) < 0)
        return -1;
    if (json_is_true(json_object_get(info.json, "is_dir")))
        return err_set(err, ERR_INVALID, 0, "is_directory",
                       "cp: %s is a directory; copying directories is not supported yet", src->arg);
    if (!to_stdout && local_target(dst->path, info.json, &target, err) < 0)
        return -1;
    _cleanup_free_ char *url = files_url(sandbox, src->path, "");
    client_set_timeout(c, 0); /* a big file takes its time; a stalled transfer still fails */
    if (to_stdout) {
        struct client_stream_cb cb = {.on_raw = on_stdout_bytes};
        return client_download(c, url, &cb, err) < 0 ? -1 : 0;
    }
    if (download_to_file(c, url, target, info.json, err) < 0)
        return -1;
    if (cli->json)
        cli_print_raw(&info);
    return 0;
}

/* --- cp --------------------------------------------------------------------------------- */

int cmd_cp(cli_t *cli, const cli_args_t *args, err_t *err)
{
    struct cp_end src, dst;
    split_end(cli_arg(args, 0), &src);
    split_end(cli_arg(args, 1), &dst);
    _cleanup_free_ char *src_key = src.key, *dst_key = dst.key;
    if (!*src.arg || !*dst.arg)
        return cli_usage(err, "cp: an empty path");
    if (src.key && dst.key)
        return cli_usage(err, "cp: both paths are in sandboxes; one must be a local path");
    if (!src.key && !dst.key)
        return cli_usage(err, "cp: neither path is in a sandbox; write one as ID:PATH");
    if (check_remote(src.key ? &src : &dst, err) < 0)
        return -1;
    return src.key ? download(cli, &src, &dst, err) : upload(cli, &src, &dst, err);
}
