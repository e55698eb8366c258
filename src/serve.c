/*
 * `sandboxer serve`: options, the state dir and its lock, the store, the first admin,
 * the API server and a graceful stop on SIGTERM/SIGINT. Sandboxes are never touched by
 * a stop: they keep running while the daemon restarts.
 */
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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
#include "image/image.h"
#include "net/net.h"
#include "proxy/egress.h"
#include "runtime/runtime.h"
#include "sandbox/sandbox.h"
#include "sandbox/template.h"
#include "store/store.h"
#include "store/store_sandboxes.h"

struct serve_opts {
    const char *listen;
    const char *socket;
    const char *state_dir;
    const char *log_format;
    const char *log_level;
    uint64_t body_limit;
    uint64_t max_connections;
    uint64_t conn_timeout;
    uint64_t terminal_idle_timeout;
    uint64_t shutdown_timeout;
    const char *registry_mirror;
    const char *insecure_registries;
    const char *allow_registries;
    const char *default_cpus;
    uint64_t default_memory;
    uint64_t default_pids;
    uint64_t log_max;
    uint64_t exec_output_max;
    uint64_t exec_log_max;
    uint64_t max_execs;
    uint64_t idle_timeout;
    const char *agent;
    const char *runtime;
    const char *runc;
    const char *runsc;
    const char *runsc_platform;
    const char *userns;
    const char *userns_range;
    const char *storage_driver;
    const char *subnet;
    const char *bridge;
    const char *nft_table;
    const char *default_network;
    const char *vhost;
    const char *e2b_domain;
    const char *cgroup_favordynmods;
    const char *templates_dir;
    uint64_t egress_proxy_port;
    uint64_t egress_max_conns;
    uint64_t egress_max_conns_per_sandbox;
    const char *user_max[7]; /* --user-max-*: in the order of user_max_names */
};

enum opt_type { OPT_STR, OPT_SIZE, OPT_UINT, OPT_SECS /* 0 allowed: never */ };

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
    {"terminal-idle-timeout", "SANDBOXER_TERMINAL_IDLE_TIMEOUT", "3600", OPT_SECS,
     offsetof(struct serve_opts, terminal_idle_timeout),
     "seconds without input or output before a terminal WebSocket closes (0: never)"},
    {"shutdown-timeout", "SANDBOXER_SHUTDOWN_TIMEOUT", "10", OPT_UINT,
     offsetof(struct serve_opts, shutdown_timeout), "seconds a stop waits for in-flight requests"},
    {"registry-mirror", "SANDBOXER_REGISTRY_MIRROR", "", OPT_STR,
     offsetof(struct serve_opts, registry_mirror),
     "pull docker.io images from this URL (http:// only for loopback)"},
    {"insecure-registry", "SANDBOXER_INSECURE_REGISTRIES", "", OPT_STR,
     offsetof(struct serve_opts, insecure_registries),
     "HOST:PORT[,HOST:PORT...] pulled without TLS verification"},
    {"allow-registry", "SANDBOXER_ALLOW_REGISTRIES", "docker.io", OPT_STR,
     offsetof(struct serve_opts, allow_registries),
     "HOST[:PORT][,...] non-admins may pull from (the mirror always; none: only it)"},
    {"default-cpus", "SANDBOXER_DEFAULT_CPUS", "1", OPT_STR,
     offsetof(struct serve_opts, default_cpus), "CPUs of a sandbox that does not ask"},
    {"default-memory", "SANDBOXER_DEFAULT_MEMORY", "512M", OPT_SIZE,
     offsetof(struct serve_opts, default_memory), "memory of a sandbox that does not ask"},
    {"default-pids", "SANDBOXER_DEFAULT_PIDS", "512", OPT_UINT,
     offsetof(struct serve_opts, default_pids), "tasks of a sandbox that does not ask"},
    {"log-max", "SANDBOXER_LOG_MAX", "16M", OPT_SIZE, offsetof(struct serve_opts, log_max),
     "main-process log kept per sandbox (rotated once past it)"},
    {"exec-output-max", "SANDBOXER_EXEC_OUTPUT_MAX", "16M", OPT_SIZE,
     offsetof(struct serve_opts, exec_output_max),
     "output kept per stream of one exec (truncated past it)"},
    {"exec-log-max-per-sandbox", "SANDBOXER_EXEC_LOG_MAX_PER_SANDBOX", "64M", OPT_SIZE,
     offsetof(struct serve_opts, exec_log_max),
     "execution history (commands and output) kept per sandbox; the oldest goes first"},
    {"idle-timeout", "SANDBOXER_IDLE_TIMEOUT", "0", OPT_SECS,
     offsetof(struct serve_opts, idle_timeout),
     "seconds idle before a sandbox hibernates (0: never; a sandbox's idle_timeout wins)"},
    {"max-execs", "SANDBOXER_MAX_EXECS", "256", OPT_UINT, offsetof(struct serve_opts, max_execs),
     "concurrent execs per sandbox"},
    {"agent", "SANDBOXER_AGENT", "", OPT_STR, offsetof(struct serve_opts, agent),
     "sandboxer-agent binary (default: found beside this binary)"},
    {"runtime", "SANDBOXER_RUNTIME", "runc", OPT_STR, offsetof(struct serve_opts, runtime),
     "the runtime of a sandbox that does not ask: runc, or runsc (gVisor)"},
    {"runc", "SANDBOXER_RUNC", "runc", OPT_STR, offsetof(struct serve_opts, runc),
     "the runc binary"},
    {"runsc", "SANDBOXER_RUNSC", "runsc", OPT_STR, offsetof(struct serve_opts, runsc),
     "the runsc (gVisor) binary"},
    {"runsc-platform", "SANDBOXER_RUNSC_PLATFORM", "auto", OPT_STR,
     offsetof(struct serve_opts, runsc_platform),
     "gVisor's platform: auto (kvm if it runs here, else ptrace), ptrace or kvm (probed at start, "
     "falling back to ptrace)"},
    {"userns", "SANDBOXER_USERNS", "auto", OPT_STR, offsetof(struct serve_opts, userns),
     "user namespaces for runc sandboxes (root in a sandbox is an unprivileged host uid): auto "
     "(where the kernel has them and idmapped mounts), on (fail to start without) or off"},
    {"userns-range", "SANDBOXER_USERNS_RANGE", "268435456:1879048192", OPT_STR,
     offsetof(struct serve_opts, userns_range),
     "FIRST:COUNT host uids and gids for sandboxes' user namespaces, 65536 per sandbox; by "
     "default 2^28 up to 2^31, ids no host user has"},
    {"storage-driver", "SANDBOXER_STORAGE_DRIVER", "auto", OPT_STR,
     offsetof(struct serve_opts, storage_driver),
     "auto (btrfs when the state dir is on btrfs), overlay or btrfs"},
    {"subnet", "SANDBOXER_SUBNET", "10.88.0.0/16", OPT_STR, offsetof(struct serve_opts, subnet),
     "the sandboxes' IPv4 subnet (the bridge takes its first address)"},
    {"bridge", "SANDBOXER_BRIDGE", "sbx0", OPT_STR, offsetof(struct serve_opts, bridge),
     "the bridge device sandboxes are attached to"},
    {"nft-table", "SANDBOXER_NFT_TABLE", "sandboxer", OPT_STR,
     offsetof(struct serve_opts, nft_table),
     "the nftables tables (families inet and arp) of the rules"},
    {"default-network", "SANDBOXER_DEFAULT_NETWORK", "none", OPT_STR,
     offsetof(struct serve_opts, default_network),
     "egress of a sandbox that does not ask: none (no traffic out) or open (NAT)"},
    {"vhost", "SANDBOXER_VHOST", "", OPT_STR, offsetof(struct serve_opts, vhost),
     "domain whose subdomains <name>[-<port>].<vhost> reach sandboxes (see caddy-config)"},
    {"e2b-domain", "SANDBOXER_E2B_DOMAIN", "", OPT_STR, offsetof(struct serve_opts, e2b_domain),
     "the E2B_DOMAIN of E2B's SDKs: api.<domain> is E2B's API, <port>-<sandbox>.<domain> its "
     "sandboxes' envd and ports (see caddy-config --e2b, docs/e2b.md)"},
    {"egress-proxy-port", "SANDBOXER_EGRESS_PROXY_PORT", "3128", OPT_UINT,
     offsetof(struct serve_opts, egress_proxy_port),
     "TCP port of the egress proxy on the bridge's gateway address (0: none; no network proxy)"},
    {"egress-max-conns", "SANDBOXER_EGRESS_MAX_CONNS", "256", OPT_UINT,
     offsetof(struct serve_opts, egress_max_conns),
     "connections the egress proxy holds at once, all sandboxes together (503 past it)"},
    {"egress-max-conns-per-sandbox", "SANDBOXER_EGRESS_MAX_CONNS_PER_SANDBOX", "32", OPT_UINT,
     offsetof(struct serve_opts, egress_max_conns_per_sandbox),
     "connections the egress proxy holds at once for one sandbox (429 past it)"},
    {"user-max-running", "SANDBOXER_USER_MAX_RUNNING", "16", OPT_STR,
     offsetof(struct serve_opts, user_max[0]),
     "sandboxes a non-admin user may have running at once (none: no limit)"},
    {"user-max-sandboxes", "SANDBOXER_USER_MAX_SANDBOXES", "64", OPT_STR,
     offsetof(struct serve_opts, user_max[1]),
     "sandboxes (running, hibernated or exited) a non-admin user may have"},
    {"user-max-cpus", "SANDBOXER_USER_MAX_CPUS", "4", OPT_STR,
     offsetof(struct serve_opts, user_max[2]), "CPUs of one sandbox of a non-admin user"},
    {"user-max-memory", "SANDBOXER_USER_MAX_MEMORY", "8G", OPT_STR,
     offsetof(struct serve_opts, user_max[3]), "memory of one sandbox of a non-admin user"},
    {"user-max-pids", "SANDBOXER_USER_MAX_PIDS", "4096", OPT_STR,
     offsetof(struct serve_opts, user_max[4]), "tasks of one sandbox of a non-admin user"},
    {"user-max-disk", "SANDBOXER_USER_MAX_DISK", "none", OPT_STR,
     offsetof(struct serve_opts, user_max[5]),
     "disk of one sandbox of a non-admin user (with disk quotas: also its default)"},
    {"user-max-creates-per-minute", "SANDBOXER_USER_MAX_CREATES_PER_MINUTE", "60", OPT_STR,
     offsetof(struct serve_opts, user_max[6]),
     "creates, forks and snapshot starts a non-admin user may make a minute"},
    {"templates-dir", "SANDBOXER_TEMPLATES_DIR", "/var/cache/sandboxer/templates", OPT_STR,
     offsetof(struct serve_opts, templates_dir),
     "the built-in templates' OCI layouts (scripts/setup builds them), imported at start "
     "('none': no built-in templates)"},
    {"cgroup-favordynmods", "SANDBOXER_CGROUP_FAVORDYNMODS", "on", OPT_STR,
     offsetof(struct serve_opts, cgroup_favordynmods),
     "on: turn on the host's cgroup2 favordynmods (fast cgroup moves; see README) or off"},
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
    case OPT_SECS:
        if (!parse_int(val, d->type == OPT_SECS ? 0 : 1, 1000000, &ll))
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
    /* Searchable, not readable, by others: a sandbox's root in its user namespace (an
     * unprivileged host uid) reaches its own dirs below; what is secret is 0600 or 0700. */
    if (!mkdir_p(dir, 0711))
        return err_sys(err, "create state dir %s", dir);
    chmod(dir, 0711);
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

/* The agent binary: --agent, else beside this binary (installed or in the build tree). */
static char *find_agent(const struct serve_opts *o, const char *self)
{
    if (o->agent && *o->agent)
        return xstrdup(o->agent);
    _cleanup_free_ char *dir = xstrdup(self);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    const char *candidates[] = {"%s/sandboxer-agent", "%s/agent/sandboxer-agent",
                                "%s/../libexec/sandboxer/sandboxer-agent"};
    for (size_t i = 0; i < ARRAY_SIZE(candidates); i++) {
        char *p = xasprintf(candidates[i], dir);
        if (access(p, X_OK) == 0)
            return p;
        free(p);
    }
    return xasprintf("%s/sandboxer-agent", dir);
}

/* Split "a,b,c" into a NULL-terminated vector (in place). */
static const char **split_list(char *s, size_t *n)
{
    const char **v = xcalloc(strlen(s) / 2 + 2, sizeof(*v));
    *n = 0;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ","))
        if (*tok)
            v[(*n)++] = tok;
    return v;
}

/* Everything the daemon runs on, opened in order and closed in reverse. */
struct daemon {
    int lock_fd;
    store_t *store;
    image_store_t *images;
    sbx_mgr_t *sbx;
    net_t *net;
    egress_t *egress;
    api_t *api;
    char self[4096];
    char *agent;
    char *insecure;
    const char **insecure_v;
    char *allow;
    const char **allow_v;
};

static void daemon_close(struct daemon *d, bool free_shared)
{
    egress_stop(d->egress); /* asks sbx no more once this returns */
    if (free_shared) {
        sbx_close(d->sbx);
        net_close(d->net);
        image_store_close(d->images);
        store_close(d->store);
    }
    free(d->agent);
    free(d->insecure);
    free(d->insecure_v);
    free(d->allow);
    free(d->allow_v);
    if (d->lock_fd >= 0)
        close(d->lock_fd);
}

/*
 * The --user-max-* options into l: "none" (or 0) is no limit; CPUs a number, memory and disk
 * sizes, the rest integers.
 */
static int parse_user_limits(const struct serve_opts *o, user_limits_t *l, err_t *err)
{
    static const char *const names[] = {"running", "sandboxes",         "cpus", "memory", "pids",
                                        "disk",    "creates-per-minute"};
    int64_t *ints[] = {
        &l->max_running, &l->max_sandboxes,         NULL, &l->max_memory, &l->max_pids,
        &l->max_disk,    &l->max_creates_per_minute};
    store_limits_unset(l);
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        const char *v = o->user_max[i];
        uint64_t size;
        long long n;
        char *end;
        if (strcmp(v, "none") == 0 || strcmp(v, "0") == 0)
            continue;
        bool ok;
        if (i == 2) {
            l->max_cpus = strtod(v, &end);
            ok = *v && !*end && l->max_cpus >= 0.01 && l->max_cpus <= 4096;
        } else if (i == 3 || i == 5) {
            ok = parse_size(v, &size) && size < (1ull << 62);
            *ints[i] = (int64_t)size;
        } else {
            ok = parse_int(v, 1, 1000000000, &n);
            *ints[i] = n;
        }
        if (!ok)
            return err_set(err, ERR_INVALID, 0, "invalid_option",
                           "--user-max-%s: 'none' or a %s, not '%s'", names[i],
                           i == 3 || i == 5 ? "size" : "positive number", v);
    }
    return 0;
}

/* The egress proxy asks the sandbox layer what a client address may reach. */
static json_t *egress_policy(void *ctx, const char *client_ip)
{
    return sbx_egress_allow(ctx, client_ip);
}

/* ... and the network layer whether an address is the host's own (or the sandboxes'). */
static bool egress_refuse(void *ctx, uint32_t addr)
{
    return net_address_on_host(ctx, addr);
}

/* Worth having, never worth failing the start for: an older kernel lacks the option. */
static void favor_dynmods(void)
{
    const char *where = "";
    err_t e = {0};
    int rc = runtime_cgroup_favor_dynmods(&where, &e);
    if (rc == 1)
        log_info("cgroup.favordynmods", "path=%s msg=\"turned on: fast cgroup moves\"", where);
    else if (rc < 0)
        log_warn("cgroup.favordynmods", "path=%s msg=\"not turned on: %s\"", where, e.msg);
}

static int daemon_open(const struct serve_opts *o, struct daemon *d, err_t *err)
{
    ssize_t n = readlink("/proc/self/exe", d->self, sizeof(d->self) - 1);
    if (n <= 0)
        return err_sys(err, "find this binary");
    d->self[n] = '\0';
    d->agent = find_agent(o, d->self);
    if ((d->lock_fd = lock_state_dir(o->state_dir, err)) < 0)
        return -1;
    _cleanup_free_ char *db = xasprintf("%s/sandboxer.db", o->state_dir);
    if (!(d->store = store_open(db, err)) || bootstrap_admin(d->store, err) < 0)
        return -1;
    store_set_exec_log_max(d->store, o->exec_log_max);
    _cleanup_free_ char *img_root = xasprintf("%s/images", o->state_dir);
    d->insecure = xstrdup(o->insecure_registries);
    size_t n_insecure;
    d->insecure_v = split_list(d->insecure, &n_insecure);
    d->allow = xstrdup(o->allow_registries);
    size_t n_allow;
    d->allow_v = split_list(d->allow, &n_allow); /* "none": nothing but the mirror */
    if (n_allow == 1 && strcmp(d->allow_v[0], "none") == 0)
        n_allow = 0;
    struct image_opts io = {
        img_root, none_to_null(o->registry_mirror), d->insecure_v, n_insecure, d->self, d->allow_v,
        n_allow};
    if (!(d->images = image_store_open(&io, d->store, err)))
        return -1;
    double cpus = atof(o->default_cpus);
    if (cpus < 0.01 || cpus > 256)
        return err_set(err, ERR_INVALID, 0, "invalid_option", "--default-cpus: 0.01 to 256");
    if (strcmp(o->default_network, "none") != 0 && strcmp(o->default_network, "open") != 0)
        return err_set(err, ERR_INVALID, 0, "invalid_option", "--default-network: none or open");
    if (strcmp(o->runtime, "runc") != 0 && strcmp(o->runtime, "runsc") != 0)
        return err_set(err, ERR_INVALID, 0, "invalid_option", "--runtime: runc or runsc");
    if (strcmp(o->runsc_platform, "auto") != 0 && strcmp(o->runsc_platform, "ptrace") != 0 &&
        strcmp(o->runsc_platform, "kvm") != 0)
        return err_set(err, ERR_INVALID, 0, "invalid_option",
                       "--runsc-platform: auto, ptrace or kvm");
    if (strcmp(o->cgroup_favordynmods, "on") != 0 && strcmp(o->cgroup_favordynmods, "off") != 0)
        return err_set(err, ERR_INVALID, 0, "invalid_option", "--cgroup-favordynmods: on or off");
    if (strcmp(o->cgroup_favordynmods, "on") == 0)
        favor_dynmods();
    user_limits_t user_limits;
    if (parse_user_limits(o, &user_limits, err) < 0)
        return -1;
    unsigned long long us_first = 0, us_count = 0;
    char us_tail = 0;
    if (strcmp(o->userns, "auto") != 0 && strcmp(o->userns, "on") != 0 &&
        strcmp(o->userns, "off") != 0)
        return err_set(err, ERR_INVALID, 0, "invalid_option", "--userns: auto, on or off");
    /* ping_group_range (net/netns.c) reaches gids below 2^31 only. */
    if (sscanf(o->userns_range, "%llu:%llu%c", &us_first, &us_count, &us_tail) != 2 ||
        us_first == 0 || us_first % 65536 || us_count < 65536 || us_count % 65536 ||
        us_first + us_count > 2147483648ull)
        return err_set(err, ERR_INVALID, 0, "invalid_option",
                       "--userns-range: FIRST:COUNT, both multiples of 65536, FIRST > 0, "
                       "COUNT >= 65536, FIRST + COUNT <= 2147483648");
    _cleanup_free_ char *netns_dir = xasprintf("%s/netns", o->state_dir);
    if (o->egress_proxy_port > 65535)
        return err_set(err, ERR_INVALID, 0, "invalid_option", "--egress-proxy-port: 0 to 65535");
    struct net_config nc = {o->subnet, o->bridge, netns_dir, o->nft_table,
                            (int)o->egress_proxy_port};
    if (!(d->net = net_open(&nc, err)))
        return -1;
    struct sbx_config sc = {
        .state_dir = o->state_dir,
        .userns = o->userns,
        .userns_first = (uint32_t)us_first,
        .userns_count = (uint32_t)us_count,
        .agent_bin = d->agent,
        .self_exe = d->self,
        .runtime = o->runtime,
        .runc_bin = o->runc,
        .runsc_bin = o->runsc,
        .runsc_platform = o->runsc_platform,
        .templates_dir = none_to_null(o->templates_dir),
        .storage_driver = o->storage_driver,
        .net = d->net,
        .default_network = o->default_network,
        .default_cpus = cpus,
        .default_memory = o->default_memory,
        .default_pids = (int64_t)o->default_pids,
        .log_max = o->log_max,
        .exec_output_max = o->exec_output_max,
        .max_execs = (unsigned)o->max_execs,
        .idle_timeout_s = (unsigned)o->idle_timeout,
        .egress_proxy_port = (int)o->egress_proxy_port,
        .user_limits = user_limits,
    };
    if (!(d->sbx = sbx_open(&sc, d->store, d->images, err)) || sbx_reconcile(d->sbx, err) < 0 ||
        sbx_templates_start(d->sbx, err) < 0)
        return -1;
    if (o->egress_proxy_port > 0) {
        char gw[16];
        net_gateway(d->net, gw);
        struct egress_config ec = {
            .listen_ip = gw,
            .port = (int)o->egress_proxy_port,
            .policy = egress_policy,
            .ctx = d->sbx,
            .refuse = egress_refuse,
            .refuse_ctx = d->net,
            .max_conns = (int)o->egress_max_conns,
            .max_conns_per_client = (int)o->egress_max_conns_per_sandbox,
        };
        if (!(d->egress = egress_start(&ec, err)))
            return -1;
    }
    return 0;
}

static int run(const struct serve_opts *o, err_t *err)
{
    struct daemon d = {.lock_fd = -1};
    /* Signals are taken synchronously by this thread; no other thread ever sees them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (daemon_open(o, &d, err) < 0) {
        daemon_close(&d, true);
        return -1;
    }
    struct api_config cfg = {
        .listen = none_to_null(o->listen),
        .socket_path = none_to_null(o->socket),
        .body_limit = o->body_limit,
        .max_connections = (unsigned)o->max_connections,
        .conn_timeout_s = (unsigned)o->conn_timeout,
        .terminal_idle_timeout_s = (unsigned)o->terminal_idle_timeout,
        .shutdown_timeout_s = (unsigned)o->shutdown_timeout,
        .vhost = none_to_null(o->vhost),
        .e2b_domain = none_to_null(o->e2b_domain),
    };
    if (!(d.api = api_start(&cfg, d.store, d.sbx, d.images, err))) {
        daemon_close(&d, true);
        return -1;
    }
    log_info("daemon.ready", "version=%s listen=%s port=%u socket=%s state_dir=%s cgroup=v%d",
             SANDBOXER_VERSION, cfg.listen ? cfg.listen : "none", api_tcp_port(d.api),
             cfg.socket_path ? cfg.socket_path : "none", o->state_dir, runtime_cgroup_mode());
    int sig = 0;
    while (sigwait(&set, &sig) != 0)
        ;
    log_info("daemon.stopping", "signal=%d", sig);
    /* Sandboxes are left running: only the daemon stops. */
    bool clean = api_stop(d.api);
    daemon_close(&d, clean);
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
