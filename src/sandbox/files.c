/*
 * The files API: every operation runs inside the sandbox, through its agent, as the
 * sandbox's user (DESIGN invariant 1: no host path resolution). A connection holds the
 * sandbox's lock for reading, as an exec does, so lifecycle changes wait for it.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "sandbox_internal.h"

struct sbx_files {
    sbx_mgr_t *m;
    struct sbx_live *l;
    int fd;
    agentc_writer_t writer;
    bool writing;
};

/* Wake if needed, take its lock, check it runs and connect to its agent. */
static sbx_files_t *files_open(sbx_mgr_t *m, const user_t *owner, const char *key, err_t *err)
{
    sandbox_rec_t r;
    struct sbx_live *l;
    if (sbx_use_begin(m, owner, key, &l, &r, err) < 0)
        return NULL;
    store_sandbox_rec_clear(&r);
    _cleanup_free_ char *sock = xasprintf("%s/%s/sock", m->sandboxes_dir, l->id);
    int dirfd _cleanup_close_ = open(sock, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int fd = agentc_connect(dirfd, "agent.sock", &l->peer, 5000, err);
    if (fd < 0) {
        sbx_use_end(m, l);
        return NULL;
    }
    sbx_files_t *f = xcalloc(1, sizeof(*f));
    *f = (sbx_files_t){m, l, fd, {0}, false};
    return f;
}

void sbx_files_close(sbx_files_t *f)
{
    if (!f)
        return;
    if (f->writing)
        agentc_write_abort(&f->writer);
    agentc_close(f->fd);
    store_sandbox_touch(f->m->store, f->l->id);
    sbx_use_end(f->m, f->l);
    free(f);
}

int sbx_file_stat(sbx_mgr_t *m, const user_t *owner, const char *key,
                  const struct agentc_file_req *req, json_t **out, err_t *err)
{
    sbx_files_t *f = files_open(m, owner, key, err);
    if (!f)
        return -1;
    struct agentc_file_info info = {0};
    int rc = agentc_stat(f->fd, req, &info, err);
    if (rc == 0)
        *out = json_incref(info.json);
    agentc_file_info_free(&info);
    sbx_files_close(f);
    return rc;
}

int sbx_file_list(sbx_mgr_t *m, const user_t *owner, const char *key,
                  const struct agentc_file_req *req, json_t **out, err_t *err)
{
    sbx_files_t *f = files_open(m, owner, key, err);
    if (!f)
        return -1;
    bool truncated = false;
    json_t *entries = agentc_list(f->fd, req, &truncated, err);
    sbx_files_close(f);
    if (!entries)
        return -1;
    *out = json_pack("{s:o, s:b}", "entries", entries, "truncated", truncated);
    return 0;
}

int sbx_file_read(sbx_mgr_t *m, const user_t *owner, const char *key,
                  const struct agentc_file_req *req, agentc_info_fn on_info, agentc_data_fn on_data,
                  void *ctx, err_t *err)
{
    sbx_files_t *f = files_open(m, owner, key, err);
    if (!f)
        return -1;
    int rc = agentc_read(f->fd, req, on_info, on_data, ctx, err);
    sbx_files_close(f);
    return rc;
}

struct whole {
    buf_t *out;
    size_t max;
};

static int collect_whole(void *ctx, const uint8_t *p, size_t n)
{
    struct whole *w = ctx;
    if (w->out->len + n > w->max)
        return -1; /* it grew past the bound */
    buf_append(w->out, p, n);
    return 0;
}

int sbx_file_read_whole(sbx_mgr_t *m, const user_t *owner, const char *key,
                        const struct agentc_file_req *req, size_t max, buf_t *out, err_t *err)
{
    struct agentc_file_req whole = *req;
    whole.offset = 0;
    whole.length = 0; /* to its end */
    struct whole w = {out, max};
    err_t e = {0};
    if (sbx_file_read(m, owner, key, &whole, NULL, collect_whole, &w, &e) == 0 ||
        strcmp(e.code, "file_changed") == 0) /* shrank: what read() gave up to its end */
        return 0;
    if (strcmp(e.code, "output_aborted") == 0) /* our collect's bound */
        return 1;
    *err = e;
    return -1;
}

sbx_files_t *sbx_file_write_begin(sbx_mgr_t *m, const user_t *owner, const char *key,
                                  const struct agentc_file_req *req, err_t *err)
{
    sbx_files_t *f = files_open(m, owner, key, err);
    if (!f)
        return NULL;
    if (agentc_write_begin(f->fd, req, &f->writer, err) < 0) {
        sbx_files_close(f);
        return NULL;
    }
    f->writing = true;
    return f;
}

int sbx_file_write_chunk(sbx_files_t *f, const void *p, size_t n, err_t *err)
{
    return agentc_write_chunk(&f->writer, p, n, err);
}

int sbx_file_write_end(sbx_files_t *f, uint64_t *size, err_t *err)
{
    f->writing = false;
    return agentc_write_end(&f->writer, size, err);
}

int sbx_file_delete(sbx_mgr_t *m, const user_t *owner, const char *key,
                    const struct agentc_file_req *req, err_t *err)
{
    sbx_files_t *f = files_open(m, owner, key, err);
    if (!f)
        return -1;
    int rc = agentc_delete(f->fd, req, err);
    sbx_files_close(f);
    return rc;
}

int sbx_file_mkdir(sbx_mgr_t *m, const user_t *owner, const char *key,
                   const struct agentc_file_req *req, err_t *err)
{
    sbx_files_t *f = files_open(m, owner, key, err);
    if (!f)
        return -1;
    int rc = agentc_mkdir(f->fd, req, err);
    sbx_files_close(f);
    return rc;
}

int sbx_file_rename(sbx_mgr_t *m, const user_t *owner, const char *key,
                    const struct agentc_file_req *req, err_t *err)
{
    sbx_files_t *f = files_open(m, owner, key, err);
    if (!f)
        return -1;
    int rc = agentc_rename(f->fd, req, err);
    sbx_files_close(f);
    return rc;
}

int sbx_file_xattr_set(sbx_mgr_t *m, const user_t *owner, const char *key,
                       const struct agentc_file_req *req, json_t *attrs, err_t *err)
{
    sbx_files_t *f = files_open(m, owner, key, err);
    if (!f)
        return -1;
    int rc = agentc_xattr_set(f->fd, req, attrs, err);
    sbx_files_close(f);
    return rc;
}

int sbx_file_xattr_get(sbx_mgr_t *m, const user_t *owner, const char *key,
                       const struct agentc_file_req *req, json_t *paths, const char *prefix,
                       json_t **out, err_t *err)
{
    sbx_files_t *f = files_open(m, owner, key, err);
    if (!f)
        return -1;
    *out = agentc_xattr_get(f->fd, req, paths, prefix, err);
    sbx_files_close(f);
    return *out ? 0 : -1;
}

static int collect(void *ctx, uint8_t type, const uint8_t *p, size_t n)
{
    buf_t *b = ctx;
    if (type != AGENT_STDOUT)
        return 0;
    if (b->len + n > 1 << 20)
        return -1; /* far more sockets than any sandbox needs: stop reading */
    buf_append(b, p, n);
    return 0;
}

/* The first TCP port listening on all addresses (want 0), or want if it listens so, or 0. */
static int listening(sbx_mgr_t *m, const user_t *owner, const char *key, int want)
{
    /* procfs files have no size, so the agent's READ cannot serve them: cat it (unrecorded). */
    err_t err = {0};
    sbx_files_t *f = files_open(m, owner, key, &err);
    if (!f)
        return 0;
    const char *argv[] = {"cat", "/proc/net/tcp", NULL};
    struct agentc_exec_req req = {.argv = argv, .user = "0", .timeout_ms = 5000};
    struct agentc_exec_result res = {0};
    buf_t text = {0};
    agentc_exec(f->fd, &req, collect, &text, 10000, &res, &err);
    sbx_files_close(f);
    int port = 0;
    /* Untrusted text: each line "  N: ADDR:PORT REMADDR:REMPORT ST ...", LISTEN is 0A. */
    for (char *line = text.data ? strchr(text.data, '\n') : NULL; line && !port;
         line = strchr(line + 1, '\n')) {
        unsigned addr, p, state;
        if (sscanf(line + 1, " %*d: %8x:%4x %*8x:%*4x %2x", &addr, &p, &state) == 3 &&
            state == 0x0A && addr == 0 && p > 0 && (!want || (int)p == want))
            port = (int)p;
    }
    buf_free(&text);
    return port;
}

int sbx_listening_port(sbx_mgr_t *m, const user_t *owner, const char *key)
{
    return listening(m, owner, key, 0);
}

bool sbx_port_listening(sbx_mgr_t *m, const user_t *owner, const char *key, int port)
{
    return port > 0 && listening(m, owner, key, port) == port;
}
