/*
 * tokenizer/hf_normalize.c - the normalizer chain of a tokenizer.json: each step reads one
 * buffer and writes the other.
 *
 * Unicode forms go through utf8proc (decompose into code points, normalize, re-encode) with
 * buffers from pl_malloc; text that is all ASCII is left as it is, since every form keeps
 * ASCII unchanged. Lowercase maps each code point on its own, as Rust's char::to_lowercase
 * does: utf8proc's simple mapping plus the one unconditional multi-character case, U+0130
 * (İ -> i + U+0307).
 */
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/hf.h"
#include "util/alloc.h"
#include "util/utf8.h"

static bool all_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return false;
    return true;
}

static pl_status unicode_form(pl_hf_norm_kind kind, const char *s, size_t n, pl_tok_buf *out) {
    out->n = 0;
    if (all_ascii(s, n)) return pl_tok_buf_put(out, s, n);
    utf8proc_option_t opt = UTF8PROC_STABLE;
    switch (kind) {
    case PL_HF_NFC: opt |= UTF8PROC_COMPOSE; break;
    case PL_HF_NFD: opt |= UTF8PROC_DECOMPOSE; break;
    case PL_HF_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    /* Decomposition can grow the text (at most 18 code points per character in Unicode 15;
     * utf8proc says how many it needs when the first guess is short). */
    utf8proc_ssize_t cap = (utf8proc_ssize_t)n + 16, got;
    utf8proc_int32_t *cps = NULL;
    for (;;) {
        pl_free(cps);
        cps = pl_reallocarray(NULL, (size_t)cap, sizeof *cps);
        if (!cps) return pl_fail(PL_ERR_OUT_OF_MEMORY, "normalizer: %zu-byte text", n);
        got = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, cps, cap, opt);
        if (got < 0 || got <= cap) break;
        cap = got;
    }
    pl_status st = PL_OK;
    if (got >= 0) got = utf8proc_normalize_utf32(cps, got, opt);
    if (got < 0) {
        st = got == UTF8PROC_ERROR_NOMEM
                 ? pl_fail(PL_ERR_OUT_OF_MEMORY, "normalizer: %zu-byte text", n)
                 : pl_fail(PL_ERR_FORMAT, "normalizer: utf8proc: %s", utf8proc_errmsg(got));
    } else {
        st = pl_tok_buf_reserve(out, 4 * (size_t)got);
        for (utf8proc_ssize_t i = 0; i < got && st == PL_OK; i++)
            out->n += (size_t)pl_utf8_encode((uint32_t)cps[i], out->p + out->n);
    }
    pl_free(cps);
    return st;
}

static pl_status lowercase(const char *s, size_t n, pl_tok_buf *out) {
    out->n = 0;
    PL_TRY(pl_tok_buf_reserve(out, 2 * n)); /* no lowercase form is longer than 2x */
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            out->p[out->n++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
            i++;
            continue;
        }
        uint32_t cp;
        i += (size_t)pl_utf8_decode(s + i, n - i, &cp);
        if (cp == 0x130) {
            out->p[out->n++] = 'i';
            out->n += (size_t)pl_utf8_encode(0x307, out->p + out->n);
        } else {
            out->n += (size_t)pl_utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp),
                                                 out->p + out->n);
        }
    }
    return PL_OK;
}

/* Replaces every non-overlapping occurrence (leftmost first) of the step's pattern. */
static pl_status replace(const pl_hf_norm *nm, pl_tok_matcher *m, const char *s, size_t n,
                         pl_tok_buf *out) {
    out->n = 0;
    size_t at = 0;
    if (nm->kind == PL_HF_REPLACE_STR) {
        for (;;) {
            const char *hit = n - at >= nm->pat_len ? memmem(s + at, n - at, nm->pat, nm->pat_len)
                                                    : NULL;
            if (!hit) break;
            PL_TRY(pl_tok_buf_put(out, s + at, (size_t)(hit - (s + at))));
            PL_TRY(pl_tok_buf_put(out, nm->str, nm->str_len));
            at = (size_t)(hit - s) + nm->pat_len;
        }
    } else {
        pl_tok_regex_iter it = {0};
        for (;;) {
            size_t st, en;
            bool found;
            PL_TRY(pl_tok_regex_next(&nm->re, m, s, n, &it, &st, &en, &found));
            if (!found) break;
            PL_TRY(pl_tok_buf_put(out, s + at, st - at));
            PL_TRY(pl_tok_buf_put(out, nm->str, nm->str_len));
            at = en;
        }
    }
    return pl_tok_buf_put(out, s + at, n - at);
}

pl_status pl_hf_normalize(const pl_hf *h, pl_tok_matcher *m, const char *s, size_t len,
                          pl_tok_buf *out, pl_tok_buf *scratch) {
    /* Steps alternate between the two buffers; the input of the first is s itself. */
    pl_tok_buf *bufs[2] = {out, scratch};
    int cur = -1; /* which buffer holds the text; -1: still s */
    for (int i = 0; i < h->n_norm; i++) {
        const pl_hf_norm *nm = &h->norm[i];
        const char *in = cur < 0 ? s : bufs[cur]->p ? bufs[cur]->p : ""; /* NULL when empty */
        size_t in_n = cur < 0 ? len : bufs[cur]->n;
        pl_tok_buf *dst = bufs[cur == 0 ? 1 : 0];
        switch (nm->kind) {
        case PL_HF_NFC: case PL_HF_NFD: case PL_HF_NFKC: case PL_HF_NFKD:
            PL_TRY(unicode_form(nm->kind, in, in_n, dst));
            break;
        case PL_HF_LOWERCASE:
            PL_TRY(lowercase(in, in_n, dst));
            break;
        case PL_HF_PREPEND:
            dst->n = 0;
            if (in_n > 0) PL_TRY(pl_tok_buf_put(dst, nm->str, nm->str_len));
            PL_TRY(pl_tok_buf_put(dst, in, in_n));
            break;
        case PL_HF_REPLACE_STR: case PL_HF_REPLACE_RE:
            PL_TRY(replace(nm, m, in, in_n, dst));
            break;
        }
        cur = dst == out ? 0 : 1;
    }
    if (cur < 0) {
        out->n = 0;
        return pl_tok_buf_put(out, s, len);
    }
    if (cur == 1) { /* the result must end up in out */
        out->n = 0;
        PL_TRY(pl_tok_buf_put(out, scratch->p, scratch->n));
    }
    return PL_OK;
}
