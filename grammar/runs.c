/*
 * grammar/runs.c - the tables of runs.h: one pass over the trie below the table's node in
 * preorder, decoding each path's UTF-8 as it goes, sorts every node into "still a run of the
 * class" (its tokens are runs, of the path's index) or "the first node leaving it" (an exit:
 * its subtree is skipped, the mask walks it from the right state). Built once per tokenizer,
 * class and node, in time linear in the subtree (about 2 ms for all of Llama 3's 128k tokens).
 *
 * A character's bytes are decided as the matcher decides them (pl_gram_utf8_range): a node
 * that starts a character stays in the run only when every code point the bytes could still
 * become is in the class and no continuation below it, within the character, is refused;
 * otherwise the node is an exit at the character boundary, and the matcher's own stepping
 * judges what follows.
 */
#include <pthread.h>
#include <string.h>

#include "grammar/runs.h"
#include "util/alloc.h"

/* The list of tables of every vocabulary: one lock for all (taken at mask cache misses). */
static pthread_mutex_t g_runs_mu = PTHREAD_MUTEX_INITIALIZER;

/* The tables of a vocabulary: open addressing on (class, node). */
struct pl_gram_runs_set {
    pl_gram_runs **slot;   /* (cap) NULL: empty */
    size_t cap, n;
    size_t bytes;          /* of the tables */
};

static size_t table_bytes(const pl_gram_runs *t) {
    return sizeof *t + 2 * t->n_pairs * sizeof *t->ranges + t->n_full * sizeof *t->full_id +
           ((size_t)t->max_full + 1) * sizeof *t->full_at +
           (size_t)t->n_cum * t->words * sizeof *t->cum + t->n_groups * sizeof *t->groups +
           t->n_exits * sizeof *t->exits;
}

static void table_free(pl_gram_runs *t) {
    if (!t) return;
    pl_free(t->ranges);
    pl_free(t->full_id);
    pl_free(t->full_at);
    pl_free(t->cum);
    pl_free(t->groups);
    pl_free(t->exits);
    pl_free(t);
}

void pl_gram_runs_free_set(struct pl_gram_runs_set *set) {
    if (!set) return;
    for (size_t i = 0; i < set->cap; i++) table_free(set->slot[i]);
    pl_free(set->slot);
    pl_free(set);
}

static uint64_t table_hash(const uint32_t *ranges, size_t n_pairs, uint32_t root) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ root;
    for (size_t i = 0; i < 2 * n_pairs; i++) {
        h ^= ranges[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return h;
}

static pl_gram_runs *set_find(const struct pl_gram_runs_set *set, uint64_t h,
                              const uint32_t *ranges, size_t n_pairs, uint32_t root) {
    if (!set || !set->cap) return NULL;
    for (size_t i = h & (set->cap - 1);; i = (i + 1) & (set->cap - 1)) {
        pl_gram_runs *t = set->slot[i];
        if (!t) return NULL;
        if (t->hash == h && t->root == root && t->n_pairs == n_pairs &&
            !memcmp(t->ranges, ranges, 2 * n_pairs * sizeof *ranges))
            return t;
    }
}

/* Adds t to set (which the caller made); false when out of memory. */
static bool set_add(struct pl_gram_runs_set *set, pl_gram_runs *t) {
    if ((set->n + 1) * 2 > set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 16;
        pl_gram_runs **slot = pl_calloc(cap, sizeof *slot);
        if (!slot) return false;
        for (size_t i = 0; i < set->cap; i++) {
            if (!set->slot[i]) continue;
            size_t j = set->slot[i]->hash & (cap - 1);
            while (slot[j]) j = (j + 1) & (cap - 1);
            slot[j] = set->slot[i];
        }
        pl_free(set->slot);
        set->slot = slot;
        set->cap = cap;
    }
    size_t j = t->hash & (set->cap - 1);
    while (set->slot[j]) j = (j + 1) & (set->cap - 1);
    set->slot[j] = t;
    set->n++;
    set->bytes += table_bytes(t);
    return true;
}

static bool in_class(const uint32_t *r, size_t n_pairs, uint32_t cp) {
    size_t lo = 0, hi = n_pairs; /* the last range starting at or below cp */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r[2 * mid] <= cp) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && cp <= r[2 * (lo - 1) + 1];
}

static bool range_in_class(const uint32_t *r, size_t n_pairs, uint32_t lo, uint32_t hi) {
    size_t a = 0, b = n_pairs;
    while (a < b) {
        size_t mid = (a + b) / 2;
        if (r[2 * mid] <= lo) a = mid + 1;
        else b = mid;
    }
    return a > 0 && hi <= r[2 * (a - 1) + 1];
}

/* The continuation bytes and payload of a lead byte; false for a byte no character starts with. */
static bool lead(uint8_t b, int *need, uint32_t *bits) {
    if ((b >> 5) == 6) *need = 1, *bits = b & 0x1Fu;
    else if ((b >> 4) == 14) *need = 2, *bits = b & 0x0Fu;
    else if ((b >> 3) == 30) *need = 3, *bits = b & 0x07u;
    else return false;
    return true;
}

/* Whether some node below the lead node l (need continuation bytes to come), within its
 * character, is a byte the matcher refuses. */
static bool breaks_within(const pl_gram_node *nodes, uint32_t l, int need, uint32_t bits) {
    uint32_t at[4];
    at[0] = bits;
    uint32_t d0 = nodes[l].depth;
    for (uint32_t x = l + 1; x < nodes[l].end;) {
        int r = (int)(nodes[x].depth - d0);
        if (r > need) {
            x = nodes[x].end;
            continue;
        }
        uint8_t b = nodes[x].byte;
        if ((b & 0xC0) != 0x80) return true;
        at[r] = (at[r - 1] << 6) | (b & 0x3Fu);
        uint32_t lo, hi;
        if (!pl_gram_utf8_range(at[r], r + 1, need - r, &lo, &hi)) return true;
        x++;
    }
    return false;
}

typedef struct exit_rec {
    uint32_t node, k;
    uint8_t byte;
} exit_rec;

typedef struct path {
    uint32_t k, bits;
    uint8_t have, need;
} path;

static pl_status build(const pl_gram_vocab *v, const uint32_t *ranges, size_t n_pairs,
                       uint32_t root, pl_gram_runs **out) {
    const pl_gram_node *nodes = v->nodes;
    uint32_t base = nodes[root].depth, end = root ? nodes[root].end : (uint32_t)v->n_nodes;
    size_t n_tok = v->n_sorted ? v->n_sorted : 1;
    pl_gram_runs *t = pl_calloc(1, sizeof *t);
    path *ps = pl_malloc((v->max_len + 2) * sizeof *ps);
    int32_t *full_id = pl_malloc(n_tok * sizeof *full_id);
    uint32_t *full_j = pl_malloc(n_tok * sizeof *full_j);
    exit_rec *ex = NULL;
    size_t n_ex = 0, cap_ex = 0, n_full = 0;
    uint32_t *bucket = NULL;
    pl_status st = PL_OK;
    if (!t || !ps || !full_id || !full_j) goto oom;
    t->ranges = pl_malloc((n_pairs ? 2 * n_pairs : 1) * sizeof *t->ranges);
    if (!t->ranges) goto oom;
    if (n_pairs) memcpy(t->ranges, ranges, 2 * n_pairs * sizeof *ranges);
    t->n_pairs = n_pairs;
    t->root = root;
    t->hash = table_hash(ranges, n_pairs, root);
    t->words = ((size_t)v->n_vocab + 63) / 64;
    memset(&ps[0], 0, sizeof ps[0]);
    for (uint32_t i = root + 1; i < end;) {
        const pl_gram_node *nd = &nodes[i];
        uint32_t d = nd->depth - base; /* depth below root */
        const path *p = &ps[d - 1];
        path c = *p;
        bool brk = false;
        uint8_t b = nd->byte;
        if (p->need == 0) {
            int need;
            uint32_t bits, lo, hi;
            if (b < 0x80) {
                if (in_class(ranges, n_pairs, b)) c.k++;
                else brk = true;
            } else if (!lead(b, &need, &bits) || !pl_gram_utf8_range(bits, 1, need, &lo, &hi) ||
                       !range_in_class(ranges, n_pairs, lo, hi) ||
                       breaks_within(nodes, i, need, bits)) {
                brk = true;
            } else {
                c.bits = bits;
                c.have = 1;
                c.need = (uint8_t)need;
            }
        } else { /* a continuation breaks_within found valid */
            c.bits = (p->bits << 6) | (b & 0x3Fu);
            c.have++;
            if (--c.need == 0) {
                c.k++;
                c.bits = 0;
                c.have = 0;
            }
        }
        if (brk) {
            if (n_ex == cap_ex) {
                void *q = ex;
                if (pl_grow_array(&q, &cap_ex, n_ex + 1, sizeof *ex, "grammar: run table") != PL_OK)
                    goto fail;
                ex = q;
            }
            ex[n_ex++] = (exit_rec){.node = i, .k = p->k, .byte = b};
            if (p->k > t->max_exit) t->max_exit = p->k;
            i = nd->end;
            continue;
        }
        ps[d] = c;
        uint32_t j = c.k + (c.need ? 1u : 0u);
        for (uint32_t q = 0; q < nd->tok_n; q++) {
            full_id[n_full] = v->sorted[nd->tok_lo + q];
            full_j[n_full++] = j;
            if (j > t->max_full) t->max_full = j;
        }
        i++;
    }
    t->n_full = n_full;
    /* the runs by index (a counting sort), and for the whole trie bitmaps of the short ones */
    t->full_at = pl_calloc((size_t)t->max_full + 1, sizeof *t->full_at);
    t->full_id = pl_malloc((n_full ? n_full : 1) * sizeof *t->full_id);
    if (!t->full_at || !t->full_id) goto oom;
    for (size_t q = 0; q < n_full; q++) t->full_at[full_j[q]]++;
    for (uint32_t j = 1; j <= t->max_full; j++) t->full_at[j] += t->full_at[j - 1];
    for (size_t q = n_full; q-- > 0;) t->full_id[--t->full_at[full_j[q]]] = full_id[q];
    /* full_at[j] is now where index j begins: shift to where it ends */
    memmove(t->full_at, t->full_at + 1, (size_t)t->max_full * sizeof *t->full_at);
    t->full_at[t->max_full] = (uint32_t)n_full;
    if (root == 0 && t->max_full) {
        t->n_cum = t->max_full < PL_GRAM_RUN_CUM ? t->max_full : PL_GRAM_RUN_CUM;
        t->cum = pl_calloc((size_t)t->n_cum * t->words, sizeof *t->cum);
        if (!t->cum) goto oom;
        for (uint32_t j = 1; j <= t->n_cum; j++) {
            uint64_t *c = t->cum + (size_t)(j - 1) * t->words;
            if (j > 1) memcpy(c, c - t->words, t->words * sizeof *c);
            for (uint32_t q = t->full_at[j - 1]; q < t->full_at[j]; q++)
                c[(uint32_t)t->full_id[q] >> 6] |= 1ull << (t->full_id[q] & 63);
        }
    }
    /* exits grouped by (k, byte): a counting sort */
    if (n_ex) {
        size_t n_keys = ((size_t)t->max_exit + 1) * 256;
        bucket = pl_calloc(n_keys + 1, sizeof *bucket);
        t->exits = pl_malloc(n_ex * sizeof *t->exits);
        if (!bucket || !t->exits) goto oom;
        size_t n_groups = 0;
        for (size_t q = 0; q < n_ex; q++)
            if (bucket[(size_t)ex[q].k * 256 + ex[q].byte + 1]++ == 0) n_groups++;
        t->groups = pl_malloc(n_groups * sizeof *t->groups);
        if (!t->groups) goto oom;
        for (size_t key = 0; key < n_keys; key++) {
            uint32_t n = bucket[key + 1];
            bucket[key + 1] = bucket[key] + n;
            if (n)
                t->groups[t->n_groups++] = (pl_gram_run_group){
                    .k = (uint32_t)(key / 256), .byte = (uint8_t)(key % 256),
                    .first = bucket[key], .n = n};
        }
        for (size_t q = 0; q < n_ex; q++)
            t->exits[bucket[(size_t)ex[q].k * 256 + ex[q].byte]++] = ex[q].node;
        t->n_exits = n_ex;
    }
    goto done;
oom:
    st = pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: run table of %zu tokens", v->n_sorted);
fail:
    if (st == PL_OK) st = PL_ERR_OUT_OF_MEMORY;
    table_free(t);
    t = NULL;
done:
    pl_free(ps);
    pl_free(full_id);
    pl_free(full_j);
    pl_free(ex);
    pl_free(bucket);
    *out = t;
    return st;
}

pl_status pl_gram_runs_get(const pl_gram_vocab *v, const uint32_t *ranges, size_t n_pairs,
                           uint32_t root, const pl_gram_runs **out) {
    uint64_t h = table_hash(ranges, n_pairs, root);
    pthread_mutex_lock(&g_runs_mu);
    pl_gram_runs *t = set_find(v->runs, h, ranges, n_pairs, root);
    bool full = v->runs && v->runs->bytes > PL_GRAM_RUNS_BYTES;
    pthread_mutex_unlock(&g_runs_mu);
    *out = t;
    if (t || full) return PL_OK; /* full: no new tables, the masks walk the trie instead */
    /* built outside the lock; a table another thread added meanwhile wins */
    PL_TRY(build(v, ranges, n_pairs, root, &t));
    pthread_mutex_lock(&g_runs_mu);
    pl_gram_vocab *mv = (pl_gram_vocab *)v; /* the set is a cache the lock guards */
    pl_gram_runs *o = set_find(v->runs, h, ranges, n_pairs, root);
    if (!o && !mv->runs) mv->runs = pl_calloc(1, sizeof *mv->runs);
    if (!o && (!mv->runs || !set_add(mv->runs, t))) {
        pthread_mutex_unlock(&g_runs_mu);
        table_free(t);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: run tables");
    }
    pthread_mutex_unlock(&g_runs_mu);
    if (o) {
        table_free(t);
        t = o;
    }
    *out = t;
    return PL_OK;
}
