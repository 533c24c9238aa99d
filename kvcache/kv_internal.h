/*
 * kvcache/kv_internal.h - the inside of the KV cache manager, shared by its .c files and by
 * the tests (which may reach internals, as llama2.c's test.c does). Nothing outside kvcache/
 * and tests/ includes this.
 *
 * Parts, one file each:
 * - kv_free_queue.c: the doubly linked free queue over block ids (array links, O(1) everything).
 * - kv_hash_table.c: prefix-cache index, hash -> block id, open addressing with linear probing
 *   and backward-shift deletion (no tombstones, so O(1) expected forever). Several entries may
 *   share one hash (collisions); lookups walk them all and the caller verifies each.
 * - kv_pool.c: pool create/destroy, stats, the hash function, block take/release.
 * - kv_table.c: allocate (with copy-on-write), free, fork, slot mapping.
 * - kv_prefix.c: prefix lookup/take, registration of full blocks, reset.
 * - kv_check.c: pl_kv_check.
 *
 * Invariants (pl_kv_check verifies every one of them)
 * - ref_count[b] == number of live tables holding b; ref_count 0 <=> b is in the free queue.
 * - A block is "cached" iff reg != 0; then it is in the hash table exactly once under `hash`,
 *   hash == hash_fn(parent_hash, its stored tokens), and every table holding it holds it as a
 *   full block. An uncached block has no hash table entry.
 * - Registration serials are unique and increase: a block's parent_reg (0 at depth 0) is a
 *   smaller serial than its own reg, so a verified chain can never loop.
 */
#ifndef PL_KV_INTERNAL_H
#define PL_KV_INTERNAL_H

#include "kvcache/kvcache.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- free queue ------------------------------------------------------------------------ */

#define PL_KV_NIL (-1)        /* end of the queue */
#define PL_KV_NOT_QUEUED (-2) /* prev/next of a block that is not in the queue */

typedef struct pl_kv_free_queue {
    int32_t *prev; /* (n_blocks) previous block in the queue, PL_KV_NIL, or PL_KV_NOT_QUEUED */
    int32_t *next; /* (n_blocks) next block in the queue, PL_KV_NIL, or PL_KV_NOT_QUEUED */
    int32_t head;  /* taken first; PL_KV_NIL when empty */
    int32_t tail;
    int n_free;
} pl_kv_free_queue;

/* Every block queued, in id order (block 0 at the head). PL_ERR_OUT_OF_MEMORY. */
pl_status pl_kv_fq_init(pl_kv_free_queue *q, int n_blocks);
void pl_kv_fq_deinit(pl_kv_free_queue *q);
void pl_kv_fq_push_head(pl_kv_free_queue *q, int32_t b);
void pl_kv_fq_push_tail(pl_kv_free_queue *q, int32_t b);
int32_t pl_kv_fq_pop_head(pl_kv_free_queue *q); /* PL_KV_NIL when empty */
void pl_kv_fq_remove(pl_kv_free_queue *q, int32_t b); /* b must be queued */
static inline bool pl_kv_fq_contains(const pl_kv_free_queue *q, int32_t b) {
    return q->prev[b] != PL_KV_NOT_QUEUED;
}

/* ---- hash table ------------------------------------------------------------------------ */

typedef struct pl_kv_hash_table {
    uint64_t *keys;   /* (cap) */
    int32_t *blocks;  /* (cap) block id, or PL_KV_NIL for an empty slot */
    uint32_t mask;    /* cap - 1; cap is a power of two >= 2 * max entries, so load <= 1/2 */
    int shift;        /* 64 - log2(cap), for Fibonacci hashing of the key to a home slot */
    int n_entries;
} pl_kv_hash_table;

/* Room for max_entries entries (one per block) without ever growing. PL_ERR_OUT_OF_MEMORY. */
pl_status pl_kv_ht_init(pl_kv_hash_table *ht, int max_entries);
void pl_kv_ht_deinit(pl_kv_hash_table *ht);
/* Adds (key, b); never fails because the table was sized for every block. */
void pl_kv_ht_insert(pl_kv_hash_table *ht, uint64_t key, int32_t b);
/* Removes the entry (key, b), which must exist. */
void pl_kv_ht_remove(pl_kv_hash_table *ht, uint64_t key, int32_t b);
/* Iterates the blocks stored under key: start with *cursor = pl_kv_ht_home(ht, key); each call
 * returns the next such block or PL_KV_NIL when there are no more. */
uint32_t pl_kv_ht_home(const pl_kv_hash_table *ht, uint64_t key);
int32_t pl_kv_ht_next(const pl_kv_hash_table *ht, uint64_t key, uint32_t *cursor);
void pl_kv_ht_clear(pl_kv_hash_table *ht);

/* ---- pool ------------------------------------------------------------------------------ */

/* hash of a full block: the parent block's hash (0 at depth 0) and its n_tokens token ids. */
typedef uint64_t (*pl_kv_hash_fn)(uint64_t parent_hash, const int32_t *tokens, int n_tokens);

typedef struct pl_kv_block {
    int32_t ref_count;
    uint64_t reg;         /* registration serial; 0 = not cached */
    uint64_t hash;        /* valid when reg != 0 */
    uint64_t parent_hash; /* hash the block was registered under as a child of; 0 at depth 0 */
    uint64_t parent_reg;  /* serial of the parent registration; 0 at depth 0 */
} pl_kv_block;

struct pl_kv_pool {
    int block_size;
    int n_blocks;
    bool enable_prefix_caching;
    pl_kv_block *blocks;  /* (n_blocks) */
    int32_t *tokens;      /* (n_blocks, block_size) token ids of cached blocks; NULL when
                             prefix caching is off */
    pl_kv_free_queue fq;
    pl_kv_hash_table ht;
    /* Scratch, (n_blocks) each: the prefix chain of a lookup, and pl_kv_check's counters.
     * Pointers to mutable storage, so the const pl_kv_check may use them; the pool is used by
     * one thread at a time anyway. */
    int32_t *scratch_a;
    int32_t *scratch_b;
    pl_kv_hash_fn hash_fn;
    uint64_t next_reg;    /* serial of the next registration (starts at 1) */
    int n_cached;         /* blocks with reg != 0 */
    uint64_t prefix_queries_tokens;
    uint64_t prefix_hits_tokens;
    uint64_t evictions;
    uint64_t cow_copies;
    pl_kv_listener listener; /* stored == NULL: none */
};

/* The default block hash: XXH3-64 of the token ids seeded with the parent hash. */
uint64_t pl_kv_hash_block(uint64_t parent_hash, const int32_t *tokens, int n_tokens);

/* Takes the free queue's head for a new owner (ref_count 1), evicting its registration if it
 * has one. The queue must not be empty. */
int32_t pl_kv_take_free_block(pl_kv_pool *pool);
/* Drops one reference; at zero the block joins the free queue: at the tail keeping its
 * registration (cached, reusable, evicted last) or at the head (reused first). */
void pl_kv_release_block(pl_kv_pool *pool, int32_t b);
/* Forgets b's registration (hash table entry, serial). b must be cached. */
void pl_kv_drop_registration(pl_kv_pool *pool, int32_t b);
/* Stored token ids of block b: (block_size), meaningful while b is cached. */
static inline const int32_t *pl_kv_block_tokens(const pl_kv_pool *pool, int32_t b) {
    return pool->tokens + (size_t)b * (size_t)pool->block_size;
}

/* ---- test hooks ------------------------------------------------------------------------ */

/* Replaces the block hash (NULL restores the default), e.g. with a weak one that forces
 * collisions. Only on a pool with no cached blocks, so stored hashes stay consistent:
 * PL_ERR_INVALID_ARGUMENT otherwise. */
pl_status pl_kv_pool_set_hash_fn(pl_kv_pool *pool, pl_kv_hash_fn fn);
static inline int pl_kv_block_ref_count(const pl_kv_pool *pool, int32_t b) {
    return pool->blocks[b].ref_count;
}
static inline bool pl_kv_block_is_cached(const pl_kv_pool *pool, int32_t b) {
    return pool->blocks[b].reg != 0;
}

#ifdef __cplusplus
}
#endif
#endif
