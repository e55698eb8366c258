/*
 * GET /sandboxes/{id}/stats: what a sandbox uses now, from its cgroup (CPU, memory, tasks),
 * its writable layer (disk) and its veth (network). Reading never wakes a hibernated
 * sandbox: it then reports its disk use only.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "net/net.h"
#include "runtime/runtime.h"
#include "sandbox_internal.h"

#define DISK_WALK_MAX 200000 /* entries counted at most (then "disk.partial": true) */
#define DISK_DEPTH    128

struct walk {
    uint64_t bytes;
    size_t entries;
    bool partial;
};

/* Sum the blocks under the directory fd (which this closes), never following a link: the
 * sandbox writes this tree, and it is walked on the host. */
static void walk_dir(int fd, int depth, struct walk *w)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (++w->entries > DISK_WALK_MAX) {
            w->partial = true;
            break;
        }
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        w->bytes += (uint64_t)st.st_blocks * 512;
        if (!S_ISDIR(st.st_mode))
            continue;
        if (depth >= DISK_DEPTH) {
            w->partial = true;
            continue;
        }
        int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0)
            walk_dir(sub, depth + 1, w);
    }
    closedir(d);
}

static json_t *num(int64_t v)
{
    return v >= 0 ? json_integer((json_int_t)v) : json_null();
}

static json_t *disk_json(sbx_mgr_t *m, const char *id)
{
    struct sbx_paths p;
    sbx_paths_init(m, id, &p);
    struct walk w = {0};
    int fd = open(p.upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0)
        walk_dir(fd, 0, &w);
    int64_t sock = sbx_sockdir_used(&p); /* a tmpfs: memory, bounded apart from disk */
    sbx_paths_free(&p);
    return json_pack("{s:I, s:b, s:o}", "used_bytes", (json_int_t)w.bytes, "partial", w.partial,
                     "socket_dir_bytes", num(sock));
}

static int64_t read_counter(const char *ifname, const char *name)
{
    char path[128], line[32];
    snprintf(path, sizeof(path), "/sys/class/net/%s/statistics/%s", ifname, name);
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, line, sizeof(line) - 1) : -1;
    if (n <= 0)
        return -1;
    line[n] = '\0';
    return strtoll(line, NULL, 10);
}

/* The host's veth end: what it receives the sandbox sent, and the other way round. */
static json_t *net_json(sbx_mgr_t *m, const char *id)
{
    char ifname[16];
    net_host_ifname(m->cfg.net, id, ifname);
    return json_pack("{s:o, s:o}", "rx_bytes", num(read_counter(ifname, "tx_bytes")), "tx_bytes",
                     num(read_counter(ifname, "rx_bytes")));
}

static json_t *live_json(const sandbox_rec_t *r)
{
    struct cgroup_stats cg;
    runtime_cgroup_stats(r->id, &cg);
    json_t *res = json_object_get(r->spec, "resources");
    return json_pack("{s:{s:o, s:o}, s:{s:o, s:o, s:o}, s:{s:o, s:o}}", "cpu", "usage_seconds",
                     cg.cpu_ns >= 0 ? json_real((double)cg.cpu_ns / 1e9) : json_null(),
                     "limit_cpus", json_incref(json_object_get(res, "cpus")), "memory",
                     "usage_bytes", num(cg.memory), "limit_bytes", num(cg.memory_limit),
                     "peak_bytes", num(cg.memory_peak), "pids", "current", num(cg.pids), "limit",
                     num(cg.pids_limit));
}

int sbx_stats(sbx_mgr_t *m, const user_t *owner, const char *key, json_t **out, err_t *err)
{
    sandbox_rec_t r;
    if (sbx_lookup(m, owner, key, &r, err) < 0)
        return -1;
    bool live = r.status == SBX_RUNNING || r.status == SBX_PAUSED;
    json_t *j = live ? live_json(&r) : json_pack("{s:n, s:n, s:n}", "cpu", "memory", "pids");
    json_object_set_new(j, "id", json_string(r.id));
    json_object_set_new(j, "status", json_string(sandbox_status_name(r.status)));
    json_object_set_new(j, "timestamp", json_real(now_unix()));
    json_t *disk = r.status == SBX_TERMINATED ? json_null() : disk_json(m, r.id);
    if (json_is_object(disk)) /* the limit set at create (disk), null if none */
        json_object_set_new(disk, "limit_bytes",
                            sbx_spec_disk(r.spec) ? json_integer((json_int_t)sbx_spec_disk(r.spec))
                                                  : json_null());
    json_object_set_new(j, "disk", disk);
    json_object_set_new(j, "network", live ? net_json(m, r.id) : json_null());
    store_sandbox_rec_clear(&r);
    *out = j;
    return 0;
}
