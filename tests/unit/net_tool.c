/*
 * net_tool: drives src/net/ from the command line for tests/integration/test_net_module.py.
 * Built only for tests. Each call opens the layer afresh, as a restarted daemon would.
 *
 *   net_tool -d NETNS_DIR [-s SUBNET] [-b BRIDGE] [-t TABLE] COMMAND ...
 *     open                          make the bridge and the table
 *     setup ID OWNER EGRESS [IP]    print the sandbox's network as JSON
 *     teardown ID
 *     reserve ID IP
 *     reconcile [LIVE_ID ...]       print how many strays were removed
 *     destroy                       remove everything, the table and the bridge too
 *     ifname ID                     print the host-side veth name
 *     etc DIR HOSTNAME [IP EGRESS]  write hosts, hostname, resolv.conf into DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "net/net.h"

static int usage(void)
{
    fprintf(stderr, "usage: net_tool -d NETNS_DIR [-s SUBNET] [-b BRIDGE] [-t TABLE] "
                    "open|setup|teardown|reserve|reconcile|destroy|ifname|etc ...\n");
    return 2;
}

static int fail(const char *what, const err_t *err)
{
    fprintf(stderr, "net_tool %s: %s (%s)\n", what, err->msg, err_kind_name(err->kind));
    return 1;
}

static int cmd_setup(net_t *n, int argc, char **argv)
{
    if (argc < 4)
        return usage();
    struct net_sandbox ns;
    err_t err = {0};
    if (net_sandbox_setup(n, argv[1], atoll(argv[2]), argv[3], argc > 4 ? argv[4] : NULL, &ns,
                          &err) < 0)
        return fail("setup", &err);
    printf("{\"netns_path\": \"%s\", \"ip\": \"%s\", \"gateway\": \"%s\", \"prefix\": %d, "
           "\"mac\": \"%s\", \"host_if\": \"%s\", \"egress\": \"%s\"}\n",
           ns.netns_path, ns.ip, ns.gateway, ns.prefix, ns.mac, ns.host_if, ns.egress);
    return 0;
}

static int cmd_etc(int argc, char **argv)
{
    if (argc != 3 && argc != 5)
        return usage();
    struct net_sandbox ns = {0};
    if (argc == 5) {
        snprintf(ns.ip, sizeof(ns.ip), "%s", argv[3]);
        snprintf(ns.egress, sizeof(ns.egress), "%s", argv[4]);
    }
    err_t err = {0};
    if (net_write_etc(argv[1], argv[2], argc == 5 ? &ns : NULL, &err) < 0)
        return fail("etc", &err);
    return 0;
}

static int run(net_t *n, int argc, char **argv)
{
    err_t err = {0};
    const char *cmd = argv[0];
    if (strcmp(cmd, "open") == 0)
        return 0;
    if (strcmp(cmd, "setup") == 0)
        return cmd_setup(n, argc, argv);
    if (strcmp(cmd, "teardown") == 0 && argc == 2)
        return net_sandbox_teardown(n, argv[1], &err) < 0 ? fail(cmd, &err) : 0;
    if (strcmp(cmd, "reserve") == 0 && argc == 3)
        return net_reserve(n, argv[1], argv[2], &err) < 0 ? fail(cmd, &err) : 0;
    if (strcmp(cmd, "destroy") == 0)
        return net_destroy(n, &err) < 0 ? fail(cmd, &err) : 0;
    if (strcmp(cmd, "reconcile") == 0) {
        int removed = net_reconcile(n, (const char *const *)argv + 1, (size_t)argc - 1, &err);
        if (removed < 0)
            return fail(cmd, &err);
        printf("%d\n", removed);
        return 0;
    }
    if (strcmp(cmd, "ifname") == 0 && argc == 2) {
        char name[16];
        net_host_ifname(n, argv[1], name);
        printf("%s\n", name);
        return 0;
    }
    return usage();
}

int main(int argc, char **argv)
{
    struct net_config cfg = {0};
    int c;
    while ((c = getopt(argc, argv, "+d:s:b:t:")) != -1) {
        if (c == 'd')
            cfg.netns_dir = optarg;
        else if (c == 's')
            cfg.subnet = optarg;
        else if (c == 'b')
            cfg.bridge = optarg;
        else if (c == 't')
            cfg.table = optarg;
        else
            return usage();
    }
    argc -= optind, argv += optind;
    if (argc < 1)
        return usage();
    if (strcmp(argv[0], "etc") == 0)
        return cmd_etc(argc, argv);
    log_init(LOG_TEXT, LOG_WARN);
    err_t err = {0};
    net_t *n = net_open(&cfg, &err);
    if (!n)
        return fail("open", &err);
    int rc = run(n, argc, argv);
    net_close(n);
    return rc;
}
