/*
 * What a seccomp filter costs a process: nanoseconds per call of a few syscalls, run inside
 * a sandbox by bench/bench_seccomp.py. getppid is what the kernel's seccomp action cache
 * answers without running the filter (an unconditional allow); socket and clone have
 * argument rules, so the filter runs for them; fork+wait is a program's process start.
 * Prints "name ns_per_call" lines, the best of 20 batches: the cost of the call itself, as
 * free as it gets of what else the machine runs. Build: gcc -static -O2.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void getppid_loop(long n)
{
    for (long i = 0; i < n; i++)
        syscall(SYS_getppid);
}

static void socket_loop(long n)
{
    for (long i = 0; i < n; i++)
        close(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
}

static void fork_loop(long n)
{
    for (long i = 0; i < n; i++) {
        long pid = syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, NULL);
        if (pid == 0)
            _exit(0);
        waitpid((pid_t)pid, NULL, 0);
    }
}

static void measure(const char *name, void (*fn)(long), long n)
{
    double best = 0;
    fn(n / 10); /* warm up */
    for (int batch = 0; batch < 20; batch++) {
        double t0 = now_ns();
        fn(n / 20);
        double per = (now_ns() - t0) / (double)(n / 20);
        if (batch == 0 || per < best)
            best = per;
    }
    printf("%s %.1f\n", name, best);
}

int main(void)
{
    measure("getppid", getppid_loop, 2000000);
    measure("socket+close", socket_loop, 200000);
    measure("fork+wait", fork_loop, 3000);
    return 0;
}
