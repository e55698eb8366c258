/*
 * WRITE, MKDIR, DELETE and RENAME.
 *
 * WRITE is atomic: the data goes to a temp file `.<name>.sbx-<hex>.tmp` created (O_EXCL) in
 * the target's own directory, which is fsync'ed and renamed over the target on FILE_END, so
 * a reader sees the old file or the whole new one, never a part. A final symlink is followed
 * (the file it points to is replaced, not the link). If the client leaves, the session fails
 * or the agent stops before FILE_END, the temp file is removed.
 *
 * DELETE with "recursive" walks with openat(O_NOFOLLOW) and unlinkat: a symlink in the tree
 * is removed as a link, never followed, so nothing outside the tree is touched.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/protocol.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "files_internal.h"

#define MAX_LINKS    40  /* symlinks followed at the end of a WRITE path, as the kernel */
#define MAX_DEPTH    256 /* directory levels a recursive DELETE descends */
#define DEFAULT_FILE 0644
#define DEFAULT_DIR  0755

static void send_ok(struct session *s, const char *path, int64_t size, bool ready)
{
    json_t *j = json_object();
    json_object_set_new(j, "path", json_string_lossy(path, strlen(path)));
    if (size >= 0)
        json_object_set_new(j, "size", json_integer(size));
    if (ready)
        json_object_set_new(j, "ready", json_true());
    files_send_json(s, AGENT_OK, j);
}

void files_send_ok(struct session *s, const char *path)
{
    send_ok(s, path, -1, false);
}

/* mkdir every ancestor of the normalised path (not the path itself); existing ones are fine. */
static int make_parents(const char *path)
{
    char buf[AGENT_PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = strchr(buf + 1, '/'); p; p = strchr(p + 1, '/')) {
        *p = '\0';
        if (mkdir(buf, DEFAULT_DIR) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return 0;
}

/* ---------------------------------------------------------------- WRITE */

/* Where a write lands: the real directory (symlinks resolved) and the name in it. */
struct target {
    char dir[PATH_MAX];
    char base[NAME_MAX + 1];
    char path[AGENT_PATH_MAX];
};

/* Split the absolute path cur at its last slash and resolve the directory part. */
static int split_real(const char *cur, struct target *t)
{
    const char *slash = strrchr(cur, '/');
    char parent[AGENT_PATH_MAX];
    size_t plen = slash == cur ? 1 : (size_t)(slash - cur);
    memcpy(parent, cur, plen);
    parent[plen] = '\0';
    if (!realpath(parent, t->dir))
        return -1;
    const char *name = slash + 1;
    if (!name[0] || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return errno = EISDIR, -1;
    if (strlen(name) > NAME_MAX)
        return errno = ENAMETOOLONG, -1;
    strcpy(t->base, name);
    int n = snprintf(t->path, sizeof(t->path), "%s/%s", strcmp(t->dir, "/") ? t->dir : "", t->base);
    return n >= (int)sizeof(t->path) ? (errno = ENAMETOOLONG, -1) : 0;
}

/*
 * Follow symlinks at the end of path as open() would: the directory part is resolved by
 * realpath (physically), a link's text is read relative to its own directory.
 */
static int resolve_target(const char *path, struct target *t)
{
    char cur[AGENT_PATH_MAX];
    snprintf(cur, sizeof(cur), "%s", path);
    for (int hops = 0; hops <= MAX_LINKS; hops++) {
        size_t n = strlen(cur);
        while (n > 1 && cur[n - 1] == '/')
            cur[--n] = '\0';
        if (split_real(cur, t) < 0)
            return -1;
        char link[AGENT_PATH_MAX];
        ssize_t len = readlink(t->path, link, sizeof(link) - 1);
        if (len < 0)
            return errno == EINVAL || errno == ENOENT ? 0 : -1;
        link[len] = '\0';
        int w = link[0] == '/' ? snprintf(cur, sizeof(cur), "%s", link)
                               : snprintf(cur, sizeof(cur), "%s/%s", t->dir, link);
        if (w >= (int)sizeof(cur))
            return errno = ENAMETOOLONG, -1;
    }
    return errno = ELOOP, -1;
}

/* Create the temp file next to base in dfd: `.<base>.sbx-<12 hex digits>.tmp`, mode 0600. */
static int open_temp(int dfd, const char *base, char *name, size_t size)
{
    for (int attempt = 0; attempt < 64; attempt++) {
        uint64_t rnd = 0;
        if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd))
            rnd = (uint64_t)getpid() << 20 ^ (uint64_t)now_mono_ms() ^ (uint64_t)attempt;
        snprintf(name, size, ".%.200s.sbx-%012llx.tmp", base,
                 (unsigned long long)(rnd & 0xffffffffffffULL));
        int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return errno = EEXIST, -1;
}

/* A write in progress. */
struct writing {
    int fd;  /* the temp file, or the target itself when appending */
    int dfd; /* the target's directory (O_PATH) */
    char tmp[NAME_MAX + 1];
    struct target t;
    uint64_t size;
};

/* Refuse targets WRITE cannot replace; *exists tells whether there is a file to replace. */
static void check_target(struct session *s, int dfd, struct target *t, struct stat *st,
                         bool *exists)
{
    *exists = fstatat(dfd, t->base, st, 0) == 0;
    if (!*exists && errno != ENOENT)
        files_fail_errno(s, errno, "stat", t->path);
    if (*exists && S_ISDIR(st->st_mode))
        files_fail(s, "is_directory", "%.400s is a directory", t->path);
    if (*exists && !S_ISREG(st->st_mode))
        files_fail(s, "special_file", "%.400s is not a regular file", t->path);
}

/* Open the temp file with the final owner (when we can) and mode. */
static void prepare_temp(struct session *s, struct file_req *r, struct writing *w)
{
    struct stat st;
    bool exists;
    check_target(s, w->dfd, &w->t, &st, &exists);
    w->fd = open_temp(w->dfd, w->t.base, w->tmp, sizeof(w->tmp));
    if (w->fd < 0)
        files_fail_errno(s, errno, "creating a temp file in", w->t.dir);
    files_temp_arm(w->dfd, w->tmp);
    unsigned mode = r->has_mode ? r->mode : exists ? st.st_mode & 07777 : DEFAULT_FILE;
    /* Root replacing someone's file keeps its owner; chown first, it clears set-id bits. */
    if (exists && geteuid() == 0 && fchown(w->fd, st.st_uid, st.st_gid) < 0)
        files_fail_errno(s, errno, "chown", w->t.path);
    if (fchmod(w->fd, mode) < 0)
        files_fail_errno(s, errno, "chmod", w->t.path);
}

/* Appending, or writing in place (truncate: what E2B's envd does, so a watcher sees the
 * file written rather than replaced): open the target itself (created if missing); not
 * atomic, by nature. */
static void prepare_append(struct session *s, struct file_req *r, struct writing *w)
{
    struct stat st;
    bool exists;
    check_target(s, w->dfd, &w->t, &st, &exists);
    unsigned mode = r->has_mode ? r->mode : DEFAULT_FILE;
    int how = r->append == 1 ? O_APPEND : O_TRUNC;
    w->fd = openat(w->dfd, w->t.base, O_WRONLY | how | O_CREAT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
                   mode);
    if (w->fd < 0 || fstat(w->fd, &st) < 0)
        files_fail_errno(s, errno, "open", w->t.path);
    if (!S_ISREG(st.st_mode))
        files_fail(s, "special_file", "%.400s is not a regular file", w->t.path);
    if (r->has_mode && fchmod(w->fd, mode) < 0)
        files_fail_errno(s, errno, "chmod", w->t.path);
}

static void write_data(struct session *s, struct writing *w, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            files_fail_errno(s, k < 0 ? errno : EIO, "write", w->t.path);
        p += k;
        n -= (size_t)k;
        w->size += (uint64_t)k;
    }
}

/* FILE_END: make the data durable, then put it in place. */
static void commit(struct session *s, struct file_req *r, struct writing *w)
{
    if (fsync(w->fd) < 0)
        files_fail_errno(s, errno, "fsync", w->t.path);
    int rc = close(w->fd);
    w->fd = -1;
    if (rc < 0)
        files_fail_errno(s, errno, "close", w->t.path);
    if (r->append == 1 || r->truncate == 1)
        return;
    if (renameat(w->dfd, w->tmp, w->dfd, w->t.base) < 0)
        files_fail_errno(s, errno, "rename onto", w->t.path);
    files_temp_disarm();
    /* The rename itself is durable once the directory is synced (best effort). */
    _cleanup_close_ int dir = open(w->t.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0)
        (void)fsync(dir);
}

/* FILE_DATA frames until FILE_END. */
static void receive(struct session *s, struct file_req *r, struct writing *w)
{
    for (;;) {
        struct agent_frame f;
        size_t used;
        files_next_frame(s, &f, &used);
        switch (f.type) {
        case AGENT_FILE_DATA:
            write_data(s, w, f.payload, f.len);
            break;
        case AGENT_FILE_END:
            files_consume(s, used);
            commit(s, r, w);
            return;
        case AGENT_PING:
            files_send(s, AGENT_PONG, f.payload, f.len);
            break;
        default:
            files_fail(s, "protocol", "expected FILE_DATA or FILE_END during a write");
        }
        files_consume(s, used);
    }
}

void files_do_write(struct session *s, struct file_req *r)
{
    struct writing w = {.fd = -1};
    if (agent_path_is_root(r->norm))
        files_fail(s, "is_directory", "/ is a directory");
    if (r->mkdir == 1 && make_parents(r->norm) < 0)
        files_fail_errno(s, errno, "creating the parents of", r->norm);
    if (resolve_target(r->norm, &w.t) < 0)
        files_fail_errno(s, errno, "resolving", r->norm);
    w.dfd = open(w.t.dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (w.dfd < 0)
        files_fail_errno(s, errno, "opening the directory", w.t.dir);
    if (r->append == 1 || r->truncate == 1)
        prepare_append(s, r, &w);
    else
        prepare_temp(s, r, &w);
    send_ok(s, w.t.path, -1, true);
    receive(s, r, &w);
    send_ok(s, w.t.path, (int64_t)w.size, false);
}

/* ---------------------------------------------------------------- MKDIR */

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

void files_do_mkdir(struct session *s, struct file_req *r)
{
    bool parents = r->parents == 1;
    unsigned mode = r->has_mode ? r->mode : DEFAULT_DIR;
    if (parents && make_parents(r->norm) < 0)
        files_fail_errno(s, errno, "creating the parents of", r->norm);
    if (mkdir(r->norm, mode) < 0 && !(errno == EEXIST && parents && is_dir(r->norm)))
        files_fail_errno(s, errno, "mkdir", r->norm);
    send_ok(s, r->norm, -1, false);
}

/* ---------------------------------------------------------------- DELETE */

static char failed_name[NAME_MAX + 1]; /* the entry a recursive delete stopped at */

static int remove_tree(int pfd, const char *name, int depth);

/* Remove one entry of the directory fd; directories recursively. */
static int remove_entry(int fd, const struct dirent *de, int depth)
{
    if (de->d_type == DT_DIR)
        return remove_tree(fd, de->d_name, depth + 1);
    if (unlinkat(fd, de->d_name, 0) == 0)
        return 0;
    /* d_type may be DT_UNKNOWN, or the entry changed: EISDIR means a directory. */
    if (errno == EISDIR || (errno == EPERM && de->d_type == DT_UNKNOWN))
        return remove_tree(fd, de->d_name, depth + 1);
    snprintf(failed_name, sizeof(failed_name), "%s", de->d_name);
    return -1;
}

/* Remove the directory name in pfd and everything under it, never following a symlink. */
static int remove_tree(int pfd, const char *name, int depth)
{
    if (depth > MAX_DEPTH)
        return errno = ELOOP, -1;
    int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && (errno == ENOTDIR || errno == ELOOP))
        return unlinkat(pfd, name, 0); /* it is not (or no longer) a directory */
    _cleanup_closedir_ DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        snprintf(failed_name, sizeof(failed_name), "%s", name);
        return errno = e, -1;
    }
    struct dirent *de;
    while ((errno = 0, de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (remove_entry(fd, de, depth) < 0)
            return -1;
    }
    if (errno || unlinkat(pfd, name, AT_REMOVEDIR) < 0) {
        snprintf(failed_name, sizeof(failed_name), "%s", name);
        return -1;
    }
    return 0;
}

static void delete_recursive(struct session *s, struct file_req *r)
{
    char parent[AGENT_PATH_MAX];
    snprintf(parent, sizeof(parent), "%s", r->norm);
    char *slash = strrchr(parent, '/');
    slash[slash == parent ? 1 : 0] = '\0';
    _cleanup_close_ int pfd = open(parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0)
        files_fail_errno(s, errno, "opening the directory", parent);
    if (remove_tree(pfd, agent_path_base(r->norm), 0) < 0) {
        int e = errno;
        files_fail(s, files_errno_code(e), "removing %.300s (at %.100s): %s", r->norm, failed_name,
                   e == ELOOP ? "deeper than 256 levels" : strerror(e));
    }
}

void files_do_delete(struct session *s, struct file_req *r)
{
    struct stat st;
    if (agent_path_is_root(r->norm))
        files_fail(s, "invalid_path", "refusing to delete /");
    if (lstat(r->norm, &st) < 0)
        files_fail_errno(s, errno, "stat", r->norm);
    if (!S_ISDIR(st.st_mode)) {
        if (unlink(r->norm) < 0)
            files_fail_errno(s, errno, "unlink", r->norm);
    } else if (rmdir(r->norm) < 0) {
        if (errno != ENOTEMPTY && errno != EEXIST)
            files_fail_errno(s, errno, "rmdir", r->norm);
        if (r->recursive != 1)
            files_fail(s, "not_empty", "%.400s is a directory that is not empty", r->norm);
        delete_recursive(s, r);
    }
    send_ok(s, r->norm, -1, false);
}

/* ---------------------------------------------------------------- RENAME */

void files_do_rename(struct session *s, struct file_req *r)
{
    if (agent_path_is_root(r->norm) || agent_path_is_root(r->norm_to))
        files_fail(s, "invalid_path", "refusing to rename / or onto /");
    unsigned flags = r->overwrite == 0 ? RENAME_NOREPLACE : 0;
    if (renameat2(AT_FDCWD, r->norm, AT_FDCWD, r->norm_to, flags) < 0)
        files_fail_errno(s, errno, "rename", r->norm);
    send_ok(s, r->norm_to, -1, false);
}
