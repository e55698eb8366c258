/*
 * sandboxer exec -d | ps | logs --process | kill: background processes, which belong to the
 * sandbox (its agent keeps them and their output), over /sandboxes/{id}/processes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"

#define RESUME_TRIES   60     /* logs -f: reconnections in a row before giving up */
#define RESUME_WAIT_US 500000 /* between them: 30 s in all, a daemon restart's time */

/* --- exec -d ---------------------------------------------------------------------------- */

int cli_exec_detached(cli_t *cli, const cli_args_t *args, json_t *body, err_t *err)
{
    if (cli_opt_str(args, "timeout"))
        return cli_usage(err,
                         "exec: --timeout does not go with -d (kill it with `sandboxer kill`)");
    const char *tag = cli_opt_str(args, "tag");
    if (cli_put_str(body, "tag", tag, "exec: ", err) < 0)
        return -1;
    if (cli_opt_flag(args, "tty"))
        json_object_set_new(body, "tty", json_true());
    _cleanup_resp_ client_resp_t resp = {0};
    client_t *c = cli_connect(cli, true, err);
    if (!c || cli_sandbox_call(c, cli_arg(args, 0), "POST", "/processes", body, &resp, err) < 0)
        return -1;
    json_t *pid = json_object_get(resp.json, "pid");
    if (!json_is_integer(pid))
        return err_set(err, ERR_INTERNAL, 0, "bad_response", "the daemon's answer holds no pid");
    if (cli->json)
        cli_print_raw(&resp);
    else
        printf("%lld\n", (long long)json_integer_value(pid));
    return 0;
}

/* --- ps --------------------------------------------------------------------------------- */

static void add_process(cli_table_t *t, const json_t *p, const cli_args_t *args)
{
    (void)args;
    char pid[16], code[24], when[32];
    snprintf(pid, sizeof(pid), "%lld", (long long)json_integer_value(json_object_get(p, "pid")));
    json_t *ec = json_object_get(p, "exit_code"), *sig = json_object_get(p, "signal");
    snprintf(code, sizeof(code), "-");
    if (json_is_integer(ec) && json_is_integer(sig))
        snprintf(code, sizeof(code), "%lld (signal %lld)", (long long)json_integer_value(ec),
                 (long long)json_integer_value(sig));
    else if (json_is_integer(ec))
        snprintf(code, sizeof(code), "%lld", (long long)json_integer_value(ec));
    _cleanup_free_ char *cmd = cli_safe(cli_jstr(p, "command", ""));
    if (strlen(cmd) > 50)
        strcpy(cmd + 47, "...");
    const char *cells[] = {pid,
                           cli_jstr(p, "status", "?"),
                           code,
                           cli_jstr(p, "tag", "-"),
                           json_is_true(json_object_get(p, "tty")) ? "yes" : "no",
                           cli_format_time(json_object_get(p, "started_at"), when, sizeof(when)),
                           cmd};
    cli_table_add(t, cells);
}

int cmd_ps(cli_t *cli, const cli_args_t *args, err_t *err)
{
    static const char *const headers[] = {"PID", "STATUS",  "EXIT",    "TAG",
                                          "TTY", "STARTED", "COMMAND", NULL};
    _cleanup_free_ char *path = NULL;
    client_t *c = cli_connect(cli, true, err);
    if (!c || cli_sandbox_path(c, cli_arg(args, 0), "/processes", &path, err) < 0)
        return -1;
    return cli_list(cli, args, path, "processes", headers, add_process, err);
}

/* --- kill ------------------------------------------------------------------------------- */

/* A PID argument: a number; else a usage error. */
static int pid_arg(const char *s, long long *pid, err_t *err)
{
    if (!parse_int(s, 1, 0x7fffffff, pid))
        return cli_usage(err, "'%s' is not a process id (see `sandboxer ps ID`)", s);
    return 0;
}

int cmd_kill(cli_t *cli, const cli_args_t *args, err_t *err)
{
    const char *sig = cli_opt_str(args, "signal");
    long long pid, num;
    if (pid_arg(cli_arg(args, 1), &pid, err) < 0)
        return -1;
    _cleanup_json_ json_t *body = json_object();
    if (!sig)
        json_object_set_new(body, "signal", json_string("TERM"));
    else if (parse_int(sig, 1, 64, &num))
        json_object_set_new(body, "signal", json_integer(num));
    else if (cli_put_str(body, "signal", sig, "kill: ", err) < 0)
        return -1;
    _cleanup_free_ char *suffix = xasprintf("/processes/%lld/signal", pid);
    _cleanup_resp_ client_resp_t resp = {0};
    client_t *c = cli_connect(cli, true, err);
    if (!c || cli_sandbox_call(c, cli_arg(args, 0), "POST", suffix, body, &resp, err) < 0)
        return -1;
    if (cli->json)
        cli_print_raw(&resp);
    else
        printf("%lld\n", pid);
    return 0;
}

/* --- logs --process --------------------------------------------------------------------- */

static void note_dropped(long long bytes)
{
    fprintf(stderr, "sandboxer: %lld bytes of older output are no longer kept\n", bytes);
}

/* Everything the agent holds, answer by answer: stdout to ours, stderr to ours. */
static int print_output(cli_t *cli, client_t *c, const char *key, long long pid, err_t *err)
{
    long long cursor = 0;
    for (;;) {
        _cleanup_free_ char *suffix =
            xasprintf("/processes/%lld/output?cursor=%lld&limit=1048576", pid, cursor);
        _cleanup_resp_ client_resp_t resp = {0};
        if (cli_sandbox_call(c, key, "GET", suffix, NULL, &resp, err) < 0)
            return -1;
        long long next = json_integer_value(json_object_get(resp.json, "next_cursor"));
        long long dropped = json_integer_value(json_object_get(resp.json, "dropped"));
        if (cli->json) {
            cli_print_raw(&resp);
        } else {
            if (dropped > 0)
                note_dropped(dropped);
            size_t i;
            json_t *ch;
            json_array_foreach(json_object_get(resp.json, "chunks"), i, ch)
            {
                const char *text = cli_jstr(ch, "data", "");
                FILE *to = strcmp(cli_jstr(ch, "stream", ""), "stderr") == 0 ? stderr : stdout;
                if (cli_write(to, text, strlen(text), err) < 0)
                    return -1;
            }
        }
        if (next <= cursor)
            return 0;
        cursor = next;
    }
}

/* What the follow stream told so far. */
struct follow_state {
    bool json;
    bool ended;       /* an "exit" line came */
    long long cursor; /* where to resume */
};

static int on_follow_line(void *data, const char *line, size_t len, err_t *err)
{
    struct follow_state *st = data;
    _cleanup_json_ json_t *ev = json_loadb(line, len, 0, NULL);
    const char *type = cli_jstr(ev, "type", NULL);
    if (!type)
        return err_set(err, ERR_INTERNAL, 0, "bad_response",
                       "the daemon's stream holds a line that is not an event: %.80s", line);
    if (json_is_integer(json_object_get(ev, "cursor")))
        st->cursor = json_integer_value(json_object_get(ev, "cursor"));
    if (st->json && (cli_write(stdout, line, len, err) < 0 || cli_write(stdout, "\n", 1, err) < 0))
        return -1;
    if (strcmp(type, "exit") == 0)
        st->ended = true;
    if (strcmp(type, "error") == 0)
        return err_set(err, ERR_CONFLICT, 0, cli_jstr(ev, "code", "follow_failed"), "%s",
                       cli_jstr(ev, "output", "the output cannot be followed"));
    if (st->json)
        return 0;
    if (strcmp(type, "dropped") == 0)
        note_dropped(json_integer_value(json_object_get(ev, "bytes")));
    bool out = strcmp(type, "stdout") == 0, errs = strcmp(type, "stderr") == 0;
    const char *text = cli_jstr(ev, "output", "");
    return out || errs ? cli_write(out ? stdout : stderr, text, strlen(text), err) : 0;
}

/* Follow from cursor 0 to the process's end; a broken stream (a daemon restart) resumes. */
static int follow_output(cli_t *cli, client_t *c, const char *key, long long pid, err_t *err)
{
    struct follow_state st = {.json = cli->json};
    struct client_stream_cb cb = {.on_line = on_follow_line, .data = &st};
    client_set_timeout(c, 0); /* until the process ends, however long */
    for (int tries = 0;;) {
        _cleanup_free_ char *suffix =
            xasprintf("/processes/%lld/output?stream=true&cursor=%lld", pid, st.cursor);
        _cleanup_free_ char *path = NULL;
        long long before = st.cursor;
        if (cli_sandbox_path(c, key, suffix, &path, err) < 0)
            return -1;
        int rc = client_stream(c, "GET", path, NULL, &cb, err);
        if (st.ended)
            return 0;
        if (rc < 0 && err->kind != ERR_UNAVAILABLE)
            return -1;
        tries = st.cursor > before ? 0 : tries + 1;
        if (tries >= RESUME_TRIES)
            return rc < 0 ? -1
                          : err_set(err, ERR_UNAVAILABLE, 0, "stream_broken",
                                    "the output stream keeps breaking off");
        usleep(RESUME_WAIT_US);
    }
}

int cli_logs_process(cli_t *cli, const cli_args_t *args, const char *pid_s, err_t *err)
{
    long long pid;
    _cleanup_free_ char *key = NULL;
    if (pid_arg(pid_s, &pid, err) < 0)
        return -1;
    client_t *c = cli_connect(cli, true, err);
    if (!c || cli_sandbox_id(c, cli_arg(args, 0), &key, err) < 0)
        return -1;
    if (cli_opt_flag(args, "follow"))
        return follow_output(cli, c, key, pid, err);
    return print_output(cli, c, key, pid, err);
}
