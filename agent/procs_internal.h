/*
 * Background processes, inside PID 1 (docs/agent-protocol.md, "Processes"): the table
 * (procs.c), the procs.sock server (procs_conn.c) and the PTY keepers (procs_keeper.c).
 * Everything here runs in PID 1's poll loop and never blocks it: every fd is non-blocking
 * and O_CLOEXEC, every queue and buffer is bounded.
 */
#pragma once

#include <jansson.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent.h"
#include "common/buf.h"
#include "ring.h"

#define PROCS_RING_RUNS     4096              /* stream changes a ring keeps (see ring.h) */
#define PROCS_STDIN_MAX     (1024 * 1024)     /* stdin bytes queued for a process at most */
#define PROCS_REQ_MAX       (256 * 1024 + 64) /* the largest request frame's payload */
#define PROCS_WAIT_MAX      10000             /* ms an OUTPUT request may wait for output at most */
#define PROCS_IO_MS         10000 /* ms a connection may take to send its request or read */
#define PROCS_START_MS      10000 /* ms a START waits for exec before it answers anyway */
#define PROCS_DRAIN_MS      100   /* after a pipe process ends, how long its pipes may stay open */
#define PROCS_TTY_DRAIN_MS  2000  /* after a PTY process ends, how long its keeper may take */
#define PROCS_DRAIN_MAX     (1024 * 1024) /* read from a pipe at most, once its wait is over */
#define PROCS_ARGV_SHOWN    4096          /* bytes of argv a record shows at most */
#define PROCS_COMMAND_SHOWN 1024          /* bytes of the command line a record shows at most */

/* One background process. */
struct proc {
    pid_t pid;        /* in the sandbox's namespace; also its process group and session */
    uint64_t seq;     /* start order */
    uint64_t end_seq; /* end order, once done */
    json_t *argv;     /* what a record shows: at most PROCS_ARGV_SHOWN bytes of it */
    bool argv_truncated;
    char *command, *tag; /* tag may be NULL */
    bool tty;
    double started_at, ended_at; /* Unix seconds; ended_at once reaped */
    bool reaped;                 /* waitpid returned it: status is valid */
    int status;                  /* waitpid status */
    bool done;                   /* reaped and its output complete (pipes or keeper closed) */
    double drain_deadline;       /* reaped: when to stop waiting for the output's end */
    int out_fd, err_fd;          /* pipes' read ends; a PTY process: out_fd is its keeper's relay */
    int in_fd;                   /* the stdin pipe's write end, or the keeper's control pipe */
    buf_t in_q;                  /* bytes for in_fd (frames for a keeper) */
    size_t in_off;
    bool in_eof;     /* close the stdin pipe once in_q is written */
    bool stdin_open; /* stdin can still be sent */
    int report_fd;   /* the spawn report pipe until exec happened (-1 after) */
    bool failed;     /* the child failed before exec (the report said so) */
    int fail_stage;  /* enum agent_spawn_stage */
    int fail_errno;
    double kill_at; /* Unix ms: SIGKILL its group then (START's timeout_ms); 0: never */
    bool timed_out; /* it was killed so */
    struct out_ring ring;
};

/* What a connection is doing. */
enum pconn_state { PC_FREE, PC_READ, PC_WAIT, PC_START, PC_WRITE };

/* One procs.sock connection: one request, one answer, then close. */
struct pconn {
    int fd;
    enum pconn_state state;
    double deadline; /* monotonic ms */
    buf_t in, out;
    size_t out_off;
    struct proc *proc; /* PC_WAIT, PC_START: the process in question */
    uint64_t cursor;   /* PC_WAIT: the OUTPUT request */
    size_t max;
};

/* A poll slot's owner, so that dispatch knows what an fd stands for. */
struct pslot {
    uint8_t kind; /* enum pslot_kind */
    void *obj;    /* struct proc * or struct pconn * */
    int fd;
};

enum pslot_kind { PS_LISTEN, PS_CONN, PS_OUT, PS_ERR, PS_IN, PS_REPORT };

struct agent_procs {
    const struct agent_config *cfg;
    char *path;
    int listen_fd;
    struct proc *procs[AGENT_PROCS_MAX]; /* in start order */
    size_t nprocs;
    uint64_t seq;
    struct pconn conns[AGENT_PROCS_CONNS];
    struct pslot slots[AGENT_PROCS_SLOTS];
    size_t nslots;
};

/* --- procs.c: the table ----------------------------------------------------------------- */

/* The process pid (the latest one with that pid), or NULL. */
struct proc *procs_find(struct agent_procs *ps, pid_t pid);
/* Start a process from a START request (obj is consumed); NULL with err (code: an ERROR code). */
struct proc *procs_start(struct agent_procs *ps, json_t *obj, err_t *err);
/* Forget pr (killing its group first if it runs); waiting connections get ERROR. */
void procs_forget(struct agent_procs *ps, struct proc *pr);
/* Queue stdin bytes (and EOF); -1 with err (exited, no_stdin, stdin_full). */
int procs_stdin(struct proc *pr, const void *p, size_t n, bool eof, err_t *err);
/* Send a signal to the process group; -1 with err (exited). */
int procs_signal(struct proc *pr, int sig, err_t *err);
/* Resize the PTY; -1 with err (not_tty, exited). */
int procs_resize(struct proc *pr, uint16_t cols, uint16_t rows, err_t *err);
/* The record of pr as compact JSON (new string). */
char *procs_record(const struct proc *pr);
/* Running processes (not done). */
size_t procs_running(const struct agent_procs *ps);
/* Add the slots of the processes' fds; returns how many. */
size_t procs_fill_procs(struct agent_procs *ps, struct pollfd *p, size_t at);
/* Act on one process slot's events. */
void procs_on_proc_slot(struct agent_procs *ps, const struct pslot *s, short revents);
/* Deadlines of the processes (drains): act on the passed ones; the ms until the next. */
int procs_proc_timers(struct agent_procs *ps, double now);

/* --- procs_conn.c: connections ---------------------------------------------------------- */

/* The process pr has new output or ended: answer the connections waiting for it. */
void procs_notify(struct agent_procs *ps, struct proc *pr);
/* pr goes away: its waiting connections get ERROR no_process. */
void procs_conns_drop(struct agent_procs *ps, struct proc *pr);
/* Add the listening socket's and the connections' slots; returns how many. */
size_t procs_fill_conns(struct agent_procs *ps, struct pollfd *p, size_t at);
/* Act on one connection (or the listening socket) slot's events. */
void procs_on_conn_slot(struct agent_procs *ps, const struct pslot *s, short revents);
/* Deadlines of the connections: act on the passed ones; the ms until the next (-1: none). */
int procs_conn_timers(struct agent_procs *ps, double now);

/* --- procs_keeper.c: the PTY keeper ----------------------------------------------------- */

/* The fds a PTY process's keeper keeps. */
struct procs_keeper_fds {
    int master; /* the PTY's master */
    int relay;  /* the write end of the pipe to PID 1: the terminal's output */
    int ctl;    /* the read end of the pipe from PID 1: STDIN, STDIN_EOF, RESIZE frames */
};

/* agent_spawn's before_session hook: fork the keeper (a child of the process). */
void procs_keeper_fork(const struct agent_spawn *sp, void *arg);
