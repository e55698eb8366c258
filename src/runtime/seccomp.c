/*
 * The default seccomp profile of a sandbox: an allow list.
 *
 * Docker's default profile (moby's profiles/seccomp) is the reference for what ordinary
 * programs need; the groups below are ours, each with why it is allowed or refused. Three
 * answers:
 *
 *   - allowed: the groups of syscalls that programs use every day. What they can do is still
 *     bounded by the capabilities (spec.c keeps no CAP_SYS_ADMIN, CAP_SYS_PTRACE, ...),
 *     the namespaces and the cgroup limits.
 *   - EPERM ("Operation not permitted"): the kernel interfaces we refuse on purpose: io_uring,
 *     bpf, perf, userfaultfd, keyrings, namespaces, mounts, modules, kexec, tracing other
 *     processes, ... A program sees a plain refusal, as under Docker.
 *   - ENOSYS ("Function not implemented") for everything else, which is how a kernel without
 *     the syscall answers: libc and runtimes fall back (clone3 -> clone, fchmodat2 ->
 *     fchmodat, statx -> fstatat), and a syscall newer than this list is refused until
 *     someone looks at it, instead of being allowed by default.
 *
 * Names that the host's libseccomp does not know yet (a syscall newer than it, e.g.
 * fchmodat2 with libseccomp 2.5.4) are skipped by runc, so they too answer ENOSYS. See
 * docs/security.md for the threat model.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "runtime.h"

#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})

const struct seccomp_group runtime_seccomp_groups[] = {
    /* --- allowed ------------------------------------------------------------------------ */

    /* Processes: start, run and end programs, and wait for them. `clone` is below, with a
     * condition on its flags. */
    {"process", 0,
     NAMES("fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid",
           "waitpid", "restart_syscall", "set_tid_address", "set_robust_list", "get_robust_list",
           "rseq", "getpid", "getppid", "gettid", "getpgid", "getpgrp", "setpgid", "getsid",
           "setsid", "pidfd_open", "pidfd_send_signal", "process_mrelease", "kill", "tkill",
           "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")},

    /* Identity and privileges: su, sudo, package managers' unprivileged helpers (apt's _apt)
     * and the agent's --user change users; what they may change is bounded by the
     * capabilities kept (SETUID, SETGID, SETPCAP), and no_new_privs holds. prctl and seccomp
     * let a program restrict itself further (landlock too). */
    {"identity", 0,
     NAMES("getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups",
           "getuid32", "geteuid32", "getgid32", "getegid32", "getresuid32", "getresgid32",
           "getgroups32", "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid",
           "setgroups", "setfsuid", "setfsgid", "setuid32", "setgid32", "setreuid32", "setregid32",
           "setresuid32", "setresgid32", "setgroups32", "setfsuid32", "setfsgid32", "capget",
           "capset", "prctl", "arch_prctl", "seccomp", "landlock_create_ruleset",
           "landlock_add_rule", "landlock_restrict_self")},

    /* Signals and timers: the agent's signalfd, shells' traps, every runtime's timers. */
    {"signals", 0,
     NAMES("rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigsuspend",
           "rt_sigtimedwait", "rt_sigtimedwait_time64", "sigaltstack", "sigreturn", "sigprocmask",
           "signalfd", "signalfd4", "pause", "alarm", "getitimer", "setitimer", "timer_create",
           "timer_settime", "timer_settime64", "timer_gettime", "timer_gettime64",
           "timer_getoverrun", "timer_delete")},

    /* Clocks: reading them and sleeping. adjtimex and clock_adjtime only read without
     * CAP_SYS_TIME (which no sandbox has); setting the clock is refused below. */
    {"time", 0,
     NAMES("clock_gettime", "clock_gettime64", "clock_getres", "clock_getres_time64",
           "clock_nanosleep", "clock_nanosleep_time64", "nanosleep", "gettimeofday", "time",
           "times", "adjtimex", "clock_adjtime", "clock_adjtime64")},

    /* Memory: allocators, loaders, JITs (V8's pkeys and memfds), shared memory. */
    {"memory", 0,
     NAMES("brk", "mmap", "mmap2", "munmap", "mremap", "mprotect", "pkey_mprotect", "pkey_alloc",
           "pkey_free", "madvise", "mincore", "mlock", "mlock2", "mlockall", "munlock",
           "munlockall", "msync", "membarrier", "memfd_create", "memfd_secret", "remap_file_pages",
           "mseal", "map_shadow_stack", "cachestat")},

    /* File descriptors: reading, writing, copying and syncing what is open. */
    {"fds", 0,
     NAMES("read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "preadv2",
           "pwritev", "pwritev2", "lseek", "_llseek", "close", "close_range", "dup", "dup2", "dup3",
           "fcntl", "fcntl64", "flock", "ioctl", "pipe", "pipe2", "sendfile", "sendfile64",
           "splice", "tee", "vmsplice", "copy_file_range", "fsync", "fdatasync", "sync", "syncfs",
           "sync_file_range", "fallocate", "fadvise64", "fadvise64_64", "readahead", "ftruncate",
           "ftruncate64", "truncate", "truncate64")},

    /* Paths: the sandbox's own files (its mount namespace). chroot needs CAP_SYS_CHROOT,
     * which sandboxes keep (build tools use it); mknod makes fifos and sockets only, as no
     * sandbox has CAP_MKNOD. listmount/statmount describe its own mounts. */
    {"paths", 0,
     NAMES("open", "openat", "openat2", "creat", "access", "faccessat", "faccessat2", "stat",
           "lstat", "fstat", "newfstatat", "stat64", "lstat64", "fstat64", "fstatat64", "statx",
           "statfs", "fstatfs", "statfs64", "fstatfs64", "getdents", "getdents64", "getcwd",
           "chdir", "fchdir", "chroot", "mkdir", "mkdirat", "rmdir", "rename", "renameat",
           "renameat2", "link", "linkat", "unlink", "unlinkat", "symlink", "symlinkat", "readlink",
           "readlinkat", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown",
           "fchownat", "chown32", "fchown32", "lchown32", "umask", "utime", "utimes", "utimensat",
           "utimensat_time64", "futimesat", "mknod", "mknodat", "name_to_handle_at", "listmount",
           "statmount")},

    /* Extended attributes: dpkg, tar and cp -a keep capabilities and ACLs with them. */
    {"xattrs", 0,
     NAMES("getxattr", "lgetxattr", "fgetxattr", "setxattr", "lsetxattr", "fsetxattr", "listxattr",
           "llistxattr", "flistxattr", "removexattr", "lremovexattr", "fremovexattr", "getxattrat",
           "setxattrat", "listxattrat", "removexattrat")},

    /* Waiting for events: event loops (the agent's, libuv's, Python's asyncio), file
     * watchers, futexes under every lock. */
    {"events", 0,
     NAMES("poll", "ppoll", "ppoll_time64", "select", "_newselect", "pselect6", "pselect6_time64",
           "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait",
           "epoll_pwait2", "epoll_ctl_old", "epoll_wait_old", "eventfd", "eventfd2",
           "timerfd_create", "timerfd_settime", "timerfd_settime64", "timerfd_gettime",
           "timerfd_gettime64", "inotify_init", "inotify_init1", "inotify_add_watch",
           "inotify_rm_watch", "fanotify_mark", "futex", "futex_time64", "futex_waitv",
           "futex_wait", "futex_wake", "futex_requeue")},

    /* Linux AIO (not io_uring): databases and libaio users. */
    {"aio", 0,
     NAMES("io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
           "io_pgetevents_time64")},

    /* Sockets, in the sandbox's own network namespace. `socket` itself is below, with a
     * condition on the address family. socketcall is 32-bit x86's single entry for all of
     * them (its arguments are in memory, where seccomp cannot look). */
    {"sockets", 0,
     NAMES("socketpair", "bind", "connect", "listen", "accept", "accept4", "getsockname",
           "getpeername", "getsockopt", "setsockopt", "sendto", "send", "sendmsg", "sendmmsg",
           "recvfrom", "recv", "recvmsg", "recvmmsg", "recvmmsg_time64", "shutdown", "socketcall")},

    /* System V and POSIX IPC, in the sandbox's own IPC namespace (PostgreSQL, shells' job
     * control helpers, Python's multiprocessing). */
    {"ipc", 0,
     NAMES("ipc", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop",
           "semtimedop_time64", "semctl", "shmget", "shmat", "shmdt", "shmctl", "mq_open",
           "mq_unlink", "mq_timedsend", "mq_timedsend_time64", "mq_timedreceive",
           "mq_timedreceive_time64", "mq_notify", "mq_getsetattr")},

    /* Scheduling, limits and what a program asks about the system it runs on. Raising a
     * priority or a hard limit needs capabilities no sandbox has; modify_ldt and the TLS
     * calls are what 32-bit and Wine-like programs set their segments with. */
    {"system", 0,
     NAMES("sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam",
           "sched_setparam", "sched_getscheduler", "sched_setscheduler", "sched_getattr",
           "sched_setattr", "sched_get_priority_max", "sched_get_priority_min",
           "sched_rr_get_interval", "sched_rr_get_interval_time64", "getpriority", "setpriority",
           "ioprio_get", "ioprio_set", "getrlimit", "ugetrlimit", "setrlimit", "prlimit64",
           "getrusage", "uname", "sysinfo", "getcpu", "getrandom", "modify_ldt", "get_thread_area",
           "set_thread_area", "uretprobe")},

    /* --- refused with EPERM ------------------------------------------------------------- */

    /* io_uring: a second system-call interface that seccomp cannot see into, behind many of
     * the kernel exploits of recent years; Docker refuses it, Google turned it off. */
    {"io_uring", EPERM, NAMES("io_uring_setup", "io_uring_enter", "io_uring_register")},

    /* eBPF and perf events: a verifier and a profiler inside the kernel, frequent sources of
     * privilege escalations and of kernel address leaks. */
    {"bpf_perf", EPERM, NAMES("bpf", "perf_event_open")},

    /* userfaultfd lets a process stall the kernel mid-copy: the classic way to win a race in
     * an exploit. */
    {"userfaultfd", EPERM, NAMES("userfaultfd")},

    /* Kernel keyrings are not namespaced: keys are shared with the host's uid 0. */
    {"keys", EPERM, NAMES("add_key", "request_key", "keyctl")},

    /* New namespaces (a user namespace would give its creator every capability inside it,
     * and with them the mount and netfilter code); clone with a namespace flag is refused
     * below as well. */
    {"namespaces", EPERM, NAMES("unshare", "setns")},

    /* Mounting, old and new API, and changing the root: the sandbox's mounts are made for it
     * by runc and stay as they are. */
    {"mounts", EPERM,
     NAMES("mount", "umount", "umount2", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount",
           "open_tree", "open_tree_attr", "mount_setattr", "pivot_root")},

    /* Kernel modules. */
    {"modules", EPERM,
     NAMES("init_module", "finit_module", "delete_module", "create_module", "query_module",
           "get_kernel_syms")},

    /* Replacing or stopping the host's kernel. */
    {"kexec_reboot", EPERM, NAMES("kexec_load", "kexec_file_load", "reboot")},

    /* Reading or changing other processes: ptrace (debuggers, strace), their memory, their
     * file descriptors. Refused although they would only reach the sandbox's own processes:
     * the agent (PID 1) is one of them, and a traced process cannot be checkpointed (fork,
     * hibernate). PTRACE_TRACEME is refused too: alone it lets no debugger work (the
     * debugger's own requests are ptrace calls on another process) and it was the way in
     * of CVE-2019-13272. */
    {"ptrace", EPERM,
     NAMES("ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd",
           "kcmp")},

    /* Opening a file by handle reaches files outside the sandbox's root ("shocker"). */
    {"handles", EPERM, NAMES("open_by_handle_at")},

    /* Setting the host's clock (it is not namespaced). */
    {"clock_set", EPERM, NAMES("settimeofday", "stime", "clock_settime", "clock_settime64")},

    /* The host's administration: its kernel log, accounting, swap, quotas, I/O ports,
     * hostname (runc sets the sandbox's), fanotify on whole filesystems, LSM attributes, and
     * old or 32-bit-only calls nobody needs. */
    {"host_admin", EPERM,
     NAMES("syslog", "acct", "swapon", "swapoff", "quotactl", "quotactl_fd", "sethostname",
           "setdomainname", "vhangup", "iopl", "ioperm", "lookup_dcookie", "nfsservctl",
           "fanotify_init", "lsm_get_self_attr", "lsm_set_self_attr", "lsm_list_modules", "uselib",
           "vm86", "vm86old", "_sysctl")},

    /* NUMA memory policies: they reach other processes' pages (move_pages, migrate_pages);
     * Docker keeps them for CAP_SYS_NICE. libnuma reads "no NUMA" from the refusal. */
    {"numa", EPERM,
     NAMES("get_mempolicy", "set_mempolicy", "set_mempolicy_home_node", "mbind", "move_pages",
           "migrate_pages")},

    /* --- refused with ENOSYS on purpose --------------------------------------------------- */

    /* clone3 passes its flags in memory, where seccomp cannot check them for namespace flags;
     * ENOSYS makes glibc and others fall back to clone, which is checked. (Anything not
     * listed in this file answers ENOSYS too; this one is listed to say why.) */
    {"clone3", ENOSYS, NAMES("clone3")},
};

const size_t runtime_seccomp_ngroups = ARRAY_SIZE(runtime_seccomp_groups);

/* The namespace flags of clone(2): NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET. */
static const json_int_t ns_flags[] = {0x00020000, 0x02000000, 0x04000000, 0x08000000,
                                      0x10000000, 0x20000000, 0x40000000};

/* The address families refused at socket(2): AF_ALG (38, the kernel's crypto API, a
 * recurring source of bugs) and AF_VSOCK (40: sockets to the hypervisor of a VM host). */
#define AF_ALG_   38
#define AF_VSOCK_ 40

/* personality(2) values allowed (as Docker): query (0xffffffff), Linux, PER_LINUX32,
 * UNAME26 and both; others (ADDR_NO_RANDOMIZE...) answer ENOSYS. */
static const json_int_t personalities[] = {0x0, 0x0008, 0x20000, 0x20008, 0xffffffff};

static json_t *action(json_t *rule, int errnum)
{
    json_object_set_new(rule, "action", json_string(errnum ? "SCMP_ACT_ERRNO" : "SCMP_ACT_ALLOW"));
    if (errnum)
        json_object_set_new(rule, "errnoRet", json_integer(errnum));
    return rule;
}

static json_t *names_rule(const char *const *names, int errnum)
{
    json_t *a = json_array();
    for (size_t i = 0; names[i]; i++)
        json_array_append_new(a, json_string(names[i]));
    return action(json_pack("{s:o}", "names", a), errnum);
}

/* A rule for one syscall on its first argument: arg0 <op> value (masked by mask for
 * SCMP_CMP_MASKED_EQ). */
static json_t *arg0_rule(const char *name, const char *op, json_int_t value, json_int_t two,
                         int errnum)
{
    json_t *arg =
        json_pack("{s:i, s:I, s:I, s:s}", "index", 0, "value", value, "valueTwo", two, "op", op);
    return action(json_pack("{s:[s], s:[o]}", "names", name, "args", arg), errnum);
}

/* clone: allowed without a namespace flag, EPERM with any (libseccomp has no "masked not
 * equal", so one rule per flag; the conditions never overlap the allowing one). */
static void clone_rules(json_t *rules)
{
    json_int_t all = 0;
    for (size_t i = 0; i < ARRAY_SIZE(ns_flags); i++)
        all |= ns_flags[i];
    json_array_append_new(rules, arg0_rule("clone", "SCMP_CMP_MASKED_EQ", all, 0, 0));
    for (size_t i = 0; i < ARRAY_SIZE(ns_flags); i++)
        json_array_append_new(
            rules, arg0_rule("clone", "SCMP_CMP_MASKED_EQ", ns_flags[i], ns_flags[i], EPERM));
}

/* socket: every family but AF_ALG and AF_VSOCK, which answer EAFNOSUPPORT, as from a kernel
 * built without them. */
static void socket_rules(json_t *rules)
{
    json_array_append_new(rules, arg0_rule("socket", "SCMP_CMP_LT", AF_ALG_, 0, 0));
    json_array_append_new(rules, arg0_rule("socket", "SCMP_CMP_EQ", AF_ALG_ + 1, 0, 0));
    json_array_append_new(rules, arg0_rule("socket", "SCMP_CMP_GT", AF_VSOCK_, 0, 0));
    json_array_append_new(rules, arg0_rule("socket", "SCMP_CMP_EQ", AF_ALG_, 0, EAFNOSUPPORT));
    json_array_append_new(rules, arg0_rule("socket", "SCMP_CMP_EQ", AF_VSOCK_, 0, EAFNOSUPPORT));
}

static void personality_rules(json_t *rules)
{
    for (size_t i = 0; i < ARRAY_SIZE(personalities); i++)
        json_array_append_new(rules,
                              arg0_rule("personality", "SCMP_CMP_EQ", personalities[i], 0, 0));
}

/*
 * x32 (x86_64's 32-bit-pointer ABI) reaches the kernel only where it is built with
 * CONFIG_X86_X32_ABI and not turned off at boot (Debian and Ubuntu kernels leave it off).
 * runc compiles the filter at every container start, and each architecture in it costs: on
 * our 2-core VM x32 added ~10 ms to every start (docs/security.md). So x32 is filtered only
 * where the kernel runs it. Elsewhere an x32 syscall fails the filter's architecture check
 * and its caller gets SIGSYS (libseccomp's bad-architecture action): only a program that
 * sets the x32 bit on purpose can meet it, as such a kernel does not exec x32 binaries.
 */
static bool x32_runs;
static pthread_once_t x32_once = PTHREAD_ONCE_INIT;

static void probe_x32(void)
{
    /* getpid through the x32 table (__X32_SYSCALL_BIT | __NR_getpid): ENOSYS without x32. */
    x32_runs = syscall(0x40000000L | SYS_getpid) >= 0;
}

bool runtime_seccomp_x32(void)
{
    pthread_once(&x32_once, probe_x32);
    return x32_runs;
}

json_t *runtime_seccomp_profile(void)
{
    json_t *rules = json_array();
    for (size_t i = 0; i < runtime_seccomp_ngroups; i++)
        json_array_append_new(
            rules, names_rule(runtime_seccomp_groups[i].names, runtime_seccomp_groups[i].errnum));
    clone_rules(rules);
    socket_rules(rules);
    personality_rules(rules);
    json_t *arches = json_pack("[s,s]", "SCMP_ARCH_X86_64", "SCMP_ARCH_X86");
    if (runtime_seccomp_x32())
        json_array_append_new(arches, json_string("SCMP_ARCH_X32"));
    return json_pack("{s:s, s:i, s:o, s:o}", "defaultAction", "SCMP_ACT_ERRNO", "defaultErrnoRet",
                     ENOSYS, "architectures", arches, "syscalls", rules);
}
