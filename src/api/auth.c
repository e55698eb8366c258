/* Bearer-token authentication: the Authorization header, or a WebSocket subprotocol. */
#include <ctype.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>

#include "api_internal.h"
#include "common/id.h"

#define WS_BEARER_PREFIX "bearer."

/* After the Bearer scheme and its spaces (any case, SP or HTAB), or NULL if not Bearer. */
static const char *bearer_credentials(const char *h)
{
    if (strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t'))
        return NULL;
    h += 6;
    while (*h == ' ' || *h == '\t')
        h++;
    return h;
}

bool api_has_token(const api_req_t *r)
{
    const char *h = api_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *t = h ? bearer_credentials(h) : NULL;
    /* However it is spaced or cased: a token sent this way is never taken as anonymous. */
    return t && strncasecmp(t, "sbx_", 4) == 0;
}

/*
 * The next entry of a Sec-WebSocket-Protocol list ("a, b,c"): *s moves past it. Returns its
 * length (0 for an empty entry) with *entry at its start, or -1 at the end of the list.
 */
static ssize_t next_protocol(const char **s, const char **entry)
{
    const char *p = *s;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p)
        return -1;
    size_t n = strcspn(p, ",");
    *s = p[n] ? p + n + 1 : p + n;
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    *entry = p;
    return (ssize_t)n;
}

bool api_ws_protocol_offered(const api_req_t *r, const char *name)
{
    const char *h = api_header(r, "Sec-WebSocket-Protocol");
    const char *e;
    ssize_t n;
    size_t want = strlen(name);
    while (h && (n = next_protocol(&h, &e)) >= 0)
        if ((size_t)n == want && memcmp(e, name, want) == 0)
            return true;
    return false;
}

/*
 * The token of the subprotocol entry bearer.<token>, for browsers, which cannot set
 * Authorization on a WebSocket. Only on routes that allow it and only on an upgrade.
 */
static int ws_protocol_token(const api_req_t *r, const char **tok, size_t *len, err_t *err)
{
    const char *h = api_header(r, "Sec-WebSocket-Protocol");
    const char *up = api_header(r, MHD_HTTP_HEADER_UPGRADE);
    const size_t plen = strlen(WS_BEARER_PREFIX);
    const char *e;
    ssize_t n;
    *tok = NULL;
    if (!(r->route->flags & ROUTE_WS_TOKEN) || !up || strcasecmp(up, "websocket") != 0)
        h = NULL;
    while (h && (n = next_protocol(&h, &e)) >= 0) {
        if ((size_t)n < plen || strncmp(e, WS_BEARER_PREFIX, plen) != 0)
            continue;
        if (*tok)
            return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized",
                           "more than one bearer.<token> subprotocol");
        *tok = e + plen;
        *len = (size_t)n - plen;
    }
    if (!*tok)
        return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized",
                       "missing bearer token (Authorization: Bearer <token>)");
    return 0;
}

/* The token of the Authorization header. */
static int header_token(const char *h, const char **tok, size_t *len, err_t *err)
{
    const char *t = bearer_credentials(h);
    if (!t)
        return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized",
                       "the Authorization header must use the Bearer scheme");
    size_t n = strlen(t);
    while (n && isspace((unsigned char)t[n - 1]))
        n--;
    *tok = t;
    *len = n;
    return 0;
}

/* Look the secret (tok, len) up as a token of kind; fills r->user and r->token. */
static int lookup_secret(api_req_t *r, const char *tok, size_t len, const char *kind, err_t *err)
{
    char hash[TOKEN_HASH_LEN + 1];
    token_hash(tok, len, hash);
    err_t lerr = {0};
    if (store_token_lookup(r->api->store, hash, &r->user, &r->token, &lerr) < 0) {
        if (lerr.kind == ERR_UNAUTHORIZED)
            return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized", "invalid token");
        *err = lerr;
        return -1;
    }
    /* A bearer token is no API key and an API key no bearer token. */
    if (strcmp(r->token.kind[0] ? r->token.kind : "sbx", kind) != 0)
        return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized", "invalid token");
    r->authed = true;
    store_token_touch(r->api->store, &r->token);
    return 0;
}

int api_authenticate(api_req_t *r, err_t *err)
{
    const char *h = api_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *tok = NULL;
    size_t len = 0;
    /* The header wins when present; the subprotocol is only the browsers' way round it. */
    if ((h ? header_token(h, &tok, &len, err) : ws_protocol_token(r, &tok, &len, err)) < 0)
        return -1;
    /* Malformed tokens fail without touching the store. */
    if (!token_well_formed(tok, len))
        return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized", "invalid token");
    return lookup_secret(r, tok, len, "sbx", err);
}

int api_authenticate_e2b(api_req_t *r, const char *key, err_t *err)
{
    size_t len = key ? strlen(key) : 0;
    while (len && isspace((unsigned char)key[len - 1]))
        len--;
    if (!key || !token_well_formed_prefixed(key, len, E2B_KEY_PREFIX))
        return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized", "invalid API key");
    return lookup_secret(r, key, len, "e2b", err);
}
