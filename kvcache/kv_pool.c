/*
 * kvcache/kv_pool.c - the block pool: creation, statistics, the block hash, and the two
 * moves every other file builds on: taking a free block and releasing a reference.
 *
 * Eviction policy lives here, in where a released block goes. A block that still holds a
 * prefix-cache registration goes to the tail of the free queue, so it stays hittable for as
 * long as possible and is reused least-recently-freed first; a plain block goes to the head and
 * is reused before any cached one. Taking a block from the head evicts its registration.
 */
#include <xxhash.h>

#include "kvcache/kv_internal.h"
#include "util/alloc.h"

uint64_t pl_kv_hash_block(uint64_t parent_hash, const int32_t *tokens, int n_tokens) {
    return XXH3_64bits_withSeed(tokens, (size_t)n_tokens * sizeof(int32_t), parent_hash);
}

pl_status pl_kv_pool_create(int block_size, int n_blocks, bool enable_prefix_caching,
                            pl_kv_pool **out_pool) {
    if (!out_pool) return pl_fail(PL_ERR_INVALID_ARGUMENT, "kvcache: out_pool is NULL");
    if (block_size < 1 || block_size > 256 || (block_size & (block_size - 1)) != 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "kvcache: block_size %d is not a power of two in [1, 256]", block_size);
    /* Slot numbers are int64, but block ids are int32 and the hash table doubles n_blocks. */
    if (n_blocks < 1 || n_blocks > (1 << 29))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "kvcache: n_blocks %d outside [1, 2^29]",
                       n_blocks);

    pl_kv_pool *p = pl_calloc(1, sizeof *p);
    if (!p) return pl_fail(PL_ERR_OUT_OF_MEMORY, "kvcache: pool struct");
    p->block_size = block_size;
    p->n_blocks = n_blocks;
    p->enable_prefix_caching = enable_prefix_caching;
    p->hash_fn = pl_kv_hash_block;
    p->next_reg = 1;
    p->blocks = pl_calloc((size_t)n_blocks, sizeof *p->blocks);
    p->scratch_a = pl_calloc((size_t)n_blocks, sizeof(int32_t));
    p->scratch_b = pl_calloc((size_t)n_blocks, sizeof(int32_t));
    if (!p->blocks || !p->scratch_a || !p->scratch_b) goto oom;
    if (enable_prefix_caching) {
        p->tokens = pl_calloc((size_t)n_blocks * (size_t)block_size, sizeof(int32_t));
        if (!p->tokens) goto oom;
    }
    if (pl_kv_fq_init(&p->fq, n_blocks) != PL_OK) goto oom;
    if (pl_kv_ht_init(&p->ht, n_blocks) != PL_OK) goto oom;
    *out_pool = p;
    return PL_OK;

oom:
    pl_kv_pool_destroy(p);
    return pl_fail(PL_ERR_OUT_OF_MEMORY, "kvcache: pool of %d blocks of %d slots", n_blocks,
                   block_size);
}

void pl_kv_pool_destroy(pl_kv_pool *pool) {
    if (!pool) return;
    pl_kv_ht_deinit(&pool->ht);
    pl_kv_fq_deinit(&pool->fq);
    pl_free(pool->tokens);
    pl_free(pool->scratch_b);
    pl_free(pool->scratch_a);
    pl_free(pool->blocks);
    pl_free(pool);
}

pl_status pl_kv_pool_set_hash_fn(pl_kv_pool *pool, pl_kv_hash_fn fn) {
    if (pool->n_cached != 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "kvcache: hash function changed with %d cached blocks", pool->n_cached);
    pool->hash_fn = fn ? fn : pl_kv_hash_block;
    return PL_OK;
}

int pl_kv_block_size(const pl_kv_pool *pool) { return pool->block_size; }
int pl_kv_num_blocks(const pl_kv_pool *pool) { return pool->n_blocks; }
int pl_kv_num_free_blocks(const pl_kv_pool *pool) { return pool->fq.n_free; }

int pl_kv_blocks_for_tokens(const pl_kv_pool *pool, int n_tokens) {
    if (n_tokens <= 0) return 0;
    return (int)(((int64_t)n_tokens + pool->block_size - 1) / pool->block_size);
}

void pl_kv_get_stats(const pl_kv_pool *pool, pl_kv_stats *out) {
    out->n_blocks_total = pool->n_blocks;
    out->n_blocks_free = pool->fq.n_free;
    out->n_blocks_used = pool->n_blocks - pool->fq.n_free;
    out->n_blocks_cached = pool->n_cached;
    out->usage = (double)out->n_blocks_used / (double)pool->n_blocks;
    out->prefix_queries_tokens = pool->prefix_queries_tokens;
    out->prefix_hits_tokens = pool->prefix_hits_tokens;
    out->evictions = pool->evictions;
    out->cow_copies = pool->cow_copies;
}

// ---- block moves -------------------------------------------------------------------------

void pl_kv_drop_registration(pl_kv_pool *pool, int32_t b) {
    pl_kv_block *blk = &pool->blocks[b];
    pl_kv_ht_remove(&pool->ht, blk->hash, b);
    blk->reg = 0;
    blk->hash = blk->parent_hash = blk->parent_reg = 0;
    pool->n_cached--;
    if (pool->listener.stored) pool->listener.removed(pool->listener.ctx, b);
}

void pl_kv_set_listener(pl_kv_pool *pool, const pl_kv_listener *listener) {
    pool->listener = listener ? *listener : (pl_kv_listener){0};
}

int32_t pl_kv_take_free_block(pl_kv_pool *pool) {
    int32_t b = pl_kv_fq_pop_head(&pool->fq);
    if (pool->blocks[b].reg != 0) {
        pl_kv_drop_registration(pool, b);
        pool->evictions++;
    }
    pool->blocks[b].ref_count = 1;
    return b;
}

void pl_kv_release_block(pl_kv_pool *pool, int32_t b) {
    if (--pool->blocks[b].ref_count > 0) return;
    if (pool->blocks[b].reg != 0)
        pl_kv_fq_push_tail(&pool->fq, b);
    else
        pl_kv_fq_push_head(&pool->fq, b);
}
