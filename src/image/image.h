/*
 * The image store: references, pulls (skopeo), imports, layer unpacking, GC.
 *
 * On disk under root (<state-dir>/images):
 *   blobs/sha256/<hex>     every manifest, config and layer blob, shared by all images
 *   layers/<hex>/diff/     one unpacked layer per diff_id: an overlayfs lower dir
 *   layers/<hex>/size      its uncompressed size in bytes
 *   tmp/                   skopeo's per-pull OCI layouts (index.json only), emptied on open
 * The SQLite table `images` maps each normalised reference to its manifest digest,
 * config and diff_ids.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "store/store.h"

typedef struct image_store image_store_t;

/* How to open the store. Strings are copied. */
struct image_opts {
    const char *root;            /* <state-dir>/images; absolute, no ':' */
    const char *registry_mirror; /* "https://host[:port]" (or http:// on loopback) or NULL */
    const char *const *insecure_registries; /* "host[:port]" pulled without TLS checks */
    size_t n_insecure;
    const char *self_exe;                /* runs internal-unpack-layer; NULL = /proc/self/exe */
    const char *const *allow_registries; /* "host[:port]" non-admins may pull from (the mirror
                                            is allowed in any case); NULL: docker.io */
    size_t n_allow;
};

/* An image present locally. */
typedef struct image {
    char ref[512];     /* normalised: docker.io/library/busybox:latest */
    char digest[80];   /* the stored manifest's digest, sha256:... */
    json_t *config;    /* the image config's "config": Entrypoint, Cmd, Env, WorkingDir,
                          User, ExposedPorts (absent keys absent; never NULL) */
    char **layer_dirs; /* absolute overlayfs lower dirs, bottom first */
    size_t n_layers;
    uint64_t size;     /* uncompressed bytes of all layers */
    double created_at; /* the config's "created", else when first recorded */
    double pulled_at;  /* when last pulled or imported */
} image_t;

/* What one GC run removed. */
struct image_gc_stats {
    size_t blobs_removed;
    size_t layers_removed;
};

/* Open (creating) the store under o->root over the database store; NULL with err set. */
image_store_t *image_store_open(const struct image_opts *o, store_t *store, err_t *err);
/* Close the store; no operation may be running. */
void image_store_close(image_store_t *s);

/* Normalise a reference as Docker does into out; ERR_INVALID "invalid_image_ref" if bad. */
int image_ref_normalize(const char *in, char *out, size_t size, err_t *err);

/* The image ref if present locally (all its layers unpacked), else ERR_NOT_FOUND. */
int image_get(image_store_t *s, const char *ref, image_t **out, err_t *err);
/*
 * Like image_get, pulling ref first if it is missing. Who pulls decides from where: a
 * non-admin only from the allowed registries (ERR_FORBIDDEN "registry_not_allowed"), and
 * anyone from loopback, private or local addresses only through the mirror or an insecure
 * registry (ERR_FORBIDDEN "registry_address_refused"); other registries are reached through
 * the filtering proxy of pullnet.c, redirects included.
 */
int image_ensure_for(image_store_t *s, const char *ref, bool admin, image_t **out, err_t *err);
/* Pull ref from its registry (or the mirror) even if present, as image_ensure_for says. */
int image_pull_for(image_store_t *s, const char *ref, bool admin, image_t **out, err_t *err);
/* image_ensure_for / image_pull_for for an admin. */
int image_ensure(image_store_t *s, const char *ref, image_t **out, err_t *err);
int image_pull(image_store_t *s, const char *ref, image_t **out, err_t *err);
/*
 * Import an OCI layout directory, an OCI archive or a docker-archive tar at path (absolute)
 * under ref; ref NULL takes the name recorded in the archive. out may be NULL.
 */
int image_import(image_store_t *s, const char *path, const char *ref, image_t **out, err_t *err);
/* A JSON array of {ref, digest, size, created_at, pulled_at}, sorted by ref. */
int image_list(image_store_t *s, json_t **out, err_t *err);
/* Forget ref (ERR_NOT_FOUND if unknown); its files go at the next image_gc. */
int image_remove(image_store_t *s, const char *ref, err_t *err);
/*
 * Remove blobs and unpacked layers that no recorded image references, except the layer
 * dirs in keep (lower dirs still mounted by sandboxes). Waits for running pulls.
 */
int image_gc(image_store_t *s, const char *const *keep, size_t n_keep, struct image_gc_stats *stats,
             err_t *err);
/* A piece of a child's output (a build's log), as it comes. */
typedef void (*image_output_fn)(void *ctx, const char *data, size_t len);

/* A Dockerfile build (buildah). */
struct image_build_req {
    const char *context_dir;  /* absolute: the build context, with the Dockerfile at its top */
    const char *ref;          /* the reference the result is stored under */
    const char *const *bases; /* name, OCI layout dir, name, dir, ..., NULL: what FROM name
                                 means (loaded into buildah's storage before the build) */
    bool network;             /* RUN steps share the host's network; else they have none */
    const char *layout;       /* where the result is kept as an OCI layout too (FROM it) */
};

/* True if buildah is installed. */
bool image_build_available(void);
/*
 * Build q->context_dir/Dockerfile with buildah (isolation oci) and store the result under
 * q->ref; the build's output goes to fn as it comes. A failing step → ERR_UNPROCESSABLE
 * "template_build_failed" with the last line of the output. out may be NULL.
 */
int image_build(image_store_t *s, const struct image_build_req *q, image_output_fn fn, void *ctx,
                image_t **out, err_t *err);

/* Free an image (NULL is fine). */
void image_free(image_t *img);

/* `sandboxer internal-unpack-layer BLOB DESTDIR DIFFID [BLOBDIGEST]` (argv[0] is the verb). */
int image_unpack_main(int argc, char **argv);
