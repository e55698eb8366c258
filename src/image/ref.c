/*
 * Image references, parsed strictly after the distribution/reference grammar and
 * normalised as Docker's ParseNormalizedNamed does:
 *
 *   reference      := name [ ":" tag ] [ "@" digest ]
 *   name           := [ domain "/" ] path-component ( "/" path-component )*   (<= 255 bytes)
 *   domain         := host [ ":" port ]   host := domain-component ( "." domain-component )*
 *                     | "[" ipv6 "]"
 *   domain-comp.   := [a-zA-Z0-9] | [a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]
 *   path-component := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
 *   tag            := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
 *   digest         := "sha256:" [a-f0-9]{64}           (the only algorithm we accept)
 *
 * The first component is the domain when it has a '.' or ':', is "localhost", or has an
 * uppercase letter; otherwise the domain is docker.io, and a single component gets
 * "library/". No tag and no digest means ":latest".
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "image_internal.h"

#define REF_INPUT_MAX 600
#define NAME_MAX_LEN  255

static int bad_ref(err_t *err, const char *in, const char *why)
{
    char shown[201];
    size_t i = 0;
    for (; in[i] && i < sizeof(shown) - 1; i++) /* no control characters in messages */
        shown[i] = (unsigned char)in[i] < 0x20 || in[i] == 0x7f ? '?' : in[i];
    shown[i] = '\0';
    return err_set(err, ERR_INVALID, 0, "invalid_image_ref", "invalid image reference '%s': %s",
                   shown, why);
}

static bool lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool any_alnum(char c)
{
    return lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

static bool hex_lower(char c)
{
    return (c >= 'a' && c <= 'f') || (c >= '0' && c <= '9');
}

bool image_digest_valid(const char *s)
{
    if (strncmp(s, "sha256:", 7) != 0)
        return false;
    for (int i = 0; i < 64; i++)
        if (!hex_lower(s[7 + i]))
            return false;
    return s[71] == '\0';
}

/* [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )* */
static bool path_component_ok(const char *s, size_t n)
{
    size_t i = 0;
    for (;;) {
        if (i >= n || !lower_alnum(s[i]))
            return false;
        while (i < n && lower_alnum(s[i]))
            i++;
        if (i == n)
            return true;
        if (s[i] == '.') {
            i++;
        } else if (s[i] == '_') {
            i++;
            if (i < n && s[i] == '_')
                i++;
        } else if (s[i] == '-') {
            while (i < n && s[i] == '-')
                i++;
        } else {
            return false;
        }
    }
}

static bool path_ok(const char *s, size_t n)
{
    while (n > 0) {
        const char *slash = memchr(s, '/', n);
        size_t len = slash ? (size_t)(slash - s) : n;
        if (!path_component_ok(s, len))
            return false;
        if (!slash)
            return true;
        s += len + 1;
        n -= len + 1;
        if (n == 0)
            return false; /* trailing '/' */
    }
    return false;
}

static bool domain_component_ok(const char *s, size_t n)
{
    if (n == 0 || !any_alnum(s[0]) || !any_alnum(s[n - 1]))
        return false;
    for (size_t i = 1; i + 1 < n; i++)
        if (!any_alnum(s[i]) && s[i] != '-')
            return false;
    return true;
}

static bool port_ok(const char *s, size_t n)
{
    if (n == 0 || n > 5)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            return false;
    return true;
}

bool image_domain_valid(const char *s, size_t len)
{
    if (len == 0 || len > NAME_MAX_LEN)
        return false;
    size_t host_end;
    if (s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (!close || close == s + 1)
            return false;
        for (const char *p = s + 1; p < close; p++)
            if (!isxdigit((unsigned char)*p) && *p != ':')
                return false;
        host_end = (size_t)(close - s) + 1;
    } else {
        const char *colon = memchr(s, ':', len);
        host_end = colon ? (size_t)(colon - s) : len;
        size_t i = 0;
        while (i < host_end) {
            const char *dot = memchr(s + i, '.', host_end - i);
            size_t clen = dot ? (size_t)(dot - (s + i)) : host_end - i;
            if (!domain_component_ok(s + i, clen))
                return false;
            i += clen;
            if (dot && ++i == host_end)
                return false; /* trailing '.' */
        }
        if (host_end == 0)
            return false;
    }
    if (host_end == len)
        return true;
    return s[host_end] == ':' && port_ok(s + host_end + 1, len - host_end - 1);
}

static bool tag_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128 || !(any_alnum(s[0]) || s[0] == '_'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!any_alnum(s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-')
            return false;
    return true;
}

static bool is_hex64(const char *s)
{
    for (int i = 0; i < 64; i++)
        if (!hex_lower(s[i]))
            return false;
    return s[64] == '\0';
}

/* Split in into domain and remainder as Docker's splitDockerDomain does. */
static int split_domain(const char *in, struct image_ref *ref, const char **rest, err_t *err)
{
    const char *slash = strchr(in, '/');
    size_t dlen = slash ? (size_t)(slash - in) : 0;
    bool has_upper = false;
    for (size_t i = 0; i < dlen; i++)
        has_upper |= isupper((unsigned char)in[i]) != 0;
    if (!slash || (!memchr(in, '.', dlen) && !memchr(in, ':', dlen) &&
                   !(dlen == 9 && memcmp(in, "localhost", 9) == 0) && !has_upper)) {
        snprintf(ref->domain, sizeof(ref->domain), "docker.io");
        *rest = in;
    } else {
        if (!image_domain_valid(in, dlen))
            return bad_ref(err, in, "bad registry host");
        snprintf(ref->domain, sizeof(ref->domain), "%.*s", (int)dlen, in);
        *rest = slash + 1;
    }
    if (strcmp(ref->domain, "index.docker.io") == 0)
        snprintf(ref->domain, sizeof(ref->domain), "docker.io");
    return 0;
}

int image_ref_parse(const char *in, struct image_ref *ref, err_t *err)
{
    memset(ref, 0, sizeof(*ref));
    size_t n = strnlen(in, REF_INPUT_MAX + 1);
    if (n == 0)
        return bad_ref(err, in, "empty");
    if (n > REF_INPUT_MAX)
        return bad_ref(err, in, "too long");
    if (is_hex64(in))
        return bad_ref(err, in, "cannot be a 64-hex-digit image id");
    const char *rest = NULL;
    if (split_domain(in, ref, &rest, err) < 0)
        return -1;
    char work[REF_INPUT_MAX + 1];
    snprintf(work, sizeof(work), "%s", rest);
    char *at = strchr(work, '@');
    if (at) {
        *at = '\0';
        if (strncmp(at + 1, "sha256:", 7) != 0)
            return bad_ref(err, in, "only sha256 digests are supported");
        if (!image_digest_valid(at + 1))
            return bad_ref(err, in, "a digest is sha256: and 64 lowercase hex digits");
        snprintf(ref->digest, sizeof(ref->digest), "%s", at + 1);
    }
    char *colon = strchr(work, ':');
    if (colon) {
        *colon = '\0';
        if (!tag_ok(colon + 1))
            return bad_ref(err, in, "bad tag");
        snprintf(ref->tag, sizeof(ref->tag), "%s", colon + 1);
    }
    for (const char *p = work; *p; p++)
        if (isupper((unsigned char)*p))
            return bad_ref(err, in, "repository name must be lowercase");
    bool official = strcmp(ref->domain, "docker.io") == 0 && !strchr(work, '/');
    int len = snprintf(ref->path, sizeof(ref->path), "%s%s", official ? "library/" : "", work);
    if (!path_ok(work, strlen(work)))
        return bad_ref(err, in, "bad repository name");
    if (len < 0 || (size_t)len >= sizeof(ref->path) ||
        strlen(ref->domain) + 1 + (size_t)len > NAME_MAX_LEN)
        return bad_ref(err, in, "repository name longer than 255 characters");
    if (!ref->tag[0] && !ref->digest[0])
        snprintf(ref->tag, sizeof(ref->tag), "latest");
    return 0;
}

int image_ref_format(const struct image_ref *ref, char *out, size_t size, err_t *err)
{
    int n = snprintf(out, size, "%s/%s%s%s%s%s", ref->domain, ref->path, ref->tag[0] ? ":" : "",
                     ref->tag, ref->digest[0] ? "@" : "", ref->digest);
    if (n < 0 || (size_t)n >= size)
        return err_set(err, ERR_INVALID, 0, "invalid_image_ref", "image reference too long");
    return 0;
}

int image_ref_normalize(const char *in, char *out, size_t size, err_t *err)
{
    struct image_ref ref;
    if (!in)
        return err_set(err, ERR_INVALID, 0, "invalid_image_ref", "no image reference");
    if (image_ref_parse(in, &ref, err) < 0)
        return -1;
    return image_ref_format(&ref, out, size, err);
}
