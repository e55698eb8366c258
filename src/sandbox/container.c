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
#include <sys/mount.h>
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

uint32_t sbx_userns_base(const sandbox_rec_t *r)
{
    json_int_t base = json_integer_value(json_object_get(r->spec, "userns"));
    return base > 0 && base <= UINT32_MAX ? (uint32_t)base : 0;
}

/*
 * The overlay of a sandbox with a user namespace: each image layer through an idmapped mount
 * (its root-owned files owned by the sandbox's root, nothing chowned, the layer still shared),
 * mounted under <dir>/idmap only while the overlay is made: overlayfs keeps its own clones of
 * its layers' mounts. The writable layer is the sandbox's own: its files carry host ids of the
 * sandbox's range, and its root dir is the sandbox root's.
 */
static int mount_rootfs_idmapped(char **layers, size_t n, const struct sbx_paths *p, uint32_t base,
                                 err_t *err)
{
    if (chown(p->upper, base, base) < 0)
        return err_sys(err, "hand %s to the sandbox's root", p->upper);
    int ns _cleanup_close_ = runtime_userns_open(base, err);
    if (ns < 0)
        return -1;
    _cleanup_free_ char *scratch = xasprintf("%s/idmap", p->dir);
    if (mkdir(scratch, 0700) < 0 && errno != EEXIST)
        return err_sys(err, "create %s", scratch);
    char **dirs = xcalloc(n + 1, sizeof(*dirs));
    int rc = 0;
    size_t made = 0;
    for (; rc == 0 && made < n; made++) {
        dirs[made] = xasprintf("%s/%zu", scratch, made);
        umount2(dirs[made], MNT_DETACH | UMOUNT_NOFOLLOW); /* a crash's leftover */
        if (mkdir(dirs[made], 0700) < 0 && errno != EEXIST)
            rc = err_sys(err, "create %s", dirs[made]);
        else
            rc = runtime_idmap_mount(layers[made], dirs[made], ns, err);
    }
    if (rc == 0)
        rc = storage_mount_overlay(dirs, n, p->upper, p->work, p->rootfs, err);
    for (size_t i = 0; i < made; i++) {
        umount2(dirs[i], MNT_DETACH | UMOUNT_NOFOLLOW);
        rmdir(dirs[i]);
        free(dirs[i]);
    }
    free(dirs);
    rmdir(scratch);
    return rc;
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
    uint32_t base = sbx_userns_base(r);
    if (base && n > 0)
        return mount_rootfs_idmapped(dirs, n, p, base, err);
    return storage_mount_overlay(dirs, n, p->upper, p->work, p->rootfs, err);
}

const runtime_t *sbx_runtime(const sandbox_rec_t *r)
{
    const runtime_t *rt = runtime_find(r->runtime);
    return rt ? rt : runtime_find("runc");
}

const runtime_t *sbx_runtime_of(sbx_mgr_t *m, const char *id)
{
    struct sbx_live *l = sbx_live_get(m, id, false);
    const runtime_t *rt = l ? l->rt : NULL;
    if (l)
        sbx_live_put(m, l);
    sandbox_rec_t r;
    if (!rt && store_sandbox_get(m->store, -1, id, &r, NULL) == 0) {
        rt = sbx_runtime(&r);
        store_sandbox_rec_clear(&r);
    }
    return rt ? rt : runtime_find("runc");
}

/* r's veth, address and rules (ip again, or a new address), into its netns. */
static int plumb_net(sbx_mgr_t *m, const sandbox_rec_t *r, const char *ip, struct net_sandbox *ns,
                     err_t *err)
{
    const char *egress = json_string_value(json_object_get(r->spec, "network"));
    /* "proxy": no way out but the egress proxy on the gateway, which every sandbox may reach
     * (it answers only those whose network is "proxy"): for the rules, that is "none". */
    if (egress && strcmp(egress, "proxy") == 0)
        egress = "none";
    return net_sandbox_setup(m->cfg.net, r->id, sbx_pool_net_owner(m, r), egress ? egress : "none",
                             ip && *ip ? ip : NULL, ns, err);
}

int sbx_net_setup(sbx_mgr_t *m, const sandbox_rec_t *r, const struct sbx_paths *p, const char *ip,
                  err_t *err)
{
    struct net_sandbox ns;
    if (plumb_net(m, r, ip, &ns, err) < 0 || net_write_etc(p->etc, r->hostname, &ns, err) < 0)
        return -1;
    return store_sandbox_set_ip(m->store, r->id, ns.ip, err);
}

int sbx_write_bundle(sbx_mgr_t *m, const sandbox_rec_t *r, const struct sbx_paths *p, bool restore,
                     err_t *err)
{
    /* A restore into a user namespace gets a new, empty network namespace from CRIU (owned by
     * that user namespace, so that CRIU may repair the sandbox's own TCP connections in it);
     * sbx_start makes it the sandbox's and plumbs it afterwards. */
    bool own_netns = restore && sbx_userns_base(r);
    _cleanup_free_ char *netns =
        own_netns ? NULL : xasprintf("%s/netns/%s", m->cfg.state_dir, r->id);
    _cleanup_free_ char *userns =
        own_netns || !sbx_userns_base(r) ? NULL : sbx_userns_file(m, r->id);
    json_t *res = json_object_get(r->spec, "resources");
    const char *agent_dir = json_string_value(json_object_get(r->spec, "agent_dir"));
    struct spec_opts so = {
        .id = r->id,
        .hostname = r->hostname,
        .agent_dir = agent_dir ? agent_dir : m->agent_dir,
        .criu_conf = own_netns ? m->criu_conf_empty_net : m->criu_conf,
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
        .agent_auth = json_string_value(json_object_get(r->spec, "agent_token")) != NULL,
        .setuid = json_is_true(json_object_get(r->spec, "setuid")),
        .userns_base = sbx_userns_base(r),
        .userns_path = userns,
    };
    json_t *spec _cleanup_json_ = NULL;
    _cleanup_free_ char *config = xasprintf("%s/config.json", p->bundle);
    if (runtime_spec_build(&so, &spec, err) < 0)
        return -1;
    if (json_dump_file(spec, config, JSON_COMPACT) < 0)
        return err_sys(err, "write %s", config);
    return 0;
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

/* Forget what an earlier run of the container left in its run dir. */
static void clear_run_dir(int run_fd)
{
    const char *names[] = {"init.pid", "exit", "shim.pid", "runc.err", "agent.token"};
    for (size_t i = 0; i < ARRAY_SIZE(names); i++)
        unlinkat(run_fd, names[i], 0);
}

/* True once the shim recorded the container's end (waits up to a second for it). */
bool sbx_wait_exit_file(int run_fd)
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
    if (sbx_sockdir_mount(p, l->userns_base, err) < 0) /* before the dir is opened: its fd is
                                                            the tmpfs */
        return -1;
    if (restore && l->userns_base && runtime_userns_own_images(restore, l->userns_base, err) < 0)
        return -1;
    int dirfd _cleanup_close_ = open(p->sock, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int run_fd _cleanup_close_ = open(p->run, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0 || run_fd < 0)
        return err_sys(err, "open the sandbox's dirs");
    clear_run_dir(run_fd);
    /* The token reaches the agent through its stdin (the shim feeds it), never a file the
     * sandbox sees; the run dir is the host's only. */
    if (l->token[0] && !restore && write_file(p->run, "agent.token", l->token, err) < 0)
        return -1;
    struct shim_paths sp = {l->id, p->bundle, p->run, p->logs, m->cfg.log_max, restore};
    sbx_unwatch(m, l); /* a new shim replaces the one of an earlier run */
    l->shim_pid = runtime_start(l->rt, &sp, START_TIMEOUT_MS, &l->init_pid, err);
    unlinkat(run_fd, "agent.token", 0);
    if (l->shim_pid <= 0 || sbx_watch(m, l, err) < 0)
        return -1;
    l->peer.pid = runtime_agent_peer(l->rt, p->bundle, l->init_pid);
    l->peer.token = l->token[0] ? l->token : NULL;
    /* A restored main process may end at once (e.g. on a connection that came back closed). */
    if (restore && runtime_after_restore(l->rt, l->id, l->init_pid, hostname, err) < 0)
        return sbx_wait_exit_file(run_fd) ? 1 : -1;
    if (restore && runtime_can(l->rt, RUNTIME_AGENT_QUIESCE) &&
        runtime_agent_resume(l->rt, l->id, err) < 0)
        return sbx_wait_exit_file(run_fd) ? 1 : -1;
    double deadline = now_mono_ms() + START_TIMEOUT_MS;
    /* Until the agent answers, or the main process has already finished (hello-world). */
    while (now_mono_ms() < deadline) {
        err_t e = {0};
        if (agentc_wait_ready(dirfd, "agent.sock", &l->peer, 50, &e) == 0)
            return 0;
        if (faccessat(run_fd, "exit", F_OK, 0) == 0)
            return 1;
        *err = e;
    }
    return err_prefix(err, "the sandbox's agent did not answer");
}

/* What the live entry needs to know of r before it boots: its runtime and agent token. */
static void live_from_record(struct sbx_live *l, const sandbox_rec_t *r)
{
    const char *token = json_string_value(json_object_get(r->spec, "agent_token"));
    l->rt = sbx_runtime(r);
    l->userns_base = sbx_userns_base(r);
    snprintf(l->token, sizeof(l->token), "%s", token ? token : "");
}

/* The runtime took the address off the interface when it last ran (runsc): give it back. */
static int reapply_net(sbx_mgr_t *m, struct sbx_live *l, const sandbox_rec_t *r,
                       const struct sbx_paths *p, err_t *err)
{
    if (!runtime_can(l->rt, RUNTIME_NET_REAPPLY) || !r->ip_address[0])
        return 0;
    return sbx_net_setup(m, r, p, r->ip_address, err);
}

/*
 * A sandbox with a user namespace gets a network namespace that its user namespace owns, and
 * it is plumbed with the address in the store (a fork's setup gave it one r does not have):
 * - after a restore (pid: the restored init) CRIU made both, the netns empty: it becomes the
 *   sandbox's netns; not its /etc files, which are bound into the running sandbox (a rewrite
 *   would leave it a deleted file, which its next checkpoint could not restore);
 * - before a start from the files (pid 0) runc joins the pair, made again if a restore
 *   replaced it.
 */
static int userns_netns(sbx_mgr_t *m, const sandbox_rec_t *r, pid_t pid, err_t *err)
{
    if (!pid) {
        _cleanup_free_ char *user = sbx_userns_file(m, r->id);
        if (access(user, F_OK) == 0)
            return 0;
    }
    sandbox_rec_t now;
    if (store_sandbox_get(m->store, -1, r->id, &now, err) < 0)
        return -1;
    int rc;
    if (pid) {
        sbx_userns_forget(m, r->id); /* CRIU made its user namespace too */
        rc = net_sandbox_adopt_netns(m->cfg.net, r->id, pid, err);
    } else {
        rc = sbx_userns_netns(m, &now, err);
    }
    struct net_sandbox ns;
    if (rc == 0)
        rc = plumb_net(m, &now, now.ip_address, &ns, err);
    store_sandbox_rec_clear(&now);
    return rc;
}

int sbx_start(sbx_mgr_t *m, struct sbx_live *l, const sandbox_rec_t *r, const struct sbx_paths *p,
              const char *restore, err_t *err)
{
    int rc;
    live_from_record(l, r);
    if (reapply_net(m, l, r, p, err) < 0)
        return -1;
    if (!restore && l->userns_base && (rc = userns_netns(m, r, 0, err)) < 0)
        return -1;
    double t0 = now_mono_ms();
    if (sbx_mount_rootfs(r, p, err) < 0 || sbx_write_bundle(m, r, p, restore != NULL, err) < 0)
        return -1;
    double t1 = now_mono_ms();
    rc = sbx_boot(m, l, p, restore, r->hostname, err);
    double t2 = now_mono_ms();
    if (rc == 0 && restore && l->userns_base) /* see sbx_write_bundle */
        rc = userns_netns(m, r, l->init_pid, err);
    log_debug("sandbox.start_phases",
              "sandbox=%s restore=%d userns=%d rootfs_ms=%.1f boot_ms=%.1f net_ms=%.1f", r->id,
              restore != NULL, l->userns_base != 0, t1 - t0, t2 - t1, now_mono_ms() - t2);
    return rc;
}

int sbx_start_cold_after(sbx_mgr_t *m, struct sbx_live *l, const sandbox_rec_t *r,
                         const struct sbx_paths *p, err_t *err)
{
    /* What a failed restore left: the runtime's record of the container, a shim that ended. */
    err_t e = {0};
    runtime_kill(sbx_runtime(r), r->id, SIGKILL, true, &e);
    wait_shim(m, r->id, 10000);
    runtime_delete(sbx_runtime(r), r->id, &e);
    return sbx_start(m, l, r, p, NULL, err);
}

int sbx_teardown(sbx_mgr_t *m, const char *id, bool remove_dirs, err_t *err)
{
    err_t e = {0};
    const runtime_t *rt = sbx_runtime_of(m, id);
    runtime_kill(rt, id, SIGKILL, true, &e); /* fails harmlessly when nothing runs */
    wait_shim(m, id, 10000);
    int rc = runtime_delete(rt, id, err);
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

int sbx_quiesce_agent(sbx_mgr_t *m, struct sbx_live *l, const struct sbx_paths *p, err_t *err)
{
    if (!runtime_can(l->rt, RUNTIME_AGENT_QUIESCE))
        return 0;
    int dirfd _cleanup_close_ = open(p->sock, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0)
        return err_sys(err, "open the sandbox's socket dir");
    _cleanup_agentc_ int fd = agentc_connect(dirfd, AGENT_PROCS_SOCKET, &l->peer, 5000, err);
    if (fd < 0)
        return -1;
    agentc_reader_t r;
    struct agent_frame f;
    agentc_reader_init(&r);
    int rc = agentc_send(fd, AGENT_QUIESCE, NULL, 0, err);
    if (rc == 0)
        rc = agentc_read_frame(fd, &r, &f, now_mono_ms() + 5000, err);
    json_t *ans _cleanup_json_ = rc == 0 && f.type == AGENT_QUIESCED
                                     ? json_loadb((const char *)f.payload, f.len, 0, NULL)
                                     : NULL;
    agentc_reader_free(&r);
    if (rc < 0)
        return -1;
    if (!json_is_object(ans))
        return err_set(err, ERR_RUNTIME, 0, "agent_protocol", "the agent did not quiesce");
    if (json_is_true(json_object_get(ans, "ok")))
        return 0;
    const char *why = json_string_value(json_object_get(ans, "reason"));
    return err_set(err, ERR_CONFLICT, 0, "checkpoint_failed",
                   "the sandbox cannot be checkpointed under gVisor: %.300s",
                   why ? why : "the agent said no");
}

int sbx_resume_agent(sbx_mgr_t *m, struct sbx_live *l, const struct sbx_paths *p, err_t *err)
{
    if (!runtime_can(l->rt, RUNTIME_AGENT_QUIESCE))
        return 0;
    int dirfd _cleanup_close_ = open(p->sock, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0)
        return err_sys(err, "open the sandbox's socket dir");
    if (runtime_agent_resume(l->rt, l->id, err) < 0)
        return -1;
    return agentc_wait_ready(dirfd, "agent.sock", &l->peer, 5000, err);
}

int sbx_checkpoint_stop(sbx_mgr_t *m, struct sbx_live *l, const sandbox_rec_t *r,
                        const struct sbx_paths *p, const char *dir, const char *work_dir,
                        err_t *err)
{
    if (sbx_quiesce_agent(m, l, p, err) < 0)
        return -1; /* nothing was let go of: it runs on as it was */
    if (runtime_checkpoint(l->rt, r->id, dir, work_dir, false, err) == 0)
        return 0;
    runtime_checkpoint_explain(l->rt, work_dir, r->id, err);
    if (!runtime_can(l->rt, RUNTIME_AGENT_QUIESCE))
        return -1; /* CRIU lets a tree it could not dump run on */
    /* gVisor kills a container whose checkpoint it refuses: listen again if it runs, else
     * start it again from its files, and say that its memory is gone. */
    char state[32] = "";
    err_t e = {0};
    if (runtime_state(l->rt, r->id, state, sizeof(state), NULL, &e) == 0 &&
        strcmp(state, "running") == 0 && sbx_resume_agent(m, l, p, &e) == 0)
        return -1;
    log_warn("sandbox.checkpoint_killed", "sandbox=%s msg=\"%s\" fallback=cold", r->id, err->msg);
    sbx_note(m, r->id, "checkpoint",
             "the runtime ended the sandbox when its checkpoint failed; "
             "it started again from its files (its memory is lost)");
    sbx_start_cold_after(m, l, r, p, &e);
    return -1;
}

/* Capture for a runtime that checkpoints only by stopping the container (runsc): quiesce,
 * checkpoint (it ends), clone the layer, then restore the source from the same images. */
static int capture_stopping(sbx_mgr_t *m, const sandbox_rec_t *src, const struct sbx_capture *c,
                            const char *fault, err_t *err)
{
    struct sbx_live *l = sbx_live_get(m, src->id, true);
    const runtime_t *rt = sbx_runtime(src);
    struct sbx_paths sp;
    sbx_paths_init(m, src->id, &sp);
    bool was_paused = src->status == SBX_PAUSED;
    int rc = was_paused ? runtime_pause(rt, src->id, false, err) : 0;
    if (rc == 0)
        rc = sbx_checkpoint_stop(m, l, src, &sp, c->ckpt_dir, c->work_dir, err);
    if (rc == 0) {
        sbx_fault_point(fault);
        rc = storage_layer_clone(m->driver, sp.layer, c->layer, c->quota, err);
        /* The source comes back from its own images (memory and all), the clone's failure
         * or not. */
        err_t e = {0};
        wait_shim(m, src->id, 10000);
        runtime_delete(rt, src->id, &e);
        if (reapply_net(m, l, src, &sp, &e) < 0 || sbx_boot(m, l, &sp, c->ckpt_dir, NULL, &e) < 0) {
            log_warn("sandbox.restore_failed", "sandbox=%s msg=\"%s\" fallback=cold", src->id,
                     e.msg);
            sbx_note(m, src->id, "restore", e.msg);
            sbx_start_cold_after(m, l, src, &sp, &e);
        }
    }
    err_t e = {0};
    if (was_paused)
        runtime_pause(rt, src->id, true, &e);
    sbx_paths_free(&sp);
    sbx_live_put(m, l);
    return rc;
}

int sbx_capture(sbx_mgr_t *m, const sandbox_rec_t *src, const struct sbx_capture *c,
                const char *fault, err_t *err)
{
    const runtime_t *rt = sbx_runtime(src);
    if (c->ckpt_dir && !runtime_can(rt, RUNTIME_LIVE_CHECKPOINT))
        return capture_stopping(m, src, c, fault, err);
    bool was_paused = src->status == SBX_PAUSED;
    struct sbx_paths sp;
    sbx_paths_init(m, src->id, &sp);
    int rc = 0;
    if (!was_paused)
        rc = runtime_pause(rt, src->id, true, err);
    if (rc == 0 && c->ckpt_dir)
        rc = runtime_checkpoint(rt, src->id, c->ckpt_dir, c->work_dir, true, err);
    if (rc == 0) {
        sbx_fault_point(fault);
        rc = storage_layer_clone(m->driver, sp.layer, c->layer, c->quota, err);
    }
    err_t e = {0};
    if (!was_paused && runtime_pause(rt, src->id, false, &e) < 0 && rc == 0) {
        *err = e;
        rc = -1;
    }
    sbx_paths_free(&sp);
    return rc;
}
