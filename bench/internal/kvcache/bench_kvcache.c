/*
 * bench/internal/kvcache/bench_kvcache.c - micro-benchmark of the KV cache manager at 10k
 * blocks of 16 slots (prefix caching on, as the engine runs it). Not a test: it checks its
 * results only to make sure it measured the intended path, then prints key=value lines.
 *
 * Measured:
 * - alloc_free: allocate a 256-token sequence (16 blocks) in one call, then free it.
 * - decode: grow one sequence a token at a time to 1024 tokens (a new block every 16th call),
 *   then free it; reported per allocate call.
 * - prefix: 200 prompts of 512 tokens computed, registered and freed (6400 cached free blocks);
 *   then take_prefix of a prompt (31 blocks hit, limit n - 1) plus free of the table, and the
 *   same lookup without taking (count_prefix); a prompt whose first block misses as baseline.
 * Usage: bench_kvcache [seconds per measurement, default 0.5]
 */
#include <stdio.h>
#include <stdlib.h>

#include "kvcache/kvcache.h"
#include "util/timer.h"

#ifndef PL_BUILDTYPE
#define PL_BUILDTYPE "unknown"
#endif

enum { BLOCK_SIZE = 16, N_BLOCKS = 10000, N_PROMPTS = 200, PROMPT_LEN = 512 };

static void die(const char *what) {
    fprintf(stderr, "bench_kvcache: %s: %s\n", what, pl_last_error());
    exit(1);
}

/* Runs body repeatedly (batches of `batch`) for at least `seconds`; returns calls per second. */
#define MEASURE(seconds, batch, out_rate, body)                                               \
    do {                                                                                      \
        uint64_t t0_ = pl_now_ns(), t1_;                                                      \
        long n_ = 0;                                                                          \
        do {                                                                                  \
            for (int b_ = 0; b_ < (batch); b_++) { body; }                                    \
            n_ += (batch);                                                                    \
            t1_ = pl_now_ns();                                                                \
        } while ((double)(t1_ - t0_) * 1e-9 < (seconds));                                     \
        (out_rate) = (double)n_ / ((double)(t1_ - t0_) * 1e-9);                               \
    } while (0)

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 0.5;
    if (!(seconds > 0)) seconds = 0.5;
    pl_kv_pool *pool;
    if (pl_kv_pool_create(BLOCK_SIZE, N_BLOCKS, true, &pool) != PL_OK) die("create");
    printf("buildtype=%s\nblock_size=%d\nn_blocks=%d\n", PL_BUILDTYPE, BLOCK_SIZE, N_BLOCKS);

    /* ---- allocate + free ---- */
    pl_kv_table t;
    pl_kv_table_init(&t);
    double rate;
    MEASURE(seconds, 1000, rate, {
        if (pl_kv_allocate(pool, &t, 256, NULL, NULL, NULL) != PL_OK) die("allocate");
        pl_kv_free(pool, &t);
    });
    printf("alloc_free_cycles_per_s=%.0f\nalloc_free_blocks_per_s=%.0f\n", rate, rate * 16);

    MEASURE(seconds, 1, rate, {
        for (int i = 0; i < 1024; i++)
            if (pl_kv_allocate(pool, &t, 1, NULL, NULL, NULL) != PL_OK) die("allocate 1");
        pl_kv_free(pool, &t);
    });
    printf("decode_allocs_per_s=%.0f\n", rate * 1024);

    /* ---- prefix cache ---- */
    int32_t *prompts = malloc(sizeof(int32_t) * N_PROMPTS * PROMPT_LEN);
    if (!prompts) die("malloc");
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < N_PROMPTS * PROMPT_LEN; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        prompts[i] = (int32_t)(x % 32000);
    }
    for (int p = 0; p < N_PROMPTS; p++) {
        if (pl_kv_allocate(pool, &t, PROMPT_LEN, NULL, NULL, NULL) != PL_OK) die("fill");
        pl_kv_register_full_blocks(pool, &t, prompts + p * PROMPT_LEN, PROMPT_LEN);
        pl_kv_free(pool, &t);
    }
    pl_kv_stats st;
    pl_kv_get_stats(pool, &st);
    if (st.n_blocks_cached != N_PROMPTS * PROMPT_LEN / BLOCK_SIZE) die("fill did not cache");

    int p = 0, got = 0, expect = PROMPT_LEN - BLOCK_SIZE;
    MEASURE(seconds, 100, rate, {
        const int32_t *q = prompts + (p++ % N_PROMPTS) * PROMPT_LEN;
        if (pl_kv_take_prefix(pool, &t, q, PROMPT_LEN, PROMPT_LEN - 1, &got) != PL_OK)
            die("take_prefix");
        if (got != expect) die("take_prefix missed");
        pl_kv_free(pool, &t);
    });
    printf("prefix_take_free_per_s=%.0f\nprefix_take_tokens_per_s=%.0f\n", rate, rate * got);

    MEASURE(seconds, 100, rate, {
        const int32_t *q = prompts + (p++ % N_PROMPTS) * PROMPT_LEN;
        if (pl_kv_count_prefix(pool, q, PROMPT_LEN, PROMPT_LEN - 1, &got, NULL) != PL_OK ||
            got != expect)
            die("count_prefix");
    });
    printf("prefix_lookups_per_s=%.0f\nprefix_lookup_tokens_per_s=%.0f\n", rate, rate * got);

    int32_t miss[PROMPT_LEN];
    for (int i = 0; i < PROMPT_LEN; i++) miss[i] = -1 - i;
    MEASURE(seconds, 1000, rate, {
        if (pl_kv_count_prefix(pool, miss, PROMPT_LEN, PROMPT_LEN - 1, &got, NULL) != PL_OK ||
            got != 0)
            die("miss");
    });
    printf("prefix_miss_lookups_per_s=%.0f\n", rate);

    pl_kv_get_stats(pool, &st);
    printf("evictions=%llu\n", (unsigned long long)st.evictions);
    if (pl_kv_check(pool, NULL, 0) != PL_OK) die("check");
    free(prompts);
    pl_kv_pool_destroy(pool);
    return 0;
}
