/* The inbound proxy's header rules: tokens never pass, cookies stay on their host. */
#include <string.h>

#include "proxy/inbound.h"
#include "tap.h"

#define HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define TOKEN "sbx_" HEX64

static bool has(const char *s)
{
    return inbound_has_token(s, strlen(s));
}

static bool req_ok(const char *name, const char *value)
{
    return inbound_request_header_ok(name, value, NULL, false);
}

static void test_token_shapes(void)
{
    ok(has(TOKEN), "a token");
    ok(has("Bearer  " TOKEN), "spaced");
    ok(has("SBX_0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF"), "any case");
    ok(has("a=1; t=sbx%5F" HEX64 "; b=2"), "percent-encoded underscore, in a cookie");
    ok(has("x" TOKEN "y"), "inside other text");
    ok(!has("sbx_123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
       "63 hex digits are not a token");
    ok(!has("sbx_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeg"), "not hex");
    ok(!inbound_has_token(TOKEN, 60), "bounded by n, not by the NUL");
    ok(!has(""), "empty");
}

static void test_request_headers(void)
{
    ok(!req_ok("Authorization", "Bearer " TOKEN), "bearer token");
    ok(!req_ok("Authorization", "Bearer  " TOKEN), "two spaces");
    ok(!req_ok("authorization", "bearer\t" TOKEN), "tab, lower case");
    ok(!req_ok("X-Api-Key", TOKEN), "another header");
    ok(!req_ok("Cookie", "session=abc; t=" TOKEN), "a cookie");
    /* base64("u:" TOKEN) */
    ok(!req_ok("Authorization", "Basic dTpzYnhfMDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWYwMTIzND"
                                "U2Nzg5YWJjZGVmMDEyMzQ1Njc4OWFiY2RlZg=="),
       "Basic credentials holding a token");
    ok(req_ok("Authorization", "Basic dXNlcjpwYXNz"), "Basic credentials of the app pass");
    ok(req_ok("Authorization", "Bearer app-own-token"), "the app's own bearer token passes");
    ok(req_ok("Cookie", "a=1"), "cookies pass on a sandbox's origin");
    ok(!inbound_request_header_ok("Cookie", "a=1", NULL, true), "not on the API's origin");
    const char *ours[] = {
        "X-Forwarded-For", "x-forwarded-host", "X-Forwarded-Port",       "Forwarded",
        "X-Real-IP",       "True-Client-IP",   "Content-Length",         "Transfer-Encoding",
        "Connection",      "Upgrade",          "Sec-WebSocket-Protocol", "Proxy-Authorization"};
    for (size_t i = 0; i < sizeof(ours) / sizeof(*ours); i++)
        ok(!req_ok(ours[i], "1.2.3.4"), "%s is the proxy's to set", ours[i]);
    ok(!inbound_request_header_ok("X-Secret", "1", "close, X-Secret", false),
       "a header the Connection list names is hop-by-hop");
    ok(inbound_request_header_ok("X-Secretive", "1", "close, X-Secret", false), "exact names");
    ok(!req_ok("Bad Name", "1"), "an invalid name");
    ok(!req_ok("X-A", "a\r\nX-B: b"), "a value with a line break");
    ok(req_ok("Accept", "*/*"), "an ordinary header");
}

static void test_ws_protocols(void)
{
    buf_t b = {0};
    inbound_ws_protocols("sandboxer, bearer." TOKEN ", chat", &b);
    is_str(b.data, "sandboxer, chat", "the bearer entry goes, the others stay");
    buf_reset(&b);
    inbound_ws_protocols(" bearer." TOKEN " ", &b);
    ok(b.len == 0, "nothing left");
    inbound_ws_protocols("graphql-ws", &b);
    is_str(b.data, "graphql-ws", "an ordinary list passes");
    inbound_ws_protocols("mqtt", &b);
    is_str(b.data, "graphql-ws, mqtt", "a second header joins the list");
    buf_free(&b);
}

static void test_cookies(void)
{
    const char *h = "app.sbx.test";
    ok(inbound_cookie_ok("a=1; Path=/; HttpOnly", h), "host-only");
    ok(inbound_cookie_ok("a=1; Domain=app.sbx.test", h), "for the host itself");
    ok(inbound_cookie_ok("a=1; domain=.APP.sbx.test", h), "a leading dot, any case");
    ok(!inbound_cookie_ok("a=1; Domain=sbx.test", h), "the parent domain: every tenant's");
    ok(!inbound_cookie_ok("a=1; Domain=.sbx.test; Path=/", h), "with a dot");
    ok(!inbound_cookie_ok("a=1; Domain = test", h), "spaced");
    ok(!inbound_cookie_ok("a=1; Domain=app.sbx.test; Domain=sbx.test", h), "the last one wins");
    ok(!inbound_cookie_ok("a=1; Domain=other.sbx.test", h), "another tenant");
    ok(!inbound_cookie_ok("a=1; Domain=", h), "an empty domain");
    ok(inbound_cookie_ok("a=Domain=sbx.test", h), "Domain in the value is not an attribute");
    ok(!inbound_response_header_ok("Set-Cookie", "a=1; Domain=sbx.test", h, false),
       "dropped on a sandbox's origin");
    ok(inbound_response_header_ok("Set-Cookie", "a=1", h, false), "kept there when host-only");
    ok(!inbound_response_header_ok("Set-Cookie", "a=1", NULL, true), "never on the API's");
}

static void test_answer_headers(void)
{
    const char *api_only[] = {"Content-Security-Policy",   "content-security-policy-report-only",
                              "X-Content-Type-Options",    "Clear-Site-Data",
                              "Strict-Transport-Security", "Service-Worker-Allowed"};
    for (size_t i = 0; i < sizeof(api_only) / sizeof(*api_only); i++) {
        ok(!inbound_response_header_ok(api_only[i], "x", NULL, true), "%s: not on the API's origin",
           api_only[i]);
        ok(inbound_response_header_ok(api_only[i], "x", "a.sbx.test", false),
           "%s: the sandbox's on its own", api_only[i]);
    }
    ok(inbound_response_header_ok("Content-Type", "text/html", NULL, true), "content type");
    ok(!inbound_response_header_ok("Transfer-Encoding", "chunked", NULL, true), "framing");
    ok(!inbound_response_header_ok(" Content-Security-Policy", "x", NULL, false), "bad name");
}

static void test_forwarded(void)
{
    buf_t b = {0};
    inbound_forwarded_headers(&b, "10.1.2.3", "app.sbx.test:8000", "http");
    is_str(b.data,
           "Forwarded: for=10.1.2.3;host=\"app.sbx.test:8000\";proto=http\r\n"
           "X-Forwarded-For: 10.1.2.3\r\nX-Real-IP: 10.1.2.3\r\nX-Forwarded-Proto: http\r\n"
           "X-Forwarded-Host: app.sbx.test:8000\r\n",
           "from the peer");
    buf_reset(&b);
    inbound_forwarded_headers(&b, "::1", "a\"b", "http");
    is_str(b.data,
           "Forwarded: for=\"[::1]\";proto=http\r\n"
           "X-Forwarded-For: ::1\r\nX-Real-IP: ::1\r\nX-Forwarded-Proto: http\r\n",
           "IPv6 quoted; an odd Host left out");
    buf_free(&b);
}

int main(void)
{
    test_token_shapes();
    test_request_headers();
    test_ws_protocols();
    test_cookies();
    test_answer_headers();
    test_forwarded();
    return tap_done();
}
