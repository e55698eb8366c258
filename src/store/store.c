#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "store_internal.h"

int store_prepare(store_t *s, const char *sql, sqlite3_stmt **st, err_t *err)
{
    if (sqlite3_prepare_v2(s->db, sql, -1, st, NULL) != SQLITE_OK)
        return store_fail(s, "prepare", err);
    return 0;
}

int store_fail(store_t *s, const char *what, err_t *err)
{
    int code = sqlite3_extended_errcode(s->db);
    if ((code & 0xff) == SQLITE_CONSTRAINT)
        return err_set(err, ERR_CONFLICT, 0, "conflict", "%s: %s", what, sqlite3_errmsg(s->db));
    return err_set(err, ERR_INTERNAL, 0, "store", "store %s: %s", what, sqlite3_errmsg(s->db));
}

void store_col_text(sqlite3_stmt *st, int col, char *out, size_t size)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    snprintf(out, size, "%s", t ? (const char *)t : "");
}

static int exec_sql(store_t *s, const char *sql, err_t *err)
{
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        err_set(err, ERR_INTERNAL, 0, "store", "store: %s", msg ? msg : "unknown error");
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

static int read_version(store_t *s, err_t *err)
{
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, "PRAGMA user_version", &st, err) < 0)
        return -1;
    if (sqlite3_step(st) != SQLITE_ROW)
        return store_fail(s, "read schema version", err);
    s->version = sqlite3_column_int(st, 0);
    return 0;
}

/* Apply every migration after the current user_version, each in its own transaction. */
static int migrate(store_t *s, err_t *err)
{
    if (read_version(s, err) < 0)
        return -1;
    if (s->version > store_migrations_count)
        return err_set(err, ERR_INTERNAL, 0, "store",
                       "database schema %d is newer than this build knows (%d)", s->version,
                       store_migrations_count);
    for (int v = s->version; v < store_migrations_count; v++) {
        char pragma[64];
        snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %d;", v + 1);
        if (exec_sql(s, "BEGIN IMMEDIATE;", err) < 0)
            return -1;
        if (exec_sql(s, store_migrations[v], err) < 0 || exec_sql(s, pragma, err) < 0) {
            exec_sql(s, "ROLLBACK;", NULL);
            return err_prefix(err, "migration %d", v + 1);
        }
        if (exec_sql(s, "COMMIT;", err) < 0)
            return -1;
        s->version = v + 1;
        log_info("store.migrated", "version=%d", v + 1);
    }
    return 0;
}

store_t *store_open(const char *path, err_t *err)
{
    store_t *s = xcalloc(1, sizeof(*s));
    pthread_mutex_init(&s->lock, NULL);
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    /* The host's root only (tokens' hashes, agent tokens, sandboxes' environments): SQLite
     * gives its -wal and -shm files the database file's mode. The state dir can be searched
     * by others (a sandbox's root in its user namespace has to reach its own dirs). */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
        fchmod(fd, 0600);
        close(fd);
    }
    const char *suffixes[] = {"-wal", "-shm"};
    for (size_t i = 0; i < 2; i++) {
        char *side = xasprintf("%s%s", path, suffixes[i]);
        chmod(side, 0600);
        free(side);
    }
    if (sqlite3_open_v2(path, &s->db, flags, NULL) != SQLITE_OK) {
        err_set(err, ERR_INTERNAL, 0, "store", "open database %s: %s", path,
                s->db ? sqlite3_errmsg(s->db) : "out of memory");
        store_close(s);
        return NULL;
    }
    sqlite3_busy_timeout(s->db, 5000);
    /*
     * WAL for crash safety and concurrent readers. synchronous = NORMAL keeps every
     * committed transaction across a crash of the daemon (the case invariant 6 is about)
     * without an fsync per commit; a power cut may lose the last commits, never consistency.
     */
    if (exec_sql(s,
                 "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
                 "PRAGMA foreign_keys = ON;",
                 err) < 0 ||
        migrate(s, err) < 0) {
        store_close(s);
        return NULL;
    }
    return s;
}

void store_close(store_t *s)
{
    if (!s)
        return;
    if (s->db)
        sqlite3_close_v2(s->db);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int store_schema_version(store_t *s)
{
    return s->version;
}

int store_migration_count(void)
{
    return store_migrations_count;
}

bool store_ping(store_t *s)
{
    STORE_LOCK(s);
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT 1", -1, &st, NULL) != SQLITE_OK)
        return false;
    return sqlite3_step(st) == SQLITE_ROW;
}

/* One "SELECT k, COUNT(*) ... GROUP BY k" (or a single count with k = NULL) into obj. */
static int count_into(store_t *s, const char *sql, json_t *obj, const char *single, err_t *err)
{
    sqlite3_stmt *st _cleanup_stmt_ = NULL;
    if (store_prepare(s, sql, &st, err) < 0)
        return -1;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (single) {
            json_object_set_new(obj, single, json_integer(sqlite3_column_int64(st, 0)));
            continue;
        }
        const char *k = (const char *)sqlite3_column_text(st, 0);
        json_object_set_new(obj, k ? k : "", json_integer(sqlite3_column_int64(st, 1)));
    }
    return rc == SQLITE_DONE ? 0 : store_fail(s, "count", err);
}

int store_counts(store_t *s, json_t **out, err_t *err)
{
    STORE_LOCK(s);
    json_t *j = json_object(), *by_status = json_object();
    json_object_set_new(j, "sandboxes", by_status);
    int rc = count_into(s, "SELECT status, COUNT(*) FROM sandboxes GROUP BY status", by_status,
                        NULL, err);
    if (rc == 0)
        rc = count_into(s, "SELECT COUNT(*) FROM users", j, "users", err);
    if (rc == 0)
        rc = count_into(s, "SELECT COUNT(*) FROM executions", j, "executions", err);
    if (rc == 0)
        rc = count_into(s, "SELECT COUNT(*) FROM snapshots", j, "snapshots", err);
    if (rc < 0) {
        json_decref(j);
        return -1;
    }
    *out = j;
    return 0;
}
