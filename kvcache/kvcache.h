/*
 * kvcache/kvcache.h - the paged KV cache manager: block ids, never memory.
 *
 * The backend owns one KV tensor indexed by block id; this module decides which block and
 * which slot each token of each sequence uses. A slot is `block_id * block_size + offset`.
 *
 * Promises
 * - A pool of n_blocks blocks of block_size slots. Every block is either in the free queue
 *   (ref_count 0) or referenced by ref_count block tables.
 * - Free queue: doubly linked, O(1) push/pop/remove-from-the-middle. Allocation takes from the
 *   head. A freed block that holds a prefix-cache hash goes to the tail and keeps its hash (it
 *   can still be hit); one without a hash goes to the head (reused first). So cached blocks are
 *   evicted least-recently-freed first, and their hash is dropped when they are reused.
 * - Prefix caching: a *full* block whose KV has been computed may be registered under
 *   hash(parent block's hash, its block_size token ids) (xxHash3-64 seeded with the parent
 *   hash). A lookup walks a token sequence block by block and returns the longest chain of
 *   registered blocks. Every hit is verified, so a hash collision never shares KV: the block's
 *   stored token ids must equal the queried ones, and the block must have been registered as
 *   the child of the registration hit one level up (each registration gets a serial number,
 *   and a block records its parent's). Token equality alone would not do: a block's KV depends
 *   on the whole prefix, and two different prefixes whose hashes collide could have children
 *   with equal tokens.
 * - Copy-on-write: after pl_kv_fork a child shares its parent's blocks. Allocating slots in a
 *   shared, partially filled last block first moves the table onto a fresh copy; the caller
 *   gets the (src, dst) pairs the backend must copy before the step writes.
 * - All operations that allocate are all-or-nothing: on failure nothing changed.
 */
#ifndef PL_KVCACHE_H
#define PL_KVCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pl_kv_pool pl_kv_pool;

/* One sequence's block table. Caller-provided storage: pl_kv_table_init / pl_kv_free. */
typedef struct pl_kv_table {
    int32_t *block_ids; /* (n_blocks) physical block ids, in token order */
    int n_blocks;
    int cap;            /* capacity of block_ids */
    int n_tokens;       /* token slots allocated (positions 0 .. n_tokens-1 have a slot) */
    int n_cached;       /* leading full blocks whose content is in the prefix cache: taken from
                           it, registered by this table, or duplicates of a registered block */
    uint64_t last_hash; /* hash of block n_cached-1 (the parent of the next one); 0 if none */
    uint64_t last_reg;  /* serial of the registration block n_cached-1 matched (the parent the
                           next registration links to); 0 if none */
} pl_kv_table;

/* A block copy the backend must do (copy-on-write): all layers, K and V, src -> dst. */
typedef struct pl_kv_copy {
    int32_t src;
    int32_t dst;
} pl_kv_copy;

typedef struct pl_kv_stats {
    int n_blocks_total;
    int n_blocks_free;    /* in the free queue (includes cached-but-free blocks) */
    int n_blocks_used;    /* ref_count > 0 */
    int n_blocks_cached;  /* holding a prefix-cache hash (free or used) */
    double usage;         /* used / total */
    uint64_t prefix_queries_tokens; /* tokens looked up in the prefix cache */
    uint64_t prefix_hits_tokens;    /* of which found cached */
    uint64_t evictions;             /* cached blocks whose hash was dropped on reuse */
    uint64_t cow_copies;            /* copy-on-write block copies requested */
} pl_kv_stats;

/* ---- pool ---------------------------------------------------------------------------- */

/* block_size: a power of two in [1, 256]; n_blocks >= 1. PL_ERR_INVALID_ARGUMENT or
 * PL_ERR_OUT_OF_MEMORY. */
pl_status pl_kv_pool_create(int block_size, int n_blocks, bool enable_prefix_caching,
                            pl_kv_pool **out_pool);
void pl_kv_pool_destroy(pl_kv_pool *pool); /* NULL is a no-op; tables must be freed first */

int pl_kv_block_size(const pl_kv_pool *pool);
int pl_kv_num_blocks(const pl_kv_pool *pool);
int pl_kv_num_free_blocks(const pl_kv_pool *pool);
void pl_kv_get_stats(const pl_kv_pool *pool, pl_kv_stats *out);

/* Blocks needed to hold n_tokens tokens: ceil(n_tokens / block_size). */
int pl_kv_blocks_for_tokens(const pl_kv_pool *pool, int n_tokens);

/* ---- tables -------------------------------------------------------------------------- */

void pl_kv_table_init(pl_kv_table *t); /* an empty table; owns nothing yet */

/* Blocks that pl_kv_allocate(t, n_new) would take from the free queue (new blocks plus a
 * copy-on-write copy). */
int pl_kv_blocks_needed(const pl_kv_pool *pool, const pl_kv_table *t, int n_new);

/* Gives slots to the next n_new tokens of t (positions n_tokens .. n_tokens+n_new-1).
 * All-or-nothing. Copy-on-write pairs are written to out_copies (room for at least 1; there
 * is never more than one per call) and counted in *out_n_copies; both may be NULL when the
 * caller knows t is not shared (if a copy is then needed: PL_ERR_INVALID_ARGUMENT).
 * n_new = 0 changes nothing and succeeds. *out_blocks_needed (if not NULL) always gets
 * pl_kv_blocks_needed(pool, t, n_new).
 * Errors: PL_ERR_OUT_OF_MEMORY when the free queue has too few blocks (the message and
 * *out_blocks_needed give how many were needed), or the table cannot grow;
 * PL_ERR_INVALID_ARGUMENT for n_new < 0 or n_tokens + n_new overflowing int. */
pl_status pl_kv_allocate(pl_kv_pool *pool, pl_kv_table *t, int n_new, pl_kv_copy *out_copies,
                         int *out_n_copies, int *out_blocks_needed);

/* Releases every block of t (in reverse order, so the tail is evicted first) and resets t
 * to empty. Frees t's own storage. */
void pl_kv_free(pl_kv_pool *pool, pl_kv_table *t);

/* Makes child (empty) share all of parent's blocks (ref counts up) and copies its token and
 * prefix-cache position. PL_ERR_OUT_OF_MEMORY if the child's table cannot be allocated,
 * PL_ERR_INVALID_ARGUMENT if child holds blocks or is parent. */
pl_status pl_kv_fork(pl_kv_pool *pool, const pl_kv_table *parent, pl_kv_table *child);

/* Physical slot of token position pos (0 <= pos < t->n_tokens). */
static inline int64_t pl_kv_slot(const pl_kv_table *t, int block_size, int pos) {
    return (int64_t)t->block_ids[pos / block_size] * block_size + pos % block_size;
}

/* Slots of positions start .. start+n-1 into out_slots (n entries): the batch's slot mapping.
 * PL_ERR_INVALID_ARGUMENT unless 0 <= start, 0 <= n and start + n <= t->n_tokens. */
pl_status pl_kv_slot_mapping(const pl_kv_pool *pool, const pl_kv_table *t, int start, int n,
                             int64_t *out_slots);

/* ---- prefix cache -------------------------------------------------------------------- */

/* For an empty table t: finds the longest chain of cached full blocks matching tokens[0..n),
 * takes them into t (ref counts up; free cached blocks leave the free queue) and sets
 * t->n_tokens = t->n_cached * block_size. *out_n_cached_tokens gets that count.
 * At most max_cached_tokens are taken (the caller passes n - 1 so the last prompt token is
 * always recomputed: its logits are needed; a negative value counts as 0). Counts the query
 * in the stats: n tokens queried, *out_n_cached_tokens hit. With prefix caching off, takes
 * and counts nothing. Errors: PL_ERR_INVALID_ARGUMENT (t not empty, n < 0, tokens NULL with
 * n > 0), PL_ERR_OUT_OF_MEMORY if t cannot grow; on error nothing changed. */
pl_status pl_kv_take_prefix(pl_kv_pool *pool, pl_kv_table *t, const int32_t *tokens, int n,
                            int max_cached_tokens, int *out_n_cached_tokens);

/* The lookup of pl_kv_take_prefix without taking anything or counting stats, for admission
 * control: *out_n_cached_tokens gets what take_prefix would take now, *out_n_free_hits (may be
 * NULL) how many of those blocks sit in the free queue (taking them lowers the free count as
 * much as allocating would). Same argument rules as pl_kv_take_prefix, except t. */
pl_status pl_kv_count_prefix(const pl_kv_pool *pool, const int32_t *tokens, int n,
                             int max_cached_tokens, int *out_n_cached_tokens,
                             int *out_n_free_hits);

/* After a step computed KV for positions < n_computed: registers every newly full block of t
 * among those in the prefix cache, with tokens[] the sequence's token ids (at least
 * n_computed). A block whose content (tokens and parent) is already registered by another
 * block stays unregistered (the first one wins) but still advances t->n_cached. Registration
 * stops early, safely, when the parent registration t->last_reg was dropped meanwhile
 * (evicted or reset) or when tokens[] disagree with a block's stored tokens. No-op with
 * prefix caching off. */
void pl_kv_register_full_blocks(pl_kv_pool *pool, pl_kv_table *t, const int32_t *tokens,
                                int n_computed);

/* Drops every hash (cached free blocks become plain free blocks). Tables that were
 * registering keep their n_cached but register nothing more (their parent is gone). */
void pl_kv_reset_prefix_cache(pl_kv_pool *pool);

/* ---- prefix-cache events ------------------------------------------------------------- */

/* What the prefix cache learns and forgets, told as it happens (on the pool's thread, inside
 * the call that changes it), for a publisher above this module (vLLM's BlockStored,
 * BlockRemoved, AllBlocksCleared). Block ids only: a registration is named by the block that
 * holds it, and its parent by the block holding the parent registration (-1 at depth 0),
 * which is registered until after the child is (a block's registration is removed before the
 * block is reused). Every callback is required; each must be cheap and must not call back
 * into the pool. */
typedef struct pl_kv_listener {
    void *ctx;
    /* block now holds a registration: tokens are its block_size ids (valid during the call) */
    void (*stored)(void *ctx, int32_t block, int32_t parent_block, const int32_t *tokens,
                   int n_tokens);
    /* block's registration was dropped (evicted on reuse) */
    void (*removed)(void *ctx, int32_t block);
    /* every registration was dropped (pl_kv_reset_prefix_cache) */
    void (*cleared)(void *ctx);
} pl_kv_listener;

/* Sets the listener (copied; NULL: none). Set it before the first registration, or the
 * listener hears of removals of blocks it never heard stored. */
void pl_kv_set_listener(pl_kv_pool *pool, const pl_kv_listener *listener);

/* ---- checking (tests, debug builds) -------------------------------------------------- */

/* Verifies the pool against the complete set of live tables: every block free xor
 * referenced, ref counts equal the number of tables holding each block, free + used = total,
 * free queue links consistent, every hash entry points at a block whose stored tokens hash to
 * it. PL_OK, or PL_ERR_INVALID_ARGUMENT with a message naming the first broken invariant. */
pl_status pl_kv_check(const pl_kv_pool *pool, const pl_kv_table *const *tables, int n_tables);

#ifdef __cplusplus
}
#endif
#endif
