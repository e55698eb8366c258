/* Printing for the CLI: raw JSON, safe text, times, tables, errors. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "common/util.h"

void cli_print_raw(const client_resp_t *resp)
{
    fwrite(resp->body.data, 1, resp->body.len, stdout);
    if (resp->body.len == 0 || resp->body.data[resp->body.len - 1] != '\n')
        putchar('\n');
}

void cli_print_json(const json_t *j)
{
    json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    putchar('\n');
}

void cli_print_answer(const cli_t *cli, const client_resp_t *resp)
{
    if (cli->json)
        cli_print_raw(resp);
    else
        cli_print_json(resp->json);
}

/* Names and messages come from other users and the server: keep escapes off the terminal. */
char *cli_safe(const char *s)
{
    char *out = xstrdup(s);
    for (unsigned char *p = (unsigned char *)out; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            *p = '?';
    return out;
}

char *cli_safe_lines(const char *s)
{
    char *out = xstrdup(s);
    for (unsigned char *p = (unsigned char *)out; *p; p++)
        if ((*p < 0x20 && *p != '\n') || *p == 0x7f)
            *p = '?';
    return out;
}

const char *cli_format_time(const json_t *t, char *out, size_t size)
{
    double v = json_number_value(t); /* 0 for null, absent or not a number */
    struct tm tm;
    time_t secs = (time_t)v;
    if (v <= 0 || !localtime_r(&secs, &tm) || strftime(out, size, "%Y-%m-%d %H:%M", &tm) == 0)
        snprintf(out, size, "-");
    return out;
}

const char *cli_format_size(const json_t *bytes, char *out, size_t size)
{
    static const char *const units[] = {"B", "kB", "MB", "GB", "TB"};
    double v = json_number_value(bytes);
    size_t u = 0;
    if (!json_is_number(bytes) || v < 0) {
        snprintf(out, size, "-");
        return out;
    }
    while (v >= 1000 && u + 1 < ARRAY_SIZE(units))
        v /= 1000, u++;
    snprintf(out, size, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
    return out;
}

int cli_write(FILE *f, const char *data, size_t len, err_t *err)
{
    if ((len > 0 && fwrite(data, 1, len, f) != len) || fflush(f) != 0)
        return err_sys(err, "cannot write to %s", f == stderr ? "stderr" : "stdout");
    return 0;
}

const char *cli_jstr(const json_t *obj, const char *key, const char *fallback)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : fallback;
}

int cli_usage(err_t *err, const char *fmt, ...)
{
    va_list ap;
    char msg[sizeof(err->msg)];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return err_set(err, ERR_INVALID, 0, "usage", "%s", msg);
}

void cli_print_error(const cli_t *cli, const err_t *err)
{
    char *msg = cli_safe(err->msg);
    fflush(stdout); /* keep the order of what was printed before */
    fprintf(stderr, "sandboxer: %s\n", msg);
    free(msg);
    if (err->kind == ERR_UNAUTHORIZED)
        fprintf(stderr, "sandboxer: hint: %s\n", cli_token_hint(cli));
    else if (strcmp(err->code, "usage") == 0)
        fprintf(stderr, "Run 'sandboxer %s%s--help' for usage.\n", cli->verb ? cli->verb->name : "",
                cli->verb ? " " : "");
}

/* --- tables ----------------------------------------------------------------------------- */

struct cli_table {
    int ncols;
    int nrows; /* row 0 holds the headers */
    char **cells;
};

static void add_row(cli_table_t *t, const char *const *cells)
{
    t->cells = xrealloc(t->cells, sizeof(char *) * (size_t)(t->nrows + 1) * (size_t)t->ncols);
    for (int c = 0; c < t->ncols; c++)
        t->cells[t->nrows * t->ncols + c] = cli_safe(cells[c] ? cells[c] : "-");
    t->nrows++;
}

cli_table_t *cli_table_new(int ncols, const char *const *headers)
{
    cli_table_t *t = xcalloc(1, sizeof(*t));
    t->ncols = ncols;
    add_row(t, headers);
    return t;
}

void cli_table_add(cli_table_t *t, const char *const *cells)
{
    add_row(t, cells);
}

/* Display width of UTF-8 text, counted in code points (good enough for names). */
static size_t width(const char *s)
{
    size_t w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xc0) != 0x80)
            w++;
    return w;
}

void cli_table_print(const cli_table_t *t, FILE *out)
{
    _cleanup_free_ size_t *widths = xcalloc((size_t)t->ncols, sizeof(*widths));
    for (int i = 0; i < t->nrows * t->ncols; i++) {
        size_t w = width(t->cells[i]);
        if (w > widths[i % t->ncols])
            widths[i % t->ncols] = w;
    }
    for (int r = 0; r < t->nrows; r++) {
        for (int c = 0; c < t->ncols; c++) {
            const char *cell = t->cells[r * t->ncols + c];
            if (c == t->ncols - 1)
                fprintf(out, "%s\n", cell);
            else
                fprintf(out, "%s%*s", cell, (int)(widths[c] - width(cell) + 3), "");
        }
    }
}

void cli_table_free(cli_table_t *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    free(t);
}
