/* sandboxer-agent internals: PID 1 of every sandbox (see docs/agent-protocol.md). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

#define AGENT_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* The command line. */
struct agent_config {
    const char *socket_path;
    const char *user;    /* --user USER[:GROUP] for the main process and default for execs */
    const char *workdir; /* --workdir for the main process and default for execs */
    bool tty;            /* the main process gets the agent's stdio as its terminal */
    char **main_argv;    /* NULL or empty: idle, serve execs only */
};

/* A resolved user: ids, supplementary groups and home directory. */
struct agent_user {
    uid_t uid;
    gid_t gid;
    gid_t *groups;
    size_t ngroups;
    char *home; /* "/" when the user has no passwd entry */
};

/* users.c — read /etc/passwd and /etc/group of the container ourselves: no NSS. */

/* Resolve "name|uid[:group|gid]" against /etc/passwd and /etc/group. ERR_INVALID if unknown. */
int agent_user_resolve(const char *spec, struct agent_user *out, err_t *err);
/* Release what agent_user_resolve allocated. */
void agent_user_free(struct agent_user *u);
/* In a forked child: setgroups, setgid, setuid. -1 with errno on failure. */
int agent_user_apply(const struct agent_user *u);

/* env.c — environments as NULL-terminated "K=V" vectors. */

/* A malloc'd copy of base (NULL-terminated). */
char **agent_env_copy(char *const *base);
/* Set K=V in *envp (replacing K); kv must contain '='. Takes a copy. */
void agent_env_put(char ***envp, const char *kv);
/* The value of key in env, or NULL. */
const char *agent_env_get(char *const *env, const char *key);
/* Add the default PATH when env lacks one. */
void agent_env_default_path(char ***envp);
/*
 * HOME for a process running as u: its passwd home when HOME is unset, or when HOME is
 * "/root" (what runc sets for the agent itself) and u is not root.
 */
void agent_env_home(char ***envp, const struct agent_user *u);
/* Free a vector made by these functions. */
void agent_env_free(char **env);

/* spawn.c — fork and exec one process in a new session. */

/* What the child gets; an fd of -1 leaves the inherited one in place. */
struct agent_spawn {
    char *const *argv;
    char *const *envp;             /* the child's full environment; its PATH is searched */
    const char *cwd;               /* NULL: inherit */
    const struct agent_user *user; /* NULL: keep the agent's ids */
    int stdin_fd, stdout_fd, stderr_fd;
    bool ctty;     /* make fd 0 the controlling terminal of the new session */
    int report_fd; /* >= 0: write a failure record here; -1: print to stderr */
};

/* Why a child failed before exec completed; read from the report pipe. */
struct agent_spawn_failure {
    int stage; /* enum agent_spawn_stage */
    int errnum;
};

enum agent_spawn_stage {
    SPAWN_STAGE_FDS = 1,
    SPAWN_STAGE_TTY,
    SPAWN_STAGE_CWD,
    SPAWN_STAGE_USER,
    SPAWN_STAGE_EXEC
};

/* Fork the child; returns its pid (also its pgid and sid) or -1 with err set. */
pid_t agent_spawn(const struct agent_spawn *sp, err_t *err);
/* The exit code a shell would give for a failed exec: 127 for ENOENT, 126 otherwise. */
int agent_spawn_exit_code(int stage, int errnum);
/* A word for the stage ("chdir", "exec"...). */
const char *agent_spawn_stage_name(int stage);

/* pty.c */

/* Open a PTY pair (both O_CLOEXEC, master non-blocking) sized cols × rows. */
int agent_pty_open(int *master, int *slave, uint16_t cols, uint16_t rows, err_t *err);
/* Set the window size of a PTY. */
void agent_pty_resize(int master, uint16_t cols, uint16_t rows);

/* session.c — one connection, one request; runs in a forked child and never returns. */
__attribute__((noreturn)) void agent_session_run(int sock, const struct agent_config *cfg);

/* io.c — small fd helpers. */

/* Write all n bytes (blocking or polling for POLLOUT on EAGAIN); -1 on error. */
int agent_write_all(int fd, const void *p, size_t n);
/* Send one frame with a blocking write; -1 on error. */
int agent_send_frame(int fd, uint8_t type, const void *payload, size_t len);
/* Send an ERROR frame {"code", "message"}. */
int agent_send_error(int fd, const char *code, const char *message);
/* Set or clear O_NONBLOCK. */
int agent_set_nonblock(int fd, bool on);
/* Print "sandboxer-agent: <msg>" on stderr. */
void agent_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
