/* Store: migrations on :memory:, users, tokens. */
#include <unistd.h>

#include "common/id.h"
#include "common/util.h"
#include "store/store.h"
#include "tap.h"

static void test_migrations_reach_latest(void)
{
    err_t err = {0};
    store_t *s = store_open(":memory:", &err);
    ok(s != NULL, "store opens on :memory: (%s)", err.msg);
    if (!s)
        return;
    ok(store_schema_version(s) == store_migration_count(), "schema version %d == migrations %d",
       store_schema_version(s), store_migration_count());
    ok(store_migration_count() >= 1, "there is at least one migration");
    ok(store_ping(s), "store answers a ping");
    store_close(s);
}

static void test_migrations_are_idempotent_on_reopen(void)
{
    char path[] = "/tmp/sbx-store-test-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    err_t err = {0};
    store_t *s = store_open(path, &err);
    user_t u;
    ok(s && store_user_create(s, "alice", false, &u, &err) == 0, "create alice");
    store_close(s);
    s = store_open(path, &err);
    ok(s != NULL, "reopen runs no migration twice (%s)", err.msg);
    user_t again;
    ok(s && store_user_get_by_name(s, "alice", &again, &err) == 0 && again.id == u.id,
       "alice survives reopen");
    store_close(s);
    unlink(path);
    char side[300];
    snprintf(side, sizeof(side), "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof(side), "%s-shm", path);
    unlink(side);
}

static void test_users(store_t *s)
{
    err_t err = {0};
    int64_t n = -1;
    ok(store_user_count(s, &n, &err) == 0 && n == 0, "no users at first");
    user_t admin, dup, got;
    ok(store_user_create(s, "admin", true, &admin, &err) == 0 && admin.is_admin, "create admin");
    ok(store_user_create(s, "admin", false, &dup, &err) < 0 && err.kind == ERR_CONFLICT,
       "duplicate user is a conflict");
    ok(store_user_get_by_name(s, "nobody", &got, &err) < 0 && err.kind == ERR_NOT_FOUND,
       "unknown user is not found");
    ok(store_user_count(s, &n, &err) == 0 && n == 1, "one user");
}

static void test_tokens(store_t *s)
{
    err_t err = {0};
    user_t a, b, who;
    store_user_create(s, "a", false, &a, &err);
    store_user_create(s, "b", false, &b, &err);
    char secret[TOKEN_LEN + 1], hash[TOKEN_HASH_LEN + 1];
    ok(token_generate(secret), "generate a token");
    token_hash(secret, strlen(secret), hash);
    token_info_t t;
    ok(store_token_insert(s, "tok_a1", a.id, "laptop", hash, &t, &err) == 0, "insert a's token");
    token_info_t found;
    ok(store_token_lookup(s, hash, &who, &found, &err) == 0 && who.id == a.id,
       "lookup by hash finds a");
    is_str(found.id, "tok_a1", "lookup returns the token id");
    is_str(found.name, "laptop", "lookup returns the token name");
    char other[TOKEN_HASH_LEN + 1];
    token_hash("sbx_nope", 8, other);
    ok(store_token_lookup(s, other, &who, &found, &err) < 0 && err.kind == ERR_UNAUTHORIZED,
       "unknown hash is unauthorized");
    token_hash(secret, strlen(secret), hash);
    store_token_insert(s, "tok_b1", b.id, "", "00ff", NULL, &err);
    token_info_t *items = NULL;
    size_t n = 0;
    ok(store_token_list(s, a.id, &items, &n, &err) == 0 && n == 1, "a sees one token");
    free(items);
    ok(store_token_list(s, -1, &items, &n, &err) == 0 && n == 2, "all tokens: two");
    free(items);
    ok(store_token_delete(s, "tok_a1", b.id, &err) < 0 && err.kind == ERR_NOT_FOUND,
       "b cannot delete a's token");
    ok(store_token_delete(s, "tok_a1", a.id, &err) == 0, "a deletes its token");
    ok(store_token_lookup(s, hash, &who, &found, &err) < 0, "deleted token no longer works");
}

int main(void)
{
    test_migrations_reach_latest();
    test_migrations_are_idempotent_on_reopen();
    err_t err = {0};
    store_t *s = store_open(":memory:", &err);
    test_users(s);
    test_tokens(s);
    store_close(s);
    return tap_done();
}
