/*
 * The console of an interactive main process: the real sandboxer-agent (from
 * $SANDBOXER_AGENT) run with --tty as a plain child process, outside any container, in a temp
 * dir; clients attach to its console.sock through agentc, as the daemon does. Every wait is
 * bounded, and every process started here is killed and reaped, the temp dir removed, also
 * when a check fails.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentc/agent_client.h"
#include "common/buf.h"
#include "common/cleanup.h"
#include "common/util.h"
#include "tap.h"

#define SOCK_NAME    "agent.sock"
#define CONSOLE_NAME AGENT_CONSOLE_SOCKET
#define WAIT_MS      5000
#define MAX_AGENTS   16

static const char *agent_bin;
static char tmpdir[64];
static int dirfd_ = -1;
static pid_t agents[MAX_AGENTS]; /* started and not yet reaped; 0: free */

/* ---------------------------------------------------------------- processes */

/* Start the agent with --socket DIR/agent.sock, extra args, its stdout on stdout_fd. */
static pid_t spawn_agent(char *const extra[], int stdout_fd, bool no_term)
{
    char sock[128];
    snprintf(sock, sizeof(sock), "%s/%s", tmpdir, SOCK_NAME);
    char *argv[24] = {(char *)agent_bin, "--socket", sock};
    int n = 3;
    for (int i = 0; extra[i] && n < 23; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        dup2(devnull, 0);
        dup2(stdout_fd, 1);
        if (no_term)
            unsetenv("TERM");
        execv(agent_bin, argv);
        _exit(99);
    }
    for (int i = 0; pid > 0 && i < MAX_AGENTS; i++) {
        if (agents[i] == 0) {
            agents[i] = pid;
            break;
        }
    }
    return pid;
}

static void forget_agent(pid_t pid)
{
    for (int i = 0; i < MAX_AGENTS; i++)
        if (agents[i] == pid)
            agents[i] = 0;
}

/* The agent's exit code, waiting at most ms; -1 (and SIGKILLed) if it did not exit. */
static int wait_exit(pid_t pid, int ms)
{
    double end = now_mono_ms() + ms;
    int st;
    pid_t r;
    while ((r = waitpid(pid, &st, WNOHANG)) == 0 && now_mono_ms() < end)
        usleep(2000);
    if (r != pid) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        forget_agent(pid);
        return -1;
    }
    forget_agent(pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* True while pid runs (a zombie counts as gone). */
static bool alive(pid_t pid)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    _cleanup_fclose_ FILE *f = fopen(path, "re");
    char *rp = f && fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
    return rp && rp[1] == ' ' && rp[2] != 'Z';
}

/* SIGKILL and reap every child of ours (we are a subreaper: the agents' orphans too). */
static void kill_children(void)
{
    for (int round = 0; round < 50; round++) {
        _cleanup_closedir_ DIR *d = opendir("/proc");
        struct dirent *de;
        int found = 0;
        while (d && (de = readdir(d))) {
            char path[300], line[512];
            snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
            _cleanup_fclose_ FILE *f =
                isdigit((unsigned char)de->d_name[0]) ? fopen(path, "re") : NULL;
            char *rp;
            int ppid;
            char state;
            if (!f || !fgets(line, sizeof(line), f) || !(rp = strrchr(line, ')')))
                continue;
            if (sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && ppid == getpid()) {
                kill(atoi(de->d_name), SIGKILL);
                waitpid(atoi(de->d_name), NULL, 0);
                found++;
            }
        }
        if (!found)
            return;
    }
}

/* A file in the temp dir for an agent's stdout. */
static int out_file(const char *name)
{
    return openat(dirfd_, name, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
}

/* Read what a pipe holds until its EOF (at most ms). */
static void read_pipe(int fd, buf_t *into, int ms)
{
    double end = now_mono_ms() + ms;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        double left = end - now_mono_ms();
        char tmp[4096];
        if (left <= 0 || poll(&p, 1, (int)left + 1) <= 0)
            return;
        ssize_t n = read(fd, tmp, sizeof(tmp));
        if (n <= 0)
            return;
        buf_append(into, tmp, (size_t)n);
    }
}

/* ---------------------------------------------------------------- console clients */

/* One attached client and what it received. */
struct con {
    int fd;
    agentc_reader_t r;
    buf_t out; /* STDOUT bytes, in order */
    buf_t pong;
    const char *scan_needle; /* has_text: the last text looked for, and up to where */
    size_t scan_from;
    bool got_pong, exited, closed;
    struct agentc_exit exit;
    char error[32]; /* the code of an ERROR frame */
};

static bool con_open_at(struct con *c, const char *name, pid_t agent)
{
    err_t err = {0};
    *c = (struct con){.fd = -1};
    agentc_reader_init(&c->r);
    c->fd = agentc_connect(dirfd_, name, &(struct agentc_peer){agent, NULL}, 2000, &err);
    if (c->fd < 0)
        printf("# connect %s: %s\n", name, err.msg);
    return c->fd >= 0;
}

static bool con_open(struct con *c, pid_t agent)
{
    return con_open_at(c, CONSOLE_NAME, agent);
}

static void con_close(struct con *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    agentc_reader_free(&c->r);
    buf_free(&c->out);
    buf_free(&c->pong);
}

static bool con_send(struct con *c, uint8_t type, const void *p, size_t n)
{
    err_t err = {0};
    return c->fd >= 0 && agentc_send(c->fd, type, p, n, &err) == 0;
}

static bool con_type(struct con *c, const char *text)
{
    return con_send(c, AGENT_STDIN, text, strlen(text));
}

/* Read one frame and record it; false at the deadline or once the connection ended. */
static bool con_read(struct con *c, double deadline)
{
    err_t err = {0};
    struct agent_frame f;
    if (c->closed || c->fd < 0)
        return false;
    if (agentc_read_frame(c->fd, &c->r, &f, deadline, &err) < 0) {
        c->closed = strcmp(err.code, "agent_timeout") != 0;
        return false;
    }
    char msg[128];
    if (f.type == AGENT_STDOUT)
        buf_append(&c->out, f.payload, f.len);
    else if (f.type == AGENT_PONG) {
        buf_append(&c->pong, f.payload, f.len);
        c->got_pong = true;
    } else if (f.type == AGENT_EXIT)
        c->exited = agentc_decode_exit(&f, &c->exit, &err) == 0;
    else if (f.type == AGENT_ERROR)
        agentc_decode_error(&f, c->error, sizeof(c->error), msg, sizeof(msg), &err);
    return true;
}

/* What a wait looks for in a client's state. */
typedef bool (*con_pred)(struct con *c, const void *arg);

static bool con_wait(struct con *c, con_pred pred, const void *arg, int ms)
{
    double end = now_mono_ms() + ms;
    while (!pred(c, arg))
        if (!con_read(c, end))
            return pred(c, arg);
    return true;
}

/* The output holds arg; a repeated look only searches what came since (output can be big). */
static bool has_text(struct con *c, const void *arg)
{
    const char *needle = arg;
    size_t n = strlen(needle);
    size_t from = c->scan_needle == needle && c->scan_from <= c->out.len ? c->scan_from : 0;
    from = from > n ? from - n : 0;
    c->scan_needle = needle;
    c->scan_from = c->out.len;
    return c->out.data && memmem(c->out.data + from, c->out.len - from, needle, n);
}

/* "hello-" followed by a digit: the output of `echo hello-$$`, not its echo. */
static bool has_hello_pid(const char *p, size_t n)
{
    const char *m;
    while (p && (m = memmem(p, n, "hello-", 6)) && (size_t)(m - p) + 6 < n) {
        if (isdigit((unsigned char)m[6]))
            return true;
        n -= (size_t)(m - p) + 6;
        p = m + 6;
    }
    return false;
}

static bool has_hello(struct con *c, const void *arg)
{
    return has_hello_pid(c->out.data, c->out.len);
}

static bool got_exit(struct con *c, const void *arg)
{
    return c->exited;
}

static bool got_pong(struct con *c, const void *arg)
{
    return c->got_pong;
}

/*
 * A PING round trip: the agent has then also handled whatever happened before it was sent
 * (clients that closed have freed their slots: one poll saw both).
 */
static bool con_sync(struct con *c)
{
    c->got_pong = false;
    buf_reset(&c->pong);
    return con_send(c, AGENT_PING, "sync", 4) && con_wait(c, got_pong, NULL, WAIT_MS);
}

/* Read until the connection ends (true) or ms pass (false). */
static bool con_wait_closed(struct con *c, int ms)
{
    double end = now_mono_ms() + ms;
    while (con_read(c, end))
        ;
    return c->closed;
}

/* Start an agent with --tty ARGV and wait until it answers on its socket. */
static pid_t start_tty_agent(char *const extra[], int stdout_fd, bool no_term)
{
    err_t err = {0};
    pid_t pid = spawn_agent(extra, stdout_fd, no_term);
    if (pid > 0 &&
        agentc_wait_ready(dirfd_, SOCK_NAME, &(struct agentc_peer){pid, NULL}, WAIT_MS, &err) < 0)
        printf("# the agent is not ready: %s\n", err.msg);
    return pid;
}

/* ---------------------------------------------------------------- tests */

static void test_no_console_without_tty(void)
{
    err_t err = {0};
    _cleanup_close_ int out = out_file("no-tty.out");
    char *extra[] = {"--", "sleep", "100", NULL};
    pid_t pid = spawn_agent(extra, out, false);
    bool ready =
        agentc_wait_ready(dirfd_, SOCK_NAME, &(struct agentc_peer){pid, NULL}, WAIT_MS, &err) == 0;
    ok(ready && faccessat(dirfd_, CONSOLE_NAME, F_OK, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT,
       "without --tty there is no console.sock");
    kill(pid, SIGTERM);
    ok(wait_exit(pid, WAIT_MS) == 143, "... and the main process is as before (SIGTERM: 143)");
    char *idle[] = {"--tty", NULL};
    pid = spawn_agent(idle, out, false);
    ready =
        agentc_wait_ready(dirfd_, SOCK_NAME, &(struct agentc_peer){pid, NULL}, WAIT_MS, &err) == 0;
    ok(ready && faccessat(dirfd_, CONSOLE_NAME, F_OK, AT_SYMLINK_NOFOLLOW) < 0,
       "--tty without a main process: no console.sock either");
    kill(pid, SIGTERM);
    ok(wait_exit(pid, WAIT_MS) == 0, "... and the idle agent exits 0 on SIGTERM");
}

static void check_socket_mode(void)
{
    struct stat st;
    ok(fstatat(dirfd_, CONSOLE_NAME, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode) &&
           (st.st_mode & 0777) == 0600,
       "console.sock is a socket of mode 0600 beside agent.sock");
}

/* Echo, resize, ping: one client on a live shell. */
static void check_one_client(struct con *c)
{
    ok(con_type(c, "echo hello-$$\n") && con_wait(c, has_hello, NULL, WAIT_MS),
       "STDIN reaches the shell and its output comes back as STDOUT");
    uint8_t size[4];
    agent_resize_encode(size, 100, 40);
    ok(con_send(c, AGENT_RESIZE, size, 4) && con_type(c, "stty size\n") &&
           con_wait(c, has_text, "40 100", WAIT_MS),
       "RESIZE 100x40: stty size says 40 100");
    ok(con_send(c, AGENT_PING, "p1ng", 4) && con_wait(c, got_pong, NULL, WAIT_MS) &&
           c->pong.len == 4 && memcmp(c->pong.data, "p1ng", 4) == 0,
       "PING is answered with PONG and the same payload");
}

static void check_two_clients(struct con *c1, pid_t pid)
{
    struct con c2;
    ok(con_open(&c2, pid) && con_wait(&c2, has_hello, NULL, WAIT_MS),
       "a second client gets the replay of earlier output");
    ok(con_type(c1, "echo both-$((6*7))\n") && con_wait(c1, has_text, "both-42", WAIT_MS) &&
           con_wait(&c2, has_text, "both-42", WAIT_MS),
       "two clients attached at once both see new output");
    con_close(&c2);
}

static void check_reattach(struct con *c1, pid_t pid)
{
    con_close(c1);
    usleep(100000);
    ok(alive(pid), "the agent (and its shell) live on when every client has left");
    ok(con_open(c1, pid) && con_wait(c1, has_hello, NULL, WAIT_MS) &&
           con_wait(c1, has_text, "both-42", WAIT_MS),
       "a new client attaches and sees the replay of earlier output");
    ok(con_type(c1, "echo again-$((5*5))\n") && con_wait(c1, has_text, "again-25", WAIT_MS),
       "... and the shell still answers it");
}

/* c1 is attached: 7 more fill the 8 slots, a 9th is turned away. */
static void check_busy(struct con *c1, pid_t pid)
{
    struct con more[8];
    bool all = true;
    for (int i = 0; i < 7; i++)
        all &= con_open(&more[i], pid);
    ok(all, "8 clients attach at once");
    ok(con_open(&more[7], pid) && con_wait_closed(&more[7], WAIT_MS) &&
           strcmp(more[7].error, "busy") == 0 && more[7].out.len == 0,
       "a 9th gets ERROR busy and is closed (%s)", more[7].error);
    for (int i = 0; i < 8; i++)
        con_close(&more[i]);
    ok(con_sync(c1), "PING round trip after the 8 left");
    struct con bad;
    ok(con_open(&bad, pid) && con_send(&bad, AGENT_EXEC, "{}", 2) &&
           con_wait_closed(&bad, WAIT_MS) && strcmp(bad.error, "protocol") == 0,
       "a frame the console does not take closes that client (ERROR protocol)");
    con_close(&bad);
    ok(con_type(c1, "echo still-$((3*3))\n") && con_wait(c1, has_text, "still-9", WAIT_MS),
       "the other clients and the shell are unaffected");
}

static void check_exit(struct con *c1, pid_t pid)
{
    struct con c2;
    bool open2 = con_open(&c2, pid) && con_wait(&c2, has_hello, NULL, WAIT_MS);
    ok(con_type(c1, "exit 3\n") && con_wait(c1, got_exit, NULL, WAIT_MS) &&
           c1->exit.exit_code == 3 && c1->exit.signal == 0 && !c1->exit.timed_out,
       "exit 3: the client gets EXIT with exit_code 3, signal null");
    ok(open2 && con_wait(&c2, got_exit, NULL, WAIT_MS) && c2.exit.exit_code == 3,
       "... and so does every other attached client");
    ok(con_wait_closed(c1, WAIT_MS), "... then the connection closes");
    ok(wait_exit(pid, WAIT_MS) == 3, "the agent exits with the shell's code 3");
    ok(faccessat(dirfd_, CONSOLE_NAME, F_OK, AT_SYMLINK_NOFOLLOW) < 0,
       "console.sock is removed when the agent exits");
    con_close(&c2);
}

static void test_interactive_shell(void)
{
    int p[2];
    struct con c1;
    buf_t log = {0};
    if (pipe2(p, O_CLOEXEC) < 0)
        return;
    char *extra[] = {"--tty", "--", "/bin/sh", NULL};
    pid_t pid = start_tty_agent(extra, p[1], false);
    close(p[1]);
    check_socket_mode();
    ok(con_open(&c1, pid), "a client attaches to console.sock (peer checked by pid)");
    check_one_client(&c1);
    check_two_clients(&c1, pid);
    check_reattach(&c1, pid);
    check_busy(&c1, pid);
    check_exit(&c1, pid);
    read_pipe(p[0], &log, WAIT_MS);
    ok(has_hello_pid(log.data, log.len) && log.data && strstr(log.data, "both-42") &&
           strstr(log.data, "again-25"),
       "the agent's stdout (the log) holds the shell's output (%zu bytes)", log.len);
    con_close(&c1);
    close(p[0]);
    buf_free(&log);
}

static void test_signal_frame(void)
{
    _cleanup_close_ int out = out_file("signal.out");
    char *extra[] = {"--tty", "--", "sleep", "100", NULL};
    pid_t pid = start_tty_agent(extra, out, false);
    struct con c;
    uint8_t sig = SIGTERM;
    ok(con_open(&c, pid) && con_send(&c, AGENT_SIGNAL, &sig, 1) &&
           con_wait(&c, got_exit, NULL, WAIT_MS) && c.exit.exit_code == 143 &&
           c.exit.signal == SIGTERM,
       "SIGNAL 15 kills the main process group: EXIT 143, signal 15");
    ok(wait_exit(pid, WAIT_MS) == 143, "... and the agent exits 143");
    con_close(&c);
}

static void test_last_output_and_term(void)
{
    int p[2];
    buf_t log = {0};
    struct con c;
    if (pipe2(p, O_CLOEXEC) < 0)
        return;
    char *extra[] = {"--tty", "--", "sh", "-c", "sleep 0.5; echo term=$TERM bye-$((6*7)); exit 4",
                     NULL};
    pid_t pid = start_tty_agent(extra, p[1], true);
    close(p[1]);
    ok(con_open(&c, pid) && con_wait(&c, got_exit, NULL, WAIT_MS) && c.exit.exit_code == 4 &&
           has_text(&c, "term=xterm bye-42\r\n"),
       "output written right before the exit comes before EXIT 4; TERM defaults to xterm");
    read_pipe(p[0], &log, WAIT_MS);
    ok(wait_exit(pid, WAIT_MS) == 4 && log.data && strstr(log.data, "bye-42"),
       "... and is in the agent's stdout");
    con_close(&c);
    close(p[0]);
    buf_free(&log);
}

static void test_missing_program(void)
{
    int p[2];
    buf_t log = {0};
    if (pipe2(p, O_CLOEXEC) < 0)
        return;
    char *extra[] = {"--tty", "--", "no-such-program-sbx", NULL};
    pid_t pid = spawn_agent(extra, p[1], false);
    close(p[1]);
    read_pipe(p[0], &log, WAIT_MS);
    ok(wait_exit(pid, WAIT_MS) == 127 && log.data && strstr(log.data, "no-such-program-sbx"),
       "--tty with a missing program: exit 127, the reason on the console (in the log)");
    close(p[0]);
    buf_free(&log);
}

static void test_slow_client_dropped(void)
{
    _cleanup_close_ int out = out_file("slow.out");
    char sock[128];
    snprintf(sock, sizeof(sock), "%s/other.sock", tmpdir);
    char *extra[] = {"--tty", "--console-socket", sock, "--", "/bin/sh", NULL};
    pid_t pid = start_tty_agent(extra, out, false);
    struct con slow, fast;
    ok(con_open_at(&slow, "other.sock", pid) && con_open_at(&fast, "other.sock", pid),
       "--console-socket PATH puts the console socket there");
    double t0 = now_mono_ms();
    /* 2.5 MB in 250 writes: a steady stream the reading client keeps up with even when
     * this process is slow (under ASan, on a loaded machine). */
    ok(con_type(&fast, "i=0; while [ $i -lt 250 ]; do head -c 10000 /dev/zero | tr '\\0' x; "
                       "i=$((i+1)); done; echo; echo done-$((2+3))\n") &&
           con_wait(&fast, has_text, "done-5", 60000),
       "a reading client gets 2.5 MB of output (%.0f ms)", now_mono_ms() - t0);
    ok(con_wait_closed(&slow, WAIT_MS) && !slow.exited && slow.out.len < 2500000,
       "a client that does not read is dropped after ~1 MiB (it got %zu bytes)", slow.out.len);
    ok(alive(pid) && con_type(&fast, "exit 0\n") && con_wait(&fast, got_exit, NULL, WAIT_MS) &&
           fast.exit.exit_code == 0,
       "the shell was unaffected and exits 0");
    ok(wait_exit(pid, WAIT_MS) == 0, "... and the agent with it");
    con_close(&slow);
    con_close(&fast);
}

static void run_agent_tests(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/sbx-console-test-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        ok(0, "mkdtemp");
        return;
    }
    dirfd_ = open(tmpdir, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* processes the agent leaves behind come to us */
    test_no_console_without_tty();
    test_interactive_shell();
    test_signal_frame();
    test_last_output_and_term();
    test_missing_program();
    test_slow_client_dropped();
    for (int i = 0; i < MAX_AGENTS; i++)
        if (agents[i] > 0)
            wait_exit(agents[i], 0);
    kill_children();
    close(dirfd_);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    (void)!system(cmd);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    agent_bin = getenv("SANDBOXER_AGENT");
    if (agent_bin && access(agent_bin, X_OK) == 0)
        run_agent_tests();
    else
        printf("# SANDBOXER_AGENT not set: skipping the tests of the real agent\n");
    return tap_done();
}
