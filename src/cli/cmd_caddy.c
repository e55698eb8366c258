/* sandboxer caddy-config: a Caddyfile that fronts the daemon with HTTPS and subdomains. */
#include <stdio.h>
#include <string.h>

#include "cli_internal.h"

int cmd_caddy_config(cli_t *cli, const cli_args_t *args, err_t *err)
{
    (void)cli;
    const char *vhost = cli_opt_str(args, "vhost");
    const char *upstream = cli_opt_str(args, "upstream");
    const char *email = cli_opt_str(args, "email");
    const char *dns = cli_opt_str(args, "dns-provider");
    if (!vhost || !*vhost || strpbrk(vhost, " /{}\n"))
        return cli_usage(err, "caddy-config: --vhost DOMAIN is required (e.g. sbx.example.com)");
    if (!upstream)
        upstream = "127.0.0.1:8000";
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
    printf("}\n\n"
           "%s, *.%s {\n"
           "\ttls {\n"
           "\t\tdns %s {env.DNS_API_TOKEN}\n"
           "\t}\n"
           "\treverse_proxy %s {\n"
           "\t\t# streams (exec, logs, events) must not wait in a buffer\n"
           "\t\tflush_interval -1\n"
           "\t}\n"
           "}\n",
           vhost, vhost, dns, upstream);
    return 0;
}
