/*
 * sandboxer-agent: PID 1 of every sandbox.
 *
 *   sandboxer-agent --socket PATH [--user USER[:GROUP]] [--workdir DIR] [--tty] [--] [ARGV...]
 *
 * Init duties (reap every orphan, forward termination signals to the main process group),
 * the main process (ARGV; the agent exits with its status), and the daemon's unix socket:
 * each connection is served by a forked session process (session.c) while PID 1 only
 * accepts, reaps and forwards. Everything is driven by one poll over a signalfd and the
 * listening socket; no thread, no timer.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"
#include "agent/protocol.h"
#include "common/cleanup.h"
#include "common/util.h"

#define MAX_SESSIONS 4096

static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

/* PID 1's state. */
struct agent {
    struct agent_config cfg;
    int sigfd, listen_fd;
    pid_t main_pid; /* 0: idle mode */
    int main_stdin; /* the write end of the main process's stdin: held open, never written */
    pid_t *sessions;
    size_t nsessions;
};

static void usage(void)
{
    fprintf(stderr, "usage: sandboxer-agent --socket PATH [--user USER[:GROUP]] [--workdir DIR] "
                    "[--tty] [--] [ARGV...]\n");
    exit(2);
}

static void parse_args(int argc, char **argv, struct agent_config *cfg)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},  {"user", required_argument, NULL, 'u'},
        {"workdir", required_argument, NULL, 'w'}, {"tty", no_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0}};
    int c;
    /* "+": stop at the first non-option, so the main argv keeps its own flags. */
    while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            cfg->socket_path = optarg;
            break;
        case 'u':
            cfg->user = optarg;
            break;
        case 'w':
            cfg->workdir = optarg;
            break;
        case 't':
            cfg->tty = true;
            break;
        default:
            usage();
        }
    }
    if (!cfg->socket_path)
        cfg->socket_path = AGENT_SOCKET_DEFAULT;
    cfg->main_argv = optind < argc ? argv + optind : NULL;
}

/* Block the signals we handle and read them from a signalfd instead. */
static int setup_signals(void)
{
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    for (size_t i = 0; i < ARRAY_SIZE(forwarded); i++)
        sigaddset(&mask, forwarded[i]);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    return signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
}

/* Bind the socket with mode 0600 (umask during bind, no window with wider bits). */
static int listen_socket(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    (void)unlink(path);
    mode_t old = umask(0177);
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old);
    if (rc < 0 || chmod(path, 0600) < 0 || listen(fd, SOMAXCONN) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/* Kill what is left and leave with the main process's code (or 0 in idle mode). */
__attribute__((noreturn)) static void shutdown_agent(struct agent *a, int code)
{
    if (getpid() == 1) {
        /* In a PID namespace this reaches every other process of the sandbox. */
        kill(-1, SIGKILL);
    } else {
        for (size_t i = 0; i < a->nsessions; i++)
            kill(a->sessions[i], SIGTERM); /* each kills its own process group */
        if (a->main_pid > 0)
            kill(-a->main_pid, SIGKILL);
    }
    unlink(a->cfg.socket_path);
    exit(code);
}

static void forget_session(struct agent *a, pid_t pid)
{
    for (size_t i = 0; i < a->nsessions; i++) {
        if (a->sessions[i] == pid) {
            a->sessions[i] = a->sessions[--a->nsessions];
            return;
        }
    }
}

/* Reap every child that ended: sessions, orphans, and the main process. */
static void reap(struct agent *a)
{
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        if (pid == a->main_pid)
            shutdown_agent(a, WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st));
        forget_session(a, pid);
    }
}

static void on_signals(struct agent *a)
{
    struct signalfd_siginfo si;
    while (read(a->sigfd, &si, sizeof(si)) == sizeof(si)) {
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD)
            reap(a);
        else if (a->main_pid > 0 && kill(-a->main_pid, sig) < 0)
            kill(a->main_pid, sig);
        else if (a->main_pid <= 0 && sig == SIGTERM)
            shutdown_agent(a, 0);
    }
}

/* Fork a session for one connection; PID 1 keeps only the pid. */
static void start_session(struct agent *a, int conn)
{
    static const char busy[] = "too many concurrent sessions";
    if (a->nsessions >= MAX_SESSIONS) {
        agent_send_error(conn, "busy", busy);
        return;
    }
    pid_t agent_pid = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        close(a->listen_fd);
        close(a->sigfd);
        if (getppid() != agent_pid)
            _exit(0);
        agent_session_run(conn, &a->cfg);
    }
    if (pid < 0) {
        agent_send_error(conn, "spawn_failed", "fork failed");
        return;
    }
    a->sessions[a->nsessions++] = pid;
}

static void on_accept(struct agent *a)
{
    for (;;) {
        int conn = accept4(a->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (conn < 0)
            return; /* EAGAIN, or a transient error: poll tells us again */
        start_session(a, conn);
        close(conn);
    }
}

/*
 * runc made the console our controlling terminal; give it up so the main process (in a
 * session of its own) can take it. As session leader we get the SIGHUP this sends to our
 * own group: swallow it rather than forward it to the main process later.
 */
static void release_console(void)
{
    sigset_t hup;
    struct timespec zero = {0, 0};
    if (ioctl(0, TIOCNOTTY) < 0)
        return;
    sigemptyset(&hup);
    sigaddset(&hup, SIGHUP);
    (void)sigtimedwait(&hup, NULL, &zero);
}

/* Start ARGV as the main process; failures print and exit like a shell would. */
static void start_main(struct agent *a)
{
    extern char **environ;
    static struct agent_user user;
    err_t err = {0};
    if (a->cfg.user && agent_user_resolve(a->cfg.user, &user, &err) < 0) {
        agent_warn("%s", err.msg);
        exit(126);
    }
    char **env = agent_env_copy(environ);
    if (a->cfg.user)
        agent_env_home(&env, &user);
    agent_env_default_path(&env);
    if (a->cfg.tty)
        release_console();
    /*
     * Without a terminal the main process reads a pipe the agent holds open and never
     * writes, as `docker run -i` does: an image whose command is a shell or a REPL idles,
     * ready for exec, instead of exiting at once on end-of-file.
     */
    int in[2] = {-1, -1};
    if (!a->cfg.tty && pipe2(in, O_CLOEXEC) < 0)
        in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int devnull = in[0];
    a->main_stdin = in[1];
    struct agent_spawn sp = {.argv = a->cfg.main_argv,
                             .envp = env,
                             .cwd = a->cfg.workdir,
                             .user = a->cfg.user ? &user : NULL,
                             .stdin_fd = devnull,
                             .stdout_fd = -1,
                             .stderr_fd = -1,
                             .ctty = a->cfg.tty,
                             .report_fd = -1};
    a->main_pid = agent_spawn(&sp, &err);
    if (a->main_pid < 0) {
        agent_warn("%s", err.msg);
        exit(126);
    }
    if (devnull >= 0)
        close(devnull);
    agent_env_free(env);
}

int main(int argc, char **argv)
{
    struct agent a = {.main_pid = 0, .main_stdin = -1};
    parse_args(argc, argv, &a.cfg);
    a.sessions = xcalloc(MAX_SESSIONS, sizeof(pid_t));
    a.sigfd = setup_signals();
    /* Outside a PID namespace (tests, debugging) orphans should still come to us. */
    if (getpid() != 1)
        prctl(PR_SET_CHILD_SUBREAPER, 1);
    a.listen_fd = listen_socket(a.cfg.socket_path);
    if (a.sigfd < 0 || a.listen_fd < 0) {
        agent_warn("cannot listen on %s: %s", a.cfg.socket_path, strerror(errno));
        return 125;
    }
    if (a.cfg.main_argv)
        start_main(&a);
    struct pollfd p[2] = {{a.sigfd, POLLIN, 0}, {a.listen_fd, POLLIN, 0}};
    for (;;) {
        if (poll(p, 2, -1) < 0)
            continue;
        if (p[0].revents)
            on_signals(&a);
        if (p[1].revents)
            on_accept(&a);
    }
}
