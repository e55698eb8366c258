/*
 * A small rtnetlink client: just the link, address, route and bridge-port requests this layer
 * needs, straight over a NETLINK_ROUTE socket. Functions return 0 or a negative errno, which
 * keeps "already exists" and "already gone" cheap to tell apart for idempotent callers.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "net_internal.h"

typedef net_nlreq_t nlreq_t;

static void *req_init(nlreq_t *q, uint16_t type, uint16_t flags, const void *hdr, size_t len)
{
    memset(q, 0, sizeof(*q));
    q->h.nlmsg_type = type;
    q->h.nlmsg_flags = NLM_F_REQUEST | flags;
    q->h.nlmsg_len = NLMSG_LENGTH(len);
    memcpy(NLMSG_DATA(&q->h), hdr, len);
    return NLMSG_DATA(&q->h);
}

static struct rtattr *put(nlreq_t *q, uint16_t type, const void *data, size_t len)
{
    size_t off = NLMSG_ALIGN(q->h.nlmsg_len);
    if (off + RTA_SPACE(len) > sizeof(q->raw))
        abort(); /* requests are built from constants here: overflowing is a bug */
    struct rtattr *a = (struct rtattr *)(q->raw + off);
    a->rta_type = type;
    a->rta_len = RTA_LENGTH(len);
    if (len)
        memcpy(RTA_DATA(a), data, len);
    q->h.nlmsg_len = off + RTA_SPACE(len);
    return a;
}

static void put_str(nlreq_t *q, uint16_t type, const char *s)
{
    put(q, type, s, strlen(s) + 1);
}

static void put_u32(nlreq_t *q, uint16_t type, uint32_t v)
{
    put(q, type, &v, sizeof(v));
}

static void put_u8(nlreq_t *q, uint16_t type, uint8_t v)
{
    put(q, type, &v, sizeof(v));
}

/* Close a nest opened with put(q, type, NULL or a header, len): it now spans to the end. */
static void nest_end(nlreq_t *q, struct rtattr *a)
{
    a->rta_len = (unsigned short)(q->raw + q->h.nlmsg_len - (char *)a);
}

int net_rtnl_open(struct net_rtnl *r, err_t *err)
{
    r->seq = 0;
    r->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (r->fd < 0)
        return err_sys(err, "rtnetlink socket");
    net_rtnl_adopt(r, r->fd);
    return 0;
}

void net_rtnl_adopt(struct net_rtnl *r, int fd)
{
    r->fd = fd;
    r->seq = 0;
    /* The kernel answers at once; a bound wait keeps a wedged kernel from wedging us. */
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

void net_rtnl_close(struct net_rtnl *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
}

typedef net_nl_reply_fn reply_fn;

/* Walk one datagram of replies; 1 when the request is complete, 0 for more, < 0 an errno. */
static int walk(const struct net_rtnl *r, const char *buf, size_t n, reply_fn fn, void *ctx)
{
    for (const struct nlmsghdr *h = (const void *)buf; NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
        if (h->nlmsg_seq != r->seq)
            continue; /* a late answer to an earlier, timed-out request */
        if (h->nlmsg_type == NLMSG_DONE)
            return 1;
        if (h->nlmsg_type == NLMSG_ERROR) {
            const struct nlmsgerr *e = NLMSG_DATA(h);
            return e->error ? e->error : 1;
        }
        if (fn) {
            int rc = fn(h, ctx);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* Send q and read replies until its ACK (or DONE for a dump); 0 or a negative errno. */
static int exchange(struct net_rtnl *r, nlreq_t *q, reply_fn fn, void *ctx, bool dump)
{
    q->h.nlmsg_seq = ++r->seq;
    /* Dumps end with DONE; everything else is asked for an ACK. (The flag bits overlap:
     * NLM_F_DUMP shares bits with NLM_F_REPLACE and NLM_F_EXCL, so the caller says which.) */
    q->h.nlmsg_flags |= dump ? NLM_F_DUMP : NLM_F_ACK;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(r->fd, q, q->h.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
        return -errno;
    size_t cap = 64 * 1024; /* dumps come in datagrams of up to 32 KiB */
    _cleanup_free_ char *buf = xmalloc(cap);
    for (;;) {
        ssize_t n = recv(r->fd, buf, cap, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        int rc = walk(r, buf, (size_t)n, fn, ctx);
        if (rc != 0)
            return rc > 0 ? 0 : rc;
    }
}

static int talk(struct net_rtnl *r, nlreq_t *q, reply_fn fn, void *ctx)
{
    return exchange(r, q, fn, ctx, false);
}

/* The generic pieces, for the other netlink families of this layer (conntrack.c). */
void *net_nl_init(net_nlreq_t *q, uint16_t type, uint16_t flags, const void *hdr, size_t len)
{
    return req_init(q, type, flags, hdr, len);
}

void net_nl_put(net_nlreq_t *q, uint16_t type, const void *data, size_t len)
{
    put(q, type, data, len);
}

int net_nl_exchange(struct net_rtnl *r, net_nlreq_t *q, net_nl_reply_fn fn, void *ctx, bool dump)
{
    return exchange(r, q, fn, ctx, dump);
}

void net_nl_attrs(struct rtattr *tb[], int max, struct rtattr *a, int len)
{
    memset(tb, 0, sizeof(*tb) * (size_t)(max + 1));
    for (; RTA_OK(a, len); a = RTA_NEXT(a, len))
        if ((a->rta_type & NLA_TYPE_MASK) <= max)
            tb[a->rta_type & NLA_TYPE_MASK] = a;
}

struct link_info {
    int index, master;
    char name[IF_NAMESIZE], kind[16];
};

static int on_link(const struct nlmsghdr *h, void *ctx)
{
    struct link_info *li = ctx;
    if (h->nlmsg_type != RTM_NEWLINK)
        return 0;
    const struct ifinfomsg *ifi = NLMSG_DATA(h);
    struct rtattr *tb[IFLA_MAX + 1], *info[IFLA_INFO_MAX + 1];
    net_nl_attrs(tb, IFLA_MAX, IFLA_RTA(ifi), (int)IFLA_PAYLOAD(h));
    li->index = ifi->ifi_index;
    li->master = tb[IFLA_MASTER] ? *(int *)RTA_DATA(tb[IFLA_MASTER]) : 0;
    if (tb[IFLA_IFNAME])
        snprintf(li->name, sizeof(li->name), "%s", (char *)RTA_DATA(tb[IFLA_IFNAME]));
    if (tb[IFLA_LINKINFO]) {
        net_nl_attrs(info, IFLA_INFO_MAX, RTA_DATA(tb[IFLA_LINKINFO]),
                     (int)RTA_PAYLOAD(tb[IFLA_LINKINFO]));
        if (info[IFLA_INFO_KIND])
            snprintf(li->kind, sizeof(li->kind), "%s", (char *)RTA_DATA(info[IFLA_INFO_KIND]));
    }
    return 0;
}

int net_rtnl_link_get(struct net_rtnl *r, const char *name, char *kind, int *master)
{
    nlreq_t q;
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    req_init(&q, RTM_GETLINK, 0, &ifi, sizeof(ifi));
    put_str(&q, IFLA_IFNAME, name);
    struct link_info li = {0};
    int rc = talk(r, &q, on_link, &li);
    if (rc < 0)
        return rc;
    if (kind)
        snprintf(kind, 16, "%s", li.kind);
    if (master)
        *master = li.master;
    return li.index > 0 ? li.index : -ENODEV;
}

int net_rtnl_bridge_add(struct net_rtnl *r, const char *name)
{
    nlreq_t q;
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    req_init(&q, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof(ifi));
    put_str(&q, IFLA_IFNAME, name);
    struct rtattr *li = put(&q, IFLA_LINKINFO, NULL, 0);
    put_str(&q, IFLA_INFO_KIND, "bridge");
    nest_end(&q, li);
    int rc = talk(r, &q, NULL, NULL);
    return rc == -EEXIST ? 0 : rc;
}

int net_rtnl_veth_add(struct net_rtnl *r, const char *host, int master, const char *peer,
                      const unsigned char mac[6], int netns_fd)
{
    nlreq_t q;
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    req_init(&q, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof(ifi));
    put_str(&q, IFLA_IFNAME, host);
    /* Attached at birth: the port exists only as a member of our bridge, and stays down
     * until net_rtnl_port_lock has made it private. */
    put_u32(&q, IFLA_MASTER, (uint32_t)master);
    struct rtattr *li = put(&q, IFLA_LINKINFO, NULL, 0);
    put_str(&q, IFLA_INFO_KIND, "veth");
    struct rtattr *data = put(&q, IFLA_INFO_DATA, NULL, 0);
    struct rtattr *pi = put(&q, VETH_INFO_PEER, &ifi, sizeof(ifi));
    put_str(&q, IFLA_IFNAME, peer);
    put(&q, IFLA_ADDRESS, mac, 6);
    put_u32(&q, IFLA_NET_NS_FD, (uint32_t)netns_fd);
    nest_end(&q, pi);
    nest_end(&q, data);
    nest_end(&q, li);
    return talk(r, &q, NULL, NULL);
}

int net_rtnl_link_up(struct net_rtnl *r, int ifindex, bool up)
{
    nlreq_t q;
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC,
                            .ifi_index = ifindex,
                            .ifi_flags = up ? IFF_UP : 0,
                            .ifi_change = IFF_UP};
    req_init(&q, RTM_NEWLINK, 0, &ifi, sizeof(ifi));
    return talk(r, &q, NULL, NULL);
}

int net_rtnl_link_mac(struct net_rtnl *r, int ifindex, const unsigned char mac[6])
{
    nlreq_t q;
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = ifindex};
    req_init(&q, RTM_NEWLINK, 0, &ifi, sizeof(ifi));
    put(&q, IFLA_ADDRESS, mac, 6);
    return talk(r, &q, NULL, NULL);
}

int net_rtnl_link_del(struct net_rtnl *r, const char *name)
{
    nlreq_t q;
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    req_init(&q, RTM_DELLINK, 0, &ifi, sizeof(ifi));
    put_str(&q, IFLA_IFNAME, name);
    int rc = talk(r, &q, NULL, NULL);
    return rc == -ENODEV ? 0 : rc;
}

int net_rtnl_addr_set(struct net_rtnl *r, int ifindex, uint32_t ip, int prefix)
{
    nlreq_t q;
    struct ifaddrmsg ifa = {.ifa_family = AF_INET,
                            .ifa_prefixlen = (unsigned char)prefix,
                            .ifa_scope = RT_SCOPE_UNIVERSE,
                            .ifa_index = (unsigned)ifindex};
    req_init(&q, RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE, &ifa, sizeof(ifa));
    uint32_t be = htonl(ip);
    uint32_t brd = htonl(ip | ~(0xffffffffu << (32 - prefix)));
    put(&q, IFA_LOCAL, &be, 4);
    put(&q, IFA_ADDRESS, &be, 4);
    put(&q, IFA_BROADCAST, &brd, 4);
    return talk(r, &q, NULL, NULL);
}

int net_rtnl_route_default(struct net_rtnl *r, uint32_t gw)
{
    nlreq_t q;
    struct rtmsg rt = {.rtm_family = AF_INET,
                       .rtm_table = RT_TABLE_MAIN,
                       .rtm_protocol = RTPROT_BOOT,
                       .rtm_scope = RT_SCOPE_UNIVERSE,
                       .rtm_type = RTN_UNICAST};
    req_init(&q, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, &rt, sizeof(rt));
    uint32_t be = htonl(gw);
    put(&q, RTA_GATEWAY, &be, 4);
    return talk(r, &q, NULL, NULL);
}

int net_rtnl_port_lock(struct net_rtnl *r, int ifindex)
{
    nlreq_t q;
    struct ifinfomsg ifi = {.ifi_family = AF_BRIDGE, .ifi_index = ifindex};
    req_init(&q, RTM_SETLINK, 0, &ifi, sizeof(ifi));
    struct rtattr *pi = put(&q, IFLA_PROTINFO | NLA_F_NESTED, NULL, 0);
    put_u8(&q, IFLA_BRPORT_ISOLATED, 1);      /* no frames to other isolated ports */
    put_u8(&q, IFLA_BRPORT_LOCKED, 1);        /* only source MACs with a static FDB entry */
    put_u8(&q, IFLA_BRPORT_LEARNING, 0);      /* nothing the sandbox sends moves an FDB entry */
    put_u8(&q, IFLA_BRPORT_UNICAST_FLOOD, 0); /* never sees frames for other MACs */
    put_u8(&q, IFLA_BRPORT_MCAST_FLOOD, 0);
    put_u8(&q, IFLA_BRPORT_BCAST_FLOOD, 0); /* nor the host's ARP requests for other addresses */
    nest_end(&q, pi);
    return talk(r, &q, NULL, NULL);
}

int net_rtnl_fdb_add(struct net_rtnl *r, int ifindex, const unsigned char mac[6])
{
    nlreq_t q;
    struct ndmsg nd = {.ndm_family = AF_BRIDGE,
                       .ndm_ifindex = ifindex,
                       .ndm_state = NUD_NOARP, /* "static" in `bridge fdb` */
                       .ndm_flags = NTF_MASTER};
    req_init(&q, RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE, &nd, sizeof(nd));
    put(&q, NDA_LLADDR, mac, 6);
    return talk(r, &q, NULL, NULL);
}

int net_rtnl_neigh_set(struct net_rtnl *r, int ifindex, uint32_t ip, const unsigned char mac[6])
{
    nlreq_t q;
    struct ndmsg nd = {.ndm_family = AF_INET, .ndm_ifindex = ifindex, .ndm_state = NUD_PERMANENT};
    req_init(&q, RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE, &nd, sizeof(nd));
    uint32_t be = htonl(ip);
    put(&q, NDA_DST, &be, 4);
    put(&q, NDA_LLADDR, mac, 6);
    return talk(r, &q, NULL, NULL);
}

int net_rtnl_neigh_del(struct net_rtnl *r, int ifindex, uint32_t ip)
{
    nlreq_t q;
    struct ndmsg nd = {.ndm_family = AF_INET, .ndm_ifindex = ifindex};
    req_init(&q, RTM_DELNEIGH, 0, &nd, sizeof(nd));
    uint32_t be = htonl(ip);
    put(&q, NDA_DST, &be, 4);
    int rc = talk(r, &q, NULL, NULL);
    return rc == -ENOENT ? 0 : rc;
}

static int on_route(const struct nlmsghdr *h, void *ctx)
{
    if (h->nlmsg_type == RTM_NEWROUTE)
        *(int *)ctx = ((const struct rtmsg *)NLMSG_DATA(h))->rtm_type;
    return 0;
}

int net_rtnl_route_type(struct net_rtnl *r, uint32_t ip)
{
    nlreq_t q;
    struct rtmsg rt = {.rtm_family = AF_INET, .rtm_dst_len = 32};
    req_init(&q, RTM_GETROUTE, 0, &rt, sizeof(rt));
    uint32_t be = htonl(ip);
    put(&q, RTA_DST, &be, 4);
    int type = -ENOENT;
    int rc = talk(r, &q, on_route, &type);
    return rc < 0 ? rc : type;
}

struct ports_ctx {
    int master;
    void (*fn)(const char *name, void *ctx);
    void *ctx;
};

static int on_port(const struct nlmsghdr *h, void *ctx)
{
    struct ports_ctx *pc = ctx;
    struct link_info li = {0};
    on_link(h, &li);
    if (li.master == pc->master && li.index > 0 && li.name[0])
        pc->fn(li.name, pc->ctx);
    return 0;
}

int net_rtnl_ports(struct net_rtnl *r, int master, void (*fn)(const char *name, void *ctx),
                   void *ctx)
{
    nlreq_t q;
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    req_init(&q, RTM_GETLINK, 0, &ifi, sizeof(ifi));
    struct ports_ctx pc = {master, fn, ctx};
    return exchange(r, &q, on_port, &pc, true);
}
