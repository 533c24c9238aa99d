/*
 * tokenizer/hf_load.c - reading a Hugging Face tokenizer.json (and its tokenizer_config.json)
 * into pl_hf: every field checked, every component either understood or refused.
 *
 * Order of work: the JSON is parsed whole (jansson, duplicate keys refused); the model's
 * vocabulary and the added tokens fix the ids (0 .. n_model - 1 from the vocabulary without
 * gaps or duplicates, then the added tokens that are not in it, again without gaps); the
 * normalizer and pre-tokenizer chains are flattened (nested Sequences become one list) and
 * their regexes compiled; the merges become a pair -> (rank, merged id) table; added tokens get
 * their normalized form and go into the two tries; the post-processor becomes the ids to put
 * before and after a sequence; the decoder chain is flattened and checked to be streamable;
 * then tokenizer_config.json fills in the facts.
 *
 * Errors name the file and the JSON path of the field ("model.merges[12]",
 * "pre_tokenizer.pretokenizers[0].pattern.Regex"): PL_ERR_FORMAT for what is malformed or
 * inconsistent, PL_ERR_UNSUPPORTED for a valid component this code does not implement.
 * Nothing built so far leaks: the partly filled pl_hf is freed by pl_hf_free.
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tokenizer/hf.h"
#include "util/alloc.h"
#include "util/utf8.h"

#define JP 256 /* room for a JSON path */

typedef struct loader {
    const char *file;
    pl_tokenizer *t;
    pl_hf *h;
} loader;

static const pl_tok_ops hf_ops;

// ---- errors and JSON helpers -----------------------------------------------------------------

static pl_status failv(pl_status code, const loader *L, const char *jp, const char *fmt,
                       va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    return pl_fail(code, "%s: %s: %s", L->file, jp[0] ? jp : "(root)", msg);
}

static pl_status bad(const loader *L, const char *jp, const char *fmt, ...) PL_PRINTF(3, 4);
static pl_status bad(const loader *L, const char *jp, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pl_status s = failv(PL_ERR_FORMAT, L, jp, fmt, ap);
    va_end(ap);
    return s;
}

static pl_status unsupported(const loader *L, const char *jp, const char *fmt, ...)
    PL_PRINTF(3, 4);
static pl_status unsupported(const loader *L, const char *jp, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pl_status s = failv(PL_ERR_UNSUPPORTED, L, jp, fmt, ap);
    va_end(ap);
    return s;
}

static pl_status oom(const loader *L, const char *what) {
    return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: %s", L->file, what);
}

/* A path too long for JP bytes is cut short; it is only ever part of a message. */
static void jp_key(char *out, const char *parent, const char *key) {
    if (snprintf(out, JP, parent[0] ? "%s.%s" : "%s%s", parent, key) >= JP) out[JP - 1] = '\0';
}

static void jp_idx(char *out, const char *parent, size_t i) {
    if (snprintf(out, JP, "%s[%zu]", parent, i) >= JP) out[JP - 1] = '\0';
}

static bool is_null(json_t *v) { return !v || json_is_null(v); }

static pl_status opt_bool(const loader *L, json_t *obj, const char *key, const char *jp,
                          bool dflt, bool *out) {
    json_t *v = json_object_get(obj, key);
    *out = dflt;
    if (is_null(v)) return PL_OK;
    char p[JP];
    jp_key(p, jp, key);
    if (!json_is_boolean(v)) return bad(L, p, "expected true or false");
    *out = json_is_true(v);
    return PL_OK;
}

/* A string field; *out NULL when absent or null. */
static pl_status opt_string(const loader *L, json_t *obj, const char *key, const char *jp,
                            const char **out, size_t *out_len) {
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (out_len) *out_len = 0;
    if (is_null(v)) return PL_OK;
    char p[JP];
    jp_key(p, jp, key);
    if (!json_is_string(v)) return bad(L, p, "expected a string");
    *out = json_string_value(v);
    if (out_len) *out_len = json_string_length(v);
    return PL_OK;
}

static pl_status req_string(const loader *L, json_t *obj, const char *key, const char *jp,
                            const char **out, size_t *out_len) {
    PL_TRY(opt_string(L, obj, key, jp, out, out_len));
    if (!*out) {
        char p[JP];
        jp_key(p, jp, key);
        return bad(L, p, "missing (a string is required)");
    }
    return PL_OK;
}

static pl_status opt_uint(const loader *L, json_t *obj, const char *key, const char *jp,
                          uint32_t dflt, uint32_t max, uint32_t *out) {
    json_t *v = json_object_get(obj, key);
    *out = dflt;
    if (is_null(v)) return PL_OK;
    char p[JP];
    jp_key(p, jp, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return bad(L, p, "expected a non-negative integer");
    if (json_integer_value(v) > (json_int_t)max)
        return unsupported(L, p, "%lld is larger than the supported %u",
                           (long long)json_integer_value(v), max);
    *out = (uint32_t)json_integer_value(v);
    return PL_OK;
}

/* obj must be an object with a string "type"; *type gets it. */
static pl_status type_of(const loader *L, json_t *obj, const char *jp, const char **type) {
    if (!json_is_object(obj)) return bad(L, jp, "expected an object");
    return req_string(L, obj, "type", jp, type, NULL);
}

/* One character (a Metaspace replacement, a Strip content): UTF-8 into out. */
static pl_status one_char(const loader *L, json_t *obj, const char *key, const char *jp,
                          const char *dflt, char out[4], int *out_len) {
    const char *s;
    size_t n;
    PL_TRY(opt_string(L, obj, key, jp, &s, &n));
    if (!s) s = dflt, n = strlen(dflt);
    char p[JP];
    jp_key(p, jp, key);
    if (n == 0) return bad(L, p, "expected one character, got an empty string");
    uint32_t cp;
    int k = pl_utf8_decode(s, n, &cp);
    if ((size_t)k != n) return bad(L, p, "expected one character, got \"%s\"", s);
    memcpy(out, s, n);
    *out_len = k;
    return PL_OK;
}

/* "pattern": {"String": s} or {"Regex": s}. */
static pl_status read_pattern(const loader *L, json_t *obj, const char *jp, const char **out,
                              size_t *out_len, bool *is_regex) {
    char p[JP];
    jp_key(p, jp, "pattern");
    json_t *pat = json_object_get(obj, "pattern");
    if (!json_is_object(pat)) return bad(L, p, "expected {\"String\": ...} or {\"Regex\": ...}");
    json_t *str = json_object_get(pat, "String"), *re = json_object_get(pat, "Regex");
    if ((str != NULL) == (re != NULL) || json_object_size(pat) != 1)
        return bad(L, p, "expected exactly one of \"String\" and \"Regex\"");
    json_t *v = str ? str : re;
    char q[JP];
    jp_key(q, p, str ? "String" : "Regex");
    if (!json_is_string(v)) return bad(L, q, "expected a string");
    *out = json_string_value(v);
    *out_len = json_string_length(v);
    *is_regex = re != NULL;
    if (*out_len > 65536) return unsupported(L, q, "a %zu-byte pattern", *out_len);
    return PL_OK;
}

/* Parses a Sequence's list field (`key`) by calling one() on each element; depth bounds the
 * nesting so a hostile file cannot recurse deeply. */
typedef pl_status (*one_fn)(loader *L, json_t *obj, const char *jp, int depth);

static pl_status each_in(loader *L, json_t *obj, const char *key, const char *jp, int depth,
                         one_fn one) {
    char p[JP];
    jp_key(p, jp, key);
    json_t *list = json_object_get(obj, key);
    if (!json_is_array(list)) return bad(L, p, "expected a list");
    if (depth >= PL_HF_MAX_DEPTH)
        return unsupported(L, p, "Sequences nested more than %d deep", PL_HF_MAX_DEPTH);
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        char q[JP];
        jp_idx(q, p, i);
        PL_TRY(one(L, e, q, depth + 1));
    }
    return PL_OK;
}

static char *dup_bytes(const char *s, size_t n) {
    char *p = pl_malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

// ---- the vocabulary and the added tokens -----------------------------------------------------

typedef struct added_json {
    json_t *obj;
    const char *content;
    size_t len;
    int32_t id;
} added_json;

/* Reads model.vocab and added_tokens, fixes every id, and fills t->piece_of / t->special,
 * h->strings and h->added. */
static pl_status read_vocab(loader *L, json_t *model, json_t *added_list) {
    pl_tokenizer *t = L->t;
    pl_hf *h = L->h;
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) return bad(L, "model.vocab", "expected an object");
    size_t n_model = json_object_size(vocab);
    if (n_model == 0) return bad(L, "model.vocab", "empty");
    if (n_model > PL_TOK_MAX_VOCAB)
        return unsupported(L, "model.vocab", "%zu tokens (at most %d)", n_model,
                           PL_TOK_MAX_VOCAB);
    size_t n_added_json = 0;
    if (!is_null(added_list)) {
        if (!json_is_array(added_list)) return bad(L, "added_tokens", "expected a list");
        n_added_json = json_array_size(added_list);
        if (n_added_json > PL_TOK_MAX_VOCAB)
            return unsupported(L, "added_tokens", "%zu tokens (at most %d)", n_added_json,
                               PL_TOK_MAX_VOCAB);
    }
    /* The model's ids: each key's id in [0, n_model), each id once, so no gaps either. */
    const char **vocab_key = pl_calloc(n_model, sizeof *vocab_key);
    size_t *vocab_len = pl_calloc(n_model, sizeof *vocab_len);
    added_json *aj = pl_calloc(n_added_json ? n_added_json : 1, sizeof *aj);
    pl_status s = PL_OK;
    if (!vocab_key || !vocab_len || !aj) {
        s = oom(L, "vocabulary");
        goto done;
    }
    const char *key;
    json_t *val;
    size_t total = 0;
    json_object_foreach(vocab, key, val) {
        char p[JP];
        snprintf(p, JP, "model.vocab[\"%.64s\"]", key);
        if (!json_is_integer(val)) {
            s = bad(L, p, "expected an integer id");
            goto done;
        }
        json_int_t id = json_integer_value(val);
        if (id < 0 || (size_t)id >= n_model) {
            s = bad(L, p, "id %lld is outside 0 .. %zu (the vocabulary's ids must be 0 .. n-1 "
                    "without gaps)", (long long)id, n_model - 1);
            goto done;
        }
        if (vocab_key[id]) {
            s = bad(L, p, "id %lld is also the id of \"%.64s\"", (long long)id, vocab_key[id]);
            goto done;
        }
        size_t len = strlen(key);
        if (len == 0 || len > PL_HF_MAX_PIECE_BYTES) {
            s = unsupported(L, p, "a token of %zu bytes (1 .. %d supported)", len,
                            PL_HF_MAX_PIECE_BYTES);
            goto done;
        }
        vocab_key[id] = key;
        vocab_len[id] = len;
        total += len + 1;
    }
    /* Added tokens: one already in the vocabulary keeps its id there; the others take the ids
     * after the vocabulary, again without gaps or duplicates. */
    size_t n_new = 0;
    for (size_t i = 0; i < n_added_json; i++) {
        char p[JP];
        jp_idx(p, "added_tokens", i);
        json_t *o = json_array_get(added_list, i);
        if (!json_is_object(o)) {
            s = bad(L, p, "expected an object");
            goto done;
        }
        const char *content;
        size_t len;
        if ((s = req_string(L, o, "content", p, &content, &len)) != PL_OK) goto done;
        json_t *idv = json_object_get(o, "id");
        if (!json_is_integer(idv)) {
            s = bad(L, p, "id: expected an integer");
            goto done;
        }
        json_int_t id = json_integer_value(idv);
        if (len == 0 || len > PL_HF_MAX_ADDED_BYTES) {
            s = (len == 0 ? bad : unsupported)(L, p, "content of %zu bytes (1 .. %d supported)",
                                               len, PL_HF_MAX_ADDED_BYTES);
            goto done;
        }
        if (id < 0 || id >= (json_int_t)(n_model + n_added_json)) {
            s = bad(L, p, "id %lld is out of range (the vocabulary has %zu ids and there are %zu "
                    "added tokens)", (long long)id, n_model, n_added_json);
            goto done;
        }
        if ((size_t)id < n_model &&
            (vocab_len[id] != len || memcmp(vocab_key[id], content, len) != 0)) {
            s = bad(L, p, "\"%.64s\" has id %lld, which is the vocabulary's id of \"%.64s\"",
                    content, (long long)id, vocab_key[id]);
            goto done;
        }
        aj[i] = (added_json){o, content, len, (int32_t)id};
        if ((size_t)id >= n_model) {
            n_new++;
            total += len + 1;
        }
    }
    if (n_model + n_new > PL_TOK_MAX_VOCAB) {
        s = unsupported(L, "added_tokens", "%zu ids in all (at most %d)", n_model + n_new,
                        PL_TOK_MAX_VOCAB);
        goto done;
    }
    /* The new ids must be exactly n_model .. n_model + n_new - 1. */
    if (n_new > 0) {
        uint8_t *seen = pl_calloc(n_new, 1);
        if (!seen) {
            s = oom(L, "added tokens");
            goto done;
        }
        size_t dup = SIZE_MAX;
        for (size_t i = 0; i < n_added_json; i++) {
            size_t k = (size_t)aj[i].id - n_model;
            if ((size_t)aj[i].id < n_model || k >= n_new) continue;
            if (seen[k]) dup = i;
            seen[k] = 1;
        }
        size_t missing = 0;
        while (missing < n_new && seen[missing]) missing++;
        pl_free(seen);
        if (dup != SIZE_MAX) {
            char p[JP];
            jp_idx(p, "added_tokens", dup);
            s = bad(L, p, "id %d is also the id of another added token", (int)aj[dup].id);
            goto done;
        }
        if (missing < n_new) {
            s = bad(L, "added_tokens", "no token has id %zu (the ids must have no gaps)",
                    n_model + missing);
            goto done;
        }
    }
    t->n_vocab = (int)(n_model + n_new);
    h->model.n_vocab = (int)n_model;
    t->piece_of = pl_calloc((size_t)t->n_vocab, sizeof *t->piece_of);
    t->special = pl_calloc((size_t)t->n_vocab, 1);
    h->strings = pl_malloc(total);
    h->added = pl_calloc(n_added_json ? n_added_json : 1, sizeof *h->added);
    if (!t->piece_of || !t->special || !h->strings || !h->added) {
        s = oom(L, "vocabulary");
        goto done;
    }
    size_t at = 0;
    for (size_t id = 0; id < n_model; id++) {
        memcpy(h->strings + at, vocab_key[id], vocab_len[id] + 1);
        t->piece_of[id] = h->strings + at;
        at += vocab_len[id] + 1;
    }
    for (size_t i = 0; i < n_added_json; i++) {
        char p[JP];
        jp_idx(p, "added_tokens", i);
        int32_t id = aj[i].id;
        if ((size_t)id >= n_model) {
            memcpy(h->strings + at, aj[i].content, aj[i].len + 1);
            t->piece_of[id] = h->strings + at;
            at += aj[i].len + 1;
        }
        pl_hf_added *a = &h->added[h->n_added++];
        a->id = id;
        a->content = t->piece_of[id];
        a->len = aj[i].len;
        bool special;
        if ((s = opt_bool(L, aj[i].obj, "special", p, false, &special)) != PL_OK ||
            (s = opt_bool(L, aj[i].obj, "lstrip", p, false, &a->lstrip)) != PL_OK ||
            (s = opt_bool(L, aj[i].obj, "rstrip", p, false, &a->rstrip)) != PL_OK ||
            (s = opt_bool(L, aj[i].obj, "single_word", p, false, &a->single_word)) != PL_OK ||
            (s = opt_bool(L, aj[i].obj, "normalized", p, !special, &a->normalized)) != PL_OK)
            goto done;
        a->special = special;
        if (special) t->special[id] = 1;
    }
    /* Every piece string names one id: an added token may only repeat the vocabulary's own
     * entry for its id (checked above) and never another added token. */
    if ((s = pl_tok_strmap_init(&t->pieces, (size_t)t->n_vocab)) != PL_OK) goto done;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        int32_t prev;
        s = pl_tok_strmap_put(&t->pieces, t->piece_of[id], strlen(t->piece_of[id]), id, &prev);
        if (s != PL_OK) goto done;
        if (prev >= 0) {
            s = bad(L, "added_tokens", "\"%.64s\" is the token of ids %d and %d",
                    t->piece_of[id], (int)prev, (int)id);
            goto done;
        }
    }
done:
    pl_free(vocab_key);
    pl_free(vocab_len);
    pl_free(aj);
    return s;
}

// ---- normalizers ------------------------------------------------------------------------------

static pl_status read_normalizer(loader *L, json_t *obj, const char *jp, int depth) {
    pl_hf *h = L->h;
    const char *type;
    PL_TRY(type_of(L, obj, jp, &type));
    if (strcmp(type, "Sequence") == 0)
        return each_in(L, obj, "normalizers", jp, depth, read_normalizer);
    if (h->n_norm >= PL_HF_MAX_STEPS)
        return unsupported(L, jp, "more than %d normalizers", PL_HF_MAX_STEPS);
    pl_hf_norm *n = &h->norm[h->n_norm];
    *n = (pl_hf_norm){0};
    if (strcmp(type, "NFC") == 0) {
        n->kind = PL_HF_NFC;
    } else if (strcmp(type, "NFD") == 0) {
        n->kind = PL_HF_NFD;
    } else if (strcmp(type, "NFKC") == 0) {
        n->kind = PL_HF_NFKC;
    } else if (strcmp(type, "NFKD") == 0) {
        n->kind = PL_HF_NFKD;
    } else if (strcmp(type, "Lowercase") == 0) {
        n->kind = PL_HF_LOWERCASE;
    } else if (strcmp(type, "Prepend") == 0) {
        const char *s;
        size_t len;
        PL_TRY(req_string(L, obj, "prepend", jp, &s, &len));
        n->kind = PL_HF_PREPEND;
        if (!(n->str = dup_bytes(s, len))) return oom(L, "normalizer");
        n->str_len = len;
    } else if (strcmp(type, "Replace") == 0) {
        const char *pat, *content;
        size_t plen, clen;
        bool regex;
        PL_TRY(read_pattern(L, obj, jp, &pat, &plen, &regex));
        PL_TRY(req_string(L, obj, "content", jp, &content, &clen));
        char p[JP];
        jp_key(p, jp, regex ? "pattern.Regex" : "pattern.String");
        if (!regex && plen == 0) return unsupported(L, p, "an empty pattern");
        if (!(n->str = dup_bytes(content, clen))) return oom(L, "normalizer");
        n->str_len = clen;
        h->n_norm++; /* owned from here on: pl_hf_free releases what it holds */
        if (regex) {
            n->kind = PL_HF_REPLACE_RE;
            return pl_tok_regex_compile(&n->re, pat, plen, false, L->file, p);
        }
        n->kind = PL_HF_REPLACE_STR;
        if (!(n->pat = dup_bytes(pat, plen))) return oom(L, "normalizer");
        n->pat_len = plen;
        return PL_OK;
    } else {
        char p[JP];
        jp_key(p, jp, "type");
        return unsupported(L, p, "normalizer \"%s\" is not supported (NFC, NFD, NFKC, NFKD, "
                           "Lowercase, Prepend, Replace, Sequence are)", type);
    }
    h->n_norm++;
    return PL_OK;
}

// ---- pre-tokenizers ---------------------------------------------------------------------------

const char PL_HF_GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static pl_status read_prepend_scheme(loader *L, json_t *obj, const char *jp, pl_hf_prepend *out) {
    const char *scheme;
    PL_TRY(opt_string(L, obj, "prepend_scheme", jp, &scheme, NULL));
    json_t *aps = json_object_get(obj, "add_prefix_space");
    char p[JP];
    jp_key(p, jp, "prepend_scheme");
    *out = PL_HF_PREPEND_ALWAYS;
    if (scheme) {
        if (strcmp(scheme, "always") == 0) *out = PL_HF_PREPEND_ALWAYS;
        else if (strcmp(scheme, "first") == 0) *out = PL_HF_PREPEND_FIRST;
        else if (strcmp(scheme, "never") == 0) *out = PL_HF_PREPEND_NEVER;
        else return bad(L, p, "\"%s\" is not always, first or never", scheme);
    }
    if (!is_null(aps)) { /* the older form */
        if (!json_is_boolean(aps)) {
            jp_key(p, jp, "add_prefix_space");
            return bad(L, p, "expected true or false");
        }
        if (json_is_false(aps)) {
            if (scheme && *out != PL_HF_PREPEND_NEVER)
                return bad(L, p, "\"%s\" contradicts add_prefix_space false", scheme);
            *out = PL_HF_PREPEND_NEVER;
        }
    }
    return PL_OK;
}

static pl_status read_pre(loader *L, json_t *obj, const char *jp, int depth) {
    pl_hf *h = L->h;
    const char *type;
    PL_TRY(type_of(L, obj, jp, &type));
    if (strcmp(type, "Sequence") == 0)
        return each_in(L, obj, "pretokenizers", jp, depth, read_pre);
    if (h->n_pre >= PL_HF_MAX_STEPS)
        return unsupported(L, jp, "more than %d pre-tokenizers", PL_HF_MAX_STEPS);
    if (h->n_pre > 0 && h->pre[h->n_pre - 1].kind == PL_HF_BYTE_LEVEL)
        return unsupported(L, jp, "a pre-tokenizer after ByteLevel (ByteLevel must be last)");
    pl_hf_pre *p = &h->pre[h->n_pre];
    *p = (pl_hf_pre){0};
    if (strcmp(type, "Split") == 0) {
        const char *pat, *behavior;
        size_t plen;
        bool regex;
        PL_TRY(read_pattern(L, obj, jp, &pat, &plen, &regex));
        PL_TRY(req_string(L, obj, "behavior", jp, &behavior, NULL));
        PL_TRY(opt_bool(L, obj, "invert", jp, false, &p->invert));
        static const struct {
            const char *name;
            pl_hf_behavior b;
        } names[] = {{"Removed", PL_HF_REMOVED}, {"Isolated", PL_HF_ISOLATED},
                     {"MergedWithPrevious", PL_HF_MERGED_PREV},
                     {"MergedWithNext", PL_HF_MERGED_NEXT}, {"Contiguous", PL_HF_CONTIGUOUS}};
        size_t k = 0;
        while (k < sizeof names / sizeof names[0] && strcmp(names[k].name, behavior) != 0) k++;
        char q[JP];
        if (k == sizeof names / sizeof names[0]) {
            jp_key(q, jp, "behavior");
            return bad(L, q, "\"%s\" is not a split behavior", behavior);
        }
        p->behavior = names[k].b;
        p->kind = PL_HF_SPLIT;
        jp_key(q, jp, regex ? "pattern.Regex" : "pattern.String");
        if (plen == 0) return unsupported(L, q, "an empty pattern");
        h->n_pre++;
        if (!(p->pattern = dup_bytes(pat, plen))) return oom(L, "pre-tokenizer");
        p->pattern_len = plen;
        p->literal = !regex;
        return pl_tok_regex_compile(&p->re, pat, plen, !regex, L->file, q);
    }
    if (strcmp(type, "ByteLevel") == 0) {
        PL_TRY(opt_bool(L, obj, "add_prefix_space", jp, true, &p->add_prefix_space));
        PL_TRY(opt_bool(L, obj, "use_regex", jp, true, &p->use_regex));
        p->kind = PL_HF_BYTE_LEVEL;
        h->n_pre++;
        if (!p->use_regex) return PL_OK;
        return pl_tok_regex_compile(&p->re, PL_HF_GPT2_PATTERN, strlen(PL_HF_GPT2_PATTERN),
                                    false, L->file, jp);
    }
    if (strcmp(type, "Metaspace") == 0) {
        PL_TRY(one_char(L, obj, "replacement", jp, "\xE2\x96\x81", p->repl, &p->repl_len));
        PL_TRY(read_prepend_scheme(L, obj, jp, &p->prepend));
        PL_TRY(opt_bool(L, obj, "split", jp, true, &p->split));
        p->kind = PL_HF_METASPACE;
    } else if (strcmp(type, "Digits") == 0) {
        PL_TRY(opt_bool(L, obj, "individual_digits", jp, false, &p->individual));
        p->kind = PL_HF_DIGITS;
    } else {
        char q[JP];
        jp_key(q, jp, "type");
        return unsupported(L, q, "pre-tokenizer \"%s\" is not supported (Split, ByteLevel, "
                           "Metaspace, Digits, Sequence are)", type);
    }
    h->n_pre++;
    return PL_OK;
}

// ---- the BPE model ----------------------------------------------------------------------------

static pl_status check_model_options(loader *L, json_t *model) {
    pl_hf_model *m = &L->h->model;
    json_t *dropout = json_object_get(model, "dropout");
    if (!is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0.0))
        return unsupported(L, "model.dropout", "BPE dropout (random merges) is not supported");
    static const char *const empty_only[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++) {
        const char *s;
        size_t n;
        char p[JP];
        jp_key(p, "model", empty_only[i]);
        PL_TRY(opt_string(L, model, empty_only[i], "model", &s, &n));
        if (s && n > 0) return unsupported(L, p, "\"%s\" is set; only null or \"\" is supported", s);
    }
    PL_TRY(opt_bool(L, model, "fuse_unk", "model", false, &m->fuse_unk));
    PL_TRY(opt_bool(L, model, "byte_fallback", "model", false, &m->byte_fallback));
    PL_TRY(opt_bool(L, model, "ignore_merges", "model", false, &m->ignore_merges));
    const char *unk;
    PL_TRY(opt_string(L, model, "unk_token", "model", &unk, NULL));
    m->unk_id = -1;
    if (unk) {
        m->unk_id = pl_tok_strmap_get(&L->t->pieces, unk, strlen(unk));
        if (m->unk_id < 0 || m->unk_id >= m->n_vocab)
            return bad(L, "model.unk_token", "\"%s\" is not in the vocabulary", unk);
    }
    return PL_OK;
}

/* The map the model looks tokens up in: in byte-level mode each token's characters turned
 * back into the bytes they stand for (tokens with a character outside the byte alphabet
 * cannot come out of byte-level input and are left out); else the tokens themselves. */
static pl_status build_model_vocab(loader *L) {
    pl_tokenizer *t = L->t;
    pl_hf_model *m = &L->h->model;
    PL_TRY(pl_tok_strmap_init(&m->vocab, (size_t)m->n_vocab));
    for (int b = 0; b < 256; b++) m->byte_id[b] = m->fb_id[b] = -1;
    size_t total = 0;
    for (int id = 0; id < m->n_vocab; id++) total += strlen(t->piece_of[id]);
    if (m->byte_level && !(m->keys = pl_malloc(total ? total : 1))) return oom(L, "vocabulary");
    size_t at = 0;
    for (int32_t id = 0; id < m->n_vocab; id++) {
        const char *p = t->piece_of[id];
        size_t n = strlen(p);
        if (!m->byte_level) {
            PL_TRY(pl_tok_strmap_put(&m->vocab, p, n, id, NULL));
            continue;
        }
        size_t k = 0;
        bool ok = true;
        for (size_t i = 0; i < n && ok;) {
            uint32_t cp;
            i += (size_t)pl_utf8_decode(p + i, n - i, &cp);
            int b = pl_hf_byte_of_char(cp);
            ok = b >= 0;
            if (ok) m->keys[at + k++] = (char)b;
        }
        if (!ok) continue;
        PL_TRY(pl_tok_strmap_put(&m->vocab, m->keys + at, k, id, NULL));
        if (k == 1) m->byte_id[(uint8_t)m->keys[at]] = id;
        at += k;
    }
    for (int b = 0; b < 256; b++) {
        char fb[8];
        snprintf(fb, sizeof fb, "<0x%02X>", b);
        m->fb_id[b] = pl_tok_strmap_get(&m->vocab, fb, 6);
        m->byte_char_len[b] = (uint8_t)pl_hf_char_of_byte((uint8_t)b, m->byte_char[b]);
    }
    return PL_OK;
}

/* A merge's token in the model vocabulary, by its string. */
static pl_status merge_part(loader *L, const char *jp, const char *s, size_t n, int32_t *out) {
    *out = pl_tok_strmap_get(&L->t->pieces, s, n);
    if (*out < 0 || *out >= L->h->model.n_vocab)
        return bad(L, jp, "\"%.*s\" is not in the vocabulary", (int)(n > 64 ? 64 : n), s);
    return PL_OK;
}

/* The pair table, sized for n merges. */
static pl_status alloc_pairs(loader *L, size_t n, const char *jp) {
    pl_hf_model *m = &L->h->model;
    if (n > (size_t)PL_TOK_MAX_VOCAB * 4) return unsupported(L, jp, "%zu merges", n);
    size_t slots = 16;
    while (slots < 2 * n) slots *= 2;
    m->pairs = pl_malloc(slots * sizeof *m->pairs);
    if (!m->pairs) return oom(L, "merges");
    for (size_t i = 0; i < slots; i++) m->pairs[i].key = UINT64_MAX;
    m->pair_mask = slots - 1;
    return PL_OK;
}

/* Merge a + b of rank `rank`: both parts and their concatenation must be tokens of the model
 * vocabulary. cat has room for 2 * PL_HF_MAX_PIECE_BYTES bytes. */
static pl_status add_merge(loader *L, const char *jp, const char *a, size_t na, const char *b,
                           size_t nb, uint32_t rank, char *cat) {
    int32_t ia, ib, iab;
    PL_TRY(merge_part(L, jp, a, na, &ia));
    PL_TRY(merge_part(L, jp, b, nb, &ib));
    memcpy(cat, a, na);
    memcpy(cat + na, b, nb);
    PL_TRY(merge_part(L, jp, cat, na + nb, &iab));
    /* A pair listed twice keeps its last rank, as both Rust's and the JavaScript maps do. */
    return pl_hf_pairs_put(&L->h->model, ia, ib, rank, iab);
}

static pl_status read_merges(loader *L, json_t *model) {
    json_t *merges = json_object_get(model, "merges");
    if (is_null(merges)) merges = NULL;
    if (merges && !json_is_array(merges)) return bad(L, "model.merges", "expected a list");
    size_t n = merges ? json_array_size(merges) : 0;
    PL_TRY(alloc_pairs(L, n, "model.merges"));
    char *cat = pl_malloc(2 * PL_HF_MAX_PIECE_BYTES + 1);
    if (!cat) return oom(L, "merges");
    pl_status s = PL_OK;
    for (size_t i = 0; i < n && s == PL_OK; i++) {
        char p[JP];
        jp_idx(p, "model.merges", i);
        json_t *e = json_array_get(merges, i);
        const char *a, *b;
        size_t na, nb;
        if (json_is_string(e)) { /* "a b": exactly one space */
            const char *str = json_string_value(e);
            size_t len = json_string_length(e);
            const char *sp = memchr(str, ' ', len);
            if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp - str) - 1)) {
                s = bad(L, p, "\"%.64s\" is not two tokens separated by one space", str);
                break;
            }
            a = str, na = (size_t)(sp - str), b = sp + 1, nb = len - na - 1;
        } else if (json_is_array(e) && json_array_size(e) == 2 &&
                   json_is_string(json_array_get(e, 0)) && json_is_string(json_array_get(e, 1))) {
            a = json_string_value(json_array_get(e, 0));
            na = json_string_length(json_array_get(e, 0));
            b = json_string_value(json_array_get(e, 1));
            nb = json_string_length(json_array_get(e, 1));
        } else {
            s = bad(L, p, "expected \"a b\" or [\"a\", \"b\"]");
            break;
        }
        s = add_merge(L, p, a, na, b, nb, (uint32_t)i, cat);
    }
    pl_free(cat);
    return s;
}

// ---- added tokens: normalized forms and the tries ---------------------------------------------

static pl_status build_added(loader *L) {
    pl_hf *h = L->h;
    pl_tok_matcher mt;
    PL_TRY(pl_tok_matcher_init(&mt));
    pl_tok_buf out = {0}, scratch = {0};
    pl_status s = PL_OK;
    for (size_t i = 0; i < h->n_added && s == PL_OK; i++) {
        pl_hf_added *a = &h->added[i];
        if (!a->normalized) {
            s = pl_tok_trie_add(&h->trie_raw, a->content, a->len, (int32_t)i);
            continue;
        }
        s = pl_hf_normalize(h, &mt, a->content, a->len, &out, &scratch);
        if (s != PL_OK) break;
        if (out.n == 0) continue; /* normalizes to nothing: can never match */
        if (!(a->norm = dup_bytes(out.p, out.n))) {
            s = oom(L, "added tokens");
            break;
        }
        a->norm_len = out.n;
        s = pl_tok_trie_add(&h->trie_norm, a->norm, a->norm_len, (int32_t)i);
    }
    pl_tok_buf_free(&out);
    pl_tok_buf_free(&scratch);
    pl_tok_matcher_free(&mt);
    return s;
}

// ---- post-processor ---------------------------------------------------------------------------

static pl_status list_add(loader *L, int32_t **arr, size_t *n, const int32_t *ids, size_t k,
                          bool front) {
    if (k == 0) return PL_OK;
    if (*n + k > 64) return unsupported(L, "post_processor", "more than 64 special tokens");
    int32_t *p = pl_reallocarray(*arr, *n + k ? *n + k : 1, sizeof *p);
    if (!p) return oom(L, "post-processor");
    if (front) {
        memmove(p + k, p, *n * sizeof *p);
        memcpy(p, ids, k * sizeof *p);
    } else {
        memcpy(p + *n, ids, k * sizeof *p);
    }
    *arr = p;
    *n += k;
    return PL_OK;
}

static pl_status template_special(loader *L, json_t *specials, const char *name, const char *jp,
                                  int32_t *ids, size_t *n) {
    json_t *e = json_is_object(specials) ? json_object_get(specials, name) : NULL;
    if (!json_is_object(e))
        return bad(L, jp, "special token \"%.64s\" is not in special_tokens", name);
    json_t *list = json_object_get(e, "ids");
    if (!json_is_array(list) || json_array_size(list) == 0 || json_array_size(list) > 16)
        return bad(L, jp, "special_tokens[\"%.64s\"].ids: expected a list of 1 to 16 ids", name);
    *n = 0;
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= L->t->n_vocab)
            return bad(L, jp, "special_tokens[\"%.64s\"].ids[%zu]: not an id of the vocabulary",
                       name, i);
        ids[(*n)++] = (int32_t)json_integer_value(v);
    }
    return PL_OK;
}

static pl_status read_template(loader *L, json_t *obj, const char *jp) {
    pl_hf *h = L->h;
    char p[JP];
    jp_key(p, jp, "single");
    json_t *single = json_object_get(obj, "single");
    if (!json_is_array(single))
        return unsupported(L, p, "expected the list form of the template");
    json_t *specials = json_object_get(obj, "special_tokens");
    int32_t *pre = NULL, *post = NULL;
    size_t n_pre = 0, n_post = 0;
    bool seen_a = false;
    pl_status s = PL_OK;
    size_t i;
    json_t *item;
    json_array_foreach(single, i, item) {
        char q[JP];
        jp_idx(q, p, i);
        json_t *sp = json_object_get(item, "SpecialToken"), *sq = json_object_get(item, "Sequence");
        if (!json_is_object(item) || json_object_size(item) != 1 || (!sp && !sq)) {
            s = bad(L, q, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
            break;
        }
        if (sq) {
            json_t *id = json_object_get(sq, "id");
            if (!json_is_string(id) || strcmp(json_string_value(id), "A") != 0 || seen_a) {
                s = bad(L, q, "the single-sequence template must name sequence \"A\" once");
                break;
            }
            seen_a = true;
            continue;
        }
        json_t *name = json_object_get(sp, "id");
        if (!json_is_string(name)) {
            s = bad(L, q, "SpecialToken.id: expected a string");
            break;
        }
        int32_t ids[16];
        size_t k = 0;
        if ((s = template_special(L, specials, json_string_value(name), q, ids, &k)) != PL_OK)
            break;
        if ((s = list_add(L, seen_a ? &post : &pre, seen_a ? &n_post : &n_pre, ids, k, false)) !=
            PL_OK)
            break;
    }
    if (s == PL_OK && !seen_a) s = bad(L, p, "the template has no sequence \"A\"");
    /* Wraps what earlier processors of a Sequence produced. */
    if (s == PL_OK) s = list_add(L, &h->prefix, &h->n_prefix, pre, n_pre, true);
    if (s == PL_OK) s = list_add(L, &h->suffix, &h->n_suffix, post, n_post, false);
    pl_free(pre);
    pl_free(post);
    return s;
}

static pl_status read_post(loader *L, json_t *obj, const char *jp, int depth) {
    const char *type;
    PL_TRY(type_of(L, obj, jp, &type));
    if (strcmp(type, "Sequence") == 0) return each_in(L, obj, "processors", jp, depth, read_post);
    if (strcmp(type, "ByteLevel") == 0) return PL_OK; /* offsets only: no ids */
    if (strcmp(type, "TemplateProcessing") == 0) return read_template(L, obj, jp);
    char q[JP];
    jp_key(q, jp, "type");
    return unsupported(L, q, "post-processor \"%s\" is not supported (TemplateProcessing, "
                       "ByteLevel, Sequence are)", type);
}

// ---- decoders ---------------------------------------------------------------------------------

static bool joined_before(const pl_hf *h) {
    for (int i = 0; i < h->n_dec; i++)
        if (h->dec[i].kind == PL_HF_DEC_FUSE || h->dec[i].kind == PL_HF_DEC_BYTE_LEVEL) return true;
    return false;
}

static pl_status read_decoder(loader *L, json_t *obj, const char *jp, int depth) {
    pl_hf *h = L->h;
    const char *type;
    PL_TRY(type_of(L, obj, jp, &type));
    if (strcmp(type, "Sequence") == 0) return each_in(L, obj, "decoders", jp, depth, read_decoder);
    if (h->n_dec >= PL_HF_MAX_STEPS)
        return unsupported(L, jp, "more than %d decoders", PL_HF_MAX_STEPS);
    pl_hf_dec *d = &h->dec[h->n_dec];
    *d = (pl_hf_dec){0};
    if (strcmp(type, "ByteLevel") == 0) {
        /* It needs each token whole: first in the chain, where tokens are the pieces. */
        if (h->n_dec > 0)
            return unsupported(L, jp, "a ByteLevel decoder after another decoder (it must be "
                               "first)");
        d->kind = PL_HF_DEC_BYTE_LEVEL;
    } else if (strcmp(type, "ByteFallback") == 0) {
        if (joined_before(h))
            return unsupported(L, jp, "ByteFallback after Fuse or ByteLevel");
        d->kind = PL_HF_DEC_BYTE_FALLBACK;
    } else if (strcmp(type, "Fuse") == 0) {
        d->kind = PL_HF_DEC_FUSE;
    } else if (strcmp(type, "Strip") == 0) {
        PL_TRY(one_char(L, obj, "content", jp, " ", d->ch, &d->ch_len));
        PL_TRY(opt_uint(L, obj, "start", jp, 0, UINT32_MAX / 2, &d->start));
        PL_TRY(opt_uint(L, obj, "stop", jp, 0, PL_HF_MAX_STRIP_STOP, &d->stop));
        d->kind = PL_HF_DEC_STRIP;
    } else if (strcmp(type, "Metaspace") == 0) {
        pl_hf_prepend scheme;
        PL_TRY(one_char(L, obj, "replacement", jp, "\xE2\x96\x81", d->ch, &d->ch_len));
        PL_TRY(read_prepend_scheme(L, obj, jp, &scheme));
        d->drop_first = scheme != PL_HF_PREPEND_NEVER;
        d->kind = PL_HF_DEC_METASPACE;
    } else if (strcmp(type, "Replace") == 0) {
        const char *pat, *content;
        size_t plen, clen;
        bool regex;
        PL_TRY(read_pattern(L, obj, jp, &pat, &plen, &regex));
        PL_TRY(req_string(L, obj, "content", jp, &content, &clen));
        char p[JP];
        jp_key(p, jp, regex ? "pattern.Regex" : "pattern.String");
        if (regex) return unsupported(L, p, "a Regex pattern in a Replace decoder");
        if (plen == 0 || plen > PL_HF_MAX_REPLACE || clen > PL_HF_MAX_REPLACE)
            return unsupported(L, p, "Replace decoder patterns and contents of 1 .. %d bytes "
                               "are supported", PL_HF_MAX_REPLACE);
        memcpy(d->pat, pat, plen);
        memcpy(d->content, content, clen);
        d->pat_len = plen;
        d->content_len = clen;
        d->kind = PL_HF_DEC_REPLACE;
    } else {
        char q[JP];
        jp_key(q, jp, "type");
        return unsupported(L, q, "decoder \"%s\" is not supported (ByteLevel, Metaspace, "
                           "ByteFallback, Fuse, Strip, Replace, Sequence are)", type);
    }
    h->n_dec++;
    return PL_OK;
}

// ---- the whole file ---------------------------------------------------------------------------

/* transformers rebuilds the post-processor of these classes from add_bos_token (default true)
 * and add_eos_token (default false): LlamaTokenizerFast.update_post_processor and its copies. */
static bool rebuilds_template(const char *cls) {
    static const char *const names[] = {"LlamaTokenizer", "LlamaTokenizerFast",
                                        "CodeLlamaTokenizer", "CodeLlamaTokenizerFast",
                                        "GemmaTokenizer", "GemmaTokenizerFast"};
    for (size_t i = 0; cls && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(cls, names[i]) == 0) return true;
    return false;
}

static pl_status read_all(loader *L, json_t *root, const char *config_path) {
    pl_tokenizer *t = L->t;
    pl_hf *h = L->h;
    if (!json_is_object(root)) return bad(L, "", "expected a JSON object");
    static const char *const must_be_null[] = {"truncation", "padding"};
    for (size_t i = 0; i < 2; i++)
        if (!is_null(json_object_get(root, must_be_null[i])))
            return unsupported(L, must_be_null[i], "must be null (%s changes the ids of a single "
                               "encode)", must_be_null[i]);
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return bad(L, "model", "expected an object");
    const char *mtype;
    PL_TRY(opt_string(L, model, "type", "model", &mtype, NULL));
    if (mtype ? strcmp(mtype, "BPE") != 0 : !json_object_get(model, "merges"))
        return unsupported(L, "model.type", "model \"%s\" is not supported (BPE is)",
                           mtype ? mtype : "(no type, no merges)");
    PL_TRY(read_vocab(L, model, json_object_get(root, "added_tokens")));

    json_t *v = json_object_get(root, "normalizer");
    if (!is_null(v)) PL_TRY(read_normalizer(L, v, "normalizer", 0));
    v = json_object_get(root, "pre_tokenizer");
    if (!is_null(v)) PL_TRY(read_pre(L, v, "pre_tokenizer", 0));
    h->model.byte_level = h->n_pre > 0 && h->pre[h->n_pre - 1].kind == PL_HF_BYTE_LEVEL;

    PL_TRY(check_model_options(L, model));
    PL_TRY(build_model_vocab(L));
    PL_TRY(read_merges(L, model));
    PL_TRY(build_added(L));

    v = json_object_get(root, "post_processor");
    if (!is_null(v)) PL_TRY(read_post(L, v, "post_processor", 0));
    v = json_object_get(root, "decoder");
    if (!is_null(v))
        PL_TRY(read_decoder(L, v, "decoder", 0));
    else
        h->dec[h->n_dec++] = (pl_hf_dec){.kind = PL_HF_DEC_JOIN_SPACE};

    /* Facts: what the post-processor adds, then tokenizer_config.json on top. */
    if (h->n_prefix > 0) t->bos_id = h->prefix[0];
    if (h->n_suffix > 0) t->eos_id = h->suffix[h->n_suffix - 1];
    char *cls = NULL;
    if (config_path) {
        t->add_bos = true; /* the defaults of the classes that read these flags */
        t->add_eos = false;
        PL_TRY(pl_tok_read_config(t, config_path, &cls, NULL, NULL));
    }
    pl_status s = PL_OK;
    if (rebuilds_template(cls)) {
        h->n_prefix = h->n_suffix = 0;
        if (t->add_bos && t->bos_id >= 0)
            s = list_add(L, &h->prefix, &h->n_prefix, &t->bos_id, 1, false);
        if (s == PL_OK && t->add_eos && t->eos_id >= 0)
            s = list_add(L, &h->suffix, &h->n_suffix, &t->eos_id, 1, false);
    }
    pl_free(cls);
    PL_TRY(s);
    t->add_bos = h->n_prefix > 0;
    t->add_eos = h->n_suffix > 0;
    return pl_tok_finish_facts(t, L->file);
}

void pl_hf_free(pl_hf *h) {
    if (!h) return;
    for (int i = 0; i < h->n_norm; i++) {
        pl_free(h->norm[i].str);
        pl_free(h->norm[i].pat);
        pl_tok_regex_free(&h->norm[i].re);
    }
    for (int i = 0; i < h->n_pre; i++) {
        pl_tok_regex_free(&h->pre[i].re);
        pl_free(h->pre[i].pattern);
    }
    for (size_t i = 0; i < h->n_added; i++) pl_free(h->added[i].norm);
    pl_free(h->added);
    pl_tok_trie_free(&h->trie_raw);
    pl_tok_trie_free(&h->trie_norm);
    pl_tok_strmap_free(&h->model.vocab);
    pl_free(h->model.keys);
    pl_free(h->model.pairs);
    pl_free(h->prefix);
    pl_free(h->suffix);
    pl_free(h->strings);
    pl_free(h);
}

static void hf_destroy(void *impl) { pl_hf_free(impl); }

pl_status pl_tok_hf_open(pl_tokenizer *t, const char *path, const char *config_path) {
    char *bytes = NULL;
    size_t n = 0;
    PL_TRY(pl_tok_read_file(path, &bytes, &n));
    json_error_t err;
    json_t *root = json_loadb(bytes, n, JSON_REJECT_DUPLICATES, &err);
    pl_free(bytes);
    if (!root) {
        if (json_error_code(&err) == json_error_out_of_memory)
            return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: parsing the JSON", path);
        return pl_fail(PL_ERR_FORMAT, "%s: line %d column %d: %s", path, err.line, err.column,
                       err.text);
    }
    pl_hf *h = pl_calloc(1, sizeof *h);
    if (!h) {
        json_decref(root);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s", path);
    }
    t->ops = &hf_ops;
    t->impl = h; /* freed with t by the caller on failure */
    loader L = {.file = path, .t = t, .h = h};
    pl_status s = read_all(&L, root, config_path);
    json_decref(root);
    return s;
}

// ---- a byte-level BPE from parts (GGUF "gpt2" vocabularies) -----------------------------------

/* Fixes the ids from the parts: the tokens in order, the added ones (and their specialness)
 * as flagged; every token string names one id. */
static pl_status parts_vocab(loader *L, const pl_hf_parts *P) {
    pl_tokenizer *t = L->t;
    pl_hf *h = L->h;
    size_t n = P->n_tokens, total = 0, n_added = 0;
    if (n == 0) return bad(L, P->tokens_key, "empty");
    if (n > PL_TOK_MAX_VOCAB)
        return unsupported(L, P->tokens_key, "%zu tokens (at most %d)", n, PL_TOK_MAX_VOCAB);
    if (P->n_model == 0 || P->n_model > n)
        return bad(L, P->tokens_key, "no token of the BPE vocabulary");
    for (size_t id = 0; id < n; id++) {
        size_t max = P->added[id] ? PL_HF_MAX_ADDED_BYTES : PL_HF_MAX_PIECE_BYTES;
        if (P->token_len[id] == 0 || P->token_len[id] > max) {
            char p[JP];
            jp_idx(p, P->tokens_key, id);
            return (P->token_len[id] ? unsupported : bad)(L, p, "a token of %zu bytes (1 .. %zu "
                                                          "supported)", P->token_len[id], max);
        }
        total += P->token_len[id] + 1;
        n_added += P->added[id] != 0;
    }
    t->n_vocab = (int)n;
    h->model.n_vocab = (int)P->n_model;
    t->piece_of = pl_calloc(n, sizeof *t->piece_of);
    t->special = pl_calloc(n, 1);
    h->strings = pl_malloc(total);
    h->added = pl_calloc(n_added ? n_added : 1, sizeof *h->added);
    if (!t->piece_of || !t->special || !h->strings || !h->added) return oom(L, "vocabulary");
    size_t at = 0;
    for (size_t id = 0; id < n; id++) {
        memcpy(h->strings + at, P->token[id], P->token_len[id]);
        h->strings[at + P->token_len[id]] = '\0';
        t->piece_of[id] = h->strings + at;
        at += P->token_len[id] + 1;
        if (!P->added[id]) continue;
        /* GGUF keeps no lstrip/rstrip/normalized flags: plain matches on the raw text, which
         * is what the tokenizer.json files of these vocabularies say */
        pl_hf_added *a = &h->added[h->n_added++];
        *a = (pl_hf_added){.id = (int32_t)id, .content = t->piece_of[id],
                           .len = P->token_len[id], .special = P->added[id] == 2};
        t->special[id] = a->special;
    }
    PL_TRY(pl_tok_strmap_init(&t->pieces, n));
    for (int32_t id = 0; id < (int32_t)n; id++) {
        int32_t prev;
        PL_TRY(pl_tok_strmap_put(&t->pieces, t->piece_of[id], P->token_len[id], id, &prev));
        if (prev >= 0) {
            char p[JP];
            jp_idx(p, P->tokens_key, (size_t)id);
            return bad(L, p, "\"%.64s\" is also token %d", t->piece_of[id], (int)prev);
        }
    }
    return PL_OK;
}

/* "a b" merges in rank order; as llama.cpp reads them, the first space after the first byte
 * separates the parts. */
static pl_status parts_merges(loader *L, const pl_hf_parts *P) {
    PL_TRY(alloc_pairs(L, P->n_merges, P->merges_key));
    char *cat = pl_malloc(2 * PL_HF_MAX_PIECE_BYTES + 1);
    if (!cat) return oom(L, "merges");
    pl_status s = PL_OK;
    for (size_t i = 0; i < P->n_merges && s == PL_OK; i++) {
        char p[JP];
        jp_idx(p, P->merges_key, i);
        const char *str = P->merge[i];
        size_t len = P->merge_len[i];
        const char *sp = len > 1 ? memchr(str + 1, ' ', len - 1) : NULL;
        if (!sp) {
            s = bad(L, p, "\"%.*s\" is not two tokens separated by a space",
                    (int)(len > 64 ? 64 : len), str);
            break;
        }
        size_t na = (size_t)(sp - str);
        s = add_merge(L, p, str, na, sp + 1, len - na - 1, (uint32_t)i, cat);
    }
    pl_free(cat);
    return s;
}

pl_status pl_tok_hf_open_parts(pl_tokenizer *t, const char *file, const pl_hf_parts *P) {
    pl_hf *h = pl_calloc(1, sizeof *h);
    if (!h) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s", file);
    t->ops = &hf_ops;
    t->impl = h; /* freed with t by the caller on failure */
    loader L = {.file = file, .t = t, .h = h};
    PL_TRY(parts_vocab(&L, P));
    if (P->nfc) h->norm[h->n_norm++] = (pl_hf_norm){.kind = PL_HF_NFC};
    if (P->n_regex >= PL_HF_MAX_STEPS)
        return unsupported(&L, P->pre_key, "%zu regexes", P->n_regex);
    for (size_t i = 0; i < P->n_regex; i++) {
        pl_hf_pre *p = &h->pre[h->n_pre++];
        *p = (pl_hf_pre){.kind = PL_HF_SPLIT, .behavior = PL_HF_ISOLATED};
        p->pattern_len = strlen(P->regex[i]);
        if (!(p->pattern = dup_bytes(P->regex[i], p->pattern_len))) return oom(&L, "regex");
        PL_TRY(pl_tok_regex_compile(&p->re, P->regex[i], strlen(P->regex[i]), false, file,
                                    P->pre_key));
    }
    h->pre[h->n_pre++] = (pl_hf_pre){.kind = PL_HF_BYTE_LEVEL};
    h->model.byte_level = true;
    h->model.ignore_merges = P->ignore_merges;
    h->model.unk_id = -1;
    PL_TRY(build_model_vocab(&L));
    PL_TRY(parts_merges(&L, P));
    PL_TRY(build_added(&L));
    h->dec[h->n_dec++] = (pl_hf_dec){.kind = PL_HF_DEC_BYTE_LEVEL};
    t->bos_id = P->bos_id;
    t->eos_id = P->eos_id;
    if (P->add_bos && t->bos_id >= 0) PL_TRY(list_add(&L, &h->prefix, &h->n_prefix, &t->bos_id,
                                                      1, false));
    if (P->add_eos && t->eos_id >= 0) PL_TRY(list_add(&L, &h->suffix, &h->n_suffix, &t->eos_id,
                                                      1, false));
    t->add_bos = h->n_prefix > 0;
    t->add_eos = h->n_suffix > 0;
    return pl_tok_finish_facts(t, file);
}

static const pl_tok_ops hf_ops = {
    .name = "bpe",
    .destroy = hf_destroy,
    .encode = pl_hf_encode,
    .decode = pl_hf_decode,
    .detok_create = pl_hf_detok_create,
    .detok_free = pl_hf_detok_free,
    .detok_push = pl_hf_detok_push,
    .detok_text = pl_hf_detok_text,
};
