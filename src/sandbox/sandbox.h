/* The sandbox lifecycle: create, get, list, update, exec, logs, delete, reconcile. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "agentc/agent_client.h"
#include "common/buf.h"
#include "common/error.h"
#include "image/image.h"
#include "store/store.h"

typedef struct sbx_mgr sbx_mgr_t;

#define SBX_FSWATCH_MAX 8 /* directory watches a sandbox keeps open at once */

/* Daemon-wide settings of the lifecycle. Strings are borrowed for the manager's life. */
struct sbx_config {
    const char *state_dir;
    const char *agent_bin;       /* sandboxer-agent to copy into the state dir */
    const char *self_exe;        /* the sandboxer binary (for the shim) */
    const char *runtime;         /* the runtime of a sandbox that does not ask: "runc", "runsc" */
    const char *runc_bin;        /* runc (path or name) */
    const char *runsc_bin;       /* runsc (path or name) */
    const char *runsc_platform;  /* "auto", "ptrace" or "kvm" */
    const char *templates_dir;   /* the built-in templates' OCI layouts (NULL: none) */
    const char *storage_driver;  /* "auto", "overlay" or "btrfs" */
    struct net *net;             /* the network layer (bridge, netns, rules) */
    const char *default_network; /* egress of a sandbox that does not ask: "none"|"open" */
    double default_cpus;
    uint64_t default_memory;
    int64_t default_pids;
    uint64_t log_max;          /* main-process log cap per file */
    uint64_t exec_output_max;  /* per stream of one exec */
    unsigned max_execs;        /* concurrent execs per sandbox */
    unsigned idle_timeout_s;   /* hibernate a sandbox idle this long (0: never), unless its own
                                  idle_timeout says otherwise */
    int egress_proxy_port;     /* the egress proxy's port on the gateway (0: none runs) */
    user_limits_t user_limits; /* the default limits of a non-admin user (negative: none) */
    const char *userns;        /* "auto", "on" or "off": user namespaces for runc sandboxes */
    uint32_t userns_first;     /* the host ids they are given: from here, */
    uint32_t userns_count;     /* this many (RUNTIME_USERNS_SIZE per sandbox) */
};

/* Open the manager: prepares dirs, installs the agent, starts the exit watcher. */
sbx_mgr_t *sbx_open(const struct sbx_config *cfg, store_t *store, image_store_t *images,
                    err_t *err);
/* Stop watching; running sandboxes are left running. */
void sbx_close(sbx_mgr_t *m);
/* The allow list of the sandbox at ip if its network is "proxy" (the caller decrefs), else
 * NULL: the egress proxy's policy. */
json_t *sbx_egress_allow(sbx_mgr_t *m, const char *ip);
/* Bring the store and reality together after a (re)start. */
int sbx_reconcile(sbx_mgr_t *m, err_t *err);

/* A validated create request. Absent numbers are negative, absent strings NULL. */
struct sbx_create_req {
    const char *image;
    const char *label;
    const char *hostname;
    int interactive; /* -1 absent */
    json_t *env;     /* object of strings or NULL */
    json_t *args;    /* array of strings or NULL */
    double cpus;     /* <= 0 absent */
    uint64_t memory; /* 0 absent */
    int64_t pids;    /* < 0 absent */
    uint64_t disk;   /* 0 absent */
    const char *network;
    json_t *egress_allow; /* with network "proxy": the hosts it may reach */
    json_t *ports;
    int is_public; /* -1 absent */
    const char *runtime;
    int64_t idle_timeout;      /* < 0 absent */
    const char *snapshot;      /* start from this snapshot instead of an image */
    int net_raw;               /* -1 absent; 1: keep CAP_NET_RAW */
    const char *template_name; /* start from this template (see template.h) */
    int setuid; /* -1 absent (a template's choice, else no); 1: setuid binaries (sudo) may
                   gain privileges: no noNewPrivileges */
};

/* ---- per-user limits (quota.c) ---- */

/* ERR_INVALID unless a sandbox of cpus and memory fits this host (whoever asks). */
int sbx_check_host_size(double cpus, uint64_t memory, err_t *err);
/* The limits u is held to: its own, else the daemon's defaults; none at all for admins. */
void sbx_user_limits(sbx_mgr_t *m, const user_t *u, user_limits_t *eff);
/* ERR_FORBIDDEN "limit_exceeded" naming the first of one sandbox's sizes over l. */
int sbx_limits_check_size(const user_limits_t *l, double cpus, uint64_t memory, int64_t pids,
                          uint64_t disk, err_t *err);
/* ERR_LIMIT "quota_exceeded" / "rate_limited" naming the count of u that l forbids to grow
 * (max_sandboxes and the create rate only when new_row: a new sandbox, not a wake). */
int sbx_limits_check_counts(const user_limits_t *l, const user_usage_t *u, bool new_row,
                            err_t *err);
/* Update l from a JSON object of limits (null: back to the default); ERR_INVALID, l
 * untouched, on an unknown name, a wrong type or a value out of range. */
int sbx_limits_parse(json_t *body, user_limits_t *l, err_t *err);
/* Limits as JSON: {max_running, ..., max_creates_per_minute}, null for none. */
json_t *sbx_limits_json(const user_limits_t *l);

/* ERR_INVALID unless s is an RFC 1123 host label. */
int sbx_check_hostname(const char *s, err_t *err);
/* Decode and validate a create body (unknown fields, types, ranges → ERR_INVALID). */
int sbx_create_req_decode(json_t *body, struct sbx_create_req *q, err_t *err);
/* Create and start a sandbox for owner; *out is its JSON object. */
int sbx_create(sbx_mgr_t *m, const user_t *owner, const struct sbx_create_req *q, json_t **out,
               err_t *err);
/* The JSON of one of owner's sandboxes (by id or name). */
int sbx_get(sbx_mgr_t *m, const user_t *owner, const char *key, json_t **out, err_t *err);
/* All of owner's sandboxes, terminated ones included. */
int sbx_list(sbx_mgr_t *m, const user_t *owner, json_t **out, err_t *err);
/* Change label and/or public; *out is {id, label?, public?}. */
int sbx_update(sbx_mgr_t *m, const user_t *owner, const char *key, const char *label, int is_public,
               json_t **out, err_t *err);
/* Kill and remove a sandbox; its row stays, terminated. */
int sbx_delete(sbx_mgr_t *m, const user_t *owner, const char *key, json_t **out, err_t *err);

/* One exec request. */
struct sbx_exec_req {
    json_t *argv;        /* array of strings */
    const char *command; /* what the execution log records */
    json_t *env;         /* object or NULL */
    const char *cwd;
    const char *user;
    const char *stdin_data;
    size_t stdin_len;
    bool has_stdin;
    double timeout_s;     /* <= 0: none */
    const int *cancel_fd; /* NULL, or the client's socket (or stream pipe): its hangup kills
                             the command */
};

/* Output sink of a streaming exec: called per chunk (fd 1/2); return false to stop. */
typedef bool (*sbx_output_fn)(void *ctx, int fd, const char *data, size_t len);

/* The outcome of an exec. */
struct sbx_exec_result {
    int exit_code;
    bool timed_out;
    bool stdout_truncated, stderr_truncated;
    buf_t out, err; /* filled when no sink is given */
    int64_t execution_id;
};

/*
 * Run an exec in owner's sandbox. With a sink, chunks go to it as they come; without,
 * they collect in res (capped). Every exec is recorded with its output.
 */
int sbx_exec(sbx_mgr_t *m, const user_t *owner, const char *key, const struct sbx_exec_req *q,
             sbx_output_fn sink, void *ctx, struct sbx_exec_result *res, err_t *err);

/* A terminal session: a command on a PTY, or the console of an interactive sandbox. */
struct sbx_term_req {
    const char *const *argv; /* the command (NULL-terminated); NULL: attach to the console */
    const char *const *env;  /* "K=V" over the sandbox's, or NULL */
    const char *cwd, *user;  /* NULL: the sandbox's */
    uint16_t cols, rows;     /* the first size; 0: 80 × 24 */
    const char *command;     /* what the execution history records */
};
typedef struct sbx_term sbx_term_t;

/*
 * Open a session in owner's sandbox (waking it if hibernated): the command has started (or
 * the console is connected) when this returns. Errors: 404 for a sandbox that is not the
 * owner's, 409 when it does not run or (attach) has no console, 400 for a missing command.
 */
sbx_term_t *sbx_term_open(sbx_mgr_t *m, const user_t *owner, const char *key,
                          const struct sbx_term_req *q, err_t *err);
/* The connection to the agent (frames of agent/protocol.h) and its reader, which may
 * already hold frames that came right after STARTED. */
int sbx_term_fd(const sbx_term_t *t);
agentc_reader_t *sbx_term_reader(sbx_term_t *t);
/* The sandbox's id. */
const char *sbx_term_id(const sbx_term_t *t);
/* Count the session as activity (keeps the sandbox from looking idle). */
void sbx_term_touch(sbx_term_t *t);
/* Record the session's end in the exec history (once; sbx_term_close does it if not yet). */
void sbx_term_finish(sbx_term_t *t, int exit_code);
/* End the session: close the connection (the agent then kills a PTY command's process
 * group), record the exit code (-1: unknown), release the sandbox. */
void sbx_term_close(sbx_term_t *t, int exit_code);

/* What owner's sandbox uses now: cpu, memory, pids (running or paused), disk (its writable
 * layer) and network bytes; never wakes it. */
int sbx_stats(sbx_mgr_t *m, const user_t *owner, const char *key, json_t **out, err_t *err);

/* Check that an exec could start now: owner's sandbox exists and is running. */
int sbx_exec_check(sbx_mgr_t *m, const user_t *owner, const char *key, err_t *err);
/* Validate exec argv (non-empty strings) and env (object of strings). */
int sbx_check_exec_argv(json_t *argv, json_t *env, err_t *err);

/* Open the main-process log of owner's sandbox for reading (rotated part first). */
typedef struct sbx_log_reader sbx_log_reader_t;
sbx_log_reader_t *sbx_logs_open(sbx_mgr_t *m, const user_t *owner, const char *key, err_t *err);
/* Read up to size bytes; 0 at the current end (see sbx_logs_running), -1 on error. */
ssize_t sbx_logs_read(sbx_log_reader_t *r, char *buf, size_t size);
/* True while the sandbox's main process may still write. */
bool sbx_logs_running(sbx_log_reader_t *r);
void sbx_logs_close(sbx_log_reader_t *r);

/* One page of execution history. */
struct sbx_history_req {
    int limit;         /* executions at most */
    bool newest_first; /* command-executions; else oldest first (execution-logs) */
    bool has_cursor;   /* without one: the newest `limit` executions */
    int64_t cursor;    /* an execution id: oldest first, after it; newest first, before it */
};
/* Takes bytes of a streamed answer; false once nobody reads any more. */
typedef bool (*sbx_write_fn)(void *ctx, const void *data, size_t len);
/* Owner's sandbox key, whose history is to be read: its id (ERR_NOT_FOUND otherwise). */
int sbx_exec_history_open(sbx_mgr_t *m, const user_t *owner, const char *key, char id[65],
                          err_t *err);
/*
 * Write one page of sandbox id's history through write: {"executions": [{..., "logs":
 * [...]}], "next_cursor": id|null, "has_more": bool}, in bounded memory (at most q->limit
 * executions, ending after the one whose output passes 4 MiB). False if a write failed.
 */
bool sbx_exec_history_write(sbx_mgr_t *m, const char *id, const struct sbx_history_req *q,
                            sbx_write_fn write, void *ctx);
/* One execution and its output rows after start_id (at most limit rows and 4 MiB). */
int sbx_exec_logs(sbx_mgr_t *m, const user_t *owner, const char *key, int64_t eid, int64_t start_id,
                  int limit, json_t **out, err_t *err);

/* Fork a running or paused sandbox (memory included where CRIU works). */
int sbx_fork(sbx_mgr_t *m, const user_t *owner, const char *key, const char *label,
             const char *hostname, json_t **out, err_t *err);
/* The tree key belongs to: {"tree": ascii art, "tree_json": {id, label, status, children}}. */
int sbx_tree(sbx_mgr_t *m, const user_t *owner, const char *key, json_t **out, err_t *err);
/* Keep final, delete every other sandbox in parent's subtree; final becomes a root. */
int sbx_coalesce(sbx_mgr_t *m, const user_t *owner, const char *parent_key, const char *final_key,
                 json_t **out, err_t *err);
/* Freeze (pause) or thaw a sandbox; *out is {id, status}. */
int sbx_pause(sbx_mgr_t *m, const user_t *owner, const char *key, bool pause, json_t **out,
              err_t *err);
/* Checkpoint a sandbox to disk, releasing its memory; *out is {id, status}. */
int sbx_hibernate(sbx_mgr_t *m, const user_t *owner, const char *key, json_t **out, err_t *err);
/*
 * Restore a hibernated sandbox; *out is {id, status, memory_preserved}. When its memory cannot
 * be restored (or cold asks not to try), it starts again from its files: memory_preserved
 * false, the checkpoint kept, an event and last_error saying why.
 */
int sbx_wake(sbx_mgr_t *m, const user_t *owner, const char *key, bool cold, json_t **out,
             err_t *err);
/* Keep a checkpoint and the writable layer of a sandbox as the owner's snapshot name. */
int sbx_snapshot_create(sbx_mgr_t *m, const user_t *owner, const char *key, const char *name,
                        json_t **out, err_t *err);
/* Start a new sandbox from the owner's snapshot name (memory included). */
int sbx_snapshot_start(sbx_mgr_t *m, const user_t *owner, const char *name, const char *label,
                       const char *hostname, json_t **out, err_t *err);
/* The owner's snapshots. */
int sbx_snapshot_list(sbx_mgr_t *m, const user_t *owner, json_t **out, err_t *err);
/* Delete the owner's snapshot name with its files. */
int sbx_snapshot_delete(sbx_mgr_t *m, const user_t *owner, const char *name, err_t *err);

/* ---- files, through the sandbox's agent (agentc_file_req says path, user, options) ---- */

/* A connection to a sandbox's agent for one file operation. */
typedef struct sbx_files sbx_files_t;
/* Stat path: {name, path, type, is_dir, size, mode, mtime, ...}. */
int sbx_file_stat(sbx_mgr_t *m, const user_t *owner, const char *key,
                  const struct agentc_file_req *req, json_t **out, err_t *err);
/* List the directory path: {entries: [...], truncated}. */
int sbx_file_list(sbx_mgr_t *m, const user_t *owner, const char *key,
                  const struct agentc_file_req *req, json_t **out, err_t *err);
/* Stream the file path (range in req) to the callbacks. */
int sbx_file_read(sbx_mgr_t *m, const user_t *owner, const char *key,
                  const struct agentc_file_req *req, agentc_info_fn on_info, agentc_data_fn on_data,
                  void *ctx, err_t *err);
/* Files up to this size are downloaded by reading them whole first (both files APIs). */
#define SBX_FILE_WHOLE_MAX (1u << 20)
/* The whole file path (req's range ignored) into out, when it has at most max bytes: a file
 * that shrinks while it is read gives what read() returned up to its end, as `cat` would.
 * 0 done, 1 larger than max (out holds a prefix), -1 err. */
int sbx_file_read_whole(sbx_mgr_t *m, const user_t *owner, const char *key,
                        const struct agentc_file_req *req, size_t max, buf_t *out, err_t *err);
/* Start an atomic write of path; then chunks, then end (or close to abandon it). */
sbx_files_t *sbx_file_write_begin(sbx_mgr_t *m, const user_t *owner, const char *key,
                                  const struct agentc_file_req *req, err_t *err);
int sbx_file_write_chunk(sbx_files_t *f, const void *p, size_t n, err_t *err);
int sbx_file_write_end(sbx_files_t *f, uint64_t *size, err_t *err);
/* Release the connection (abandoning an unfinished write). */
void sbx_files_close(sbx_files_t *f);
/* Delete path (recursive in req). */
int sbx_file_delete(sbx_mgr_t *m, const user_t *owner, const char *key,
                    const struct agentc_file_req *req, err_t *err);

/* ---- a deadline and the wake policy (deadline.c): E2B's timeouts are built on them ---- */

/* What happens to a sandbox at its deadline. */
enum sbx_end_action {
    SBX_END_DELETE,    /* deleted, as DELETE /sandboxes/{id} */
    SBX_END_HIBERNATE, /* hibernated (memory kept); nothing happens to it then */
};
/* Set owner's sandbox key's deadline (Unix seconds; <= 0 clears it): the reaper acts within a
 * second of it. */
int sbx_set_deadline(sbx_mgr_t *m, const user_t *owner, const char *key, double end_at,
                     enum sbx_end_action action, err_t *err);
/* Whether a request to owner's hibernated sandbox key wakes it (the default); with false only
 * sbx_wake does, and requests answer 409 "sandbox_paused" meanwhile. */
int sbx_set_auto_wake(sbx_mgr_t *m, const user_t *owner, const char *key, bool wake, err_t *err);
/* The deadline a sandbox object's spec holds (0: none), and its action when not NULL. */
double sbx_spec_deadline(const json_t *spec, enum sbx_end_action *action);
/* False if a sandbox's spec says that requests must not wake it. */
bool sbx_spec_auto_wake(const json_t *spec);
/* What the facades need of a sandbox's life in one read. */
struct sbx_life {
    char id[65];
    const char *status; /* "running", "paused", "hibernated", "exited", "terminated", ... */
    double created_at;
    double end_at; /* its deadline (0: none) */
    enum sbx_end_action action;
    bool auto_wake;
    double cpus;
    uint64_t memory, disk; /* bytes (disk 0: no limit) */
    char user[64];         /* its execs' default user (the image's User; "" for root) */
};
/* The life of owner's sandbox key. */
int sbx_life_get(sbx_mgr_t *m, const user_t *owner, const char *key, struct sbx_life *out,
                 err_t *err);

/* Make the directory path (parents in req: its missing parents too). */
int sbx_file_mkdir(sbx_mgr_t *m, const user_t *owner, const char *key,
                   const struct agentc_file_req *req, err_t *err);
/* Rename path to req->to. */
int sbx_file_rename(sbx_mgr_t *m, const user_t *owner, const char *key,
                    const struct agentc_file_req *req, err_t *err);
/* Set extended attributes of path: attrs maps "user.…" names to strings. */
int sbx_file_xattr_set(sbx_mgr_t *m, const user_t *owner, const char *key,
                       const struct agentc_file_req *req, json_t *attrs, err_t *err);
/* For each of paths, its attributes whose names start with prefix ("user.…"), or null; *out
 * is a new array in the order of paths. */
int sbx_file_xattr_get(sbx_mgr_t *m, const user_t *owner, const char *key,
                       const struct agentc_file_req *req, json_t *paths, const char *prefix,
                       json_t **out, err_t *err);

/*
 * A watch of a directory's changes (inotify in the sandbox's agent, as req->user), that
 * outlives the sandbox's changes: a fork, snapshot or hibernation closes its connection
 * first, and the next step reconnects once the sandbox runs again (changes meanwhile are
 * not reported). At most SBX_FSWATCH_MAX per sandbox at once.
 */
typedef struct sbx_fswatch sbx_fswatch_t;
/* Start watching req->path (recursive: its subdirectories too), waking the sandbox if it
 * may; errors as the files requests' (not found, not a directory), ERR_LIMIT
 * "too_many_watches". */
sbx_fswatch_t *sbx_fswatch_open(sbx_mgr_t *m, const user_t *owner, const char *key,
                                const struct agentc_file_req *req, bool recursive, err_t *err);
/* Wait up to wait_ms for events, appended to events ({name, type}; *dropped counts those
 * lost): 0; SBX_FOLLOW_LATER when the sandbox cannot be watched now (asleep, changing: try
 * again later); -1 with err once it cannot go on (the sandbox ended, the directory went). */
int sbx_fswatch_next(sbx_fswatch_t *w, int wait_ms, json_t *events, uint64_t *dropped, err_t *err);
/* End the watch (NULL is fine). */
void sbx_fswatch_close(sbx_fswatch_t *w);

/* Where the inbound proxy sends a request. */
struct sbx_target {
    char id[65];
    char ip[48];
    int port;
    /* End the connection with a reset, never a FIN: no TCP endpoint of the sandbox is left
     * closing (TIME_WAIT), which its runtime could not checkpoint (gVisor). */
    bool abortive_close;
};
/*
 * The sandbox key's address and port for the proxy: the caller's own sandbox, or anyone's
 * public one (caller may be NULL: no token). port > 0 is asked for; else the create-time
 * ports, else the image's ExposedPorts, else the first port listening on all addresses in
 * the sandbox. A hibernated sandbox wakes first.
 */
int sbx_proxy_target(sbx_mgr_t *m, const user_t *caller, const char *key, int port,
                     struct sbx_target *out, err_t *err);

/*
 * Wait until owner's sandbox key listens on the port it serves (create-time ports, else the
 * image's ExposedPorts) for at most timeout_ms; 0 at once when it declares none. What E2B's
 * templates promise: a sandbox is handed over once its start command serves.
 */
int sbx_wait_serving(sbx_mgr_t *m, const user_t *owner, const char *key, int timeout_ms,
                     err_t *err);

/* True if a non-terminated sandbox or a template uses image ref. */
bool sbx_image_in_use(sbx_mgr_t *m, const char *ref);
/* The layer dirs non-terminated sandboxes mount, as the keys of a new JSON object. */
int sbx_layers_in_use(sbx_mgr_t *m, json_t **out, err_t *err);
