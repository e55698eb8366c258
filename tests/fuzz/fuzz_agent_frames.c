/*
 * libFuzzer target over what a (possibly hostile) agent sends the daemon: the input is the
 * agent's byte stream. It goes through the incremental frame reader in odd-sized chunks,
 * every frame's payload through the EXIT/STARTED/ERROR/RESIZE decoders, the files decoders
 * (FILE_INFO, DIR_ENTRIES, LIST's FILE_END, OK, ERROR mapping) and the path normaliser (with
 * its invariants checked), and then the whole stream over a socketpair as the answer to an
 * exec and to each files request (stat, list, read, write, delete).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
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
    (void)agentc_file_error(&as, NULL);
    (void)agent_resize_decode(f, &cols, &rows);
}

/* The files payload decoders; what they accept must come out well-formed. */
static void decode_files(const struct agent_frame *f)
{
    struct agent_frame as = *f;
    struct agentc_file_info info;
    struct agentc_ok okv;
    bool truncated = false;
    as.type = AGENT_FILE_INFO;
    if (agentc_decode_file_info(&as, "/dir/name", &info, NULL) == 0) {
        if (!json_is_object(info.json) || info.mode > 07777 || !info.type)
            abort();
        agentc_file_info_free(&info);
    }
    as.type = AGENT_DIR_ENTRIES;
    json_t *entries = json_array();
    if (agentc_decode_dir_entries(&as, "/dir", entries, 16, &truncated, NULL) == 0 &&
        json_array_size(entries) > 16)
        abort();
    json_decref(entries);
    as.type = AGENT_FILE_END;
    (void)agentc_decode_list_end(&as, &truncated, NULL);
    as.type = AGENT_OK;
    (void)agentc_decode_ok(&as, &okv, NULL);
}

/* The normaliser: absolute, no empty, "." or ".." component, no trailing slash, idempotent. */
static void check_normalize(const uint8_t *data, size_t size)
{
    char out[AGENT_PATH_MAX], again[AGENT_PATH_MAX];
    int n = agent_path_normalize((const char *)data, size, out, sizeof(out));
    if (n < 0)
        return;
    if (out[0] != '/' || (size_t)n != strlen(out) || strstr(out, "//") || strstr(out, "/./") ||
        strstr(out, "/../") || (n > 1 && out[n - 1] == '/') ||
        (n >= 2 && strcmp(out + n - 2, "/.") == 0) || (n >= 3 && strcmp(out + n - 3, "/..") == 0))
        abort();
    if (agent_path_normalize(out, (size_t)n, again, sizeof(again)) != n || strcmp(out, again))
        abort();
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
        while ((rc = agentc_reader_next(&r, &f)) == AGENT_PARSE_COMPLETE) {
            decode_all(&f);
            decode_files(&f);
        }
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

/* A socketpair whose far end already sent data and then shut its write side: the client
 * reads the stream then EOF, and can still send its request. -1 if it cannot be set up. */
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

static int discard(void *data, const uint8_t *p, size_t n)
{
    *(size_t *)data += n;
    return 0;
}

static int on_info(void *data, const struct agentc_file_info *info)
{
    return info->json ? 0 : 1;
}

static int do_write(int fd, const struct agentc_file_req *req, err_t *err)
{
    agentc_writer_t w;
    if (agentc_write_begin(fd, req, &w, err) < 0)
        return -1;
    if (agentc_write_chunk(&w, "x", 1, err) < 0) {
        agentc_write_abort(&w);
        return -1;
    }
    return agentc_write_end(&w, NULL, err);
}

/* The stream as the agent's answer to each files request. */
static void through_files(const uint8_t *data, size_t size)
{
    struct agentc_file_req req = {.path = "/dir/../dir/name", .timeout_ms = 1000, .length = 9};
    for (int op = 0; op < 5; op++) {
        int far;
        int fd = agent_stream(data, size, &far);
        if (fd < 0)
            return;
        err_t err = {0};
        struct agentc_file_info info;
        size_t total = 0;
        json_t *list;
        switch (op) {
        case 0:
            if (agentc_stat(fd, &req, &info, &err) == 0)
                agentc_file_info_free(&info);
            break;
        case 1:
            list = agentc_list(fd, &req, NULL, &err);
            if (list && json_array_size(list) > AGENTC_LIST_MAX)
                abort();
            json_decref(list);
            break;
        case 2:
            if (agentc_read(fd, &req, on_info, discard, &total, &err) == 0 && total > 9)
                abort();
            break;
        case 3:
            (void)do_write(fd, &req, &err);
            break;
        case 4:
            (void)agentc_delete(fd, &req, &err);
            break;
        }
        close(fd);
        close(far);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    through_reader(data, size);
    through_exec(data, size);
    through_files(data, size);
    check_normalize(data, size);
    return 0;
}
