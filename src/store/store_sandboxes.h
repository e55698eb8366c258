/* Sandbox rows, executions and their logs. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "store.h"

/*
 * Where a sandbox is in its lifecycle (docs/lifecycle.md). The names are what the database and
 * the API say; everywhere else the enum is used (the transitions: src/sandbox/state.c).
 */
typedef enum {
    SBX_CREATING,
    SBX_RUNNING,
    SBX_PAUSED,
    SBX_HIBERNATED,
    SBX_EXITED,
    SBX_TERMINATED,
    SBX_STATUS_COUNT
} sandbox_status_t;

/* A multi-step change under way, recorded before its first step so that a daemon killed in
 * the middle finishes or undoes it on the next start. */
typedef enum {
    SBX_INTENT_NONE,
    SBX_INTENT_CREATE,
    SBX_INTENT_DELETE,
    SBX_INTENT_COALESCE,
    SBX_INTENT_HIBERNATE,
    SBX_INTENT_WAKE,
    SBX_INTENT_COUNT
} sandbox_intent_t;

/* The name of a status ("running"). */
const char *sandbox_status_name(sandbox_status_t s);
/* The status called name, or -1. */
int sandbox_status_parse(const char *name);
/* The name of an intent ("hibernate"; "" for none). */
const char *sandbox_intent_name(sandbox_intent_t i);
/* The intent called name ("" or NULL: none), or -1. */
int sandbox_intent_parse(const char *name);

/* One sandbox row. spec is the JSON of everything else we keep (resources, env, args …). */
typedef struct {
    char id[65];
    char name[27];
    int64_t owner_id;
    char label[129];
    char image[512];
    sandbox_status_t status;
    sandbox_intent_t intent;
    bool has_exit_code;
    int exit_code;
    char hostname[64];
    char ip_address[48];
    char parent_id[65];
    double created_at, last_active_at, deleted_at;
    char delete_reason[32];
    bool is_public, interactive;
    char runtime[16];
    json_t *spec; /* owned */
} sandbox_rec_t;

/* Free what a record owns (its spec). */
void store_sandbox_rec_clear(sandbox_rec_t *r);

/* Insert a new sandbox row. */
int store_sandbox_insert(store_t *s, const sandbox_rec_t *r, err_t *err);
/* Delete a row outright (only for a create that never finished). */
int store_sandbox_purge(store_t *s, const char *id, err_t *err);
/* The row whose id or name is key and whose owner is owner_id (any owner if < 0). */
int store_sandbox_get(store_t *s, int64_t owner_id, const char *key, sandbox_rec_t *out,
                      err_t *err);
/* All rows of owner_id (all owners if < 0), oldest first; a malloc'd array. */
int store_sandbox_list(store_t *s, int64_t owner_id, sandbox_rec_t **out, size_t *n, err_t *err);
/* Rows not yet terminated (for reconcile on start). */
int store_sandbox_list_live(store_t *s, sandbox_rec_t **out, size_t *n, err_t *err);
/* The sandbox (not terminated) whose address is ip. */
int store_sandbox_get_by_ip(store_t *s, const char *ip, sandbox_rec_t *out, err_t *err);
/* Running sandboxes the idle reaper may hibernate: all of them when any_timeout (a
 * daemon-wide idle timeout is set), else those whose spec sets an idle_timeout > 0. */
int store_sandbox_list_reapable(store_t *s, bool any_timeout, sandbox_rec_t **out, size_t *n,
                                err_t *err);
/* Sandboxes whose deadline (spec.deadline.end_at) is at or before now and has something to do:
 * not terminated, no change under way, not asleep or ended when it would hibernate. */
int store_sandbox_list_due(store_t *s, double now, sandbox_rec_t **out, size_t *n, err_t *err);
/* Free an array from the list functions. */
void store_sandbox_list_free(sandbox_rec_t *items, size_t n);
/* Set status, intent (SBX_INTENT_NONE clears it) and, if has_exit, the exit code. */
int store_sandbox_set_status(store_t *s, const char *id, sandbox_status_t status,
                             sandbox_intent_t intent, bool has_exit, int exit_code, err_t *err);
/* Set (or with NULL remove) one top-level field of a sandbox's spec JSON. */
int store_sandbox_set_spec_field(store_t *s, const char *id, const char *field, const json_t *value,
                                 err_t *err);
/* Mark terminated: deleted_at now, delete_reason reason. Its executions and their output go
 * (the row stays, for the fork tree, which needs nothing of its history). */
int store_sandbox_set_deleted(store_t *s, const char *id, const char *reason, err_t *err);
/* Update label and/or is_public (NULL label / public < 0 leave them). */
int store_sandbox_update(store_t *s, const char *id, const char *label, int is_public, err_t *err);
/* Give sandbox id to owner_id as if it were created now (a warm pool's sandbox). */
int store_sandbox_hand_over(store_t *s, const char *id, int64_t owner_id, const char *label,
                            bool is_public, double now, err_t *err);
/* Record the sandbox's address (NULL clears it). */
int store_sandbox_set_ip(store_t *s, const char *id, const char *ip, err_t *err);
/* True in *taken if a sandbox that is not terminated, or a snapshot, has the user namespace
 * range at base (its spec's "userns"). */
int store_userns_taken(store_t *s, uint32_t base, bool *taken, err_t *err);
/* Set last_active_at to now. */
void store_sandbox_touch(store_t *s, const char *id);
/* The ids of the children of id as a JSON array (new reference). */
json_t *store_sandbox_child_ids(store_t *s, const char *id);

/* Record the start of an execution; returns its id in *eid. */
int store_exec_begin(store_t *s, const char *sandbox_id, const char *command, int64_t *eid,
                     err_t *err);
/* Append one output chunk (fd 1 or 2) of an execution (dropping the sandbox's oldest history
 * past the cap, see store_set_exec_log_max); an execution no longer recorded takes none. */
int store_exec_log(store_t *s, int64_t eid, int fd, const void *data, size_t len, err_t *err);
/* Record the end of an execution. */
int store_exec_end(store_t *s, int64_t eid, int exit_code, err_t *err);
/* Mark an execution as having lost output (a per-stream cap). */
int store_exec_set_truncated(store_t *s, int64_t eid, err_t *err);
/* Bytes of execution history (commands and output) kept per sandbox; 0: no cap. */
void store_set_exec_log_max(store_t *s, uint64_t max);
/* Remove every execution of sandbox_id with its output. */
int store_exec_forget(store_t *s, const char *sandbox_id, err_t *err);
/* The bytes of history sandbox_id keeps now (-1 if unknown). */
int64_t store_exec_log_bytes(store_t *s, const char *sandbox_id);
/*
 * Up to n executions of sandbox_id without their logs, as JSON objects {id, command,
 * executed_at, exit_code, finished_at, truncated}: with id > cursor oldest first, or with
 * id < cursor newest first.
 */
int store_exec_rows(store_t *s, const char *sandbox_id, int64_t cursor, bool newest_first, int n,
                    json_t **out, err_t *err);
/* The cursor before the newest n executions of sandbox_id (for an oldest-first window). */
int64_t store_exec_window_start(store_t *s, const char *sandbox_id, int n);
/* Output rows {id, fd, content, created_at} of execution eid with id > after: at most
 * max_rows, and no more than max_bytes of content past the first row. */
int store_exec_log_rows(store_t *s, int64_t eid, int64_t after, int max_rows, size_t max_bytes,
                        json_t **out, err_t *err);
/* The execution eid of sandbox_id (ERR_NOT_FOUND otherwise), without its logs. */
int store_exec_get(store_t *s, const char *sandbox_id, int64_t eid, json_t **execution, err_t *err);

/*
 * Every row in the subtree rooted at root_id (root included, terminated ones too), parents
 * before children; a malloc'd array.
 */
int store_sandbox_subtree(store_t *s, const char *root_id, sandbox_rec_t **out, size_t *n,
                          err_t *err);
/* In one transaction: mark victims for deletion (intent "coalesce"), make final a root. */
int store_sandbox_mark_coalesce(store_t *s, const char *final_id, const char *const *victims,
                                size_t n, err_t *err);

/* A snapshot: a checkpoint and a writable layer of one sandbox, to start new ones from. */
typedef struct {
    char id[65];
    char name[129];
    int64_t owner_id;
    char source_id[65];
    char image[512];
    json_t *spec; /* owned */
    bool memory_preserved;
    double created_at;
} snapshot_rec_t;

/* Insert a snapshot; a name the owner already uses is ERR_CONFLICT. */
int store_snapshot_insert(store_t *s, const snapshot_rec_t *r, err_t *err);
/* owner's snapshot called name (ERR_NOT_FOUND otherwise). */
int store_snapshot_get(store_t *s, int64_t owner_id, const char *name, snapshot_rec_t *out,
                       err_t *err);
/* owner's snapshots as a malloc'd array, oldest first. */
int store_snapshot_list(store_t *s, int64_t owner_id, snapshot_rec_t **out, size_t *n, err_t *err);
/* Delete owner's snapshot called name (ERR_NOT_FOUND otherwise). */
int store_snapshot_delete(store_t *s, int64_t owner_id, const char *name, err_t *err);
/* Free a snapshot record's spec / a list of them. */
void store_snapshot_rec_clear(snapshot_rec_t *r);
void store_snapshot_list_free(snapshot_rec_t *items, size_t n);
/* True if a snapshot with this id is recorded. */
bool store_snapshot_exists(store_t *s, const char *id);
/* Add the layer dirs snapshots need to set (a JSON object used as a set). */
int store_snapshot_layers(store_t *s, json_t *set, err_t *err);
