#include "route.h"

#include <string.h>

/* Length of the segment starting at s (up to '/' or end). */
static size_t seg_len(const char *s, size_t n)
{
    const char *slash = memchr(s, '/', n);
    return slash ? (size_t)(slash - s) : n;
}

static bool add_param(struct route_params *params, const char *name, size_t nlen, const char *value,
                      size_t vlen)
{
    if (params->n >= ROUTE_MAX_PARAMS)
        return false;
    params->p[params->n++] = (struct route_param){name, nlen, value, vlen};
    return true;
}

bool route_pattern_match(const char *pattern, const char *path, size_t len,
                         struct route_params *params)
{
    params->n = 0;
    if (len == 0 || path[0] != '/' || pattern[0] != '/')
        return false;
    const char *pp = pattern + 1, *sp = path + 1;
    size_t plen = strlen(pp), slen = len - 1;
    for (;;) {
        size_t pseg = seg_len(pp, plen);
        if (pseg >= 2 && pp[0] == '{' && pp[pseg - 1] == '}') {
            bool rest = pseg >= 3 && pp[pseg - 2] == '*';
            const char *name = pp + 1;
            size_t nlen = pseg - 2 - (rest ? 1 : 0);
            if (rest) /* {name*} takes the rest of the path, possibly empty */
                return add_param(params, name, nlen, sp, slen);
            size_t sseg = seg_len(sp, slen);
            if (sseg == 0 || !add_param(params, name, nlen, sp, sseg))
                return false;
            sp += sseg, slen -= sseg;
        } else {
            size_t sseg = seg_len(sp, slen);
            if (sseg != pseg || memcmp(pp, sp, pseg) != 0)
                return false;
            sp += sseg, slen -= sseg;
        }
        pp += pseg, plen -= pseg;
        if (plen == 0 && slen == 0)
            return true;
        if (slen == 0 && plen >= 4 && pp[0] == '/' && pp[1] == '{' && pp[plen - 1] == '}' &&
            pp[plen - 2] == '*' && !memchr(pp + 1, '/', plen - 1))
            return add_param(params, pp + 2, plen - 4, sp, 0); /* "/files" == "/files/" */
        if (plen == 0 || slen == 0 || *pp != '/' || *sp != '/')
            return false;
        pp++, plen--, sp++, slen--;
    }
}
