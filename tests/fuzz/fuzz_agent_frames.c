/*
 * libFuzzer target over what a (possibly hostile) agent sends the daemon: the input is the
 * agent's byte stream. It goes through the incremental frame reader in odd-sized chunks,
 * every frame's payload through the EXIT/STARTED/ERROR/RESIZE decoders, and then the whole
 * stream through agentc_exec over a socketpair, as the answer to an exec.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agentc/agent_client.h"
#include "common/cleanup.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void decode_all(const struct agent_frame *f)
{
    struct agent_frame as = *f;
    struct agentc_exit e;
    pid_t pid;
    char code[32], msg[256];
    uint16_t cols, rows;
    as.type = AGENT_EXIT;
    (void)agentc_decode_exit(&as, &e, NULL);
    as.type = AGENT_STARTED;
    (void)agentc_decode_started(&as, &pid, NULL);
    as.type = AGENT_ERROR;
    (void)agentc_decode_error(&as, code, sizeof(code), msg, sizeof(msg), NULL);
    (void)agent_resize_decode(f, &cols, &rows);
}

static void through_reader(const uint8_t *data, size_t size)
{
    agentc_reader_t r;
    struct agent_frame f;
    agentc_reader_init(&r);
    for (size_t off = 0; off < size;) {
        size_t n = size - off < 13 ? size - off : 13;
        agentc_reader_feed(&r, data + off, n);
        off += n;
        int rc;
        while ((rc = agentc_reader_next(&r, &f)) == AGENT_PARSE_COMPLETE)
            decode_all(&f);
        if (rc == AGENT_PARSE_INVALID)
            break;
    }
    agentc_reader_free(&r);
}

static int sink(void *data, uint8_t type, const uint8_t *p, size_t n)
{
    *(size_t *)data += n;
    return 0;
}

/* The stream as the agent's answer to an exec; it must end without hanging. */
static void through_exec(const uint8_t *data, size_t size)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return;
    int sz = 4 * 1024 * 1024;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    if (send(sv[1], data, size, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)size) {
        close(sv[0]);
        close(sv[1]);
        return;
    }
    close(sv[1]);
    const char *argv[] = {"true", NULL};
    struct agentc_exec_req req = {
        .argv = argv, .stdin_pipe = true, .stdin_data = "x", .stdin_len = 1};
    struct agentc_exec_result res;
    size_t total = 0;
    err_t err = {0};
    (void)agentc_exec(sv[0], &req, sink, &total, 1000, &res, &err);
    close(sv[0]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    through_reader(data, size);
    through_exec(data, size);
    return 0;
}
