/*
 * tokenizer/hf_bpe.c - the BPE model on one pre-tokenized word: split into characters (bytes
 * in byte-level mode), look each up, then apply merges lowest rank first (leftmost first on a
 * tie) until none applies, exactly as Rust's Word::merge_all does.
 *
 * Cost: a short word (the common case) uses two small arrays and a scan per merge, O(n^2)
 * with n <= SMALL; a long one (a 1 MB run without spaces) uses a binary heap of candidate
 * merges over a doubly linked list of symbols, O(n log n): entries made stale by an earlier
 * merge are recognised when popped (the pair at their position no longer has their rank) and
 * dropped, so nothing is ever searched for.
 */
#include <string.h>

#include "tokenizer/hf.h"
#include "util/alloc.h"
#include "util/utf8.h"

#define SMALL 48

// ---- the pair table ---------------------------------------------------------------------------

static size_t pair_slot(uint64_t key, size_t mask) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

pl_status pl_hf_pairs_put(pl_hf_model *m, int32_t left, int32_t right, uint32_t rank, int32_t id) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (size_t i = pair_slot(key, m->pair_mask);; i = (i + 1) & m->pair_mask) {
        pl_hf_pair *p = &m->pairs[i];
        if (p->key == UINT64_MAX || p->key == key) {
            *p = (pl_hf_pair){key, rank, id};
            return PL_OK;
        }
    }
}

const pl_hf_pair *pl_hf_pairs_get(const pl_hf_model *m, int32_t left, int32_t right) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (size_t i = pair_slot(key, m->pair_mask);; i = (i + 1) & m->pair_mask) {
        const pl_hf_pair *p = &m->pairs[i];
        if (p->key == key) return p;
        if (p->key == UINT64_MAX) return NULL;
    }
}

// ---- initial symbols --------------------------------------------------------------------------

typedef struct sym {
    int32_t id;
    int32_t prev, next; /* heap path: neighbours in the list, -1 at the ends */
} sym;

typedef struct symbols {
    sym *v;
    size_t n;
    bool unk_open; /* the last symbol is an unk that fuse_unk may extend */
} symbols;

static pl_status grow(pl_hf_bpe_scratch *sc, size_t need) {
    if (need <= sc->syms_cap) return PL_OK;
    return pl_grow_array(&sc->syms, &sc->syms_cap, need, sizeof(sym), "BPE symbols");
}

/* A character the vocabulary lacks (c[0..n), its bytes; for byte-level input the byte's
 * character): its bytes as <0xXX> tokens when byte_fallback has them all, else the unk token
 * (fused with an unk just before when fuse_unk), else nothing, as Rust does. */
static void unknown_char(const pl_hf_model *m, const unsigned char *c, size_t n, symbols *s) {
    if (m->byte_fallback) {
        bool all = true;
        for (size_t i = 0; i < n; i++) all = all && m->fb_id[c[i]] >= 0;
        if (all) {
            for (size_t i = 0; i < n; i++) s->v[s->n++].id = m->fb_id[c[i]];
            s->unk_open = false;
            return;
        }
    }
    if (m->unk_id < 0) return;
    if (m->fuse_unk && s->unk_open) return;
    s->v[s->n++].id = m->unk_id;
    s->unk_open = true;
}

/* Splits the word into its first symbols; room for 4 per input byte is reserved (a byte-level
 * character is at most 2 bytes, each of which may fall back to a byte token). */
static pl_status initial_symbols(const pl_hf_model *m, const char *w, size_t len,
                                 pl_hf_bpe_scratch *sc, symbols *s) {
    PL_TRY(grow(sc, 4 * len + 1));
    s->v = sc->syms;
    s->n = 0;
    s->unk_open = false;
    const unsigned char *u = (const unsigned char *)w;
    if (m->byte_level) {
        for (size_t i = 0; i < len; i++) {
            int32_t id = m->byte_id[u[i]];
            if (id >= 0) {
                s->v[s->n++].id = id;
                s->unk_open = false;
            } else {
                unknown_char(m, (const unsigned char *)m->byte_char[u[i]], m->byte_char_len[u[i]],
                             s);
            }
        }
        return PL_OK;
    }
    for (size_t i = 0; i < len;) {
        size_t k = 1;
        while (i + k < len && pl_utf8_is_cont(u[i + k])) k++;
        int32_t id = pl_tok_strmap_get(&m->vocab, w + i, k);
        if (id >= 0) {
            s->v[s->n++].id = id;
            s->unk_open = false;
        } else {
            unknown_char(m, u + i, k, s);
        }
        i += k;
    }
    return PL_OK;
}

// ---- merging: short words ---------------------------------------------------------------------

static uint32_t rank_of(const pl_hf_model *m, int32_t a, int32_t b, int32_t *out_id) {
    const pl_hf_pair *p = pl_hf_pairs_get(m, a, b);
    if (!p) return UINT32_MAX;
    *out_id = p->id;
    return p->rank;
}

static void merge_small(const pl_hf_model *m, symbols *s) {
    int32_t ids[SMALL], merged[SMALL];
    uint32_t rank[SMALL];
    size_t n = s->n;
    for (size_t i = 0; i < n; i++) ids[i] = s->v[i].id;
    for (size_t i = 0; i + 1 < n; i++) rank[i] = rank_of(m, ids[i], ids[i + 1], &merged[i]);
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == UINT32_MAX) break;
        /* symbols best and best + 1 become one; the pair (best + 1, best + 2) is gone */
        ids[best] = merged[best];
        memmove(ids + best + 1, ids + best + 2, (n - best - 2) * sizeof *ids);
        if (best + 3 < n) {
            memmove(rank + best + 1, rank + best + 2, (n - best - 3) * sizeof *rank);
            memmove(merged + best + 1, merged + best + 2, (n - best - 3) * sizeof *merged);
        }
        n--;
        if (best > 0) rank[best - 1] = rank_of(m, ids[best - 1], ids[best], &merged[best - 1]);
        if (best + 1 < n) rank[best] = rank_of(m, ids[best], ids[best + 1], &merged[best]);
    }
    for (size_t i = 0; i < n; i++) s->v[i].id = ids[i];
    s->n = n;
}

// ---- merging: long words ---------------------------------------------------------------------

/* A candidate merge is one integer, rank << 32 | position of its left symbol, so the smallest
 * is the next merge (lowest rank, then leftmost), and the heap compares plain integers. The
 * heap is 4-ary (as Rust's QuaternaryHeap): half the levels of a binary one, and the children
 * of a node share a cache line. */
typedef struct heap {
    uint64_t *v;
    size_t n;
} heap;

static void sift_down(heap *h, size_t i) {
    uint64_t x = h->v[i];
    for (;;) {
        size_t c = 4 * i + 1;
        if (c >= h->n) break;
        size_t best = c, end = c + 4 < h->n ? c + 4 : h->n;
        for (size_t j = c + 1; j < end; j++)
            if (h->v[j] < h->v[best]) best = j;
        if (h->v[best] >= x) break;
        h->v[i] = h->v[best];
        i = best;
    }
    h->v[i] = x;
}

static void heap_push(heap *h, uint64_t x) {
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 4;
        if (h->v[p] <= x) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = x;
}

static uint64_t heap_pop(heap *h) {
    uint64_t top = h->v[0];
    h->v[0] = h->v[--h->n];
    if (h->n > 0) sift_down(h, 0);
    return top;
}

static uint64_t cand(uint32_t rank, int32_t pos) { return (uint64_t)rank << 32 | (uint32_t)pos; }

static void push_pair(const pl_hf_model *m, heap *h, const sym *v, int32_t pos) {
    int32_t next = v[pos].next;
    if (next < 0) return;
    const pl_hf_pair *p = pl_hf_pairs_get(m, v[pos].id, v[next].id);
    if (p) heap_push(h, cand(p->rank, pos));
}

static pl_status merge_long(const pl_hf_model *m, symbols *s, pl_hf_bpe_scratch *sc) {
    /* Each merge adds at most 2 candidates and removes one symbol: n + 2n bounds the heap. */
    size_t need = 3 * s->n + 1;
    if (need > sc->heap_cap)
        PL_TRY(pl_grow_array(&sc->heap, &sc->heap_cap, need, sizeof(uint64_t), "BPE merge heap"));
    heap h = {sc->heap, 0};
    sym *v = s->v;
    int32_t n = (int32_t)s->n;
    for (int32_t i = 0; i < n; i++) {
        v[i].prev = i - 1;
        v[i].next = i + 1 < n ? i + 1 : -1;
    }
    for (int32_t i = 0; i + 1 < n; i++) { /* all first pairs, then one O(n) heapify */
        const pl_hf_pair *p = pl_hf_pairs_get(m, v[i].id, v[i + 1].id);
        if (p) h.v[h.n++] = cand(p->rank, i);
    }
    for (size_t i = h.n / 4 + 1; i-- > 0;)
        if (i < h.n) sift_down(&h, i);
    while (h.n > 0) {
        uint64_t c = heap_pop(&h);
        uint32_t rank = (uint32_t)(c >> 32);
        int32_t pos = (int32_t)(uint32_t)c;
        if (v[pos].id < 0 || v[pos].next < 0) continue; /* merged away, or now last */
        int32_t right = v[pos].next;
        const pl_hf_pair *p = pl_hf_pairs_get(m, v[pos].id, v[right].id);
        if (!p || p->rank != rank) continue; /* stale: the pair here changed */
        v[pos].id = p->id;
        v[pos].next = v[right].next;
        if (v[right].next >= 0) v[v[right].next].prev = pos;
        v[right].id = -1;
        if (v[pos].prev >= 0) push_pair(m, &h, v, v[pos].prev);
        push_pair(m, &h, v, pos);
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0 && i < n; i = v[i].next) v[k++].id = v[i].id;
    s->n = k;
    return PL_OK;
}

// ---- one word ---------------------------------------------------------------------------------

pl_status pl_hf_bpe_word(const pl_hf_model *m, const char *word, size_t len,
                         pl_hf_bpe_scratch *sc, pl_tok_ids *out) {
    if (len == 0) return PL_OK;
    if (m->ignore_merges) {
        int32_t id = pl_tok_strmap_get(&m->vocab, word, len);
        if (id >= 0) return pl_tok_ids_push(out, id);
    }
    symbols s;
    PL_TRY(initial_symbols(m, word, len, sc, &s));
    if (s.n <= SMALL)
        merge_small(m, &s);
    else
        PL_TRY(merge_long(m, &s, sc));
    for (size_t i = 0; i < s.n; i++) PL_TRY(pl_tok_ids_push(out, s.v[i].id));
    return PL_OK;
}

void pl_hf_bpe_scratch_free(pl_hf_bpe_scratch *sc) {
    pl_free(sc->syms);
    pl_free(sc->heap);
    *sc = (pl_hf_bpe_scratch){0};
}
