/* Route matching and the OpenAPI document against the route table. */
#include <jansson.h>
#include <strings.h>

#include "api/api_internal.h"
#include "api/route.h"
#include "tap.h"

static bool match(const char *pattern, const char *path, struct route_params *p)
{
    return route_pattern_match(pattern, path, strlen(path), p);
}

static bool param_is(const struct route_params *p, size_t i, const char *name, const char *val)
{
    return i < p->n && p->p[i].name_len == strlen(name) &&
           memcmp(p->p[i].name, name, p->p[i].name_len) == 0 && p->p[i].value_len == strlen(val) &&
           memcmp(p->p[i].value, val, p->p[i].value_len) == 0;
}

static void test_patterns(void)
{
    struct route_params p;
    ok(match("/healthz", "/healthz", &p) && p.n == 0, "literal matches");
    ok(!match("/healthz", "/healthz/", &p), "trailing slash does not match a literal");
    ok(!match("/healthz", "/health", &p), "prefix does not match");
    ok(!match("/healthz", "/healthzz", &p), "longer does not match");
    ok(match("/auth/tokens/{id}", "/auth/tokens/tok_1", &p) && param_is(&p, 0, "id", "tok_1"),
       "param captured");
    ok(!match("/auth/tokens/{id}", "/auth/tokens/", &p), "empty param does not match");
    ok(!match("/auth/tokens/{id}", "/auth/tokens/a/b", &p), "param takes one segment");
    ok(match("/s/{id}/files/{path*}", "/s/x/files/a/b/c.txt", &p) && param_is(&p, 0, "id", "x") &&
           param_is(&p, 1, "path", "a/b/c.txt"),
       "rest param takes the rest");
    ok(match("/s/{id}/files/{path*}", "/s/x/files/", &p) && param_is(&p, 1, "path", ""),
       "rest param may be empty");
    ok(match("/s/{id}/files/{path*}", "/s/x/files", &p) && param_is(&p, 1, "path", ""),
       "rest param without the slash");
    ok(!match("/s/{id}/files/{path*}", "/s/x/filesx", &p), "rest param needs its literal");
    ok(!match("/healthz", "", &p) && !match("/healthz", "healthz", &p), "relative paths fail");
    ok(match("/s/{a}/c/{b}", "/s/1/c/2", &p) && param_is(&p, 1, "b", "2"), "two params");
}

static void test_table_lookup(void)
{
    struct route_params p;
    bool known;
    const struct route *r = api_route_find("GET", "/auth/me", 8, &p, &known);
    ok(r && r->handler == h_me, "GET /auth/me routes to h_me");
    r = api_route_find("PUT", "/auth/me", 8, &p, &known);
    ok(!r && known, "PUT /auth/me is a known path with the wrong method");
    r = api_route_find("GET", "/nope", 5, &p, &known);
    ok(!r && !known, "unknown path");
    r = api_route_find("DELETE", "/auth/tokens/tok_x", 18, &p, &known);
    ok(r && r->handler == h_token_delete && param_is(&p, 0, "id", "tok_x"), "delete token");
}

/* "/a/{p*}" → "/a/{p}": OpenAPI has no rest parameters. */
static void openapi_path(const char *pattern, char *out, size_t size)
{
    size_t o = 0;
    for (const char *s = pattern; *s && o + 1 < size; s++)
        if (!(*s == '*' && s[1] == '}'))
            out[o++] = *s;
    out[o] = '\0';
}

static void test_openapi_matches_table(void)
{
    json_error_t jerr;
    json_t *doc = json_loadb(api_openapi_json, api_openapi_json_len, 0, &jerr);
    ok(doc != NULL, "openapi.json parses (%s)", doc ? "" : jerr.text);
    if (!doc)
        return;
    is_str(json_string_value(json_object_get(doc, "openapi")), "3.1.0", "OpenAPI 3.1");
    json_t *paths = json_object_get(doc, "paths");
    size_t missing = 0, documented = 0;
    for (size_t i = 0; i < api_routes_count; i++) {
        char path[256], method[16];
        openapi_path(api_routes[i].pattern, path, sizeof(path));
        size_t k;
        for (k = 0; api_routes[i].method[k] && k + 1 < sizeof(method); k++)
            method[k] = (char)(api_routes[i].method[k] | 0x20);
        method[k] = '\0';
        json_t *op = json_object_get(json_object_get(paths, path), method);
        if (!op) {
            printf("# route %s %s is not in openapi.json\n", api_routes[i].method, path);
            missing++;
        }
        bool public_doc = json_is_array(json_object_get(op, "security")) &&
                          json_array_size(json_object_get(op, "security")) == 0;
        if (op && public_doc != ((api_routes[i].flags & ROUTE_PUBLIC) != 0)) {
            printf("# route %s %s: auth differs from openapi.json\n", api_routes[i].method, path);
            missing++;
        }
    }
    ok(missing == 0, "every route is documented with its auth");
    const char *path;
    json_t *item;
    size_t extra = 0;
    json_object_foreach(paths, path, item)
    {
        const char *method;
        json_t *op;
        json_object_foreach(item, method, op)
        {
            if (strcmp(method, "parameters") == 0)
                continue;
            documented++;
            bool found = false;
            for (size_t i = 0; i < api_routes_count && !found; i++) {
                char p[256];
                openapi_path(api_routes[i].pattern, p, sizeof(p));
                found = strcmp(p, path) == 0 && strcasecmp(api_routes[i].method, method) == 0;
            }
            if (!found) {
                printf("# openapi.json documents %s %s, which no route serves\n", method, path);
                extra++;
            }
        }
    }
    ok(extra == 0, "every documented operation is a route");
    ok(documented == api_routes_count, "as many operations (%zu) as routes (%zu)", documented,
       api_routes_count);
    json_decref(doc);
}

int main(void)
{
    test_patterns();
    test_table_lookup();
    test_openapi_matches_table();
    return tap_done();
}
