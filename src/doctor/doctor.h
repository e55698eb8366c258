/*
 * Host checks (`sandboxer doctor`): what this host gives a sandbox server and what to change,
 * each with its fix. Runs locally as root; no daemon needed. Checks read the kernel's own
 * files (/proc, /sys), run the tools (runc, criu, runsc) with timeouts, and probe what only
 * trying tells (overlay options, idmapped mounts) in a private mount namespace, so nothing of
 * a probe stays mounted on the host.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

/* How much a check matters. Required: the daemon cannot run sandboxes without it (a doctor
 * run with one missing exits 1). Recommended: a feature or a hardening is missing.
 * Optional: only some setups want it (gVisor, its kvm platform). */
enum doctor_need { DOCTOR_REQUIRED = 0, DOCTOR_RECOMMENDED, DOCTOR_OPTIONAL };

/* "required", "recommended" or "optional". */
const char *doctor_need_name(enum doctor_need n);

/* What the checks look at. */
struct doctor_opts {
    const char *state_dir; /* the daemon's --state-dir: quotas and overlay are probed there */
    int timeout_ms;        /* for each tool and probe (runsc --platform=kvm can hang) */
    bool quick;            /* skip the runsc platform probes (the slow ones) */
};

/* One check's outcome. */
struct doctor_result {
    bool ok;
    bool skipped;    /* not looked at (quick, or a check it depends on failed) */
    char value[128]; /* the state in one word or number, for machines: "6.18.1", "hybrid" */
    char found[256]; /* what was found, for people */
    char fix[512];   /* what to change, when not ok */
};

struct doctor_check;
typedef void (*doctor_fn)(const struct doctor_opts *o, const struct doctor_check *c,
                          struct doctor_result *r);

/* A row of the check table (doctor.c). Sysctl rows have `sysctl` set: ok when the value is
 * at least `min`, and --fix writes `set`. */
struct doctor_check {
    const char *id; /* "kernel", "criu", "kernel.kptr_restrict", ... */
    enum doctor_need need;
    const char *what; /* one line: what it is for */
    doctor_fn run;
    const char *sysctl;
    long min, set;
};

/* The checks, in the order they are shown. */
const struct doctor_check *doctor_checks(size_t *n);
/* The check named id, or NULL. */
const struct doctor_check *doctor_find(const char *id);
/* Run one check. */
void doctor_run(const struct doctor_opts *o, const struct doctor_check *c, struct doctor_result *r);

/* Where --fix records the sysctls it sets, so that they hold after a reboot. */
#define DOCTOR_SYSCTL_CONF "/etc/sysctl.d/90-sandboxer.conf"
/* Set a sysctl check's value now (/proc/sys) and in DOCTOR_SYSCTL_CONF (its other lines
 * kept). *from gets the value it had. */
int doctor_fix_sysctl(const struct doctor_check *c, char *from, size_t size, err_t *err);

/* The checks' functions, by the file they live in. */
void doctor_root(const struct doctor_opts *, const struct doctor_check *, struct doctor_result *);
void doctor_kernel(const struct doctor_opts *, const struct doctor_check *, struct doctor_result *);
void doctor_cgroups(const struct doctor_opts *, const struct doctor_check *,
                    struct doctor_result *);
void doctor_cgroup_v2(const struct doctor_opts *, const struct doctor_check *,
                      struct doctor_result *);
void doctor_favordynmods(const struct doctor_opts *, const struct doctor_check *,
                         struct doctor_result *);
void doctor_userns(const struct doctor_opts *, const struct doctor_check *, struct doctor_result *);
void doctor_kvm(const struct doctor_opts *, const struct doctor_check *, struct doctor_result *);
void doctor_quota(const struct doctor_opts *, const struct doctor_check *, struct doctor_result *);
void doctor_sysctl(const struct doctor_opts *, const struct doctor_check *, struct doctor_result *);
void doctor_userns_clone(const struct doctor_opts *, const struct doctor_check *,
                         struct doctor_result *);
/* doctor_mounts.c */
void doctor_overlay(const struct doctor_opts *, const struct doctor_check *,
                    struct doctor_result *);
void doctor_overlay_export(const struct doctor_opts *, const struct doctor_check *,
                           struct doctor_result *);
void doctor_idmapped(const struct doctor_opts *, const struct doctor_check *,
                     struct doctor_result *);
/* doctor_tools.c */
void doctor_runc(const struct doctor_opts *, const struct doctor_check *, struct doctor_result *);
void doctor_criu(const struct doctor_opts *, const struct doctor_check *, struct doctor_result *);
void doctor_criu_build(const struct doctor_opts *, const struct doctor_check *,
                       struct doctor_result *);
void doctor_runsc(const struct doctor_opts *, const struct doctor_check *, struct doctor_result *);
void doctor_runsc_platform(const struct doctor_opts *, const struct doctor_check *,
                           struct doctor_result *);

/* Helpers the check files share (doctor.c). */
/* The running kernel's version as major * 1000 + minor (6.18 -> 6018); 0 if unknown. */
int doctor_kernel_version(void);
/* Read /proc/sys/<name with dots as slashes> into out (first line); false if absent. */
bool doctor_read_sysctl(const char *name, char *out, size_t size);
/* The nearest existing directory at or above path (the state dir may not exist yet), in out. */
void doctor_existing_dir(const char *path, char *out, size_t size);
/* "v2", "hybrid" or "v1", from the filesystems mounted at /sys/fs/cgroup. */
const char *doctor_cgroup_mode(void);
/* printf into a result field. */
void doctor_say(char *field, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define SAY(field, ...) doctor_say((field), sizeof(field), __VA_ARGS__)
