/*
 * kernels/cpu/ranges.h - a call's work items (GEMV row chunks, own-GEMM groups of weight rows)
 * cut into contiguous ranges, one per task: a task takes its own range's items from the
 * front, in order, then steals from the back of the others'.
 *
 * A thread thus walks one contiguous stretch of weights, where the prefetches (software and
 * hardware) run on from one item into the next, and the stealing still evens out a thread
 * slowed by another process. Lock-free: each range is one atomic word.
 */
#ifndef PL_KERNELS_CPU_RANGES_H
#define PL_KERNELS_CPU_RANGES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define PL_MAX_RANGES 64 /* ranges of one call (more threads just steal) */

/* One range's word on its own cache line: every take by its owner writes it, and two owners
 * writing one line would pass it back and forth between their cores on every item. */
typedef struct pl_range_word {
    _Alignas(64) _Atomic uint64_t v; /* (back << 32) | front: items front .. back-1 untaken */
} pl_range_word;

typedef struct pl_ranges {
    int n;
    pl_range_word q[PL_MAX_RANGES];
} pl_ranges;

/* n_items cut into n_ranges (at most PL_MAX_RANGES, at most n_items, at least 1) ranges. */
static inline void pl_ranges_init(pl_ranges *R, int n_items, int n_ranges) {
    if (n_ranges > PL_MAX_RANGES) n_ranges = PL_MAX_RANGES;
    if (n_ranges > n_items) n_ranges = n_items;
    if (n_ranges < 1) n_ranges = 1;
    R->n = n_ranges;
    for (int r = 0; r < n_ranges; r++) {
        uint64_t front = (uint64_t)n_items * r / n_ranges;
        uint64_t back = (uint64_t)n_items * (r + 1) / n_ranges;
        atomic_init(&R->q[r].v, back << 32 | front);
    }
}

/* Takes the item at the front (from_back false) or the back of range r; -1 if it is empty. */
static inline int pl_ranges_take(pl_ranges *R, int r, bool from_back) {
    uint64_t v = atomic_load_explicit(&R->q[r].v, memory_order_relaxed);
    for (;;) {
        uint32_t front = (uint32_t)v, back = (uint32_t)(v >> 32);
        if (front >= back) return -1;
        uint64_t nv = from_back ? ((uint64_t)(back - 1) << 32) | front
                                : ((uint64_t)back << 32) | (front + 1);
        if (atomic_compare_exchange_weak_explicit(&R->q[r].v, &v, nv, memory_order_relaxed,
                                                  memory_order_relaxed))
            return (int)(from_back ? back - 1 : front);
    }
}

/* Task r's next item: from the front of its own range (*own true), else from the back of
 * another's; -1 when all are taken. */
static inline int pl_ranges_next(pl_ranges *R, int r, bool *own) {
    int g = pl_ranges_take(R, r, false);
    *own = g >= 0;
    for (int i = 1; g < 0 && i < R->n; i++) g = pl_ranges_take(R, (r + i) % R->n, true);
    return g;
}

/* The item after g in range r if its owner is likely to take it next (-1 at the range's end). */
static inline int pl_ranges_peek_next(pl_ranges *R, int r, int g) {
    uint64_t v = atomic_load_explicit(&R->q[r].v, memory_order_relaxed);
    return g + 1 < (int)(uint32_t)(v >> 32) ? g + 1 : -1;
}

#endif
