/*
 * Parsers of untrusted image metadata: OCI image manifests and indexes, Docker schema2
 * manifests and manifest lists, and image configs. Pure functions over bytes (no I/O), so
 * the fuzz target drives them directly. Everything is bounded and checked: schema version,
 * media types, digests (sha256 only), sizes, counts, and the types of the config fields
 * the runtime uses.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "image_internal.h"

#define MT_OCI_MANIFEST    "application/vnd.oci.image.manifest.v1+json"
#define MT_OCI_INDEX       "application/vnd.oci.image.index.v1+json"
#define MT_OCI_CONFIG      "application/vnd.oci.image.config.v1+json"
#define MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define MT_DOCKER_LIST     "application/vnd.docker.distribution.manifest.list.v2+json"
#define MT_DOCKER_CONFIG   "application/vnd.docker.container.image.v1+json"

#define MAX_ARGV_ITEMS 4096 /* entries of Entrypoint, Cmd or Env */
#define MAX_PORTS      1024

static int invalid(err_t *err, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int invalid(err_t *err, const char *what, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return err_set(err, ERR_UNPROCESSABLE, 0, "image_invalid", "invalid %s: %s", what, msg);
}

static int unsupported(err_t *err, const char *what, const char *value)
{
    return err_set(err, ERR_UNPROCESSABLE, 0, "image_unsupported", "unsupported %s '%.120s'", what,
                   value);
}

static int load_json(const char *data, size_t len, const char *what, json_t **out, err_t *err)
{
    json_error_t jerr;
    json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!j)
        return invalid(err, what, "%s", jerr.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return invalid(err, what, "not a JSON object");
    }
    *out = j;
    return 0;
}

/* Copy an optional string field into out; absent is "", too long or not a string fails. */
static int opt_string(json_t *obj, const char *key, char *out, size_t size, const char *what,
                      err_t *err)
{
    json_t *v = json_object_get(obj, key);
    out[0] = '\0';
    if (!v)
        return 0;
    if (!json_is_string(v) || json_string_length(v) >= size)
        return invalid(err, what, "'%s' must be a string shorter than %zu bytes", key, size);
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

static void annotation(json_t *ann, const char *key, char *out, size_t size)
{
    json_t *v = json_object_get(ann, key);
    out[0] = '\0';
    if (json_is_string(v) && json_string_length(v) < size)
        memcpy(out, json_string_value(v), json_string_length(v) + 1);
}

static int parse_platform(json_t *p, struct image_desc *d, err_t *err)
{
    if (!p)
        return 0;
    if (!json_is_object(p))
        return invalid(err, "descriptor", "'platform' must be an object");
    if (opt_string(p, "os", d->os, sizeof(d->os), "platform", err) < 0 ||
        opt_string(p, "architecture", d->arch, sizeof(d->arch), "platform", err) < 0 ||
        opt_string(p, "variant", d->variant, sizeof(d->variant), "platform", err) < 0)
        return -1;
    return 0;
}

static int parse_desc(json_t *j, struct image_desc *d, err_t *err)
{
    memset(d, 0, sizeof(*d));
    if (!json_is_object(j))
        return invalid(err, "descriptor", "not an object");
    if (opt_string(j, "mediaType", d->media_type, sizeof(d->media_type), "descriptor", err) < 0)
        return -1;
    json_t *dg = json_object_get(j, "digest");
    if (!json_is_string(dg))
        return invalid(err, "descriptor", "'digest' must be a string");
    const char *digest = json_string_value(dg);
    if (strncmp(digest, "sha256:", 7) != 0 && strchr(digest, ':'))
        return unsupported(err, "digest algorithm", digest);
    if (!image_digest_valid(digest) || json_string_length(dg) != 71)
        return invalid(err, "descriptor", "malformed digest");
    memcpy(d->digest, digest, 72);
    json_t *sz = json_object_get(j, "size");
    if (!json_is_integer(sz) || json_integer_value(sz) < 0 ||
        (uint64_t)json_integer_value(sz) > IMAGE_MAX_BLOB_SIZE)
        return invalid(err, "descriptor", "'size' must be an integer in [0, 2^40]");
    d->size = json_integer_value(sz);
    json_t *ann = json_object_get(j, "annotations");
    if (ann && !json_is_object(ann))
        return invalid(err, "descriptor", "'annotations' must be an object");
    annotation(ann, "org.opencontainers.image.ref.name", d->ref_name, sizeof(d->ref_name));
    annotation(ann, "io.containerd.image.name", d->image_name, sizeof(d->image_name));
    return parse_platform(json_object_get(j, "platform"), d, err);
}

/* Parse a JSON array of descriptors (at most max) into a malloc'd array. */
static int parse_desc_array(json_t *a, size_t max, const char *what, struct image_desc **out,
                            size_t *n, err_t *err)
{
    if (!json_is_array(a))
        return invalid(err, "manifest", "'%s' must be an array", what);
    size_t count = json_array_size(a);
    if (count > max)
        return invalid(err, "manifest", "more than %zu %s", max, what);
    struct image_desc *d = xcalloc(count ? count : 1, sizeof(*d));
    for (size_t i = 0; i < count; i++) {
        if (parse_desc(json_array_get(a, i), &d[i], err) < 0) {
            free(d);
            return -1;
        }
    }
    *out = d;
    *n = count;
    return 0;
}

bool image_layer_compression(const char *mt, enum image_layer_compression *out)
{
    static const struct {
        const char *media_type;
        enum image_layer_compression c;
    } types[] = {
        {"application/vnd.oci.image.layer.v1.tar", LAYER_TAR},
        {"application/vnd.oci.image.layer.v1.tar+gzip", LAYER_GZIP},
        {"application/vnd.oci.image.layer.v1.tar+zstd", LAYER_ZSTD},
        {"application/vnd.oci.image.layer.nondistributable.v1.tar", LAYER_TAR},
        {"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip", LAYER_GZIP},
        {"application/vnd.oci.image.layer.nondistributable.v1.tar+zstd", LAYER_ZSTD},
        {"application/vnd.docker.image.rootfs.diff.tar.gzip", LAYER_GZIP},
        {"application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", LAYER_GZIP},
    };
    for (size_t i = 0; i < ARRAY_SIZE(types); i++) {
        if (strcmp(mt, types[i].media_type) == 0) {
            if (out)
                *out = types[i].c;
            return true;
        }
    }
    return false;
}

static int parse_image_manifest(json_t *j, struct image_manifest *m, err_t *err)
{
    m->kind = IMAGE_MANIFEST;
    if (parse_desc(json_object_get(j, "config"), &m->config, err) < 0)
        return err_prefix(err, "config");
    if (strcmp(m->config.media_type, MT_OCI_CONFIG) != 0 &&
        strcmp(m->config.media_type, MT_DOCKER_CONFIG) != 0)
        return unsupported(err, "config media type", m->config.media_type);
    if (m->config.size > IMAGE_MAX_CONFIG)
        return invalid(err, "manifest", "config larger than %u bytes", IMAGE_MAX_CONFIG);
    if (parse_desc_array(json_object_get(j, "layers"), IMAGE_MAX_LAYERS, "layers", &m->layers,
                         &m->n_layers, err) < 0)
        return -1;
    for (size_t i = 0; i < m->n_layers; i++)
        if (!image_layer_compression(m->layers[i].media_type, NULL))
            return unsupported(err, "layer media type", m->layers[i].media_type);
    return 0;
}

int image_manifest_parse(const char *data, size_t len, struct image_manifest *m, err_t *err)
{
    memset(m, 0, sizeof(*m));
    if (len > IMAGE_MAX_MANIFEST)
        return invalid(err, "manifest", "larger than %u bytes", IMAGE_MAX_MANIFEST);
    json_t *j _cleanup_json_ = NULL;
    if (load_json(data, len, "manifest", &j, err) < 0)
        return -1;
    json_t *sv = json_object_get(j, "schemaVersion");
    if (!json_is_integer(sv))
        return invalid(err, "manifest", "no schemaVersion");
    if (json_integer_value(sv) != 2)
        return unsupported(err, "manifest schema version", json_integer_value(sv) == 1 ? "1" : "?");
    char mt[128];
    if (opt_string(j, "mediaType", mt, sizeof(mt), "manifest", err) < 0)
        return -1;
    bool is_index;
    if (!mt[0]) {
        is_index = json_object_get(j, "manifests") != NULL;
        if (!is_index && !json_object_get(j, "config"))
            return invalid(err, "manifest", "neither a manifest nor an index");
    } else if (strcmp(mt, MT_OCI_MANIFEST) == 0 || strcmp(mt, MT_DOCKER_MANIFEST) == 0) {
        is_index = false;
    } else if (strcmp(mt, MT_OCI_INDEX) == 0 || strcmp(mt, MT_DOCKER_LIST) == 0) {
        is_index = true;
    } else {
        return unsupported(err, "manifest media type", mt);
    }
    int rc;
    if (is_index) {
        m->kind = IMAGE_INDEX;
        rc = parse_desc_array(json_object_get(j, "manifests"), IMAGE_MAX_INDEX, "manifests",
                              &m->manifests, &m->n_manifests, err);
    } else {
        rc = parse_image_manifest(j, m, err);
    }
    if (rc < 0)
        image_manifest_clear(m);
    return rc;
}

void image_manifest_clear(struct image_manifest *m)
{
    free(m->layers);
    free(m->manifests);
    m->layers = m->manifests = NULL;
    m->n_layers = m->n_manifests = 0;
}

static bool is_manifest_type(const char *mt)
{
    return !mt[0] || strcmp(mt, MT_OCI_MANIFEST) == 0 || strcmp(mt, MT_DOCKER_MANIFEST) == 0;
}

const struct image_desc *image_index_select(const struct image_manifest *m, const char *os,
                                            const char *arch, const char *variant, err_t *err)
{
    const struct image_desc *any_variant = NULL;
    for (size_t i = 0; m->kind == IMAGE_INDEX && i < m->n_manifests; i++) {
        const struct image_desc *d = &m->manifests[i];
        if (!is_manifest_type(d->media_type) || strcmp(d->os, os) != 0 ||
            strcmp(d->arch, arch) != 0)
            continue;
        if (!variant || !variant[0] || strcmp(d->variant, variant) == 0)
            return d;
        if (!any_variant && !d->variant[0])
            any_variant = d;
    }
    if (any_variant)
        return any_variant;
    err_set(err, ERR_UNPROCESSABLE, 0, "image_unsupported", "the image has no %s/%s variant", os,
            arch);
    return NULL;
}

/* ---- configs ---- */

static int check_string_array(json_t *v, const char *key, bool env, err_t *err)
{
    if (!json_is_array(v))
        return invalid(err, "config", "'%s' must be an array of strings", key);
    if (json_array_size(v) > MAX_ARGV_ITEMS)
        return invalid(err, "config", "'%s' has more than %d entries", key, MAX_ARGV_ITEMS);
    size_t i;
    json_t *item;
    json_array_foreach(v, i, item)
    {
        if (!json_is_string(item))
            return invalid(err, "config", "'%s' must be an array of strings", key);
        const char *s = json_string_value(item);
        if (env && (s[0] == '=' || !strchr(s, '=')))
            return invalid(err, "config", "'Env' entries are NAME=VALUE");
    }
    return 0;
}

static bool port_key_ok(const char *k)
{
    char *end;
    long port = strtol(k, &end, 10);
    if (!isdigit((unsigned char)k[0]) || port < 1 || port > 65535 || end - k > 5)
        return false;
    return !*end || strcmp(end, "/tcp") == 0 || strcmp(end, "/udp") == 0 ||
           strcmp(end, "/sctp") == 0;
}

static int check_ports(json_t *v, err_t *err)
{
    if (!json_is_object(v) || json_object_size(v) > MAX_PORTS)
        return invalid(err, "config", "'ExposedPorts' must be an object of at most %d ports",
                       MAX_PORTS);
    const char *k;
    json_t *item;
    json_object_foreach(v, k, item)
    {
        if (!port_key_ok(k))
            return invalid(err, "config", "bad exposed port '%.32s'", k);
    }
    return 0;
}

/* Copy the fields of the runtime config we use, checking their types; null means absent. */
static int parse_runtime_config(json_t *cfg, json_t **out, err_t *err)
{
    json_t *res = json_object();
    *out = res;
    if (!cfg || json_is_null(cfg))
        return 0;
    if (!json_is_object(cfg))
        return invalid(err, "config", "'config' must be an object");
    static const char *const keys[] = {"Entrypoint", "Cmd",  "Env",
                                       "WorkingDir", "User", "ExposedPorts"};
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
        json_t *v = json_object_get(cfg, keys[i]);
        if (!v || json_is_null(v))
            continue;
        int rc = 0;
        if (i <= 2)
            rc = check_string_array(v, keys[i], i == 2, err);
        else if (i <= 4 && (!json_is_string(v) || json_string_length(v) > 4096))
            rc = invalid(err, "config", "'%s' must be a string", keys[i]);
        else if (i == 5)
            rc = check_ports(v, err);
        if (rc < 0)
            return -1;
        json_object_set(res, keys[i], v);
    }
    return 0;
}

static int parse_rootfs(json_t *rootfs, struct image_config *c, err_t *err)
{
    if (!json_is_object(rootfs))
        return invalid(err, "config", "no 'rootfs' object");
    json_t *type = json_object_get(rootfs, "type");
    if (!json_is_string(type) || strcmp(json_string_value(type), "layers") != 0)
        return invalid(err, "config", "rootfs.type must be \"layers\"");
    json_t *ids = json_object_get(rootfs, "diff_ids");
    if (!json_is_array(ids))
        return invalid(err, "config", "rootfs.diff_ids must be an array");
    size_t n = json_array_size(ids);
    if (n > IMAGE_MAX_LAYERS)
        return invalid(err, "config", "more than %d layers", IMAGE_MAX_LAYERS);
    c->diff_ids = xcalloc(n ? n : 1, sizeof(*c->diff_ids));
    for (size_t i = 0; i < n; i++) {
        json_t *d = json_array_get(ids, i);
        if (!json_is_string(d) || json_string_length(d) != 71 ||
            !image_digest_valid(json_string_value(d)))
            return invalid(err, "config", "rootfs.diff_ids[%zu] is not a sha256 digest", i);
        memcpy(c->diff_ids[i], json_string_value(d), IMAGE_DIGEST_LEN);
    }
    c->n_diff_ids = n;
    return 0;
}

int image_config_parse(const char *data, size_t len, struct image_config *c, err_t *err)
{
    memset(c, 0, sizeof(*c));
    if (len > IMAGE_MAX_CONFIG)
        return invalid(err, "config", "larger than %u bytes", IMAGE_MAX_CONFIG);
    json_t *j _cleanup_json_ = NULL;
    if (load_json(data, len, "config", &j, err) < 0)
        return -1;
    if (opt_string(j, "os", c->os, sizeof(c->os), "config", err) < 0 ||
        opt_string(j, "architecture", c->arch, sizeof(c->arch), "config", err) < 0 ||
        parse_runtime_config(json_object_get(j, "config"), &c->config, err) < 0 ||
        parse_rootfs(json_object_get(j, "rootfs"), c, err) < 0) {
        image_config_clear(c);
        return -1;
    }
    /* A malformed creation time is not worth refusing an image for. */
    json_t *cr = json_object_get(j, "created");
    if (json_is_string(cr) && json_string_length(cr) < 64 &&
        !image_parse_time(json_string_value(cr), &c->created))
        c->created = 0;
    return 0;
}

void image_config_clear(struct image_config *c)
{
    if (c->config)
        json_decref(c->config);
    free(c->diff_ids);
    c->config = NULL;
    c->diff_ids = NULL;
    c->n_diff_ids = 0;
}

/* Read exactly n digits at *p into *out. */
static bool digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)(*p)[i]))
            return false;
        v = v * 10 + ((*p)[i] - '0');
    }
    *p += n;
    *out = v;
    return true;
}

bool image_parse_time(const char *s, double *out)
{
    struct tm tm = {0};
    int y, mo, d, h, mi, sec;
    const char *p = s;
    if (!digits(&p, 4, &y) || *p++ != '-' || !digits(&p, 2, &mo) || *p++ != '-' ||
        !digits(&p, 2, &d))
        return false;
    if (*p != 'T' && *p != 't' && *p != ' ')
        return false;
    p++;
    if (!digits(&p, 2, &h) || *p++ != ':' || !digits(&p, 2, &mi) || *p++ != ':' ||
        !digits(&p, 2, &sec))
        return false;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
        return false;
    double frac = 0, scale = 0.1;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return false;
        for (int i = 0; isdigit((unsigned char)*p); i++, p++, scale /= 10)
            if (i < 9)
                frac += (*p - '0') * scale;
    }
    int offset = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int sign = *p++ == '-' ? -1 : 1, oh, om;
        if (!digits(&p, 2, &oh) || *p++ != ':' || !digits(&p, 2, &om) || oh > 23 || om > 59)
            return false;
        offset = sign * (oh * 3600 + om * 60);
    } else {
        return false;
    }
    if (*p)
        return false;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    time_t t = timegm(&tm);
    *out = (double)t - offset + frac;
    return true;
}
