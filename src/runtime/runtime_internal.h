/* Shared by the runtime layer's own files. */
#pragma once

#include <stddef.h>

#include "common/buf.h"

#include "runtime.h"

/* The first error of CRIU's restore.log in dirfd (the line before a final "Restoring FAILED"
 * when that is the first), into out; out is left alone when there is none. */
void criu_restore_error(int dirfd, char *out, size_t size);
/* The daemon's state dir (as a prefix of the runtimes' roots, not NUL-terminated): its length. */
size_t runtime_state_prefix(const char **prefix);
/* The configuration runtime_configure was given. */
const struct runtime_config *runtime_cfg(void);
/* criu_log.c: explain a failed CRIU dump from dump.log in work_dir (see runtime.h). */
int runtime_criu_checkpoint_explain(const char *work_dir, const char *id, err_t *err);
/* runsc.c: probe runsc's platform (at configure). */
void runtime_runsc_probe(void);
/* The CRIU check of runc.c (tested once). */
bool runc_criu_available(void);

/*
 * One OCI runtime: its binary, its --root, what it can do (enum runtime_cap) and its
 * operations. runtime.c dispatches to these; sandbox/ sees only the functions of runtime.h.
 */
struct runtime {
    const char *name; /* "runc", "runsc" */
    const char *bin;  /* path or name, from the configuration */
    char root[512];   /* its --root: <state dir>/<name> */
    unsigned caps;    /* RUNTIME_* that hold whatever the host says */
    /* The capabilities this host adds (checked once, e.g. `criu check`). */
    unsigned (*host_caps)(const struct runtime *rt);
    /* 0 if sandboxes can run on this host; else ERR_INVALID "unsupported" saying why. */
    int (*usable)(const struct runtime *rt, err_t *err);
    /* Global options before the verb (NULL-terminated, at most 8), for the shim too. */
    void (*global_args)(const struct runtime *rt, const char **out, size_t max);
    int (*kill)(const struct runtime *rt, const char *id, int sig, bool all, err_t *err);
    int (*delete)(const struct runtime *rt, const char *id, err_t *err);
    int (*pause)(const struct runtime *rt, const char *id, bool pause, err_t *err);
    int (*checkpoint)(const struct runtime *rt, const char *id, const char *image_dir,
                      const char *work_dir, bool leave_running, err_t *err);
    int (*checkpoint_explain)(const struct runtime *rt, const char *work_dir, const char *id,
                              err_t *err);
    int (*after_restore)(const struct runtime *rt, const char *id, pid_t init_pid,
                         const char *hostname, err_t *err);
    /* The host pid SO_PEERCRED names for the agent's sockets of the container in bundle. */
    pid_t (*agent_peer)(const struct runtime *rt, const char *bundle, pid_t init_pid);
};

/* Run `BIN <global args> a0 a1 ...` (NULL-terminated varargs, at most 16) and fail with its
 * stderr when it fails; out gets stdout when not NULL. */
int runtime_run(const struct runtime *rt, buf_t *out, int timeout_ms, err_t *err, ...);
/* `state ID` (both runtimes answer the same JSON). */
int runtime_generic_state(const struct runtime *rt, const char *id, char *out, size_t size,
                          pid_t *pid, err_t *err);

extern struct runtime runtime_runc;
extern struct runtime runtime_runsc;
