/*
 * The image store's handle and its public operations: open (directories, options,
 * crash cleanup), get/ensure/pull with one pull per reference at a time, list, remove.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "image_internal.h"
#include "store/store_images.h"

/* skopeo checks signatures against a policy; ours accepts what the registry serves. */
static const char policy_json[] = "{\"default\": [{\"type\": \"insecureAcceptAnything\"}]}\n";

/* ---- flights: concurrent requests for the same work wait for one leader ---- */

static struct image_flight *flight_find(image_store_t *s, const char *key)
{
    for (struct image_flight *f = s->flights; f; f = f->next)
        if (strcmp(f->key, key) == 0)
            return f;
    return NULL;
}

static void flight_unref(struct image_flight *f)
{
    if (--f->refs == 0) {
        free(f->key);
        free(f);
    }
}

int image_flight_run(image_store_t *s, const char *key, bool *leader, err_t *err)
{
    pthread_mutex_lock(&s->mu);
    struct image_flight *f = flight_find(s, key);
    if (!f) {
        f = xcalloc(1, sizeof(*f));
        f->key = xstrdup(key);
        f->refs = 1;
        f->next = s->flights;
        s->flights = f;
        *leader = true;
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    *leader = false;
    f->refs++;
    while (!f->done)
        pthread_cond_wait(&s->cv, &s->mu);
    int rc = f->rc;
    if (rc < 0 && err)
        *err = f->err;
    flight_unref(f);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void image_flight_finish(image_store_t *s, const char *key, int rc, const err_t *err)
{
    pthread_mutex_lock(&s->mu);
    struct image_flight **pp = &s->flights;
    while (*pp && strcmp((*pp)->key, key) != 0)
        pp = &(*pp)->next;
    struct image_flight *f = *pp;
    if (f) {
        *pp = f->next;
        f->done = true;
        f->rc = rc;
        if (rc < 0 && err)
            f->err = *err;
        flight_unref(f);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---- open / close ---- */

static bool host_is_loopback(const char *host)
{
    char h[256];
    snprintf(h, sizeof(h), "%s", host);
    if (h[0] == '[') {
        char *close = strchr(h, ']');
        return close && close - h == 4 && strncmp(h, "[::1]", 5) == 0;
    }
    char *colon = strchr(h, ':');
    if (colon)
        *colon = '\0';
    struct in_addr a;
    if (strcmp(h, "localhost") == 0)
        return true;
    return inet_pton(AF_INET, h, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

/* "https://host[:port]" or, on loopback only, "http://host[:port]"; a trailing '/' is ok. */
static int parse_mirror(image_store_t *s, const char *url, err_t *err)
{
    if (!url || !*url)
        return 0;
    bool plain = strncmp(url, "http://", 7) == 0;
    if (!plain && strncmp(url, "https://", 8) != 0)
        return err_set(err, ERR_INVALID, 0, "invalid_option",
                       "registry mirror '%.200s' must be an http:// or https:// URL", url);
    const char *host = url + (plain ? 7 : 8);
    size_t len = strlen(host);
    if (len && host[len - 1] == '/')
        len--;
    if (!image_domain_valid(host, len))
        return err_set(err, ERR_INVALID, 0, "invalid_option",
                       "registry mirror '%.200s' must be scheme://host[:port] with no path", url);
    s->mirror_host = xstrndup(host, len);
    s->mirror_plain = plain;
    if (plain && !host_is_loopback(s->mirror_host))
        return err_set(err, ERR_INVALID, 0, "invalid_option",
                       "a plain-HTTP registry mirror must be on loopback, not %.200s",
                       s->mirror_host);
    return 0;
}

static int parse_insecure(image_store_t *s, const struct image_opts *o, err_t *err)
{
    s->insecure = xcalloc(o->n_insecure + 1, sizeof(*s->insecure));
    for (size_t i = 0; i < o->n_insecure; i++) {
        const char *h = o->insecure_registries[i];
        if (!h || !image_domain_valid(h, strlen(h)))
            return err_set(err, ERR_INVALID, 0, "invalid_option",
                           "insecure registry '%.200s' must be host[:port]", h ? h : "");
        s->insecure[s->n_insecure++] = xstrdup(h);
    }
    return 0;
}

static int parse_allow(image_store_t *s, const struct image_opts *o, err_t *err)
{
    s->allow = xcalloc(o->n_allow + 2, sizeof(*s->allow));
    for (size_t i = 0; i < o->n_allow; i++) {
        const char *h = o->allow_registries[i];
        if (!h || !image_domain_valid(h, strlen(h)))
            return err_set(err, ERR_INVALID, 0, "invalid_option",
                           "allowed registry '%.200s' must be host[:port]", h ? h : "");
        s->allow[s->n_allow++] = xstrdup(strcmp(h, "index.docker.io") == 0 ? "docker.io" : h);
    }
    if (!o->allow_registries)
        s->allow[s->n_allow++] = xstrdup("docker.io");
    return 0;
}

static int write_file(const char *path, const char *text, err_t *err)
{
    _cleanup_free_ char *tmp = xasprintf("%s.new", path);
    int fd _cleanup_close_ = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    size_t n = strlen(text);
    if (fd < 0 || write(fd, text, n) != (ssize_t)n || fsync(fd) < 0 || rename(tmp, path) < 0)
        return err_sys(err, "write %s", path);
    return 0;
}

/* Leftovers of a previous run: per-pull layouts and half-unpacked layers. */
static void clean_leftovers(image_store_t *s)
{
    const char *dirs[] = {s->tmp, s->layers};
    for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
        int fd _cleanup_close_ = open(dirs[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d _cleanup_closedir_ = fd >= 0 ? fdopendir(fcntl(fd, F_DUPFD_CLOEXEC, 0)) : NULL;
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            if (i == 0 || strncmp(e->d_name, ".tmp-", 5) == 0) {
                if (image_rm_rf_at(fd, e->d_name) < 0)
                    log_warn("image.cleanup_failed", "name=%s errno=%d", e->d_name, errno);
            }
        }
    }
}

static int make_dirs(image_store_t *s, err_t *err)
{
    const char *dirs[] = {s->root, s->blobs, s->layers, s->tmp, s->home};
    for (size_t i = 0; i < ARRAY_SIZE(dirs); i++)
        if (!mkdir_p(dirs[i], 0700))
            return err_sys(err, "create %s", dirs[i]);
    _cleanup_free_ char *sha = xasprintf("%s/sha256", s->blobs);
    if (!mkdir_p(sha, 0700))
        return err_sys(err, "create %s", sha);
    return 0;
}

image_store_t *image_store_open(const struct image_opts *o, store_t *store, err_t *err)
{
    if (!o->root || o->root[0] != '/' || strchr(o->root, ':')) {
        err_set(err, ERR_INVALID, 0, "invalid_option",
                "the image root must be an absolute path without ':'");
        return NULL;
    }
    image_store_t *s = xcalloc(1, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    /* The GC must not starve behind a stream of pulls. */
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&s->gc_lock, &ra);
    pthread_rwlockattr_destroy(&ra);
    s->db = store;
    s->root = xstrdup(o->root);
    s->blobs = xasprintf("%s/blobs", o->root);
    s->layers = xasprintf("%s/layers", o->root);
    s->tmp = xasprintf("%s/tmp", o->root);
    s->home = xasprintf("%s/home", o->root);
    s->policy = xasprintf("%s/policy.json", o->root);
    s->self_exe = xstrdup(o->self_exe ? o->self_exe : "/proc/self/exe");
    if (parse_mirror(s, o->registry_mirror, err) < 0 || parse_insecure(s, o, err) < 0 ||
        parse_allow(s, o, err) < 0 || make_dirs(s, err) < 0 ||
        write_file(s->policy, policy_json, err) < 0) {
        image_store_close(s);
        return NULL;
    }
    clean_leftovers(s);
    log_info("image.store_open", "root=%s mirror=%s insecure=%zu allowed=%zu", s->root,
             s->mirror_host ? s->mirror_host : "none", s->n_insecure, s->n_allow);
    return s;
}

void image_store_close(image_store_t *s)
{
    if (!s)
        return;
    image_pullnet_close(s->pullnet);
    for (size_t i = 0; i < s->n_insecure; i++)
        free(s->insecure[i]);
    free(s->insecure);
    for (size_t i = 0; i < s->n_allow; i++)
        free(s->allow[i]);
    free(s->allow);
    free(s->root);
    free(s->blobs);
    free(s->layers);
    free(s->tmp);
    free(s->home);
    free(s->policy);
    free(s->self_exe);
    free(s->mirror_host);
    pthread_rwlock_destroy(&s->gc_lock);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ---- get / ensure / pull ---- */

void image_free(image_t *img)
{
    if (!img)
        return;
    for (size_t i = 0; i < img->n_layers; i++)
        free(img->layer_dirs[i]);
    free(img->layer_dirs);
    if (img->config)
        json_decref(img->config);
    free(img);
}

static void cleanup_imagep(image_t **p)
{
    image_free(*p);
}
#define _cleanup_image_ __attribute__((cleanup(cleanup_imagep)))

/* Fill img's layer dirs from the row's diff_ids; ERR_NOT_FOUND if one is not unpacked. */
static int fill_layers(image_store_t *s, const store_image_t *row, image_t *img, err_t *err)
{
    json_t *ids _cleanup_json_ = json_loads(row->layers, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_array(ids) || json_array_size(ids) > IMAGE_MAX_LAYERS)
        return err_set(err, ERR_INTERNAL, 0, "image_corrupt", "image %s: bad layer list", row->ref);
    img->layer_dirs = xcalloc(json_array_size(ids) + 1, sizeof(char *));
    for (size_t i = 0; i < json_array_size(ids); i++) {
        const char *id = json_string_value(json_array_get(ids, i));
        if (!id || !image_digest_valid(id))
            return err_set(err, ERR_INTERNAL, 0, "image_corrupt", "image %s: bad diff_id",
                           row->ref);
        _cleanup_free_ char *dir = image_layer_dir(s, id);
        img->layer_dirs[img->n_layers++] = xasprintf("%s/diff", dir);
        struct stat st;
        if (lstat(img->layer_dirs[i], &st) < 0 || !S_ISDIR(st.st_mode)) {
            log_warn("image.layer_missing", "ref=%s diff_id=%.19s", row->ref, id);
            return err_set(err, ERR_NOT_FOUND, 0, "image_not_found",
                           "image %.400s is incomplete locally", row->ref);
        }
    }
    return 0;
}

static int image_from_row(image_store_t *s, const store_image_t *row, image_t **out, err_t *err)
{
    image_t *img _cleanup_image_ = xcalloc(1, sizeof(*img));
    snprintf(img->ref, sizeof(img->ref), "%s", row->ref);
    snprintf(img->digest, sizeof(img->digest), "%s", row->digest);
    img->size = row->size;
    img->created_at = row->created_at;
    img->pulled_at = row->pulled_at;
    struct image_config c;
    if (image_config_parse(row->config, strlen(row->config), &c, err) < 0)
        return err_prefix(err, "stored image %s", row->ref);
    img->config = steal_pointer(&c.config);
    image_config_clear(&c);
    if (fill_layers(s, row, img, err) < 0)
        return -1;
    *out = steal_pointer(&img);
    return 0;
}

/* image_get on an already normalised reference. */
static int get_normalized(image_store_t *s, const char *norm, image_t **out, err_t *err)
{
    store_image_t row;
    if (store_image_get(s->db, norm, &row, err) < 0)
        return -1;
    int rc = image_from_row(s, &row, out, err);
    store_image_clear(&row);
    return rc;
}

int image_get(image_store_t *s, const char *ref, image_t **out, err_t *err)
{
    char norm[512];
    if (image_ref_normalize(ref, norm, sizeof(norm), err) < 0)
        return -1;
    return get_normalized(s, norm, out, err);
}

static bool in_list(char *const *list, size_t n, const char *host)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(list[i], host) == 0)
            return true;
    return false;
}

/* The pulls' namespace and proxy, made once, at the first pull that needs them. */
static struct image_pullnet *pullnet(image_store_t *s, err_t *err)
{
    pthread_mutex_lock(&s->mu);
    if (!s->pullnet && !s->pullnet_failed) {
        err_t e = {0};
        s->pullnet = image_pullnet_open(&e);
        s->pullnet_failed = !s->pullnet;
        if (!s->pullnet)
            log_error("image.pull_proxy_failed", "msg=\"%s\"", e.msg);
    }
    struct image_pullnet *pn = s->pullnet;
    pthread_mutex_unlock(&s->mu);
    if (!pn)
        err_set(err, ERR_UNAVAILABLE, 0, "pulls_unavailable",
                "pulls from registries other than the mirror need the daemon's pull proxy, "
                "which could not start (see its log)");
    return pn;
}

/* host[:port] → host (no brackets) and port ("443" when none). */
static void split_host(const char *domain, char *host, size_t hsize, char *port, size_t psize)
{
    const char *colon = domain[0] == '[' ? strstr(domain, "]:") : strrchr(domain, ':');
    const char *h = domain[0] == '[' ? domain + 1 : domain;
    size_t hlen = colon ? (size_t)(colon - h) : strlen(h);
    if (domain[0] == '[' && !colon)
        hlen = strcspn(h, "]");
    snprintf(host, hsize, "%.*s", (int)hlen, h);
    snprintf(port, psize, "%s", colon ? colon + (domain[0] == '[' ? 2 : 1) : "443");
}

/*
 * How ref may be pulled, by whom: *trusted for the mirror and the insecure registries (pulled
 * directly, wherever they are); otherwise the registry must be allowed to a non-admin, and
 * public (checked here for a clear answer, and again by the proxy at every connection).
 */
static int pull_policy(image_store_t *s, const struct image_ref *r, bool admin, bool *trusted,
                       err_t *err)
{
    bool mirrored = s->mirror_host && strcmp(r->domain, "docker.io") == 0;
    const char *host = mirrored ? s->mirror_host : r->domain;
    bool is_mirror = s->mirror_host && strcasecmp(host, s->mirror_host) == 0;
    *trusted = is_mirror || in_list(s->insecure, s->n_insecure, host);
    if (!admin && !is_mirror && !in_list(s->allow, s->n_allow, r->domain))
        return err_set(err, ERR_FORBIDDEN, 0, "registry_not_allowed",
                       "pulling from %.200s is for admins; others may pull from %s%s%s", r->domain,
                       s->n_allow ? s->allow[0] : "the mirror only",
                       s->n_allow > 1 ? " and the other allowed registries" : "",
                       s->n_allow && s->mirror_host ? " (and the mirror)" : "");
    if (*trusted)
        return 0;
    char h[256], port[8];
    split_host(host, h, sizeof(h), port, sizeof(port));
    struct addrinfo *res = NULL;
    if (image_resolve_public(h, port, &res, err) < 0)
        return -1;
    freeaddrinfo(res);
    return 0;
}

/* Copy ref from its registry (docker.io through the mirror, if one is set). */
static int pull_from_registry(image_store_t *s, const struct image_ref *r, const char *norm,
                              bool trusted, err_t *err)
{
    bool mirrored = s->mirror_host && strcmp(r->domain, "docker.io") == 0;
    const char *host = mirrored ? s->mirror_host : r->domain;
    struct image_fetch_opts fo = {
        .code = "image_pull_failed",
        .tls_off = (mirrored && s->mirror_plain) || in_list(s->insecure, s->n_insecure, host),
        .from_registry = true,
    };
    if (!trusted && !(fo.via = pullnet(s, err)))
        return -1;
    /* skopeo takes a tag or a digest, not both: the digest pins the content. */
    _cleanup_free_ char *src =
        xasprintf("docker://%s/%s%s%s", host, r->path, r->digest[0] ? "@" : ":",
                  r->digest[0] ? r->digest : r->tag);
    log_info("image.pull", "ref=%s source=%s tls_verify=%s via=%s", norm, src,
             fo.tls_off ? "no" : "yes", trusted ? "direct" : "proxy");
    return image_fetch(s, &fo, src, norm, err);
}

/* Pull norm unless (when only_if_missing) it is present; one pull per reference at once. */
static int pull_once(image_store_t *s, const char *in, bool only_if_missing, bool admin,
                     image_t **out, err_t *err)
{
    struct image_ref r;
    char norm[512];
    bool trusted;
    if (image_ref_parse(in, &r, err) < 0 || image_ref_format(&r, norm, sizeof(norm), err) < 0)
        return -1;
    if (only_if_missing) {
        err_t e2 = {0};
        if (get_normalized(s, norm, out, &e2) == 0)
            return 0;
        if (e2.kind != ERR_NOT_FOUND) {
            if (err)
                *err = e2;
            return -1;
        }
    }
    if (pull_policy(s, &r, admin, &trusted, err) < 0)
        return -1;
    _cleanup_free_ char *key = xasprintf("pull:%s", norm);
    bool leader;
    int rc = image_flight_run(s, key, &leader, err);
    if (leader) {
        image_t *have = NULL;
        /* A pull that finished while we were getting here already did the work. */
        if (only_if_missing && get_normalized(s, norm, &have, NULL) == 0)
            rc = 0;
        else
            rc = pull_from_registry(s, &r, norm, trusted, err);
        image_free(have);
        image_flight_finish(s, key, rc, err);
    }
    if (rc < 0 || !out)
        return rc;
    return get_normalized(s, norm, out, err);
}

int image_ensure_for(image_store_t *s, const char *ref, bool admin, image_t **out, err_t *err)
{
    return pull_once(s, ref, true, admin, out, err);
}

int image_pull_for(image_store_t *s, const char *ref, bool admin, image_t **out, err_t *err)
{
    return pull_once(s, ref, false, admin, out, err);
}

int image_ensure(image_store_t *s, const char *ref, image_t **out, err_t *err)
{
    return pull_once(s, ref, true, true, out, err);
}

int image_pull(image_store_t *s, const char *ref, image_t **out, err_t *err)
{
    return pull_once(s, ref, false, true, out, err);
}

/* ---- list / remove ---- */

int image_list(image_store_t *s, json_t **out, err_t *err)
{
    store_image_t *rows;
    size_t n;
    if (store_image_list(s->db, &rows, &n, err) < 0)
        return -1;
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_pack("{s:s, s:s, s:I, s:f, s:f}", "ref", rows[i].ref,
                                           "digest", rows[i].digest, "size",
                                           (json_int_t)rows[i].size, "created_at",
                                           rows[i].created_at, "pulled_at", rows[i].pulled_at));
    store_image_list_free(rows, n);
    *out = a;
    return 0;
}

int image_remove(image_store_t *s, const char *ref, err_t *err)
{
    char norm[512];
    if (image_ref_normalize(ref, norm, sizeof(norm), err) < 0)
        return -1;
    if (store_image_delete(s->db, norm, err) < 0)
        return -1;
    log_info("image.removed", "ref=%s", norm);
    return 0;
}
