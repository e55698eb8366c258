/*
 * The files requests of a session (STAT, LIST, READ, WRITE, DELETE, MKDIR, RENAME): files.c
 * decodes the request, becomes the user and dispatches; files_read.c and files_write.c do
 * the work. Each runs in the session process, after it switched to the request's user, and
 * the session exits when the request is done.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "path.h"
#include "session_internal.h"

#define FILES_LIST_MAX 10000 /* LIST returns at most this many entries (the first by name) */

/* A decoded files request; members the request type does not take keep their defaults. */
struct file_req {
    const char *path, *to, *user, *mode_str;          /* borrowed from the request's JSON */
    int64_t offset, length;                           /* READ; length -1: to the end */
    int mkdir, append, recursive, parents, overwrite; /* JSON booleans; -1 when absent */
    int truncate;          /* WRITE in place: the target truncated, not replaced (-1: absent) */
    json_t *attrs, *paths; /* XATTR_SET's names and values, XATTR_GET's paths (borrowed) */
    const char *prefix;    /* XATTR_GET: the names returned start with it */
    bool has_mode;
    unsigned mode;                /* mode_str parsed: permission bits, at most 07777 */
    char norm[AGENT_PATH_MAX];    /* path, normalised */
    char norm_to[AGENT_PATH_MAX]; /* RENAME: to, normalised */
};

/* files.c */

/* Remove the pending temp file if any, send ERROR {code, message} and end the session. */
__attribute__((noreturn, format(printf, 3, 4))) void files_fail(struct session *s, const char *code,
                                                                const char *fmt, ...);
/* files_fail with the code for errnum (files_errno_code) and "<what> <path>: <strerror>". */
__attribute__((noreturn)) void files_fail_errno(struct session *s, int errnum, const char *what,
                                                const char *path);
/* The ERROR code for an errno: not_found, permission, no_space, read_only... else io_error. */
const char *files_errno_code(int errnum);
/* Send one frame (blocking); a client that left ends the session (temp file removed). */
void files_send(struct session *s, uint8_t type, const void *p, size_t n);
/* Send j (consumed) as a frame's JSON payload. */
void files_send_json(struct session *s, uint8_t type, json_t *j);
/* The next frame from the client, blocking; *used bytes of s->in belong to it. A client
 * that left ends the session (temp file removed); a malformed frame is ERROR protocol. */
void files_next_frame(struct session *s, struct agent_frame *f, size_t *used);
/* Drop the first n bytes of s->in. */
void files_consume(struct session *s, size_t n);
/* Remember the temp file name in dirfd to remove if the session ends early (disconnect,
 * error, SIGTERM); disarm once it was renamed. */
void files_temp_arm(int dirfd, const char *name);
void files_temp_disarm(void);

/* Send OK {"path"} (files_write.c). */
void files_send_ok(struct session *s, const char *path);
/* The FILE_INFO object of a stat: name and path from path, type, is_dir, size, mode, mtime. */
json_t *files_stat_json(const struct stat *st, const char *path);
/* files_stat_json of name in dirfd without following a final symlink, plus for a symlink its
 * link_target and target_type (null when dangling; is_dir follows it). NULL with errno. */
json_t *files_info_json(int dirfd, const char *name, const char *path);

/* files_read.c */
void files_do_stat(struct session *s, struct file_req *r);
void files_do_list(struct session *s, struct file_req *r);
void files_do_read(struct session *s, struct file_req *r);

/* files_watch.c */
void files_do_watch(struct session *s, struct file_req *r);

/* files_xattr.c */
void files_do_xattr_set(struct session *s, struct file_req *r);
void files_do_xattr_get(struct session *s, struct file_req *r);

/* files_write.c */
void files_do_write(struct session *s, struct file_req *r);
void files_do_mkdir(struct session *s, struct file_req *r);
void files_do_delete(struct session *s, struct file_req *r);
void files_do_rename(struct session *s, struct file_req *r);
