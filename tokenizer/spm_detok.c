/*
 * tokenizer/spm_detok.c - streaming detokenisation for the SentencePiece implementation: ids
 * in, complete UTF-8 text out, one id at a time, with exactly the text SentencePiece's decode
 * would give for all ids so far.
 *
 * The library's decode (sentencepiece_processor.cc, Decode) is a left-to-right pass:
 *   - a run of byte pieces is turned into bytes, then cut into UTF-8 characters; a byte that
 *     does not start a complete valid character becomes U+FFFD and the cut restarts at the
 *     next byte. The decision at a byte needs at most the next 3 bytes of the same run.
 *   - any other piece first closes the byte run, then: control -> nothing; unknown -> the
 *     unk surface; normal -> the piece with "▁" -> ' ', minus its first "▁" when the
 *     "bos whitespace" window is still open (see pl_tok_ws_rule).
 *   - the window closes for good at a non-byte piece once text is non-empty, or (rule FIRST)
 *     once one piece has had its "▁" dropped.
 * This file replays that pass incrementally. The only look-ahead is the byte run, so at most
 * 3 bytes are ever held back (`pending`); everything else is emitted at once. A push is
 * O(length of the piece): no earlier id is decoded again.
 *
 * Invariants (between calls): text[0..text_len) is exactly what push has returned so far
 * and text[text_len] == '\0'; n_pending <= 3 and pending[0..n_pending) is a proper prefix of
 * a valid UTF-8 character; text_cap >= text_len + RESERVE once anything was pushed, so
 * pl_detok_text can render the held-back bytes without allocating.
 */
#include <string.h>

#include "tokenizer/spm.h"
#include "util/alloc.h"
#include "util/utf8.h"

#define REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */
/* Room pl_detok_text needs beyond text_len: up to 4 held-back bytes as U+FFFD, plus NUL. */
#define RESERVE (4 * 3 + 1)

typedef struct spm_detok {
    pl_detok base;
    char *text;           /* (text_cap) bytes: text_len bytes emitted so far, NUL-terminated,
                             and always room for 4 held-back bytes as U+FFFD (13 bytes) */
    size_t text_len, text_cap;
    uint8_t pending[4];   /* byte-fallback bytes of a character not complete yet */
    int n_pending;        /* 0..3 between pushes */
    bool bos_ws_open;     /* a leading "▁" would still be dropped (library's is_bos_ws) */
    bool bos_ws_seen;     /* the last non-byte piece had its leading "▁" dropped */
    const pl_tok_entry *entries; /* the tokenizer's decode table */
    pl_tok_ws_rule ws_rule;
} spm_detok;

pl_status pl_tok_spm_detok_create(const pl_tokenizer *t, const pl_tok_entry *entries,
                                  pl_tok_ws_rule ws_rule, unsigned flags, pl_detok **out) {
    spm_detok *d = pl_calloc(1, sizeof *d);
    if (!d) return pl_fail(PL_ERR_OUT_OF_MEMORY, "detok: state");
    d->base.tok = t;
    d->entries = entries;
    d->ws_rule = ws_rule;
    /* After a prompt, text already exists, so the window for dropping "▁" is closed. */
    d->bos_ws_open = !(flags & PL_TOK_AFTER_PROMPT);
    *out = &d->base;
    return PL_OK;
}

void pl_tok_spm_detok_free(pl_detok *base) {
    spm_detok *d = (spm_detok *)base;
    pl_free(d->text);
    pl_free(d);
}

/* Appends n bytes; capacity was reserved by the caller. */
static void put(spm_detok *d, const char *s, size_t n) {
    memcpy(d->text + d->text_len, s, n);
    d->text_len += n;
}

/* Emits one decided byte-run unit: a complete character, or U+FFFD for an invalid byte. NUL
 * (the piece <0x00>) becomes U+FFFD, as pl_tok_decode does, so the text stays a C string. */
static void put_char(spm_detok *d, const unsigned char *b, int len) {
    if (len == 1 && b[0] == 0)
        put(d, REPLACEMENT, 3);
    else
        put(d, (const char *)b, (size_t)len);
}

/* Cuts pending into characters as far as the bytes present decide it. With at_end (the run
 * is closed by a non-byte piece) an incomplete prefix is decided too: invalid, as the library
 * finds when the run is too short for the lead byte. */
static void drain(spm_detok *d, bool at_end) {
    int start = 0;
    while (start < d->n_pending) {
        const unsigned char *b = d->pending + start;
        int k = pl_utf8_step(b, (size_t)(d->n_pending - start));
        if (k == 0 && !at_end) break; /* could still complete: hold back */
        if (k > 0) {
            put_char(d, b, k);
            start += k;
        } else {
            put(d, REPLACEMENT, 3);
            start += 1;
        }
    }
    memmove(d->pending, d->pending + start, (size_t)(d->n_pending - start));
    d->n_pending -= start;
}

/* Makes room for `more` bytes beyond text_len plus RESERVE, growing geometrically so pushes
 * are amortised O(1) in the copy. */
static pl_status reserve(spm_detok *d, size_t more) {
    size_t need = d->text_len + more + RESERVE;
    if (need <= d->text_cap) return PL_OK;
    return pl_grow_array((void **)&d->text, &d->text_cap, need, 1, "detok: text");
}

pl_status pl_tok_spm_detok_push(pl_detok *base, int32_t id, const char **out_new,
                                size_t *out_len) {
    spm_detok *d = (spm_detok *)base;
    const pl_tok_entry *e = &d->entries[id]; /* id checked by the caller */
    /* Everything this push can write: the closed run (3 bytes of U+FFFD each at most) and the
     * surface. Reserved first, so a failure leaves the state as it was. */
    PL_TRY(reserve(d, 4 * 3 + e->surface_len));
    size_t start = d->text_len;

    if (e->kind == PL_TOK_KIND_BYTE) {
        d->pending[d->n_pending++] = e->byte;
        drain(d, false);
    } else {
        drain(d, true);
        if (d->bos_ws_seen || d->text_len > 0) d->bos_ws_open = false;
        bool dropped = false;
        if (e->kind == PL_TOK_KIND_NORMAL) {
            const char *s = e->surface;
            size_t n = e->surface_len;
            if (d->bos_ws_open && e->lead_ws && d->ws_rule != PL_TOK_WS_KEEP) {
                s++;
                n--;
                /* Under ALL (remove_extra_whitespaces) the window stays open while the text
                 * is empty; under FIRST one dropped "▁" closes it. */
                dropped = d->ws_rule == PL_TOK_WS_FIRST;
            }
            put(d, s, n);
        } else if (e->kind == PL_TOK_KIND_UNKNOWN) {
            put(d, e->surface, e->surface_len);
        }
        d->bos_ws_seen = dropped;
    }
    d->text[d->text_len] = '\0';
    *out_new = d->text + start;
    *out_len = d->text_len - start;
    return PL_OK;
}

const char *pl_tok_spm_detok_text(pl_detok *base, size_t *out_len) {
    spm_detok *d = (spm_detok *)base;
    if (!d->text) { /* nothing pushed yet (so nothing held back either) */
        if (out_len) *out_len = 0;
        return "";
    }
    /* Held-back bytes are an incomplete sequence at the very end: the library gives one
     * U+FFFD per byte. Rendered past text_len, so later pushes are unaffected. */
    size_t len = d->text_len;
    for (int i = 0; i < d->n_pending; i++) {
        memcpy(d->text + len, REPLACEMENT, 3);
        len += 3;
    }
    d->text[len] = '\0';
    if (out_len) *out_len = len;
    return d->text;
}
