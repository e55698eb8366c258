/*
 * Which requests are E2B's, and the routes that serve them (docs/e2b.md, "Dialects").
 *
 * - The control plane: the host api.<domain> (the --e2b-domain), or any request that carries
 *   an E2B key (e2b_...) as X-API-KEY and no Sandboxer token (E2B_API_URL pointed at the
 *   daemon itself). Its routes need an E2B API key; our own routes are never served there.
 * - A sandbox: the host <port>-<sandbox id>.<domain>, as E2B's SDKs build it, or (E2B's
 *   E2B_SANDBOX_URL) the headers E2b-Sandbox-Id and E2b-Sandbox-Port. Port 49983 is its envd,
 *   served here; any other port goes to our inbound proxy, as the sandbox's owner when its
 *   traffic is public or the request carries its access token.
 * - Anything else is our own API, unchanged.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/cleanup.h"
#include "common/id.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/util.h"
#include "e2b_internal.h"
#include "proxy/inbound.h"

static const struct route control_routes[] = {
    {"GET", "/health", e2b_h_api_health, ROUTE_PUBLIC, "E2B: the API is up"},
    {"POST", "/sandboxes", e2b_h_create, ROUTE_E2B_KEY, "E2B: create a sandbox"},
    {"POST", "/v2/sandboxes", e2b_h_create, ROUTE_E2B_KEY, "E2B: create a sandbox"},
    {"GET", "/sandboxes", e2b_h_list_v1, ROUTE_E2B_KEY, "E2B: running sandboxes"},
    {"GET", "/v2/sandboxes", e2b_h_list_v2, ROUTE_E2B_KEY, "E2B: sandboxes, filtered, in pages"},
    {"GET", "/sandboxes/metrics", e2b_h_metrics_many, ROUTE_E2B_KEY, "E2B: metrics of some"},
    {"GET", "/sandboxes/{id}", e2b_h_get, ROUTE_E2B_KEY, "E2B: one sandbox"},
    {"DELETE", "/sandboxes/{id}", e2b_h_kill, ROUTE_E2B_KEY, "E2B: kill a sandbox"},
    {"POST", "/sandboxes/{id}/timeout", e2b_h_timeout, ROUTE_E2B_KEY, "E2B: set the timeout"},
    {"POST", "/sandboxes/{id}/refreshes", e2b_h_refresh, ROUTE_E2B_KEY, "E2B: extend its life"},
    {"POST", "/sandboxes/{id}/connect", e2b_h_connect, ROUTE_E2B_KEY, "E2B: connect (resume)"},
    {"POST", "/v2/sandboxes/{id}/connect", e2b_h_connect, ROUTE_E2B_KEY, "E2B: connect"},
    {"POST", "/sandboxes/{id}/resume", e2b_h_resume, ROUTE_E2B_KEY, "E2B: resume (deprecated)"},
    {"POST", "/sandboxes/{id}/pause", e2b_h_pause, ROUTE_E2B_KEY, "E2B: pause, memory kept"},
    {"POST", "/sandboxes/{id}/fork", e2b_h_fork, ROUTE_E2B_KEY, "E2B: fork"},
    {"POST", "/sandboxes/{id}/snapshots", e2b_h_snapshot_create, ROUTE_E2B_KEY, "E2B: snapshot"},
    {"GET", "/sandboxes/{id}/metrics", e2b_h_metrics, ROUTE_E2B_KEY, "E2B: metrics"},
    {"GET", "/snapshots", e2b_h_snapshot_list, ROUTE_E2B_KEY, "E2B: snapshots"},
    {"DELETE", "/templates/{id}", e2b_h_snapshot_delete, ROUTE_E2B_KEY, "E2B: delete a snapshot"},
};

#define RPC(svc, name, h)                                                                          \
    {                                                                                              \
        "POST", "/" svc "/" name, h, ROUTE_PUBLIC, "E2B envd: " svc "/" name                       \
    }

static const struct route envd_routes[] = {
    {"GET", "/health", e2b_h_health, ROUTE_PUBLIC, "E2B envd: health"},
    {"GET", "/envs", e2b_h_envs, ROUTE_PUBLIC, "E2B envd: the sandbox's environment"},
    {"GET", "/metrics", e2b_h_envd_metrics, ROUTE_PUBLIC, "E2B envd: metrics"},
    {"GET", "/files", e2b_h_files_get, ROUTE_PUBLIC, "E2B envd: download a file"},
    {"POST", "/files", e2b_h_files_post, ROUTE_PUBLIC, "E2B envd: upload files",
     e2b_h_files_post_begin, e2b_h_files_post_chunk},
    RPC("process.Process", "Start", e2b_rpc_process_start),
    RPC("process.Process", "Connect", e2b_rpc_process_connect),
    RPC("process.Process", "List", e2b_rpc_process_list),
    RPC("process.Process", "SendInput", e2b_rpc_process_send_input),
    RPC("process.Process", "SendSignal", e2b_rpc_process_send_signal),
    RPC("process.Process", "Update", e2b_rpc_process_update),
    RPC("process.Process", "CloseStdin", e2b_rpc_process_close_stdin),
    {"POST", "/process.Process/StreamInput", e2b_rpc_process_stream_input, ROUTE_PUBLIC,
     "E2B envd: process.Process/StreamInput", e2b_rpc_process_stream_input_begin,
     e2b_rpc_process_stream_input_chunk},
    RPC("filesystem.Filesystem", "Stat", e2b_rpc_fs_stat),
    RPC("filesystem.Filesystem", "MakeDir", e2b_rpc_fs_make_dir),
    RPC("filesystem.Filesystem", "Move", e2b_rpc_fs_move),
    RPC("filesystem.Filesystem", "ListDir", e2b_rpc_fs_list_dir),
    RPC("filesystem.Filesystem", "Remove", e2b_rpc_fs_remove),
    RPC("filesystem.Filesystem", "WatchDir", e2b_rpc_fs_watch_dir),
    RPC("filesystem.Filesystem", "CreateWatcher", e2b_rpc_fs_create_watcher),
    RPC("filesystem.Filesystem", "GetWatcherEvents", e2b_rpc_fs_get_watcher_events),
    RPC("filesystem.Filesystem", "RemoveWatcher", e2b_rpc_fs_remove_watcher),
};
#undef RPC

/* A sandbox port that answers nobody without the sandbox's token (allowPublicTraffic). */
static int port_denied(api_req_t *r, err_t *err)
{
    return err_set(err, ERR_FORBIDDEN, 0, "forbidden",
                   "this sandbox's ports need its traffic access token");
}

/* A sandbox E2B's proxy does not know (or one that ended): 502, as E2B's answers. */
static int sandbox_gone(api_req_t *r, err_t *err)
{
    return err_set(err, ERR_BAD_GATEWAY, 0, "sandbox_not_found", "the sandbox %s was not found",
                   r->e2b_id);
}

static const struct route denied_route = {"", "", port_denied, ROUTE_PUBLIC, "E2B: denied"};
static const struct route gone_route = {"", "", sandbox_gone, ROUTE_PUBLIC, "E2B: no sandbox"};

/* The route of table for r's method and path (params filled). */
static const struct route *find(const struct route *table, size_t n, api_req_t *r, bool *known)
{
    size_t len = strlen(r->path);
    *known = false;
    for (size_t i = 0; i < n; i++) {
        if (!route_pattern_match(table[i].pattern, r->path, len, &r->params))
            continue;
        if (strcmp(table[i].method, r->method) == 0)
            return &table[i];
        *known = true;
    }
    r->params.n = 0;
    return NULL;
}

bool e2b_host_label(const char *host, const char *domain, char *out, size_t size)
{
    if (!host || !domain || !*domain || host[0] == '[')
        return false;
    size_t hl = strcspn(host, ":"), dl = strlen(domain);
    if (hl && host[hl - 1] == '.') /* fully qualified */
        hl--;
    if (hl <= dl + 1 || host[hl - dl - 1] != '.' || strncasecmp(host + hl - dl, domain, dl) != 0)
        return false;
    size_t ll = hl - dl - 1;
    if (ll >= size || memchr(host, '.', ll))
        return false;
    for (size_t i = 0; i < ll; i++)
        out[i] = (char)tolower((unsigned char)host[i]);
    out[ll] = '\0';
    return true;
}

bool e2b_sandbox_label(const char *label, int *port, char *id)
{
    long long p;
    const char *dash = strchr(label, '-');
    char num[8];
    if (!dash || (size_t)(dash - label) >= sizeof(num))
        return false;
    snprintf(num, sizeof(num), "%.*s", (int)(dash - label), label);
    if (!parse_int(num, 1, 65535, &p) || !e2b_id_valid(dash + 1))
        return false;
    *port = (int)p;
    memcpy(id, dash + 1, E2B_ID_LEN + 1);
    return true;
}

/* "<port>-<id>" into r->e2b_port and r->e2b_id. */
static bool sandbox_label(api_req_t *r, const char *label)
{
    char id[E2B_ID_LEN + 1];
    if (!e2b_sandbox_label(label, &r->e2b_port, id))
        return false;
    snprintf(r->e2b_id, sizeof(r->e2b_id), "%s", id);
    return true;
}

/* E2B_SANDBOX_URL: the sandbox and port from the E2b-Sandbox-Id / -Port headers. */
static bool sandbox_headers(api_req_t *r)
{
    const char *id = api_header(r, "E2b-Sandbox-Id");
    const char *port = api_header(r, "E2b-Sandbox-Port");
    long long p = E2B_ENVD_PORT;
    if (!id || !e2b_id_valid(id) || (port && !parse_int(port, 1, 65535, &p)))
        return false;
    r->e2b_port = (int)p;
    snprintf(r->e2b_id, sizeof(r->e2b_id), "%s", id);
    return true;
}

/*
 * A request for another port of the sandbox: our inbound proxy, as the owner when the
 * sandbox's traffic is public or the request has its access token (E2B's proxy checks
 * e2b-traffic-access-token; the envd access token stands for it here too).
 */
static const struct route *port_route(api_req_t *r, bool *known)
{
    e2b_sandbox_rec_t rec;
    err_t err = {0};
    *known = false;
    if (store_e2b_get(r->api->store, -1, r->e2b_id, &rec, &err) < 0)
        return &gone_route;
    const char *tok = api_header(r, "e2b-traffic-access-token");
    if (!tok)
        tok = api_header(r, "X-Access-Token");
    bool ok =
        rec.public_traffic || (rec.access_token[0] && tok && token_equal(tok, rec.access_token));
    bool found = ok && store_user_get_by_id(r->api->store, rec.owner_id, &r->user, NULL) == 0;
    char *path = xasprintf("/sandboxes/%s/proxy%s", rec.sandbox_id, r->path);
    store_e2b_rec_clear(&rec);
    if (!found) {
        free(path);
        return ok ? &gone_route : &denied_route;
    }
    free(r->path);
    r->path = path;
    r->vhost_port = r->e2b_port;
    r->authed = true; /* the owner's request from here: the proxy finds the sandbox */
    return api_route_find(r->method, r->path, strlen(r->path), &r->params, known);
}

/* An X-API-KEY that is an E2B key (e2b_...): our own tokens there stay our API's business. */
static bool e2b_key_header(api_req_t *r)
{
    const char *key = api_header(r, "X-API-KEY");
    return key && strncmp(key, "e2b_", 4) == 0;
}

static bool api_host(api_req_t *r, const char *label)
{
    return label && strcmp(label, "api") == 0;
}

bool e2b_route(api_req_t *r, const struct route **route, bool *known)
{
    const char *domain = r->api->cfg.e2b_domain;
    const char *host = api_header(r, MHD_HTTP_HEADER_HOST);
    char label[96];
    bool below = e2b_host_label(host, domain, label, sizeof(label));
    if (below && api_host(r, label)) {
        r->dialect = API_E2B_CONTROL;
    } else if ((below && sandbox_label(r, label)) ||
               ((!below || strcmp(label, "sandbox") == 0) && sandbox_headers(r))) {
        r->dialect = API_E2B_ENVD;
        if (below) { /* the sandbox's own origin: its pages' scripts run there */
            r->sandbox_origin = true;
            r->origin_host = xstrndup(host, strcspn(host, ":"));
        }
    } else if (below || (e2b_key_header(r) && !api_has_token(r))) {
        /* Every other host below the domain is no sandbox's and never ours (docs/security.md):
           E2B's control plane answers there, with its 404s. */
        r->dialect = API_E2B_CONTROL;
    } else {
        return false;
    }
    if (r->dialect == API_E2B_CONTROL) {
        *route = find(control_routes, ARRAY_SIZE(control_routes), r, known);
        return true;
    }
    if (r->e2b_port != E2B_ENVD_PORT) {
        *route = port_route(r, known);
        return true;
    }
    *route = find(envd_routes, ARRAY_SIZE(envd_routes), r, known);
    if (strncmp(r->path, "/process.Process/", 17) == 0 ||
        strncmp(r->path, "/filesystem.Filesystem/", 23) == 0)
        r->dialect = API_E2B_RPC;
    return true;
}
