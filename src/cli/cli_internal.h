/* What the CLI's verb files share: the session, the verb table row, parsed arguments, output. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "client.h"
#include "common/error.h"

/*
 * Exit statuses: 0 success, 1 a failure (server error, unreachable), 2 a usage error, which
 * is an err_t with code "usage" (bad arguments: the verb's --help is suggested) or "config"
 * (a bad --url, SANDBOXER_URL or token).
 */
#define CLI_EXIT_OK    0
#define CLI_EXIT_FAIL  1
#define CLI_EXIT_USAGE 2

/* Where the token in use came from, so a 401 can say what to fix. */
enum cli_token_source { TOKEN_NONE = 0, TOKEN_OPTION, TOKEN_ENV, TOKEN_FILE };

/* One invocation: global options, the verb being run, and the lazily made client. */
typedef struct cli {
    bool json;          /* --json: print the server's JSON as it came */
    const char *url;    /* --url */
    const char *socket; /* --socket */
    const char *token;  /* --token */
    enum cli_token_source token_source;
    const struct cli_verb *verb;
    client_t *client;
} cli_t;

typedef struct cli_args cli_args_t;

/*
 * A verb's handler. Returns the exit status (0 on success; a verb like exec may pass on a
 * remote status), or -1 with err set, which cli_main prints once as "sandboxer: <message>".
 */
typedef int (*cli_handler_t)(cli_t *cli, const cli_args_t *args, err_t *err);

/*
 * A row of the verb table in cli.c. `name` is one word ("whoami") or a group and a word
 * ("token create"). `opts` lists the verb's options, comma-separated: "name=" takes a value,
 * "admin" is a flag, "n|name=" adds a short form; any option may be given more than once
 * (cli_opt_str takes the last, cli_opt_nth walks them all). A leading "+" stops option parsing
 * at the first positional argument beyond the min_args required ones (for verbs that pass a
 * command on: `exec ID ls -l`). --json and -h/--help are accepted by every verb.
 */
struct cli_verb {
    const char *name;
    const char *section; /* the heading `sandboxer --help` lists it under */
    cli_handler_t run;   /* NULL: listed in help but handled elsewhere (serve) */
    const char *summary;
    const char *synopsis; /* after "sandboxer <name> " */
    const char *help;     /* description and options, printed by --help */
    const char *opts;
    int min_args, max_args; /* positional arguments; max -1 = any number */
    /* With "+": how many positionals may come before the one that ends option parsing, when
     * more than min_args (create takes an optional IMAGE, then options, then ARGS). */
    int fixed_args;
};

/* --- args.c: per-verb argument parsing ------------------------------------------------- */

/* Parse argv (the words after the verb) against verb->opts into a new *out; -1 = usage error.
 * Sets cli->json on --json and *help on -h/--help. */
int cli_args_parse(cli_t *cli, const struct cli_verb *verb, int argc, char **argv, cli_args_t **out,
                   bool *help, err_t *err);
void cli_args_free(cli_args_t *a);
/* The value of the last --name VALUE, or NULL if absent. */
const char *cli_opt_str(const cli_args_t *a, const char *name);
/* The value of the n-th (from 0) --name VALUE in the order given, or NULL past the last:
 * for repeatable options, `for (i = 0; (v = cli_opt_nth(a, "env", i)); i++)`. */
const char *cli_opt_nth(const cli_args_t *a, const char *name, int n);
/* Every --name KEY=VALUE as a new JSON object in *out (NULL if none was given; a repeated KEY
 * takes the last value); a word without '=' or an empty KEY is a usage error. */
int cli_opt_env(const cli_args_t *a, const char *name, json_t **out, err_t *err);
/* True if the flag --name was given. */
bool cli_opt_flag(const cli_args_t *a, const char *name);
/* The positional arguments. */
int cli_nargs(const cli_args_t *a);
const char *cli_arg(const cli_args_t *a, int i);

/* Set obj[key] to the string value, if given; text that is not UTF-8 is a usage error
 * "<prefix>the <key> '<value>' is not UTF-8 text" (prefix: "", "fork: "…). */
int cli_put_str(json_t *obj, const char *key, const char *value, const char *prefix, err_t *err);
/* Set obj[key] to the number in the option's value v, if given; a value that is not a finite
 * positive number is a usage error "<verb>: --<key> wants <want>, not '<v>'". */
int cli_put_positive(json_t *obj, const char *key, const char *v, const char *verb,
                     const char *want, err_t *err);
/* Set obj[key] to the positional arguments after the first (a command's words) as an array;
 * one that is not UTF-8 is a usage error "<verb>: the argument '<arg>' is not UTF-8 text". */
int cli_put_args(json_t *obj, const char *key, const cli_args_t *args, const char *verb,
                 err_t *err);

/* What rm-like verbs do to one of their arguments (an id, a ref). */
typedef int (*cli_item_fn)(cli_t *cli, client_t *c, const char *item, err_t *err);
/* Connect (with a token), then run fn on each positional argument (an empty one is a usage
 * error). An error about one item (not found, forbidden, invalid, conflict) is printed,
 * prefixed with the item, and the others go on; any other error stops at once (-1, err set).
 * Returns 0, or 1 if any item failed. */
int cli_each_arg(cli_t *cli, const cli_args_t *args, cli_item_fn fn, err_t *err);

/* --- conn.c: reaching the daemon, the token --------------------------------------------- */

/* The client for this invocation, made on first use (which decides auth): with auth, the
 * token is resolved too and sent on every call. */
client_t *cli_connect(cli_t *cli, bool auth, err_t *err);
/* The token file: $XDG_CONFIG_HOME/sandboxer/token or ~/.config/sandboxer/token (new string). */
char *cli_token_path(void);
/* Write token to the token file atomically, mode 0600, making its directories 0700. */
int cli_token_save(const char *token, const char *path, err_t *err);
/* A sentence for a 401: where the token came from and how to get one (static storage). */
const char *cli_token_hint(const cli_t *cli);

/* --- output.c: printing ----------------------------------------------------------------- */

/* Print the server's body exactly, with a final newline if it lacks one. */
void cli_print_raw(const client_resp_t *resp);
/* Print a JSON value we built ourselves, indented. */
void cli_print_json(const json_t *j);
/* The answer as it came with --json, else its JSON indented. */
void cli_print_answer(const cli_t *cli, const client_resp_t *resp);
/* A copy of s fit for a terminal: control characters become '?' (new string). */
char *cli_safe(const char *s);
/* Like cli_safe, but newlines are kept: for text of several lines (a tree). */
char *cli_safe_lines(const char *s);
/* A Unix time as local "YYYY-MM-DD HH:MM", or "-" for null or 0, into out. */
const char *cli_format_time(const json_t *t, char *out, size_t size);
/* A byte count as decimal "4.2 MB" (as `docker images` does), or "-" if not a number. */
const char *cli_format_size(const json_t *bytes, char *out, size_t size);
/* Write len bytes to f and flush them, for output that streams; -1 with err on failure. */
int cli_write(FILE *f, const char *data, size_t len, err_t *err);
/* The string member key of obj, or fallback when absent or not a string. */
const char *cli_jstr(const json_t *obj, const char *key, const char *fallback);

/* A text table: cells are copied and made terminal-safe; columns padded to fit. */
typedef struct cli_table cli_table_t;
cli_table_t *cli_table_new(int ncols, const char *const *headers);
void cli_table_add(cli_table_t *t, const char *const *cells);
void cli_table_print(const cli_table_t *t, FILE *out);
void cli_table_free(cli_table_t *t);

/* Set a usage error (exit status 2); returns -1. */
int cli_usage(err_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print err as "sandboxer: <message>" on stderr, with a hint for a 401. */
void cli_print_error(const cli_t *cli, const err_t *err);

static inline void cleanup_argsp(cli_args_t **a)
{
    cli_args_free(*a);
}
static inline void cleanup_tablep(cli_table_t **t)
{
    cli_table_free(*t);
}
#define _cleanup_args_  __attribute__((cleanup(cleanup_argsp)))
#define _cleanup_table_ __attribute__((cleanup(cleanup_tablep)))

/* --- verbs.c: what verbs share: listing, removing, checking the answer ------------------- */

/* Add a list verb's row for one item to t (or none, to leave it out); args are the verb's. */
typedef void (*cli_row_fn)(cli_table_t *t, const json_t *item, const cli_args_t *args);
/* GET path; the answer's member key must be an array ("the daemon's answer lists no <key>"
 * if not): print the answer as it came with --json, else a table with the NULL-terminated
 * headers and a row added by row for each item. */
int cli_list(cli_t *cli, const cli_args_t *args, const char *path, const char *key,
             const char *const *headers, cli_row_fn row, err_t *err);
/* DELETE path, then print the answer as it came with --json, else (terminal-safe) its string
 * member key, or item if it has none: an rm verb's work on one item. */
int cli_delete(cli_t *cli, client_t *c, const char *path, const char *key, const char *item,
               err_t *err);
/* The string member key of a 2xx answer, or NULL with err "the daemon's answer holds no <key>". */
const char *cli_answer_str(const client_resp_t *resp, const char *key, err_t *err);

/* --- cmd_sandbox.c: naming a sandbox --------------------------------------------------- */

/* How long a call that may pull an image may take (create, image pull). */
#define CLI_PULL_TIMEOUT_S (15 * 60)
/* How long a call that checkpoints or restores a sandbox may take (fork, hibernate, wake,
 * snapshot create): CRIU writes all of its memory to disk, and a big sandbox takes a while. */
#define CLI_CHECKPOINT_TIMEOUT_S (5 * 60)
/* Hex digits of a sandbox id that `ls` shows, and that notes print. */
#define CLI_ID_SHORT 12

/* The path "/sandboxes/<key><suffix>" in *out (new string) for key as the user gave it: a
 * 64-hex id, a name, or a unique prefix of an id as `ls` shows it (at least 4 hex digits),
 * which takes a GET /sandboxes to resolve. suffix may hold a query ("/logs?stream=true"). */
int cli_sandbox_path(client_t *c, const char *key, const char *suffix, char **out, err_t *err);
/* The sandbox key as the daemon takes it in a path, in *out (new string): the full id for a
 * unique prefix, else key unchanged. */
int cli_sandbox_id(client_t *c, const char *key, char **out, err_t *err);
/* Send method with body (may be NULL) to cli_sandbox_path's path for key and suffix. */
int cli_sandbox_call(client_t *c, const char *key, const char *method, const char *suffix,
                     const json_t *body, client_resp_t *resp, err_t *err);
/* Connect, and POST body (may be NULL) to key's sandbox and suffix as cli_sandbox_call does,
 * allowing CLI_CHECKPOINT_TIMEOUT_S: fork, snapshot create and coalesce take that long. */
int cli_checkpoint_post(cli_t *cli, const char *key, const char *suffix, const json_t *body,
                        client_resp_t *resp, err_t *err);

/* --- the verbs -------------------------------------------------------------------------- */

int cmd_version(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_whoami(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_token_create(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_token_ls(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_token_rm(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_create(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_ls(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_inspect(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_rm(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_exec(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_shell(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_update(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_history(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_stats(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_files_ls(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_files_stat(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_files_rm(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_completion(cli_t *cli, const cli_args_t *args, err_t *err);
/* The verb table (for completion). */
const struct cli_verb *cli_verb_table(size_t *n);
int cmd_attach(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_events(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_caddy_config(cli_t *cli, const cli_args_t *args, err_t *err);
/* sandboxer doctor: host checks (src/doctor/), no daemon. */
int cmd_doctor(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_logs(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_cp(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_image_pull(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_image_import(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_image_ls(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_image_rm(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_fork(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_tree(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_coalesce(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_pause(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_unpause(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_hibernate(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_wake(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_snapshot_create(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_snapshot_ls(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_snapshot_rm(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_template_build(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_template_ls(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_template_rm(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_template_pool(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_ps(cli_t *cli, const cli_args_t *args, err_t *err);
int cmd_kill(cli_t *cli, const cli_args_t *args, err_t *err);
/* exec -d: POST body (argv or code, env, cwd, user, stdin) as a background process; prints
 * its pid. */
int cli_exec_detached(cli_t *cli, const cli_args_t *args, json_t *body, err_t *err);
/* logs ID --process PID [-f]: a background process's output (followed, resuming by cursor
 * when the stream breaks off). */
int cli_logs_process(cli_t *cli, const cli_args_t *args, const char *pid, err_t *err);
