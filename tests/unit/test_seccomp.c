/* The default seccomp profile's table (src/runtime/seccomp.c): its promises, checked. */
#include <errno.h>
#include <string.h>

#include "runtime/runtime.h"
#include "tap.h"

/* The group a syscall is listed in, or NULL; *count says how many groups list it. */
static const struct seccomp_group *find(const char *name, int *count)
{
    const struct seccomp_group *g = NULL;
    *count = 0;
    for (size_t i = 0; i < runtime_seccomp_ngroups; i++)
        for (const char *const *n = runtime_seccomp_groups[i].names; *n; n++)
            if (strcmp(*n, name) == 0) {
                g = &runtime_seccomp_groups[i];
                (*count)++;
            }
    return g;
}

static int answer(const char *name)
{
    int count;
    const struct seccomp_group *g = find(name, &count);
    return count == 1 ? g->errnum : -1;
}

/* What issue 13 asks the profile to refuse, and what must stay allowed. */
static const char *const refused[] = {
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
    "bpf",
    "perf_event_open",
    "add_key",
    "request_key",
    "keyctl",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "fsopen",
    "fsmount",
    "move_mount",
    "open_tree",
    "fsconfig",
    "fspick",
    "mount_setattr",
    "pivot_root",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "open_by_handle_at",
};
static const char *const allowed[] = {
    "read",      "write",       "openat",      "execve",         "fork",      "vfork",
    "wait4",     "epoll_pwait", "signalfd4",   "timerfd_create", "setsid",    "setgroups",
    "setresuid", "prctl",       "close_range", "statx",          "getrandom", "accept4",
    "pipe2",     "renameat2",   "ioctl",       "chroot",         "rseq",      "openat2",
};

int main(void)
{
    for (size_t i = 0; i < sizeof(refused) / sizeof(*refused); i++)
        ok(answer(refused[i]) == EPERM, "%s is refused with EPERM, in one group", refused[i]);
    for (size_t i = 0; i < sizeof(allowed) / sizeof(*allowed); i++)
        ok(answer(allowed[i]) == 0, "%s is allowed, in one group", allowed[i]);
    ok(answer("clone3") == ENOSYS, "clone3 answers ENOSYS so that libc falls back to clone");

    int dup = 0, count;
    for (size_t i = 0; i < runtime_seccomp_ngroups; i++)
        for (const char *const *n = runtime_seccomp_groups[i].names; *n; n++)
            if (find(*n, &count) && count != 1 && ++dup)
                printf("# %s is in %d groups\n", *n, count);
    ok(dup == 0, "no syscall is in two groups");
    for (const char *c = "clone\0socket\0personality\0"; *c; c += strlen(c) + 1)
        ok(!find(c, &count), "%s has conditional rules only", c);

    json_t *p = runtime_seccomp_profile();
    is_str(json_string_value(json_object_get(p, "defaultAction")), "SCMP_ACT_ERRNO",
           "unlisted syscalls get an errno");
    ok(json_integer_value(json_object_get(p, "defaultErrnoRet")) == ENOSYS, "... ENOSYS");
    size_t clone_allow = 0, clone_eperm = 0;
    json_t *rule;
    size_t i;
    json_array_foreach(json_object_get(p, "syscalls"), i, rule)
    {
        if (!tap_streq(json_string_value(json_array_get(json_object_get(rule, "names"), 0)),
                       "clone"))
            continue;
        json_t *arg = json_array_get(json_object_get(rule, "args"), 0);
        bool allow =
            tap_streq(json_string_value(json_object_get(rule, "action")), "SCMP_ACT_ALLOW");
        clone_allow += allow && json_integer_value(json_object_get(arg, "value")) == 0x7e020000 &&
                       json_integer_value(json_object_get(arg, "valueTwo")) == 0;
        clone_eperm += !allow && json_integer_value(json_object_get(rule, "errnoRet")) == EPERM;
    }
    ok(clone_allow == 1, "clone is allowed when (flags & every namespace flag) == 0");
    ok(clone_eperm == 7, "clone with any one namespace flag is EPERM");
    json_decref(p);
    return tap_done();
}
