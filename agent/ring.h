/*
 * The output ring of a background process (agent/procs.c): the last bytes it wrote, each
 * byte tagged with its stream (stdout or stderr), addressed by absolute cursors.
 *
 * A cursor is a byte offset in everything the process ever wrote, both streams together in
 * the order the agent read them. The ring keeps [start, end): end grows by every byte
 * appended, start moves up when the ring drops its oldest bytes to stay within its bounds
 * (max_bytes of data; max_runs changes of stream, each dropping the data before it when
 * the runs are full). Memory grows with the output, up to the bounds. No dependencies but
 * libc: the agent and the unit tests compile it alike.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A stretch of output from one stream, from its start to the next run's (or the end). */
struct ring_run {
    uint64_t start;
    uint8_t stream; /* 1 stdout, 2 stderr */
};

struct out_ring {
    uint8_t *data;         /* cap bytes; the byte at cursor start is data[head] */
    size_t cap, head;      /* capacity now (grows up to max_bytes), index of start */
    size_t max_bytes;      /* the bound on data kept */
    uint64_t start;        /* cursor of the oldest byte kept */
    uint64_t end;          /* cursor after the newest byte: all bytes ever appended */
    struct ring_run *runs; /* a ring of runs_cap, the oldest at runs_head */
    size_t runs_cap, runs_head, nruns, max_runs;
};

/* An empty ring bounded to max_bytes of data and max_runs stream changes (both >= 1). */
void ring_init(struct out_ring *r, size_t max_bytes, size_t max_runs);
/* Release the ring's memory (it is empty afterwards, with its cursors kept). */
void ring_free(struct out_ring *r);
/* Append n bytes of stream (1 or 2), dropping the oldest bytes past the bounds. */
void ring_append(struct out_ring *r, uint8_t stream, const void *p, size_t n);
/*
 * Copy into out at most max bytes from *cursor on, all of one stream (stopping where the
 * run ends), and say which in *stream; *cursor moves past them. A cursor before start is
 * moved to start first (the caller compares to see what was dropped). Returns the bytes
 * copied: 0 at the end (or when *cursor > end, which callers refuse before).
 */
size_t ring_read(const struct out_ring *r, uint64_t *cursor, uint8_t *stream, void *out,
                 size_t max);
