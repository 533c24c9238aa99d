/*
 * grammar/runs.c - the tables of runs.h: one pass over the vocabulary's trie in preorder,
 * decoding each path's UTF-8 as it goes, sorts every node into "still a run of the class"
 * (its tokens are runs, of the path's index) or "the first node leaving it" (an exit: its
 * subtree is skipped, the mask walks it from the right state). Built once per tokenizer and
 * class, in time linear in the trie (about 2 ms for Llama 3's 128k tokens).
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

void pl_gram_runs_free(pl_gram_runs *r) {
    while (r) {
        pl_gram_runs *next = r->next;
        pl_free(r->ranges);
        pl_free(r->cum);
        pl_free(r->late_id);
        pl_free(r->late_j);
        pl_free(r->groups);
        pl_free(r->exits);
        pl_free(r);
        r = next;
    }
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
                       pl_gram_runs **out) {
    const pl_gram_node *nodes = v->nodes;
    pl_gram_runs *t = pl_calloc(1, sizeof *t);
    path *ps = pl_malloc((v->max_len + 2) * sizeof *ps);
    int32_t *full_id = pl_malloc((v->n_sorted ? v->n_sorted : 1) * sizeof *full_id);
    uint32_t *full_j = pl_malloc((v->n_sorted ? v->n_sorted : 1) * sizeof *full_j);
    exit_rec *ex = NULL;
    size_t n_ex = 0, cap_ex = 0, n_full = 0;
    uint32_t *bucket = NULL;
    pl_status st = PL_OK;
    if (!t || !ps || !full_id || !full_j) goto oom;
    t->ranges = pl_malloc((n_pairs ? 2 * n_pairs : 1) * sizeof *t->ranges);
    if (!t->ranges) goto oom;
    memcpy(t->ranges, ranges, 2 * n_pairs * sizeof *ranges);
    t->n_pairs = n_pairs;
    t->words = ((size_t)v->n_vocab + 63) / 64;
    memset(&ps[0], 0, sizeof ps[0]);
    for (size_t i = 1; i < v->n_nodes;) {
        const pl_gram_node *nd = &nodes[i];
        const path *p = &ps[nd->depth - 1];
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
                       breaks_within(nodes, (uint32_t)i, need, bits)) {
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
            ex[n_ex++] = (exit_rec){.node = (uint32_t)i, .k = p->k, .byte = b};
            if (p->k > t->max_exit) t->max_exit = p->k;
            i = nd->end;
            continue;
        }
        ps[nd->depth] = c;
        uint32_t j = c.k + (c.need ? 1u : 0u);
        for (uint32_t q = 0; q < nd->tok_n; q++) {
            full_id[n_full] = v->sorted[nd->tok_lo + q];
            full_j[n_full++] = j;
            if (j > t->max_full) t->max_full = j;
        }
        i++;
    }
    t->n_full = n_full;
    /* the runs by index: whole bitmaps up to PL_GRAM_RUN_CUM, a list beyond */
    t->n_cum = t->max_full < PL_GRAM_RUN_CUM ? t->max_full : PL_GRAM_RUN_CUM;
    if (t->n_cum) {
        t->cum = pl_calloc((size_t)t->n_cum * t->words, sizeof *t->cum);
        if (!t->cum) goto oom;
    }
    size_t n_late = 0;
    for (size_t q = 0; q < n_full; q++) {
        if (full_j[q] > t->n_cum) n_late++;
        else t->cum[(size_t)(full_j[q] - 1) * t->words + ((uint32_t)full_id[q] >> 6)] |=
                 1ull << (full_id[q] & 63);
    }
    for (uint32_t j = 1; j < t->n_cum; j++) /* each bitmap holds the shorter runs too */
        for (size_t w = 0; w < t->words; w++)
            t->cum[(size_t)j * t->words + w] |= t->cum[(size_t)(j - 1) * t->words + w];
    if (n_late) {
        /* by index: a counting sort of the (few) long runs */
        size_t span = (size_t)(t->max_full - t->n_cum);
        bucket = pl_calloc(span + 1, sizeof *bucket);
        t->late_id = pl_malloc(n_late * sizeof *t->late_id);
        t->late_j = pl_malloc(n_late * sizeof *t->late_j);
        if (!bucket || !t->late_id || !t->late_j) goto oom;
        for (size_t q = 0; q < n_full; q++)
            if (full_j[q] > t->n_cum) bucket[full_j[q] - t->n_cum]++;
        for (size_t j = 1; j <= span; j++) bucket[j] += bucket[j - 1];
        for (size_t q = 0; q < n_full; q++)
            if (full_j[q] > t->n_cum) {
                size_t at = bucket[full_j[q] - t->n_cum - 1]++;
                t->late_id[at] = full_id[q];
                t->late_j[at] = full_j[q];
            }
        t->n_late = n_late;
        pl_free(bucket);
        bucket = NULL;
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
    pl_gram_runs_free(t);
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
                           const pl_gram_runs **out) {
    pthread_mutex_lock(&g_runs_mu);
    for (const pl_gram_runs *t = v->runs; t; t = t->next)
        if (t->n_pairs == n_pairs && !memcmp(t->ranges, ranges, 2 * n_pairs * sizeof *ranges)) {
            pthread_mutex_unlock(&g_runs_mu);
            *out = t;
            return PL_OK;
        }
    pthread_mutex_unlock(&g_runs_mu);
    /* built outside the lock; a table another thread added meanwhile wins */
    pl_gram_runs *t;
    PL_TRY(build(v, ranges, n_pairs, &t));
    pthread_mutex_lock(&g_runs_mu);
    for (const pl_gram_runs *o = v->runs; o; o = o->next)
        if (o->n_pairs == n_pairs && !memcmp(o->ranges, ranges, 2 * n_pairs * sizeof *ranges)) {
            pthread_mutex_unlock(&g_runs_mu);
            t->next = NULL;
            pl_gram_runs_free(t);
            *out = o;
            return PL_OK;
        }
    pl_gram_vocab *mv = (pl_gram_vocab *)v; /* the list is a cache the lock guards */
    t->next = mv->runs;
    mv->runs = t;
    pthread_mutex_unlock(&g_runs_mu);
    *out = t;
    return PL_OK;
}
