/* A minimal TAP producer for unit tests run by `meson test` (protocol: tap). */
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n, tap_failed;

/* Record one check; cond is evaluated exactly once (conditions may have effects). */
#define ok(cond, ...)                                                                              \
    do {                                                                                           \
        int tap_ok_ = (cond) ? 1 : 0;                                                              \
        tap_n++;                                                                                   \
        if (!tap_ok_)                                                                              \
            tap_failed++;                                                                          \
        printf("%s %d - ", tap_ok_ ? "ok" : "not ok", tap_n);                                      \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
        if (!tap_ok_)                                                                              \
            printf("#   failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);                        \
    } while (0)

/* Both non-NULL and equal. */
static inline int tap_streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

#define is_str(a, b, ...) ok(tap_streq((a), (b)), __VA_ARGS__)

static inline int tap_done(void)
{
    printf("1..%d\n", tap_n);
    return tap_failed ? 1 : 0;
}
