#include "inbound.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "common/cleanup.h"

#define TOKEN_HEX 64

static bool hex_digit(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* The length of a token prefix at s ("sbx_" or "sbx%5F", any case), or 0. */
static size_t token_prefix(const char *s, size_t n)
{
    if (n < 4 || strncasecmp(s, "sbx", 3) != 0)
        return 0;
    if (s[3] == '_')
        return 4;
    return n >= 6 && strncasecmp(s + 3, "%5f", 3) == 0 ? 6 : 0;
}

bool inbound_has_token(const char *s, size_t n)
{
    for (size_t i = 0; i + 4 + TOKEN_HEX <= n; i++) {
        size_t p = token_prefix(s + i, n - i);
        if (!p || i + p + TOKEN_HEX > n)
            continue;
        size_t h = 0;
        while (h < TOKEN_HEX && hex_digit(s[i + p + h]))
            h++;
        if (h == TOKEN_HEX)
            return true;
    }
    return false;
}

bool inbound_header_name_ok(const char *name)
{
    if (!*name)
        return false;
    for (const char *c = name; *c; c++)
        if (!isalnum((unsigned char)*c) && !strchr("!#$%&'*+-.^_`|~", *c))
            return false;
    return true;
}

static bool in_list(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(name, list[i]) == 0)
            return true;
    return false;
}

/* Hop-by-hop headers (RFC 9110 7.6.1) and the framing, which the proxy sets itself. */
static bool hop_by_hop(const char *name)
{
    static const char *const hop[] = {
        "Connection",
        "Keep-Alive",
        "Proxy-Connection",
        "Proxy-Authorization",
        "Proxy-Authenticate",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Expect",
        "Content-Length",
    };
    return in_list(name, hop, ARRAY_SIZE(hop));
}

/* Headers that claim who the client is: only the proxy says that. */
static bool client_address(const char *name)
{
    static const char *const addr[] = {
        "Forwarded",        "X-Real-IP",           "X-Client-IP",
        "True-Client-IP",   "X-Cluster-Client-IP", "CF-Connecting-IP",
        "Fastly-Client-IP", "Client-IP",           "X-Original-Forwarded-For",
        "X-ProxyUser-Ip",
    };
    return strncasecmp(name, "X-Forwarded-", 12) == 0 || in_list(name, addr, ARRAY_SIZE(addr));
}

/* True if the comma-separated list (a Connection header) names name. */
static bool listed(const char *list, const char *name)
{
    size_t want = strlen(name);
    while (list && *list) {
        list += strspn(list, " \t,");
        size_t n = strcspn(list, ",");
        size_t m = n;
        while (m && (list[m - 1] == ' ' || list[m - 1] == '\t'))
            m--;
        if (m == want && strncasecmp(list, name, m) == 0)
            return true;
        list += n;
    }
    return false;
}

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    return c == '/' || c == '_' ? 63 : -1;
}

/* True if the base64 text s (to its first non-base64 character) decodes to a token. */
static bool b64_has_token(const char *s)
{
    buf_t out = {0};
    unsigned acc = 0;
    int bits = 0, v;
    for (; (v = b64_value(*s)) >= 0; s++) {
        acc = ((acc << 6) | (unsigned)v) & 0xffffff;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            char c = (char)((acc >> bits) & 0xff);
            buf_append(&out, &c, 1);
        }
    }
    bool found = out.len && inbound_has_token(out.data, out.len);
    buf_free(&out);
    return found;
}

/* True if an Authorization value carries a token, spaced and cased any way, Basic included. */
static bool credentials_have_token(const char *value)
{
    if (inbound_has_token(value, strlen(value)))
        return true;
    while (*value == ' ' || *value == '\t')
        value++;
    if (strncasecmp(value, "Basic", 5) != 0 || (value[5] != ' ' && value[5] != '\t'))
        return false;
    value += 5;
    while (*value == ' ' || *value == '\t')
        value++;
    return b64_has_token(value);
}

bool inbound_request_header_ok(const char *name, const char *value, const char *connection,
                               bool api_origin)
{
    if (!inbound_header_name_ok(name) || strpbrk(value, "\r\n"))
        return false;
    if (hop_by_hop(name) || client_address(name) || listed(connection, name))
        return false;
    if (strcasecmp(name, "Sec-WebSocket-Protocol") == 0)
        return false;
    if (api_origin && strcasecmp(name, "Cookie") == 0)
        return false;
    return !credentials_have_token(value);
}

void inbound_ws_protocols(const char *value, buf_t *out)
{
    while (*value) {
        value += strspn(value, " \t,");
        size_t n = strcspn(value, ",");
        size_t m = n;
        while (m && (value[m - 1] == ' ' || value[m - 1] == '\t'))
            m--;
        if (m && !inbound_has_token(value, m) && !memchr(value, '\r', m) &&
            !memchr(value, '\n', m)) {
            buf_puts(out, out->len ? ", " : "");
            buf_append(out, value, m);
        }
        value += n;
    }
}

/* The trimmed value of the cookie attribute p (n bytes) if it is "Domain = value", or NULL. */
static const char *domain_attr(const char *p, size_t n, size_t *len)
{
    const char *end = p + n;
    if (n < 6 || strncasecmp(p, "domain", 6) != 0)
        return NULL;
    const char *v = p + 6 + strspn(p + 6, " \t");
    if (v >= end || *v != '=')
        return NULL;
    v++;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    *len = (size_t)(end - v);
    return v;
}

/* The value of a cookie's last Domain attribute (RFC 6265 5.3: the last one wins), or NULL. */
static const char *cookie_domain(const char *value, size_t *len)
{
    const char *found = NULL, *d;
    size_t n;
    for (const char *p = strchr(value, ';'); p; p = strchr(p, ';')) {
        p++;
        p += strspn(p, " \t");
        if ((d = domain_attr(p, strcspn(p, ";"), &n)) != NULL)
            found = d, *len = n;
    }
    return found;
}

bool inbound_cookie_ok(const char *value, const char *host)
{
    size_t len = 0;
    const char *d = cookie_domain(value, &len);
    if (!d)
        return true;
    if (len && d[0] == '.') /* a leading dot is ignored (RFC 6265 5.2.3) */
        d++, len--;
    return host && len > 0 && strlen(host) == len && strncasecmp(d, host, len) == 0;
}

bool inbound_response_header_ok(const char *name, const char *value, const char *host,
                                bool api_origin)
{
    static const char *const api_only[] = {
        "Content-Security-Policy",
        "Content-Security-Policy-Report-Only",
        "X-Content-Type-Options",
        "Set-Cookie",
        "Set-Cookie2",
        "Clear-Site-Data",
        "Strict-Transport-Security",
        "Service-Worker-Allowed",
    };
    if (!inbound_header_name_ok(name) || strpbrk(value, "\r\n") || hop_by_hop(name))
        return false;
    if (api_origin)
        return !in_list(name, api_only, ARRAY_SIZE(api_only));
    if (strcasecmp(name, "Set-Cookie") == 0)
        return inbound_cookie_ok(value, host);
    return strcasecmp(name, "Set-Cookie2") != 0;
}

/* True if host is a plain host[:port] (letters, digits, '.', '-', ':', brackets for IPv6). */
static bool plain_host(const char *host)
{
    if (!host || !*host || strlen(host) > 255)
        return false;
    for (const char *c = host; *c; c++)
        if (!isalnum((unsigned char)*c) && !strchr(".-:[]", *c))
            return false;
    return true;
}

void inbound_forwarded_headers(buf_t *b, const char *ip, const char *host, const char *proto)
{
    bool v6 = strchr(ip, ':') != NULL;
    buf_printf(b, "Forwarded: for=%s%s%s", v6 ? "\"[" : "", ip, v6 ? "]\"" : "");
    if (plain_host(host))
        buf_printf(b, ";host=\"%s\"", host);
    buf_printf(b, ";proto=%s\r\n", proto);
    buf_printf(b, "X-Forwarded-For: %s\r\nX-Real-IP: %s\r\nX-Forwarded-Proto: %s\r\n", ip, ip,
               proto);
    if (plain_host(host))
        buf_printf(b, "X-Forwarded-Host: %s\r\n", host);
}
