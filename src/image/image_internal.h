/* Shared by the image store's own files and its tests; never included above src/image/. */
#pragma once

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"
#include "image.h"

/* Bounds on untrusted image metadata. */
#define IMAGE_MAX_MANIFEST     (4u << 20) /* manifest or index blob */
#define IMAGE_MAX_CONFIG       (4u << 20) /* image config blob */
#define IMAGE_MAX_INDEX_FILE   (1u << 20) /* index.json / manifest.json of a layout or archive */
#define IMAGE_MAX_LAYERS       128
#define IMAGE_MAX_INDEX        1024         /* entries of an index */
#define IMAGE_MAX_BLOB_SIZE    (1ull << 40) /* any descriptor's size */
#define IMAGE_PULL_TIMEOUT_S   600          /* one skopeo copy */
#define IMAGE_UNPACK_TIMEOUT_S 1800         /* one layer unpack */
#define IMAGE_STDERR_MAX       (64u << 10)  /* kept of a child's stderr */

/* "sha256:" + 64 lowercase hex + NUL. */
#define IMAGE_DIGEST_LEN 72

/* Go's name for the host architecture, as OCI platforms spell it. */
#if defined(__x86_64__)
#define IMAGE_HOST_ARCH "amd64"
#elif defined(__aarch64__)
#define IMAGE_HOST_ARCH "arm64"
#elif defined(__i386__)
#define IMAGE_HOST_ARCH "386"
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define IMAGE_HOST_ARCH "ppc64le"
#elif defined(__s390x__)
#define IMAGE_HOST_ARCH "s390x"
#elif defined(__riscv) && __riscv_xlen == 64
#define IMAGE_HOST_ARCH "riscv64"
#else
#error "unknown host architecture: add its OCI name"
#endif

/* ---- references (ref.c) ---- */

/* A parsed, normalised reference: domain/path[:tag][@digest]. */
struct image_ref {
    char domain[256];              /* "docker.io", "registry:5000", "[::1]:5000" */
    char path[256];                /* "library/busybox" */
    char tag[129];                 /* "" when absent (and a digest is given) */
    char digest[IMAGE_DIGEST_LEN]; /* "" or "sha256:<hex>" */
};

/* Parse and normalise in as Docker does; ERR_INVALID "invalid_image_ref" if malformed. */
int image_ref_parse(const char *in, struct image_ref *ref, err_t *err);
/* Write ref's canonical form into out; ERR_INVALID if it does not fit. */
int image_ref_format(const struct image_ref *ref, char *out, size_t size, err_t *err);
/* True if s is "sha256:" followed by exactly 64 lowercase hex digits. */
bool image_digest_valid(const char *s);
/* True if s is a registry host[:port] as the reference grammar allows. */
bool image_domain_valid(const char *s, size_t len);

/* ---- manifests, indexes and configs (manifest.c) ---- */

/* One OCI/Docker descriptor, with the platform and names of index entries. */
struct image_desc {
    char media_type[128];
    char digest[IMAGE_DIGEST_LEN];
    int64_t size;
    char os[32], arch[32], variant[32];
    char ref_name[256];   /* annotation org.opencontainers.image.ref.name, or "" */
    char image_name[256]; /* annotation io.containerd.image.name, or "" */
};

enum image_manifest_kind { IMAGE_MANIFEST, IMAGE_INDEX };

/* A parsed manifest (config + layers) or index (manifests). */
struct image_manifest {
    enum image_manifest_kind kind;
    struct image_desc config;
    struct image_desc *layers;
    size_t n_layers;
    struct image_desc *manifests;
    size_t n_manifests;
};

/* Compression of a layer blob, from its media type. */
enum image_layer_compression { LAYER_TAR, LAYER_GZIP, LAYER_ZSTD };

/*
 * Parse an OCI image manifest or index, or a Docker schema2 manifest or manifest list.
 * Untrusted: sizes, digests, counts and media types are checked; anything else →
 * ERR_UNPROCESSABLE "image_invalid" (or "image_unsupported" for foreign media types).
 */
int image_manifest_parse(const char *data, size_t len, struct image_manifest *m, err_t *err);
/* Free what image_manifest_parse allocated. */
void image_manifest_clear(struct image_manifest *m);
/* The index entry for os/arch (variant may be NULL); ERR_UNPROCESSABLE if none. */
const struct image_desc *image_index_select(const struct image_manifest *m, const char *os,
                                            const char *arch, const char *variant, err_t *err);
/* The compression a layer media type implies; false if it is not a layer type we unpack. */
bool image_layer_compression(const char *media_type, enum image_layer_compression *out);

/* A parsed image config: the runtime subset, validated, and rootfs.diff_ids. */
struct image_config {
    json_t *config; /* new object: Entrypoint, Cmd, Env, WorkingDir, User, ExposedPorts */
    char (*diff_ids)[IMAGE_DIGEST_LEN];
    size_t n_diff_ids;
    double created; /* Unix seconds, 0 if absent */
    char os[32], arch[32];
};

/* Parse an image config (untrusted); ERR_UNPROCESSABLE "image_invalid" if malformed. */
int image_config_parse(const char *data, size_t len, struct image_config *c, err_t *err);
/* Free what image_config_parse allocated. */
void image_config_clear(struct image_config *c);
/* Parse an RFC 3339 time ("2024-01-02T03:04:05.5Z", offsets too); false if malformed. */
bool image_parse_time(const char *s, double *out);

/* ---- blobs and files (blob.c) ---- */

/* sha256 of n bytes as "sha256:<hex>" into out (IMAGE_DIGEST_LEN bytes). */
void image_sha256_digest(const void *data, size_t n, char out[IMAGE_DIGEST_LEN]);
/*
 * Read blob digest from blobs_dir/sha256/<hex>: at most max bytes, exactly size bytes when
 * size >= 0, and its sha256 must equal digest. *out is malloc'd and NUL-terminated.
 */
int image_blob_read(const char *blobs_dir, const char *digest, int64_t size, size_t max, char **out,
                    size_t *len, err_t *err);
/* Read a whole small file (at most max bytes) relative to dirfd, without following links. */
int image_file_read_at(int dirfd, const char *path, size_t max, char **out, size_t *len,
                       err_t *err);
/* Remove path under dirfd recursively without following symlinks; 0 if it is gone. */
int image_rm_rf_at(int dirfd, const char *name);
/* Remove path recursively (absolute), without following symlinks; 0 if it is gone. */
int image_rm_rf(const char *path);

/* ---- child processes (proc.c) ---- */

/* The outcome of a child process. */
struct image_proc_result {
    int status;     /* exit code, or 128 + signal */
    bool timed_out; /* killed after the timeout */
    buf_t err;      /* the tail of its stderr, at most IMAGE_STDERR_MAX bytes */
};

/*
 * Run argv[0] (an absolute path) with exactly envp, stdin and stdout on /dev/null and
 * stderr captured, in its own process group, killing the group after timeout_s.
 * Returns 0 when the child ran (check res->status), -1 if it could not be started.
 */
int image_proc_run(const char *const *argv, const char *const *envp, unsigned timeout_s,
                   struct image_proc_result *res, err_t *err);
/*
 * Like image_proc_run with stdout and stderr both on one pipe, each piece of it handed to fn
 * as it comes (res->err keeps the tail of both).
 */
int image_proc_run_output(const char *const *argv, const char *const *envp, unsigned timeout_s,
                          image_output_fn fn, void *ctx, struct image_proc_result *res, err_t *err);
/* Free a result's buffers. */
void image_proc_result_free(struct image_proc_result *res);
/*
 * A child's stderr made into one short sentence for a client: skopeo's msg="..." unquoted,
 * its last line only, every occurrence of hide (a host path) replaced with "…".
 */
void image_proc_reason(const char *stderr_text, const char *hide, char *out, size_t size);

/* ---- layers (layer.c, unpack.c) ---- */

/* Exit codes of internal-unpack-layer. */
enum { UNPACK_OK = 0, UNPACK_EHOST = 1, UNPACK_EBADLAYER = 2, UNPACK_EUSAGE = 3 };

/*
 * Run `self_exe internal-unpack-layer blob dest diff_id blob_digest` and wait for it.
 * A bad layer → ERR_UNPROCESSABLE "image_layer_invalid"; host trouble → ERR_INTERNAL.
 */
int image_layer_unpack(const char *self_exe, const char *blob, const char *dest,
                       const char *diff_id, const char *blob_digest, const char *hide, err_t *err);
/* The unpacked size recorded in layer dir dir (<root>/layers/<hex>); false if unreadable. */
bool image_layer_size(const char *dir, uint64_t *out);

/* ---- the store (image_store.c, pull.c, gc.c) ---- */

/* One in-flight operation that others with the same key wait for instead of repeating. */
struct image_flight {
    char *key;
    int refs;
    bool done;
    int rc;
    err_t err;
    struct image_flight *next;
};

struct image_store {
    char *root, *blobs, *layers, *tmp, *policy, *home;
    char *mirror_host; /* host[:port] that replaces docker.io, or NULL */
    bool mirror_plain; /* the mirror is plain HTTP (loopback only) */
    char **insecure;
    size_t n_insecure;
    char **allow; /* registries non-admins may pull from (docker.io and the mirror always) */
    size_t n_allow;
    struct image_pullnet *pullnet; /* made at the first pull from another registry */
    bool pullnet_failed;
    char *self_exe;
    store_t *db;
    pthread_mutex_t mu; /* guards flights */
    pthread_cond_t cv;
    struct image_flight *flights;
    /* Pulls, imports and unpacks hold it shared; the GC holds it exclusively. */
    pthread_rwlock_t gc_lock;
    unsigned long n_fetches; /* skopeo copies run (tests check that work is not repeated) */
    unsigned long n_unpacks; /* layers unpacked */
};

/*
 * Join the operation on key: returns with *leader true when the caller must do the work
 * and call image_flight_finish, or after the leader finished, with its outcome in rc/err.
 */
int image_flight_run(image_store_t *s, const char *key, bool *leader, err_t *err);
/* Publish the leader's outcome to the waiters and end the flight. */
void image_flight_finish(image_store_t *s, const char *key, int rc, const err_t *err);

/* The unpacked directory of layer diff_id: <root>/layers/<hex>. malloc'd. */
char *image_layer_dir(image_store_t *s, const char *diff_id);
/* Make sure layer diff_id is unpacked from blob blob_digest (once, however many ask). */
int image_layer_ensure(image_store_t *s, const char *blob_digest, const char *diff_id, err_t *err);
/*
 * Read the single image of an OCI layout at dir (written by skopeo into the shared blob
 * dir), verify it, unpack its layers and record it under ref.
 */
int image_ingest_layout(image_store_t *s, const char *dir, const char *ref, err_t *err);
/* How one skopeo copy runs. */
struct image_fetch_opts {
    const char *code;          /* the error code of a failure */
    bool tls_off;              /* --src-tls-verify=false */
    bool from_registry;        /* a pull: failures say ours, not the registry's words */
    struct image_pullnet *via; /* run in the pulls' namespace, through its proxy (or NULL) */
};
/* Copy src (a skopeo transport:reference) into the store under ref. */
int image_fetch(image_store_t *s, const struct image_fetch_opts *fo, const char *src,
                const char *ref, err_t *err);

/* ---- pulls from registries other than the mirror (pullnet.c) ---- */

#define IMAGE_NSENTER "/usr/bin/nsenter" /* runs skopeo in the pulls' namespace */

struct addrinfo;
struct sockaddr;
/* True if a pull may connect to sa: not loopback, private, link-local, multicast, reserved
 * or one of this host's own addresses. */
bool image_addr_public(const struct sockaddr *sa);
/* Resolve host:port; ERR_FORBIDDEN "registry_address_refused" unless every address it has is
 * public (image_addr_public), ERR_UNPROCESSABLE if it does not resolve. */
int image_resolve_public(const char *host, const char *port, struct addrinfo **out, err_t *err);
/* A network namespace with loopback only, and a filtering CONNECT proxy listening in it. */
struct image_pullnet *image_pullnet_open(err_t *err);
void image_pullnet_close(struct image_pullnet *pn);
/* The namespace as a path nsenter takes (this process's fd), and the proxy's URL (with its
 * secret). malloc'd. */
char *image_pullnet_ns_path(const struct image_pullnet *pn);
char *image_pullnet_proxy_url(const struct image_pullnet *pn);
