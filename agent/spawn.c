/*
 * Fork and exec one process in a new session (so its pid is its process group, and one
 * kill(-pid) reaches everything it started that stayed in the group).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "agent.h"

extern char **environ;

const char *agent_spawn_stage_name(int stage)
{
    switch (stage) {
    case SPAWN_STAGE_FDS:
        return "setting up stdio";
    case SPAWN_STAGE_TTY:
        return "acquiring the terminal";
    case SPAWN_STAGE_CWD:
        return "chdir";
    case SPAWN_STAGE_USER:
        return "switching user";
    case SPAWN_STAGE_EXEC:
        return "exec";
    }
    return "starting";
}

int agent_spawn_exit_code(int stage, int errnum)
{
    return stage == SPAWN_STAGE_EXEC && (errnum == ENOENT || errnum == ENOTDIR) ? 127 : 126;
}

/* Undo the agent's signal setup: exec keeps blocked masks and ignored dispositions. */
static void reset_signals(void)
{
    struct sigaction sa = {.sa_handler = SIG_DFL};
    sigset_t none;
    for (int s = 1; s < _NSIG; s++)
        (void)sigaction(s, &sa, NULL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

/* Put the requested fds on 0, 1, 2; copies go above 2 first so none is clobbered. */
static int install_stdio(const struct agent_spawn *sp)
{
    int src[3] = {sp->stdin_fd, sp->stdout_fd, sp->stderr_fd};
    int tmp[3];
    for (int i = 0; i < 3; i++) {
        tmp[i] = src[i] < 0 ? -1 : fcntl(src[i], F_DUPFD_CLOEXEC, 3);
        if (src[i] >= 0 && tmp[i] < 0)
            return -1;
    }
    for (int i = 0; i < 3; i++)
        if (tmp[i] >= 0 && dup2(tmp[i], i) < 0)
            return -1;
    return 0;
}

/* Report a failure to the parent (or on stderr) and end the child. */
__attribute__((noreturn)) static void child_fail(const struct agent_spawn *sp, int stage)
{
    struct agent_spawn_failure f = {.stage = stage, .errnum = errno};
    if (sp->report_fd >= 0) {
        (void)!write(sp->report_fd, &f, sizeof(f));
    } else {
        char msg[512];
        int n = snprintf(msg, sizeof(msg), "sandboxer-agent: %s %s: %s\n",
                         agent_spawn_stage_name(stage),
                         stage == SPAWN_STAGE_CWD ? sp->cwd : sp->argv[0], strerror(f.errnum));
        (void)!write(2, msg, n > 0 && (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
    }
    _exit(agent_spawn_exit_code(stage, f.errnum));
}

__attribute__((noreturn)) static void child_run(const struct agent_spawn *sp)
{
    if (sp->before_session)
        sp->before_session(sp, sp->hook_arg);
    reset_signals();
    if (setsid() < 0 || install_stdio(sp) < 0)
        child_fail(sp, SPAWN_STAGE_FDS);
    if (sp->ctty && ioctl(0, TIOCSCTTY, 0) < 0 && sp->report_fd < 0)
        agent_warn("cannot make stdin the controlling terminal: %s", strerror(errno));
    if (sp->cwd && chdir(sp->cwd) < 0)
        child_fail(sp, SPAWN_STAGE_CWD);
    if (sp->user && agent_user_apply(sp->user) < 0)
        child_fail(sp, SPAWN_STAGE_USER);
    /* execvpe searches the PATH of the calling process: make it the child's. */
    environ = (char **)sp->envp;
    execvpe(sp->argv[0], sp->argv, (char **)sp->envp);
    child_fail(sp, SPAWN_STAGE_EXEC);
}

pid_t agent_spawn(const struct agent_spawn *sp, err_t *err)
{
    pid_t pid = fork();
    if (pid < 0)
        return err_sys(err, "fork");
    if (pid == 0)
        child_run(sp);
    return pid;
}
