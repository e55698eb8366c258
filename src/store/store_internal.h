/* Shared by the store's own files; never included above src/store/. */
#pragma once

#include <pthread.h>
#include <stdint.h>
#include <sqlite3.h>

#include "store.h"

struct store {
    sqlite3 *db;
    /* One connection shared by all request threads; statements are short. */
    pthread_mutex_t lock;
    int version;
    uint64_t exec_log_max; /* bytes of execution history kept per sandbox (0: no cap) */
};

extern const char *const store_migrations[];
extern const int store_migrations_count;

static inline void cleanup_finalizep(sqlite3_stmt **st)
{
    if (*st)
        sqlite3_finalize(*st);
}
#define _cleanup_stmt_ __attribute__((cleanup(cleanup_finalizep)))

/* Lock s until the end of the enclosing scope. */
static inline void store_unlockp(store_t **s)
{
    if (*s)
        pthread_mutex_unlock(&(*s)->lock);
}
#define STORE_LOCK(s)                                                                              \
    pthread_mutex_lock(&(s)->lock);                                                                \
    __attribute__((cleanup(store_unlockp))) store_t *store_locked_ = (s)

/* Prepare sql or set err (ERR_INTERNAL with SQLite's message). */
int store_prepare(store_t *s, const char *sql, sqlite3_stmt **st, err_t *err);
/* Turn the last SQLite failure into err; returns -1. */
int store_fail(store_t *s, const char *what, err_t *err);
/* Copy column col of st as text into out (size bytes), "" for NULL. */
void store_col_text(sqlite3_stmt *st, int col, char *out, size_t size);
