/* Errors: one struct carried as the last out-parameter of every fallible function. */
#pragma once

#include <stdarg.h>

/* What went wrong, in terms a caller can act on; api/ maps each kind to one HTTP status. */
typedef enum {
    ERR_NONE = 0,
    ERR_INVALID,       /* the request is malformed or a value is out of range */
    ERR_UNAUTHORIZED,  /* no or a wrong credential */
    ERR_FORBIDDEN,     /* authenticated but not allowed */
    ERR_NOT_FOUND,     /* no such object, or not the caller's */
    ERR_NOT_ALLOWED,   /* the method does not apply to this path */
    ERR_CONFLICT,      /* the object is in the wrong state */
    ERR_TOO_LARGE,     /* a body or value over its bound */
    ERR_UNPROCESSABLE, /* well-formed but cannot be acted upon (e.g. a bad image) */
    ERR_LIMIT,         /* a quota or rate limit was hit */
    ERR_RUNTIME,       /* the container runtime or the kernel failed */
    ERR_INTERNAL,      /* a bug or an unexpected host failure */
    ERR_UNAVAILABLE,   /* not ready or shutting down */
    ERR_BAD_GATEWAY,   /* what a sandbox serves (through the proxy) did not answer properly */
    ERR_RANGE,         /* a Range outside the file */
} err_kind_t;

/* An error: kind, errno (0 if none), machine code and a human sentence. */
typedef struct {
    err_kind_t kind;
    int errnum;
    char code[48];
    char msg[512];
} err_t;

/* Fill err (if not NULL) and return -1, so callers can write `return err_set(...)`. */
int err_set(err_t *err, err_kind_t kind, int errnum, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Like err_set with ERR_INTERNAL and the current errno appended as ": strerror". */
int err_sys(err_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefix err's message with more context ("creating sandbox: ..."); returns -1. */
int err_prefix(err_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The lowercase name of a kind ("invalid", "not_found", ...). */
const char *err_kind_name(err_kind_t kind);
