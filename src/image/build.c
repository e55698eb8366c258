/*
 * Dockerfile builds with buildah. Every build runs as root on the daemon's host, so its RUN
 * steps are contained like a sandbox's processes, not in a chroot: isolation "oci" (runc,
 * with namespaces of their own) and no network unless the daemon allows it (then the host's).
 * buildah keeps its own storage under <root>/buildah; what a FROM line names is loaded there
 * from an OCI layout first (a template's), the result is pushed to an OCI layout and
 * imported into our store like any other image, and buildah's copies are removed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "image_internal.h"

#define BUILD_TIMEOUT_S 3600 /* one build */
#define STEP_TIMEOUT_S  600  /* one pull, push or removal */

static const char *buildah_path(void)
{
    static const char *const candidates[] = {"/usr/bin/buildah", "/usr/local/bin/buildah"};
    for (size_t i = 0; i < ARRAY_SIZE(candidates); i++)
        if (access(candidates[i], X_OK) == 0)
            return candidates[i];
    return candidates[0];
}

bool image_build_available(void)
{
    return access(buildah_path(), X_OK) == 0;
}

/* One build's buildah invocation: its storage and environment. */
struct buildah {
    char *root, *runroot, *home;
    const char *env[5];
};

static void buildah_init(image_store_t *s, struct buildah *b)
{
    b->root = xasprintf("%s/buildah/storage", s->root);
    b->runroot = xasprintf("%s/buildah/run", s->root);
    b->home = xasprintf("HOME=%s", s->home);
    b->env[0] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
    b->env[1] = b->home;
    b->env[2] = "LC_ALL=C.UTF-8";
    b->env[3] = "BUILDAH_ISOLATION=oci";
    b->env[4] = NULL;
}

static void buildah_free(struct buildah *b)
{
    free(b->root);
    free(b->runroot);
    free(b->home);
}

/* Run buildah with args (NULL-terminated) under our storage; output to fn (may be NULL). */
static int buildah_run(struct buildah *b, const char *const *args, unsigned timeout_s,
                       image_output_fn fn, void *ctx, char *reason, size_t rsize, err_t *err)
{
    const char *argv[48] = {buildah_path(), "--root",           b->root,  "--runroot",
                            b->runroot,     "--storage-driver", "overlay"};
    size_t n = 7;
    for (size_t i = 0; args[i] && n < ARRAY_SIZE(argv) - 1; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    struct image_proc_result res;
    int rc = fn ? image_proc_run_output(argv, b->env, timeout_s, fn, ctx, &res, err)
                : image_proc_run(argv, b->env, timeout_s, &res, err);
    if (rc < 0)
        return err_prefix(err, "buildah");
    image_proc_reason(res.err.data, b->root, reason, rsize);
    if (res.timed_out)
        snprintf(reason, rsize, "timed out after %u s", timeout_s);
    int status = res.status;
    image_proc_result_free(&res);
    return status;
}

/* Collects a child's stdout (an image ID). */
static void collect(void *ctx, const char *data, size_t len)
{
    buf_append(ctx, data, len);
}

/* Load the OCI layout dir into buildah's storage as localhost/<name>:latest (what FROM name
 * finds with pulls off). */
static int load_base(struct buildah *b, const char *name, const char *dir, err_t *err)
{
    _cleanup_free_ char *src = xasprintf("oci:%s", dir);
    buf_t id = {0};
    char reason[400];
    const char *pull[] = {"pull", "--quiet", src, NULL};
    int rc = buildah_run(b, pull, STEP_TIMEOUT_S, collect, &id, reason, sizeof(reason), err);
    char *nl = id.data ? strchr(id.data, '\n') : NULL;
    if (nl)
        *nl = '\0';
    if (rc == 0 && id.len) {
        _cleanup_free_ char *tag1 = xasprintf("localhost/%s:latest", name);
        _cleanup_free_ char *tag2 = xasprintf("docker.io/library/%s:latest", name);
        const char *tag[] = {"tag", id.data, tag1, tag2, NULL};
        rc = buildah_run(b, tag, STEP_TIMEOUT_S, NULL, NULL, reason, sizeof(reason), err);
    }
    buf_free(&id);
    if (rc > 0)
        return err_set(err, ERR_INTERNAL, 0, "template_build_failed",
                       "could not load the base image %s: %s", name, reason);
    return rc < 0 ? -1 : 0;
}

/* The build itself, its output to fn. */
static int bud(struct buildah *b, const struct image_build_req *q, const char *tag,
               image_output_fn fn, void *ctx, err_t *err)
{
    _cleanup_free_ char *file = xasprintf("%s/Dockerfile", q->context_dir);
    const char *args[] = {"bud",
                          "--isolation",
                          "oci",
                          "--network",
                          q->network ? "host" : "none",
                          "--layers=false",
                          "--pull=never",
                          "--format",
                          "oci",
                          "--no-cache",
                          "--force-rm",
                          "-f",
                          file,
                          "-t",
                          tag,
                          q->context_dir,
                          NULL};
    char reason[400];
    int rc = buildah_run(b, args, BUILD_TIMEOUT_S, fn, ctx, reason, sizeof(reason), err);
    if (rc > 0)
        return err_set(err, ERR_UNPROCESSABLE, 0, "template_build_failed", "the build failed: %s",
                       reason);
    return rc < 0 ? -1 : 0;
}

static int push(struct buildah *b, const char *tag, const char *layout, err_t *err)
{
    _cleanup_free_ char *dest = xasprintf("oci:%s:latest", layout);
    const char *args[] = {"push", "--quiet", tag, dest, NULL};
    char reason[400];
    int rc = buildah_run(b, args, STEP_TIMEOUT_S, NULL, NULL, reason, sizeof(reason), err);
    if (rc > 0)
        return err_set(err, ERR_INTERNAL, 0, "template_build_failed",
                       "could not export the built image: %s", reason);
    return rc < 0 ? -1 : 0;
}

/* Remove what this build left in buildah's storage (its image, its bases' tags and any
 * working container), so a build leaks nothing; layers shared with a base stay cached. */
static void cleanup(struct buildah *b, const char *tag, const struct image_build_req *q)
{
    char reason[400];
    const char *rmi[] = {"rmi", "--force", tag, NULL};
    buildah_run(b, rmi, STEP_TIMEOUT_S, NULL, NULL, reason, sizeof(reason), NULL);
    const char *rm[] = {"rm", "--all", NULL};
    buildah_run(b, rm, STEP_TIMEOUT_S, NULL, NULL, reason, sizeof(reason), NULL);
    for (size_t i = 0; q->bases && q->bases[i] && q->bases[i + 1]; i += 2) {
        _cleanup_free_ char *t1 = xasprintf("localhost/%s:latest", q->bases[i]);
        _cleanup_free_ char *t2 = xasprintf("docker.io/library/%s:latest", q->bases[i]);
        const char *untag[] = {"rmi", "--force", t1, t2, NULL};
        buildah_run(b, untag, STEP_TIMEOUT_S, NULL, NULL, reason, sizeof(reason), NULL);
    }
}

int image_build(image_store_t *s, const struct image_build_req *q, image_output_fn fn, void *ctx,
                image_t **out, err_t *err)
{
    if (!image_build_available())
        return err_set(err, ERR_INVALID, 0, "unsupported",
                       "Dockerfile builds need buildah on the daemon's host (scripts/setup "
                       "installs it)");
    char hex[17];
    unsigned char rnd[8];
    if (!random_bytes(rnd, sizeof(rnd)))
        return err_set(err, ERR_INTERNAL, 0, "internal", "no randomness");
    hex_encode(rnd, sizeof(rnd), hex);
    _cleanup_free_ char *tag = xasprintf("localhost/sandboxer-build-%s:latest", hex);
    struct buildah b;
    buildah_init(s, &b);
    int rc = 0;
    for (size_t i = 0; rc == 0 && q->bases && q->bases[i] && q->bases[i + 1]; i += 2)
        rc = load_base(&b, q->bases[i], q->bases[i + 1], err);
    if (rc == 0)
        rc = bud(&b, q, tag, fn, ctx, err);
    if (rc == 0)
        rc = push(&b, tag, q->layout, err);
    cleanup(&b, tag, q);
    buildah_free(&b);
    if (rc == 0)
        rc = image_import(s, q->layout, q->ref, out, err);
    return rc;
}
