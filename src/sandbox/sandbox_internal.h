/* Shared by the sandbox layer's own files. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>

#include "agentc/agent_client.h"
#include "runtime/runtime.h"
#include "sandbox.h"
#include "storage/storage.h"
#include "store/store_sandboxes.h"
#include "store/store_templates.h"

struct sbx_pool;

/* What the daemon knows of a sandbox whose container runs (or ran) in this boot. */
struct sbx_live {
    char id[65];
    pthread_rwlock_t lock; /* execs read-lock; lifecycle changes write-lock */
    pid_t shim_pid;
    pid_t init_pid;
    int shim_pidfd;
    atomic_int execs;
    atomic_int preempting;           /* deletes (coalesces) that killed the container and
                                        have yet to end: its exit is theirs to record */
    atomic_int changing;             /* lifecycle changes waiting for the write lock: followers of
                                        background output let go of the read lock for them */
    const runtime_t *rt;             /* its runtime, known once it booted or was found running */
    struct agentc_peer peer;         /* who may serve its agent sockets (sbx_boot sets it) */
    char token[AGENT_TOKEN_LEN + 1]; /* the agent's token (RUNTIME_AGENT_TOKEN), else "" */
    uint32_t userns_base;            /* host uid of its root in its user namespace; 0: none */
    pthread_mutex_t fswatch_lock;    /* guards the open directory watches (fswatch.c) */
    int fswatch_fds[SBX_FSWATCH_MAX];
    size_t nfswatch;
    int refs;
    struct sbx_live *next;
};

struct sbx_mgr {
    struct sbx_config cfg;
    store_t *store;
    image_store_t *images;
    char *sandboxes_dir;       /* <state>/sandboxes */
    char *fork_ckpt_dir;       /* /dev/shm/sandboxer-checkpoints/<hash of the state dir> */
    char *agent_dir;           /* <state>/agent/<hash>: the agent binary new sandboxes bind */
    char *criu_conf;           /* <state>/criu.conf: CRIU options, passed by runc */
    char *criu_conf_empty_net; /* the same and "empty-ns net": restores into user namespaces */
    bool userns;               /* new runc sandboxes get a user namespace (--userns) */
    uint32_t userns_first, userns_count; /* the host ids they are given (--userns-range) */
    uint32_t userns_cursor;              /* where the next range is looked for */
    pthread_mutex_t userns_lock;
    char *runc_root;
    enum storage_driver driver; /* how writable layers are made and cloned */
    enum storage_quota quota;   /* how their size can be limited (disk) */
    pthread_mutex_t lock;       /* guards the live list */
    struct sbx_live *live;
    int epfd;    /* watches shims' pidfds */
    int wake_fd; /* eventfd to stop the watcher */
    pthread_t watcher;
    bool watching;
    pthread_t reaper; /* the idle reaper (reaper.c) */
    bool reaping;
    pthread_mutex_t reaper_lock;
    pthread_cond_t reaper_cond;
    bool reaper_stop;
    /* templates (template.c, template_build.c) and warm pools (pool.c) */
    pthread_mutex_t tpl_lock;
    pthread_cond_t tpl_cond;
    bool tpl_importing; /* the built-in templates are being imported (creates wait) */
    pthread_t tpl_import;
    bool tpl_import_started;
    json_t *tpl_building; /* "owner/name" of the builds in progress */
    json_t *tpl_pending;  /* built-in template names still to import (creates wait) */
    struct sbx_pool *pool;
    int64_t pool_uid; /* the hidden user owning pooled sandboxes (pool.c) */
};

/* The runtime of r (runc when its name is unknown). */
const runtime_t *sbx_runtime(const sandbox_rec_t *r);
/* The runtime of sandbox id: its live entry's, else its record's, else runc. */
const runtime_t *sbx_runtime_of(sbx_mgr_t *m, const char *id);

/* Paths of one sandbox, all under <state>/sandboxes/<id>/. */
struct sbx_paths {
    char *dir, *bundle, *rootfs, *layer, *upper, *work, *run, *sock, *logs, *etc;
    char *fork_ckpt; /* where a fork into this sandbox checkpoints its parent (tmpfs) */
};
void sbx_paths_init(const sbx_mgr_t *m, const char *id, struct sbx_paths *p);
void sbx_paths_free(struct sbx_paths *p);

/* Close the agent connections of l's directory watches before a change checkpoints or ends
 * the container (l's lock is held for writing): their owners reconnect after it. */
void sbx_fswatches_suspend(struct sbx_live *l);
/* Find (and reference) the live entry for id, creating it if create. */
struct sbx_live *sbx_live_get(sbx_mgr_t *m, const char *id, bool create);
/* Delete or hibernate the sandboxes whose deadline passed (the reaper, once a second). */
void sbx_deadlines_reap(sbx_mgr_t *m);
/* Start and stop the idle reaper thread. */
int sbx_reaper_start(sbx_mgr_t *m, err_t *err);
void sbx_reaper_stop(sbx_mgr_t *m);
/* Take l's lock for a lifecycle change, waiting a while (10 s) for execs and terminal
 * sessions to end; ERR_CONFLICT "sandbox_busy" if they do not. */
int sbx_lock_quiesced(struct sbx_live *l, err_t *err);

/* Drop a reference from sbx_live_get. */
void sbx_live_put(sbx_mgr_t *m, struct sbx_live *l);
/* Forget the live entry of id (after delete or exit). */
void sbx_live_remove(sbx_mgr_t *m, const char *id);
/* Start watching the shim of l for its exit. */
int sbx_watch(sbx_mgr_t *m, struct sbx_live *l, err_t *err);
/* Stop watching l's shim and close its pidfd (it ended, or ends on purpose). */
void sbx_unwatch(sbx_mgr_t *m, struct sbx_live *l);

/* ---- the state machine (state.c) ---- */

/* What can be asked of a sandbox; each has a row in state.c's transition table. */
enum sbx_op {
    SBX_OP_PAUSE,
    SBX_OP_UNPAUSE,
    SBX_OP_HIBERNATE,
    SBX_OP_WAKE,
    SBX_OP_FORK,
    SBX_OP_SNAPSHOT,
    SBX_OP_DELETE,
    SBX_OP_COALESCE,  /* the deletion of one of coalesce's victims */
    SBX_OP_EXIT,      /* the main process ended (the exit watcher) */
    SBX_OP_PROCESSES, /* work inside a running sandbox: exec, files, processes */
    SBX_OP_COUNT
};

/* One change in progress: the sandbox's lock is held and rec was read under it. */
struct sbx_change {
    sbx_mgr_t *m;
    enum sbx_op op;
    char id[65];
    struct sbx_live *l;
    sandbox_rec_t rec;     /* re-read under the lock */
    sandbox_status_t from; /* the status before the change */
    bool locked, intent_written;
    bool preempting; /* counted in l->preempting until the change ends */
};

/* The operation's name, for messages. */
const char *sbx_op_name(enum sbx_op op);
/* True if op may start from status from. */
bool sbx_op_allowed(enum sbx_op op, sandbox_status_t from);
/* True if op has nothing to do in status from (answered as done). */
bool sbx_op_noop(enum sbx_op op, sandbox_status_t from);
/* 0 if op may start on r now; else ERR_CONFLICT saying why (busy, paused, not running). */
int sbx_require_status(enum sbx_op op, const sandbox_rec_t *r, err_t *err);
/*
 * Begin op on owner's sandbox key (any owner's when owner is NULL): take its lock (waiting
 * at most 10 s for execs unless op is the exit), re-read the record into c->rec, check the
 * transition and record op's intent. 0: go on; 1: nothing to do (c is held: end it); -1: err
 * says why and nothing is held.
 */
int sbx_change_begin(sbx_mgr_t *m, const user_t *owner, const char *key, enum sbx_op op,
                     struct sbx_change *c, err_t *err);
/* Record the new status and clear the intent. */
int sbx_change_commit(struct sbx_change *c, sandbox_status_t to, err_t *err);
/* Put the status back as it was before the change and clear the intent. */
void sbx_change_rollback(struct sbx_change *c);
/* Release what the change holds (rolling back an intent that was neither committed nor rolled
 * back). */
void sbx_change_end(struct sbx_change *c);
/* A test barrier (SANDBOXER_BARRIER=NAME:DIR, see state.c): no-op unless asked. */
void sbx_barrier(const char *name);

/* The owner's record for key, with status; ERR_NOT_FOUND for unknown or foreign. */
int sbx_lookup(sbx_mgr_t *m, const user_t *owner, const char *key, sandbox_rec_t *rec, err_t *err);
/* The API JSON of a record. */
json_t *sbx_to_json(sbx_mgr_t *m, const sandbox_rec_t *r);

/* An array of strings without NUL bytes, bounded (ERR_INVALID naming field otherwise). */
int sbx_check_argv(json_t *args, const char *field, bool nonempty, err_t *err);
/*
 * Begin work inside owner's running sandbox key (exec, a terminal, files, processes): wake it
 * if it is hibernated, take its lock for reading, count the work (the idle reaper then sees it
 * busy), and check the status under the lock; *rec is the record read then. 409 if it is
 * paused or otherwise not running, 429 past --max-execs.
 */
int sbx_use_begin(sbx_mgr_t *m, const user_t *owner, const char *key, struct sbx_live **out,
                  sandbox_rec_t *rec, err_t *err);
/* End the work begun by sbx_use_begin. */
void sbx_use_end(sbx_mgr_t *m, struct sbx_live *l);
/* The idle reaper's hibernation of id: only if, under its lock, it still runs and has been
 * idle idle_s seconds. 0 hibernated, 1 not now, -1 failed (it runs on; last_error says why). */
int sbx_hibernate_if_idle(sbx_mgr_t *m, const char *id, double idle_s, err_t *err);
/* Wake a hibernated sandbox of owner before using it (no-op otherwise). */
int sbx_wake_if_needed(sbx_mgr_t *m, const user_t *owner, const char *key, err_t *err);
/* The first TCP port listening on all addresses in owner's sandbox key, or 0. */
int sbx_listening_port(sbx_mgr_t *m, const user_t *owner, const char *key);
/* True if port listens on all addresses in owner's sandbox key. */
bool sbx_port_listening(sbx_mgr_t *m, const user_t *owner, const char *key, int port);
/* Record an event of sandbox id for its owner (looked up when < 0); data is stolen. */
void sbx_event(sbx_mgr_t *m, int64_t owner_id, const char *id, const char *type, json_t *data);
/* Kill the daemon here if SANDBOXER_FAULT names this point (crash-safety tests only). */
void sbx_fault_point(const char *name);
/* The main process of a sandbox whose change c holds ended: record it (exit code from the
 * shim), release the container, keep its files and logs. */
void sbx_finish_exit(sbx_mgr_t *m, const char *id);
/* The main process ended (the exit watcher): the exit transition for id, if shim_pid is
 * still its shim. */
void sbx_on_exit(sbx_mgr_t *m, const char *id, pid_t shim_pid);
/* Remember why the last change of id failed or fell back ({op, detail, at} in its spec,
 * shown by GET /sandboxes/{id}); NULL op clears it. */
void sbx_note(sbx_mgr_t *m, const char *id, const char *op, const char *detail);

/* ---- container primitives (container.c): below the operations, above runtime/net/storage ---- */

/* Create a new sandbox's directories (all but its layer) and its /etc/hostname and hosts. */
int sbx_make_dirs(const struct sbx_paths *p, const char *hostname, err_t *err);
/* Mount the overlay root of r (its spec's layers + its upper dir) unless it is mounted. */
int sbx_mount_rootfs(const sandbox_rec_t *r, const struct sbx_paths *p, err_t *err);
/* Decide (--userns, probing the kernel) whether new runc sandboxes get user namespaces. */
int sbx_userns_setup(sbx_mgr_t *m, err_t *err);
/* Where r's user namespace is bound (<state>/netns/<id>.user); the caller frees it. */
char *sbx_userns_file(sbx_mgr_t *m, const char *id);
/* For r with a user namespace: make it and its network namespace, unless its file is there
 * (r's old netns and veth go; plumb it after). 0 for r without. */
int sbx_userns_netns(sbx_mgr_t *m, const sandbox_rec_t *r, err_t *err);
/* Let go of id's user namespace file. */
void sbx_userns_forget(sbx_mgr_t *m, const char *id);
/* The host uid of r's root in its user namespace (its spec's "userns"), or 0: none. */
uint32_t sbx_userns_base(const sandbox_rec_t *r);
/* Whether a new sandbox of runtime rt gets a user namespace (runc, with --userns on). */
bool sbx_userns_for(sbx_mgr_t *m, const runtime_t *rt);
/* A range of host ids for a new sandbox's user namespace (its base), or 0 if it gets none
 * (--userns off, or a runtime other than runc); ERR_LIMIT if every range is taken. */
int sbx_userns_alloc(sbx_mgr_t *m, const runtime_t *rt, uint32_t *base, err_t *err);
/* Give r its network (a new address, or ip again) and write its /etc files. */
int sbx_net_setup(sbx_mgr_t *m, const sandbox_rec_t *r, const struct sbx_paths *p, const char *ip,
                  err_t *err);
/* Write the OCI config.json of r into its bundle (for a restore from a checkpoint: restore). */
int sbx_write_bundle(sbx_mgr_t *m, const sandbox_rec_t *r, const struct sbx_paths *p, bool restore,
                     err_t *err);
/*
 * Start the prepared bundle of l (shim + runc run, or runc restore from the checkpoint dir
 * restore) and wait until its agent answers: 0, or 1 if the main process already ended (its
 * exit is recorded), -1 on failure. hostname is set again after a restore.
 */
/* True once the shim has written run_fd's "exit" (the container ended), waiting up to 1 s. */
bool sbx_wait_exit_file(int run_fd);
int sbx_boot(sbx_mgr_t *m, struct sbx_live *l, const struct sbx_paths *p, const char *restore,
             const char *hostname, err_t *err);
/* Mount r's root, write its bundle and boot it (from restore, or fresh when NULL). */
int sbx_start(sbx_mgr_t *m, struct sbx_live *l, const sandbox_rec_t *r, const struct sbx_paths *p,
              const char *restore, err_t *err);
/* After a failed restore: clear what it left and start r fresh from its files (cold). */
int sbx_start_cold_after(sbx_mgr_t *m, struct sbx_live *l, const sandbox_rec_t *r,
                         const struct sbx_paths *p, err_t *err);
/* Tear down whatever exists of a sandbox's container and storage (idempotent). */
int sbx_teardown(sbx_mgr_t *m, const char *id, bool remove_dirs, err_t *err);
/* The exit code the shim of id recorded, or -1 if it recorded none. */
int sbx_recorded_exit(sbx_mgr_t *m, const char *id);

/*
 * Before a checkpoint of a RUNTIME_AGENT_QUIESCE runtime: ask l's agent to let go of its host
 * sockets. 0: done (runtime_agent_resume undoes it); ERR_CONFLICT "checkpoint_failed" with
 * the reason when the sandbox holds what the runtime cannot checkpoint (nothing was closed).
 * A no-op for other runtimes.
 */
int sbx_quiesce_agent(sbx_mgr_t *m, struct sbx_live *l, const struct sbx_paths *p, err_t *err);
/* After sbx_quiesce_agent, when no checkpoint followed or after a restore: listen again and
 * wait for the agent to answer. */
int sbx_resume_agent(sbx_mgr_t *m, struct sbx_live *l, const struct sbx_paths *p, err_t *err);

/*
 * Checkpoint l's sandbox r into dir, ending its container (hibernation; runsc's fork and
 * snapshot): the agent quiesced first where the runtime needs it. On failure it runs on: as it
 * was where the runtime allows, else started again from its files (last_error says so).
 */
int sbx_checkpoint_stop(sbx_mgr_t *m, struct sbx_live *l, const sandbox_rec_t *r,
                        const struct sbx_paths *p, const char *dir, const char *work_dir,
                        err_t *err);

/* Where the source of a clone is captured. */
struct sbx_capture {
    const char *ckpt_dir; /* CRIU images; NULL: files only */
    const char *layer;    /* where the writable layer is cloned to */
    const char *work_dir; /* CRIU's log */
    uint64_t quota;       /* the clone's disk limit (0: none) */
};
/*
 * Freeze src (unless its status, read under its lock, is paused), checkpoint it leaving it
 * running, copy its writable layer, thaw it. fault names the crash-test point.
 */
int sbx_capture(sbx_mgr_t *m, const sandbox_rec_t *src, const struct sbx_capture *c,
                const char *fault, err_t *err);

/* Before any image is pulled: ERR_FORBIDDEN unless owner may have a sandbox of q's size. */
int sbx_quota_check_request(sbx_mgr_t *m, const user_t *owner, const struct sbx_create_req *q,
                            err_t *err);
/*
 * Insert the row of a new sandbox (create when fresh, fork or snapshot start otherwise) if
 * owner's limits allow it: its size (a fresh one bounded in disk gets max_disk where the
 * host can), then, under one lock with the insert, the sandboxes owner holds and made.
 */
int sbx_quota_insert(sbx_mgr_t *m, const user_t *owner, sandbox_rec_t *r, bool fresh, err_t *err);
/* ERR_LIMIT unless the owner of a hibernated sandbox may have one more running. */
int sbx_quota_check_wake(sbx_mgr_t *m, int64_t owner_id, err_t *err);

/* Mount the sandbox's socket dir (a small tmpfs, sockdir.c) unless it is mounted. */
int sbx_sockdir_mount(const struct sbx_paths *p, uint32_t owner, err_t *err);
/* Unmount it (nothing mounted is fine). */
int sbx_sockdir_umount(const struct sbx_paths *p, err_t *err);
/* Bytes in use in the socket dir, or -1 when it is not mounted. */
int64_t sbx_sockdir_used(const struct sbx_paths *p);

/* The disk limit in a sandbox's spec (resources.disk), in bytes; 0: none. */
uint64_t sbx_spec_disk(const json_t *spec);

/* ---- templates (template.c) and warm pools (pool.c) ---- */

/* True if s is a template name: 1-64 of a-z 0-9 - _ . starting with a letter or digit. */
bool sbx_template_name_valid(const char *s);
/* The template name as owner sees it (waits while the built-in ones are imported at start). */
int sbx_template_find(sbx_mgr_t *m, const user_t *owner, const char *name, template_rec_t *out,
                      err_t *err);
/* The API JSON of a template. */
json_t *sbx_template_json(sbx_mgr_t *m, const template_rec_t *t);
/* Stop the template threads (import, pools). */
void sbx_templates_stop(sbx_mgr_t *m);
/* Start and stop the warm pools' thread. */
int sbx_pool_start(sbx_mgr_t *m, err_t *err);
void sbx_pool_stop(sbx_mgr_t *m);
/* Ask the pool thread to look at the templates again now. */
void sbx_pool_kick(sbx_mgr_t *m);
/* Delete the pooled sandboxes and the warm snapshot of template_id. */
void sbx_pool_drain(sbx_mgr_t *m, const char *template_id);
/* {size, ready, filling, last_error} of t's pool. */
json_t *sbx_pool_json(sbx_mgr_t *m, const template_rec_t *t);
/* Hand a ready sandbox of t's pool to owner (label, public from q): 0 and *out, or 1 when
 * none is ready (or handing it over failed: the caller starts one cold). */
int sbx_pool_claim(sbx_mgr_t *m, const user_t *owner, const template_rec_t *t,
                   const struct sbx_create_req *q, json_t **out);
/* The hidden user ".pool" (made if missing); sets m->pool_uid. */
int sbx_pool_user(sbx_mgr_t *m, user_t *out, err_t *err);
/* The owner mark r's network rules use: its owner's id, or for a pooled sandbox one of its
 * own (so it reaches no other sandbox until it is handed over). */
int64_t sbx_pool_net_owner(sbx_mgr_t *m, const sandbox_rec_t *r);
/* sbx_snapshot_create without the name rules (the pools' hidden ".pool-…" snapshots). */
int sbx_snapshot_take(sbx_mgr_t *m, const user_t *owner, const char *key, const char *name,
                      json_t **out, err_t *err);
