/* sandboxer-agent internals: PID 1 of every sandbox (see docs/agent-protocol.md). */
#pragma once

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "agent/protocol.h"
#include "common/error.h"

#define AGENT_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* The command line. */
struct agent_config {
    const char *socket_path;
    const char *user;         /* --user USER[:GROUP] for the main process and default for execs */
    const char *workdir;      /* --workdir for the main process and default for execs */
    bool tty;                 /* the main process runs on a PTY of the agent's (the console) */
    const char *console_path; /* --console-socket; NULL: console.sock beside socket_path */
    bool auth_stdin;          /* read a token from stdin; answer AUTH with it (gVisor) */
    char **main_argv;         /* NULL or empty: idle, serve execs only */
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
    /* Runs first in the child, before its new session (NULL: nothing): the console's keeper
     * is forked there, so that it is a child of the main process (see agent.c). */
    void (*before_session)(const struct agent_spawn *sp, void *arg);
    void *hook_arg;
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

/*
 * pty.c, the console: with --tty the main process runs on a PTY whose master PID 1 keeps.
 * Its output goes to fd 1 (the sandbox's log), into a 16 KiB replay ring and to up to
 * AGENT_CONSOLE_CLIENTS clients of the console socket, served inside PID 1's poll loop
 * (AGENT_CONSOLE_CLIENTS is in protocol.h, which this header includes).
 */

#define AGENT_CONSOLE_FINISH_MS 2000 /* how long the last frames may take to leave at the end */
#define AGENT_CONSOLE_SLOTS     (3 + AGENT_CONSOLE_CLIENTS) /* pollfds the console uses */

struct agent_console;

/*
 * Open the console's PTY (80 × 24) and listen on path (mode 0600); *slave gets the PTY side
 * for the main process (the caller closes it once the process started). Makes fd 1
 * non-blocking. NULL with err set on failure.
 */
struct agent_console *agent_console_open(const char *path, int *slave, err_t *err);
/* The main process: SIGNAL frames go to its process group. */
void agent_console_set_pid(struct agent_console *c, pid_t pid);
/* Fill p[0 .. AGENT_CONSOLE_SLOTS) for the next poll (unused slots get fd -1). */
void agent_console_poll_fill(struct agent_console *c, struct pollfd *p);
/* Act on the revents of the slots filled by agent_console_poll_fill. */
void agent_console_dispatch(struct agent_console *c, const struct pollfd *p);
/*
 * The main process ended with waitpid status st: forward the output still in the PTY, send
 * every client EXIT, flush (bounded by a deadline), close and unlink the socket.
 */
void agent_console_finish(struct agent_console *c, int st);
/* In a forked child of PID 1: close the console's fds (PID 1 keeps its own). */
void agent_console_close_fds(struct agent_console *c);
/* A new descriptor (close-on-exec) of the console's listening socket, or -1. */
int agent_console_dup_listener(const struct agent_console *c);

/*
 * procs.c — background processes: started, fed and read through procs.sock, which PID 1
 * serves in its poll loop. The table, each process's output ring (AGENT_PROCS_RING) and
 * the connections live in PID 1's memory, so a checkpoint carries them.
 */

#define AGENT_PROCS_MAX (AGENT_PROCS_RUNNING + AGENT_PROCS_EXITED) /* entries at most */
/* pollfds the processes use at most: the socket, its connections, 4 fds a running process */
#define AGENT_PROCS_SLOTS (1 + AGENT_PROCS_CONNS + 4 * AGENT_PROCS_RUNNING)

struct agent_procs;

/* Listen on path (mode 0600); NULL with err set if that fails. */
struct agent_procs *agent_procs_open(const char *path, const struct agent_config *cfg, err_t *err);
/* Fill p (room for AGENT_PROCS_SLOTS) for the next poll; returns the slots used. */
size_t agent_procs_poll_fill(struct agent_procs *ps, struct pollfd *p);
/* The poll timeout the processes need: ms until their next deadline, -1 for none. */
int agent_procs_timeout(struct agent_procs *ps);
/* Act on the revents of the n slots filled by agent_procs_poll_fill, and on deadlines. */
void agent_procs_dispatch(struct agent_procs *ps, const struct pollfd *p, size_t n);
/* PID 1 reaped pid with waitpid status st: true if it was a background process. */
bool agent_procs_reaped(struct agent_procs *ps, pid_t pid, int st);
/* In a forked child of PID 1 (a session, a keeper): close every fd of the processes. */
void agent_procs_close_fds(struct agent_procs *ps);
/* Remove the socket file (the agent is exiting). */
void agent_procs_unlink(struct agent_procs *ps);

/* session_req.c — an EXEC request decoded and resolved; PROC_START uses it too. */
struct exec_plan {
    char **argv;
    char **env;
    char *cwd;
    struct agent_user user;
    bool has_user, tty, want_stdin;
    int64_t timeout_ms;
    uint16_t cols, rows;
};

/* Decode EXEC's members in obj (strict: an unknown one is ERR_INVALID "invalid"; an unknown
 * user is code "bad_user"); "env" is taken out of obj. Free p with agent_exec_plan_free. */
int agent_exec_plan_decode(json_t *obj, const struct agent_config *cfg, struct exec_plan *p,
                           err_t *err);
/* Release what agent_exec_plan_decode allocated. */
void agent_exec_plan_free(struct exec_plan *p);

/* session.c — one connection, one request; runs in a forked child and never returns. */
__attribute__((noreturn)) void agent_session_run(int sock, const struct agent_config *cfg);

/* auth.c — the token of an agent started with --auth-stdin (gVisor, see auth.c). */

/* Read the token from stdin (then /dev/null there); -1 if it is not AGENT_TOKEN_LEN hex. */
int agent_auth_load(void);
/* True once a token was loaded: every connection must then pass agent_auth_gate. */
bool agent_auth_on(void);
/* With a token: read AUTH from fd (at most timeout_ms), check the peer is on the host, answer
 * AUTH_OK; -1: drop the connection. Without one: 0 at once. */
int agent_auth_gate(int fd, int timeout_ms);

/* agent.c — checkpoints under gVisor (QUIESCE on procs.sock, AGENT_RESUME_SIGNAL). */

/* Let go of the agent's listening sockets but procs.sock's (and refuse, with why in reason,
 * when the sandbox holds one that cannot be let go of: the console). 0: done. */
int agent_quiesce(char *reason, size_t size);
/* The TCP endpoints of the sandbox other than listeners (/proc/net/tcp and tcp6). */
int agent_tcp_busy(void);
/* procs.c: close procs.sock's listener and every connection but keep (the QUIESCE one). */
void agent_procs_quiesce(struct agent_procs *ps, int keep_fd);
/* procs.c: listen on procs.sock again (after a restore). */
void agent_procs_resume(struct agent_procs *ps);

/* io.c — small fd helpers. */

/* Write all n bytes (blocking or polling for POLLOUT on EAGAIN); -1 on error. */
int agent_write_all(int fd, const void *p, size_t n);
/* Send one frame with a blocking write; -1 on error. */
int agent_send_frame(int fd, uint8_t type, const void *payload, size_t len);
/* Send an ERROR frame {"code", "message"}. */
int agent_send_error(int fd, const char *code, const char *message);
/* Listen on a new unix socket at path (replacing a stale file), mode 0600, non-blocking. */
int agent_listen(const char *path);
/* An EXIT payload for waitpid status st: {"exit_code", "signal", "timed_out"}; its length. */
size_t agent_exit_json(char *out, size_t size, int status, bool timed_out);
/* Set or clear O_NONBLOCK. */
int agent_set_nonblock(int fd, bool on);
/* Print "sandboxer-agent: <msg>" on stderr. */
void agent_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
