/*
 * tokenizer/spm.c - the SentencePiece implementation behind tokenizer.h: loading a .model,
 * encode, decode, and the per-id decode table that the streaming detokeniser (spm_detok.c)
 * runs on.
 *
 * Data flow: pl_tok_spm_open reads the file itself (so "cannot read" is PL_ERR_IO and "not a
 * model" is PL_ERR_FORMAT, both naming the path), hands the bytes to the library through
 * spm_shim, then walks the vocabulary once to build:
 *   - `pieces`: every piece NUL-terminated, for pl_tok_piece;
 *   - `entries`: (n_vocab) pl_tok_entry, each id's kind, byte and decoded surface, so that
 *     detok.c reproduces the library's decode without calling into C++ per token;
 *   - `ws_rule`: how the library drops a leading "▁", probed by decoding a piece or two
 *     (the public C++ API does not expose the normalizer spec, and probing matches whatever
 *     the installed library version actually does).
 * Encode and decode themselves go through the library, which stays the reference; the tests
 * check spm_detok.c against it over random id sequences. With PL_TOK_PARSE_SPECIAL the text is
 * first cut at the control pieces' strings ("<s>"), each cut encoded on its own (so each gets
 * the dummy prefix, as Hugging Face's slow LlamaTokenizer does).
 *
 * Invariants: the implementation state is immutable after load. Every surface is NUL-free (NUL ->
 * U+FFFD), and pl_tok_decode applies the same mapping to the library's output.
 */
#include <string.h>

#include "tokenizer/spm.h"
#include "tokenizer/spm_shim.h"
#include "tokenizer/tok_trie.h"
#include "util/alloc.h"
#include "util/utf8.h"

#define SPACE_SYMBOL "\xE2\x96\x81" /* U+2581 "▁", SentencePiece's visible space */
#define SPACE_SYMBOL_LEN 3
#define REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */

typedef struct spm_impl {
    pl_tok_spm *spm;
    int n_vocab;
    int bos_id, eos_id;       /* the library's; -1 when absent */
    pl_tok_ws_rule ws_rule;
    pl_tok_entry *entries;    /* (n_vocab) */
    const char **piece_ptrs;  /* (n_vocab) pointers into `pieces` */
    char *pieces;             /* every raw piece, NUL-terminated, back to back */
    char *surfaces;           /* every NORMAL/UNKNOWN surface, back to back */
    pl_tok_trie specials;     /* control pieces' strings, for PL_TOK_PARSE_SPECIAL */
    pl_tok_spm_spec spec;     /* from the ModelProto's bytes */
    uint8_t *ptype;           /* (n_vocab) each piece's ModelProto type, from the bytes */
} spm_impl;

static const pl_tok_ops spm_ops;

static spm_impl *impl_of(const pl_tokenizer *t) { return (spm_impl *)t->impl; }

// ---- denormalizer check --------------------------------------------------------------------
//
// The library applies ModelProto.denormalizer_spec (field 5) to the whole decoded text when its
// precompiled_charsmap (field 2 inside) is non-empty. Streaming cannot reproduce a whole-text
// pass, so such models are refused. The library has already parsed the bytes, so they are
// well-formed protobuf; this walker still bounds-checks everything and answers "no" to
// anything it does not understand.

static bool read_varint(const unsigned char **p, const unsigned char *end, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        unsigned char b = *(*p)++;
        x |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* Walks one message; for each length-delimited field `field`, calls back with its bytes.
 * Returns false on anything malformed. */
typedef void (*field_fn)(const unsigned char *p, size_t n, void *ctx);
static bool walk_fields(const unsigned char *p, const unsigned char *end, uint64_t field,
                        field_fn fn, void *ctx) {
    while (p < end) {
        uint64_t key, v;
        if (!read_varint(&p, end, &key)) return false;
        switch (key & 7) {
        case 0:
            if (!read_varint(&p, end, &v)) return false;
            break;
        case 1:
            if ((size_t)(end - p) < 8) return false;
            p += 8;
            break;
        case 5:
            if ((size_t)(end - p) < 4) return false;
            p += 4;
            break;
        case 2:
            if (!read_varint(&p, end, &v) || v > (uint64_t)(end - p)) return false;
            if ((key >> 3) == field) fn(p, (size_t)v, ctx);
            p += v;
            break;
        default: /* groups: not used by sentencepiece */
            return false;
        }
    }
    return true;
}

static void on_charsmap(const unsigned char *p, size_t n, void *ctx) {
    (void)p;
    *(size_t *)ctx = n; /* protobuf: the last occurrence of a singular field wins */
}

static void on_denormalizer(const unsigned char *p, size_t n, void *ctx) {
    walk_fields(p, p + n, 2, on_charsmap, ctx);
}

static bool has_denormalizer(const unsigned char *bytes, size_t n) {
    size_t charsmap_len = 0;
    walk_fields(bytes, bytes + n, 5, on_denormalizer, &charsmap_len);
    return charsmap_len > 0;
}

// ---- the specs -------------------------------------------------------------------------------
//
// TrainerSpec (ModelProto field 2): model_type 3, byte_fallback 35, treat_whitespace_as_suffix
// 24. NormalizerSpec (field 3): precompiled_charsmap 2, add_dummy_prefix 3,
// remove_extra_whitespaces 4, escape_whitespaces 5. Varints; the last occurrence wins.

typedef void (*any_fn)(uint64_t field, uint64_t v, const unsigned char *p, size_t n, void *ctx);

/* Walks one message calling fn for every varint (p NULL) and length-delimited field. */
static bool walk_all(const unsigned char *p, const unsigned char *end, any_fn fn, void *ctx) {
    while (p < end) {
        uint64_t key, v;
        if (!read_varint(&p, end, &key)) return false;
        switch (key & 7) {
        case 0:
            if (!read_varint(&p, end, &v)) return false;
            fn(key >> 3, v, NULL, 0, ctx);
            break;
        case 1:
            if ((size_t)(end - p) < 8) return false;
            p += 8;
            break;
        case 5:
            if ((size_t)(end - p) < 4) return false;
            p += 4;
            break;
        case 2:
            if (!read_varint(&p, end, &v) || v > (uint64_t)(end - p)) return false;
            fn(key >> 3, v, p, (size_t)v, ctx);
            p += v;
            break;
        default:
            return false;
        }
    }
    return true;
}

static void on_trainer(uint64_t f, uint64_t v, const unsigned char *p, size_t n, void *ctx) {
    pl_tok_spm_spec *s = ctx;
    (void)n;
    if (p) return;
    if (f == 3) s->model_type = (int)v;
    if (f == 35) s->byte_fallback = v != 0;
    if (f == 24) s->treat_whitespace_as_suffix = v != 0;
}

static void on_normalizer(uint64_t f, uint64_t v, const unsigned char *p, size_t n, void *ctx) {
    pl_tok_spm_spec *s = ctx;
    if (p) {
        if (f == 2) s->has_charsmap = n > 0;
        return;
    }
    if (f == 3) s->add_dummy_prefix = v != 0;
    if (f == 4) s->remove_extra_whitespaces = v != 0;
    if (f == 5) s->escape_whitespaces = v != 0;
}

static void on_model(uint64_t f, uint64_t v, const unsigned char *p, size_t n, void *ctx) {
    (void)v;
    if (p && f == 2) walk_all(p, p + n, on_trainer, ctx);
    if (p && f == 3) walk_all(p, p + n, on_normalizer, ctx);
}

/* Each piece's type (SentencePiece.type, field 3; NORMAL = 1 when absent), in order. */
typedef struct types_ctx {
    uint8_t *out;
    size_t n, i;
    int cur;
} types_ctx;

static void on_piece_field(uint64_t f, uint64_t v, const unsigned char *p, size_t n, void *ctx) {
    (void)n;
    if (!p && f == 3) ((types_ctx *)ctx)->cur = (int)(v > 6 ? 0 : v);
}

static void on_piece(uint64_t f, uint64_t v, const unsigned char *p, size_t n, void *ctx) {
    types_ctx *x = ctx;
    (void)v;
    if (!p || f != 1 || x->i >= x->n) return;
    x->cur = 1;
    walk_all(p, p + n, on_piece_field, x);
    x->out[x->i++] = (uint8_t)x->cur;
}

static pl_tok_spm_spec read_spec(const unsigned char *bytes, size_t n) {
    pl_tok_spm_spec s = {.model_type = 1, .add_dummy_prefix = true,
                         .remove_extra_whitespaces = true, .escape_whitespaces = true};
    walk_all(bytes, bytes + n, on_model, &s);
    return s;
}

// ---- the decode table ----------------------------------------------------------------------

/* Parses "<0xAB>" into 0xAB; -1 when the piece is not of that form. */
static int parse_byte_piece(const char *p, size_t n) {
    if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Bytes of the surface of raw piece p[0..n): "▁" -> ' ' (1 byte for 3), NUL -> U+FFFD. */
static size_t surface_size(const char *p, size_t n) {
    size_t out = 0;
    for (size_t i = 0; i < n;) {
        if (n - i >= SPACE_SYMBOL_LEN && memcmp(p + i, SPACE_SYMBOL, SPACE_SYMBOL_LEN) == 0) {
            out += 1;
            i += SPACE_SYMBOL_LEN;
        } else {
            out += p[i] == '\0' ? 3 : 1;
            i++;
        }
    }
    return out;
}

/* Writes the surface of p[0..n) into dst (surface_size bytes); with map_space false only the
 * NUL mapping is applied (unk surfaces are used verbatim by the library). */
static size_t write_surface(char *dst, const char *p, size_t n, bool map_space) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (map_space && n - i >= SPACE_SYMBOL_LEN &&
            memcmp(p + i, SPACE_SYMBOL, SPACE_SYMBOL_LEN) == 0) {
            dst[k++] = ' ';
            i += SPACE_SYMBOL_LEN;
        } else if (p[i] == '\0') {
            memcpy(dst + k, REPLACEMENT, 3);
            k += 3;
            i++;
        } else {
            dst[k++] = p[i++];
        }
    }
    return k;
}

static size_t count_nul(const char *p, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += p[i] == '\0';
    return c;
}
/* Decodes ids with the library; the raw text may hold NULs (caller frees with pl_free). */
static pl_status spm_decode_raw(const spm_impl *s, const int32_t *ids, size_t n, char **out,
                                size_t *out_len) {
    char err[256] = "";
    static const int32_t none[1] = {0};
    int rc = pl_tok_spm_decode(s->spm, n ? ids : none, n, out, out_len, err, sizeof err);
    switch (rc) {
    case PL_TOK_SPM_OK: return PL_OK;
    case PL_TOK_SPM_NOMEM: return pl_fail(PL_ERR_OUT_OF_MEMORY, "decode: %s", err);
    case PL_TOK_SPM_INVALID: return pl_fail(PL_ERR_INVALID_ARGUMENT, "decode: %s", err);
    default: return pl_fail(PL_ERR_FORMAT, "decode: sentencepiece: %s", err);
    }
}

/* The library's decode with NUL -> U+FFFD, so the result is a proper C string (as
 * spm_detok.c streams it). */
static pl_status spm_decode_text(const spm_impl *s, const int32_t *ids, size_t n,
                                 char **out_text) {
    char *raw = NULL;
    size_t len = 0;
    PL_TRY(spm_decode_raw(s, ids, n, &raw, &len));
    size_t nuls = count_nul(raw, len);
    if (nuls == 0) {
        *out_text = raw;
        return PL_OK;
    }
    char *mapped = pl_malloc(len + 2 * nuls + 1);
    if (!mapped) {
        pl_free(raw);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "decode: %zu bytes", len + 2 * nuls + 1);
    }
    size_t k = write_surface(mapped, raw, len, false);
    mapped[k] = '\0';
    pl_free(raw);
    *out_text = mapped;
    return PL_OK;
}

/* Decides ws_rule from what the library does with a NORMAL piece starting with "▁": decoded
 * alone it keeps its space (KEEP) or not. FIRST and ALL differ only when the dropped piece
 * leaves the text empty, i.e. for the piece "▁" itself, so that one is decoded twice. Also a
 * self-check: an answer that fits neither rule means the library decodes differently from
 * what spm_detok.c reproduces, and loading fails rather than streaming wrong text. */
static pl_status probe_ws_rule(spm_impl *s, const char *path) {
    int32_t probe = -1, lone = -1;
    for (int id = 0; id < s->n_vocab; id++) {
        const pl_tok_entry *e = &s->entries[id];
        if (e->kind != PL_TOK_KIND_NORMAL || !e->lead_ws) continue;
        if (probe < 0) probe = id;
        if (e->surface_len == 1) {
            lone = id;
            break;
        }
    }
    s->ws_rule = PL_TOK_WS_ALL;
    if (probe < 0) return PL_OK; /* no piece starts with "▁": the rule never applies */
    const pl_tok_entry *e = &s->entries[probe];
    char *text = NULL;
    pl_status st = spm_decode_text(s, &probe, 1, &text);
    if (st != PL_OK)
        return pl_fail_prefix(st, "tokenizer %s: probing piece %d", path, (int)probe);
    size_t len = strlen(text);
    bool kept = len == e->surface_len && memcmp(text, e->surface, len) == 0;
    bool dropped = len + 1 == e->surface_len && memcmp(text, e->surface + 1, len) == 0;
    pl_free(text);
    if (!kept && !dropped)
        return pl_fail(PL_ERR_FORMAT, "tokenizer %s: the library decodes piece %d (\"%s\") in a "
                       "way the streaming decoder does not model", path, (int)probe,
                       s->piece_ptrs[probe]);
    if (kept) {
        s->ws_rule = PL_TOK_WS_KEEP;
        return PL_OK;
    }
    if (lone < 0) return PL_OK;
    int32_t two[2] = {lone, lone};
    st = spm_decode_text(s, two, 2, &text);
    if (st != PL_OK) return pl_fail_prefix(st, "tokenizer %s: probing piece %d", path, (int)lone);
    len = strlen(text);
    pl_free(text);
    s->ws_rule = len == 0 ? PL_TOK_WS_ALL : PL_TOK_WS_FIRST;
    return PL_OK;
}

/* Builds pieces, piece_ptrs, entries and surfaces from the library's vocabulary, in two
 * passes: sizes first, then one allocation per array. */
static pl_status build_table(spm_impl *s, const char *path) {
    int n = s->n_vocab;
    size_t piece_bytes = 0, surf_bytes = 0;
    int32_t unk = -1;
    for (int id = 0; id < n; id++) {
        size_t len;
        int kind;
        const char *p = pl_tok_spm_piece(s->spm, id, &len, &kind);
        if (!p) return pl_fail(PL_ERR_FORMAT, "tokenizer %s: piece %d unreadable", path, id);
        piece_bytes += len + 1;
        /* Decoded text must be valid UTF-8 whatever the file says; the library does not
         * check its pieces, so a damaged model could otherwise stream broken text. */
        if (kind == PL_TOK_SPM_NORMAL && pl_utf8_validate(p, len) != len)
            return pl_fail(PL_ERR_FORMAT, "tokenizer %s: piece %d is not valid UTF-8", path, id);
        if (kind == PL_TOK_SPM_NORMAL) surf_bytes += surface_size(p, len);
        if (kind == PL_TOK_SPM_UNKNOWN && unk < 0) unk = id;
    }
    /* The library decodes every unknown id to the one unk surface of the trainer spec, which
     * the C++ API does not expose: decode the first unknown id to learn it. */
    char *unk_text = NULL;
    size_t unk_len = 0;
    if (unk >= 0) {
        pl_status ds = spm_decode_text(s, &unk, 1, &unk_text);
        if (ds != PL_OK) return pl_fail_prefix(ds, "tokenizer %s: unk surface", path);
        unk_len = strlen(unk_text);
        if (pl_utf8_validate(unk_text, unk_len) != unk_len) {
            pl_free(unk_text);
            return pl_fail(PL_ERR_FORMAT, "tokenizer %s: the unk surface is not valid UTF-8",
                           path);
        }
        surf_bytes += unk_len;
    }
    pl_status st = PL_OK;
    if (surf_bytes > UINT32_MAX || piece_bytes > UINT32_MAX) {
        st = pl_fail(PL_ERR_FORMAT, "tokenizer %s: %zu bytes of piece text", path, surf_bytes);
        goto done;
    }
    s->entries = pl_calloc((size_t)n, sizeof *s->entries);
    s->piece_ptrs = pl_calloc((size_t)n, sizeof *s->piece_ptrs);
    s->pieces = pl_malloc(piece_bytes);
    s->surfaces = pl_malloc(surf_bytes ? surf_bytes : 1);
    if (!s->entries || !s->piece_ptrs || !s->pieces || !s->surfaces) {
        st = pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer %s: tables for %d pieces", path, n);
        goto done;
    }
    const char *unk_surface = s->surfaces; /* first in the arena, shared by unknown ids */
    memcpy(s->surfaces, unk_text ? unk_text : "", unk_len);
    size_t pk = 0, sk = unk_len;
    for (int id = 0; id < n; id++) {
        size_t len;
        int kind;
        const char *p = pl_tok_spm_piece(s->spm, id, &len, &kind);
        memcpy(s->pieces + pk, p, len);
        s->pieces[pk + len] = '\0';
        s->piece_ptrs[id] = s->pieces + pk;
        pk += len + 1;
        pl_tok_entry *e = &s->entries[id];
        e->surface = "";
        switch (kind) {
        case PL_TOK_SPM_CONTROL: e->kind = PL_TOK_KIND_CONTROL; break;
        case PL_TOK_SPM_UNKNOWN:
            e->kind = PL_TOK_KIND_UNKNOWN;
            e->surface = unk_surface;
            e->surface_len = (uint32_t)unk_len;
            break;
        case PL_TOK_SPM_BYTE: {
            int b = parse_byte_piece(p, len);
            if (b < 0) {
                st = pl_fail(PL_ERR_FORMAT, "tokenizer %s: byte piece %d is not <0xXX>", path,
                             id);
                goto done;
            }
            e->kind = PL_TOK_KIND_BYTE;
            e->byte = (uint8_t)b;
            break;
        }
        default:
            e->kind = PL_TOK_KIND_NORMAL;
            e->lead_ws = len >= SPACE_SYMBOL_LEN && memcmp(p, SPACE_SYMBOL, SPACE_SYMBOL_LEN) == 0;
            e->surface = s->surfaces + sk;
            e->surface_len = (uint32_t)write_surface(s->surfaces + sk, p, len, true);
            sk += e->surface_len;
            break;
        }
    }
    st = probe_ws_rule(s, path);
done:
    pl_free(unk_text);
    return st;
}

// ---- loading -------------------------------------------------------------------------------

static void spm_destroy(void *p) {
    spm_impl *s = p;
    if (!s) return;
    pl_tok_spm_free(s->spm);
    pl_tok_trie_free(&s->specials);
    pl_free(s->entries);
    pl_free(s->piece_ptrs);
    pl_free(s->pieces);
    pl_free(s->surfaces);
    pl_free(s->ptype);
    pl_free(s);
}

/* The common facts from the table: every piece, control pieces special, the library's
 * <s> / </s>, BOS added by default (what SentencePiece users expect), EOS not. A
 * tokenizer_config.json beside the model (directory loads) may change them afterwards. */
static pl_status fill_facts(pl_tokenizer *t, spm_impl *s, const char *path) {
    t->n_vocab = s->n_vocab;
    t->piece_of = pl_calloc((size_t)s->n_vocab, sizeof *t->piece_of);
    t->special = pl_calloc((size_t)s->n_vocab, 1);
    if (!t->piece_of || !t->special)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer %s: tables for %d pieces", path,
                       s->n_vocab);
    for (int id = 0; id < s->n_vocab; id++) {
        t->piece_of[id] = s->piece_ptrs[id];
        t->special[id] = s->entries[id].kind == PL_TOK_KIND_CONTROL;
        if (t->special[id] && s->piece_ptrs[id][0])
            PL_TRY(pl_tok_trie_add(&s->specials, s->piece_ptrs[id], strlen(s->piece_ptrs[id]),
                                   id));
    }
    t->bos_id = s->bos_id;
    t->eos_id = s->eos_id;
    t->add_bos = true;
    t->add_eos = false;
    return PL_OK;
}

/* Everything but the facts' last step: the library, the tables, t's common fields. */
static pl_status load_bytes(pl_tokenizer *t, const char *path, const char *bytes,
                            size_t n_bytes) {
    spm_impl *s = pl_calloc(1, sizeof *s);
    if (!s) return pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer %s", path);
    pl_status st = PL_OK;
    char err[256] = "";
    int rc = pl_tok_spm_load(bytes, n_bytes, &s->spm, err, sizeof err);
    if (rc != PL_TOK_SPM_OK) {
        st = rc == PL_TOK_SPM_NOMEM
                 ? pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer %s: %s", path, err)
                 : pl_fail(PL_ERR_FORMAT, "tokenizer %s: not a valid SentencePiece model (%s)",
                           path, err);
        goto fail;
    }
    if (has_denormalizer((const unsigned char *)bytes, n_bytes)) {
        st = pl_fail(PL_ERR_UNSUPPORTED, "tokenizer %s: models with a denormalizer "
                     "(denormalizer_spec) are not supported", path);
        goto fail;
    }
    s->spec = read_spec((const unsigned char *)bytes, n_bytes);
    s->n_vocab = pl_tok_spm_piece_count(s->spm);
    s->bos_id = pl_tok_spm_bos_id(s->spm);
    s->eos_id = pl_tok_spm_eos_id(s->spm);
    if (s->n_vocab > PL_TOK_MAX_VOCAB) {
        st = pl_fail(PL_ERR_UNSUPPORTED, "tokenizer %s: %d pieces (at most %d)", path,
                     s->n_vocab, PL_TOK_MAX_VOCAB);
        goto fail;
    }
    st = build_table(s, path);
    if (st != PL_OK) goto fail;
    if (!(s->ptype = pl_calloc((size_t)s->n_vocab, 1))) {
        st = pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer %s: piece types", path);
        goto fail;
    }
    walk_all((const unsigned char *)bytes, (const unsigned char *)bytes + n_bytes, on_piece,
             &(types_ctx){s->ptype, (size_t)s->n_vocab, 0, 1});
    t->ops = &spm_ops;
    t->impl = s;
    return fill_facts(t, s, path); /* on failure the caller frees t, and with it s */
fail:
    spm_destroy(s);
    return st;
}

pl_status pl_tok_spm_open(pl_tokenizer *t, const char *path, const char *config_path) {
    char *bytes = NULL;
    size_t n_bytes = 0;
    PL_TRY(pl_tok_read_file(path, &bytes, &n_bytes));
    pl_status st = load_bytes(t, path, bytes, n_bytes);
    pl_free(bytes);
    if (st == PL_OK && config_path) st = pl_tok_read_config(t, config_path, NULL, NULL, NULL);
    if (st == PL_OK) st = pl_tok_finish_facts(t, path);
    return st;
}

pl_status pl_tok_spm_open_proto(pl_tokenizer *t, const char *name, const void *bytes, size_t n) {
    return load_bytes(t, name, bytes, n);
}

const pl_tok_spm_spec *pl_tok_spm_spec_of(const pl_tokenizer *t) {
    return t->ops == &spm_ops ? &impl_of(t)->spec : NULL;
}

float pl_tok_spm_score_of(const pl_tokenizer *t, int32_t id) {
    return t->ops == &spm_ops ? pl_tok_spm_score(impl_of(t)->spm, id) : 0.0f;
}

int pl_tok_spm_type_of(const pl_tokenizer *t, int32_t id) {
    return t->ops == &spm_ops && id >= 0 && id < t->n_vocab ? impl_of(t)->ptype[id] : 0;
}

// ---- the decode table, for spm_detok.c ------------------------------------------------------

const pl_tok_entry *pl_tok_entry_of(const pl_tokenizer *t, int32_t id) {
    if (t->ops != &spm_ops || id < 0 || id >= t->n_vocab) return NULL;
    return &impl_of(t)->entries[id];
}

pl_tok_ws_rule pl_tok_ws_rule_of(const pl_tokenizer *t) {
    return t->ops == &spm_ops ? impl_of(t)->ws_rule : PL_TOK_WS_KEEP;
}

// ---- encode, decode ------------------------------------------------------------------------

/* One stretch of text through the library, appended to out. */
static pl_status encode_stretch(const spm_impl *s, const char *text, size_t len,
                                pl_tok_ids *out) {
    char err[256] = "";
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = pl_tok_spm_encode(s->spm, len ? text : "", len, -1, &ids, &n, err, sizeof err);
    if (rc == PL_TOK_SPM_NOMEM) return pl_fail(PL_ERR_OUT_OF_MEMORY, "encode: %s", err);
    /* The text was validated, so a library failure is the model's doing. */
    if (rc != PL_TOK_SPM_OK) return pl_fail(PL_ERR_FORMAT, "encode: sentencepiece: %s", err);
    pl_status st = pl_tok_ids_append(out, ids, n);
    pl_free(ids);
    return st;
}

static pl_status spm_encode(const pl_tokenizer *t, const char *text, size_t len,
                            unsigned flags, pl_tok_ids *out) {
    const spm_impl *s = impl_of(t);
    bool special = flags & PL_TOK_ADD_SPECIAL;
    if (special && t->add_bos && t->bos_id >= 0) PL_TRY(pl_tok_ids_push(out, t->bos_id));
    if (!(flags & PL_TOK_PARSE_SPECIAL) || s->specials.n_nodes == 0) {
        PL_TRY(encode_stretch(s, text, len, out));
    } else {
        size_t from = 0, at = 0;
        while (from <= len) {
            size_t mlen = 0;
            int32_t id = -1;
            bool found = pl_tok_trie_find(&s->specials, text, len, from, &at, &mlen, &id);
            size_t end = found ? at : len;
            if (end > from) PL_TRY(encode_stretch(s, text + from, end - from, out));
            if (!found) break;
            PL_TRY(pl_tok_ids_push(out, id));
            from = at + mlen;
        }
    }
    if (special && t->add_eos && t->eos_id >= 0) PL_TRY(pl_tok_ids_push(out, t->eos_id));
    return PL_OK;
}

static pl_status spm_decode(const pl_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                            char **out_text) {
    (void)flags; /* control pieces decode to nothing whatever the flags */
    return spm_decode_text(impl_of(t), ids, n, out_text);
}

/* The detokeniser gets the decode table now, so spm_detok.c never calls back into this file. */
static pl_status spm_detok_create(const pl_tokenizer *t, unsigned flags, pl_detok **out) {
    return pl_tok_spm_detok_create(t, impl_of(t)->entries, impl_of(t)->ws_rule, flags, out);
}

static const pl_tok_ops spm_ops = {
    .name = "sentencepiece",
    .destroy = spm_destroy,
    .encode = spm_encode,
    .decode = spm_decode,
    .detok_create = spm_detok_create,
    .detok_free = pl_tok_spm_detok_free,
    .detok_push = pl_tok_spm_detok_push,
    .detok_text = pl_tok_spm_detok_text,
};
