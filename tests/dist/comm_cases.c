/*
 * tests/dist/comm_cases.c - see comm_cases.h.
 *
 * All-reduce is checked twice over lengths 0, 1, 7, 4097 and 1 Mi floats: on integers, whose
 * sum has a closed form whatever the order; and on values whose rounding depends on the
 * order (magnitudes 2^0 .. 2^15 apart, alternating signs), which must equal, bit for bit,
 * ((x_0 + x_1) + x_2) + ... computed here in rank order. Every rank then all-gathers its
 * digest: all must be equal. All-gather and broadcast (every root) move patterns that name
 * their source rank and position.
 */
#include "comm_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const size_t lengths[] = {0, 1, 7, 4097, (size_t)1 << 20};
#define N_LENGTHS (sizeof lengths / sizeof lengths[0])

static float int_value(int rank, size_t i) { return (float)(i % 977) + 1000.0f * (float)rank; }

/* A value whose sums round differently in a different order. */
static float odd_value(int rank, size_t i) {
    float mag = (float)(1u << ((rank * 5 + i % 4) % 16));
    float v = mag / (float)(3 + i % 11 + 7 * rank);
    return (rank + i) % 2 ? -v : v;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

#define FAIL(...)                                                                             \
    do {                                                                                      \
        snprintf(err, cap, __VA_ARGS__);                                                      \
        goto out;                                                                             \
    } while (0)

bool comm_cases_run(pl_comm *c, uint64_t *digest, char *err, size_t cap) {
    int R = c->size, me = c->rank;
    size_t maxn = lengths[N_LENGTHS - 1];
    float *buf = malloc((maxn + 1) * sizeof *buf);
    unsigned char *gat = malloc((size_t)R * 4097 + 1), *snd = malloc(4097 + 1);
    bool ok = false;
    uint64_t h = 14695981039346656037ull;
    if (!buf || !gat || !snd) FAIL("out of memory");

    for (size_t li = 0; li < N_LENGTHS; li++) {
        size_t n = lengths[li];
        /* closed form: sum_r (i % 977 + 1000 r) = R (i % 977) + 1000 R (R - 1) / 2 */
        for (size_t i = 0; i < n; i++) buf[i] = int_value(me, i);
        if (pl_comm_all_reduce_sum(c, buf, n) != PL_OK) FAIL("all_reduce(%zu): %s", n, pl_last_error());
        for (size_t i = 0; i < n; i++) {
            float want = (float)R * (float)(i % 977) + 500.0f * (float)R * (float)(R - 1);
            if (buf[i] != want)
                FAIL("rank %d: all_reduce of %zu integers: [%zu] = %.9g, want %.9g", me, n, i,
                     (double)buf[i], (double)want);
        }
        /* rounding: rank order, to the bit */
        for (size_t i = 0; i < n; i++) buf[i] = odd_value(me, i);
        if (pl_comm_all_reduce_sum(c, buf, n) != PL_OK) FAIL("all_reduce(%zu): %s", n, pl_last_error());
        for (size_t i = 0; i < n; i++) {
            float s = odd_value(0, i);
            for (int r = 1; r < R; r++) s += odd_value(r, i);
            if (memcmp(&s, &buf[i], sizeof s) != 0)
                FAIL("rank %d: all_reduce of %zu floats: [%zu] = %a, rank order gives %a", me, n,
                     i, (double)buf[i], (double)s);
        }
        h = fnv(h, buf, n * sizeof *buf);
    }
    /* every rank holds the same bits */
    uint64_t *all = malloc((size_t)R * sizeof *all);
    if (!all) FAIL("out of memory");
    if (pl_comm_all_gather(c, &h, sizeof h, all) != PL_OK) {
        free(all);
        FAIL("all_gather(digest): %s", pl_last_error());
    }
    for (int r = 0; r < R; r++)
        if (all[r] != h) {
            uint64_t o = all[r];
            free(all);
            FAIL("rank %d's digest %016llx differs from rank %d's %016llx", r,
                 (unsigned long long)o, me, (unsigned long long)h);
        }
    free(all);

    static const size_t gl[] = {0, 1, 7, 4097};
    for (size_t li = 0; li < sizeof gl / sizeof gl[0]; li++) {
        size_t n = gl[li];
        for (size_t i = 0; i < n; i++) snd[i] = (unsigned char)(me * 31 + i * 7);
        memset(gat, 0xEE, (size_t)R * n);
        if (pl_comm_all_gather(c, snd, n, gat) != PL_OK) FAIL("all_gather(%zu): %s", n, pl_last_error());
        for (int r = 0; r < R; r++)
            for (size_t i = 0; i < n; i++)
                if (gat[(size_t)r * n + i] != (unsigned char)(r * 31 + i * 7))
                    FAIL("rank %d: all_gather of %zu bytes: rank %d's byte %zu wrong", me, n, r, i);
        for (int root = 0; root < R; root++) {
            for (size_t i = 0; i < n; i++)
                snd[i] = me == root ? (unsigned char)(root * 13 + i) : (unsigned char)0xAA;
            if (pl_comm_broadcast(c, snd, n, root) != PL_OK)
                FAIL("broadcast(%zu, root %d): %s", n, root, pl_last_error());
            for (size_t i = 0; i < n; i++)
                if (snd[i] != (unsigned char)(root * 13 + i))
                    FAIL("rank %d: broadcast of %zu bytes from %d: byte %zu wrong", me, n, root, i);
        }
    }
    if (pl_comm_barrier(c) != PL_OK) FAIL("barrier: %s", pl_last_error());
    /* the counters: what this rank did, in nccl-tests' sizes */
    uint64_t want_ar = 0;
    for (size_t li = 0; li < N_LENGTHS; li++) want_ar += 2 * lengths[li] * sizeof(float);
    if (c->stats.bytes[PL_COMM_ALL_REDUCE] != want_ar || c->stats.calls[PL_COMM_ALL_REDUCE] != 2 * N_LENGTHS)
        FAIL("rank %d: all_reduce counters %llu bytes in %llu calls, want %llu in %zu", me,
             (unsigned long long)c->stats.bytes[PL_COMM_ALL_REDUCE],
             (unsigned long long)c->stats.calls[PL_COMM_ALL_REDUCE], (unsigned long long)want_ar,
             2 * N_LENGTHS);
    *digest = h;
    ok = true;
out:
    free(buf);
    free(gat);
    free(snd);
    return ok;
}
