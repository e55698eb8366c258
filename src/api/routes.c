/* The route table: every route the daemon serves. openapi.json must list exactly these. */
#include <string.h>

#include "api_internal.h"
#include "common/cleanup.h"

const struct route api_routes[] = {
    {"GET", "/healthz", h_healthz, ROUTE_PUBLIC, "Liveness"},
    {"GET", "/readyz", h_readyz, ROUTE_PUBLIC, "Readiness"},
    {"GET", "/openapi.json", h_openapi, ROUTE_PUBLIC, "This API as OpenAPI 3.1"},
    {"GET", "/auth/me", h_me, ROUTE_AUTH, "The caller"},
    {"POST", "/auth/tokens", h_token_create, ROUTE_AUTH, "Create a token"},
    {"GET", "/auth/tokens", h_token_list, ROUTE_AUTH, "List tokens"},
    {"DELETE", "/auth/tokens/{id}", h_token_delete, ROUTE_AUTH, "Revoke a token"},
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
