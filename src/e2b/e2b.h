/*
 * E2B's APIs over Sandboxer (docs/e2b.md): the control plane (api.<domain>, or X-API-KEY) and
 * each sandbox's envd (<port>-<id>.<domain>, or the E2b-Sandbox-Id header), translated to the
 * sandbox operations of sandbox.h that our own routes call. What the HTTP layer asks of it.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "api/api_internal.h"

/*
 * If r speaks one of E2B's dialects, set r->dialect (and for a sandbox host r->e2b_id and
 * r->e2b_port; a request for a port other than envd's is rewritten to our inbound proxy) and
 * return true with *route the route that serves it (NULL if none: *known then says whether
 * the path exists with another method). False for our own API.
 */
bool e2b_route(api_req_t *r, const struct route **route, bool *known);
/* Answer err in r's E2B dialect (its status and body shape; a streaming RPC gets its end
 * message); detail is what may be said of it. */
void e2b_reply_error(api_req_t *r, const err_t *err, const char *detail);
