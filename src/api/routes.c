/* The route table: every route the daemon serves. openapi.json must list exactly these. */
#include <string.h>

#include "api_internal.h"
#include "common/cleanup.h"
#include "h_processes.h"

const struct route api_routes[] = {
    {"GET", "/healthz", h_healthz, ROUTE_PUBLIC, "Liveness"},
    {"GET", "/readyz", h_readyz, ROUTE_PUBLIC, "Readiness"},
    {"GET", "/openapi.json", h_openapi, ROUTE_PUBLIC, "This API as OpenAPI 3.1"},
    {"GET", "/metrics", h_metrics, ROUTE_ADMIN, "Prometheus metrics (admins)"},
    {"GET", "/auth/me", h_me, ROUTE_AUTH, "The caller"},
    {"POST", "/auth/tokens", h_token_create, ROUTE_AUTH, "Create a token"},
    {"GET", "/auth/tokens", h_token_list, ROUTE_AUTH, "List tokens"},
    {"DELETE", "/auth/tokens/{id}", h_token_delete, ROUTE_AUTH, "Revoke a token"},
    {"GET", "/auth/users/{name}/limits", h_user_limits_get, ROUTE_ADMIN,
     "A user's limits (admins)"},
    {"POST", "/auth/users/{name}/limits", h_user_limits_set, ROUTE_ADMIN,
     "Set a user's limits (admins)"},
    {"POST", "/sandboxes", h_sandbox_create, ROUTE_AUTH, "Create a sandbox"},
    {"GET", "/sandboxes", h_sandbox_list, ROUTE_AUTH, "List the caller's sandboxes"},
    {"GET", "/sandboxes/{id}", h_sandbox_get, ROUTE_AUTH, "One sandbox"},
    {"GET", "/sandboxes/{id}/stats", h_stats, ROUTE_AUTH,
     "CPU, memory, tasks, disk and network use now"},
    {"PATCH", "/sandboxes/{id}", h_sandbox_patch, ROUTE_AUTH, "Change label or public"},
    {"DELETE", "/sandboxes/{id}", h_sandbox_delete, ROUTE_AUTH, "Delete a sandbox"},
    {"POST", "/sandboxes/{id}/execute", h_execute, ROUTE_AUTH, "Run sh -c code"},
    {"POST", "/sandboxes/{id}/exec", h_exec, ROUTE_AUTH, "Run an argv"},
    {"GET", "/sandboxes/{id}/exec/pty", h_exec_pty, ROUTE_AUTH | ROUTE_WS_TOKEN,
     "A shell (or ?cmd=) on a PTY, over WebSocket"},
    {"GET", "/sandboxes/{id}/attach", h_attach, ROUTE_AUTH | ROUTE_WS_TOKEN,
     "The console of an interactive sandbox's main process, over WebSocket"},
    {"GET", "/sandboxes/{id}/logs", h_logs, ROUTE_AUTH, "The main process's output"},
    {"POST", "/sandboxes/{id}/processes", h_proc_start, ROUTE_AUTH,
     "Start a background process (owned by the sandbox)"},
    {"GET", "/sandboxes/{id}/processes", h_proc_list, ROUTE_AUTH, "The background processes"},
    {"GET", "/sandboxes/{id}/processes/{pid}", h_proc_get, ROUTE_AUTH, "One background process"},
    {"PATCH", "/sandboxes/{id}/processes/{pid}", h_proc_patch, ROUTE_AUTH,
     "Resize a background process's terminal"},
    {"DELETE", "/sandboxes/{id}/processes/{pid}", h_proc_delete, ROUTE_AUTH,
     "Kill a background process's group and forget it"},
    {"GET", "/sandboxes/{id}/processes/{pid}/output", h_proc_output, ROUTE_AUTH,
     "A background process's output from a cursor (?stream=true follows it)"},
    {"POST", "/sandboxes/{id}/processes/{pid}/stdin", h_proc_stdin, ROUTE_AUTH,
     "Write the body to a background process's stdin (?eof=true closes it)"},
    {"POST", "/sandboxes/{id}/processes/{pid}/signal", h_proc_signal, ROUTE_AUTH,
     "Send a background process's group a signal"},
    {"GET", "/sandboxes/{id}/execution-logs", h_execution_logs, ROUTE_AUTH,
     "Executions with their output, oldest first"},
    {"GET", "/sandboxes/{id}/command-executions", h_command_executions, ROUTE_AUTH,
     "Executions with their output, newest first"},
    {"GET", "/sandboxes/{id}/command-executions/{eid}/logs", h_command_execution_logs, ROUTE_AUTH,
     "One execution's output from a cursor"},
    {"POST", "/sandboxes/{id}/fork", h_fork, ROUTE_AUTH, "Fork a running sandbox"},
    {"GET", "/sandboxes/{id}/tree", h_tree, ROUTE_AUTH, "The fork tree of a sandbox"},
    {"POST", "/sandboxes/{id}/coalesce/{final}", h_coalesce, ROUTE_AUTH,
     "Keep final, delete the rest of the subtree"},
    {"PUT", "/sandboxes/{id}/pause", h_pause, ROUTE_AUTH, "Freeze a sandbox"},
    {"DELETE", "/sandboxes/{id}/pause", h_unpause, ROUTE_AUTH, "Thaw a sandbox"},
    {"POST", "/sandboxes/{id}/hibernate", h_hibernate, ROUTE_AUTH, "Checkpoint to disk"},
    {"POST", "/sandboxes/{id}/wake", h_wake, ROUTE_AUTH, "Restore a hibernated sandbox"},
    {"POST", "/sandboxes/{id}/snapshots", h_snapshot_create, ROUTE_AUTH, "Keep a snapshot"},
    {"GET", "/snapshots", h_snapshot_list, ROUTE_AUTH, "The caller's snapshots"},
    {"DELETE", "/snapshots/{name}", h_snapshot_delete, ROUTE_AUTH, "Delete a snapshot"},
    {"POST", "/templates", h_template_create, ROUTE_AUTH,
     "Build a template from a Dockerfile (?stream=true: its log as ndjson) or a snapshot"},
    {"GET", "/templates", h_template_list, ROUTE_AUTH, "The templates the caller sees"},
    {"GET", "/templates/{name}", h_template_get, ROUTE_AUTH, "One template and its warm pool"},
    {"PATCH", "/templates/{name}", h_template_patch, ROUTE_AUTH,
     "Set the size of a template's warm pool"},
    {"DELETE", "/templates/{name}", h_template_delete, ROUTE_AUTH,
     "Delete a template and drain its pool"},
    {"GET", "/sandboxes/{id}/files/{path*}", h_files_get, ROUTE_AUTH,
     "A file (streamed, Range) or a directory listing"},
    {"PUT", "/sandboxes/{id}/files/{path*}", h_files_put, ROUTE_AUTH,
     "Write one file from the body (atomic)", h_files_put_begin, h_files_put_chunk},
    {"POST", "/sandboxes/{id}/files/{path*}", h_files_post, ROUTE_AUTH,
     "Upload files (multipart, field files) into a directory", h_files_post_begin,
     h_files_post_chunk},
    {"DELETE", "/sandboxes/{id}/files/{path*}", h_files_delete, ROUTE_AUTH,
     "Delete a file or directory"},
    {"GET", "/events", h_events, ROUTE_AUTH, "Events of the caller's sandboxes (SSE)"},
#define PROXY(m)                                                                                   \
    {                                                                                              \
        m, "/sandboxes/{id}/proxy/{path*}", h_proxy, ROUTE_PROXY, "Proxy to the sandbox's port",   \
            h_proxy_begin, h_proxy_chunk                                                           \
    }
    PROXY("GET"),
    PROXY("HEAD"),
    PROXY("POST"),
    PROXY("PUT"),
    PROXY("PATCH"),
    PROXY("DELETE"),
    PROXY("OPTIONS"),
#undef PROXY
    {"GET", "/", h_web_root, ROUTE_PUBLIC, "Redirect to the web console"},
    {"GET", "/ui", h_web_page, ROUTE_PUBLIC, "The web console"},
    {"GET", "/ui/{path*}", h_web_asset, ROUTE_PUBLIC, "The web console's scripts and styles"},
    {"GET", "/images", h_image_list, ROUTE_AUTH, "Images in the store"},
    {"POST", "/images/pull", h_image_pull, ROUTE_AUTH, "Pull an image"},
    {"POST", "/images/import", h_image_import, ROUTE_ADMIN,
     "Import an OCI layout or archive from the daemon's host"},
    {"DELETE", "/images/{ref*}", h_image_delete, ROUTE_ADMIN, "Remove an image"},
};

const size_t api_routes_count = ARRAY_SIZE(api_routes);

const struct route *api_route_find(const char *method, const char *path, size_t len,
                                   struct route_params *params, bool *path_known)
{
    *path_known = false;
    for (size_t i = 0; i < api_routes_count; i++) {
        if (!route_pattern_match(api_routes[i].pattern, path, len, params))
            continue;
        if (strcmp(api_routes[i].method, method) == 0)
            return &api_routes[i];
        *path_known = true;
    }
    params->n = 0;
    return NULL;
}
