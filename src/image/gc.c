/*
 * Garbage collection: blobs and unpacked layers that no recorded image references (and
 * that no caller still uses) are removed. Mark from the images table — each image's
 * manifest blob names its config and layer blobs, its diff_ids name its layer dirs — then
 * sweep blobs/sha256 and layers. Holds the GC lock exclusively: no pull runs meanwhile.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "image_internal.h"
#include "store/store_images.h"

/* A sorted set of 64-hex names. */
struct hexset {
    char (*v)[65];
    size_t n, cap;
};

static void hexset_add(struct hexset *h, const char *hex)
{
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 64;
        h->v = xrealloc(h->v, h->cap * sizeof(*h->v));
    }
    snprintf(h->v[h->n++], 65, "%.64s", hex);
}

static int cmp_hex(const void *a, const void *b)
{
    return strcmp(a, b);
}

static bool hexset_has(const struct hexset *h, const char *hex)
{
    return h->n && bsearch(hex, h->v, h->n, sizeof(*h->v), cmp_hex) != NULL;
}

static bool is_hex64(const char *s)
{
    size_t i = 0;
    for (; s[i]; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return i == 64;
}

/* Mark the blobs of the manifest digest: itself, its config and its layers. */
static void mark_blobs(image_store_t *s, const store_image_t *row, struct hexset *blobs)
{
    hexset_add(blobs, row->digest + 7);
    _cleanup_free_ char *text = NULL;
    size_t len;
    struct image_manifest m;
    err_t err = {0};
    if (image_blob_read(s->blobs, row->digest, -1, IMAGE_MAX_MANIFEST, &text, &len, &err) < 0 ||
        image_manifest_parse(text, len, &m, &err) < 0) {
        log_warn("image.gc_manifest", "ref=%s error=%s", row->ref, err.code);
        return;
    }
    hexset_add(blobs, m.config.digest + 7);
    for (size_t i = 0; i < m.n_layers; i++)
        hexset_add(blobs, m.layers[i].digest + 7);
    image_manifest_clear(&m);
}

static void mark_layers(const store_image_t *row, struct hexset *layers)
{
    json_t *ids _cleanup_json_ = json_loads(row->layers, 0, NULL);
    for (size_t i = 0; i < json_array_size(ids); i++) {
        const char *id = json_string_value(json_array_get(ids, i));
        if (id && image_digest_valid(id))
            hexset_add(layers, id + 7);
    }
}

/* Keep dirs are <root>/layers/<hex>[/diff]: mark <hex>. */
static void mark_keep(image_store_t *s, const char *const *keep, size_t n, struct hexset *layers)
{
    size_t plen = strlen(s->layers);
    for (size_t i = 0; i < n; i++) {
        if (!keep[i] || strncmp(keep[i], s->layers, plen) != 0 || keep[i][plen] != '/')
            continue;
        char hex[65];
        snprintf(hex, sizeof(hex), "%.64s", keep[i] + plen + 1);
        if (is_hex64(hex))
            hexset_add(layers, hex);
    }
}

/* Remove every 64-hex entry of dir not in marked (and, for layers, stale .tmp- dirs). */
static size_t sweep(const char *dir, const struct hexset *marked, bool layers)
{
    int fd _cleanup_close_ = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d _cleanup_closedir_ = fd >= 0 ? fdopendir(fcntl(fd, F_DUPFD_CLOEXEC, 0)) : NULL;
    size_t removed = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        bool stale = layers && strncmp(e->d_name, ".tmp-", 5) == 0;
        if (!stale && (!is_hex64(e->d_name) || hexset_has(marked, e->d_name)))
            continue;
        int rc;
        if (layers && !stale) {
            /* Rename first: the final name disappears at once, never half-removed. */
            char trash[300];
            snprintf(trash, sizeof(trash), ".tmp-gc-%s", e->d_name);
            rc = renameat(fd, e->d_name, fd, trash) < 0 ? -1 : image_rm_rf_at(fd, trash);
        } else {
            rc = stale ? image_rm_rf_at(fd, e->d_name) : unlinkat(fd, e->d_name, 0);
        }
        if (rc < 0)
            log_warn("image.gc_failed", "dir=%s name=%s errno=%d", dir, e->d_name, errno);
        else if (!stale)
            removed++;
    }
    return removed;
}

int image_gc(image_store_t *s, const char *const *keep, size_t n_keep, struct image_gc_stats *stats,
             err_t *err)
{
    struct image_gc_stats st = {0};
    struct hexset blobs = {0}, layers = {0};
    store_image_t *rows = NULL;
    size_t n = 0;
    pthread_rwlock_wrlock(&s->gc_lock);
    int rc = store_image_list(s->db, &rows, &n, err);
    if (rc == 0) {
        for (size_t i = 0; i < n; i++) {
            mark_blobs(s, &rows[i], &blobs);
            mark_layers(&rows[i], &layers);
        }
        mark_keep(s, keep, n_keep, &layers);
        if (blobs.n)
            qsort(blobs.v, blobs.n, sizeof(*blobs.v), cmp_hex);
        if (layers.n)
            qsort(layers.v, layers.n, sizeof(*layers.v), cmp_hex);
        _cleanup_free_ char *sha = xasprintf("%s/sha256", s->blobs);
        st.blobs_removed = sweep(sha, &blobs, false);
        st.layers_removed = sweep(s->layers, &layers, true);
    }
    pthread_rwlock_unlock(&s->gc_lock);
    store_image_list_free(rows, n);
    free(blobs.v);
    free(layers.v);
    if (rc == 0)
        log_info("image.gc", "images=%zu blobs_removed=%zu layers_removed=%zu", n, st.blobs_removed,
                 st.layers_removed);
    if (stats)
        *stats = st;
    return rc;
}
