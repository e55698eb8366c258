/*
 * Background processes of a sandbox. They belong to its agent (PID 1 keeps the table and a
 * bounded output ring per process in its own memory, agent/procs.c), so a fork, a
 * hibernation or a daemon restart keeps them and their output; the daemon only relays, one
 * short request to procs.sock at a time, holding the sandbox's lock for reading only while
 * it lasts. Every call but sbx_proc_follow wakes a hibernated sandbox first, as an exec
 * does; those that act (start, stdin, signal, resize, delete) count as activity, those that
 * only look (list, get, output) do not.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "agentc/agent_procs.h"
#include "sandbox.h"

/* A process to start (its strings are borrowed). */
struct sbx_proc_req {
    json_t *argv;        /* array of strings (sbx_check_exec_argv) */
    const char *command; /* what records show; NULL: argv joined */
    json_t *env;         /* object of strings or NULL */
    const char *cwd, *user;
    bool tty;
    uint16_t cols, rows;    /* tty: the first size (0: 80 x 24) */
    bool stdin_pipe;        /* keep a stdin the API can write (a PTY always has one) */
    const char *stdin_data; /* NULL, or bytes written first (then EOF for a pipe) */
    size_t stdin_len;       /* at most AGENT_PROCS_STDIN_MAX */
    const char *tag;
    int64_t timeout_ms; /* > 0: the agent SIGKILLs its group this long after the start */
};

/* Start q in owner's sandbox key: *out is the process's record. */
int sbx_proc_start(sbx_mgr_t *m, const user_t *owner, const char *key, const struct sbx_proc_req *q,
                   json_t **out, err_t *err);
/* The records of the sandbox's processes: {"processes": [...]}, oldest first. */
int sbx_proc_list(sbx_mgr_t *m, const user_t *owner, const char *key, json_t **out, err_t *err);
/* The record of process pid; ERR_NOT_FOUND "process_not_found" if there is none. */
int sbx_proc_get(sbx_mgr_t *m, const user_t *owner, const char *key, pid_t pid, json_t **out,
                 err_t *err);
/* Write len (<= AGENT_PROCS_STDIN_MAX) bytes to its stdin, then close it if eof. */
int sbx_proc_stdin(sbx_mgr_t *m, const user_t *owner, const char *key, pid_t pid, const void *data,
                   size_t len, bool eof, json_t **out, err_t *err);
/* Send sig (1-64) to its process group. */
int sbx_proc_signal(sbx_mgr_t *m, const user_t *owner, const char *key, pid_t pid, int sig,
                    json_t **out, err_t *err);
/* Resize its terminal (a PTY process). */
int sbx_proc_resize(sbx_mgr_t *m, const user_t *owner, const char *key, pid_t pid, uint16_t cols,
                    uint16_t rows, json_t **out, err_t *err);
/* SIGKILL its process group (if it runs) and forget it with its output. */
int sbx_proc_delete(sbx_mgr_t *m, const user_t *owner, const char *key, pid_t pid, err_t *err);
/* Its output from cursor on, at most max bytes (0: 256 KiB), without waiting. */
int sbx_proc_output(sbx_mgr_t *m, const user_t *owner, const char *key, pid_t pid, uint64_t cursor,
                    size_t max, struct agentc_output *out, err_t *err);

#define SBX_FOLLOW_LATER 1 /* sbx_proc_follow: the sandbox cannot be read now */

/*
 * One step of following a process's output: read from cursor on, waiting up to wait_ms
 * (<= 10000) for output if there is none yet. 0 with *out filled; SBX_FOLLOW_LATER when the
 * sandbox cannot be asked now (hibernated, paused, or a lifecycle change holds or wants
 * it): try again in a while, nothing was done; -1 with err (ERR_CONFLICT
 * "sandbox_not_running" once it has ended or was deleted). Never wakes the sandbox, never
 * counts as activity, and lets go of the sandbox as soon as a lifecycle change wants it
 * (or cancel_fd, when not NULL, hangs up: the client left).
 */
int sbx_proc_follow(sbx_mgr_t *m, const user_t *owner, const char *key, pid_t pid, uint64_t cursor,
                    size_t max, int wait_ms, const int *cancel_fd, struct agentc_output *out,
                    err_t *err);
