/*
 * kvcache/kv_free_queue.c - the free queue: a doubly linked list of block ids kept in two
 * arrays, so push at either end, pop from the head and removal from the middle (a cached free
 * block hit by a prefix lookup) are all O(1) with no allocation after init.
 *
 * Invariants: walking next from head visits exactly n_free blocks and ends at tail; prev
 * mirrors next; a block not in the queue has prev == next == PL_KV_NOT_QUEUED. The callers
 * (kv_pool.c) decide which end a block goes to; this file knows nothing about caching.
 */
#include "kvcache/kv_internal.h"
#include "util/alloc.h"

pl_status pl_kv_fq_init(pl_kv_free_queue *q, int n_blocks) {
    q->prev = pl_calloc((size_t)n_blocks, sizeof(int32_t));
    q->next = pl_calloc((size_t)n_blocks, sizeof(int32_t));
    if (!q->prev || !q->next) {
        pl_kv_fq_deinit(q);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "kvcache: free queue of %d blocks", n_blocks);
    }
    for (int32_t b = 0; b < n_blocks; b++) {
        q->prev[b] = b - 1; /* block 0's prev is PL_KV_NIL (-1) */
        q->next[b] = b + 1 < n_blocks ? b + 1 : PL_KV_NIL;
    }
    q->head = n_blocks > 0 ? 0 : PL_KV_NIL;
    q->tail = n_blocks > 0 ? n_blocks - 1 : PL_KV_NIL;
    q->n_free = n_blocks;
    return PL_OK;
}

void pl_kv_fq_deinit(pl_kv_free_queue *q) {
    pl_free(q->prev);
    pl_free(q->next);
    q->prev = q->next = NULL;
    q->head = q->tail = PL_KV_NIL;
    q->n_free = 0;
}

void pl_kv_fq_push_head(pl_kv_free_queue *q, int32_t b) {
    q->prev[b] = PL_KV_NIL;
    q->next[b] = q->head;
    if (q->head != PL_KV_NIL)
        q->prev[q->head] = b;
    else
        q->tail = b;
    q->head = b;
    q->n_free++;
}

void pl_kv_fq_push_tail(pl_kv_free_queue *q, int32_t b) {
    q->next[b] = PL_KV_NIL;
    q->prev[b] = q->tail;
    if (q->tail != PL_KV_NIL)
        q->next[q->tail] = b;
    else
        q->head = b;
    q->tail = b;
    q->n_free++;
}

void pl_kv_fq_remove(pl_kv_free_queue *q, int32_t b) {
    int32_t p = q->prev[b], n = q->next[b];
    if (p != PL_KV_NIL)
        q->next[p] = n;
    else
        q->head = n;
    if (n != PL_KV_NIL)
        q->prev[n] = p;
    else
        q->tail = p;
    q->prev[b] = q->next[b] = PL_KV_NOT_QUEUED;
    q->n_free--;
}

int32_t pl_kv_fq_pop_head(pl_kv_free_queue *q) {
    int32_t b = q->head;
    if (b != PL_KV_NIL) pl_kv_fq_remove(q, b);
    return b;
}
