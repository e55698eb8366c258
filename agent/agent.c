/*
 * sandboxer-agent: PID 1 of every sandbox.
 *
 *   sandboxer-agent --socket PATH [--user USER[:GROUP]] [--workdir DIR]
 *                   [--tty [--console-socket PATH]] [--] [ARGV...]
 *
 * Init duties (reap every orphan, forward termination signals to the main process group),
 * the main process (ARGV; the agent exits with its status), and the daemon's unix socket:
 * each connection is served by a forked session process (session.c) while PID 1 only
 * accepts, reaps and forwards. With --tty the main process runs on a PTY that PID 1 serves
 * itself: output to its stdout (the log) and to the clients of the console socket
 * (console.sock beside --socket), their input to the PTY (pty.c). Background processes
 * (procs.c) are served on procs.sock, beside --socket too, by PID 1 itself. Everything is
 * driven by one poll over a signalfd, the listening sockets, the PTY, the console's
 * clients and the background processes' pipes and connections; no thread, no timer.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
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
    struct agent_console *console; /* --tty with a main process */
    int keeper_note;               /* tells the console's keeper how the main process ended */
    int keeper_read;               /* the keeper's end of that pipe (until the spawn) */
    struct agent_procs *procs;     /* background processes (NULL if procs.sock failed) */
    int console_hold; /* PID 1's copy of the console's listening socket (the keeper serves it) */
    pid_t *sessions;
    size_t nsessions;
};

static void usage(void)
{
    fprintf(stderr,
            "usage: sandboxer-agent --socket PATH [--user USER[:GROUP]] [--workdir DIR]\n"
            "                       [--tty [--console-socket PATH]] [--] [ARGV...]\n"
            "\n"
            "  --socket PATH          the daemon's socket (default " AGENT_SOCKET_DEFAULT ")\n"
            "  --user USER[:GROUP]    the user of the main process and default of execs\n"
            "  --workdir DIR          the cwd of the main process and default of execs\n"
            "  --tty                  run ARGV on a PTY of the agent's: its output goes to the\n"
            "                         agent's stdout and to the clients of the console socket\n"
            "  --console-socket PATH  the console socket (default console.sock beside --socket)\n"
            "\n"
            "Without ARGV the agent idles and serves execs until SIGTERM.\n");
    exit(2);
}

/* name (console.sock, procs.sock) in the directory of the agent's socket. */
static char *beside_socket(const char *socket_path, const char *name)
{
    const char *slash = strrchr(socket_path, '/');
    if (!slash)
        return xstrdup(name);
    return xasprintf("%.*s/%s", (int)(slash - socket_path), socket_path, name);
}

/* `--set-hostname NAME`: run by the daemon (runsc exec, with CAP_SYS_ADMIN for this call
 * alone) in a restored gVisor sandbox, whose hostname lives in gVisor's own kernel. */
static int set_hostname(const char *name)
{
    if (sethostname(name, strlen(name)) < 0) {
        agent_warn("sethostname: %s", strerror(errno));
        return 1;
    }
    return 0;
}

static void parse_args(int argc, char **argv, struct agent_config *cfg)
{
    static const struct option opts[] = {{"socket", required_argument, NULL, 's'},
                                         {"user", required_argument, NULL, 'u'},
                                         {"workdir", required_argument, NULL, 'w'},
                                         {"tty", no_argument, NULL, 't'},
                                         {"console-socket", required_argument, NULL, 'c'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"auth-stdin", no_argument, NULL, 'a'},
                                         {"set-hostname", required_argument, NULL, 'H'},
                                         {NULL, 0, NULL, 0}};
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
        case 'c':
            cfg->console_path = optarg;
            break;
        case 'a':
            cfg->auth_stdin = true;
            break;
        case 'H':
            exit(set_hostname(optarg));
        default:
            usage();
        }
    }
    if (!cfg->socket_path)
        cfg->socket_path = AGENT_SOCKET_DEFAULT;
    cfg->main_argv = optind < argc ? argv + optind : NULL;
    if (cfg->tty && cfg->main_argv && !cfg->console_path)
        cfg->console_path = beside_socket(cfg->socket_path, AGENT_CONSOLE_SOCKET);
}

/* Block the signals we handle and read them from a signalfd instead. */
static int setup_signals(void)
{
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, AGENT_RESUME_SIGNAL);
    for (size_t i = 0; i < ARRAY_SIZE(forwarded); i++)
        sigaddset(&mask, forwarded[i]);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    return signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
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
    agent_procs_unlink(a->procs);
    if (a->console)
        unlink(a->cfg.console_path);
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

/* Pass the main process's end to the keeper and give it time to send EXIT (bounded): it
 * is done when it closes its end of the pipe. */
static void finish_console(struct agent *a, int st)
{
    if (a->keeper_note < 0) {
        agent_console_finish(a->console, st); /* no keeper: the console is PID 1's */
        return;
    }
    if (write(a->keeper_note, &st, sizeof(st)) != sizeof(st))
        return;
    struct pollfd p = {a->keeper_note, 0, 0}; /* POLLERR comes once the reader is gone */
    (void)poll(&p, 1, AGENT_CONSOLE_FINISH_MS + 1000);
}

/* Reap every child that ended: sessions, orphans (the keeper too) and the main process. */
static void reap(struct agent *a)
{
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        if (pid == a->main_pid && a->console)
            finish_console(a, st); /* its last output and EXIT, bounded */
        if (pid == a->main_pid)
            shutdown_agent(a, WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st));
        if (!agent_procs_reaped(a->procs, pid, st))
            forget_session(a, pid);
    }
}

static struct agent *the_agent; /* for agent_quiesce, called from procs.sock's handler */

int agent_quiesce(char *reason, size_t size)
{
    struct agent *a = the_agent;
    if (a->console) {
        snprintf(reason, size,
                 "an interactive sandbox's console socket cannot be let go of, and "
                 "gVisor refuses to checkpoint a sandbox holding a host socket");
        return -1;
    }
    if (a->listen_fd >= 0) {
        close(a->listen_fd);
        a->listen_fd = -1;
        unlink(a->cfg.socket_path);
    }
    return 0;
}

/* Count the lines of a /proc/net/tcp file whose state (the 4th field) is not LISTEN (0A). */
static int tcp_busy_in(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    char line[512], st[8];
    int n = 0;
    if (fgets(line, sizeof(line), f)) /* the header */
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "%*s %*s %*s %7s", st) == 1 && strcmp(st, "0A") != 0)
                n++;
    fclose(f);
    return n;
}

int agent_tcp_busy(void)
{
    return tcp_busy_in("/proc/net/tcp") + tcp_busy_in("/proc/net/tcp6");
}

/* After a restore: listen again where QUIESCE let go (nothing to do otherwise). */
static void resume(struct agent *a)
{
    if (a->listen_fd < 0) {
        a->listen_fd = agent_listen(a->cfg.socket_path);
        if (a->listen_fd < 0)
            agent_warn("cannot listen on %s again: %s", a->cfg.socket_path, strerror(errno));
    }
    agent_procs_resume(a->procs);
}

static void on_signals(struct agent *a)
{
    struct signalfd_siginfo si;
    while (read(a->sigfd, &si, sizeof(si)) == sizeof(si)) {
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD)
            reap(a);
        else if (sig == AGENT_RESUME_SIGNAL)
            resume(a);
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
        if (a->console_hold >= 0)
            close(a->console_hold);
        /* A client dropped by PID 1 must see its connection close: no copy stays here. */
        if (a->console)
            agent_console_close_fds(a->console);
        /* A copy of a background process's stdin pipe here would keep it from its EOF. */
        agent_procs_close_fds(a->procs);
        if (getppid() != agent_pid || agent_auth_gate(conn, 2000) < 0)
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

/* The main process's environment: the container's, with HOME for --user and a PATH. */
static char **main_env(struct agent *a, const struct agent_user *user)
{
    extern char **environ;
    char **env = agent_env_copy(environ);
    if (a->cfg.user)
        agent_env_home(&env, user);
    agent_env_default_path(&env);
    if (a->cfg.tty && !agent_env_get(env, "TERM"))
        agent_env_put(&env, "TERM=xterm");
    return env;
}

/* The keeper's loop: the console alone, until the agent says how the main process ended. */
static _Noreturn void keeper_run(struct agent_console *c, int note)
{
    struct pollfd p[AGENT_CONSOLE_SLOTS + 1];
    for (;;) {
        agent_console_poll_fill(c, p);
        p[AGENT_CONSOLE_SLOTS] = (struct pollfd){note, POLLIN, 0};
        if (poll(p, AGENT_CONSOLE_SLOTS + 1, -1) < 0)
            continue;
        if (p[AGENT_CONSOLE_SLOTS].revents) {
            int st;
            if (read(note, &st, sizeof(st)) == sizeof(st))
                agent_console_finish(c, st);
            _exit(0); /* or the agent is gone: so is the sandbox */
        }
        agent_console_dispatch(c, p);
    }
}

/*
 * The console runs in a process of its own, forked by the main process's child before it
 * starts its session: a child of the main process. CRIU refuses a checkpoint unless, in its
 * walk of the process tree (a parent before its children), the first process holding a PTY
 * of a session is the one that opened that session's /dev/tty, which interactive shells
 * do. PID 1 comes first in that walk, so it holds no end of the PTY; siblings would come in
 * an order that each restore reverses; a child always comes after its parent. The keeper
 * stays in PID 1's session and process group, with every signal blocked, so the terminal's
 * ^C or hangup never reach it; it ends when the agent says the main process ended or goes.
 */
static void fork_keeper(const struct agent_spawn *sp, void *arg)
{
    struct agent *a = arg;
    pid_t pid = fork();
    if (pid < 0)
        agent_warn("console: fork: %s", strerror(errno));
    if (pid != 0)
        return;
    close(sp->stdin_fd); /* the PTY's slave: the master sees EIO once the main process ends */
    close(a->listen_fd);
    close(a->sigfd);
    close(a->keeper_note);
    agent_procs_close_fds(a->procs);
    agent_console_set_pid(a->console, getppid()); /* the main process, about to exec */
    keeper_run(a->console, a->keeper_read);
}

/*
 * The main process's stdin (and with --tty its stdout and stderr): the console's PTY, which
 * it makes its controlling terminal. Without a terminal it reads a pipe the agent holds open
 * and never writes, as `docker run -i` does: an image whose command is a shell or a REPL
 * idles, ready for exec, instead of exiting at once on end-of-file.
 */
static int main_stdio(struct agent *a, int fds[3])
{
    err_t err = {0};
    if (a->cfg.tty) {
        a->console = agent_console_open(a->cfg.console_path, &fds[0], &err);
        if (!a->console) {
            agent_warn("console: %s", err.msg);
            return -1;
        }
        int note[2];
        if (pipe2(note, O_CLOEXEC) == 0) {
            a->keeper_read = note[0];
            a->keeper_note = note[1];
        } /* else the console stays in PID 1: it works, checkpoints may not */
        fds[1] = fds[2] = fds[0];
        return 0;
    }
    int in[2] = {-1, -1};
    if (pipe2(in, O_CLOEXEC) < 0)
        in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    fds[0] = in[0];
    a->main_stdin = in[1];
    return 0;
}

/* Start ARGV as the main process; failures print and exit like a shell would. */
static void start_main(struct agent *a)
{
    static struct agent_user user;
    err_t err = {0};
    int fds[3] = {-1, -1, -1};
    if (a->cfg.user && agent_user_resolve(a->cfg.user, &user, &err) < 0) {
        agent_warn("%s", err.msg);
        exit(126);
    }
    if (main_stdio(a, fds) < 0)
        exit(125);
    char **env = main_env(a, &user);
    struct agent_spawn sp = {.argv = a->cfg.main_argv,
                             .envp = env,
                             .cwd = a->cfg.workdir,
                             .user = a->cfg.user ? &user : NULL,
                             .stdin_fd = fds[0],
                             .stdout_fd = fds[1],
                             .stderr_fd = fds[2],
                             .ctty = a->cfg.tty,
                             .report_fd = -1,
                             .before_session = a->keeper_note >= 0 ? fork_keeper : NULL,
                             .hook_arg = a};
    a->main_pid = agent_spawn(&sp, &err);
    if (a->main_pid < 0) {
        agent_warn("%s", err.msg);
        exit(126);
    }
    /* The PTY's other side stays only with the main process: its end is the master's EIO. */
    if (fds[0] >= 0)
        close(fds[0]);
    if (a->console)
        agent_console_set_pid(a->console, a->main_pid);
    if (a->keeper_note >= 0) { /* the keeper serves the console from here on */
        close(steal_fd(&a->keeper_read));
        /*
         * PID 1 keeps (and never polls) a copy of the console's listening socket: CRIU
         * recreates a socket several processes share in the one with the lowest pid, so
         * after a fork or wake the socket's peer credentials still name the init, the only
         * peer the daemon accepts (a keeper alone would be indistinguishable from any other
         * process of the sandbox listening at that path).
         */
        a->console_hold = agent_console_dup_listener(a->console);
        agent_console_close_fds(a->console);
    }
    agent_env_free(env);
}

/* Listen on procs.sock beside the agent's socket; without it, execs still work. */
static void open_procs(struct agent *a)
{
    err_t err = {0};
    _cleanup_free_ char *path = beside_socket(a->cfg.socket_path, AGENT_PROCS_SOCKET);
    a->procs = agent_procs_open(path, &a->cfg, &err);
    if (!a->procs)
        agent_warn("background processes: %s", err.msg);
}

int main(int argc, char **argv)
{
    struct agent a = {
        .main_pid = 0, .main_stdin = -1, .keeper_note = -1, .keeper_read = -1, .console_hold = -1};
    parse_args(argc, argv, &a.cfg);
    the_agent = &a;
    if (a.cfg.auth_stdin && agent_auth_load() < 0) {
        agent_warn("--auth-stdin: no token on stdin");
        return 125;
    }
    a.sessions = xcalloc(MAX_SESSIONS, sizeof(pid_t));
    a.sigfd = setup_signals();
    /* Outside a PID namespace (tests, debugging) orphans should still come to us. */
    if (getpid() != 1)
        prctl(PR_SET_CHILD_SUBREAPER, 1);
    a.listen_fd = agent_listen(a.cfg.socket_path);
    if (a.sigfd < 0 || a.listen_fd < 0) {
        agent_warn("cannot listen on %s: %s", a.cfg.socket_path, strerror(errno));
        return 125;
    }
    open_procs(&a);
    if (a.cfg.main_argv)
        start_main(&a);
    static struct pollfd p[2 + AGENT_CONSOLE_SLOTS + AGENT_PROCS_SLOTS];
    for (;;) {
        nfds_t n = 2, console = 0, procs = 0;
        int timeout = a.procs ? agent_procs_timeout(a.procs) : -1;
        p[0] = (struct pollfd){a.sigfd, POLLIN, 0};
        p[1] = (struct pollfd){a.listen_fd, POLLIN, 0};
        if (a.console && a.keeper_note < 0) {
            console = n;
            agent_console_poll_fill(a.console, p + n);
            n += AGENT_CONSOLE_SLOTS;
        }
        if (a.procs) {
            procs = n;
            n += agent_procs_poll_fill(a.procs, p + n);
        }
        if (poll(p, n, timeout) < 0)
            continue;
        if (p[0].revents)
            on_signals(&a);
        if (p[1].revents)
            on_accept(&a);
        if (console)
            agent_console_dispatch(a.console, p + console);
        if (a.procs)
            agent_procs_dispatch(a.procs, p + procs, n - procs);
    }
}
