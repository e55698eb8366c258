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

#include <jansson.h>

#include "agent/path.h"
#include "agent/protocol.h"
#include "common/error.h"

/* --- connecting ------------------------------------------------------------------------- */

/*
 * Who may serve a sandbox's agent sockets. pid: the host pid SO_PEERCRED must name (runc: the
 * container's init; runsc: its gofer, which listens for every process of the sandbox; <= 0
 * skips the check). token: when set, the agent must also prove itself: the connection starts
 * with AUTH, answered by AUTH_OK carrying this token (the agent read it from its stdin at
 * boot and answers only peers outside its sandbox, see docs/security.md).
 */
struct agentc_peer {
    pid_t pid;
    const char *token;
};

/*
 * Connect to the agent socket `name` (one path component) in the directory dirfd (opened by
 * the caller with O_DIRECTORY|O_NOFOLLOW), without following any link the sandbox may have
 * planted: O_PATH|O_NOFOLLOW, must be a socket, connected through /proc/self/fd/N. Then the
 * listening peer must be peer->pid, and answer AUTH with peer->token when one is set (NULL
 * peer: no check, for tests).
 * Returns a connected, blocking, O_CLOEXEC socket, or -1 with ERR_RUNTIME "agent_unavailable".
 */
int agentc_connect(int dirfd, const char *name, const struct agentc_peer *peer, int timeout_ms,
                   err_t *err);

/*
 * Close a connection to the agent and wait (at most 2 s) until the agent's side has closed
 * too. The process serving it (a session, the console keeper) is then done with it: a
 * checkpoint that follows never meets a socket connected to the host, which CRIU cannot
 * save ("Unix socket ... not found"). fd < 0 is ignored.
 */
void agentc_close(int fd);
/* A cleanup attribute for connections to the agent: agentc_close at the end of the scope. */
#define _cleanup_agentc_ __attribute__((cleanup(agentc_closep)))
void agentc_closep(int *fd);

/*
 * Poll until the agent answers a PING (right after the container starts): retries every
 * millisecond at first, backing off to 10 ms. -1 with "agent_unavailable" after timeout_ms.
 */
int agentc_wait_ready(int dirfd, const char *name, const struct agentc_peer *peer, int timeout_ms,
                      err_t *err);

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
    const int *cancel_fd; /* agentc_exec: NULL, or a socket or pipe end watched for a hangup
                             (the client went away): the exec is then abandoned with
                             ERR_UNAVAILABLE "client_gone" (closing fd kills it) */
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

/* --- files ------------------------------------------------------------------------------ */
/*
 * The files requests, each on a fresh connection from agentc_connect (close it afterwards:
 * a request cut short is abandoned by the agent, a half-written file removed). The agent
 * does the work inside the sandbox's mount namespace, as the request's user, so the kernel
 * applies the sandbox's own symlinks and permissions; the host never resolves these paths.
 *
 * Agent ERROR codes become err kinds: not_found → ERR_NOT_FOUND "file_not_found";
 * permission → ERR_FORBIDDEN "permission_denied"; no_space → ERR_LIMIT "no_space";
 * read_only → ERR_CONFLICT "read_only"; exists → ERR_CONFLICT "file_exists"; in_use →
 * ERR_CONFLICT "in_use"; too_large → ERR_TOO_LARGE "file_too_large"; is_directory,
 * not_directory, special_file, not_empty, invalid_path, invalid, bad_user, cross_device →
 * ERR_INVALID with that code; busy → ERR_LIMIT "agent_busy"; io_error → ERR_RUNTIME
 * "io_error"; anything else → ERR_RUNTIME "agent_error".
 */

#define AGENTC_LIST_MAX        10000 /* entries agentc_list returns at most (the agent's bound) */
#define AGENTC_LIST_MAX_BYTES  (32u * 1024u * 1024u) /* DIR_ENTRIES bytes it reads at most */
#define AGENTC_FILE_TIMEOUT_MS 30000 /* default per-wait bound of the files requests */

/* One files request; each function reads the members it documents and ignores the rest. */
struct agentc_file_req {
    const char *path; /* in the sandbox; relative to "/"; normalised here (agent/path.h) */
    const char *user; /* "name|uid[:group|gid]"; NULL: the agent's --user, else root */
    int timeout_ms;   /* every wait for the agent (an answer, room to send) is bounded by
                         this; 0: AGENTC_FILE_TIMEOUT_MS */
    uint64_t offset;  /* read: the first byte to send */
    uint64_t length;  /* read: at most this many bytes; 0: to the end */
    bool set_mode;    /* write, mkdir: apply mode (else write keeps the mode of the file it
                         replaces, or 0644; mkdir uses 0755) */
    uint32_t mode;    /* permission bits, at most 07777; applied exactly (no umask) */
    bool mkdir;       /* write: create missing parent directories (0755) */
    bool append;      /* write: append to the file in place (not atomic) */
    bool truncate;    /* write: truncate the file and write it in place (not atomic; a
                         watcher sees it written, not replaced: E2B's files) */
    bool recursive;   /* delete: also a non-empty directory, without following symlinks */
    bool parents;     /* mkdir: create missing parents; an existing directory is fine */
    const char *to;   /* rename: the new path (path is the old one) */
    bool no_replace;  /* rename: ERR_CONFLICT "file_exists" rather than replacing `to` */
};

/* A file as the agent reports it (STAT, READ's FILE_INFO, one LIST entry), validated. */
struct agentc_file_info {
    const char *type;        /* "file", "dir", "symlink", "fifo", "socket", "char", "block" */
    bool is_dir;             /* a directory, or a symlink to one */
    uint64_t size;           /* lstat's size (a symlink: the length of its target's name) */
    uint32_t mode;           /* permission bits */
    double mtime;            /* seconds since the epoch */
    uint64_t offset, length; /* read: the range that follows (clamped to the size) */
    json_t *json; /* owned: {name, path, type, is_dir, size, mode: "0644", mtime, and for a
                     symlink link_target, target_type (null if dangling)}, rebuilt from the
                     validated values; name and path come from the request, not the agent */
};

/* Release info->json. */
void agentc_file_info_free(struct agentc_file_info *info);

/* Decode FILE_INFO for the normalised path that was asked (strict; unknown members ignored). */
int agentc_decode_file_info(const struct agent_frame *f, const char *path,
                            struct agentc_file_info *out, err_t *err);
/*
 * Decode one DIR_ENTRIES frame of a listing of the normalised dir: append each entry (as
 * agentc_file_info's json, path = dir + "/" + name) to the array entries while it holds
 * fewer than max; *truncated is set when some had to be dropped.
 */
int agentc_decode_dir_entries(const struct agent_frame *f, const char *dir, json_t *entries,
                              size_t max, bool *truncated, err_t *err);
/* Decode LIST's FILE_END {"truncated": bool}. */
int agentc_decode_list_end(const struct agent_frame *f, bool *truncated, err_t *err);

/* An OK frame: {"path": "...", "size": N, "ready": true}, each member optional. */
struct agentc_ok {
    bool ready;    /* WRITE: the agent is ready for the data */
    bool has_size; /* WRITE's final OK: the bytes written */
    uint64_t size;
};
/* Decode OK. */
int agentc_decode_ok(const struct agent_frame *f, struct agentc_ok *out, err_t *err);
/* Map an ERROR frame of a files request to err (see above); always returns -1. */
int agentc_file_error(const struct agent_frame *f, err_t *err);

/* STAT: what path is (a final symlink is reported as such, with its target's type). */
int agentc_stat(int fd, const struct agentc_file_req *req, struct agentc_file_info *out,
                err_t *err);

/*
 * LIST: a new JSON array of the entries of the directory path (symlinks to directories are
 * followed), sorted by name, at most AGENTC_LIST_MAX; *truncated (may be NULL) says whether
 * the directory held more. Each entry: {name, path, type, is_dir, size, mode, mtime, ...}.
 */
json_t *agentc_list(int fd, const struct agentc_file_req *req, bool *truncated, err_t *err);

/* READ callbacks: non-zero stops the read (-1, ERR_UNAVAILABLE "output_aborted"). */
typedef int (*agentc_info_fn)(void *data, const struct agentc_file_info *info);
typedef int (*agentc_data_fn)(void *data, const uint8_t *p, size_t n);

/*
 * READ: stream the regular file path (symlinks followed). on_info first (may be NULL): the
 * file's info with the range that follows (offset, length: req's range clamped to the size,
 * for Content-Length / Content-Range; info is freed after the call), then on_data per chunk
 * (at most 1 MiB, usually 64 KiB) until exactly info->length bytes came. Memory stays
 * bounded by one frame. A file that shrank meanwhile is ERR_CONFLICT "file_changed" (after
 * the bytes that came); a directory ERR_INVALID "is_directory", a device, fifo or socket
 * ERR_INVALID "special_file".
 */
int agentc_read(int fd, const struct agentc_file_req *req, agentc_info_fn on_info,
                agentc_data_fn on_data, void *data, err_t *err);

/* A streaming WRITE; caller-owned. */
typedef struct {
    int fd;
    int timeout_ms;
    agentc_reader_t reader;
    uint64_t sent; /* bytes passed to agentc_write_chunk so far */
} agentc_writer_t;

/*
 * WRITE, step 1: ask the agent to write path (options: mode, mkdir, append) and wait until
 * it is ready: the temp file exists, so permission, a missing directory, a directory or
 * special file in the way, a read-only or full file system fail here, before any data.
 * After success exactly one of agentc_write_end or agentc_write_abort must follow.
 */
int agentc_write_begin(int fd, const struct agentc_file_req *req, agentc_writer_t *w, err_t *err);
/* WRITE, step 2 (any number of times): send n bytes, in frames of 64 KiB (no copy). Fails
 * with the agent's error as soon as it reports one (e.g. no_space). */
int agentc_write_chunk(agentc_writer_t *w, const void *p, size_t n, err_t *err);
/* WRITE, step 3: the agent fsyncs and renames the file into place; *size (may be NULL) gets
 * the bytes written, checked against what was sent. Frees w. */
int agentc_write_end(agentc_writer_t *w, uint64_t *size, err_t *err);
/* Give up a write (frees w); close the fd, the agent then removes the temp file. */
void agentc_write_abort(agentc_writer_t *w);

/* DELETE path (a symlink itself, not its target); a non-empty directory needs recursive.
 * Deleting "/" is ERR_INVALID "invalid_path". */
int agentc_delete(int fd, const struct agentc_file_req *req, err_t *err);
/* MKDIR path (mode, parents). */
int agentc_mkdir(int fd, const struct agentc_file_req *req, err_t *err);
/* RENAME path to req->to (no_replace). */
int agentc_rename(int fd, const struct agentc_file_req *req, err_t *err);

/* XATTR_SET: set attrs ({"user.…": "value"}) on path. */
int agentc_xattr_set(int fd, const struct agentc_file_req *req, json_t *attrs, err_t *err);
/* XATTR_GET: for each of paths (a JSON array of strings), an object of its attributes whose
 * names start with prefix ("user.…"), or null when it cannot be read; a new array (NULL and
 * err on failure). At most 10000 paths. */
json_t *agentc_xattr_get(int fd, const struct agentc_file_req *req, json_t *paths,
                         const char *prefix, err_t *err);

/* WATCH the directory req->path (recursive: its subdirectories too): 0 once the agent
 * watches it; reader (caller-owned, freed with agentc_reader_free) keeps what came after. */
int agentc_watch_begin(int fd, const struct agentc_file_req *req, bool recursive,
                       agentc_reader_t *reader, err_t *err);
/* Wait up to wait_ms for a WATCH_EVENTS frame: 1 with its events appended to events
 * ({name, type}) and *dropped increased, 0 if none came, -1 (the agent's error, or the
 * connection closed: "agent_unavailable"). */
int agentc_watch_read(int fd, agentc_reader_t *reader, int wait_ms, json_t *events,
                      uint64_t *dropped, err_t *err);
