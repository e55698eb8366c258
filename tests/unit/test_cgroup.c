/* Reading a sandbox's cgroup, v2 and v1 layouts, from a directory tree made like the kernel's. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "runtime/runtime.h"
#include "tap.h"

static char root[] = "/tmp/sbx-test-cgroup-XXXXXX";

static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    mkdir_p(path, 0755);
    *slash = '/';
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

int main(void)
{
    if (!mkdtemp(root))
        return 1;
    struct cgroup_stats st;

    /* cgroup v2: one directory; "max" means no limit; cpu.stat is keyed, in microseconds. */
    put("sandboxer/a/cpu.stat", "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n");
    put("sandboxer/a/memory.current", "52428800\n");
    put("sandboxer/a/memory.max", "536870912\n");
    put("sandboxer/a/memory.peak", "60000000\n");
    put("sandboxer/a/pids.current", "3\n");
    put("sandboxer/a/pids.max", "max\n");
    runtime_cgroup_stats_at(root, CGROUP_V2, "a", &st);
    ok(st.cpu_ns == 1500000, "v2: cpu.stat usage_usec in ns (%lld)", (long long)st.cpu_ns);
    ok(st.memory == 52428800 && st.memory_limit == 536870912 && st.memory_peak == 60000000,
       "v2: memory current, max and peak");
    ok(st.pids == 3 && st.pids_limit == -1, "v2: pids, and max as no limit");
    put("sandboxer/b/memory.current", "7\n"); /* an older kernel: no memory.peak, no cpu.stat */
    runtime_cgroup_stats_at(root, CGROUP_V2, "b", &st);
    ok(st.memory == 7 && st.memory_peak == -1 && st.cpu_ns == -1 && st.pids == -1,
       "v2: absent files read as unknown");

    /* cgroup v1 (and hybrid): one directory per controller. */
    put("cpuacct/sandboxer/c/cpuacct.usage", "123456789\n");
    put("memory/sandboxer/c/memory.usage_in_bytes", "4096\n");
    put("memory/sandboxer/c/memory.limit_in_bytes", "9223372036854771712\n");
    put("memory/sandboxer/c/memory.max_usage_in_bytes", "8192\n");
    put("pids/sandboxer/c/pids.current", "2\n");
    put("pids/sandboxer/c/pids.max", "512\n");
    runtime_cgroup_stats_at(root, CGROUP_V1, "c", &st);
    ok(st.cpu_ns == 123456789, "v1: cpuacct.usage in ns");
    ok(st.memory == 4096 && st.memory_peak == 8192, "v1: memory usage and max usage");
    ok(st.memory_limit == -1, "v1: the page-aligned huge limit means no limit");
    ok(st.pids == 2 && st.pids_limit == 512, "v1: pids and their limit");
    runtime_cgroup_stats_at(root, CGROUP_V1, "nope", &st);
    ok(st.cpu_ns == -1 && st.memory == -1 && st.memory_limit == -1 && st.pids_limit == -1,
       "no cgroup at all: everything unknown");

    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    (void)!system(cmd);
    return tap_done();
}
