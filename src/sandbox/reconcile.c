/*
 * Reconcile on start: bring the store and what runs together after a restart or a crash.
 * Nothing half-made survives (an unanswered create or fork is undone), nothing running is
 * forgotten (a container whose shim still runs is adopted), an interrupted delete, coalesce,
 * hibernate or wake is finished from what its intent and the files on disk say.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/util.h"
#include "net/net.h"
#include "runtime/runtime.h"
#include "sandbox_internal.h"
#include "storage/storage.h"

/* The shim of id still runs: its pid file names a live `sandboxer internal-shim`. */
static pid_t live_shim(sbx_mgr_t *m, const char *id, pid_t *init_pid)
{
    struct sbx_paths p;
    sbx_paths_init(m, id, &p);
    int fd _cleanup_close_ = open(p.run, O_DIRECTORY | O_CLOEXEC);
    sbx_paths_free(&p);
    char line[32], cmd[512] = "";
    if (fd < 0 || !read_small_file(fd, "shim.pid", line, sizeof(line)))
        return -1;
    pid_t pid = atoi(line);
    if (read_small_file(fd, "init.pid", line, sizeof(line)))
        *init_pid = atoi(line);
    _cleanup_free_ char *proc = xasprintf("/proc/%d/cmdline", (int)pid);
    int pfd _cleanup_close_ = open(proc, O_RDONLY | O_CLOEXEC);
    ssize_t n = pfd >= 0 ? read(pfd, cmd, sizeof(cmd) - 1) : -1;
    if (n <= 0)
        return -1;
    for (ssize_t i = 0; i < n; i++)
        if (cmd[i] == '\0')
            cmd[i] = ' ';
    cmd[n] = '\0';
    return strstr(cmd, "internal-shim") && strstr(cmd, id) ? pid : -1;
}

/* Watch a container found running after a restart; thaw one a crash left frozen. */
static bool adopt(sbx_mgr_t *m, sandbox_rec_t *r)
{
    err_t err = {0};
    pid_t init_pid = -1, shim = live_shim(m, r->id, &init_pid);
    if (shim <= 0)
        return false;
    struct sbx_live *l = sbx_live_get(m, r->id, true);
    const char *token = json_string_value(json_object_get(r->spec, "agent_token"));
    l->shim_pid = shim;
    l->init_pid = init_pid;
    l->rt = sbx_runtime(r);
    snprintf(l->token, sizeof(l->token), "%s", token ? token : "");
    l->peer.token = l->token[0] ? l->token : NULL;
    _cleanup_free_ char *bundle = xasprintf("%s/%s/bundle", m->sandboxes_dir, r->id);
    l->peer.pid = runtime_agent_peer(l->rt, bundle, init_pid);
    if (sbx_watch(m, l, &err) < 0)
        log_warn("reconcile.watch_failed", "sandbox=%s", r->id);
    sbx_live_put(m, l);
    char state[32] = "";
    /* A fork or snapshot freezes its source for a moment: a crash then leaves it frozen. */
    if (r->status == SBX_RUNNING &&
        runtime_state(sbx_runtime(r), r->id, state, sizeof(state), NULL, &err) == 0 &&
        strcmp(state, "paused") == 0)
        runtime_pause(sbx_runtime(r), r->id, false, &err);
    sandbox_status_t status = r->status == SBX_PAUSED ? SBX_PAUSED : SBX_RUNNING;
    store_sandbox_set_status(m->store, r->id, status, SBX_INTENT_NONE, false, 0, &err);
    log_info("reconcile.running", "sandbox=%s", r->id);
    return true;
}

static bool marker(sbx_mgr_t *m, const char *id, const char *name)
{
    _cleanup_free_ char *path = xasprintf("%s/%s/run/%s", m->sandboxes_dir, id, name);
    return access(path, F_OK) == 0;
}

static void reconcile_one(sbx_mgr_t *m, sandbox_rec_t *r)
{
    err_t err = {0};
    if (r->intent == SBX_INTENT_CREATE) {
        /* A create or fork that never answered: nothing half-made survives. */
        sbx_teardown(m, r->id, true, &err);
        store_sandbox_purge(m->store, r->id, &err);
        log_info("reconcile.create_undone", "sandbox=%s", r->id);
    } else if (r->intent == SBX_INTENT_DELETE || r->intent == SBX_INTENT_COALESCE) {
        if (sbx_teardown(m, r->id, true, &err) == 0)
            store_sandbox_set_deleted(
                m->store, r->id, r->intent == SBX_INTENT_COALESCE ? "coalesced" : "deleted", &err);
        log_info("reconcile.delete_finished", "sandbox=%s", r->id);
    } else if ((r->intent == SBX_INTENT_HIBERNATE || r->intent == SBX_INTENT_WAKE) &&
               marker(m, r->id, "hibernated") && !(r->intent == SBX_INTENT_WAKE && adopt(m, r))) {
        /* A complete checkpoint and no container: it sleeps. */
        sbx_teardown(m, r->id, false, &err);
        store_sandbox_set_status(m->store, r->id, SBX_HIBERNATED, SBX_INTENT_NONE, false, 0, &err);
        log_info("reconcile.hibernated", "sandbox=%s", r->id);
    } else if (r->status == SBX_RUNNING || r->status == SBX_PAUSED) {
        if (adopt(m, r))
            return;
        /* Its container is gone: marked exited (code if the shim recorded one), kept. */
        int code = sbx_recorded_exit(m, r->id);
        sbx_finish_exit(m, r->id);
        log_warn("reconcile.container_gone", "sandbox=%s exit_code=%d", r->id, code);
    }
}

/* Snapshot directories whose row was never written (a crash mid-snapshot). */
static void remove_orphan_snapshots(sbx_mgr_t *m)
{
    _cleanup_free_ char *dir = xasprintf("%s/snapshots", m->cfg.state_dir);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || store_snapshot_exists(m->store, e->d_name))
            continue;
        _cleanup_free_ char *path = xasprintf("%s/%s", dir, e->d_name);
        storage_remove_tree(path, NULL);
        log_info("reconcile.snapshot_removed", "dir=%s", e->d_name);
    }
    if (d)
        closedir(d);
}

/* Fork checkpoints a crash left in memory: no fork is in flight at start. */
static void remove_fork_checkpoints(sbx_mgr_t *m)
{
    storage_remove_tree(m->fork_ckpt_dir, NULL);
}

/* Addresses of the sandboxes that remain are theirs; every other network piece goes. */
static int reconcile_network(sbx_mgr_t *m, err_t *err)
{
    sandbox_rec_t *items = NULL;
    size_t n = 0;
    if (store_sandbox_list_live(m->store, &items, &n, err) < 0)
        return -1;
    const char **ids = xcalloc(n + 1, sizeof(*ids));
    for (size_t i = 0; i < n; i++) {
        ids[i] = items[i].id;
        err_t e = {0};
        if (items[i].ip_address[0] &&
            net_reserve(m->cfg.net, items[i].id, items[i].ip_address, &e) < 0)
            log_warn("reconcile.address", "sandbox=%s msg=\"%s\"", items[i].id, e.msg);
    }
    int removed = net_reconcile(m->cfg.net, ids, n, err);
    if (removed > 0)
        log_info("reconcile.network", "removed=%d", removed);
    free(ids);
    store_sandbox_list_free(items, n);
    return removed < 0 ? -1 : 0;
}

int sbx_reconcile(sbx_mgr_t *m, err_t *err)
{
    sandbox_rec_t *items = NULL;
    size_t n = 0;
    if (store_sandbox_list_live(m->store, &items, &n, err) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        reconcile_one(m, &items[i]);
    store_sandbox_list_free(items, n);
    remove_orphan_snapshots(m);
    remove_fork_checkpoints(m);
    return reconcile_network(m, err);
}

bool sbx_image_in_use(sbx_mgr_t *m, const char *ref)
{
    sandbox_rec_t *items = NULL;
    size_t n = 0;
    bool used = false;
    if (store_sandbox_list_live(m->store, &items, &n, NULL) < 0)
        return true; /* when in doubt, keep the image */
    for (size_t i = 0; i < n && !used; i++)
        used = strcmp(items[i].image, ref) == 0;
    store_sandbox_list_free(items, n);
    template_rec_t *tpls = NULL;
    if (!used && store_template_list(m->store, -1, &tpls, &n, NULL) < 0)
        return true;
    for (size_t i = 0; tpls && i < n && !used; i++)
        used = strcmp(tpls[i].image, ref) == 0;
    if (tpls)
        store_template_list_free(tpls, n);
    return used;
}

int sbx_layers_in_use(sbx_mgr_t *m, json_t **out, err_t *err)
{
    sandbox_rec_t *items = NULL;
    size_t n = 0;
    if (store_sandbox_list_live(m->store, &items, &n, err) < 0)
        return -1;
    json_t *set = json_object(); /* a set of dirs */
    for (size_t i = 0; i < n; i++) {
        json_t *dir;
        size_t k;
        json_array_foreach(json_object_get(items[i].spec, "layers"), k,
                           dir) if (json_is_string(dir))
            json_object_set_new(set, json_string_value(dir), json_true());
    }
    store_sandbox_list_free(items, n);
    if (store_snapshot_layers(m->store, set, err) < 0) {
        json_decref(set);
        return -1;
    }
    *out = set;
    return 0;
}
