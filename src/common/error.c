#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char *const kind_names[] = {
    [ERR_NONE] = "none",
    [ERR_INVALID] = "invalid",
    [ERR_UNAUTHORIZED] = "unauthorized",
    [ERR_FORBIDDEN] = "forbidden",
    [ERR_NOT_FOUND] = "not_found",
    [ERR_NOT_ALLOWED] = "method_not_allowed",
    [ERR_CONFLICT] = "conflict",
    [ERR_TOO_LARGE] = "too_large",
    [ERR_UNPROCESSABLE] = "unprocessable",
    [ERR_LIMIT] = "limit",
    [ERR_RUNTIME] = "runtime",
    [ERR_INTERNAL] = "internal",
    [ERR_UNAVAILABLE] = "unavailable",
    [ERR_BAD_GATEWAY] = "bad_gateway",
    [ERR_RANGE] = "range_not_satisfiable",
};

const char *err_kind_name(err_kind_t kind)
{
    if ((unsigned)kind >= sizeof(kind_names) / sizeof(kind_names[0]))
        return "internal";
    return kind_names[kind];
}

static void vset(err_t *err, err_kind_t kind, int errnum, const char *code, const char *fmt,
                 va_list ap)
{
    err->kind = kind;
    err->errnum = errnum;
    snprintf(err->code, sizeof(err->code), "%s", code ? code : err_kind_name(kind));
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
}

int err_set(err_t *err, err_kind_t kind, int errnum, const char *code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vset(err, kind, errnum, code, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int err_sys(err_t *err, const char *fmt, ...)
{
    int saved = errno;
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vset(err, ERR_INTERNAL, saved, "internal", fmt, ap);
        va_end(ap);
        size_t n = strlen(err->msg);
        snprintf(err->msg + n, sizeof(err->msg) - n, ": %s", strerror(saved));
    }
    errno = saved;
    return -1;
}

int err_prefix(err_t *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char prefix[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    char old[sizeof(err->msg)];
    memcpy(old, err->msg, sizeof(old));
    size_t n = strlen(prefix);
    if (n + 2 >= sizeof(err->msg))
        n = sizeof(err->msg) - 3;
    memcpy(err->msg, prefix, n);
    memcpy(err->msg + n, ": ", 2);
    size_t room = sizeof(err->msg) - n - 3;
    size_t olen = strnlen(old, room);
    memcpy(err->msg + n + 2, old, olen);
    err->msg[n + 2 + olen] = '\0';
    return -1;
}
