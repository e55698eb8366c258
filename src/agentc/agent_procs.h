/*
 * The daemon's client of procs.sock: background processes owned by a sandbox's agent
 * (docs/agent-protocol.md, "Processes"). Each call takes a fresh connection from
 * agentc_connect(dirfd, AGENT_PROCS_SOCKET, init_pid, ...), sends one request and reads the
 * answer until the agent closes (so the agent has let go of the connection when the call
 * returns: a checkpoint right after finds none). The caller closes fd afterwards.
 *
 * What the agent sends is untrusted: records are decoded strictly and rebuilt from the
 * validated values; OUTPUT answers are checked against the request (cursor, sizes, pid).
 *
 * Agent ERROR codes become err kinds: no_process → ERR_NOT_FOUND "process_not_found";
 * too_many → ERR_LIMIT "too_many_processes"; cursor_future → ERR_INVALID
 * "invalid_cursor"; exited → ERR_CONFLICT "process_exited"; not_tty → ERR_CONFLICT
 * "not_a_tty"; no_stdin → ERR_CONFLICT "stdin_closed"; stdin_full → ERR_LIMIT
 * "stdin_full"; invalid, bad_cwd, bad_user → ERR_INVALID with that code; busy → ERR_LIMIT
 * "agent_busy"; too_large → ERR_TOO_LARGE; unsupported → ERR_CONFLICT "unsupported";
 * anything else → ERR_RUNTIME "agent_error".
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "agentc/agent_client.h"
#include "common/buf.h"

#define AGENTC_PROCS_TIMEOUT_MS 10000 /* default bound of every wait for an answer */

/* A background process as the agent reported it, validated. */
struct agentc_proc {
    pid_t pid;
    bool running;                      /* status "running" (else "exited") */
    bool tty, stdin_open;              /* a PTY; stdin can still be sent */
    bool timed_out;                    /* killed at its START's timeout */
    int exit_code;                     /* exited: 0-255 (128 + signal when killed); else -1 */
    int signal;                        /* exited by a signal: 1-64; else 0 */
    uint64_t output_start, output_end; /* the cursors of the output the agent keeps */
    json_t *json; /* owned: {pid, command, argv, argv_truncated, tag, tty, stdin, status,
                     exit_code, signal, started_at, ended_at, output_start, output_end,
                     timed_out} */
};

/* Release p->json. */
void agentc_proc_free(struct agentc_proc *p);
/* Decode a PROCESS frame (strict; unknown members ignored). */
int agentc_decode_process(const struct agent_frame *f, struct agentc_proc *out, err_t *err);
/* Decode OUTPUT_INFO {"cursor", "dropped"} (both integers in [0, 2^62]). */
int agentc_decode_output_info(const struct agent_frame *f, uint64_t *cursor, uint64_t *dropped,
                              err_t *err);
/* Map an ERROR frame from procs.sock to err (see above); always returns -1. */
int agentc_proc_error(const struct agent_frame *f, err_t *err);

/* PROC_START: a process started as exec would start it, owned by the agent. */
struct agentc_proc_start {
    struct agentc_exec_req exec; /* argv, env, cwd, user, tty, cols, rows, stdin_pipe,
                                    timeout_ms (the agent SIGKILLs the process group that
                                    long after the start, wall-clock time; not stdin_data,
                                    cancel_fd) */
    const char *tag;             /* NULL, or at most 256 bytes */
    const char *command;         /* what a record shows (NULL: argv joined) */
};

/*
 * Start it: *out is its record once exec happened (or failed: a missing program is a
 * record with exit_code 127 and the reason in its output; a bad cwd or user is
 * ERR_INVALID).
 */
int agentc_proc_start(int fd, const struct agentc_proc_start *req, int timeout_ms,
                      struct agentc_proc *out, err_t *err);
/* PS: a new JSON array of the records, oldest first (at most AGENT_PROCS_RUNNING +
 * AGENT_PROCS_EXITED). */
json_t *agentc_proc_list(int fd, int timeout_ms, err_t *err);
/* PROC_GET. */
int agentc_proc_get(int fd, pid_t pid, int timeout_ms, struct agentc_proc *out, err_t *err);
/* PROC_SIGNAL: sig (1-64) to the process's group; *out (may be NULL) the record. */
int agentc_proc_signal(int fd, pid_t pid, int sig, int timeout_ms, struct agentc_proc *out,
                       err_t *err);
/* PROC_RESIZE a PTY process's terminal. */
int agentc_proc_resize(int fd, pid_t pid, uint16_t cols, uint16_t rows, int timeout_ms,
                       struct agentc_proc *out, err_t *err);
/* PROC_STDIN: n <= AGENT_PROCS_STDIN_MAX bytes, then with eof the end of stdin. */
int agentc_proc_stdin(int fd, pid_t pid, const void *p, size_t n, bool eof, int timeout_ms,
                      struct agentc_proc *out, err_t *err);
/* PROC_DELETE: SIGKILL its group (if it runs) and forget it. */
int agentc_proc_delete(int fd, pid_t pid, int timeout_ms, err_t *err);

/* PROC_OUTPUT. */
struct agentc_output_req {
    pid_t pid;
    uint64_t cursor; /* the first byte wanted; past the end is ERR_INVALID "invalid_cursor" */
    size_t max;      /* at most this many bytes (1 .. AGENT_PROCS_OUTPUT_MAX; 0: 256 KiB) */
    int wait_ms;     /* with nothing after cursor, wait this long for some (<= 10000) */
    /* Polled every 50 ms while the agent waits: true cuts the wait short (the socket is
     * half-closed, the agent answers at once). NULL: never. */
    bool (*cut)(void *arg);
    void *cut_arg;
    int timeout_ms; /* bound of the exchange beyond wait_ms; 0: AGENTC_PROCS_TIMEOUT_MS */
};

/* One stretch of one stream in agentc_output's data. */
struct agentc_output_chunk {
    uint8_t stream; /* 1 stdout, 2 stderr */
    size_t off, len;
};

/* OUTPUT's answer. */
struct agentc_output {
    uint64_t cursor;  /* where data starts: the request's cursor plus dropped */
    uint64_t dropped; /* bytes before it the agent no longer keeps */
    buf_t data;       /* the bytes, cursor .. cursor + data.len */
    struct agentc_output_chunk *chunks;
    size_t nchunks;
    struct agentc_proc proc; /* the record after the read */
};

/* Release what agentc_proc_output filled. */
void agentc_output_free(struct agentc_output *o);
/* Read output from req->cursor on (waiting, if there is none yet, as the request says). */
int agentc_proc_output(int fd, const struct agentc_output_req *req, struct agentc_output *out,
                       err_t *err);
