/* Cleanup attributes and ownership helpers, after systemd/bubblewrap/crun. */
#pragma once

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Free *p when the variable leaves scope. */
static inline void cleanup_freep(void *p)
{
    free(*(void **)p);
}

/* Close *fd (if >= 0) when it leaves scope, keeping errno intact. */
static inline void cleanup_closep(int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
    }
}

/* fclose *f when it leaves scope. */
static inline void cleanup_fclosep(FILE **f)
{
    if (*f)
        fclose(*f);
}

/* closedir *d when it leaves scope. */
static inline void cleanup_closedirp(DIR **d)
{
    if (*d)
        closedir(*d);
}

#define _cleanup_free_     __attribute__((cleanup(cleanup_freep)))
#define _cleanup_close_    __attribute__((cleanup(cleanup_closep)))
#define _cleanup_fclose_   __attribute__((cleanup(cleanup_fclosep)))
#define _cleanup_closedir_ __attribute__((cleanup(cleanup_closedirp)))

/* Take the value out of *pp and leave NULL behind: moves ownership. */
static inline void *steal_pointer_impl(void *pp)
{
    void **p = pp;
    void *v = *p;
    *p = NULL;
    return v;
}
#define steal_pointer(pp) ((__typeof__(*(pp)))steal_pointer_impl(pp))

/* Take the fd out of *fdp and leave -1 behind. */
static inline int steal_fd(int *fdp)
{
    int fd = *fdp;
    *fdp = -1;
    return fd;
}

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
