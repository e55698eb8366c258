/*
 * Tokens and users: POST/GET /auth/tokens, DELETE /auth/tokens/{id}, GET /auth/me, and the
 * users' limits (GET/POST /auth/users/{name}/limits, admins only).
 */
#include <string.h>

#include "api_internal.h"
#include "common/cleanup.h"
#include "common/id.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "sandbox/sandbox.h"

/* User names: 1-64 of [a-z0-9._-], starting with a letter or digit. */
static bool user_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64 || s[0] == '.' || s[0] == '-' || s[0] == '_')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_'))
            return false;
    }
    return true;
}

static json_t *token_json(const token_info_t *t)
{
    json_t *j =
        json_pack("{s:s, s:s, s:s, s:f, s:s}", "id", t->id, "name", t->name, "user", t->user_name,
                  "created_at", t->created_at, "kind", t->kind[0] ? t->kind : "sbx");
    json_object_set_new(j, "last_used_at",
                        t->last_used_at > 0 ? json_real(t->last_used_at) : json_null());
    return j;
}

struct token_create_req {
    const char *name;
    const char *user;
    int admin;
    json_t *limits;
    const char *kind;
};

static const struct jfield token_create_fields[] = {
    {"name", JF_STRING, false, offsetof(struct token_create_req, name), 128, 0, 0},
    {"user", JF_STRING, false, offsetof(struct token_create_req, user), 64, 0, 0},
    {"admin", JF_BOOL, false, offsetof(struct token_create_req, admin), 0, 0, 0},
    {"limits", JF_OBJECT, false, offsetof(struct token_create_req, limits), 0, 0, 0},
    {"kind", JF_STRING, false, offsetof(struct token_create_req, kind), 8, 0, 0},
};

/* "sbx" (a bearer token, the default) or "e2b" (an API key for E2B's clients, X-API-KEY). */
static int token_kind(const struct token_create_req *q, const char **prefix, err_t *err)
{
    if (!q->kind || strcmp(q->kind, "sbx") == 0) {
        *prefix = TOKEN_PREFIX;
        return 0;
    }
    if (strcmp(q->kind, "e2b") == 0) {
        *prefix = E2B_KEY_PREFIX;
        return 0;
    }
    return err_set(err, ERR_INVALID, 0, "invalid_field", "field 'kind' must be \"sbx\" or \"e2b\"");
}

/* Apply the limits object to user u's own (what it leaves out stays as it was). */
static int update_limits(api_req_t *r, const user_t *u, json_t *limits, err_t *err)
{
    user_limits_t l;
    if (store_user_limits_get(r->api->store, u->id, &l, err) < 0 ||
        sbx_limits_parse(limits, &l, err) < 0)
        return -1;
    return store_user_limits_set(r->api->store, u->id, &l, err);
}

/* {user, admin, limits (what holds now), set (the user's own; null: the default)}. */
static json_t *limits_json(api_req_t *r, const user_t *u, err_t *err)
{
    user_limits_t own, eff;
    if (store_user_limits_get(r->api->store, u->id, &own, err) < 0)
        return NULL;
    sbx_user_limits(r->api->sbx, u, &eff);
    return json_pack("{s:s, s:b, s:o, s:o}", "user", u->name, "admin", u->is_admin, "limits",
                     sbx_limits_json(&eff), "set", sbx_limits_json(&own));
}

/* Decide whose token this is: the caller's own, or (admins only) any user's, made if new. */
static int resolve_owner(api_req_t *r, const struct token_create_req *q, user_t *owner, err_t *err)
{
    if (!q->user || strcmp(q->user, r->user.name) == 0) {
        if (q->admin == 1 && !r->user.is_admin)
            return err_set(err, ERR_FORBIDDEN, 0, "admin_only", "only admins can grant admin");
        *owner = r->user;
        return 0;
    }
    if (!r->user.is_admin)
        return err_set(err, ERR_FORBIDDEN, 0, "admin_only",
                       "only admins can create tokens for other users");
    if (!user_name_valid(q->user))
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "field 'user' must be 1-64 characters of a-z, 0-9, '.', '-', '_'");
    err_t gerr = {0};
    if (store_user_get_by_name(r->api->store, q->user, owner, &gerr) == 0) {
        if (q->admin >= 0 && (q->admin == 1) != owner->is_admin)
            return err_set(err, ERR_CONFLICT, 0, "user_exists",
                           "user '%s' exists with a different admin flag", q->user);
        return 0;
    }
    if (gerr.kind != ERR_NOT_FOUND) {
        *err = gerr;
        return -1;
    }
    return store_user_create(r->api->store, q->user, q->admin == 1, owner, err);
}

int h_token_create(api_req_t *r, err_t *err)
{
    json_t *body _cleanup_json_ = NULL;
    struct token_create_req q = {.admin = -1};
    const char *prefix = TOKEN_PREFIX;
    if (api_body_object(r, true, &body, err) < 0 ||
        json_decode_fields(body, token_create_fields, ARRAY_SIZE(token_create_fields), &q, err) <
            0 ||
        token_kind(&q, &prefix, err) < 0)
        return -1;
    user_limits_t scratch;
    store_limits_unset(&scratch);
    if (q.limits && !r->user.is_admin)
        return err_set(err, ERR_FORBIDDEN, 0, "admin_only", "only admins can set limits");
    if (q.limits && sbx_limits_parse(q.limits, &scratch, err) < 0) /* before anything is made */
        return -1;
    user_t owner;
    if (resolve_owner(r, &q, &owner, err) < 0 ||
        (q.limits && update_limits(r, &owner, q.limits, err) < 0))
        return -1;
    char secret[TOKEN_LEN + 1], hash[TOKEN_HASH_LEN + 1], id[24];
    memcpy(id, "tok_", 4);
    if (!token_generate_prefixed(secret, prefix) || !id_random_hex(id + 4, 8))
        return err_set(err, ERR_INTERNAL, 0, "internal", "no randomness for a token");
    token_hash(secret, strlen(secret), hash);
    token_info_t info;
    if (store_token_insert_kind(r->api->store, id, owner.id, q.name,
                                strcmp(prefix, TOKEN_PREFIX) == 0 ? "sbx" : "e2b", hash, &info,
                                err) < 0)
        return -1;
    snprintf(info.user_name, sizeof(info.user_name), "%s", owner.name);
    json_t *out = token_json(&info);
    json_object_set_new(out, "token", json_string(secret));
    json_object_set_new(out, "admin", json_boolean(owner.is_admin));
    api_reply_json(r, 201, out);
    return 0;
}

int h_token_list(api_req_t *r, err_t *err)
{
    const char *user = api_query(r, "user");
    const char *all = api_query(r, "all");
    bool want_all = all && (strcmp(all, "true") == 0 || strcmp(all, "1") == 0);
    int64_t filter = r->user.id;
    if ((user && strcmp(user, r->user.name) != 0) || want_all) {
        if (!r->user.is_admin)
            return err_set(err, ERR_FORBIDDEN, 0, "admin_only",
                           "only admins can list other users' tokens");
        filter = -1;
        if (user && !want_all) {
            user_t u;
            if (store_user_get_by_name(r->api->store, user, &u, err) < 0)
                return -1;
            filter = u.id;
        }
    }
    _cleanup_free_ token_info_t *items = NULL;
    size_t n = 0;
    if (store_token_list(r->api->store, filter, &items, &n, err) < 0)
        return -1;
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, token_json(&items[i]));
    api_reply_json(r, 200, json_pack("{s:o}", "tokens", arr));
    return 0;
}

int h_token_delete(api_req_t *r, err_t *err)
{
    _cleanup_free_ char *id = api_param(r, "id");
    if (store_token_delete(r->api->store, id, r->user.is_admin ? -1 : r->user.id, err) < 0)
        return -1;
    api_reply_json(r, 200, json_pack("{s:s, s:b}", "id", id, "deleted", 1));
    return 0;
}

int h_me(api_req_t *r, err_t *err)
{
    user_limits_t eff;
    user_usage_t use;
    sbx_user_limits(r->api->sbx, &r->user, &eff);
    if (store_user_usage(r->api->store, r->user.id, now_unix() - 60, &use, err) < 0)
        return -1;
    api_reply_json(r, 200,
                   json_pack("{s:I, s:s, s:b, s:f, s:{s:s, s:s}, s:o, s:{s:I, s:I, s:I}}", "id",
                             (json_int_t)r->user.id, "name", r->user.name, "admin",
                             r->user.is_admin, "created_at", r->user.created_at, "token", "id",
                             r->token.id, "name", r->token.name, "limits", sbx_limits_json(&eff),
                             "usage", "running", (json_int_t)use.running, "sandboxes",
                             (json_int_t)use.sandboxes, "created_last_minute",
                             (json_int_t)use.created_recently));
    return 0;
}

/* The user the route names (ERR_NOT_FOUND "user_not_found" if none). */
static int named_user(api_req_t *r, user_t *u, err_t *err)
{
    _cleanup_free_ char *name = api_param(r, "name");
    if (!name || !user_name_valid(name))
        return err_set(err, ERR_NOT_FOUND, 0, "user_not_found", "no such user");
    return store_user_get_by_name(r->api->store, name, u, err);
}

int h_user_limits_get(api_req_t *r, err_t *err)
{
    user_t u;
    json_t *out;
    if (named_user(r, &u, err) < 0 || !(out = limits_json(r, &u, err)))
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}

int h_user_limits_set(api_req_t *r, err_t *err)
{
    json_t *body _cleanup_json_ = NULL;
    user_t u;
    json_t *out;
    if (named_user(r, &u, err) < 0 || api_body_object(r, false, &body, err) < 0 ||
        update_limits(r, &u, body, err) < 0 || !(out = limits_json(r, &u, err)))
        return -1;
    api_reply_json(r, 200, out);
    return 0;
}
