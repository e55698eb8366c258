/*
 * User and group resolution from the container's own /etc/passwd and /etc/group.
 * The agent is static: glibc's NSS (getpwnam) would try to dlopen modules, so we parse the
 * two files ourselves, the way runc and Docker do for a container's USER.
 */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "common/cleanup.h"
#include "common/util.h"

#define PASSWD_PATH "/etc/passwd"
#define GROUP_PATH  "/etc/group"
#define MAX_GROUPS  1024

/* Split a colon-separated line into at most n fields (the last one keeps the rest). */
static size_t split_fields(char *line, char **fields, size_t n)
{
    size_t i = 0;
    line[strcspn(line, "\n")] = '\0';
    while (i < n) {
        fields[i++] = line;
        char *c = strchr(line, ':');
        if (!c)
            break;
        *c = '\0';
        line = c + 1;
    }
    return i;
}

/* Parse a decimal id; false if s is not all digits or is out of range. */
static bool parse_id(const char *s, unsigned *out)
{
    long long v;
    if (!*s || strspn(s, "0123456789") != strlen(s))
        return false;
    if (!parse_int(s, 0, 0xfffffffeLL, &v))
        return false;
    *out = (unsigned)v;
    return true;
}

/* Find a passwd entry by name (when name) or by uid; fills uid, gid, home and the name. */
static bool passwd_lookup(const char *name, uid_t uid, struct agent_user *u, char **found_name)
{
    _cleanup_fclose_ FILE *f = fopen(PASSWD_PATH, "re");
    _cleanup_free_ char *line = NULL;
    size_t cap = 0;
    if (!f)
        return false;
    while (getline(&line, &cap, f) > 0) {
        char *fl[7];
        unsigned id, gid;
        if (split_fields(line, fl, 7) < 7 || !parse_id(fl[2], &id) || !parse_id(fl[3], &gid))
            continue;
        if (name ? strcmp(fl[0], name) != 0 : id != uid)
            continue;
        u->uid = id;
        u->gid = gid;
        u->home = xstrdup(fl[5][0] ? fl[5] : "/");
        *found_name = xstrdup(fl[0]);
        return true;
    }
    return false;
}

/* Find a group's gid by name. */
static bool group_lookup(const char *name, gid_t *gid)
{
    _cleanup_fclose_ FILE *f = fopen(GROUP_PATH, "re");
    _cleanup_free_ char *line = NULL;
    size_t cap = 0;
    if (!f)
        return false;
    while (getline(&line, &cap, f) > 0) {
        char *fl[4];
        unsigned id;
        if (split_fields(line, fl, 4) < 3 || !parse_id(fl[2], &id) || strcmp(fl[0], name) != 0)
            continue;
        *gid = id;
        return true;
    }
    return false;
}

static void add_group(struct agent_user *u, gid_t gid)
{
    for (size_t i = 0; i < u->ngroups; i++)
        if (u->groups[i] == gid)
            return;
    if (u->ngroups >= MAX_GROUPS)
        return;
    u->groups = xrealloc(u->groups, (u->ngroups + 1) * sizeof(gid_t));
    u->groups[u->ngroups++] = gid;
}

/* True if the comma-separated member list holds name. */
static bool has_member(char *members, const char *name)
{
    for (char *save = NULL, *m = strtok_r(members, ",", &save); m; m = strtok_r(NULL, ",", &save))
        if (strcmp(m, name) == 0)
            return true;
    return false;
}

/* The primary group first, then every group of /etc/group that lists the user by name. */
static void collect_groups(struct agent_user *u, const char *name)
{
    add_group(u, u->gid);
    if (!name)
        return;
    _cleanup_fclose_ FILE *f = fopen(GROUP_PATH, "re");
    _cleanup_free_ char *line = NULL;
    size_t cap = 0;
    if (!f)
        return;
    while (getline(&line, &cap, f) > 0) {
        char *fl[4];
        unsigned id;
        if (split_fields(line, fl, 4) == 4 && parse_id(fl[2], &id) && has_member(fl[3], name))
            add_group(u, id);
    }
}

/* Resolve the user half of a spec into uid, gid, home; *name is the passwd name if any. */
static int resolve_user_part(const char *spec, struct agent_user *u, char **name, err_t *err)
{
    unsigned id;
    if (parse_id(spec, &id)) {
        if (!passwd_lookup(NULL, id, u, name)) {
            /* A bare uid without a passwd entry is valid: group root, home "/", as Docker. */
            u->uid = id;
            u->gid = 0;
            u->home = xstrdup("/");
        }
        return 0;
    }
    if (!passwd_lookup(spec, 0, u, name))
        return err_set(err, ERR_INVALID, 0, "bad_user", "no user '%.64s' in %s", spec, PASSWD_PATH);
    return 0;
}

int agent_user_resolve(const char *spec, struct agent_user *out, err_t *err)
{
    _cleanup_free_ char *copy = xstrdup(spec);
    _cleanup_free_ char *name = NULL;
    char *group = strchr(copy, ':');
    *out = (struct agent_user){0};
    if (group)
        *group++ = '\0';
    if (!copy[0] || (group && !group[0]))
        return err_set(err, ERR_INVALID, 0, "bad_user", "user '%.64s' is malformed", spec);
    if (resolve_user_part(copy, out, &name, err) < 0)
        return -1;
    if (group) {
        unsigned gid;
        if (parse_id(group, &gid)) {
            out->gid = gid;
        } else if (!group_lookup(group, &out->gid)) {
            agent_user_free(out);
            return err_set(err, ERR_INVALID, 0, "bad_user", "no group '%.64s' in %s", group,
                           GROUP_PATH);
        }
    }
    collect_groups(out, name);
    return 0;
}

void agent_user_free(struct agent_user *u)
{
    free(u->groups);
    free(u->home);
    *u = (struct agent_user){0};
}

int agent_user_apply(const struct agent_user *u)
{
    /* Without root we cannot switch; asking for our own ids is still fine. */
    if (geteuid() != 0)
        return u->uid == geteuid() ? 0 : (errno = EPERM, -1);
    if (setgroups(u->ngroups, u->groups) < 0 || setgid(u->gid) < 0 || setuid(u->uid) < 0)
        return -1;
    return 0;
}
