/*
 * Terminal WebSockets: `GET /sandboxes/{id}/exec/pty` (a shell or ?cmd= on a PTY) and
 * `GET /sandboxes/{id}/attach` (the console of an interactive sandbox's main process).
 *
 * Everything that can fail with an HTTP status (auth, ownership, a missing command) happens
 * before the 101. Then a thread per session moves bytes: binary frames from the client are
 * the terminal's input, its output goes back as binary frames, a text frame
 * {"resize":{"cols":N,"rows":M}} resizes, and the close frame (1000) carries the exit as
 * its reason, {"exit_code":N,"signal":S|null}. The server pings every WS_PING_S and drops a
 * client silent for WS_DEAD_S; a session without traffic for the configured idle timeout is
 * closed (1001). Output waits while more than WS_MAX_QUEUED bytes are queued for a slow
 * client, so its memory stays bounded; the agent then stops reading the PTY.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "common/ws.h"
#include "sandbox/sandbox.h"

#define WS_PING_S       20
#define WS_DEAD_S       60
#define WS_MAX_QUEUED   (1u << 20)
#define WS_MAX_MSG      (1u << 20)
#define WS_CLOSE_WAIT_S 5

/* A request on its way to 101: the session is open and waits for the upgrade. */
struct pty_req {
    sbx_term_t *term;
    char accept[WS_ACCEPT_SIZE];
};

/* One live session, owned by its thread. */
struct session {
    api_t *api;
    sbx_term_t *term;
    int sock;
    struct MHD_UpgradeResponseHandle *urh;
    ws_t *ws;
    char rid[API_RID_SIZE];
    bool agent_done; /* the agent's side ended (EXIT, ERROR or gone) */
    int exit_code;   /* -1 until EXIT */
    double last_in, last_traffic, last_ping, last_touch, closing_since;
};

static void pty_req_free(void *p)
{
    struct pty_req *q = p;
    if (q)
        sbx_term_close(q->term, -1);
    free(q);
}

/* 400 unless this is a WebSocket handshake we can answer; fills the accept key. */
static int check_handshake(api_req_t *r, char accept[WS_ACCEPT_SIZE], err_t *err)
{
    const char *up = api_header(r, MHD_HTTP_HEADER_UPGRADE);
    const char *conn = api_header(r, MHD_HTTP_HEADER_CONNECTION);
    const char *ver = api_header(r, "Sec-WebSocket-Version");
    const char *key = api_header(r, "Sec-WebSocket-Key");
    if (!up || strcasecmp(up, "websocket") != 0 || !conn || !strcasestr(conn, "upgrade") || !key)
        return err_set(err, ERR_INVALID, 0, "websocket_required",
                       "this route speaks WebSocket: send Upgrade: websocket");
    if (!ver || strcmp(ver, "13") != 0)
        return err_set(err, ERR_INVALID, 0, "websocket_version",
                       "only WebSocket version 13 is supported");
    if (strlen(key) != 24)
        return err_set(err, ERR_INVALID, 0, "websocket_key", "Sec-WebSocket-Key is malformed");
    ws_accept_key(key, accept);
    return 0;
}

static int query_size(api_req_t *r, const char *name, uint16_t *out, err_t *err)
{
    const char *v = api_query(r, name);
    long long n = 0;
    if (v && !parse_int(v, 1, 1000, &n))
        return err_set(err, ERR_INVALID, 0, "invalid_query", "%s must be 1-1000", name);
    *out = (uint16_t)n;
    return 0;
}

/* --- the session thread ------------------------------------------------------------------ */

static void close_with_exit(struct session *s, const struct agentc_exit *x)
{
    char reason[64];
    if (x->signal)
        snprintf(reason, sizeof(reason), "{\"exit_code\":%d,\"signal\":%d}", x->exit_code,
                 x->signal);
    else
        snprintf(reason, sizeof(reason), "{\"exit_code\":%d,\"signal\":null}", x->exit_code);
    s->exit_code = x->exit_code;
    /* In the history before the client hears of the end: it may ask right after. */
    sbx_term_finish(s->term, x->exit_code);
    ws_close(s->ws, 1000, reason);
}

/* Hand the frames the reader holds to the client; false when the agent's side is over. */
static bool relay_frames(struct session *s)
{
    agentc_reader_t *rd = sbx_term_reader(s->term);
    struct agent_frame f;
    int rc;
    while ((rc = agentc_reader_next(rd, &f)) == AGENT_PARSE_COMPLETE) {
        err_t err = {0};
        struct agentc_exit x;
        char code[32], msg[256];
        switch (f.type) {
        case AGENT_STDOUT:
        case AGENT_STDERR:
            ws_send(s->ws, WS_OP_BINARY, f.payload, f.len);
            s->last_traffic = now_mono_ms();
            break;
        case AGENT_EXIT:
            if (agentc_decode_exit(&f, &x, &err) < 0)
                ws_close(s->ws, 1011, "the sandbox's agent sent a bad exit");
            else
                close_with_exit(s, &x);
            return false;
        case AGENT_ERROR:
            if (agentc_decode_error(&f, code, sizeof(code), msg, sizeof(msg), &err) < 0)
                snprintf(msg, sizeof(msg), "the sandbox's agent failed");
            ws_close(s->ws, 1011, msg);
            return false;
        case AGENT_PONG:
            break;
        default:
            ws_close(s->ws, 1011, "the sandbox's agent sent an unexpected frame");
            return false;
        }
    }
    if (rc == AGENT_PARSE_INVALID) {
        ws_close(s->ws, 1011, "the sandbox's agent broke the protocol");
        return false;
    }
    return true;
}

/* The agent's socket is readable: take what it has. */
static void on_agent(struct session *s)
{
    agentc_reader_t *rd = sbx_term_reader(s->term);
    size_t room = agentc_reader_space(rd, 65536);
    if (room == 0) { /* a frame larger than the reader's bound */
        s->agent_done = true;
        ws_close(s->ws, 1011, "the sandbox's agent broke the protocol");
        return;
    }
    ssize_t n = recv(sbx_term_fd(s->term), rd->data + rd->len, room, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        s->agent_done = true;
        ws_close(s->ws, 1011, "the sandbox ended the session (it stopped or was deleted)");
        return;
    }
    rd->len += (size_t)n;
    if (!relay_frames(s))
        s->agent_done = true;
}

/* {"resize": {"cols": N, "rows": M}} → RESIZE; other text is ignored. */
bool api_term_parse_resize(const uint8_t *p, size_t n, uint16_t *cols, uint16_t *rows)
{
    json_t *j _cleanup_json_ = json_loadb((const char *)p, n, 0, NULL);
    json_t *rs = json_object_get(j, "resize");
    json_int_t c = json_integer_value(json_object_get(rs, "cols"));
    json_int_t r = json_integer_value(json_object_get(rs, "rows"));
    if (c < 1 || c > 1000 || r < 1 || r > 1000)
        return false;
    *cols = (uint16_t)c;
    *rows = (uint16_t)r;
    return true;
}

static void on_text(struct session *s, const uint8_t *p, size_t n)
{
    uint16_t cols, rows;
    if (!api_term_parse_resize(p, n, &cols, &rows))
        return;
    uint8_t payload[4];
    agent_resize_encode(payload, cols, rows);
    err_t err = {0};
    agentc_send(sbx_term_fd(s->term), AGENT_RESIZE, payload, sizeof(payload), &err);
}

static void on_client_msg(void *data, int opcode, const uint8_t *p, size_t n)
{
    struct session *s = data;
    s->last_in = now_mono_ms();
    if (s->agent_done)
        return;
    if (opcode == WS_OP_TEXT) {
        on_text(s, p, n);
        return;
    }
    if (opcode != WS_OP_BINARY)
        return;
    s->last_traffic = s->last_in;
    err_t err = {0};
    for (size_t off = 0; off < n; off += AGENT_MAX_CHUNK) {
        size_t len = n - off < AGENT_MAX_CHUNK ? n - off : AGENT_MAX_CHUNK;
        if (agentc_send(sbx_term_fd(s->term), AGENT_STDIN, p + off, len, &err) < 0)
            break;
    }
}

/* Pings, a silent client, the idle timeout, a stopping daemon. */
static void on_tick(struct session *s, double now)
{
    unsigned idle = s->api->cfg.terminal_idle_timeout_s;
    if (s->closing_since)
        return;
    if (atomic_load(&s->api->stopping))
        ws_close(s->ws, 1001, "the daemon is stopping");
    else if (now - s->last_in > WS_DEAD_S * 1000.0)
        ws_close(s->ws, 1001, "no answer to pings");
    else if (idle && now - s->last_traffic > idle * 1000.0)
        ws_close(s->ws, 1001, "idle timeout");
    else if (now - s->last_ping > WS_PING_S * 1000.0) {
        ws_send(s->ws, WS_OP_PING, "", 0);
        s->last_ping = now;
    }
    if (now - s->last_touch > 10000.0) {
        sbx_term_touch(s->term);
        s->last_touch = now;
    }
}

static void session_loop(struct session *s)
{
    if (!relay_frames(s)) /* frames that came with STARTED */
        s->agent_done = true;
    while (!ws_done(s->ws)) {
        double now = now_mono_ms();
        on_tick(s, now);
        if (s->agent_done && !s->closing_since)
            s->closing_since = now;
        if (s->closing_since && now - s->closing_since > WS_CLOSE_WAIT_S * 1000.0)
            break; /* the client never answered our close */
        bool take = !s->agent_done && ws_queued(s->ws) < WS_MAX_QUEUED;
        struct pollfd pf[2] = {{s->sock, ws_poll_events(s->ws), 0},
                               {take ? sbx_term_fd(s->term) : -1, POLLIN, 0}};
        if (poll(pf, 2, 1000) < 0 && errno != EINTR)
            break;
        if (pf[0].revents && ws_handle(s->ws, pf[0].revents) < 0)
            break;
        if (ws_peer_closed(s->ws) && !s->closing_since)
            s->closing_since = now_mono_ms(); /* wslay answers the close; then we are done */
        if (pf[1].revents)
            on_agent(s);
    }
}

static void *session_main(void *arg)
{
    struct session *s = arg;
    log_set_request_id(s->rid);
    s->last_in = s->last_traffic = s->last_ping = s->last_touch = now_mono_ms();
    s->ws = ws_new(false, s->sock, NULL, WS_MAX_MSG, on_client_msg, s);
    if (s->ws)
        session_loop(s);
    log_info("term.closed", "sandbox=%s exit_code=%d", sbx_term_id(s->term), s->exit_code);
    sbx_term_close(s->term, s->exit_code);
    ws_free(s->ws);
    MHD_upgrade_action(s->urh, MHD_UPGRADE_ACTION_CLOSE);
    atomic_fetch_sub(&s->api->streams, 1);
    free(s);
    return NULL;
}

static void on_upgraded(void *cls, struct MHD_Connection *conn, void *req_cls, const char *extra_in,
                        size_t extra_in_size, MHD_socket sock,
                        struct MHD_UpgradeResponseHandle *urh)
{
    (void)conn, (void)req_cls, (void)extra_in, (void)extra_in_size;
    api_req_t *r = cls;
    struct pty_req *q = r->ctx;
    struct session *s = xcalloc(1, sizeof(*s));
    *s =
        (struct session){.api = r->api, .term = q->term, .sock = sock, .urh = urh, .exit_code = -1};
    snprintf(s->rid, sizeof(s->rid), "%s", r->rid);
    q->term = NULL; /* the thread owns it now */
    /* Keystrokes and echoes are tiny: without this, Nagle waits for the peer's delayed ACK
     * (40 ms a round trip). A unix socket ignores it. */
    int one = 1;
    (void)setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* A client that sent frames before seeing the 101 is not speaking WebSocket properly:
     * extra_in is dropped (clients must wait for the handshake's answer). */
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    atomic_fetch_add(&s->api->streams, 1);
    if (pthread_create(&th, &attr, session_main, s) != 0) {
        atomic_fetch_sub(&s->api->streams, 1);
        sbx_term_close(s->term, -1);
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        free(s);
    }
    pthread_attr_destroy(&attr);
}

/* --- the handlers ------------------------------------------------------------------------- */

static int reply_101(api_req_t *r, err_t *err)
{
    struct pty_req *q = r->ctx;
    struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgraded, r);
    if (!resp)
        return err_set(err, ERR_INTERNAL, 0, "internal", "cannot upgrade the connection");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, "websocket");
    MHD_add_response_header(resp, "Sec-WebSocket-Accept", q->accept);
    /* A browser offers "sandboxer, bearer.<token>" (auth.c): it must get one of them back,
     * and never the one that holds the token. */
    if (api_ws_protocol_offered(r, "sandboxer"))
        MHD_add_response_header(resp, "Sec-WebSocket-Protocol", "sandboxer");
    if (r->resp)
        MHD_destroy_response(r->resp);
    r->resp = resp;
    r->status = MHD_HTTP_SWITCHING_PROTOCOLS;
    return 0;
}

static int open_term(api_req_t *r, const struct sbx_term_req *tq, const char *accept, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    sbx_term_t *t = sbx_term_open(r->api->sbx, &r->user, id, tq, err);
    if (!t)
        return -1;
    struct pty_req *q = xcalloc(1, sizeof(*q));
    q->term = t;
    memcpy(q->accept, accept, WS_ACCEPT_SIZE);
    r->ctx = q;
    r->ctx_free = pty_req_free;
    return reply_101(r, err);
}

int h_exec_pty(api_req_t *r, err_t *err)
{
    char accept[WS_ACCEPT_SIZE];
    struct sbx_term_req tq = {0};
    if (check_handshake(r, accept, err) < 0 || query_size(r, "cols", &tq.cols, err) < 0 ||
        query_size(r, "rows", &tq.rows, err) < 0)
        return -1;
    const char *cmd = api_query(r, "cmd");
    const char *term = api_query(r, "term");
    if ((cmd && !*cmd) || (term && (!*term || strlen(term) > 64)))
        return err_set(err, ERR_INVALID, 0, "invalid_query", "cmd and term must not be empty");
    /* The sandbox's bash if it has one, else sh. */
    const char *shell = "if command -v bash >/dev/null 2>&1; then exec bash; fi; exec sh";
    const char *argv[] = {"/bin/sh", "-c", cmd ? cmd : shell, NULL};
    _cleanup_free_ char *term_env = xasprintf("TERM=%s", term ? term : "xterm-256color");
    const char *env[] = {term_env, NULL};
    tq.argv = argv;
    tq.env = env;
    tq.cwd = api_query(r, "cwd");
    tq.user = api_query(r, "user");
    tq.command = cmd ? cmd : "pty: shell";
    return open_term(r, &tq, accept, err);
}

int h_attach(api_req_t *r, err_t *err)
{
    char accept[WS_ACCEPT_SIZE];
    struct sbx_term_req tq = {0};
    if (check_handshake(r, accept, err) < 0)
        return -1;
    return open_term(r, &tq, accept, err);
}
