/*
 * The container primitives the lifecycle operations share: a sandbox's directories, its
 * network, its root filesystem, its bundle, booting it (fresh or from a checkpoint), tearing
 * it down, and capturing a running one (checkpoint + writable layer) for a fork or a
 * snapshot. Operations (create.c, fork.c, hibernate.c, lifecycle.c) sit above this file and
 * call only these; nothing here decides about a sandbox's status.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentc/agent_client.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/util.h"
#include "net/net.h"
#include "runtime/runtime.h"
#include "sandbox_internal.h"
#include "storage/storage.h"

#define START_TIMEOUT_MS 20000

static int write_file(const char *dir, const char *name, const char *text, err_t *err)
{
    _cleanup_free_ char *path = xasprintf("%s/%s", dir, name);
    int fd _cleanup_close_ =
        open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        return err_sys(err, "write %s", path);
    return 0;
}

int sbx_make_dirs(const struct sbx_paths *p, const char *hostname, err_t *err)
{
    const char *dirs[] = {p->dir, p->bundle, p->rootfs, p->run, p->sock, p->logs, p->etc};
    for (size_t i = 0; i < ARRAY_SIZE(dirs); i++)
        if (mkdir(dirs[i], i == 0 ? 0711 : 0755) < 0)
            return err_sys(err, "create %s", dirs[i]);
    chmod(p->run, 0700);
    chmod(p->logs, 0700);
    _cleanup_free_ char *hostname_nl = xasprintf("%s\n", hostname);
    _cleanup_free_ char *hosts = xasprintf("127.0.0.1\tlocalhost\n::1\tlocalhost "
                                           "ip6-localhost ip6-loopback\n127.0.1.1\t%s\n",
                                           hostname);
    return write_file(p->etc, "hostname", hostname_nl, err) < 0 ||
                   write_file(p->etc, "hosts", hosts, err) < 0
               ? -1
               : 0;
}

int sbx_mount_rootfs(const sandbox_rec_t *r, const struct sbx_paths *p, err_t *err)
{
    if (storage_is_mounted(p->rootfs))
        return 0;
    json_t *layers = json_object_get(r->spec, "layers");
    size_t n = json_array_size(layers);
    _cleanup_free_ char **dirs = xcalloc(n + 1, sizeof(*dirs));
    for (size_t i = 0; i < n; i++)
        dirs[i] = (char *)json_string_value(json_array_get(layers, i));
    return storage_mount_overlay(dirs, n, p->upper, p->work, p->rootfs, err);
}

int sbx_net_setup(sbx_mgr_t *m, const sandbox_rec_t *r, const struct sbx_paths *p, const char *ip,
                  err_t *err)
{
    const char *egress = json_string_value(json_object_get(r->spec, "network"));
    /* "proxy": no way out but the egress proxy on the gateway, which every sandbox may reach
     * (it answers only those whose network is "proxy"): for the rules, that is "none". */
    if (egress && strcmp(egress, "proxy") == 0)
        egress = "none";
    struct net_sandbox ns;
    if (net_sandbox_setup(m->cfg.net, r->id, sbx_pool_net_owner(m, r), egress ? egress : "none",
                          ip && *ip ? ip : NULL, &ns, err) < 0 ||
        net_write_etc(p->etc, r->hostname, &ns, err) < 0)
        return -1;
    return store_sandbox_set_ip(m->store, r->id, ns.ip, err);
}

int sbx_write_bundle(sbx_mgr_t *m, const sandbox_rec_t *r, const struct sbx_paths *p, err_t *err)
{
    _cleanup_free_ char *netns = xasprintf("%s/netns/%s", m->cfg.state_dir, r->id);
    json_t *res = json_object_get(r->spec, "resources");
    const char *agent_dir = json_string_value(json_object_get(r->spec, "agent_dir"));
    struct spec_opts so = {
        .id = r->id,
        .hostname = r->hostname,
        .agent_dir = agent_dir ? agent_dir : m->agent_dir,
        .criu_conf = m->criu_conf,
        .sock_dir = p->sock,
        .etc_dir = p->etc,
        .netns_path = netns,
        .env = json_object_get(r->spec, "env"),
        .args = json_object_get(r->spec, "args"),
        .cwd = json_string_value(json_object_get(r->spec, "cwd")),
        .user = json_string_value(json_object_get(r->spec, "user")),
        .tty = r->interactive,
        .cpus = json_number_value(json_object_get(res, "cpus")),
        .memory = (uint64_t)json_integer_value(json_object_get(res, "memory")),
        .pids = json_integer_value(json_object_get(res, "pids")),
        .net_raw = json_is_true(json_object_get(r->spec, "net_raw")),
        .setuid = json_is_true(json_object_get(r->spec, "setuid")),
    };
    json_t *spec _cleanup_json_ = NULL;
    _cleanup_free_ char *config = xasprintf("%s/config.json", p->bundle);
    if (runtime_spec_build(&so, &spec, err) < 0)
        return -1;
    if (json_dump_file(spec, config, JSON_COMPACT) < 0)
        return err_sys(err, "write %s", config);
    return 0;
}

/* Forget what an earlier run of the container left in its run dir. */
static void clear_run_dir(int run_fd)
{
    const char *names[] = {"init.pid", "exit", "shim.pid", "runc.err"};
    for (size_t i = 0; i < ARRAY_SIZE(names); i++)
        unlinkat(run_fd, names[i], 0);
}

/* True once the shim recorded the container's end (waits up to a second for it). */
static bool wait_exit_file(int run_fd)
{
    for (int i = 0; i < 200; i++) {
        if (faccessat(run_fd, "exit", F_OK, 0) == 0)
            return true;
        usleep(5000);
    }
    return false;
}

int sbx_boot(sbx_mgr_t *m, struct sbx_live *l, const struct sbx_paths *p, const char *restore,
             const char *hostname, err_t *err)
{
    if (sbx_sockdir_mount(p, err) < 0) /* before the dir is opened: its fd is the tmpfs */
        return -1;
    int dirfd _cleanup_close_ = open(p->sock, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int run_fd _cleanup_close_ = open(p->run, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0 || run_fd < 0)
        return err_sys(err, "open the sandbox's dirs");
    clear_run_dir(run_fd);
    struct shim_paths sp = {l->id, p->bundle, p->run, p->logs, m->cfg.log_max, restore};
    sbx_unwatch(m, l); /* a new shim replaces the one of an earlier run */
    l->shim_pid = runtime_start(&sp, START_TIMEOUT_MS, &l->init_pid, err);
    if (l->shim_pid <= 0 || sbx_watch(m, l, err) < 0)
        return -1;
    /* A restored main process may end at once (e.g. on a connection that came back closed). */
    if (restore && runtime_after_restore(l->init_pid, hostname, err) < 0)
        return wait_exit_file(run_fd) ? 1 : -1;
    double deadline = now_mono_ms() + START_TIMEOUT_MS;
    /* Until the agent answers, or the main process has already finished (hello-world). */
    while (now_mono_ms() < deadline) {
        err_t e = {0};
        if (agentc_wait_ready(dirfd, "agent.sock", l->init_pid, 50, &e) == 0)
            return 0;
        if (faccessat(run_fd, "exit", F_OK, 0) == 0)
            return 1;
        *err = e;
    }
    return err_prefix(err, "the sandbox's agent did not answer");
}

int sbx_start(sbx_mgr_t *m, struct sbx_live *l, const sandbox_rec_t *r, const struct sbx_paths *p,
              const char *restore, err_t *err)
{
    if (sbx_mount_rootfs(r, p, err) < 0 || sbx_write_bundle(m, r, p, err) < 0)
        return -1;
    return sbx_boot(m, l, p, restore, r->hostname, err);
}

int sbx_start_cold_after(sbx_mgr_t *m, struct sbx_live *l, const sandbox_rec_t *r,
                         const struct sbx_paths *p, err_t *err)
{
    /* What a failed restore left: runc's record of the container, a shim that ended. */
    err_t e = {0};
    runtime_kill(r->id, SIGKILL, true, &e);
    runtime_delete(r->id, &e);
    return sbx_start(m, l, r, p, NULL, err);
}

/* Wait (bounded) for the shim of id to end, if we know it. */
static void wait_shim(sbx_mgr_t *m, const char *id, int timeout_ms)
{
    struct sbx_live *l = sbx_live_get(m, id, false);
    if (!l)
        return;
    int fd = l->shim_pid > 0 ? proc_pidfd_open(l->shim_pid) : -1;
    if (fd >= 0) {
        struct pollfd pfd = {fd, POLLIN, 0};
        poll(&pfd, 1, timeout_ms);
        close(fd);
    }
    sbx_live_put(m, l);
}

int sbx_teardown(sbx_mgr_t *m, const char *id, bool remove_dirs, err_t *err)
{
    err_t e = {0};
    runtime_kill(id, SIGKILL, true, &e); /* fails harmlessly when nothing runs */
    wait_shim(m, id, 10000);
    int rc = runtime_delete(id, err);
    struct sbx_paths p;
    sbx_paths_init(m, id, &p);
    if (rc == 0)
        rc = storage_umount(p.rootfs, err);
    if (rc == 0)
        rc = sbx_sockdir_umount(&p, err);
    if (rc == 0 && remove_dirs)
        rc = net_sandbox_teardown(m->cfg.net, id, err);
    if (rc == 0 && remove_dirs) /* left by a fork into it that the daemon died in */
        rc = storage_remove_tree(p.fork_ckpt, err);
    if (rc == 0 && remove_dirs)
        rc = storage_remove_tree(p.dir, err);
    sbx_paths_free(&p);
    return rc;
}

int sbx_recorded_exit(sbx_mgr_t *m, const char *id)
{
    struct sbx_paths p;
    sbx_paths_init(m, id, &p);
    int fd = open(p.run, O_DIRECTORY | O_CLOEXEC);
    char line[32];
    int code = fd >= 0 && read_small_file(fd, "exit", line, sizeof(line)) ? atoi(line) : -1;
    if (fd >= 0)
        close(fd);
    sbx_paths_free(&p);
    return code;
}

int sbx_capture(sbx_mgr_t *m, const sandbox_rec_t *src, const struct sbx_capture *c,
                const char *fault, err_t *err)
{
    bool was_paused = src->status == SBX_PAUSED;
    struct sbx_paths sp;
    sbx_paths_init(m, src->id, &sp);
    int rc = 0;
    if (!was_paused)
        rc = runtime_pause(src->id, true, err);
    if (rc == 0 && c->ckpt_dir)
        rc = runtime_checkpoint(src->id, c->ckpt_dir, c->work_dir, true, err);
    if (rc == 0) {
        sbx_fault_point(fault);
        rc = storage_layer_clone(m->driver, sp.layer, c->layer, c->quota, err);
    }
    err_t e = {0};
    if (!was_paused && runtime_pause(src->id, false, &e) < 0 && rc == 0) {
        *err = e;
        rc = -1;
    }
    sbx_paths_free(&sp);
    return rc;
}
