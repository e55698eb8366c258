/*
 * Numbered schema migrations. Each runs once, in order, inside a transaction; the number
 * of the last one applied is PRAGMA user_version. Never edit a released migration: add one.
 */
#include "store_internal.h"

const char *const store_migrations[] = {
    /* 1: users, tokens, sandboxes, executions, execution logs, events. */
    "CREATE TABLE users ("
    "  id INTEGER PRIMARY KEY,"
    "  name TEXT NOT NULL UNIQUE,"
    "  is_admin INTEGER NOT NULL DEFAULT 0,"
    "  created_at REAL NOT NULL"
    ");"
    "CREATE TABLE tokens ("
    "  id TEXT PRIMARY KEY,"
    "  user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,"
    "  name TEXT NOT NULL DEFAULT '',"
    "  hash TEXT NOT NULL UNIQUE,"
    "  created_at REAL NOT NULL,"
    "  last_used_at REAL"
    ");"
    "CREATE INDEX tokens_user ON tokens(user_id);"
    "CREATE TABLE sandboxes ("
    "  id TEXT PRIMARY KEY,"
    "  name TEXT NOT NULL UNIQUE,"
    "  owner_id INTEGER NOT NULL REFERENCES users(id),"
    "  label TEXT NOT NULL DEFAULT '',"
    "  image TEXT NOT NULL DEFAULT '',"
    "  status TEXT NOT NULL,"
    "  intent TEXT,"
    "  exit_code INTEGER,"
    "  hostname TEXT,"
    "  ip_address TEXT,"
    "  parent_id TEXT REFERENCES sandboxes(id),"
    "  created_at REAL NOT NULL,"
    "  last_active_at REAL NOT NULL,"
    "  deleted_at REAL,"
    "  delete_reason TEXT,"
    "  is_public INTEGER NOT NULL DEFAULT 0,"
    "  interactive INTEGER NOT NULL DEFAULT 0,"
    "  runtime TEXT NOT NULL DEFAULT 'runc',"
    "  spec TEXT NOT NULL DEFAULT '{}'"
    ");"
    "CREATE INDEX sandboxes_owner ON sandboxes(owner_id);"
    "CREATE INDEX sandboxes_parent ON sandboxes(parent_id);"
    "CREATE TABLE executions ("
    "  id INTEGER PRIMARY KEY,"
    "  sandbox_id TEXT NOT NULL REFERENCES sandboxes(id),"
    "  command TEXT NOT NULL,"
    "  executed_at REAL NOT NULL,"
    "  finished_at REAL,"
    "  exit_code INTEGER"
    ");"
    "CREATE INDEX executions_sandbox ON executions(sandbox_id, id);"
    "CREATE TABLE execution_logs ("
    "  id INTEGER PRIMARY KEY,"
    "  execution_id INTEGER NOT NULL REFERENCES executions(id) ON DELETE CASCADE,"
    "  fd INTEGER NOT NULL,"
    "  content BLOB NOT NULL,"
    "  created_at REAL NOT NULL"
    ");"
    "CREATE INDEX execution_logs_exec ON execution_logs(execution_id, id);"
    "CREATE TABLE events ("
    "  id INTEGER PRIMARY KEY,"
    "  owner_id INTEGER NOT NULL REFERENCES users(id),"
    "  sandbox_id TEXT,"
    "  type TEXT NOT NULL,"
    "  timestamp REAL NOT NULL,"
    "  data TEXT NOT NULL DEFAULT '{}'"
    ");"
    "CREATE INDEX events_owner ON events(owner_id, id);",

    /* 2: the image store. */
    "CREATE TABLE images ("
    "  ref TEXT PRIMARY KEY,"            /* normalised: docker.io/library/busybox:latest */
    "  digest TEXT NOT NULL,"            /* manifest digest, sha256:... */
    "  config TEXT NOT NULL,"            /* the OCI image config JSON */
    "  layers TEXT NOT NULL,"            /* JSON array of layer diff_ids, bottom first */
    "  size INTEGER NOT NULL DEFAULT 0," /* unpacked bytes */
    "  created_at REAL NOT NULL,"
    "  pulled_at REAL NOT NULL"
    ");",

    /* 3: snapshots: a checkpoint and a writable layer to start sandboxes from. */
    "CREATE TABLE snapshots ("
    "  id TEXT PRIMARY KEY,"
    "  name TEXT NOT NULL,"
    "  owner_id INTEGER NOT NULL REFERENCES users(id),"
    "  source_id TEXT NOT NULL,"
    "  image TEXT NOT NULL,"
    "  spec TEXT NOT NULL,"
    "  memory_preserved INTEGER NOT NULL DEFAULT 1,"
    "  created_at REAL NOT NULL,"
    "  UNIQUE (owner_id, name)"
    ");",

    /*
     * 4: execution output bounded per sandbox (exec_log_bytes counts commands and output;
     * truncated marks an execution that lost output to a cap), the rows of deleted sandboxes
     * removed, and per-user limits (NULL: the daemon's default).
     */
    "ALTER TABLE executions ADD COLUMN truncated INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE sandboxes ADD COLUMN exec_log_bytes INTEGER NOT NULL DEFAULT 0;"
    "DELETE FROM execution_logs WHERE execution_id IN (SELECT e.id FROM executions e "
    "  JOIN sandboxes s ON s.id = e.sandbox_id WHERE s.status = 'terminated');"
    "DELETE FROM executions WHERE sandbox_id IN "
    "  (SELECT id FROM sandboxes WHERE status = 'terminated');"
    "UPDATE sandboxes SET exec_log_bytes = "
    "  coalesce((SELECT sum(length(CAST(command AS BLOB))) FROM executions "
    "            WHERE sandbox_id = sandboxes.id), 0) + "
    "  coalesce((SELECT sum(length(l.content)) FROM execution_logs l "
    "            JOIN executions e ON e.id = l.execution_id WHERE e.sandbox_id = sandboxes.id), 0);"
    "CREATE TABLE user_limits ("
    "  user_id INTEGER PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,"
    "  max_running INTEGER,"
    "  max_sandboxes INTEGER,"
    "  max_cpus REAL,"
    "  max_memory INTEGER,"
    "  max_pids INTEGER,"
    "  max_disk INTEGER,"
    "  max_creates_per_minute INTEGER,"
    "  updated_at REAL NOT NULL"
    ");"
    "CREATE INDEX sandboxes_owner_created ON sandboxes(owner_id, created_at);",

    /* 5: templates: names new sandboxes start from (an image or a snapshot), global when
     * owner_id is 0 (no user has id 0), with the size of their warm pool. */
    "CREATE TABLE templates ("
    "  id TEXT PRIMARY KEY,"
    "  name TEXT NOT NULL,"
    "  owner_id INTEGER NOT NULL DEFAULT 0,"
    "  source TEXT NOT NULL,"              /* builtin | dockerfile | snapshot */
    "  image TEXT NOT NULL DEFAULT '',"    /* the image ref in the store */
    "  snapshot TEXT NOT NULL DEFAULT ''," /* the owner's snapshot name (source snapshot) */
    "  setuid INTEGER NOT NULL DEFAULT 1,"
    "  pool INTEGER NOT NULL DEFAULT 0,"
    "  created_at REAL NOT NULL,"
    "  updated_at REAL NOT NULL,"
    "  info TEXT NOT NULL DEFAULT '{}',"
    "  UNIQUE (owner_id, name)"
    ");",

    /*
     * 6: E2B clients. API keys are tokens of their own kind ('e2b': X-API-KEY, never a
     * bearer token); each sandbox made through E2B's API has an id of E2B's form (20
     * lowercase letters and digits) and keeps what E2B's create set: the template asked
     * for, metadata, the environment of its commands, the envd access token of a secure
     * sandbox, and whether its ports answer without that token.
     */
    "ALTER TABLE tokens ADD COLUMN kind TEXT NOT NULL DEFAULT 'sbx';"
    "CREATE TABLE e2b_sandboxes ("
    "  e2b_id TEXT PRIMARY KEY,"
    "  sandbox_id TEXT NOT NULL UNIQUE REFERENCES sandboxes(id),"
    "  owner_id INTEGER NOT NULL REFERENCES users(id),"
    "  template_id TEXT NOT NULL,"
    "  metadata TEXT NOT NULL DEFAULT '{}',"
    "  env TEXT NOT NULL DEFAULT '{}',"
    "  access_token TEXT NOT NULL DEFAULT '',"
    "  public_traffic INTEGER NOT NULL DEFAULT 1,"
    "  started_at REAL NOT NULL"
    ");"
    "CREATE INDEX e2b_sandboxes_owner ON e2b_sandboxes(owner_id, started_at);",
};

const int store_migrations_count = sizeof(store_migrations) / sizeof(store_migrations[0]);
