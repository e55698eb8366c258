/*
 * WATCH: a directory's changes through inotify, as the request's user, until the client
 * closes the connection (the session process then exits and the kernel drops the watches).
 * With "recursive", every directory below is watched too, and directories created later are
 * added as they appear. Events name the entry relative to the watched directory and are sent
 * in WATCH_EVENTS frames as they come: {"events": [{"name": "a/b.txt", "type": "write"}],
 * "dropped": N}, N counting the events the kernel's queue lost (IN_Q_OVERFLOW) or that did
 * not fit the bounds below. Types follow E2B's envd (fsnotify): create (IN_CREATE,
 * IN_MOVED_TO), write (IN_MODIFY), remove (IN_DELETE, IN_DELETE_SELF), rename
 * (IN_MOVED_FROM, IN_MOVE_SELF), chmod (IN_ATTRIB).
 *
 * Bounded: at most WATCH_DIRS directories (more are not watched, and counted in "dropped"),
 * events batched into frames of at most WATCH_FRAME_MAX bytes; the session blocks on a
 * client that does not read, and the kernel's queue (then IN_Q_OVERFLOW) absorbs the rest.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "files_internal.h"

#define WATCH_DIRS      4096        /* directories one watch follows at most */
#define WATCH_FRAME_MAX (64 * 1024) /* bytes of events per frame at most */
#define WATCH_MASK                                                                                 \
    (IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB |                 \
     IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)

struct watch {
    int ifd;
    char *rels[WATCH_DIRS]; /* by slot: a watched directory, relative to the root ("" for it) */
    int wds[WATCH_DIRS];
    size_t n;
    bool recursive;
    const char *root;
    uint64_t dropped;
    buf_t frame; /* the events not sent yet, as JSON objects separated by commas */
};

static const char *rel_of(const struct watch *w, int wd)
{
    for (size_t i = 0; i < w->n; i++)
        if (w->wds[i] == wd)
            return w->rels[i];
    return NULL;
}

static void forget_wd(struct watch *w, int wd)
{
    for (size_t i = 0; i < w->n; i++) {
        if (w->wds[i] != wd)
            continue;
        free(w->rels[i]);
        w->rels[i] = w->rels[w->n - 1];
        w->wds[i] = w->wds[w->n - 1];
        w->n--;
        return;
    }
}

/* Watch the directory rel (relative to the root), and everything below when recursive. */
static void add_tree(struct watch *w, const char *rel, int depth)
{
    char path[AGENT_PATH_MAX];
    int len = snprintf(path, sizeof(path), "%s%s%s", w->root, *rel ? "/" : "", rel);
    if (len < 0 || len >= (int)sizeof(path) || depth > 64)
        return;
    if (w->n >= WATCH_DIRS) {
        w->dropped++;
        return;
    }
    int wd = inotify_add_watch(w->ifd, path, WATCH_MASK);
    if (wd < 0)
        return; /* gone meanwhile, or not readable: nothing to watch */
    if (!rel_of(w, wd)) {
        w->wds[w->n] = wd;
        w->rels[w->n++] = xstrdup(rel);
    }
    if (!w->recursive)
        return;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_type != DT_DIR || !strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char sub[AGENT_PATH_MAX];
        int n = snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", de->d_name);
        if (n > 0 && n < (int)sizeof(sub))
            add_tree(w, sub, depth + 1);
    }
    closedir(d);
}

static void flush(struct session *s, struct watch *w)
{
    if (w->frame.len == 0 && w->dropped == 0)
        return;
    buf_t b = {0};
    buf_printf(&b, "{\"events\":[%s],\"dropped\":%llu}", w->frame.data ? w->frame.data : "",
               (unsigned long long)w->dropped);
    files_send(s, AGENT_WATCH_EVENTS, b.data, b.len);
    buf_free(&b);
    buf_reset(&w->frame);
    w->dropped = 0;
}

static void queue_event(struct session *s, struct watch *w, const char *name, const char *type)
{
    _cleanup_json_ json_t *j =
        json_pack("{s:o, s:s}", "name", json_string_lossy(name, strlen(name)), "type", type);
    _cleanup_free_ char *text = json_dump_compact(j);
    if (w->frame.len + strlen(text) + 64 > WATCH_FRAME_MAX)
        flush(s, w);
    buf_printf(&w->frame, "%s%s", w->frame.len ? "," : "", text);
}

/* The types of one inotify event, as E2B's envd reports them (one event may carry two). */
static void report(struct session *s, struct watch *w, const struct inotify_event *e)
{
    static const struct {
        uint32_t mask;
        const char *type;
    } types[] = {{IN_CREATE | IN_MOVED_TO, "create"},
                 {IN_MOVED_FROM | IN_MOVE_SELF, "rename"},
                 {IN_ATTRIB, "chmod"},
                 {IN_MODIFY, "write"},
                 {IN_DELETE | IN_DELETE_SELF, "remove"}};
    const char *dir = rel_of(w, e->wd);
    if (!dir)
        return;
    char name[AGENT_PATH_MAX];
    const char *leaf = e->len ? e->name : "";
    int n = snprintf(name, sizeof(name), "%s%s%s", dir, *dir && *leaf ? "/" : "", leaf);
    if (n < 0 || n >= (int)sizeof(name))
        return;
    for (size_t i = 0; i < ARRAY_SIZE(types); i++)
        if (e->mask & types[i].mask)
            queue_event(s, w, name, types[i].type);
    if (w->recursive && (e->mask & (IN_CREATE | IN_MOVED_TO)) && (e->mask & IN_ISDIR))
        add_tree(w, name, 0);
}

static void read_events(struct session *s, struct watch *w)
{
    char buf[16 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n = read(w->ifd, buf, sizeof(buf));
    if (n <= 0)
        return;
    for (char *p = buf; p < buf + n;) {
        const struct inotify_event *e = (const struct inotify_event *)p;
        if (e->mask & IN_Q_OVERFLOW)
            w->dropped++;
        else if (e->mask & IN_IGNORED)
            forget_wd(w, e->wd);
        else
            report(s, w, e);
        p += sizeof(*e) + e->len;
    }
    flush(s, w);
}

void files_do_watch(struct session *s, struct file_req *r)
{
    struct stat st;
    if (stat(r->norm, &st) < 0)
        files_fail_errno(s, errno, "stat", r->norm);
    if (!S_ISDIR(st.st_mode))
        files_fail(s, "not_directory", "%.400s is not a directory", r->norm);
    struct watch *w = xcalloc(1, sizeof(*w));
    w->root = r->norm;
    w->recursive = r->recursive == 1;
    w->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->ifd < 0)
        files_fail(s, errno == EMFILE ? "busy" : "io_error", "inotify: %s", strerror(errno));
    add_tree(w, "", 0);
    if (w->n == 0)
        files_fail_errno(s, errno ? errno : EACCES, "watching", r->norm);
    files_send_ok(s, r->norm);
    flush(s, w); /* directories past WATCH_DIRS: said at once */
    for (;;) {
        struct pollfd p[2] = {{w->ifd, POLLIN, 0}, {s->sock, POLLIN | POLLRDHUP, 0}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            _exit(0);
        if (p[1].revents) /* the client closed (or sent what it must not): done */
            _exit(0);
        if (p[0].revents)
            read_events(s, w);
    }
}
