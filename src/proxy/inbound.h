/*
 * The inbound proxy's rules for what passes between a client and a sandbox: which request
 * headers reach the sandbox, which of its answer's headers reach the client, and the client
 * address headers the proxy sets itself. Pure functions over untrusted strings (a fuzz target
 * and unit tests cover them); src/api/h_proxy.c applies them.
 *
 * Two kinds of origin: the API's own host (where the console and the API live: a sandbox's
 * answer there is script-less and keeps no cookies) and a sandbox's own subdomain under
 * --vhost (its own origin: its answer passes as it is, except cookies for other hosts).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

/* The policy of every proxied answer on the API's origin: no scripts, a unique origin. */
#define INBOUND_API_ORIGIN_CSP "sandbox"

/* True if s (n bytes) holds a Sandboxer token's shape: "sbx_" (or "sbx%5F") + 64 hex, any case. */
bool inbound_has_token(const char *s, size_t n);

/* True if name is a valid header field name (an RFC 9110 token). */
bool inbound_header_name_ok(const char *name);

/*
 * True if the request header name: value goes on to the sandbox. Dropped: invalid names,
 * hop-by-hop headers and those that connection (the request's Connection header, or NULL)
 * lists, the client-address headers (the proxy sets its own), framing headers (the proxy
 * sets its own), any header holding a token (Basic credentials decoded first), Cookie on the
 * API's origin, and Sec-WebSocket-Protocol (see inbound_ws_protocols).
 */
bool inbound_request_header_ok(const char *name, const char *value, const char *connection,
                               bool api_origin);

/* Append the entries of a Sec-WebSocket-Protocol value that hold no token to out (a list). */
void inbound_ws_protocols(const char *value, buf_t *out);

/*
 * True if the sandbox's answer header name: value goes on to the client. On the API's origin
 * the headers the proxy sets there (Content-Security-Policy, X-Content-Type-Options) and those
 * that would reach beyond the answer (cookies, Clear-Site-Data, Strict-Transport-Security,
 * Service-Worker-Allowed) are dropped; on a sandbox's own origin (host, without port) only
 * cookies for another domain are.
 */
bool inbound_response_header_ok(const char *name, const char *value, const char *host,
                                bool api_origin);

/* True if the Set-Cookie value makes a host-only cookie, or one whose Domain is exactly host. */
bool inbound_cookie_ok(const char *value, const char *host);

/*
 * Append the client-address headers the sandbox gets, from the peer the daemon saw: ip (IPv4
 * or IPv6 text), the Host the client asked for (omitted when NULL or not a plain host[:port])
 * and the scheme: Forwarded, X-Forwarded-For, X-Real-IP, X-Forwarded-Proto, X-Forwarded-Host.
 */
void inbound_forwarded_headers(buf_t *b, const char *ip, const char *host, const char *proto);
