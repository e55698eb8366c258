/* sandboxer exec | logs: commands in a sandbox and the main process's output, streamed
 * (exec -d and logs --process: cmd_procs.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"

#define EXEC_STDIN_MAX (16u << 20) /* the daemon's bound on "stdin" */

/* What the exec stream told so far. */
struct exec_state {
    bool json;      /* print the lines as they came */
    bool ended;     /* an "exit" event came */
    int exit_code;  /* from it */
    bool timed_out; /* from it */
};

/* --- the request ------------------------------------------------------------------------ */

/* All of the CLI's stdin as a JSON string: it must be UTF-8 text without NUL bytes. */
static int read_stdin(json_t **out, err_t *err)
{
    buf_t b = {0};
    char chunk[65536];
    ssize_t n;
    while ((n = read(STDIN_FILENO, chunk, sizeof(chunk))) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || b.len + (size_t)n > EXEC_STDIN_MAX) {
            int r = n < 0 ? err_sys(err, "exec: cannot read stdin")
                          : err_set(err, ERR_TOO_LARGE, 0, "stdin_too_large",
                                    "exec: --stdin takes at most %u MiB; copy larger input "
                                    "into the sandbox as a file",
                                    EXEC_STDIN_MAX >> 20);
            buf_free(&b);
            return r;
        }
        buf_append(&b, chunk, (size_t)n);
    }
    bool nul = b.len > 0 && memchr(b.data, '\0', b.len) != NULL;
    *out = nul ? NULL : json_stringn(b.data ? b.data : "", b.len);
    buf_free(&b);
    if (!*out)
        return err_set(err, ERR_INVALID, 0, "stdin_binary",
                       "exec: --stdin takes text, and this input is binary (%s); copy it into "
                       "the sandbox as a file instead",
                       nul ? "it holds NUL bytes" : "it is not valid UTF-8");
    return 0;
}

/* --code CODE: {"code"} for /execute, which takes no argv, env, cwd, user or stdin. */
static int code_body(const cli_args_t *args, json_t *body, err_t *err)
{
    static const char *const argv_only[] = {"env", "cwd", "user"};
    if (cli_nargs(args) > 1)
        return cli_usage(err, "exec: give --code or a command, not both");
    for (size_t i = 0; i < ARRAY_SIZE(argv_only); i++)
        if (cli_opt_str(args, argv_only[i]))
            return cli_usage(err, "exec: --%s does not go with --code; use `-- sh -c CODE`",
                             argv_only[i]);
    if (cli_opt_flag(args, "stdin"))
        return cli_usage(err, "exec: --stdin does not go with --code; use `-- sh -c CODE`");
    if (!*cli_opt_str(args, "code"))
        return cli_usage(err, "exec: --code wants some shell code");
    return cli_put_str(body, "code", cli_opt_str(args, "code"), "exec: ", err);
}

/* -- CMD [ARGS...] with options: {"argv", "env", "cwd", "user", "stdin"} for /exec. */
static int argv_body(const cli_args_t *args, json_t *body, err_t *err)
{
    json_t *env = NULL, *in = NULL;
    if (cli_nargs(args) < 2)
        return cli_usage(err, "exec: missing the command (-- CMD [ARGS...], or --code CODE)");
    if (cli_put_args(body, "argv", args, "exec", err) < 0)
        return -1;
    if (cli_opt_env(args, "env", &env, err) < 0)
        return -1;
    if (env)
        json_object_set_new(body, "env", env);
    if (cli_put_str(body, "cwd", cli_opt_str(args, "cwd"), "exec: ", err) < 0 ||
        cli_put_str(body, "user", cli_opt_str(args, "user"), "exec: ", err) < 0)
        return -1;
    /* Last, so that a usage error above does not first wait for the whole of stdin. */
    if (cli_opt_flag(args, "stdin") && read_stdin(&in, err) < 0)
        return -1;
    if (in)
        json_object_set_new(body, "stdin", in);
    return 0;
}

/* --- the stream ------------------------------------------------------------------------- */

/* An "error" event: the daemon could not run the command, or lost it half-way. */
static int event_error(const json_t *ev, err_t *err)
{
    const char *msg = cli_jstr(ev, "output", "the command failed");
    const char *code = cli_jstr(ev, "code", "exec_failed");
    return err_set(err, ERR_RUNTIME, 0, code, "%s", msg);
}

static int event_output(const json_t *ev, FILE *to, err_t *err)
{
    const json_t *out = json_object_get(ev, "output");
    if (!json_is_string(out))
        return 0;
    return cli_write(to, json_string_value(out), json_string_length(out), err);
}

static int on_exec_line(void *data, const char *line, size_t len, err_t *err)
{
    struct exec_state *st = data;
    _cleanup_json_ json_t *ev = json_loadb(line, len, 0, NULL);
    const char *type = cli_jstr(ev, "type", NULL);
    if (!type)
        return err_set(err, ERR_INTERNAL, 0, "bad_response",
                       "the daemon's stream holds a line that is not an event: %.80s", line);
    if (st->ended)
        return 0; /* nothing is to follow "exit"; ignore rather than misreport */
    if (st->json && (cli_write(stdout, line, len, err) < 0 || cli_write(stdout, "\n", 1, err) < 0))
        return -1;
    if (strcmp(type, "exit") == 0) {
        st->ended = true;
        st->exit_code = (int)json_integer_value(json_object_get(ev, "exit_code"));
        st->timed_out = json_is_true(json_object_get(ev, "timed_out"));
        return 0;
    }
    if (strcmp(type, "error") == 0)
        return event_error(ev, err);
    if (st->json)
        return 0;
    if (strcmp(type, "stdout") == 0)
        return event_output(ev, stdout, err);
    if (strcmp(type, "stderr") == 0)
        return event_output(ev, stderr, err);
    return 0; /* a type this client does not know yet */
}

/* The command's exit status as ours; one that does not fit in a status byte becomes 255. */
static int exec_status(const struct exec_state *st, err_t *err)
{
    if (!st->ended)
        return err_set(err, ERR_UNAVAILABLE, 0, "stream_broken",
                       "the daemon's stream ended before the command's exit status");
    if (st->timed_out && !st->json)
        fprintf(stderr, "sandboxer: the command timed out and was killed\n");
    return st->exit_code >= 0 && st->exit_code <= 255 ? st->exit_code : 255;
}

int cmd_exec(cli_t *cli, const cli_args_t *args, err_t *err)
{
    bool code = cli_opt_str(args, "code") != NULL, detach = cli_opt_flag(args, "detach");
    _cleanup_json_ json_t *body = json_object();
    _cleanup_free_ char *path = NULL;
    if (!detach && (cli_opt_str(args, "tag") || cli_opt_flag(args, "tty")))
        return cli_usage(err, "exec: --tag and --tty go with -d (a background process)");
    if (detach) /* a background process, owned by the sandbox: cmd_procs.c */
        return (code ? code_body(args, body, err) : argv_body(args, body, err)) < 0
                   ? -1
                   : cli_exec_detached(cli, args, body, err);
    if (cli_put_positive(body, "timeout", cli_opt_str(args, "timeout"), "exec",
                         "a number of seconds", err) < 0 ||
        (code ? code_body(args, body, err) : argv_body(args, body, err)) < 0)
        return -1;
    client_t *c = cli_connect(cli, true, err);
    if (!c || cli_sandbox_path(c, cli_arg(args, 0),
                               code ? "/execute?stream=true" : "/exec?stream=true", &path, err) < 0)
        return -1;
    client_set_timeout(c, 0); /* a command runs as long as it runs; --timeout bounds it */
    struct exec_state st = {.json = cli->json};
    struct client_stream_cb cb = {.on_line = on_exec_line, .data = &st};
    if (client_stream(c, "POST", path, body, &cb, err) < 0)
        return -1;
    return exec_status(&st, err);
}

/* --- logs ------------------------------------------------------------------------------- */

static int on_log_bytes(void *data, const char *bytes, size_t len, err_t *err)
{
    (void)data;
    return cli_write(stdout, bytes, len, err);
}

int cmd_logs(cli_t *cli, const cli_args_t *args, err_t *err)
{
    bool follow = cli_opt_flag(args, "follow");
    if (cli_opt_str(args, "process")) /* a background process's output: cmd_procs.c */
        return cli_logs_process(cli, args, cli_opt_str(args, "process"), err);
    _cleanup_free_ char *path = NULL;
    client_t *c = cli_connect(cli, true, err);
    if (!c || cli_sandbox_path(c, cli_arg(args, 0), follow ? "/logs?stream=true" : "/logs", &path,
                               err) < 0)
        return -1;
    if (follow)
        client_set_timeout(c, 0); /* until the main process ends, however long */
    struct client_stream_cb cb = {.on_raw = on_log_bytes};
    return client_stream(c, "GET", path, NULL, &cb, err) < 0 ? -1 : 0;
}
