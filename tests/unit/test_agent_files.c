/*
 * The files requests against the real sandboxer-agent (from $SANDBOXER_AGENT), run as a plain
 * child process, outside any container, driven through agentc. Outside a container the
 * agent's "/" is the host's, so every path here is an absolute path inside a temp dir. (The
 * path normaliser and the payload decoders are tested in test_agent_files_payload.c.)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentc/agent_client.h"
#include "common/buf.h"
#include "common/cleanup.h"
#include "common/util.h"
#include "tap.h"

#define SOCK_NAME "agent.sock"
#define MiB       (1024 * 1024)

static const char *agent_bin;
static const char *sock_name = SOCK_NAME; /* the agent the tests talk to */
static char tmpdir[64];
static int dirfd_ = -1;
static pid_t agent_pid;

/* ---------------------------------------------------------------- the real agent */

static const char *jstr(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static pid_t spawn_agent(const char *user)
{
    char sock[128];
    snprintf(sock, sizeof(sock), "%s/%s", tmpdir, sock_name);
    pid_t pid = fork();
    if (pid == 0) {
        if (user)
            execl(agent_bin, agent_bin, "--socket", sock, "--user", user, (char *)NULL);
        else
            execl(agent_bin, agent_bin, "--socket", sock, (char *)NULL);
        _exit(99);
    }
    err_t err = {0};
    if (agentc_wait_ready(dirfd_, sock_name, &(struct agentc_peer){pid, NULL}, 5000, &err) < 0)
        printf("# agent not ready: %s\n", err.msg);
    return pid;
}

static void stop_agent(pid_t pid)
{
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

static int connect_agent(void)
{
    err_t err = {0};
    int fd = agentc_connect(dirfd_, sock_name, &(struct agentc_peer){agent_pid, NULL}, 2000, &err);
    if (fd < 0)
        printf("# connect: %s\n", err.msg);
    return fd;
}

/* A path in the temp dir (static buffers, rotating, for use in one expression). */
static const char *tp(const char *rel)
{
    static char bufs[8][512];
    static int i;
    char *b = bufs[i++ % 8];
    snprintf(b, 512, "%s/%s", tmpdir, rel);
    return b;
}

static void put_file(const char *rel, const char *content, mode_t mode)
{
    int fd = open(tp(rel), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, mode);
    (void)!write(fd, content, strlen(content));
    fchmod(fd, mode);
    close(fd);
}

static int do_stat(const char *path, const char *user, struct agentc_file_info *fi, err_t *err)
{
    _cleanup_close_ int fd = connect_agent();
    struct agentc_file_req req = {.path = path, .user = user};
    return agentc_stat(fd, &req, fi, err);
}

static int do_simple(int (*fn)(int, const struct agentc_file_req *, err_t *),
                     const struct agentc_file_req *req, err_t *err)
{
    _cleanup_close_ int fd = connect_agent();
    return fn(fd, req, err);
}

/* Write data (len bytes, in chunks of chunk) as one request. */
static int do_write(const struct agentc_file_req *req, const void *data, size_t len, size_t chunk,
                    err_t *err)
{
    _cleanup_close_ int fd = connect_agent();
    agentc_writer_t w;
    if (agentc_write_begin(fd, req, &w, err) < 0)
        return -1;
    for (size_t off = 0; off < len; off += chunk) {
        size_t n = len - off < chunk ? len - off : chunk;
        if (agentc_write_chunk(&w, (const char *)data + off, n, err) < 0) {
            agentc_write_abort(&w);
            return -1;
        }
    }
    uint64_t size = 0;
    int rc = agentc_write_end(&w, &size, err);
    return rc == 0 && size == len ? 0 : -1;
}

/* What a READ delivered. */
struct rd {
    buf_t data;
    uint64_t size, offset, length;
    const char *type;
};

static int rd_info(void *p, const struct agentc_file_info *fi)
{
    struct rd *r = p;
    r->size = fi->size;
    r->offset = fi->offset;
    r->length = fi->length;
    r->type = fi->type;
    return 0;
}

static int rd_data(void *p, const uint8_t *d, size_t n)
{
    buf_append(&((struct rd *)p)->data, d, n);
    return 0;
}

static int do_read(struct agentc_file_req *req, struct rd *r, err_t *err)
{
    _cleanup_close_ int fd = connect_agent();
    buf_reset(&r->data);
    return agentc_read(fd, req, rd_info, rd_data, r, err);
}

static bool data_is(struct rd *r, const char *s)
{
    return r->data.len == strlen(s) && memcmp(r->data.data, s, r->data.len) == 0;
}

static void test_stat(void)
{
    struct agentc_file_info fi;
    err_t err = {0};
    put_file("hello.txt", "hello\n", 0640);
    symlink(tp("hello.txt"), tp("link"));
    ok(do_stat(tp("hello.txt"), NULL, &fi, &err) == 0 && strcmp(fi.type, "file") == 0 &&
           fi.size == 6 && fi.mode == 0640 && !fi.is_dir && fi.mtime > 1e9 &&
           tap_streq(jstr(fi.json, "name"), "hello.txt"),
       "STAT of a file: type, size, mode, mtime, name");
    agentc_file_info_free(&fi);
    ok(do_stat(tp("link"), NULL, &fi, &err) == 0 && strcmp(fi.type, "symlink") == 0 &&
           tap_streq(jstr(fi.json, "link_target"), tp("hello.txt")) &&
           tap_streq(jstr(fi.json, "target_type"), "file") && !fi.is_dir,
       "STAT of a symlink reports the link, its target and the target's type");
    agentc_file_info_free(&fi);
    ok(do_stat(tmpdir, NULL, &fi, &err) == 0 && fi.is_dir && strcmp(fi.type, "dir") == 0,
       "STAT of a directory");
    agentc_file_info_free(&fi);
    ok(do_stat(tp("missing"), NULL, &fi, &err) < 0 && err.kind == ERR_NOT_FOUND &&
           strcmp(err.code, "file_not_found") == 0,
       "STAT of a missing path: ERR_NOT_FOUND file_not_found");
    ok(do_stat(tp("hello.txt/x"), NULL, &fi, &err) < 0 && err.kind == ERR_INVALID &&
           strcmp(err.code, "not_directory") == 0,
       "a path through a file: ERR_INVALID not_directory");
}

static void test_dotdot_and_links(void)
{
    struct agentc_file_info fi;
    struct rd r = {0};
    err_t err = {0};
    char rel[600];
    snprintf(rel, sizeof(rel), "../../../..%s/./nope/../hello.txt", tmpdir);
    ok(do_stat(rel, NULL, &fi, &err) == 0 && fi.size == 6 &&
           tap_streq(jstr(fi.json, "path"), tp("hello.txt")),
       "a relative path with .. above / is normalised against /");
    agentc_file_info_free(&fi);
    struct agentc_file_req req = {.path = tp("link")};
    ok(do_read(&req, &r, &err) == 0 && data_is(&r, "hello\n"),
       "reading through a symlink reads its target");
    buf_free(&r.data);
}

static void test_list(void)
{
    err_t err = {0};
    bool truncated = true;
    mkdir(tp("ls"), 0755);
    mkdir(tp("ls/sub"), 0700);
    put_file("ls/b", "bb", 0644);
    put_file("ls/a", "a", 0600);
    symlink("sub", tp("ls/to-sub"));
    _cleanup_close_ int fd = connect_agent();
    struct agentc_file_req req = {.path = tp("ls")};
    json_t *l = agentc_list(fd, &req, &truncated, &err);
    json_t *a = json_array_get(l, 0), *sub = json_array_get(l, 2), *ln = json_array_get(l, 3);
    ok(l && json_array_size(l) == 4 && !truncated && tap_streq(jstr(a, "name"), "a") &&
           tap_streq(jstr(json_array_get(l, 1), "name"), "b") &&
           tap_streq(jstr(sub, "name"), "sub") && tap_streq(jstr(ln, "name"), "to-sub"),
       "LIST returns every entry, sorted by name (%s)", l ? "" : err.msg);
    ok(tap_streq(jstr(a, "path"), tp("ls/a")) && tap_streq(jstr(a, "mode"), "0600") &&
           json_integer_value(json_object_get(a, "size")) == 1 &&
           json_is_false(json_object_get(a, "is_dir")) && tap_streq(jstr(a, "type"), "file") &&
           json_is_real(json_object_get(a, "mtime")),
       "an entry has name, path, type, is_dir, size, mode and mtime");
    ok(json_is_true(json_object_get(sub, "is_dir")) && tap_streq(jstr(ln, "type"), "symlink") &&
           json_is_true(json_object_get(ln, "is_dir")) && tap_streq(jstr(ln, "link_target"), "sub"),
       "directories and symlinks to directories are is_dir");
    json_decref(l);
    close(fd);
    fd = connect_agent();
    req.path = tp("hello.txt");
    ok(!agentc_list(fd, &req, NULL, &err) && strcmp(err.code, "not_directory") == 0,
       "LIST of a file: not_directory");
}

static void test_list_truncated(void)
{
    err_t err = {0};
    bool truncated = false;
    mkdir(tp("many"), 0755);
    _cleanup_close_ int dfd = open(tp("many"), O_DIRECTORY | O_CLOEXEC);
    /* Created in descending order so that readdir's order is not the answer's. */
    for (int i = AGENTC_LIST_MAX + 4; i >= 0; i--) {
        char name[32];
        snprintf(name, sizeof(name), "f%06d", i);
        close(openat(dfd, name, O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
    }
    _cleanup_close_ int fd = connect_agent();
    struct agentc_file_req req = {.path = tp("many")};
    json_t *l = agentc_list(fd, &req, &truncated, &err);
    ok(l && json_array_size(l) == AGENTC_LIST_MAX && truncated &&
           tap_streq(jstr(json_array_get(l, 0), "name"), "f000000") &&
           tap_streq(jstr(json_array_get(l, AGENTC_LIST_MAX - 1), "name"), "f009999"),
       "a directory of %d entries lists the first %d by name, truncated (over several frames)",
       AGENTC_LIST_MAX + 5, AGENTC_LIST_MAX);
    json_decref(l);
}

/* The byte at offset i of the big test file. */
static uint8_t pattern(uint64_t i)
{
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull;
    return (uint8_t)(x >> 56) ^ (uint8_t)(i >> 12);
}

static long status_kb(pid_t pid, const char *key)
{
    char path[64], line[256];
    long v = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    _cleanup_fclose_ FILE *f = fopen(path, "re");
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, key, strlen(key)) == 0)
            v = atol(line + strlen(key));
    return v;
}

/* The agent's session process serving our connection (the only one running). */
static pid_t find_session(void)
{
    _cleanup_closedir_ DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char path[300], line[512];
        int ppid;
        snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
        _cleanup_fclose_ FILE *f =
            de->d_name[0] >= '1' && de->d_name[0] <= '9' ? fopen(path, "re") : NULL;
        char *rp;
        if (f && fgets(line, sizeof(line), f) && strstr(line, "(agent-session)") &&
            (rp = strrchr(line, ')')) && sscanf(rp + 1, " %*c %d", &ppid) == 1 && ppid == agent_pid)
            return atoi(de->d_name);
    }
    return -1;
}

struct verify {
    uint64_t off;
    bool match;
    uint64_t length;
};

static int verify_info(void *p, const struct agentc_file_info *fi)
{
    struct verify *v = p;
    v->off = fi->offset;
    v->length = fi->length;
    return 0;
}

static int verify_data(void *p, const uint8_t *d, size_t n)
{
    struct verify *v = p;
    for (size_t i = 0; i < n; i++)
        v->match &= d[i] == pattern(v->off + i);
    v->off += n;
    return 0;
}

/* Stream `size` bytes of the pattern into path, in chunks of 256 KiB, never all in memory. */
static int write_pattern(const char *path, uint64_t size, long *session_hwm, err_t *err)
{
    static uint8_t chunk[256 * 1024];
    _cleanup_close_ int fd = connect_agent();
    struct agentc_file_req req = {.path = path};
    agentc_writer_t w;
    if (agentc_write_begin(fd, &req, &w, err) < 0)
        return -1;
    for (uint64_t off = 0; off < size; off += sizeof(chunk)) {
        size_t n = size - off < sizeof(chunk) ? (size_t)(size - off) : sizeof(chunk);
        for (size_t i = 0; i < n; i++)
            chunk[i] = pattern(off + i);
        if (agentc_write_chunk(&w, chunk, n, err) < 0) {
            agentc_write_abort(&w);
            return -1;
        }
    }
    *session_hwm = status_kb(find_session(), "VmHWM:");
    uint64_t written = 0;
    return agentc_write_end(&w, &written, err) == 0 && written == size ? 0 : -1;
}

static void test_big_round_trip(void)
{
    const uint64_t size = 20 * MiB;
    err_t err = {0};
    long session_hwm = -1;
    int cr = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    (void)!write(cr, "5", 1); /* reset VmHWM to the current RSS */
    close(cr);
    long before = status_kb(getpid(), "VmHWM:");
    double t0 = now_mono_ms();
    int rc = write_pattern(tp("big.bin"), size, &session_hwm, &err);
    double t1 = now_mono_ms();
    struct stat st;
    ok(rc == 0 && stat(tp("big.bin"), &st) == 0 && (uint64_t)st.st_size == size,
       "a 20 MiB file is written through the agent (%.0f ms) %s", t1 - t0, rc ? err.msg : "");
    struct verify v = {.match = true};
    _cleanup_close_ int fd = connect_agent();
    struct agentc_file_req req = {.path = tp("big.bin")};
    rc = agentc_read(fd, &req, verify_info, verify_data, &v, &err);
    ok(rc == 0 && v.match && v.off == size && v.length == size,
       "... and read back byte for byte (%.0f ms)", now_mono_ms() - t1);
    long grew = status_kb(getpid(), "VmHWM:") - before;
    ok(before > 0 && grew < 8 * 1024,
       "the client's peak memory grew by %ld KiB for 20 MiB each way (bounded)", grew);
    ok(session_hwm > 0 && session_hwm < 16 * 1024,
       "the agent's session peaked at %ld KiB while receiving 20 MiB", session_hwm);
}

static void test_range_reads(void)
{
    err_t err = {0};
    struct verify v = {.match = true};
    _cleanup_close_ int fd = connect_agent();
    struct agentc_file_req req = {.path = tp("big.bin"), .offset = 1000003, .length = 70000};
    v.off = 0;
    int rc = agentc_read(fd, &req, verify_info, verify_data, &v, &err);
    ok(rc == 0 && v.match && v.length == 70000 && v.off == 1000003 + 70000,
       "a range (offset 1000003, length 70000) reads exactly those bytes");
    struct rd r = {0};
    put_file("digits", "0123456789", 0644);
    struct agentc_file_req d = {.path = tp("digits"), .offset = 7};
    ok(do_read(&d, &r, &err) == 0 && data_is(&r, "789") && r.offset == 7 && r.length == 3 &&
           r.size == 10,
       "offset without length reads to the end; FILE_INFO has size, offset and length");
    d.offset = 8;
    d.length = 100;
    ok(do_read(&d, &r, &err) == 0 && data_is(&r, "89") && r.length == 2,
       "a length past the end is clamped");
    d.offset = 50;
    d.length = 0;
    ok(do_read(&d, &r, &err) == 0 && r.data.len == 0 && r.offset == 10 && r.length == 0,
       "an offset past the end gives an empty range at the size");
    buf_free(&r.data);
}

/* A reader that checks the target is always whole: all 'A' (old) or all 'B' (new). */
struct watcher {
    const char *path;
    size_t old_size, new_size;
    volatile bool stop;
    volatile int reads, partial;
};

/* Waits (at most 10 s) until the watcher has done `more` further reads. */
static void await_reads(struct watcher *w, int more)
{
    int want = w->reads + more;
    for (int i = 0; i < 10000 && w->reads < want; i++)
        usleep(1000);
}

static void *watch(void *p)
{
    struct watcher *w = p;
    char *buf = xmalloc(w->new_size + 1);
    while (!w->stop) {
        int fd = open(w->path, O_RDONLY | O_CLOEXEC);
        ssize_t n = 0, k;
        while (fd >= 0 && (k = read(fd, buf + n, w->new_size + 1 - (size_t)n)) > 0)
            n += k;
        close(fd);
        char want = n == (ssize_t)w->old_size ? 'A' : 'B';
        bool whole = n == (ssize_t)w->old_size || n == (ssize_t)w->new_size;
        for (ssize_t i = 0; whole && i < n; i++)
            whole = buf[i] == want;
        w->reads++;
        w->partial += !whole;
    }
    free(buf);
    return NULL;
}

static int count_temps(const char *dir, const char *name)
{
    char pat[300];
    snprintf(pat, sizeof(pat), ".%s.sbx-*.tmp", name);
    _cleanup_closedir_ DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d)))
        n += fnmatch(pat, de->d_name, 0) == 0;
    return n;
}

static void test_atomic_write(void)
{
    const size_t old_size = MiB, new_size = 3 * MiB;
    char *a = xmalloc(new_size), *b = xmalloc(new_size);
    memset(a, 'A', new_size);
    memset(b, 'B', new_size);
    err_t err = {0};
    struct agentc_file_req req = {.path = tp("atomic"), .set_mode = true, .mode = 0640};
    ok(do_write(&req, a, old_size, 65536, &err) == 0, "write the old version");
    struct watcher w = {.path = tp("atomic"), .old_size = old_size, .new_size = new_size};
    pthread_t th;
    pthread_create(&th, NULL, watch, &w);
    _cleanup_close_ int fd = connect_agent();
    agentc_writer_t wr;
    int rc = agentc_write_begin(fd, &req, &wr, &err);
    for (size_t off = 0; rc == 0 && off < new_size; off += 64 * 1024) {
        rc = agentc_write_chunk(&wr, b + off, 64 * 1024, &err);
        if (off == new_size / 2) {
            struct stat st;
            ok(count_temps(tmpdir, "atomic") == 1 && stat(tp("atomic"), &st) == 0 &&
                   (size_t)st.st_size == old_size,
               "mid-write: one temp file .atomic.sbx-*.tmp, the target still the old one");
            await_reads(&w, 5);
        }
    }
    int during = w.reads;
    rc = rc == 0 ? agentc_write_end(&wr, NULL, &err) : -1;
    await_reads(&w, 5);
    w.stop = true;
    pthread_join(th, NULL);
    struct stat st;
    ok(rc == 0 && stat(tp("atomic"), &st) == 0 && (size_t)st.st_size == new_size &&
           (st.st_mode & 07777) == 0640,
       "after FILE_END the target is the new version, mode 0640");
    ok(during >= 5 && w.reads >= during + 5 && w.partial == 0,
       "a concurrent reader never saw a partial file (%d reads during the write, %d in all)",
       during, w.reads);
    ok(count_temps(tmpdir, "atomic") == 0, "no temp file is left");
    free(a);
    free(b);
}

static void test_disconnect_mid_write(void)
{
    err_t err = {0};
    char data[4096];
    memset(data, 'x', sizeof(data));
    int fd = connect_agent();
    agentc_writer_t w;
    struct agentc_file_req req = {.path = tp("hello.txt")};
    int rc = agentc_write_begin(fd, &req, &w, &err);
    rc = rc == 0 ? agentc_write_chunk(&w, data, sizeof(data), &err) : -1;
    bool had_temp = count_temps(tmpdir, "hello.txt") == 1;
    agentc_write_abort(&w);
    close(fd);
    double end = now_mono_ms() + 2000;
    while (count_temps(tmpdir, "hello.txt") && now_mono_ms() < end)
        usleep(2000);
    struct rd r = {0};
    struct agentc_file_req rq = {.path = tp("hello.txt")};
    ok(rc == 0 && had_temp && count_temps(tmpdir, "hello.txt") == 0 &&
           do_read(&rq, &r, &err) == 0 && data_is(&r, "hello\n"),
       "a client that leaves mid-write: temp file removed, target untouched");
    buf_free(&r.data);
}

static void test_write_options(void)
{
    err_t err = {0};
    struct rd r = {0};
    struct stat st;
    put_file("script.sh", "#!/bin/sh\n", 0755);
    struct agentc_file_req req = {.path = tp("script.sh")};
    ok(do_write(&req, "echo\n", 5, 5, &err) == 0 && stat(tp("script.sh"), &st) == 0 &&
           (st.st_mode & 07777) == 0755,
       "replacing a file without a mode keeps its mode");
    req = (struct agentc_file_req){.path = tp("new/deep/er/file.txt")};
    ok(do_write(&req, "x", 1, 1, &err) < 0 && err.kind == ERR_NOT_FOUND,
       "a missing parent without mkdir: ERR_NOT_FOUND");
    req.mkdir = true;
    ok(do_write(&req, "x", 1, 1, &err) == 0 && stat(tp("new/deep/er"), &st) == 0 &&
           (st.st_mode & 07777) == 0755 && stat(tp("new/deep/er/file.txt"), &st) == 0 &&
           (st.st_mode & 07777) == 0644,
       "mkdir creates the parents 0755; a new file is 0644");
    req = (struct agentc_file_req){.path = tp("link")};
    struct stat lst;
    ok(do_write(&req, "via link\n", 9, 9, &err) == 0 && lstat(tp("link"), &lst) == 0 &&
           S_ISLNK(lst.st_mode) &&
           do_read(&(struct agentc_file_req){.path = tp("hello.txt")}, &r, &err) == 0 &&
           data_is(&r, "via link\n"),
       "writing through a symlink replaces its target and keeps the link");
    req = (struct agentc_file_req){.path = tp("hello.txt"), .append = true};
    ok(do_write(&req, "more\n", 5, 5, &err) == 0 &&
           do_read(&(struct agentc_file_req){.path = tp("hello.txt")}, &r, &err) == 0 &&
           data_is(&r, "via link\nmore\n"),
       "append adds to the end");
    req = (struct agentc_file_req){.path = tmpdir};
    ok(do_write(&req, "x", 1, 1, &err) < 0 && strcmp(err.code, "is_directory") == 0,
       "writing onto a directory: is_directory");
    req = (struct agentc_file_req){.path = tp("empty")};
    ok(do_write(&req, NULL, 0, 1, &err) == 0 && stat(tp("empty"), &st) == 0 && st.st_size == 0,
       "an empty write makes an empty file");
    buf_free(&r.data);
}

static void test_special_files(void)
{
    err_t err = {0};
    struct rd r = {0};
    struct agentc_file_info fi;
    mkfifo(tp("fifo"), 0666);
    double t0 = now_mono_ms();
    struct agentc_file_req req = {.path = tp("fifo")};
    ok(do_read(&req, &r, &err) < 0 && err.kind == ERR_INVALID &&
           strcmp(err.code, "special_file") == 0 && now_mono_ms() - t0 < 1000,
       "reading a fifo: ERR_INVALID special_file, without blocking");
    ok(do_write(&req, "x", 1, 1, &err) < 0 && strcmp(err.code, "special_file") == 0,
       "writing onto a fifo: special_file");
    req.append = true;
    ok(do_write(&req, "x", 1, 1, &err) < 0 && strcmp(err.code, "special_file") == 0,
       "appending to a fifo: special_file");
    req = (struct agentc_file_req){.path = "/dev/null"};
    ok(do_read(&req, &r, &err) < 0 && strcmp(err.code, "special_file") == 0,
       "reading a device: special_file");
    ok(do_stat(tp("fifo"), NULL, &fi, &err) == 0 && strcmp(fi.type, "fifo") == 0,
       "STAT of a fifo says fifo");
    agentc_file_info_free(&fi);
    req = (struct agentc_file_req){.path = tmpdir};
    ok(do_read(&req, &r, &err) < 0 && strcmp(err.code, "is_directory") == 0,
       "reading a directory: is_directory");
    buf_free(&r.data);
}

static void test_mkdir(void)
{
    err_t err = {0};
    struct stat st;
    struct agentc_file_req req = {.path = tp("m1/m2/m3"), .parents = true};
    ok(do_simple(agentc_mkdir, &req, &err) == 0 && stat(tp("m1/m2/m3"), &st) == 0 &&
           S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0755,
       "MKDIR with parents creates the whole chain, 0755");
    ok(do_simple(agentc_mkdir, &req, &err) == 0, "... and an existing directory is fine");
    req.parents = false;
    ok(do_simple(agentc_mkdir, &req, &err) < 0 && err.kind == ERR_CONFLICT &&
           strcmp(err.code, "file_exists") == 0,
       "without parents an existing directory: ERR_CONFLICT file_exists");
    req = (struct agentc_file_req){.path = tp("m1/x/y")};
    ok(do_simple(agentc_mkdir, &req, &err) < 0 && err.kind == ERR_NOT_FOUND,
       "without parents a missing parent: ERR_NOT_FOUND");
    req = (struct agentc_file_req){.path = tp("m700"), .set_mode = true, .mode = 0700};
    ok(do_simple(agentc_mkdir, &req, &err) == 0 && stat(tp("m700"), &st) == 0 &&
           (st.st_mode & 07777) == 0700,
       "MKDIR applies the mode exactly");
}

static void test_delete(void)
{
    err_t err = {0};
    struct stat st;
    mkdir(tp("outside"), 0755);
    put_file("outside/keep.txt", "keep", 0644);
    mkdir(tp("tree"), 0755);
    mkdir(tp("tree/sub"), 0755);
    mkdir(tp("tree/sub/deeper"), 0755);
    put_file("tree/sub/deeper/f", "f", 0644);
    put_file("tree/g", "g", 0644);
    symlink(tp("outside"), tp("tree/link-out"));
    symlink(tp("outside"), tp("tree/sub/link-out2"));
    struct agentc_file_req req = {.path = tp("tree")};
    ok(do_simple(agentc_delete, &req, &err) < 0 && err.kind == ERR_INVALID &&
           strcmp(err.code, "not_empty") == 0,
       "DELETE of a non-empty directory without recursive: not_empty");
    req.recursive = true;
    ok(do_simple(agentc_delete, &req, &err) == 0 && lstat(tp("tree"), &st) < 0 && errno == ENOENT,
       "recursive DELETE removes the tree");
    ok(stat(tp("outside/keep.txt"), &st) == 0,
       "... without following its symlinks: the directory they pointed to survives");
    symlink(tp("outside"), tp("dirlink"));
    req = (struct agentc_file_req){.path = tp("dirlink")};
    ok(do_simple(agentc_delete, &req, &err) == 0 && lstat(tp("dirlink"), &st) < 0 &&
           stat(tp("outside/keep.txt"), &st) == 0,
       "DELETE of a symlink to a directory removes the link only");
    req = (struct agentc_file_req){.path = tp("outside/keep.txt")};
    ok(do_simple(agentc_delete, &req, &err) == 0 && stat(tp("outside/keep.txt"), &st) < 0,
       "DELETE of a file");
    ok(do_simple(agentc_delete, &req, &err) < 0 && err.kind == ERR_NOT_FOUND,
       "DELETE of a missing file: ERR_NOT_FOUND");
    req = (struct agentc_file_req){.path = "/tmp/../..", .recursive = true};
    ok(do_simple(agentc_delete, &req, &err) < 0 && strcmp(err.code, "invalid_path") == 0,
       "deleting / (here /tmp/../..) is refused by the client");
}

/* Send a raw request frame and return the ERROR code the agent answers (or ""). */
static const char *raw_error(uint8_t type, const char *json)
{
    static char code[32];
    char msg[256];
    err_t err = {0};
    agentc_reader_t r;
    struct agent_frame f;
    agentc_reader_init(&r);
    code[0] = '\0';
    int fd = connect_agent();
    if (agentc_send(fd, type, json, strlen(json), &err) == 0 &&
        agentc_read_frame(fd, &r, &f, now_mono_ms() + 5000, &err) == 0 && f.type == AGENT_ERROR)
        agentc_decode_error(&f, code, sizeof(code), msg, sizeof(msg), &err);
    close(fd);
    agentc_reader_free(&r);
    return code;
}

static void test_agent_refusals(void)
{
    ok(strcmp(raw_error(AGENT_DELETE, "{\"path\":\"/\",\"recursive\":true}"), "invalid_path") == 0,
       "the agent itself refuses to delete /");
    ok(strcmp(raw_error(AGENT_STAT, "{\"path\":\"/\",\"bogus\":1}"), "invalid") == 0,
       "an unknown member is ERROR invalid");
    ok(strcmp(raw_error(AGENT_WRITE, "{\"path\":\"/tmp/x\",\"mode\":\"999\"}"), "invalid") == 0,
       "a mode that is not octal is ERROR invalid");
    ok(strcmp(raw_error(AGENT_STAT, "{\"path\":\"/x\",\"user\":\"no-such-user-sbx\"}"),
              "bad_user") == 0,
       "an unknown user is ERROR bad_user");
    ok(strcmp(raw_error(AGENT_PS, "{}"), "unsupported") == 0, "PS is still unsupported");
}

static void test_rename(void)
{
    err_t err = {0};
    struct stat st;
    put_file("r1", "1", 0644);
    put_file("r2", "2", 0644);
    struct agentc_file_req req = {.path = tp("r1"), .to = tp("r2"), .no_replace = true};
    ok(do_simple(agentc_rename, &req, &err) < 0 && strcmp(err.code, "file_exists") == 0,
       "RENAME with no_replace onto an existing file: file_exists");
    req.no_replace = false;
    ok(do_simple(agentc_rename, &req, &err) == 0 && stat(tp("r1"), &st) < 0 &&
           stat(tp("r2"), &st) == 0 && st.st_size == 1,
       "RENAME replaces the target");
}

static void test_users(void)
{
    err_t err = {0};
    struct rd r = {0};
    struct stat st;
    mkdir(tp("rootdir"), 0755);
    mkdir(tp("nobodydir"), 0755);
    chown(tp("nobodydir"), 65534, 65534);
    put_file("secret", "s", 0600);
    struct agentc_file_req req = {.path = tp("rootdir/f"), .user = "65534"};
    ok(do_write(&req, "x", 1, 1, &err) < 0 && err.kind == ERR_FORBIDDEN &&
           strcmp(err.code, "permission_denied") == 0 && stat(tp("rootdir/f"), &st) < 0,
       "user 65534 writing into a root-owned 0755 directory: ERR_FORBIDDEN permission_denied");
    req.path = tp("nobodydir/f");
    ok(do_write(&req, "x", 1, 1, &err) == 0 && stat(tp("nobodydir/f"), &st) == 0 &&
           st.st_uid == 65534,
       "... into its own directory it works, and the file is its own");
    req = (struct agentc_file_req){.path = tp("secret"), .user = "65534"};
    ok(do_read(&req, &r, &err) < 0 && err.kind == ERR_FORBIDDEN, "... it cannot read a 0600 file");
    req.user = NULL;
    ok(do_read(&req, &r, &err) == 0 && data_is(&r, "s"), "root (the default here) can");
    pid_t main_agent = agent_pid;
    sock_name = "nobody.sock";
    agent_pid = spawn_agent("nobody");
    req = (struct agentc_file_req){.path = tp("rootdir/g")};
    ok(do_write(&req, "x", 1, 1, &err) < 0 && err.kind == ERR_FORBIDDEN,
       "an agent started with --user nobody writes as nobody by default");
    req.user = "0";
    ok(do_write(&req, "x", 1, 1, &err) == 0, "... and a request's user overrides it");
    stop_agent(agent_pid);
    agent_pid = main_agent;
    sock_name = SOCK_NAME;
    buf_free(&r.data);
}

/* Writes into a full and into a read-only file system (small tmpfs mounted for the test). */
static void test_full_and_read_only(void)
{
    err_t err = {0};
    struct stat st;
    char *data = xcalloc(1, MiB);
    mkdir(tp("small"), 0755);
    if (mount("tmpfs", tp("small"), "tmpfs", 0, "size=256k") < 0) {
        printf("# cannot mount a tmpfs (%s): skipping no_space/read_only\n", strerror(errno));
        free(data);
        return;
    }
    struct agentc_file_req req = {.path = tp("small/big")};
    ok(do_write(&req, data, MiB, 64 * 1024, &err) < 0 && err.kind == ERR_LIMIT &&
           strcmp(err.code, "no_space") == 0,
       "a write that fills the file system: ERR_LIMIT no_space (%s)", err.msg);
    double end = now_mono_ms() + 2000;
    while (count_temps(tp("small"), "big") && now_mono_ms() < end)
        usleep(2000);
    ok(count_temps(tp("small"), "big") == 0 && stat(tp("small/big"), &st) < 0,
       "... the temp file is removed and no target appears");
    umount2(tp("small"), MNT_DETACH);
    mkdir(tp("ro"), 0755);
    if (mount("tmpfs", tp("ro"), "tmpfs", MS_RDONLY, "size=64k") < 0) {
        printf("# cannot mount a read-only tmpfs (%s)\n", strerror(errno));
        free(data);
        return;
    }
    req.path = tp("ro/f");
    ok(do_write(&req, "x", 1, 1, &err) < 0 && err.kind == ERR_CONFLICT &&
           strcmp(err.code, "read_only") == 0,
       "a write into a read-only file system: ERR_CONFLICT read_only, before any data");
    ok(do_simple(agentc_mkdir, &(struct agentc_file_req){.path = tp("ro/d")}, &err) < 0 &&
           strcmp(err.code, "read_only") == 0,
       "MKDIR there: read_only");
    umount2(tp("ro"), MNT_DETACH);
    free(data);
}

static void run_agent_tests(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/sbx-files-test-XXXXXX");
    if (!mkdtemp(tmpdir))
        return;
    chmod(tmpdir, 0755); /* other users must reach inside (the nobody tests) */
    dirfd_ = open(tmpdir, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    agent_pid = spawn_agent(NULL);
    test_stat();
    test_dotdot_and_links();
    test_list();
    test_list_truncated();
    test_big_round_trip();
    test_range_reads();
    test_atomic_write();
    test_disconnect_mid_write();
    test_write_options();
    test_special_files();
    test_mkdir();
    test_delete();
    test_agent_refusals();
    test_rename();
    if (geteuid() == 0) {
        test_users();
        test_full_and_read_only();
    } else
        printf("# not root: skipping the tests that switch users\n");
    stop_agent(agent_pid);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    (void)!system(cmd);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    agent_bin = getenv("SANDBOXER_AGENT");
    if (agent_bin && access(agent_bin, X_OK) == 0)
        run_agent_tests();
    else
        printf("# SANDBOXER_AGENT not set: skipping the tests of the real agent\n");
    return tap_done();
}
