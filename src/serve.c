/*
 * `sandboxer serve`: options, the state dir and its lock, the store, the first admin,
 * the API server and a graceful stop on SIGTERM/SIGINT. Sandboxes are never touched by
 * a stop: they keep running while the daemon restarts.
 */
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "common/cleanup.h"
#include "common/id.h"
#include "common/log.h"
#include "common/util.h"
#include "config.h"
#include "store/store.h"

struct serve_opts {
    const char *listen;
    const char *socket;
    const char *state_dir;
    const char *log_format;
    const char *log_level;
    uint64_t body_limit;
    uint64_t max_connections;
    uint64_t conn_timeout;
    uint64_t shutdown_timeout;
};

enum opt_type { OPT_STR, OPT_SIZE, OPT_UINT };

/* Every daemon option: flag, environment variable, default, help. The README lists them. */
static const struct opt_def {
    const char *flag;
    const char *env;
    const char *def;
    enum opt_type type;
    size_t offset;
    const char *help;
} opt_defs[] = {
    {"listen", "SANDBOXER_LISTEN", "127.0.0.1:8000", OPT_STR, offsetof(struct serve_opts, listen),
     "TCP address HOST:PORT to serve HTTP on ('none' to disable)"},
    {"socket", "SANDBOXER_SOCKET", "/run/sandboxer/api.sock", OPT_STR,
     offsetof(struct serve_opts, socket), "unix socket to serve HTTP on ('none' to disable)"},
    {"state-dir", "SANDBOXER_STATE_DIR", "/var/lib/sandboxer", OPT_STR,
     offsetof(struct serve_opts, state_dir), "where the database, images and sandboxes live"},
    {"log-format", "SANDBOXER_LOG_FORMAT", "text", OPT_STR, offsetof(struct serve_opts, log_format),
     "text (key=value) or json (one object a line)"},
    {"log-level", "SANDBOXER_LOG_LEVEL", "info", OPT_STR, offsetof(struct serve_opts, log_level),
     "debug, info, warn or error"},
    {"body-limit", "SANDBOXER_BODY_LIMIT", "16M", OPT_SIZE, offsetof(struct serve_opts, body_limit),
     "largest request body (413 past it)"},
    {"max-connections", "SANDBOXER_MAX_CONNECTIONS", "1024", OPT_UINT,
     offsetof(struct serve_opts, max_connections), "concurrent HTTP connections"},
    {"conn-timeout", "SANDBOXER_CONN_TIMEOUT", "120", OPT_UINT,
     offsetof(struct serve_opts, conn_timeout), "seconds before an idle connection is closed"},
    {"shutdown-timeout", "SANDBOXER_SHUTDOWN_TIMEOUT", "10", OPT_UINT,
     offsetof(struct serve_opts, shutdown_timeout), "seconds a stop waits for in-flight requests"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: sandboxer serve [OPTION...]\n\n"
               "Run the Sandboxer daemon (as root). On the first start it creates the admin\n"
               "user and prints its token once. SIGTERM or SIGINT stop it gracefully;\n"
               "sandboxes keep running.\n\nOptions (each also read from its environment "
               "variable):\n");
    for (size_t i = 0; i < ARRAY_SIZE(opt_defs); i++)
        fprintf(f, "  --%-18s %s\n  %-20s [$%s, default %s]\n", opt_defs[i].flag, opt_defs[i].help,
                "", opt_defs[i].env, opt_defs[i].def);
    fprintf(f, "  --%-18s %s\n", "help", "show this help");
}

static int set_opt(struct serve_opts *o, const struct opt_def *d, const char *val, err_t *err)
{
    char *dst = (char *)o + d->offset;
    uint64_t n;
    long long ll;
    switch (d->type) {
    case OPT_STR:
        *(const char **)dst = val;
        return 0;
    case OPT_SIZE:
        if (!parse_size(val, &n) || n == 0)
            return err_set(err, ERR_INVALID, 0, "invalid_option", "--%s: bad size '%s'", d->flag,
                           val);
        *(uint64_t *)dst = n;
        return 0;
    case OPT_UINT:
        if (!parse_int(val, 1, 1000000, &ll))
            return err_set(err, ERR_INVALID, 0, "invalid_option", "--%s: bad number '%s'", d->flag,
                           val);
        *(uint64_t *)dst = (uint64_t)ll;
        return 0;
    }
    return -1;
}

static const struct opt_def *find_opt(const char *name, size_t len)
{
    for (size_t i = 0; i < ARRAY_SIZE(opt_defs); i++)
        if (strlen(opt_defs[i].flag) == len && strncmp(opt_defs[i].flag, name, len) == 0)
            return &opt_defs[i];
    return NULL;
}

/* Defaults, then the environment, then the command line. 1 = help shown. */
static int parse_opts(int argc, char **argv, struct serve_opts *o, err_t *err)
{
    for (size_t i = 0; i < ARRAY_SIZE(opt_defs); i++) {
        const char *env = getenv(opt_defs[i].env);
        if (set_opt(o, &opt_defs[i], opt_defs[i].def, err) < 0 ||
            (env && *env && set_opt(o, &opt_defs[i], env, err) < 0))
            return -1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 1;
        }
        if (strncmp(a, "--", 2) != 0)
            return err_set(err, ERR_INVALID, 0, "invalid_option", "unexpected argument '%s'", a);
        const char *eq = strchr(a + 2, '=');
        const struct opt_def *d = find_opt(a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2));
        if (!d)
            return err_set(err, ERR_INVALID, 0, "invalid_option", "unknown option '%s'", a);
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val)
            return err_set(err, ERR_INVALID, 0, "invalid_option", "%s needs a value", a);
        if (set_opt(o, d, val, err) < 0)
            return -1;
    }
    return 0;
}

/* Hold an exclusive lock on <state>/daemon.lock for the daemon's life. */
static int lock_state_dir(const char *dir, err_t *err)
{
    if (!mkdir_p(dir, 0700))
        return err_sys(err, "create state dir %s", dir);
    chmod(dir, 0700);
    _cleanup_free_ char *path = xasprintf("%s/daemon.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return err_sys(err, "open %s", path);
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        close(fd);
        return err_set(err, ERR_CONFLICT, errno, "state_dir_locked",
                       "another daemon uses the state dir %s", dir);
    }
    return fd;
}

/* On the first start (no users), make the admin and print its token, once. */
static int bootstrap_admin(store_t *store, err_t *err)
{
    int64_t users;
    if (store_user_count(store, &users, err) < 0)
        return -1;
    if (users > 0)
        return 0;
    user_t admin;
    char secret[TOKEN_LEN + 1], hash[TOKEN_HASH_LEN + 1], id[24] = "tok_";
    if (!token_generate(secret) || !id_random_hex(id + 4, 8))
        return err_set(err, ERR_INTERNAL, 0, "internal", "no randomness for the admin token");
    token_hash(secret, strlen(secret), hash);
    if (store_user_create(store, "admin", true, &admin, err) < 0 ||
        store_token_insert(store, id, admin.id, "bootstrap", hash, NULL, err) < 0)
        return -1;
    printf("Admin token (shown once; keep it, e.g. in ~/.config/sandboxer/token):\n%s\n", secret);
    fflush(stdout);
    log_info("auth.bootstrap", "user=admin token_id=%s", id);
    return 0;
}

static const char *none_to_null(const char *s)
{
    return (!s || !*s || strcmp(s, "none") == 0) ? NULL : s;
}

static int run(const struct serve_opts *o, err_t *err)
{
    int lock_fd _cleanup_close_ = lock_state_dir(o->state_dir, err);
    if (lock_fd < 0)
        return -1;
    _cleanup_free_ char *db = xasprintf("%s/sandboxer.db", o->state_dir);
    store_t *store = store_open(db, err);
    if (!store || bootstrap_admin(store, err) < 0) {
        store_close(store);
        return -1;
    }
    /* Signals are taken synchronously by this thread; the server threads never see them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct api_config cfg = {
        .listen = none_to_null(o->listen),
        .socket_path = none_to_null(o->socket),
        .body_limit = o->body_limit,
        .max_connections = (unsigned)o->max_connections,
        .conn_timeout_s = (unsigned)o->conn_timeout,
        .shutdown_timeout_s = (unsigned)o->shutdown_timeout,
    };
    api_t *api = api_start(&cfg, store, err);
    if (!api) {
        store_close(store);
        return -1;
    }
    log_info("daemon.ready", "version=%s listen=%s port=%u socket=%s state_dir=%s",
             SANDBOXER_VERSION, cfg.listen ? cfg.listen : "none", api_tcp_port(api),
             cfg.socket_path ? cfg.socket_path : "none", o->state_dir);
    int sig = 0;
    while (sigwait(&set, &sig) != 0)
        ;
    log_info("daemon.stopping", "signal=%d", sig);
    api_stop(api);
    store_close(store);
    log_info("daemon.stopped", "%s", "");
    return 0;
}

int serve_main(int argc, char **argv)
{
    struct serve_opts o = {0};
    err_t err = {0};
    int rc = parse_opts(argc, argv, &o, &err);
    if (rc == 1)
        return 0;
    enum log_format fmt;
    enum log_level lvl;
    if (rc == 0 && !log_parse_format(o.log_format, &fmt))
        rc = err_set(&err, ERR_INVALID, 0, "invalid_option", "--log-format: text or json");
    if (rc == 0 && !log_parse_level(o.log_level, &lvl))
        rc = err_set(&err, ERR_INVALID, 0, "invalid_option",
                     "--log-level: debug, info, warn or error");
    if (rc < 0) {
        fprintf(stderr, "sandboxer serve: %s\n", err.msg);
        usage(stderr);
        return 2;
    }
    log_init(fmt, lvl);
    if (run(&o, &err) < 0) {
        char q[600];
        log_error("daemon.failed", "code=%s msg=%s", err.code, log_quote(q, sizeof(q), err.msg));
        return 1;
    }
    return 0;
}
