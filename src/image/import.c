/*
 * Imports: an OCI layout directory (oci:), an OCI archive (oci-archive:) or a
 * docker-archive tar (docker-archive:), copied by skopeo like a pull. The archive's own
 * index (index.json or manifest.json) is read first to choose the image when it holds
 * several and to name it when the caller gives no reference.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "image_internal.h"

enum source_kind { SRC_OCI_DIR, SRC_OCI_ARCHIVE, SRC_DOCKER_ARCHIVE };

/* What the archive says about itself. */
struct source {
    enum source_kind kind;
    char *index; /* index.json (OCI) or manifest.json (docker-archive) text */
    size_t index_len;
};

static int import_failed(err_t *err, const char *fmt, const char *arg)
{
    return err_set(err, ERR_UNPROCESSABLE, 0, "image_import_failed", fmt, arg);
}

/* Read the tar member being read by a into *out (at most IMAGE_MAX_INDEX_FILE bytes). */
static int read_member(struct archive *a, struct archive_entry *e, char **out, size_t *len,
                       err_t *err)
{
    la_int64_t size = archive_entry_size(e);
    if (size < 0 || size > IMAGE_MAX_INDEX_FILE)
        return import_failed(err, "%s is too large", archive_entry_pathname(e));
    free(*out);
    *out = xmalloc((size_t)size + 1);
    la_ssize_t n = archive_read_data(a, *out, (size_t)size);
    if (n != size)
        return import_failed(err, "cannot read %s", archive_entry_pathname(e));
    (*out)[size] = '\0';
    *len = (size_t)size;
    return 0;
}

/* Look inside a tar for manifest.json (docker-archive) or oci-layout + index.json. */
static int inspect_tar(const char *path, struct source *src, err_t *err)
{
    struct archive *a = archive_read_new();
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_zstd(a);
    archive_read_support_format_tar(a);
    int rc = 0;
    bool oci_layout = false;
    char *index = NULL, *manifest = NULL;
    size_t index_len = 0, manifest_len = 0;
    if (archive_read_open_filename(a, path, 1 << 16) != ARCHIVE_OK) {
        rc = import_failed(err, "not a readable tar archive: %s", archive_error_string(a));
        goto out;
    }
    struct archive_entry *e;
    while (rc == 0 && !manifest && !(oci_layout && index) &&
           archive_read_next_header(a, &e) == ARCHIVE_OK) {
        const char *name = archive_entry_pathname(e);
        while (name && strncmp(name, "./", 2) == 0)
            name += 2;
        if (!name || archive_entry_filetype(e) != AE_IFREG)
            continue;
        if (strcmp(name, "oci-layout") == 0)
            oci_layout = true;
        else if (strcmp(name, "index.json") == 0)
            rc = read_member(a, e, &index, &index_len, err);
        else if (strcmp(name, "manifest.json") == 0)
            rc = read_member(a, e, &manifest, &manifest_len, err);
    }
    if (rc == 0 && manifest) {
        src->kind = SRC_DOCKER_ARCHIVE;
        src->index = steal_pointer(&manifest);
        src->index_len = manifest_len;
    } else if (rc == 0 && oci_layout && index) {
        src->kind = SRC_OCI_ARCHIVE;
        src->index = steal_pointer(&index);
        src->index_len = index_len;
    } else if (rc == 0) {
        rc = import_failed(err, "%s", "neither an OCI archive nor a docker-archive tar");
    }
out:
    free(index);
    free(manifest);
    archive_read_free(a);
    return rc;
}

static int inspect(const char *path, struct source *src, err_t *err)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return err_set(err, ERR_INVALID, errno, "invalid_import_path", "cannot read %.300s: %s",
                       path, strerror(errno));
    if (S_ISREG(st.st_mode))
        return inspect_tar(path, src, err);
    if (!S_ISDIR(st.st_mode))
        return err_set(err, ERR_INVALID, 0, "invalid_import_path",
                       "%.300s is neither a directory nor a file", path);
    int fd _cleanup_close_ = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || faccessat(fd, "oci-layout", F_OK, 0) < 0)
        return import_failed(err, "%.300s is not an OCI layout (no oci-layout file)", path);
    src->kind = SRC_OCI_DIR;
    return image_file_read_at(fd, "index.json", IMAGE_MAX_INDEX_FILE, &src->index, &src->index_len,
                              err);
}

/* True if name normalises to want (or, with want NULL, always); norm gets the form. */
static bool same_ref(const char *name, const char *want, char *norm, size_t size)
{
    if (!name || !name[0] || image_ref_normalize(name, norm, size, NULL) < 0)
        return false;
    return !want || strcmp(norm, want) == 0;
}

/* A full reference in an OCI index entry's annotations (a bare tag is not one). */
static bool oci_entry_name(const struct image_desc *d, const char *want, char *norm, size_t size)
{
    if (same_ref(d->image_name, want, norm, size))
        return true;
    return strpbrk(d->ref_name, "/:") && same_ref(d->ref_name, want, norm, size);
}

/*
 * Choose the image of an OCI index: by reference when given (matching a full name, or the
 * tag against ref.name), else the only one. sel gets skopeo's ":<ref.name>" or "".
 */
static int choose_oci(const struct source *src, const char *want, const char *want_tag, char *name,
                      size_t nsize, char *sel, size_t ssize, err_t *err)
{
    struct image_manifest idx;
    if (image_manifest_parse(src->index, src->index_len, &idx, err) < 0)
        return err_prefix(err, "index.json");
    const struct image_desc *pick = NULL;
    char norm[512] = "";
    for (size_t i = 0; want && i < idx.n_manifests && !pick; i++) {
        const struct image_desc *d = &idx.manifests[i];
        if (oci_entry_name(d, want, norm, sizeof(norm)) ||
            (want_tag && strcmp(d->ref_name, want_tag) == 0))
            pick = d;
    }
    if (!pick && idx.n_manifests == 1)
        pick = &idx.manifests[0];
    int rc = 0;
    if (!pick) {
        rc = err_set(err, ERR_INVALID, 0, "image_ref_required",
                     "the layout holds %zu images: give the reference of one", idx.n_manifests);
    } else if (idx.n_manifests > 1 && !pick->ref_name[0]) {
        rc = import_failed(err, "%s", "the chosen image has no ref.name to select it by");
    } else {
        snprintf(sel, ssize, "%s%s", idx.n_manifests > 1 ? ":" : "",
                 idx.n_manifests > 1 ? pick->ref_name : "");
        if (oci_entry_name(pick, NULL, norm, sizeof(norm)))
            snprintf(name, nsize, "%s", norm);
    }
    image_manifest_clear(&idx);
    return rc;
}

/* Choose the image of a docker-archive manifest.json by one of its RepoTags. */
static int choose_docker(const struct source *src, const char *want, char *name, size_t nsize,
                         char *sel, size_t ssize, err_t *err)
{
    json_t *m _cleanup_json_ = json_loadb(src->index, src->index_len, 0, NULL);
    if (!json_is_array(m) || json_array_size(m) == 0 || json_array_size(m) > IMAGE_MAX_INDEX)
        return import_failed(err, "%s", "manifest.json is not a list of images");
    size_t n = json_array_size(m);
    char norm[512];
    for (size_t i = 0; i < n; i++) {
        json_t *tags = json_object_get(json_array_get(m, i), "RepoTags");
        for (size_t j = 0; j < json_array_size(tags); j++) {
            const char *t = json_string_value(json_array_get(tags, j));
            if ((want || n == 1) && same_ref(t, want, norm, sizeof(norm))) {
                snprintf(name, nsize, "%s", norm);
                if (n > 1)
                    snprintf(sel, ssize, ":%s", t);
                return 0;
            }
        }
    }
    if (n == 1)
        return 0;
    return err_set(err, ERR_INVALID, 0, "image_ref_required",
                   "the archive holds %zu images: give one of their tags", n);
}

int image_import(image_store_t *s, const char *path, const char *ref, image_t **out, err_t *err)
{
    if (!path || path[0] != '/' || strchr(path, ':'))
        return err_set(err, ERR_INVALID, 0, "invalid_import_path",
                       "the import path must be absolute and without ':'");
    struct image_ref r;
    char want[512] = "";
    if (ref && *ref &&
        (image_ref_parse(ref, &r, err) < 0 || image_ref_format(&r, want, sizeof(want), err) < 0))
        return -1;
    if (want[0] && r.digest[0]) /* a digest is the registry's promise; an archive has none */
        return err_set(err, ERR_INVALID, 0, "invalid_image_ref",
                       "import under a name and tag, not a digest");
    struct source src = {0};
    char name[512] = "", sel[300] = "";
    int rc = inspect(path, &src, err);
    if (rc == 0 && src.kind == SRC_DOCKER_ARCHIVE)
        rc = choose_docker(&src, want[0] ? want : NULL, name, sizeof(name), sel, sizeof(sel), err);
    else if (rc == 0)
        rc = choose_oci(&src, want[0] ? want : NULL, want[0] ? r.tag : NULL, name, sizeof(name),
                        sel, sizeof(sel), err);
    free(src.index);
    if (rc < 0)
        return -1;
    const char *target = want[0] ? want : name;
    if (!target[0])
        return err_set(err, ERR_INVALID, 0, "image_ref_required",
                       "the archive does not name its image: give a reference to import it as");
    static const char *const transports[] = {"oci", "oci-archive", "docker-archive"};
    _cleanup_free_ char *from = xasprintf("%s:%s%s", transports[src.kind], path, sel);
    char q[700];
    log_info("image.import", "ref=%s source=%s", target, log_quote(q, sizeof(q), from));
    struct image_fetch_opts fo = {.code = "image_import_failed"};
    if (image_fetch(s, &fo, from, target, err) < 0)
        return -1;
    return out ? image_get(s, target, out, err) : 0;
}
