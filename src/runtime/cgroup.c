/* cgroup hierarchy detection: v1/hybrid or v2 unified, read from the filesystem. */
#include <linux/magic.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>

#include "common/proc.h"
#include "runtime.h"

static enum cgroup_mode mode;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void detect(void)
{
    struct statfs fs;
    /* On v2 the root itself is cgroup2; hybrid hosts mount tmpfs there with v1 below. */
    if (statfs("/sys/fs/cgroup", &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC)
        mode = CGROUP_V2;
    else
        mode = CGROUP_V1;
}

enum cgroup_mode runtime_cgroup_mode(void)
{
    pthread_once(&once, detect);
    return mode;
}

/* The super options of the cgroup2 mount at path (the last one: it hides those under it). */
static bool cgroup2_super_options(const char *path, char *out, size_t size)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return false;
    char line[1024];
    bool found = false;
    while (fgets(line, sizeof(line), f)) {
        /* ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER_OPTIONS */
        char mp[512], type[64], super[256];
        const char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %*s %511s", mp) != 1 ||
            sscanf(dash + 3, "%63s %*s %255s", type, super) != 2)
            continue;
        if (strcmp(mp, path) == 0 && strcmp(type, "cgroup2") == 0) {
            snprintf(out, size, "%s", super);
            found = true;
        }
    }
    fclose(f);
    return found;
}

static bool has_option(const char *list, const char *opt)
{
    size_t n = strlen(opt);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, opt, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return true;
    return false;
}

int runtime_cgroup_favordynmods_on(const char **where)
{
    const char *path =
        runtime_cgroup_mode() == CGROUP_V2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/unified";
    *where = path;
    char opts[256];
    if (!cgroup2_super_options(path, opts, sizeof(opts)))
        return -1;
    return has_option(opts, "favordynmods") ? 1 : 0;
}

int runtime_cgroup_favor_dynmods(const char **where, err_t *err)
{
    const char *path =
        runtime_cgroup_mode() == CGROUP_V2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/unified";
    *where = path;
    char opts[256];
    if (!cgroup2_super_options(path, opts, sizeof(opts)))
        return err_set(err, ERR_NOT_FOUND, 0, "not_found", "no cgroup2 hierarchy at %s", path);
    if (has_option(opts, "favordynmods"))
        return 0;
    /* mount(8) merges the mount's present options (nsdelegate, nosuid, ...) with the new one. */
    char *argv[] = {"mount", "-o", "remount,favordynmods", (char *)path, NULL};
    if (proc_run_ok(argv, 10000, NULL, err) < 0)
        return -1;
    if (!cgroup2_super_options(path, opts, sizeof(opts)) || !has_option(opts, "favordynmods"))
        return err_set(err, ERR_RUNTIME, 0, "runtime", "%s kept its options (%s)", path, opts);
    return 1;
}

/* The first line of dir/name as an integer; -1 if absent or "max". */
static int64_t read_num(const char *dir, const char *name)
{
    char path[512], line[64];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    bool ok = fgets(line, sizeof(line), f) != NULL;
    fclose(f);
    char *end;
    long long v = ok ? strtoll(line, &end, 10) : -1;
    return ok && end != line && v >= 0 ? (int64_t)v : -1;
}

/* "key value" lines of dir/name: the value of key, or -1. */
static int64_t read_keyed(const char *dir, const char *name, const char *key)
{
    char path[512], k[64];
    long long v;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    int64_t out = -1;
    while (fscanf(f, "%63s %lld", k, &v) == 2)
        if (strcmp(k, key) == 0) {
            out = v;
            break;
        }
    fclose(f);
    return out;
}

/* v1 memory.limit_in_bytes says "no limit" with a huge page-aligned number. */
static int64_t v1_limit(int64_t v)
{
    return v >= (INT64_MAX / 2) ? -1 : v;
}

void runtime_cgroup_stats(const char *id, struct cgroup_stats *st)
{
    runtime_cgroup_stats_at("/sys/fs/cgroup", runtime_cgroup_mode(), id, st);
}

void runtime_cgroup_stats_at(const char *root, enum cgroup_mode m, const char *id,
                             struct cgroup_stats *st)
{
    *st = (struct cgroup_stats){-1, -1, -1, -1, -1, -1};
    char dir[400]; /* read_num and read_keyed add the file's name within 512 */
    if (m == CGROUP_V2) {
        snprintf(dir, sizeof(dir), "%s/sandboxer/%s", root, id);
        int64_t usec = read_keyed(dir, "cpu.stat", "usage_usec");
        st->cpu_ns = usec >= 0 ? usec * 1000 : -1;
        st->memory = read_num(dir, "memory.current");
        st->memory_limit = read_num(dir, "memory.max");
        st->memory_peak = read_num(dir, "memory.peak");
        st->pids = read_num(dir, "pids.current");
        st->pids_limit = read_num(dir, "pids.max");
        return;
    }
    snprintf(dir, sizeof(dir), "%s/cpuacct/sandboxer/%s", root, id);
    st->cpu_ns = read_num(dir, "cpuacct.usage");
    snprintf(dir, sizeof(dir), "%s/memory/sandboxer/%s", root, id);
    st->memory = read_num(dir, "memory.usage_in_bytes");
    st->memory_limit = v1_limit(read_num(dir, "memory.limit_in_bytes"));
    st->memory_peak = read_num(dir, "memory.max_usage_in_bytes");
    snprintf(dir, sizeof(dir), "%s/pids/sandboxer/%s", root, id);
    st->pids = read_num(dir, "pids.current");
    st->pids_limit = read_num(dir, "pids.max");
}
