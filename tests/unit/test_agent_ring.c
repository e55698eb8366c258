/*
 * The output ring of background processes (agent/ring.c): cursors, streams, wrapping, the
 * bounds on bytes and on stream changes, and a long random run against a model that keeps
 * everything.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/ring.h"
#include "tap.h"

/* Read everything from cursor on into out (with a stream per byte); returns the bytes. */
static size_t read_all(const struct out_ring *r, uint64_t *cursor, char *out, char *streams,
                       size_t max, size_t step)
{
    size_t n = 0, got;
    uint8_t stream;
    while (n < max &&
           (got = ring_read(r, cursor, &stream, out + n, step < max - n ? step : max - n))) {
        memset(streams + n, '0' + stream, got);
        n += got;
    }
    return n;
}

static void test_empty_and_runs(void)
{
    struct out_ring r;
    char out[64], st[64];
    uint64_t c = 0;
    uint8_t stream = 0;
    ring_init(&r, 1024, 16);
    ok(ring_read(&r, &c, &stream, out, sizeof(out)) == 0 && r.start == 0 && r.end == 0,
       "an empty ring reads nothing");
    ring_append(&r, 1, "abc", 3);
    ring_append(&r, 1, "de", 2);
    ring_append(&r, 2, "XY", 2);
    ring_append(&r, 1, "f", 1);
    ok(r.end == 8 && r.start == 0 && r.nruns == 3, "appends of one stream merge into a run");
    c = 0;
    size_t n = ring_read(&r, &c, &stream, out, sizeof(out));
    ok(n == 5 && memcmp(out, "abcde", 5) == 0 && stream == 1 && c == 5,
       "a read stops where its run ends");
    n = ring_read(&r, &c, &stream, out, sizeof(out));
    ok(n == 2 && memcmp(out, "XY", 2) == 0 && stream == 2 && c == 7, "then the stderr run");
    c = 1;
    n = ring_read(&r, &c, &stream, out, 2);
    ok(n == 2 && memcmp(out, "bc", 2) == 0 && c == 3, "from the middle, at most max bytes");
    c = 8;
    ok(ring_read(&r, &c, &stream, out, sizeof(out)) == 0, "at the end: nothing");
    c = 9;
    ok(ring_read(&r, &c, &stream, out, sizeof(out)) == 0 && c == 9, "past the end: nothing");
    c = 0;
    n = read_all(&r, &c, out, st, sizeof(out), 64);
    ok(n == 8 && memcmp(out, "abcdeXYf", 8) == 0 && memcmp(st, "11111221", 8) == 0,
       "all of it, in order, streams kept");
    ring_free(&r);
    ok(r.start == 8 && r.end == 8, "freed: the cursors stay, nothing is held");
}

static void test_wrap_and_drop(void)
{
    struct out_ring r;
    char out[64], st[64];
    uint64_t c;
    ring_init(&r, 16, 16);
    ring_append(&r, 1, "0123456789", 10);
    ring_append(&r, 2, "abcdefghij", 10);
    ok(r.start == 4 && r.end == 20, "past 16 bytes the oldest go: start moves");
    c = 0;
    size_t n = read_all(&r, &c, out, st, sizeof(out), 3);
    ok(n == 16 && memcmp(out, "456789abcdefghij", 16) == 0 &&
           memcmp(st, "1111112222222222", 16) == 0,
       "a cursor before start reads from start; the wrapped bytes come in order");
    ring_append(&r, 2, "0123456789abcdefXYZ", 19);
    ok(r.end == 39 && r.start == 23 && r.nruns == 1, "an append over the bound keeps its tail");
    c = 30;
    n = read_all(&r, &c, out, st, sizeof(out), 64);
    ok(n == 9 && memcmp(out, "abcdefXYZ", 9) == 0 && st[0] == '2', "its last bytes are there");
    ring_free(&r);
}

static void test_run_bound(void)
{
    struct out_ring r;
    char out[64], st[64];
    uint64_t c = 0;
    ring_init(&r, 1024, 3);
    ring_append(&r, 1, "aa", 2);
    ring_append(&r, 2, "bb", 2);
    ring_append(&r, 1, "cc", 2);
    ok(r.start == 0 && r.nruns == 3, "three runs fit");
    ring_append(&r, 2, "dd", 2);
    ok(r.start == 2 && r.nruns == 3, "a fourth drops the oldest run's bytes");
    size_t n = read_all(&r, &c, out, st, sizeof(out), 64);
    ok(n == 6 && memcmp(out, "bbccdd", 6) == 0 && memcmp(st, "221122", 6) == 0,
       "what is left keeps its streams");
    ring_free(&r);
    ring_init(&r, 8, 1);
    ring_append(&r, 1, "abc", 3);
    ring_append(&r, 2, "de", 2);
    c = 0;
    n = read_all(&r, &c, out, st, sizeof(out), 64);
    ok(r.start == 3 && n == 2 && memcmp(out, "de", 2) == 0 && st[0] == '2',
       "with one run, a change of stream drops what came before");
    ring_free(&r);
}

static uint64_t rng = 88172645463325252ull;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Random appends against a model holding everything; check the ring after each. */
static void test_random_against_model(void)
{
    enum { MAX = 4096, RUNS = 8, TOTAL = 400000 };
    struct out_ring r;
    char *model = malloc(TOTAL + 8192), *mstream = malloc(TOTAL + 8192);
    char out[MAX], st[MAX], chunk[3000];
    size_t len = 0, bad = 0, steps = 0;
    ring_init(&r, MAX, RUNS);
    while (len < TOTAL) {
        size_t n = next_rand() % (next_rand() % 4 == 0 ? 3000 : 40) + 1;
        uint8_t stream = (uint8_t)(next_rand() % 3 == 0 ? 2 : 1);
        for (size_t i = 0; i < n; i++)
            chunk[i] = (char)('a' + next_rand() % 26);
        ring_append(&r, stream, chunk, n);
        memcpy(model + len, chunk, n);
        memset(mstream + len, '0' + stream, n);
        len += n;
        steps++;
        uint64_t c = r.start;
        size_t got = read_all(&r, &c, out, st, sizeof(out), 1 + next_rand() % 700);
        if (r.end != len || r.end - r.start > MAX || r.nruns > RUNS || r.cap > MAX ||
            got != r.end - r.start || c != r.end || memcmp(out, model + r.start, got) != 0 ||
            memcmp(st, mstream + r.start, got) != 0)
            bad++;
    }
    ok(bad == 0,
       "%zu random appends: the ring always holds the model's last bytes, streams "
       "and all, within its bounds",
       steps);
    ring_free(&r);
    free(model);
    free(mstream);
}

int main(void)
{
    test_empty_and_runs();
    test_wrap_and_drop();
    test_run_bound();
    test_random_against_model();
    return tap_done();
}
