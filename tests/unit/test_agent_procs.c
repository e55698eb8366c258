/*
 * Background processes in the real sandboxer-agent (from $SANDBOXER_AGENT), run as a plain
 * child process outside any container, in a temp dir, reached on its procs.sock through
 * agentc as the daemon reaches it: the table, output and its long-poll, stdin, signals,
 * PTY processes and their keepers, which fds PID 1's children keep, and the bounds. Every
 * wait is bounded; every process started here is killed and reaped, the temp dir removed.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentc/agent_procs.h"
#include "common/cleanup.h"
#include "common/util.h"
#include "tap.h"

#define WAIT_MS 5000

static const char *agent_bin;
static char tmpdir[64];
static int dirfd_ = -1;
static pid_t agent = -1;

/* ---------------------------------------------------------------- the agent */

static pid_t spawn_agent(void)
{
    char sock[128];
    snprintf(sock, sizeof(sock), "%s/agent.sock", tmpdir);
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
        dup2(devnull, 0);
        dup2(devnull, 1);
        execl(agent_bin, agent_bin, "--socket", sock, (char *)NULL);
        _exit(99);
    }
    return pid;
}

/* A connection to procs.sock, waiting (bounded) for the agent to listen. */
static int procs_fd(void)
{
    err_t err = {0};
    double end = now_mono_ms() + WAIT_MS;
    for (;;) {
        int fd = agentc_connect(dirfd_, AGENT_PROCS_SOCKET, &(struct agentc_peer){agent, NULL},
                                1000, &err);
        if (fd >= 0 || now_mono_ms() > end)
            return fd;
        usleep(5000);
    }
}

/* The field after the command in /proc/pid/stat: state, then ppid; comm into comm. */
static bool proc_stat(pid_t pid, char *state, pid_t *ppid, char *comm, size_t size)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    _cleanup_fclose_ FILE *f = fopen(path, "re");
    char *lp = f && fgets(line, sizeof(line), f) ? strchr(line, '(') : NULL;
    char *rp = lp ? strrchr(line, ')') : NULL;
    int pp;
    if (!rp || sscanf(rp + 1, " %c %d", state, &pp) != 2)
        return false;
    *ppid = pp;
    snprintf(comm, size, "%.*s", (int)(rp - lp - 1), lp + 1);
    return true;
}

/* The live child of parent named comm (0 if none). */
static pid_t child_named(pid_t parent, const char *comm)
{
    _cleanup_closedir_ DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char state, name[64];
        pid_t ppid, pid = atoi(de->d_name);
        if (pid > 0 && proc_stat(pid, &state, &ppid, name, sizeof(name)) && ppid == parent &&
            state != 'Z' && strcmp(name, comm) == 0)
            return pid;
    }
    return 0;
}

/* How many fds of pid link to a target starting with prefix ("pipe:[123]", "/dev/pts/"). */
static int fds_to(pid_t pid, const char *prefix, int *total)
{
    char dir[64];
    snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
    _cleanup_closedir_ DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    if (total)
        *total = 0;
    while (d && (de = readdir(d))) {
        char path[340], target[256];
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        ssize_t len = readlink(path, target, sizeof(target) - 1);
        if (len < 0)
            continue;
        target[len] = '\0';
        n += strncmp(target, prefix, strlen(prefix)) == 0;
        if (total)
            (*total)++;
    }
    return n;
}

/* SIGKILL and reap every child of ours (we are a subreaper: the agent's orphans too). */
static void kill_children(void)
{
    for (int round = 0; round < 50; round++) {
        _cleanup_closedir_ DIR *d = opendir("/proc");
        struct dirent *de;
        int found = 0;
        while (d && (de = readdir(d))) {
            char state, name[64];
            pid_t ppid, pid = atoi(de->d_name);
            if (pid > 0 && proc_stat(pid, &state, &ppid, name, sizeof(name)) && ppid == getpid()) {
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
                found++;
            }
        }
        if (!found)
            return;
    }
}

/* ---------------------------------------------------------------- requests */

/* Start argv (NULL-terminated); *rec gets the record. */
static int start(const char *const *argv, bool tty, bool in, struct agentc_proc *rec, err_t *err)
{
    int fd = procs_fd();
    struct agentc_proc_start req = {.exec = {.argv = argv, .tty = tty, .stdin_pipe = in},
                                    .tag = "unit"};
    int rc = agentc_proc_start(fd, &req, WAIT_MS, rec, err);
    close(fd);
    return rc;
}

static pid_t start_sh(const char *code, bool in)
{
    const char *argv[] = {"sh", "-c", code, NULL};
    struct agentc_proc rec = {0};
    err_t err = {0};
    pid_t pid = start(argv, false, in, &rec, &err) == 0 ? rec.pid : -1;
    if (pid < 0)
        printf("# start %s: %s\n", code, err.msg);
    agentc_proc_free(&rec);
    return pid;
}

static int get(pid_t pid, struct agentc_proc *rec, err_t *err)
{
    int fd = procs_fd();
    int rc = agentc_proc_get(fd, pid, WAIT_MS, rec, err);
    close(fd);
    return rc;
}

/* Wait until pid has exited; its exit code, or -1. */
static int wait_exited(pid_t pid)
{
    double end = now_mono_ms() + WAIT_MS;
    while (now_mono_ms() < end) {
        struct agentc_proc rec = {0};
        err_t err = {0};
        int rc = get(pid, &rec, &err);
        bool ended = rc == 0 && !rec.running;
        int code = rec.exit_code;
        agentc_proc_free(&rec);
        if (ended)
            return code;
        usleep(10000);
    }
    return -1;
}

static int output(pid_t pid, uint64_t cursor, int wait_ms, struct agentc_output *o, err_t *err)
{
    int fd = procs_fd();
    struct agentc_output_req req = {.pid = pid, .cursor = cursor, .wait_ms = wait_ms};
    int rc = agentc_proc_output(fd, &req, o, err);
    close(fd);
    return rc;
}

/* All output of pid so far, as text. */
static char *all_output(pid_t pid)
{
    buf_t b = {0};
    uint64_t cursor = 0;
    for (;;) {
        struct agentc_output o = {0};
        err_t err = {0};
        if (output(pid, cursor, 0, &o, &err) < 0 || o.data.len == 0) {
            agentc_output_free(&o);
            break;
        }
        buf_append(&b, o.data.data, o.data.len);
        cursor = o.cursor + o.data.len;
        agentc_output_free(&o);
    }
    return buf_steal(&b);
}

static int delete (pid_t pid)
{
    err_t err = {0};
    int fd = procs_fd();
    int rc = agentc_proc_delete(fd, pid, WAIT_MS, &err);
    close(fd);
    return rc;
}

static int stdin_to(pid_t pid, const char *text, bool eof, err_t *err)
{
    int fd = procs_fd();
    int rc = agentc_proc_stdin(fd, pid, text, strlen(text), eof, WAIT_MS, NULL, err);
    close(fd);
    return rc;
}

/* ---------------------------------------------------------------- tests */

static void test_start_output_exit(void)
{
    pid_t pid = start_sh("echo out; echo err >&2; exit 3", false);
    ok(pid > 0, "a process starts");
    struct agentc_output o = {0};
    err_t err = {0};
    ok(output(pid, 0, 3000, &o, &err) == 0 && o.data.len > 0, "a waiting read gets its output");
    agentc_output_free(&o);
    ok(wait_exited(pid) == 3, "it exits with its code");
    ok(output(pid, 0, 0, &o, &err) == 0 && o.nchunks == 2 && o.chunks[0].stream == 1 &&
           o.chunks[1].stream == 2 && o.data.len == 8 &&
           memcmp(o.data.data, "out\nerr\n", 8) == 0 && !o.proc.running && o.proc.output_end == 8,
       "its output: both streams, in order, in chunks that say which");
    agentc_output_free(&o);
    ok(output(pid, 4, 0, &o, &err) == 0 && o.cursor == 4 && o.dropped == 0 && o.data.len == 4,
       "from a cursor in the middle");
    agentc_output_free(&o);
    ok(output(pid, 9, 0, &o, &err) < 0 && err.kind == ERR_INVALID &&
           strcmp(err.code, "invalid_cursor") == 0,
       "a cursor past the end is ERR_INVALID invalid_cursor");
    agentc_output_free(&o);
}

static double elapsed_output(pid_t pid, int wait_ms, bool (*cut)(void *), size_t *bytes)
{
    int fd = procs_fd();
    struct agentc_output_req req = {.pid = pid, .wait_ms = wait_ms, .cut = cut};
    struct agentc_output o = {0};
    err_t err = {0};
    double t0 = now_mono_ms();
    int rc = agentc_proc_output(fd, &req, &o, &err);
    double t = now_mono_ms() - t0;
    *bytes = rc == 0 ? o.data.len : (size_t)-1;
    agentc_output_free(&o);
    close(fd);
    return t;
}

static bool cut_now(void *arg)
{
    (void)arg;
    return true;
}

static void test_long_poll(void)
{
    pid_t late = start_sh("sleep 0.5; echo late", false);
    pid_t quiet = start_sh("exec sleep 100", false);
    size_t n;
    double t = elapsed_output(late, 3000, NULL, &n);
    ok(n == 5 && t >= 300 && t < 2500,
       "a read waits for output and answers when it comes "
       "(%.0f ms)",
       t);
    t = elapsed_output(quiet, 500, NULL, &n);
    ok(n == 0 && t >= 450 && t < 2000, "with none, it answers empty when the wait is over");
    t = elapsed_output(quiet, 5000, cut_now, &n);
    ok(n == 0 && t < 500, "a cut (the socket half-closed) answers at once (%.0f ms)", t);
    delete (quiet);
    delete (late);
}

static void test_errors(void)
{
    struct agentc_proc rec = {0};
    err_t err = {0};
    ok(get(999999, &rec, &err) < 0 && err.kind == ERR_NOT_FOUND &&
           strcmp(err.code, "process_not_found") == 0,
       "an unknown pid is ERR_NOT_FOUND");
    const char *missing[] = {"no-such-program-sbx", NULL};
    ok(start(missing, false, false, &rec, &err) == 0 && !rec.running && rec.exit_code == 127,
       "a missing program is a record: exited, 127");
    char *text = all_output(rec.pid);
    ok(strstr(text, "no-such-program-sbx") != NULL, "with the reason on its stderr");
    free(text);
    agentc_proc_free(&rec);
    int fd = procs_fd();
    const char *sh[] = {"sh", NULL};
    struct agentc_proc_start req = {.exec = {.argv = sh, .cwd = "/no/such/dir"}};
    ok(agentc_proc_start(fd, &req, WAIT_MS, &rec, &err) < 0 && strcmp(err.code, "bad_cwd") == 0,
       "a missing cwd is ERR_INVALID bad_cwd, and no record");
    close(fd);
    pid_t pid = start_sh("exec sleep 100", false);
    fd = procs_fd();
    ok(agentc_proc_resize(fd, pid, 80, 24, WAIT_MS, NULL, &err) < 0 &&
           strcmp(err.code, "not_a_tty") == 0,
       "resizing a process without a terminal is ERR_CONFLICT not_a_tty");
    close(fd);
    ok(stdin_to(pid, "x", false, &err) < 0 && strcmp(err.code, "stdin_closed") == 0,
       "stdin to a process started without one is ERR_CONFLICT stdin_closed");
    fd = procs_fd();
    ok(agentc_proc_signal(fd, pid, 9, WAIT_MS, NULL, &err) == 0 && wait_exited(pid) == 137,
       "SIGKILL ends it: 137");
    close(fd);
    fd = procs_fd();
    ok(agentc_proc_signal(fd, pid, 15, WAIT_MS, NULL, &err) < 0 &&
           strcmp(err.code, "process_exited") == 0,
       "a signal to an ended process is ERR_CONFLICT process_exited");
    close(fd);
}

static void test_stdin(void)
{
    const char *cat[] = {"cat", NULL};
    struct agentc_proc rec = {0};
    err_t err = {0};
    ok(start(cat, false, true, &rec, &err) == 0 && rec.stdin_open, "cat with a stdin pipe");
    ok(stdin_to(rec.pid, "hello\n", false, &err) == 0, "stdin is written");
    ok(stdin_to(rec.pid, "bye\n", true, &err) == 0 && wait_exited(rec.pid) == 0,
       "EOF closes the pipe: cat ends");
    char *text = all_output(rec.pid);
    is_str(text, "hello\nbye\n", "and echoed all of it");
    free(text);
    agentc_proc_free(&rec);
}

static void test_pty_keeper_and_fds(void)
{
    const char *cat[] = {"cat", NULL}, *sh[] = {"sh", NULL};
    struct agentc_proc in = {0}, tty = {0};
    err_t err = {0};
    ok(start(cat, false, true, &in, &err) == 0, "cat with a stdin pipe");
    ok(start(sh, true, false, &tty, &err) == 0 && tty.tty && tty.stdin_open, "sh on a PTY");
    pid_t keeper = 0;
    for (double end = now_mono_ms() + WAIT_MS; !keeper && now_mono_ms() < end; usleep(5000))
        keeper = child_named(tty.pid, "pty-keeper");
    ok(keeper > 0, "its keeper is the process's child");
    ok(fds_to(agent, "/dev/pts/", NULL) == 0 && fds_to(agent, "/dev/ptmx", NULL) == 0,
       "PID 1 holds no end of the PTY");
    int total = 0;
    fds_to(keeper, "", &total);
    ok(total == 4, "the keeper keeps 4 fds: stderr, the master and two pipes (%d)", total);
    /* an exec session, forked while the stdin pipe exists */
    int sess_fd =
        agentc_connect(dirfd_, "agent.sock", &(struct agentc_peer){agent, NULL}, 2000, &err);
    const char *argv[] = {"sleep", "3", NULL};
    struct agentc_exec_req ex = {.argv = argv};
    ok(agentc_send_exec(sess_fd, &ex, &err) == 0, "an exec runs meanwhile");
    pid_t session = 0;
    for (double end = now_mono_ms() + WAIT_MS; !session && now_mono_ms() < end; usleep(5000))
        session = child_named(agent, "agent-session");
    char link[64], target[64] = "";
    snprintf(link, sizeof(link), "/proc/%d/fd/0", (int)in.pid);
    ssize_t len = readlink(link, target, sizeof(target) - 1);
    target[len > 0 ? len : 0] = '\0';
    ok(session > 0 && strncmp(target, "pipe:", 5) == 0 && fds_to(agent, target, NULL) == 1 &&
           fds_to(session, target, NULL) == 0 && fds_to(keeper, target, NULL) == 0,
       "only PID 1 holds cat's stdin pipe: not the session, not the keeper");
    ok(stdin_to(in.pid, "x\n", true, &err) == 0 && wait_exited(in.pid) == 0,
       "so EOF reaches cat while both run");
    close(sess_fd);
    ok(stdin_to(tty.pid, "exit 4\r", false, &err) == 0 && wait_exited(tty.pid) == 4,
       "the PTY process takes input and ends");
    bool gone = false;
    for (double end = now_mono_ms() + WAIT_MS; !gone && now_mono_ms() < end; usleep(5000))
        gone = kill(keeper, 0) < 0 || !child_named(agent, "pty-keeper");
    ok(gone, "its keeper is gone with it");
    agentc_proc_free(&in);
    agentc_proc_free(&tty);
}

static void test_bounds(void)
{
    pid_t pids[AGENT_PROCS_RUNNING];
    int started = 0;
    for (int i = 0; i < AGENT_PROCS_RUNNING; i++)
        started += (pids[i] = start_sh("exec sleep 100", false)) > 0;
    ok(started == AGENT_PROCS_RUNNING, "%d processes run", AGENT_PROCS_RUNNING);
    const char *t[] = {"true", NULL};
    struct agentc_proc rec = {0};
    err_t err = {0};
    ok(start(t, false, false, &rec, &err) < 0 && err.kind == ERR_LIMIT &&
           strcmp(err.code, "too_many_processes") == 0,
       "one more is ERR_LIMIT too_many_processes");
    for (int i = 0; i < AGENT_PROCS_RUNNING; i++)
        delete (pids[i]);
    int idle[AGENT_PROCS_CONNS];
    for (int i = 0; i < AGENT_PROCS_CONNS; i++)
        idle[i] = procs_fd();
    /* accepted in order: the next one finds all of them held */
    int fd = procs_fd();
    json_t *list = agentc_proc_list(fd, WAIT_MS, &err);
    ok(!list && err.kind == ERR_LIMIT && strcmp(err.code, "agent_busy") == 0,
       "with %d connections open, one more is turned away (busy) [%d %s %s]", AGENT_PROCS_CONNS,
       err.kind, err.code, err.msg);
    close(fd);
    for (int i = 0; i < AGENT_PROCS_CONNS; i++)
        close(idle[i]);
    list = NULL;
    for (double end = now_mono_ms() + WAIT_MS; !list && now_mono_ms() < end; usleep(5000)) {
        fd = procs_fd();
        list = agentc_proc_list(fd, WAIT_MS, &err);
        close(fd);
    }
    ok(list != NULL, "once they close, requests are served again");
    json_decref(list);
    fd = procs_fd();
    uint8_t hdr[5];
    agent_frame_header(hdr, AGENT_PROC_START, 300 * 1024);
    agentc_reader_t r;
    struct agent_frame f;
    char code[32] = "", msg[128];
    agentc_reader_init(&r);
    ok(write(fd, hdr, sizeof(hdr)) == 5 &&
           agentc_read_frame(fd, &r, &f, now_mono_ms() + WAIT_MS, &err) == 0 &&
           agentc_decode_error(&f, code, sizeof(code), msg, sizeof(msg), &err) == 0 &&
           strcmp(code, "too_large") == 0,
       "a request over 256 KiB is ERROR too_large, told by its header");
    agentc_reader_free(&r);
    close(fd);
}

static void test_list_and_socket(void)
{
    err_t err = {0};
    pid_t a = start_sh("exec sleep 100", false), b = start_sh("exit 0", false);
    wait_exited(b);
    int fd = procs_fd();
    json_t *list = agentc_proc_list(fd, WAIT_MS, &err);
    close(fd);
    size_t n = json_array_size(list);
    ok(n >= 2 && json_integer_value(json_object_get(json_array_get(list, n - 2), "pid")) == a &&
           json_integer_value(json_object_get(json_array_get(list, n - 1), "pid")) == b,
       "the list is in start order");
    json_decref(list);
    ok(delete (a) == 0 && delete (a) < 0, "a deleted process is forgotten");
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, AGENT_PROCS_SOCKET);
    kill(agent, SIGTERM);
    int st = 0;
    waitpid(agent, &st, 0);
    ok(WIFEXITED(st) && access(path, F_OK) < 0, "the agent removes procs.sock when it exits");
}

static void run_agent_tests(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/sbx-procs-test-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        ok(0, "mkdtemp");
        return;
    }
    dirfd_ = open(tmpdir, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* processes the agent leaves behind come to us */
    agent = spawn_agent();
    int fd = procs_fd();
    ok(fd >= 0, "the agent listens on procs.sock, and is its peer");
    close(fd);
    test_start_output_exit();
    test_long_poll();
    test_errors();
    test_stdin();
    test_pty_keeper_and_fds();
    test_bounds();
    test_list_and_socket();
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
