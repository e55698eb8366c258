/* Reading the main process's log (main.log.1 then main.log), following it while it grows. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "sandbox_internal.h"

struct sbx_log_reader {
    sbx_mgr_t *m;
    char id[65];
    char *dir;
    int fd;
    bool on_rotated; /* reading main.log.1 */
    ino_t ino;
};

static int open_in(struct sbx_log_reader *r, const char *name)
{
    _cleanup_free_ char *path = xasprintf("%s/%s", r->dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0)
        r->ino = st.st_ino;
    return fd;
}

sbx_log_reader_t *sbx_logs_open(sbx_mgr_t *m, const user_t *owner, const char *key, err_t *err)
{
    sandbox_rec_t rec;
    if (sbx_wake_if_needed(m, owner, key, err) < 0 || sbx_lookup(m, owner, key, &rec, err) < 0)
        return NULL;
    struct sbx_log_reader *r = xcalloc(1, sizeof(*r));
    r->m = m;
    snprintf(r->id, sizeof(r->id), "%s", rec.id);
    store_sandbox_rec_clear(&rec);
    r->dir = xasprintf("%s/%s/logs", m->sandboxes_dir, r->id);
    r->fd = open_in(r, "main.log.1");
    r->on_rotated = r->fd >= 0;
    if (r->fd < 0)
        r->fd = open_in(r, "main.log");
    return r;
}

/* main.log was rotated or created since we opened ours: move on to the current one. */
static bool switch_file(struct sbx_log_reader *r)
{
    _cleanup_free_ char *path = xasprintf("%s/main.log", r->dir);
    struct stat st;
    if (stat(path, &st) < 0 || (r->fd >= 0 && st.st_ino == r->ino && !r->on_rotated))
        return false;
    if (r->fd >= 0)
        close(r->fd);
    r->on_rotated = false;
    r->fd = open_in(r, "main.log");
    return r->fd >= 0;
}

ssize_t sbx_logs_read(sbx_log_reader_t *r, char *buf, size_t size)
{
    for (;;) {
        ssize_t n = r->fd >= 0 ? read(r->fd, buf, size) : 0;
        if (n != 0)
            return n < 0 && errno == EINTR ? 0 : n;
        if (!switch_file(r))
            return 0;
    }
}

bool sbx_logs_running(sbx_log_reader_t *r)
{
    sandbox_rec_t rec;
    if (store_sandbox_get(r->m->store, -1, r->id, &rec, NULL) < 0)
        return false;
    bool running =
        rec.status == SBX_RUNNING || rec.status == SBX_PAUSED || rec.status == SBX_CREATING;
    store_sandbox_rec_clear(&rec);
    return running;
}

void sbx_logs_close(sbx_log_reader_t *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    free(r->dir);
    free(r);
}
