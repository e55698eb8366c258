/*
 * Lexical path normalisation for the files requests, shared by sandboxer-agent (which applies
 * it to every path it is sent) and the daemon's client (which applies it before sending, so a
 * bad path fails early with a clear error). Pure string work: no file system access.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define AGENT_PATH_MAX 4096 /* PATH_MAX: a path and its NUL; longer paths are refused */

/*
 * Normalise path (len bytes, not necessarily NUL-terminated) against "/": a relative path is
 * relative to "/", "//" collapses, "." components go, ".." removes the previous component
 * and never goes above "/", and there is no trailing slash (except "/" itself). Writes the
 * NUL-terminated result to out (out_size bytes) and returns its length; -1 if path holds a
 * NUL byte or the input or the result does not fit in AGENT_PATH_MAX (or out_size) bytes.
 * Symlinks are not looked at: they are followed later by the kernel, inside the sandbox.
 */
int agent_path_normalize(const char *path, size_t len, char *out, size_t out_size);

/* The last component of a normalised path; "/" for the root. */
const char *agent_path_base(const char *norm);

/* True for the root "/" of a normalised path. */
bool agent_path_is_root(const char *norm);
