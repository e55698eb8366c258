/*
 * Reading CRIU's logs: runc only says "criu failed". A failed restore is explained by the
 * first error of restore.log; a failed checkpoint by dump.log, turned into the user's terms
 * ("process 17 (vim) holds a terminal") with CRIU's own lines kept in the daemon's log.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "runtime.h"
#include "runtime_internal.h"

#define LOGGED_LINES_MAX 20

/* The text of a CRIU log line after its "(00.004968) " time stamp. */
static const char *after_stamp(const char *line)
{
    const char *p = line[0] == '(' ? strchr(line, ')') : NULL;
    return p ? p + 1 + strspn(p + 1, " \t") : line;
}

void criu_restore_error(int dirfd, char *out, size_t size)
{
    int fd = openat(dirfd, "restore.log", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return;
    }
    char line[512], prev[512] = "";
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        const char *e = strstr(line, "Error (");
        /* CRIU logs its failure to raise its own fd limit as an error, and carries on. */
        if (e && !strstr(e, "RLIMIT_NOFILE for self")) {
            /* When the first error is the final "Restoring FAILED", the line before says why. */
            const char *say = strstr(e, "Restoring FAILED") && prev[0] ? after_stamp(prev) : e;
            snprintf(out, size, "%s", say);
            break;
        }
        snprintf(prev, sizeof(prev), "%s", line);
    }
    fclose(f);
}

/* What CRIU's message means for the user, for the failures people meet. */
static const struct {
    const char *needle, *meaning;
} causes[] = {
    {"tty", "holds a terminal (a PTY) that cannot be checkpointed: end it, or run it without "
            "a terminal"},
    {"io_uring", "uses io_uring, which cannot be checkpointed"},
    {"landlock", "holds a Landlock ruleset, which cannot be checkpointed"},
    {"traced", "is being traced (ptrace): detach the tracer first"},
    {"ptrace", "is being traced (ptrace): detach the tracer first"},
    {"Can't dump half of stream unix", "is connected to a unix socket outside the sandbox"},
    {"external", "is connected to something outside the sandbox that cannot be checkpointed"},
    {"increase limit", "holds a deleted file too big to keep (over 256 MiB)"},
    {"ghost", "holds a deleted file that cannot be kept"},
    {"perf", "uses perf events, which cannot be checkpointed"},
    {"bpf", "uses BPF objects, which cannot be checkpointed"},
    {"In-flight", "has a connection that was being accepted; try again"},
};

void runtime_scrub_paths(char *s)
{
    const char *state;
    size_t state_len = runtime_state_prefix(&state);
    for (char *p = strchr(s, '/'); p; p = strchr(p + 1, '/')) {
        if (p != s && p[-1] != ' ' && p[-1] != '(' && p[-1] != '\'' && p[-1] != '"')
            continue;
        size_t n = strcspn(p, " ):'\"");
        bool host = (n >= state_len && memcmp(p, state, state_len) == 0) ||
                    memmem(p, n, "sandboxer", 9) || strncmp(p, "/proc/", 6) == 0;
        if (!host || n < 3)
            continue;
        memmove(p + 3, p + n, strlen(p + n) + 1);
        memcpy(p, "...", 3);
    }
}

/* The sandbox's own pid of host pid (the last NSpid), or 0 when unknown (it has ended): a
 * host pid means nothing to the sandbox's owner. */
static long sandbox_pid(long host_pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%ld/status", host_pid);
    FILE *f = fopen(path, "re");
    long out = 0;
    while (f && fgets(line, sizeof(line), f)) {
        if (strncmp(line, "NSpid:", 6) != 0)
            continue;
        char *last = strrchr(line, '\t');
        out = last ? strtol(last + 1, NULL, 10) : 0;
        break;
    }
    if (f)
        fclose(f);
    return out;
}

/* From dump.log: the first error and the task CRIU was dumping then ("pid: N comm: C"). */
static void dump_error(FILE *f, const char *id, char *error, size_t esize, long *pid, char *comm,
                       size_t csize)
{
    char line[512];
    int logged = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        const char *task = strstr(line, "(pid: ");
        if (task && strstr(task, " comm: ") && !error[0]) {
            *pid = strtol(task + 6, NULL, 10);
            const char *c = strstr(task, " comm: ") + 7;
            snprintf(comm, csize, "%.*s", (int)strcspn(c, ")"), c);
        }
        const char *e = strstr(line, "Error (");
        /* CRIU logs its failure to raise its own fd limit as an error, and carries on. */
        if (!e || strstr(e, "RLIMIT_NOFILE for self"))
            continue;
        if (logged++ < LOGGED_LINES_MAX)
            log_warn("criu.dump_error", "container=%s line=\"%s\"", id, after_stamp(line));
        if (!error[0] && !strstr(e, "Dumping FAILED")) {
            const char *msg = strstr(e, "): ");
            snprintf(error, esize, "%s", msg ? msg + 3 : e);
        }
    }
}

int runtime_criu_checkpoint_explain(const char *work_dir, const char *id, err_t *err)
{
    _cleanup_free_ char *path = xasprintf("%s/dump.log", work_dir);
    FILE *f = fopen(path, "re");
    char error[256] = "", comm[64] = "";
    long pid = 0;
    if (f) {
        dump_error(f, id, error, sizeof(error), &pid, comm, sizeof(comm));
        fclose(f);
    }
    log_warn("criu.dump_failed", "container=%s runc=\"%s\" criu=\"%s\" pid=%ld", id, err->msg,
             error, pid);
    if (!error[0]) /* no CRIU log: runc failed before CRIU ran, an internal error */
        return -1;
    runtime_scrub_paths(error);
    const char *meaning = NULL;
    for (size_t i = 0; i < ARRAY_SIZE(causes) && !meaning; i++)
        if (strcasestr(error, causes[i].needle))
            meaning = causes[i].meaning;
    char who[128] = "a process of the sandbox";
    long spid = pid > 0 ? sandbox_pid(pid) : 0;
    if (spid > 0)
        snprintf(who, sizeof(who), "process %ld (%s)", spid, comm);
    else if (comm[0])
        snprintf(who, sizeof(who), "a process of the sandbox (%s)", comm);
    if (meaning)
        return err_set(err, ERR_CONFLICT, 0, "checkpoint_failed",
                       "the sandbox cannot be checkpointed: %s %s (CRIU: %s)", who, meaning, error);
    return err_set(err, ERR_CONFLICT, 0, "checkpoint_failed",
                   "the sandbox cannot be checkpointed: CRIU failed on %s: %s", who, error);
}
