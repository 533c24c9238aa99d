/*
 * tests/kvcache/test_kv_pool.c - the KV cache manager without prefix caching: pool creation,
 * allocate (edge cases, exhaustion), free, slot mapping, fork and copy-on-write, statistics,
 * pl_kv_check catching broken invariants, and the free queue and hash table on their own.
 *
 * Expected block ids follow from the documented policy: a fresh free queue holds blocks in id
 * order, and a freed uncached block returns to the head.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "kv_test.h"
#include "test_support.h"

// ---- pool -------------------------------------------------------------------------------

Test(kv_pool, create_rejects_bad_arguments) {
    pl_kv_pool *pool = (pl_kv_pool *)&pool; /* a sentinel that must stay untouched */
    int bad_sizes[] = {0, -4, 3, 6, 512, 1000};
    for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
        cr_assert_eq(pl_kv_pool_create(bad_sizes[i], 8, true, &pool), PL_ERR_INVALID_ARGUMENT);
        cr_assert(strstr(pl_last_error(), "block_size"), "%s", pl_last_error());
    }
    cr_assert_eq(pl_kv_pool_create(16, 0, true, &pool), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "n_blocks"), "%s", pl_last_error());
    cr_assert_eq(pl_kv_pool_create(16, -1, true, &pool), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_kv_pool_create(16, 8, true, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pool, (pl_kv_pool *)&pool);
    pl_kv_pool_destroy(NULL);
}

Test(kv_pool, create_accepts_the_whole_range) {
    int sizes[] = {1, 2, 16, 256};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        pl_kv_pool *pool = kv_test_pool(sizes[i], 1, i % 2 == 0);
        cr_assert_eq(pl_kv_block_size(pool), sizes[i]);
        cr_assert_eq(pl_kv_num_blocks(pool), 1);
        cr_assert_eq(pl_kv_num_free_blocks(pool), 1);
        pl_kv_stats st;
        pl_kv_get_stats(pool, &st);
        cr_assert_eq(st.n_blocks_total, 1);
        cr_assert_eq(st.n_blocks_free, 1);
        cr_assert_eq(st.n_blocks_used, 0);
        cr_assert_eq(st.n_blocks_cached, 0);
        cr_assert_eq(st.usage, 0.0);
        KV_CHECK_EMPTY(pool);
        pl_kv_pool_destroy(pool);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(kv_pool, blocks_for_tokens_rounds_up) {
    pl_kv_pool *pool = kv_test_pool(16, 4, false);
    cr_assert_eq(pl_kv_blocks_for_tokens(pool, 0), 0);
    cr_assert_eq(pl_kv_blocks_for_tokens(pool, -3), 0);
    cr_assert_eq(pl_kv_blocks_for_tokens(pool, 1), 1);
    cr_assert_eq(pl_kv_blocks_for_tokens(pool, 16), 1);
    cr_assert_eq(pl_kv_blocks_for_tokens(pool, 17), 2);
    cr_assert_eq(pl_kv_blocks_for_tokens(pool, 2147483647), 134217728);
    pl_kv_pool_destroy(pool);
}

// ---- allocate / free ----------------------------------------------------------------------

Test(kv_alloc, slots_follow_the_block_table) {
    pl_kv_pool *pool = kv_test_pool(4, 8, false);
    pl_kv_table t;
    pl_kv_table_init(&t);
    int needed = -1;
    cr_assert_eq(pl_kv_blocks_needed(pool, &t, 6), 2);
    cr_assert_eq(pl_kv_allocate(pool, &t, 6, NULL, NULL, &needed), PL_OK, "%s", pl_last_error());
    cr_assert_eq(needed, 2);
    cr_assert_eq(t.n_tokens, 6);
    cr_assert_eq(t.n_blocks, 2);
    cr_assert_eq(t.block_ids[0], 0);
    cr_assert_eq(t.block_ids[1], 1);
    cr_assert_eq(pl_kv_num_free_blocks(pool), 6);
    KV_CHECK(pool, &t);

    /* Two more tokens fill block 1 exactly: no new block. */
    cr_assert_eq(pl_kv_blocks_needed(pool, &t, 2), 0);
    cr_assert_eq(pl_kv_allocate(pool, &t, 2, NULL, NULL, &needed), PL_OK);
    cr_assert_eq(needed, 0);
    cr_assert_eq(t.n_blocks, 2);
    /* The ninth token starts block 2. */
    cr_assert_eq(pl_kv_blocks_needed(pool, &t, 1), 1);
    cr_assert_eq(pl_kv_allocate(pool, &t, 1, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(t.n_blocks, 3);
    cr_assert_eq(t.block_ids[2], 2);
    KV_CHECK(pool, &t);

    int64_t slots[9];
    cr_assert_eq(pl_kv_slot_mapping(pool, &t, 0, 9, slots), PL_OK);
    for (int p = 0; p < 9; p++)
        cr_assert_eq(slots[p], p, "pos %d slot %lld", p, (long long)slots[p]);
    cr_assert_eq(pl_kv_slot(&t, 4, 8), 8);
    cr_assert_eq(pl_kv_slot_mapping(pool, &t, 5, 4, slots), PL_OK);
    cr_assert_eq(slots[0], 5);
    cr_assert_eq(slots[3], 8);
    cr_assert_eq(pl_kv_slot_mapping(pool, &t, 6, 4, slots), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_kv_slot_mapping(pool, &t, -1, 1, slots), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_kv_slot_mapping(pool, &t, 0, -1, slots), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_kv_slot_mapping(pool, &t, 9, 0, slots), PL_OK);

    pl_kv_free(pool, &t);
    cr_assert_eq(t.n_tokens, 0);
    cr_assert_eq(t.n_blocks, 0);
    cr_assert_null(t.block_ids);
    cr_assert_eq(pl_kv_num_free_blocks(pool), 8);
    KV_CHECK_EMPTY(pool);

    /* Freed plain blocks went back to the head in reverse order: reused first, 0 1 2 again. */
    pl_kv_table u;
    pl_kv_table_init(&u);
    cr_assert_eq(pl_kv_allocate(pool, &u, 12, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(u.block_ids[0], 0);
    cr_assert_eq(u.block_ids[1], 1);
    cr_assert_eq(u.block_ids[2], 2);
    /* A table after a non-shared block: slots are those of the blocks it got. */
    pl_kv_table w;
    pl_kv_table_init(&w);
    cr_assert_eq(pl_kv_allocate(pool, &w, 5, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(w.block_ids[0], 3);
    cr_assert_eq(w.block_ids[1], 4);
    cr_assert_eq(pl_kv_slot(&w, 4, 4), 16);
    KV_CHECK(pool, &u, &w);
    pl_kv_free(pool, &w);
    pl_kv_free(pool, &u);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_alloc, zero_new_tokens_changes_nothing) {
    pl_kv_pool *pool = kv_test_pool(4, 4, false);
    pl_kv_table t;
    pl_kv_table_init(&t);
    int n_copies = 7, needed = 7;
    pl_kv_copy copies[1];
    cr_assert_eq(pl_kv_allocate(pool, &t, 0, copies, &n_copies, &needed), PL_OK);
    cr_assert_eq(n_copies, 0);
    cr_assert_eq(needed, 0);
    cr_assert_eq(t.n_blocks, 0);
    cr_assert_null(t.block_ids);
    cr_assert_eq(pl_kv_blocks_needed(pool, &t, 0), 0);
    cr_assert_eq(pl_kv_allocate(pool, &t, 3, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(pl_kv_allocate(pool, &t, 0, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(t.n_tokens, 3);
    cr_assert_eq(t.n_blocks, 1);
    cr_assert_eq(pl_kv_num_free_blocks(pool), 3);
    cr_assert_eq(pl_kv_allocate(pool, &t, -1, NULL, NULL, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_kv_allocate(pool, &t, 2147483647, NULL, NULL, NULL),
                 PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(t.n_tokens, 3);
    KV_CHECK(pool, &t);
    pl_kv_free(pool, &t);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_alloc, block_size_one_gives_a_block_per_token) {
    pl_kv_pool *pool = kv_test_pool(1, 5, false);
    pl_kv_table t;
    pl_kv_table_init(&t);
    cr_assert_eq(pl_kv_blocks_needed(pool, &t, 3), 3);
    cr_assert_eq(pl_kv_allocate(pool, &t, 3, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(pl_kv_allocate(pool, &t, 2, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(t.n_blocks, 5);
    for (int p = 0; p < 5; p++) cr_assert_eq(pl_kv_slot(&t, 1, p), p);
    int needed = 0;
    cr_assert_eq(pl_kv_allocate(pool, &t, 1, NULL, NULL, &needed), PL_ERR_OUT_OF_MEMORY);
    cr_assert_eq(needed, 1);
    cr_assert_eq(t.n_tokens, 5);
    KV_CHECK(pool, &t);
    pl_kv_free(pool, &t);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_alloc, exhaustion_reports_need_and_changes_nothing) {
    pl_kv_pool *pool = kv_test_pool(4, 4, false);
    pl_kv_table a, b;
    pl_kv_table_init(&a);
    pl_kv_table_init(&b);
    cr_assert_eq(pl_kv_allocate(pool, &a, 9, NULL, NULL, NULL), PL_OK);
    int32_t a_ids[3];
    memcpy(a_ids, a.block_ids, sizeof a_ids);
    pl_kv_stats before, after;
    pl_kv_get_stats(pool, &before);

    int needed = -1;
    cr_assert_eq(pl_kv_allocate(pool, &b, 5, NULL, NULL, &needed), PL_ERR_OUT_OF_MEMORY);
    cr_assert_eq(needed, 2);
    cr_assert(strstr(pl_last_error(), "need 2 blocks, 1 free"), "%s", pl_last_error());
    cr_assert_eq(b.n_tokens, 0);
    cr_assert_eq(b.n_blocks, 0);
    cr_assert_null(b.block_ids);
    /* a's table would need 1 more block for 4 more tokens (fits: 9+4 = 13 <= 16 with 1 free),
     * but 8 more need 2. */
    cr_assert_eq(pl_kv_allocate(pool, &a, 8, NULL, NULL, &needed), PL_ERR_OUT_OF_MEMORY);
    cr_assert_eq(needed, 2);
    cr_assert_eq(a.n_tokens, 9);
    cr_assert_eq(a.n_blocks, 3);
    cr_assert_eq(memcmp(a.block_ids, a_ids, sizeof a_ids), 0);
    pl_kv_get_stats(pool, &after);
    cr_assert_eq(memcmp(&before, &after, sizeof before), 0);
    KV_CHECK(pool, &a, &b);

    cr_assert_eq(pl_kv_allocate(pool, &b, 4, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(pl_kv_num_free_blocks(pool), 0);
    cr_assert_eq(pl_kv_allocate(pool, &a, 3, NULL, NULL, NULL), PL_OK); /* fills block 2 */
    KV_CHECK(pool, &a, &b);
    pl_kv_free(pool, &a);
    pl_kv_free(pool, &b);
    KV_CHECK_EMPTY(pool);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

// ---- fork and copy-on-write ---------------------------------------------------------------

Test(kv_fork, partial_shared_block_is_copied_exactly_once) {
    pl_kv_pool *pool = kv_test_pool(4, 8, false);
    pl_kv_table p, c;
    pl_kv_table_init(&p);
    pl_kv_table_init(&c);
    cr_assert_eq(pl_kv_allocate(pool, &p, 6, NULL, NULL, NULL), PL_OK); /* blocks 0, 1(2/4) */
    cr_assert_eq(pl_kv_fork(pool, &p, &c), PL_OK);
    cr_assert_eq(c.n_tokens, 6);
    cr_assert_eq(c.n_blocks, 2);
    cr_assert_eq(c.block_ids[0], 0);
    cr_assert_eq(c.block_ids[1], 1);
    cr_assert_eq(pl_kv_block_ref_count(pool, 0), 2);
    cr_assert_eq(pl_kv_block_ref_count(pool, 1), 2);
    cr_assert_eq(pl_kv_num_free_blocks(pool), 6);
    KV_CHECK(pool, &p, &c);

    /* The child's next token would land in shared block 1: copy it to a fresh block first. */
    cr_assert_eq(pl_kv_blocks_needed(pool, &c, 1), 1);
    cr_assert_eq(pl_kv_blocks_needed(pool, &c, 2), 1);
    pl_kv_copy copies[1] = {{-1, -1}};
    int n_copies = -1, needed = -1;
    cr_assert_eq(pl_kv_allocate(pool, &c, 1, copies, &n_copies, &needed), PL_OK);
    cr_assert_eq(needed, 1);
    cr_assert_eq(n_copies, 1);
    cr_assert_eq(copies[0].src, 1);
    cr_assert_eq(copies[0].dst, 2);
    cr_assert_eq(c.block_ids[0], 0);
    cr_assert_eq(c.block_ids[1], 2);
    cr_assert_eq(p.block_ids[1], 1);
    cr_assert_eq(pl_kv_block_ref_count(pool, 0), 2);
    cr_assert_eq(pl_kv_block_ref_count(pool, 1), 1);
    cr_assert_eq(pl_kv_block_ref_count(pool, 2), 1);
    KV_CHECK(pool, &p, &c);

    /* Now each owns its last block alone: no more copies, on either side. */
    cr_assert_eq(pl_kv_allocate(pool, &p, 1, copies, &n_copies, NULL), PL_OK);
    cr_assert_eq(n_copies, 0);
    cr_assert_eq(pl_kv_allocate(pool, &c, 1, copies, &n_copies, NULL), PL_OK);
    cr_assert_eq(n_copies, 0);
    cr_assert_eq(pl_kv_allocate(pool, &c, 4, copies, &n_copies, NULL), PL_OK);
    cr_assert_eq(n_copies, 0);
    pl_kv_stats st;
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.cow_copies, 1);
    KV_CHECK(pool, &p, &c);

    pl_kv_free(pool, &c);
    cr_assert_eq(pl_kv_block_ref_count(pool, 0), 1);
    KV_CHECK(pool, &p);
    pl_kv_free(pool, &p);
    KV_CHECK_EMPTY(pool);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_fork, full_shared_block_needs_no_copy) {
    pl_kv_pool *pool = kv_test_pool(4, 8, false);
    pl_kv_table p, c;
    pl_kv_table_init(&p);
    pl_kv_table_init(&c);
    cr_assert_eq(pl_kv_allocate(pool, &p, 8, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(pl_kv_fork(pool, &p, &c), PL_OK);
    cr_assert_eq(pl_kv_blocks_needed(pool, &c, 1), 1);
    pl_kv_copy copies[1];
    int n_copies = -1;
    cr_assert_eq(pl_kv_allocate(pool, &c, 1, copies, &n_copies, NULL), PL_OK);
    cr_assert_eq(n_copies, 0);
    cr_assert_eq(c.n_blocks, 3);
    cr_assert_eq(c.block_ids[1], 1);
    cr_assert_eq(c.block_ids[2], 2);
    cr_assert_eq(pl_kv_block_ref_count(pool, 1), 2);
    /* The parent appends too: its own new block, still no copy. */
    cr_assert_eq(pl_kv_allocate(pool, &p, 1, copies, &n_copies, NULL), PL_OK);
    cr_assert_eq(n_copies, 0);
    cr_assert_eq(p.block_ids[2], 3);
    pl_kv_stats st;
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.cow_copies, 0);
    KV_CHECK(pool, &p, &c);
    pl_kv_free(pool, &p);
    pl_kv_free(pool, &c);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_fork, copy_counts_in_blocks_needed_and_exhaustion) {
    pl_kv_pool *pool = kv_test_pool(4, 3, false);
    pl_kv_table p, c, d;
    pl_kv_table_init(&p);
    pl_kv_table_init(&c);
    pl_kv_table_init(&d);
    cr_assert_eq(pl_kv_allocate(pool, &p, 6, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(pl_kv_fork(pool, &p, &c), PL_OK);
    /* 3 more tokens fit in the last block's 2 free slots plus 1: a copy and a new block. */
    int needed = -1, n_copies = -1;
    pl_kv_copy copies[1];
    cr_assert_eq(pl_kv_blocks_needed(pool, &c, 3), 2);
    cr_assert_eq(pl_kv_allocate(pool, &c, 3, copies, &n_copies, &needed), PL_ERR_OUT_OF_MEMORY);
    cr_assert_eq(needed, 2);
    cr_assert_eq(n_copies, 0);
    cr_assert_eq(c.n_tokens, 6);
    cr_assert_eq(c.block_ids[1], 1);
    cr_assert_eq(pl_kv_block_ref_count(pool, 1), 2);
    cr_assert_eq(pl_kv_num_free_blocks(pool), 1);
    KV_CHECK(pool, &p, &c);
    /* 2 tokens fit the last block: only the copy. */
    cr_assert_eq(pl_kv_allocate(pool, &c, 2, copies, &n_copies, &needed), PL_OK);
    cr_assert_eq(needed, 1);
    cr_assert_eq(n_copies, 1);
    cr_assert_eq(pl_kv_num_free_blocks(pool), 0);
    /* A second child of p shares p's (now unshared) partial block again; its copy finds no
     * free block. */
    cr_assert_eq(pl_kv_fork(pool, &p, &d), PL_OK);
    cr_assert_eq(pl_kv_allocate(pool, &d, 1, copies, &n_copies, &needed), PL_ERR_OUT_OF_MEMORY);
    cr_assert_eq(needed, 1);
    cr_assert_eq(d.block_ids[1], 1);
    pl_kv_stats st;
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.cow_copies, 1);
    KV_CHECK(pool, &p, &c, &d);
    pl_kv_free(pool, &p);
    pl_kv_free(pool, &c);
    pl_kv_free(pool, &d);
    KV_CHECK_EMPTY(pool);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_fork, refuses_missing_copy_buffer_and_bad_children) {
    pl_kv_pool *pool = kv_test_pool(4, 8, false);
    pl_kv_table p, c;
    pl_kv_table_init(&p);
    pl_kv_table_init(&c);
    cr_assert_eq(pl_kv_allocate(pool, &p, 5, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(pl_kv_fork(pool, &p, &p), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_kv_fork(pool, &p, &c), PL_OK);
    cr_assert_eq(pl_kv_fork(pool, &p, &c), PL_ERR_INVALID_ARGUMENT); /* c not empty */
    int n_copies = 0;
    cr_assert_eq(pl_kv_allocate(pool, &c, 1, NULL, &n_copies, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "copy-on-write"), "%s", pl_last_error());
    cr_assert_eq(c.n_tokens, 5);
    cr_assert_eq(pl_kv_num_free_blocks(pool), 6);
    KV_CHECK(pool, &p, &c);
    /* Forking an empty table gives an empty child. */
    pl_kv_table e, f;
    pl_kv_table_init(&e);
    pl_kv_table_init(&f);
    cr_assert_eq(pl_kv_fork(pool, &e, &f), PL_OK);
    cr_assert_eq(f.n_blocks, 0);
    KV_CHECK(pool, &p, &c, &e, &f);
    pl_kv_free(pool, &f);
    pl_kv_free(pool, &p);
    pl_kv_free(pool, &c);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

// ---- statistics ---------------------------------------------------------------------------

Test(kv_stats, block_counts_and_usage) {
    pl_kv_pool *pool = kv_test_pool(2, 10, false);
    pl_kv_table a, b;
    pl_kv_table_init(&a);
    pl_kv_table_init(&b);
    cr_assert_eq(pl_kv_allocate(pool, &a, 5, NULL, NULL, NULL), PL_OK); /* 3 blocks */
    cr_assert_eq(pl_kv_fork(pool, &a, &b), PL_OK);                      /* shares, no new */
    pl_kv_copy copies[1];
    int n_copies;
    cr_assert_eq(pl_kv_allocate(pool, &b, 1, copies, &n_copies, NULL), PL_OK); /* 1 copy */
    pl_kv_stats st;
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.n_blocks_total, 10);
    cr_assert_eq(st.n_blocks_used, 4);
    cr_assert_eq(st.n_blocks_free, 6);
    cr_assert_eq(st.n_blocks_cached, 0);
    cr_assert_float_eq(st.usage, 0.4, 1e-12);
    cr_assert_eq(st.cow_copies, 1);
    cr_assert_eq(st.evictions, 0);
    cr_assert_eq(st.prefix_queries_tokens, 0);
    pl_kv_free(pool, &a);
    pl_kv_free(pool, &b);
    pl_kv_get_stats(pool, &st);
    cr_assert_eq(st.n_blocks_used, 0);
    cr_assert_eq(st.n_blocks_free, 10);
    cr_assert_eq(st.usage, 0.0);
    cr_assert_eq(st.cow_copies, 1); /* a counter, not a level */
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

// ---- pl_kv_check itself -------------------------------------------------------------------

static void expect_broken(const pl_kv_pool *pool, const pl_kv_table *const *ts, int n,
                          const char *what) {
    cr_assert_eq(pl_kv_check(pool, ts, n), PL_ERR_INVALID_ARGUMENT, "check missed: %s", what);
    cr_assert(strstr(pl_last_error(), what), "expected '%s' in '%s'", what, pl_last_error());
}

Test(kv_check, catches_each_broken_invariant) {
    pl_kv_pool *pool = kv_test_pool(4, 8, true);
    pl_kv_table a, b;
    pl_kv_table_init(&a);
    pl_kv_table_init(&b);
    int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    kv_test_compute(pool, &a, toks, 8);
    cr_assert_eq(pl_kv_allocate(pool, &b, 3, NULL, NULL, NULL), PL_OK);
    const pl_kv_table *both[] = {&a, &b}, *only_a[] = {&a}, *a_twice[] = {&a, &a, &b};
    cr_assert_eq(pl_kv_check(pool, both, 2), PL_OK, "%s", pl_last_error());

    expect_broken(pool, only_a, 1, "ref_count 1 but 0 tables");
    expect_broken(pool, a_twice, 3, "ref_count 1 but 2 tables");
    cr_assert_eq(pl_kv_check(pool, NULL, 1), PL_ERR_INVALID_ARGUMENT);

    pool->blocks[5].ref_count = 1; /* a free block claims an owner */
    expect_broken(pool, both, 2, "block 5 has ref_count 1 but 0 tables");
    pool->blocks[5].ref_count = 0;

    int32_t saved = pool->fq.prev[6];
    pool->fq.prev[6] = 7;
    expect_broken(pool, both, 2, "free queue block 6 has prev 7");
    pool->fq.prev[6] = saved;

    a.n_tokens = 9; /* 3 blocks' worth with 2 blocks */
    expect_broken(pool, both, 2, "table 0 has 2 blocks for 9 tokens");
    a.n_tokens = 8;
    b.block_ids[0] = a.block_ids[0]; /* b's partial block would be a's cached one */
    expect_broken(pool, both, 2, "table 1 holds cached block 0 as its partial last block");
    b.block_ids[0] = 2;

    pool->tokens[1 * 4 + 2] ^= 1; /* block 1's stored tokens no longer match its hash */
    expect_broken(pool, both, 2, "block 1's stored tokens do not hash to its key");
    pool->tokens[1 * 4 + 2] ^= 1;

    pool->n_cached++;
    expect_broken(pool, both, 2, "counters say 3");
    pool->n_cached--;

    cr_assert_eq(pl_kv_check(pool, both, 2), PL_OK, "%s", pl_last_error());
    pl_kv_free(pool, &a);
    pl_kv_free(pool, &b);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

// ---- the parts on their own ---------------------------------------------------------------

Test(kv_parts, free_queue_orders_and_removes_in_the_middle) {
    pl_kv_free_queue q = {0};
    cr_assert_eq(pl_kv_fq_init(&q, 5), PL_OK);
    cr_assert_eq(pl_kv_fq_pop_head(&q), 0);
    cr_assert_eq(pl_kv_fq_pop_head(&q), 1);
    pl_kv_fq_remove(&q, 3); /* middle */
    cr_assert(!pl_kv_fq_contains(&q, 3));
    pl_kv_fq_push_tail(&q, 1);
    pl_kv_fq_push_head(&q, 3);
    pl_kv_fq_remove(&q, 4); /* was the tail before 1 was pushed */
    pl_kv_fq_push_tail(&q, 0);
    int32_t want[] = {3, 2, 1, 0};
    cr_assert_eq(q.n_free, 4);
    for (int i = 0; i < 4; i++) cr_assert_eq(pl_kv_fq_pop_head(&q), want[i]);
    cr_assert_eq(pl_kv_fq_pop_head(&q), PL_KV_NIL);
    cr_assert_eq(q.head, PL_KV_NIL);
    cr_assert_eq(q.tail, PL_KV_NIL);
    pl_kv_fq_push_tail(&q, 2); /* into an empty queue */
    cr_assert_eq(q.head, 2);
    cr_assert_eq(q.tail, 2);
    pl_kv_fq_deinit(&q);
    PL_ASSERT_NO_LEAKS();
}

/* Every entry reachable from its home slot, as kv_check.c also verifies for a pool. */
static void assert_ht_reachable(const pl_kv_hash_table *ht) {
    for (uint32_t i = 0; i <= ht->mask; i++) {
        if (ht->blocks[i] == PL_KV_NIL) continue;
        for (uint32_t j = pl_kv_ht_home(ht, ht->keys[i]); j != i; j = (j + 1) & ht->mask)
            cr_assert_neq(ht->blocks[j], PL_KV_NIL, "slot %u unreachable", i);
    }
}

Test(kv_parts, hash_table_matches_a_model_under_heavy_collisions) {
    enum { N = 64, ROUNDS = 20000 };
    pl_kv_hash_table ht = {0};
    cr_assert_eq(pl_kv_ht_init(&ht, N), PL_OK);
    uint64_t key_of[N]; /* model: key of block b when present */
    bool present[N] = {false};
    pl_test_rng rng;
    pl_test_rng_seed(&rng, 77);
    /* 6 distinct keys: 3 whose home is the last slot (their run wraps around to slot 0) and 3
     * homed near the start, so runs of different keys interleave. */
    uint64_t keys[6];
    int n_keys = 0;
    for (uint64_t k = 1; n_keys < 6; k++) {
        uint32_t home = pl_kv_ht_home(&ht, k);
        if ((n_keys < 3 && home == ht.mask) || (n_keys >= 3 && home <= 1)) keys[n_keys++] = k;
    }
    int n = 0;
    for (int r = 0; r < ROUNDS; r++) {
        int32_t b = (int32_t)pl_test_rng_below(&rng, N);
        if (present[b]) {
            pl_kv_ht_remove(&ht, key_of[b], b);
            present[b] = false;
            n--;
        } else {
            key_of[b] = keys[pl_test_rng_below(&rng, 6)];
            pl_kv_ht_insert(&ht, key_of[b], b);
            present[b] = true;
            n++;
        }
        cr_assert_eq(ht.n_entries, n);
        if (r % 64 == 0 || r > ROUNDS - 64) {
            assert_ht_reachable(&ht);
            for (int32_t c = 0; c < N; c++) {
                if (!present[c]) continue;
                uint32_t cur = pl_kv_ht_home(&ht, key_of[c]);
                int32_t got;
                bool found = false;
                while ((got = pl_kv_ht_next(&ht, key_of[c], &cur)) != PL_KV_NIL) found |= got == c;
                cr_assert(found, "round %d: block %d lost", r, c);
            }
        }
    }
    pl_kv_ht_deinit(&ht);
    PL_ASSERT_NO_LEAKS();
}
