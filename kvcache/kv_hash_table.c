/*
 * kvcache/kv_hash_table.c - the prefix-cache index: block hash -> block id.
 *
 * Open addressing with linear probing. At most one entry per block exists, so the table is
 * sized once at init to a power of two >= 2 * n_blocks and never grows: load stays <= 1/2,
 * probes stay short and there is always an empty slot to stop a search. Deletion shifts the
 * following entries back instead of leaving tombstones, so a long-running pool does not slowly
 * degrade. The home slot is the key times the 64-bit golden ratio, top bits (Fibonacci
 * hashing): xxHash keys are already uniform, but a test's deliberately weak hash is not.
 *
 * Several entries may share a key (hash collisions between different contents); the
 * iterator returns each, and kv_prefix.c verifies tokens and parent before trusting one.
 *
 * Invariant: every entry is reachable from its home slot without crossing an empty slot.
 */
#include "kvcache/kv_internal.h"
#include "util/alloc.h"

pl_status pl_kv_ht_init(pl_kv_hash_table *ht, int max_entries) {
    uint32_t cap = 8;
    int log2 = 3;
    while (cap < 2u * (uint32_t)max_entries) {
        cap <<= 1;
        log2++;
    }
    ht->keys = pl_calloc(cap, sizeof(uint64_t));
    ht->blocks = pl_calloc(cap, sizeof(int32_t));
    if (!ht->keys || !ht->blocks) {
        pl_kv_ht_deinit(ht);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "kvcache: prefix hash table of %u slots", cap);
    }
    ht->mask = cap - 1;
    ht->shift = 64 - log2;
    pl_kv_ht_clear(ht);
    return PL_OK;
}

void pl_kv_ht_deinit(pl_kv_hash_table *ht) {
    pl_free(ht->keys);
    pl_free(ht->blocks);
    ht->keys = NULL;
    ht->blocks = NULL;
    ht->n_entries = 0;
}

void pl_kv_ht_clear(pl_kv_hash_table *ht) {
    for (uint32_t i = 0; i <= ht->mask; i++) ht->blocks[i] = PL_KV_NIL;
    ht->n_entries = 0;
}

uint32_t pl_kv_ht_home(const pl_kv_hash_table *ht, uint64_t key) {
    return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> ht->shift);
}

void pl_kv_ht_insert(pl_kv_hash_table *ht, uint64_t key, int32_t b) {
    uint32_t i = pl_kv_ht_home(ht, key);
    while (ht->blocks[i] != PL_KV_NIL) i = (i + 1) & ht->mask;
    ht->keys[i] = key;
    ht->blocks[i] = b;
    ht->n_entries++;
}

int32_t pl_kv_ht_next(const pl_kv_hash_table *ht, uint64_t key, uint32_t *cursor) {
    for (uint32_t i = *cursor; ht->blocks[i] != PL_KV_NIL; i = (i + 1) & ht->mask) {
        if (ht->keys[i] == key) {
            *cursor = (i + 1) & ht->mask;
            return ht->blocks[i];
        }
    }
    return PL_KV_NIL;
}

void pl_kv_ht_remove(pl_kv_hash_table *ht, uint64_t key, int32_t b) {
    uint32_t i = pl_kv_ht_home(ht, key);
    while (!(ht->blocks[i] == b && ht->keys[i] == key)) i = (i + 1) & ht->mask;
    /* Backward shift: move later entries of the run into the hole when the hole lies on
     * their probe path (cyclically between their home and their slot). */
    uint32_t hole = i;
    for (uint32_t j = (i + 1) & ht->mask; ht->blocks[j] != PL_KV_NIL; j = (j + 1) & ht->mask) {
        uint32_t home = pl_kv_ht_home(ht, ht->keys[j]);
        uint32_t dist_j = (j - home) & ht->mask;    /* probe length of the entry at j */
        uint32_t dist_hole = (j - hole) & ht->mask; /* how far back the hole is */
        if (dist_hole <= dist_j) {
            ht->keys[hole] = ht->keys[j];
            ht->blocks[hole] = ht->blocks[j];
            hole = j;
        }
    }
    ht->blocks[hole] = PL_KV_NIL;
    ht->n_entries--;
}
