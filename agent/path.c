/* Lexical path normalisation (see path.h). */
#include "path.h"

#include <string.h>

int agent_path_normalize(const char *path, size_t len, char *out, size_t out_size)
{
    size_t limit = out_size < AGENT_PATH_MAX ? out_size : AGENT_PATH_MAX;
    size_t n = 0, i = 0;
    if (len >= AGENT_PATH_MAX || limit < 2 || memchr(path, '\0', len))
        return -1;
    while (i < len) {
        while (i < len && path[i] == '/')
            i++;
        size_t start = i;
        while (i < len && path[i] != '/')
            i++;
        size_t clen = i - start;
        if (clen == 0 || (clen == 1 && path[start] == '.'))
            continue;
        if (clen == 2 && path[start] == '.' && path[start + 1] == '.') {
            /* Drop the last "/component"; at the root there is nothing to drop. */
            while (n > 0 && out[n - 1] != '/')
                n--;
            if (n > 0)
                n--;
            continue;
        }
        if (n + 1 + clen >= limit)
            return -1;
        out[n++] = '/';
        memcpy(out + n, path + start, clen);
        n += clen;
    }
    if (n == 0)
        out[n++] = '/';
    out[n] = '\0';
    return (int)n;
}

const char *agent_path_base(const char *norm)
{
    const char *slash = strrchr(norm, '/');
    return slash && slash[1] ? slash + 1 : norm;
}

bool agent_path_is_root(const char *norm)
{
    return norm[0] == '/' && norm[1] == '\0';
}
