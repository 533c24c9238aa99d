/*
 * kvcache/kv_table.c - per-sequence block tables: allocate (with copy-on-write), free, fork and
 * the slot mapping.
 *
 * Invariants kept here: t->n_blocks == ceil(t->n_tokens / block_size); a table never holds the
 * same block twice; a block shared by several tables (ref_count > 1) is never written: tokens
 * are appended only into a last block this table owns alone, which copy-on-write arranges
 * before any slot of a shared, partially filled last block is handed out. A full shared block
 * needs no copy, because appending starts a new block.
 *
 * Every fallible operation checks everything (free blocks, table capacity) before it changes
 * anything, so a failure leaves pool and table as they were.
 */
#include <limits.h>

#include "kvcache/kv_internal.h"
#include "util/alloc.h"

void pl_kv_table_init(pl_kv_table *t) {
    t->block_ids = NULL;
    t->n_blocks = 0;
    t->cap = 0;
    t->n_tokens = 0;
    t->n_cached = 0;
    t->last_hash = 0;
    t->last_reg = 0;
}

/* Grows t->block_ids to hold at least n blocks (doubling, so appends are amortised O(1)). */
static pl_status table_reserve(pl_kv_table *t, int n) {
    if (n <= t->cap) return PL_OK;
    int64_t cap = t->cap > 0 ? t->cap : 4;
    while (cap < n) cap *= 2;
    if (cap > INT_MAX) cap = INT_MAX;
    int32_t *ids = pl_reallocarray(t->block_ids, (size_t)cap, sizeof(int32_t));
    if (!ids)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "kvcache: block table of %lld blocks",
                       (long long)cap);
    t->block_ids = ids;
    t->cap = (int)cap;
    return PL_OK;
}

/* Whether appending to t must first copy its last block: it is partially filled (so the next
 * token lands in it) and shared with another table. */
static bool needs_cow(const pl_kv_pool *pool, const pl_kv_table *t) {
    return t->n_tokens % pool->block_size != 0 &&
           pool->blocks[t->block_ids[t->n_blocks - 1]].ref_count > 1;
}

int pl_kv_blocks_needed(const pl_kv_pool *pool, const pl_kv_table *t, int n_new) {
    if (n_new <= 0) return 0;
    int64_t total = ((int64_t)t->n_tokens + n_new + pool->block_size - 1) / pool->block_size;
    int64_t need = total - t->n_blocks + (needs_cow(pool, t) ? 1 : 0);
    return need > INT_MAX ? INT_MAX : (int)need;
}

pl_status pl_kv_allocate(pl_kv_pool *pool, pl_kv_table *t, int n_new, pl_kv_copy *out_copies,
                         int *out_n_copies, int *out_blocks_needed) {
    if (out_n_copies) *out_n_copies = 0;
    if (n_new < 0) return pl_fail(PL_ERR_INVALID_ARGUMENT, "kvcache: allocate n_new %d < 0", n_new);
    if (n_new > INT_MAX - t->n_tokens)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "kvcache: allocate n_new %d overflows n_tokens %d",
                       n_new, t->n_tokens);
    int needed = pl_kv_blocks_needed(pool, t, n_new);
    if (out_blocks_needed) *out_blocks_needed = needed;
    if (n_new == 0) return PL_OK;

    bool cow = needs_cow(pool, t);
    if (cow && (!out_copies || !out_n_copies))
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "kvcache: allocate needs a copy-on-write of block %d but out_copies or "
                       "out_n_copies is NULL", (int)t->block_ids[t->n_blocks - 1]);
    if (needed > pool->fq.n_free)
        return pl_fail(PL_ERR_OUT_OF_MEMORY,
                       "kvcache: %d tokens need %d blocks, %d free", n_new, needed,
                       pool->fq.n_free);
    int n_fresh = needed - (cow ? 1 : 0);
    PL_TRY(table_reserve(t, t->n_blocks + n_fresh));

    if (cow) {
        /* The old block keeps its other holders (ref_count >= 1 after this), so it never
         * reaches the free queue here. */
        int32_t src = t->block_ids[t->n_blocks - 1];
        int32_t dst = pl_kv_take_free_block(pool);
        pl_kv_release_block(pool, src);
        t->block_ids[t->n_blocks - 1] = dst;
        out_copies[0] = (pl_kv_copy){.src = src, .dst = dst};
        *out_n_copies = 1;
        pool->cow_copies++;
    }
    for (int i = 0; i < n_fresh; i++) t->block_ids[t->n_blocks++] = pl_kv_take_free_block(pool);
    t->n_tokens += n_new;
    return PL_OK;
}

void pl_kv_free(pl_kv_pool *pool, pl_kv_table *t) {
    /* Reverse order: the deepest blocks of a cached chain reach the free queue's tail first,
     * so they are evicted before the blocks they depend on (a chain is useless without its
     * head, never without its tail). */
    for (int i = t->n_blocks - 1; i >= 0; i--) pl_kv_release_block(pool, t->block_ids[i]);
    pl_free(t->block_ids);
    pl_kv_table_init(t);
}

pl_status pl_kv_fork(pl_kv_pool *pool, const pl_kv_table *parent, pl_kv_table *child) {
    if (child == parent) return pl_fail(PL_ERR_INVALID_ARGUMENT, "kvcache: fork into itself");
    if (child->n_blocks != 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "kvcache: fork child holds %d blocks",
                       child->n_blocks);
    PL_TRY(table_reserve(child, parent->n_blocks));
    for (int i = 0; i < parent->n_blocks; i++) {
        child->block_ids[i] = parent->block_ids[i];
        pool->blocks[parent->block_ids[i]].ref_count++;
    }
    child->n_blocks = parent->n_blocks;
    child->n_tokens = parent->n_tokens;
    child->n_cached = parent->n_cached;
    child->last_hash = parent->last_hash;
    child->last_reg = parent->last_reg;
    return PL_OK;
}

pl_status pl_kv_slot_mapping(const pl_kv_pool *pool, const pl_kv_table *t, int start, int n,
                             int64_t *out_slots) {
    if (start < 0 || n < 0 || n > t->n_tokens - start)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "kvcache: slot mapping of positions [%d, %d+%d) outside [0, %d)", start,
                       start, n, t->n_tokens);
    for (int i = 0; i < n; i++) out_slots[i] = pl_kv_slot(t, pool->block_size, start + i);
    return PL_OK;
}
