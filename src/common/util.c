#include "util.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

static void oom(void)
{
    static const char msg[] = "sandboxer: out of memory\n";
    (void)!fwrite(msg, 1, sizeof(msg) - 1, stderr);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom();
    return p;
}

void *xcalloc(size_t nmemb, size_t size)
{
    void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);
    if (!p)
        oom();
    return p;
}

void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        oom();
    return p;
}

char *xstrdup(const char *s)
{
    char *p = strdup(s);
    if (!p)
        oom();
    return p;
}

char *xstrndup(const char *s, size_t n)
{
    char *p = strndup(s, n);
    if (!p)
        oom();
    return p;
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    char *out = NULL;
    va_start(ap, fmt);
    int r = vasprintf(&out, fmt, ap);
    va_end(ap);
    if (r < 0)
        oom();
    return out;
}

double now_unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double now_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

bool parse_size(const char *s, uint64_t *out)
{
    if (!s || !*s)
        return false;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return false;
    uint64_t mult = 1;
    if (*end) {
        static const struct {
            const char *suffix;
            uint64_t mult;
        } units[] = {
            {"k", 1ULL << 10},   {"kb", 1000},        {"kib", 1ULL << 10}, {"m", 1ULL << 20},
            {"mb", 1000000},     {"mib", 1ULL << 20}, {"g", 1ULL << 30},   {"gb", 1000000000},
            {"gib", 1ULL << 30}, {"t", 1ULL << 40},   {"tib", 1ULL << 40}, {"b", 1},
        };
        size_t i;
        for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
            if (strcasecmp(end, units[i].suffix) == 0)
                break;
        if (i == sizeof(units) / sizeof(units[0]))
            return false;
        mult = units[i].mult;
    }
    if (v > UINT64_MAX / mult)
        return false;
    *out = (uint64_t)v * mult;
    return true;
}

bool parse_int(const char *s, long long min, long long max, long long *out)
{
    if (!s || !*s)
        return false;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < min || v > max)
        return false;
    *out = v;
    return true;
}

bool random_bytes(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        p += r;
        n -= (size_t)r;
    }
    return true;
}

void hex_encode(const unsigned char *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

bool mkdir_p(const char *path, unsigned mode)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s", path) >= (int)sizeof(tmp))
        return false;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, mode) < 0 && errno != EEXIST)
            return false;
        *p = '/';
    }
    if (mkdir(tmp, mode) < 0 && errno != EEXIST)
        return false;
    struct stat st;
    return stat(tmp, &st) == 0 && S_ISDIR(st.st_mode);
}

int recv_exact(int fd, void *p, size_t n, double deadline)
{
    unsigned char *q = p;
    while (n > 0) {
        int left = (int)(deadline - now_mono_ms());
        struct pollfd pfd = {fd, POLLIN, 0};
        if (left <= 0 || poll(&pfd, 1, left) <= 0)
            return -1;
        ssize_t r = recv(fd, q, n, MSG_DONTWAIT);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (r <= 0)
            return -1;
        q += r, n -= (size_t)r;
    }
    return 0;
}
