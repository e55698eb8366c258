/*
 * The daemon's client of sandboxer-agent (protocol: agent/protocol.h, docs/agent-protocol.md).
 *
 * Everything read from the agent is untrusted: a sandbox may replace its agent with a hostile
 * program. So the socket is opened without following links (security invariant 1), the peer
 * is checked by pid, every frame is bounded by AGENT_MAX_FRAME, payloads are decoded strictly,
 * and every wait has a deadline.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent/protocol.h"
#include "common/error.h"

/* --- connecting ------------------------------------------------------------------------- */

/*
 * Connect to the agent socket `name` (one path component) in the directory dirfd (opened by
 * the caller with O_DIRECTORY|O_NOFOLLOW), without following any link the sandbox may have
 * planted: O_PATH|O_NOFOLLOW, must be a socket, connected through /proc/self/fd/N. Then the
 * listening peer must be expected_pid (the container init's host pid; <= 0 skips the check).
 * Returns a connected, blocking, O_CLOEXEC socket, or -1 with ERR_RUNTIME "agent_unavailable".
 */
int agentc_connect(int dirfd, const char *name, pid_t expected_pid, int timeout_ms, err_t *err);

/*
 * Poll until the agent answers a PING (right after the container starts): retries every
 * millisecond at first, backing off to 10 ms. -1 with "agent_unavailable" after timeout_ms.
 */
int agentc_wait_ready(int dirfd, const char *name, pid_t expected_pid, int timeout_ms, err_t *err);

/* --- frames ----------------------------------------------------------------------------- */

/* Send one frame (blocking, no SIGPIPE). len must be <= AGENT_MAX_FRAME. */
int agentc_send(int fd, uint8_t type, const void *payload, size_t len, err_t *err);

/* An incremental frame reader over a byte buffer that never holds more than one frame plus
 * one read: caller-owned, zero-initialised or agentc_reader_init'ed. */
typedef struct {
    uint8_t *data;
    size_t len; /* bytes held */
    size_t off; /* bytes of data already returned as frames */
    size_t cap;
} agentc_reader_t;

/* Initialise an empty reader. */
void agentc_reader_init(agentc_reader_t *r);
/* Free the reader's buffer. */
void agentc_reader_free(agentc_reader_t *r);
/* Room for at least n more bytes at data + len (bounded); returns how many fit. */
size_t agentc_reader_space(agentc_reader_t *r, size_t n);
/* Append n bytes (n <= what agentc_reader_space granted, or any n from tests/fuzzers). */
void agentc_reader_feed(agentc_reader_t *r, const void *p, size_t n);
/*
 * The next frame: AGENT_PARSE_COMPLETE (*f valid until the next call), AGENT_PARSE_INCOMPLETE
 * (feed more) or AGENT_PARSE_INVALID (oversize length or type 0: drop the connection).
 */
int agentc_reader_next(agentc_reader_t *r, struct agent_frame *f);

/*
 * Read from fd until a frame is complete. deadline_ms is absolute (now_mono_ms() clock),
 * 0 for none. -1 with ERR_RUNTIME: "agent_protocol" (invalid frame), "agent_timeout",
 * "agent_unavailable" (the connection closed).
 */
int agentc_read_frame(int fd, agentc_reader_t *r, struct agent_frame *f, double deadline_ms,
                      err_t *err);

/* --- payloads --------------------------------------------------------------------------- */

/* An EXIT frame. */
struct agentc_exit {
    int exit_code;  /* 0-255; 128 + signal when killed */
    int signal;     /* 0 if it exited normally */
    bool timed_out; /* killed by the agent because timeout_ms passed */
};

/* Decode EXIT: {"exit_code": 0-255, "signal": 1-64|null, "timed_out": bool}. */
int agentc_decode_exit(const struct agent_frame *f, struct agentc_exit *out, err_t *err);
/* Decode STARTED: {"pid": N}, N >= 1. */
int agentc_decode_started(const struct agent_frame *f, pid_t *pid, err_t *err);
/*
 * Decode ERROR: {"code": "...", "message": "..."}. The code is reduced to [a-z0-9_] (else
 * "agent_error"), the message truncated and stripped of control characters.
 */
int agentc_decode_error(const struct agent_frame *f, char *code, size_t code_size, char *msg,
                        size_t msg_size, err_t *err);

/* --- exec ------------------------------------------------------------------------------- */

/* One exec request. */
struct agentc_exec_req {
    const char *const *argv; /* NULL-terminated, at least one non-empty string */
    const char *const *env;  /* NULL-terminated "K=V", merged over the agent's; or NULL */
    const char *cwd;         /* NULL: the agent's --workdir, else its cwd */
    const char *user;        /* "name|uid[:group|gid]"; NULL: the agent's --user, else root */
    bool tty;                /* a PTY: all output comes as STDOUT */
    uint16_t cols, rows;     /* tty: the initial size (0: 80 × 24) */
    int64_t timeout_ms;      /* > 0: the agent SIGKILLs the process group after it */
    bool stdin_pipe;         /* give the process a stdin pipe (else /dev/null) */
    const void *stdin_data;  /* agentc_exec: written to the pipe, which then closes */
    size_t stdin_len;
};

/* What became of an exec. */
struct agentc_exec_result {
    pid_t pid; /* in the sandbox's pid namespace; 0 if it never started */
    struct agentc_exit exit;
    char error_code[32]; /* "not_found" (exit 127) / "permission" (126), else empty */
    char error_msg[256];
};

/* Output callback: type is AGENT_STDOUT or AGENT_STDERR. Non-zero aborts the exec. */
typedef int (*agentc_output_fn)(void *data, uint8_t type, const uint8_t *p, size_t n);

/* The EXEC payload for req as a malloc'd JSON string. -1 (ERR_INVALID) on a bad request. */
int agentc_encode_exec(const struct agentc_exec_req *req, char **json, err_t *err);
/* Send the EXEC frame for req; for interactive use (PTY websockets) with agentc_send. */
int agentc_send_exec(int fd, const struct agentc_exec_req *req, err_t *err);

/*
 * Run req on a fresh connection fd: send EXEC (and the stdin bytes, interleaved with reading
 * so neither side can block the other), pass output chunks to on_output as they come, and
 * fill res from the EXIT frame. An exec that could not start because the program is missing
 * or not executable also returns 0, with exit codes 127/126 and error_code set. Other agent
 * ERRORs return -1 (ERR_INVALID for "invalid", "bad_cwd", "bad_user"; ERR_RUNTIME else).
 * wait_ms bounds the whole exchange (0: no bound; pass the exec timeout plus a margin):
 * past it, -1 with "agent_timeout". Close fd afterwards: the agent kills the process group
 * of an exec whose connection closes.
 */
int agentc_exec(int fd, const struct agentc_exec_req *req, agentc_output_fn on_output, void *data,
                int wait_ms, struct agentc_exec_result *res, err_t *err);
