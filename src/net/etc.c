/* /etc/hosts, /etc/hostname and /etc/resolv.conf for a sandbox. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/util.h"
#include "net.h"
#include "net_internal.h"

int net_resolv_nameservers(const char *text, char out[][16], int max)
{
    int n = 0;
    for (const char *line = text; line && *line && n < max;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[128], addr[64];
        uint32_t ip;
        if (len < sizeof(buf)) {
            memcpy(buf, line, len);
            buf[len] = '\0';
            /* IPv4 only (sandboxes have no IPv6), and never loopback: 127.0.0.53 of
             * systemd-resolved is the host's own loopback, which no sandbox reaches. */
            if (sscanf(buf, " nameserver %63s", addr) == 1 && net_ip_parse(addr, &ip) &&
                (ip >> 24) != 127 && ip != 0)
                net_ip_format(ip, out[n++]);
        }
        line = end ? end + 1 : NULL;
    }
    return n;
}

static int nameservers_from(const char *path, char out[][16], int max)
{
    int fd _cleanup_close_ = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char text[16384];
    ssize_t n = read(fd, text, sizeof(text) - 1);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    return net_resolv_nameservers(text, out, max);
}

int net_host_nameservers(char out[][16], int max)
{
    int n = nameservers_from("/etc/resolv.conf", out, max);
    /* A host on systemd-resolved lists only its stub 127.0.0.53; the upstream servers the
     * stub forwards to are in this file. */
    if (n == 0)
        n = nameservers_from("/run/systemd/resolve/resolv.conf", out, max);
    return n;
}

static bool hostname_valid(const char *h)
{
    size_t n = h ? strlen(h) : 0;
    if (n == 0 || n > 253 || h[0] == '-' || h[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.'))
            return false;
    }
    return true;
}

/* Replace dirfd/name with data atomically, never following a symlink at name. */
static int write_atomic(int dirfd, const char *name, const buf_t *data, err_t *err)
{
    char tmp[64];
    snprintf(tmp, sizeof(tmp), ".%s.tmp", name);
    int fd _cleanup_close_ =
        openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return err_sys(err, "create %s", tmp);
    if (write(fd, data->data, data->len) != (ssize_t)data->len)
        return err_sys(err, "write %s", tmp);
    if (renameat(dirfd, tmp, dirfd, name) < 0)
        return err_sys(err, "rename %s", tmp);
    return 0;
}

static void resolv_conf(buf_t *b, const struct net_sandbox *ns)
{
    char servers[3][16];
    int n = ns && strcmp(ns->egress, "open") == 0 ? net_host_nameservers(servers, 3) : 0;
    buf_puts(b, "# written by sandboxer\n");
    if (!ns || strcmp(ns->egress, "open") != 0)
        buf_puts(b, "# no nameserver: this sandbox has no egress\n");
    else if (n == 0)
        buf_puts(b, "# no nameserver: the host has none a sandbox can use\n");
    for (int i = 0; i < n; i++)
        buf_printf(b, "nameserver %s\n", servers[i]);
}

int net_write_etc(const char *etc_dir, const char *hostname, const struct net_sandbox *ns,
                  err_t *err)
{
    if (!hostname_valid(hostname))
        return err_set(err, ERR_INVALID, 0, "bad_hostname", "'%s' is not a valid hostname",
                       hostname ? hostname : "");
    int dfd _cleanup_close_ = open(etc_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return err_sys(err, "open %s", etc_dir);
    buf_t hosts = {0}, name = {0}, resolv = {0};
    buf_printf(&hosts, "127.0.0.1\tlocalhost\n%s\t%s\n", ns ? ns->ip : "127.0.1.1", hostname);
    buf_printf(&name, "%s\n", hostname);
    resolv_conf(&resolv, ns);
    int rc = write_atomic(dfd, "hosts", &hosts, err);
    if (rc == 0)
        rc = write_atomic(dfd, "hostname", &name, err);
    if (rc == 0)
        rc = write_atomic(dfd, "resolv.conf", &resolv, err);
    buf_free(&hosts);
    buf_free(&name);
    buf_free(&resolv);
    return rc;
}
