/* Route patterns: literal segments, {name} for one segment, {name*} for the rest. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define ROUTE_MAX_PARAMS 4

/* A route parameter as {ptr, len} views into the pattern and the path. */
struct route_param {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};

struct route_params {
    struct route_param p[ROUTE_MAX_PARAMS];
    size_t n;
};

/* True if path (len bytes, starting with '/') matches pattern; fills params. */
bool route_pattern_match(const char *pattern, const char *path, size_t len,
                         struct route_params *params);
