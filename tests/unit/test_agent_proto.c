/*
 * The agent protocol: the frame parser and payload decoders, then the real sandboxer-agent
 * (from $SANDBOXER_AGENT) run as a plain child process, outside any container, driven
 * through agentc: exec semantics, stdio, signals, timeouts, concurrency, the main process,
 * and the socket's no-follow rule.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agentc/agent_client.h"
#include "common/buf.h"
#include "common/cleanup.h"
#include "common/util.h"
#include "tap.h"

#define SOCK_NAME "agent.sock"

static const char *agent_bin;
static char tmpdir[64];
static int dirfd_ = -1;
static pid_t agent_pid;

/* ---------------------------------------------------------------- parser and payloads */

static size_t make_frame(uint8_t *out, uint8_t type, const char *payload, size_t len)
{
    agent_frame_header(out, type, (uint32_t)len);
    memcpy(out + AGENT_HEADER_LEN, payload, len);
    return AGENT_HEADER_LEN + len;
}

static void test_parser_complete_and_incomplete(void)
{
    uint8_t buf[64];
    struct agent_frame f;
    size_t used = 0, n = make_frame(buf, AGENT_STDOUT, "hello", 5);
    bool all_incomplete = true;
    for (size_t i = 0; i < n; i++)
        all_incomplete &= agent_frame_parse(buf, i, &f, &used) == AGENT_PARSE_INCOMPLETE;
    ok(all_incomplete, "every strict prefix of a frame is incomplete");
    ok(agent_frame_parse(buf, n, &f, &used) == AGENT_PARSE_COMPLETE && used == n &&
           f.type == AGENT_STDOUT && f.len == 5 && memcmp(f.payload, "hello", 5) == 0,
       "a whole frame is complete with its type and payload");
    n += make_frame(buf + n, AGENT_PONG, "", 0);
    ok(agent_frame_parse(buf, n, &f, &used) == AGENT_PARSE_COMPLETE && used == 10,
       "a frame followed by another consumes only its own bytes");
}

static void test_parser_invalid(void)
{
    uint8_t big[4] = {0x00, 0x10, 0x00, 0x01}; /* 1 MiB + 1 */
    uint8_t max[5] = {0x00, 0x10, 0x00, 0x00, AGENT_STDOUT};
    uint8_t zero[5] = {0, 0, 0, 0, 0};
    uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
    struct agent_frame f;
    size_t used;
    ok(agent_frame_parse(big, 4, &f, &used) == AGENT_PARSE_INVALID,
       "an oversize length is invalid as soon as its 4 bytes arrive");
    ok(agent_frame_parse(huge, 4, &f, &used) == AGENT_PARSE_INVALID, "0xffffffff is invalid");
    ok(agent_frame_parse(max, 5, &f, &used) == AGENT_PARSE_INCOMPLETE,
       "exactly AGENT_MAX_FRAME is allowed (incomplete until the payload arrives)");
    ok(agent_frame_parse(zero, 5, &f, &used) == AGENT_PARSE_INVALID, "type 0 is invalid");
}

static void test_reader_byte_by_byte(void)
{
    uint8_t buf[64];
    size_t n = make_frame(buf, AGENT_STDOUT, "ab", 2);
    n += make_frame(buf + n, AGENT_STDERR, "cde", 3);
    agentc_reader_t r;
    struct agent_frame f;
    agentc_reader_init(&r);
    int frames = 0;
    bool right = true;
    for (size_t i = 0; i < n; i++) {
        agentc_reader_feed(&r, buf + i, 1);
        while (agentc_reader_next(&r, &f) == AGENT_PARSE_COMPLETE) {
            right &= frames == 0 ? f.type == AGENT_STDOUT && f.len == 2
                                 : f.type == AGENT_STDERR && memcmp(f.payload, "cde", 3) == 0;
            frames++;
        }
    }
    ok(frames == 2 && right, "the reader yields both frames when fed one byte at a time");
    agentc_reader_free(&r);
}

static struct agent_frame json_frame(uint8_t type, const char *json)
{
    return (struct agent_frame){type, (uint32_t)strlen(json), (const uint8_t *)json};
}

static void test_decode_exit(void)
{
    struct agentc_exit e;
    struct agent_frame f = json_frame(AGENT_EXIT, "{\"exit_code\":137,\"signal\":9,"
                                                  "\"timed_out\":true}");
    ok(agentc_decode_exit(&f, &e, NULL) == 0 && e.exit_code == 137 && e.signal == 9 && e.timed_out,
       "EXIT decodes code, signal and timed_out");
    f = json_frame(AGENT_EXIT, "{\"exit_code\":3,\"signal\":null,\"timed_out\":false,\"x\":1}");
    ok(agentc_decode_exit(&f, &e, NULL) == 0 && e.exit_code == 3 && e.signal == 0,
       "EXIT with a null signal and an unknown field decodes");
    const char *bad[] = {"{\"exit_code\":256,\"timed_out\":false}",
                         "{\"exit_code\":-1,\"timed_out\":false}",
                         "{\"exit_code\":\"0\",\"timed_out\":false}",
                         "{\"exit_code\":0}",
                         "{\"exit_code\":0,\"signal\":65,\"timed_out\":false}",
                         "[0]",
                         "{\"exit_code\":0,\"timed_out\":false",
                         ""};
    bool all = true;
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        err_t err = {0};
        f = json_frame(AGENT_EXIT, bad[i]);
        all &= agentc_decode_exit(&f, &e, &err) < 0 && strcmp(err.code, "agent_protocol") == 0;
    }
    ok(all, "malformed or out-of-range EXIT payloads are protocol errors");
}

static void test_decode_started_and_error(void)
{
    pid_t pid;
    char code[32], msg[64];
    struct agent_frame f = json_frame(AGENT_STARTED, "{\"pid\":42}");
    ok(agentc_decode_started(&f, &pid, NULL) == 0 && pid == 42, "STARTED decodes the pid");
    f = json_frame(AGENT_STARTED, "{\"pid\":0}");
    ok(agentc_decode_started(&f, &pid, NULL) < 0, "pid 0 is refused");
    f = json_frame(AGENT_ERROR, "{\"code\":\"not_found\",\"message\":\"exec: no\\nfile\"}");
    ok(agentc_decode_error(&f, code, sizeof(code), msg, sizeof(msg), NULL) == 0 &&
           strcmp(code, "not_found") == 0 && strcmp(msg, "exec: nofile") == 0,
       "ERROR decodes; control characters leave the message");
    f = json_frame(AGENT_ERROR, "{\"code\":\"<script>\",\"message\":\"m\"}");
    ok(agentc_decode_error(&f, code, sizeof(code), msg, sizeof(msg), NULL) == 0 &&
           strcmp(code, "agent_error") == 0,
       "a code outside [a-z0-9_] becomes agent_error");
}

/* ---------------------------------------------------------------- the real agent */

static pid_t spawn_agent(char *const extra[], int stdout_fd)
{
    char sock[128];
    snprintf(sock, sizeof(sock), "%s/%s", tmpdir, SOCK_NAME);
    char *argv[16] = {(char *)agent_bin, "--socket", sock};
    int n = 3;
    for (int i = 0; extra && extra[i] && n < 15; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        if (stdout_fd >= 0)
            dup2(stdout_fd, 1);
        execv(agent_bin, argv);
        _exit(99);
    }
    return pid;
}

static int wait_exit(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

struct capture {
    buf_t out, err;
};

static int collect(void *data, uint8_t type, const uint8_t *p, size_t n)
{
    struct capture *c = data;
    buf_append(type == AGENT_STDOUT ? &c->out : &c->err, p, n);
    return 0;
}

static void capture_free(struct capture *c)
{
    buf_free(&c->out);
    buf_free(&c->err);
}

/* Run req on a new connection; output in c (may be NULL). */
static int run_req(const struct agentc_exec_req *req, struct capture *c,
                   struct agentc_exec_result *res, err_t *err)
{
    _cleanup_close_ int fd =
        agentc_connect(dirfd_, SOCK_NAME, &(struct agentc_peer){agent_pid, NULL}, 2000, err);
    if (fd < 0)
        return -1;
    return agentc_exec(fd, req, c ? collect : NULL, c, 60000, res, err);
}

static int run_argv(const char *const *argv, struct capture *c, struct agentc_exec_result *res)
{
    struct agentc_exec_req req = {.argv = argv};
    err_t err = {0};
    int rc = run_req(&req, c, res, &err);
    if (rc < 0)
        printf("# exec %s: %s (%s)\n", argv[0], err.msg, err.code);
    return rc;
}

static bool out_is(struct capture *c, const char *s)
{
    return c->out.len == strlen(s) && memcmp(c->out.data, s, c->out.len) == 0;
}

static void test_echo_and_exit_codes(void)
{
    struct capture c = {0};
    struct agentc_exec_result res;
    const char *echo[] = {"echo", "hi", NULL};
    ok(run_argv(echo, &c, &res) == 0 && out_is(&c, "hi\n") && res.exit.exit_code == 0 &&
           res.pid > 0,
       "echo hi: stdout \"hi\\n\", exit 0, a pid");
    const char *three[] = {"sh", "-c", "exit 3", NULL};
    ok(run_argv(three, NULL, &res) == 0 && res.exit.exit_code == 3 && res.exit.signal == 0,
       "exit 3 is exit_code 3");
    const char *killed[] = {"sh", "-c", "kill -9 $$", NULL};
    ok(run_argv(killed, NULL, &res) == 0 && res.exit.exit_code == 137 && res.exit.signal == 9 &&
           !res.exit.timed_out,
       "killed by SIGKILL: exit_code 137, signal 9");
    capture_free(&c);
}

static void test_stdout_stderr_separate(void)
{
    struct capture c = {0};
    struct agentc_exec_result res;
    const char *argv[] = {"sh", "-c", "echo out; echo err >&2; echo out2", NULL};
    ok(run_argv(argv, &c, &res) == 0 && out_is(&c, "out\nout2\n") && c.err.len == 4 &&
           memcmp(c.err.data, "err\n", 4) == 0,
       "stdout and stderr arrive separately, each in order");
    capture_free(&c);
}

static void test_missing_and_unexecutable(void)
{
    struct agentc_exec_result res;
    const char *missing[] = {"no-such-program-sbx", NULL};
    ok(run_argv(missing, NULL, &res) == 0 && res.exit.exit_code == 127 &&
           strcmp(res.error_code, "not_found") == 0,
       "a missing program: exit 127, error_code not_found (%s)", res.error_msg);
    char path[128];
    snprintf(path, sizeof(path), "%s/not-executable", tmpdir);
    int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    (void)!write(fd, "#!/bin/sh\n", 10);
    close(fd);
    const char *noexec[] = {path, NULL};
    ok(run_argv(noexec, NULL, &res) == 0 && res.exit.exit_code == 126 &&
           strcmp(res.error_code, "permission") == 0,
       "a non-executable file: exit 126, error_code permission");
}

static void test_large_output_intact(void)
{
    struct capture c = {0};
    struct agentc_exec_result res;
    const char *argv[] = {"seq", "1", "1400000", NULL};
    buf_t want = {0};
    for (int i = 1; i <= 1400000; i++)
        buf_printf(&want, "%d\n", i);
    double t0 = now_mono_ms();
    int rc = run_argv(argv, &c, &res);
    ok(rc == 0 && res.exit.exit_code == 0 && c.out.len == want.len &&
           memcmp(c.out.data, want.data, want.len) == 0,
       "%zu bytes of output arrive intact and in order (%.0f ms)", want.len, now_mono_ms() - t0);
    buf_free(&want);
    capture_free(&c);
}

static void test_timeout_kills_group(void)
{
    const char *argv[] = {"sh", "-c", "sleep 100 & sleep 100", NULL};
    struct agentc_exec_req req = {.argv = argv, .timeout_ms = 200};
    struct agentc_exec_result res;
    err_t err = {0};
    double t0 = now_mono_ms();
    int rc = run_req(&req, NULL, &res, &err);
    double ms = now_mono_ms() - t0;
    ok(rc == 0 && res.exit.timed_out && res.exit.signal == 9 && res.exit.exit_code == 137 &&
           ms < 1500,
       "timeout_ms 200 kills the whole group of sleep 100s: timed_out, 137 (%.0f ms)", ms);
}

static void test_background_child_does_not_hold_exec(void)
{
    struct capture c = {0};
    struct agentc_exec_result res;
    char script[512];
    char pidfile[300];
    snprintf(pidfile, sizeof(pidfile), "%s/bg.pid", tmpdir);
    snprintf(script, sizeof(script), "sleep 100 & echo $! > %s; echo done", pidfile);
    const char *argv[] = {"sh", "-c", script, NULL};
    double t0 = now_mono_ms();
    int rc = run_argv(argv, &c, &res);
    double ms = now_mono_ms() - t0;
    ok(rc == 0 && out_is(&c, "done\n") && res.exit.exit_code == 0 && ms < 1500,
       "a background child holding stdout delays EXIT only ~100 ms (%.0f ms)", ms);
    /* It goes on running after the exec, as after `docker exec`; the test ends it. */
    FILE *f = fopen(pidfile, "r");
    int pid = 0;
    if (f) {
        if (fscanf(f, "%d", &pid) != 1)
            pid = 0;
        fclose(f);
    }
    ok(pid > 0 && kill(pid, 0) == 0, "the background job outlives its exec");
    if (pid > 0)
        kill(pid, SIGKILL);
    capture_free(&c);
}

static void test_stdin_to_cat(void)
{
    struct capture c = {0};
    struct agentc_exec_result res;
    err_t err = {0};
    const char *argv[] = {"cat", NULL};
    struct agentc_exec_req req = {
        .argv = argv, .stdin_pipe = true, .stdin_data = "hello\n", .stdin_len = 6};
    ok(run_req(&req, &c, &res, &err) == 0 && out_is(&c, "hello\n") && res.exit.exit_code == 0,
       "stdin bytes then EOF reach cat");
    size_t big = 4 * 1024 * 1024;
    char *data = xmalloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (char)('a' + i % 26);
    buf_reset(&c.out);
    req.stdin_data = data;
    req.stdin_len = big;
    ok(run_req(&req, &c, &res, &err) == 0 && c.out.len == big && memcmp(c.out.data, data, big) == 0,
       "4 MiB through cat: sending and reading interleave without deadlock");
    free(data);
    capture_free(&c);
}

static void test_env_cwd_user(void)
{
    struct capture c = {0};
    struct agentc_exec_result res;
    err_t err = {0};
    const char *argv[] = {"sh", "-c", "echo $FOO; pwd", NULL};
    const char *env[] = {"FOO=bar", NULL};
    struct agentc_exec_req req = {.argv = argv, .env = env, .cwd = "/tmp"};
    ok(run_req(&req, &c, &res, &err) == 0 && out_is(&c, "bar\n/tmp\n"),
       "env is merged and cwd applied");
    req.cwd = "/no/such/dir";
    ok(run_req(&req, &c, &res, &err) < 0 && strcmp(err.code, "bad_cwd") == 0 &&
           err.kind == ERR_INVALID,
       "a missing cwd is ERR_INVALID bad_cwd");
    if (geteuid() == 0) {
        const char *id[] = {"sh", "-c", "id -u; echo $HOME", NULL};
        struct agentc_exec_req as = {.argv = id, .user = "nobody"};
        const char *home = getenv("HOME");
        bool root_home = !home || strcmp(home, "/root") == 0;
        buf_reset(&c.out);
        ok(run_req(&as, &c, &res, &err) == 0 &&
               out_is(&c, root_home ? "65534\n/nonexistent\n" : "65534\n") == root_home,
           "user nobody runs as uid 65534 with its HOME");
        as.user = "no-such-user-sbx";
        ok(run_req(&as, &c, &res, &err) < 0 && strcmp(err.code, "bad_user") == 0,
           "an unknown user is bad_user");
    }
    capture_free(&c);
}

static void test_tty(void)
{
    struct capture c = {0};
    struct agentc_exec_result res;
    err_t err = {0};
    const char *argv[] = {"sh", "-c", "tty; stty size; echo err >&2", NULL};
    struct agentc_exec_req req = {.argv = argv, .tty = true, .cols = 100, .rows = 30};
    int rc = run_req(&req, &c, &res, &err);
    ok(rc == 0 && strstr(c.out.data ? c.out.data : "", "/dev/pts/") &&
           strstr(c.out.data, "30 100\r\n") && strstr(c.out.data, "err\r\n") && c.err.len == 0,
       "tty: a PTY of the asked size, stderr merged into STDOUT");
    capture_free(&c);
}

/* Connect, start argv, and read up to STARTED: the manual way, for signals and hangups. */
static int start_manual(const char *const *argv, pid_t *pid, agentc_reader_t *r)
{
    err_t err = {0};
    struct agent_frame f;
    struct agentc_exec_req req = {.argv = argv};
    int fd = agentc_connect(dirfd_, SOCK_NAME, &(struct agentc_peer){agent_pid, NULL}, 2000, &err);
    agentc_reader_init(r);
    if (fd < 0 || agentc_send_exec(fd, &req, &err) < 0 ||
        agentc_read_frame(fd, r, &f, now_mono_ms() + 5000, &err) < 0 ||
        agentc_decode_started(&f, pid, &err) < 0) {
        printf("# start_manual: %s\n", err.msg);
        return -1;
    }
    return fd;
}

static void test_signal_frame(void)
{
    const char *argv[] = {"sleep", "100", NULL};
    agentc_reader_t r;
    pid_t pid;
    int fd = start_manual(argv, &pid, &r);
    uint8_t sig = SIGTERM;
    struct agent_frame f = {0};
    struct agentc_exit e = {0};
    err_t err = {0};
    int rc = fd < 0 ? -1 : agentc_send(fd, AGENT_SIGNAL, &sig, 1, &err);
    if (rc == 0)
        rc = agentc_read_frame(fd, &r, &f, now_mono_ms() + 5000, &err);
    ok(rc == 0 && agentc_decode_exit(&f, &e, &err) == 0 && e.exit_code == 143 && e.signal == 15,
       "a SIGNAL frame reaches the process group: exit 143");
    agentc_reader_free(&r);
    if (fd >= 0)
        close(fd);
}

/* True once pid is gone (not even a zombie), waiting up to ms. */
static bool gone_within(pid_t pid, int ms)
{
    double end = now_mono_ms() + ms;
    while (now_mono_ms() < end) {
        (void)waitpid(pid, NULL, WNOHANG); /* we are a subreaper: orphans may come to us */
        if (kill(pid, 0) < 0 && errno == ESRCH)
            return true;
        usleep(2000);
    }
    return false;
}

static void test_disconnect_kills(void)
{
    const char *argv[] = {"sleep", "100", NULL};
    agentc_reader_t r;
    pid_t pid;
    int fd = start_manual(argv, &pid, &r);
    if (fd >= 0)
        close(fd);
    ok(fd >= 0 && gone_within(pid, 2000), "closing the connection kills and reaps the process");
    agentc_reader_free(&r);
}

/* Count zombies whose parent is the agent. */
static int agent_zombies(void)
{
    _cleanup_closedir_ DIR *d = opendir("/proc");
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d))) {
        char path[300], line[512];
        snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
        _cleanup_fclose_ FILE *f =
            de->d_name[0] >= '1' && de->d_name[0] <= '9' ? fopen(path, "re") : NULL;
        char *rp, state;
        int ppid;
        if (!f || !fgets(line, sizeof(line), f) || !(rp = strrchr(line, ')')))
            continue;
        if (sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && state == 'Z' && ppid == agent_pid)
            n++;
    }
    return n;
}

static void test_orphans_reaped(void)
{
    struct agentc_exec_result res;
    const char *argv[] = {"sh", "-c", "(sleep 0.05 >/dev/null 2>&1 &); exit 0", NULL};
    ok(run_argv(argv, NULL, &res) == 0, "an exec leaves an orphan behind");
    int zombies = agent_zombies();
    for (double end = now_mono_ms() + 5000; zombies && now_mono_ms() < end; usleep(10000))
        zombies = agent_zombies();
    ok(zombies == 0, "the agent reaped the orphan and its sessions (no zombies)");
}

static void test_protocol_errors(void)
{
    err_t err = {0};
    agentc_reader_t r;
    struct agent_frame f;
    char code[32], msg[128];
    agentc_reader_init(&r);
    int fd = agentc_connect(dirfd_, SOCK_NAME, &(struct agentc_peer){agent_pid, NULL}, 2000, &err);
    int rc = agentc_send(fd, AGENT_HELLO, "{\"version\":1}", 13, &err);
    ok(rc == 0 && agentc_read_frame(fd, &r, &f, now_mono_ms() + 5000, &err) == 0 &&
           f.type == AGENT_HELLO_OK,
       "HELLO is answered with HELLO_OK");
    agentc_send(fd, AGENT_PS, "{}", 2, &err);
    ok(agentc_read_frame(fd, &r, &f, now_mono_ms() + 5000, &err) == 0 &&
           agentc_decode_error(&f, code, sizeof(code), msg, sizeof(msg), &err) == 0 &&
           strcmp(code, "unsupported") == 0,
       "a reserved request type (PS) is answered ERROR unsupported");
    close(fd);
    agentc_reader_free(&r);
    agentc_reader_init(&r);
    fd = agentc_connect(dirfd_, SOCK_NAME, &(struct agentc_peer){agent_pid, NULL}, 2000, &err);
    uint8_t hdr[5] = {0x7f, 0, 0, 0, AGENT_EXEC};
    (void)!write(fd, hdr, sizeof(hdr));
    ok(agentc_read_frame(fd, &r, &f, now_mono_ms() + 5000, &err) == 0 &&
           agentc_decode_error(&f, code, sizeof(code), msg, sizeof(msg), &err) == 0 &&
           strcmp(code, "protocol") == 0,
       "an oversize frame is answered ERROR protocol");
    close(fd);
    agentc_reader_free(&r);
}

struct conc {
    int i;
    bool good;
};

static void *conc_thread(void *p)
{
    struct conc *c = p;
    char name[16], want[20];
    snprintf(name, sizeof(name), "t%d", c->i);
    snprintf(want, sizeof(want), "t%d\n", c->i);
    const char *argv[] = {"sh", "-c", "sleep 0.1; echo $0", name, NULL};
    struct capture cap = {0};
    struct agentc_exec_result res;
    c->good = run_argv(argv, &cap, &res) == 0 && out_is(&cap, want) && res.exit.exit_code == 0;
    capture_free(&cap);
    return NULL;
}

static void test_concurrent_execs(void)
{
    enum { N = 50 };
    pthread_t th[N];
    struct conc cs[N];
    double t0 = now_mono_ms();
    for (int i = 0; i < N; i++) {
        cs[i] = (struct conc){.i = i};
        pthread_create(&th[i], NULL, conc_thread, &cs[i]);
    }
    int good = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        good += cs[i].good;
    }
    ok(good == N, "50 concurrent execs each get their own output (%d/50, %.0f ms)", good,
       now_mono_ms() - t0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void test_latency(void)
{
    enum { N = 1000 };
    static double t[N];
    const char *argv[] = {"true", NULL};
    struct agentc_exec_result res;
    int fails = 0;
    for (int i = 0; i < N; i++) {
        double t0 = now_mono_ms();
        fails += run_argv(argv, NULL, &res) != 0 || res.exit.exit_code != 0;
        t[i] = now_mono_ms() - t0;
    }
    qsort(t, N, sizeof(double), cmp_double);
    printf("# exec round trip of `true` (connect+exec+exit), %d runs: median %.3f ms, "
           "p90 %.3f ms, p99 %.3f ms\n",
           N, t[N / 2], t[N * 9 / 10], t[N * 99 / 100]);
    ok(fails == 0 && t[N / 2] < 20, "1000 execs of true succeed, median %.3f ms", t[N / 2]);
}

/* ---------------------------------------------------------------- the socket's path */

static void test_connect_refuses_links_and_strangers(void)
{
    err_t err = {0};
    char real[128], link[128];
    snprintf(real, sizeof(real), "%s/%s", tmpdir, SOCK_NAME);
    snprintf(link, sizeof(link), "%s/evil.sock", tmpdir);
    ok(symlink(real, link) == 0, "plant a symlink to the real socket");
    ok(agentc_connect(dirfd_, "evil.sock", &(struct agentc_peer){agent_pid, NULL}, 1000, &err) <
               0 &&
           strcmp(err.code, "agent_unavailable") == 0,
       "a symlink at the socket path is not followed (%s)", err.msg);
    ok(agentc_connect(dirfd_, "evil.sock", &(struct agentc_peer){0, NULL}, 1000, &err) < 0,
       "... even without the pid check");
    unlink(link);
    int fd = openat(dirfd_, "file.sock", O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    close(fd);
    ok(agentc_connect(dirfd_, "file.sock", &(struct agentc_peer){0, NULL}, 1000, &err) < 0,
       "a regular file is refused");
    ok(agentc_connect(dirfd_, "../x/agent.sock", &(struct agentc_peer){0, NULL}, 1000, &err) < 0,
       "a name with a slash is refused");
    ok(agentc_connect(dirfd_, SOCK_NAME, &(struct agentc_peer){getpid(), NULL}, 1000, &err) < 0 &&
           strcmp(err.code, "agent_impostor") == 0 && err.kind == ERR_BAD_GATEWAY,
       "a peer that is not the expected pid is refused (agent_impostor, 502)");
    int ok_fd =
        agentc_connect(dirfd_, SOCK_NAME, &(struct agentc_peer){agent_pid, NULL}, 1000, &err);
    ok(ok_fd >= 0, "the real socket with the right pid connects");
    if (ok_fd >= 0)
        close(ok_fd);
    struct stat st;
    ok(fstatat(dirfd_, SOCK_NAME, &st, AT_SYMLINK_NOFOLLOW) == 0 && (st.st_mode & 0777) == 0600,
       "the socket is mode 0600");
}

/* ---------------------------------------------------------------- main-process mode */

static void test_main_process_exit_code_and_stdout(void)
{
    int p[2];
    char out[64] = {0};
    char *extra[] = {"--", "sh", "-c", "echo out; exit 7", NULL};
    ok(pipe2(p, O_CLOEXEC) == 0, "pipe");
    pid_t pid = spawn_agent(extra, p[1]);
    close(p[1]);
    ssize_t n = read(p[0], out, sizeof(out) - 1);
    int code = wait_exit(pid);
    close(p[0]);
    ok(code == 7, "the agent exits with its main process's code (%d)", code);
    ok(n == 4 && strcmp(out, "out\n") == 0, "the main process's stdout is the agent's");
}

static void test_main_process_signals_and_failures(void)
{
    err_t err = {0};
    char *sleeper[] = {"--", "sleep", "100", NULL};
    pid_t pid = spawn_agent(sleeper, -1);
    int rc = agentc_wait_ready(dirfd_, SOCK_NAME, &(struct agentc_peer){pid, NULL}, 5000, &err);
    kill(pid, SIGTERM);
    int code = wait_exit(pid);
    ok(rc == 0 && code == 143, "SIGTERM is forwarded: the main sleep dies, the agent exits 143");
    char *missing[] = {"--", "no-such-program-sbx", NULL};
    ok(wait_exit(spawn_agent(missing, -1)) == 127, "a missing main program: exit 127");
    char *idle[] = {NULL};
    pid = spawn_agent(idle, -1);
    rc = agentc_wait_ready(dirfd_, SOCK_NAME, &(struct agentc_peer){pid, NULL}, 5000, &err);
    kill(pid, SIGTERM);
    ok(rc == 0 && wait_exit(pid) == 0, "an idle agent exits 0 on SIGTERM");
}

static void test_wait_ready_fast(void)
{
    err_t err = {0};
    double t0 = now_mono_ms();
    agent_pid = spawn_agent(NULL, -1);
    int rc =
        agentc_wait_ready(dirfd_, SOCK_NAME, &(struct agentc_peer){agent_pid, NULL}, 5000, &err);
    ok(rc == 0, "agentc_wait_ready sees the agent (%.1f ms after fork)", now_mono_ms() - t0);
}

static void test_stop_kills_running_execs(void)
{
    const char *argv[] = {"sleep", "100", NULL};
    agentc_reader_t r;
    pid_t pid;
    int fd = start_manual(argv, &pid, &r);
    kill(agent_pid, SIGTERM);
    ok(wait_exit(agent_pid) == 0, "the agent stops on SIGTERM with 0");
    ok(fd >= 0 && gone_within(pid, 2000), "... and its running execs are killed");
    if (fd >= 0)
        close(fd);
    agentc_reader_free(&r);
}

static void test_main_exit_kills_running_execs(void)
{
    err_t err = {0};
    char *extra[] = {"--", "sleep", "0.3", NULL};
    agent_pid = spawn_agent(extra, -1);
    const char *argv[] = {"sleep", "100", NULL};
    agentc_reader_t r;
    pid_t pid = 0;
    int fd = agentc_wait_ready(dirfd_, SOCK_NAME, &(struct agentc_peer){agent_pid, NULL}, 5000,
                               &err) == 0
                 ? start_manual(argv, &pid, &r)
                 : -1;
    int code = wait_exit(agent_pid);
    ok(fd >= 0 && code == 0 && gone_within(pid, 2000),
       "when the main process ends the agent exits with its code and kills the execs");
    if (fd >= 0) {
        close(fd);
        agentc_reader_free(&r);
    }
}

static void run_agent_tests(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/sbx-agent-test-XXXXXX");
    if (!mkdtemp(tmpdir))
        return;
    dirfd_ = open(tmpdir, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* processes the agent leaves behind come to us */
    test_main_process_exit_code_and_stdout();
    test_main_process_signals_and_failures();
    test_wait_ready_fast();
    test_connect_refuses_links_and_strangers();
    test_echo_and_exit_codes();
    test_stdout_stderr_separate();
    test_missing_and_unexecutable();
    test_env_cwd_user();
    test_stdin_to_cat();
    test_large_output_intact();
    test_timeout_kills_group();
    test_background_child_does_not_hold_exec();
    test_tty();
    test_signal_frame();
    test_disconnect_kills();
    test_protocol_errors();
    test_concurrent_execs();
    test_orphans_reaped();
    test_latency();
    test_stop_kills_running_execs();
    test_main_exit_kills_running_execs();
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    (void)!system(cmd);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_parser_complete_and_incomplete();
    test_parser_invalid();
    test_reader_byte_by_byte();
    test_decode_exit();
    test_decode_started_and_error();
    agent_bin = getenv("SANDBOXER_AGENT");
    if (agent_bin && access(agent_bin, X_OK) == 0)
        run_agent_tests();
    else
        printf("# SANDBOXER_AGENT not set: skipping the tests of the real agent\n");
    return tap_done();
}
