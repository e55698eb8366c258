/*
 * The OCI config.json of a sandbox, with the hardening of DESIGN.md invariant 4; every
 * choice is listed in docs/security.md. The container's PID 1 is sandboxer-agent.
 */
#include <sys/resource.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "runtime.h"

/*
 * Capabilities the agent (root in the sandbox) keeps: enough to run ordinary software.
 * NET_RAW only when the sandbox asked for it (net_raw): raw and packet sockets can craft any
 * frame, ARP included, and ping works without them (net.ipv4.ping_group_range below).
 */
static const char *const caps[] = {
    "CAP_CHOWN",   "CAP_DAC_OVERRIDE", "CAP_FOWNER",           "CAP_FSETID",
    "CAP_KILL",    "CAP_SETGID",       "CAP_SETUID",           "CAP_SETPCAP",
    "CAP_SETFCAP", "CAP_SYS_CHROOT",   "CAP_NET_BIND_SERVICE", "CAP_AUDIT_WRITE",
};

static const char *const masked_paths[] = {
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
};

static const char *const readonly_paths[] = {
    "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
};

static json_t *str_array(const char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

static json_t *mount(const char *dest, const char *type, const char *src, json_t *opts)
{
    return json_pack("{s:s, s:s, s:s, s:o}", "destination", dest, "type", type, "source", src,
                     "options", opts);
}

static json_t *bind(const char *dest, const char *src, bool ro)
{
    return mount(
        dest, "bind", src,
        json_pack("[s,s,s,s,s]", "rbind", ro ? "ro" : "rw", "nosuid", "nodev", "rprivate"));
}

static json_t *mounts(const struct spec_opts *o)
{
    json_t *m = json_array();
    json_array_append_new(
        m, mount("/proc", "proc", "proc", json_pack("[s,s,s]", "nosuid", "noexec", "nodev")));
    json_array_append_new(
        m, mount("/dev", "tmpfs", "tmpfs",
                 json_pack("[s,s,s,s]", "nosuid", "strictatime", "mode=755", "size=65536k")));
    json_array_append_new(m, mount("/dev/pts", "devpts", "devpts",
                                   json_pack("[s,s,s,s,s,s]", "nosuid", "noexec", "newinstance",
                                             "ptmxmode=0666", "mode=0620", "gid=5")));
    json_array_append_new(m, mount("/dev/shm", "tmpfs", "shm",
                                   json_pack("[s,s,s,s,s]", "nosuid", "noexec", "nodev",
                                             "mode=1777", "size=65536k")));
    json_array_append_new(m, mount("/dev/mqueue", "mqueue", "mqueue",
                                   json_pack("[s,s,s]", "nosuid", "noexec", "nodev")));
    json_array_append_new(m, mount("/sys", "sysfs", "sysfs",
                                   json_pack("[s,s,s,s]", "nosuid", "noexec", "nodev", "ro")));
    json_array_append_new(
        m, mount("/sys/fs/cgroup", "cgroup", "cgroup",
                 json_pack("[s,s,s,s,s]", "nosuid", "noexec", "nodev", "relatime", "ro")));
    /* No tmpfs on /run (Docker has none either): every tmpfs with content costs each
     * checkpoint and restore a tar and a gzip run. /run/sandboxer is made in the layer. */
    /* noexec as the tmpfs under it is (sockdir.c): in a user namespace a bind may not clear
     * a flag of the mount it binds. */
    json_t *sock = bind("/run/sandboxer", o->sock_dir, false);
    json_array_append_new(json_object_get(sock, "options"), json_string("noexec"));
    json_array_append_new(m, sock);
    json_array_append_new(m, bind("/.sandboxer", o->agent_dir, true));
    _cleanup_free_ char *hostname = xasprintf("%s/hostname", o->etc_dir);
    _cleanup_free_ char *hosts = xasprintf("%s/hosts", o->etc_dir);
    json_array_append_new(m, bind("/etc/hostname", hostname, true));
    json_array_append_new(m, bind("/etc/hosts", hosts, true));
    _cleanup_free_ char *resolv = xasprintf("%s/resolv.conf", o->etc_dir);
    if (access(resolv, F_OK) == 0)
        json_array_append_new(m, bind("/etc/resolv.conf", resolv, true));
    return m;
}

/* rlimits never above the host's hard limits: the daemon cannot raise them. */
static json_t *rlimits(void)
{
    struct rlimit nofile = {1024, 1024}, nproc = {4096, 4096};
    getrlimit(RLIMIT_NOFILE, &nofile);
    getrlimit(RLIMIT_NPROC, &nproc);
    rlim_t nofile_hard = nofile.rlim_max == RLIM_INFINITY ? 1048576 : nofile.rlim_max;
    rlim_t nofile_soft = nofile_hard < 1024 ? nofile_hard : 1024;
    rlim_t nproc_hard = nproc.rlim_max == RLIM_INFINITY ? 1048576 : nproc.rlim_max;
    return json_pack("[{s:s, s:I, s:I}, {s:s, s:I, s:I}]", "type", "RLIMIT_NOFILE", "hard",
                     (json_int_t)nofile_hard, "soft", (json_int_t)nofile_soft, "type",
                     "RLIMIT_NPROC", "hard", (json_int_t)nproc_hard, "soft",
                     (json_int_t)nproc_hard);
}

static json_t *process(const struct spec_opts *o)
{
    json_t *args = json_pack("[s,s,s]", "/.sandboxer/sandboxer-agent", "--socket",
                             "/run/sandboxer/agent.sock");
    if (o->user && *o->user) {
        json_array_append_new(args, json_string("--user"));
        json_array_append_new(args, json_string(o->user));
    }
    if (o->agent_auth)
        json_array_append_new(args, json_string("--auth-stdin"));
    if (o->tty && json_array_size(o->args) > 0)
        json_array_append_new(args, json_string("--tty"));
    json_array_append_new(args, json_string("--"));
    json_array_extend(args, o->args);
    json_t *c = str_array(caps, ARRAY_SIZE(caps));
    if (o->net_raw)
        json_array_append_new(c, json_string("CAP_NET_RAW"));
    return json_pack("{s:b, s:{s:i, s:i}, s:o, s:O, s:s, s:{s:O, s:O, s:o}, s:o, s:b}", "terminal",
                     0, "user", "uid", 0, "gid", 0, "args", args, "env", o->env, "cwd",
                     o->cwd && *o->cwd ? o->cwd : "/", "capabilities", "bounding", c, "effective",
                     c, "permitted", c, "rlimits", rlimits(), "noNewPrivileges", !o->setuid);
}

static bool swap_limit_supported(void)
{
    return runtime_cgroup_mode() == CGROUP_V2 ||
           access("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", F_OK) == 0;
}

static json_t *resources(const struct spec_opts *o)
{
    json_t *mem = json_pack("{s:I}", "limit", (json_int_t)o->memory);
    if (swap_limit_supported()) /* no swap beyond the memory limit */
        json_object_set_new(mem, "swap", json_integer((json_int_t)o->memory));
    json_int_t period = 100000;
    return json_pack("{s:[{s:b, s:s}], s:o, s:{s:I, s:I}, s:{s:I}}", "devices", "allow", 0,
                     "access", "rwm", "memory", mem, "cpu", "quota",
                     (json_int_t)(o->cpus * (double)period), "period", period, "pids", "limit",
                     (json_int_t)o->pids);
}

static json_t *namespaces(const struct spec_opts *o)
{
    json_t *ns = json_pack("[{s:s}, {s:s}, {s:s}, {s:s}, {s:s}]", "type", "pid", "type", "ipc",
                           "type", "uts", "type", "mount", "type", "cgroup");
    json_t *net = json_pack("{s:s}", "type", "network");
    if (o->netns_path)
        json_object_set_new(net, "path", json_string(o->netns_path));
    json_array_append_new(ns, net);
    if (o->userns_base) {
        json_t *user = json_pack("{s:s}", "type", "user");
        if (o->userns_path)
            json_object_set_new(user, "path", json_string(o->userns_path));
        json_array_append_new(ns, user);
    }
    return ns;
}

static json_t *id_mappings(const struct spec_opts *o)
{
    return json_pack("[{s:i, s:I, s:I}]", "containerID", 0, "hostID", (json_int_t)o->userns_base,
                     "size", (json_int_t)RUNTIME_USERNS_SIZE);
}

int runtime_spec_build(const struct spec_opts *o, json_t **out, err_t *err)
{
    _cleanup_free_ char *cgpath = xasprintf("/sandboxer/%s", o->id);
    json_t *linux_ = json_pack(
        "{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:{s:s}}", "cgroupsPath", cgpath, "resources",
        resources(o), "namespaces", namespaces(o), "maskedPaths",
        str_array(masked_paths, ARRAY_SIZE(masked_paths)), "readonlyPaths",
        str_array(readonly_paths, ARRAY_SIZE(readonly_paths)), "seccomp", runtime_seccomp_profile(),
        "devices", json_array(), "sysctl", "net.ipv4.ping_group_range", "0 2147483647");
    json_t *spec = json_pack("{s:s, s:o, s:{s:s, s:b}, s:s, s:o, s:o}", "ociVersion", "1.0.2",
                             "process", process(o), "root", "path", "rootfs", "readonly", 0,
                             "hostname", o->hostname, "mounts", mounts(o), "linux", linux_);
    if (!spec || !linux_)
        return err_set(err, ERR_INTERNAL, 0, "internal", "cannot build the OCI spec");
    if (o->userns_base) {
        json_object_set_new(linux_, "uidMappings", id_mappings(o));
        json_object_set_new(linux_, "gidMappings", id_mappings(o));
        /* The daemon sets it when it plumbs the network namespace (net/netns.c): runc would
         * write it from inside, and a restore's namespace is made by CRIU. */
        json_object_del(linux_, "sysctl");
    }
    /* Our CRIU options, and never the host's /etc/criu/runc.conf by accident. */
    json_object_set_new(spec, "annotations",
                        json_pack("{s:s}", "org.criu.config", o->criu_conf ? o->criu_conf : ""));
    *out = spec;
    return 0;
}
