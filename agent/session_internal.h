/* Shared between session.c (the pump loop) and session_req.c (requests and frames). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent.h"
#include "common/buf.h"

/* One connection and the process it started. */
struct session {
    const struct agent_config *cfg;
    int sock, sigfd, timerfd;
    buf_t in;  /* bytes from the client not yet parsed */
    buf_t out; /* frames for the client not yet written */
    size_t out_off;
    buf_t stdin_q; /* bytes for the process's stdin not yet written */
    size_t stdin_off;
    bool stdin_eof;                    /* STDIN_EOF seen: close the pipe once stdin_q is written */
    pid_t pid;                         /* the process, its process group and its session */
    int out_fd, err_fd, in_fd, master; /* master: the PTY (tty execs), else -1 */
    bool tty, exited, timed_out;
    int status; /* waitpid status once exited */
};

/* Send an ERROR frame after any queued output, kill the process if any, and exit. */
__attribute__((noreturn)) void session_fail(struct session *s, const char *code, const char *msg);
/* Queue one frame for the client and write what the socket takes now. */
void session_queue(struct session *s, uint8_t type, const void *p, size_t n);
/* Handle STDIN_EOF. */
void session_stdin_eof(struct session *s);
/* Read once from the client into s->in; the read's result (0 at EOF). */
ssize_t session_read_client(struct session *s);
/* Handle every complete frame in s->in while an exec runs. */
void session_handle_frames(struct session *s);
/* Serve HELLO/PING until an EXEC starts a process (returns), a files request was served or
 * the client leaves (both exit). */
void session_serve_requests(struct session *s);

/* files.c: true for the request types served by the files code (STAT ... RENAME). */
bool agent_files_handles(uint8_t type);
/* Serve one files request (payload: a copy of its frame's), as its user; then exit. */
__attribute__((noreturn)) void agent_files_serve(struct session *s, uint8_t type,
                                                 const char *payload, size_t len);
