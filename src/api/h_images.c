/* Image routes: list, pull, remove (refused while a sandbox uses the image). */
#include <stddef.h>
#include <string.h>

#include "api_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "image/image.h"
#include "sandbox/sandbox.h"

static json_t *image_json(const image_t *img)
{
    return json_pack("{s:s, s:s, s:I, s:f, s:f}", "ref", img->ref, "digest", img->digest, "size",
                     (json_int_t)img->size, "created_at", img->created_at, "pulled_at",
                     img->pulled_at);
}

/* Remove files no image or sandbox needs any more; a failure only costs disk space. */
static void collect_garbage(api_req_t *r)
{
    json_t *keep_set _cleanup_json_ = NULL;
    err_t err = {0};
    if (sbx_layers_in_use(r->api->sbx, &keep_set, &err) < 0)
        return;
    size_t n = json_object_size(keep_set), i = 0;
    const char **keep = xcalloc(n + 1, sizeof(*keep));
    const char *dir;
    json_t *v;
    json_object_foreach(keep_set, dir, v) keep[i++] = dir;
    struct image_gc_stats st = {0};
    if (image_gc(r->api->images, keep, n, &st, &err) == 0)
        log_info("image.gc", "blobs_removed=%zu layers_removed=%zu", st.blobs_removed,
                 st.layers_removed);
    free(keep);
}

int h_image_list(api_req_t *r, err_t *err)
{
    json_t *arr = NULL;
    if (image_list(r->api->images, &arr, err) < 0)
        return -1;
    api_reply_json(r, 200, json_pack("{s:o}", "images", arr));
    return 0;
}

struct pull_body {
    const char *image;
};

static const struct jfield pull_fields[] = {
    {"image", JF_STRING, true, offsetof(struct pull_body, image), 512, 0, 0},
};

int h_image_pull(api_req_t *r, err_t *err)
{
    json_t *body _cleanup_json_ = NULL;
    struct pull_body b = {0};
    char ref[512];
    image_t *img = NULL;
    if (api_body_object(r, false, &body, err) < 0 ||
        json_decode_fields(body, pull_fields, ARRAY_SIZE(pull_fields), &b, err) < 0 ||
        image_ref_normalize(b.image, ref, sizeof(ref), err) < 0 ||
        image_pull_for(r->api->images, ref, r->user.is_admin, &img, err) < 0)
        return -1;
    api_reply_json(r, 200, image_json(img));
    image_free(img);
    return 0;
}

int h_image_delete(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *given = api_param(r, "ref");
    char ref[512];
    if (image_ref_normalize(given, ref, sizeof(ref), err) < 0)
        return -1;
    if (sbx_image_in_use(r->api->sbx, ref))
        return err_set(err, ERR_CONFLICT, 0, "image_in_use",
                       "image %s is used by a sandbox or a template; delete that first", ref);
    if (image_remove(r->api->images, ref, err) < 0)
        return -1;
    api_reply_json(r, 200, json_pack("{s:s, s:b}", "ref", ref, "deleted", 1));
    collect_garbage(r);
    return 0;
}

struct import_body {
    const char *path;
    const char *ref;
};

static const struct jfield import_fields[] = {
    {"path", JF_STRING, true, offsetof(struct import_body, path), 4096, 0, 0},
    {"ref", JF_STRING, false, offsetof(struct import_body, ref), 512, 0, 0},
};

/* Admins only: the path is read on the daemon's host. */
int h_image_import(api_req_t *r, err_t *err)
{
    json_t *body _cleanup_json_ = NULL;
    struct import_body b = {0};
    char ref[512];
    image_t *img = NULL;
    if (api_body_object(r, false, &body, err) < 0 ||
        json_decode_fields(body, import_fields, ARRAY_SIZE(import_fields), &b, err) < 0 ||
        (b.ref && image_ref_normalize(b.ref, ref, sizeof(ref), err) < 0))
        return -1;
    if (b.path[0] != '/')
        return err_set(err, ERR_INVALID, 0, "invalid_import_path",
                       "field 'path' must be an absolute path on the daemon's host");
    if (image_import(r->api->images, b.path, b.ref ? ref : NULL, &img, err) < 0)
        return -1;
    api_reply_json(r, 200, image_json(img));
    image_free(img);
    return 0;
}
