/*
 * A test workload: one epoll set over a timerfd (every 20 ms), an eventfd (written at each
 * tick, read back through epoll), an inotify watch on /tmp/wl/watch and a signalfd for
 * SIGUSR1. It writes what it saw to /tmp/fdprobe.state as JSON with a random boot id, so a
 * test can tell that the same process, with the same kernel objects, goes on after a fork or
 * a wake. Built static by the tests (gcc -static), copied in through the files API.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>

static void publish(unsigned long long boot, long ticks, long events, long notes, long sigs)
{
    FILE *f = fopen("/tmp/fdprobe.state.tmp", "w");
    if (!f)
        return;
    fprintf(f,
            "{\"boot\": \"%016llx\", \"count\": %ld, \"eventfd\": %ld, \"inotify\": %ld, "
            "\"signals\": %ld, \"pid\": %d}\n",
            boot, ticks, events, notes, sigs, (int)getpid());
    fclose(f);
    rename("/tmp/fdprobe.state.tmp", "/tmp/fdprobe.state");
}

int main(void)
{
    unsigned long long boot = 0;
    if (getrandom(&boot, sizeof(boot), 0) != sizeof(boot))
        return 1;
    mkdir("/tmp/wl/watch", 0755);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGUSR1);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
    int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (ep < 0 || tfd < 0 || efd < 0 || ifd < 0 || sfd < 0 ||
        inotify_add_watch(ifd, "/tmp/wl/watch", IN_CREATE | IN_MODIFY) < 0)
        return 1;
    struct itimerspec its = {{0, 20000000}, {0, 20000000}};
    timerfd_settime(tfd, 0, &its, NULL);
    int fds[] = {tfd, efd, ifd, sfd};
    for (int i = 0; i < 4; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) < 0)
            return 1;
    }
    long ticks = 0, events = 0, notes = 0, sigs = 0;
    for (;;) {
        struct epoll_event ev[4];
        int n = epoll_wait(ep, ev, 4, -1);
        for (int i = 0; i < n; i++) {
            char buf[4096];
            uint64_t v;
            if (ev[i].data.fd == tfd && read(tfd, &v, sizeof(v)) == sizeof(v)) {
                ticks += (long)v;
                v = 1;
                (void)!write(efd, &v, sizeof(v));
            } else if (ev[i].data.fd == efd && read(efd, &v, sizeof(v)) == sizeof(v)) {
                events += (long)v;
            } else if (ev[i].data.fd == ifd) {
                ssize_t r = read(ifd, buf, sizeof(buf));
                for (ssize_t off = 0; r > 0 && off < r;) {
                    struct inotify_event *e = (struct inotify_event *)(buf + off);
                    notes++;
                    off += (ssize_t)sizeof(*e) + e->len;
                }
            } else if (ev[i].data.fd == sfd) {
                struct signalfd_siginfo si;
                while (read(sfd, &si, sizeof(si)) == sizeof(si))
                    sigs++;
            }
        }
        publish(boot, ticks, events, notes, sigs);
    }
}
