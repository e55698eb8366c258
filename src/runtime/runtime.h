/* The OCI runtime layer: spec generation with hardening defaults, the runc driver, the shim. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

/* Which cgroup hierarchy the host runs. */
enum cgroup_mode { CGROUP_V1 = 1, CGROUP_V2 = 2 };

/* Detect cgroup v1 (incl. hybrid) or v2 (unified) once; never assumed. */
enum cgroup_mode runtime_cgroup_mode(void);

/*
 * Turn on cgroup2's favordynmods (kernel >= 6.0) on the host's cgroup2 hierarchy (the root
 * on v2, unified/ on a hybrid host), keeping its other options: moving a process into a
 * cgroup, which every container start and restore does, then costs ~0.1 ms instead of an RCU
 * grace period (10-25 ms here), at a small cost to fork and exit. 1: turned on now, 0: it
 * was on, -1: no cgroup2 hierarchy or the kernel refused (err says).
 */
int runtime_cgroup_favor_dynmods(const char **where, err_t *err);
/* Whether favordynmods is on (1) or off (0) now, without changing it; -1: no cgroup2
 * hierarchy. *where gets the path looked at. */
int runtime_cgroup_favordynmods_on(const char **where);

/* What a sandbox's cgroup says; -1 where it says nothing (no such file, no limit). */
struct cgroup_stats {
    int64_t cpu_ns;       /* CPU time used, all tasks, since the cgroup was made */
    int64_t memory;       /* bytes charged now (page cache included) */
    int64_t memory_limit; /* bytes */
    int64_t memory_peak;  /* the most charged at once */
    int64_t pids;         /* tasks now */
    int64_t pids_limit;
};

/* Read the cgroup of container id (v1 or v2 as detected). */
void runtime_cgroup_stats(const char *id, struct cgroup_stats *st);
/* The same under root (normally /sys/fs/cgroup) for hierarchy mode m; for the tests. */
void runtime_cgroup_stats_at(const char *root, enum cgroup_mode m, const char *id,
                             struct cgroup_stats *st);

/* What the generated OCI spec needs to know about one sandbox. */
struct spec_opts {
    const char *id; /* container id and cgroup leaf */
    const char *hostname;
    const char *agent_dir;   /* host dir holding sandboxer-agent (bound ro at /.sandboxer) */
    const char *sock_dir;    /* host dir for the agent socket (bound at /run/sandboxer) */
    const char *etc_dir;     /* host dir with hostname, hosts (bound ro into /etc) */
    const char *netns_path;  /* join this netns, or NULL for a new loopback-only one */
    const char *criu_conf;   /* CRIU config file runc hands to CRIU (org.criu.config) */
    json_t *env;             /* array of "K=V" strings for the main process (borrowed) */
    json_t *args;            /* array: the main process argv, may be empty (borrowed) */
    const char *cwd;         /* working dir, "/" if NULL */
    const char *user;        /* image/user spec for the main process, NULL = root */
    bool tty;                /* the main process on a PTY the agent owns (interactive) */
    double cpus;             /* CPU quota in CPUs */
    uint64_t memory;         /* bytes */
    int64_t pids;            /* max tasks */
    bool net_raw;            /* keep CAP_NET_RAW (raw and packet sockets) */
    bool agent_auth;         /* the agent reads its token from stdin (--auth-stdin) */
    bool setuid;             /* no noNewPrivileges: setuid binaries (sudo) work */
    uint32_t userns_base;    /* a user namespace mapping root to this host uid; 0: none */
    const char *userns_path; /* with userns_base: join this user namespace (else runc or
                                CRIU makes one) */
};

/*
 * User namespaces (userns.c). A sandbox's namespace maps ids [0, RUNTIME_USERNS_SIZE) to
 * [base, base + RUNTIME_USERNS_SIZE) on the host, uids and gids alike.
 */
#define RUNTIME_USERNS_SIZE       65536u
#define RUNTIME_USERNS_PROBE_BASE 4000000000u /* the probe's: mapped for a moment, never run */
/* An fd of a new user namespace with that mapping (for idmapped mounts). */
int runtime_userns_open(uint32_t base, err_t *err);
/* A child process in a new user namespace with that mapping (and, with_net, in a new network
 * namespace that user namespace owns), waiting until runtime_userns_release: its
 * /proc/<pid>/ns files can be bound meanwhile. -1 and err on failure. */
pid_t runtime_userns_hold(uint32_t base, bool with_net, int *release, err_t *err);
void runtime_userns_release(pid_t pid, int release);
/* Mount src at dst (an existing dir), its ids mapped through the user namespace userns_fd. */
int runtime_idmap_mount(const char *src, const char *dst, int userns_fd, err_t *err);
/* True if this kernel makes user namespaces and idmapped mounts of dir's filesystem; else
 * why not, in why. */
bool runtime_userns_probe(const char *dir, char *why, size_t size);
/* Let the sandbox's root (host uid base) read checkpoint images in dir, as CRIU restores
 * them from inside the sandbox's user namespace: dir base:0 0750, its files 0640. */
int runtime_userns_own_images(const char *dir, uint32_t base, err_t *err);

/* Build the container's config.json (a new reference in *out). */
int runtime_spec_build(const struct spec_opts *o, json_t **out, err_t *err);

/* A group of syscalls of the default seccomp profile, with one answer for all of them. */
struct seccomp_group {
    const char *name;         /* short, for tests and docs: "io_uring", "mounts", ... */
    int errnum;               /* 0: allowed; else the errno they answer (EPERM, ENOSYS) */
    const char *const *names; /* syscall names, NULL-terminated */
};
/* The profile's groups (src/runtime/seccomp.c, where each says why). Conditional rules
 * (clone's namespace flags, socket's families, personality) are not in the table. */
extern const struct seccomp_group runtime_seccomp_groups[];
extern const size_t runtime_seccomp_ngroups;
/* The default seccomp profile as the OCI spec's linux.seccomp object (a new reference): an
 * allow list; unknown syscalls answer ENOSYS. Architectures: x86_64, x86, and x32 where the
 * kernel runs x32 code. */
json_t *runtime_seccomp_profile(void);
/* True if this kernel runs x32 syscalls (tested once). */
bool runtime_seccomp_x32(void);

/* How the daemon runs containers. */
struct runtime_config {
    const char *runc;           /* runc binary (path or name) */
    const char *runsc;          /* runsc (gVisor) binary (path or name) */
    const char *state_dir;      /* each runtime's --root is <state_dir>/<its name> */
    const char *self_exe;       /* the sandboxer binary, to start the shim */
    const char *runsc_platform; /* "auto", "ptrace" or "kvm" */
    const char *agent_bin;      /* sandboxer-agent, for runsc's platform probe */
};

/* Set the runtime configuration (once, at start-up; probes runsc's platform, bounded). */
void runtime_configure(const struct runtime_config *cfg);

/*
 * One OCI runtime behind a table of operations (src/runtime/runtime_internal.h): runc + CRIU
 * and runsc (gVisor). The sandbox layer holds a runtime_t per sandbox and asks what it can do
 * only through runtime_can.
 */
typedef struct runtime runtime_t;

/* What a runtime can do, or needs from the lifecycle. */
enum runtime_cap {
    /* A checkpoint keeps memory and processes (fork, hibernate, snapshots keep them). */
    RUNTIME_KEEPS_MEMORY = 1u << 0,
    /* A checkpoint can leave the container running; without it a fork stops the source,
     * checkpoints it and restores it again. */
    RUNTIME_LIVE_CHECKPOINT = 1u << 1,
    /* The agent must let go of its host sockets before a checkpoint (QUIESCE) and listen
     * again after it (runtime_agent_resume). */
    RUNTIME_AGENT_QUIESCE = 1u << 2,
    /* The runtime takes the sandbox's address off its interface: give it back before each
     * start or restore. */
    RUNTIME_NET_REAPPLY = 1u << 3,
    /* The agent's sockets are served by a host process that every process of the sandbox
     * shares (gVisor's gofer): the agent proves itself with a token (AUTH). */
    RUNTIME_AGENT_TOKEN = 1u << 4,
};

/* The runtime called name ("runc", "runsc"), or NULL. */
const runtime_t *runtime_find(const char *name);
/* Its name. */
const char *runtime_name(const runtime_t *rt);
/* True if rt has every capability in caps (this host's answer included). */
bool runtime_can(const runtime_t *rt, unsigned caps);
/* 0 if sandboxes can run with rt on this host; else ERR_INVALID "unsupported" saying why. */
int runtime_usable(const runtime_t *rt, err_t *err);
/* Wait for the start-up probes (bounded), so that none outlives the daemon's stop. */
void runtime_wait_probes(void);
/* What the runsc platform probe chose ("ptrace", "kvm") and why, for logs and doctor. */
const char *runtime_runsc_platform(const char **why);

/* Paths the shim uses for one sandbox. */
struct shim_paths {
    const char *id;
    const char *bundle;  /* holds config.json and rootfs/ */
    const char *run_dir; /* host-only: shim.pid, init.pid, exit (and agent.token) */
    const char *log_dir; /* main.log (+ main.log.1) */
    uint64_t log_max;    /* bytes per log file before rotation */
    const char *restore; /* a checkpoint image dir to restore from instead of a fresh run */
};

/*
 * Start the shim for a sandbox (it runs the runtime and outlives the daemon), wait until the
 * container's init pid is known. Returns the shim pid; *init_pid gets the container's.
 */
pid_t runtime_start(const runtime_t *rt, const struct shim_paths *p, int timeout_ms,
                    pid_t *init_pid, err_t *err);

/* Send a signal to the container's processes (kill [--all]). */
int runtime_kill(const runtime_t *rt, const char *id, int sig, bool all, err_t *err);
/* Forget a container (delete --force, and what the runtime leaves: cgroups); fine if gone. */
int runtime_delete(const runtime_t *rt, const char *id, err_t *err);
/* Container state ("running", "stopped", "paused", …) into out; ERR_NOT_FOUND if none. */
int runtime_state(const runtime_t *rt, const char *id, char *out, size_t size, pid_t *pid,
                  err_t *err);
/* Freeze or thaw the container (pause/resume). */
int runtime_pause(const runtime_t *rt, const char *id, bool pause, err_t *err);
/*
 * Checkpoint the container into image_dir (work_dir gets the log). With leave_running the
 * container goes on afterwards (RUNTIME_LIVE_CHECKPOINT only); without, it ends.
 */
int runtime_checkpoint(const runtime_t *rt, const char *id, const char *image_dir,
                       const char *work_dir, bool leave_running, err_t *err);
/* Replace the host paths of the daemon's state (those naming sandboxer, and /proc/...) in a
 * message from runc or CRIU by "...": its owner may read it, the host's layout stays ours. */
void runtime_scrub_paths(char *s);
/*
 * After a failed runtime_checkpoint with work_dir: read the runtime's log there, log its
 * errors, and when it says why, turn err into ERR_CONFLICT "checkpoint_failed" naming the
 * process and the cause in the user's terms (sandbox pids, no host paths). Returns -1.
 */
int runtime_checkpoint_explain(const runtime_t *rt, const char *work_dir, const char *id,
                               err_t *err);
/* After a restore: give the restored tree its own hostname (it comes back with the source's). */
int runtime_after_restore(const runtime_t *rt, const char *id, pid_t init_pid, const char *hostname,
                          err_t *err);
/* The host pid that SO_PEERCRED names for the agent's sockets (runc: the init; runsc: the
 * container's gofer), or -1 if it cannot be found. */
pid_t runtime_agent_peer(const runtime_t *rt, const char *bundle, pid_t init_pid);
/* After a restore of a RUNTIME_AGENT_QUIESCE runtime: tell the agent to listen again. */
int runtime_agent_resume(const runtime_t *rt, const char *id, err_t *err);
/* True if CRIU works here (`criu check`), tested once. */
bool runtime_criu_available(void);

/* The hidden `sandboxer internal-shim` verb. */
int shim_main(int argc, char **argv);
