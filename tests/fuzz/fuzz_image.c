/*
 * libFuzzer target over the image store's parsers of untrusted input. The first byte
 * chooses the parser, the rest is its input:
 *   'r' an image reference (normalising a normal form must give it back unchanged)
 *   'm' a manifest or index (an index is also searched for this host's platform)
 *   'c' an image config
 *   't' an RFC 3339 time
 * Any other first byte runs every parser on the rest.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"
#include "image/image_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_ref(const char *s)
{
    char out[512], again[512];
    err_t err = {0};
    if (image_ref_normalize(s, out, sizeof(out), &err) < 0) {
        if (err.kind != ERR_INVALID)
            __builtin_trap();
        return;
    }
    if (!strchr(out, '/') || (!strchr(out, ':') && !strchr(out, '@')))
        __builtin_trap();
    if (image_ref_normalize(out, again, sizeof(again), &err) < 0 || strcmp(out, again) != 0)
        __builtin_trap();
}

static void fuzz_manifest(const char *s, size_t n)
{
    struct image_manifest m;
    err_t err = {0};
    if (image_manifest_parse(s, n, &m, &err) < 0) {
        if (err.kind != ERR_UNPROCESSABLE || m.layers || m.manifests)
            __builtin_trap();
        return;
    }
    if (m.n_layers > IMAGE_MAX_LAYERS || m.n_manifests > IMAGE_MAX_INDEX)
        __builtin_trap();
    for (size_t i = 0; i < m.n_layers; i++)
        if (!image_digest_valid(m.layers[i].digest) || m.layers[i].size < 0)
            __builtin_trap();
    if (m.kind == IMAGE_INDEX)
        image_index_select(&m, "linux", IMAGE_HOST_ARCH, NULL, &err);
    image_manifest_clear(&m);
}

static void fuzz_config(const char *s, size_t n)
{
    struct image_config c;
    err_t err = {0};
    if (image_config_parse(s, n, &c, &err) < 0) {
        if (c.config || c.diff_ids)
            __builtin_trap();
        return;
    }
    if (!json_is_object(c.config) || c.n_diff_ids > IMAGE_MAX_LAYERS)
        __builtin_trap();
    for (size_t i = 0; i < c.n_diff_ids; i++)
        if (!image_digest_valid(c.diff_ids[i]))
            __builtin_trap();
    image_config_clear(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t n = size - 1;
    char *s = malloc(n + 1); /* parsers take a length, references a C string */
    memcpy(s, data + 1, n);
    s[n] = '\0';
    double t;
    switch (data[0]) {
    case 'r':
        fuzz_ref(s);
        break;
    case 'm':
        fuzz_manifest(s, n);
        break;
    case 'c':
        fuzz_config(s, n);
        break;
    case 't':
        image_parse_time(s, &t);
        break;
    default:
        fuzz_ref(s);
        fuzz_manifest(s, n);
        fuzz_config(s, n);
        image_parse_time(s, &t);
    }
    free(s);
    return 0;
}
