/*
 * tokenizer/hf_decode.c - decoding with a tokenizer.json's decoder chain, twice over:
 *
 * - pl_hf_decode: the chain as Rust's Decoder::decode_chain runs it, on whole lists of
 *   strings (each stage maps the list of tokens to a new list; the result is their
 *   concatenation). Simple and close to the reference: the tests hold the stream to it.
 * - the streaming detokeniser: the same chain as a pipeline of small state machines fed one
 *   token at a time. Each stage receives events - BEGIN a token, DATA (bytes of it), END it -
 *   and sends events to the next; the last feeds the text. Stages that join tokens (Fuse,
 *   ByteLevel, the " " join of a missing decoder) send one BEGIN and then only DATA, so the
 *   stages after them see the whole output as one growing token ("text mode"). What a stage
 *   cannot decide yet it holds back, boundedly: a partial UTF-8 character (3 bytes), a prefix
 *   of a Replace pattern (< 64 bytes), trailing Strip characters (<= 16), the first bytes of a
 *   token that may be "<0xXX>" (6 bytes). So each push is O(length of the piece).
 *
 * After a push the tail - what the stages hold, rendered as if the text ended there - is
 * computed on a copy of the stage states and kept after the text (past its NUL), so
 * pl_detok_text only moves it into place. A push that fails for memory restores the states.
 *
 * Invalid UTF-8 from bytes (ByteLevel, ByteFallback) becomes U+FFFD per maximal invalid
 * subsequence in both paths (see hf.h); NUL becomes U+FFFD at the very end of both paths.
 */
#include <string.h>

#include "tokenizer/hf.h"
#include "util/alloc.h"
#include "util/utf8.h"

// ---- shared pieces ----------------------------------------------------------------------------

/* The token string of id with SKIP_SPECIAL applied: NULL when it is skipped. */
static const char *token_of(const pl_tokenizer *t, int32_t id, unsigned flags) {
    if ((flags & PL_TOK_SKIP_SPECIAL) && t->special[id]) return NULL;
    return t->piece_of[id];
}

/* "<0xHH>" (Rust: six bytes, "<0x", two radix-16 digits u8::from_str_radix accepts, ">"). */
static int byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0, digits = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) {
            if (i == 3 && c == '+') continue; /* from_str_radix takes a leading '+' */
            return -1;
        }
        v = v * 16 + d;
        digits++;
    }
    return digits > 0 ? v : -1;
}

static bool isxdigit_ascii(uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Appends text with NUL -> U+FFFD. */
static pl_status put_text(pl_tok_buf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const char *z = memchr(s + i, '\0', n - i);
        size_t k = z ? (size_t)(z - (s + i)) : n - i;
        PL_TRY(pl_tok_buf_put(b, s + i, k));
        i += k;
        if (z) {
            PL_TRY(pl_tok_buf_put(b, PL_TOK_REPLACEMENT, 3));
            i++;
        }
    }
    return PL_OK;
}

// ---- whole-list decode ------------------------------------------------------------------------

typedef struct tok {
    size_t off, len;
} tok;

typedef struct tlist {
    pl_tok_buf text; /* every token's bytes, back to back */
    tok *v;          /* (n, cap) */
    size_t n, cap;
} tlist;

static pl_status tl_begin(tlist *l) {
    if (l->n == l->cap)
        PL_TRY(pl_grow_array((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v, "decode"));
    l->v[l->n++] = (tok){l->text.n, 0};
    return PL_OK;
}

static pl_status tl_put(tlist *l, const void *s, size_t n) {
    PL_TRY(pl_tok_buf_put(&l->text, s, n));
    l->v[l->n - 1].len += n;
    return PL_OK;
}

static void tl_free(tlist *l) {
    pl_tok_buf_free(&l->text);
    pl_free(l->v);
    *l = (tlist){0};
}

static bool has_char_at(const char *s, size_t n, size_t at, const char *ch, int ch_len) {
    return n - at >= (size_t)ch_len && memcmp(s + at, ch, (size_t)ch_len) == 0;
}

/* One stage over the list `in` into `out`. */
static pl_status stage_list(const pl_hf_dec *d, const tlist *in, tlist *out) {
    const char *base = in->text.p ? in->text.p : ""; /* NULL while every token is empty */
    switch (d->kind) {
    case PL_HF_DEC_REPLACE:
        for (size_t i = 0; i < in->n; i++) {
            const char *s = base + in->v[i].off;
            size_t n = in->v[i].len, at = 0;
            PL_TRY(tl_begin(out));
            for (;;) {
                const char *hit = n - at >= d->pat_len ? memmem(s + at, n - at, d->pat, d->pat_len)
                                                       : NULL;
                if (!hit) break;
                PL_TRY(tl_put(out, s + at, (size_t)(hit - (s + at))));
                PL_TRY(tl_put(out, d->content, d->content_len));
                at = (size_t)(hit - s) + d->pat_len;
            }
            PL_TRY(tl_put(out, s + at, n - at));
        }
        return PL_OK;
    case PL_HF_DEC_BYTE_FALLBACK: {
        /* a run of byte tokens becomes one token: its bytes as (lossy) UTF-8 */
        pl_tok_buf run = {0};
        pl_status st = PL_OK;
        for (size_t i = 0; i < in->n && st == PL_OK;) {
            const char *s = base + in->v[i].off;
            if (byte_token(s, in->v[i].len) < 0) {
                st = tl_begin(out);
                if (st == PL_OK) st = tl_put(out, s, in->v[i].len);
                i++;
                continue;
            }
            run.n = 0;
            int b;
            for (; i < in->n && st == PL_OK &&
                   (b = byte_token(base + in->v[i].off, in->v[i].len)) >= 0;
                 i++) {
                char c = (char)b;
                st = pl_tok_buf_put(&run, &c, 1);
            }
            pl_tok_buf text = {0};
            if (st == PL_OK) st = pl_hf_lossy_append(&text, (const unsigned char *)run.p, run.n);
            if (st == PL_OK) st = tl_begin(out);
            if (st == PL_OK) st = tl_put(out, text.p, text.n);
            pl_tok_buf_free(&text);
        }
        pl_tok_buf_free(&run);
        return st;
    }
    case PL_HF_DEC_FUSE:
    case PL_HF_DEC_JOIN_SPACE:
        PL_TRY(tl_begin(out));
        for (size_t i = 0; i < in->n; i++) {
            if (i > 0 && d->kind == PL_HF_DEC_JOIN_SPACE) PL_TRY(tl_put(out, " ", 1));
            PL_TRY(tl_put(out, base + in->v[i].off, in->v[i].len));
        }
        return PL_OK;
    case PL_HF_DEC_STRIP:
        for (size_t i = 0; i < in->n; i++) {
            const char *s = base + in->v[i].off;
            size_t n = in->v[i].len, a = 0, z = n;
            for (uint32_t k = 0; k < d->start && has_char_at(s, n, a, d->ch, d->ch_len); k++)
                a += (size_t)d->ch_len;
            for (uint32_t k = 0; k < d->stop && z >= (size_t)d->ch_len &&
                                 memcmp(s + z - (size_t)d->ch_len, d->ch, (size_t)d->ch_len) == 0;
                 k++)
                z -= (size_t)d->ch_len;
            PL_TRY(tl_begin(out));
            if (z > a) PL_TRY(tl_put(out, s + a, z - a)); /* Rust panics when they cross */
        }
        return PL_OK;
    case PL_HF_DEC_METASPACE:
        for (size_t i = 0; i < in->n; i++) {
            const char *s = base + in->v[i].off;
            size_t n = in->v[i].len;
            PL_TRY(tl_begin(out));
            for (size_t j = 0; j < n;) {
                if (has_char_at(s, n, j, d->ch, d->ch_len)) {
                    if (!(i == 0 && d->drop_first)) PL_TRY(tl_put(out, " ", 1));
                    j += (size_t)d->ch_len;
                } else {
                    int k = pl_utf8_lead_len((unsigned char)s[j]);
                    PL_TRY(tl_put(out, s + j, (size_t)k));
                    j += (size_t)k;
                }
            }
        }
        return PL_OK;
    case PL_HF_DEC_BYTE_LEVEL: {
        pl_tok_buf bytes = {0};
        pl_status st = PL_OK;
        for (size_t i = 0; i < in->n && st == PL_OK; i++) {
            const char *s = base + in->v[i].off;
            size_t n = in->v[i].len, mark = bytes.n;
            for (size_t j = 0; j < n && st == PL_OK;) {
                uint32_t cp;
                j += (size_t)pl_utf8_decode(s + j, n - j, &cp);
                int b = pl_hf_byte_of_char(cp);
                if (b < 0) { /* a character outside the alphabet: the token's own bytes */
                    bytes.n = mark;
                    st = pl_tok_buf_put(&bytes, s, n);
                    break;
                }
                char c = (char)b;
                st = pl_tok_buf_put(&bytes, &c, 1);
            }
        }
        if (st == PL_OK) st = tl_begin(out);
        pl_tok_buf text = {0};
        if (st == PL_OK) st = pl_hf_lossy_append(&text, (const unsigned char *)bytes.p, bytes.n);
        if (st == PL_OK) st = tl_put(out, text.p, text.n);
        pl_tok_buf_free(&text);
        pl_tok_buf_free(&bytes);
        return st;
    }
    }
    return PL_OK;
}

pl_status pl_hf_decode(const pl_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                       char **out_text) {
    const pl_hf *h = t->impl;
    tlist a = {0}, b = {0};
    pl_status s = PL_OK;
    for (size_t i = 0; i < n && s == PL_OK; i++) {
        const char *tok = token_of(t, ids[i], flags);
        if (!tok) continue;
        s = tl_begin(&a);
        if (s == PL_OK) s = tl_put(&a, tok, strlen(tok));
    }
    tlist *in = &a, *out = &b;
    for (int k = 0; k < h->n_dec && s == PL_OK; k++) {
        tl_free(out);
        s = stage_list(&h->dec[k], in, out);
        tlist *x = in;
        in = out;
        out = x;
    }
    pl_tok_buf text = {0};
    const char *base = in->text.p ? in->text.p : "";
    for (size_t i = 0; i < in->n && s == PL_OK; i++)
        s = put_text(&text, base + in->v[i].off, in->v[i].len);
    if (s == PL_OK) s = pl_tok_buf_put(&text, "", 1);
    tl_free(&a);
    tl_free(&b);
    if (s != PL_OK) {
        pl_tok_buf_free(&text);
        return s;
    }
    *out_text = text.p;
    return PL_OK;
}

// ---- streaming --------------------------------------------------------------------------------

enum { EV_BEGIN, EV_DATA, EV_END };

#define HOLD 72

typedef struct stage {
    uint32_t index;      /* tokens begun, this one included (Metaspace: 1 in the first) */
    bool in_token;
    bool begun;          /* joining stages: the one BEGIN went downstream */
    uint8_t hold[HOLD];  /* Replace: a prefix of the pattern; ByteFallback: the token so far */
    uint32_t n_hold;
    uint8_t part[4];     /* a character whose bytes are still arriving */
    uint32_t n_part;
    uint32_t lead;       /* Strip: leading content characters cut from this token */
    bool lead_done;
    uint32_t trail;      /* Strip: trailing content characters held */
    bool passthrough;    /* ByteFallback: the token is not "<0xXX>" */
    bool run_open;       /* ByteFallback: a run of byte tokens is the open token downstream */
} stage;

typedef struct hf_detok {
    pl_detok base;
    const pl_hf *h;
    unsigned flags;
    stage st[PL_HF_MAX_STEPS];
    /* text: [emitted (text_len) | NUL | tail (tail_len)], or, once pl_detok_text ran,
     * [emitted | tail | NUL] (tail_shown) */
    pl_tok_buf buf;
    size_t text_len, tail_len;
    bool tail_shown;
    size_t w;            /* where the sink writes */
    bool failed;         /* the sink could not grow the buffer */
} hf_detok;

static void send(hf_detok *d, int k, int ev, const char *p, size_t n);

static void sink(hf_detok *d, const char *p, size_t n) {
    if (d->failed || n == 0) return;
    d->buf.n = d->w;
    if (put_text(&d->buf, p, n) != PL_OK) d->failed = true;
    d->w = d->buf.n;
}

static void send_data(hf_detok *d, int k, const char *p, size_t n) {
    if (n) send(d, k, EV_DATA, p, n);
}

/* Feeds one byte into a stage's UTF-8 assembly (ByteLevel, ByteFallback): complete
 * characters and U+FFFD for invalid subsequences go to stage k + 1. */
static void utf8_byte(hf_detok *d, int k, stage *s, uint8_t b) {
    s->part[s->n_part++] = b;
    while (s->n_part > 0) {
        int m = pl_utf8_subpart(s->part, s->n_part);
        int need = pl_utf8_lead_len(s->part[0]);
        if (m > 0 && m == need) {
            send_data(d, k + 1, (const char *)s->part, (size_t)m);
        } else if (m > 0 && (uint32_t)m == s->n_part) {
            return; /* a valid start: wait for more bytes */
        } else {
            send_data(d, k + 1, PL_TOK_REPLACEMENT, 3);
            if (m == 0) m = 1;
        }
        memmove(s->part, s->part + m, s->n_part - (uint32_t)m);
        s->n_part -= (uint32_t)m;
    }
}

static void utf8_flush(hf_detok *d, int k, stage *s) {
    if (s->n_part) send_data(d, k + 1, PL_TOK_REPLACEMENT, 3); /* cut short by the end */
    s->n_part = 0;
}

/* Collects the bytes of characters that may arrive split; calls fn per whole character. */
typedef void (*char_fn)(hf_detok *d, int k, stage *s, const char *c, int n);

static void per_char(hf_detok *d, int k, stage *s, const char *p, size_t n, char_fn fn) {
    for (size_t i = 0; i < n; i++) {
        s->part[s->n_part++] = (uint8_t)p[i];
        if (s->n_part == (uint32_t)pl_utf8_lead_len(s->part[0]) || s->n_part == 4) {
            fn(d, k, s, (const char *)s->part, (int)s->n_part);
            s->n_part = 0;
        }
    }
}

static void strip_char(hf_detok *d, int k, stage *s, const char *c, int n) {
    const pl_hf_dec *dc = &d->h->dec[k];
    bool is = n == dc->ch_len && memcmp(c, dc->ch, (size_t)n) == 0;
    if (!s->lead_done && s->lead < dc->start && is) {
        s->lead++;
        return;
    }
    s->lead_done = true;
    if (is && dc->stop > 0) {
        if (++s->trail > dc->stop) { /* the oldest held one is no longer trailing */
            send_data(d, k + 1, dc->ch, (size_t)n);
            s->trail--;
        }
        return;
    }
    for (; s->trail > 0; s->trail--) send_data(d, k + 1, dc->ch, (size_t)dc->ch_len);
    send_data(d, k + 1, c, (size_t)n);
}

static void meta_char(hf_detok *d, int k, stage *s, const char *c, int n) {
    const pl_hf_dec *dc = &d->h->dec[k];
    if (n == dc->ch_len && memcmp(c, dc->ch, (size_t)n) == 0) {
        if (!(s->index == 1 && dc->drop_first)) send_data(d, k + 1, " ", 1);
    } else {
        send_data(d, k + 1, c, (size_t)n);
    }
}

/* Replace: bytes go through `hold`, which is always a proper prefix of the pattern. */
static void replace_data(hf_detok *d, int k, stage *s, const char *p, size_t n) {
    const pl_hf_dec *dc = &d->h->dec[k];
    for (size_t i = 0; i < n; i++) {
        s->hold[s->n_hold++] = (uint8_t)p[i];
        while (s->n_hold > 0 && memcmp(s->hold, dc->pat, s->n_hold) != 0) {
            send_data(d, k + 1, (const char *)s->hold, 1);
            memmove(s->hold, s->hold + 1, --s->n_hold);
        }
        if (s->n_hold == dc->pat_len) {
            send_data(d, k + 1, dc->content, dc->content_len);
            s->n_hold = 0;
        }
    }
}

/* ByteFallback: could hold[0..n) still grow into "<0xHH>"? */
static bool byte_token_prefix(const uint8_t *b, uint32_t n) {
    static const char lit[] = "<0x";
    for (uint32_t i = 0; i < n; i++) {
        if (i < 3 && b[i] != (uint8_t)lit[i]) return false;
        if (i == 3 && !(isxdigit_ascii(b[i]) || b[i] == '+')) return false;
        if (i == 4 && !isxdigit_ascii(b[i])) return false;
        if (i == 5 && b[i] != '>') return false;
        if (i >= 6) return false;
    }
    return true;
}

static void close_run(hf_detok *d, int k, stage *s) {
    if (!s->run_open) return;
    utf8_flush(d, k, s);
    s->run_open = false;
    send(d, k + 1, EV_END, NULL, 0);
}

static void fallback_passthrough(hf_detok *d, int k, stage *s) {
    close_run(d, k, s);
    s->passthrough = true;
    send(d, k + 1, EV_BEGIN, NULL, 0);
    send_data(d, k + 1, (const char *)s->hold, s->n_hold);
    s->n_hold = 0;
}

static void stage_event(hf_detok *d, int k, int ev, const char *p, size_t n) {
    stage *s = &d->st[k];
    const pl_hf_dec *dc = &d->h->dec[k];
    switch (dc->kind) {
    case PL_HF_DEC_REPLACE:
        if (ev == EV_BEGIN) {
            s->n_hold = 0;
            s->in_token = true;
            send(d, k + 1, EV_BEGIN, NULL, 0);
        } else if (ev == EV_DATA) {
            replace_data(d, k, s, p, n);
        } else {
            send_data(d, k + 1, (const char *)s->hold, s->n_hold);
            s->n_hold = 0;
            s->in_token = false;
            send(d, k + 1, EV_END, NULL, 0);
        }
        return;
    case PL_HF_DEC_STRIP:
        if (ev == EV_BEGIN) {
            s->lead = s->trail = s->n_part = 0;
            s->lead_done = false;
            s->in_token = true;
            send(d, k + 1, EV_BEGIN, NULL, 0);
        } else if (ev == EV_DATA) {
            per_char(d, k, s, p, n, strip_char);
        } else {
            s->trail = s->n_part = 0; /* trailing content characters are cut */
            s->in_token = false;
            send(d, k + 1, EV_END, NULL, 0);
        }
        return;
    case PL_HF_DEC_METASPACE:
        if (ev == EV_BEGIN) {
            s->index++;
            s->n_part = 0;
            s->in_token = true;
            send(d, k + 1, EV_BEGIN, NULL, 0);
        } else if (ev == EV_DATA) {
            per_char(d, k, s, p, n, meta_char);
        } else {
            s->in_token = false;
            send(d, k + 1, EV_END, NULL, 0);
        }
        return;
    case PL_HF_DEC_BYTE_FALLBACK:
        if (ev == EV_BEGIN) {
            s->n_hold = 0;
            s->passthrough = false;
            s->in_token = true;
        } else if (ev == EV_DATA) {
            if (s->passthrough) {
                send_data(d, k + 1, p, n);
                return;
            }
            size_t i = 0;
            for (; i < n && !s->passthrough; i++) {
                s->hold[s->n_hold++] = (uint8_t)p[i];
                if (!byte_token_prefix(s->hold, s->n_hold)) fallback_passthrough(d, k, s);
            }
            if (i < n) send_data(d, k + 1, p + i, n - i);
        } else {
            s->in_token = false;
            if (s->passthrough) {
                send(d, k + 1, EV_END, NULL, 0);
                return;
            }
            int b = byte_token((const char *)s->hold, s->n_hold);
            if (b < 0) { /* a short token that is not a byte */
                fallback_passthrough(d, k, s);
                send(d, k + 1, EV_END, NULL, 0);
                return;
            }
            if (!s->run_open) {
                s->run_open = true;
                send(d, k + 1, EV_BEGIN, NULL, 0);
            }
            utf8_byte(d, k, s, (uint8_t)b);
        }
        return;
    case PL_HF_DEC_FUSE:
    case PL_HF_DEC_JOIN_SPACE:
        if (ev == EV_BEGIN) {
            if (!s->begun) {
                s->begun = true;
                send(d, k + 1, EV_BEGIN, NULL, 0);
            } else if (dc->kind == PL_HF_DEC_JOIN_SPACE) {
                send_data(d, k + 1, " ", 1);
            }
        } else if (ev == EV_DATA) {
            send_data(d, k + 1, p, n);
        }
        return;
    case PL_HF_DEC_BYTE_LEVEL:
        /* First in the chain, so each token arrives whole in one DATA. */
        if (ev == EV_BEGIN && !s->begun) {
            s->begun = true;
            send(d, k + 1, EV_BEGIN, NULL, 0);
        } else if (ev == EV_DATA) {
            bool mapped = true;
            for (size_t j = 0; j < n && mapped;) {
                uint32_t cp;
                j += (size_t)pl_utf8_decode((const char *)p + j, n - j, &cp);
                mapped = pl_hf_byte_of_char(cp) >= 0;
            }
            for (size_t j = 0; j < n;) {
                if (!mapped) {
                    utf8_byte(d, k, s, (uint8_t)p[j++]);
                    continue;
                }
                uint32_t cp;
                j += (size_t)pl_utf8_decode((const char *)p + j, n - j, &cp);
                utf8_byte(d, k, s, (uint8_t)pl_hf_byte_of_char(cp));
            }
        }
        return;
    }
}

static void send(hf_detok *d, int k, int ev, const char *p, size_t n) {
    if (k == d->h->n_dec) {
        if (ev == EV_DATA) sink(d, p, n);
        return;
    }
    stage_event(d, k, ev, p, n);
}

/* The end of the text: every stage lets go of what it holds, in chain order. */
static void finish(hf_detok *d) {
    for (int k = 0; k < d->h->n_dec; k++) {
        stage *s = &d->st[k];
        switch (d->h->dec[k].kind) {
        case PL_HF_DEC_REPLACE: case PL_HF_DEC_STRIP: case PL_HF_DEC_METASPACE:
            if (s->in_token) stage_event(d, k, EV_END, NULL, 0);
            break;
        case PL_HF_DEC_BYTE_FALLBACK:
            close_run(d, k, s);
            break;
        case PL_HF_DEC_FUSE: case PL_HF_DEC_JOIN_SPACE:
            if (s->begun) send(d, k + 1, EV_END, NULL, 0);
            break;
        case PL_HF_DEC_BYTE_LEVEL:
            utf8_flush(d, k, s);
            if (s->begun) send(d, k + 1, EV_END, NULL, 0);
            break;
        }
    }
}

/* Renders the tail after text_len + 1 on a copy of the states. */
static pl_status render_tail(hf_detok *d) {
    stage saved[PL_HF_MAX_STEPS];
    memcpy(saved, d->st, sizeof saved);
    d->buf.n = d->text_len;
    if (pl_tok_buf_reserve(&d->buf, 1) != PL_OK) return pl_fail(PL_ERR_OUT_OF_MEMORY, "detok");
    d->w = d->text_len + 1; /* after the text's NUL */
    d->buf.n = d->w;
    finish(d);
    memcpy(d->st, saved, sizeof saved);
    d->tail_len = d->w - (d->text_len + 1);
    d->tail_shown = false;
    if (d->failed) return pl_fail(PL_ERR_OUT_OF_MEMORY, "detok: text");
    d->buf.n = d->w;
    return pl_tok_buf_reserve(&d->buf, 1); /* room for pl_detok_text's NUL */
}

pl_status pl_hf_detok_create(const pl_tokenizer *t, unsigned flags, pl_detok **out) {
    hf_detok *d = pl_calloc(1, sizeof *d);
    if (!d) return pl_fail(PL_ERR_OUT_OF_MEMORY, "detok: state");
    d->base.tok = t;
    d->h = t->impl;
    d->flags = flags;
    if (pl_tok_buf_reserve(&d->buf, 64) != PL_OK) {
        pl_free(d);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "detok: text");
    }
    if (flags & PL_TOK_AFTER_PROMPT) {
        /* As if a prompt token had gone through: the first-token rules are spent, and stages
         * after a join are inside the one joined token, past its start. */
        send(d, 0, EV_BEGIN, NULL, 0);
        send(d, 0, EV_END, NULL, 0);
        for (int k = 0; k < d->h->n_dec; k++) d->st[k].lead_done = true;
        d->buf.n = d->w = 0; /* nothing is emitted by an empty token */
        d->failed = false;
    }
    d->buf.p[0] = '\0';
    d->text_len = 0;
    if (render_tail(d) != PL_OK) {
        pl_hf_detok_free(&d->base);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "detok: text");
    }
    d->buf.p[0] = '\0';
    *out = &d->base;
    return PL_OK;
}

void pl_hf_detok_free(pl_detok *base) {
    hf_detok *d = (hf_detok *)base;
    pl_tok_buf_free(&d->buf);
    pl_free(d);
}

pl_status pl_hf_detok_push(pl_detok *base, int32_t id, const char **out_new, size_t *out_len) {
    hf_detok *d = (hf_detok *)base;
    stage saved[PL_HF_MAX_STEPS];
    memcpy(saved, d->st, sizeof saved);
    size_t start = d->text_len;
    const char *tok = token_of(d->base.tok, id, d->flags);
    d->failed = false;
    d->w = start;
    if (tok) {
        send(d, 0, EV_BEGIN, NULL, 0);
        send(d, 0, EV_DATA, tok, strlen(tok));
        send(d, 0, EV_END, NULL, 0);
    }
    size_t end = d->w;
    if (!d->failed) {
        d->text_len = end;
        if (render_tail(d) == PL_OK) {
            d->buf.p[end] = '\0';
            *out_new = d->buf.p + start;
            *out_len = end - start;
            return PL_OK;
        }
    }
    memcpy(d->st, saved, sizeof saved);
    d->text_len = start;
    d->failed = false;
    (void)render_tail(d); /* the previous tail fitted before, so it fits again */
    d->buf.p[start] = '\0';
    return pl_fail(PL_ERR_OUT_OF_MEMORY, "detok: text");
}

const char *pl_hf_detok_text(pl_detok *base, size_t *out_len) {
    hf_detok *d = (hf_detok *)base;
    if (!d->tail_shown) {
        memmove(d->buf.p + d->text_len, d->buf.p + d->text_len + 1, d->tail_len);
        d->buf.p[d->text_len + d->tail_len] = '\0';
        d->tail_shown = true;
    }
    if (out_len) *out_len = d->text_len + d->tail_len;
    return d->buf.p;
}
