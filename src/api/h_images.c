/* Image routes: list, pull, remove (refused while a sandbox uses the image). */
#include <stddef.h>
#include <string.h>

#include "api_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "image/image.h"
#include "sandbox/sandbox.h"

static json_t *image_json(const image_t *img)
{
    return json_pack("{s:s, s:s, s:I, s:f, s:f}", "ref", img->ref, "digest", img->digest, "size",
                     (json_int_t)img->size, "created_at", img->created_at, "pulled_at",
                     img->pulled_at);
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
        image_pull(r->api->images, ref, &img, err) < 0)
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
                       "image %s is used by a sandbox; delete the sandbox first", ref);
    if (image_remove(r->api->images, ref, err) < 0)
        return -1;
    api_reply_json(r, 200, json_pack("{s:s, s:b}", "ref", ref, "deleted", 1));
    return 0;
}
