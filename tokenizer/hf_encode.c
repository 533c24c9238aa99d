/*
 * tokenizer/hf_encode.c - encoding with a tokenizer.json, in the order Rust's
 * Tokenizer::encode runs:
 *
 *   text --(1) added tokens that are not normalized, on the raw text------------> ids
 *     \-- each stretch between them --(2) normalizer chain
 *           \--(3) normalized added tokens, on the normalized stretch ----------> ids
 *                \-- each stretch between them --(4) pre-tokenizer chain: words
 *                      \-- each word --(5) BPE model ------------------------------> ids
 *   and (6) the post-processor's ids before and after, with PL_TOK_ADD_SPECIAL.
 *
 * Words repeat: encoding a long text (more than CACHE_MIN_TEXT bytes) keeps a cache of short
 * words' ids for the call, as Rust's BPE model does (per model, there) - the tokenizer stays
 * immutable and shareable between threads.
 *
 * Added tokens are found leftmost-longest (tok_trie.h); a special one is skipped, its text
 * left to the model, unless PL_TOK_PARSE_SPECIAL; single_word, lstrip and rstrip are applied
 * as AddedVocabulary::find_matches does. Pre-tokenized pieces are ranges of one arena buffer;
 * every step maps a list of pieces to a new one. A piece remembers whether it starts at the
 * very beginning of the input, which Metaspace's prepend_scheme "first" asks.
 */
#include <string.h>

#include "tokenizer/hf.h"
#include "util/alloc.h"
#include "util/utf8.h"

typedef struct piece {
    size_t off, len; /* in the arena */
    bool origin;     /* starts at byte 0 of the text being encoded */
} piece;

typedef struct plist {
    piece *v;
    size_t n, cap;
} plist;

typedef struct span {
    size_t s, e;
    bool match;
} span;

/* A direct-mapped cache of word -> ids; words up to CACHE_WORD bytes with up to CACHE_IDS ids. */
#define CACHE_MIN_TEXT 4096
#define CACHE_SLOTS 8192
#define CACHE_WORD 22
#define CACHE_IDS 8

typedef struct cache_entry {
    uint64_t hash;
    uint8_t len, n_ids; /* len 0: empty slot */
    char word[CACHE_WORD];
    int32_t ids[CACHE_IDS];
} cache_entry;

typedef struct enc {
    const pl_tokenizer *t;
    const pl_hf *h;
    bool parse_special;
    pl_tok_matcher m;
    pl_tok_buf norm, scratch; /* the normalized stretch */
    pl_tok_buf arena;         /* pre-tokenizer strings */
    plist a, b;
    span *spans;
    size_t n_spans, cap_spans;
    span *kept;
    size_t cap_kept;
    pl_hf_bpe_scratch bpe;
    cache_entry *cache;       /* (CACHE_SLOTS) for long texts, else NULL */
    pl_tok_ids *out;
} enc;

// ---- piece lists ------------------------------------------------------------------------------

static pl_status plist_push(plist *l, size_t off, size_t len, bool origin) {
    if (len == 0) return PL_OK; /* empty pieces are dropped, as PreTokenizedString::split does */
    if (l->n == l->cap)
        PL_TRY(pl_grow_array((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v, "pre-tokenizer"));
    l->v[l->n++] = (piece){off, len, origin};
    return PL_OK;
}

static pl_status span_push(enc *e, size_t s, size_t en, bool match) {
    if (e->n_spans == e->cap_spans)
        PL_TRY(pl_grow_array((void **)&e->spans, &e->cap_spans, e->n_spans + 1, sizeof *e->spans,
                             "pre-tokenizer"));
    e->spans[e->n_spans++] = (span){s, en, match};
    return PL_OK;
}

/* Cuts piece p by e->spans (its matches and the stretches between, in order) according to
 * the behavior, as NormalizedString::split does; the results go to out. */
static pl_status cut(enc *e, const piece *p, pl_hf_behavior behavior, plist *out) {
    if (e->n_spans > e->cap_kept)
        PL_TRY(pl_grow_array((void **)&e->kept, &e->cap_kept, e->n_spans, sizeof *e->kept,
                             "pre-tokenizer"));
    size_t k = 0;
    bool prev = false;
    switch (behavior) {
    case PL_HF_ISOLATED:
        for (size_t i = 0; i < e->n_spans; i++) e->kept[k++] = e->spans[i];
        break;
    case PL_HF_REMOVED:
        for (size_t i = 0; i < e->n_spans; i++)
            if (!e->spans[i].match) e->kept[k++] = e->spans[i];
        break;
    case PL_HF_CONTIGUOUS:
        for (size_t i = 0; i < e->n_spans; i++) {
            if (k > 0 && e->spans[i].match == prev)
                e->kept[k - 1].e = e->spans[i].e;
            else
                e->kept[k++] = e->spans[i];
            prev = e->spans[i].match;
        }
        break;
    case PL_HF_MERGED_PREV: /* a match joins the stretch before it */
        for (size_t i = 0; i < e->n_spans; i++) {
            if (k > 0 && e->spans[i].match && !prev)
                e->kept[k - 1].e = e->spans[i].e;
            else
                e->kept[k++] = e->spans[i];
            prev = e->spans[i].match;
        }
        break;
    case PL_HF_MERGED_NEXT: /* a match joins the stretch after it: the same, right to left */
        for (size_t i = e->n_spans; i-- > 0;) {
            if (k > 0 && e->spans[i].match && !prev)
                e->kept[k - 1].s = e->spans[i].s;
            else
                e->kept[k++] = e->spans[i];
            prev = e->spans[i].match;
        }
        for (size_t i = 0; i < k / 2; i++) {
            span x = e->kept[i];
            e->kept[i] = e->kept[k - 1 - i];
            e->kept[k - 1 - i] = x;
        }
        break;
    }
    for (size_t i = 0; i < k; i++)
        PL_TRY(plist_push(out, p->off + e->kept[i].s, e->kept[i].e - e->kept[i].s,
                          p->origin && e->kept[i].s == 0));
    return PL_OK;
}

/* e->spans for the regex over piece p (invert flips what counts as a match). */
static pl_status regex_spans(enc *e, const pl_tok_regex *re, const piece *p, bool invert) {
    e->n_spans = 0;
    const char *s = e->arena.p + p->off;
    size_t prev = 0;
    pl_tok_regex_iter it = {0};
    for (;;) {
        size_t st, en;
        bool found;
        PL_TRY(pl_tok_regex_next(re, &e->m, s, p->len, &it, &st, &en, &found));
        if (!found) break;
        if (st > prev) PL_TRY(span_push(e, prev, st, invert));
        PL_TRY(span_push(e, st, en, !invert));
        prev = en;
    }
    if (prev < p->len) PL_TRY(span_push(e, prev, p->len, invert));
    return PL_OK;
}

/* e->spans where each character for which is_delim holds is a match of its own. */
static pl_status char_spans(enc *e, const piece *p, bool (*is_delim)(uint32_t, const void *),
                            const void *arg) {
    e->n_spans = 0;
    const unsigned char *s = (const unsigned char *)e->arena.p + p->off;
    size_t last = 0;
    for (size_t i = 0; i < p->len;) {
        uint32_t cp;
        int k = pl_utf8_decode((const char *)s + i, p->len - i, &cp);
        if (is_delim(cp, arg)) {
            if (last < i) PL_TRY(span_push(e, last, i, false));
            PL_TRY(span_push(e, i, i + (size_t)k, true));
            last = i + (size_t)k;
        }
        i += (size_t)k;
    }
    if (last < p->len) PL_TRY(span_push(e, last, p->len, false));
    return PL_OK;
}

static bool numeric(uint32_t cp, const void *arg) {
    (void)arg;
    return pl_tok_is_numeric(cp);
}

static bool is_repl(uint32_t cp, const void *arg) { return cp == *(const uint32_t *)arg; }

// ---- pre-tokenizer steps ----------------------------------------------------------------------

/* Metaspace: spaces become the replacement, which is prepended per the scheme; then, with
 * split, each replacement starts a new piece. */
static pl_status metaspace(enc *e, const pl_hf_pre *st, plist *in, plist *out) {
    size_t need = 0;
    for (size_t i = 0; i < in->n; i++) need += in->v[i].len * 4 + 4;
    PL_TRY(pl_tok_buf_reserve(&e->arena, need)); /* no reallocation below: sources stay put */
    uint32_t repl;
    pl_utf8_decode(st->repl, strlen(st->repl), &repl);
    for (size_t i = 0; i < in->n; i++) {
        const piece *p = &in->v[i];
        const char *s = e->arena.p + p->off;
        size_t start = e->arena.n;
        char *o = e->arena.p + start;
        bool starts_with_space = p->len > 0 && s[0] == ' ';
        bool starts_with_repl = p->len >= (size_t)st->repl_len &&
                                memcmp(s, st->repl, (size_t)st->repl_len) == 0;
        bool prepend = !starts_with_space && !starts_with_repl &&
                       (st->prepend == PL_HF_PREPEND_ALWAYS ||
                        (st->prepend == PL_HF_PREPEND_FIRST && p->origin));
        size_t k = 0;
        if (prepend) {
            memcpy(o, st->repl, (size_t)st->repl_len);
            k += (size_t)st->repl_len;
        }
        for (size_t j = 0; j < p->len; j++) {
            if (s[j] == ' ') {
                memcpy(o + k, st->repl, (size_t)st->repl_len);
                k += (size_t)st->repl_len;
            } else {
                o[k++] = s[j];
            }
        }
        e->arena.n += k;
        piece q = {start, k, p->origin};
        if (!st->split) {
            PL_TRY(plist_push(out, q.off, q.len, q.origin));
            continue;
        }
        PL_TRY(char_spans(e, &q, is_repl, &repl));
        PL_TRY(cut(e, &q, PL_HF_MERGED_NEXT, out));
    }
    return PL_OK;
}

static pl_status byte_level(enc *e, const pl_hf_pre *st, plist *in, plist *out) {
    if (st->add_prefix_space) {
        size_t need = 0;
        for (size_t i = 0; i < in->n; i++) need += in->v[i].len + 1;
        PL_TRY(pl_tok_buf_reserve(&e->arena, need));
        for (size_t i = 0; i < in->n; i++) {
            piece *p = &in->v[i];
            if (e->arena.p[p->off] == ' ') continue;
            size_t start = e->arena.n;
            e->arena.p[start] = ' ';
            memcpy(e->arena.p + start + 1, e->arena.p + p->off, p->len);
            e->arena.n += p->len + 1;
            p->off = start;
            p->len++;
        }
    }
    if (!st->use_regex) {
        for (size_t i = 0; i < in->n; i++)
            PL_TRY(plist_push(out, in->v[i].off, in->v[i].len, in->v[i].origin));
        return PL_OK;
    }
    for (size_t i = 0; i < in->n; i++) {
        PL_TRY(regex_spans(e, &st->re, &in->v[i], false));
        PL_TRY(cut(e, &in->v[i], PL_HF_ISOLATED, out));
    }
    return PL_OK;
}

static pl_status pre_step(enc *e, const pl_hf_pre *st, plist *in, plist *out) {
    out->n = 0;
    switch (st->kind) {
    case PL_HF_SPLIT:
        for (size_t i = 0; i < in->n; i++) {
            PL_TRY(regex_spans(e, &st->re, &in->v[i], st->invert));
            PL_TRY(cut(e, &in->v[i], st->behavior, out));
        }
        return PL_OK;
    case PL_HF_DIGITS:
        for (size_t i = 0; i < in->n; i++) {
            PL_TRY(char_spans(e, &in->v[i], numeric, NULL));
            PL_TRY(cut(e, &in->v[i], st->individual ? PL_HF_ISOLATED : PL_HF_CONTIGUOUS, out));
        }
        return PL_OK;
    case PL_HF_METASPACE:
        return metaspace(e, st, in, out);
    case PL_HF_BYTE_LEVEL:
        return byte_level(e, st, in, out);
    }
    return PL_OK;
}

/* (5) with the cache in front. */
static pl_status word(enc *e, const char *w, size_t n) {
    if (!e->cache || n > CACHE_WORD)
        return pl_hf_bpe_word(&e->h->model, w, n, &e->bpe, e->out);
    uint64_t h = pl_tok_hash_bytes(w, n);
    cache_entry *c = &e->cache[h & (CACHE_SLOTS - 1)];
    if (c->len == n && c->hash == h && memcmp(c->word, w, n) == 0)
        return pl_tok_ids_append(e->out, c->ids, c->n_ids);
    size_t before = e->out->n;
    PL_TRY(pl_hf_bpe_word(&e->h->model, w, n, &e->bpe, e->out));
    size_t k = e->out->n - before;
    if (k <= CACHE_IDS) {
        c->hash = h;
        c->len = (uint8_t)n;
        c->n_ids = (uint8_t)k;
        memcpy(c->word, w, n);
        memcpy(c->ids, e->out->v + before, k * sizeof *c->ids);
    }
    return PL_OK;
}

/* (4) and (5): one stretch of normalized text through the pre-tokenizers and the model. */
static pl_status words(enc *e, const char *s, size_t n, bool origin) {
    if (n == 0) return PL_OK;
    e->arena.n = 0;
    PL_TRY(pl_tok_buf_put(&e->arena, s, n));
    e->a.n = 0;
    PL_TRY(plist_push(&e->a, 0, n, origin));
    plist *in = &e->a, *out = &e->b;
    for (int i = 0; i < e->h->n_pre; i++) {
        PL_TRY(pre_step(e, &e->h->pre[i], in, out));
        plist *x = in;
        in = out;
        out = x;
    }
    for (size_t i = 0; i < in->n; i++) PL_TRY(word(e, e->arena.p + in->v[i].off, in->v[i].len));
    return PL_OK;
}

// ---- added tokens ------------------------------------------------------------------------------

static bool word_before(const char *s, size_t at) {
    if (at == 0) return false;
    size_t i = at - 1;
    while (i > 0 && pl_utf8_is_cont((unsigned char)s[i])) i--;
    uint32_t cp;
    pl_utf8_decode(s + i, at - i, &cp);
    return pl_tok_is_word_char(cp);
}

static bool word_at(const char *s, size_t len, size_t at) {
    if (at >= len) return false;
    uint32_t cp;
    pl_utf8_decode(s + at, len - at, &cp);
    return pl_tok_is_word_char(cp);
}

/* Start of the run of white space that ends at `at`, not going below `floor`. */
static size_t space_back(const char *s, size_t at, size_t floor) {
    while (at > floor) {
        size_t i = at - 1;
        while (i > floor && pl_utf8_is_cont((unsigned char)s[i])) i--;
        uint32_t cp;
        pl_utf8_decode(s + i, at - i, &cp);
        if (!pl_tok_is_white_space(cp)) break;
        at = i;
    }
    return at;
}

static size_t space_fwd(const char *s, size_t len, size_t at) {
    while (at < len) {
        uint32_t cp;
        int k = pl_utf8_decode(s + at, len - at, &cp);
        if (!pl_tok_is_white_space(cp)) break;
        at += (size_t)k;
    }
    return at;
}

static pl_status normalized_stretch(enc *e, const char *s, size_t n, bool origin);

/* Splits s[0..len) at the added tokens of trie (phase 1: raw text, or 3: a normalized
 * stretch); ids go out, stretches between go on to the next phase. */
static pl_status split_added(enc *e, const pl_tok_trie *trie, const char *s, size_t len,
                             bool origin, bool raw) {
    size_t cur = 0, from = 0, at, mlen;
    int32_t ix;
    while (pl_tok_trie_find(trie, s, len, from, &at, &mlen, &ix)) {
        const pl_hf_added *a = &e->h->added[ix];
        size_t start = at, stop = at + mlen;
        from = stop; /* the search goes on after the match, whatever becomes of it */
        if (a->special && !e->parse_special) continue;
        if (a->single_word && (word_before(s, start) || word_at(s, len, stop))) continue;
        if (a->lstrip) start = space_back(s, start, cur);
        if (a->rstrip) stop = space_fwd(s, len, stop);
        if (start < cur) start = cur;
        if (cur < start)
            PL_TRY(raw ? normalized_stretch(e, s + cur, start - cur, origin && cur == 0)
                       : words(e, s + cur, start - cur, origin && cur == 0));
        PL_TRY(pl_tok_ids_push(e->out, a->id));
        cur = stop;
        if (from < cur) from = cur;
    }
    if (cur < len)
        PL_TRY(raw ? normalized_stretch(e, s + cur, len - cur, origin && cur == 0)
                   : words(e, s + cur, len - cur, origin && cur == 0));
    return PL_OK;
}

/* (2) and (3). The normalized text stays in e->norm while its stretches are processed
 * (words() copies what it needs into the arena). */
static pl_status normalized_stretch(enc *e, const char *s, size_t n, bool origin) {
    PL_TRY(pl_hf_normalize(e->h, &e->m, s, n, &e->norm, &e->scratch));
    return split_added(e, &e->h->trie_norm, e->norm.p ? e->norm.p : "", e->norm.n, origin, false);
}

// ---- the entry point --------------------------------------------------------------------------

pl_status pl_hf_encode(const pl_tokenizer *t, const char *text, size_t len, unsigned flags,
                       pl_tok_ids *out) {
    const pl_hf *h = t->impl;
    enc e = {.t = t, .h = h, .parse_special = flags & PL_TOK_PARSE_SPECIAL, .out = out};
    PL_TRY(pl_tok_matcher_init(&e.m));
    bool special = flags & PL_TOK_ADD_SPECIAL;
    pl_status s = PL_OK;
    if (len >= CACHE_MIN_TEXT && !(e.cache = pl_calloc(CACHE_SLOTS, sizeof *e.cache)))
        s = pl_fail(PL_ERR_OUT_OF_MEMORY, "encode: word cache");
    if (special) s = pl_tok_ids_append(out, h->prefix, h->n_prefix);
    if (s == PL_OK) s = split_added(&e, &h->trie_raw, text, len, true, true);
    if (s == PL_OK && special) s = pl_tok_ids_append(out, h->suffix, h->n_suffix);
    pl_tok_matcher_free(&e.m);
    pl_tok_buf_free(&e.norm);
    pl_tok_buf_free(&e.scratch);
    pl_tok_buf_free(&e.arena);
    pl_free(e.a.v);
    pl_free(e.b.v);
    pl_free(e.spans);
    pl_free(e.kept);
    pl_hf_bpe_scratch_free(&e.bpe);
    pl_free(e.cache);
    return s;
}
