/*
 * grammar/gbnf.c - GBNF text to a compiled grammar, accepting what llama.cpp's grammar
 * parser accepts (its grammars/ folder are the check): rule names of letters, digits and '-';
 * a rule ends at a newline unless inside parentheses or right after '|'; '#' starts a
 * comment; escapes \x.. \u.... \U........ \t \r \n \\ \" \[ \]; classes with ranges and '^';
 * `.` any character; `<[id]>`, `<piece>` and `!` before either for token references.
 *
 * Repetition is rewritten into rules (a copy of the item per required occurrence, then a
 * chain of optional ones, or a tail-recursive rule for no bound), with the item made a rule
 * of its own when it is longer than one element, so nested repetitions add up instead of
 * multiplying.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_build.h"
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"

typedef struct parser {
    const char *text, *end, *p;
    pl_gram_builder b;
    const pl_tokenizer *tok;
    int nest;
    pl_status err;   /* the first error, its message set */
} parser;

static pl_status perr_c(parser *ps, pl_status code, const char *at, const char *fmt, ...)
    PL_PRINTF(4, 5);
#define perr(ps, at, ...) perr_c(ps, PL_ERR_INVALID_ARGUMENT, at, __VA_ARGS__)

/* Records the first error with its place ("grammar line L column C: ..."). */
static pl_status perr_c(parser *ps, pl_status code, const char *at, const char *fmt, ...) {
    if (ps->err != PL_OK) return ps->err;
    size_t line = 1, col = 1;
    if (at > ps->end) at = ps->end;
    for (const char *q = ps->text; q < at; q++) {
        if (*q == '\n') line++, col = 1;
        else if (((unsigned char)*q & 0xC0) != 0x80) col++;
    }
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ps->err = pl_fail(code, "grammar line %zu column %zu: %s", line, col, msg);
    return ps->err;
}

/* pl_fail from the builder already set a message: add the place. */
static pl_status berr(parser *ps, const char *at) {
    if (ps->err != PL_OK) return ps->err;
    char msg[400];
    snprintf(msg, sizeof msg, "%s", pl_last_error());
    pl_status code = PL_ERR_INVALID_ARGUMENT;
    if (!strncmp(msg, "more than", 9)) code = PL_ERR_TOO_LONG;
    else if (strstr(msg, "grammar:")) code = PL_ERR_OUT_OF_MEMORY; /* the allocation messages */
    return perr_c(ps, code, at, "%s", msg);
}

static bool at_end(const parser *ps) { return ps->p >= ps->end; }
static char cur(const parser *ps) { return at_end(ps) ? '\0' : *ps->p; }
static char peek(const parser *ps, size_t k) {
    return ps->p + k < ps->end ? ps->p[k] : '\0';
}

static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

static void skip_space(parser *ps, bool newline_ok) {
    while (!at_end(ps)) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
            ps->p++;
        } else if (c == '#') {
            while (!at_end(ps) && *ps->p != '\r' && *ps->p != '\n') ps->p++;
        } else {
            break;
        }
    }
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One character of a literal or class: an escape or a UTF-8 sequence. */
static bool parse_char(parser *ps, uint32_t *out) {
    const char *at = ps->p;
    if (at_end(ps)) return perr(ps, at, "unexpected end of the grammar"), false;
    if (*ps->p == '\\') {
        char e = peek(ps, 1);
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            uint32_t v = 0;
            for (int i = 0; i < digits; i++) {
                int h = hexval(peek(ps, 2 + (size_t)i));
                if (h < 0) return perr(ps, at, "expecting %d hex digits after \\%c", digits, e), false;
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF) return perr(ps, at, "\\%c escape beyond U+10FFFF", e), false;
            ps->p += 2 + digits;
            *out = v;
            return true;
        }
        switch (e) {
        case 't': *out = '\t'; break;
        case 'r': *out = '\r'; break;
        case 'n': *out = '\n'; break;
        case '\\': case '"': case '[': case ']': *out = (uint8_t)e; break;
        default: return perr(ps, at, "unknown escape \\%c", e ? e : ' '), false;
        }
        ps->p += 2;
        return true;
    }
    const unsigned char *s = (const unsigned char *)ps->p;
    size_t left = (size_t)(ps->end - ps->p);
    uint32_t cp;
    int len = s[0] < 0x80 ? 1 : (s[0] >> 5) == 6 ? 2 : (s[0] >> 4) == 14 ? 3 : (s[0] >> 3) == 30 ? 4 : 0;
    if (len == 0 || (size_t)len > left) return perr(ps, at, "invalid UTF-8"), false;
    cp = len == 1 ? s[0] : s[0] & (0x7Fu >> len);
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return perr(ps, at, "invalid UTF-8"), false;
        cp = (cp << 6) | (s[k] & 0x3Fu);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return perr(ps, at, "invalid UTF-8"), false;
    ps->p += len;
    *out = cp;
    return true;
}

static bool push(parser *ps, uint32_t rule, uint32_t type, uint32_t value, const char *at) {
    if (pl_gram_builder_push(&ps->b, rule, type, value) != PL_OK) return berr(ps, at), false;
    return true;
}

static bool push_class(parser *ps, uint32_t rule, const uint32_t *pairs, size_t n, bool neg,
                       const char *at) {
    long c = pl_gram_builder_class(&ps->b, pairs, n, neg);
    if (c < 0) return berr(ps, at), false;
    return push(ps, rule, PL_GE_CLASS, (uint32_t)c, at);
}

/* <[id]> or <piece> (the text between the brackets included, as llama.cpp tokenizes it). */
static bool parse_token(parser *ps, uint32_t *out) {
    const char *at = ps->p;
    ps->p++; /* '<' */
    if (cur(ps) == '[') {
        ps->p++;
        uint64_t v = 0;
        const char *d = ps->p;
        while (cur(ps) >= '0' && cur(ps) <= '9') {
            v = v * 10 + (uint64_t)(cur(ps) - '0');
            if (v > INT32_MAX) return perr(ps, at, "token id too large"), false;
            ps->p++;
        }
        if (ps->p == d) return perr(ps, ps->p, "expecting a token id"), false;
        if (cur(ps) != ']' || peek(ps, 1) != '>')
            return perr(ps, ps->p, "expecting ]> after the token id"), false;
        ps->p += 2;
        if (ps->tok && v >= (uint64_t)pl_tok_vocab_size(ps->tok))
            return perr(ps, at, "token id %llu outside the vocabulary (%d ids)",
                        (unsigned long long)v, pl_tok_vocab_size(ps->tok)), false;
        *out = (uint32_t)v;
        return true;
    }
    while (!at_end(ps) && *ps->p != '>') ps->p++;
    if (at_end(ps)) return perr(ps, at, "expecting > to end the token"), false;
    ps->p++;
    if (!ps->tok) return perr(ps, at, "a token by its text needs a tokenizer; use <[id]>"), false;
    size_t len = (size_t)(ps->p - at);
    char buf[256];
    if (len >= sizeof buf) return perr(ps, at, "token text too long"), false;
    memcpy(buf, at, len);
    buf[len] = '\0';
    int32_t id = pl_tok_token_id(ps->tok, buf);
    if (id < 0) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (pl_tok_encode(ps->tok, buf, len, PL_TOK_PARSE_SPECIAL, &ids, &n) == PL_OK && n == 1)
            id = ids[0];
        pl_free(ids);
    }
    if (id < 0) return perr(ps, at, "%s is not one token of this tokenizer", buf), false;
    *out = (uint32_t)id;
    return true;
}

static bool parse_alternates(parser *ps, uint32_t rule, bool nested);

/* Applies {min,max} (max UINT32_MAX: no bound) to the symbol at rule elements [last, n). */
static bool repeat(parser *ps, uint32_t rule, size_t last, uint32_t min, uint32_t max,
                   const char *at) {
    pl_gram_rule *R = &ps->b.rules[rule];
    if (last >= R->n) return perr(ps, at, "nothing before the repetition to repeat"), false;
    size_t n_sym = R->n - last;
    pl_gram_elem sym;
    if (n_sym == 1) {
        sym = R->e[last];
    } else {
        long g = pl_gram_builder_gen_rule(&ps->b, rule);
        if (g < 0) return berr(ps, at), false;
        R = &ps->b.rules[rule]; /* the rule array may have moved */
        for (size_t i = last; i < R->n; i++) {
            pl_gram_elem e = ps->b.rules[rule].e[i];
            if (!push(ps, (uint32_t)g, e.type, e.value, at)) return false;
        }
        if (!push(ps, (uint32_t)g, PL_GE_END, 1, at)) return false;
        sym = (pl_gram_elem){PL_GE_RULE, (uint32_t)g};
    }
    R = &ps->b.rules[rule];
    ps->b.n_elems -= R->n - last;
    R->n = last;
    for (uint32_t i = 0; i < min; i++)
        if (!push(ps, rule, sym.type, sym.value, at)) return false;
    if (max == UINT32_MAX) {
        long t = pl_gram_builder_gen_rule(&ps->b, rule);
        if (t < 0) return berr(ps, at), false;
        if (!push(ps, (uint32_t)t, sym.type, sym.value, at) ||
            !push(ps, (uint32_t)t, PL_GE_RULE, (uint32_t)t, at) ||
            !push(ps, (uint32_t)t, PL_GE_END, 0, at) || !push(ps, (uint32_t)t, PL_GE_END, 1, at))
            return false;
        return push(ps, rule, PL_GE_RULE, (uint32_t)t, at);
    }
    long prev = -1;
    for (uint32_t k = min; k < max; k++) {
        long o = pl_gram_builder_gen_rule(&ps->b, rule);
        if (o < 0) return berr(ps, at), false;
        if (!push(ps, (uint32_t)o, sym.type, sym.value, at)) return false;
        if (prev >= 0 && !push(ps, (uint32_t)o, PL_GE_RULE, (uint32_t)prev, at)) return false;
        if (!push(ps, (uint32_t)o, PL_GE_END, 0, at) || !push(ps, (uint32_t)o, PL_GE_END, 1, at))
            return false;
        prev = o;
    }
    if (prev >= 0) return push(ps, rule, PL_GE_RULE, (uint32_t)prev, at);
    return true;
}

static bool parse_count(parser *ps, uint32_t *out) {
    const char *d = ps->p;
    uint64_t v = 0;
    while (cur(ps) >= '0' && cur(ps) <= '9') {
        v = v * 10 + (uint64_t)(cur(ps) - '0');
        if (v > PL_GRAM_MAX_REPEAT)
            return perr_c(ps, PL_ERR_TOO_LONG, d, "repetition count above %d",
                          PL_GRAM_MAX_REPEAT), false;
        ps->p++;
    }
    if (ps->p == d) return perr(ps, d, "expecting a number"), false;
    *out = (uint32_t)v;
    return true;
}

static bool parse_sequence(parser *ps, uint32_t rule, bool nested) {
    size_t last = (size_t)-1; /* start of the latest symbol in the rule's elements */
    while (!at_end(ps) && ps->err == PL_OK) {
        const char *at = ps->p;
        char c = *ps->p;
        size_t here = ps->b.rules[rule].n;
        if (c == '"') {
            ps->p++;
            last = here;
            while (cur(ps) != '"') {
                if (at_end(ps)) return perr(ps, at, "unterminated string"), false;
                uint32_t cp;
                if (!parse_char(ps, &cp)) return false;
                uint32_t pair[2] = {cp, cp};
                if (!push_class(ps, rule, pair, 1, false, at)) return false;
            }
            ps->p++;
            skip_space(ps, nested);
        } else if (c == '[') {
            ps->p++;
            bool neg = cur(ps) == '^';
            if (neg) ps->p++;
            uint32_t *pairs = NULL;
            size_t n = 0, cap = 0;
            bool ok = true;
            while (ok && cur(ps) != ']') {
                if (at_end(ps)) {
                    perr(ps, at, "unterminated character class");
                    ok = false;
                    break;
                }
                uint32_t lo, hi;
                if (!parse_char(ps, &lo)) {
                    ok = false;
                    break;
                }
                hi = lo;
                if (cur(ps) == '-' && peek(ps, 1) != ']' && peek(ps, 1) != '\0') {
                    ps->p++;
                    if (!parse_char(ps, &hi)) {
                        ok = false;
                        break;
                    }
                }
                void *p = pairs;
                if (pl_grow_array(&p, &cap, 2 * n + 2, sizeof(uint32_t), "grammar: class") != PL_OK) {
                    berr(ps, at);
                    ok = false;
                    break;
                }
                pairs = p;
                pairs[2 * n] = lo;
                pairs[2 * n + 1] = hi;
                n++;
            }
            if (ok) {
                ps->p++;
                last = here;
                ok = push_class(ps, rule, pairs, n, neg, at);
            }
            pl_free(pairs);
            if (!ok) return false;
            skip_space(ps, nested);
        } else if (c == '<' || (c == '!' && peek(ps, 1) == '<')) {
            bool neg = c == '!';
            if (neg) ps->p++;
            uint32_t id;
            if (!parse_token(ps, &id)) return false;
            last = here;
            if (!push(ps, rule, neg ? PL_GE_TOKEN_NOT : PL_GE_TOKEN, id, at)) return false;
            skip_space(ps, nested);
        } else if (is_word(c)) {
            const char *name = ps->p;
            while (is_word(cur(ps))) ps->p++;
            long r = pl_gram_builder_rule(&ps->b, name, (size_t)(ps->p - name));
            if (r < 0) return berr(ps, at), false;
            if (ps->b.rules[r].first_ref == (size_t)-1)
                ps->b.rules[r].first_ref = (size_t)(name - ps->text);
            last = here;
            if (!push(ps, rule, PL_GE_RULE, (uint32_t)r, at)) return false;
            skip_space(ps, nested);
        } else if (c == '(') {
            if (++ps->nest > PL_GRAM_MAX_NEST)
                return perr_c(ps, PL_ERR_TOO_LONG, at, "groups nested deeper than %d",
                              PL_GRAM_MAX_NEST), false;
            ps->p++;
            skip_space(ps, true);
            long g = pl_gram_builder_gen_rule(&ps->b, rule);
            if (g < 0) return berr(ps, at), false;
            if (!parse_alternates(ps, (uint32_t)g, true)) return false;
            if (cur(ps) != ')') return perr(ps, ps->p, "expecting )"), false;
            ps->p++;
            ps->nest--;
            last = ps->b.rules[rule].n;
            if (!push(ps, rule, PL_GE_RULE, (uint32_t)g, at)) return false;
            skip_space(ps, nested);
        } else if (c == '.') {
            ps->p++;
            last = here;
            if (!push_class(ps, rule, NULL, 0, true, at)) return false;
            skip_space(ps, nested);
        } else if (c == '*' || c == '+' || c == '?') {
            ps->p++;
            skip_space(ps, nested);
            if (last == (size_t)-1) return perr(ps, at, "nothing before %c to repeat", c), false;
            uint32_t min = c == '+' ? 1 : 0, max = c == '?' ? 1 : UINT32_MAX;
            if (!repeat(ps, rule, last, min, max, at)) return false;
            last = (size_t)-1;
        } else if (c == '{') {
            ps->p++;
            skip_space(ps, nested);
            uint32_t min, max;
            if (!parse_count(ps, &min)) return false;
            skip_space(ps, nested);
            if (cur(ps) == '}') {
                max = min;
            } else if (cur(ps) == ',') {
                ps->p++;
                skip_space(ps, nested);
                max = UINT32_MAX;
                if (cur(ps) >= '0' && cur(ps) <= '9' && !parse_count(ps, &max)) return false;
                skip_space(ps, nested);
                if (cur(ps) != '}') return perr(ps, ps->p, "expecting }"), false;
            } else {
                return perr(ps, ps->p, "expecting , or }"), false;
            }
            ps->p++;
            skip_space(ps, nested);
            if (max < min) return perr(ps, at, "{%u,%u}: the maximum is below the minimum", min, max), false;
            if (last == (size_t)-1) return perr(ps, at, "nothing before { to repeat"), false;
            if (!repeat(ps, rule, last, min, max, at)) return false;
            last = (size_t)-1;
        } else {
            break;
        }
    }
    return ps->err == PL_OK;
}

static bool parse_alternates(parser *ps, uint32_t rule, bool nested) {
    if (!parse_sequence(ps, rule, nested)) return false;
    while (cur(ps) == '|') {
        if (!push(ps, rule, PL_GE_END, 0, ps->p)) return false;
        ps->p++;
        skip_space(ps, true);
        if (!parse_sequence(ps, rule, nested)) return false;
    }
    return push(ps, rule, PL_GE_END, 1, ps->p);
}

static bool parse_rule(parser *ps) {
    const char *at = ps->p;
    const char *name = ps->p;
    while (is_word(cur(ps))) ps->p++;
    if (ps->p == name) return perr(ps, at, "expecting a rule name"), false;
    size_t len = (size_t)(ps->p - name);
    skip_space(ps, false);
    if (!(cur(ps) == ':' && peek(ps, 1) == ':' && peek(ps, 2) == '='))
        return perr(ps, ps->p, "expecting ::= after the rule name"), false;
    ps->p += 3;
    skip_space(ps, true);
    long r = pl_gram_builder_rule(&ps->b, name, len);
    if (r < 0) return berr(ps, at), false;
    if (ps->b.rules[r].defined)
        return perr(ps, at, "rule %.*s is defined twice", (int)len, name), false;
    ps->b.rules[r].defined = true;
    if (!parse_alternates(ps, (uint32_t)r, false)) return false;
    if (cur(ps) == '\r') ps->p += peek(ps, 1) == '\n' ? 2 : 1;
    else if (cur(ps) == '\n') ps->p++;
    else if (!at_end(ps)) return perr(ps, ps->p, "expecting a newline or the end after the rule"), false;
    skip_space(ps, true);
    return true;
}

pl_status pl_gram_parse(const char *text, size_t len, const pl_tokenizer *tok, pl_gram **out) {
    if (len > PL_GRAM_MAX_TEXT)
        return pl_fail(PL_ERR_TOO_LONG, "grammar: %zu bytes (at most %u)", len, PL_GRAM_MAX_TEXT);
    if (memchr(text, '\0', len))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "grammar: contains a NUL byte");
    parser ps = {.text = text, .end = text + len, .p = text, .tok = tok};
    skip_space(&ps, true);
    while (!at_end(&ps) && ps.err == PL_OK)
        if (!parse_rule(&ps)) break;
    long root = -1;
    if (ps.err == PL_OK) {
        for (size_t i = 0; i < ps.b.n_rules; i++)
            if (!ps.b.rules[i].defined) {
                const pl_gram_rule *r = &ps.b.rules[i];
                perr(&ps, text + r->first_ref, "rule %s is used but not defined", r->name);
                break;
            }
    }
    if (ps.err == PL_OK) {
        /* look the name up without creating it */
        for (size_t i = 0; i < ps.b.n_rules; i++)
            if (ps.b.rules[i].name_len == 4 && !memcmp(ps.b.rules[i].name, "root", 4)) root = (long)i;
        if (root < 0) ps.err = pl_fail(PL_ERR_INVALID_ARGUMENT, "grammar: no rule named root "
                                                                "(the output must match root)");
    }
    if (ps.err != PL_OK) {
        pl_gram_builder_free(&ps.b);
        return ps.err;
    }
    pl_status st = pl_gram_finish(&ps.b, (uint32_t)root, out);
    if (st != PL_OK) return pl_fail_prefix(st, "grammar");
    return PL_OK;
}
