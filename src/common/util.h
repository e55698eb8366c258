/* Small helpers every layer uses: allocation that aborts on OOM, time, parsing. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* malloc/calloc/realloc/strdup that abort the process when memory runs out. */
void *xmalloc(size_t n);
void *xcalloc(size_t nmemb, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* asprintf that aborts on OOM. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Wall-clock time as Unix seconds with a fractional part. */
double now_unix(void);
/* Monotonic time in milliseconds. */
double now_mono_ms(void);

/* Read exactly n bytes from socket fd (blocking or not) before deadline (now_mono_ms's
 * clock), never more: what follows stays for the caller's reader. 0, or -1 on EOF, error or
 * timeout. */
int recv_exact(int fd, void *p, size_t n, double deadline);

/* Parse "16M", "512MiB", "1g", "4096" into bytes; false on garbage or overflow. */
bool parse_size(const char *s, uint64_t *out);
/* Parse a base-10 integer within [min, max]; false on garbage or out of range. */
bool parse_int(const char *s, long long min, long long max, long long *out);

/* Fill buf with n cryptographically random bytes; false if the kernel cannot. */
bool random_bytes(void *buf, size_t n);

/* Lowercase hex of n bytes into out (2n+1 bytes). */
void hex_encode(const unsigned char *in, size_t n, char *out);

/* Create dir and its parents with mode; true if it exists afterwards as a directory. */
bool mkdir_p(const char *path, unsigned mode);
