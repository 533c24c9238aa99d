/*
 * tests/kvcache/kv_test.h - helpers shared by the KV cache manager's tests: checking the pool
 * against a list of live tables, and building a table whose KV is "computed" and registered.
 */
#ifndef PL_TESTS_KV_TEST_H
#define PL_TESTS_KV_TEST_H

#include <criterion/criterion.h>

#include "kvcache/kv_internal.h"

/* pl_kv_check against the given live tables (at least one; use KV_CHECK_EMPTY for none). */
#define KV_CHECK(pool, ...)                                                                   \
    do {                                                                                      \
        const pl_kv_table *kv_ts_[] = {__VA_ARGS__};                                          \
        int kv_n_ = (int)(sizeof kv_ts_ / sizeof kv_ts_[0]);                                  \
        cr_assert_eq(pl_kv_check((pool), kv_ts_, kv_n_), PL_OK, "%s", pl_last_error());      \
    } while (0)
#define KV_CHECK_EMPTY(pool)                                                                  \
    cr_assert_eq(pl_kv_check((pool), NULL, 0), PL_OK, "%s", pl_last_error())

static inline pl_kv_pool *kv_test_pool(int block_size, int n_blocks, bool prefix_caching) {
    pl_kv_pool *pool = NULL;
    cr_assert_eq(pl_kv_pool_create(block_size, n_blocks, prefix_caching, &pool), PL_OK, "%s",
                 pl_last_error());
    return pool;
}

/* Allocates slots for tokens[t->n_tokens .. n) of an unshared table and registers every full
 * block, as a step that computed them would. */
static inline void kv_test_compute(pl_kv_pool *pool, pl_kv_table *t, const int32_t *tokens,
                                   int n) {
    cr_assert_eq(pl_kv_allocate(pool, t, n - t->n_tokens, NULL, NULL, NULL), PL_OK, "%s",
                 pl_last_error());
    pl_kv_register_full_blocks(pool, t, tokens, n);
}

#endif
