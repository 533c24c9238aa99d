/*
 * grammar/mask.c - the tokens a parse state allows, and the per-state cache of them.
 *
 * A miss takes the run path when it can (runs.h): the state's next characters come from one
 * class A (a JSON string's characters, an email's letters and digits) that every class it
 * meets holds whole or not at all. Then the state after j characters of A is the same for all
 * of them: a chain of one step per run length decides every token that is a run of A (whole
 * bitmaps per length, from the tokenizer's table for A), and the tokens that leave A are
 * walked from the chain's state at the place they leave it, grouped by that place and the
 * byte: a dead group costs one step. So a state inside a JSON string, where nearly all of
 * Llama 3's 128k tokens are allowed, costs a few hundred steps instead of a walk over the
 * trie's 275k nodes. Every token's verdict is the one its own bytes would give (the chain's
 * steps are the ones its characters would take), so the result is the walk's.
 *
 * Otherwise a miss walks the token trie depth first, keeping the parse state of each depth: a
 * node's state is its parent's advanced by the node's byte; when that refuses the byte the
 * whole subtree is skipped, else every token ending at the node is allowed. So the cost is
 * the number of trie nodes whose bytes the grammar can still take, not the vocabulary.
 * Both paths keep what a big subtree allows from the state at its top in the same cache as
 * whole masks (keyed by the state and the node): the state after a `"` or a `.` recurs.
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
#include "grammar/runs.h"
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

/* The cache key of the tokens below trie node `node` (0: the whole vocabulary) from a state:
 * the node, n, the unfinished character, the stack starts, the positions. */
static pl_status make_key(const pl_gram_state *st, uint32_t node, uint32_t **key, size_t *len) {
    size_t n = 5 + (size_t)st->n + 1 + st->n_pos;
    uint32_t *k = pl_malloc(n * sizeof *k);
    if (!k) return pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: mask cache key");
    k[0] = node;
    k[1] = st->n;
    k[2] = st->partial;
    k[3] = st->need;
    k[4] = st->have;
    if (st->n) memcpy(k + 5, st->start, ((size_t)st->n + 1) * sizeof *k);
    else k[5] = 0;
    if (st->n_pos) memcpy(k + 6 + st->n, st->pos, st->n_pos * sizeof *k);
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

/* Takes key (and a copy of the mask: bits, or ids[0..n_ids) when ids is not NULL) into the
 * cache; on failure frees key. */
static void insert(pl_gram_cache *c, uint64_t h, uint32_t *key, size_t key_len,
                   const uint64_t *bits, size_t n_words, const uint32_t *ids, size_t n_ids) {
    size_t n_set = n_ids;
    if (!ids)
        for (size_t w = 0; w < n_words; w++) n_set += (size_t)__builtin_popcountll(bits[w]);
    entry ne = {.hash = h, .key = key, .key_len = key_len};
    size_t cost = key_len * sizeof *key;
    if (ids) {
        ne.ids = pl_malloc((n_ids ? n_ids : 1) * sizeof *ne.ids);
        if (ne.ids && n_ids) memcpy(ne.ids, ids, n_ids * sizeof *ids);
        ne.n_ids = n_ids;
        cost += n_ids * sizeof(uint32_t);
    } else if (n_set * sizeof(uint32_t) < n_words * sizeof(uint64_t)) {
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

#define PL_GRAM_RUN_LEVELS 4

typedef struct walk {
    pl_gram_state *states; /* (cap) one per depth */
    size_t cap;
    uint64_t *bits;        /* (n_words) */
    size_t n_words;
    /* the run path, per level of nesting (a table below an exit of the one above) */
    struct level {
        pl_gram_state *chain; /* (cap_chain) the state after j characters of the class */
        size_t cap_chain;
        pl_gram_state after;  /* the state after a group's exit byte */
    } level[PL_GRAM_RUN_LEVELS];
    uint32_t *ra, *rb;     /* (cap_ra, cap_rb) code point ranges: the class A, another class */
    size_t cap_ra, cap_rb, n_ra;
    uint8_t *rel;          /* (n_rel) per grammar class: how it meets A (REL_*), when rel_gen */
    uint32_t *rel_gen;
    size_t n_rel;
    uint32_t gen;
    uint32_t *ids;         /* (n_ids, cap_ids) tokens an exit's subtree allows, for the cache */
    size_t n_ids, cap_ids;
} walk;

static void walk_free(walk *w) {
    for (size_t i = 0; i < w->cap; i++) pl_gram_state_free(&w->states[i]);
    for (int l = 0; l < PL_GRAM_RUN_LEVELS; l++) {
        for (size_t i = 0; i < w->level[l].cap_chain; i++) pl_gram_state_free(&w->level[l].chain[i]);
        pl_free(w->level[l].chain);
        pl_gram_state_free(&w->level[l].after);
    }
    pl_free(w->states);
    pl_free(w->bits);
    pl_free(w->ra);
    pl_free(w->rb);
    pl_free(w->rel);
    pl_free(w->rel_gen);
    pl_free(w->ids);
    pl_free(w);
}

/* The reference: every node of the trie from `from`, depth first, nothing cached. */
static pl_status walk_plain(const pl_gram *g, const pl_gram_vocab *v, const pl_gram_state *from,
                            void *scratch, walk *w) {
    memset(w->bits, 0, w->n_words * sizeof *w->bits);
    PL_TRY(pl_gram_state_copy(&w->states[0], from));
    const pl_gram_node *nodes = v->nodes;
    for (size_t i = 1; i < v->n_nodes;) {
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

/* ---- the run path ------------------------------------------------------------------------ */

enum { REL_NONE = 0, REL_ALL = 1, REL_SOME = 2 };

/* Class c's code points as sorted, merged, inclusive ranges within Unicode (negation applied). */
static pl_status class_ranges(const pl_gram *g, uint32_t c, uint32_t **buf, size_t *cap,
                              size_t *out_pairs) {
    const pl_gram_class *k = &g->classes[c];
    const uint32_t *r = g->ranges + k->first;
    void *p = *buf;
    PL_TRY(pl_grow_array(&p, cap, 2 * (size_t)k->n + 2, sizeof(uint32_t), "grammar: mask walk"));
    *buf = p;
    uint32_t *o = *buf;
    size_t n = 0;
    if (!k->negated) {
        for (uint32_t i = 0; i < k->n && r[2 * i] <= 0x10FFFF; i++) {
            o[2 * n] = r[2 * i];
            o[2 * n + 1] = r[2 * i + 1] > 0x10FFFF ? 0x10FFFF : r[2 * i + 1];
            n++;
        }
    } else {
        uint32_t from = 0;
        for (uint32_t i = 0; i < k->n && from <= 0x10FFFF; i++) {
            if (r[2 * i] > from) {
                o[2 * n] = from;
                o[2 * n + 1] = r[2 * i] - 1 > 0x10FFFF ? 0x10FFFF : r[2 * i] - 1;
                n++;
            }
            if (r[2 * i + 1] >= 0x10FFFF) from = 0x110000;
            else if (r[2 * i + 1] + 1 > from) from = r[2 * i + 1] + 1;
        }
        if (from <= 0x10FFFF) {
            o[2 * n] = from;
            o[2 * n + 1] = 0x10FFFF;
            n++;
        }
    }
    *out_pairs = n;
    return PL_OK;
}

/* How ranges x meet ranges a (both sorted, merged): none of a, all of it, or some. */
static int relation(const uint32_t *x, size_t nx, const uint32_t *a, size_t na) {
    bool any = false, all = true;
    size_t i = 0;
    for (size_t j = 0; j < na; j++) {
        uint32_t lo = a[2 * j], hi = a[2 * j + 1];
        while (i < nx && x[2 * i + 1] < lo) i++;
        if (i == nx || x[2 * i] > hi) {
            all = false;
            continue;
        }
        any = true;
        if (x[2 * i] > lo || x[2 * i + 1] < hi) all = false; /* merged: one range or a gap */
    }
    return !any ? REL_NONE : all ? REL_ALL : REL_SOME;
}

static uint64_t range_size(const uint32_t *r, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) s += (uint64_t)r[2 * i + 1] - r[2 * i] + 1;
    return s;
}

/* How grammar class c meets the walk's class A (memoised for the current A). */
static pl_status rel_of(const pl_gram *g, walk *w, uint32_t c, int *out) {
    if (w->rel_gen[c] == w->gen) {
        *out = w->rel[c];
        return PL_OK;
    }
    size_t nb;
    PL_TRY(class_ranges(g, c, &w->rb, &w->cap_rb, &nb));
    w->rel[c] = (uint8_t)relation(w->rb, nb, w->ra, w->n_ra);
    w->rel_gen[c] = w->gen;
    *out = w->rel[c];
    return PL_OK;
}

/* Whether every class at st's tops holds all of A or none of it. */
static pl_status uniform(const pl_gram *g, walk *w, const pl_gram_state *st, bool *out) {
    *out = false;
    if (st->need) return PL_OK;
    for (uint32_t i = 0; i < st->n; i++) {
        size_t n = st->start[i + 1] - st->start[i];
        if (n == 0) continue;
        const pl_gram_elem *e = &g->elems[st->pos[st->start[i] + n - 1]];
        if (e->type != PL_GE_CLASS) continue;
        int r;
        PL_TRY(rel_of(g, w, e->value, &r));
        if (r == REL_SOME) return PL_OK;
    }
    *out = true;
    return PL_OK;
}

/* Picks A: the largest class at st's tops that every other top class holds whole or not at
 * all (into w->ra). false: none fits (too few tops to share, or they cut each other). */
#define PL_GRAM_RUN_MAX_TOPS 32
static pl_status pick_class(const pl_gram *g, walk *w, const pl_gram_state *st, bool *found) {
    uint32_t tops[PL_GRAM_RUN_MAX_TOPS];
    size_t n_tops = 0;
    *found = false;
    for (uint32_t i = 0; i < st->n; i++) {
        size_t n = st->start[i + 1] - st->start[i];
        if (n == 0) continue;
        const pl_gram_elem *e = &g->elems[st->pos[st->start[i] + n - 1]];
        if (e->type != PL_GE_CLASS) continue;
        size_t k = 0;
        while (k < n_tops && tops[k] != e->value) k++;
        if (k < n_tops) continue;
        if (n_tops == PL_GRAM_RUN_MAX_TOPS) return PL_OK;
        tops[n_tops++] = e->value;
    }
    uint64_t best_size = 1; /* a class of one code point gains nothing */
    uint32_t best = 0;
    for (size_t c = 0; c < n_tops; c++) {
        size_t na;
        PL_TRY(class_ranges(g, tops[c], &w->ra, &w->cap_ra, &na));
        uint64_t size = range_size(w->ra, na);
        if (size <= best_size) continue;
        bool fits = true;
        for (size_t d = 0; d < n_tops && fits; d++) {
            if (d == c) continue;
            size_t nb;
            PL_TRY(class_ranges(g, tops[d], &w->rb, &w->cap_rb, &nb));
            fits = relation(w->rb, nb, w->ra, na) != REL_SOME;
        }
        if (fits) {
            best_size = size;
            best = tops[c];
            *found = true;
        }
    }
    if (*found) {
        PL_TRY(class_ranges(g, best, &w->ra, &w->cap_ra, &w->n_ra));
        if (++w->gen == 0) {
            memset(w->rel_gen, 0, w->n_rel * sizeof *w->rel_gen);
            w->gen = 1;
        }
    }
    return PL_OK;
}

/* Allows token id: in the walk's bitmap, and in its list when one is kept. */
static pl_status allow(walk *w, int32_t id, bool list) {
    w->bits[id >> 6] |= 1ull << (id & 63);
    if (!list) return PL_OK;
    if (w->n_ids == w->cap_ids) {
        void *p = w->ids;
        PL_TRY(pl_grow_array(&p, &w->cap_ids, w->n_ids + 1, sizeof *w->ids, "grammar: mask walk"));
        w->ids = p;
    }
    w->ids[w->n_ids++] = (uint32_t)id;
    return PL_OK;
}

/* Walks the trie below node e (inclusive) from st, the state at e (after its byte); list:
 * also lists the tokens allowed in w->ids. */
static pl_status walk_below(const pl_gram *g, const pl_gram_vocab *v, uint32_t e,
                            const pl_gram_state *st, void *scratch, walk *w, bool list) {
    const pl_gram_node *nodes = v->nodes;
    for (uint32_t k = 0; k < nodes[e].tok_n; k++)
        PL_TRY(allow(w, v->sorted[nodes[e].tok_lo + k], list));
    if (nodes[e].end == e + 1) return PL_OK;
    PL_TRY(pl_gram_state_copy(&w->states[nodes[e].depth], st));
    for (uint32_t i = e + 1; i < nodes[e].end;) {
        const pl_gram_node *nd = &nodes[i];
        pl_status err;
        if (!pl_gram_state_step(g, &w->states[nd->depth - 1], nd->byte, &w->states[nd->depth],
                                scratch, &err)) {
            if (err != PL_OK) return err;
            i = nd->end;
            continue;
        }
        for (uint32_t k = 0; k < nd->tok_n; k++) PL_TRY(allow(w, v->sorted[nd->tok_lo + k], list));
        i++;
    }
    return PL_OK;
}

static bool state_equal(const pl_gram_state *a, const pl_gram_state *b) {
    return a->n == b->n && a->n_pos == b->n_pos && a->need == b->need && a->have == b->have &&
           a->partial == b->partial &&
           (a->n == 0 || !memcmp(a->start, b->start, ((size_t)a->n + 1) * sizeof *a->start)) &&
           (a->n_pos == 0 || !memcmp(a->pos, b->pos, a->n_pos * sizeof *a->pos));
}

static pl_status walk_runs(const pl_gram *g, const pl_gram_vocab *v, const pl_gram_state *from,
                           uint32_t root, void *scratch, walk *w, int lv, bool list, bool *done);

/* An exit's subtree from st, the state at node e: cached per (state, node) when it is big
 * enough to be worth a key, as the same state after the same byte recurs across run lengths
 * and steps; a big one takes the run path below e when a class fits there. lv: the nesting
 * level below; list: also list what it allows in w->ids (for the cache of an enclosing one). */
#define PL_GRAM_SUB_CACHE_NODES 64
#define PL_GRAM_SUB_RUNS_NODES 256
static pl_status exit_subtree(const pl_gram *g, const pl_gram_vocab *v, uint32_t e,
                              const pl_gram_state *st, void *scratch, walk *w, int lv, bool list) {
    uint32_t size = v->nodes[e].end - e;
    if (size < PL_GRAM_SUB_CACHE_NODES) return walk_below(g, v, e, st, scratch, w, list);
    pl_gram_cache *c = g->cache;
    uint32_t *key;
    size_t key_len;
    PL_TRY(make_key(st, e, &key, &key_len));
    uint64_t h = hash_key(key, key_len);
    pthread_mutex_lock(&c->mu);
    const entry *hit = find(c, h, key, key_len);
    pl_status s = PL_OK;
    if (hit) {
        c->stats.sub_hits++;
        for (size_t i = 0; i < hit->n_ids && s == PL_OK; i++)
            s = allow(w, (int32_t)hit->ids[i], list);
    } else {
        c->stats.sub_misses++;
    }
    pthread_mutex_unlock(&c->mu);
    if (hit || s != PL_OK) {
        pl_free(key);
        return s;
    }
    size_t from = w->n_ids;
    bool done = false;
    if (size >= PL_GRAM_SUB_RUNS_NODES && lv < PL_GRAM_RUN_LEVELS)
        s = walk_runs(g, v, st, e, scratch, w, lv, true, &done);
    if (s == PL_OK && !done) s = walk_below(g, v, e, st, scratch, w, true);
    if (s != PL_OK) {
        pl_free(key);
        return s;
    }
    insert(c, h, key, key_len, NULL, 0, w->ids + from, w->n_ids - from);
    if (!list) w->n_ids = from;
    return PL_OK;
}

/* The ASCII bytes some top class of st holds: an exit byte outside them is refused at once. */
static void first_ascii(const pl_gram *g, const pl_gram_state *st, uint64_t out[2]) {
    out[0] = out[1] = 0;
    for (uint32_t i = 0; i < st->n; i++) {
        size_t n = st->start[i + 1] - st->start[i];
        if (n == 0) continue;
        const pl_gram_elem *e = &g->elems[st->pos[st->start[i] + n - 1]];
        if (e->type != PL_GE_CLASS) continue;
        out[0] |= g->classes[e->value].ascii[0];
        out[1] |= g->classes[e->value].ascii[1];
    }
}

/* The plain walk: each child of the trie's root from `from`, its subtree walked (or found in
 * the cache) when the state takes its byte. */
static pl_status walk_trie(const pl_gram *g, const pl_gram_vocab *v, const pl_gram_state *from,
                           void *scratch, walk *w) {
    memset(w->bits, 0, w->n_words * sizeof *w->bits);
    w->n_ids = 0;
    uint64_t ascii[2] = {~0ull, ~0ull};
    if (!from->need) first_ascii(g, from, ascii);
    pl_gram_state *after = &w->level[0].after;
    for (uint32_t i = 1; i < v->n_nodes; i = v->nodes[i].end) {
        uint8_t b = v->nodes[i].byte;
        if (b < 0x80 && !((ascii[b >> 6] >> (b & 63)) & 1)) continue;
        pl_status err;
        if (!pl_gram_state_step(g, from, b, after, scratch, &err)) {
            if (err != PL_OK) return err;
            continue;
        }
        PL_TRY(exit_subtree(g, v, i, after, scratch, w, 1, false));
    }
    return PL_OK;
}

/* The run path (see the top of this file) for the tokens below trie node root (0: all), from
 * `from`, the state at root: into w->bits (and w->ids when list). *done false: it does not
 * apply here (no class fits, the table has no runs, or the class stops being shared before
 * the longest run ends); the caller walks the trie. lv: the nesting level (its buffers). */
static pl_status walk_runs(const pl_gram *g, const pl_gram_vocab *v, const pl_gram_state *from,
                           uint32_t root, void *scratch, walk *w, int lv, bool list, bool *done) {
    *done = false;
    if (from->need) return PL_OK;
    bool found;
    PL_TRY(pick_class(g, w, from, &found));
    if (!found) return PL_OK;
    const pl_gram_runs *t;
    PL_TRY(pl_gram_runs_get(v, w->ra, w->n_ra, root, &t));
    if (!t || t->n_full == 0) return PL_OK;
    struct level *L = &w->level[lv];
    uint32_t top = t->max_full > t->max_exit ? t->max_full : t->max_exit;
    if (L->cap_chain < (size_t)top + 1) {
        void *p = L->chain;
        size_t old = L->cap_chain;
        PL_TRY(pl_grow_array(&p, &L->cap_chain, (size_t)top + 1, sizeof(pl_gram_state),
                             "grammar: mask walk"));
        L->chain = p;
        memset(L->chain + old, 0, (L->cap_chain - old) * sizeof *L->chain);
    }
    pl_gram_state *chain = L->chain;
    /* the chain: chain[j] is the state after j characters of A (any of them); a state that a
     * character leaves as it was (an unbounded run) is every later one too: chain[fix] */
    uint32_t rep = w->ra[0]; /* any member would do: the classes met hold all or none */
    PL_TRY(pl_gram_state_copy(&chain[0], from));
    uint32_t last = 0, fix = UINT32_MAX; /* the last state computed; the fixed point */
    bool dead = false, cut = false;
    while (last < top) {
        bool u = true;
        if (last > 0) PL_TRY(uniform(g, w, &chain[last], &u));
        if (!u) {
            cut = true;
            break;
        }
        pl_status err;
        bool alive = pl_gram_state_step_cp(g, &chain[last], rep, &chain[last + 1], scratch, &err);
        if (err != PL_OK) return err;
        last++;
        if (!alive) {
            dead = true;
            break;
        }
        if (state_equal(&chain[last], &chain[last - 1])) {
            fix = last;
            last = top;
            break;
        }
    }
    /* runs and exits longer than the chain: only when it died (so they are refused) */
    if (cut && (t->max_full > last || t->max_exit > last)) return PL_OK;
    uint32_t alive_to = dead ? last - 1 : last; /* chain[0..alive_to] are alive */
    if (root == 0) {
        memset(w->bits, 0, w->n_words * sizeof *w->bits);
        w->n_ids = 0;
    } else {
        const pl_gram_node *r = &v->nodes[root];
        for (uint32_t k = 0; k < r->tok_n; k++) PL_TRY(allow(w, v->sorted[r->tok_lo + k], list));
    }
    uint32_t listed_from = 1;
    if (alive_to > 0 && t->n_cum) {
        uint32_t j = alive_to < t->n_cum ? alive_to : t->n_cum;
        const uint64_t *c = t->cum + (size_t)(j - 1) * t->words;
        for (size_t i = 0; i < w->n_words; i++) w->bits[i] |= c[i];
        listed_from = j + 1;
    }
    uint32_t to = alive_to < t->max_full ? alive_to : t->max_full;
    if (to >= listed_from)
        for (uint32_t q = t->full_at[listed_from - 1]; q < t->full_at[to]; q++)
            PL_TRY(allow(w, t->full_id[q], list));
    /* the exits, by run length then byte: one step per group, then each exit's subtree */
    pl_gram_state *after = &L->after;
    uint64_t ascii[2] = {0, 0};
    uint32_t ascii_k = UINT32_MAX;
    for (size_t q = 0; q < t->n_groups && t->groups[q].k <= alive_to; q++) {
        const pl_gram_run_group *gr = &t->groups[q];
        const pl_gram_state *at = &chain[gr->k < fix ? gr->k : fix];
        if (gr->byte < 0x80) {
            if (ascii_k != gr->k) first_ascii(g, at, ascii), ascii_k = gr->k;
            if (!((ascii[gr->byte >> 6] >> (gr->byte & 63)) & 1)) continue;
        }
        pl_status err;
        if (!pl_gram_state_step(g, at, gr->byte, after, scratch, &err)) {
            if (err != PL_OK) return err;
            continue;
        }
        for (uint32_t x = 0; x < gr->n; x++)
            PL_TRY(exit_subtree(g, v, t->exits[gr->first + x], after, scratch, w, lv + 1, list));
    }
    *done = true;
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
    w->n_rel = m->g->n_classes ? m->g->n_classes : 1;
    w->rel = pl_calloc(w->n_rel, sizeof *w->rel);
    w->rel_gen = pl_calloc(w->n_rel, sizeof *w->rel_gen);
    w->cap = need_states;
    w->n_words = words;
    if (!w->states || !w->bits || !w->rel || !w->rel_gen) {
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
    PL_TRY(make_key(&m->cur, 0, &key, &key_len));
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
        bool done = false;
        if (st == PL_OK) st = walk_runs(g, v, &m->cur, 0, m->scratch, w, 0, false, &done);
        if (st == PL_OK && done) {
            pthread_mutex_lock(&c->mu);
            c->stats.runs++;
            pthread_mutex_unlock(&c->mu);
        }
        if (st == PL_OK && !done) st = walk_trie(g, v, &m->cur, m->scratch, w);
        if (st != PL_OK) {
            pl_free(key);
            return st;
        }
        for (size_t i = 0; i < w->n_words; i++) bits[i] |= w->bits[i];
        insert(c, h, key, key_len, w->bits, w->n_words, NULL, 0);
    }
    add_token_refs(g, &m->cur, v->n_vocab, eog, n_eog, bits);
    return PL_OK;
}

pl_status pl_gram_mask_plain(pl_gram_matcher *m, const pl_gram_vocab *v, const int32_t *eog,
                             size_t n_eog, uint64_t *bits) {
    walk *w = NULL;
    PL_TRY(walk_for(m, v, &w));
    PL_TRY(walk_plain(m->g, v, &m->cur, m->scratch, w));
    for (size_t i = 0; i < w->n_words; i++) bits[i] |= w->bits[i];
    add_token_refs(m->g, &m->cur, v->n_vocab, eog, n_eog, bits);
    return PL_OK;
}
