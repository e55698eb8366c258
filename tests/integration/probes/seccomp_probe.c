/*
 * seccomp_probe: tries syscalls and prints one line per try, "NAME RESULT", where RESULT is
 * "ok" or the errno's name (EPERM, ENOSYS, ...). Built static by
 * tests/integration/test_seccomp.py and run inside a sandbox, which holds the expectations.
 *
 * Arguments are chosen so that, without the seccomp filter, the kernel would answer
 * something other than EPERM wherever it can (a bad pointer: EFAULT, a bad fd: EBADF, or
 * success): an EPERM then comes from the profile, not from a missing capability.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/keyctl.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/shm.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *errname(int e)
{
    switch (e) {
    case EPERM:
        return "EPERM";
    case ENOSYS:
        return "ENOSYS";
    case EAFNOSUPPORT:
        return "EAFNOSUPPORT";
    case EFAULT:
        return "EFAULT";
    case EBADF:
        return "EBADF";
    case EINVAL:
        return "EINVAL";
    case ENOENT:
        return "ENOENT";
    case EACCES:
        return "EACCES";
    case ENOKEY:
        return "ENOKEY";
    case ESRCH:
        return "ESRCH";
    default: {
        static char buf[32];
        snprintf(buf, sizeof(buf), "E%d", e);
        return buf;
    }
    }
}

/* Report a raw result: >= 0 is ok, < 0 an error in errno. */
static void report(const char *name, long rc)
{
    printf("%s %s\n", name, rc >= 0 ? "ok" : errname(errno));
    fflush(stdout);
}

/* Run fn in a child (for calls that change the caller, or might stop it) and report what
 * the child reports through its exit status: 0 ok, else the errno. */
static void in_child(const char *name, long (*fn)(void))
{
    pid_t pid = fork();
    if (pid == 0) {
        long rc = fn();
        _exit(rc >= 0 ? 0 : (errno & 0xff));
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0) {
        printf("%s child-failed\n", name);
        return;
    }
    if (WIFSIGNALED(st)) {
        printf("%s killed-by-%d\n", name, WTERMSIG(st));
        return;
    }
    errno = WEXITSTATUS(st);
    report(name, errno ? -1 : 0);
}

/* ---- refused ------------------------------------------------------------------------- */

static long clone_flags(unsigned long flags)
{
    long rc = syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, NULL, NULL);
    if (rc == 0)
        _exit(0);
    if (rc > 0)
        waitpid((pid_t)rc, NULL, 0);
    return rc;
}

static long clone3_plain(void)
{
    struct clone_args ca = {.exit_signal = SIGCHLD};
    long rc = syscall(SYS_clone3, &ca, sizeof(ca));
    if (rc == 0)
        _exit(0);
    if (rc > 0)
        waitpid((pid_t)rc, NULL, 0);
    return rc;
}

static long traceme(void)
{
    return syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0);
}

static long x32_getpid(void)
{
    return syscall(0x40000000L | SYS_getpid); /* __X32_SYSCALL_BIT */
}

static long newuser(void)
{
    return unshare(CLONE_NEWUSER);
}

static void refused(void)
{
    report("io_uring_setup", syscall(SYS_io_uring_setup, 1, NULL));
    report("io_uring_enter", syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0));
    report("io_uring_register", syscall(SYS_io_uring_register, -1, 0, NULL, 0));
    report("userfaultfd", syscall(SYS_userfaultfd, 1 /* UFFD_USER_MODE_ONLY */));
    report("bpf", syscall(SYS_bpf, 1000, NULL, 0));
    report("perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
    report("add_key", syscall(SYS_add_key, "user", "probe", "v", 1, KEY_SPEC_PROCESS_KEYRING));
    report("request_key", syscall(SYS_request_key, "user", "no-such-key", NULL, 0));
    report("keyctl", syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0));
    report("unshare", syscall(SYS_unshare, 0));
    in_child("unshare_newuser", newuser);
    report("setns", syscall(SYS_setns, -1, 0));
    report("clone_newuser", clone_flags(CLONE_NEWUSER));
    report("clone_newns", clone_flags(CLONE_NEWNS));
    report("clone_newnet", clone_flags(CLONE_NEWNET));
    report("clone_newpid", clone_flags(CLONE_NEWPID));
    report("clone_newuts", clone_flags(CLONE_NEWUTS));
    report("clone_newipc", clone_flags(CLONE_NEWIPC));
    report("clone_newcgroup", clone_flags(CLONE_NEWCGROUP));
    report("clone3", clone3_plain());
    report("mount", syscall(SYS_mount, (char *)1, (char *)1, (char *)1, 0, NULL));
    report("umount2", syscall(SYS_umount2, "/", 0xffff));
    report("fsopen", syscall(SYS_fsopen, "tmpfs", 0));
    report("fsconfig", syscall(SYS_fsconfig, -1, 0, NULL, NULL, 0));
    report("fsmount", syscall(SYS_fsmount, -1, 0, 0));
    report("fspick", syscall(SYS_fspick, -1, "", 0));
    report("move_mount", syscall(SYS_move_mount, -1, "", -1, "", 0));
    report("open_tree", syscall(SYS_open_tree, AT_FDCWD, "/", 0));
    report("mount_setattr", syscall(SYS_mount_setattr, -1, "", 0, NULL, 0));
    report("pivot_root", syscall(SYS_pivot_root, (char *)1, (char *)1));
    report("init_module", syscall(SYS_init_module, NULL, 0, ""));
    report("finit_module", syscall(SYS_finit_module, -1, "", 0));
    report("delete_module", syscall(SYS_delete_module, "no_such_module", 0));
    report("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0));
    report("kexec_file_load", syscall(SYS_kexec_file_load, -1, -1, 0, NULL, 0));
    report("reboot", syscall(SYS_reboot, 0, 0, 0, NULL));
    in_child("ptrace_traceme", traceme);
    report("ptrace_peek", syscall(SYS_ptrace, 2 /* PTRACE_PEEKDATA */, 1, NULL, NULL));
    struct iovec iov = {0};
    report("process_vm_readv", syscall(SYS_process_vm_readv, getpid(), &iov, 0, &iov, 0, 0));
    report("process_vm_writev", syscall(SYS_process_vm_writev, getpid(), &iov, 0, &iov, 0, 0));
    report("kcmp", syscall(SYS_kcmp, getpid(), getpid(), 0, 0, 0));
    report("pidfd_getfd", syscall(SYS_pidfd_getfd, -1, 0, 0));
    report("open_by_handle_at", syscall(SYS_open_by_handle_at, -1, NULL, 0));
    report("settimeofday", syscall(SYS_settimeofday, NULL, NULL));
    report("clock_settime", syscall(SYS_clock_settime, CLOCK_REALTIME, NULL));
    report("syslog", syscall(SYS_syslog, 10 /* SIZE_BUFFER */, NULL, 0));
    report("swapon", syscall(SYS_swapon, (char *)1, 0));
    report("acct", syscall(SYS_acct, (char *)1));
    report("iopl", syscall(SYS_iopl, 0));
    report("ioperm", syscall(SYS_ioperm, 0, 0, 0));
    report("sethostname", syscall(SYS_sethostname, (char *)1, 1));
    report("get_mempolicy", syscall(SYS_get_mempolicy, NULL, NULL, 0, NULL, 0));
    report("socket_vsock", socket(40 /* AF_VSOCK */, SOCK_STREAM, 0));
    report("socket_alg", socket(38 /* AF_ALG */, SOCK_SEQPACKET, 0));
    report("personality_no_aslr", personality(ADDR_NO_RANDOMIZE));
    in_child("x32_getpid", x32_getpid);
    /* A syscall the profile does not list: ENOSYS, as from a kernel without it. */
    report("ustat", syscall(SYS_ustat, 0, (void *)1));
}

/* ---- allowed ------------------------------------------------------------------------- */

static void *thread_main(void *arg)
{
    return arg;
}

static long thread(void)
{
    pthread_t t;
    int rc = pthread_create(&t, NULL, thread_main, NULL); /* glibc tries clone3 first */
    if (rc)
        return errno = rc, -1;
    return pthread_join(t, NULL) == 0 ? 0 : -1;
}

static long drop_privileges(void)
{
    gid_t g = 1000;
    if (setsid() < 0 || setgroups(1, &g) < 0 || setresgid(1000, 1000, 1000) < 0)
        return -1;
    return setresuid(1000, 1000, 1000);
}

static long pty(void)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0)
        return -1;
    int s = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
    return s;
}

static long spawn(void)
{
    pid_t pid = vfork();
    if (pid == 0) {
        execl("/bin/true", "true", (char *)NULL);
        _exit(127);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) < 0)
        return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : (errno = ECHILD, -1);
}

static void allowed(void)
{
    report("clone_plain", clone_flags(0));
    in_child("fork_setsid_setuid", drop_privileges);
    report("thread", thread());
    report("vfork_exec", spawn());
    int p[2];
    report("pipe2", pipe2(p, O_CLOEXEC));
    report("eventfd", eventfd(0, EFD_CLOEXEC));
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    report("signalfd", signalfd(-1, &set, SFD_CLOEXEC));
    report("timerfd", timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC));
    report("epoll", epoll_create1(EPOLL_CLOEXEC));
    report("socket_inet", socket(AF_INET, SOCK_STREAM, 0));
    report("socket_unix", socket(AF_UNIX, SOCK_STREAM, 0));
    report("socket_netlink", socket(AF_NETLINK, SOCK_RAW, 0));
    report("socket_inet6_dgram", socket(AF_INET6, SOCK_DGRAM, 0));
    struct open_how how = {.flags = O_RDONLY | O_CLOEXEC};
    report("openat2", syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof(how)));
    struct statx stx;
    report("statx", statx(AT_FDCWD, "/", 0, STATX_BASIC_STATS, &stx));
    char rnd[16];
    report("getrandom", getrandom(rnd, sizeof(rnd), 0));
    report("memfd_create", memfd_create("probe", MFD_CLOEXEC));
    report("prctl", prctl(PR_SET_NAME, "probe"));
    report("pty", pty());
    report("mkfifo", mkfifo("/tmp/seccomp-probe.fifo", 0600));
    unlink("/tmp/seccomp-probe.fifo");
    report("shmget", shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600));
    unsigned long ctx = 0;
    report("io_setup", syscall(SYS_io_setup, 1, &ctx));
    report("personality_query", personality(0xffffffff));
    report("landlock", syscall(SYS_landlock_create_ruleset, NULL, 0, 1 /* VERSION */));
    report("seccomp", syscall(SYS_seccomp, 2 /* GET_ACTION_AVAIL */, 0, &(unsigned){0}));
    report("chroot", chroot("/"));
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    report("sched_getaffinity", sched_getaffinity(0, sizeof(cpus), &cpus));
    report("mprotect", mprotect(rnd - ((unsigned long)rnd % 4096), 4096, PROT_READ | PROT_WRITE));
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    refused();
    allowed();
    printf("done\n");
    return 0;
}
