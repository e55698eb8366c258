/*
 * libFuzzer target over what a (possibly hostile) agent sends on procs.sock: the input is
 * the agent's byte stream. It goes through the frame reader with every procs payload
 * decoder (PROCESS, OUTPUT_INFO, ERROR mapping), then over a socketpair as the answer to
 * each procs request (start, list, get, signal, resize, stdin, delete, output), whose
 * results must keep their promises: bounded lists, output within max and consistent with
 * its cursor, records that are JSON objects.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agentc/agent_procs.h"
#include "common/cleanup.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_proc(const struct agentc_proc *p)
{
    if (!json_is_object(p->json) || p->pid < 1 || p->output_start > p->output_end ||
        (p->running && p->exit_code != -1) ||
        (!p->running && (p->exit_code < 0 || p->exit_code > 255)))
        abort();
}

static void decode_all(const struct agent_frame *f)
{
    struct agent_frame as = *f;
    struct agentc_proc p;
    uint64_t cursor, dropped;
    as.type = AGENT_PROCESS;
    if (agentc_decode_process(&as, &p, NULL) == 0) {
        check_proc(&p);
        agentc_proc_free(&p);
    }
    as.type = AGENT_OUTPUT_INFO;
    if (agentc_decode_output_info(&as, &cursor, &dropped, NULL) == 0 && dropped > cursor)
        abort();
    as.type = AGENT_ERROR;
    (void)agentc_proc_error(&as, NULL);
}

static void through_reader(const uint8_t *data, size_t size)
{
    agentc_reader_t r;
    struct agent_frame f;
    agentc_reader_init(&r);
    for (size_t off = 0; off < size;) {
        size_t n = size - off < 17 ? size - off : 17;
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

/* A socketpair whose far end already sent data and shut its write side. */
static int agent_stream(const uint8_t *data, size_t size, int *far)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    int sz = 4 * 1024 * 1024;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    if (send(sv[1], data, size, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)size) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    shutdown(sv[1], SHUT_WR);
    *far = sv[1];
    return sv[0];
}

static void check_output(const struct agentc_output_req *req, const struct agentc_output *o)
{
    size_t total = 0;
    if (o->data.len > req->max || o->cursor != req->cursor + o->dropped)
        abort();
    for (size_t i = 0; i < o->nchunks; i++) {
        if (o->chunks[i].off != total || (o->chunks[i].stream != 1 && o->chunks[i].stream != 2))
            abort();
        total += o->chunks[i].len;
    }
    if (total != o->data.len || o->proc.pid != req->pid)
        abort();
    check_proc(&o->proc);
}

static void one_request(int fd, int op)
{
    err_t err = {0};
    struct agentc_proc p = {0};
    const char *argv[] = {"sh", "-c", "true", NULL};
    struct agentc_proc_start start = {.exec = {.argv = argv}, .tag = "t"};
    struct agentc_output_req oreq = {.pid = 42, .cursor = 7, .max = 4096, .timeout_ms = 1000};
    struct agentc_output out = {0};
    json_t *list;
    int rc = -1;
    switch (op) {
    case 0:
        rc = agentc_proc_start(fd, &start, 1000, &p, &err);
        break;
    case 1:
        list = agentc_proc_list(fd, 1000, &err);
        if (list && json_array_size(list) > AGENT_PROCS_RUNNING + AGENT_PROCS_EXITED)
            abort();
        json_decref(list);
        break;
    case 2:
        rc = agentc_proc_get(fd, 42, 1000, &p, &err);
        break;
    case 3:
        rc = agentc_proc_signal(fd, 42, 15, 1000, &p, &err);
        break;
    case 4:
        rc = agentc_proc_stdin(fd, 42, "x", 1, true, 1000, &p, &err);
        break;
    case 5:
        (void)agentc_proc_delete(fd, 42, 1000, &err);
        break;
    default:
        if (agentc_proc_output(fd, &oreq, &out, &err) == 0)
            check_output(&oreq, &out);
        agentc_output_free(&out);
    }
    if (rc == 0)
        check_proc(&p);
    agentc_proc_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    through_reader(data, size);
    for (int op = 0; op < 7; op++) {
        int far, fd = agent_stream(data, size, &far);
        if (fd < 0)
            break;
        one_request(fd, op);
        close(fd);
        close(far);
    }
    return 0;
}
