/* Running helper programs (runc, skopeo, nft …) safely from a multi-threaded daemon. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "buf.h"
#include "error.h"

/* What a finished child did. */
struct proc_result {
    int exit_code; /* 0-255, or 128+signal */
    int signal;    /* the signal that killed it, 0 if none */
    bool timed_out;
};

/*
 * Run argv (argv[0] a path or a name looked up in PATH) with stdin from /dev/null,
 * collecting stdout and stderr (each bounded to max_out bytes; more is dropped) and
 * killing it after timeout_ms (0 = no limit). env NULL keeps the daemon's environment.
 * Fails only if it cannot be started; a non-zero exit is reported in res.
 */
int proc_run(char *const argv[], char *const env[], int timeout_ms, size_t max_out, buf_t *out,
             buf_t *errout, struct proc_result *res, err_t *err);

/* Like proc_run, and a non-zero exit becomes err (ERR_RUNTIME with the trimmed stderr). */
int proc_run_ok(char *const argv[], int timeout_ms, buf_t *out, err_t *err);

/* Open a pidfd for pid (-1 if the kernel or pid says no). */
int proc_pidfd_open(pid_t pid);

/* Read a small file's first line (trailing newline dropped) into out; false if absent. */
bool read_small_file(int dirfd, const char *name, char *out, size_t size);
