/*
 * sandboxer shell / attach: a terminal in a sandbox over the daemon's WebSocket routes.
 * The local terminal goes raw for the session (so ^C, ^D and arrows reach the sandbox), its
 * size follows SIGWINCH, and it is restored however the session ends. The exit status is
 * the remote command's, from the close frame's {"exit_code": N}.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"

#define STDIN_CHUNK   (16u * 1024u)
#define MAX_QUEUED_IN (1u << 20)

static volatile sig_atomic_t winch_seen, stop_seen;

static void on_winch(int sig)
{
    (void)sig;
    winch_seen = 1;
}

static void on_stop(int sig)
{
    (void)sig;
    stop_seen = 1;
}

#define DETACH_KEY 0x1d /* ^] leaves an attach session, as telnet's escape does */

struct term_session {
    ws_t *ws;
    err_t *err;
    bool write_failed;
    bool attach;   /* ^] detaches */
    bool detached; /* it did */
};

static void on_msg(void *data, int opcode, const uint8_t *p, size_t n)
{
    struct term_session *t = data;
    if (opcode != WS_OP_BINARY || t->write_failed)
        return;
    while (n > 0) {
        ssize_t w = write(STDOUT_FILENO, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pf = {STDOUT_FILENO, POLLOUT, 0};
            poll(&pf, 1, 1000);
            continue;
        }
        if (w <= 0) {
            t->write_failed = true;
            return;
        }
        p += w, n -= (size_t)w;
    }
}

static bool term_size(int fd, struct winsize *ws)
{
    return ioctl(fd, TIOCGWINSZ, ws) == 0 && ws->ws_col > 0 && ws->ws_row > 0;
}

static void send_resize(ws_t *ws)
{
    struct winsize sz;
    if (!term_size(STDIN_FILENO, &sz))
        return;
    char msg[80];
    int n =
        snprintf(msg, sizeof(msg), "{\"resize\":{\"cols\":%u,\"rows\":%u}}", sz.ws_col, sz.ws_row);
    ws_send(ws, WS_OP_TEXT, msg, (size_t)n);
}

/* Local input → binary frames; false at end of input or on the detach key. */
static bool pump_stdin(struct term_session *t)
{
    char buf[STDIN_CHUNK];
    ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return true;
    if (n <= 0)
        return false;
    const char *key = t->attach ? memchr(buf, DETACH_KEY, (size_t)n) : NULL;
    size_t len = key ? (size_t)(key - buf) : (size_t)n;
    if (len)
        ws_send(t->ws, WS_OP_BINARY, buf, len);
    if (key) {
        t->detached = true;
        ws_close(t->ws, 1000, "detached");
        return false;
    }
    return true;
}

/* The remote exit status from the close frame; 255 when the session ended otherwise. */
static int exit_status(ws_t *ws, err_t *err)
{
    uint16_t code = ws_peer_close_code(ws);
    const char *reason = ws_peer_close_reason(ws);
    json_t *j _cleanup_json_ = json_loads(reason, 0, NULL);
    json_t *ec = json_object_get(j, "exit_code");
    if (code == 1000 && json_is_integer(ec))
        return (int)(json_integer_value(ec) & 0xff);
    if (code == 0 && !ws_peer_closed(ws))
        return err_set(err, ERR_UNAVAILABLE, 0, "connection_lost",
                       "the connection to the daemon was lost");
    return err_set(err, ERR_UNAVAILABLE, 0, "session_closed", "the session ended: %s (%u)",
                   reason[0] ? reason : "no reason given", code);
}

static void loop(struct term_session *t, int sock, bool tty)
{
    ws_t *ws = t->ws;
    bool input = true;
    double closing = 0;
    while (!ws_done(ws)) {
        if (winch_seen) {
            winch_seen = 0;
            send_resize(ws);
        }
        if (stop_seen && !closing) {
            ws_close(ws, 1000, "the client stopped");
            closing = now_mono_ms();
        }
        if (closing && now_mono_ms() - closing > 3000)
            break;
        bool take = input && ws_queued(ws) < MAX_QUEUED_IN;
        struct pollfd pf[2] = {{sock, ws_poll_events(ws), 0},
                               {take ? STDIN_FILENO : -1, POLLIN, 0}};
        if (poll(pf, 2, 1000) < 0 && errno != EINTR)
            break;
        if (pf[0].revents && ws_handle(ws, pf[0].revents) < 0)
            break;
        if (pf[1].revents && !pump_stdin(t)) {
            input = false;
            if (t->detached)
                closing = now_mono_ms();
            else if (tty) /* a terminal that ends (hung up) ends the session */
                stop_seen = 1;
        }
    }
}

/* Run a session on path; the terminal is raw meanwhile when stdin is one. */
static int run_session(cli_t *cli, const char *path, bool attach, err_t *err)
{
    client_t *c = cli_connect(cli, true, err);
    if (!c)
        return -1;
    struct term_session t = {.err = err, .attach = attach};
    client_ws_t *w = client_ws_open(c, path, on_msg, &t, err);
    if (!w)
        return -1;
    t.ws = client_ws_conn(w);
    bool tty = isatty(STDIN_FILENO);
    struct termios saved, raw;
    bool restored = !tty || tcgetattr(STDIN_FILENO, &saved) < 0;
    if (!restored) {
        raw = saved;
        cfmakeraw(&raw);
        tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    }
    struct sigaction sa = {.sa_handler = on_winch}, st = {.sa_handler = on_stop};
    sigaction(SIGWINCH, &sa, NULL);
    sigaction(SIGTERM, &st, NULL);
    sigaction(SIGHUP, &st, NULL);
    sigaction(SIGINT, &st, NULL); /* only when stdin is not a terminal: raw mode sends ^C on */
    if (attach && tty)
        fprintf(stderr, "[attached: ^] detaches]\r\n");
    loop(&t, client_ws_fd(w), tty);
    if (!restored)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    int rc = t.detached ? 0 : exit_status(t.ws, err);
    client_ws_close(w);
    return rc;
}

/* ?cols=&rows= from the local terminal, if there is one. */
static void size_query(buf_t *q)
{
    struct winsize sz;
    if (isatty(STDIN_FILENO) && term_size(STDIN_FILENO, &sz))
        buf_printf(q, "%ccols=%u&rows=%u", q->len ? '&' : '?', sz.ws_col, sz.ws_row);
}

int cmd_shell(cli_t *cli, const cli_args_t *args, err_t *err)
{
    buf_t q = {0};
    size_query(&q);
    const char *cmd = cli_opt_str(args, "cmd");
    const char *user = cli_opt_str(args, "user");
    const char *cwd = cli_opt_str(args, "cwd");
    const char *names[] = {"cmd", "user", "cwd"};
    const char *vals[] = {cmd, user, cwd};
    for (int i = 0; i < 3; i++) {
        if (!vals[i])
            continue;
        _cleanup_free_ char *e = client_escape(vals[i]);
        buf_printf(&q, "%c%s=%s", q.len ? '&' : '?', names[i], e);
    }
    const char *term = getenv("TERM");
    if (term && *term && strlen(term) <= 64) {
        _cleanup_free_ char *e = client_escape(term);
        buf_printf(&q, "%cterm=%s", q.len ? '&' : '?', e);
    }
    _cleanup_free_ char *suffix = xasprintf("/exec/pty%s", q.len ? q.data : "");
    buf_free(&q);
    client_t *c = cli_connect(cli, true, err);
    _cleanup_free_ char *path = NULL;
    if (!c || cli_sandbox_path(c, cli_arg(args, 0), suffix, &path, err) < 0)
        return -1;
    return run_session(cli, path, false, err);
}

int cmd_attach(cli_t *cli, const cli_args_t *args, err_t *err)
{
    client_t *c = cli_connect(cli, true, err);
    _cleanup_free_ char *path = NULL;
    if (!c || cli_sandbox_path(c, cli_arg(args, 0), "/attach", &path, err) < 0)
        return -1;
    return run_session(cli, path, true, err);
}
