/*
 * grammar/regex.c - regular expressions to GBNF: the `regex` constraint (the whole output
 * matches) and JSON Schema's `pattern` (inside a JSON string, where the matched characters
 * appear JSON-escaped).
 *
 * The subset (ECMAScript syntax, what JSON Schema's pattern is): literals; `.` (not a
 * newline); classes [...] / [^...] with ranges and \d \w \s inside; escapes \d \D \w \W \s \S
 * \n \r \t \f \v \0 \xHH \uHHHH \u{H...} and \ before punctuation; groups (...), (?:...),
 * (?<name>...); alternation |; quantifiers * + ? {m} {m,} {m,n}, a lazy ? after one (the
 * same for generation); ^ at the start and $ at the end (the match is whole anyway).
 * Refused with the offset: backreferences, lookaround, \b \B, flags, ^ or $ elsewhere, counts
 * above the grammar's repetition limit.
 *
 * Inside a JSON string a character class is emitted as its characters that need no escape
 * plus the escaped forms of ", \ and \n \r \t when the class holds them (other control
 * characters are left out: a subset, still valid).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/text.h"
#include "util/alloc.h"

#define MAX_RANGES 4096

typedef struct rx {
    const char *s;
    size_t n, i;
    bool json;        /* inside a JSON string */
    pl_gtext *out;
    pl_status err;
    int depth;
} rx;

static bool fail(rx *r, const char *fmt, ...) PL_PRINTF(2, 3);
static bool fail(rx *r, const char *fmt, ...) {
    if (r->err != PL_OK) return false;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->err = pl_fail(PL_ERR_INVALID_ARGUMENT, "regex at offset %zu: %s", r->i, msg);
    return false;
}

typedef struct set {
    uint32_t r[2 * MAX_RANGES];
    size_t n;
} set;

static bool set_add(rx *r, set *s, uint32_t lo, uint32_t hi) {
    if (s->n >= MAX_RANGES) return fail(r, "character class too large");
    s->r[2 * s->n] = lo;
    s->r[2 * s->n + 1] = hi;
    s->n++;
    return true;
}

static int cmp_u32pair(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void set_norm(set *s) {
    qsort(s->r, s->n, 2 * sizeof(uint32_t), cmp_u32pair);
    size_t m = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (m && s->r[2 * i] <= s->r[2 * (m - 1) + 1] + 1) {
            if (s->r[2 * i + 1] > s->r[2 * (m - 1) + 1]) s->r[2 * (m - 1) + 1] = s->r[2 * i + 1];
        } else {
            s->r[2 * m] = s->r[2 * i];
            s->r[2 * m + 1] = s->r[2 * i + 1];
            m++;
        }
    }
    s->n = m;
}

/* s = the complement of s within the code points (surrogates excluded). */
static bool set_negate(rx *r, set *s) {
    set_norm(s);
    set *c = pl_malloc(sizeof *c); /* 32 KB: not on the stack */
    if (!c) return r->err = pl_fail(PL_ERR_OUT_OF_MEMORY, "regex: class"), false;
    c->n = 0;
    uint32_t at = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->r[2 * i] > at && !set_add(r, c, at, s->r[2 * i] - 1)) break;
        at = s->r[2 * i + 1] + 1;
    }
    if (r->err == PL_OK && at <= 0x10FFFF) set_add(r, c, at, 0x10FFFF);
    if (r->err == PL_OK) *s = *c;
    pl_free(c);
    return r->err == PL_OK;
}

static bool set_has(const set *s, uint32_t cp) {
    for (size_t i = 0; i < s->n; i++)
        if (s->r[2 * i] <= cp && cp <= s->r[2 * i + 1]) return true;
    return false;
}

/* Emits the set as a GBNF term. */
static bool emit_set(rx *r, set *s) {
    set_norm(s);
    pl_gtext *o = r->out;
    size_t n_alt = 0;
    if (r->json) {
        static const struct { uint32_t cp; const char *lit; } esc[] = {
            {'"', "\"\\\\\\\"\""}, {'\\', "\"\\\\\\\\\""}, {'\n', "\"\\\\n\""},
            {'\r', "\"\\\\r\""}, {'\t', "\"\\\\t\""},
        };
        pl_gt_puts(o, "(");
        /* the characters that need no escape */
        bool any = false;
        for (size_t i = 0; i < s->n; i++) {
            uint32_t lo = s->r[2 * i], hi = s->r[2 * i + 1];
            /* cut out 0x00-0x1F, '"' (0x22), '\\' (0x5C) */
            uint32_t cuts[][2] = {{0, 0x1F}, {0x22, 0x22}, {0x5C, 0x5C}};
            uint32_t a = lo;
            for (int k = 0; k < 3 && a <= hi; k++) {
                if (cuts[k][1] < a) continue;
                if (cuts[k][0] > hi) break;
                if (cuts[k][0] > a) {
                    if (!any) pl_gt_puts(o, "[");
                    any = true;
                    pl_gt_class_char(o, a);
                    if (cuts[k][0] - 1 > a) {
                        pl_gt_puts(o, "-");
                        pl_gt_class_char(o, cuts[k][0] - 1);
                    }
                }
                a = cuts[k][1] + 1;
            }
            if (a <= hi) {
                if (!any) pl_gt_puts(o, "[");
                any = true;
                pl_gt_class_char(o, a);
                if (hi > a) {
                    pl_gt_puts(o, "-");
                    pl_gt_class_char(o, hi);
                }
            }
        }
        if (any) {
            pl_gt_puts(o, "]");
            n_alt++;
        }
        for (size_t k = 0; k < sizeof esc / sizeof esc[0]; k++)
            if (set_has(s, esc[k].cp)) {
                pl_gt_printf(o, "%s%s", n_alt ? " | " : "", esc[k].lit);
                n_alt++;
            }
        pl_gt_puts(o, ")");
        if (n_alt == 0) return fail(r, "a character class that matches nothing here");
        return true;
    }
    if (s->n == 0) return fail(r, "a character class that matches nothing");
    pl_gt_puts(o, "[");
    for (size_t i = 0; i < s->n; i++) {
        pl_gt_class_char(o, s->r[2 * i]);
        if (s->r[2 * i + 1] > s->r[2 * i]) {
            pl_gt_puts(o, "-");
            pl_gt_class_char(o, s->r[2 * i + 1]);
        }
    }
    pl_gt_puts(o, "]");
    return true;
}

static bool more(const rx *r) { return r->i < r->n; }
static char at(const rx *r) { return more(r) ? r->s[r->i] : '\0'; }

static int hexv(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static bool add_class_escape(rx *r, set *s, char e, bool *handled) {
    *handled = true;
    switch (e) {
    case 'd': return set_add(r, s, '0', '9');
    case 'w':
        return set_add(r, s, '0', '9') && set_add(r, s, 'A', 'Z') && set_add(r, s, '_', '_') &&
               set_add(r, s, 'a', 'z');
    case 's':
        return set_add(r, s, '\t', '\r') && set_add(r, s, ' ', ' ') &&
               set_add(r, s, 0xA0, 0xA0) && set_add(r, s, 0x2028, 0x2029) &&
               set_add(r, s, 0xFEFF, 0xFEFF);
    default: *handled = false; return true;
    }
}

/* An escape after '\' giving one character; r->i at the character after '\'. */
static bool char_escape(rx *r, uint32_t *cp) {
    char e = at(r);
    r->i++;
    switch (e) {
    case 'n': *cp = '\n'; return true;
    case 'r': *cp = '\r'; return true;
    case 't': *cp = '\t'; return true;
    case 'f': *cp = '\f'; return true;
    case 'v': *cp = '\v'; return true;
    case '0': *cp = 0; return true;
    case 'x': case 'u': {
        uint32_t v = 0;
        if (e == 'u' && at(r) == '{') {
            r->i++;
            int k = 0;
            while (hexv(at(r)) >= 0 && k < 7) v = v * 16 + (uint32_t)hexv(at(r)), r->i++, k++;
            if (at(r) != '}' || k == 0 || v > 0x10FFFF) return fail(r, "bad \\u{...} escape");
            r->i++;
            *cp = v;
            return true;
        }
        int digits = e == 'x' ? 2 : 4;
        for (int k = 0; k < digits; k++) {
            if (hexv(at(r)) < 0) return fail(r, "expecting %d hex digits after \\%c", digits, e);
            v = v * 16 + (uint32_t)hexv(at(r));
            r->i++;
        }
        if (v >= 0xD800 && v <= 0xDFFF) return fail(r, "a surrogate escape");
        *cp = v;
        return true;
    }
    case 'b': case 'B': return fail(r, "word boundaries (\\b, \\B) are not supported");
    default:
        if (e >= '1' && e <= '9') return fail(r, "backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || e == '\0')
            return fail(r, "unknown escape \\%c", e ? e : ' ');
        *cp = (uint8_t)e; /* punctuation stands for itself */
        return true;
    }
}

static bool utf8_char(rx *r, uint32_t *cp) {
    int len = pl_gt_utf8(r->s + r->i, r->n - r->i, cp);
    if (!len) return fail(r, "invalid UTF-8");
    r->i += (size_t)len;
    return true;
}

static bool parse_class(rx *r) {
    r->i++; /* '[' */
    set *s = pl_malloc(sizeof *s);
    if (!s) return r->err = pl_fail(PL_ERR_OUT_OF_MEMORY, "regex: class"), false;
    s->n = 0;
    bool neg = at(r) == '^';
    if (neg) r->i++;
    bool first = true;
    while (r->err == PL_OK && (at(r) != ']' || (first && false))) {
        if (!more(r)) {
            fail(r, "unterminated character class");
            break;
        }
        first = false;
        uint32_t lo;
        if (at(r) == '\\') {
            r->i++;
            bool handled;
            char e = at(r);
            if (e == 'D' || e == 'W' || e == 'S') {
                fail(r, "\\%c inside a class is not supported", e);
                break;
            }
            if (!add_class_escape(r, s, e, &handled)) break;
            if (handled) {
                r->i++;
                continue;
            }
            if (e == 'b') { /* backspace inside a class */
                r->i++;
                lo = 8;
            } else if (!char_escape(r, &lo)) break;
        } else if (!utf8_char(r, &lo)) {
            break;
        }
        uint32_t hi = lo;
        if (at(r) == '-' && r->i + 1 < r->n && r->s[r->i + 1] != ']') {
            r->i++;
            if (at(r) == '\\') {
                r->i++;
                if (!char_escape(r, &hi)) break;
            } else if (!utf8_char(r, &hi)) {
                break;
            }
            if (hi < lo) {
                fail(r, "a range out of order");
                break;
            }
        }
        if (!set_add(r, s, lo, hi)) break;
    }
    bool ok = r->err == PL_OK;
    if (ok) {
        r->i++; /* ']' */
        if (neg) ok = set_negate(r, s);
        if (ok) ok = emit_set(r, s);
    }
    pl_free(s);
    return ok;
}

static bool emit_one(rx *r, uint32_t cp) {
    set *s = pl_malloc(sizeof *s);
    if (!s) return r->err = pl_fail(PL_ERR_OUT_OF_MEMORY, "regex"), false;
    s->n = 0;
    set_add(r, s, cp, cp);
    bool ok = emit_set(r, s);
    pl_free(s);
    return ok;
}

static bool parse_alt(rx *r);

static bool parse_count(rx *r, uint32_t *v) {
    size_t start = r->i;
    uint64_t x = 0;
    while (at(r) >= '0' && at(r) <= '9') {
        x = x * 10 + (uint64_t)(at(r) - '0');
        if (x > PL_GRAM_MAX_REPEAT) {
            r->err = pl_fail(PL_ERR_TOO_LONG, "regex at offset %zu: a repetition count above %d",
                             start, PL_GRAM_MAX_REPEAT);
            return false;
        }
        r->i++;
    }
    if (r->i == start) return fail(r, "expecting a number");
    *v = (uint32_t)x;
    return true;
}

/* One atom and its quantifiers. */
static bool parse_piece(rx *r) {
    char c = at(r);
    pl_gtext *o = r->out;
    size_t mark = o->n;
    if (c == '(') {
        if (++r->depth > PL_GRAM_MAX_NEST) {
            r->err = pl_fail(PL_ERR_TOO_LONG, "regex at offset %zu: groups nested deeper than %d",
                             r->i, PL_GRAM_MAX_NEST);
            return false;
        }
        r->i++;
        if (at(r) == '?') {
            char k = r->i + 1 < r->n ? r->s[r->i + 1] : '\0';
            if (k == ':') r->i += 2;
            else if (k == '<' && r->i + 2 < r->n && r->s[r->i + 2] != '=' && r->s[r->i + 2] != '!') {
                while (more(r) && at(r) != '>') r->i++;
                if (!more(r)) return fail(r, "unterminated group name");
                r->i++;
            } else if (k == 'P' && r->i + 2 < r->n && r->s[r->i + 2] == '<') {
                while (more(r) && at(r) != '>') r->i++;
                if (!more(r)) return fail(r, "unterminated group name");
                r->i++;
            } else if (k == '=' || k == '!' || k == '<') {
                return fail(r, "lookaround is not supported");
            } else {
                return fail(r, "flags and (?%c...) groups are not supported", k ? k : ' ');
            }
        }
        pl_gt_puts(o, "(");
        if (!parse_alt(r)) return false;
        if (at(r) != ')') return fail(r, "expecting )");
        r->i++;
        r->depth--;
        pl_gt_puts(o, ")");
    } else if (c == '[') {
        if (!parse_class(r)) return false;
    } else if (c == '.') {
        r->i++;
        set *s = pl_malloc(sizeof *s);
        if (!s) return r->err = pl_fail(PL_ERR_OUT_OF_MEMORY, "regex"), false;
        s->n = 0;
        bool ok = set_add(r, s, '\n', '\n') && set_negate(r, s) && emit_set(r, s);
        pl_free(s);
        if (!ok) return false;
    } else if (c == '\\') {
        r->i++;
        char e = at(r);
        set *s = pl_malloc(sizeof *s);
        if (!s) return r->err = pl_fail(PL_ERR_OUT_OF_MEMORY, "regex"), false;
        s->n = 0;
        bool handled, ok = true;
        char lower = (char)(e | 0x20);
        if (e == 'D' || e == 'W' || e == 'S') {
            ok = add_class_escape(r, s, lower, &handled) && set_negate(r, s);
            r->i++;
        } else {
            ok = add_class_escape(r, s, e, &handled);
            if (handled) r->i++;
        }
        if (ok && !handled) {
            uint32_t cp;
            ok = char_escape(r, &cp) && set_add(r, s, cp, cp);
        }
        if (ok) ok = emit_set(r, s);
        pl_free(s);
        if (!ok) return false;
    } else if (c == '^' || c == '$') {
        return fail(r, "%c is only supported at the %s of the pattern", c, c == '^' ? "start" : "end");
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        return fail(r, "nothing to repeat");
    } else {
        uint32_t cp;
        if (!utf8_char(r, &cp) || !emit_one(r, cp)) return false;
    }
    /* quantifiers */
    for (;;) {
        c = at(r);
        if (c == '*' || c == '+' || c == '?') {
            r->i++;
            pl_gt_printf(o, "%c", c);
        } else if (c == '{' && r->i + 1 < r->n && r->s[r->i + 1] >= '0' && r->s[r->i + 1] <= '9') {
            r->i++;
            uint32_t lo = 0, hi = UINT32_MAX;
            if (!parse_count(r, &lo)) return false;
            bool open = false;
            if (at(r) == ',') {
                r->i++;
                open = true;
                if (at(r) >= '0' && at(r) <= '9' && !parse_count(r, &hi)) return false;
            } else {
                hi = lo;
            }
            if (at(r) != '}') return fail(r, "expecting }");
            r->i++;
            if (hi < lo) return fail(r, "{%u,%u}: the maximum is below the minimum", lo, hi);
            if (hi == UINT32_MAX && open) pl_gt_printf(o, "{%u,}", lo);
            else pl_gt_printf(o, "{%u,%u}", lo, hi);
        } else {
            break;
        }
        if (at(r) == '?') r->i++; /* lazy: the same set of strings */
        else if (at(r) == '+') return fail(r, "possessive quantifiers are not supported");
        /* a quantifier applies to the atom: wrap repeated quantifiers ("a**") in a group */
        if (at(r) == '*' || at(r) == '+' || at(r) == '?' || at(r) == '{') {
            pl_gt_puts(o, ")");
            /* insert "(" at mark */
            pl_gt_put(o, " ", 1);
            if (!o->oom) {
                memmove(o->p + mark + 1, o->p + mark, o->n - mark - 1);
                o->p[mark] = '(';
            }
        }
    }
    return true;
}

static bool parse_concat(rx *r) {
    bool any = false;
    while (more(r) && at(r) != '|' && at(r) != ')' && r->err == PL_OK) {
        if (at(r) == '$' && r->i + 1 == r->n && r->depth == 0) break;
        if (any) pl_gt_puts(r->out, " ");
        if (!parse_piece(r)) return false;
        any = true;
    }
    if (!any) pl_gt_puts(r->out, "\"\"");
    return r->err == PL_OK;
}

static bool parse_alt(rx *r) {
    pl_gt_puts(r->out, "(");
    if (!parse_concat(r)) return false;
    while (at(r) == '|') {
        r->i++;
        pl_gt_puts(r->out, " | ");
        if (!parse_concat(r)) return false;
    }
    pl_gt_puts(r->out, ")");
    return r->err == PL_OK;
}

/* The expression for re (anchors dropped) into out; *anch_start / *anch_end tell which
 * anchors it had. */
pl_status pl_gram_regex_expr(const char *re, size_t len, bool json, pl_gtext *out,
                             bool *anch_start, bool *anch_end) {
    rx r = {.s = re, .n = len, .json = json, .out = out};
    *anch_start = len > 0 && re[0] == '^';
    if (*anch_start) r.i = 1;
    *anch_end = false;
    if (!parse_alt(&r)) return r.err;
    if (r.i < r.n && at(&r) == '$' && r.i + 1 == r.n) {
        *anch_end = true;
        r.i++;
    }
    if (r.i < r.n) {
        fail(&r, at(&r) == ')' ? "unbalanced )" : "unexpected character");
        return r.err;
    }
    if (out->oom) return pl_fail(PL_ERR_OUT_OF_MEMORY, "regex: grammar text");
    return PL_OK;
}

pl_status pl_gram_regex_to_gbnf(const char *re, size_t len, const char *prefix, char **out) {
    pl_gtext t = {0};
    bool a, b;
    pl_gt_printf(&t, "%sroot ::= ", prefix ? prefix : "");
    pl_status st = pl_gram_regex_expr(re, len, false, &t, &a, &b);
    if (st != PL_OK) {
        pl_gt_free(&t);
        return st;
    }
    pl_gt_puts(&t, "\n");
    return pl_gt_take(&t, out);
}
