/*
 * agentc_exec: one exec over one connection. Sending (EXEC, then stdin in 64 KiB frames, then
 * STDIN_EOF) is interleaved with reading in a single poll loop: if we wrote all stdin first
 * while the process echoed it back, both sides could end up blocked on full socket buffers.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "agent_client.h"
#include "common/buf.h"
#include "common/cleanup.h"
#include "common/util.h"

struct exec_state {
    int fd;
    const struct agentc_exec_req *req;
    agentc_output_fn on_output;
    void *data;
    struct agentc_exec_result *res;
    agentc_reader_t reader;
    buf_t pending; /* frame bytes not yet sent */
    size_t pending_off;
    size_t stdin_framed; /* bytes of stdin_data already put in frames */
    bool eof_framed;
    bool send_closed; /* the agent stopped reading (it finished): keep reading its frames */
    double deadline;
};

static void queue_frame(struct exec_state *st, uint8_t type, const void *p, size_t n)
{
    uint8_t hdr[AGENT_HEADER_LEN];
    agent_frame_header(hdr, type, (uint32_t)n);
    buf_append(&st->pending, hdr, sizeof(hdr));
    if (n)
        buf_append(&st->pending, p, n);
}

/* Frame the next stdin chunk, or STDIN_EOF after the last one. */
static void refill(struct exec_state *st)
{
    const struct agentc_exec_req *req = st->req;
    if (st->pending_off < st->pending.len || !req->stdin_pipe || st->eof_framed)
        return;
    buf_reset(&st->pending);
    st->pending_off = 0;
    if (st->stdin_framed < req->stdin_len) {
        size_t n = req->stdin_len - st->stdin_framed;
        n = n < AGENT_MAX_CHUNK ? n : AGENT_MAX_CHUNK;
        queue_frame(st, AGENT_STDIN, (const char *)req->stdin_data + st->stdin_framed, n);
        st->stdin_framed += n;
    } else {
        queue_frame(st, AGENT_STDIN_EOF, NULL, 0);
        st->eof_framed = true;
    }
}

static bool want_send(struct exec_state *st)
{
    refill(st);
    return !st->send_closed && st->pending_off < st->pending.len;
}

/* Send what the socket takes now. */
static void send_some(struct exec_state *st)
{
    while (want_send(st)) {
        ssize_t w = send(st->fd, st->pending.data + st->pending_off,
                         st->pending.len - st->pending_off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            return;
        if (w <= 0) {
            st->send_closed = true; /* EPIPE/ECONNRESET: its EXIT may still be readable */
            return;
        }
        st->pending_off += (size_t)w;
    }
}

/* An ERROR frame: a failed exec (127/126) is a result, anything else an error. */
static int on_error_frame(struct exec_state *st, const struct agent_frame *f, err_t *err)
{
    struct agentc_exec_result *res = st->res;
    if (agentc_decode_error(f, res->error_code, sizeof(res->error_code), res->error_msg,
                            sizeof(res->error_msg), err) < 0)
        return -1;
    bool missing = strcmp(res->error_code, "not_found") == 0;
    if (missing || strcmp(res->error_code, "permission") == 0) {
        res->exit = (struct agentc_exit){.exit_code = missing ? 127 : 126};
        return 1;
    }
    const char *c = res->error_code;
    if (!strcmp(c, "invalid") || !strcmp(c, "bad_cwd") || !strcmp(c, "bad_user"))
        return err_set(err, ERR_INVALID, 0, c, "%s", res->error_msg);
    if (!strcmp(c, "busy"))
        return err_set(err, ERR_LIMIT, 0, "agent_busy", "%s", res->error_msg);
    return err_set(err, ERR_RUNTIME, 0, "agent_error", "agent: %s: %s", c, res->error_msg);
}

/* Handle one frame: 1 when the exec is over, 0 to go on, -1 on error. */
static int on_frame(struct exec_state *st, const struct agent_frame *f, err_t *err)
{
    switch (f->type) {
    case AGENT_STARTED:
        return agentc_decode_started(f, &st->res->pid, err) < 0 ? -1 : 0;
    case AGENT_STDOUT:
    case AGENT_STDERR:
        if (st->on_output && f->len && st->on_output(st->data, f->type, f->payload, f->len))
            return err_set(err, ERR_UNAVAILABLE, 0, "output_aborted", "the output reader left");
        return 0;
    case AGENT_EXIT:
        return agentc_decode_exit(f, &st->res->exit, err) < 0 ? -1 : 1;
    case AGENT_ERROR:
        return on_error_frame(st, f, err);
    case AGENT_PONG:
    case AGENT_HELLO_OK:
        return 0;
    }
    return err_set(err, ERR_RUNTIME, 0, "agent_protocol", "unexpected frame 0x%02x from the agent",
                   f->type);
}

/* Handle every complete frame held by the reader. */
static int process_frames(struct exec_state *st, err_t *err)
{
    struct agent_frame f;
    int rc;
    while ((rc = agentc_reader_next(&st->reader, &f)) == AGENT_PARSE_COMPLETE) {
        int done = on_frame(st, &f, err);
        if (done != 0)
            return done;
    }
    if (rc == AGENT_PARSE_INVALID)
        return err_set(err, ERR_RUNTIME, 0, "agent_protocol", "invalid frame from the agent");
    return 0;
}

/* Wait for the socket; 0 readable or writable, -1 on timeout or error. */
static int wait_socket(struct exec_state *st, short *revents, err_t *err)
{
    int ms = -1;
    if (st->deadline > 0) {
        double left = st->deadline - now_mono_ms();
        if (left <= 0)
            return err_set(err, ERR_RUNTIME, 0, "agent_timeout",
                           "the agent did not finish the exec in time");
        ms = (int)left + 1;
    }
    struct pollfd p[2] = {{.fd = st->fd, .events = POLLIN | (want_send(st) ? POLLOUT : 0)},
                          {.fd = st->req->cancel_fd ? *st->req->cancel_fd : -1, POLLRDHUP, 0}};
    int n = poll(p, 2, ms);
    if (n < 0 && errno != EINTR)
        return err_set(err, ERR_RUNTIME, errno, "agent_unavailable", "poll: %s", strerror(errno));
    if (n > 0 && (p[1].revents & (POLLHUP | POLLERR | POLLRDHUP)))
        return err_set(err, ERR_UNAVAILABLE, 0, "client_gone",
                       "the client went away: the command was killed");
    *revents = n > 0 ? p[0].revents : 0;
    return 0;
}

static int receive(struct exec_state *st, err_t *err)
{
    size_t room = agentc_reader_space(&st->reader, 64 * 1024);
    ssize_t n = recv(st->fd, st->reader.data + st->reader.len, room, MSG_DONTWAIT);
    if (n > 0)
        st->reader.len += (size_t)n;
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
        return err_set(err, ERR_RUNTIME, n < 0 ? errno : 0, "agent_unavailable",
                       "the agent closed the connection before the exec ended");
    return 0;
}

static int exec_loop(struct exec_state *st, err_t *err)
{
    for (;;) {
        short revents = 0;
        send_some(st);
        if (wait_socket(st, &revents, err) < 0)
            return -1;
        if ((revents & (POLLIN | POLLHUP | POLLERR)) && receive(st, err) < 0)
            return -1;
        int rc = process_frames(st, err);
        if (rc != 0)
            return rc < 0 ? -1 : 0;
    }
}

int agentc_exec(int fd, const struct agentc_exec_req *req, agentc_output_fn on_output, void *data,
                int wait_ms, struct agentc_exec_result *res, err_t *err)
{
    _cleanup_free_ char *json = NULL;
    *res = (struct agentc_exec_result){0};
    if (agentc_encode_exec(req, &json, err) < 0)
        return -1;
    struct exec_state st = {.fd = fd,
                            .req = req,
                            .on_output = on_output,
                            .data = data,
                            .res = res,
                            .deadline = wait_ms > 0 ? now_mono_ms() + wait_ms : 0};
    queue_frame(&st, AGENT_EXEC, json, strlen(json));
    int rc = exec_loop(&st, err);
    agentc_reader_free(&st.reader);
    buf_free(&st.pending);
    return rc;
}
