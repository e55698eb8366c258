/* Shared by the runtime layer's own files. */
#pragma once

#include <stddef.h>

/* The first error of CRIU's restore.log in dirfd (the line before a final "Restoring FAILED"
 * when that is the first), into out; out is left alone when there is none. */
void criu_restore_error(int dirfd, char *out, size_t size);
/* The daemon's state dir (as a prefix of runc's root, not NUL-terminated): its length. */
size_t runtime_state_prefix(const char **prefix);
