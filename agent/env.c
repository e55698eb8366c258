/* Environments for the processes the agent starts: NULL-terminated "K=V" vectors. */
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "common/util.h"

static size_t env_count(char *const *env)
{
    size_t n = 0;
    while (env && env[n])
        n++;
    return n;
}

char **agent_env_copy(char *const *base)
{
    size_t n = env_count(base);
    char **env = xcalloc(n + 1, sizeof(char *));
    for (size_t i = 0; i < n; i++)
        env[i] = xstrdup(base[i]);
    return env;
}

/* Index of the entry for the key of kv (up to '='), or the count if absent. */
static size_t env_find(char *const *env, const char *key, size_t klen)
{
    size_t i = 0;
    for (; env[i]; i++)
        if (strncmp(env[i], key, klen) == 0 && env[i][klen] == '=')
            break;
    return i;
}

void agent_env_put(char ***envp, const char *kv)
{
    size_t klen = strcspn(kv, "=");
    size_t i = env_find(*envp, kv, klen);
    if ((*envp)[i]) {
        free((*envp)[i]);
        (*envp)[i] = xstrdup(kv);
        return;
    }
    *envp = xrealloc(*envp, (i + 2) * sizeof(char *));
    (*envp)[i] = xstrdup(kv);
    (*envp)[i + 1] = NULL;
}

const char *agent_env_get(char *const *env, const char *key)
{
    size_t klen = strlen(key);
    size_t i = env_find(env, key, klen);
    return env[i] ? env[i] + klen + 1 : NULL;
}

void agent_env_default_path(char ***envp)
{
    if (!agent_env_get(*envp, "PATH"))
        agent_env_put(envp, "PATH=" AGENT_DEFAULT_PATH);
}

void agent_env_home(char ***envp, const struct agent_user *u)
{
    const char *home = agent_env_get(*envp, "HOME");
    if (home && (u->uid == 0 || strcmp(home, "/root") != 0))
        return;
    char *kv = xasprintf("HOME=%s", u->home);
    agent_env_put(envp, kv);
    free(kv);
}

void agent_env_free(char **env)
{
    for (size_t i = 0; env && env[i]; i++)
        free(env[i]);
    free(env);
}
