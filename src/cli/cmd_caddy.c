/* sandboxer caddy-config: a Caddyfile that fronts the daemon with HTTPS and subdomains. */
#include <stdio.h>
#include <string.h>

#include "cli_internal.h"

/* A name Caddy takes as one site address token (no spaces, braces, slashes). */
static bool domain_ok(const char *d)
{
    return d && *d && !strpbrk(d, " \t/{}\n#\"'");
}

/* The reverse_proxy block to the daemon: streams must not wait in a buffer. */
static void print_proxy(const char *upstream)
{
    printf("\treverse_proxy %s {\n"
           "\t\t# streams (exec, logs, events, Connect RPC) must not wait in a buffer\n"
           "\t\tflush_interval -1\n"
           "\t}\n",
           upstream);
}

/*
 * E2B's SDKs with E2B_DOMAIN=domain: https://api.<domain> and https://<port>-<id>.<domain>,
 * certificates from Caddy's own local CA (`tls internal`), so no DNS provider and no ACME: the
 * names only have to resolve to this machine (docs/e2b.md).
 */
static void print_e2b(const char *domain, const char *upstream, const char *https_port)
{
    printf("# Caddyfile for E2B's SDKs against Sandboxer (docs/e2b.md): HTTPS for api.%s\n"
           "# and every <port>-<sandbox id>.%s, with certificates from Caddy's local CA.\n"
           "# Run the daemon with --e2b-domain %s and the SDK with E2B_DOMAIN=%s.\n"
           "# Node trusts the CA with NODE_EXTRA_CA_CERTS=<Caddy's data dir>/pki/authorities/\n"
           "# local/root.crt (for root: /root/.local/share/caddy/...; `caddy trust` installs it\n"
           "# system-wide). The names must resolve to this machine: *.localhost does with\n"
           "# libnss-myhostname, else a DNS wildcard or /etc/hosts lines.\n"
           "{\n",
           domain, domain, domain, domain);
    if (https_port)
        printf("\thttps_port %s\n", https_port);
    printf("}\n\n"
           "api.%s, sandbox.%s, *.%s {\n"
           "\ttls internal\n",
           domain, domain, domain);
    print_proxy(upstream);
    printf("}\n");
}

int cmd_caddy_config(cli_t *cli, const cli_args_t *args, err_t *err)
{
    (void)cli;
    const char *vhost = cli_opt_str(args, "vhost");
    const char *e2b = cli_opt_str(args, "e2b");
    const char *upstream = cli_opt_str(args, "upstream");
    const char *email = cli_opt_str(args, "email");
    const char *dns = cli_opt_str(args, "dns-provider");
    const char *https_port = cli_opt_str(args, "https-port");
    if (!upstream)
        upstream = "127.0.0.1:8000";
    if (strpbrk(upstream, " \t{}\n#") ||
        (https_port && strspn(https_port, "0123456789") != strlen(https_port)))
        return cli_usage(err, "caddy-config: bad --upstream or --https-port");
    if (e2b) {
        if (!domain_ok(e2b) || vhost)
            return cli_usage(err, "caddy-config: --e2b DOMAIN (e.g. e2b.localhost), "
                                  "without --vhost");
        print_e2b(e2b, upstream, https_port);
        return 0;
    }
    if (!domain_ok(vhost))
        return cli_usage(err, "caddy-config: --vhost DOMAIN is required (e.g. sbx.example.com)");
    if (!dns)
        dns = "cloudflare";
    printf("# Caddyfile for Sandboxer: HTTPS for %s and every <name>[-<port>].%s\n"
           "# (a sandbox's proxy; run the daemon with --vhost %s).\n"
           "#\n"
           "# A wildcard certificate needs the ACME DNS challenge, so Caddy must be built with\n"
           "# your DNS provider's module: e.g. `xcaddy build --with "
           "github.com/caddy-dns/%s`\n"
           "# (Debian's caddy package has no DNS modules), with the provider's API token in\n"
           "# the environment.\n"
           "{\n",
           vhost, vhost, vhost, dns);
    if (email)
        printf("\temail %s\n", email);
    if (https_port)
        printf("\thttps_port %s\n", https_port);
    printf("}\n\n"
           "%s, *.%s {\n"
           "\ttls {\n"
           "\t\tdns %s {env.DNS_API_TOKEN}\n"
           "\t}\n",
           vhost, vhost, dns);
    print_proxy(upstream);
    printf("}\n");
    return 0;
}
