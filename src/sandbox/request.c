/* Decoding and validation of create requests. */
#include <stddef.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "proxy/egress.h"
#include "sandbox_internal.h"
#include "template.h"

static const struct jfield create_fields[] = {
    {"image", JF_STRING, false, offsetof(struct sbx_create_req, image), 512, 0, 0},
    {"snapshot", JF_STRING, false, offsetof(struct sbx_create_req, snapshot), 128, 0, 0},
    {"label", JF_STRING, false, offsetof(struct sbx_create_req, label), 128, 0, 0},
    {"hostname", JF_STRING, false, offsetof(struct sbx_create_req, hostname), 63, 0, 0},
    {"interactive", JF_BOOL, false, offsetof(struct sbx_create_req, interactive), 0, 0, 0},
    {"env", JF_OBJECT, false, offsetof(struct sbx_create_req, env), 0, 0, 0},
    {"args", JF_ARRAY, false, offsetof(struct sbx_create_req, args), 0, 0, 0},
    {"cpus", JF_NUMBER, false, offsetof(struct sbx_create_req, cpus), 0, 0, 0},
    {"memory", JF_SIZE, false, offsetof(struct sbx_create_req, memory), 0, 0, 0},
    {"pids", JF_INT, false, offsetof(struct sbx_create_req, pids), 0, 16, 1 << 22},
    {"disk", JF_SIZE, false, offsetof(struct sbx_create_req, disk), 0, 0, 0},
    {"network", JF_STRING, false, offsetof(struct sbx_create_req, network), 16, 0, 0},
    {"egress_allow", JF_ARRAY, false, offsetof(struct sbx_create_req, egress_allow), 0, 0, 0},
    {"ports", JF_ARRAY, false, offsetof(struct sbx_create_req, ports), 0, 0, 0},
    {"public", JF_BOOL, false, offsetof(struct sbx_create_req, is_public), 0, 0, 0},
    {"runtime", JF_STRING, false, offsetof(struct sbx_create_req, runtime), 16, 0, 0},
    {"idle_timeout", JF_INT, false, offsetof(struct sbx_create_req, idle_timeout), 0, 0,
     86400 * 365},
    {"net_raw", JF_BOOL, false, offsetof(struct sbx_create_req, net_raw), 0, 0, 0},
    {"template", JF_STRING, false, offsetof(struct sbx_create_req, template_name), 64, 0, 0},
    {"setuid", JF_BOOL, false, offsetof(struct sbx_create_req, setuid), 0, 0, 0},
};

#define MAX_ENV     1024
#define MAX_ARGS    4096
#define MAX_ARG_LEN (128 * 1024)

/* RFC 1123 host label: letters, digits, '-', not at the ends. */
static bool sbx_hostname_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-'))
            return false;
    }
    return true;
}

static int check_env(json_t *env, err_t *err)
{
    if (json_object_size(env) > MAX_ENV)
        return err_set(err, ERR_INVALID, 0, "invalid_field", "field 'env' has more than %d entries",
                       MAX_ENV);
    const char *k;
    json_t *v;
    json_object_foreach(env, k, v)
    {
        if (!*k || strchr(k, '=') || strlen(k) > 1024)
            return err_set(err, ERR_INVALID, 0, "invalid_field",
                           "env names must be non-empty, without '=' and at most 1024 bytes");
        if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v) ||
            json_string_length(v) > MAX_ARG_LEN)
            return err_set(err, ERR_INVALID, 0, "invalid_field",
                           "env values must be strings without NUL bytes");
    }
    return 0;
}

/* An array of strings without NUL bytes, bounded in count and size. */
int sbx_check_argv(json_t *args, const char *field, bool nonempty, err_t *err)
{
    size_t n = json_array_size(args);
    if (n > MAX_ARGS || (nonempty && n == 0))
        return err_set(err, ERR_INVALID, 0, "invalid_field", "field '%s' must have 1 to %d items",
                       field, MAX_ARGS);
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(args, i);
        if (!json_is_string(a) || strlen(json_string_value(a)) != json_string_length(a) ||
            json_string_length(a) > MAX_ARG_LEN)
            return err_set(err, ERR_INVALID, 0, "invalid_field",
                           "field '%s' must be an array of strings without NUL bytes", field);
    }
    return 0;
}

static int check_ports(json_t *ports, err_t *err)
{
    if (json_array_size(ports) > 64)
        return err_set(err, ERR_INVALID, 0, "invalid_field", "at most 64 ports");
    for (size_t i = 0; i < json_array_size(ports); i++) {
        json_t *p = json_array_get(ports, i);
        if (!json_is_integer(p) || json_integer_value(p) < 1 || json_integer_value(p) > 65535)
            return err_set(err, ERR_INVALID, 0, "invalid_field",
                           "field 'ports' must hold port numbers 1-65535");
    }
    return 0;
}

#define MAX_EGRESS_ALLOW 64

/* network "proxy" needs the hosts it may reach; no other network takes a list. */
static int check_egress_allow(const struct sbx_create_req *q, err_t *err)
{
    bool proxy = q->network && strcmp(q->network, "proxy") == 0;
    if (!proxy && q->egress_allow)
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "field 'egress_allow' goes with \"network\": \"proxy\" only");
    if (!proxy)
        return 0;
    size_t n = json_array_size(q->egress_allow);
    if (n == 0 || n > MAX_EGRESS_ALLOW)
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "network \"proxy\" needs 'egress_allow': 1-%d host names, *.domains or "
                       "IPv4 addresses",
                       MAX_EGRESS_ALLOW);
    size_t i;
    json_t *v;
    json_array_foreach(q->egress_allow, i, v)
    {
        if (!json_is_string(v) || !egress_pattern_valid(json_string_value(v)))
            return err_set(err, ERR_INVALID, 0, "invalid_field",
                           "egress_allow[%zu] must be a lowercase host name, *. and a domain, "
                           "or an IPv4 address",
                           i);
    }
    return 0;
}

static int check_resources(const struct sbx_create_req *q, err_t *err)
{
    if (q->cpus != -1 && (q->cpus < 0.01 || q->cpus > 256))
        return err_set(err, ERR_INVALID, 0, "invalid_field", "field 'cpus' must be 0.01-256");
    if (q->memory && (q->memory < (6u << 20) || q->memory > (1ull << 40)))
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "field 'memory' must be between 6 MiB and 1 TiB");
    if (q->disk && (q->disk < (1u << 20) || q->disk > (1ull << 44)))
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "field 'disk' must be between 1 MiB and 16 TiB");
    return sbx_check_host_size(q->cpus, q->memory, err);
}

int sbx_create_req_decode(json_t *body, struct sbx_create_req *q, err_t *err)
{
    *q = (struct sbx_create_req){.interactive = -1,
                                 .cpus = -1,
                                 .pids = -1,
                                 .is_public = -1,
                                 .idle_timeout = -1,
                                 .net_raw = -1,
                                 .setuid = -1};
    if (json_decode_fields(body, create_fields, ARRAY_SIZE(create_fields), q, err) < 0)
        return -1;
    if (!!q->image + !!q->snapshot + !!q->template_name > 1)
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "give at most one of 'image', 'template' and 'snapshot' (none: the "
                       "template \"" SBX_DEFAULT_TEMPLATE "\")");
    if (q->snapshot && (q->net_raw >= 0 || q->setuid >= 0))
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "fields 'net_raw' and 'setuid' come from the snapshot; they cannot be "
                       "given with it");
    if (q->template_name && !*q->template_name)
        return err_set(err, ERR_INVALID, 0, "invalid_field", "field 'template' must not be empty");
    if (q->image && !*q->image)
        return err_set(err, ERR_INVALID, 0, "invalid_field", "field 'image' must not be empty");
    if (q->hostname && sbx_check_hostname(q->hostname, err) < 0)
        return -1;
    if ((q->env && check_env(q->env, err) < 0) ||
        (q->args && sbx_check_argv(q->args, "args", false, err) < 0) ||
        (q->ports && check_ports(q->ports, err) < 0) || check_resources(q, err) < 0)
        return -1;
    if (q->network && strcmp(q->network, "none") != 0 && strcmp(q->network, "open") != 0 &&
        strcmp(q->network, "proxy") != 0)
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "field 'network' must be \"none\", \"open\" or \"proxy\"");
    if (check_egress_allow(q, err) < 0)
        return -1;
    if (q->runtime && strcmp(q->runtime, "runc") != 0 && strcmp(q->runtime, "runsc") != 0)
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "field 'runtime' must be \"runc\" or \"runsc\"");
    return 0;
}

int sbx_check_hostname(const char *s, err_t *err)
{
    if (!sbx_hostname_valid(s))
        return err_set(err, ERR_INVALID, 0, "invalid_field",
                       "field 'hostname' must be an RFC 1123 label (letters, digits, '-')");
    return 0;
}
