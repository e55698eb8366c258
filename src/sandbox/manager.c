/* The manager: paths, the live table, the shim exit watcher, start-up and shutdown. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/util.h"
#include "runtime/runtime.h"
#include "sandbox_internal.h"

void sbx_paths_init(const sbx_mgr_t *m, const char *id, struct sbx_paths *p)
{
    p->dir = xasprintf("%s/%s", m->sandboxes_dir, id);
    p->bundle = xasprintf("%s/bundle", p->dir);
    p->rootfs = xasprintf("%s/bundle/rootfs", p->dir);
    p->layer = xasprintf("%s/layer", p->dir);
    p->upper = xasprintf("%s/layer/upper", p->dir);
    p->work = xasprintf("%s/layer/work", p->dir);
    p->run = xasprintf("%s/run", p->dir);
    p->sock = xasprintf("%s/sock", p->dir);
    p->logs = xasprintf("%s/logs", p->dir);
    p->etc = xasprintf("%s/etc", p->dir);
    /* /dev/shm is a tmpfs everywhere (/run is not on every host): memory, not disk. */
    p->fork_ckpt = xasprintf("%s/%s", m->fork_ckpt_dir, id);
}

void sbx_paths_free(struct sbx_paths *p)
{
    char **all[] = {&p->dir, &p->bundle, &p->rootfs, &p->layer, &p->upper,    &p->work,
                    &p->run, &p->sock,   &p->logs,   &p->etc,   &p->fork_ckpt};
    for (size_t i = 0; i < ARRAY_SIZE(all); i++) {
        free(*all[i]);
        *all[i] = NULL;
    }
}

struct sbx_live *sbx_live_get(sbx_mgr_t *m, const char *id, bool create)
{
    pthread_mutex_lock(&m->lock);
    struct sbx_live *l = m->live;
    while (l && strcmp(l->id, id) != 0)
        l = l->next;
    if (!l && create) {
        l = xcalloc(1, sizeof(*l));
        snprintf(l->id, sizeof(l->id), "%s", id);
        pthread_rwlock_init(&l->lock, NULL);
        pthread_mutex_init(&l->fswatch_lock, NULL);
        l->shim_pidfd = -1;
        l->refs = 1; /* the list's own reference */
        l->next = m->live;
        m->live = l;
    }
    if (l)
        l->refs++;
    pthread_mutex_unlock(&m->lock);
    return l;
}

static void live_free(sbx_mgr_t *m, struct sbx_live *l)
{
    sbx_unwatch(m, l);
    pthread_rwlock_destroy(&l->lock);
    pthread_mutex_destroy(&l->fswatch_lock);
    free(l);
}

void sbx_live_put(sbx_mgr_t *m, struct sbx_live *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&m->lock);
    bool last = --l->refs == 0;
    pthread_mutex_unlock(&m->lock);
    if (last)
        live_free(m, l);
}

void sbx_live_remove(sbx_mgr_t *m, const char *id)
{
    pthread_mutex_lock(&m->lock);
    struct sbx_live **pp = &m->live, *l = NULL;
    while (*pp && strcmp((*pp)->id, id) != 0)
        pp = &(*pp)->next;
    if (*pp) {
        l = *pp;
        *pp = l->next;
    }
    bool last = l && --l->refs == 0;
    pthread_mutex_unlock(&m->lock);
    if (last)
        live_free(m, l);
}

int sbx_watch(sbx_mgr_t *m, struct sbx_live *l, err_t *err)
{
    l->shim_pidfd = proc_pidfd_open(l->shim_pid);
    if (l->shim_pidfd < 0)
        return err_sys(err, "watch shim %d", (int)l->shim_pid);
    /* A shim ends once: one-shot, or its pidfd, readable for good from then on, would wake
     * the watcher in a loop until the entry is freed. */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = NULL};
    /* The watcher finds the sandbox by id: the live entry may be gone by then. */
    ev.data.u64 = (uint64_t)l->shim_pid;
    if (epoll_ctl(m->epfd, EPOLL_CTL_ADD, l->shim_pidfd, &ev) < 0)
        return err_sys(err, "watch shim");
    return 0;
}

void sbx_unwatch(sbx_mgr_t *m, struct sbx_live *l)
{
    if (l->shim_pidfd < 0)
        return;
    epoll_ctl(m->epfd, EPOLL_CTL_DEL, l->shim_pidfd, NULL);
    close(l->shim_pidfd);
    l->shim_pidfd = -1;
}

/* The id of the live sandbox whose shim is pid (copied into id), or false. */
static bool id_for_shim(sbx_mgr_t *m, pid_t pid, char *id, size_t size)
{
    pthread_mutex_lock(&m->lock);
    struct sbx_live *l = m->live;
    while (l && l->shim_pid != pid)
        l = l->next;
    if (l)
        snprintf(id, size, "%s", l->id);
    pthread_mutex_unlock(&m->lock);
    return l != NULL;
}

static void *watcher(void *arg)
{
    sbx_mgr_t *m = arg;
    for (;;) {
        struct epoll_event ev[16];
        int n = epoll_wait(m->epfd, ev, 16, -1);
        for (int i = 0; i < n; i++) {
            if (ev[i].data.u64 == 0)
                return NULL; /* the wake eventfd: stop */
            pid_t pid = (pid_t)ev[i].data.u64;
            waitpid(pid, NULL, WNOHANG); /* reap it if it is our child */
            char id[65];
            if (id_for_shim(m, pid, id, sizeof(id)))
                sbx_on_exit(m, id, pid);
        }
    }
}

/* Copy fd into path atomically (tmp + rename), mode 0555. */
static int copy_file(int in, const char *path, err_t *err)
{
    _cleanup_free_ char *tmp = xasprintf("%s.tmp", path);
    int out _cleanup_close_ = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0555);
    if (out < 0)
        return err_sys(err, "create %s", tmp);
    char buf[65536];
    ssize_t n;
    lseek(in, 0, SEEK_SET);
    while ((n = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n)
            return err_sys(err, "write %s", tmp);
    if (n < 0 || fsync(out) < 0 || rename(tmp, path) < 0)
        return err_sys(err, "install %s", path);
    return 0;
}

/*
 * Install the agent binary under <state>/agent/<content hash>/, where sandboxes bind it
 * from. A new version goes to a new directory: the file a running sandbox maps is never
 * replaced, so checkpoints never meet a deleted executable.
 */
static int install_agent(sbx_mgr_t *m, err_t *err)
{
    int in _cleanup_close_ = open(m->cfg.agent_bin, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return err_sys(err, "open the agent binary %s", m->cfg.agent_bin);
    unsigned char md[32];
    char hex[65];
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof(buf))) > 0)
        EVP_DigestUpdate(ctx, buf, (size_t)n);
    EVP_DigestFinal_ex(ctx, md, NULL);
    EVP_MD_CTX_free(ctx);
    hex_encode(md, 16, hex);
    m->agent_dir = xasprintf("%s/agent/%s", m->cfg.state_dir, hex);
    _cleanup_free_ char *dst = xasprintf("%s/sandboxer-agent", m->agent_dir);
    if (access(dst, X_OK) == 0)
        return 0;
    if (!mkdir_p(m->agent_dir, 0755))
        return err_sys(err, "create %s", m->agent_dir);
    return copy_file(in, dst, err);
}

/* CRIU options for every checkpoint and restore (runc passes the file to CRIU). */
static int write_criu_conf(sbx_mgr_t *m, err_t *err)
{
    m->criu_conf = xasprintf("%s/criu.conf", m->cfg.state_dir);
    /*
     * ghost-limit: deleted files still open or mapped in a sandbox are saved up to this
     * size. tcp-close: established TCP connections are left alone at dump and come back
     * closed (a fork's copy of a connection cannot talk to the peer anyway); listening
     * sockets are kept. network-lock skip: with tcp-close there is no connection state to
     * protect, and locking a namespace with iptables costs ~125 ms per fork. Connections
     * between two loopback addresses are the exception (scripts/criu-patches/0006): both ends
     * are in the sandbox, so they are kept, established. skip-in-flight: a connection a
     * listener has not accepted yet is left out (the client retries), where CRIU would
     * otherwise refuse the whole checkpoint. timeout: how long freezing and seizing the tree
     * may take (CRIU's default, 10 s, was reached on a loaded host by a shell pipeline that
     * forks all the time).
     */
    static const char conf[] = "ghost-limit 268435456\ntcp-close\nskip-in-flight\n"
                               "network-lock skip\nmanage-cgroups=ignore\ntimeout 30\n";
    int fd _cleanup_close_ = open(m->criu_conf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, conf, sizeof(conf) - 1) != (ssize_t)(sizeof(conf) - 1))
        return err_sys(err, "write %s", m->criu_conf);
    /* A restore into a user namespace: CRIU makes the network namespace, empty (userns.c),
     * and the script brings its lo up before the sandbox's own TCP connections over it are
     * restored (the daemon plumbs the rest once the restore is done). */
    static const char script[] =
        "#!/bin/sh\n"
        "# CRIU's action script for restores into user namespaces (sandboxer, "
        "criu-empty-net.conf)\n"
        "[ \"$CRTOOLS_SCRIPT_ACTION\" = setup-namespaces ] || exit 0\n"
        "PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH\n"
        "exec nsenter --net=/proc/\"$CRTOOLS_INIT_PID\"/ns/net ip link set lo up\n";
    _cleanup_free_ char *script_path = xasprintf("%s/criu-lo-up.sh", m->cfg.state_dir);
    int sfd _cleanup_close_ =
        open(script_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0755);
    if (sfd < 0 || write(sfd, script, sizeof(script) - 1) != (ssize_t)(sizeof(script) - 1) ||
        fchmod(sfd, 0755) < 0)
        return err_sys(err, "write %s", script_path);
    _cleanup_free_ char *empty = xasprintf("empty-ns net\naction-script %s\n", script_path);
    m->criu_conf_empty_net = xasprintf("%s/criu-empty-net.conf", m->cfg.state_dir);
    int fd2 _cleanup_close_ =
        open(m->criu_conf_empty_net, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd2 < 0 || write(fd2, conf, sizeof(conf) - 1) != (ssize_t)(sizeof(conf) - 1) ||
        write(fd2, empty, strlen(empty)) != (ssize_t)strlen(empty))
        return err_sys(err, "write %s", m->criu_conf_empty_net);
    return 0;
}

/*
 * Where forks of this daemon checkpoint their parents: a directory of its own under
 * /dev/shm/sandboxer-checkpoints (named by a hash of the state dir), so daemons on one host
 * never meet each other's, and start-up can clear what a crash left in it.
 */
static char *fork_ckpt_dir(const char *state_dir)
{
    unsigned char md[32];
    char hex[65];
    EVP_Digest(state_dir, strlen(state_dir), md, NULL, EVP_sha256(), NULL);
    hex_encode(md, 8, hex);
    return xasprintf("/dev/shm/sandboxer-checkpoints/%s", hex);
}

sbx_mgr_t *sbx_open(const struct sbx_config *cfg, store_t *store, image_store_t *images, err_t *err)
{
    sbx_mgr_t *m = xcalloc(1, sizeof(*m));
    m->cfg = *cfg;
    m->store = store;
    m->images = images;
    m->sandboxes_dir = xasprintf("%s/sandboxes", cfg->state_dir);
    m->fork_ckpt_dir = fork_ckpt_dir(cfg->state_dir);
    m->runc_root = xasprintf("%s/runc", cfg->state_dir);
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->tpl_lock, NULL);
    pthread_cond_init(&m->tpl_cond, NULL);
    m->tpl_building = json_object();
    m->tpl_pending = json_object();
    m->epfd = epoll_create1(EPOLL_CLOEXEC);
    m->wake_fd = eventfd(0, EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
    if (!mkdir_p(m->sandboxes_dir, 0711) || !mkdir_p(m->runc_root, 0700) || m->epfd < 0 ||
        m->wake_fd < 0 || epoll_ctl(m->epfd, EPOLL_CTL_ADD, m->wake_fd, &ev) < 0) {
        err_sys(err, "prepare %s", m->sandboxes_dir);
        sbx_close(m);
        return NULL;
    }
    if (install_agent(m, err) < 0 || write_criu_conf(m, err) < 0 ||
        storage_detect(m->sandboxes_dir, cfg->storage_driver, &m->driver, err) < 0 ||
        sbx_userns_setup(m, err) < 0) {
        sbx_close(m);
        return NULL;
    }
    m->quota = storage_quota_detect(m->driver, m->sandboxes_dir);
    user_t pool_owner; /* known before reconcile sets up pooled sandboxes' networks */
    if (sbx_pool_user(m, &pool_owner, err) < 0) {
        sbx_close(m);
        return NULL;
    }
    log_info("storage.ready", "driver=%s disk_quotas=%s", storage_driver_name(m->driver),
             storage_quota_name(m->quota));
    _cleanup_free_ char *agent = xasprintf("%s/sandboxer-agent", m->agent_dir);
    runtime_configure(&(struct runtime_config){
        cfg->runc_bin ? cfg->runc_bin : "runc", cfg->runsc_bin ? cfg->runsc_bin : "runsc",
        cfg->state_dir, cfg->self_exe, cfg->runsc_platform, agent});
    const runtime_t *def = runtime_find(cfg->runtime ? cfg->runtime : "runc");
    if (!def || runtime_usable(def, err) < 0) {
        if (!def)
            err_set(err, ERR_INVALID, 0, "invalid_option", "--runtime: \"runc\" or \"runsc\"");
        err_prefix(err, "--runtime %s", cfg->runtime);
        sbx_close(m);
        return NULL;
    }
    if (pthread_create(&m->watcher, NULL, watcher, m) != 0) {
        err_sys(err, "start the exit watcher");
        sbx_close(m);
        return NULL;
    }
    m->watching = true;
    if (sbx_reaper_start(m, err) < 0) {
        sbx_close(m);
        return NULL;
    }
    return m;
}

void sbx_close(sbx_mgr_t *m)
{
    if (!m)
        return;
    sbx_templates_stop(m);
    sbx_reaper_stop(m);
    runtime_wait_probes();
    if (m->watching) {
        uint64_t one = 1;
        (void)!write(m->wake_fd, &one, sizeof(one));
        pthread_join(m->watcher, NULL);
    }
    while (m->live) {
        struct sbx_live *l = m->live;
        m->live = l->next;
        live_free(m, l);
    }
    if (m->epfd >= 0)
        close(m->epfd);
    if (m->wake_fd >= 0)
        close(m->wake_fd);
    pthread_mutex_destroy(&m->lock);
    pthread_mutex_destroy(&m->tpl_lock);
    pthread_cond_destroy(&m->tpl_cond);
    json_decref(m->tpl_building);
    json_decref(m->tpl_pending);
    free(m->sandboxes_dir);
    if (m->fork_ckpt_dir) /* empty by now (a fork removes its images): leave no dir behind */
        rmdir(m->fork_ckpt_dir);
    free(m->fork_ckpt_dir);
    free(m->agent_dir);
    free(m->criu_conf);
    free(m->criu_conf_empty_net);
    free(m->runc_root);
    free(m);
}
