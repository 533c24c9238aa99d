/*
 * tokenizer/tok_bytes.c - the bytes one token adds to a text it continues: what a grammar
 * matches tokens by (grammar/vocab.c). It is the streaming decode of the token after a
 * prompt, taken before the text is made valid UTF-8, so byte tokens give their raw byte and
 * a token that splits a character gives its part of it.
 *
 * SentencePiece: a normal piece's surface ("▁" as a space), a byte piece's byte; control and
 * unknown pieces give none. tokenizer.json: the decoder chain on the one token, without the
 * rules for the start of a text (Metaspace's first-token rule, a Strip after Fuse), since
 * an output continues its prompt; special added tokens and the unknown token give none.
 * Strip at the end of the whole text (a Strip with stop after Fuse) is not applied: such a
 * decoder would cut characters the grammar already counted.
 */
#include <string.h>

#include "tokenizer/hf.h"
#include "tokenizer/spm.h"
#include "util/alloc.h"
#include "util/utf8.h"

static int fallback_byte(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static int utf8_len(unsigned char c) { return c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2; }

/* out = in with every pat replaced by rep. */
static pl_status replace_all(const pl_tok_buf *in, const char *pat, size_t pat_len,
                             const char *rep, size_t rep_len, pl_tok_buf *out) {
    out->n = 0;
    size_t at = 0, i = 0;
    /* patterns are a few bytes (a Replace decoder's, the Metaspace character): a plain scan */
    while (pat_len && i + pat_len <= in->n) {
        if (memcmp(in->p + i, pat, pat_len) != 0) {
            i++;
            continue;
        }
        PL_TRY(pl_tok_buf_put(out, in->p + at, i - at));
        PL_TRY(pl_tok_buf_put(out, rep, rep_len));
        i += pat_len;
        at = i;
    }
    return pl_tok_buf_put(out, in->p + at, in->n - at);
}

static pl_status hf_bytes(const pl_tokenizer *t, int32_t id, pl_tok_buf *out, bool *has) {
    const pl_hf *h = t->impl;
    *has = false;
    if (id == h->model.unk_id) return PL_OK;
    pl_tok_buf a = {0}, b = {0};
    const char *piece = t->piece_of[id];
    pl_status st = pl_tok_buf_put(&a, piece, strlen(piece));
    bool joined = false; /* a stage joined tokens: later stages see the whole text */
    for (int k = 0; k < h->n_dec && st == PL_OK; k++) {
        const pl_hf_dec *d = &h->dec[k];
        b.n = 0;
        switch (d->kind) {
        case PL_HF_DEC_REPLACE:
            st = replace_all(&a, d->pat, d->pat_len, d->content, d->content_len, &b);
            break;
        case PL_HF_DEC_BYTE_FALLBACK: {
            int v = fallback_byte(a.p, a.n);
            if (v >= 0) {
                char c = (char)v;
                st = pl_tok_buf_put(&b, &c, 1);
            } else {
                st = pl_tok_buf_put(&b, a.p, a.n);
            }
            break;
        }
        case PL_HF_DEC_FUSE:
            joined = true;
            st = pl_tok_buf_put(&b, a.p, a.n);
            break;
        case PL_HF_DEC_JOIN_SPACE:
            joined = true;
            st = pl_tok_buf_put(&b, " ", 1);
            if (st == PL_OK) st = pl_tok_buf_put(&b, a.p, a.n);
            break;
        case PL_HF_DEC_STRIP: {
            size_t lo = 0, hi = a.n;
            if (!joined) {
                for (uint32_t i = 0; i < d->start && hi - lo >= (size_t)d->ch_len &&
                                     !memcmp(a.p + lo, d->ch, (size_t)d->ch_len); i++)
                    lo += (size_t)d->ch_len;
                for (uint32_t i = 0; i < d->stop && hi - lo >= (size_t)d->ch_len &&
                                     !memcmp(a.p + hi - d->ch_len, d->ch, (size_t)d->ch_len); i++)
                    hi -= (size_t)d->ch_len;
            }
            st = pl_tok_buf_put(&b, a.p + lo, hi - lo);
            break;
        }
        case PL_HF_DEC_METASPACE:
            st = replace_all(&a, d->ch, (size_t)d->ch_len, " ", 1, &b);
            break;
        case PL_HF_DEC_BYTE_LEVEL: {
            joined = true;
            bool own = false;
            for (size_t j = 0; j < a.n && st == PL_OK;) {
                uint32_t cp;
                int len = utf8_len((unsigned char)a.p[j]);
                if (j + (size_t)len > a.n) {
                    own = true;
                    break;
                }
                pl_utf8_decode(a.p + j, a.n - j, &cp);
                int byte = pl_hf_byte_of_char(cp);
                if (byte < 0) {
                    own = true;
                    break;
                }
                char c = (char)byte;
                st = pl_tok_buf_put(&b, &c, 1);
                j += (size_t)len;
            }
            if (own && st == PL_OK) {
                b.n = 0;
                st = pl_tok_buf_put(&b, a.p, a.n);
            }
            break;
        }
        }
        pl_tok_buf t2 = a;
        a = b;
        b = t2;
    }
    if (st == PL_OK) {
        out->n = 0;
        st = pl_tok_buf_put(out, a.p, a.n);
        *has = a.n > 0;
    }
    pl_tok_buf_free(&a);
    pl_tok_buf_free(&b);
    return st;
}

static pl_status token_bytes(const pl_tokenizer *t, int32_t id, pl_tok_buf *out, bool *out_has) {
    *out_has = false;
    out->n = 0;
    if (id < 0 || id >= t->n_vocab || t->special[id]) return PL_OK;
    const pl_tok_entry *e = pl_tok_entry_of(t, id);
    if (e) {
        if (e->kind == PL_TOK_KIND_NORMAL && e->surface_len > 0) {
            PL_TRY(pl_tok_buf_put(out, e->surface, e->surface_len));
            *out_has = true;
        } else if (e->kind == PL_TOK_KIND_BYTE) {
            char c = (char)e->byte;
            PL_TRY(pl_tok_buf_put(out, &c, 1));
            *out_has = true;
        }
        return PL_OK;
    }
    return hf_bytes(t, id, out, out_has);
}

pl_status pl_tok_token_bytes(const pl_tokenizer *t, char **out_bytes, uint32_t **out_offsets) {
    uint32_t *off = pl_malloc(((size_t)t->n_vocab + 1) * sizeof *off);
    if (!off) return pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer: token bytes of %d ids", t->n_vocab);
    pl_tok_buf all = {0}, one = {0};
    pl_status st = PL_OK;
    for (int32_t id = 0; id < t->n_vocab && st == PL_OK; id++) {
        off[id] = (uint32_t)all.n;
        bool has;
        st = token_bytes(t, id, &one, &has);
        if (st == PL_OK && has) st = pl_tok_buf_put(&all, one.p, one.n);
        if (st == PL_OK && all.n > UINT32_MAX - 4096)
            st = pl_fail(PL_ERR_TOO_LONG, "tokenizer: token bytes exceed 4 GB");
    }
    pl_tok_buf_free(&one);
    if (st == PL_OK) st = pl_tok_buf_put(&all, "", 1); /* never an empty buffer */
    if (st != PL_OK) {
        pl_tok_buf_free(&all);
        pl_free(off);
        return st;
    }
    off[t->n_vocab] = (uint32_t)all.n - 1;
    *out_bytes = all.p;
    *out_offsets = off;
    return PL_OK;
}
