/*
 * Image store parsers and the layer unpacker: reference normalisation, manifests, indexes
 * and configs (good and hostile), and — as root — unpacking layers made here with
 * libarchive's writer, including whiteouts, opaque dirs, links, devices, setuid bits,
 * xattrs and entries that try to escape the layer.
 *
 * The binary doubles as the unpack helper: `test_image internal-unpack-layer ...`.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image/image.h"
#include "image/image_internal.h"
#include "tap.h"

#define D64A  "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define D64B  "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* ---------------------------------------------------------------- references */

static void test_ref_normalization(void)
{
    static const struct {
        const char *in, *out;
    } good[] = {
        {"hello-world", "docker.io/library/hello-world:latest"},
        {"busybox:1.36", "docker.io/library/busybox:1.36"},
        {"foo/bar", "docker.io/foo/bar:latest"},
        {"foo/bar/baz:v1", "docker.io/foo/bar/baz:v1"},
        {"docker.io/busybox", "docker.io/library/busybox:latest"},
        {"index.docker.io/library/busybox", "docker.io/library/busybox:latest"},
        {"docker.io/foo/bar:tag", "docker.io/foo/bar:tag"},
        {"registry:5000/x", "registry:5000/x:latest"},
        {"registry.example.com/team/app:1.0", "registry.example.com/team/app:1.0"},
        {"127.0.0.1:5000/library/busybox:latest", "127.0.0.1:5000/library/busybox:latest"},
        {"localhost/x", "localhost/x:latest"},
        {"localhost:5000/a/b", "localhost:5000/a/b:latest"},
        {"[::1]:5000/x", "[::1]:5000/x:latest"},
        {"Registry/x", "Registry/x:latest"}, /* uppercase first component is a host */
        {"foo/a.b-c__d--e_f", "docker.io/foo/a.b-c__d--e_f:latest"},
        {"a.b-c.io/d__e--f_g.h", "a.b-c.io/d__e--f_g.h:latest"},
        {"busybox:Tag_1.x-Y", "docker.io/library/busybox:Tag_1.x-Y"},
        {"busybox:_t", "docker.io/library/busybox:_t"},
        {"busybox@sha256:" HEX64, "docker.io/library/busybox@sha256:" HEX64},
        {"busybox:1@sha256:" HEX64, "docker.io/library/busybox:1@sha256:" HEX64},
        {"q.io/x@sha256:" HEX64, "q.io/x@sha256:" HEX64},
        {"x:"
         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
         "docker.io/library/x:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}, /* 128-char tag */
    };
    for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
        char out[512] = "";
        err_t err = {0};
        int rc = image_ref_normalize(good[i].in, out, sizeof(out), &err);
        ok(rc == 0 && strcmp(out, good[i].out) == 0, "'%s' -> '%s' (got '%s' %s)", good[i].in,
           good[i].out, out, err.msg);
        /* Normalising twice changes nothing. */
        char again[512] = "";
        ok(rc == 0 && image_ref_normalize(out, again, sizeof(again), &err) == 0 &&
               strcmp(out, again) == 0,
           "'%s' is a fixed point", out);
    }
}

/* s with control characters shown as '?', for test names on one TAP line. */
static const char *printable(const char *s)
{
    static char out[512];
    size_t i = 0;
    for (; s[i] && i < sizeof(out) - 1; i++)
        out[i] = (unsigned char)s[i] < 0x20 ? '?' : s[i];
    out[i] = '\0';
    return out;
}

static void test_ref_rejects_malformed(void)
{
    static const char *const bad[] = {
        "",
        "Busybox",                   /* uppercase repository */
        "foo/Bar",                   /* uppercase path */
        "busybox:",                  /* empty tag */
        "busybox:-x",                /* tag starts with '-' */
        "busybox:.x",                /* tag starts with '.' */
        "busybox:a/b",               /* '/' in tag */
        "busybox@sha256:abc",        /* short digest */
        "busybox@sha256:" HEX64 "0", /* long digest */
        "busybox@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
        "busybox@md5:0123456789abcdef0123456789abcdef", /* other algorithms */
        "busybox@",
        "/busybox",
        "busybox/",
        "foo//bar",
        "-foo/bar",
        "foo/-bar",
        "foo/bar-",
        "foo/bar_",
        "foo/a...b",
        "foo/a___b",
        "foo/a._b",
        ":tag",
        "@sha256:" HEX64,
        "registry:port/x",   /* port not numeric */
        "registry:/x",       /* empty port */
        "registry:123456/x", /* port too long */
        "-registry.io/x",
        "registry-.io/x",
        "reg..io/x",
        "a_b.io/x", /* '_' in a host */
        "[zz]:5000/x",
        "[]/x",
        HEX64, /* a bare image id */
        "busybox latest",
        "busybox\n",
        "busy\tbox",
        "x:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", /* 129-char tag */
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        char out[512];
        err_t err = {0};
        int rc = image_ref_normalize(bad[i], out, sizeof(out), &err);
        ok(rc < 0 && err.kind == ERR_INVALID && strcmp(err.code, "invalid_image_ref") == 0,
           "'%s' is rejected (%s)", printable(bad[i]), err.msg);
    }
    /* A name over 255 characters. */
    char longname[400];
    memset(longname, 'a', 300);
    longname[300] = '\0';
    err_t err = {0};
    char out[512];
    ok(image_ref_normalize(longname, out, sizeof(out), &err) < 0,
       "a 300-character name is rejected");
    ok(image_ref_normalize(NULL, out, sizeof(out), &err) < 0, "NULL is rejected");
    ok(image_ref_normalize("busybox", out, 10, &err) < 0 && err.kind == ERR_INVALID,
       "an output buffer too small is an error, not a truncation");
}

static void test_ref_parts(void)
{
    struct image_ref r;
    err_t err = {0};
    ok(image_ref_parse("registry:5000/a/b:v2@sha256:" HEX64, &r, &err) == 0 &&
           strcmp(r.domain, "registry:5000") == 0 && strcmp(r.path, "a/b") == 0 &&
           strcmp(r.tag, "v2") == 0 && strcmp(r.digest, "sha256:" HEX64) == 0,
       "parts of a full reference");
    ok(image_ref_parse("busybox@sha256:" HEX64, &r, &err) == 0 && r.tag[0] == '\0',
       "a digest reference has no implied tag");
}

/* ---------------------------------------------------------------- manifests */

static const char good_manifest[] =
    "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
    "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"" D64A
    "\",\"size\":123},"
    "\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"" D64B
    "\",\"size\":456},{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+zstd\","
    "\"digest\":\"" D64A "\",\"size\":1}]}";

static const char docker_manifest[] =
    "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.docker.distribution.manifest.v2+json\","
    "\"config\":{\"mediaType\":\"application/"
    "vnd.docker.container.image.v1+json\",\"digest\":\"" D64A
    "\",\"size\":7},\"layers\":[{\"mediaType\":"
    "\"application/vnd.docker.image.rootfs.diff.tar.gzip\",\"digest\":\"" D64B "\",\"size\":9}]}";

static const char good_index[] =
    "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"manifests\":["
    "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"" D64A "\","
    "\"size\":10,\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\",\"variant\":\"v8\"}},"
    "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"" D64B "\","
    "\"size\":11,\"platform\":{\"os\":\"linux\",\"architecture\":\"" IMAGE_HOST_ARCH "\"},"
    "\"annotations\":{\"org.opencontainers.image.ref.name\":\"latest\"}},"
    "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"" D64A "\","
    "\"size\":12,\"platform\":{\"os\":\"unknown\",\"architecture\":\"unknown\"}}]}";

static void test_manifest_parse_good(void)
{
    struct image_manifest m;
    err_t err = {0};
    ok(image_manifest_parse(good_manifest, strlen(good_manifest), &m, &err) == 0 &&
           m.kind == IMAGE_MANIFEST && m.n_layers == 2 && m.config.size == 123 &&
           strcmp(m.layers[0].digest, D64B) == 0 && m.layers[1].size == 1,
       "OCI manifest parses (%s)", err.msg);
    image_manifest_clear(&m);
    ok(image_manifest_parse(docker_manifest, strlen(docker_manifest), &m, &err) == 0 &&
           m.kind == IMAGE_MANIFEST && m.n_layers == 1,
       "Docker schema2 manifest parses (%s)", err.msg);
    image_manifest_clear(&m);
    ok(image_manifest_parse(good_index, strlen(good_index), &m, &err) == 0 &&
           m.kind == IMAGE_INDEX && m.n_manifests == 3,
       "OCI index parses (%s)", err.msg);
    const struct image_desc *d = image_index_select(&m, "linux", IMAGE_HOST_ARCH, NULL, &err);
    ok(d && strcmp(d->digest, D64B) == 0 && strcmp(d->ref_name, "latest") == 0,
       "the index entry for linux/" IMAGE_HOST_ARCH " is chosen");
    ok(image_index_select(&m, "linux", "s390x", NULL, &err) == NULL &&
           err.kind == ERR_UNPROCESSABLE,
       "no entry for linux/s390x is unprocessable");
    image_manifest_clear(&m);
    /* mediaType is optional in OCI: the shape decides. */
    const char *bare = "{\"schemaVersion\":2,\"manifests\":[]}";
    ok(image_manifest_parse(bare, strlen(bare), &m, &err) == 0 && m.kind == IMAGE_INDEX,
       "an index without mediaType parses");
    image_manifest_clear(&m);
    enum image_layer_compression c;
    ok(image_layer_compression("application/vnd.docker.image.rootfs.diff.tar.gzip", &c) &&
           c == LAYER_GZIP,
       "docker gzip layers are gzip");
    ok(image_layer_compression("application/vnd.oci.image.layer.v1.tar", &c) && c == LAYER_TAR,
       "plain OCI layers are tar");
}

static void test_manifest_parse_bad(void)
{
    static const struct {
        const char *json, *why, *code;
    } bad[] = {
        {"", "empty", "image_invalid"},
        {"[]", "not an object", "image_invalid"},
        {"{\"schemaVersion\":2", "truncated", "image_invalid"},
        {"{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\"}", "no schemaVersion",
         "image_invalid"},
        {"{\"schemaVersion\":1,\"fsLayers\":[]}", "schema 1", "image_unsupported"},
        {"{\"schemaVersion\":\"2\",\"manifests\":[]}", "schemaVersion a string", "image_invalid"},
        {"{\"schemaVersion\":2,\"mediaType\":\"application/x-helm\",\"layers\":[]}",
         "foreign media type", "image_unsupported"},
        {"{\"schemaVersion\":2}", "neither shape", "image_invalid"},
        {"{\"schemaVersion\":2,\"schemaVersion\":2,\"manifests\":[]}", "duplicate keys",
         "image_invalid"},
        {"{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+"
         "json\",\"digest\":\"sha256:abc\",\"size\":1},\"layers\":[]}",
         "short digest", "image_invalid"},
        {"{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+"
         "json\",\"digest\":\"" D64A "\",\"size\":-1},\"layers\":[]}",
         "negative size", "image_invalid"},
        {"{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+"
         "json\",\"digest\":\"" D64A "\",\"size\":99999999},\"layers\":[]}",
         "config over 4 MiB", "image_invalid"},
        {"{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+"
         "json\",\"digest\":\"sha512:" HEX64 HEX64 "\",\"size\":1},\"layers\":[]}",
         "sha512", "image_unsupported"},
        {"{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/x-foo\",\"digest\":\"" D64A
         "\",\"size\":1},\"layers\":[]}",
         "artifact config", "image_unsupported"},
        {"{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+"
         "json\",\"digest\":\"" D64A "\",\"size\":1},\"layers\":[{\"mediaType\":\"application/"
         "vnd.oci.image.layer.v1.tar+encrypted\",\"digest\":\"" D64A "\",\"size\":1}]}",
         "encrypted layer", "image_unsupported"},
        {"{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+"
         "json\",\"digest\":\"" D64A "\",\"size\":1},\"layers\":{}}",
         "layers an object", "image_invalid"},
        {"{\"schemaVersion\":2,\"manifests\":[{\"digest\":\"" D64A "\",\"size\":1,"
         "\"platform\":\"linux\"}]}",
         "platform a string", "image_invalid"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        struct image_manifest m;
        err_t err = {0};
        int rc = image_manifest_parse(bad[i].json, strlen(bad[i].json), &m, &err);
        ok(rc < 0 && err.kind == ERR_UNPROCESSABLE && strcmp(err.code, bad[i].code) == 0,
           "manifest rejected: %s (%s: %s)", bad[i].why, err.code, err.msg);
    }
    /* 129 layers. */
    buf_t b = {0};
    buf_puts(&b, "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/vnd.oci.image."
                 "config.v1+json\",\"digest\":\"" D64A "\",\"size\":1},\"layers\":[");
    for (int i = 0; i < 129; i++)
        buf_printf(&b,
                   "%s{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":"
                   "\"" D64A "\",\"size\":1}",
                   i ? "," : "");
    buf_puts(&b, "]}");
    struct image_manifest m;
    err_t err = {0};
    ok(image_manifest_parse(b.data, b.len, &m, &err) < 0 && err.kind == ERR_UNPROCESSABLE,
       "129 layers are too many (%s)", err.msg);
    buf_free(&b);
    char *huge = xmalloc(IMAGE_MAX_MANIFEST + 2);
    memset(huge, ' ', IMAGE_MAX_MANIFEST + 1);
    huge[IMAGE_MAX_MANIFEST + 1] = '\0';
    ok(image_manifest_parse(huge, IMAGE_MAX_MANIFEST + 1, &m, &err) < 0,
       "a manifest over 4 MiB is refused before parsing");
    free(huge);
}

static const char good_config[] =
    "{\"created\":\"2024-01-02T03:04:05.5Z\",\"architecture\":\"" IMAGE_HOST_ARCH "\","
    "\"os\":\"linux\",\"config\":{\"Entrypoint\":[\"/bin/sh\",\"-c\"],\"Cmd\":[\"echo hi\"],"
    "\"Env\":[\"PATH=/bin\",\"EMPTY=\"],\"WorkingDir\":\"/work\",\"User\":\"1000:1000\","
    "\"ExposedPorts\":{\"8080/tcp\":{},\"53/udp\":{},\"9000\":{}},\"Labels\":{\"a\":\"b\"},"
    "\"Volumes\":null},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"" D64A "\",\"" D64B
    "\"]},\"history\":[{\"created_by\":\"x\"}]}";

static void test_config_parse(void)
{
    struct image_config c;
    err_t err = {0};
    ok(image_config_parse(good_config, strlen(good_config), &c, &err) == 0, "config parses (%s)",
       err.msg);
    ok(c.n_diff_ids == 2 && strcmp(c.diff_ids[1], D64B) == 0, "diff_ids read in order");
    ok(strcmp(c.os, "linux") == 0 && strcmp(c.arch, IMAGE_HOST_ARCH) == 0, "platform read");
    ok(c.created > 1704164645.4 && c.created < 1704164645.6, "created time read (%f)", c.created);
    ok(json_object_size(c.config) == 6 && json_object_get(c.config, "Labels") == NULL,
       "only the runtime keys are kept");
    ok(json_array_size(json_object_get(c.config, "Entrypoint")) == 2 &&
           strcmp(json_string_value(json_object_get(c.config, "User")), "1000:1000") == 0,
       "Entrypoint and User kept");
    image_config_clear(&c);
    const char *minimal = "{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}";
    ok(image_config_parse(minimal, strlen(minimal), &c, &err) == 0 && c.config &&
           json_object_size(c.config) == 0 && c.created == 0,
       "a minimal config gives an empty object");
    image_config_clear(&c);

    static const struct {
        const char *json, *why;
    } bad[] = {
        {"{}", "no rootfs"},
        {"{\"rootfs\":{\"type\":\"layers\"}}", "no diff_ids"},
        {"{\"rootfs\":{\"type\":\"tarball\",\"diff_ids\":[]}}", "rootfs type"},
        {"{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:12\"]}}", "bad diff_id"},
        {"{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[1]}}", "diff_id a number"},
        {"{\"config\":{\"Cmd\":\"echo\"},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}",
         "Cmd a string"},
        {"{\"config\":{\"Cmd\":[1]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}",
         "Cmd of numbers"},
        {"{\"config\":{\"Env\":[\"NOEQUALS\"]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}",
         "Env without '='"},
        {"{\"config\":{\"Env\":[\"=x\"]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}",
         "Env with an empty name"},
        {"{\"config\":{\"User\":0},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}",
         "User a number"},
        {"{\"config\":{\"ExposedPorts\":{\"http\":{}}},\"rootfs\":{\"type\":\"layers\","
         "\"diff_ids\":[]}}",
         "port not a number"},
        {"{\"config\":{\"ExposedPorts\":{\"70000/tcp\":{}}},\"rootfs\":{\"type\":\"layers\","
         "\"diff_ids\":[]}}",
         "port out of range"},
        {"{\"config\":{\"ExposedPorts\":{\"80/icmp\":{}}},\"rootfs\":{\"type\":\"layers\","
         "\"diff_ids\":[]}}",
         "unknown protocol"},
        {"{\"config\":{\"Cmd\":[\"a\\u0000b\"]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}",
         "NUL inside a string"},
        {"{\"config\":[],\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}", "config an array"},
        {"{\"os\":5,\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}", "os a number"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        err_t e = {0};
        ok(image_config_parse(bad[i].json, strlen(bad[i].json), &c, &e) < 0 &&
               e.kind == ERR_UNPROCESSABLE && c.config == NULL && c.diff_ids == NULL,
           "config rejected: %s (%s)", bad[i].why, e.msg);
    }
}

static void test_parse_time(void)
{
    double t;
    ok(image_parse_time("1970-01-01T00:00:00Z", &t) && t == 0, "the epoch");
    ok(image_parse_time("2024-01-01T00:00:00+01:00", &t) && t == 1704063600, "an offset");
    ok(image_parse_time("2024-01-01T00:00:00.123456789123Z", &t) && t > 1704067200.12 &&
           t < 1704067200.13,
       "long fractions");
    ok(!image_parse_time("2024-01-01", &t), "a date alone is refused");
    ok(!image_parse_time("2024-13-01T00:00:00Z", &t), "month 13 is refused");
    ok(!image_parse_time("2024-01-01T00:00:00", &t), "no zone is refused");
    ok(!image_parse_time("2024-01-01T00:00:00Zjunk", &t), "trailing junk is refused");
}

static void test_proc_reason(void)
{
    char out[200];
    image_proc_reason("time=\"2024\" level=fatal msg=\"initializing source "
                      "docker://x: reading manifest latest in x: manifest unknown\"\n",
                      NULL, out, sizeof(out));
    is_str(out, "initializing source docker://x: reading manifest latest in x: manifest unknown",
           "skopeo's msg is unquoted");
    image_proc_reason("noise\nwriting to /var/lib/s/images/tmp/ab: no space\n\n",
                      "/var/lib/s/images", out, sizeof(out));
    is_str(out, "writing to …/tmp/ab: no space", "host paths are hidden, last line kept");
    image_proc_reason("", NULL, out, sizeof(out));
    ok(out[0] != '\0', "an empty stderr still gives a reason");
    image_proc_reason("ééééééé", NULL, out, 6);
    ok(strlen(out) == 4, "cut at a UTF-8 boundary");
}

/* ---------------------------------------------------------------- layers */

struct tent {
    const char *path;
    mode_t type; /* AE_IF* */
    mode_t perm;
    const char *data;
    const char *symlink;
    const char *hardlink;
    int uid, gid;
    unsigned major, minor;
    const char *xattr; /* "name=value" */
};

static char work[256];

/* A tar of ents into a new buffer. */
static char *make_tar(const struct tent *ents, size_t n, size_t *len)
{
    size_t cap = 1 << 20, used = 0;
    char *buf = xmalloc(cap);
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    archive_write_open_memory(a, buf, cap, &used);
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, ents[i].path);
        archive_entry_set_filetype(e, ents[i].type);
        archive_entry_set_perm(e, ents[i].perm);
        archive_entry_set_uid(e, ents[i].uid);
        archive_entry_set_gid(e, ents[i].gid);
        archive_entry_set_mtime(e, 1700000000, 0);
        if (ents[i].symlink)
            archive_entry_set_symlink(e, ents[i].symlink);
        if (ents[i].hardlink)
            archive_entry_set_hardlink(e, ents[i].hardlink);
        if (ents[i].type == AE_IFCHR || ents[i].type == AE_IFBLK)
            archive_entry_set_rdev(e, makedev(ents[i].major, ents[i].minor));
        if (ents[i].xattr) {
            const char *eq = strchr(ents[i].xattr, '=');
            char name[128];
            snprintf(name, sizeof(name), "%.*s", (int)(eq - ents[i].xattr), ents[i].xattr);
            archive_entry_xattr_add_entry(e, name, eq + 1, strlen(eq + 1));
        }
        size_t dlen = ents[i].data ? strlen(ents[i].data) : 0;
        archive_entry_set_size(e, ents[i].type == AE_IFREG && !ents[i].hardlink ? dlen : 0);
        archive_write_header(a, e);
        if (dlen && !ents[i].hardlink)
            archive_write_data(a, ents[i].data, dlen);
        archive_entry_free(e);
    }
    archive_write_close(a);
    archive_write_free(a);
    *len = used;
    return buf;
}

/* data compressed with filter (ARCHIVE_FILTER_GZIP, _ZSTD or _NONE). */
static char *compress_blob(const char *data, size_t n, int filter, size_t *len)
{
    if (filter == ARCHIVE_FILTER_NONE) {
        char *copy = xmalloc(n);
        memcpy(copy, data, n);
        *len = n;
        return copy;
    }
    size_t cap = n + (1 << 16), used = 0;
    char *buf = xmalloc(cap);
    struct archive *a = archive_write_new();
    archive_write_set_format_raw(a);
    archive_write_add_filter(a, filter);
    archive_write_open_memory(a, buf, cap, &used);
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, "data");
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_size(e, (la_int64_t)n);
    archive_write_header(a, e);
    archive_write_data(a, data, n);
    archive_entry_free(e);
    archive_write_close(a);
    archive_write_free(a);
    *len = used;
    return buf;
}

struct layer {
    char blob[300];
    char diff_id[IMAGE_DIGEST_LEN];
    char blob_digest[IMAGE_DIGEST_LEN];
    size_t tar_len;
};

static void write_layer(const struct tent *ents, size_t n, int filter, const char *name,
                        struct layer *l)
{
    size_t tlen, blen;
    char *tar = make_tar(ents, n, &tlen);
    char *blob = compress_blob(tar, tlen, filter, &blen);
    image_sha256_digest(tar, tlen, l->diff_id);
    image_sha256_digest(blob, blen, l->blob_digest);
    l->tar_len = tlen;
    snprintf(l->blob, sizeof(l->blob), "%s/%s.blob", work, name);
    FILE *f = fopen(l->blob, "w");
    fwrite(blob, 1, blen, f);
    fclose(f);
    free(tar);
    free(blob);
}

static int unpack(const struct layer *l, const char *dest, err_t *err)
{
    return image_layer_unpack("/proc/self/exe", l->blob, dest, l->diff_id, l->blob_digest, work,
                              err);
}

static bool exists(const char *dir, const char *rel, struct stat *st)
{
    char *p = xasprintf("%s/%s", dir, rel);
    bool found = lstat(p, st) == 0;
    free(p);
    return found;
}

/* True if dir has no entry (but . and ..) whose name starts with prefix. */
static bool no_entry_with_prefix(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    bool none = true;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
            strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            none = false;
    if (d)
        closedir(d);
    return none;
}

static const struct tent good_layer[] = {
    {"./", AE_IFDIR, 0755},
    {"etc/", AE_IFDIR, 0755},
    {"etc/hello", AE_IFREG, 0640, "hi\n", .uid = 1000, .gid = 1000},
    {"etc/hello-link", AE_IFREG, 0640, .hardlink = "etc/hello", .uid = 1000, .gid = 1000},
    {"./etc/sym", AE_IFLNK, 0777, .symlink = "/etc/hello"},
    {"etc/up", AE_IFLNK, 0777, .symlink = "../.."}, /* a symlink target is only data */
    {"etc/.wh.removed", AE_IFREG, 0600, .uid = 7, .gid = 8},
    {"bin/su", AE_IFREG, 04755, "#!/bin/sh\n"},
    {"bin/sg", AE_IFREG, 02755, "#!/bin/sh\n", .gid = 50},
    {"opq/", AE_IFDIR, 0750},
    {"opq/.wh..wh..opq", AE_IFREG, 0600},
    {"opq/keep", AE_IFREG, 0644, "kept"},
    {"new/deep/.wh..wh..opq", AE_IFREG, 0600}, /* opaque dir without an entry of its own */
    {"dev/null", AE_IFCHR, 0666, .major = 1, .minor = 3},
    {"dev/loop9", AE_IFBLK, 0660, .major = 7, .minor = 9},
    {"run/fifo", AE_IFIFO, 0600},
    {"attr/user", AE_IFREG, 0644, "x", .xattr = "user.note=yes"},
    {"attr/trusted", AE_IFREG, 0644, "x", .xattr = "trusted.overlay.redirect=/etc"},
    {".wh..wh.plnk/123", AE_IFREG, 0644, "aufs"}, /* aufs metadata is skipped */
};

static void check_good_layer(const char *dest)
{
    char diff[600];
    snprintf(diff, sizeof(diff), "%s/diff", dest);
    struct stat st, st2;
    ok(exists(diff, "etc/hello", &st) && S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0640 &&
           st.st_uid == 1000 && st.st_gid == 1000 && st.st_size == 3,
       "regular file with owner and mode");
    ok(exists(diff, "etc/hello-link", &st2) && st2.st_ino == st.st_ino && st.st_nlink == 2,
       "hard link shares the inode");
    char target[64] = "";
    char p[800];
    snprintf(p, sizeof(p), "%s/etc/sym", diff);
    ssize_t n = readlink(p, target, sizeof(target) - 1);
    ok(n > 0 && strcmp(target, "/etc/hello") == 0, "absolute symlink kept verbatim");
    ok(exists(diff, "etc/up", &st) && S_ISLNK(st.st_mode), "symlink to .. kept as a link");
    ok(exists(diff, "etc/removed", &st) && S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0) &&
           st.st_uid == 7 && st.st_gid == 8,
       "whiteout became a 0/0 char device with the marker's owner");
    ok(!exists(diff, "etc/.wh.removed", &st), "no .wh. file left");
    ok(exists(diff, "bin/su", &st) && (st.st_mode & 07777) == 04755, "setuid bit kept");
    ok(exists(diff, "bin/sg", &st) && (st.st_mode & 07777) == 02755 && st.st_gid == 50,
       "setgid bit kept");
    char val[8] = "";
    snprintf(p, sizeof(p), "%s/opq", diff);
    ok(lgetxattr(p, "trusted.overlay.opaque", val, sizeof(val)) == 1 && val[0] == 'y',
       "opaque dir marked with trusted.overlay.opaque=y");
    ok(exists(diff, "opq", &st) && (st.st_mode & 07777) == 0750, "opaque dir keeps its mode");
    ok(!exists(diff, "opq/.wh..wh..opq", &st) && exists(diff, "opq/keep", &st),
       "opaque marker gone, sibling kept");
    snprintf(p, sizeof(p), "%s/new/deep", diff);
    ok(lgetxattr(p, "trusted.overlay.opaque", val, sizeof(val)) == 1, "opaque dir created");
    ok(exists(diff, "dev/null", &st) && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3),
       "char device kept");
    ok(exists(diff, "dev/loop9", &st) && S_ISBLK(st.st_mode) && st.st_rdev == makedev(7, 9),
       "block device kept");
    ok(exists(diff, "run/fifo", &st) && S_ISFIFO(st.st_mode), "fifo kept");
    snprintf(p, sizeof(p), "%s/attr/user", diff);
    ok(lgetxattr(p, "user.note", val, sizeof(val)) == 3 && memcmp(val, "yes", 3) == 0,
       "user.* xattr kept");
    snprintf(p, sizeof(p), "%s/attr/trusted", diff);
    ok(lgetxattr(p, "trusted.overlay.redirect", val, sizeof(val)) < 0 && errno == ENODATA,
       "trusted.overlay.* xattr from the archive dropped");
    ok(!exists(diff, ".wh..wh.plnk", &st), "aufs metadata skipped");
    ok(exists(diff, "", &st) && (st.st_mode & 07777) == 0755, "layer root mode from ./");
}

static void test_unpack_good_layer(void)
{
    static const struct {
        int filter;
        const char *name;
    } kinds[] = {
        {ARCHIVE_FILTER_GZIP, "gzip"}, {ARCHIVE_FILTER_ZSTD, "zstd"}, {ARCHIVE_FILTER_NONE, "tar"}};
    for (size_t k = 0; k < ARRAY_SIZE(kinds); k++) {
        struct layer l;
        write_layer(good_layer, ARRAY_SIZE(good_layer), kinds[k].filter, kinds[k].name, &l);
        char dest[400];
        snprintf(dest, sizeof(dest), "%s/layers/%s", work, kinds[k].name);
        err_t err = {0};
        ok(unpack(&l, dest, &err) == 0, "%s layer unpacks (%s)", kinds[k].name, err.msg);
        if (k == 0)
            check_good_layer(dest);
        uint64_t size = 0;
        ok(image_layer_size(dest, &size) && size == l.tar_len, "%s: size file says %zu",
           kinds[k].name, l.tar_len);
        char layers[400];
        snprintf(layers, sizeof(layers), "%s/layers", work);
        ok(no_entry_with_prefix(layers, ".tmp-"), "%s: no temporary dir left", kinds[k].name);
        ok(unpack(&l, dest, &err) == 0, "%s: unpacking again is a no-op", kinds[k].name);
    }
}

static void test_unpack_rejects_bad_digests(void)
{
    struct layer l;
    static const struct tent one[] = {{"f", AE_IFREG, 0644, "data"}};
    write_layer(one, 1, ARCHIVE_FILTER_GZIP, "digest", &l);
    char dest[400];
    snprintf(dest, sizeof(dest), "%s/layers/digest", work);
    struct layer wrong = l;
    memcpy(wrong.diff_id, D64A, IMAGE_DIGEST_LEN);
    err_t err = {0};
    struct stat st;
    ok(unpack(&wrong, dest, &err) < 0 && err.kind == ERR_UNPROCESSABLE &&
           strcmp(err.code, "image_layer_invalid") == 0 && !exists(dest, "", &st),
       "a wrong diff_id fails the layer and leaves nothing (%s)", err.msg);
    wrong = l;
    memcpy(wrong.blob_digest, D64B, IMAGE_DIGEST_LEN);
    ok(unpack(&wrong, dest, &err) < 0 && err.kind == ERR_UNPROCESSABLE && !exists(dest, "", &st),
       "a wrong blob digest fails the layer (%s)", err.msg);
    /* Corrupt the gzip stream in its middle. */
    FILE *f = fopen(l.blob, "r+");
    fseek(f, 20, SEEK_SET);
    fputs("garbagegarbage", f);
    fclose(f);
    ok(unpack(&l, dest, &err) < 0 && err.kind == ERR_UNPROCESSABLE && !exists(dest, "", &st),
       "a corrupt blob fails the layer (%s)", err.msg);
    char layers[400];
    snprintf(layers, sizeof(layers), "%s/layers", work);
    ok(no_entry_with_prefix(layers, ".tmp-"), "failed unpacks leave no temporary dir");
}

static void test_unpack_rejects_escapes(void)
{
    char outside[300], abs_link[400];
    snprintf(outside, sizeof(outside), "%s/outside", work);
    mkdir(outside, 0755);
    snprintf(abs_link, sizeof(abs_link), "%s", outside);
    const struct tent dotdot[] = {{"a/", AE_IFDIR, 0755}, {"a/../../escape", AE_IFREG, 0644, "x"}};
    const struct tent dotdot2[] = {{"../outside/escape", AE_IFREG, 0644, "x"}};
    const struct tent absolute[] = {{"/abs", AE_IFREG, 0644, "x"}};
    const struct tent through_abs[] = {{"link", AE_IFLNK, 0777, .symlink = abs_link},
                                       {"link/pwned", AE_IFREG, 0644, "x"}};
    const struct tent through_rel[] = {{"up", AE_IFLNK, 0777, .symlink = "../../.."},
                                       {"up/pwned", AE_IFREG, 0644, "x"}};
    const struct tent hard_out[] = {{"hl", AE_IFREG, 0644, .hardlink = "../../../etc/passwd"}};
    const struct tent hard_abs[] = {{"hl", AE_IFREG, 0644, .hardlink = "/etc/passwd"}};
    const struct tent opaque_through[] = {{"lnk", AE_IFLNK, 0777, .symlink = abs_link},
                                          {"lnk/.wh..wh..opq", AE_IFREG, 0644}};
    const struct tent whiteout_through[] = {{"lnk", AE_IFLNK, 0777, .symlink = abs_link},
                                            {"lnk/.wh.victim", AE_IFREG, 0644}};
    const struct tent root_file[] = {{"./", AE_IFREG, 0644, "x"}};
    static const char *const names[] = {
        "dotdot",       "dotdot2",      "absolute",       "through-abs",      "through-rel",
        "hardlink-out", "hardlink-abs", "opaque-through", "whiteout-through", "root-file"};
    const struct tent *sets[] = {dotdot,   dotdot2,  absolute,       through_abs,      through_rel,
                                 hard_out, hard_abs, opaque_through, whiteout_through, root_file};
    size_t counts[] = {2, 1, 1, 2, 2, 1, 1, 2, 2, 1};
    for (size_t i = 0; i < ARRAY_SIZE(sets); i++) {
        struct layer l;
        write_layer(sets[i], counts[i], ARCHIVE_FILTER_GZIP, names[i], &l);
        char dest[400];
        snprintf(dest, sizeof(dest), "%s/layers/%s", work, names[i]);
        err_t err = {0};
        struct stat st;
        int rc = unpack(&l, dest, &err);
        ok(rc < 0 && err.kind == ERR_UNPROCESSABLE && !exists(dest, "", &st),
           "hostile layer '%s' is refused whole (%s)", names[i], err.msg);
    }
    struct stat st;
    ok(no_entry_with_prefix(outside, ""), "nothing was written outside the layer");
    ok(!exists(work, "escape", &st) && !exists("/", "abs", &st) && !exists("/", "pwned", &st),
       "no escaped file anywhere");
    char opq[8];
    ok(lgetxattr(outside, "trusted.overlay.opaque", opq, sizeof(opq)) < 0,
       "no opaque xattr set outside");
    char layers[400];
    snprintf(layers, sizeof(layers), "%s/layers", work);
    ok(no_entry_with_prefix(layers, ".tmp-"), "refused layers leave no temporary dir");
}

static void test_unpack_usage(void)
{
    char *argv1[] = {"internal-unpack-layer", "a", "b", NULL};
    ok(image_unpack_main(3, argv1) == UNPACK_EUSAGE, "too few arguments is a usage error");
    char *argv2[] = {"internal-unpack-layer", "/x", "/y", "sha256:nothex", NULL};
    ok(image_unpack_main(4, argv2) == UNPACK_EUSAGE, "a bad diff_id is a usage error");
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "internal-unpack-layer") == 0)
        return image_unpack_main(argc - 1, argv + 1);
    test_ref_normalization();
    test_ref_rejects_malformed();
    test_ref_parts();
    test_manifest_parse_good();
    test_manifest_parse_bad();
    test_config_parse();
    test_parse_time();
    test_proc_reason();
    test_unpack_usage();
    if (geteuid() != 0) {
        printf("# not root: skipping the unpack tests\n");
        return tap_done();
    }
    snprintf(work, sizeof(work), "/tmp/sbx-image-test-XXXXXX");
    if (!mkdtemp(work)) {
        ok(0, "mkdtemp");
        return tap_done();
    }
    char layers[400];
    snprintf(layers, sizeof(layers), "%s/layers", work);
    mkdir(layers, 0700);
    test_unpack_good_layer();
    test_unpack_rejects_bad_digests();
    test_unpack_rejects_escapes();
    if (!getenv("KEEP"))
        ok(image_rm_rf(work) == 0, "work dir removed");
    return tap_done();
}
