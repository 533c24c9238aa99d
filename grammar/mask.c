/*
 * grammar/mask.c - the tokens a parse state allows, and the per-state cache of them.
 *
 * A miss walks the token trie depth first, keeping the parse state of each depth: a node's
 * state is its parent's advanced by the node's byte; when that refuses the byte the whole
 * subtree is skipped, else every token ending at the node is allowed. So the cost is the
 * number of trie nodes whose bytes the grammar can still take, not the vocabulary.
 *
 * The cache maps a state (its stacks and unfinished character, as bytes) to its mask. Masks
 * are kept as the list of allowed ids when that is smaller than a bitmap, else as the
 * bitmap. The cache lives in the grammar, shared by every sequence that uses it, behind a
 * mutex (the walk runs outside it); when it holds more than PL_GRAM_CACHE_BYTES it is
 * emptied (counted in resets). Token references (`<[id]>`, `!<...>`) are added after the
 * lookup: they cost one bit (or one pass) and depend on the end-of-text ids.
 */
#include <pthread.h>
#include <string.h>

#include "grammar/gram_build.h"
#include "grammar/vocab.h"
#include "util/alloc.h"

typedef struct entry {
    uint64_t hash;
    uint32_t *key;        /* (key_len) */
    size_t key_len;
    uint32_t *ids;        /* (n_ids) allowed ids, when a list */
    uint64_t *bits;       /* (n_words) when a bitmap */
    size_t n_ids, n_words;
} entry;

struct pl_gram_cache {
    pthread_mutex_t mu;
    entry *e;             /* (cap) open addressing; key NULL = empty */
    size_t cap, n;
    size_t bytes;
    pl_gram_cache_stats stats;
};

pl_status pl_gram_cache_create(pl_gram_cache **out) {
    pl_gram_cache *c = pl_calloc(1, sizeof *c);
    if (!c) return pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: mask cache");
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return PL_OK;
}

static void clear(pl_gram_cache *c) {
    for (size_t i = 0; i < c->cap; i++) {
        pl_free(c->e[i].key);
        pl_free(c->e[i].ids);
        pl_free(c->e[i].bits);
    }
    pl_free(c->e);
    c->e = NULL;
    c->cap = c->n = c->bytes = 0;
}

void pl_gram_cache_free(pl_gram_cache *c) {
    if (!c) return;
    clear(c);
    pthread_mutex_destroy(&c->mu);
    pl_free(c);
}

void pl_gram_cache_stats_get(const pl_gram *g, pl_gram_cache_stats *out) {
    pl_gram_cache *c = g->cache;
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    out->bytes = c->bytes;
    out->entries = c->n;
    pthread_mutex_unlock(&c->mu);
}

/* The state as cache key: n, the stack starts, the positions, the unfinished character. */
static pl_status make_key(const pl_gram_state *st, uint32_t **key, size_t *len) {
    size_t n = 4 + (size_t)st->n + 1 + st->n_pos;
    uint32_t *k = pl_malloc(n * sizeof *k);
    if (!k) return pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: mask cache key");
    k[0] = st->n;
    k[1] = st->partial;
    k[2] = st->need;
    k[3] = st->have;
    if (st->n) memcpy(k + 4, st->start, ((size_t)st->n + 1) * sizeof *k);
    else k[4] = 0;
    if (st->n_pos) memcpy(k + 5 + st->n, st->pos, st->n_pos * sizeof *k);
    *key = k;
    *len = n;
    return PL_OK;
}

static uint64_t hash_key(const uint32_t *k, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= k[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h | 1; /* never 0 */
}

static entry *find(pl_gram_cache *c, uint64_t h, const uint32_t *k, size_t n) {
    if (!c->cap) return NULL;
    for (size_t i = h & (c->cap - 1);; i = (i + 1) & (c->cap - 1)) {
        entry *e = &c->e[i];
        if (!e->key) return NULL;
        if (e->hash == h && e->key_len == n && !memcmp(e->key, k, n * sizeof *k)) return e;
    }
}

static void or_entry(const entry *e, uint64_t *bits) {
    if (e->bits) {
        for (size_t w = 0; w < e->n_words; w++) bits[w] |= e->bits[w];
    } else {
        for (size_t i = 0; i < e->n_ids; i++) bits[e->ids[i] >> 6] |= 1ull << (e->ids[i] & 63);
    }
}

/* Takes key (and the mask copy made from bits) into the cache; on failure frees key. */
static void insert(pl_gram_cache *c, uint64_t h, uint32_t *key, size_t key_len,
                   const uint64_t *bits, size_t n_words) {
    size_t n_set = 0;
    for (size_t w = 0; w < n_words; w++) n_set += (size_t)__builtin_popcountll(bits[w]);
    entry ne = {.hash = h, .key = key, .key_len = key_len};
    size_t cost = key_len * sizeof *key;
    if (n_set * sizeof(uint32_t) < n_words * sizeof(uint64_t)) {
        ne.ids = pl_malloc((n_set ? n_set : 1) * sizeof *ne.ids);
        if (ne.ids)
            for (size_t w = 0; w < n_words; w++)
                for (uint64_t m = bits[w]; m; m &= m - 1)
                    ne.ids[ne.n_ids++] = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(m));
        cost += n_set * sizeof(uint32_t);
    } else {
        ne.bits = pl_malloc(n_words * sizeof *ne.bits);
        if (ne.bits) memcpy(ne.bits, bits, n_words * sizeof *bits);
        ne.n_words = n_words;
        cost += n_words * sizeof(uint64_t);
    }
    if (!ne.ids && !ne.bits) {
        pl_free(key);
        return; /* out of memory: the mask is simply not cached */
    }
    pthread_mutex_lock(&c->mu);
    if (find(c, h, key, key_len)) { /* another thread put it meanwhile */
        pthread_mutex_unlock(&c->mu);
        pl_free(key), pl_free(ne.ids), pl_free(ne.bits);
        return;
    }
    if (c->bytes + cost > PL_GRAM_CACHE_BYTES) {
        clear(c);
        c->stats.resets++;
    }
    if ((c->n + 1) * 2 > c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        entry *e = pl_calloc(cap, sizeof *e);
        if (!e) {
            pthread_mutex_unlock(&c->mu);
            pl_free(key), pl_free(ne.ids), pl_free(ne.bits);
            return;
        }
        for (size_t i = 0; i < c->cap; i++) {
            if (!c->e[i].key) continue;
            size_t j = c->e[i].hash & (cap - 1);
            while (e[j].key) j = (j + 1) & (cap - 1);
            e[j] = c->e[i];
        }
        pl_free(c->e);
        c->e = e;
        c->cap = cap;
    }
    size_t j = h & (c->cap - 1);
    while (c->e[j].key) j = (j + 1) & (c->cap - 1);
    c->e[j] = ne;
    c->n++;
    c->bytes += cost;
    pthread_mutex_unlock(&c->mu);
}

/* ---- the walk --------------------------------------------------------------------------- */

typedef struct walk {
    pl_gram_state *states; /* (cap) one per depth */
    size_t cap;
    uint64_t *bits;        /* (n_words) */
    size_t n_words;
} walk;

static void walk_free(walk *w) {
    for (size_t i = 0; i < w->cap; i++) pl_gram_state_free(&w->states[i]);
    pl_free(w->states);
    pl_free(w->bits);
    pl_free(w);
}

static pl_status walk_trie(const pl_gram *g, const pl_gram_vocab *v, const pl_gram_state *from,
                           void *scratch, walk *w) {
    memset(w->bits, 0, w->n_words * sizeof *w->bits);
    PL_TRY(pl_gram_state_copy(&w->states[0], from));
    const pl_gram_node *nodes = v->nodes;
    size_t i = 1;
    while (i < v->n_nodes) {
        const pl_gram_node *nd = &nodes[i];
        pl_status err;
        if (!pl_gram_state_step(g, &w->states[nd->depth - 1], nd->byte, &w->states[nd->depth],
                                scratch, &err)) {
            if (err != PL_OK) return err;
            i = nd->end;
            continue;
        }
        for (uint32_t k = 0; k < nd->tok_n; k++) {
            int32_t id = v->sorted[nd->tok_lo + k];
            w->bits[id >> 6] |= 1ull << (id & 63);
        }
        i++;
    }
    return PL_OK;
}

/* Token references at the stacks' tops. */
static void add_token_refs(const pl_gram *g, const pl_gram_state *st, int n_vocab,
                           const int32_t *eog, size_t n_eog, uint64_t *bits) {
    if (st->need) return;
    for (uint32_t i = 0; i < st->n; i++) {
        size_t n = st->start[i + 1] - st->start[i];
        if (n == 0) continue;
        const pl_gram_elem *e = &g->elems[st->pos[st->start[i] + n - 1]];
        if (e->type == PL_GE_TOKEN) {
            if (e->value < (uint32_t)n_vocab) bits[e->value >> 6] |= 1ull << (e->value & 63);
        } else if (e->type == PL_GE_TOKEN_NOT) {
            /* every token but the one named and end-of-text, added to what the bytes allow
             * (the named token may still be allowed by its text elsewhere) */
            size_t words = ((size_t)n_vocab + 63) / 64;
            for (size_t w = 0; w < words; w++) {
                uint64_t m = ~0ull;
                if (w == words - 1 && n_vocab % 64) m = (1ull << (n_vocab % 64)) - 1;
                if (e->value >> 6 == w) m &= ~(1ull << (e->value & 63));
                for (size_t k = 0; k < n_eog; k++)
                    if (eog[k] >= 0 && (size_t)eog[k] >> 6 == w) m &= ~(1ull << (eog[k] & 63));
                bits[w] |= m;
            }
        }
    }
}

static pl_status walk_for(pl_gram_matcher *m, const pl_gram_vocab *v, walk **out) {
    walk *w = m->walk;
    size_t need_states = v->max_len + 1, words = ((size_t)v->n_vocab + 63) / 64;
    if (w && w->cap >= need_states && w->n_words == words) {
        *out = w;
        return PL_OK;
    }
    if (w) walk_free(w);
    m->walk = NULL;
    w = pl_calloc(1, sizeof *w);
    if (!w) return pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: mask walk");
    w->states = pl_calloc(need_states, sizeof *w->states);
    w->bits = pl_calloc(words ? words : 1, sizeof *w->bits);
    w->cap = need_states;
    w->n_words = words;
    if (!w->states || !w->bits) {
        walk_free(w);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: mask walk");
    }
    m->walk = w;
    *out = w;
    return PL_OK;
}

void pl_gram_walk_free(void *w) {
    if (w) walk_free(w);
}

pl_status pl_gram_mask(pl_gram_matcher *m, const pl_gram_vocab *v, const int32_t *eog,
                       size_t n_eog, uint64_t *bits) {
    const pl_gram *g = m->g;
    pl_gram_cache *c = g->cache;
    uint32_t *key = NULL;
    size_t key_len = 0;
    PL_TRY(make_key(&m->cur, &key, &key_len));
    uint64_t h = hash_key(key, key_len);
    pthread_mutex_lock(&c->mu);
    const entry *e = find(c, h, key, key_len);
    if (e) {
        or_entry(e, bits);
        c->stats.hits++;
    } else {
        c->stats.misses++;
    }
    pthread_mutex_unlock(&c->mu);
    if (e) {
        pl_free(key);
    } else {
        walk *w = NULL;
        pl_status st = walk_for(m, v, &w);
        if (st == PL_OK) st = walk_trie(g, v, &m->cur, m->scratch, w);
        if (st != PL_OK) {
            pl_free(key);
            return st;
        }
        for (size_t i = 0; i < w->n_words; i++) bits[i] |= w->bits[i];
        insert(c, h, key, key_len, w->bits, w->n_words);
    }
    add_token_refs(g, &m->cur, v->n_vocab, eog, n_eog, bits);
    return PL_OK;
}
