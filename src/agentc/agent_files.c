/*
 * The files requests over one connection each (protocol: docs/agent-protocol.md, "Files").
 * Every wait is bounded by the request's timeout, every frame by AGENT_MAX_FRAME, a listing
 * by AGENTC_LIST_MAX entries and AGENTC_LIST_MAX_BYTES; reads and writes stream in frames,
 * so a file of any size passes through one frame's worth of memory.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "agent_client.h"
#include "agentc_internal.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"

/* One request on one connection. */
struct op {
    int fd;
    int timeout_ms;
    agentc_reader_t reader;
    char path[AGENT_PATH_MAX]; /* the request's path, normalised */
};

static int protocol_error(const struct agent_frame *f, const char *when, err_t *err)
{
    return err_set(err, ERR_RUNTIME, 0, "agent_protocol",
                   "unexpected frame 0x%02x from the agent %s", f->type, when);
}

/* Normalise a path for the request JSON; ERR_INVALID "invalid_path" if it cannot be. */
static json_t *path_json(const char *path, char *norm, const char *member, err_t *err)
{
    json_t *s = NULL;
    if (!path || agent_path_normalize(path, strlen(path), norm, AGENT_PATH_MAX) < 0 ||
        !(s = json_string(norm)))
        err_set(err, ERR_INVALID, 0, "invalid_path",
                "%s must be a UTF-8 path shorter than %d bytes", member, AGENT_PATH_MAX);
    return s;
}

/* The request object with path (normalised into op->path) and user; NULL with err. */
static json_t *request_json(struct op *op, const struct agentc_file_req *req, const char *member,
                            err_t *err)
{
    json_t *path = path_json(req->path, op->path, member, err);
    json_t *user = req->user ? json_string(req->user) : NULL;
    if (!path || (req->user && (!user || strlen(req->user) > 256))) {
        json_decref(path);
        json_decref(user);
        if (path)
            err_set(err, ERR_INVALID, 0, "bad_user", "user must be UTF-8, at most 256 bytes");
        return NULL;
    }
    json_t *j = json_object();
    json_object_set_new(j, member, path);
    if (user)
        json_object_set_new(j, "user", user);
    return j;
}

/* Send type with j (consumed) on a new op. */
static int op_send(struct op *op, int fd, const struct agentc_file_req *req, uint8_t type,
                   json_t *j, err_t *err)
{
    op->fd = fd;
    op->timeout_ms = req->timeout_ms > 0 ? req->timeout_ms : AGENTC_FILE_TIMEOUT_MS;
    agentc_reader_init(&op->reader);
    _cleanup_free_ char *text = json_dump_compact(j);
    json_decref(j);
    if (strlen(text) > AGENT_MAX_FRAME)
        return err_set(err, ERR_INVALID, 0, "invalid", "the request is over 1 MiB");
    return agentc_send(fd, type, text, strlen(text), err);
}

/* The next frame within the timeout; an ERROR frame becomes err. */
static int op_next(struct op *op, struct agent_frame *f, err_t *err)
{
    if (agentc_read_frame(op->fd, &op->reader, f, now_mono_ms() + op->timeout_ms, err) < 0)
        return -1;
    return f->type == AGENT_ERROR ? agentc_file_error(f, err) : 0;
}

/* Wait for OK (anything else is an error); out may be NULL. */
static int op_expect_ok(struct op *op, struct agentc_ok *out, err_t *err)
{
    struct agent_frame f;
    struct agentc_ok ok;
    if (op_next(op, &f, err) < 0)
        return -1;
    if (f.type != AGENT_OK)
        return protocol_error(&f, "instead of OK", err);
    return agentc_decode_ok(&f, out ? out : &ok, err);
}

/* ---------------------------------------------------------------- STAT, LIST */

int agentc_stat(int fd, const struct agentc_file_req *req, struct agentc_file_info *out, err_t *err)
{
    struct op op = {.fd = -1};
    struct agent_frame f;
    json_t *j = request_json(&op, req, "path", err);
    int rc = j ? op_send(&op, fd, req, AGENT_STAT, j, err) : -1;
    if (rc == 0)
        rc = op_next(&op, &f, err);
    if (rc == 0)
        rc = f.type == AGENT_FILE_INFO ? agentc_decode_file_info(&f, op.path, out, err)
                                       : protocol_error(&f, "instead of FILE_INFO", err);
    agentc_reader_free(&op.reader);
    return rc;
}

/* DIR_ENTRIES frames until FILE_END, within the bounds. */
static int list_loop(struct op *op, json_t *entries, bool *truncated, err_t *err)
{
    size_t bytes = 0;
    for (;;) {
        struct agent_frame f;
        if (op_next(op, &f, err) < 0)
            return -1;
        if (f.type == AGENT_FILE_END) {
            bool more = false;
            if (agentc_decode_list_end(&f, &more, err) < 0)
                return -1;
            *truncated |= more;
            return 0;
        }
        if (f.type != AGENT_DIR_ENTRIES)
            return protocol_error(&f, "in a listing", err);
        bytes += f.len;
        if (agentc_decode_dir_entries(&f, op->path, entries, AGENTC_LIST_MAX, truncated, err) < 0)
            return -1;
        if (*truncated || bytes > AGENTC_LIST_MAX_BYTES) {
            *truncated = true; /* more than we hold: stop here */
            return 0;
        }
    }
}

json_t *agentc_list(int fd, const struct agentc_file_req *req, bool *truncated, err_t *err)
{
    struct op op = {.fd = -1};
    bool more = false;
    json_t *entries = json_array();
    json_t *j = request_json(&op, req, "path", err);
    int rc = j ? op_send(&op, fd, req, AGENT_LIST, j, err) : -1;
    if (rc == 0)
        rc = list_loop(&op, entries, &more, err);
    agentc_reader_free(&op.reader);
    if (rc < 0) {
        json_decref(entries);
        return NULL;
    }
    if (truncated)
        *truncated = more;
    return entries;
}

/* ---------------------------------------------------------------- READ */

static int aborted(err_t *err)
{
    return err_set(err, ERR_UNAVAILABLE, 0, "output_aborted", "the reader of the file left");
}

/* FILE_INFO: the range that follows must be the one asked for, clamped to the size. */
static int read_info(struct op *op, const struct agentc_file_req *req,
                     struct agentc_file_info *info, err_t *err)
{
    struct agent_frame f;
    if (op_next(op, &f, err) < 0)
        return -1;
    if (f.type != AGENT_FILE_INFO)
        return protocol_error(&f, "instead of FILE_INFO", err);
    if (agentc_decode_file_info(&f, op->path, info, err) < 0)
        return -1;
    uint64_t off = req->offset < info->size ? req->offset : info->size;
    uint64_t max = info->size - off;
    if (req->length && req->length < max)
        max = req->length;
    if (strcmp(info->type, "file") != 0 || info->offset != off || info->length != max) {
        agentc_file_info_free(info);
        return err_set(err, ERR_RUNTIME, 0, "agent_protocol",
                       "the agent announced a range it was not asked for");
    }
    return 0;
}

/* FILE_DATA until FILE_END: exactly `length` bytes. */
static int read_data(struct op *op, uint64_t length, agentc_data_fn on_data, void *data, err_t *err)
{
    uint64_t got = 0;
    for (;;) {
        struct agent_frame f;
        if (op_next(op, &f, err) < 0)
            return -1;
        if (f.type == AGENT_FILE_END)
            break;
        if (f.type != AGENT_FILE_DATA)
            return protocol_error(&f, "in a file's data", err);
        if (f.len > length - got)
            return err_set(err, ERR_RUNTIME, 0, "agent_protocol",
                           "the agent sent more than the announced %llu bytes",
                           (unsigned long long)length);
        got += f.len;
        if (on_data && f.len && on_data(data, f.payload, f.len) != 0)
            return aborted(err);
    }
    if (got != length)
        return err_set(err, ERR_CONFLICT, 0, "file_changed",
                       "the file shrank while it was read (%llu of %llu bytes)",
                       (unsigned long long)got, (unsigned long long)length);
    return 0;
}

static json_t *read_json(struct op *op, const struct agentc_file_req *req, err_t *err)
{
    json_t *j = request_json(op, req, "path", err);
    if (j && req->offset)
        json_object_set_new(j, "offset", json_integer((json_int_t)(req->offset & INT64_MAX)));
    if (j && req->length)
        json_object_set_new(j, "length", json_integer((json_int_t)(req->length & INT64_MAX)));
    return j;
}

int agentc_read(int fd, const struct agentc_file_req *req, agentc_info_fn on_info,
                agentc_data_fn on_data, void *data, err_t *err)
{
    struct op op = {.fd = -1};
    struct agentc_file_info info = {0};
    if (req->offset > INT64_MAX || req->length > INT64_MAX)
        return err_set(err, ERR_INVALID, 0, "invalid_range", "offset and length must be < 2^63");
    json_t *j = read_json(&op, req, err);
    if (!j)
        return -1;
    int rc = op_send(&op, fd, req, AGENT_READ, j, err);
    if (rc == 0)
        rc = read_info(&op, req, &info, err);
    if (rc == 0 && on_info && on_info(data, &info) != 0)
        rc = aborted(err);
    uint64_t length = info.length;
    agentc_file_info_free(&info);
    if (rc == 0)
        rc = read_data(&op, length, on_data, data, err);
    agentc_reader_free(&op.reader);
    return rc;
}

/* ---------------------------------------------------------------- WRITE */

static json_t *write_json(struct op *op, const struct agentc_file_req *req, err_t *err)
{
    char mode[8];
    if (req->set_mode && req->mode > 07777) {
        err_set(err, ERR_INVALID, 0, "invalid_mode", "mode must be at most 07777");
        return NULL;
    }
    json_t *j = request_json(op, req, "path", err);
    if (j && req->set_mode) {
        snprintf(mode, sizeof(mode), "%04o", (unsigned)req->mode);
        json_object_set_new(j, "mode", json_string(mode));
    }
    if (j && req->mkdir)
        json_object_set_new(j, "mkdir", json_true());
    if (j && req->append)
        json_object_set_new(j, "append", json_true());
    if (j && req->truncate)
        json_object_set_new(j, "truncate", json_true());
    return j;
}

static void set_send_timeout(int fd, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

int agentc_write_begin(int fd, const struct agentc_file_req *req, agentc_writer_t *w, err_t *err)
{
    struct op op = {.fd = -1};
    struct agentc_ok ok;
    json_t *j = write_json(&op, req, err);
    if (!j)
        return -1;
    int rc = op_send(&op, fd, req, AGENT_WRITE, j, err);
    if (rc == 0)
        rc = op_expect_ok(&op, &ok, err);
    if (rc == 0 && !ok.ready)
        rc = err_set(err, ERR_RUNTIME, 0, "agent_protocol", "the agent's OK is not \"ready\"");
    if (rc < 0) {
        agentc_reader_free(&op.reader);
        return -1;
    }
    set_send_timeout(fd, op.timeout_ms);
    *w = (agentc_writer_t){.fd = fd, .timeout_ms = op.timeout_ms, .reader = op.reader};
    return 0;
}

/* The agent speaks during a write only to stop it: read its ERROR (or say what it sent). */
static int agent_spoke(agentc_writer_t *w, err_t *err)
{
    struct op op = {.fd = w->fd, .timeout_ms = w->timeout_ms, .reader = w->reader};
    struct agent_frame f;
    int rc = op_next(&op, &f, err);
    w->reader = op.reader;
    return rc < 0 ? -1 : protocol_error(&f, "during a write", err);
}

/* A send failed: the agent may have said why before closing; else report the send. */
static int send_failed(agentc_writer_t *w, err_t *err)
{
    err_t why = {0};
    struct agent_frame f;
    if (err && (err->errnum == EAGAIN || err->errnum == EWOULDBLOCK))
        return err_set(err, ERR_RUNTIME, 0, "agent_timeout", "the agent stopped taking data");
    if (agentc_read_frame(w->fd, &w->reader, &f, now_mono_ms() + 100, &why) == 0 &&
        f.type == AGENT_ERROR)
        return agentc_file_error(&f, err);
    return -1;
}

int agentc_write_chunk(agentc_writer_t *w, const void *p, size_t n, err_t *err)
{
    struct pollfd pfd = {.fd = w->fd, .events = POLLIN};
    if (poll(&pfd, 1, 0) > 0)
        return agent_spoke(w, err);
    const uint8_t *c = p;
    while (n > 0) {
        size_t k = n < AGENT_MAX_CHUNK ? n : AGENT_MAX_CHUNK;
        if (agentc_send(w->fd, AGENT_FILE_DATA, c, k, err) < 0)
            return send_failed(w, err);
        c += k;
        n -= k;
        w->sent += k;
    }
    return 0;
}

int agentc_write_end(agentc_writer_t *w, uint64_t *size, err_t *err)
{
    struct agentc_ok ok = {0};
    int rc = agentc_send(w->fd, AGENT_FILE_END, NULL, 0, err);
    if (rc < 0) {
        rc = send_failed(w, err);
    } else {
        struct op op = {.fd = w->fd, .timeout_ms = w->timeout_ms, .reader = w->reader};
        rc = op_expect_ok(&op, &ok, err);
        w->reader = op.reader;
    }
    if (rc == 0 && (!ok.has_size || ok.size != w->sent))
        rc = err_set(err, ERR_RUNTIME, 0, "agent_protocol", "the agent wrote %llu bytes of %llu",
                     (unsigned long long)ok.size, (unsigned long long)w->sent);
    if (rc == 0 && size)
        *size = ok.size;
    agentc_reader_free(&w->reader);
    return rc;
}

void agentc_write_abort(agentc_writer_t *w)
{
    agentc_reader_free(&w->reader);
}

/* ---------------------------------------------------------------- DELETE, MKDIR, RENAME */

/* Send j (consumed) as type and wait for OK. */
static int simple_op(int fd, const struct agentc_file_req *req, struct op *op, uint8_t type,
                     json_t *j, err_t *err)
{
    if (!j)
        return -1;
    int rc = op_send(op, fd, req, type, j, err);
    if (rc == 0)
        rc = op_expect_ok(op, NULL, err);
    agentc_reader_free(&op->reader);
    return rc;
}

int agentc_delete(int fd, const struct agentc_file_req *req, err_t *err)
{
    struct op op = {.fd = -1};
    json_t *j = request_json(&op, req, "path", err);
    if (j && agent_path_is_root(op.path)) {
        json_decref(j);
        return err_set(err, ERR_INVALID, 0, "invalid_path", "refusing to delete /");
    }
    if (j && req->recursive)
        json_object_set_new(j, "recursive", json_true());
    return simple_op(fd, req, &op, AGENT_DELETE, j, err);
}

int agentc_mkdir(int fd, const struct agentc_file_req *req, err_t *err)
{
    struct op op = {.fd = -1};
    json_t *j = write_json(
        &op,
        &(struct agentc_file_req){
            .path = req->path, .user = req->user, .set_mode = req->set_mode, .mode = req->mode},
        err);
    if (j && req->parents)
        json_object_set_new(j, "parents", json_true());
    return simple_op(fd, req, &op, AGENT_MKDIR, j, err);
}

int agentc_rename(int fd, const struct agentc_file_req *req, err_t *err)
{
    struct op op = {.fd = -1};
    char to[AGENT_PATH_MAX];
    json_t *j = request_json(&op, req, "from", err);
    json_t *t = j ? path_json(req->to, to, "to", err) : NULL;
    if (j && !t) {
        json_decref(j);
        return -1;
    }
    if (j)
        json_object_set_new(j, "to", t);
    if (j && req->no_replace)
        json_object_set_new(j, "overwrite", json_false());
    return simple_op(fd, req, &op, AGENT_RENAME, j, err);
}

/* ---------------------------------------------------------------- XATTR_SET, XATTR_GET */

int agentc_xattr_set(int fd, const struct agentc_file_req *req, json_t *attrs, err_t *err)
{
    struct op op = {.fd = -1};
    json_t *j = request_json(&op, req, "path", err);
    if (j)
        json_object_set(j, "attrs", attrs);
    return simple_op(fd, req, &op, AGENT_XATTR_SET, j, err);
}

/* Each entry of the agent's answer: an object of strings (names under prefix) or null. */
static json_t *checked_attrs(json_t *v, const char *prefix)
{
    if (json_is_null(v))
        return json_null();
    if (!json_is_object(v) || json_object_size(v) > 64)
        return NULL;
    json_t *out = json_object();
    const char *name;
    json_t *val;
    json_object_foreach(v, name, val)
    {
        if (strncmp(name, prefix, strlen(prefix)) != 0 || !json_is_string(val)) {
            json_decref(out);
            return NULL;
        }
        json_object_set_new(out, name,
                            json_string_lossy(json_string_value(val), json_string_length(val)));
    }
    return out;
}

json_t *agentc_xattr_get(int fd, const struct agentc_file_req *req, json_t *paths,
                         const char *prefix, err_t *err)
{
    struct op op = {.fd = -1};
    struct agent_frame f;
    json_t *user = req->user ? json_string(req->user) : NULL;
    json_t *j = json_pack("{s:O, s:s}", "paths", paths, "prefix", prefix);
    if (user)
        json_object_set_new(j, "user", user);
    json_t *out = NULL;
    if (op_send(&op, fd, req, AGENT_XATTR_GET, j, err) == 0 && op_next(&op, &f, err) == 0) {
        _cleanup_json_ json_t *a = NULL;
        json_t *list = NULL;
        if (f.type != AGENT_OK || !(a = json_loadb((const char *)f.payload, f.len, 0, NULL)) ||
            !json_is_array(list = json_object_get(a, "attrs")) ||
            json_array_size(list) > json_array_size(paths)) {
            agentc_bad_payload(err, "XATTR_GET's OK");
        } else {
            out = json_array();
            size_t i;
            json_t *v, *c;
            json_array_foreach(list, i, v)
            {
                if (!(c = checked_attrs(v, prefix))) {
                    json_decref(out);
                    out = NULL;
                    agentc_bad_payload(err, "XATTR_GET's OK");
                    break;
                }
                json_array_append_new(out, c);
            }
        }
    }
    agentc_reader_free(&op.reader);
    return out;
}

/* ---------------------------------------------------------------- WATCH */

int agentc_watch_begin(int fd, const struct agentc_file_req *req, bool recursive,
                       agentc_reader_t *reader, err_t *err)
{
    struct op op = {.fd = -1};
    json_t *j = request_json(&op, req, "path", err);
    if (j && recursive)
        json_object_set_new(j, "recursive", json_true());
    int rc = j ? op_send(&op, fd, req, AGENT_WATCH, j, err) : -1;
    if (rc == 0)
        rc = op_expect_ok(&op, NULL, err);
    if (rc < 0) {
        agentc_reader_free(&op.reader);
        return -1;
    }
    *reader = op.reader; /* what came after the OK stays there */
    return 0;
}

int agentc_watch_read(int fd, agentc_reader_t *reader, int wait_ms, json_t *events,
                      uint64_t *dropped, err_t *err)
{
    struct agent_frame f;
    int rc = agentc_reader_next(reader, &f);
    if (rc == AGENT_PARSE_INCOMPLETE) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, wait_ms) == 0)
            return 0;
        if (agentc_read_frame(fd, reader, &f, now_mono_ms() + 1000, err) < 0)
            return -1;
    } else if (rc != AGENT_PARSE_COMPLETE) {
        return err_set(err, ERR_RUNTIME, 0, "agent_protocol", "a malformed frame from the agent");
    }
    if (f.type == AGENT_ERROR)
        return agentc_file_error(&f, err);
    _cleanup_json_ json_t *j =
        f.type == AGENT_WATCH_EVENTS ? json_loadb((const char *)f.payload, f.len, 0, NULL) : NULL;
    json_t *list = json_object_get(j, "events"), *e;
    json_int_t d = json_integer_value(json_object_get(j, "dropped"));
    size_t i;
    if (!json_is_array(list) || d < 0)
        return agentc_bad_payload(err, "WATCH_EVENTS");
    *dropped += (uint64_t)d;
    json_array_foreach(list, i, e)
    {
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *type = json_string_value(json_object_get(e, "type"));
        if (!name || !type || strlen(name) >= AGENT_PATH_MAX || strlen(type) > 8)
            return agentc_bad_payload(err, "WATCH_EVENTS");
        json_array_append_new(
            events,
            json_pack("{s:o, s:s}", "name", json_string_lossy(name, strlen(name)), "type", type));
    }
    return 1;
}
