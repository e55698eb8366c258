/*
 * Files requests: decoding (strict, like EXEC: an unknown member is an error), becoming the
 * request's user, and the helpers the handlers share (errors, frames, the temp file to
 * remove when a write is cut short, stat → JSON).
 *
 * The session process is already a child forked for this one connection, so it switches
 * its own ids (setgroups, setgid, setuid) before touching any path: the kernel applies the
 * user's permissions, nothing is emulated. Paths are normalised lexically against "/" and
 * then used as they are: this is the sandbox's mount namespace, its symlinks are its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/protocol.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "files_internal.h"

/* ---------------------------------------------------------------- the pending temp file */

static volatile sig_atomic_t temp_armed;
static int temp_dirfd = -1;
static char temp_name[256];

void files_temp_arm(int dirfd, const char *name)
{
    temp_dirfd = dirfd;
    snprintf(temp_name, sizeof(temp_name), "%s", name);
    temp_armed = 1;
}

void files_temp_disarm(void)
{
    temp_armed = 0;
}

static void temp_remove(void)
{
    if (temp_armed)
        (void)unlinkat(temp_dirfd, temp_name, 0);
    temp_armed = 0;
}

/* SIGTERM (the agent is stopping) during a request: no half-written file stays behind. */
static void on_sigterm(int sig)
{
    temp_remove();
    _exit(0);
}

/* ---------------------------------------------------------------- errors and frames */

const char *files_errno_code(int errnum)
{
    switch (errnum) {
    case ENOENT:
        return "not_found";
    case ENOTDIR:
        return "not_directory";
    case EACCES:
    case EPERM:
        return "permission";
    case ENOSPC:
    case EDQUOT:
        return "no_space";
    case EROFS:
        return "read_only";
    case EISDIR:
        return "is_directory";
    case ENOTEMPTY:
        return "not_empty";
    case EEXIST:
        return "exists";
    case EFBIG:
        return "too_large";
    case ENAMETOOLONG:
        return "invalid_path";
    case EINVAL:
        return "invalid";
    case EXDEV:
        return "cross_device";
    case EBUSY:
    case ETXTBSY:
        return "in_use";
    }
    return "io_error";
}

void files_fail(struct session *s, const char *code, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    temp_remove();
    session_fail(s, code, msg);
}

void files_fail_errno(struct session *s, int errnum, const char *what, const char *path)
{
    files_fail(s, files_errno_code(errnum), "%s %.400s: %s", what, path, strerror(errnum));
}

void files_send(struct session *s, uint8_t type, const void *p, size_t n)
{
    if (agent_send_frame(s->sock, type, p, n) < 0) {
        temp_remove();
        _exit(0);
    }
}

void files_send_json(struct session *s, uint8_t type, json_t *j)
{
    _cleanup_free_ char *text = json_dump_compact(j);
    json_decref(j);
    files_send(s, type, text, strlen(text));
}

void files_consume(struct session *s, size_t n)
{
    memmove(s->in.data, s->in.data + n, s->in.len - n);
    s->in.len -= n;
}

void files_next_frame(struct session *s, struct agent_frame *f, size_t *used)
{
    for (;;) {
        int r = agent_frame_parse((const uint8_t *)s->in.data, s->in.len, f, used);
        if (r == AGENT_PARSE_COMPLETE)
            return;
        if (r == AGENT_PARSE_INVALID)
            files_fail(s, "protocol", "invalid frame (length over 1 MiB or type 0)");
        if (session_read_client(s) <= 0) {
            temp_remove(); /* the client left: abandon the request */
            _exit(0);
        }
    }
}

/* ---------------------------------------------------------------- stat → JSON */

static const char *type_name(mode_t m)
{
    if (S_ISREG(m))
        return "file";
    if (S_ISDIR(m))
        return "dir";
    if (S_ISLNK(m))
        return "symlink";
    if (S_ISFIFO(m))
        return "fifo";
    if (S_ISSOCK(m))
        return "socket";
    if (S_ISCHR(m))
        return "char";
    return "block";
}

json_t *files_stat_json(const struct stat *st, const char *path)
{
    const char *name = agent_path_base(path);
    char mode[8];
    snprintf(mode, sizeof(mode), "%04o", (unsigned)(st->st_mode & 07777));
    json_t *j = json_object();
    json_object_set_new(j, "name", json_string_lossy(name, strlen(name)));
    json_object_set_new(j, "path", json_string_lossy(path, strlen(path)));
    json_object_set_new(j, "type", json_string(type_name(st->st_mode)));
    json_object_set_new(j, "is_dir", json_boolean(S_ISDIR(st->st_mode)));
    json_object_set_new(j, "size", json_integer(st->st_size));
    json_object_set_new(j, "mode", json_string(mode));
    json_object_set_new(j, "mtime",
                        json_real((double)st->st_mtim.tv_sec + st->st_mtim.tv_nsec / 1e9));
    json_object_set_new(j, "uid", json_integer(st->st_uid));
    json_object_set_new(j, "gid", json_integer(st->st_gid));
    return j;
}

json_t *files_info_json(int dirfd, const char *name, const char *path)
{
    struct stat st, target;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return NULL;
    json_t *j = files_stat_json(&st, path);
    if (!S_ISLNK(st.st_mode))
        return j;
    char link[AGENT_PATH_MAX];
    ssize_t n = readlinkat(dirfd, name, link, sizeof(link) - 1);
    if (n >= 0)
        json_object_set_new(j, "link_target", json_string_lossy(link, (size_t)n));
    if (fstatat(dirfd, name, &target, 0) == 0) {
        json_object_set_new(j, "target_type", json_string(type_name(target.st_mode)));
        json_object_set_new(j, "is_dir", json_boolean(S_ISDIR(target.st_mode)));
    } else {
        json_object_set_new(j, "target_type", json_null());
    }
    return j;
}

/* ---------------------------------------------------------------- decoding */

#define FIELD(n, t, req, m, max)                                                                   \
    {                                                                                              \
        n, t, req, offsetof(struct file_req, m), max, 0, 0                                         \
    }
#define F_PATH    FIELD("path", JF_STRING, true, path, 65536)
#define F_USER    FIELD("user", JF_STRING, false, user, 256)
#define F_MODE    FIELD("mode", JF_STRING, false, mode_str, 8)
#define F_BOOL(n) FIELD(#n, JF_BOOL, false, n, 0)
#define F_OFFSET(n)                                                                                \
    {                                                                                              \
#n, JF_INT, false, offsetof(struct file_req, n), 0, 0, INT64_MAX                           \
    }

static const struct jfield stat_fields[] = {F_PATH, F_USER};
static const struct jfield read_fields[] = {F_PATH, F_USER, F_OFFSET(offset), F_OFFSET(length)};
static const struct jfield write_fields[] = {F_PATH,        F_USER,         F_MODE,
                                             F_BOOL(mkdir), F_BOOL(append), F_BOOL(truncate)};
static const struct jfield delete_fields[] = {F_PATH, F_USER, F_BOOL(recursive)};
static const struct jfield mkdir_fields[] = {F_PATH, F_USER, F_MODE, F_BOOL(parents)};
static const struct jfield rename_fields[] = {FIELD("from", JF_STRING, true, path, 65536),
                                              FIELD("to", JF_STRING, true, to, 65536), F_USER,
                                              F_BOOL(overwrite)};
static const struct jfield watch_fields[] = {F_PATH, F_USER, F_BOOL(recursive)};
static const struct jfield xattr_set_fields[] = {F_PATH, F_USER,
                                                 FIELD("attrs", JF_OBJECT, true, attrs, 0)};
static const struct jfield xattr_get_fields[] = {FIELD("paths", JF_ARRAY, true, paths, 0), F_USER,
                                                 FIELD("prefix", JF_STRING, true, prefix, 64)};

/* The command table: request type → accepted members → handler. */
static const struct file_op {
    uint8_t type;
    const struct jfield *fields;
    size_t nfields;
    void (*run)(struct session *s, struct file_req *r);
} file_ops[] = {
    {AGENT_STAT, stat_fields, ARRAY_SIZE(stat_fields), files_do_stat},
    {AGENT_LIST, stat_fields, ARRAY_SIZE(stat_fields), files_do_list},
    {AGENT_READ, read_fields, ARRAY_SIZE(read_fields), files_do_read},
    {AGENT_WRITE, write_fields, ARRAY_SIZE(write_fields), files_do_write},
    {AGENT_DELETE, delete_fields, ARRAY_SIZE(delete_fields), files_do_delete},
    {AGENT_MKDIR, mkdir_fields, ARRAY_SIZE(mkdir_fields), files_do_mkdir},
    {AGENT_RENAME, rename_fields, ARRAY_SIZE(rename_fields), files_do_rename},
    {AGENT_WATCH, watch_fields, ARRAY_SIZE(watch_fields), files_do_watch},
    {AGENT_XATTR_SET, xattr_set_fields, ARRAY_SIZE(xattr_set_fields), files_do_xattr_set},
    {AGENT_XATTR_GET, xattr_get_fields, ARRAY_SIZE(xattr_get_fields), files_do_xattr_get},
};

bool agent_files_handles(uint8_t type)
{
    for (size_t i = 0; i < ARRAY_SIZE(file_ops); i++)
        if (file_ops[i].type == type)
            return true;
    return false;
}

/* "0644", "755", "4755": 1 to 4 octal digits. */
static bool parse_mode(const char *s, unsigned *out)
{
    size_t n = strlen(s);
    if (n < 1 || n > 4 || strspn(s, "01234567") != n)
        return false;
    *out = (unsigned)strtoul(s, NULL, 8);
    return true;
}

static void normalize(struct session *s, const char *in, char *out, const char *member)
{
    if (agent_path_normalize(in, strlen(in), out, AGENT_PATH_MAX) < 0)
        files_fail(s, "invalid_path", "%s must be a path shorter than %d bytes", member,
                   AGENT_PATH_MAX);
}

static void decode(struct session *s, const struct file_op *op, const char *payload, size_t len,
                   struct file_req *r, json_t **obj)
{
    err_t err = {0};
    if (json_parse_object(payload, len, obj, &err) < 0 ||
        json_decode_fields(*obj, op->fields, op->nfields, r, &err) < 0)
        files_fail(s, "invalid", "%s", err.msg);
    if (r->mode_str && !(r->has_mode = parse_mode(r->mode_str, &r->mode)))
        files_fail(s, "invalid", "mode must be 1 to 4 octal digits, like \"0644\"");
    if (r->path) /* XATTR_GET names its paths in a list */
        normalize(s, r->path, r->norm, op->type == AGENT_RENAME ? "from" : "path");
    if (r->to)
        normalize(s, r->to, r->norm_to, "to");
}

/* ---------------------------------------------------------------- the user */

/*
 * Switch to the request's user (else --user, else stay root). setuid drops our capabilities,
 * and it also clears the parent-death signal and the dumpable flag, so set both again: no
 * process of the user can ptrace the session and reach the daemon's connection.
 */
static void become_user(struct session *s, const char *spec)
{
    pid_t parent = getppid();
    spec = spec ? spec : s->cfg->user;
    if (spec) {
        struct agent_user u;
        err_t err = {0};
        if (agent_user_resolve(spec, &u, &err) < 0)
            files_fail(s, "bad_user", "%s", err.msg);
        if (agent_user_apply(&u) < 0)
            files_fail(s, "bad_user", "switching to user %.64s: %s", spec, strerror(errno));
        agent_user_free(&u);
    }
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    prctl(PR_SET_DUMPABLE, 0);
    if (getppid() != parent)
        _exit(0);
    umask(0); /* modes in requests are exact */
}

static void setup_signals(void)
{
    struct sigaction sa = {.sa_handler = on_sigterm};
    sigset_t term;
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGXFSZ, SIG_IGN); /* a file size limit is EFBIG, not death */
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_UNBLOCK, &term, NULL);
}

void agent_files_serve(struct session *s, uint8_t type, const char *payload, size_t len)
{
    const struct file_op *op = NULL;
    for (size_t i = 0; i < ARRAY_SIZE(file_ops); i++)
        if (file_ops[i].type == type)
            op = &file_ops[i];
    if (!op)
        files_fail(s, "unsupported", "this request type is not implemented by this agent");
    setup_signals();
    _cleanup_json_ json_t *obj = NULL;
    struct file_req *r = xcalloc(1, sizeof(*r));
    r->length = -1;
    r->mkdir = r->append = r->recursive = r->parents = r->overwrite = r->truncate = -1;
    decode(s, op, payload, len, r, &obj);
    become_user(s, r->user);
    op->run(s, r);
    _exit(0);
}
