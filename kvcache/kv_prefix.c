/*
 * kvcache/kv_prefix.c - automatic prefix caching: lookup, taking a cached prefix into a new
 * table, registering newly computed full blocks, and reset.
 *
 * A full block is registered under h = hash(parent hash, its block_size token ids) with its
 * token ids copied into the pool, a fresh serial `reg`, and its parent's serial `parent_reg`
 * (0 at depth 0). A lookup at depth i accepts a candidate only if its stored tokens equal the
 * queried block and its parent_reg is the serial of the block accepted at depth i-1. By
 * induction the accepted chain's contents equal the queried tokens exactly, whatever the hash
 * does; the hash only makes finding candidates O(1). Comparing tokens alone would not be
 * enough: after a collision between two different prefixes, their children with equal tokens
 * would be indistinguishable though their KV differs.
 *
 * Serials are never reused, so a child whose parent was evicted (and perhaps re-registered
 * with other content) can no longer be reached; it stays in the index until its own block is
 * reused. Registration refuses to link a new block to a parent registration that is gone.
 */
#include <string.h>

#include "kvcache/kv_internal.h"
#include "util/alloc.h"

/* The cached block registered under h as the child of parent_reg whose stored tokens equal
 * tokens (block_size ids), or PL_KV_NIL. */
static int32_t find_match(const pl_kv_pool *pool, uint64_t h, uint64_t parent_reg,
                          const int32_t *tokens) {
    size_t n_bytes = (size_t)pool->block_size * sizeof(int32_t);
    uint32_t cursor = pl_kv_ht_home(&pool->ht, h);
    int32_t b;
    while ((b = pl_kv_ht_next(&pool->ht, h, &cursor)) != PL_KV_NIL) {
        if (pool->blocks[b].parent_reg == parent_reg &&
            memcmp(pl_kv_block_tokens(pool, b), tokens, n_bytes) == 0)
            return b;
    }
    return PL_KV_NIL;
}

/* Walks tokens block by block (at most n_full blocks) and writes the longest verified chain of
 * cached blocks into chain (room for n_full, bounded by n_blocks: serials increase along a
 * chain, so no block appears twice). Returns its length. */
static int lookup_chain(const pl_kv_pool *pool, const int32_t *tokens, int n_full,
                        int32_t *chain) {
    uint64_t parent_hash = 0, parent_reg = 0;
    int bs = pool->block_size;
    int i = 0;
    for (; i < n_full; i++) {
        const int32_t *blk_tokens = tokens + (size_t)i * (size_t)bs;
        uint64_t h = pool->hash_fn(parent_hash, blk_tokens, bs);
        int32_t b = find_match(pool, h, parent_reg, blk_tokens);
        if (b == PL_KV_NIL) break;
        chain[i] = b;
        parent_hash = h;
        parent_reg = pool->blocks[b].reg;
    }
    return i;
}

/* Full blocks a query may take: floor(min(n, max_cached_tokens) / block_size), at most the
 * pool size. */
static pl_status query_blocks(const pl_kv_pool *pool, const int32_t *tokens, int n,
                              int max_cached_tokens, int *out_n_full) {
    if (n < 0) return pl_fail(PL_ERR_INVALID_ARGUMENT, "kvcache: prefix query of %d tokens", n);
    if (n > 0 && !tokens)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "kvcache: prefix query tokens is NULL");
    int limit = max_cached_tokens < n ? max_cached_tokens : n;
    int n_full = limit > 0 ? limit / pool->block_size : 0;
    *out_n_full = n_full < pool->n_blocks ? n_full : pool->n_blocks;
    return PL_OK;
}

pl_status pl_kv_count_prefix(const pl_kv_pool *pool, const int32_t *tokens, int n,
                             int max_cached_tokens, int *out_n_cached_tokens,
                             int *out_n_free_hits) {
    int n_full = 0;
    PL_TRY(query_blocks(pool, tokens, n, max_cached_tokens, &n_full));
    int n_hit = pool->enable_prefix_caching ? lookup_chain(pool, tokens, n_full, pool->scratch_a)
                                            : 0;
    int n_free_hits = 0;
    for (int i = 0; i < n_hit; i++) n_free_hits += pool->blocks[pool->scratch_a[i]].ref_count == 0;
    *out_n_cached_tokens = n_hit * pool->block_size;
    if (out_n_free_hits) *out_n_free_hits = n_free_hits;
    return PL_OK;
}

pl_status pl_kv_take_prefix(pl_kv_pool *pool, pl_kv_table *t, const int32_t *tokens, int n,
                            int max_cached_tokens, int *out_n_cached_tokens) {
    if (t->n_blocks != 0 || t->n_tokens != 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "kvcache: take_prefix into a table holding %d tokens", t->n_tokens);
    int n_full = 0;
    PL_TRY(query_blocks(pool, tokens, n, max_cached_tokens, &n_full));
    *out_n_cached_tokens = 0;
    if (!pool->enable_prefix_caching) return PL_OK;

    int32_t *chain = pool->scratch_a;
    int n_hit = lookup_chain(pool, tokens, n_full, chain);
    if (n_hit > t->cap) {
        int32_t *ids = pl_reallocarray(t->block_ids, (size_t)n_hit, sizeof(int32_t));
        if (!ids)
            return pl_fail(PL_ERR_OUT_OF_MEMORY, "kvcache: block table of %d blocks", n_hit);
        t->block_ids = ids;
        t->cap = n_hit;
    }
    for (int i = 0; i < n_hit; i++) {
        int32_t b = chain[i];
        if (pool->blocks[b].ref_count == 0) pl_kv_fq_remove(&pool->fq, b);
        pool->blocks[b].ref_count++;
        t->block_ids[i] = b;
    }
    t->n_blocks = n_hit;
    t->n_cached = n_hit;
    t->n_tokens = n_hit * pool->block_size;
    t->last_hash = n_hit > 0 ? pool->blocks[chain[n_hit - 1]].hash : 0;
    t->last_reg = n_hit > 0 ? pool->blocks[chain[n_hit - 1]].reg : 0;
    pool->prefix_queries_tokens += (uint64_t)n;
    pool->prefix_hits_tokens += (uint64_t)t->n_tokens;
    *out_n_cached_tokens = t->n_tokens;
    return PL_OK;
}

/* The block holding t->last_reg (the parent of t's next registration): usually t's own block
 * n_cached-1, else (t's block was a duplicate) another block. -1 at depth 0 (no parent is
 * needed), NO_PARENT when that registration is gone. */
#define NO_PARENT (-2)
static int32_t parent_block(const pl_kv_pool *pool, const pl_kv_table *t) {
    if (t->last_reg == 0) return -1;
    int32_t own = t->block_ids[t->n_cached - 1];
    if (pool->blocks[own].reg == t->last_reg) return own;
    uint32_t cursor = pl_kv_ht_home(&pool->ht, t->last_hash);
    int32_t b;
    while ((b = pl_kv_ht_next(&pool->ht, t->last_hash, &cursor)) != PL_KV_NIL)
        if (pool->blocks[b].reg == t->last_reg) return b;
    return NO_PARENT;
}

void pl_kv_register_full_blocks(pl_kv_pool *pool, pl_kv_table *t, const int32_t *tokens,
                                int n_computed) {
    if (!pool->enable_prefix_caching || !tokens) return;
    int bs = pool->block_size;
    int limit = (n_computed < t->n_tokens ? n_computed : t->n_tokens) / bs;
    if (t->n_cached >= limit) return;
    int32_t parent = parent_block(pool, t);
    if (parent == NO_PARENT) return;
    size_t n_bytes = (size_t)bs * sizeof(int32_t);

    for (int i = t->n_cached; i < limit; i++) {
        const int32_t *blk_tokens = tokens + (size_t)i * (size_t)bs;
        uint64_t h = pool->hash_fn(t->last_hash, blk_tokens, bs);
        int32_t b = t->block_ids[i];
        pl_kv_block *blk = &pool->blocks[b];
        uint64_t reg;
        if (blk->reg != 0) {
            /* Already registered: shared through a fork with a table that registered it
             * first. Its registration describes this very KV, so the chain continues from
             * it, unless the caller's tokens disagree with what the block holds. */
            if (blk->hash != h || memcmp(pl_kv_block_tokens(pool, b), blk_tokens, n_bytes) != 0)
                return;
            reg = blk->reg;
            parent = b;
        } else {
            int32_t dup = find_match(pool, h, t->last_reg, blk_tokens);
            if (dup != PL_KV_NIL) {
                reg = pool->blocks[dup].reg; /* the first registration wins */
                parent = dup;
            } else {
                reg = pool->next_reg++;
                blk->reg = reg;
                blk->hash = h;
                blk->parent_hash = t->last_hash;
                blk->parent_reg = t->last_reg;
                memcpy(pool->tokens + (size_t)b * (size_t)bs, blk_tokens, n_bytes);
                pl_kv_ht_insert(&pool->ht, h, b);
                pool->n_cached++;
                if (pool->listener.stored)
                    pool->listener.stored(pool->listener.ctx, b, parent, blk_tokens, bs);
                parent = b;
            }
        }
        t->n_cached = i + 1;
        t->last_hash = h;
        t->last_reg = reg;
    }
}

void pl_kv_reset_prefix_cache(pl_kv_pool *pool) {
    for (int32_t b = 0; b < pool->n_blocks; b++) {
        pl_kv_block *blk = &pool->blocks[b];
        blk->reg = 0;
        blk->hash = blk->parent_hash = blk->parent_reg = 0;
    }
    pl_kv_ht_clear(&pool->ht);
    pool->n_cached = 0;
    if (pool->listener.stored) pool->listener.cleared(pool->listener.ctx);
}
