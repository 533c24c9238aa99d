/*
 * grammar/match.c - a parse state and how it moves: by a code point (stacks whose top class
 * holds it advance, then expand), by a byte (UTF-8 assembled here: the bytes of an
 * unfinished character are kept in the state, which keeps only the stacks that could still
 * take some character starting with them), by a token (its bytes, or a token reference).
 *
 * Expanding a stack: while its top is not a terminal, an alternative's end pops it (the rule
 * is done: continue below), a rule reference is replaced by the position after it (dropped
 * when that is the end of the alternative: a tail call) with one new stack per alternative of
 * the rule pushed on top. The result is a set: equal stacks are kept once (hashing). Without
 * left recursion (refused at compile) expansion ends; the stack and state limits of grammar.h
 * bound it anyway, failing with PL_ERR_TOO_LONG.
 */
#include <string.h>

#include "grammar/gram_build.h"
#include "util/alloc.h"

typedef struct scratch {
    uint32_t *work;       /* (n_work, cap_work) stacks waiting to be expanded, one after another */
    size_t n_work, cap_work;
    size_t *items;        /* (n_items, cap_items) (offset, length) pairs into work */
    size_t n_items, cap_items;
    uint64_t *slots;      /* dedup set: hash (upper 40 bits) | generation..., see add_stack */
    uint32_t *slot_idx;
    uint32_t *slot_gen;
    size_t n_slots;
    uint32_t gen;
} scratch;

pl_status pl_gram_scratch_create(void **out) {
    scratch *s = pl_calloc(1, sizeof *s);
    if (!s) return pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: matcher scratch");
    *out = s;
    return PL_OK;
}

void pl_gram_scratch_free(void *p) {
    scratch *s = p;
    if (!s) return;
    pl_free(s->work);
    pl_free(s->items);
    pl_free(s->slots);
    pl_free(s->slot_idx);
    pl_free(s->slot_gen);
    pl_free(s);
}

void pl_gram_state_free(pl_gram_state *st) {
    pl_free(st->pos);
    pl_free(st->start);
    memset(st, 0, sizeof *st);
}

static void state_clear(pl_gram_state *st) {
    st->n = 0;
    st->n_pos = 0;
    st->partial = 0;
    st->need = st->have = 0;
}

pl_status pl_gram_state_copy(pl_gram_state *dst, const pl_gram_state *src) {
    if (dst->cap_pos < src->n_pos || dst->cap_start < src->n + 1) {
        void *p = dst->pos, *q = dst->start;
        PL_TRY(pl_grow_array(&p, &dst->cap_pos, src->n_pos + 1, sizeof(uint32_t),
                             "grammar: parse state"));
        dst->pos = p;
        PL_TRY(pl_grow_array(&q, &dst->cap_start, src->n + 1, sizeof(uint32_t),
                             "grammar: parse state"));
        dst->start = q;
    }
    memcpy(dst->pos, src->pos, src->n_pos * sizeof *src->pos);
    if (src->start) memcpy(dst->start, src->start, (src->n + 1) * sizeof *src->start);
    else if (dst->start) dst->start[0] = 0;
    dst->n_pos = src->n_pos;
    dst->n = src->n;
    dst->partial = src->partial;
    dst->need = src->need;
    dst->have = src->have;
    return PL_OK;
}

static uint64_t hash_stack(const uint32_t *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return h;
}

/* Adds stack s[0..n) to out unless it is there (the dedup set belongs to out while it is
 * being built: reset_dedup before the first add). */
static pl_status add_stack(scratch *sc, pl_gram_state *out, const uint32_t *s, size_t n) {
    if (out->n >= PL_GRAM_MAX_STACKS)
        return pl_fail(PL_ERR_TOO_LONG, "grammar: more than %d parse stacks at once (the grammar "
                       "is too ambiguous)", PL_GRAM_MAX_STACKS);
    if (sc->n_slots < 2 * ((size_t)out->n + 1)) {
        /* grow the set and re-insert out's stacks */
        size_t ns = sc->n_slots ? sc->n_slots * 4 : 64;
        uint64_t *sl = pl_calloc(ns, sizeof *sl);
        uint32_t *si = pl_calloc(ns, sizeof *si), *sg = pl_calloc(ns, sizeof *sg);
        if (!sl || !si || !sg) {
            pl_free(sl), pl_free(si), pl_free(sg);
            return pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: parse state set");
        }
        pl_free(sc->slots), pl_free(sc->slot_idx), pl_free(sc->slot_gen);
        sc->slots = sl, sc->slot_idx = si, sc->slot_gen = sg, sc->n_slots = ns;
        sc->gen = 1;
        for (uint32_t i = 0; i < out->n; i++) {
            const uint32_t *t = out->pos + out->start[i];
            size_t tn = out->start[i + 1] - out->start[i];
            uint64_t h = hash_stack(t, tn);
            size_t k = h & (ns - 1);
            while (sg[k] == sc->gen) k = (k + 1) & (ns - 1);
            sl[k] = h, si[k] = i, sg[k] = sc->gen;
        }
    }
    uint64_t h = hash_stack(s, n);
    size_t k = h & (sc->n_slots - 1);
    while (sc->slot_gen[k] == sc->gen) {
        if (sc->slots[k] == h) {
            uint32_t i = sc->slot_idx[k];
            size_t tn = out->start[i + 1] - out->start[i];
            if (tn == n && (n == 0 || !memcmp(out->pos + out->start[i], s, n * sizeof *s))) return PL_OK;
        }
        k = (k + 1) & (sc->n_slots - 1);
    }
    void *p = out->pos, *q = out->start;
    PL_TRY(pl_grow_array(&p, &out->cap_pos, out->n_pos + n + 1, sizeof(uint32_t),
                         "grammar: parse state"));
    out->pos = p;
    PL_TRY(pl_grow_array(&q, &out->cap_start, out->n + 2, sizeof(uint32_t), "grammar: parse state"));
    out->start = q;
    if (out->n == 0) out->start[0] = 0;
    if (n) memcpy(out->pos + out->n_pos, s, n * sizeof *s);
    out->n_pos += n;
    sc->slots[k] = h, sc->slot_idx[k] = out->n, sc->slot_gen[k] = sc->gen;
    out->n++;
    out->start[out->n] = (uint32_t)out->n_pos;
    return PL_OK;
}

static void reset_dedup(scratch *sc) {
    if (++sc->gen == 0) { /* wrapped: clear for real */
        if (sc->slot_gen) memset(sc->slot_gen, 0, sc->n_slots * sizeof *sc->slot_gen);
        sc->gen = 1;
    }
}

/* Queues s[0..n) + extra (n_extra values) for expansion. s may point into sc->work only
 * through from_work (an offset there), since growing work moves it. */
static pl_status queue_at(scratch *sc, const uint32_t *s, size_t from_work, size_t n,
                          const uint32_t *extra, size_t n_extra) {
    if (n + n_extra > PL_GRAM_MAX_DEPTH)
        return pl_fail(PL_ERR_TOO_LONG, "grammar: a parse stack deeper than %d (nesting too deep)",
                       PL_GRAM_MAX_DEPTH);
    void *p = sc->work, *q = sc->items;
    PL_TRY(pl_grow_array(&p, &sc->cap_work, sc->n_work + n + n_extra + 1, sizeof(uint32_t),
                         "grammar: expansion"));
    sc->work = p;
    PL_TRY(pl_grow_array(&q, &sc->cap_items, sc->n_items + 2, sizeof(size_t), "grammar: expansion"));
    sc->items = q;
    if (!s) s = sc->work + from_work;
    if (n) memmove(sc->work + sc->n_work, s, n * sizeof *s);
    if (n_extra) memcpy(sc->work + sc->n_work + n, extra, n_extra * sizeof *extra);
    sc->items[sc->n_items++] = sc->n_work;
    sc->items[sc->n_items++] = n + n_extra;
    sc->n_work += n + n_extra;
    return PL_OK;
}

static pl_status queue(scratch *sc, const uint32_t *s, size_t n, const uint32_t *extra,
                       size_t n_extra) {
    static const uint32_t none[1] = {0};
    return queue_at(sc, n ? s : none, 0, n, extra, n_extra);
}

/* Expands everything queued into out (terminal tops and empty stacks). */
static pl_status expand_all(const pl_gram *g, scratch *sc, pl_gram_state *out) {
    const pl_gram_elem *el = g->elems;
    size_t steps = 0;
    while (sc->n_items > 0) {
        size_t len = sc->items[--sc->n_items];
        size_t off = sc->items[--sc->n_items];
        /* the item is the last thing in work only if nothing was queued after it */
        if (++steps > (size_t)PL_GRAM_MAX_STACKS * 64)
            return pl_fail(PL_ERR_TOO_LONG, "grammar: expanding a parse state took more than "
                           "%d steps (the grammar is too ambiguous)", PL_GRAM_MAX_STACKS * 64);
        if (len == 0) {
            PL_TRY(add_stack(sc, out, NULL, 0));
            sc->n_work = off;
            continue;
        }
        uint32_t top = sc->work[off + len - 1];
        const pl_gram_elem *e = &el[top];
        if (e->type == PL_GE_END) {
            sc->items[sc->n_items++] = off; /* pop: same storage, one shorter */
            sc->items[sc->n_items++] = len - 1;
            continue;
        }
        if (e->type != PL_GE_RULE) {
            PL_TRY(add_stack(sc, out, sc->work + off, len));
            sc->n_work = off;
            continue;
        }
        size_t n_alts;
        const uint32_t *alts = pl_gram_alts(g, e->value, &n_alts);
        size_t base = len - 1;
        uint32_t cont = top + 1;
        bool tail = el[cont].type == PL_GE_END;
        /* the item's storage is reused by the first new stack: copy the base out first */
        size_t n_base = tail ? base : base + 1;
        sc->work[off + len - 1] = cont;
        size_t end_before = sc->n_work;
        for (size_t a = 0; a < n_alts; a++) {
            uint32_t alt = alts[a];
            PL_TRY(queue_at(sc, NULL, off, n_base, &alt, 1));
        }
        /* move the queued copies down over the consumed item */
        size_t moved = sc->n_work - end_before;
        memmove(sc->work + off, sc->work + end_before, moved * sizeof(uint32_t));
        for (size_t i = sc->n_items - 2 * n_alts; i < sc->n_items; i += 2)
            sc->items[i] -= end_before - off;
        sc->n_work = off + moved;
    }
    return PL_OK;
}

/* out = the stacks of st advanced over code point cp. */
static pl_status step_cp(const pl_gram *g, const pl_gram_state *st, uint32_t cp,
                         pl_gram_state *out, scratch *sc) {
    reset_dedup(sc);
    sc->n_work = sc->n_items = 0;
    for (uint32_t i = 0; i < st->n; i++) {
        const uint32_t *s = st->pos + st->start[i];
        size_t n = st->start[i + 1] - st->start[i];
        if (n == 0) continue;
        const pl_gram_elem *e = &g->elems[s[n - 1]];
        if (e->type != PL_GE_CLASS || !pl_gram_class_has(g, &g->classes[e->value], cp)) continue;
        uint32_t next = s[n - 1] + 1;
        PL_TRY(queue(sc, s, n - 1, &next, 1));
        PL_TRY(expand_all(g, sc, out));
    }
    return PL_OK;
}

/* The code points a character could still be, given its bytes so far. false: none. */
static bool partial_range(uint32_t bits, int have, int need, uint32_t *lo, uint32_t *hi) {
    int total = have + need;
    uint32_t l = bits << (6 * need), h = l | ((1u << (6 * need)) - 1);
    static const uint32_t min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (l < min_of[total]) l = min_of[total];
    if (h > 0x10FFFF) h = 0x10FFFF;
    if (total == 3 && l >= 0xD800 && h <= 0xDFFF) return false;
    if (l > h) return false;
    *lo = l;
    *hi = h;
    return true;
}

bool pl_gram_state_step(const pl_gram *g, const pl_gram_state *st, uint8_t b, pl_gram_state *out,
                        void *scratch_p, pl_status *err) {
    scratch *sc = scratch_p;
    state_clear(out);
    *err = PL_OK;
    uint32_t bits;
    int have, need;
    if (st->need == 0) {
        if (b < 0x80) {
            *err = step_cp(g, st, b, out, sc);
            return *err == PL_OK && out->n > 0;
        }
        if ((b >> 5) == 6) need = 1, bits = b & 0x1F;
        else if ((b >> 4) == 14) need = 2, bits = b & 0x0F;
        else if ((b >> 3) == 30) need = 3, bits = b & 0x07;
        else return false;
        have = 1;
    } else {
        if ((b & 0xC0) != 0x80) return false;
        bits = (st->partial << 6) | (b & 0x3Fu);
        have = st->have + 1;
        need = st->need - 1;
        if (need == 0) {
            uint32_t lo, hi;
            if (!partial_range(bits, have, 0, &lo, &hi)) return false;
            *err = step_cp(g, st, bits, out, sc);
            return *err == PL_OK && out->n > 0;
        }
    }
    uint32_t lo, hi;
    if (!partial_range(bits, have, need, &lo, &hi)) return false;
    /* keep the stacks that could take such a character */
    reset_dedup(sc);
    for (uint32_t i = 0; i < st->n; i++) {
        const uint32_t *s = st->pos + st->start[i];
        size_t n = st->start[i + 1] - st->start[i];
        if (n == 0) continue;
        const pl_gram_elem *e = &g->elems[s[n - 1]];
        if (e->type != PL_GE_CLASS || !pl_gram_class_meets(g, &g->classes[e->value], lo, hi))
            continue;
        if ((*err = add_stack(sc, out, s, n)) != PL_OK) return false;
    }
    out->partial = bits;
    out->have = (uint8_t)have;
    out->need = (uint8_t)need;
    return out->n > 0;
}

/* ---- the matcher ----------------------------------------------------------------------- */

pl_status pl_gram_matcher_init(pl_gram_matcher *m, const pl_gram *g) {
    memset(m, 0, sizeof *m);
    m->g = g;
    PL_TRY(pl_gram_scratch_create(&m->scratch));
    scratch *sc = m->scratch;
    reset_dedup(sc);
    size_t n_alts;
    const uint32_t *alts = pl_gram_alts(g, g->root, &n_alts);
    pl_status st = PL_OK;
    sc->n_work = sc->n_items = 0;
    for (size_t a = 0; a < n_alts && st == PL_OK; a++) st = queue(sc, NULL, 0, &alts[a], 1);
    if (st == PL_OK) st = expand_all(g, sc, &m->cur);
    if (st != PL_OK) pl_gram_matcher_deinit(m);
    return st;
}

void pl_gram_matcher_deinit(pl_gram_matcher *m) {
    if (!m) return;
    pl_gram_state_free(&m->cur);
    pl_gram_scratch_free(m->scratch);
    pl_gram_walk_free(m->walk);
    m->scratch = NULL;
    m->walk = NULL;
}

pl_status pl_gram_matcher_copy(pl_gram_matcher *dst, const pl_gram_matcher *src) {
    memset(dst, 0, sizeof *dst);
    dst->g = src->g;
    pl_status st = pl_gram_scratch_create(&dst->scratch);
    if (st == PL_OK) st = pl_gram_state_copy(&dst->cur, &src->cur);
    if (st != PL_OK) pl_gram_matcher_deinit(dst);
    return st;
}

pl_status pl_gram_matcher_accept_bytes(pl_gram_matcher *m, const char *s, size_t n) {
    /* work on a copy so a refusal leaves the state as it was */
    pl_gram_state a = {0}, b = {0};
    pl_status st = pl_gram_state_copy(&a, &m->cur);
    for (size_t i = 0; i < n && st == PL_OK; i++) {
        if (!pl_gram_state_step(m->g, &a, (uint8_t)s[i], &b, m->scratch, &st)) {
            if (st == PL_OK)
                st = pl_fail(PL_ERR_INVALID_ARGUMENT, "grammar: byte %zu (0x%02x) is not allowed "
                             "here", i, (uint8_t)s[i]);
            break;
        }
        pl_gram_state t = a;
        a = b;
        b = t;
    }
    if (st == PL_OK) {
        pl_gram_state t = m->cur;
        m->cur = a;
        a = t;
    }
    pl_gram_state_free(&a);
    pl_gram_state_free(&b);
    return st;
}

/* The stacks of st whose top is a reference to token id (or a `!<...>` other than it),
 * advanced and expanded, into out. */
static pl_status refs_state(const pl_gram *g, scratch *sc, const pl_gram_state *st, int32_t id,
                            pl_gram_state *out) {
    state_clear(out);
    if (st->need) return PL_OK;
    reset_dedup(sc);
    sc->n_work = sc->n_items = 0;
    for (uint32_t i = 0; i < st->n; i++) {
        const uint32_t *s = st->pos + st->start[i];
        size_t n = st->start[i + 1] - st->start[i];
        if (n == 0) continue;
        const pl_gram_elem *e = &g->elems[s[n - 1]];
        bool ok = (e->type == PL_GE_TOKEN && e->value == (uint32_t)id) ||
                  (e->type == PL_GE_TOKEN_NOT && e->value != (uint32_t)id);
        if (!ok) continue;
        uint32_t next = s[n - 1] + 1;
        PL_TRY(queue(sc, s, n - 1, &next, 1));
        PL_TRY(expand_all(g, sc, out));
    }
    return PL_OK;
}

pl_status pl_gram_matcher_accept_token(pl_gram_matcher *m, const pl_gram_vocab *v, int32_t id) {
    scratch *sc = m->scratch;
    pl_gram_state refs = {0}, bytes_st = {0}, other = {0};
    pl_status st = refs_state(m->g, sc, &m->cur, id, &refs);
    size_t len = 0;
    const char *bytes = pl_gram_vocab_bytes(v, id, &len);
    /* the bytes, from a copy (a refusal leaves the state as it was) */
    bool by_bytes = false;
    if (st == PL_OK && len > 0) {
        st = pl_gram_state_copy(&bytes_st, &m->cur);
        by_bytes = st == PL_OK;
        for (size_t i = 0; i < len && by_bytes; i++) {
            by_bytes = pl_gram_state_step(m->g, &bytes_st, (uint8_t)bytes[i], &other, sc, &st);
            pl_gram_state t = bytes_st;
            bytes_st = other;
            other = t;
        }
    }
    if (st == PL_OK && !by_bytes && refs.n == 0)
        st = pl_fail(PL_ERR_INVALID_ARGUMENT, "grammar: token %d is not allowed here", (int)id);
    if (st == PL_OK) {
        pl_gram_state *keep;
        if (!by_bytes) keep = &refs;
        else if (refs.n == 0 || bytes_st.need) keep = &bytes_st; /* an unfinished character
                                                                    cannot be merged */
        else {
            /* both matched: the union */
            reset_dedup(sc);
            state_clear(&other);
            for (int side = 0; side < 2 && st == PL_OK; side++) {
                const pl_gram_state *x = side ? &refs : &bytes_st;
                for (uint32_t i = 0; i < x->n && st == PL_OK; i++)
                    st = add_stack(sc, &other, x->pos + x->start[i],
                                   x->start[i + 1] - x->start[i]);
            }
            keep = &other;
        }
        if (st == PL_OK) {
            pl_gram_state t = m->cur;
            m->cur = *keep;
            *keep = t;
        }
    }
    pl_gram_state_free(&refs);
    pl_gram_state_free(&bytes_st);
    pl_gram_state_free(&other);
    return st;
}

bool pl_gram_matcher_is_complete(const pl_gram_matcher *m) {
    if (m->cur.need) return false;
    for (uint32_t i = 0; i < m->cur.n; i++)
        if (m->cur.start[i + 1] == m->cur.start[i]) return true;
    return false;
}

bool pl_gram_matcher_can_continue(const pl_gram_matcher *m) {
    if (m->cur.need) return true;
    for (uint32_t i = 0; i < m->cur.n; i++)
        if (m->cur.start[i + 1] > m->cur.start[i]) return true;
    return false;
}
