/*
 * sandboxer update, history, files ls|stat|rm, completion: the verbs that round the CLI out
 * to every capability of the API.
 */
#include <stdio.h>
#include <string.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"

/* --- update ------------------------------------------------------------------------------ */

int cmd_update(cli_t *cli, const cli_args_t *args, err_t *err)
{
    const char *label = cli_opt_str(args, "label");
    bool pub = cli_opt_flag(args, "public"), priv = cli_opt_flag(args, "private");
    if (pub && priv)
        return cli_usage(err, "--public and --private exclude each other");
    if (!label && !pub && !priv)
        return cli_usage(err, "nothing to change: give --label, --public or --private");
    _cleanup_json_ json_t *body = json_object();
    if (label)
        json_object_set_new(body, "label", json_string(label));
    if (pub || priv)
        json_object_set_new(body, "public", json_boolean(pub));
    _cleanup_resp_ client_resp_t resp = {0};
    client_t *c = cli_connect(cli, true, err);
    if (!c || cli_sandbox_call(c, cli_arg(args, 0), "PATCH", "", body, &resp, err) < 0)
        return -1;
    cli_print_answer(cli, &resp);
    return 0;
}

/* --- history ----------------------------------------------------------------------------- */

static void add_execution(cli_table_t *t, const json_t *e, const cli_args_t *args)
{
    (void)args;
    char id[24], code[16], when[32];
    snprintf(id, sizeof(id), "%lld", (long long)json_integer_value(json_object_get(e, "id")));
    json_t *ec = json_object_get(e, "exit_code");
    snprintf(code, sizeof(code), "%s", json_is_integer(ec) ? "" : "-");
    if (json_is_integer(ec))
        snprintf(code, sizeof(code), "%lld", (long long)json_integer_value(ec));
    _cleanup_free_ char *cmd = cli_safe(cli_jstr(e, "command", ""));
    if (strlen(cmd) > 60)
        strcpy(cmd + 57, "...");
    const char *cells[] = {
        id, code, cli_format_time(json_object_get(e, "executed_at"), when, sizeof(when)), cmd};
    cli_table_add(t, cells);
}

/* One execution's output, page by page, to stdout and stderr as it was. */
static int print_execution(cli_t *cli, client_t *c, const char *key, const char *eid, err_t *err)
{
    long long n;
    if (!parse_int(eid, 1, INT64_MAX, &n))
        return cli_usage(err, "EID must be an execution id, as `history ID` lists them");
    long long start = 0;
    for (;;) {
        _cleanup_free_ char *suffix =
            xasprintf("/command-executions/%lld/logs?limit=1000&start_id=%lld", n, start);
        _cleanup_resp_ client_resp_t resp = {0};
        if (cli_sandbox_call(c, key, "GET", suffix, NULL, &resp, err) < 0)
            return -1;
        json_t *logs = json_object_get(resp.json, "logs");
        if (cli->json)
            cli_print_raw(&resp);
        size_t i;
        json_t *row;
        json_array_foreach(logs, i, row)
        {
            if (cli->json)
                break;
            const char *text = cli_jstr(row, "content", "");
            bool is_err = strcmp(cli_jstr(row, "fd", ""), "stderr") == 0;
            if (cli_write(is_err ? stderr : stdout, text, strlen(text), err) < 0)
                return -1;
        }
        json_t *next = json_object_get(resp.json, "next_start_id");
        if (json_array_size(logs) == 0 || !json_is_integer(next) ||
            json_integer_value(next) <= start)
            return 0;
        start = json_integer_value(next);
    }
}

int cmd_history(cli_t *cli, const cli_args_t *args, err_t *err)
{
    client_t *c = cli_connect(cli, true, err);
    if (!c)
        return -1;
    if (cli_nargs(args) == 2)
        return print_execution(cli, c, cli_arg(args, 0), cli_arg(args, 1), err);
    const char *limit = cli_opt_str(args, "limit");
    long long n = 20;
    if (limit && !parse_int(limit, 1, 10000, &n))
        return cli_usage(err, "--limit must be 1-10000");
    _cleanup_free_ char *suffix = xasprintf("/command-executions?limit=%lld", n);
    _cleanup_free_ char *path = NULL;
    if (cli_sandbox_path(c, cli_arg(args, 0), suffix, &path, err) < 0)
        return -1;
    static const char *const headers[] = {"EID", "EXIT", "STARTED", "COMMAND", NULL};
    return cli_list(cli, args, path, "executions", headers, add_execution, err);
}

/* --- files ls | stat | rm ---------------------------------------------------------------- */

/* "/sandboxes/<id>/files/<path><query>" for ID and PATH arguments. */
static int files_path(client_t *c, const cli_args_t *args, const char *query, char **out,
                      err_t *err)
{
    const char *p = cli_nargs(args) > 1 ? cli_arg(args, 1) : "/";
    while (*p == '/')
        p++;
    _cleanup_free_ char *esc = client_escape_path(p);
    _cleanup_free_ char *suffix = xasprintf("/files/%s%s", esc, query);
    return cli_sandbox_path(c, cli_arg(args, 0), suffix, out, err);
}

static void add_file(cli_table_t *t, const json_t *f, const cli_args_t *args)
{
    (void)args;
    char size[32], when[32];
    _cleanup_free_ char *name = cli_safe(cli_jstr(f, "name", "?"));
    if (json_is_true(json_object_get(f, "is_dir")))
        strcat(name = xrealloc(name, strlen(name) + 2), "/");
    const char *cells[] = {cli_jstr(f, "mode", "?"), cli_jstr(f, "type", "?"),
                           cli_format_size(json_object_get(f, "size"), size, sizeof(size)),
                           cli_format_time(json_object_get(f, "mtime"), when, sizeof(when)), name};
    cli_table_add(t, cells);
}

int cmd_files_ls(cli_t *cli, const cli_args_t *args, err_t *err)
{
    client_t *c = cli_connect(cli, true, err);
    _cleanup_free_ char *path = NULL;
    if (!c || files_path(c, args, "", &path, err) < 0)
        return -1;
    static const char *const headers[] = {"MODE", "TYPE", "SIZE", "MODIFIED", "NAME", NULL};
    return cli_list(cli, args, path, "entries", headers, add_file, err);
}

int cmd_files_stat(cli_t *cli, const cli_args_t *args, err_t *err)
{
    client_t *c = cli_connect(cli, true, err);
    _cleanup_free_ char *path = NULL;
    _cleanup_resp_ client_resp_t resp = {0};
    if (!c || files_path(c, args, "?stat=true", &path, err) < 0 ||
        client_call(c, "GET", path, NULL, &resp, err) < 0)
        return -1;
    cli_print_answer(cli, &resp);
    return 0;
}

int cmd_files_rm(cli_t *cli, const cli_args_t *args, err_t *err)
{
    client_t *c = cli_connect(cli, true, err);
    _cleanup_free_ char *path = NULL;
    bool rec = cli_opt_flag(args, "recursive");
    if (!c || files_path(c, args, rec ? "?recursive=true" : "", &path, err) < 0)
        return -1;
    return cli_delete(cli, c, path, "path", cli_arg(args, 1), err);
}

/* --- completion -------------------------------------------------------------------------- */

/* The options of a verb as "--a --b" from its opts string. */
static void verb_options(const struct cli_verb *v, buf_t *out)
{
    buf_puts(out, "--help --json");
    const char *p = v->opts ? v->opts : "";
    if (*p == '+')
        p++;
    while (*p) {
        size_t n = strcspn(p, ",");
        const char *bar = memchr(p, '|', n);
        const char *name = bar ? bar + 1 : p;
        size_t len = (size_t)(p + n - name);
        if (len && name[len - 1] == '=')
            len--;
        buf_printf(out, " --%.*s", (int)len, name);
        p += n + (p[n] == ',');
    }
}

int cmd_completion(cli_t *cli, const cli_args_t *args, err_t *err)
{
    (void)cli;
    if (strcmp(cli_arg(args, 0), "bash") != 0)
        return cli_usage(err, "only bash completion is generated: `sandboxer completion bash`");
    size_t n;
    const struct cli_verb *verbs = cli_verb_table(&n);
    buf_t words = {0}, cases = {0};
    for (size_t i = 0; i < n; i++) {
        buf_t opts = {0};
        verb_options(&verbs[i], &opts);
        buf_printf(&words, "%s%s", i ? "|" : "", verbs[i].name);
        buf_printf(&cases, "        \"%s\") opts=\"%s\" ;;\n", verbs[i].name, opts.data);
        buf_free(&opts);
    }
    printf("# bash completion for sandboxer; load with: source <(sandboxer completion bash)\n"
           "_sandboxer() {\n"
           "    local cur=${COMP_WORDS[COMP_CWORD]} verb=\"\" i w opts=\"\"\n"
           "    local all='%s'\n"
           "    for ((i = 1; i < COMP_CWORD; i++)); do\n"
           "        w=${COMP_WORDS[i]}\n"
           "        [[ $w == -* ]] && continue\n"
           "        if [[ -z $verb ]]; then verb=$w\n"
           "        elif [[ \"|$all|\" == *\"|$verb $w|\"* ]]; then verb=\"$verb $w\"; break\n"
           "        else break; fi\n"
           "    done\n"
           "    case \"$verb\" in\n"
           "%s"
           "        \"\") opts=\"--help --json --url --socket --token --version\"\n"
           "            COMPREPLY=($(compgen -W \"$(echo \"$all\" | tr '|' '\\n' | cut -d' ' -f1 "
           "| sort -u) $opts\" -- \"$cur\")); return ;;\n"
           "        *) local sub=$(echo \"$all\" | tr '|' '\\n' | awk -v v=\"$verb\" "
           "'$1 == v && NF == 2 {print $2}')\n"
           "            COMPREPLY=($(compgen -W \"$sub\" -- \"$cur\")); return ;;\n"
           "    esac\n"
           "    COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
           "}\n"
           "complete -o default -F _sandboxer sandboxer\n",
           words.data, cases.data);
    buf_free(&words);
    buf_free(&cases);
    return 0;
}

/* --- stats ------------------------------------------------------------------------------- */

static const char *size_at(const json_t *obj, const char *a, const char *b, char *out, size_t n)
{
    return cli_format_size(json_object_get(json_object_get(obj, a), b), out, n);
}

int cmd_stats(cli_t *cli, const cli_args_t *args, err_t *err)
{
    _cleanup_resp_ client_resp_t resp = {0};
    client_t *c = cli_connect(cli, true, err);
    if (!c || cli_sandbox_call(c, cli_arg(args, 0), "GET", "/stats", NULL, &resp, err) < 0)
        return -1;
    if (cli->json) {
        cli_print_raw(&resp);
        return 0;
    }
    const json_t *j = resp.json;
    char mem[32], lim[32], peak[32], disk[32], dlim[32], rx[32], tx[32], cpu[32] = "-",
                                                                         pids[48] = "-";
    json_t *cs = json_object_get(json_object_get(j, "cpu"), "usage_seconds");
    if (json_is_number(cs))
        snprintf(cpu, sizeof(cpu), "%.2f s", json_number_value(cs));
    json_t *pc = json_object_get(json_object_get(j, "pids"), "current");
    json_t *pl = json_object_get(json_object_get(j, "pids"), "limit");
    char limit[24] = "-";
    if (json_is_integer(pl))
        snprintf(limit, sizeof(limit), "%lld", (long long)json_integer_value(pl));
    if (json_is_integer(pc))
        snprintf(pids, sizeof(pids), "%lld / %s", (long long)json_integer_value(pc), limit);
    _cleanup_free_ char *status = cli_safe(cli_jstr(j, "status", "?"));
    printf("STATUS   %s\nCPU      %s\nMEMORY   %s / %s (peak %s)\nPIDS     %s\nDISK     %s / %s\n"
           "NETWORK  %s in, %s out\n",
           status, cpu, size_at(j, "memory", "usage_bytes", mem, sizeof(mem)),
           size_at(j, "memory", "limit_bytes", lim, sizeof(lim)),
           size_at(j, "memory", "peak_bytes", peak, sizeof(peak)), pids,
           size_at(j, "disk", "used_bytes", disk, sizeof(disk)),
           size_at(j, "disk", "limit_bytes", dlim, sizeof(dlim)),
           size_at(j, "network", "rx_bytes", rx, sizeof(rx)),
           size_at(j, "network", "tx_bytes", tx, sizeof(tx)));
    return 0;
}
