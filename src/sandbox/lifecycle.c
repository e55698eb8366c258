/* Reading, updating and deleting sandboxes; exits; reconcile after a restart. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/util.h"
#include "runtime/runtime.h"
#include "sandbox_internal.h"
#include "net/net.h"
#include "store/store_events.h"
#include "storage/storage.h"

void sbx_event(sbx_mgr_t *m, int64_t owner_id, const char *id, const char *type, json_t *data)
{
    sandbox_rec_t r;
    if (owner_id < 0 && store_sandbox_get(m->store, -1, id, &r, NULL) == 0) {
        owner_id = r.owner_id;
        store_sandbox_rec_clear(&r);
    }
    if (owner_id >= 0)
        store_event_add(m->store, owner_id, id, type, data);
    if (data)
        json_decref(data);
}

int sbx_lookup(sbx_mgr_t *m, const user_t *owner, const char *key, sandbox_rec_t *rec, err_t *err)
{
    /* Unknown and foreign ids get the same answer (DESIGN invariant 2). */
    if (!key || !*key || strlen(key) > 64)
        return err_set(err, ERR_NOT_FOUND, 0, "sandbox_not_found", "no such sandbox");
    return store_sandbox_get(m->store, owner->id, key, rec, err);
}

static json_t *num_or_null(bool has, double v)
{
    return has ? json_real(v) : json_null();
}

json_t *sbx_to_json(sbx_mgr_t *m, const sandbox_rec_t *r)
{
    json_t *res = json_object_get(r->spec, "resources");
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "id", r->id, "name", r->name, "label",
                          r->label, "image", r->image, "status", r->status, "runtime", r->runtime);
    json_object_set_new(j, "exit_code",
                        r->has_exit_code ? json_integer(r->exit_code) : json_null());
    json_object_set_new(j, "hostname", json_string(r->hostname));
    json_object_set_new(j, "ip_address",
                        r->ip_address[0] ? json_string(r->ip_address) : json_null());
    json_object_set_new(j, "parent_id", r->parent_id[0] ? json_string(r->parent_id) : json_null());
    json_object_set_new(j, "child_ids", store_sandbox_child_ids(m->store, r->id));
    json_object_set_new(j, "created_at", json_real(r->created_at));
    json_object_set_new(j, "last_active_at", json_real(r->last_active_at));
    json_object_set_new(j, "deleted_at", num_or_null(r->deleted_at > 0, r->deleted_at));
    json_object_set_new(j, "delete_reason",
                        r->delete_reason[0] ? json_string(r->delete_reason) : json_null());
    json_object_set_new(j, "is_public", json_boolean(r->is_public));
    json_object_set_new(j, "interactive", json_boolean(r->interactive));
    json_object_set_new(j, "url", json_null()); /* set once the inbound proxy exists */
    json_object_set_new(j, "resources", res ? json_deep_copy(res) : json_object());
    json_t *net = json_object_get(r->spec, "network");
    json_object_set_new(j, "network", net ? json_deep_copy(net) : json_null());
    json_t *allow = json_object_get(r->spec, "egress_allow");
    json_object_set_new(j, "egress_allow", allow ? json_deep_copy(allow) : json_null());
    return j;
}

json_t *sbx_egress_allow(sbx_mgr_t *m, const char *ip)
{
    sandbox_rec_t r;
    if (store_sandbox_get_by_ip(m->store, ip, &r, NULL) < 0)
        return NULL;
    json_t *out = NULL;
    const char *net = json_string_value(json_object_get(r.spec, "network"));
    json_t *allow = json_object_get(r.spec, "egress_allow");
    if (net && strcmp(net, "proxy") == 0 && json_is_array(allow))
        out = json_deep_copy(allow);
    store_sandbox_rec_clear(&r);
    return out;
}

int sbx_get(sbx_mgr_t *m, const user_t *owner, const char *key, json_t **out, err_t *err)
{
    sandbox_rec_t r;
    if (sbx_lookup(m, owner, key, &r, err) < 0)
        return -1;
    *out = sbx_to_json(m, &r);
    store_sandbox_rec_clear(&r);
    return 0;
}

int sbx_list(sbx_mgr_t *m, const user_t *owner, json_t **out, err_t *err)
{
    sandbox_rec_t *items = NULL;
    size_t n = 0;
    if (store_sandbox_list(m->store, owner->id, &items, &n, err) < 0)
        return -1;
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, sbx_to_json(m, &items[i]));
    store_sandbox_list_free(items, n);
    *out = arr;
    return 0;
}

int sbx_update(sbx_mgr_t *m, const user_t *owner, const char *key, const char *label, int is_public,
               json_t **out, err_t *err)
{
    sandbox_rec_t r;
    if (sbx_lookup(m, owner, key, &r, err) < 0)
        return -1;
    int rc = store_sandbox_update(m->store, r.id, label, is_public, err);
    if (rc == 0) {
        *out = json_pack("{s:s}", "id", r.id);
        if (label)
            json_object_set_new(*out, "label", json_string(label));
        if (is_public >= 0)
            json_object_set_new(*out, "public", json_boolean(is_public));
        sbx_event(m, r.owner_id, r.id, "updated", json_deep_copy(*out));
    }
    store_sandbox_rec_clear(&r);
    return rc;
}

/* Wait (bounded) for the shim of id to end, if we know it. */
static void wait_shim(sbx_mgr_t *m, const char *id, int timeout_ms)
{
    struct sbx_live *l = sbx_live_get(m, id, false);
    if (!l)
        return;
    int fd = l->shim_pid > 0 ? proc_pidfd_open(l->shim_pid) : -1;
    if (fd >= 0) {
        struct pollfd p = {fd, POLLIN, 0};
        poll(&p, 1, timeout_ms);
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

int sbx_delete(sbx_mgr_t *m, const user_t *owner, const char *key, json_t **out, err_t *err)
{
    sandbox_rec_t r;
    if (sbx_lookup(m, owner, key, &r, err) < 0)
        return -1;
    int rc = 0;
    /* The intent first: a daemon killed mid-way finishes the delete on start. */
    if (strcmp(r.status, "terminated") != 0)
        rc = store_sandbox_set_status(m->store, r.id, r.status, "delete", false, 0, err);
    /* Killing first ends running execs, which hold the sandbox's lock for reading. */
    err_t ignored = {0};
    if (rc == 0 && strcmp(r.status, "terminated") != 0)
        runtime_kill(r.id, SIGKILL, true, &ignored);
    struct sbx_live *l = sbx_live_get(m, r.id, true);
    pthread_rwlock_wrlock(&l->lock);
    if (rc == 0 && strcmp(r.status, "terminated") != 0) {
        rc = sbx_teardown(m, r.id, true, err);
        if (rc == 0)
            rc = store_sandbox_set_deleted(m->store, r.id, "deleted", err);
        if (rc == 0) {
            log_info("sandbox.deleted", "sandbox=%s user=%s", r.id, owner->name);
            sbx_event(m, r.owner_id, r.id, "deleted", json_pack("{s:s}", "reason", "deleted"));
        }
    }
    pthread_rwlock_unlock(&l->lock);
    sbx_live_put(m, l);
    if (rc == 0) {
        sbx_live_remove(m, r.id);
        *out = json_pack("{s:s, s:s}", "id", r.id, "status", "terminated");
    }
    store_sandbox_rec_clear(&r);
    return rc;
}

/* The exit code the shim recorded, or -1 if it recorded none. */
static int recorded_exit(sbx_mgr_t *m, const char *id)
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

/* Mark an ended container exited and release what it held, keeping its files and logs. */
static void finish_exit(sbx_mgr_t *m, const char *id, int code)
{
    err_t err = {0};
    store_sandbox_set_status(m->store, id, "exited", NULL, code >= 0, code, &err);
    if (sbx_teardown(m, id, false, &err) < 0)
        log_warn("sandbox.cleanup_failed", "sandbox=%s msg=\"%s\"", id, err.msg);
    log_info("sandbox.exited", "sandbox=%s exit_code=%d", id, code);
    sbx_event(m, -1, id, "exited", code >= 0 ? json_pack("{s:i}", "exit_code", code) : NULL);
}

void sbx_finish_exit(sbx_mgr_t *m, const char *id)
{
    finish_exit(m, id, recorded_exit(m, id));
}

void sbx_on_exit(sbx_mgr_t *m, const char *id, pid_t shim_pid)
{
    struct sbx_live *l = sbx_live_get(m, id, false);
    if (!l)
        return;
    pthread_rwlock_wrlock(&l->lock);
    sandbox_rec_t r;
    err_t err = {0};
    /* The shim of an earlier run (before a hibernate and wake) ending is no news. */
    if (l->shim_pid == shim_pid && store_sandbox_get(m->store, -1, id, &r, &err) == 0) {
        if (strcmp(r.status, "running") == 0 && !r.intent[0])
            finish_exit(m, id, recorded_exit(m, id));
        store_sandbox_rec_clear(&r);
    }
    pthread_rwlock_unlock(&l->lock);
    sbx_live_put(m, l);
}

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
    l->shim_pid = shim;
    l->init_pid = init_pid;
    if (sbx_watch(m, l, &err) < 0)
        log_warn("reconcile.watch_failed", "sandbox=%s", r->id);
    sbx_live_put(m, l);
    char state[32] = "";
    /* A fork or snapshot freezes its source for a moment: a crash then leaves it frozen. */
    if (strcmp(r->status, "running") == 0 &&
        runtime_state(r->id, state, sizeof(state), NULL, &err) == 0 && strcmp(state, "paused") == 0)
        runtime_pause(r->id, false, &err);
    const char *status = strcmp(r->status, "paused") == 0 ? "paused" : "running";
    store_sandbox_set_status(m->store, r->id, status, NULL, false, 0, &err);
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
    if (strcmp(r->intent, "create") == 0) {
        /* A create or fork that never answered: nothing half-made survives. */
        sbx_teardown(m, r->id, true, &err);
        store_sandbox_purge(m->store, r->id, &err);
        log_info("reconcile.create_undone", "sandbox=%s", r->id);
    } else if (strcmp(r->intent, "delete") == 0 || strcmp(r->intent, "coalesce") == 0) {
        if (sbx_teardown(m, r->id, true, &err) == 0)
            store_sandbox_set_deleted(m->store, r->id,
                                      r->intent[0] == 'c' ? "coalesced" : "deleted", &err);
        log_info("reconcile.delete_finished", "sandbox=%s", r->id);
    } else if ((strcmp(r->intent, "hibernate") == 0 || strcmp(r->intent, "wake") == 0) &&
               marker(m, r->id, "hibernated") && !(r->intent[0] == 'w' && adopt(m, r))) {
        /* A complete checkpoint and no container: it sleeps. */
        sbx_teardown(m, r->id, false, &err);
        store_sandbox_set_status(m->store, r->id, "hibernated", NULL, false, 0, &err);
        log_info("reconcile.hibernated", "sandbox=%s", r->id);
    } else if (strcmp(r->status, "running") == 0 || strcmp(r->status, "paused") == 0) {
        if (adopt(m, r))
            return;
        /* Its container is gone: marked exited (code if the shim recorded one), kept. */
        int code = recorded_exit(m, r->id);
        finish_exit(m, r->id, code);
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
