/*
 * tests/kvcache/test_kv_prefix.c - automatic prefix caching: take_prefix, registration of
 * computed full blocks (first one wins), the least-recently-freed eviction order, forced hash
 * collisions (which must never share KV), reset, count_prefix and the prefix statistics.
 *
 * Expected block ids follow from the documented free-queue policy: a fresh queue holds blocks
 * in id order; a freed cached block goes to the tail, a freed plain block to the head; a table
 * is freed deepest block first.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "kv_test.h"
#include "test_support.h"

/* Number of cached tokens a fresh query of tokens[0..n) would take (no limit below n). */
static int cached_tokens(const pl_kv_pool *pool, const int32_t *tokens, int n) {
    int got = -1;
    cr_assert_eq(pl_kv_count_prefix(pool, tokens, n, n, &got, NULL), PL_OK, "%s",
                 pl_last_error());
    return got;
}

Test(kv_prefix, take_prefix_shares_registered_blocks) {
    pl_kv_pool *pool = kv_test_pool(4, 16, true);
    int32_t toks[12] = {5, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};
    pl_kv_table a, b, c;
    pl_kv_table_init(&a);
    pl_kv_table_init(&b);
    pl_kv_table_init(&c);
    kv_test_compute(pool, &a, toks, 12);
    cr_assert_eq(a.n_cached, 3);
    pl_kv_stats st;
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.n_blocks_cached, 3);
    KV_CHECK(pool, &a);

    int got = -1;
    cr_assert_eq(pl_kv_take_prefix(pool, &b, toks, 12, 12, &got), PL_OK, "%s", pl_last_error());
    cr_assert_eq(got, 12);
    cr_assert_eq(b.n_tokens, 12);
    cr_assert_eq(b.n_blocks, 3);
    cr_assert_eq(b.n_cached, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(b.block_ids[i], a.block_ids[i]);
        cr_assert_eq(pl_kv_block_ref_count(pool, a.block_ids[i]), 2);
        cr_assert_eq(memcmp(pl_kv_block_tokens(pool, b.block_ids[i]), toks + 4 * i, 16), 0);
    }
    cr_assert_eq(b.last_hash, a.last_hash);
    KV_CHECK(pool, &a, &b);

    /* A different second block: only the first is shared. */
    int32_t other[12];
    memcpy(other, toks, sizeof other);
    other[6] = 7;
    cr_assert_eq(pl_kv_take_prefix(pool, &c, other, 12, 12, &got), PL_OK);
    cr_assert_eq(got, 4);
    cr_assert_eq(c.n_blocks, 1);
    cr_assert_eq(c.block_ids[0], a.block_ids[0]);
    /* It continues on its own blocks and registers them under its own chain. */
    kv_test_compute(pool, &c, other, 12);
    cr_assert_eq(c.n_cached, 3);
    cr_assert_neq(c.block_ids[1], a.block_ids[1]);
    cr_assert_eq(cached_tokens(pool, other, 12), 12);
    cr_assert_eq(cached_tokens(pool, toks, 12), 12);
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.n_blocks_cached, 5);
    cr_assert_eq(st.prefix_queries_tokens, 24);
    cr_assert_eq(st.prefix_hits_tokens, 16);
    KV_CHECK(pool, &a, &b, &c);

    cr_assert_eq(pl_kv_take_prefix(pool, &c, toks, 12, 12, &got), PL_ERR_INVALID_ARGUMENT);
    pl_kv_free(pool, &a);
    pl_kv_free(pool, &b);
    pl_kv_free(pool, &c);
    KV_CHECK_EMPTY(pool);
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.n_blocks_free, 16);
    cr_assert_eq(st.n_blocks_cached, 5); /* freed cached blocks keep their hash */
    cr_assert_eq(cached_tokens(pool, toks, 12), 12);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_prefix, never_takes_the_last_token) {
    int sizes[] = {4, 1};
    for (int s = 0; s < 2; s++) {
        int bs = sizes[s];
        pl_kv_pool *pool = kv_test_pool(bs, 16, true);
        int32_t toks[8] = {3, 1, 4, 1, 5, 9, 2, 6};
        pl_kv_table a, b;
        pl_kv_table_init(&a);
        pl_kv_table_init(&b);
        kv_test_compute(pool, &a, toks, 8);
        int got = -1;
        /* All 8 tokens are cached, but the caller needs the last one's logits. */
        cr_assert_eq(pl_kv_take_prefix(pool, &b, toks, 8, 8 - 1, &got), PL_OK);
        cr_assert_eq(got, bs == 4 ? 4 : 7, "block_size %d took %d", bs, got);
        cr_assert_eq(b.n_tokens, got);
        cr_assert_lt(b.n_tokens, 8);
        /* The rest is allocated as usual; the last block is the table's own. */
        cr_assert_eq(pl_kv_allocate(pool, &b, 8 - got, NULL, NULL, NULL), PL_OK);
        cr_assert_eq(pl_kv_block_ref_count(pool, b.block_ids[b.n_blocks - 1]), 1);
        KV_CHECK(pool, &a, &b);
        pl_kv_free(pool, &b);
        /* max 0 and a negative max take nothing; a single token takes nothing with n - 1. */
        cr_assert_eq(pl_kv_take_prefix(pool, &b, toks, 8, 0, &got), PL_OK);
        cr_assert_eq(got, 0);
        cr_assert_eq(pl_kv_take_prefix(pool, &b, toks, 1, 1 - 1, &got), PL_OK);
        cr_assert_eq(got, 0);
        cr_assert_eq(pl_kv_take_prefix(pool, &b, toks, 0, -1, &got), PL_OK);
        cr_assert_eq(got, 0);
        cr_assert_eq(b.n_blocks, 0);
        cr_assert_eq(pl_kv_take_prefix(pool, &b, toks, -1, 0, &got), PL_ERR_INVALID_ARGUMENT);
        cr_assert_eq(pl_kv_take_prefix(pool, &b, NULL, 3, 2, &got), PL_ERR_INVALID_ARGUMENT);
        KV_CHECK(pool, &a);
        pl_kv_free(pool, &a);
        pl_kv_pool_destroy(pool);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(kv_prefix, disabled_caching_takes_and_counts_nothing) {
    pl_kv_pool *pool = kv_test_pool(2, 8, false);
    int32_t toks[6] = {1, 2, 3, 4, 5, 6};
    pl_kv_table a, b;
    pl_kv_table_init(&a);
    pl_kv_table_init(&b);
    kv_test_compute(pool, &a, toks, 6);
    cr_assert_eq(a.n_cached, 0);
    pl_kv_free(pool, &a);
    int got = -1;
    cr_assert_eq(pl_kv_take_prefix(pool, &b, toks, 6, 6, &got), PL_OK);
    cr_assert_eq(got, 0);
    cr_assert_eq(cached_tokens(pool, toks, 6), 0);
    pl_kv_stats st;
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.n_blocks_cached, 0);
    cr_assert_eq(st.prefix_queries_tokens, 0);
    cr_assert_eq(st.prefix_hits_tokens, 0);
    KV_CHECK(pool, &b);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_prefix, registers_only_computed_full_blocks) {
    pl_kv_pool *pool = kv_test_pool(4, 8, true);
    int32_t toks[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    pl_kv_table a;
    pl_kv_table_init(&a);
    cr_assert_eq(pl_kv_allocate(pool, &a, 10, NULL, NULL, NULL), PL_OK);
    pl_kv_register_full_blocks(pool, &a, toks, 3);
    cr_assert_eq(a.n_cached, 0);
    pl_kv_register_full_blocks(pool, &a, toks, 5);
    cr_assert_eq(a.n_cached, 1);
    cr_assert(pl_kv_block_is_cached(pool, a.block_ids[0]));
    cr_assert(!pl_kv_block_is_cached(pool, a.block_ids[1]));
    /* n_computed beyond the allocated tokens counts only what the table holds; block 2 is
     * partial. */
    pl_kv_register_full_blocks(pool, &a, toks, 12);
    cr_assert_eq(a.n_cached, 2);
    cr_assert(!pl_kv_block_is_cached(pool, a.block_ids[2]));
    KV_CHECK(pool, &a);
    cr_assert_eq(pl_kv_allocate(pool, &a, 2, NULL, NULL, NULL), PL_OK);
    pl_kv_register_full_blocks(pool, &a, toks, 11);
    cr_assert_eq(a.n_cached, 2);
    pl_kv_register_full_blocks(pool, &a, toks, 12);
    cr_assert_eq(a.n_cached, 3);
    pl_kv_register_full_blocks(pool, &a, toks, 12); /* idempotent */
    pl_kv_register_full_blocks(pool, &a, NULL, 12); /* no tokens: nothing to do */
    pl_kv_stats st;
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.n_blocks_cached, 3);
    cr_assert_eq(cached_tokens(pool, toks, 12), 12);
    KV_CHECK(pool, &a);
    pl_kv_free(pool, &a);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_prefix, first_registration_wins_and_the_chain_goes_on) {
    pl_kv_pool *pool = kv_test_pool(4, 16, true);
    int32_t toks[12] = {9, 9, 9, 9, 8, 8, 8, 8, 7, 7, 7, 7};
    pl_kv_table a, b;
    pl_kv_table_init(&a);
    pl_kv_table_init(&b);
    /* Both computed the same 8 tokens independently (both admitted before either registered). */
    cr_assert_eq(pl_kv_allocate(pool, &a, 8, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(pl_kv_allocate(pool, &b, 8, NULL, NULL, NULL), PL_OK);
    pl_kv_register_full_blocks(pool, &a, toks, 8);
    pl_kv_register_full_blocks(pool, &b, toks, 8);
    cr_assert_eq(b.n_cached, 2);
    cr_assert(!pl_kv_block_is_cached(pool, b.block_ids[0]));
    cr_assert(!pl_kv_block_is_cached(pool, b.block_ids[1]));
    cr_assert_eq(b.last_hash, a.last_hash);
    cr_assert_eq(b.last_reg, a.last_reg);
    pl_kv_stats st;
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.n_blocks_cached, 2);
    KV_CHECK(pool, &a, &b);
    /* b's third block chains to a's registration: a lookup walks a0, a1, b2. */
    cr_assert_eq(pl_kv_allocate(pool, &b, 4, NULL, NULL, NULL), PL_OK);
    pl_kv_register_full_blocks(pool, &b, toks, 12);
    cr_assert(pl_kv_block_is_cached(pool, b.block_ids[2]));
    pl_kv_table c;
    pl_kv_table_init(&c);
    int got;
    cr_assert_eq(pl_kv_take_prefix(pool, &c, toks, 12, 12, &got), PL_OK);
    cr_assert_eq(got, 12);
    cr_assert_eq(c.block_ids[0], a.block_ids[0]);
    cr_assert_eq(c.block_ids[1], a.block_ids[1]);
    cr_assert_eq(c.block_ids[2], b.block_ids[2]);
    KV_CHECK(pool, &a, &b, &c);
    /* The uncached duplicates are plain blocks when freed: they go to the head. */
    cr_assert_eq(b.block_ids[0], 2);
    cr_assert_eq(b.block_ids[1], 3);
    pl_kv_free(pool, &c);
    pl_kv_free(pool, &a);
    pl_kv_free(pool, &b);
    cr_assert_eq(pool->fq.head, 2, "head %d", (int)pool->fq.head);
    cr_assert_eq(pool->fq.next[2], 3);
    KV_CHECK_EMPTY(pool);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_prefix, fork_children_adopt_shared_registrations) {
    pl_kv_pool *pool = kv_test_pool(2, 16, true);
    int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    pl_kv_table p, c;
    pl_kv_table_init(&p);
    pl_kv_table_init(&c);
    cr_assert_eq(pl_kv_allocate(pool, &p, 5, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(pl_kv_fork(pool, &p, &c), PL_OK);
    pl_kv_register_full_blocks(pool, &p, toks, 5); /* registers the 2 shared full blocks */
    cr_assert_eq(p.n_cached, 2);
    cr_assert_eq(c.n_cached, 0);
    pl_kv_register_full_blocks(pool, &c, toks, 5); /* adopts them, registers nothing new */
    cr_assert_eq(c.n_cached, 2);
    cr_assert_eq(c.last_reg, p.last_reg);
    pl_kv_stats st;
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.n_blocks_cached, 2);
    /* Diverging samples: c's copy of the partial block gets c's own tokens. */
    int32_t ctoks[8] = {1, 2, 3, 4, 5, 0, 0, 0};
    pl_kv_copy copies[1];
    int n_copies;
    cr_assert_eq(pl_kv_allocate(pool, &c, 1, copies, &n_copies, NULL), PL_OK);
    cr_assert_eq(n_copies, 1);
    cr_assert_eq(pl_kv_allocate(pool, &p, 1, copies, &n_copies, NULL), PL_OK);
    cr_assert_eq(n_copies, 0);
    pl_kv_register_full_blocks(pool, &c, ctoks, 6);
    pl_kv_register_full_blocks(pool, &p, toks, 6);
    cr_assert_eq(cached_tokens(pool, toks, 6), 6);
    cr_assert_eq(cached_tokens(pool, ctoks, 6), 6);
    cr_assert_neq(c.block_ids[2], p.block_ids[2]);
    /* Tokens that disagree with a registered block stop registration, safely. */
    pl_kv_table d;
    pl_kv_table_init(&d);
    cr_assert_eq(pl_kv_fork(pool, &p, &d), PL_OK);
    d.n_cached = 0;
    d.last_hash = d.last_reg = 0;
    pl_kv_register_full_blocks(pool, &d, ctoks + 2, 6);
    cr_assert_eq(d.n_cached, 0);
    KV_CHECK(pool, &p, &c, &d);
    pl_kv_free(pool, &d);
    pl_kv_free(pool, &p);
    pl_kv_free(pool, &c);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_prefix, cached_free_blocks_are_evicted_least_recently_freed_first) {
    pl_kv_pool *pool = kv_test_pool(2, 6, true);
    int32_t ta[4] = {1, 1, 2, 2}, tb[4] = {3, 3, 4, 4};
    pl_kv_table a, b, c, d, e;
    pl_kv_table_init(&a);
    pl_kv_table_init(&b);
    pl_kv_table_init(&c);
    pl_kv_table_init(&d);
    pl_kv_table_init(&e);
    kv_test_compute(pool, &a, ta, 4); /* blocks 0, 1 */
    kv_test_compute(pool, &b, tb, 4); /* blocks 2, 3 */
    pl_kv_free(pool, &a);             /* queue: 4 5 1 0 */
    pl_kv_free(pool, &b);             /* queue: 4 5 1 0 3 2 */
    cr_assert_eq(cached_tokens(pool, ta, 4), 4);
    cr_assert_eq(cached_tokens(pool, tb, 4), 4);
    KV_CHECK_EMPTY(pool);

    /* 3 blocks: the two plain ones, then a's deepest block. */
    cr_assert_eq(pl_kv_allocate(pool, &c, 6, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(c.block_ids[0], 4);
    cr_assert_eq(c.block_ids[1], 5);
    cr_assert_eq(c.block_ids[2], 1);
    pl_kv_stats st;
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.evictions, 1);
    cr_assert_eq(st.n_blocks_cached, 3);
    cr_assert_eq(cached_tokens(pool, ta, 4), 2);
    cr_assert_eq(cached_tokens(pool, tb, 4), 4);
    KV_CHECK(pool, &c);
    cr_assert_eq(pl_kv_allocate(pool, &d, 1, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(d.block_ids[0], 0);
    cr_assert_eq(cached_tokens(pool, ta, 4), 0);
    cr_assert_eq(pl_kv_allocate(pool, &e, 1, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(e.block_ids[0], 3); /* b's deepest goes before b's first */
    cr_assert_eq(cached_tokens(pool, tb, 4), 2);
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.evictions, 3);
    cr_assert_eq(st.n_blocks_cached, 1);
    KV_CHECK(pool, &c, &d, &e);
    pl_kv_free(pool, &c);
    pl_kv_free(pool, &d);
    pl_kv_free(pool, &e);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_prefix, a_hit_refreshes_recency) {
    pl_kv_pool *pool = kv_test_pool(2, 6, true);
    int32_t ta[4] = {1, 1, 2, 2}, tb[4] = {3, 3, 4, 4};
    pl_kv_table a, b, f, c;
    pl_kv_table_init(&a);
    pl_kv_table_init(&b);
    pl_kv_table_init(&f);
    pl_kv_table_init(&c);
    kv_test_compute(pool, &a, ta, 4);
    kv_test_compute(pool, &b, tb, 4);
    pl_kv_free(pool, &a);
    pl_kv_free(pool, &b); /* queue: 4 5 1 0 3 2 */
    int got;
    cr_assert_eq(pl_kv_take_prefix(pool, &f, ta, 4, 4, &got), PL_OK); /* 1, 0 leave the queue */
    cr_assert_eq(got, 4);
    cr_assert_eq(pl_kv_num_free_blocks(pool), 4);
    KV_CHECK(pool, &f);
    pl_kv_free(pool, &f); /* queue: 4 5 3 2 1 0 */
    cr_assert_eq(pl_kv_allocate(pool, &c, 6, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(c.block_ids[2], 3);
    cr_assert_eq(cached_tokens(pool, ta, 4), 4);
    cr_assert_eq(cached_tokens(pool, tb, 4), 2);
    KV_CHECK(pool, &c);
    pl_kv_free(pool, &c);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

static uint64_t constant_hash(uint64_t parent_hash, const int32_t *tokens, int n) {
    (void)parent_hash;
    (void)tokens;
    (void)n;
    return 42;
}

Test(kv_prefix, collisions_never_share_kv) {
    pl_kv_pool *pool = kv_test_pool(4, 16, true);
    cr_assert_eq(pl_kv_pool_set_hash_fn(pool, constant_hash), PL_OK);
    /* Every block of every sequence hashes to 42. */
    int32_t ta[8] = {1, 1, 1, 1, 2, 2, 2, 2};
    int32_t tb[8] = {3, 3, 3, 3, 2, 2, 2, 2}; /* same second block as a, other parent */
    int32_t tq[8] = {1, 1, 1, 1, 9, 9, 9, 9};
    pl_kv_table a, b, q;
    pl_kv_table_init(&a);
    pl_kv_table_init(&b);
    pl_kv_table_init(&q);
    kv_test_compute(pool, &a, ta, 8);
    kv_test_compute(pool, &b, tb, 4); /* b: only its first block, for now */
    cr_assert_eq(a.n_cached, 2);
    cr_assert_eq(b.n_cached, 1);
    KV_CHECK(pool, &a, &b);

    /* b's first block hits (tokens equal); a's second block has equal tokens and an equal
     * hash, but its KV was computed after {1,1,1,1}: it must not be taken. */
    cr_assert_eq(cached_tokens(pool, tb, 8), 4);
    int got;
    cr_assert_eq(pl_kv_take_prefix(pool, &q, tb, 8, 8, &got), PL_OK);
    cr_assert_eq(got, 4);
    cr_assert_eq(q.block_ids[0], b.block_ids[0]);
    pl_kv_free(pool, &q);
    cr_assert_eq(cached_tokens(pool, tq, 8), 4);
    int32_t none[8] = {5, 5, 5, 5, 2, 2, 2, 2};
    cr_assert_eq(cached_tokens(pool, none, 8), 0);

    /* b computes its second block: a separate registration under the same hash. */
    kv_test_compute(pool, &b, tb, 8);
    cr_assert_eq(b.n_cached, 2);
    cr_assert(pl_kv_block_is_cached(pool, b.block_ids[1]));
    cr_assert_eq(pl_kv_take_prefix(pool, &q, tb, 8, 8, &got), PL_OK);
    cr_assert_eq(got, 8);
    cr_assert_eq(q.block_ids[1], b.block_ids[1]);
    pl_kv_free(pool, &q);
    cr_assert_eq(pl_kv_take_prefix(pool, &q, ta, 8, 8, &got), PL_OK);
    cr_assert_eq(got, 8);
    cr_assert_eq(q.block_ids[0], a.block_ids[0]);
    cr_assert_eq(q.block_ids[1], a.block_ids[1]);
    pl_kv_stats st;
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.n_blocks_cached, 4);
    KV_CHECK(pool, &a, &b, &q);
    cr_assert_eq(pl_kv_pool_set_hash_fn(pool, NULL), PL_ERR_INVALID_ARGUMENT); /* in use */
    pl_kv_free(pool, &q);
    pl_kv_free(pool, &a);
    pl_kv_free(pool, &b);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_prefix, evicted_parent_stops_registration) {
    pl_kv_pool *pool = kv_test_pool(4, 4, true);
    int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    pl_kv_table a, b, big;
    pl_kv_table_init(&a);
    pl_kv_table_init(&b);
    pl_kv_table_init(&big);
    cr_assert_eq(pl_kv_allocate(pool, &a, 4, NULL, NULL, NULL), PL_OK); /* block 0 */
    cr_assert_eq(pl_kv_allocate(pool, &b, 4, NULL, NULL, NULL), PL_OK); /* block 1 */
    pl_kv_register_full_blocks(pool, &a, toks, 4);
    pl_kv_register_full_blocks(pool, &b, toks, 4); /* duplicate: chains to a's block */
    cr_assert_eq(b.n_cached, 1);
    pl_kv_free(pool, &a);                                                 /* queue: 2 3 0 */
    cr_assert_eq(pl_kv_allocate(pool, &big, 12, NULL, NULL, NULL), PL_OK); /* evicts 0 */
    cr_assert_eq(big.block_ids[2], 0);
    pl_kv_free(pool, &big);
    /* b's parent registration is gone: its next block must not be registered under it. */
    cr_assert_eq(pl_kv_allocate(pool, &b, 4, NULL, NULL, NULL), PL_OK);
    pl_kv_register_full_blocks(pool, &b, toks, 8);
    cr_assert_eq(b.n_cached, 1);
    pl_kv_stats st;
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.n_blocks_cached, 0);
    cr_assert_eq(cached_tokens(pool, toks, 8), 0);
    KV_CHECK(pool, &b);
    pl_kv_free(pool, &b);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_prefix, reset_drops_every_hash) {
    pl_kv_pool *pool = kv_test_pool(2, 8, true);
    int32_t toks[6] = {4, 4, 5, 5, 6, 6};
    pl_kv_table a, b;
    pl_kv_table_init(&a);
    pl_kv_table_init(&b);
    kv_test_compute(pool, &a, toks, 4);
    kv_test_compute(pool, &b, toks + 2, 4);
    pl_kv_free(pool, &b); /* cached and free */
    pl_kv_stats st;
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.n_blocks_cached, 4);
    pl_kv_reset_prefix_cache(pool);
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.n_blocks_cached, 0);
    cr_assert_eq(st.n_blocks_free, 6);
    cr_assert_eq(st.evictions, 0);
    cr_assert_eq(cached_tokens(pool, toks, 4), 0);
    cr_assert_eq(cached_tokens(pool, toks + 2, 4), 0);
    KV_CHECK(pool, &a);
    /* a's chain parent is gone; it registers nothing more. A new table caches again. */
    kv_test_compute(pool, &a, toks, 6);
    cr_assert_eq(a.n_cached, 2);
    kv_test_compute(pool, &b, toks, 6);
    cr_assert_eq(b.n_cached, 3);
    cr_assert_eq(cached_tokens(pool, toks, 6), 6);
    KV_CHECK(pool, &a, &b);
    pl_kv_free(pool, &a);
    pl_kv_free(pool, &b);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_prefix, count_prefix_predicts_take_prefix) {
    pl_kv_pool *pool = kv_test_pool(2, 8, true);
    int32_t toks[7] = {1, 2, 3, 4, 5, 6, 7};
    pl_kv_table a, b, c;
    pl_kv_table_init(&a);
    pl_kv_table_init(&b);
    pl_kv_table_init(&c);
    kv_test_compute(pool, &a, toks, 6);
    cr_assert_eq(pl_kv_take_prefix(pool, &b, toks, 4, 4, &(int){0}), PL_OK); /* holds 2 */
    pl_kv_free(pool, &a); /* block 2 cached and free; 0, 1 held by b */
    int n_tok = -1, n_free_hits = -1;
    cr_assert_eq(pl_kv_count_prefix(pool, toks, 7, 6, &n_tok, &n_free_hits), PL_OK);
    cr_assert_eq(n_tok, 6);
    cr_assert_eq(n_free_hits, 1);
    cr_assert_eq(pl_kv_count_prefix(pool, toks, 7, 3, &n_tok, NULL), PL_OK);
    cr_assert_eq(n_tok, 2);
    cr_assert_eq(pl_kv_count_prefix(pool, NULL, 1, 1, &n_tok, NULL), PL_ERR_INVALID_ARGUMENT);
    pl_kv_stats before, after;
    pl_kv_get_stats(pool, &before);
    cr_assert_eq(before.prefix_queries_tokens, 4); /* count_prefix is not a query */
    int free_before = pl_kv_num_free_blocks(pool);
    int got;
    cr_assert_eq(pl_kv_take_prefix(pool, &c, toks, 7, 6, &got), PL_OK);
    cr_assert_eq(got, 6);
    cr_assert_eq(free_before - pl_kv_num_free_blocks(pool), 1);
    pl_kv_get_stats(pool, &after);
    cr_assert_eq(after.prefix_queries_tokens, 4 + 7);
    cr_assert_eq(after.prefix_hits_tokens, 4 + 6);
    KV_CHECK(pool, &b, &c);
    pl_kv_free(pool, &b);
    pl_kv_free(pool, &c);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}
