/* Content-addressed blobs (read whole, bounded, digest verified) and careful file helpers. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image_internal.h"

#define RM_MAX_DEPTH 256 /* unpack refuses deeper paths, so every tree we make fits */

void image_sha256_digest(const void *data, size_t n, char out[IMAGE_DIGEST_LEN])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_Digest(data, n, md, &mdlen, EVP_sha256(), NULL);
    memcpy(out, "sha256:", 7);
    hex_encode(md, 32, out + 7);
}

/* Read all of fd (a regular file of at most max bytes) into a NUL-terminated buffer. */
static int read_fd(int fd, size_t max, char **out, size_t *len, const char *what, err_t *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return err_sys(err, "stat %s", what);
    if (!S_ISREG(st.st_mode))
        return err_set(err, ERR_UNPROCESSABLE, 0, "image_invalid", "%s is not a regular file",
                       what);
    if ((uint64_t)st.st_size > max)
        return err_set(err, ERR_UNPROCESSABLE, 0, "image_invalid", "%s is larger than %zu bytes",
                       what, max);
    size_t cap = (size_t)st.st_size + 1, n = 0;
    _cleanup_free_ char *data = xmalloc(cap);
    for (;;) {
        if (n == cap - 1) {
            if (n >= max + 1) /* the file grew past the bound while we read it */
                return err_set(err, ERR_UNPROCESSABLE, 0, "image_invalid",
                               "%s is larger than %zu bytes", what, max);
            cap = cap * 2 + 1;
            data = xrealloc(data, cap);
        }
        ssize_t r = read(fd, data + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return err_sys(err, "read %s", what);
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if (n > max)
        return err_set(err, ERR_UNPROCESSABLE, 0, "image_invalid", "%s is larger than %zu bytes",
                       what, max);
    data[n] = '\0';
    *out = steal_pointer(&data);
    *len = n;
    return 0;
}

int image_file_read_at(int dirfd, const char *path, size_t max, char **out, size_t *len, err_t *err)
{
    int fd _cleanup_close_ = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0 && (errno == ENOENT || errno == ELOOP))
        return err_set(err, ERR_UNPROCESSABLE, errno, "image_invalid", "no file %s", path);
    if (fd < 0)
        return err_sys(err, "open %s", path);
    return read_fd(fd, max, out, len, path, err);
}

int image_blob_read(const char *blobs_dir, const char *digest, int64_t size, size_t max, char **out,
                    size_t *len, err_t *err)
{
    if (!image_digest_valid(digest))
        return err_set(err, ERR_UNPROCESSABLE, 0, "image_invalid", "malformed digest");
    if (size >= 0 && (uint64_t)size > max)
        return err_set(err, ERR_UNPROCESSABLE, 0, "image_invalid",
                       "blob %.19s is larger than %zu bytes", digest, max);
    _cleanup_free_ char *path = xasprintf("%s/sha256/%s", blobs_dir, digest + 7);
    int fd _cleanup_close_ = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT)
        return err_set(err, ERR_UNPROCESSABLE, errno, "image_invalid", "blob %.19s is missing",
                       digest);
    if (fd < 0)
        return err_sys(err, "open blob %.19s", digest);
    _cleanup_free_ char *data = NULL;
    size_t n;
    if (read_fd(fd, max, &data, &n, "blob", err) < 0)
        return -1;
    if (size >= 0 && n != (size_t)size)
        return err_set(err, ERR_UNPROCESSABLE, 0, "image_invalid",
                       "blob %.19s has %zu bytes, its descriptor says %lld", digest, n,
                       (long long)size);
    char got[IMAGE_DIGEST_LEN];
    image_sha256_digest(data, n, got);
    if (strcmp(got, digest) != 0)
        return err_set(err, ERR_UNPROCESSABLE, 0, "image_invalid",
                       "blob %.19s does not match its digest", digest);
    *out = steal_pointer(&data);
    *len = n;
    return 0;
}

static int rm_rf_depth(int dirfd, const char *name, int depth);

/* Empty the directory fd (owned here), then the caller removes it. */
static int rm_dir_contents(int fd, int depth)
{
    DIR *d _cleanup_closedir_ = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    /* Deleting while iterating is allowed; rewind until a pass removes nothing new. */
    for (;;) {
        bool removed = false;
        errno = 0;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            if (rm_rf_depth(dirfd(d), e->d_name, depth + 1) < 0)
                rc = -1;
            else
                removed = true;
        }
        if (!removed || rc < 0)
            break;
        rewinddir(d);
    }
    return rc;
}

static int rm_rf_depth(int dirfd, const char *name, int depth)
{
    if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return -1;
    if (depth > RM_MAX_DEPTH) {
        errno = ELOOP;
        return -1;
    }
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    if (rm_dir_contents(fd, depth) < 0)
        return -1;
    if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        return -1;
    return 0;
}

int image_rm_rf_at(int dirfd, const char *name)
{
    return rm_rf_depth(dirfd, name, 0);
}

int image_rm_rf(const char *path)
{
    return image_rm_rf_at(AT_FDCWD, path);
}
