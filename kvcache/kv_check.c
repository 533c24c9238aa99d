/*
 * kvcache/kv_check.c - pl_kv_check: every invariant of the pool, verified against the complete
 * set of live tables. O(n_blocks + hash slots + blocks held by the tables), no allocation (it
 * counts in the pool's scratch arrays), so tests call it after every operation, also while
 * sweeping allocation failures.
 *
 * The invariants are listed in kv_internal.h; each failure names the first broken one and the
 * block or table involved.
 */
#include <string.h>

#include "kvcache/kv_internal.h"

#define BROKEN(...) pl_fail(PL_ERR_INVALID_ARGUMENT, "kvcache check: " __VA_ARGS__)

static pl_status check_tables(const pl_kv_pool *pool, const pl_kv_table *const *tables,
                              int n_tables) {
    int32_t *held = pool->scratch_a;      /* (n_blocks) tables holding each block */
    int32_t *last_table = pool->scratch_b; /* (n_blocks) last table seen holding each block */
    memset(held, 0, (size_t)pool->n_blocks * sizeof(int32_t));
    for (int b = 0; b < pool->n_blocks; b++) last_table[b] = -1;
    int bs = pool->block_size;

    for (int ti = 0; ti < n_tables; ti++) {
        const pl_kv_table *t = tables[ti];
        if (!t) return BROKEN("table %d is NULL", ti);
        if (t->n_tokens < 0) return BROKEN("table %d has n_tokens %d", ti, t->n_tokens);
        if (t->n_blocks != pl_kv_blocks_for_tokens(pool, t->n_tokens))
            return BROKEN("table %d has %d blocks for %d tokens (block_size %d)", ti,
                          t->n_blocks, t->n_tokens, bs);
        if (t->n_blocks > t->cap || (t->n_blocks > 0 && !t->block_ids))
            return BROKEN("table %d has %d blocks in capacity %d", ti, t->n_blocks, t->cap);
        int n_full = t->n_tokens / bs;
        if (t->n_cached < 0 || t->n_cached > n_full)
            return BROKEN("table %d has n_cached %d with %d full blocks", ti, t->n_cached,
                          n_full);
        if ((t->n_cached == 0) != (t->last_reg == 0))
            return BROKEN("table %d has n_cached %d but last_reg %llu", ti, t->n_cached,
                          (unsigned long long)t->last_reg);
        for (int i = 0; i < t->n_blocks; i++) {
            int32_t b = t->block_ids[i];
            if (b < 0 || b >= pool->n_blocks)
                return BROKEN("table %d block %d is id %d, outside the pool", ti, i, (int)b);
            if (last_table[b] == ti) return BROKEN("table %d holds block %d twice", ti, (int)b);
            last_table[b] = ti;
            held[b]++;
            /* A cached block's content is final; a partially filled block still grows. */
            if (i >= n_full && pool->blocks[b].reg != 0)
                return BROKEN("table %d holds cached block %d as its partial last block", ti,
                              (int)b);
        }
    }
    for (int b = 0; b < pool->n_blocks; b++) {
        int ref = pool->blocks[b].ref_count;
        if (ref != held[b])
            return BROKEN("block %d has ref_count %d but %d tables hold it", b, ref, held[b]);
        if ((ref == 0) != pl_kv_fq_contains(&pool->fq, b))
            return BROKEN("block %d has ref_count %d but is %sin the free queue", b, ref,
                          ref == 0 ? "not " : "");
    }
    return PL_OK;
}

static pl_status check_free_queue(const pl_kv_pool *pool) {
    const pl_kv_free_queue *q = &pool->fq;
    int n_unreferenced = 0;
    for (int b = 0; b < pool->n_blocks; b++) n_unreferenced += pool->blocks[b].ref_count == 0;
    if (q->n_free != n_unreferenced)
        return BROKEN("free queue counts %d blocks but %d have ref_count 0", q->n_free,
                      n_unreferenced);
    /* n_free steps with consistent prev links and an end at tail visit n_free distinct
     * blocks (a repeat would need one block to have two different prev links). */
    int32_t prev = PL_KV_NIL, b = q->head;
    for (int steps = 0; steps < q->n_free; steps++) {
        if (b < 0 || b >= pool->n_blocks)
            return BROKEN("free queue step %d reaches id %d", steps, (int)b);
        if (q->prev[b] != prev)
            return BROKEN("free queue block %d has prev %d, expected %d", (int)b, (int)q->prev[b],
                          (int)prev);
        if (pool->blocks[b].ref_count != 0)
            return BROKEN("free queue holds block %d with ref_count %d", (int)b,
                          pool->blocks[b].ref_count);
        prev = b;
        b = q->next[b];
    }
    if (b != PL_KV_NIL || q->tail != prev)
        return BROKEN("free queue of %d blocks does not end at its tail %d", q->n_free,
                      (int)q->tail);
    return PL_OK;
}

static pl_status check_prefix_cache(const pl_kv_pool *pool) {
    const pl_kv_hash_table *ht = &pool->ht;
    int32_t *entries = pool->scratch_a; /* (n_blocks) hash entries naming each block */
    memset(entries, 0, (size_t)pool->n_blocks * sizeof(int32_t));
    int n_slots_used = 0;
    for (uint32_t i = 0; i <= ht->mask; i++) {
        int32_t b = ht->blocks[i];
        if (b == PL_KV_NIL) continue;
        n_slots_used++;
        if (b < 0 || b >= pool->n_blocks)
            return BROKEN("hash slot %u names block %d, outside the pool", i, (int)b);
        const pl_kv_block *blk = &pool->blocks[b];
        if (blk->reg == 0) return BROKEN("hash slot %u names uncached block %d", i, (int)b);
        if (ht->keys[i] != blk->hash)
            return BROKEN("hash slot %u key differs from block %d's hash", i, (int)b);
        uint64_t h = pool->hash_fn(blk->parent_hash, pl_kv_block_tokens(pool, b),
                                   pool->block_size);
        if (h != blk->hash)
            return BROKEN("block %d's stored tokens do not hash to its key", (int)b);
        if (blk->parent_reg >= blk->reg || blk->reg >= pool->next_reg)
            return BROKEN("block %d has serial %llu, parent serial %llu", (int)b,
                          (unsigned long long)blk->reg, (unsigned long long)blk->parent_reg);
        for (uint32_t j = pl_kv_ht_home(ht, ht->keys[i]); j != i; j = (j + 1) & ht->mask)
            if (ht->blocks[j] == PL_KV_NIL)
                return BROKEN("hash slot %u (block %d) is unreachable from its home slot", i,
                              (int)b);
        entries[b]++;
    }
    int n_cached = 0;
    for (int b = 0; b < pool->n_blocks; b++) {
        bool cached = pool->blocks[b].reg != 0;
        n_cached += cached;
        if (entries[b] != (cached ? 1 : 0))
            return BROKEN("block %d is %scached but has %d hash entries", b, cached ? "" : "not ",
                          entries[b]);
    }
    if (n_cached != pool->n_cached || n_slots_used != ht->n_entries)
        return BROKEN("%d cached blocks and %d hash entries, counters say %d and %d", n_cached,
                      n_slots_used, pool->n_cached, ht->n_entries);
    if (!pool->enable_prefix_caching && n_cached != 0)
        return BROKEN("%d cached blocks with prefix caching off", n_cached);
    return PL_OK;
}

pl_status pl_kv_check(const pl_kv_pool *pool, const pl_kv_table *const *tables, int n_tables) {
    if (!pool) return pl_fail(PL_ERR_INVALID_ARGUMENT, "kvcache check: pool is NULL");
    if (n_tables < 0 || (n_tables > 0 && !tables))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "kvcache check: %d tables at %p", n_tables,
                       (const void *)tables);
    PL_TRY(check_tables(pool, tables, n_tables));
    PL_TRY(check_free_queue(pool));
    return check_prefix_cache(pool);
}
