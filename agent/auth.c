/*
 * The agent's proof of itself under gVisor (--auth-stdin). There, the host sees every socket
 * the sandbox binds as served by the container's gofer, so SO_PEERCRED cannot tell the agent
 * from another process of the sandbox listening at its path. So the agent reads a token from
 * its stdin at start (the shim feeds it; it is in no file, argument or environment the
 * sandbox sees) and answers AUTH with it, and only to peers on the host: a process of the
 * sandbox that took the socket's path and relays the daemon's AUTH to the real agent is
 * refused (see agent_auth_gate).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent.h"
#include "common/util.h"

static char token[AGENT_TOKEN_LEN + 1];

int agent_auth_load(void)
{
    size_t n = 0;
    while (n < AGENT_TOKEN_LEN) {
        ssize_t r = read(0, token + n, AGENT_TOKEN_LEN - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    token[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (!((token[i] >= '0' && token[i] <= '9') || (token[i] >= 'a' && token[i] <= 'f')))
            n = 0;
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, 0); /* nothing else of the sandbox ever reads the pipe */
        close(null);
    }
    if (n != AGENT_TOKEN_LEN) {
        token[0] = '\0';
        return -1;
    }
    /* Nothing in the sandbox may read the token out of PID 1's memory (/proc/1/mem, ptrace):
     * the sandbox's root lacks CAP_SYS_PTRACE, which a non-dumpable process demands. */
    prctl(PR_SET_DUMPABLE, 0);
    return 0;
}

bool agent_auth_on(void)
{
    return token[0] != '\0';
}

/*
 * Is the peer of fd on the host? gVisor backs a connection from the host with a host socket,
 * which refuses to send while SO_PASSCRED is set (EINVAL): there is no host peer to pass
 * credentials to. A connection from inside the sandbox sends. So the refusal is sent with
 * SO_PASSCRED on: an inside peer receives it and is dropped; for the host nothing went out.
 * If a gVisor ever sent it, the daemon would get ERROR instead of AUTH_OK and refuse the
 * agent: the check fails closed.
 */
static bool peer_on_host(int fd)
{
    static const char forbidden[] =
        "{\"code\":\"forbidden\",\"message\":\"the agent answers the host only\"}";
    uint8_t frame[AGENT_HEADER_LEN + sizeof(forbidden) - 1];
    agent_frame_header(frame, AGENT_ERROR, sizeof(forbidden) - 1);
    memcpy(frame + AGENT_HEADER_LEN, forbidden, sizeof(forbidden) - 1);
    int on = 1, off = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) < 0)
        return false;
    ssize_t w = send(fd, frame, sizeof(frame), MSG_DONTWAIT | MSG_NOSIGNAL);
    int errnum = errno;
    setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &off, sizeof(off));
    return w < 0 && errnum == EINVAL;
}

int agent_auth_gate(int fd, int timeout_ms)
{
    if (!agent_auth_on())
        return 0;
    uint8_t hdr[AGENT_HEADER_LEN];
    if (recv_exact(fd, hdr, sizeof(hdr), now_mono_ms() + timeout_ms) < 0)
        return -1;
    struct agent_frame f;
    size_t used;
    if (agent_frame_parse(hdr, sizeof(hdr), &f, &used) != AGENT_PARSE_COMPLETE ||
        f.type != AGENT_AUTH || f.len != 0)
        return -1;
    if (!peer_on_host(fd))
        return -1;
    return agent_send_frame(fd, AGENT_AUTH_OK, token, AGENT_TOKEN_LEN);
}
