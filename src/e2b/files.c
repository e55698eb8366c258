/*
 * envd's /files: GET downloads a file, POST uploads files (multipart/form-data, field "file",
 * each part's filename its path unless ?path= names one; or application/octet-stream to
 * ?path=), gzip either way (Accept-Encoding / Content-Encoding), X-Metadata-<key> headers as
 * the files' E2B metadata (user.e2b.<key> extended attributes). Files are written in place
 * (truncated, as envd does), missing directories made, as the request's user, through the
 * sandbox's agent. A secure sandbox takes its access token, or a URL signed with it (E2B's
 * v1 scheme: "v1_" + base64(sha256("path:operation:user:token[:expiration]")), unpadded;
 * expired signatures are refused).
 */
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "agent/path.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "e2b_internal.h"

#define META_MAX 64 /* X-Metadata-* headers taken at most */

/* ---- signatures ------------------------------------------------------------------------- */

int e2b_signature_check(const char *path, const char *operation, const char *user,
                        const char *token, const char *exp, const char *sig, double now, err_t *err)
{
    long long expires = 0;
    if (!sig)
        return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized",
                       "missing signature query parameter");
    if (exp && !parse_int(exp, 0, 1LL << 40, &expires))
        return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized", "invalid signature");
    _cleanup_free_ char *raw =
        exp ? xasprintf("%s:%s:%s:%s:%lld", path ? path : "", operation, user ? user : "", token,
                        expires)
            : xasprintf("%s:%s:%s:%s", path ? path : "", operation, user ? user : "", token);
    unsigned char md[SHA256_DIGEST_LENGTH];
    char b64[64], want[72];
    SHA256((const unsigned char *)raw, strlen(raw), md);
    EVP_EncodeBlock((unsigned char *)b64, md, sizeof(md));
    b64[strcspn(b64, "=")] = '\0';
    snprintf(want, sizeof(want), "v1_%s", b64);
    if (strlen(sig) != strlen(want) || CRYPTO_memcmp(sig, want, strlen(want)) != 0)
        return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized", "invalid signature");
    if (exp && expires < (long long)now)
        return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized", "signature is already expired");
    return 0;
}

/* Check ?signature= (and ?signature_expiration=) of r for operation on the query's path. */
static int check_signature(api_req_t *r, const struct e2b_box *b, const char *operation, err_t *err)
{
    return e2b_signature_check(api_query(r, "path"), operation, api_query(r, "username"),
                               b->rec.access_token, api_query(r, "signature_expiration"),
                               api_query(r, "signature"), now_unix(), err);
}

/* The sandbox, the token or signature checked, the user. */
static int files_prologue(api_req_t *r, const char *operation, struct e2b_box *b,
                          struct e2b_user *u, err_t *err)
{
    if (e2b_box_envd(r, b, true, err) < 0)
        return -1;
    if ((!b->token_ok && check_signature(r, b, operation, err) < 0) ||
        e2b_user_of(r, b, api_query(r, "username"), u, err) < 0) {
        e2b_box_clear(b);
        return -1;
    }
    return 0;
}

/* ---- GET -------------------------------------------------------------------------------- */

struct download {
    sbx_mgr_t *m;
    user_t owner;
    char sid[65];
    char path[AGENT_PATH_MAX];
    char user[64];
    bool gzip;
    z_stream z;
    struct api_stream *s;
};

static bool deflate_out(struct download *d, const void *p, size_t n, int flush)
{
    unsigned char out[64 * 1024];
    d->z.next_in = (unsigned char *)p;
    d->z.avail_in = (uInt)n;
    do {
        d->z.next_out = out;
        d->z.avail_out = sizeof(out);
        if (deflate(&d->z, flush) == Z_STREAM_ERROR)
            return false;
        size_t have = sizeof(out) - d->z.avail_out;
        if (have && !api_stream_write(d->s, out, have))
            return false;
    } while (d->z.avail_out == 0);
    return true;
}

static int send_data(void *ctx, const uint8_t *p, size_t n)
{
    struct download *d = ctx;
    bool ok = d->gzip ? deflate_out(d, p, n, Z_NO_FLUSH) : api_stream_write(d->s, p, n);
    return ok ? 0 : -1;
}

static void download_main(struct api_stream *s, void *ctx)
{
    struct download *d = ctx;
    d->s = s;
    struct agentc_file_req q = {.path = d->path, .user = d->user};
    err_t err = {0};
    int rc = sbx_file_read(d->m, &d->owner, d->sid, &q, NULL, send_data, d, &err);
    if (rc < 0)
        api_stream_abort(s); /* cut short: the client sees a failed body, not a short file */
    else if (d->gzip)
        deflate_out(d, NULL, 0, Z_FINISH);
    if (d->gzip)
        deflateEnd(&d->z);
    free(d);
}

static bool wants_gzip(api_req_t *r)
{
    const char *ae = api_header(r, MHD_HTTP_HEADER_ACCEPT_ENCODING);
    return ae && strcasestr(ae, "gzip") && !strcasestr(ae, "gzip;q=0");
}

static int discard(void *ctx, const uint8_t *p, size_t n)
{
    return 0;
}

/* b's bytes replaced by their gzip stream; -1 (b untouched) on failure. */
static int gzip_buf(buf_t *b)
{
    z_stream z = {0};
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return -1;
    size_t cap = deflateBound(&z, b->len) + 32;
    unsigned char *out = xmalloc(cap);
    z.next_in = (unsigned char *)(b->data ? b->data : "");
    z.avail_in = (uInt)b->len;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    int rc = deflate(&z, Z_FINISH);
    size_t n = cap - z.avail_out;
    deflateEnd(&z);
    if (rc != Z_STREAM_END) {
        free(out);
        return -1;
    }
    buf_reset(b);
    buf_append(b, out, n);
    free(out);
    return 0;
}

int e2b_h_files_get(api_req_t *r, err_t *err)
{
    struct e2b_box b;
    struct e2b_user u;
    char path[AGENT_PATH_MAX];
    json_t *info _cleanup_json_ = NULL;
    if (files_prologue(r, "read", &b, &u, err) < 0)
        return -1;
    const char *qp = api_query(r, "path");
    struct agentc_file_req q = {.path = path, .user = u.name, .length = 1};
    int rc = !qp || !*qp ? err_set(err, ERR_INVALID, 0, "invalid_path", "path is required")
                         : e2b_resolve_path(&u, qp, path, err);
    if (rc == 0)
        rc = sbx_file_stat(r->api->sbx, &b.owner, b.rec.sandbox_id, &q, &info, err);
    if (rc == 0 && json_is_true(json_object_get(info, "is_dir")))
        rc = err_set(err, ERR_INVALID, 0, "is_directory", "path '%s' is a directory", path);
    /* A small file is read whole first, and answered with what was read: one rewritten
       meanwhile never gets a Content-Length its body cannot keep. */
    int64_t size = rc == 0 ? json_integer_value(json_object_get(info, "size")) : -1;
    buf_t whole __attribute__((cleanup(buf_free))) = {0};
    bool small = false;
    if (rc == 0 && size >= 0 && size <= SBX_FILE_WHOLE_MAX) {
        rc = sbx_file_read_whole(r->api->sbx, &b.owner, b.rec.sandbox_id, &q, SBX_FILE_WHOLE_MAX,
                                 &whole, err);
        small = rc == 0;
        if (rc == 1) { /* it grew: stream it */
            buf_reset(&whole);
            rc = 0;
        }
    }
    /* One byte read first: a file the user may not read is a 403 before any header. */
    if (rc == 0 && !small)
        rc = sbx_file_read(r->api->sbx, &b.owner, b.rec.sandbox_id, &q, NULL, discard, NULL, err);
    struct download *d = NULL;
    if (rc == 0 && small) {
        if (wants_gzip(r) && gzip_buf(&whole) == 0) {
            api_reply_bytes(r, 200, "application/octet-stream", whole.data, whole.len);
            MHD_add_response_header(api_response(r), MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
        } else {
            api_reply_bytes(r, 200, "application/octet-stream", whole.data ? whole.data : "",
                            whole.len);
        }
    } else if (rc == 0) {
        d = xcalloc(1, sizeof(*d));
        *d = (struct download){.m = r->api->sbx, .owner = b.owner, .gzip = wants_gzip(r)};
        snprintf(d->sid, sizeof(d->sid), "%s", b.rec.sandbox_id);
        snprintf(d->path, sizeof(d->path), "%s", path);
        snprintf(d->user, sizeof(d->user), "%s", u.name);
        if (d->gzip && deflateInit2(&d->z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 31, 8,
                                    Z_DEFAULT_STRATEGY) != Z_OK)
            d->gzip = false;
        rc = api_reply_stream_ex(r, 200, "application/octet-stream", d->gzip ? -1 : size, true,
                                 download_main, d, err);
    }
    if (rc == 0) {
        struct MHD_Response *resp = api_response(r);
        char name[256];
        snprintf(name, sizeof(name), "%s", strrchr(path, '/') + 1);
        for (char *c = name; *c; c++) /* a header value: no quotes or controls in it */
            if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
                *c = '_';
        _cleanup_free_ char *disp = xasprintf("attachment; filename=\"%s\"", name);
        MHD_add_response_header(resp, "Content-Disposition", disp);
        /* Sandbox bytes, whatever host serves them: never a page of that origin. */
        MHD_add_response_header(resp, "Content-Security-Policy", "sandbox");
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        if (d && d->gzip)
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
    } else if (d) {
        free(d);
    }
    e2b_box_clear(&b);
    return rc;
}

/* ---- POST ------------------------------------------------------------------------------- */

struct upload {
    api_req_t *r;
    struct e2b_box box;
    struct e2b_user user;
    bool have_box;
    json_t *attrs;   /* the metadata as user.e2b.* attributes (NULL: none) */
    json_t *written; /* the paths written, in order */
    bool gzip, z_ready;
    z_stream z;
    struct MHD_PostProcessor *pp; /* multipart */
    sbx_files_t *cur;             /* the file being written */
    char cur_name[AGENT_PATH_MAX];
    uint64_t cur_written;
    err_t err;
};

static void upload_free(void *ctx)
{
    struct upload *u = ctx;
    if (u->pp)
        MHD_destroy_post_processor(u->pp);
    sbx_files_close(u->cur);
    if (u->z_ready)
        inflateEnd(&u->z);
    if (u->have_box)
        e2b_box_clear(&u->box);
    json_decref(u->attrs);
    json_decref(u->written);
    free(u);
}

struct meta_ctx {
    json_t *attrs;
    err_t *err;
};

static enum MHD_Result meta_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    struct meta_ctx *m = cls;
    if (strncasecmp(key, "X-Metadata-", 11) != 0 || !value)
        return MHD_YES;
    const char *k = key + 11;
    if (!*k || json_object_size(m->attrs) >= META_MAX || strlen(k) > 200 || strlen(value) > 4096) {
        err_set(m->err, ERR_INVALID, 0, "invalid_metadata", "metadata: at most %d keys", META_MAX);
        return MHD_NO;
    }
    _cleanup_free_ char *name = xasprintf(E2B_META_PREFIX "%s", k);
    json_object_set_new(m->attrs, name, json_string_lossy(value, strlen(value)));
    return MHD_YES;
}

/* Start writing path (resolved against the user's home) in place. */
static int begin_file(struct upload *u, const char *path)
{
    char norm[AGENT_PATH_MAX];
    if (e2b_resolve_path(&u->user, path, norm, &u->err) < 0)
        return -1;
    json_t *p;
    size_t i;
    json_array_foreach(u->written, i, p)
    {
        if (strcmp(json_string_value(p), norm) == 0)
            return err_set(&u->err, ERR_INVALID, 0, "invalid_path",
                           "you cannot upload multiple files to the same path '%s' in one "
                           "upload request",
                           norm);
    }
    struct agentc_file_req q = {
        .path = norm, .user = u->user.name, .mkdir = true, .truncate = true};
    u->cur =
        sbx_file_write_begin(u->r->api->sbx, &u->box.owner, u->box.rec.sandbox_id, &q, &u->err);
    if (!u->cur)
        return -1;
    snprintf(u->cur_name, sizeof(u->cur_name), "%s", path);
    u->cur_written = 0;
    json_array_append_new(u->written, json_string(norm));
    return 0;
}

/* Finish the file being written, its metadata set. */
static int end_file(struct upload *u)
{
    if (!u->cur)
        return 0;
    int rc = sbx_file_write_end(u->cur, NULL, &u->err);
    sbx_files_close(u->cur);
    u->cur = NULL;
    const char *path =
        json_string_value(json_array_get(u->written, json_array_size(u->written) - 1));
    struct agentc_file_req q = {.path = path, .user = u->user.name};
    if (rc == 0 && u->attrs)
        rc = sbx_file_xattr_set(u->r->api->sbx, &u->box.owner, u->box.rec.sandbox_id, &q, u->attrs,
                                &u->err);
    return rc;
}

static enum MHD_Result on_part(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *filename, const char *ctype, const char *enc,
                               const char *data, uint64_t off, size_t size)
{
    struct upload *u = cls;
    if (!key || strcmp(key, "file") != 0)
        return MHD_YES; /* other fields are ignored, as envd does */
    const char *qpath = api_query(u->r, "path");
    const char *path = qpath && *qpath ? qpath : filename;
    if (!path || !*path)
        return err_set(&u->err, ERR_INVALID, 0, "invalid_path", "a part needs a file name"), MHD_NO;
    bool next = off == 0 && (!u->cur || u->cur_written > 0 || strcmp(u->cur_name, path) != 0);
    if (next && (end_file(u) < 0 || begin_file(u, path) < 0))
        return MHD_NO;
    if (size && sbx_file_write_chunk(u->cur, data, size, &u->err) < 0)
        return MHD_NO;
    u->cur_written += size;
    return MHD_YES;
}

int e2b_h_files_post_begin(api_req_t *r, err_t *err)
{
    struct upload *u = xcalloc(1, sizeof(*u));
    u->r = r;
    u->written = json_array();
    r->ctx = u;
    r->ctx_free = upload_free;
    if (files_prologue(r, "write", &u->box, &u->user, err) < 0)
        return -1;
    u->have_box = true;
    struct meta_ctx m = {json_object(), err};
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, meta_header, &m);
    if (json_object_size(m.attrs))
        u->attrs = m.attrs;
    else
        json_decref(m.attrs);
    if (err->kind)
        return -1;
    const char *ce = api_header(r, MHD_HTTP_HEADER_CONTENT_ENCODING);
    if (ce && strcasecmp(ce, "gzip") == 0) {
        if (inflateInit2(&u->z, 31) != Z_OK)
            return err_set(err, ERR_INTERNAL, 0, "internal", "no inflater");
        u->gzip = u->z_ready = true;
    } else if (ce && strcasecmp(ce, "identity") != 0) {
        return err_set(err, ERR_INVALID, 0, "invalid_encoding", "unsupported Content-Encoding");
    }
    const char *ct = api_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (ct && strncasecmp(ct, "multipart/form-data", 19) == 0) {
        if (!(u->pp = MHD_create_post_processor(r->conn, 64 * 1024, on_part, u)))
            return err_set(err, ERR_INVALID, 0, "invalid_body", "the multipart body is malformed");
        return 0;
    }
    if (!ct || strncasecmp(ct, "application/octet-stream", 24) != 0)
        return err_set(err, ERR_INVALID, 0, "invalid_body",
                       "unsupported content type, expected multipart/form-data or "
                       "application/octet-stream");
    const char *path = api_query(r, "path");
    if (!path || !*path)
        return err_set(err, ERR_INVALID, 0, "invalid_path",
                       "path query parameter is required for raw body upload");
    if (begin_file(u, path) < 0) {
        *err = u->err;
        return -1;
    }
    return 0;
}

/* Body bytes after decoding: to the multipart parser or the raw file. */
static int feed(struct upload *u, const char *p, size_t n)
{
    if (u->pp) {
        if (MHD_post_process(u->pp, p, n) == MHD_YES)
            return 0;
        if (u->err.kind == ERR_NONE)
            err_set(&u->err, ERR_INVALID, 0, "invalid_body", "the multipart body is malformed");
        return -1;
    }
    return sbx_file_write_chunk(u->cur, p, n, &u->err);
}

int e2b_h_files_post_chunk(api_req_t *r, const char *data, size_t len, err_t *err)
{
    struct upload *u = r->ctx;
    int rc = 0;
    if (!u->gzip) {
        rc = feed(u, data, len);
    } else {
        unsigned char out[64 * 1024];
        u->z.next_in = (unsigned char *)data;
        u->z.avail_in = (uInt)len;
        while (rc == 0 && u->z.avail_in > 0) {
            u->z.next_out = out;
            u->z.avail_out = sizeof(out);
            int zr = inflate(&u->z, Z_NO_FLUSH);
            if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR)
                rc = err_set(&u->err, ERR_INVALID, 0, "invalid_body", "the gzip body is malformed");
            else if (sizeof(out) - u->z.avail_out)
                rc = feed(u, (const char *)out, sizeof(out) - u->z.avail_out);
            if (zr == Z_STREAM_END)
                break;
        }
    }
    if (rc < 0)
        *err = u->err;
    return rc;
}

int e2b_h_files_post(api_req_t *r, err_t *err)
{
    struct upload *u = r->ctx;
    if (end_file(u) < 0) {
        *err = u->err;
        return -1;
    }
    json_t *out = json_array(), *p;
    size_t i;
    json_array_foreach(u->written, i, p)
    {
        const char *path = json_string_value(p);
        json_t *e = json_pack("{s:s, s:s, s:s}", "path", path, "name", strrchr(path, '/') + 1,
                              "type", "file");
        json_t *meta = e2b_file_metadata(r, &u->box, &u->user, path);
        if (meta)
            json_object_set_new(e, "metadata", meta);
        json_array_append_new(out, e);
    }
    api_reply_json(r, 200, out);
    return 0;
}
