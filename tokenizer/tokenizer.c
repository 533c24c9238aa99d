/*
 * tokenizer/tokenizer.c - loading a SentencePiece model, encode, decode, piece lookup, and the
 * per-id decode table that the streaming detokeniser (detok.c) runs on.
 *
 * Data flow: pl_tok_load reads the file itself (so "cannot read" is PL_ERR_IO and "not a
 * model" is PL_ERR_FORMAT, both naming the path), hands the bytes to the library through
 * spm_shim, then walks the vocabulary once to build:
 *   - `pieces`: every piece NUL-terminated, for pl_tok_piece;
 *   - `entries`: (n_vocab) pl_tok_entry, each id's kind, byte and decoded surface, so that
 *     detok.c reproduces the library's decode without calling into C++ per token;
 *   - `ws_rule`: how the library drops a leading "▁", probed by decoding a piece or two
 *     (the public C++ API does not expose the normalizer spec, and probing matches whatever
 *     the installed library version actually does).
 * Encode and decode themselves go through the library, which stays the reference; the tests
 * check detok.c against it over random id sequences.
 *
 * Invariants: a pl_tokenizer is immutable after load. Every surface is NUL-free (NUL ->
 * U+FFFD), and pl_tok_decode applies the same mapping to the library's output.
 */
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer/spm_shim.h"
#include "util/alloc.h"

/* Larger files are refused before reading: the biggest real tokenizers are a few MB. */
#define MAX_MODEL_BYTES ((size_t)1 << 30)
/* Texts longer than this are refused: the library indexes with int in places. */
#define MAX_TEXT_BYTES ((size_t)1 << 30)

#define SPACE_SYMBOL "\xE2\x96\x81" /* U+2581 "▁", SentencePiece's visible space */
#define SPACE_SYMBOL_LEN 3
#define REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */

struct pl_tokenizer {
    pl_tok_spm *spm;
    int n_vocab;
    int bos_id, eos_id;       /* -1 when absent */
    pl_tok_ws_rule ws_rule;
    pl_tok_entry *entries;    /* (n_vocab) */
    const char **piece_ptrs;  /* (n_vocab) pointers into `pieces` */
    char *pieces;             /* every raw piece, NUL-terminated, back to back */
    char *surfaces;           /* every NORMAL/UNKNOWN surface, back to back */
};

// ---- reading the file ----------------------------------------------------------------------

static pl_status read_file(const char *path, unsigned char **out, size_t *out_n) {
    FILE *f = fopen(path, "rb");
    if (!f) return pl_fail(PL_ERR_IO, "tokenizer %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        int e = errno;
        fclose(f);
        return pl_fail(PL_ERR_IO, "tokenizer %s: stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        fclose(f);
        return pl_fail(PL_ERR_IO, "tokenizer %s: not a regular file", path);
    }
    if ((unsigned long long)st.st_size > MAX_MODEL_BYTES) {
        fclose(f);
        return pl_fail(PL_ERR_FORMAT, "tokenizer %s: %lld bytes is too large for a "
                       "SentencePiece model", path, (long long)st.st_size);
    }
    size_t n = (size_t)st.st_size;
    unsigned char *buf = pl_malloc(n);
    if (!buf) {
        fclose(f);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer %s: %zu bytes for the file", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    int read_err = ferror(f);
    fclose(f);
    if (read_err || got != n) {
        pl_free(buf);
        return pl_fail(PL_ERR_IO, "tokenizer %s: short read (%zu of %zu bytes)", path, got, n);
    }
    *out = buf;
    *out_n = n;
    return PL_OK;
}

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

/* True when p[0..n) is valid UTF-8 (NUL allowed: surfaces map it to U+FFFD). */
static bool utf8_ok(const char *p, size_t n) {
    const unsigned char *u = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        int k = pl_tok_utf8_step(u + i, n - i);
        if (k <= 0) return false;
        i += (size_t)k;
    }
    return true;
}

static size_t count_nul(const char *p, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += p[i] == '\0';
    return c;
}

/* Decodes ids with the library; the raw text may hold NULs (caller frees with pl_free). */
static pl_status spm_decode_raw(const pl_tokenizer *t, const int32_t *ids, size_t n,
                                char **out, size_t *out_len) {
    char err[256] = "";
    int rc = pl_tok_spm_decode(t->spm, ids, n, out, out_len, err, sizeof err);
    switch (rc) {
    case PL_TOK_SPM_OK: return PL_OK;
    case PL_TOK_SPM_NOMEM: return pl_fail(PL_ERR_OUT_OF_MEMORY, "decode: %s", err);
    case PL_TOK_SPM_INVALID: return pl_fail(PL_ERR_INVALID_ARGUMENT, "decode: %s", err);
    default: return pl_fail(PL_ERR_FORMAT, "decode: sentencepiece: %s", err);
    }
}

/* Decides ws_rule from what the library does with a NORMAL piece starting with "▁": decoded
 * alone it keeps its space (KEEP) or not. FIRST and ALL differ only when the dropped piece
 * leaves the text empty, i.e. for the piece "▁" itself, so that one is decoded twice. Also a
 * self-check: an answer that fits neither rule means the library decodes differently from
 * what detok.c reproduces, and loading fails rather than streaming wrong text. */
static pl_status probe_ws_rule(pl_tokenizer *t, const char *path) {
    int32_t probe = -1, lone = -1;
    for (int id = 0; id < t->n_vocab; id++) {
        const pl_tok_entry *e = &t->entries[id];
        if (e->kind != PL_TOK_KIND_NORMAL || !e->lead_ws) continue;
        if (probe < 0) probe = id;
        if (e->surface_len == 1) {
            lone = id;
            break;
        }
    }
    t->ws_rule = PL_TOK_WS_ALL;
    if (probe < 0) return PL_OK; /* no piece starts with "▁": the rule never applies */
    const pl_tok_entry *e = &t->entries[probe];
    char *text = NULL;
    pl_status s = pl_tok_decode(t, &probe, 1, &text);
    if (s != PL_OK) return pl_fail_prefix(s, "tokenizer %s: probing piece %d", path, (int)probe);
    size_t len = strlen(text);
    bool kept = len == e->surface_len && memcmp(text, e->surface, len) == 0;
    bool dropped = len + 1 == e->surface_len && memcmp(text, e->surface + 1, len) == 0;
    pl_free(text);
    if (!kept && !dropped)
        return pl_fail(PL_ERR_FORMAT, "tokenizer %s: the library decodes piece %d (\"%s\") in a "
                       "way the streaming decoder does not model", path, (int)probe,
                       t->piece_ptrs[probe]);
    if (kept) {
        t->ws_rule = PL_TOK_WS_KEEP;
        return PL_OK;
    }
    if (lone < 0) return PL_OK;
    int32_t two[2] = {lone, lone};
    s = pl_tok_decode(t, two, 2, &text);
    if (s != PL_OK) return pl_fail_prefix(s, "tokenizer %s: probing piece %d", path, (int)lone);
    len = strlen(text);
    pl_free(text);
    t->ws_rule = len == 0 ? PL_TOK_WS_ALL : PL_TOK_WS_FIRST;
    return PL_OK;
}

/* Builds pieces, piece_ptrs, entries and surfaces from the library's vocabulary, in two
 * passes: sizes first, then one allocation per array. */
static pl_status build_table(pl_tokenizer *t, const char *path) {
    int n = t->n_vocab;
    size_t piece_bytes = 0, surf_bytes = 0;
    int32_t unk = -1;
    for (int id = 0; id < n; id++) {
        size_t len;
        int kind;
        const char *p = pl_tok_spm_piece(t->spm, id, &len, &kind);
        if (!p) return pl_fail(PL_ERR_FORMAT, "tokenizer %s: piece %d unreadable", path, id);
        piece_bytes += len + 1;
        /* Decoded text must be valid UTF-8 whatever the file says; the library does not
         * check its pieces, so a damaged model could otherwise stream broken text. */
        if (kind == PL_TOK_SPM_NORMAL && !utf8_ok(p, len))
            return pl_fail(PL_ERR_FORMAT, "tokenizer %s: piece %d is not valid UTF-8", path, id);
        if (kind == PL_TOK_SPM_NORMAL) surf_bytes += surface_size(p, len);
        if (kind == PL_TOK_SPM_UNKNOWN && unk < 0) unk = id;
    }
    /* The library decodes every unknown id to the one unk surface of the trainer spec, which
     * the C++ API does not expose: decode the first unknown id to learn it. */
    char *unk_text = NULL;
    size_t unk_len = 0;
    if (unk >= 0) {
        pl_status ds = pl_tok_decode(t, &unk, 1, &unk_text);
        if (ds != PL_OK) return pl_fail_prefix(ds, "tokenizer %s: unk surface", path);
        unk_len = strlen(unk_text);
        if (!utf8_ok(unk_text, unk_len)) {
            pl_free(unk_text);
            return pl_fail(PL_ERR_FORMAT, "tokenizer %s: the unk surface is not valid UTF-8",
                           path);
        }
        surf_bytes += unk_len;
    }
    pl_status s = PL_OK;
    if (surf_bytes > UINT32_MAX || piece_bytes > UINT32_MAX) {
        s = pl_fail(PL_ERR_FORMAT, "tokenizer %s: %zu bytes of piece text", path, surf_bytes);
        goto done;
    }
    t->entries = pl_calloc((size_t)n, sizeof *t->entries);
    t->piece_ptrs = pl_calloc((size_t)n, sizeof *t->piece_ptrs);
    t->pieces = pl_malloc(piece_bytes);
    t->surfaces = pl_malloc(surf_bytes);
    if (!t->entries || !t->piece_ptrs || !t->pieces || !t->surfaces) {
        s = pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer %s: tables for %d pieces", path, n);
        goto done;
    }
    const char *unk_surface = t->surfaces; /* first in the arena, shared by unknown ids */
    memcpy(t->surfaces, unk_text ? unk_text : "", unk_len);
    size_t pk = 0, sk = unk_len;
    for (int id = 0; id < n; id++) {
        size_t len;
        int kind;
        const char *p = pl_tok_spm_piece(t->spm, id, &len, &kind);
        memcpy(t->pieces + pk, p, len);
        t->pieces[pk + len] = '\0';
        t->piece_ptrs[id] = t->pieces + pk;
        pk += len + 1;
        pl_tok_entry *e = &t->entries[id];
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
                s = pl_fail(PL_ERR_FORMAT, "tokenizer %s: byte piece %d is not <0xXX>", path, id);
                goto done;
            }
            e->kind = PL_TOK_KIND_BYTE;
            e->byte = (uint8_t)b;
            break;
        }
        default:
            e->kind = PL_TOK_KIND_NORMAL;
            e->lead_ws = len >= SPACE_SYMBOL_LEN && memcmp(p, SPACE_SYMBOL, SPACE_SYMBOL_LEN) == 0;
            e->surface = t->surfaces + sk;
            e->surface_len = (uint32_t)write_surface(t->surfaces + sk, p, len, true);
            sk += e->surface_len;
            break;
        }
    }
    s = probe_ws_rule(t, path);
done:
    pl_free(unk_text);
    return s;
}

// ---- public: load, free, vocabulary ---------------------------------------------------------

pl_status pl_tok_load(const char *path, pl_tokenizer **out) {
    if (!path || !out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_tok_load: NULL %s",
                                      !path ? "path" : "out");
    unsigned char *bytes = NULL;
    size_t n_bytes = 0;
    PL_TRY(read_file(path, &bytes, &n_bytes));
    pl_tokenizer *t = pl_calloc(1, sizeof *t);
    if (!t) {
        pl_free(bytes);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer %s", path);
    }
    pl_status s = PL_OK;
    char err[256] = "";
    int rc = pl_tok_spm_load(bytes, n_bytes, &t->spm, err, sizeof err);
    if (rc != PL_TOK_SPM_OK) {
        s = rc == PL_TOK_SPM_NOMEM
                ? pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer %s: %s", path, err)
                : pl_fail(PL_ERR_FORMAT, "tokenizer %s: not a valid SentencePiece model (%s)",
                          path, err);
        goto fail;
    }
    if (has_denormalizer(bytes, n_bytes)) {
        s = pl_fail(PL_ERR_UNSUPPORTED, "tokenizer %s: models with a denormalizer "
                    "(denormalizer_spec) are not supported", path);
        goto fail;
    }
    t->n_vocab = pl_tok_spm_piece_count(t->spm);
    t->bos_id = pl_tok_spm_bos_id(t->spm);
    t->eos_id = pl_tok_spm_eos_id(t->spm);
    s = build_table(t, path);
    if (s != PL_OK) goto fail;
    pl_free(bytes);
    *out = t;
    return PL_OK;
fail:
    pl_free(bytes);
    pl_tok_free(t);
    return s;
}

void pl_tok_free(pl_tokenizer *t) {
    if (!t) return;
    pl_tok_spm_free(t->spm);
    pl_free(t->entries);
    pl_free(t->piece_ptrs);
    pl_free(t->pieces);
    pl_free(t->surfaces);
    pl_free(t);
}

int pl_tok_vocab_size(const pl_tokenizer *t) { return t->n_vocab; }
int pl_tok_bos_id(const pl_tokenizer *t) { return t->bos_id; }
int pl_tok_eos_id(const pl_tokenizer *t) { return t->eos_id; }

const char *pl_tok_piece(const pl_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    return t->piece_ptrs[id];
}

const pl_tok_entry *pl_tok_entry_of(const pl_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    return &t->entries[id];
}

pl_tok_ws_rule pl_tok_ws_rule_of(const pl_tokenizer *t) { return t->ws_rule; }

// ---- public: encode, decode ----------------------------------------------------------------

/* See tokenizer.h. The second byte carries all the range rules (overlongs, surrogates, the
 * U+10FFFF ceiling); later bytes only need to be continuation bytes. SentencePiece's
 * DecodeUTF8 accepts the same set, which is what lets detok.c cut byte runs as it does. */
int pl_tok_utf8_step(const unsigned char *b, size_t n) {
    unsigned char c = b[0];
    if (c < 0x80) return 1;
    int need;
    unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;      /* overlong */
        if (c == 0xED) hi = 0x9F;      /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;      /* overlong */
        if (c == 0xF4) hi = 0x8F;      /* above U+10FFFF */
    } else {
        return -1;
    }
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= n) return 0;
        unsigned char x = b[i];
        if (i == 1 ? (x < lo || x > hi) : (x & 0xC0) != 0x80) return -1;
    }
    return need;
}

pl_status pl_tok_encode(const pl_tokenizer *t, const char *text, size_t len, bool add_bos,
                        int32_t **out_ids, size_t *out_n) {
    if (!t || (!text && len) || !out_ids || !out_n)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_tok_encode: NULL %s",
                       !t ? "tokenizer" : !out_ids ? "out_ids" : !out_n ? "out_n" : "text");
    if (len > MAX_TEXT_BYTES)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "text: %zu bytes is longer than the %zu-byte "
                       "limit", len, MAX_TEXT_BYTES);
    const unsigned char *u = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        if (u[i] == 0)
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "text: NUL byte at byte offset %zu", i);
        int k = pl_tok_utf8_step(u + i, len - i);
        if (k <= 0)
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "text: invalid UTF-8 at byte offset %zu "
                           "(byte 0x%02X)", i, u[i]);
        i += (size_t)k;
    }
    char err[256] = "";
    int rc = pl_tok_spm_encode(t->spm, len ? text : "", len, add_bos ? t->bos_id : -1, out_ids,
                               out_n, err, sizeof err);
    if (rc == PL_TOK_SPM_OK) return PL_OK;
    if (rc == PL_TOK_SPM_NOMEM) return pl_fail(PL_ERR_OUT_OF_MEMORY, "encode: %s", err);
    /* The text was validated above, so a library failure is the model's doing. */
    return pl_fail(PL_ERR_FORMAT, "encode: sentencepiece: %s", err);
}

pl_status pl_tok_decode(const pl_tokenizer *t, const int32_t *ids, size_t n, char **out_text) {
    if (!t || (!ids && n) || !out_text)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_tok_decode: NULL %s",
                       !t ? "tokenizer" : !out_text ? "out_text" : "ids");
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "ids[%zu] = %d is outside the vocabulary "
                           "[0, %d)", i, (int)ids[i], t->n_vocab);
    }
    char *raw = NULL;
    size_t len = 0;
    static const int32_t none[1] = {0};
    PL_TRY(spm_decode_raw(t, n ? ids : none, n, &raw, &len));
    size_t nuls = count_nul(raw, len);
    if (nuls == 0) {
        *out_text = raw;
        return PL_OK;
    }
    /* Keep the result a proper C string: NUL -> U+FFFD, as detok.c does. */
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
