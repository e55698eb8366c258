/* Small fd and frame helpers of the agent. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"
#include "agent/protocol.h"
#include "common/cleanup.h"
#include "common/jsonx.h"

int agent_set_nonblock(int fd, bool on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -1;
    return fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

int agent_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
                return -1;
            continue;
        }
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int agent_send_frame(int fd, uint8_t type, const void *payload, size_t len)
{
    uint8_t hdr[AGENT_HEADER_LEN];
    agent_frame_header(hdr, type, (uint32_t)len);
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)payload, len}};
    ssize_t w;
    do {
        w = writev(fd, iov, len ? 2 : 1);
    } while (w < 0 && errno == EINTR);
    if (w < 0 && errno != EAGAIN)
        return -1;
    size_t done = w < 0 ? 0 : (size_t)w;
    if (done < sizeof(hdr) && agent_write_all(fd, hdr + done, sizeof(hdr) - done) < 0)
        return -1;
    size_t pdone = done > sizeof(hdr) ? done - sizeof(hdr) : 0;
    return agent_write_all(fd, (const char *)payload + pdone, len - pdone);
}

int agent_send_error(int fd, const char *code, const char *message)
{
    _cleanup_json_ json_t *j = json_object();
    json_object_set_new(j, "code", json_string_lossy(code, strlen(code)));
    json_object_set_new(j, "message", json_string_lossy(message, strlen(message)));
    _cleanup_free_ char *s = json_dump_compact(j);
    return agent_send_frame(fd, AGENT_ERROR, s, strlen(s));
}

int agent_listen(const char *path)
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
    /* umask during bind: there is no window in which the socket has wider bits. */
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

size_t agent_exit_json(char *out, size_t size, int status, bool timed_out)
{
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    int code = sig ? 128 + sig : WEXITSTATUS(status);
    char sigtext[16] = "null";
    if (sig)
        snprintf(sigtext, sizeof(sigtext), "%d", sig);
    int n = snprintf(out, size, "{\"exit_code\":%d,\"signal\":%s,\"timed_out\":%s}", code, sigtext,
                     timed_out ? "true" : "false");
    return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

void agent_warn(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    /* One write so concurrent lines from sessions do not interleave. */
    char out[1100];
    int m = snprintf(out, sizeof(out), "sandboxer-agent: %.*s", n, line);
    if (m > 0)
        (void)!write(2, out, (size_t)m < sizeof(out) ? (size_t)m : sizeof(out) - 1);
}
