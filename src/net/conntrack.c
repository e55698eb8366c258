/*
 * The host's connection tracking, through ctnetlink (NETLINK_NETFILTER): when a sandbox's
 * address is freed, the flows the host tracked for it go too, so that a later sandbox on the
 * same address (maybe another owner's) never inherits an "established" flow. The same call
 * tells the allocator whether an address still has entries (host sockets that outlive the
 * sandbox, such as a proxy's, make new ones), so it is not handed out until they are gone.
 *
 * A dump of the IPv4 table, filtered here, then one delete per matching entry by its
 * original tuple (and zone): what `conntrack -D -s/-d` does, without the tool.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/util.h"
#include "net_internal.h"

#define CT_BATCH 1024 /* entries deleted per dump; more means another round */

/* One matching entry: its original tuple (a nested attribute, copied whole) and zone. */
struct ct_match {
    char tuple[256];
    uint16_t tuple_len, tuple_type;
    uint16_t zone_be;
    bool has_zone;
};

struct ct_scan {
    uint32_t ip_be;
    struct ct_match *v;
    size_t n, seen;
};

static uint16_t ct_type(uint8_t msg)
{
    return (uint16_t)((NFNL_SUBSYS_CTNETLINK << 8) | msg);
}

/* Does the tuple attribute (CTA_TUPLE_ORIG or _REPLY) name ip as source or destination? */
static bool tuple_has(struct rtattr *tuple, uint32_t ip_be)
{
    struct rtattr *t[CTA_TUPLE_MAX + 1], *a[CTA_IP_MAX + 1];
    if (!tuple)
        return false;
    net_nl_attrs(t, CTA_TUPLE_MAX, RTA_DATA(tuple), (int)RTA_PAYLOAD(tuple));
    if (!t[CTA_TUPLE_IP])
        return false;
    net_nl_attrs(a, CTA_IP_MAX, RTA_DATA(t[CTA_TUPLE_IP]), (int)RTA_PAYLOAD(t[CTA_TUPLE_IP]));
    for (int k = CTA_IP_V4_SRC; k <= CTA_IP_V4_DST; k++)
        if (a[k] && RTA_PAYLOAD(a[k]) == 4 && memcmp(RTA_DATA(a[k]), &ip_be, 4) == 0)
            return true;
    return false;
}

static int on_entry(const struct nlmsghdr *h, void *ctx)
{
    struct ct_scan *s = ctx;
    if (h->nlmsg_type != ct_type(IPCTNL_MSG_CT_NEW) ||
        h->nlmsg_len < NLMSG_LENGTH(sizeof(struct nfgenmsg)))
        return 0;
    struct rtattr *tb[CTA_MAX + 1];
    struct rtattr *first =
        (struct rtattr *)((char *)NLMSG_DATA(h) + NLMSG_ALIGN(sizeof(struct nfgenmsg)));
    int len = (int)(h->nlmsg_len - NLMSG_LENGTH(NLMSG_ALIGN(sizeof(struct nfgenmsg))));
    net_nl_attrs(tb, CTA_MAX, first, len);
    struct rtattr *orig = tb[CTA_TUPLE_ORIG];
    if (!tuple_has(orig, s->ip_be) && !tuple_has(tb[CTA_TUPLE_REPLY], s->ip_be))
        return 0;
    s->seen++;
    if (s->n == CT_BATCH || RTA_PAYLOAD(orig) > sizeof(s->v[0].tuple))
        return 0;
    struct ct_match *m = &s->v[s->n++];
    memset(m, 0, sizeof(*m));
    m->tuple_type = orig->rta_type; /* keeps NLA_F_NESTED */
    m->tuple_len = (uint16_t)RTA_PAYLOAD(orig);
    memcpy(m->tuple, RTA_DATA(orig), m->tuple_len);
    if (tb[CTA_ZONE] && RTA_PAYLOAD(tb[CTA_ZONE]) == 2) {
        memcpy(&m->zone_be, RTA_DATA(tb[CTA_ZONE]), 2);
        m->has_zone = true;
    }
    return 0;
}

static int ct_dump(struct net_rtnl *r, struct ct_scan *s)
{
    net_nlreq_t q;
    struct nfgenmsg g = {.nfgen_family = AF_INET, .version = NFNETLINK_V0};
    net_nl_init(&q, ct_type(IPCTNL_MSG_CT_GET), 0, &g, sizeof(g));
    s->n = s->seen = 0;
    return net_nl_exchange(r, &q, on_entry, s, true);
}

static int ct_delete(struct net_rtnl *r, const struct ct_match *m)
{
    net_nlreq_t q;
    struct nfgenmsg g = {.nfgen_family = AF_INET, .version = NFNETLINK_V0};
    net_nl_init(&q, ct_type(IPCTNL_MSG_CT_DELETE), 0, &g, sizeof(g));
    net_nl_put(&q, m->tuple_type, m->tuple, m->tuple_len);
    if (m->has_zone)
        net_nl_put(&q, CTA_ZONE, &m->zone_be, 2);
    int rc = net_nl_exchange(r, &q, NULL, NULL, false);
    return rc == -ENOENT ? 0 : rc; /* it expired meanwhile */
}

int net_ct_flush(uint32_t ip, err_t *err)
{
    struct net_rtnl r;
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
    if (fd < 0)
        return err_sys(err, "netfilter netlink socket");
    net_rtnl_adopt(&r, fd);
    struct ct_scan s = {.ip_be = htonl(ip), .v = xcalloc(CT_BATCH, sizeof(struct ct_match))};
    size_t found = 0;
    int rc = 0;
    /* Rounds, in case there are more than a batch; bounded, as entries can keep coming. */
    for (int round = 0; round < 8 && rc == 0; round++) {
        if ((rc = ct_dump(&r, &s)) < 0)
            break;
        if (round == 0)
            found = s.seen;
        for (size_t i = 0; i < s.n && rc == 0; i++)
            rc = ct_delete(&r, &s.v[i]);
        if (s.seen <= s.n)
            break;
    }
    free(s.v);
    net_rtnl_close(&r);
    if (rc < 0) {
        char a[16];
        net_ip_format(ip, a);
        errno = -rc;
        return err_sys(err, "flush the connection tracking entries of %s", a);
    }
    return (int)found;
}
