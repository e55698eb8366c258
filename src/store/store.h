/* The store: SQLite in WAL mode, the source of truth. Typed accessors only; no SQL above. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/error.h"

typedef struct store store_t;

/* A user (tenant). Sandboxes and tokens belong to one. */
typedef struct {
    int64_t id;
    char name[65];
    bool is_admin;
    double created_at;
} user_t;

/* A token's public record; its secret is never stored, only the SHA-256. */
typedef struct {
    char id[32];
    int64_t user_id;
    char user_name[65];
    char name[129];
    double created_at;
    double last_used_at; /* 0 = never */
    char kind[8];        /* "sbx" (a bearer token) or "e2b" (an E2B API key, X-API-KEY) */
} token_info_t;

/* Open (creating) the database at path (":memory:" for tests) and run migrations. */
store_t *store_open(const char *path, err_t *err);
/* Close the database. */
void store_close(store_t *s);
/* The schema version after migrations (the number of the last one applied). */
int store_schema_version(store_t *s);
/* The number of migrations this build knows. */
int store_migration_count(void);
/* True if the database answers a trivial query. */
bool store_ping(store_t *s);
/* Counts for /metrics: {"sandboxes": {status: n}, "users": n, "executions": n,
 * "snapshots": n} (a new object in *out). */
int store_counts(store_t *s, json_t **out, err_t *err);

/* Number of users. */
int store_user_count(store_t *s, int64_t *out, err_t *err);
/* Create a user; name must be unique (ERR_CONFLICT otherwise). */
int store_user_create(store_t *s, const char *name, bool is_admin, user_t *out, err_t *err);
/* Look up a user by name (ERR_NOT_FOUND if none). */
int store_user_get_by_name(store_t *s, const char *name, user_t *out, err_t *err);
/* Look up a user by id (ERR_NOT_FOUND if none). */
int store_user_get_by_id(store_t *s, int64_t id, user_t *out, err_t *err);

/*
 * Limits of one user. Negative: unset (the daemon's default applies); in effective limits,
 * negative means none. Admins are held to none of them.
 */
typedef struct {
    int64_t max_running;   /* sandboxes creating, running or paused at once */
    int64_t max_sandboxes; /* sandboxes not deleted (hibernated and exited ones included) */
    double max_cpus;       /* CPUs of one sandbox */
    int64_t max_memory;    /* memory of one sandbox, bytes */
    int64_t max_pids;      /* tasks of one sandbox */
    int64_t max_disk;      /* writable layer of one sandbox, bytes */
    int64_t max_creates_per_minute; /* creates, forks and snapshot starts */
} user_limits_t;

/* What a user holds now. */
typedef struct {
    int64_t running;          /* creating, running or paused */
    int64_t sandboxes;        /* not deleted */
    int64_t created_recently; /* rows created since the time asked about */
} user_usage_t;

/* Every field unset. */
void store_limits_unset(user_limits_t *l);
/* The limits set for user_id (all unset if none were). */
int store_user_limits_get(store_t *s, int64_t user_id, user_limits_t *out, err_t *err);
/* Replace the limits of user_id (unset fields: the defaults). */
int store_user_limits_set(store_t *s, int64_t user_id, const user_limits_t *l, err_t *err);
/* Count user_id's sandboxes now, and those created at or after since (Unix seconds). */
int store_user_usage(store_t *s, int64_t user_id, double since, user_usage_t *out, err_t *err);
/* When the oldest of user_id's sandboxes created at or after since was created (or since). */
double store_user_oldest_create_since(store_t *s, int64_t user_id, double since);

/* Record a token for user_id; hash is the SHA-256 hex of the secret. */
int store_token_insert(store_t *s, const char *id, int64_t user_id, const char *name,
                       const char *hash, token_info_t *out, err_t *err);
/* The same for a token of kind ("sbx", "e2b"). */
int store_token_insert_kind(store_t *s, const char *id, int64_t user_id, const char *name,
                            const char *kind, const char *hash, token_info_t *out, err_t *err);
/* Find the token whose hash matches and its user (ERR_UNAUTHORIZED if none). */
int store_token_lookup(store_t *s, const char *hash, user_t *user, token_info_t *tok, err_t *err);
/* Note that a token was used now (rate-limited to one write a minute per token). */
void store_token_touch(store_t *s, const token_info_t *tok);
/* List tokens of user_id (all users when user_id < 0) into a malloc'd array. */
int store_token_list(store_t *s, int64_t user_id, token_info_t **out, size_t *n, err_t *err);
/* Delete token id if it belongs to user_id (any user when user_id < 0); ERR_NOT_FOUND else. */
int store_token_delete(store_t *s, const char *id, int64_t user_id, err_t *err);
