/*
 * Files routes: GET (a directory as JSON, a file streamed with Range), PUT (one file from the
 * raw body, atomic), POST (multipart, field "files"), DELETE. Everything runs inside the
 * sandbox through its agent; bodies stream both ways in bounded memory.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "agent/path.h"
#include "api_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "sandbox/sandbox.h"

static bool query_true(api_req_t *r, const char *name)
{
    const char *v = api_query(r, name);
    return v && (strcmp(v, "true") == 0 || strcmp(v, "1") == 0);
}

/* The route's path normalised against the sandbox's "/" (never above it), into out. */
static int norm_path(const char *path, char *out, size_t size, err_t *err)
{
    if (agent_path_normalize(path ? path : "", path ? strlen(path) : 0, out, size) < 0)
        return err_set(err, ERR_INVALID, 0, "invalid_path", "the path is too long or holds NUL");
    return 0;
}

/* The file request for a normalised path (and ?user=). */
static void file_req(api_req_t *r, const char *path, struct agentc_file_req *q)
{
    *q = (struct agentc_file_req){.path = path, .user = api_query(r, "user")};
}

/* The route's {path} normalised into path (size bytes) and the request for it. */
static int route_file(api_req_t *r, char *path, size_t size, struct agentc_file_req *q, err_t *err)
{
    _cleanup_free_ char *raw = api_param(r, "path");
    if (norm_path(raw, path, size, err) < 0)
        return -1;
    file_req(r, path, q);
    return 0;
}

static int parse_mode(api_req_t *r, struct agentc_file_req *q, err_t *err)
{
    const char *mode = api_query(r, "mode");
    if (!mode)
        return 0;
    char *end = NULL;
    unsigned long v = strtoul(mode, &end, 8);
    if (!*mode || *end || v > 07777)
        return err_set(err, ERR_INVALID, 0, "invalid_query", "mode must be octal, like 0644");
    q->set_mode = true;
    q->mode = (uint32_t)v;
    return 0;
}

/* ---- GET ---- */

struct range {
    uint64_t offset, length;
    bool partial;
};

/* Parse a single "bytes=a-b" / "bytes=a-" / "bytes=-n" range against size. */
static int parse_range(const char *h, uint64_t size, struct range *rg, err_t *err)
{
    *rg = (struct range){0, size, false};
    if (!h)
        return 0;
    unsigned long long a = 0, b = 0;
    int n = 0;
    if (sscanf(h, "bytes=-%llu%n", &b, &n) == 1 && h[n] == '\0') {
        a = b >= size ? 0 : size - b;
        b = size ? size - 1 : 0;
    } else if (sscanf(h, "bytes=%llu-%llu%n", &a, &b, &n) == 2 && h[n] == '\0') {
        if (b >= size)
            b = size ? size - 1 : 0;
    } else if (sscanf(h, "bytes=%llu-%n", &a, &n) == 1 && h[n] == '\0') {
        b = size ? size - 1 : 0;
    } else {
        return 0; /* not a range we serve: the whole file, as RFC 9110 allows */
    }
    if (size == 0 || a >= size || a > b)
        return err_set(err, ERR_RANGE, 0, "range_not_satisfiable",
                       "the range is outside the file of %" PRIu64 " bytes", size);
    *rg = (struct range){a, b - a + 1, true};
    return 0;
}

/* A file download as the stream thread runs it. */
struct download {
    sbx_mgr_t *sbx;
    user_t user;
    char *key;
    char *path;
    char *as_user;
    struct range rg;
    struct api_stream *s;
};

static int send_data(void *ctx, const uint8_t *p, size_t n)
{
    struct download *d = ctx;
    return api_stream_write(d->s, p, n) ? 0 : -1;
}

static void download_main(struct api_stream *s, void *ctx)
{
    struct download *d = ctx;
    d->s = s;
    struct agentc_file_req q = {.path = d->path, .user = d->as_user};
    q.offset = d->rg.offset;
    q.length = d->rg.length;
    err_t err = {0};
    if (sbx_file_read(d->sbx, &d->user, d->key, &q, NULL, send_data, d, &err) < 0)
        log_warn("files.read_failed", "code=%s", err.code); /* the short body tells the client */
    free(d->key);
    free(d->path);
    free(d->as_user);
    free(d);
}

static const char *content_type(const char *path)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".txt", "text/plain; charset=utf-8"},
        {".log", "text/plain; charset=utf-8"},
        {".json", "application/json"},
        {".html", "text/html; charset=utf-8"},
        {".css", "text/css"},
        {".js", "text/javascript"},
        {".png", "image/png"},
        {".jpg", "image/jpeg"},
        {".svg", "image/svg+xml"},
        {".pdf", "application/pdf"},
    };
    const char *dot = strrchr(path, '.');
    for (size_t i = 0; dot && i < ARRAY_SIZE(types); i++)
        if (strcmp(dot, types[i].ext) == 0)
            return types[i].type;
    return "application/octet-stream";
}

/* 416 for a range outside a file of size bytes, saying how large it is (RFC 9110, 15.5.17). */
static void reply_unsatisfiable(api_req_t *r, const err_t *err, uint64_t size)
{
    api_reply_error(r, err);
    char cr[48];
    snprintf(cr, sizeof(cr), "bytes */%" PRIu64, size);
    MHD_add_response_header(api_response(r), MHD_HTTP_HEADER_CONTENT_RANGE, cr);
}

/* Accept-Ranges, and Content-Range for a partial answer, on the reply of r. */
static void add_range_headers(api_req_t *r, const struct range *rg, uint64_t size)
{
    MHD_add_response_header(api_response(r), MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
    if (rg->partial) {
        char cr[96];
        snprintf(cr, sizeof(cr), "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, rg->offset,
                 rg->offset + rg->length - 1, size);
        MHD_add_response_header(api_response(r), MHD_HTTP_HEADER_CONTENT_RANGE, cr);
    }
}

static int download(api_req_t *r, const char *key, const char *path, int64_t size, err_t *err)
{
    struct range rg = {0, 0, false};
    if (size >= 0 &&
        parse_range(api_header(r, MHD_HTTP_HEADER_RANGE), (uint64_t)size, &rg, err) < 0) {
        if (err->kind != ERR_RANGE)
            return -1;
        reply_unsatisfiable(r, err, (uint64_t)size);
        return 0;
    }
    struct download *d = xcalloc(1, sizeof(*d));
    *d = (struct download){r->api->sbx,
                           r->user,
                           xstrdup(key),
                           xstrdup(path),
                           api_query(r, "user") ? xstrdup(api_query(r, "user")) : NULL,
                           rg,
                           NULL};
    if (api_reply_stream_sized(r, rg.partial ? 206 : 200, content_type(path),
                               size >= 0 ? (int64_t)rg.length : -1, download_main, d, err) < 0) {
        free(d->key), free(d->path), free(d->as_user), free(d);
        return -1;
    }
    add_range_headers(r, &rg, (uint64_t)size);
    return 0;
}

static int discard(void *ctx, const uint8_t *p, size_t n)
{
    (void)ctx, (void)p, (void)n;
    return 0;
}

/*
 * Open the file as the request's user for one byte before answering: a file it may not read
 * (or one that vanished) is then a 403 (404) rather than a 200 whose body never comes.
 */
static int check_readable(api_req_t *r, const char *key, const struct agentc_file_req *q,
                          err_t *err)
{
    struct agentc_file_req probe = *q;
    probe.offset = 0;
    probe.length = 1;
    return sbx_file_read(r->api->sbx, &r->user, key, &probe, NULL, discard, NULL, err);
}

/*
 * A small file read whole, then answered with the length of what was read: a file rewritten
 * while it is downloaded (`echo $i > /tmp/count`, a log rotated) is never answered with a
 * Content-Length its body cannot keep. A file that shrank while it was read is answered
 * with what read() gave up to its end, as `cat` would print it. 1 when it grew too large
 * (stream it instead), 0 answered, -1 err.
 */
static int read_small(api_req_t *r, const char *key, const struct agentc_file_req *q, err_t *err)
{
    buf_t b __attribute__((cleanup(buf_free))) = {0};
    int rc = sbx_file_read_whole(r->api->sbx, &r->user, key, q, SBX_FILE_WHOLE_MAX, &b, err);
    if (rc != 0)
        return rc;
    struct range rg;
    if (parse_range(api_header(r, MHD_HTTP_HEADER_RANGE), b.len, &rg, err) < 0) {
        if (err->kind != ERR_RANGE)
            return -1;
        reply_unsatisfiable(r, err, b.len);
        return 0;
    }
    api_reply_bytes(r, rg.partial ? 206 : 200, content_type(q->path),
                    b.data ? b.data + rg.offset : "", (size_t)rg.length);
    add_range_headers(r, &rg, b.len);
    return 0;
}

int h_files_get(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *key = api_param(r, "id");
    char path[AGENT_PATH_MAX];
    struct agentc_file_req q;
    if (route_file(r, path, sizeof(path), &q, err) < 0)
        return -1;
    json_t *info _cleanup_json_ = NULL;
    if (sbx_file_stat(r->api->sbx, &r->user, key, &q, &info, err) < 0)
        return -1;
    if (query_true(r, "stat")) {
        api_reply_json(r, 200, json_incref(info));
        return 0;
    }
    if (json_is_true(json_object_get(info, "is_dir"))) {
        json_t *listing = NULL;
        if (sbx_file_list(r->api->sbx, &r->user, key, &q, &listing, err) < 0)
            return -1;
        api_reply_json(r, 200, listing);
        return 0;
    }
    const char *type = json_string_value(json_object_get(info, "type"));
    if (!type || (strcmp(type, "file") != 0 && strcmp(type, "symlink") != 0))
        return err_set(err, ERR_INVALID, 0, "special_file", "%s is a %s, not a regular file",
                       q.path, type ? type : "special file");
    /* A symlink's own size is its target's name: stream the target without a length. */
    int64_t size =
        strcmp(type, "file") == 0 ? json_integer_value(json_object_get(info, "size")) : -1;
    if (size >= 0 && size <= SBX_FILE_WHOLE_MAX) {
        int rc = read_small(r, key, &q, err);
        if (rc <= 0)
            return rc;
    }
    if (check_readable(r, key, &q, err) < 0)
        return -1;
    return download(r, key, q.path, size, err);
}

/* ---- PUT: one file from the raw body ---- */

static void files_close(void *ctx)
{
    sbx_files_close(ctx);
}

int h_files_put_begin(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *key = api_param(r, "id");
    char path[AGENT_PATH_MAX];
    struct agentc_file_req q;
    if (route_file(r, path, sizeof(path), &q, err) < 0)
        return -1;
    q.mkdir = query_true(r, "mkdir");
    _cleanup_free_ char *raw = api_param(r, "path");
    if (agent_path_is_root(path) || raw[strlen(raw) - 1] == '/')
        return err_set(err, ERR_INVALID, 0, "invalid_path", "PUT needs a file path");
    if (parse_mode(r, &q, err) < 0)
        return -1;
    sbx_files_t *f = sbx_file_write_begin(r->api->sbx, &r->user, key, &q, err);
    if (!f)
        return -1;
    r->ctx = f;
    r->ctx_free = files_close;
    return 0;
}

int h_files_put_chunk(api_req_t *r, const char *data, size_t len, err_t *err)
{
    return sbx_file_write_chunk(r->ctx, data, len, err);
}

int h_files_put(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *raw = api_param(r, "path");
    char path[AGENT_PATH_MAX];
    norm_path(raw, path, sizeof(path), NULL);
    uint64_t size = 0;
    if (sbx_file_write_end(r->ctx, &size, err) < 0)
        return -1;
    api_reply_json(r, 201, json_pack("{s:s, s:I}", "path", path, "size", (json_int_t)size));
    return 0;
}

/* ---- POST: multipart/form-data, field "files", several files ---- */

struct upload {
    api_req_t *r;
    char *key, *dir;
    struct MHD_PostProcessor *pp;
    sbx_files_t *cur;
    char *cur_name;       /* the part being written */
    uint64_t cur_written; /* its bytes so far */
    json_t *uploaded;
    err_t err;
};

static void upload_free(void *ctx)
{
    struct upload *u = ctx;
    if (u->pp)
        MHD_destroy_post_processor(u->pp);
    sbx_files_close(u->cur);
    json_decref(u->uploaded);
    free(u->cur_name);
    free(u->key);
    free(u->dir);
    free(u);
}

/* Finish the file being written, if any. */
static int finish_current(struct upload *u)
{
    if (!u->cur)
        return 0;
    int rc = sbx_file_write_end(u->cur, NULL, &u->err);
    sbx_files_close(u->cur);
    u->cur = NULL;
    return rc;
}

static int start_file(struct upload *u, const char *filename)
{
    /* Only a plain name: a client cannot steer where in the sandbox a part lands. */
    if (!*filename || strchr(filename, '/') || strcmp(filename, "..") == 0 ||
        strcmp(filename, ".") == 0)
        return err_set(&u->err, ERR_INVALID, 0, "invalid_filename",
                       "a file name must be a plain name, not '%.64s'", filename);
    char *path = xasprintf("%s/%s", u->dir, filename);
    struct agentc_file_req q;
    file_req(u->r, path, &q);
    q.mkdir = true;
    u->cur = sbx_file_write_begin(u->r->api->sbx, &u->r->user, u->key, &q, &u->err);
    if (!u->cur) {
        free(path);
        return -1;
    }
    json_array_append_new(u->uploaded, json_string(q.path));
    free(path);
    free(u->cur_name);
    u->cur_name = xstrdup(filename);
    u->cur_written = 0;
    return 0;
}

/*
 * A part starts at offset 0, but libmicrohttpd may call twice at offset 0 for one part:
 * first with no bytes (its headers parsed), then with its first bytes. Only a call at 0
 * after bytes came, or for another name, begins a new file.
 */
static bool new_part(const struct upload *u, const char *filename, uint64_t off)
{
    return off == 0 && (!u->cur || u->cur_written > 0 || strcmp(u->cur_name, filename) != 0);
}

static enum MHD_Result on_part(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *filename, const char *ctype, const char *enc,
                               const char *data, uint64_t off, size_t size)
{
    (void)kind, (void)ctype, (void)enc;
    struct upload *u = cls;
    if (!key || strcmp(key, "files") != 0)
        return MHD_YES; /* other fields are ignored */
    if (!filename)
        return err_set(&u->err, ERR_INVALID, 0, "invalid_field",
                       "field 'files' must carry files (with a filename)"),
               MHD_NO;
    if (new_part(u, filename, off) && (finish_current(u) < 0 || start_file(u, filename) < 0))
        return MHD_NO;
    if (size && sbx_file_write_chunk(u->cur, data, size, &u->err) < 0)
        return MHD_NO;
    u->cur_written += size;
    return MHD_YES;
}

int h_files_post_begin(api_req_t *r, err_t *err)
{
    const char *ct = api_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!ct || strncasecmp(ct, "multipart/form-data", 19) != 0)
        return err_set(err, ERR_INVALID, 0, "invalid_body",
                       "upload files as multipart/form-data with the field 'files'");
    struct upload *u = xcalloc(1, sizeof(*u));
    u->r = r;
    u->key = api_param(r, "id");
    _cleanup_free_ char *dir = api_param(r, "path");
    char norm[AGENT_PATH_MAX];
    if (norm_path(dir, norm, sizeof(norm), err) < 0)
        return -1;
    u->dir = xstrdup(agent_path_is_root(norm) ? "" : norm);
    u->uploaded = json_array();
    r->ctx = u;
    r->ctx_free = upload_free;
    u->pp = MHD_create_post_processor(r->conn, 64 * 1024, on_part, u);
    if (!u->pp)
        return err_set(err, ERR_INVALID, 0, "invalid_body", "the multipart body is malformed");
    return 0;
}

int h_files_post_chunk(api_req_t *r, const char *data, size_t len, err_t *err)
{
    struct upload *u = r->ctx;
    if (MHD_post_process(u->pp, data, len) != MHD_YES) {
        if (u->err.kind == ERR_NONE)
            err_set(&u->err, ERR_INVALID, 0, "invalid_body", "the multipart body is malformed");
        *err = u->err;
        return -1;
    }
    return 0;
}

int h_files_post(api_req_t *r, err_t *err)
{
    struct upload *u = r->ctx;
    if (finish_current(u) < 0) {
        *err = u->err;
        return -1;
    }
    api_reply_json(r, 201, json_pack("{s:O}", "uploaded", u->uploaded));
    return 0;
}

/* ---- DELETE ---- */

int h_files_delete(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *key = api_param(r, "id");
    char path[AGENT_PATH_MAX];
    struct agentc_file_req q;
    if (route_file(r, path, sizeof(path), &q, err) < 0)
        return -1;
    q.recursive = query_true(r, "recursive");
    if (sbx_file_delete(r->api->sbx, &r->user, key, &q, err) < 0)
        return -1;
    api_reply_json(r, 200, json_pack("{s:s, s:b}", "path", q.path, "deleted", 1));
    return 0;
}
