/* Connecting to the agent, frame I/O and payload decoding (see agent_client.h). */
#include "agent_client.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"

#define READ_CHUNK (64 * 1024)
#define READER_MAX (AGENT_HEADER_LEN + AGENT_MAX_FRAME + READ_CHUNK)

static int unavailable(err_t *err, int errnum, const char *what)
{
    if (errnum)
        return err_set(err, ERR_RUNTIME, errnum, "agent_unavailable", "agent socket: %s: %s", what,
                       strerror(errnum));
    return err_set(err, ERR_RUNTIME, 0, "agent_unavailable", "agent socket: %s", what);
}

/* One path component only: O_NOFOLLOW protects the last component and no other. */
static bool plain_name(const char *name)
{
    return name && name[0] && !strchr(name, '/') && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0 && strlen(name) < 256;
}

static void set_send_timeout(int fd, int timeout_ms)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/*
 * The listening peer must be the sandbox's init: SO_PEERCRED names the process that called
 * listen(), the agent for agent.sock and for console.sock alike (it keeps a copy of the
 * console's listening socket, so a restore recreates that socket in the init too). Any
 * other process of the sandbox that bound a socket at the path is an impostor: root in a
 * sandbox can unlink the agent's socket and listen there, and must never receive an exec,
 * its environment or a terminal's input, nor answer for the agent.
 */
static int check_peer(int fd, pid_t expected_pid, err_t *err)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (expected_pid <= 0)
        return 0;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return unavailable(err, errno, "SO_PEERCRED");
    if (cred.pid != expected_pid)
        return err_set(err, ERR_BAD_GATEWAY, 0, "agent_impostor",
                       "the sandbox's agent socket is served by a process other than the "
                       "sandbox's init (something in the sandbox replaced it); the daemon "
                       "refuses to use it");
    return 0;
}

/* Equal without a timing difference in where they differ. */
static bool consttime_eq(const uint8_t *a, const char *b, size_t n)
{
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++)
        d |= a[i] ^ (unsigned char)b[i];
    return d == 0;
}

static int impostor(err_t *err)
{
    return err_set(err, ERR_BAD_GATEWAY, 0, "agent_impostor",
                   "the sandbox's agent socket is served by something other than the sandbox's "
                   "agent (something in the sandbox replaced it); the daemon refuses to use it");
}

/* AUTH → AUTH_OK carrying token, compared in constant time. */
static int check_token(int fd, const char *token, int timeout_ms, err_t *err)
{
    double deadline = now_mono_ms() + (timeout_ms > 0 ? timeout_ms : 5000);
    size_t n = strlen(token);
    uint8_t hdr[AGENT_HEADER_LEN], got[AGENT_TOKEN_LEN];
    err_t e = {0};
    struct agent_frame f;
    size_t used;
    if (n != sizeof(got) || agentc_send(fd, AGENT_AUTH, NULL, 0, &e) < 0 ||
        recv_exact(fd, hdr, sizeof(hdr), deadline) < 0 ||
        agent_frame_parse(hdr, sizeof(hdr), &f, &used) != AGENT_PARSE_INCOMPLETE ||
        hdr[4] != AGENT_AUTH_OK ||
        ((uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3]) != n ||
        recv_exact(fd, got, n, deadline) < 0 || !consttime_eq(got, token, n))
        return impostor(err);
    return 0;
}

int agentc_connect(int dirfd, const char *name, const struct agentc_peer *peer, int timeout_ms,
                   err_t *err)
{
    struct stat st;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (!plain_name(name))
        return unavailable(err, 0, "the name must be one path component");
    _cleanup_close_ int path = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (path < 0)
        return unavailable(err, errno, "open");
    if (fstat(path, &st) < 0)
        return unavailable(err, errno, "fstat");
    if (!S_ISSOCK(st.st_mode))
        return unavailable(err, 0, "not a socket (a link or another file was put there)");
    _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return unavailable(err, errno, "socket");
    snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d", path);
    if (timeout_ms > 0)
        set_send_timeout(fd, timeout_ms); /* bounds connect() when the backlog is full */
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        return unavailable(err, errno, "connect");
    set_send_timeout(fd, 0);
    if (peer && check_peer(fd, peer->pid, err) < 0)
        return -1;
    if (peer && peer->token && check_token(fd, peer->token, timeout_ms, err) < 0)
        return -1;
    return steal_fd(&fd);
}

void agentc_close(int fd)
{
    if (fd < 0)
        return;
    /* Our end of the stream ends: the agent's side sees EOF, finishes and closes. */
    shutdown(fd, SHUT_WR);
    double deadline = now_mono_ms() + 2000;
    char buf[4096];
    size_t drained = 0;
    for (;;) {
        int left = (int)(deadline - now_mono_ms());
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, left) <= 0)
            break;
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            break; /* closed on its side */
        if (n > 0 && (drained += (size_t)n) > (1u << 20))
            break; /* it keeps talking: give up waiting */
    }
    close(fd);
}

void agentc_closep(int *fd)
{
    agentc_close(*fd);
}

/* One PING/PONG exchange on a new connection. */
static int ping_once(int dirfd, const char *name, const struct agentc_peer *pid, double deadline,
                     err_t *err)
{
    int left = (int)(deadline - now_mono_ms()) + 1;
    _cleanup_agentc_ int fd = agentc_connect(dirfd, name, pid, left, err);
    if (fd < 0)
        return -1;
    agentc_reader_t r;
    struct agent_frame f;
    agentc_reader_init(&r);
    int rc = agentc_send(fd, AGENT_PING, NULL, 0, err);
    if (rc == 0)
        rc = agentc_read_frame(fd, &r, &f, deadline, err);
    if (rc == 0 && f.type != AGENT_PONG)
        rc = err_set(err, ERR_RUNTIME, 0, "agent_protocol", "agent answered PING with 0x%02x",
                     f.type);
    agentc_reader_free(&r);
    return rc;
}

int agentc_wait_ready(int dirfd, const char *name, const struct agentc_peer *expected_pid,
                      int timeout_ms, err_t *err)
{
    double deadline = now_mono_ms() + timeout_ms;
    long sleep_us = 1000;
    for (int attempt = 0;; attempt++) {
        if (ping_once(dirfd, name, expected_pid, deadline, err) == 0)
            return 0;
        if (now_mono_ms() >= deadline)
            return err_prefix(err, "agent not ready after %d ms", timeout_ms);
        struct timespec ts = {0, sleep_us * 1000};
        nanosleep(&ts, NULL);
        if (attempt >= 20 && sleep_us < 10000)
            sleep_us += sleep_us / 2;
    }
}

int agentc_send(int fd, uint8_t type, const void *payload, size_t len, err_t *err)
{
    uint8_t hdr[AGENT_HEADER_LEN];
    if (len > AGENT_MAX_FRAME)
        return err_set(err, ERR_INTERNAL, 0, "internal", "agent frame of %zu bytes", len);
    agent_frame_header(hdr, type, (uint32_t)len);
    const void *parts[2] = {hdr, payload};
    size_t sizes[2] = {sizeof(hdr), len};
    for (int i = 0; i < 2; i++) {
        const char *p = parts[i];
        size_t n = sizes[i];
        while (n > 0) {
            ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0)
                return unavailable(err, errno, "send");
            p += w;
            n -= (size_t)w;
        }
    }
    return 0;
}

void agentc_reader_init(agentc_reader_t *r)
{
    *r = (agentc_reader_t){0};
}

void agentc_reader_free(agentc_reader_t *r)
{
    free(r->data);
    *r = (agentc_reader_t){0};
}

/* Drop the bytes of frames already returned. */
static void compact(agentc_reader_t *r)
{
    if (r->off == 0)
        return;
    memmove(r->data, r->data + r->off, r->len - r->off);
    r->len -= r->off;
    r->off = 0;
}

size_t agentc_reader_space(agentc_reader_t *r, size_t n)
{
    compact(r);
    if (n > READER_MAX - r->len)
        n = READER_MAX - r->len;
    if (r->cap - r->len < n) {
        size_t cap = r->cap ? r->cap : READ_CHUNK;
        while (cap - r->len < n)
            cap *= 2;
        r->cap = cap < READER_MAX ? cap : READER_MAX;
        r->data = xrealloc(r->data, r->cap);
    }
    return n;
}

void agentc_reader_feed(agentc_reader_t *r, const void *p, size_t n)
{
    compact(r);
    if (r->cap - r->len < n) {
        r->cap = r->len + n;
        r->data = xrealloc(r->data, r->cap);
    }
    memcpy(r->data + r->len, p, n);
    r->len += n;
}

int agentc_reader_next(agentc_reader_t *r, struct agent_frame *f)
{
    size_t used;
    compact(r);
    int rc = agent_frame_parse(r->data, r->len, f, &used);
    if (rc == AGENT_PARSE_COMPLETE)
        r->off = used;
    return rc;
}

/* Wait for fd to be readable until deadline; -1 with err on timeout. */
static int wait_readable(int fd, double deadline, err_t *err)
{
    for (;;) {
        int ms = -1;
        if (deadline > 0) {
            double left = deadline - now_mono_ms();
            if (left <= 0)
                return err_set(err, ERR_RUNTIME, 0, "agent_timeout", "the agent did not answer");
            ms = (int)left + 1;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, ms);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return unavailable(err, errno, "poll");
    }
}

int agentc_read_frame(int fd, agentc_reader_t *r, struct agent_frame *f, double deadline_ms,
                      err_t *err)
{
    for (;;) {
        int rc = agentc_reader_next(r, f);
        if (rc == AGENT_PARSE_COMPLETE)
            return 0;
        if (rc == AGENT_PARSE_INVALID)
            return err_set(err, ERR_RUNTIME, 0, "agent_protocol", "invalid frame from the agent");
        if (wait_readable(fd, deadline_ms, err) < 0)
            return -1;
        size_t room = agentc_reader_space(r, READ_CHUNK);
        ssize_t n = recv(fd, r->data + r->len, room, MSG_DONTWAIT);
        if (n == 0)
            return unavailable(err, 0, "the agent closed the connection");
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return unavailable(err, errno, "recv");
        if (n > 0)
            r->len += (size_t)n;
    }
}
