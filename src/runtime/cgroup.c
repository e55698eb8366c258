/* cgroup hierarchy detection: v1/hybrid or v2 unified, read from the filesystem. */
#include <linux/magic.h>
#include <pthread.h>
#include <sys/vfs.h>

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
