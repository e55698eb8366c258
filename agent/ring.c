/* The output ring of a background process: see ring.h. */
#include "ring.h"

#include <stdlib.h>
#include <string.h>

#define DATA_MIN 4096 /* first allocation; doubled as output comes, up to max_bytes */
#define RUNS_MIN 16

static void *ring_alloc(size_t n)
{
    void *p = malloc(n);
    if (!p)
        abort(); /* as xmalloc: PID 1 out of memory has nothing better to do */
    return p;
}

static struct ring_run *run_at(const struct out_ring *r, size_t i)
{
    return &r->runs[(r->runs_head + i) % r->runs_cap];
}

void ring_init(struct out_ring *r, size_t max_bytes, size_t max_runs)
{
    memset(r, 0, sizeof(*r));
    r->max_bytes = max_bytes ? max_bytes : 1;
    r->max_runs = max_runs ? max_runs : 1;
}

void ring_free(struct out_ring *r)
{
    free(r->data);
    free(r->runs);
    r->data = NULL;
    r->runs = NULL;
    r->cap = r->head = r->runs_cap = r->runs_head = r->nruns = 0;
    r->start = r->end;
}

/* Forget the bytes before cursor to (at most all of them), and the runs they made up. */
static void drop_to(struct out_ring *r, uint64_t to)
{
    if (to <= r->start)
        return;
    uint64_t held = r->end - r->start, d = to - r->start;
    r->head = d >= held || r->cap == 0 ? 0 : (size_t)((r->head + d) % r->cap);
    r->start = to;
    /* Runs wholly before the new start go; the first one left begins there. */
    while (r->nruns > 1 && run_at(r, 1)->start <= r->start) {
        r->runs_head = (r->runs_head + 1) % r->runs_cap;
        r->nruns--;
    }
    if (r->nruns > 0 && run_at(r, 0)->start < r->start)
        run_at(r, 0)->start = r->start;
}

/* Room for one more run: double the array (in order), up to max_runs. */
static void grow_runs(struct out_ring *r)
{
    if (r->nruns < r->runs_cap)
        return;
    size_t cap = r->runs_cap ? r->runs_cap * 2 : RUNS_MIN;
    if (cap > r->max_runs)
        cap = r->max_runs;
    struct ring_run *runs = ring_alloc(cap * sizeof(*runs));
    for (size_t i = 0; i < r->nruns; i++)
        runs[i] = *run_at(r, i);
    free(r->runs);
    r->runs = runs;
    r->runs_cap = cap;
    r->runs_head = 0;
}

/* The next bytes are stream's: a new run unless the last one is of that stream. */
static void push_run(struct out_ring *r, uint8_t stream)
{
    if (r->nruns > 0) {
        struct ring_run *last = run_at(r, r->nruns - 1);
        if (last->stream == stream)
            return;
        if (last->start == r->end) { /* empty: it becomes this stream's */
            last->stream = stream;
            return;
        }
    }
    if (r->nruns == r->max_runs) {
        /* The runs are full: the oldest run's bytes go with it. */
        drop_to(r, r->nruns > 1 ? run_at(r, 1)->start : r->end);
        if (r->nruns == r->max_runs) { /* one run only, now empty */
            run_at(r, 0)->stream = stream;
            return;
        }
    }
    grow_runs(r);
    *run_at(r, r->nruns++) = (struct ring_run){r->end, stream};
}

/* Room for need bytes of data: a bigger buffer with the kept bytes in order. */
static void grow_data(struct out_ring *r, size_t need)
{
    if (need <= r->cap)
        return;
    size_t cap = r->cap ? r->cap : DATA_MIN;
    while (cap < need)
        cap *= 2;
    if (cap > r->max_bytes)
        cap = r->max_bytes;
    uint8_t *data = ring_alloc(cap);
    size_t held = (size_t)(r->end - r->start);
    size_t first = held < r->cap - r->head ? held : r->cap - r->head;
    if (held) {
        memcpy(data, r->data + r->head, first);
        memcpy(data + first, r->data, held - first);
    }
    free(r->data);
    r->data = data;
    r->cap = cap;
    r->head = 0;
}

void ring_append(struct out_ring *r, uint8_t stream, const void *p, size_t n)
{
    const uint8_t *src = p;
    if (n == 0)
        return;
    if (n > r->max_bytes) { /* only its last max_bytes can be kept */
        r->end += n - r->max_bytes;
        drop_to(r, r->end);
        src += n - r->max_bytes;
        n = r->max_bytes;
    }
    size_t held = (size_t)(r->end - r->start);
    if (held + n > r->max_bytes)
        drop_to(r, r->start + (held + n - r->max_bytes));
    push_run(r, stream);
    held = (size_t)(r->end - r->start);
    grow_data(r, held + n);
    size_t at = (r->head + held) % r->cap;
    size_t first = n < r->cap - at ? n : r->cap - at;
    memcpy(r->data + at, src, first);
    memcpy(r->data, src + first, n - first);
    r->end += n;
}

/* The index of the run holding cursor c (start <= c < end). */
static size_t find_run(const struct out_ring *r, uint64_t c)
{
    size_t lo = 0, hi = r->nruns; /* the answer is in [lo, hi) */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (run_at(r, mid)->start <= c)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

size_t ring_read(const struct out_ring *r, uint64_t *cursor, uint8_t *stream, void *out, size_t max)
{
    if (*cursor < r->start)
        *cursor = r->start;
    if (*cursor >= r->end || r->nruns == 0 || max == 0)
        return 0;
    size_t i = find_run(r, *cursor);
    uint64_t run_end = i + 1 < r->nruns ? run_at(r, i + 1)->start : r->end;
    size_t n = run_end - *cursor < max ? (size_t)(run_end - *cursor) : max;
    size_t at = (size_t)((r->head + (*cursor - r->start)) % r->cap);
    size_t first = n < r->cap - at ? n : r->cap - at;
    memcpy(out, r->data + at, first);
    memcpy((uint8_t *)out + first, r->data, n - first);
    *stream = run_at(r, i)->stream;
    *cursor += n;
    return n;
}
