/*
 * Fetching with skopeo into the shared blob store, and ingesting the result.
 *
 * Every pull or import is one `skopeo copy SRC oci:<root>/tmp/<random>:sandboxer` with
 * --dest-shared-blob-dir <root>/blobs: the per-pull layout holds only index.json, the blobs
 * land (deduplicated, renamed into place by skopeo) in the shared store. We then read the
 * layout as untrusted input: the manifest and config blobs are size-bounded and their
 * sha256 verified, the layers unpacked (once each) by internal-unpack-layer, which verifies
 * the layer digests, and the image recorded in SQLite.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "image_internal.h"
#include "store/store_images.h"

#define LAYOUT_TAG "sandboxer"

static const char *skopeo_path(void)
{
    static const char *const candidates[] = {"/usr/bin/skopeo", "/usr/local/bin/skopeo",
                                             "/bin/skopeo"};
    for (size_t i = 0; i < ARRAY_SIZE(candidates); i++)
        if (access(candidates[i], X_OK) == 0)
            return candidates[i];
    return candidates[0];
}

/*
 * A clean environment: fixed PATH and HOME, plus the daemon's proxy settings if any; a pull
 * through the pulls' namespace (proxy_url set) goes through its proxy and no other.
 */
static char **skopeo_env(image_store_t *s, const char *proxy_url)
{
    static const char *const pass[] = {"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
                                       "http_proxy", "https_proxy", "no_proxy"};
    char **env = xcalloc(ARRAY_SIZE(pass) + 4, sizeof(char *));
    size_t n = 0;
    env[n++] = xstrdup("PATH=/usr/sbin:/usr/bin:/sbin:/bin");
    env[n++] = xasprintf("HOME=%s", s->home);
    env[n++] = xstrdup("LC_ALL=C.UTF-8");
    for (size_t i = 0; i < ARRAY_SIZE(pass); i++) {
        const char *v = proxy_url ? (i < 2 ? proxy_url : NULL) : getenv(pass[i]);
        if (v && *v)
            env[n++] = xasprintf("%s=%s", pass[i], v);
    }
    return env;
}

/*
 * What a client is told of a failed pull: a sentence of ours per kind of failure, never the
 * registry's (or whatever answered) own words, which the log keeps. "Nothing there" and
 * "refused" read the same, so an answer tells nothing of what listens where.
 */
static const char *pull_reason(const char *text, bool timed_out)
{
    static const struct {
        const char *needle, *reason;
    } kinds[] = {
        {"manifest unknown", "the registry has no such image (or tag)"},
        {"name unknown", "the registry has no such repository"},
        {"no such host", "the registry's name does not resolve"},
        {"unauthorized", "the registry refused access (a private image, or no such one)"},
        {"denied", "the registry refused access (a private image, or no such one)"},
        {"authentication required",
         "the registry refused access (a private image, or no such one)"},
        {"no image found", "the registry has no image for this platform"},
        {"choosing an image from manifest list", "the registry has no image for this platform"},
    };
    if (timed_out)
        return "the pull timed out";
    for (size_t i = 0; i < ARRAY_SIZE(kinds); i++)
        if (text && strcasestr(text, kinds[i].needle))
            return kinds[i].reason;
    return "the registry could not be reached or did not serve the image";
}

static void free_strv(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

static int run_skopeo(image_store_t *s, const struct image_fetch_opts *fo, const char *src,
                      const char *layout, err_t *err)
{
    _cleanup_free_ char *dest = xasprintf("oci:%s:" LAYOUT_TAG, layout);
    _cleanup_free_ char *ns = fo->via ? image_pullnet_ns_path(fo->via) : NULL;
    _cleanup_free_ char *netarg = ns ? xasprintf("--net=%s", ns) : NULL;
    _cleanup_free_ char *proxy = fo->via ? image_pullnet_proxy_url(fo->via) : NULL;
    const char *argv[28];
    size_t n = 0;
    if (netarg) { /* skopeo in the pulls' namespace: its proxy is the only way out */
        argv[n++] = IMAGE_NSENTER;
        argv[n++] = netarg;
        argv[n++] = "--";
    }
    argv[n++] = skopeo_path();
    argv[n++] = "--policy";
    argv[n++] = s->policy;
    argv[n++] = "--tmpdir";
    argv[n++] = s->tmp;
    argv[n++] = "--override-os";
    argv[n++] = "linux";
    argv[n++] = "--override-arch";
    argv[n++] = IMAGE_HOST_ARCH;
    argv[n++] = "copy";
    argv[n++] = "--quiet";
    argv[n++] = "--retry-times";
    argv[n++] = "2";
    if (fo->tls_off)
        argv[n++] = "--src-tls-verify=false";
    argv[n++] = "--dest-shared-blob-dir";
    argv[n++] = s->blobs;
    argv[n++] = src;
    argv[n++] = dest;
    argv[n] = NULL;
    char **env = skopeo_env(s, proxy);
    struct image_proc_result res;
    double t0 = now_mono_ms();
    int rc = image_proc_run(argv, (const char *const *)env, IMAGE_PULL_TIMEOUT_S, &res, err);
    free_strv(env);
    if (rc < 0)
        return err_prefix(err, "skopeo");
    __atomic_add_fetch(&s->n_fetches, 1, __ATOMIC_RELAXED);
    char reason[400], q[600];
    image_proc_reason(res.err.data, s->root, reason, sizeof(reason));
    if (res.timed_out)
        snprintf(reason, sizeof(reason), "timed out after %d s", IMAGE_PULL_TIMEOUT_S);
    int status = res.status;
    bool timed_out = res.timed_out;
    image_proc_result_free(&res);
    if (status != 0 || rc < 0) {
        char qs[700];
        log_warn("image.fetch_failed", "source=%s exit=%d reason=%s",
                 log_quote(qs, sizeof(qs), src), status, log_quote(q, sizeof(q), reason));
        if (fo->from_registry)
            return err_set(err, ERR_UNPROCESSABLE, 0, fo->code, "%s; the daemon's log has more",
                           pull_reason(reason, timed_out));
        return err_set(err, ERR_UNPROCESSABLE, 0, fo->code, "%s", reason);
    }
    log_info("image.fetched", "source=%s ms=%.0f", log_quote(q, sizeof(q), src),
             now_mono_ms() - t0);
    return 0;
}

int image_fetch(image_store_t *s, const struct image_fetch_opts *fo, const char *src,
                const char *ref, err_t *err)
{
    unsigned char rnd[8];
    char hex[17];
    if (!random_bytes(rnd, sizeof(rnd)))
        return err_set(err, ERR_INTERNAL, 0, "internal", "no randomness");
    hex_encode(rnd, sizeof(rnd), hex);
    _cleanup_free_ char *layout = xasprintf("%s/%s", s->tmp, hex);
    pthread_rwlock_rdlock(&s->gc_lock);
    int rc = run_skopeo(s, fo, src, layout, err);
    if (rc == 0)
        rc = image_ingest_layout(s, layout, ref, err);
    pthread_rwlock_unlock(&s->gc_lock);
    if (image_rm_rf(layout) < 0)
        log_warn("image.cleanup_failed", "path=%s errno=%d", layout, errno);
    return rc;
}

/* The one image skopeo wrote into the layout's index.json. */
static int layout_manifest(int dirfd, struct image_desc *out, err_t *err)
{
    _cleanup_free_ char *text = NULL;
    size_t len;
    if (image_file_read_at(dirfd, "index.json", IMAGE_MAX_INDEX_FILE, &text, &len, err) < 0)
        return -1;
    struct image_manifest idx;
    if (image_manifest_parse(text, len, &idx, err) < 0)
        return err_prefix(err, "index.json");
    int rc = 0;
    const struct image_desc *pick = NULL;
    for (size_t i = 0; idx.kind == IMAGE_INDEX && i < idx.n_manifests; i++)
        if (idx.n_manifests == 1 || strcmp(idx.manifests[i].ref_name, LAYOUT_TAG) == 0)
            pick = &idx.manifests[i];
    if (pick)
        *out = *pick;
    else
        rc = err_set(err, ERR_UNPROCESSABLE, 0, "image_invalid", "index.json names no image");
    image_manifest_clear(&idx);
    return rc;
}

/* Load and parse the manifest d names; an index is resolved to this host's platform. */
static int load_manifest(image_store_t *s, const struct image_desc *d, struct image_manifest *m,
                         char digest[IMAGE_DIGEST_LEN], err_t *err)
{
    struct image_desc cur = *d;
    for (int depth = 0; depth < 2; depth++) {
        _cleanup_free_ char *text = NULL;
        size_t len;
        if (image_blob_read(s->blobs, cur.digest, cur.size, IMAGE_MAX_MANIFEST, &text, &len, err) <
                0 ||
            image_manifest_parse(text, len, m, err) < 0)
            return err_prefix(err, "manifest");
        if (m->kind == IMAGE_MANIFEST) {
            memcpy(digest, cur.digest, IMAGE_DIGEST_LEN);
            return 0;
        }
        const struct image_desc *pick = image_index_select(m, "linux", IMAGE_HOST_ARCH, NULL, err);
        if (pick)
            cur = *pick;
        image_manifest_clear(m);
        if (!pick)
            return -1;
    }
    return err_set(err, ERR_UNPROCESSABLE, 0, "image_invalid", "nested image indexes");
}

static int check_platform(const struct image_config *c, err_t *err)
{
    if ((c->os[0] && strcmp(c->os, "linux") != 0) ||
        (c->arch[0] && strcmp(c->arch, IMAGE_HOST_ARCH) != 0))
        return err_set(err, ERR_UNPROCESSABLE, 0, "image_unsupported",
                       "the image is for %s/%s, this host runs linux/%s", c->os, c->arch,
                       IMAGE_HOST_ARCH);
    return 0;
}

/* Every layer blob must be in the store with the size its descriptor says. */
static int check_layer_blobs(image_store_t *s, const struct image_manifest *m, err_t *err)
{
    for (size_t i = 0; i < m->n_layers; i++) {
        _cleanup_free_ char *path = xasprintf("%s/sha256/%s", s->blobs, m->layers[i].digest + 7);
        struct stat st;
        if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != m->layers[i].size)
            return err_set(err, ERR_UNPROCESSABLE, 0, "image_invalid",
                           "layer blob %.19s is missing or has the wrong size",
                           m->layers[i].digest);
    }
    return 0;
}

static int unpack_layers(image_store_t *s, const struct image_manifest *m,
                         const struct image_config *c, uint64_t *size, err_t *err)
{
    if (m->n_layers != c->n_diff_ids)
        return err_set(err, ERR_UNPROCESSABLE, 0, "image_invalid",
                       "the manifest has %zu layers, the config %zu diff_ids", m->n_layers,
                       c->n_diff_ids);
    if (check_layer_blobs(s, m, err) < 0)
        return -1;
    *size = 0;
    for (size_t i = 0; i < m->n_layers; i++) {
        if (image_layer_ensure(s, m->layers[i].digest, c->diff_ids[i], err) < 0)
            return -1;
        _cleanup_free_ char *dir = image_layer_dir(s, c->diff_ids[i]);
        uint64_t n = 0;
        if (image_layer_size(dir, &n))
            *size += n;
    }
    return 0;
}

static int record(image_store_t *s, const char *ref, const char *digest, const char *config,
                  const struct image_config *c, uint64_t size, err_t *err)
{
    json_t *ids _cleanup_json_ = json_array();
    for (size_t i = 0; i < c->n_diff_ids; i++)
        json_array_append_new(ids, json_string(c->diff_ids[i]));
    _cleanup_free_ char *layers = json_dump_compact(ids);
    double now = now_unix();
    store_image_t row = {.config = (char *)config, .layers = layers, .size = size};
    snprintf(row.ref, sizeof(row.ref), "%s", ref);
    snprintf(row.digest, sizeof(row.digest), "%s", digest);
    row.created_at = c->created > 0 ? c->created : now;
    row.pulled_at = now;
    if (store_image_put(s->db, &row, err) < 0)
        return -1;
    log_info("image.recorded", "ref=%s digest=%s layers=%zu size=%llu", ref, digest, c->n_diff_ids,
             (unsigned long long)size);
    return 0;
}

int image_ingest_layout(image_store_t *s, const char *dir, const char *ref, err_t *err)
{
    int dirfd _cleanup_close_ = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dirfd < 0)
        return err_sys(err, "open layout");
    struct image_desc top;
    struct image_manifest m;
    char digest[IMAGE_DIGEST_LEN];
    if (layout_manifest(dirfd, &top, err) < 0 || load_manifest(s, &top, &m, digest, err) < 0)
        return -1;
    _cleanup_free_ char *config = NULL;
    size_t len;
    struct image_config c = {0};
    uint64_t size = 0;
    int rc = -1;
    if (image_blob_read(s->blobs, m.config.digest, m.config.size, IMAGE_MAX_CONFIG, &config, &len,
                        err) < 0 ||
        image_config_parse(config, len, &c, err) < 0)
        err_prefix(err, "config");
    else if (check_platform(&c, err) == 0 && unpack_layers(s, &m, &c, &size, err) == 0)
        rc = record(s, ref, digest, config, &c, size, err);
    image_config_clear(&c);
    image_manifest_clear(&m);
    return rc;
}
