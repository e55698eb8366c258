/* A growable byte buffer; strings off the wire are {ptr, len}, NUL kept for convenience. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *data; /* always NUL-terminated when non-NULL */
    size_t len;
    size_t cap;
} buf_t;

/* Append n bytes. */
void buf_append(buf_t *b, const void *p, size_t n);
/* Append a C string. */
void buf_puts(buf_t *b, const char *s);
/* Append formatted text. */
void buf_printf(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drop the contents but keep the memory. */
void buf_reset(buf_t *b);
/* Free the memory and zero the struct. */
void buf_free(buf_t *b);
/* Hand the data to the caller (never NULL) and leave b empty. */
char *buf_steal(buf_t *b);
