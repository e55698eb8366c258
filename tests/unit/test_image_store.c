/*
 * The image store end to end, offline: OCI layouts made here are imported (as a layout
 * directory, an OCI archive and a docker-archive), listed, removed and garbage-collected;
 * then, when Debian's docker-registry is installed, pushed to a registry on 127.0.0.1 and
 * pulled through a plain-HTTP loopback mirror and as an insecure registry, concurrently.
 * Needs root and skopeo; skips otherwise.
 *
 * The binary doubles as the unpack helper: `test_image_store internal-unpack-layer ...`.
 */
#include <archive.h>
#include <archive_entry.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image/image.h"
#include "image/image_internal.h"
#include "store/store.h"
#include "tap.h"

#define SKOPEO   "/usr/bin/skopeo"
#define REGISTRY "/usr/bin/docker-registry"
#define HEX64    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static char work[256];

/* ---------------------------------------------------------------- layouts */

struct file {
    const char *path;
    const char *data; /* NULL: a directory */
};

static char *tar_gz(const struct file *files, size_t n, size_t *len, char diff_id[72])
{
    size_t cap = 1 << 20, used = 0;
    char *tar = xmalloc(cap);
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    archive_write_open_memory(a, tar, cap, &used);
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, files[i].path);
        archive_entry_set_filetype(e, files[i].data ? AE_IFREG : AE_IFDIR);
        archive_entry_set_perm(e, files[i].data ? 0644 : 0755);
        archive_entry_set_size(e, files[i].data ? (la_int64_t)strlen(files[i].data) : 0);
        archive_write_header(a, e);
        if (files[i].data)
            archive_write_data(a, files[i].data, strlen(files[i].data));
        archive_entry_free(e);
    }
    archive_write_close(a);
    archive_write_free(a);
    image_sha256_digest(tar, used, diff_id);
    size_t gcap = used + 4096, gused = 0;
    char *gz = xmalloc(gcap);
    a = archive_write_new();
    archive_write_set_format_raw(a);
    archive_write_add_filter_gzip(a);
    archive_write_open_memory(a, gz, gcap, &gused);
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, "layer");
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_size(e, (la_int64_t)used);
    archive_write_header(a, e);
    archive_write_data(a, tar, used);
    archive_entry_free(e);
    archive_write_close(a);
    archive_write_free(a);
    free(tar);
    *len = gused;
    return gz;
}

static void put_blob(const char *layout, const char *data, size_t len, char digest[72])
{
    image_sha256_digest(data, len, digest);
    char path[600];
    snprintf(path, sizeof(path), "%s/blobs/sha256/%s", layout, digest + 7);
    FILE *f = fopen(path, "w");
    fwrite(data, 1, len, f);
    fclose(f);
}

static void put_file(const char *dir, const char *name, const char *text)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static const struct file base_files[] = {
    {"etc/", NULL}, {"etc/os-release", "ID=unit\n"}, {"etc/gone", "soon\n"}};
static const struct file top_files[] = {
    {"etc/.wh.gone", ""}, {"app/", NULL}, {"app/run.sh", "echo hi\n"}};

/*
 * An OCI layout at dir/name with two layers; arch is the config's architecture; name_ann
 * the io.containerd.image.name annotation (NULL for none). Returns the manifest digest.
 */
static void make_layout(const char *name, const char *arch, const char *name_ann,
                        char manifest_digest[72])
{
    char layout[400], blobs[500];
    snprintf(layout, sizeof(layout), "%s/%s", work, name);
    snprintf(blobs, sizeof(blobs), "%s/blobs/sha256", layout);
    mkdir_p(blobs, 0755);
    put_file(layout, "oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}");
    char d1[72], d2[72], b1[72], b2[72], cd[72];
    size_t l1, l2;
    char *g1 = tar_gz(base_files, ARRAY_SIZE(base_files), &l1, d1);
    char *g2 = tar_gz(top_files, ARRAY_SIZE(top_files), &l2, d2);
    put_blob(layout, g1, l1, b1);
    put_blob(layout, g2, l2, b2);
    free(g1);
    free(g2);
    char *config = xasprintf(
        "{\"created\":\"2024-05-06T07:08:09Z\",\"architecture\":\"%s\",\"os\":\"linux\","
        "\"config\":{\"Cmd\":[\"/app/run.sh\"],\"Env\":[\"PATH=/bin\"],\"WorkingDir\":\"/app\"},"
        "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"%s\",\"%s\"]}}",
        arch, d1, d2);
    put_blob(layout, config, strlen(config), cd);
    char *manifest = xasprintf(
        "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
        "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":"
        "\"%s\",\"size\":%zu},\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1."
        "tar+gzip\",\"digest\":\"%s\",\"size\":%zu},{\"mediaType\":\"application/vnd.oci.image."
        "layer.v1.tar+gzip\",\"digest\":\"%s\",\"size\":%zu}]}",
        cd, strlen(config), b1, l1, b2, l2);
    put_blob(layout, manifest, strlen(manifest), manifest_digest);
    char *index = xasprintf(
        "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest."
        "v1+json\",\"digest\":\"%s\",\"size\":%zu,\"annotations\":{"
        "\"org.opencontainers.image.ref.name\":\"latest\"%s%s%s}}]}",
        manifest_digest, strlen(manifest), name_ann ? ",\"io.containerd.image.name\":\"" : "",
        name_ann ? name_ann : "", name_ann ? "\"" : "");
    put_file(layout, "index.json", index);
    free(config);
    free(manifest);
    free(index);
}

static int run(const char *const *argv)
{
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        dup2(null, 1);
        dup2(null, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int skopeo_copy(const char *src, const char *dst)
{
    char policy[400];
    snprintf(policy, sizeof(policy), "%s/policy.json", work);
    const char *argv[] = {SKOPEO, "--policy", policy, "copy", "--quiet", "--dest-tls-verify=false",
                          src,    dst,        NULL};
    return run(argv);
}

/* ---------------------------------------------------------------- store tests */

static image_store_t *open_store(store_t *db, const char *root, const char *mirror,
                                 const char *insecure)
{
    struct image_opts o = {.root = root,
                           .registry_mirror = mirror,
                           .insecure_registries = insecure ? &insecure : NULL,
                           .n_insecure = insecure ? 1 : 0,
                           .self_exe = "/proc/self/exe"};
    err_t err = {0};
    image_store_t *s = image_store_open(&o, db, &err);
    if (!s)
        printf("# image_store_open: %s\n", err.msg);
    return s;
}

static void test_open_validates_options(store_t *db)
{
    static const struct {
        const char *root, *mirror, *insecure, *why;
    } bad[] = {
        {"relative/images", NULL, NULL, "a relative root"},
        {"/tmp/with:colon", NULL, NULL, "a root with ':'"},
        {NULL, "ftp://mirror", NULL, "a mirror that is not http(s)"},
        {NULL, "http://mirror.example.com", NULL, "a plain-HTTP mirror off loopback"},
        {NULL, "http://10.0.0.1:5000", NULL, "a plain-HTTP mirror on a private address"},
        {NULL, "https://mirror.example.com/v2/", NULL, "a mirror with a path"},
        {NULL, "https://", NULL, "a mirror without a host"},
        {NULL, NULL, "bad host!", "a malformed insecure registry"},
    };
    char root[400];
    snprintf(root, sizeof(root), "%s/opts", work);
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        struct image_opts o = {.root = bad[i].root ? bad[i].root : root,
                               .registry_mirror = bad[i].mirror,
                               .insecure_registries = bad[i].insecure ? &bad[i].insecure : NULL,
                               .n_insecure = bad[i].insecure ? 1 : 0};
        err_t err = {0};
        image_store_t *s = image_store_open(&o, db, &err);
        ok(!s && err.kind == ERR_INVALID, "refused: %s (%s)", bad[i].why, err.msg);
        image_store_close(s);
    }
    static const char *const good[] = {"http://127.0.0.1:5000", "http://localhost:5000/",
                                       "http://[::1]:5000", "https://mirror.example.com"};
    for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
        image_store_t *s = open_store(db, root, good[i], "registry.local:5000");
        ok(s != NULL, "mirror %s accepted", good[i]);
        image_store_close(s);
    }
}

static void test_open_removes_leftovers(store_t *db)
{
    char root[400], path[600];
    snprintf(root, sizeof(root), "%s/crashed", work);
    snprintf(path, sizeof(path), "%s/layers/.tmp-abc-123/diff/usr", root);
    mkdir_p(path, 0755);
    snprintf(path, sizeof(path), "%s/tmp/0123456789abcdef", root);
    mkdir_p(path, 0755);
    put_file(path, "index.json", "{}");
    snprintf(path, sizeof(path), "%s/layers/" HEX64, root);
    mkdir_p(path, 0755);
    image_store_t *s = open_store(db, root, NULL, NULL);
    ok(s != NULL, "store opens over a crashed run's leftovers");
    snprintf(path, sizeof(path), "%s/layers/.tmp-abc-123", root);
    ok(access(path, F_OK) < 0, "a half-unpacked layer is removed");
    snprintf(path, sizeof(path), "%s/tmp/0123456789abcdef", root);
    ok(access(path, F_OK) < 0, "a pull's temporary layout is removed");
    snprintf(path, sizeof(path), "%s/layers/" HEX64, root);
    ok(access(path, F_OK) == 0, "finished layers are kept");
    image_store_close(s);
}

static void test_import_list_remove_gc(store_t *db)
{
    char root[400], layout[400], manifest[72], path[700];
    snprintf(root, sizeof(root), "%s/store", work);
    image_store_t *s = open_store(db, root, NULL, NULL);
    ok(s != NULL, "store opens");
    if (!s)
        return;
    make_layout("layout", IMAGE_HOST_ARCH, "docker.io/library/unit-test:latest", manifest);
    snprintf(layout, sizeof(layout), "%s/layout", work);
    err_t err = {0};
    image_t *img = NULL;
    ok(image_import(s, layout, NULL, &img, &err) == 0 && img, "layout imports (%s)", err.msg);
    if (!img)
        return;
    is_str(img->ref, "docker.io/library/unit-test:latest", "named from its annotation");
    is_str(img->digest, manifest, "digest is the manifest's");
    ok(img->n_layers == 2 && img->size > 0, "two layers, size %llu", (unsigned long long)img->size);
    ok(img->created_at == 1714979289.0, "created from the config");
    json_t *cmd = json_object_get(img->config, "Cmd");
    ok(json_is_array(cmd) && strcmp(json_string_value(json_array_get(cmd, 0)), "/app/run.sh") == 0,
       "config Cmd read");
    snprintf(path, sizeof(path), "%s/etc/os-release", img->layer_dirs[0]);
    ok(access(path, F_OK) == 0, "bottom layer unpacked");
    snprintf(path, sizeof(path), "%s/etc/gone", img->layer_dirs[1]);
    struct stat st;
    ok(lstat(path, &st) == 0 && S_ISCHR(st.st_mode), "top layer's whiteout unpacked");
    ok(s->n_unpacks == 2 && s->n_fetches == 1, "two unpacks, one fetch");
    image_free(img);
    img = NULL;

    ok(image_import(s, layout, "unit/second:v1", &img, &err) == 0 && img &&
           strcmp(img->ref, "docker.io/unit/second:v1") == 0,
       "the same layout imports under another name");
    ok(s->n_unpacks == 2, "shared layers are not unpacked again");
    image_free(img);
    img = NULL;

    json_t *list = NULL;
    ok(image_list(s, &list, &err) == 0 && json_array_size(list) == 2, "two images listed");
    json_t *first = json_array_get(list, 0);
    ok(json_is_string(json_object_get(first, "ref")) &&
           json_is_integer(json_object_get(first, "size")) &&
           json_is_string(json_object_get(first, "digest")) &&
           json_is_real(json_object_get(first, "pulled_at")),
       "list entries have ref, digest, size, pulled_at");
    json_decref(list);

    ok(image_remove(s, "unit-test", &err) == 0, "remove by short name");
    ok(image_remove(s, "unit-test", &err) < 0 && err.kind == ERR_NOT_FOUND,
       "removing again is not found");
    ok(image_get(s, "unit-test", &img, &err) < 0 && err.kind == ERR_NOT_FOUND,
       "removed image is gone");
    struct image_gc_stats gs;
    ok(image_gc(s, NULL, 0, &gs, &err) == 0 && gs.blobs_removed == 0 && gs.layers_removed == 0,
       "GC keeps what the remaining image uses");
    ok(image_get(s, "unit/second:v1", &img, &err) == 0, "the other image is intact");
    char keep[600];
    snprintf(keep, sizeof(keep), "%s", img ? img->layer_dirs[1] : "");
    image_free(img);
    img = NULL;
    ok(image_remove(s, "unit/second:v1", &err) == 0, "remove the second image");
    const char *keeps[] = {keep};
    ok(image_gc(s, keeps, 1, &gs, &err) == 0 && gs.blobs_removed == 4 && gs.layers_removed == 1,
       "GC removes 4 blobs and the unkept layer (%zu, %zu)", gs.blobs_removed, gs.layers_removed);
    ok(access(keep, F_OK) == 0, "a layer in use is kept");
    ok(image_gc(s, NULL, 0, &gs, &err) == 0 && gs.layers_removed == 1 && access(keep, F_OK) < 0,
       "then goes once unused");
    image_store_close(s);
}

static void test_import_archives(store_t *db)
{
    char root[400], src[600], dst[600], manifest[72], path[400];
    snprintf(root, sizeof(root), "%s/store2", work);
    image_store_t *s = open_store(db, root, NULL, NULL);
    if (!s)
        return;
    make_layout("plain", IMAGE_HOST_ARCH, NULL, manifest);
    err_t err = {0};
    image_t *img = NULL;
    snprintf(path, sizeof(path), "%s/plain", work);
    ok(image_import(s, path, NULL, &img, &err) < 0 && err.kind == ERR_INVALID &&
           strcmp(err.code, "image_ref_required") == 0,
       "a layout that names no image needs a ref (%s)", err.msg);

    snprintf(src, sizeof(src), "oci:%s/plain:latest", work);
    snprintf(dst, sizeof(dst), "docker-archive:%s/docker.tar:unit/docker:v2", work);
    ok(skopeo_copy(src, dst) == 0, "made a docker-archive");
    snprintf(path, sizeof(path), "%s/docker.tar", work);
    ok(image_import(s, path, NULL, &img, &err) == 0 && img &&
           strcmp(img->ref, "docker.io/unit/docker:v2") == 0 && img->n_layers == 2,
       "docker-archive imports under its RepoTags name (%s)", err.msg);
    image_free(img);
    img = NULL;

    snprintf(dst, sizeof(dst), "oci-archive:%s/oci.tar:latest", work);
    ok(skopeo_copy(src, dst) == 0, "made an OCI archive");
    snprintf(path, sizeof(path), "%s/oci.tar", work);
    ok(image_import(s, path, "oci/archive:1", &img, &err) == 0 && img &&
           strcmp(img->ref, "docker.io/oci/archive:1") == 0,
       "OCI archive imports under the given ref (%s)", err.msg);
    image_free(img);
    img = NULL;

    make_layout("foreign", "s390x", NULL, manifest);
    snprintf(path, sizeof(path), "%s/foreign", work);
    ok(image_import(s, path, "foreign", &img, &err) < 0 && err.kind == ERR_UNPROCESSABLE &&
           strcmp(err.code, "image_unsupported") == 0,
       "an image for another architecture is unsupported (%s)", err.msg);
    ok(image_import(s, "relative/path", "x", &img, &err) < 0 && err.kind == ERR_INVALID,
       "a relative path is invalid");
    snprintf(path, sizeof(path), "%s/policy.json", work);
    ok(image_import(s, path, "x", &img, &err) < 0 && err.kind == ERR_UNPROCESSABLE &&
           strcmp(err.code, "image_import_failed") == 0,
       "a file that is no image fails to import (%s)", err.msg);
    ok(image_import(s, "/nonexistent/x", "x", &img, &err) < 0 && err.kind == ERR_INVALID,
       "a missing path is invalid");
    ok(image_import(s, work, "Bad Ref", &img, &err) < 0 &&
           strcmp(err.code, "invalid_image_ref") == 0,
       "a malformed ref is invalid");
    snprintf(path, sizeof(path), "%s/plain", work);
    ok(image_import(s, path,
                    "x@sha256:"
                    "0123456789abcdef0123456789abcdef"
                    "0123456789abcdef0123456789abcdef",
                    &img, &err) < 0 &&
           err.kind == ERR_INVALID,
       "importing under a digest is refused");
    image_store_close(s);
}

/* ---------------------------------------------------------------- registry pulls */

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    bind(fd, (struct sockaddr *)&a, sizeof(a));
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

static bool port_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool okay = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return okay;
}

static pid_t start_registry(int port)
{
    char config[400], storage[400], text[800];
    snprintf(config, sizeof(config), "%s/registry.yml", work);
    snprintf(storage, sizeof(storage), "%s/registry", work);
    snprintf(text, sizeof(text),
             "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
             "storage:\n  filesystem:\n    rootdirectory: %s\n"
             "http:\n  addr: 127.0.0.1:%d\n",
             storage, port);
    put_file(work, "registry.yml", text);
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        dup2(null, 1);
        dup2(null, 2);
        execl(REGISTRY, REGISTRY, "serve", config, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200 && !port_open(port); i++)
        usleep(25000);
    return pid;
}

struct puller {
    image_store_t *s;
    pthread_barrier_t *go;
    const char *ref;
    int rc;
};

static void *pull_thread(void *arg)
{
    struct puller *p = arg;
    err_t err = {0};
    image_t *img = NULL;
    pthread_barrier_wait(p->go);
    p->rc = image_pull(p->s, p->ref, &img, &err);
    image_free(img);
    return NULL;
}

/* Pull refs[i % n_refs] from N threads at once; true if every pull succeeded. */
static bool pull_concurrently(image_store_t *s, const char *const *refs, size_t n_refs)
{
    enum { N = 4 };
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N);
    struct puller p[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        p[i] = (struct puller){.s = s, .go = &go, .ref = refs[(size_t)i % n_refs], .rc = -2};
        pthread_create(&t[i], NULL, pull_thread, &p[i]);
    }
    bool all_ok = true;
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        all_ok &= p[i].rc == 0;
    }
    pthread_barrier_destroy(&go);
    return all_ok;
}

static void test_concurrent_pulls_fetch_once(image_store_t *s)
{
    unsigned long before = s->n_fetches;
    const char *refs[] = {"unit-test"};
    ok(pull_concurrently(s, refs, 1), "4 concurrent pulls of one ref all succeed");
    ok(s->n_fetches == before + 1, "and fetch once (%lu)", s->n_fetches - before);
}

/* Two refs of the same content pulled at once into an empty store: each layer once. */
static void test_concurrent_pulls_share_layers(store_t *db, int port)
{
    char src[600], dst[600], root[400], mirror[64];
    snprintf(src, sizeof(src), "oci:%s/pushed:latest", work);
    snprintf(dst, sizeof(dst), "docker://127.0.0.1:%d/library/shared-a:latest", port);
    skopeo_copy(src, dst);
    snprintf(dst, sizeof(dst), "docker://127.0.0.1:%d/library/shared-b:latest", port);
    skopeo_copy(src, dst);
    snprintf(root, sizeof(root), "%s/store5", work);
    snprintf(mirror, sizeof(mirror), "http://127.0.0.1:%d", port);
    image_store_t *s = open_store(db, root, mirror, NULL);
    const char *refs[] = {"shared-a", "shared-b"};
    ok(s && pull_concurrently(s, refs, 2), "concurrent pulls of two refs succeed");
    ok(s && s->n_fetches == 2 && s->n_unpacks == 2,
       "two fetches, and the two shared layers unpacked once each (%lu)", s ? s->n_unpacks : 0);
    image_store_close(s);
}

static void test_registry_pulls(store_t *db)
{
    if (access(REGISTRY, X_OK) != 0) {
        printf("# %s not installed: skipping pulls\n", REGISTRY);
        return;
    }
    int port = free_port();
    pid_t reg = start_registry(port);
    ok(port_open(port), "registry listens on 127.0.0.1:%d", port);
    char src[600], dst[600], mirror[64], host[64], ref[300], manifest[72], root[400];
    make_layout("pushed", IMAGE_HOST_ARCH, NULL, manifest);
    snprintf(src, sizeof(src), "oci:%s/pushed:latest", work);
    snprintf(dst, sizeof(dst), "docker://127.0.0.1:%d/library/unit-test:latest", port);
    ok(skopeo_copy(src, dst) == 0, "pushed the image");
    snprintf(mirror, sizeof(mirror), "http://127.0.0.1:%d", port);
    snprintf(host, sizeof(host), "127.0.0.1:%d", port);
    snprintf(root, sizeof(root), "%s/store3", work);

    image_store_t *s = open_store(db, root, mirror, NULL);
    err_t err = {0};
    image_t *img = NULL;
    ok(s && image_ensure(s, "unit-test", &img, &err) == 0 && img &&
           strcmp(img->ref, "docker.io/library/unit-test:latest") == 0 && img->n_layers == 2,
       "ensure pulls docker.io/library/unit-test through the mirror (%s)", err.msg);
    ok(img && strcmp(img->digest, manifest) == 0, "the pulled digest is the pushed one");
    image_free(img);
    img = NULL;
    unsigned long fetches = s ? s->n_fetches : 0;
    ok(s && image_ensure(s, "unit-test:latest", &img, &err) == 0 && s->n_fetches == fetches,
       "ensure of a present image does not pull");
    image_free(img);
    img = NULL;
    if (s)
        test_concurrent_pulls_fetch_once(s);
    ok(s && image_pull(s, "does-not-exist", &img, &err) < 0 && err.kind == ERR_UNPROCESSABLE &&
           strcmp(err.code, "image_pull_failed") == 0 && !strstr(err.msg, root),
       "an unknown image fails with the registry's reason (%s)", err.msg);
    image_store_close(s);

    snprintf(root, sizeof(root), "%s/store4", work);
    s = open_store(db, root, NULL, NULL);
    snprintf(ref, sizeof(ref), "%s/library/unit-test@%s", host, manifest);
    ok(s && image_pull(s, ref, &img, &err) < 0 &&
           strcmp(err.code, "registry_address_refused") == 0 && err.kind == ERR_FORBIDDEN,
       "a loopback registry, neither the mirror nor insecure, is refused (%s)", err.msg);
    ok(s && image_pull_for(s, ref, false, &img, &err) < 0 &&
           strcmp(err.code, "registry_not_allowed") == 0,
       "... and first, to a non-admin, as a registry not allowed (%s)", err.msg);
    image_store_close(s);
    s = open_store(db, root, NULL, host);
    ok(s && image_pull(s, ref, &img, &err) == 0 && img && strcmp(img->ref, ref) == 0,
       "pull by digest from an insecure registry (%s)", err.msg);
    image_free(img);
    image_store_close(s);
    test_concurrent_pulls_share_layers(db, port);
    kill(reg, SIGTERM);
    waitpid(reg, NULL, 0);
}

static bool public_addr(const char *text)
{
    struct sockaddr_storage ss = {0};
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, text, &v4->sin_addr) == 1)
        v4->sin_family = AF_INET;
    else if (inet_pton(AF_INET6, text, &v6->sin6_addr) == 1)
        v6->sin6_family = AF_INET6;
    return image_addr_public((struct sockaddr *)&ss);
}

/* Where a pull may go: public addresses only, never the host's own. */
static void test_pull_addresses(void)
{
    const char *refused[] = {
        "127.0.0.1",       "127.1.2.3",       "10.1.2.3",      "172.16.0.1",
        "192.168.1.1",     "169.254.169.254", "100.64.0.1",    "0.0.0.0",
        "224.0.0.1",       "255.255.255.255", "::1",           "::",
        "fd00::1",         "fe80::1",         "ff02::1",       "::ffff:127.0.0.1",
        "::ffff:10.0.0.1", "64:ff9b::a00:1",  "2002:7f00:1::1"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        ok(!public_addr(refused[i]), "a pull may not reach %s", refused[i]);
    const char *allowed[] = {"8.8.8.8", "198.51.100.2", "2001:4860:4860::8888", "::ffff:8.8.4.4"};
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
        ok(public_addr(allowed[i]), "a pull may reach %s", allowed[i]);
    struct addrinfo *res = NULL;
    err_t err = {0};
    ok(image_resolve_public("localhost", "5000", &res, &err) < 0 &&
           strcmp(err.code, "registry_address_refused") == 0,
       "a name resolving to loopback is refused (%s)", err.code);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "internal-unpack-layer") == 0)
        return image_unpack_main(argc - 1, argv + 1);
    if (geteuid() != 0 || access(SKOPEO, X_OK) != 0) {
        printf("# needs root and %s: skipping\n", SKOPEO);
        ok(1, "skipped");
        return tap_done();
    }
    test_pull_addresses();
    snprintf(work, sizeof(work), "/tmp/sbx-image-store-XXXXXX");
    if (!mkdtemp(work)) {
        ok(0, "mkdtemp");
        return tap_done();
    }
    put_file(work, "policy.json", "{\"default\":[{\"type\":\"insecureAcceptAnything\"}]}");
    err_t err = {0};
    store_t *db = store_open(":memory:", &err);
    ok(db != NULL, "database opens (%s)", err.msg);
    if (db) {
        test_open_validates_options(db);
        test_open_removes_leftovers(db);
        test_import_list_remove_gc(db);
        test_import_archives(db);
        test_registry_pulls(db);
        store_close(db);
    }
    ok(image_rm_rf(work) == 0, "work dir removed");
    return tap_done();
}
