/*
 * Unpacked layers, keyed by diff_id: <root>/layers/<hex>/{diff/,size}.
 *
 * Why diff_id and not chain id: each layer is unpacked on its own into an empty directory
 * with whiteouts kept as overlayfs whiteouts, so its content depends only on its own tar
 * stream, never on the layers below it; overlayfs applies the stacking at mount time. Two
 * images that share a layer on different parents share its directory. (A chain id would
 * be the key if layers were applied onto a copy of their parent, as snapshotters do.)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "image_internal.h"

char *image_layer_dir(image_store_t *s, const char *diff_id)
{
    return xasprintf("%s/%s", s->layers, diff_id + 7);
}

bool image_layer_size(const char *dir, uint64_t *out)
{
    _cleanup_free_ char *path = xasprintf("%s/size", dir);
    _cleanup_fclose_ FILE *f = fopen(path, "re");
    unsigned long long v;
    if (!f || fscanf(f, "%llu", &v) != 1)
        return false;
    *out = v;
    return true;
}

/* A layer directory exists only once complete (it is renamed into place). */
static bool layer_present(const char *dir)
{
    _cleanup_free_ char *diff = xasprintf("%s/diff", dir);
    struct stat st;
    return lstat(diff, &st) == 0 && S_ISDIR(st.st_mode);
}

int image_layer_unpack(const char *self_exe, const char *blob, const char *dest,
                       const char *diff_id, const char *blob_digest, const char *hide, err_t *err)
{
    const char *argv[] = {self_exe, "internal-unpack-layer", blob, dest, diff_id, blob_digest,
                          NULL};
    const char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C.UTF-8", NULL};
    struct image_proc_result res;
    double t0 = now_mono_ms();
    if (image_proc_run(argv, envp, IMAGE_UNPACK_TIMEOUT_S, &res, err) < 0)
        return err_prefix(err, "unpack layer");
    char reason[400];
    image_proc_reason(res.err.data, hide, reason, sizeof(reason));
    int status = res.status;
    bool timed_out = res.timed_out;
    image_proc_result_free(&res);
    if (timed_out)
        return err_set(err, ERR_INTERNAL, 0, "image_unpack_failed",
                       "unpacking layer %.19s took longer than %d s", diff_id,
                       IMAGE_UNPACK_TIMEOUT_S);
    if (status == UNPACK_EBADLAYER)
        return err_set(err, ERR_UNPROCESSABLE, 0, "image_layer_invalid", "layer %.19s: %s", diff_id,
                       reason);
    if (status != UNPACK_OK)
        return err_set(err, ERR_INTERNAL, 0, "image_unpack_failed",
                       "unpacking layer %.19s failed (exit %d): %s", diff_id, status, reason);
    log_info("image.layer_unpacked", "diff_id=%.19s ms=%.0f", diff_id, now_mono_ms() - t0);
    return 0;
}

int image_layer_ensure(image_store_t *s, const char *blob_digest, const char *diff_id, err_t *err)
{
    _cleanup_free_ char *dir = image_layer_dir(s, diff_id);
    if (layer_present(dir))
        return 0;
    _cleanup_free_ char *key = xasprintf("layer:%s", diff_id);
    bool leader;
    int rc = image_flight_run(s, key, &leader, err);
    if (!leader)
        return rc;
    rc = 0;
    if (!layer_present(dir)) {
        _cleanup_free_ char *blob = xasprintf("%s/sha256/%s", s->blobs, blob_digest + 7);
        rc = image_layer_unpack(s->self_exe, blob, dir, diff_id, blob_digest, s->root, err);
        if (rc == 0)
            __atomic_add_fetch(&s->n_unpacks, 1, __ATOMIC_RELAXED);
    }
    image_flight_finish(s, key, rc, err);
    return rc;
}
