/* Bearer-token authentication. */
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "api_internal.h"
#include "common/id.h"

bool api_has_token(const api_req_t *r)
{
    const char *h = api_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
    return h && strncasecmp(h, "Bearer sbx_", 11) == 0;
}

int api_authenticate(api_req_t *r, err_t *err)
{
    const char *h = api_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h)
        return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized",
                       "missing bearer token (Authorization: Bearer <token>)");
    if (strncasecmp(h, "Bearer ", 7) != 0)
        return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized",
                       "the Authorization header must use the Bearer scheme");
    const char *tok = h + 7;
    while (*tok == ' ')
        tok++;
    size_t len = strlen(tok);
    while (len && isspace((unsigned char)tok[len - 1]))
        len--;
    /* Malformed tokens fail without touching the store. */
    if (!token_well_formed(tok, len))
        return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized", "invalid token");
    char hash[TOKEN_HASH_LEN + 1];
    token_hash(tok, len, hash);
    err_t lerr = {0};
    if (store_token_lookup(r->api->store, hash, &r->user, &r->token, &lerr) < 0) {
        if (lerr.kind == ERR_UNAUTHORIZED)
            return err_set(err, ERR_UNAUTHORIZED, 0, "unauthorized", "invalid token");
        *err = lerr;
        return -1;
    }
    r->authed = true;
    store_token_touch(r->api->store, &r->token);
    return 0;
}
