#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "buf.h"

static enum log_format g_format = LOG_TEXT;
static enum log_level g_level = LOG_INFO;
static __thread char t_request_id[72];

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_init(enum log_format format, enum log_level level)
{
    g_format = format;
    g_level = level;
}

bool log_parse_level(const char *s, enum log_level *out)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return true;
        }
    }
    return false;
}

bool log_parse_format(const char *s, enum log_format *out)
{
    if (strcmp(s, "text") == 0)
        *out = LOG_TEXT;
    else if (strcmp(s, "json") == 0)
        *out = LOG_JSON;
    else
        return false;
    return true;
}

void log_set_request_id(const char *rid)
{
    snprintf(t_request_id, sizeof(t_request_id), "%s", rid ? rid : "");
}

const char *log_request_id(void)
{
    return t_request_id[0] ? t_request_id : NULL;
}

const char *log_quote(char *out, unsigned size, const char *s)
{
    unsigned o = 0;
    if (size < 3) {
        if (size)
            out[0] = '\0';
        return out;
    }
    out[o++] = '"';
    for (; s && *s && o + 3 < size; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            out[o++] = '?';
        } else {
            out[o++] = (char)c;
        }
    }
    out[o++] = '"';
    out[o] = '\0';
    return out;
}

static void json_string(buf_t *b, const char *s, size_t n)
{
    buf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            buf_printf(b, "\\%c", c);
        else if (c < 0x20)
            buf_printf(b, "\\u%04x", c);
        else
            buf_append(b, &s[i], 1);
    }
    buf_puts(b, "\"");
}

/* Turn `k=v k="a b"` into JSON members; a token without '=' joins "msg". */
static void kv_to_json(buf_t *b, const char *s)
{
    while (*s) {
        while (*s == ' ')
            s++;
        if (!*s)
            break;
        const char *key = s;
        while (*s && *s != '=' && *s != ' ')
            s++;
        if (*s != '=') {
            buf_puts(b, ",\"msg\":");
            json_string(b, key, (size_t)(s - key));
            continue;
        }
        size_t klen = (size_t)(s - key);
        s++;
        buf_t val = {0};
        if (*s == '"') {
            s++;
            while (*s && *s != '"') {
                if (*s == '\\' && s[1])
                    s++;
                buf_append(&val, s++, 1);
            }
            if (*s == '"')
                s++;
        } else {
            const char *v = s;
            while (*s && *s != ' ')
                s++;
            buf_append(&val, v, (size_t)(s - v));
        }
        buf_puts(b, ",");
        json_string(b, key, klen);
        buf_puts(b, ":");
        json_string(b, val.data ? val.data : "", val.len);
        buf_free(&val);
    }
}

void log_msg(enum log_level level, const char *event, const char *fmt, ...)
{
    if (level < g_level)
        return;
    char body[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof(body), fmt, ap);
    va_end(ap);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    size_t n = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + n, sizeof(when) - n, ".%03ldZ", ts.tv_nsec / 1000000);

    buf_t line = {0};
    if (g_format == LOG_JSON) {
        buf_printf(&line, "{\"ts\":\"%s\",\"level\":\"%s\",\"event\":", when, level_names[level]);
        json_string(&line, event, strlen(event));
        if (t_request_id[0])
            buf_printf(&line, ",\"req\":\"%s\"", t_request_id);
        kv_to_json(&line, body);
        buf_puts(&line, "}\n");
    } else {
        buf_printf(&line, "%s level=%s event=%s", when, level_names[level], event);
        if (t_request_id[0])
            buf_printf(&line, " req=%s", t_request_id);
        if (body[0])
            buf_printf(&line, " %s", body);
        buf_puts(&line, "\n");
    }
    /* One write per line keeps lines from different threads whole. */
    fwrite(line.data, 1, line.len, stderr);
    fflush(stderr);
    buf_free(&line);
}
