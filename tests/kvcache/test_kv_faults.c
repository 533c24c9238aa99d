/*
 * tests/kvcache/test_kv_faults.c - allocation failure. Every heap allocation of the manager
 * goes through util/alloc.h, so pl_alloc_fail_after(k) makes the (k+1)-th one fail. For each
 * operation that allocates (create, allocate, fork, take_prefix) the fail point is swept from 0
 * until the operation succeeds: each failure must be PL_ERR_OUT_OF_MEMORY, change nothing, and
 * leave a pool that passes pl_kv_check and keeps working. A whole scenario is swept the same way.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "kv_test.h"
#include "test_support.h"
#include "util/alloc.h"

static void teardown(void) { pl_alloc_fail_after(-1); }
TestSuite(kv_faults, .fini = teardown);

Test(kv_faults, create) {
    int k = 0; /* failed runs: each failed at the next allocation */
    pl_kv_pool *pool = NULL;
    PL_ALLOC_SWEEP(k, n, (pool = (pl_kv_pool *)&k, pl_kv_pool_create(4, 32, true, &pool)),
                   cr_assert_eq(pool, (pl_kv_pool *)&k);); /* sentinel: untouched on failure */
    KV_CHECK_EMPTY(pool);
    pl_kv_pool_destroy(pool);
    cr_assert_geq(k, 5, "only %d allocations were swept", k);
    PL_ASSERT_NO_LEAKS();
}

/* Snapshot of a table, to prove a failed call left it alone. */
typedef struct table_snap {
    pl_kv_table t;
    int32_t ids[64];
} table_snap;

static void snap(table_snap *s, const pl_kv_table *t) {
    s->t = *t;
    if (t->n_blocks > 0) memcpy(s->ids, t->block_ids, (size_t)t->n_blocks * sizeof(int32_t));
}

static void assert_same(const table_snap *s, const pl_kv_table *t) {
    cr_assert_eq(t->n_tokens, s->t.n_tokens);
    cr_assert_eq(t->n_blocks, s->t.n_blocks);
    cr_assert_eq(t->n_cached, s->t.n_cached);
    cr_assert_eq(t->last_reg, s->t.last_reg);
    if (t->n_blocks > 0)
        cr_assert_eq(memcmp(t->block_ids, s->ids, (size_t)t->n_blocks * sizeof(int32_t)), 0);
}

Test(kv_faults, allocate_with_copy_on_write) {
    pl_kv_pool *pool = kv_test_pool(2, 64, true);
    pl_kv_table p, c;
    pl_kv_table_init(&p);
    pl_kv_table_init(&c);
    cr_assert_eq(pl_kv_allocate(pool, &p, 3, NULL, NULL, NULL), PL_OK);
    cr_assert_eq(pl_kv_fork(pool, &p, &c), PL_OK);
    int k = 0;
    for (;; k++) {
        table_snap sp, sc;
        snap(&sp, &p);
        snap(&sc, &c);
        pl_kv_stats before, after;
        pl_kv_get_stats(pool, &before);
        pl_kv_copy copies[1];
        int n_copies = -1;
        pl_alloc_fail_after(k);
        /* 40 more tokens: the child's table grows, and its shared partial block is copied. */
        pl_status s = pl_kv_allocate(pool, &c, 40, copies, &n_copies, NULL);
        pl_alloc_fail_after(-1);
        KV_CHECK(pool, &p, &c);
        if (s == PL_OK) {
            cr_assert_eq(n_copies, 1);
            cr_assert_eq(c.n_tokens, 43);
            break;
        }
        cr_assert_eq(s, PL_ERR_OUT_OF_MEMORY, "fail point %d: %s", k, pl_last_error());
        cr_assert_eq(n_copies, 0);
        assert_same(&sp, &p);
        assert_same(&sc, &c);
        pl_kv_get_stats(pool, &after);
        cr_assert_eq(memcmp(&before, &after, sizeof before), 0);
    }
    cr_assert_geq(k, 1);
    pl_kv_free(pool, &p);
    pl_kv_free(pool, &c);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_faults, fork) {
    pl_kv_pool *pool = kv_test_pool(2, 64, false);
    pl_kv_table p, c;
    pl_kv_table_init(&p);
    pl_kv_table_init(&c);
    cr_assert_eq(pl_kv_allocate(pool, &p, 41, NULL, NULL, NULL), PL_OK);
    int k = 0;
    for (;; k++) {
        table_snap sp;
        snap(&sp, &p);
        pl_alloc_fail_after(k);
        pl_status s = pl_kv_fork(pool, &p, &c);
        pl_alloc_fail_after(-1);
        KV_CHECK(pool, &p, &c);
        if (s == PL_OK) break;
        cr_assert_eq(s, PL_ERR_OUT_OF_MEMORY, "fail point %d: %s", k, pl_last_error());
        assert_same(&sp, &p);
        cr_assert_eq(c.n_blocks, 0);
        cr_assert_eq(pl_kv_block_ref_count(pool, p.block_ids[0]), 1);
    }
    cr_assert_geq(k, 1);
    cr_assert_eq(c.n_blocks, 21);
    pl_kv_free(pool, &p);
    pl_kv_free(pool, &c);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_faults, take_prefix) {
    pl_kv_pool *pool = kv_test_pool(2, 64, true);
    int32_t toks[40];
    for (int i = 0; i < 40; i++) toks[i] = i * 7 % 11;
    pl_kv_table a, b;
    pl_kv_table_init(&a);
    pl_kv_table_init(&b);
    kv_test_compute(pool, &a, toks, 40);
    pl_kv_free(pool, &a); /* 20 cached free blocks */
    int k = 0;
    for (;; k++) {
        pl_kv_stats before, after;
        pl_kv_get_stats(pool, &before);
        int got = -7;
        pl_alloc_fail_after(k);
        pl_status s = pl_kv_take_prefix(pool, &b, toks, 40, 39, &got);
        pl_alloc_fail_after(-1);
        KV_CHECK(pool, &b);
        if (s == PL_OK) break;
        cr_assert_eq(s, PL_ERR_OUT_OF_MEMORY, "fail point %d: %s", k, pl_last_error());
        cr_assert_eq(b.n_blocks, 0);
        cr_assert_eq(b.n_tokens, 0);
        pl_kv_get_stats(pool, &after);
        cr_assert_eq(memcmp(&before, &after, sizeof before), 0); /* query not even counted */
    }
    cr_assert_geq(k, 1);
    cr_assert_eq(b.n_tokens, 38);
    pl_kv_free(pool, &b);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

/* A small life: create, admit two sequences sharing a prefix, fork, diverge, free. Returns at
 * the first failure, which must be PL_ERR_OUT_OF_MEMORY with a consistent pool. true when it
 * ran to the end. */
static bool scenario(void) {
    int32_t toks[24];
    for (int i = 0; i < 24; i++) toks[i] = i % 5;
    pl_kv_pool *pool = NULL;
    pl_status s = pl_kv_pool_create(2, 48, true, &pool);
    if (s != PL_OK) {
        cr_assert_eq(s, PL_ERR_OUT_OF_MEMORY);
        return false;
    }
    pl_kv_table t[3];
    for (int i = 0; i < 3; i++) pl_kv_table_init(&t[i]);
    bool done = false;
    pl_kv_copy copies[1];
    int n_copies, got;
    if ((s = pl_kv_allocate(pool, &t[0], 24, NULL, NULL, NULL)) != PL_OK) goto out;
    pl_kv_register_full_blocks(pool, &t[0], toks, 24);
    if ((s = pl_kv_take_prefix(pool, &t[1], toks, 21, 20, &got)) != PL_OK) goto out;
    cr_assert_eq(got, 20);
    if ((s = pl_kv_allocate(pool, &t[1], 1, NULL, NULL, NULL)) != PL_OK) goto out;
    if ((s = pl_kv_fork(pool, &t[1], &t[2])) != PL_OK) goto out;
    if ((s = pl_kv_allocate(pool, &t[2], 30, copies, &n_copies, NULL)) != PL_OK) goto out;
    cr_assert_eq(n_copies, 1);
    if ((s = pl_kv_allocate(pool, &t[1], 30, copies, &n_copies, NULL)) != PL_OK) goto out;
    cr_assert_eq(n_copies, 0);
    done = true;
out:
    if (!done) cr_assert_eq(s, PL_ERR_OUT_OF_MEMORY, "%s", pl_last_error());
    KV_CHECK(pool, &t[0], &t[1], &t[2]);
    for (int i = 0; i < 3; i++) pl_kv_free(pool, &t[i]);
    KV_CHECK_EMPTY(pool);
    cr_assert_eq(pl_kv_num_free_blocks(pool), 48);
    pl_kv_pool_destroy(pool);
    return done;
}

Test(kv_faults, whole_scenario_sweep) {
    unsigned long n0 = pl_alloc_count();
    cr_assert(scenario());
    long n_allocs = (long)(pl_alloc_count() - n0);
    cr_assert_geq(n_allocs, 12, "scenario made %ld allocations", n_allocs);
    for (long k = 0; k < n_allocs; k++) {
        pl_alloc_fail_after(k);
        bool done = scenario();
        pl_alloc_fail_after(-1);
        cr_assert(!done, "fail point %ld of %ld: the scenario did not notice", k, n_allocs);
    }
    PL_ASSERT_NO_LEAKS();
}
