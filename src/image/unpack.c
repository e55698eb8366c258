/*
 * `sandboxer internal-unpack-layer BLOB DESTDIR DIFFID [BLOBDIGEST]`: unpack one layer.
 *
 * Runs in its own process (spawned by the daemon from /proc/self/exe) because extraction
 * is relative to the working directory and the daemon is multi-threaded. It makes a fresh
 * directory next to DESTDIR, chroots into its diff/ (so nothing the archive says can reach
 * outside, whatever libarchive does), extracts with libarchive, verifies the digests, syncs
 * and renames the directory into place: a crash never leaves a half layer under DESTDIR.
 *
 * The blob (gzip, zstd or plain tar) is read once: a libarchive "raw" reader decompresses
 * it, hashing the compressed bytes on the way in (BLOBDIGEST) and the tar stream on the way
 * out (DIFFID), and a second reader parses that tar stream.
 *
 * OCI whiteouts become overlayfs whiteouts (`.wh.NAME` → char device 0/0 NAME) and opaque
 * markers (`.wh..wh..opq`) the xattr trusted.overlay.opaque=y on their directory. Owners,
 * modes (setuid too), times, hard links, symlinks, devices, ACLs and user.* and
 * security.capability xattrs are kept; other xattrs (trusted.overlay.* above all) dropped.
 * Absolute paths, `..`, hard links out of the layer and writes through symlinks fail the
 * whole layer.
 *
 * Exit codes: 0 done (or already there), 1 host trouble, 2 bad layer, 3 usage.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image_internal.h"

#define MAX_LAYER_BYTES (64ull << 30) /* uncompressed tar stream */
#define MAX_ENTRIES     (4u << 20)
#define MAX_DEPTH       200 /* path components of an entry */
#define IO_CHUNK        (128u << 10)

struct unpack {
    int fail_code; /* UNPACK_EHOST or UNPACK_EBADLAYER once failed */
    char msg[600];
    /* compressed side */
    int blob_fd;
    EVP_MD_CTX *blob_md;
    char *blob_buf;
    /* uncompressed side */
    struct archive *raw;
    EVP_MD_CTX *tar_md;
    uint64_t tar_bytes;
    char *tar_buf;
    /* opaque directories, applied once everything is written */
    char **opaque;
    size_t n_opaque;
};

static int fail(struct unpack *u, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct unpack *u, int code, const char *fmt, ...)
{
    if (!u->fail_code) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(u->msg, sizeof(u->msg), fmt, ap);
        va_end(ap);
        u->fail_code = code;
    }
    return -1;
}

/* Host trouble (disk full, I/O) is not the layer's fault; anything else is. */
static int fail_archive(struct unpack *u, struct archive *a, const char *what, const char *path)
{
    int e = archive_errno(a);
    int code = (e == ENOSPC || e == EDQUOT || e == EIO || e == ENOMEM || e == EROFS)
                   ? UNPACK_EHOST
                   : UNPACK_EBADLAYER;
    return fail(u, code, "%s %.200s: %s", what, path ? path : "",
                archive_error_string(a) ? archive_error_string(a) : "failed");
}

static la_ssize_t blob_read(struct archive *a, void *data, const void **out)
{
    struct unpack *u = data;
    ssize_t r;
    do
        r = read(u->blob_fd, u->blob_buf, IO_CHUNK);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
        archive_set_error(a, errno, "read blob: %s", strerror(errno));
        return -1;
    }
    EVP_DigestUpdate(u->blob_md, u->blob_buf, (size_t)r);
    *out = u->blob_buf;
    return r;
}

static la_ssize_t tar_read(struct archive *a, void *data, const void **out)
{
    struct unpack *u = data;
    la_ssize_t r = archive_read_data(u->raw, u->tar_buf, IO_CHUNK);
    if (r < 0) {
        archive_set_error(a, archive_errno(u->raw), "decompress: %s", archive_error_string(u->raw));
        return -1;
    }
    u->tar_bytes += (uint64_t)r;
    if (u->tar_bytes > MAX_LAYER_BYTES) {
        archive_set_error(a, EFBIG, "layer larger than %llu bytes", MAX_LAYER_BYTES);
        return -1;
    }
    EVP_DigestUpdate(u->tar_md, u->tar_buf, (size_t)r);
    *out = u->tar_buf;
    return r;
}

/*
 * Normalise an entry path into out: drop "./" and empty components; absolute paths, ".."
 * and over-long or over-deep paths are refused. "" is the layer root.
 */
static int normalize(struct unpack *u, const char *path, char *out, size_t size)
{
    if (!path)
        return fail(u, UNPACK_EBADLAYER, "entry without a name");
    if (path[0] == '/')
        return fail(u, UNPACK_EBADLAYER, "absolute path %.200s", path);
    size_t n = 0;
    int depth = 0;
    const char *p = path;
    while (*p) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return fail(u, UNPACK_EBADLAYER, "path with '..': %.200s", path);
        if (len > NAME_MAX)
            return fail(u, UNPACK_EBADLAYER, "name too long in %.200s", path);
        if (len > 0 && !(len == 1 && p[0] == '.')) {
            if (++depth > MAX_DEPTH || n + len + 2 > size)
                return fail(u, UNPACK_EBADLAYER, "path too deep or too long: %.200s", path);
            if (n)
                out[n++] = '/';
            memcpy(out + n, p, len);
            n += len;
        }
        p += len + (slash ? 1 : 0);
    }
    out[n] = '\0';
    return 0;
}

static bool xattr_allowed(const char *name)
{
    return strncmp(name, "user.", 5) == 0 || strcmp(name, "security.capability") == 0;
}

/* Drop every xattr but user.* and security.capability (no trusted.overlay.* smuggling). */
static void filter_xattrs(struct archive_entry *e)
{
    if (archive_entry_xattr_count(e) == 0)
        return;
    struct kept {
        char *name;
        void *value;
        size_t size;
    } *keep = xcalloc((size_t)archive_entry_xattr_count(e), sizeof(*keep));
    size_t n = 0;
    const char *name;
    const void *value;
    size_t size;
    archive_entry_xattr_reset(e);
    while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK) {
        if (!xattr_allowed(name))
            continue;
        keep[n].name = xstrdup(name);
        keep[n].value = xmalloc(size ? size : 1);
        memcpy(keep[n].value, value, size);
        keep[n++].size = size;
    }
    archive_entry_xattr_clear(e);
    for (size_t i = 0; i < n; i++) {
        archive_entry_xattr_add_entry(e, keep[i].name, keep[i].value, keep[i].size);
        free(keep[i].name);
        free(keep[i].value);
    }
    free(keep);
}

static int write_header(struct unpack *u, struct archive *w, struct archive_entry *e)
{
    int r = archive_write_header(w, e);
    if (r < ARCHIVE_WARN)
        return fail_archive(u, w, "write", archive_entry_pathname(e));
    if (r == ARCHIVE_WARN)
        fprintf(stderr, "warning: %s: %s\n", archive_entry_pathname(e), archive_error_string(w));
    return 0;
}

static int finish_entry(struct unpack *u, struct archive *w, const char *path)
{
    if (archive_write_finish_entry(w) < ARCHIVE_WARN)
        return fail_archive(u, w, "finish", path);
    return 0;
}

/* `.wh.NAME` in dir → char device 0/0 dir/NAME, owned as the marker was. */
static int write_whiteout(struct unpack *u, struct archive *w, struct archive_entry *marker,
                          const char *norm, const char *base)
{
    const char *name = base + 4;
    if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return fail(u, UNPACK_EBADLAYER, "bad whiteout %.200s", norm);
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%.*s%s", (int)(base - norm), norm, name);
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, path);
    archive_entry_set_filetype(e, AE_IFCHR);
    archive_entry_set_perm(e, 0);
    archive_entry_set_rdev(e, 0);
    archive_entry_set_uid(e, archive_entry_uid(marker));
    archive_entry_set_gid(e, archive_entry_gid(marker));
    archive_entry_set_mtime(e, archive_entry_mtime(marker), 0);
    int rc = write_header(u, w, e);
    if (rc == 0)
        rc = finish_entry(u, w, path);
    archive_entry_free(e);
    return rc;
}

/* Copy the entry's data from the tar reader to the disk writer. */
static int copy_data(struct unpack *u, struct archive *r, struct archive *w, const char *path)
{
    for (;;) {
        const void *buf;
        size_t size;
        la_int64_t offset;
        int rc = archive_read_data_block(r, &buf, &size, &offset);
        if (rc == ARCHIVE_EOF)
            return 0;
        if (rc < ARCHIVE_WARN)
            return fail_archive(u, r, "read", path);
        if (archive_write_data_block(w, buf, size, offset) < ARCHIVE_WARN)
            return fail_archive(u, w, "write", path);
    }
}

/* Check and rewrite one entry's names; returns 1 to write it, 0 to skip it, -1 on error. */
static int prepare_entry(struct unpack *u, struct archive_entry *e, char *norm, size_t size)
{
    if (normalize(u, archive_entry_pathname(e), norm, size) < 0)
        return -1;
    const char *link = archive_entry_hardlink(e);
    switch (link ? AE_IFREG : archive_entry_filetype(e)) {
    case AE_IFREG:
    case AE_IFDIR:
    case AE_IFLNK:
    case AE_IFCHR:
    case AE_IFBLK:
    case AE_IFIFO:
        break;
    default:
        return 0; /* sockets and the unknown have no place in a layer */
    }
    if (link) {
        char target[PATH_MAX];
        if (normalize(u, link, target, sizeof(target)) < 0)
            return -1;
        const char *tb = strrchr(target, '/');
        if (!target[0] || strncmp(tb ? tb + 1 : target, ".wh.", 4) == 0)
            return fail(u, UNPACK_EBADLAYER, "bad hard link %.200s -> %.200s", norm, link);
        archive_entry_set_hardlink(e, target);
        archive_entry_set_size(e, 0); /* never write data through a link */
    }
    if (!norm[0]) {
        if (archive_entry_filetype(e) != AE_IFDIR || link)
            return fail(u, UNPACK_EBADLAYER, "the layer root is not a directory");
        archive_entry_set_pathname(e, ".");
    } else {
        archive_entry_set_pathname(e, norm);
    }
    filter_xattrs(e);
    return 1;
}

static int add_opaque(struct unpack *u, const char *norm, const char *base)
{
    u->opaque = xrealloc(u->opaque, (u->n_opaque + 1) * sizeof(*u->opaque));
    u->opaque[u->n_opaque++] = xstrndup(norm, base > norm ? (size_t)(base - norm - 1) : 0);
    return 0;
}

static int extract_entry(struct unpack *u, struct archive *r, struct archive *w,
                         struct archive_entry *e)
{
    char norm[PATH_MAX];
    int rc = prepare_entry(u, e, norm, sizeof(norm));
    if (rc <= 0)
        return rc;
    const char *slash = strrchr(norm, '/');
    const char *base = slash ? slash + 1 : norm;
    if (strncmp(norm, ".wh..wh.", 8) == 0)
        return 0; /* aufs metadata (.wh..wh.plnk/ and the like) */
    if (strncmp(base, ".wh.", 4) == 0) {
        if (strcmp(base, ".wh..wh..opq") == 0)
            return add_opaque(u, norm, base);
        if (strncmp(base, ".wh..wh.", 8) == 0)
            return 0; /* other aufs metadata */
        return write_whiteout(u, w, e, norm, base);
    }
    if (write_header(u, w, e) < 0)
        return -1;
    if (archive_entry_size(e) > 0 && archive_entry_filetype(e) == AE_IFREG &&
        copy_data(u, r, w, norm) < 0)
        return -1;
    return finish_entry(u, w, norm);
}

/* Open path below the root, component by component, never following a symlink. */
static int open_beneath(struct unpack *u, const char *path)
{
    int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char buf[PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", path);
    char *save = NULL;
    for (char *c = strtok_r(buf, "/", &save); fd >= 0 && c; c = strtok_r(NULL, "/", &save)) {
        int next = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0 && errno == ENOENT && mkdirat(fd, c, 0755) == 0)
            next = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int saved = errno;
        close(fd);
        errno = saved;
        fd = next;
    }
    if (fd < 0)
        return fail(u, errno == ENOTDIR || errno == ELOOP ? UNPACK_EBADLAYER : UNPACK_EHOST,
                    "opaque directory %.200s: %s", path, strerror(errno));
    return fd;
}

static int apply_opaque(struct unpack *u)
{
    for (size_t i = 0; i < u->n_opaque; i++) {
        int fd _cleanup_close_ = open_beneath(u, u->opaque[i]);
        if (fd < 0)
            return -1;
        if (fsetxattr(fd, "trusted.overlay.opaque", "y", 1, 0) < 0)
            return fail(u, UNPACK_EHOST, "mark %.200s opaque: %s", u->opaque[i], strerror(errno));
    }
    return 0;
}

static struct archive *open_raw(struct unpack *u)
{
    struct archive *a = archive_read_new();
    /* gzip and zstd in-process only: a missing library must not run an external program. */
    if (archive_read_support_filter_gzip(a) != ARCHIVE_OK ||
        archive_read_support_filter_zstd(a) != ARCHIVE_OK ||
        archive_read_support_format_raw(a) != ARCHIVE_OK) {
        fail(u, UNPACK_EHOST, "libarchive lacks gzip or zstd support");
        archive_read_free(a);
        return NULL;
    }
    struct archive_entry *e;
    if (archive_read_open(a, u, NULL, blob_read, NULL) != ARCHIVE_OK ||
        archive_read_next_header(a, &e) != ARCHIVE_OK) {
        fail_archive(u, a, "open layer", "");
        archive_read_free(a);
        return NULL;
    }
    return a;
}

static int extract_all(struct unpack *u, struct archive *tar, struct archive *w)
{
    struct archive_entry *e;
    size_t count = 0;
    for (;;) {
        int r = archive_read_next_header(tar, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN)
            return fail_archive(u, tar, "read layer", "");
        if (++count > MAX_ENTRIES)
            return fail(u, UNPACK_EBADLAYER, "more than %u entries", MAX_ENTRIES);
        if (extract_entry(u, tar, w, e) < 0)
            return -1;
    }
    if (archive_write_close(w) < ARCHIVE_WARN)
        return fail_archive(u, w, "finish layer", "");
    return 0;
}

/* Read what the readers left (tar padding, trailing bytes) so both digests cover all. */
static int drain_rest(struct unpack *u)
{
    const void *p;
    for (;;) {
        la_ssize_t r = tar_read(u->raw, u, &p);
        if (r < 0)
            return fail(u, UNPACK_EBADLAYER, "decompress: %s", archive_error_string(u->raw));
        if (r == 0)
            break;
    }
    for (;;) {
        la_ssize_t r = blob_read(u->raw, u, &p);
        if (r < 0)
            return fail(u, UNPACK_EHOST, "read blob: %s", strerror(errno));
        if (r == 0)
            return 0;
    }
}

static int check_digest(struct unpack *u, EVP_MD_CTX *md, const char *want, const char *what)
{
    unsigned char bin[32];
    unsigned int n = 0;
    char got[IMAGE_DIGEST_LEN];
    EVP_DigestFinal_ex(md, bin, &n);
    memcpy(got, "sha256:", 7);
    hex_encode(bin, 32, got + 7);
    if (want && strcmp(got, want) != 0)
        return fail(u, UNPACK_EBADLAYER, "%s digest mismatch: got %.19s, want %.19s", what, got,
                    want);
    return 0;
}

/* Extract the blob into the current root directory and verify both digests. */
static int extract(struct unpack *u, const char *diff_id, const char *blob_digest)
{
    u->raw = open_raw(u);
    if (!u->raw)
        return -1;
    struct archive *tar = archive_read_new();
    archive_read_support_format_tar(tar);
    struct archive *w = archive_write_disk_new();
    archive_write_disk_set_options(
        w, ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
               ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_ACL | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
               ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS);
    int rc = -1;
    if (archive_read_open(tar, u, NULL, tar_read, NULL) != ARCHIVE_OK)
        fail_archive(u, tar, "open tar", "");
    else if (extract_all(u, tar, w) == 0 && drain_rest(u) == 0 &&
             check_digest(u, u->tar_md, diff_id, "diff_id") == 0 &&
             check_digest(u, u->blob_md, blob_digest, "blob") == 0)
        rc = apply_opaque(u);
    archive_write_free(w);
    archive_read_free(tar);
    archive_read_free(u->raw);
    return rc;
}

/* Enter dir as the root of this process: libarchive then cannot reach anything else. */
static int enter(struct unpack *u, int dirfd)
{
    if (fchdir(dirfd) < 0 || chroot(".") < 0 || chdir("/") < 0)
        return fail(u, UNPACK_EHOST, "enter the layer directory: %s (root is needed)",
                    strerror(errno));
    return 0;
}

static int write_size(struct unpack *u, int tmpfd)
{
    int fd _cleanup_close_ =
        openat(tmpfd, "size", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0 || dprintf(fd, "%llu\n", (unsigned long long)u->tar_bytes) < 0)
        return fail(u, UNPACK_EHOST, "write size: %s", strerror(errno));
    return 0;
}

/* Unpack into parent/tmpname, then rename it to parent/base. */
static int unpack_and_rename(struct unpack *u, int parentfd, const char *tmpname, const char *base,
                             const char *diff_id, const char *blob_digest)
{
    if (mkdirat(parentfd, tmpname, 0700) < 0)
        return fail(u, UNPACK_EHOST, "mkdir: %s", strerror(errno));
    int tmpfd _cleanup_close_ =
        openat(parentfd, tmpname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (tmpfd < 0 || mkdirat(tmpfd, "diff", 0755) < 0)
        return fail(u, UNPACK_EHOST, "mkdir: %s", strerror(errno));
    int difffd _cleanup_close_ =
        openat(tmpfd, "diff", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (difffd < 0 || enter(u, difffd) < 0 || extract(u, diff_id, blob_digest) < 0 ||
        write_size(u, tmpfd) < 0)
        return -1;
    if (syncfs(tmpfd) < 0)
        return fail(u, UNPACK_EHOST, "sync: %s", strerror(errno));
    if (renameat(parentfd, tmpname, parentfd, base) < 0) {
        if (errno != EEXIST && errno != ENOTEMPTY)
            return fail(u, UNPACK_EHOST, "rename into place: %s", strerror(errno));
        image_rm_rf_at(parentfd, tmpname); /* another unpack of the same layer won */
    }
    if (fsync(parentfd) < 0)
        return fail(u, UNPACK_EHOST, "sync: %s", strerror(errno));
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: internal-unpack-layer BLOB DESTDIR DIFFID [BLOBDIGEST]\n");
    return UNPACK_EUSAGE;
}

/* Split dest into its parent dir (opened) and basename; -1 if dest is unusable. */
static int open_parent(const char *dest, char **base)
{
    const char *slash = strrchr(dest, '/');
    if (dest[0] != '/' || !slash || !slash[1] || strcmp(slash + 1, ".") == 0 ||
        strcmp(slash + 1, "..") == 0)
        return -1;
    _cleanup_free_ char *parent = xstrndup(dest, slash == dest ? 1 : (size_t)(slash - dest));
    *base = xstrdup(slash + 1);
    return open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

static int run(struct unpack *u, const char *blob, const char *dest, const char *diff_id,
               const char *blob_digest)
{
    _cleanup_free_ char *base = NULL;
    int parentfd _cleanup_close_ = open_parent(dest, &base);
    if (parentfd < 0)
        return fail(u, UNPACK_EHOST, "destination %s: %s", dest, base ? strerror(errno) : "bad");
    if (faccessat(parentfd, base, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
        return 0;
    u->blob_fd = open(blob, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (u->blob_fd < 0)
        return fail(u, UNPACK_EHOST, "open blob: %s", strerror(errno));
    unsigned char rnd[8];
    char hex[17];
    if (!random_bytes(rnd, sizeof(rnd)))
        return fail(u, UNPACK_EHOST, "no randomness");
    hex_encode(rnd, sizeof(rnd), hex);
    _cleanup_free_ char *tmpname = xasprintf(".tmp-%.64s-%s", base, hex);
    int rc = unpack_and_rename(u, parentfd, tmpname, base, diff_id, blob_digest);
    if (rc < 0)
        image_rm_rf_at(parentfd, tmpname);
    close(u->blob_fd);
    return rc;
}

int image_unpack_main(int argc, char **argv)
{
    if (argc < 4 || argc > 5)
        return usage();
    const char *blob_digest = argc == 5 ? argv[4] : NULL;
    if (!image_digest_valid(argv[3]) || (blob_digest && !image_digest_valid(blob_digest)))
        return usage();
    /* Die with the daemon; never outlive it into a later start's cleanup. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    setlocale(LC_CTYPE, "C.UTF-8"); /* pax names are UTF-8: no conversion */
    umask(022);
    struct unpack u = {.blob_fd = -1};
    u.blob_md = EVP_MD_CTX_new();
    u.tar_md = EVP_MD_CTX_new();
    u.blob_buf = xmalloc(IO_CHUNK);
    u.tar_buf = xmalloc(IO_CHUNK);
    EVP_DigestInit_ex(u.blob_md, EVP_sha256(), NULL);
    EVP_DigestInit_ex(u.tar_md, EVP_sha256(), NULL);
    int rc = run(&u, argv[1], argv[2], argv[3], blob_digest) < 0 ? u.fail_code : UNPACK_OK;
    if (rc)
        fprintf(stderr, "%s\n", u.msg);
    fflush(stdout);
    fflush(stderr);
    /*
     * _exit: after the chroot nothing outside is reachable, and exit handlers (a sanitizer's
     * leak check reading /proc, say) would fail there.
     */
    _exit(rc);
}
