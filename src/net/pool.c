/* Address parsing and the in-memory address pool: pure logic, testable without root. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "net_internal.h"

bool net_ip_parse(const char *s, uint32_t *out)
{
    struct in_addr a;
    if (!s || inet_pton(AF_INET, s, &a) != 1)
        return false;
    *out = ntohl(a.s_addr);
    return true;
}

void net_ip_format(uint32_t ip, char *out)
{
    snprintf(out, 16, "%u.%u.%u.%u", ip >> 24, (ip >> 16) & 255, (ip >> 8) & 255, ip & 255);
}

static uint32_t mask_of(int prefix)
{
    return prefix == 0 ? 0 : 0xffffffffu << (32 - prefix);
}

bool net_subnet_parse(const char *cidr, struct net_subnet *out)
{
    char addr[16];
    const char *slash = cidr ? strchr(cidr, '/') : NULL;
    if (!slash || (size_t)(slash - cidr) >= sizeof(addr))
        return false;
    memcpy(addr, cidr, (size_t)(slash - cidr));
    addr[slash - cidr] = '\0';
    long long prefix;
    uint32_t ip;
    /* /30 and smaller leave no room for a gateway and more than one sandbox. */
    if (!parse_int(slash + 1, 8, 29, &prefix) || !net_ip_parse(addr, &ip))
        return false;
    if (ip & ~mask_of((int)prefix))
        return false; /* host bits set: almost certainly a typo, refuse rather than guess */
    out->net = ip;
    out->prefix = (int)prefix;
    return true;
}

uint32_t net_subnet_gateway(const struct net_subnet *sn)
{
    return sn->net + 1;
}

bool net_subnet_assignable(const struct net_subnet *sn, uint32_t ip)
{
    uint32_t mask = mask_of(sn->prefix);
    if ((ip & mask) != sn->net)
        return false;
    uint32_t off = ip & ~mask;
    return off >= 2 && off < ~mask; /* not network, gateway or broadcast */
}

void net_mac_for_ip(uint32_t ip, char *out)
{
    snprintf(out, 18, "02:53:%02x:%02x:%02x:%02x", ip >> 24, (ip >> 16) & 255, (ip >> 8) & 255,
             ip & 255);
}

bool net_id_valid(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > NET_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

static uint64_t fnv1a(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

void net_ifname_for(const char *bridge, const char *id, char *out)
{
    /* The bridge is part of the hash so two layers on one host never share a name. */
    uint64_t h = fnv1a(0xcbf29ce484222325ull, bridge, strlen(bridge) + 1);
    h = fnv1a(h, id, strlen(id));
    h ^= h >> 33; /* a murmur3 finalizer, so ids differing in one byte differ in all bits */
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    snprintf(out, 16, "sbx%012llx", (unsigned long long)(h & 0xffffffffffffull));
}

void net_pool_init(struct net_pool *p, const struct net_subnet *sn)
{
    memset(p, 0, sizeof(*p));
    p->sn = *sn;
    p->size = 1u << (32 - sn->prefix);
    p->used = xcalloc(p->size / 8 + 1, 1);
    p->quar = xcalloc(p->size / 8 + 1, 1);
    p->next = 2;
}

void net_pool_free(struct net_pool *p)
{
    free(p->used);
    free(p->quar);
    free(p->q);
    free(p->ents);
    memset(p, 0, sizeof(*p));
}

static bool get_bit(const uint8_t *map, uint32_t off)
{
    return map[off / 8] & (1u << (off % 8));
}

static void put_bit(uint8_t *map, uint32_t off, bool on)
{
    if (on)
        map[off / 8] |= (uint8_t)(1u << (off % 8));
    else
        map[off / 8] &= (uint8_t) ~(1u << (off % 8));
}

static bool bit(const struct net_pool *p, uint32_t off)
{
    return get_bit(p->used, off);
}

static void set_bit(struct net_pool *p, uint32_t off, bool on)
{
    put_bit(p->used, off, on);
}

struct net_entry *net_pool_find(struct net_pool *p, const char *id)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->ents[i].id, id) == 0)
            return &p->ents[i];
    return NULL;
}

struct net_entry *net_pool_find_ip(struct net_pool *p, uint32_t ip)
{
    if (!net_subnet_assignable(&p->sn, ip) || !bit(p, ip - p->sn.net))
        return NULL;
    for (size_t i = 0; i < p->n; i++)
        if (p->ents[i].ip == ip)
            return &p->ents[i];
    return NULL;
}

static struct net_entry *add_entry(struct net_pool *p, const char *id, uint32_t ip)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 64;
        p->ents = xrealloc(p->ents, p->cap * sizeof(*p->ents));
    }
    struct net_entry *e = &p->ents[p->n++];
    memset(e, 0, sizeof(*e));
    snprintf(e->id, sizeof(e->id), "%s", id);
    e->ip = ip;
    e->owner = -1;
    set_bit(p, ip - p->sn.net, true);
    return e;
}

struct net_entry *net_pool_alloc(struct net_pool *p, const char *id, err_t *err)
{
    /* Next-fit, so a freed address is handed out again as late as possible, and never while
     * in quarantine (the caller also checks that the host tracks no flow of it). */
    double now = now_mono_ms();
    for (uint32_t i = 0; i < p->size; i++) {
        uint32_t off = (p->next + i) % p->size;
        if (!net_subnet_assignable(&p->sn, p->sn.net + off) || bit(p, off) ||
            net_pool_quarantined(p, p->sn.net + off, now))
            continue;
        p->next = (off + 1) % p->size;
        return add_entry(p, id, p->sn.net + off);
    }
    err_set(err, ERR_LIMIT, 0, "no_address",
            "no free address left in the sandbox subnet (%zu freed ones are in quarantine)",
            p->n_q);
    return NULL;
}

struct net_entry *net_pool_reserve(struct net_pool *p, const char *id, uint32_t ip, err_t *err)
{
    char s[16];
    net_ip_format(ip, s);
    if (!net_subnet_assignable(&p->sn, ip)) {
        err_set(err, ERR_INVALID, 0, "bad_address", "%s is not a sandbox address of the subnet", s);
        return NULL;
    }
    struct net_entry *e = net_pool_find(p, id);
    if (e && e->ip == ip)
        return e;
    if (e) {
        err_set(err, ERR_CONFLICT, 0, "address_conflict", "sandbox %s already has another address",
                id);
        return NULL;
    }
    if (bit(p, ip - p->sn.net)) {
        err_set(err, ERR_CONFLICT, 0, "address_conflict", "%s is in use by another sandbox", s);
        return NULL;
    }
    return add_entry(p, id, ip);
}

void net_pool_release(struct net_pool *p, const char *id)
{
    struct net_entry *e = net_pool_find(p, id);
    if (!e)
        return;
    set_bit(p, e->ip - p->sn.net, false);
    *e = p->ents[--p->n];
}

void net_pool_quarantine(struct net_pool *p, uint32_t ip, double until_ms)
{
    if (!net_subnet_assignable(&p->sn, ip))
        return;
    uint32_t off = ip - p->sn.net;
    for (size_t i = 0; get_bit(p->quar, off) && i < p->n_q; i++) {
        if (p->q[i].ip == ip) {
            if (p->q[i].until_ms < until_ms)
                p->q[i].until_ms = until_ms;
            return;
        }
    }
    if (p->n_q == p->cap_q) {
        p->cap_q = p->cap_q ? p->cap_q * 2 : 16;
        p->q = xrealloc(p->q, p->cap_q * sizeof(*p->q));
    }
    p->q[p->n_q++] = (struct net_quarantine){ip, until_ms};
    put_bit(p->quar, off, true);
}

bool net_pool_quarantined(struct net_pool *p, uint32_t ip, double now_ms)
{
    if (!net_subnet_assignable(&p->sn, ip) || !get_bit(p->quar, ip - p->sn.net))
        return false;
    for (size_t i = 0; i < p->n_q; i++) {
        if (p->q[i].ip != ip)
            continue;
        if (p->q[i].until_ms > now_ms)
            return true;
        p->q[i] = p->q[--p->n_q]; /* expired */
        break;
    }
    put_bit(p->quar, ip - p->sn.net, false);
    return false;
}

uint32_t net_pool_cursor(const struct net_pool *p)
{
    return p->sn.net + p->next;
}

void net_pool_set_cursor(struct net_pool *p, uint32_t ip)
{
    if ((ip & ~(p->size - 1)) == p->sn.net)
        p->next = ip - p->sn.net;
}
