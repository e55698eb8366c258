/* sandboxer template build | ls | rm | pool: templates new sandboxes start from. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"

#define CONTEXT_MAX_FILES 1000
#define CONTEXT_MAX_BYTES (12u << 20) /* the daemon takes 16M bodies by default */

/* Read a whole file (at most max bytes) into *out. */
static int read_file(const char *path, size_t max, buf_t *out, err_t *err)
{
    int fd _cleanup_close_ = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_sys(err, "open %s", path);
    char chunk[65536];
    ssize_t n;
    while ((n = read(fd, chunk, sizeof(chunk))) > 0) {
        if (out->len + (size_t)n > max)
            return cli_usage(err, "template build: %s is larger than %zu bytes", path, max);
        buf_append(out, chunk, (size_t)n);
    }
    return n < 0 ? err_sys(err, "read %s", path) : 0;
}

/* text, or {"base64": ...} when the bytes are not UTF-8 text without NULs */
static json_t *file_value(const buf_t *b)
{
    json_t *s = b->len ? json_stringn(b->data, b->len) : json_string("");
    if (s)
        return s;
    size_t cap = 4 * ((b->len + 2) / 3) + 1;
    _cleanup_free_ unsigned char *enc = xmalloc(cap);
    EVP_EncodeBlock(enc, (const unsigned char *)b->data, (int)b->len);
    return json_pack("{s:s}", "base64", (const char *)enc);
}

struct walk {
    json_t *files;
    size_t bytes;
    const char *skip; /* the Dockerfile's own path, sent as "dockerfile" */
};

/* Add every regular file under dir (rel: its path in the context) to w->files. */
static int walk_dir(struct walk *w, const char *dir, const char *rel, err_t *err)
{
    DIR *d _cleanup_closedir_ = opendir(dir);
    if (!d)
        return err_sys(err, "open %s", dir);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        _cleanup_free_ char *path = xasprintf("%s/%s", dir, e->d_name);
        _cleanup_free_ char *sub = *rel ? xasprintf("%s/%s", rel, e->d_name) : xstrdup(e->d_name);
        struct stat st;
        if (lstat(path, &st) < 0)
            return err_sys(err, "stat %s", path);
        if (S_ISDIR(st.st_mode)) {
            if (walk_dir(w, path, sub, err) < 0)
                return -1;
            continue;
        }
        if (!S_ISREG(st.st_mode) || strcmp(sub, "Dockerfile") == 0 ||
            (w->skip && strcmp(path, w->skip) == 0))
            continue;
        if (json_object_size(w->files) >= CONTEXT_MAX_FILES)
            return cli_usage(err, "template build: the context has more than %d files",
                             CONTEXT_MAX_FILES);
        buf_t b = {0};
        int rc = read_file(path, CONTEXT_MAX_BYTES - w->bytes, &b, err);
        if (rc == 0) {
            w->bytes += b.len;
            json_object_set_new(w->files, sub, file_value(&b));
        }
        buf_free(&b);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static int build_body(const cli_args_t *args, json_t *body, err_t *err)
{
    const char *file = cli_opt_str(args, "file");
    const char *ctx = cli_nargs(args) > 1 ? cli_arg(args, 1) : NULL;
    _cleanup_free_ char *deflt = ctx ? xasprintf("%s/Dockerfile", ctx) : NULL;
    if (!file && !deflt)
        return cli_usage(err, "template build: give -f DOCKERFILE or a CONTEXT dir holding one");
    buf_t df = {0};
    int rc = read_file(file ? file : deflt, 1 << 20, &df, err);
    if (rc == 0)
        json_object_set_new(body, "dockerfile", json_stringn(df.data ? df.data : "", df.len));
    buf_free(&df);
    if (rc < 0)
        return -1;
    json_object_set_new(body, "name", json_string(cli_arg(args, 0)));
    if (ctx) {
        char real[4096];
        struct walk w = {json_object(), 0, file && realpath(file, real) ? real : NULL};
        json_object_set_new(body, "context", w.files);
        if (walk_dir(&w, ctx, "", err) < 0)
            return -1;
    }
    if (cli_opt_flag(args, "global"))
        json_object_set_new(body, "global", json_true());
    if (cli_opt_flag(args, "network"))
        json_object_set_new(body, "network", json_true());
    const char *pool = cli_opt_str(args, "pool");
    long long n;
    if (pool && !parse_int(pool, 0, 1000, &n))
        return cli_usage(err, "template build: --pool takes a number, not '%s'", pool);
    if (pool)
        json_object_set_new(body, "pool", json_integer(n));
    return 0;
}

struct build_state {
    bool json, done;
    json_t *tpl;
};

static int on_build_line(void *data, const char *line, size_t len, err_t *err)
{
    struct build_state *st = data;
    _cleanup_json_ json_t *ev = json_loadb(line, len, 0, NULL);
    const char *type = cli_jstr(ev, "type", "");
    if (st->json && (cli_write(stdout, line, len, err) < 0 || cli_write(stdout, "\n", 1, err) < 0))
        return -1;
    if (strcmp(type, "error") == 0)
        return err_set(err, ERR_UNPROCESSABLE, 0, cli_jstr(ev, "code", "template_build_failed"),
                       "%s", cli_jstr(ev, "output", "the build failed"));
    if (strcmp(type, "done") == 0) {
        st->done = true;
        st->tpl = json_incref(json_object_get(ev, "template"));
        return 0;
    }
    const json_t *out = json_object_get(ev, "output");
    if (st->json || !json_is_string(out))
        return 0;
    /* the build's log on stderr, as it comes; the name alone on stdout at the end */
    if (cli_write(stderr, json_string_value(out), json_string_length(out), err) < 0)
        return -1;
    return cli_write(stderr, "\n", 1, err);
}

int cmd_template_build(cli_t *cli, const cli_args_t *args, err_t *err)
{
    _cleanup_json_ json_t *body = json_object();
    if (build_body(args, body, err) < 0)
        return -1;
    client_t *c = cli_connect(cli, true, err);
    if (!c)
        return -1;
    client_set_timeout(c, 0); /* a build takes as long as its steps */
    struct build_state st = {.json = cli->json};
    struct client_stream_cb cb = {.on_line = on_build_line, .data = &st};
    int rc = client_stream(c, "POST", "/templates?stream=true", body, &cb, err);
    _cleanup_json_ json_t *tpl = st.tpl;
    if (rc < 0)
        return -1;
    if (!st.done)
        return err_set(err, ERR_UNAVAILABLE, 0, "stream_broken",
                       "the daemon's stream ended before the build's outcome");
    if (!cli->json) {
        _cleanup_free_ char *name = cli_safe(cli_jstr(tpl, "name", cli_arg(args, 0)));
        printf("%s\n", name);
    }
    return 0;
}

static void add_template(cli_table_t *t, const json_t *s, const cli_args_t *args)
{
    (void)args;
    char pool[32], created[32];
    json_t *p = json_object_get(s, "pool");
    snprintf(pool, sizeof(pool), "%lld/%lld",
             (long long)json_integer_value(json_object_get(p, "ready")),
             (long long)json_integer_value(json_object_get(p, "size")));
    const char *cells[] = {
        cli_jstr(s, "name", "?"),
        cli_jstr(s, "source", "-"),
        json_is_true(json_object_get(s, "global")) ? "yes" : "no",
        pool,
        cli_format_time(json_object_get(s, "created_at"), created, sizeof(created)),
    };
    cli_table_add(t, cells);
}

int cmd_template_ls(cli_t *cli, const cli_args_t *args, err_t *err)
{
    static const char *const headers[] = {"NAME", "SOURCE", "GLOBAL", "POOL", "CREATED", NULL};
    return cli_list(cli, args, "/templates", "templates", headers, add_template, err);
}

static int remove_one(cli_t *cli, client_t *c, const char *name, err_t *err)
{
    _cleanup_free_ char *esc = client_escape(name);
    _cleanup_free_ char *path = xasprintf("/templates/%s", esc);
    return cli_delete(cli, c, path, "name", name, err);
}

int cmd_template_rm(cli_t *cli, const cli_args_t *args, err_t *err)
{
    return cli_each_arg(cli, args, remove_one, err);
}

int cmd_template_pool(cli_t *cli, const cli_args_t *args, err_t *err)
{
    long long n;
    if (!parse_int(cli_arg(args, 1), 0, 1000, &n))
        return cli_usage(err, "template pool: N is a number, not '%s'", cli_arg(args, 1));
    _cleanup_json_ json_t *body = json_pack("{s:I}", "pool", (json_int_t)n);
    _cleanup_resp_ client_resp_t resp = {0};
    _cleanup_free_ char *esc = client_escape(cli_arg(args, 0));
    _cleanup_free_ char *path = xasprintf("/templates/%s", esc);
    client_t *c = cli_connect(cli, true, err);
    if (!c || client_call(c, "PATCH", path, body, &resp, err) < 0)
        return -1;
    if (cli->json) {
        cli_print_raw(&resp);
        return 0;
    }
    json_t *p = json_object_get(resp.json, "pool");
    printf("%s pool %lld (ready %lld)\n", cli_arg(args, 0),
           (long long)json_integer_value(json_object_get(p, "size")),
           (long long)json_integer_value(json_object_get(p, "ready")));
    return 0;
}
