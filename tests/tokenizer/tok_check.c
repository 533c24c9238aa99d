/*
 * tests/tokenizer/tok_check.c - see tok_check.h. The oracle throughout is pl_tok_decode,
 * i.e. the SentencePiece library's own Decode (plus the documented NUL -> U+FFFD mapping);
 * the streaming decoder under test shares no decoding code with it.
 */
#include "tok_check.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"

bool tok_utf8_valid(const char *s, size_t n, size_t *bad_at) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            goto bad;
        }
        if (n - i < len) goto bad;
        for (size_t j = 1; j < len; j++) {
            if ((u[i + j] & 0xC0) != 0x80) goto bad;
            cp = cp << 6 | (u[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) goto bad;
        i += len;
        continue;
    bad:
        if (bad_at) *bad_at = i;
        return false;
    }
    return true;
}

void tok_ids_find(const pl_tokenizer *t, tok_ids *out) {
    memset(out, 0, sizeof *out);
    for (int b = 0; b < 256; b++) out->byte_id[b] = -1;
    int n = pl_tok_vocab_size(t);
    for (int32_t id = 0; id < n; id++) {
        const char *p = pl_tok_piece(t, id);
        unsigned b;
        char close;
        if (strlen(p) == 6 && sscanf(p, "<0x%2X%c", &b, &close) == 2 && close == '>' &&
            out->byte_id[b] < 0) {
            out->byte_id[b] = id;
            continue;
        }
        bool special = strcmp(p, "\xE2\x96\x81") == 0 || strcmp(p, "<s>") == 0 ||
                       strcmp(p, "</s>") == 0 || strcmp(p, "<unk>") == 0 || id == 0 ||
                       (p[0] == '<' && p[strlen(p) - 1] == '>' && id < 8);
        if (special && out->n_special < 16) out->special[out->n_special++] = id;
    }
}

/* Appends the UTF-8 spelling of code point cp as byte pieces; returns how many. */
static size_t spell_utf8(const tok_ids *k, uint32_t cp, int32_t *ids) {
    unsigned char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp, n = 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | cp >> 6), b[1] = (unsigned char)(0x80 | (cp & 0x3F)), n = 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | cp >> 12), b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F)), n = 3;
    } else {
        b[0] = (unsigned char)(0xF0 | cp >> 18), b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F)), b[3] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (k->byte_id[b[i]] >= 0) ids[m++] = k->byte_id[b[i]];
    return m;
}

size_t tok_random_ids(const pl_tokenizer *t, const tok_ids *k, pl_test_rng *r, int32_t *ids,
                      size_t max) {
    size_t target = 1 + pl_test_rng_below(r, (uint32_t)max);
    size_t n = 0;
    int vocab = pl_tok_vocab_size(t);
    while (n < target) {
        int32_t tmp[4];
        size_t m = 0;
        uint32_t what = pl_test_rng_below(r, 10);
        if (what < 4) {
            tmp[m++] = (int32_t)pl_test_rng_below(r, (uint32_t)vocab);
        } else if (what < 6) {
            int32_t id = k->byte_id[pl_test_rng_below(r, 256)];
            if (id >= 0) tmp[m++] = id;
        } else if (what < 9) {
            /* A character of 1..4 bytes from assorted ranges, including the edges the
             * validator cares about (U+FFFD, U+10FFFF, just below the surrogates). */
            static const uint32_t edges[] = {0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFD,
                                             0xFFFF, 0x10000, 0x10FFFF, 0xE9, 0x2713, 0x1F408};
            uint32_t cp = pl_test_rng_below(r, 3) == 0
                              ? edges[pl_test_rng_below(r, sizeof edges / sizeof edges[0])]
                              : pl_test_rng_below(r, 0x110000);
            if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0x4E2D;
            m = spell_utf8(k, cp, tmp);
            if (m > 1 && pl_test_rng_below(r, 4) == 0) m--; /* cut short: held back, then FFFD */
        } else if (k->n_special > 0) {
            tmp[m++] = k->special[pl_test_rng_below(r, (uint32_t)k->n_special)];
        }
        for (size_t i = 0; i < m && n < target; i++) ids[n++] = tmp[i];
    }
    return n;
}

static char *decode_or_die(const pl_tokenizer *t, const int32_t *ids, size_t n, unsigned flags) {
    char *s = NULL;
    cr_assert_eq(pl_tok_decode(t, ids, n, flags & PL_TOK_SKIP_SPECIAL, &s), PL_OK, "decode: %s",
                 pl_last_error());
    return s;
}

static void dump_ids(const pl_tokenizer *t, const int32_t *ids, size_t n) {
    fprintf(stderr, "ids (%zu):", n);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d:%s", (int)ids[i], pl_tok_piece(t, ids[i]));
    fprintf(stderr, "\n");
}

/* Streams ids; returns the concatenation of the chunks followed by the held-back tail that
 * only pl_detok_text shows (pl_malloc, NUL-terminated). */
static char *stream(const pl_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                    bool every_step) {
    pl_detok *d = NULL;
    cr_assert_eq(pl_detok_create(t, flags, &d), PL_OK);
    size_t cap = 64, len = 0;
    char *all = malloc(cap);
    cr_assert_not_null(all);
    for (size_t i = 0; i < n; i++) {
        const char *chunk;
        size_t clen;
        cr_assert_eq(pl_detok_push(d, ids[i], &chunk, &clen), PL_OK, "push: %s",
                     pl_last_error());
        size_t bad = 0;
        if (!tok_utf8_valid(chunk, clen, &bad)) {
            dump_ids(t, ids, i + 1);
            cr_assert_fail("push %zu emitted invalid UTF-8 at chunk offset %zu", i, bad);
        }
        cr_assert_eq(memchr(chunk, '\0', clen), NULL, "push %zu emitted a NUL", i);
        while (len + clen + 1 > cap) cap *= 2;
        all = realloc(all, cap);
        cr_assert_not_null(all);
        memcpy(all + len, chunk, clen);
        len += clen;
        all[len] = '\0';
        if (every_step) {
            char *want = decode_or_die(t, ids, i + 1, flags);
            size_t tlen;
            const char *got = pl_detok_text(d, &tlen);
            if (strlen(want) != tlen || strcmp(got, want) != 0) {
                dump_ids(t, ids, i + 1);
                cr_assert_fail("pl_detok_text after %zu ids is \"%s\", decode gives \"%s\"",
                               i + 1, got, want);
            }
            /* Everything emitted so far is a prefix of the full text. */
            cr_assert_eq(strncmp(all, want, len), 0, "emitted text is not a prefix of decode");
            pl_free(want);
        }
    }
    /* What push has not returned is only what the decoder still holds back. For SentencePiece
     * that is the tail of an unfinished character, which pl_detok_text shows as U+FFFD per
     * byte: at most 3 bytes, so at most 9 bytes of text. */
    size_t tlen;
    const char *text = pl_detok_text(d, &tlen);
    cr_assert_geq(tlen, len);
    cr_assert_eq(memcmp(text, all, len), 0, "pl_detok_text does not start with the pushed text");
    if (strcmp(pl_tok_type(t), "sentencepiece") == 0) {
        cr_assert_leq(tlen - len, 9);
        for (size_t i = len; i < tlen; i += 3)
            cr_assert_eq(memcmp(text + i, "\xEF\xBF\xBD", 3), 0, "held-back tail is not U+FFFD");
    }
    cr_assert(tok_utf8_valid(text, tlen, NULL), "pl_detok_text is not valid UTF-8");
    char *out = pl_strdup(text);
    cr_assert_not_null(out);
    free(all);
    pl_detok_free(d);
    d = NULL;
    return out;
}

void tok_check_stream(const pl_tokenizer *t, const int32_t *ids, size_t n, bool every_step) {
    tok_check_stream_flags(t, ids, n, 0, every_step);
}

/* pl_tok_decode_offsets: the text is decode's, the ids' parts tile it in order, each ends on
 * a character boundary, and what the first i ids were given is a prefix of the decode of the
 * first i ids (checked for every i with every_step): an id never claims text a later id made. */
static void check_offsets(const pl_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                          const char *want, bool every_step) {
    size_t *off = malloc((n + 1) * sizeof *off);
    char *text = NULL;
    cr_assert_not_null(off);
    pl_status s = pl_tok_decode_offsets(t, ids, n, flags, &text, off);
    cr_assert_eq(s, PL_OK, "decode_offsets: %s", pl_last_error());
    if (strcmp(text, want) != 0) {
        dump_ids(t, ids, n);
        cr_assert_fail("decode_offsets gives \"%s\", decode \"%s\"", text, want);
    }
    cr_assert_eq(off[0], 0);
    cr_assert_eq(off[n], strlen(text));
    for (size_t i = 0; i < n; i++) {
        cr_assert_leq(off[i], off[i + 1], "offsets go back at id %zu", i);
        cr_assert_neq((unsigned char)text[off[i + 1]] & 0xC0, 0x80,
                      "id %zu's part ends inside a character", i);
        if (!every_step) continue;
        char *prefix = decode_or_die(t, ids, i + 1, flags);
        if (strncmp(prefix, text, off[i + 1]) != 0 || strlen(prefix) < off[i + 1]) {
            dump_ids(t, ids, i + 1);
            cr_assert_fail("the first %zu ids are given \"%.*s\", their decode is \"%s\"",
                           i + 1, (int)off[i + 1], text, prefix);
        }
        pl_free(prefix);
    }
    pl_free(text);
    free(off);
}

void tok_check_stream_flags(const pl_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                            bool every_step) {
    char *want = decode_or_die(t, ids, n, flags);
    char *got = stream(t, ids, n, flags, every_step);
    if (strcmp(got, want) != 0) {
        dump_ids(t, ids, n);
        cr_assert_fail("streamed \"%s\", decode gives \"%s\"", got, want);
    }
    if (!(flags & PL_TOK_AFTER_PROMPT)) check_offsets(t, ids, n, flags, want, every_step);
    pl_free(got);
    pl_free(want);
}

void tok_check_stream_after(const pl_tokenizer *t, const int32_t *ctx, size_t n_ctx,
                            const int32_t *ids, size_t n) {
    int32_t *both = malloc((n_ctx + n) * sizeof *both);
    cr_assert_not_null(both);
    memcpy(both, ctx, n_ctx * sizeof *ctx);
    memcpy(both + n_ctx, ids, n * sizeof *ids);
    char *prefix = decode_or_die(t, ctx, n_ctx, 0);
    char *full = decode_or_die(t, both, n_ctx + n, 0);
    size_t plen = strlen(prefix);
    cr_assert(plen > 0, "the prompt must decode to non-empty text for this check");
    cr_assert_eq(strncmp(full, prefix, plen), 0, "decode(prompt) is not a prefix of "
                 "decode(prompt + output)");
    char *got = stream(t, ids, n, PL_TOK_AFTER_PROMPT, false);
    if (strcmp(got, full + plen) != 0) {
        dump_ids(t, both, n_ctx + n);
        cr_assert_fail("after a prompt, streamed \"%s\", expected \"%s\"", got, full + plen);
    }
    pl_free(got);
    pl_free(full);
    pl_free(prefix);
    free(both);
}
