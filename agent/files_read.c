/*
 * STAT, LIST and READ. READ streams in 64 KiB frames from a fixed buffer, whatever the file's
 * size; LIST keeps at most 2 × FILES_LIST_MAX names in memory while it reads a directory of
 * any size, and answers with the first FILES_LIST_MAX by name.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/protocol.h"
#include "common/buf.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "files_internal.h"

void files_do_stat(struct session *s, struct file_req *r)
{
    json_t *j = files_info_json(AT_FDCWD, r->norm, r->norm);
    if (!j)
        files_fail_errno(s, errno, "stat", r->norm);
    files_send_json(s, AGENT_FILE_INFO, j);
}

/* ---------------------------------------------------------------- LIST */

/* The names of a directory, bounded: the smallest FILES_LIST_MAX seen so far, unsorted. */
struct names {
    char **v;
    size_t n;
    bool truncated;
};

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sort and keep the first FILES_LIST_MAX names. */
static void names_prune(struct names *ns)
{
    qsort(ns->v, ns->n, sizeof(char *), cmp_name);
    while (ns->n > FILES_LIST_MAX) {
        free(ns->v[--ns->n]);
        ns->truncated = true;
    }
}

static void names_add(struct names *ns, const char *name)
{
    if (ns->n == 2 * FILES_LIST_MAX)
        names_prune(ns);
    ns->v[ns->n++] = xstrdup(name);
}

/* The entry for a name that cannot be stat'ed (a directory readable but not searchable). */
static json_t *bare_entry(const char *path, unsigned char d_type)
{
    struct stat st = {.st_mode = d_type == DT_DIR ? S_IFDIR : d_type == DT_LNK ? S_IFLNK : S_IFREG};
    return files_stat_json(&st, path);
}

/* Frames of {"entries": [...]} up to AGENT_MAX_FRAME bytes each. */
struct entries_out {
    buf_t frame;
    size_t count;
};

static void entries_flush(struct session *s, struct entries_out *o)
{
    if (o->count == 0)
        return;
    buf_puts(&o->frame, "]}");
    files_send(s, AGENT_DIR_ENTRIES, o->frame.data, o->frame.len);
    buf_reset(&o->frame);
    o->count = 0;
}

static void entries_add(struct session *s, struct entries_out *o, json_t *e)
{
    _cleanup_free_ char *text = json_dump_compact(e);
    json_decref(e);
    if (o->count && o->frame.len + strlen(text) + 3 > AGENT_MAX_FRAME)
        entries_flush(s, o);
    buf_puts(&o->frame, o->count ? "," : "{\"entries\":[");
    buf_puts(&o->frame, text);
    o->count++;
}

static void read_names(struct session *s, int dfd, const char *path, struct names *ns)
{
    int fd = dup(dfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;
    if (!d)
        files_fail_errno(s, errno, "opendir", path);
    errno = 0;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            names_add(ns, de->d_name);
        errno = 0;
    }
    if (errno)
        files_fail_errno(s, errno, "readdir", path);
    closedir(d);
    names_prune(ns);
}

void files_do_list(struct session *s, struct file_req *r)
{
    _cleanup_close_ int dfd = open(r->norm, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        files_fail_errno(s, errno, "opening the directory", r->norm);
    struct names ns = {.v = xcalloc(2 * FILES_LIST_MAX, sizeof(char *))};
    read_names(s, dfd, r->norm, &ns);
    struct entries_out o = {0};
    const char *dir = agent_path_is_root(r->norm) ? "" : r->norm;
    for (size_t i = 0; i < ns.n; i++) {
        _cleanup_free_ char *path = xasprintf("%s/%s", dir, ns.v[i]);
        json_t *e = files_info_json(dfd, ns.v[i], path);
        if (!e && errno == ENOENT)
            continue; /* removed while we listed */
        entries_add(s, &o, e ? e : bare_entry(path, DT_UNKNOWN));
    }
    entries_flush(s, &o);
    json_t *end = json_object();
    json_object_set_new(end, "truncated", json_boolean(ns.truncated));
    files_send_json(s, AGENT_FILE_END, end);
}

/* ---------------------------------------------------------------- READ */

/* Refuse what READ does not stream: directories and special files. */
static void check_regular(struct session *s, const struct stat *st, const char *path)
{
    if (S_ISDIR(st->st_mode))
        files_fail(s, "is_directory", "%.400s is a directory", path);
    if (!S_ISREG(st->st_mode))
        files_fail(s, "special_file", "%.400s is not a regular file (device, fifo or socket)",
                   path);
}

/*
 * Open a regular file for reading. The stat comes first so that a fifo is never opened (it
 * would block) nor a device (opening may act on it); O_NONBLOCK and the fstat close the race
 * with a swap between the two.
 */
static int open_regular(struct session *s, const char *path, struct stat *st)
{
    if (stat(path, st) < 0)
        files_fail_errno(s, errno, "stat", path);
    check_regular(s, st, path);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        files_fail_errno(s, errno, "open", path);
    if (fstat(fd, st) < 0)
        files_fail_errno(s, errno, "fstat", path);
    check_regular(s, st, path);
    return fd;
}

void files_do_read(struct session *s, struct file_req *r)
{
    struct stat st;
    _cleanup_close_ int fd = open_regular(s, r->norm, &st);
    uint64_t size = (uint64_t)st.st_size;
    uint64_t off = (uint64_t)r->offset < size ? (uint64_t)r->offset : size;
    uint64_t left = size - off;
    if (r->length >= 0 && (uint64_t)r->length < left)
        left = (uint64_t)r->length;
    json_t *info = files_stat_json(&st, r->norm);
    json_object_set_new(info, "offset", json_integer((json_int_t)off));
    json_object_set_new(info, "length", json_integer((json_int_t)left));
    files_send_json(s, AGENT_FILE_INFO, info);
    static char chunk[AGENT_MAX_CHUNK];
    while (left > 0) {
        ssize_t n = pread(fd, chunk, left < sizeof(chunk) ? left : sizeof(chunk), (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            files_fail_errno(s, errno, "read", r->norm);
        if (n == 0)
            break; /* the file shrank: the client sees fewer bytes than announced */
        files_send(s, AGENT_FILE_DATA, chunk, (size_t)n);
        off += (uint64_t)n;
        left -= (uint64_t)n;
    }
    files_send(s, AGENT_FILE_END, NULL, 0);
}
