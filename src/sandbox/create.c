/* Create: validate, make the row (intent first), storage, spec, start, wait for the agent. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentc/agent_client.h"
#include "common/cleanup.h"
#include "common/id.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "runtime/runtime.h"
#include "sandbox_internal.h"
#include "template.h"
#include "net/net.h"
#include "storage/storage.h"

/* Image Env, then the request's env over it, as "K=V" strings. */
/* The image's environment, PATH and HOSTNAME, the proxy variables for a sandbox whose
 * network is "proxy" (when proxy_of is its manager), then the request's env on top. */
static json_t *merged_env(const json_t *img_cfg, json_t *env, const char *hostname,
                          const sbx_mgr_t *proxy_of)
{
    json_t *map = json_object();
    json_t *v;
    size_t i;
    json_array_foreach(json_object_get(img_cfg, "Env"), i, v)
    {
        const char *kv = json_string_value(v);
        const char *eq = kv ? strchr(kv, '=') : NULL;
        if (eq && eq != kv) {
            char *k = xstrndup(kv, (size_t)(eq - kv));
            json_object_set_new(map, k, json_string(eq + 1));
            free(k);
        }
    }
    if (!json_object_get(map, "PATH"))
        json_object_set_new(map, "PATH",
                            json_string("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                                        "/sbin:/bin"));
    json_object_set_new(map, "HOSTNAME", json_string(hostname));
    if (proxy_of) {
        char gw[16];
        net_gateway(proxy_of->cfg.net, gw);
        _cleanup_free_ char *url = xasprintf("http://%s:%d", gw, proxy_of->cfg.egress_proxy_port);
        const char *names[] = {"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"};
        for (size_t k = 0; k < ARRAY_SIZE(names); k++)
            json_object_set_new(map, names[k], json_string(url));
        json_object_set_new(map, "no_proxy", json_string("localhost,127.0.0.1"));
        json_object_set_new(map, "NO_PROXY", json_string("localhost,127.0.0.1"));
    }
    if (env)
        json_object_update(map, env);
    json_t *out = json_array();
    const char *k;
    json_object_foreach(map, k, v)
    {
        char *kv = xasprintf("%s=%s", k, json_string_value(v));
        json_array_append_new(out, json_string(kv));
        free(kv);
    }
    json_decref(map);
    return out;
}

/* The main process: args if given, else Entrypoint + Cmd; may be empty (idle). */
static json_t *main_argv(const json_t *img_cfg, json_t *args)
{
    if (args)
        return json_deep_copy(args);
    json_t *out = json_array();
    json_t *ep = json_object_get(img_cfg, "Entrypoint");
    json_t *cmd = json_object_get(img_cfg, "Cmd");
    if (json_is_array(ep))
        json_array_extend(out, ep);
    if (json_is_array(cmd))
        json_array_extend(out, cmd);
    return out;
}

/* Everything we keep about the sandbox beyond the columns. */
static json_t *make_spec(const struct sbx_create_req *q, const sbx_mgr_t *m, const image_t *img,
                         json_t *env, json_t *argv)
{
    json_t *res =
        json_pack("{s:f, s:I, s:I, s:n}", "cpus", q->cpus > 0 ? q->cpus : m->cfg.default_cpus,
                  "memory", (json_int_t)(q->memory ? q->memory : m->cfg.default_memory), "pids",
                  (json_int_t)(q->pids > 0 ? q->pids : m->cfg.default_pids), "disk");
    if (q->disk)
        json_object_set_new(res, "disk", json_integer((json_int_t)q->disk));
    const char *user = json_string_value(json_object_get(img->config, "User"));
    const char *cwd = json_string_value(json_object_get(img->config, "WorkingDir"));
    json_t *spec =
        json_pack("{s:o, s:O, s:O, s:s, s:s?, s:s, s:s, s:O?, s:I}", "resources", res, "env", env,
                  "args", argv, "image_digest", img->digest, "user", user && *user ? user : NULL,
                  "cwd", cwd && *cwd ? cwd : "/", "network",
                  q->network ? q->network : m->cfg.default_network, "ports", q->ports,
                  "idle_timeout", (json_int_t)q->idle_timeout); /* -1: the daemon's default */
    json_object_set_new(spec, "interactive", json_boolean(q->interactive == 1));
    json_object_set_new(spec, "net_raw", json_boolean(q->net_raw == 1)); /* forks keep it */
    json_object_set_new(spec, "setuid", json_boolean(q->setuid == 1));   /* so do they this */
    if (q->template_name)
        json_object_set_new(spec, "template", json_string(q->template_name));
    if (q->egress_allow) /* the hosts the egress proxy lets it reach */
        json_object_set(spec, "egress_allow", q->egress_allow);
    /* The agent version it binds: forks and restores keep binding the same file. */
    json_object_set_new(spec, "agent_dir", json_string(m->agent_dir));
    /* The lower dirs it mounts: image GC keeps them while the sandbox exists. */
    json_t *layers = json_array();
    for (size_t i = 0; i < img->n_layers; i++)
        json_array_append_new(layers, json_string(img->layer_dirs[i]));
    json_object_set_new(spec, "layers", layers);
    json_t *exposed = json_object_get(img->config, "ExposedPorts");
    if (json_is_object(exposed))
        json_object_set(spec, "exposed_ports", exposed);
    return spec;
}

uint64_t sbx_spec_disk(const json_t *spec)
{
    json_int_t v = json_integer_value(json_object_get(json_object_get(spec, "resources"), "disk"));
    return v > 0 ? (uint64_t)v : 0;
}

/* Prepare storage and bundle and boot: 0 running, 1 already exited, -1 failed. */
static int start_container(sbx_mgr_t *m, struct sbx_live *l, const sandbox_rec_t *r,
                           const struct sbx_paths *p, err_t *err)
{
    if (sbx_make_dirs(p, r->hostname, err) < 0 || sbx_userns_netns(m, r, err) < 0 ||
        sbx_net_setup(m, r, p, NULL, err) < 0 ||
        storage_layer_create(m->driver, p->layer, sbx_spec_disk(r->spec), err) < 0)
        return -1;
    return sbx_start(m, l, r, p, NULL, err);
}

static void fill_record(sandbox_rec_t *r, const user_t *owner, const struct sbx_create_req *q,
                        const char *ref, const runtime_t *rt)
{
    memset(r, 0, sizeof(*r));
    id_random_hex(r->id, 32);
    id_ulid(r->name);
    r->owner_id = owner->id;
    snprintf(r->label, sizeof(r->label), "%s", q->label ? q->label : "");
    snprintf(r->image, sizeof(r->image), "%s", ref);
    r->status = SBX_CREATING;
    r->intent = SBX_INTENT_CREATE;
    snprintf(r->hostname, sizeof(r->hostname), "%.12s", r->id);
    if (q->hostname)
        snprintf(r->hostname, sizeof(r->hostname), "%s", q->hostname);
    r->created_at = r->last_active_at = now_unix();
    r->is_public = q->is_public == 1;
    r->interactive = q->interactive == 1;
    snprintf(r->runtime, sizeof(r->runtime), "%s", runtime_name(rt));
}

/* True if q asks nothing a pooled sandbox (started with the defaults) could not give. */
static bool poolable(const struct sbx_create_req *q)
{
    return !q->hostname && q->interactive != 1 && !q->env && !q->args && q->cpus <= 0 &&
           !q->memory && q->pids < 0 && !q->disk && !q->network && !q->egress_allow && !q->ports &&
           !q->runtime && q->idle_timeout < 0 && q->net_raw < 0 && q->setuid < 0;
}

/* The template a create means: 'template', a bare 'image' name that is one, or the default
 * with neither. NULL (and 0) when it means an image; -1 for an unknown template. */
static int which_template(sbx_mgr_t *m, const user_t *owner, const struct sbx_create_req *q,
                          template_rec_t *t, err_t *err)
{
    const char *name = q->template_name;
    if (!name && !q->image)
        name = SBX_DEFAULT_TEMPLATE;
    bool bare = q->image && !strpbrk(q->image, "/:@");
    if (!name && !(bare && sbx_template_name_valid(q->image)))
        return 0;
    if (sbx_template_find(m, owner, name ? name : q->image, t, err) == 0)
        return 1;
    if (!name) /* "busybox": not a template, so an image */
        return 0;
    if (!q->template_name)
        err_set(err, ERR_NOT_FOUND, 0, "template_not_found",
                "no image given, and the default template '%s' is not available: run "
                "scripts/setup to build it, or give an image",
                name);
    return -1;
}

/* Create from template t: a pooled sandbox when one is ready and q allows, else its snapshot
 * or its image. */
static int create_from_template(sbx_mgr_t *m, const user_t *owner, const struct sbx_create_req *q,
                                const template_rec_t *t, json_t **out, err_t *err)
{
    if (poolable(q) && sbx_pool_claim(m, owner, t, q, out) == 0)
        return 0;
    if (t->snapshot[0])
        return sbx_snapshot_start(m, owner, t->snapshot, q->label, q->hostname, out, err);
    struct sbx_create_req c = *q;
    c.image = t->image;
    c.template_name = t->name;
    if (c.setuid < 0)
        c.setuid = t->setuid;
    return sbx_create(m, owner, &c, out, err);
}

int sbx_create(sbx_mgr_t *m, const user_t *owner, const struct sbx_create_req *q, json_t **out,
               err_t *err)
{
    if (q->snapshot)
        return sbx_snapshot_start(m, owner, q->snapshot, q->label, q->hostname, out, err);
    if (!q->image) { /* a template (with both, the image is the template's: see below) */
        template_rec_t t;
        int rc = which_template(m, owner, q, &t, err);
        if (rc < 0)
            return -1;
        rc = create_from_template(m, owner, q, &t, out, err);
        store_template_rec_clear(&t);
        return rc;
    }
    if (!q->template_name && !strpbrk(q->image, "/:@") && sbx_template_name_valid(q->image)) {
        template_rec_t t;
        if (which_template(m, owner, q, &t, NULL) == 1) {
            struct sbx_create_req c = *q;
            c.image = NULL;
            c.template_name = t.name;
            int rc = create_from_template(m, owner, &c, &t, out, err);
            store_template_rec_clear(&t);
            return rc;
        }
    }
    bool proxy = q->network && strcmp(q->network, "proxy") == 0;
    if (proxy && m->cfg.egress_proxy_port <= 0)
        return err_set(err, ERR_INVALID, 0, "unsupported",
                       "network \"proxy\" needs the daemon's egress proxy, which this daemon "
                       "runs without (--egress-proxy-port 0)");
    if (q->disk && m->quota == STORAGE_QUOTA_NONE)
        return err_set(err, ERR_INVALID, 0, "unsupported",
                       "disk limits need the daemon's state dir on btrfs, or on a filesystem "
                       "that enforces project quotas (ext4 mounted with prjquota, xfs with "
                       "pquota); this daemon's has neither");
    const runtime_t *rt = runtime_find(q->runtime ? q->runtime : m->cfg.runtime);
    if (!rt)
        return err_set(err, ERR_INVALID, 0, "invalid_field", "unknown runtime");
    if (runtime_usable(rt, err) < 0)
        return -1;
    char ref[512];
    image_t *img = NULL;
    if (sbx_quota_check_request(m, owner, q, err) < 0 ||
        image_ref_normalize(q->image, ref, sizeof(ref), err) < 0 ||
        image_ensure_for(m->images, ref, owner->is_admin, &img, err) < 0)
        return -1;
    sandbox_rec_t r;
    fill_record(&r, owner, q, img->ref, rt);
    json_t *env = merged_env(img->config, q->env, r.hostname, proxy ? m : NULL);
    json_t *argv = main_argv(img->config, q->args);
    r.spec = make_spec(q, m, img, env, argv);
    if (runtime_can(rt, RUNTIME_AGENT_TOKEN)) { /* forks and snapshots keep it: same memory */
        char token[AGENT_TOKEN_LEN + 1];
        id_random_hex(token, AGENT_TOKEN_LEN / 2);
        json_object_set_new(r.spec, "agent_token", json_string(token));
    }
    json_decref(env);
    json_decref(argv);
    uint32_t userns_base = 0;
    if (sbx_userns_alloc(m, rt, &userns_base, err) < 0) {
        image_free(img);
        store_sandbox_rec_clear(&r);
        return -1;
    }
    if (userns_base) /* forks, snapshots and what starts from them keep it (userns.c) */
        json_object_set_new(r.spec, "userns", json_integer(userns_base));
    struct sbx_paths p;
    sbx_paths_init(m, r.id, &p);
    /* Held until the status is recorded, so an early exit is seen after it. */
    struct sbx_live *l = sbx_live_get(m, r.id, true);
    pthread_rwlock_wrlock(&l->lock);
    int rc = sbx_quota_insert(m, owner, &r, true, err);
    if (rc == 0 && (rc = start_container(m, l, &r, &p, err)) < 0) {
        log_warn("sandbox.create_failed", "sandbox=%s code=%s", r.id, err->code);
        sbx_teardown(m, r.id, true, NULL);
        store_sandbox_purge(m->store, r.id, NULL);
    }
    if (rc == 1) { /* the main process already ended */
        sbx_finish_exit(m, r.id);
        rc = 0;
    } else if (rc == 0) {
        rc = store_sandbox_set_status(m->store, r.id, SBX_RUNNING, SBX_INTENT_NONE, false, 0, err);
    }
    pthread_rwlock_unlock(&l->lock);
    sbx_live_put(m, l);
    if (rc == 0) {
        char id[sizeof(r.id)];
        memcpy(id, r.id, sizeof(id));
        store_sandbox_rec_clear(&r); /* read back: the status is the one recorded */
        store_sandbox_get(m->store, -1, id, &r, NULL);
        const char *status = sandbox_status_name(r.status);
        log_info("sandbox.created", "sandbox=%s image=%s user=%s status=%s", r.id, r.image,
                 owner->name, status);
        *out = sbx_to_json(m, &r);
        sbx_event(m, owner->id, r.id, "created",
                  json_pack("{s:s, s:s}", "image", r.image, "status", status));
    } else {
        sbx_live_remove(m, r.id);
    }
    sbx_paths_free(&p);
    store_sandbox_rec_clear(&r);
    image_free(img);
    return rc;
}
