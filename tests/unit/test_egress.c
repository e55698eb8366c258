/* The egress proxy's rules: allow-list patterns, host matching, addresses out of bounds. */
#include <arpa/inet.h>
#include <string.h>

#include "proxy/egress.h"
#include "tap.h"

static uint32_t a4(const char *s)
{
    struct in_addr a;
    inet_pton(AF_INET, s, &a);
    return a.s_addr;
}

int main(void)
{
    const char *good[] = {"pkgs.example.org", "*.mirror.example.net", "a-b.example.com",
                          "198.18.0.2", "localhost"};
    for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++)
        ok(egress_pattern_valid(good[i]), "valid pattern %s", good[i]);
    const char *bad[] = {"",
                         "*.",
                         "Pkgs.Example.org",
                         "http://pkgs.example.org",
                         "pkgs.example.org/",
                         "a..b",
                         ".pkgs.example.org",
                         "*pkgs.example.org",
                         "pkgs.example.org:443",
                         "*.*.org",
                         "user@host",
                         "a b",
                         "-a.org"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
        ok(!egress_pattern_valid(bad[i]), "invalid pattern '%s'", bad[i]);

    json_t *allow = json_pack("[s,s,s]", "pkgs.example.org", "*.mirror.example.net", "198.18.0.2");
    ok(egress_host_allowed(allow, "pkgs.example.org"), "exact name");
    ok(egress_host_allowed(allow, "PKGS.EXAMPLE.ORG"), "names match in any case");
    ok(egress_host_allowed(allow, "pkgs.example.org."), "a trailing dot is the same name");
    ok(!egress_host_allowed(allow, "evilpkgs.example.org"), "not a suffix of another name");
    ok(!egress_host_allowed(allow, "pkgs.example.org.evil.com"), "not a prefix either");
    ok(egress_host_allowed(allow, "files.mirror.example.net"), "*.domain: a subdomain");
    ok(egress_host_allowed(allow, "a.b.mirror.example.net"), "*.domain: a deeper subdomain");
    ok(!egress_host_allowed(allow, "mirror.example.net"), "*.domain: not the domain itself");
    ok(!egress_host_allowed(allow, "xmirror.example.net"), "*.domain: not a longer name");
    ok(egress_host_allowed(allow, "198.18.0.2"), "an address");
    ok(!egress_host_allowed(allow, "198.18.0.20"), "not another address");
    ok(!egress_host_allowed(allow, ""), "not the empty host");
    json_decref(allow);

    const char *closed[] = {"0.1.2.3",         "10.88.0.1",      "100.64.0.1",     "127.0.0.1",
                            "169.254.169.254", "172.16.0.1",     "172.31.255.255", "192.168.1.1",
                            "224.0.0.1",       "255.255.255.255"};
    for (size_t i = 0; i < sizeof(closed) / sizeof(*closed); i++)
        ok(!egress_address_public(a4(closed[i])), "%s is closed", closed[i]);
    const char *open_[] = {"1.1.1.1", "198.18.1.2", "172.32.0.1", "100.128.0.1", "8.8.8.8"};
    for (size_t i = 0; i < sizeof(open_) / sizeof(*open_); i++)
        ok(egress_address_public(a4(open_[i])), "%s is open", open_[i]);
    struct egress_request rq;
    const char get[] = "GET http://Pkgs.example.org:8080/a?b HTTP/1.1\r\nHost: pkgs.example.org\r\n"
                       "Proxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n";
    ok(!egress_parse_request(get, sizeof(get) - 1, &rq) && !rq.tunnel && rq.port == 8080 &&
           strcmp(rq.host, "Pkgs.example.org") == 0 && strcmp(rq.path, "/a?b") == 0,
       "absolute-form GET: host, port and origin-form path");
    buf_t out = {0};
    egress_upstream_head(&rq, get, sizeof(get) - 1, &out);
    buf_append(&out, "", 1);
    is_str(
        out.data,
        "GET /a?b HTTP/1.1\r\nHost: pkgs.example.org\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        "upstream head: origin form, proxy headers dropped, Connection: close");
    buf_free(&out);
    const char conn[] = "CONNECT a.example.test:443 HTTP/1.1\r\n\r\n";
    ok(!egress_parse_request(conn, sizeof(conn) - 1, &rq) && rq.tunnel && rq.port == 443 &&
           strcmp(rq.host, "a.example.test") == 0,
       "CONNECT host:port");
    const char *bad_heads[] = {"CONNECT a.example.test HTTP/1.1\r\n\r\n",
                               "GET https://pkgs.example.org/ HTTP/1.1\r\n\r\n",
                               "GET / HTTP/1.1\r\n\r\n",
                               "GET http://user@pkgs.example.org/ HTTP/1.1\r\n\r\n",
                               "GET http://pkgs.example.org:99999/ HTTP/1.1\r\n\r\n",
                               "GET http://pkgs.example.org/ HTTP/2\r\n\r\n",
                               "GET http://pkgs.example.org/ HTTP/1.1 extra\r\n\r\n",
                               "HELLO\r\n\r\n"};
    for (size_t i = 0; i < sizeof(bad_heads) / sizeof(*bad_heads); i++)
        ok(egress_parse_request(bad_heads[i], strlen(bad_heads[i]), &rq) != NULL,
           "refused: bad head %zu", i);
    return tap_done();
}
