/*
 * template/lex.c - template source -> tokens, exactly as @huggingface/jinja's lexer does it.
 *
 * First the source is rewritten the way the oracle rewrites it before lexing (its
 * `preprocess`, with transformers' environment: trim_blocks and lstrip_blocks on):
 *   1. one trailing "\n" is dropped;
 *   2. lstrip_blocks: spaces and tabs between a line start and "{%", "{#" or "{-" go;
 *   3. trim_blocks: the "\n" right after "%}", "#}" or "-}" goes (anywhere, even inside a
 *      string literal: it is a textual rewrite);
 *   4. {% generation %} / {% endgeneration %} tags go, with the white space around them
 *      unless the tag says {%- / -%}.
 * Each pass keeps, for every byte, its offset in the original source, so tokens carry the
 * original line and column. Then the tokens are cut as the oracle's tokenize() cuts them
 * (text runs, {{- -}} {%- -%} {#- -#} stripping, unary minus glued to numbers, ...).
 */
#include "template/tmpl_internal.h"

#include <string.h>

#include "util/alloc.h"
#include "util/utf8.h"

/* A rewritten source: bytes and the original offset of each. */
typedef struct src_buf {
    char *p;
    uint32_t *at;
    size_t n;
} src_buf;

typedef struct lexer {
    pl_tm_arena *a;
    const char *orig;
    size_t orig_n;
    size_t *line_starts; /* original offsets where lines start */
    size_t n_lines;
    src_buf s;
    pl_tm_tok *toks;
    size_t n, cap;
    int curly;
} lexer;

static int line_of(const lexer *L, uint32_t orig_off) {
    size_t lo = 0, hi = L->n_lines; /* the last line start <= orig_off */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (L->line_starts[mid] <= orig_off)
            lo = mid;
        else
            hi = mid;
    }
    return (int)lo + 1;
}

int pl_tm_column(const char *src, size_t len, uint32_t off) {
    if (off > len) off = (uint32_t)len;
    size_t start = off;
    while (start > 0 && src[start - 1] != '\n') start--;
    int col = 1;
    for (size_t i = start; i < off; i++)
        if (!pl_utf8_is_cont((unsigned char)src[i])) col++; /* characters, not bytes */
    return col;
}

static uint32_t orig_at(const lexer *L, size_t pos) {
    if (pos < L->s.n) return L->s.at[pos];
    return L->s.n ? L->s.at[L->s.n - 1] + 1 : 0;
}

static pl_status lex_error(const lexer *L, size_t pos, const char *what) {
    uint32_t off = orig_at(L, pos);
    return pl_fail(PL_ERR_FORMAT, "template line %d, column %d: %s", line_of(L, off),
                   pl_tm_column(L->orig, L->orig_n, off), what);
}

/* ---- the rewrites ---------------------------------------------------------------------- */

static pl_status buf_new(src_buf *b, size_t cap) {
    b->p = pl_malloc(cap + 1);
    b->at = pl_calloc(cap + 1, sizeof *b->at);
    b->n = 0;
    if (!b->p || !b->at) {
        pl_free(b->p);
        pl_free(b->at);
        b->p = NULL;
        b->at = NULL;
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "template: out of memory rewriting the source");
    }
    return PL_OK;
}

static void buf_free(src_buf *b) {
    pl_free(b->p);
    pl_free(b->at);
    b->p = NULL;
    b->at = NULL;
}

static void put(src_buf *o, const src_buf *in, size_t from, size_t to) {
    memcpy(o->p + o->n, in->p + from, to - from);
    memcpy(o->at + o->n, in->at + from, (to - from) * sizeof *o->at);
    o->n += to - from;
}

static bool starts(const src_buf *b, size_t i, const char *lit) {
    size_t k = strlen(lit);
    return i + k <= b->n && memcmp(b->p + i, lit, k) == 0;
}

/* A JavaScript line terminator ends at i (so i is a line start for a multiline ^). */
static bool line_start(const src_buf *b, size_t i) {
    if (i == 0) return true;
    char c = b->p[i - 1];
    if (c == '\n' || c == '\r') return true;
    return i >= 3 && (unsigned char)b->p[i - 3] == 0xE2 && (unsigned char)b->p[i - 2] == 0x80 &&
           ((unsigned char)c == 0xA8 || (unsigned char)c == 0xA9);
}

/* template.replace(/^[ \t]*({[#%-])/gm, "$1") */
static void lstrip_blocks(const src_buf *in, src_buf *o) {
    size_t i = 0, copied = 0;
    while (i < in->n) {
        if (line_start(in, i)) {
            size_t j = i;
            while (j < in->n && (in->p[j] == ' ' || in->p[j] == '\t')) j++;
            if (j + 1 < in->n && in->p[j] == '{' &&
                (in->p[j + 1] == '#' || in->p[j + 1] == '%' || in->p[j + 1] == '-')) {
                put(o, in, copied, i);
                copied = j;
                i = j + 2;
                continue;
            }
        }
        i++;
    }
    put(o, in, copied, in->n);
}

/* template.replace(/([#%-]})\n/g, "$1") */
static void trim_blocks(const src_buf *in, src_buf *o) {
    size_t i = 0, copied = 0;
    while (i + 2 < in->n) {
        char c = in->p[i];
        if ((c == '#' || c == '%' || c == '-') && in->p[i + 1] == '}' && in->p[i + 2] == '\n') {
            put(o, in, copied, i + 2);
            copied = i + 3;
            i += 3;
            continue;
        }
        i++;
    }
    put(o, in, copied, in->n);
}

static size_t skip_space(const src_buf *b, size_t i) {
    int k;
    while ((k = pl_tm_js_space(b->p + i, b->n - i)) > 0) i += (size_t)k;
    return i;
}

/* At a "{%": the end of a {% generation %} or {% endgeneration %} tag, or 0. */
static size_t generation_tag(const src_buf *b, size_t i, bool *lstrip, bool *rstrip) {
    size_t j = i + 2;
    *lstrip = j < b->n && b->p[j] == '-';
    if (*lstrip) j++;
    j = skip_space(b, j);
    if (starts(b, j, "end")) j += 3;
    if (!starts(b, j, "generation")) return 0;
    j = skip_space(b, j + 10);
    *rstrip = j < b->n && b->p[j] == '-';
    if (*rstrip) j++;
    if (!starts(b, j, "%}")) return 0;
    return j + 2;
}

/* template.replace(/(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs, ...): the tag goes,
 * and the white space before/after it too when the tag strips that side. */
static void generation_tags(const src_buf *in, src_buf *o) {
    size_t i = 0, copied = 0;
    while (i + 1 < in->n) {
        bool ls, rs;
        size_t end;
        if (in->p[i] != '{' || in->p[i + 1] != '%' || !(end = generation_tag(in, i, &ls, &rs))) {
            i++;
            continue;
        }
        size_t before = i; /* the white space run before the tag, not before the last match */
        int k;
        while (before > copied && (k = pl_tm_js_space_back(in->p + copied, before - copied)) > 0)
            before -= (size_t)k;
        size_t after = skip_space(in, end);
        put(o, in, copied, ls ? before : i);
        if (!rs) put(o, in, end, after);
        copied = i = after;
    }
    put(o, in, copied, in->n);
}

static pl_status rewrite(lexer *L) {
    src_buf a = {0}, b = {0};
    size_t n = L->orig_n;
    if (n && L->orig[n - 1] == '\n') n--;
    PL_TRY(buf_new(&a, n));
    if (buf_new(&b, n) != PL_OK) {
        buf_free(&a);
        return PL_ERR_OUT_OF_MEMORY;
    }
    memcpy(a.p, L->orig, n);
    for (size_t i = 0; i < n; i++) a.at[i] = (uint32_t)i;
    a.n = n;
    lstrip_blocks(&a, &b);
    a.n = 0;
    trim_blocks(&b, &a);
    b.n = 0;
    generation_tags(&a, &b);
    buf_free(&a);
    L->s = b;
    return PL_OK;
}

/* ---- tokens ---------------------------------------------------------------------------- */

static pl_status push(lexer *L, pl_tm_tok_kind kind, pl_tm_str s, size_t pos) {
    if (L->n == L->cap && pl_grow_array((void **)&L->toks, &L->cap, L->n + 1, sizeof *L->toks,
                                        "template tokens") != PL_OK)
        return PL_ERR_OUT_OF_MEMORY;
    pl_tm_tok *t = &L->toks[L->n++];
    t->kind = kind;
    t->s = s;
    t->off = orig_at(L, pos);
    t->line = line_of(L, t->off);
    return PL_OK;
}

static pl_tm_tok_kind last_kind(const lexer *L) {
    return L->n ? L->toks[L->n - 1].kind : (pl_tm_tok_kind)-1;
}

/* {%- {{- {#-: the text token before loses its trailing white space (and goes if empty). */
static void strip_trailing(lexer *L) {
    if (!L->n || L->toks[L->n - 1].kind != PL_TM_TK_TEXT) return;
    pl_tm_tok *t = &L->toks[L->n - 1];
    t->s = pl_tm_trim(t->s, false, true);
    if (t->s.n == 0) L->n--;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_word(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static pl_tm_str slice(const lexer *L, size_t from, size_t to) {
    return (pl_tm_str){L->s.p + from, to - from};
}

/* consumeWhile(isInteger): the oracle fails when the run reaches the end of the input. */
static pl_status digits(const lexer *L, size_t *pos) {
    while (*pos < L->s.n && is_digit(L->s.p[*pos])) {
        (*pos)++;
        if (*pos >= L->s.n) return lex_error(L, *pos, "unexpected end of input");
    }
    return PL_OK;
}

static int hexval(char c) {
    if (is_digit(c)) return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A quoted string from *pos (just after the opening quote) to the closing quote, unescaped. */
static pl_status string_lit(lexer *L, size_t *pos, char quote, pl_tm_str *out) {
    size_t i = *pos, start = i;
    /* the unescaped text is never longer than the source text */
    size_t end = i;
    while (end < L->s.n && L->s.p[end] != quote) end += (L->s.p[end] == '\\') ? 2 : 1;
    if (end >= L->s.n) return lex_error(L, start, "unterminated string");
    char *o = pl_tm_alloc(L->a, end - start + 1);
    if (!o) return pl_fail(PL_ERR_OUT_OF_MEMORY, "template: out of memory");
    size_t n = 0;
    uint32_t pending_high = 0; /* a \uD800-\uDBFF escape waiting for its low half */
    while (L->s.p[i] != quote) {
        char c = L->s.p[i];
        if (c != '\\') {
            if (pending_high) n += (size_t)pl_utf8_encode(0xFFFD, o + n), pending_high = 0;
            o[n++] = c;
            i++;
            continue;
        }
        char e = L->s.p[i + 1];
        i += 2;
        if (e == 'x' || e == 'u') {
            size_t len = e == 'x' ? 2 : 4;
            uint32_t v = 0;
            for (size_t k = 0; k < len; k++) {
                int h = i + k < L->s.n ? hexval(L->s.p[i + k]) : -1;
                if (h < 0) return lex_error(L, i - 2, "invalid hexadecimal escape sequence");
                v = v * 16 + (uint32_t)h;
            }
            i += len;
            if (v >= 0xDC00 && v <= 0xDFFF && pending_high) {
                v = 0x10000 + ((pending_high - 0xD800) << 10) + (v - 0xDC00);
                pending_high = 0;
            } else {
                if (pending_high) n += (size_t)pl_utf8_encode(0xFFFD, o + n), pending_high = 0;
                if (v >= 0xD800 && v <= 0xDBFF) {
                    pending_high = v;
                    continue;
                }
                if (v >= 0xDC00 && v <= 0xDFFF) v = 0xFFFD; /* a lone low surrogate */
            }
            n += (size_t)pl_utf8_encode(v, o + n);
            continue;
        }
        static const char from[] = "ntrbfv'\"\\", to[] = "\n\t\r\b\f\v'\"\\";
        const char *k = e ? strchr(from, e) : NULL;
        if (!k) return lex_error(L, i - 2, "unexpected escaped character");
        if (pending_high) n += (size_t)pl_utf8_encode(0xFFFD, o + n), pending_high = 0;
        o[n++] = to[k - from];
    }
    if (pending_high) n += (size_t)pl_utf8_encode(0xFFFD, o + n);
    *pos = i + 1;
    *out = (pl_tm_str){o, n};
    return PL_OK;
}

static const struct {
    const char *seq;
    pl_tm_tok_kind kind;
} k_table[] = {
    {"{%", PL_TM_TK_OPEN_STMT},  {"%}", PL_TM_TK_CLOSE_STMT}, {"{{", PL_TM_TK_OPEN_EXPR},
    {"}}", PL_TM_TK_CLOSE_EXPR}, {"(", PL_TM_TK_LPAREN},      {")", PL_TM_TK_RPAREN},
    {"{", PL_TM_TK_LBRACE},      {"}", PL_TM_TK_RBRACE},      {"[", PL_TM_TK_LBRACKET},
    {"]", PL_TM_TK_RBRACKET},    {",", PL_TM_TK_COMMA},       {".", PL_TM_TK_DOT},
    {":", PL_TM_TK_COLON},       {"|", PL_TM_TK_PIPE},        {"<=", PL_TM_TK_COMPARE},
    {">=", PL_TM_TK_COMPARE},    {"==", PL_TM_TK_COMPARE},    {"!=", PL_TM_TK_COMPARE},
    {"<", PL_TM_TK_COMPARE},     {">", PL_TM_TK_COMPARE},     {"+", PL_TM_TK_ADD},
    {"-", PL_TM_TK_ADD},         {"~", PL_TM_TK_ADD},         {"**", PL_TM_TK_POW},
    {"*", PL_TM_TK_MUL},         {"//", PL_TM_TK_MUL},        {"/", PL_TM_TK_MUL},
    {"%", PL_TM_TK_MUL},         {"=", PL_TM_TK_EQUALS},
};

static pl_status tokenize(lexer *L) {
    const src_buf *s = &L->s;
    size_t pos = 0;
    while (pos < s->n) {
        pl_tm_tok_kind last = last_kind(L);
        if (L->n == 0 || last == PL_TM_TK_CLOSE_STMT || last == PL_TM_TK_CLOSE_EXPR ||
            last == PL_TM_TK_COMMENT) {
            size_t start = pos;
            while (pos < s->n &&
                   !(s->p[pos] == '{' && pos + 1 < s->n &&
                     (s->p[pos + 1] == '%' || s->p[pos + 1] == '{' || s->p[pos + 1] == '#')))
                pos++;
            if (pos > start) {
                PL_TRY(push(L, PL_TM_TK_TEXT, slice(L, start, pos), start));
                continue;
            }
        }
        if (starts(s, pos, "{#")) {
            size_t open = pos;
            pos += 2;
            bool strip_before = pos < s->n && s->p[pos] == '-';
            if (strip_before) pos++;
            size_t start = pos;
            while (!(pos + 1 < s->n && s->p[pos] == '#' && s->p[pos + 1] == '}')) {
                if (pos + 2 >= s->n) return lex_error(L, open, "missing end of comment tag");
                pos++;
            }
            pl_tm_str body = slice(L, start, pos);
            bool strip_after = body.n && body.p[body.n - 1] == '-';
            if (strip_after) body.n--;
            if (strip_before) strip_trailing(L);
            PL_TRY(push(L, PL_TM_TK_COMMENT, body, open));
            pos += 2;
            if (strip_after) pos = skip_space(s, pos);
            continue;
        }
        if (starts(s, pos, "{%-")) {
            strip_trailing(L);
            PL_TRY(push(L, PL_TM_TK_OPEN_STMT, PL_TM_LIT("{%"), pos));
            pos += 3;
            continue;
        }
        if (starts(s, pos, "{{-")) {
            strip_trailing(L);
            PL_TRY(push(L, PL_TM_TK_OPEN_EXPR, PL_TM_LIT("{{"), pos));
            L->curly = 0;
            pos += 3;
            continue;
        }
        /* white space inside a tag; the oracle fails when it runs to the end of the input */
        if (pl_tm_js_space(s->p + pos, s->n - pos)) {
            pos = skip_space(s, pos);
            if (pos >= s->n) return lex_error(L, pos, "unexpected end of input");
        }
        if (starts(s, pos, "-%}")) {
            PL_TRY(push(L, PL_TM_TK_CLOSE_STMT, PL_TM_LIT("%}"), pos));
            pos = skip_space(s, pos + 3);
            continue;
        }
        if (starts(s, pos, "-}}")) {
            PL_TRY(push(L, PL_TM_TK_CLOSE_EXPR, PL_TM_LIT("}}"), pos));
            pos = skip_space(s, pos + 3);
            continue;
        }
        char c = s->p[pos];
        if (c == '-' || c == '+') {
            last = last_kind(L);
            if (L->n == 0 || last == PL_TM_TK_TEXT)
                return lex_error(L, pos, "unexpected character");
            if (last != PL_TM_TK_IDENT && last != PL_TM_TK_NUMBER && last != PL_TM_TK_STRING &&
                last != PL_TM_TK_RPAREN && last != PL_TM_TK_RBRACKET) {
                /* a unary sign: glued to a following number */
                size_t start = pos++;
                size_t d = pos;
                PL_TRY(digits(L, &pos));
                if (pos > d && pos + 1 < s->n && s->p[pos] == '.' && is_digit(s->p[pos + 1])) {
                    pos++;
                    PL_TRY(digits(L, &pos));
                }
                PL_TRY(push(L, pos > d ? PL_TM_TK_NUMBER : PL_TM_TK_UNARY, slice(L, start, pos),
                            start));
                continue;
            }
        }
        bool matched = false;
        for (size_t k = 0; k < sizeof k_table / sizeof k_table[0]; k++) {
            if (k_table[k].kind == PL_TM_TK_CLOSE_EXPR && L->curly > 0) continue;
            if (!starts(s, pos, k_table[k].seq)) continue;
            size_t len = strlen(k_table[k].seq);
            PL_TRY(push(L, k_table[k].kind, slice(L, pos, pos + len), pos));
            if (k_table[k].kind == PL_TM_TK_OPEN_EXPR)
                L->curly = 0;
            else if (k_table[k].kind == PL_TM_TK_LBRACE)
                L->curly++;
            else if (k_table[k].kind == PL_TM_TK_RBRACE)
                L->curly--;
            pos += len;
            matched = true;
            break;
        }
        if (matched) continue;
        if (c == '\'' || c == '"') {
            size_t start = pos++;
            pl_tm_str v;
            PL_TRY(string_lit(L, &pos, c, &v));
            PL_TRY(push(L, PL_TM_TK_STRING, v, start));
            continue;
        }
        if (is_digit(c)) {
            size_t start = pos;
            PL_TRY(digits(L, &pos));
            if (last_kind(L) != PL_TM_TK_DOT && pos + 1 < s->n && s->p[pos] == '.' &&
                is_digit(s->p[pos + 1])) {
                pos++;
                PL_TRY(digits(L, &pos));
            }
            PL_TRY(push(L, PL_TM_TK_NUMBER, slice(L, start, pos), start));
            continue;
        }
        if (is_word(c)) {
            size_t start = pos;
            while (pos < s->n && is_word(s->p[pos])) {
                pos++;
                if (pos >= s->n) return lex_error(L, pos, "unexpected end of input");
            }
            PL_TRY(push(L, PL_TM_TK_IDENT, slice(L, start, pos), start));
            continue;
        }
        return lex_error(L, pos, "unexpected character");
    }
    return PL_OK;
}

/* ---- entry ----------------------------------------------------------------------------- */

pl_status pl_tm_lex(const char *src, size_t len, pl_tm_arena *a, pl_tm_tok **out_toks,
                    size_t *out_n) {
    lexer L = {.a = a, .orig = src, .orig_n = len};
    pl_status st = PL_OK;
    size_t n_lines = 1;
    for (size_t i = 0; i < len; i++) n_lines += src[i] == '\n';
    L.line_starts = pl_calloc(n_lines, sizeof *L.line_starts);
    if (!L.line_starts) return pl_fail(PL_ERR_OUT_OF_MEMORY, "template: out of memory");
    L.n_lines = 1;
    for (size_t i = 0; i < len; i++)
        if (src[i] == '\n') L.line_starts[L.n_lines++] = i + 1;
    size_t bad = pl_utf8_validate(src, len);
    if (bad < len) {
        st = pl_fail(PL_ERR_FORMAT, "template line %d, column %d: invalid UTF-8",
                     line_of(&L, (uint32_t)bad), pl_tm_column(src, len, (uint32_t)bad));
        goto done;
    }
    st = rewrite(&L);
    if (st != PL_OK) goto done;
    /* token strings point into the rewritten text, which must outlive the lexer */
    char *kept = pl_tm_alloc(a, L.s.n + 1);
    if (!kept) {
        st = pl_fail(PL_ERR_OUT_OF_MEMORY, "template: out of memory");
        goto done;
    }
    memcpy(kept, L.s.p, L.s.n);
    pl_free(L.s.p);
    L.s.p = kept;
    st = tokenize(&L);
    L.s.p = NULL;
done:
    buf_free(&L.s);
    pl_free(L.line_starts);
    if (st != PL_OK) {
        pl_free(L.toks);
        return st;
    }
    *out_toks = L.toks;
    *out_n = L.n;
    return PL_OK;
}
