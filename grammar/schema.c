/*
 * grammar/schema.c - JSON Schema to GBNF: one rule per schema node, shared rules for the JSON
 * primitives, and every output a JSON text the schema accepts.
 *
 * Supported: type (one or a list); properties, required, additionalProperties (false, true or
 * a schema; absent: no additional properties are generated, which is still valid output);
 * enum, const; anyOf, oneOf (generated as anyOf: alternatives that overlap may both match);
 * $ref to "#" or a JSON pointer in the document ($defs, definitions), recursion included;
 * items, prefixItems, minItems, maxItems; minLength, maxLength, pattern (regex.c's subset),
 * format (date, time, date-time, uuid, email, hostname, ipv4, uri); minimum, maximum,
 * exclusiveMinimum, exclusiveMaximum for integers (exact) and numbers (integer-valued bounds
 * exact; a fractional bound is tightened to the next integer, a subset). Annotations (title,
 * description, default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly)
 * are ignored, as they constrain nothing. Any other keyword is refused with its JSON pointer,
 * never ignored.
 *
 * The output is bounded wherever the schema allows: whitespace between tokens is at most
 * PL_JSON_WS characters, numbers at most 16 digits (+ 16 fraction digits, a 2-digit
 * exponent), \u escapes never surrogates (so string lengths count as a validator counts
 * them). Strings, arrays and additional properties without a maximum are not bounded.
 */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/text.h"
#include "util/alloc.h"

#define PL_JSON_WS 16          /* whitespace characters between two JSON tokens, at most */
#define MAX_SCHEMA_DEPTH 64    /* nested schemas (not counting $ref recursion) */
#define MAX_ENUM 4096          /* members of an enum */

typedef struct ref_memo {
    char *ptr;   /* "#/$defs/x" */
    char *rule;
} ref_memo;

typedef struct sc {
    json_t *doc;
    const char *prefix;
    pl_gtext out;
    pl_status err;
    char path[1024];      /* the JSON pointer of the node being converted */
    size_t path_len;
    int depth;
    size_t n_names;
    ref_memo *refs;
    size_t n_refs, cap_refs;
    bool used_ws, used_string, used_char, used_number, used_integer, used_value, used_anychar;
    char n_ws[80], n_string[80], n_char[80], n_number[80], n_integer[80], n_value[80];
} sc;

static bool fail_c(sc *s, pl_status code, const char *fmt, ...) PL_PRINTF(3, 4);
static bool fail_c(sc *s, pl_status code, const char *fmt, ...) {
    if (s->err != PL_OK) return false;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->err = pl_fail(code, "json_schema at %s: %s", s->path_len ? s->path : "/", msg);
    return false;
}
#define fail(s, ...) fail_c(s, PL_ERR_INVALID_ARGUMENT, __VA_ARGS__)

/* Pushes a pointer segment (escaped per RFC 6901); returns the old length to pop to. */
static size_t push_seg(sc *s, const char *seg) {
    size_t old = s->path_len;
    if (s->path_len + 2 < sizeof s->path) s->path[s->path_len++] = '/';
    for (const char *p = seg; *p && s->path_len + 3 < sizeof s->path; p++) {
        if (*p == '~') s->path[s->path_len++] = '~', s->path[s->path_len++] = '0';
        else if (*p == '/') s->path[s->path_len++] = '~', s->path[s->path_len++] = '1';
        else s->path[s->path_len++] = *p;
    }
    s->path[s->path_len] = '\0';
    return old;
}

static size_t push_idx(sc *s, size_t i) {
    char b[24];
    snprintf(b, sizeof b, "%zu", i);
    return push_seg(s, b);
}

static void pop_seg(sc *s, size_t old) {
    s->path_len = old;
    s->path[old] = '\0';
}

/* A fresh rule name from a hint: prefix + hint's letters/digits ('-' for the rest) + a
 * number. buf gets it. */
static void new_name(sc *s, const char *hint, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "%s", s->prefix);
    for (const char *p = hint; *p && n + 12 < cap && n < 48; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        buf[n++] = ok ? c : '-';
    }
    snprintf(buf + n, cap - n, "-%zu", ++s->n_names);
}

/* ---- shared primitives ------------------------------------------------------------------ */

/* The name of a shared rule (prefix + name), marking it used. */
static const char *prim(sc *s, const char *name, bool *used) {
    *used = true;
    if (!strcmp(name, "ws")) return s->n_ws;
    if (!strcmp(name, "string")) return s->n_string;
    if (!strcmp(name, "char")) return s->n_char;
    if (!strcmp(name, "number")) return s->n_number;
    if (!strcmp(name, "integer")) return s->n_integer;
    return s->n_value;
}

static void emit_prims(sc *s) {
    const char *p = s->prefix;
    pl_gtext *o = &s->out;
    if (s->used_value) {
        s->used_string = s->used_number = s->used_ws = true;
        pl_gt_printf(o, "%svalue ::= %sobject | %sarray | %sstring | %snumber | \"true\" | "
                        "\"false\" | \"null\"\n", p, p, p, p, p);
        pl_gt_printf(o, "%sobject ::= \"{\" %sws ( %sstring %sws \":\" %sws %svalue %sws "
                        "( \",\" %sws %sstring %sws \":\" %sws %svalue %sws )* )? \"}\"\n",
                     p, p, p, p, p, p, p, p, p, p, p, p, p);
        pl_gt_printf(o, "%sarray ::= \"[\" %sws ( %svalue %sws ( \",\" %sws %svalue %sws )* )? "
                        "\"]\"\n", p, p, p, p, p, p, p);
    }
    if (s->used_anychar) pl_gt_printf(o, "%sanychar ::= [^\"\\\\\\x00-\\x1F]\n", p);
    if (s->used_string) {
        s->used_char = true;
        pl_gt_printf(o, "%sstring ::= \"\\\"\" %schar* \"\\\"\"\n", p, p);
    }
    if (s->used_char)
        /* no \u escape of a surrogate: a validator counts a pair as one character */
        pl_gt_printf(o, "%schar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" "
                        "( [0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )\n", p);
    if (s->used_number)
        pl_gt_printf(o, "%snumber ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? "
                        "( [eE] [-+]? [0-9]{1,2} )?\n", p);
    if (s->used_integer)
        pl_gt_printf(o, "%sinteger ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,14} )\n", p);
    if (s->used_ws) pl_gt_printf(o, "%sws ::= [ \\t\\n]{0,%d}\n", p, PL_JSON_WS);
}

/* ---- literals --------------------------------------------------------------------------- */

/* A JSON value as the GBNF literal of its compact JSON text. */
static bool literal(sc *s, const json_t *v, pl_gtext *o) {
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    if (!text) return fail_c(s, PL_ERR_OUT_OF_MEMORY, "out of memory");
    /* objects in compact form have no spaces, which the output may then not have either:
     * fine, the text is exactly the value */
    pl_gt_literal(o, text, strlen(text));
    free(text);
    return true;
}

/* ---- integers in a range ---------------------------------------------------------------- */

/* Digits of equal length from lo to hi (decimal strings of n digits, lo <= hi). */
static void same_len(pl_gtext *o, const char *lo, const char *hi, size_t n) {
    if (n == 0) {
        pl_gt_puts(o, "\"\"");
        return;
    }
    if (!memcmp(lo, hi, n)) {
        pl_gt_literal(o, lo, n);
        return;
    }
    bool lo_zero = true, hi_nine = true;
    for (size_t i = 1; i < n; i++) lo_zero &= lo[i] == '0', hi_nine &= hi[i] == '9';
    if (lo[0] == hi[0]) {
        pl_gt_printf(o, "\"%c\" ", lo[0]);
        same_len(o, lo + 1, hi + 1, n - 1);
        return;
    }
    pl_gt_puts(o, "(");
    char nines[32], zeros[32];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    char a = lo[0], b = hi[0];
    int alts = 0;
    if (!lo_zero) { /* lo's first digit with the rest from lo up */
        pl_gt_printf(o, "\"%c\" ( ", a);
        same_len(o, lo + 1, nines, n - 1);
        pl_gt_puts(o, " )");
        a++;
        alts++;
    }
    char b_full = hi_nine ? b : (char)(b - 1);
    if (a <= b_full) {
        if (alts++) pl_gt_puts(o, " | ");
        if (a == b_full) pl_gt_printf(o, "\"%c\"", a);
        else pl_gt_printf(o, "[%c-%c]", a, b_full);
        if (n > 1) pl_gt_printf(o, " [0-9]{%zu}", n - 1);
    }
    if (!hi_nine) {
        if (alts++) pl_gt_puts(o, " | ");
        pl_gt_printf(o, "\"%c\" ( ", b);
        same_len(o, zeros, hi + 1, n - 1);
        pl_gt_puts(o, " )");
    }
    pl_gt_puts(o, ")");
}

#define INT_DIGITS 15 /* digits of an unbounded side */

/* Non-negative integers in [lo, hi] (hi < 0: no upper bound, up to INT_DIGITS digits). */
static void nonneg_range(pl_gtext *o, long long lo, long long hi) {
    char a[24], b[24];
    int la = snprintf(a, sizeof a, "%lld", lo);
    int lb = hi >= 0 ? snprintf(b, sizeof b, "%lld", hi) : INT_DIGITS;
    if (hi < 0 && la > INT_DIGITS) lb = la;
    pl_gt_puts(o, "(");
    int alts = 0;
    for (int len = la; len <= lb; len++) {
        char lo_s[24], hi_s[24];
        if (len == la) memcpy(lo_s, a, (size_t)la);
        else {
            lo_s[0] = '1';
            memset(lo_s + 1, '0', (size_t)len - 1);
        }
        if (len == 1 && la == 1) lo_s[0] = a[0];
        if (hi >= 0 && len == lb) memcpy(hi_s, b, (size_t)lb);
        else memset(hi_s, '9', (size_t)len);
        if (alts++) pl_gt_puts(o, " | ");
        same_len(o, lo_s, hi_s, (size_t)len);
    }
    pl_gt_puts(o, ")");
}

/* Integers in [lo, hi]; has_lo / has_hi false: unbounded (within INT_DIGITS digits). */
static void int_range(pl_gtext *o, bool has_lo, long long lo, bool has_hi, long long hi) {
    pl_gt_puts(o, "(");
    int alts = 0;
    /* negative part: "-" then magnitudes [max(1, -hi), -lo] */
    if (!has_lo || lo < 0) {
        long long mag_lo = has_hi && hi < 0 ? -hi : 1;
        long long mag_hi = has_lo ? -lo : -1;
        pl_gt_puts(o, "\"-\" ");
        nonneg_range(o, mag_lo, mag_hi);
        alts++;
    }
    if (!has_hi || hi >= 0) {
        if (alts++) pl_gt_puts(o, " | ");
        nonneg_range(o, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
    }
    pl_gt_puts(o, ")");
}

/* ---- the conversion ---------------------------------------------------------------------- */

static bool gen(sc *s, const json_t *node, const char *hint, char *name, size_t cap);

static bool is_annotation(const char *k) {
    static const char *const a[] = {"title", "description", "default", "examples", "$schema",
                                    "$id", "$comment", "deprecated", "readOnly", "writeOnly",
                                    "$defs", "definitions"};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        if (!strcmp(k, a[i])) return true;
    return false;
}

static bool is_supported(const char *k) {
    static const char *const a[] = {
        "type", "properties", "required", "additionalProperties", "enum", "const", "anyOf",
        "oneOf", "$ref", "items", "prefixItems", "minItems", "maxItems", "minLength",
        "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum"};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        if (!strcmp(k, a[i])) return true;
    return is_annotation(k);
}

/* Which JSON types a value has, as bits. */
enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64 };

static int type_bit(const char *t) {
    if (!strcmp(t, "null")) return T_NULL;
    if (!strcmp(t, "boolean")) return T_BOOL;
    if (!strcmp(t, "integer")) return T_INT;
    if (!strcmp(t, "number")) return T_NUM;
    if (!strcmp(t, "string")) return T_STR;
    if (!strcmp(t, "array")) return T_ARR;
    if (!strcmp(t, "object")) return T_OBJ;
    return 0;
}

static bool value_fits(const json_t *v, int types) {
    switch (json_typeof(v)) {
    case JSON_NULL: return types & T_NULL;
    case JSON_TRUE:
    case JSON_FALSE: return types & T_BOOL;
    case JSON_INTEGER: return types & (T_INT | T_NUM);
    case JSON_REAL: {
        double d = json_real_value(v);
        return (types & T_NUM) || ((types & T_INT) && d == floor(d));
    }
    case JSON_STRING: return types & T_STR;
    case JSON_ARRAY: return types & T_ARR;
    case JSON_OBJECT: return types & T_OBJ;
    }
    return false;
}

/* A number keyword's value (or fail). */
static bool num_kw(sc *s, const json_t *node, const char *k, bool *has, double *v) {
    const json_t *x = json_object_get(node, k);
    *has = x != NULL;
    if (!x) return true;
    if (!json_is_number(x)) {
        size_t o = push_seg(s, k);
        fail(s, "must be a number");
        pop_seg(s, o);
        return false;
    }
    *v = json_number_value(x);
    return true;
}

static bool count_kw(sc *s, const json_t *node, const char *k, bool *has, long long *v) {
    const json_t *x = json_object_get(node, k);
    *has = x != NULL;
    if (!x) return true;
    size_t o = push_seg(s, k);
    bool ok = true;
    if (!json_is_integer(x) || json_integer_value(x) < 0) ok = fail(s, "must be a non-negative integer");
    else if (json_integer_value(x) > PL_GRAM_MAX_REPEAT)
        ok = fail_c(s, PL_ERR_TOO_LONG, "%lld is above %d, the most this converter takes",
                    (long long)json_integer_value(x), PL_GRAM_MAX_REPEAT);
    else *v = json_integer_value(x);
    pop_seg(s, o);
    return ok;
}

/* "{m,n}" / "{m,}" text for a repetition. */
static void reps(pl_gtext *o, long long m, bool has_max, long long M) {
    if (has_max) pl_gt_printf(o, "{%lld,%lld}", m, M);
    else pl_gt_printf(o, "{%lld,}", m);
}

static bool gen_string(sc *s, const json_t *node, pl_gtext *o) {
    bool has_min, has_max;
    long long mn = 0, mx = 0;
    if (!count_kw(s, node, "minLength", &has_min, &mn) || !count_kw(s, node, "maxLength", &has_max, &mx))
        return false;
    const json_t *pat = json_object_get(node, "pattern"), *fmt = json_object_get(node, "format");
    if (has_max && mx < mn) return fail(s, "maxLength %lld is below minLength %lld", mx, mn);
    if ((pat || fmt) && (has_min || has_max))
        return fail(s, "%s together with minLength/maxLength is not supported",
                    pat ? "pattern" : "format");
    if (pat && fmt) return fail(s, "pattern together with format is not supported");
    const char *ch = prim(s, "char", &s->used_char);
    char chn[128];
    snprintf(chn, sizeof chn, "%s", ch);
    if (pat) {
        size_t old = push_seg(s, "pattern");
        if (!json_is_string(pat)) {
            fail(s, "must be a string");
            pop_seg(s, old);
            return false;
        }
        bool a, b;
        pl_gtext e = {0};
        pl_status st = pl_gram_regex_expr(json_string_value(pat), json_string_length(pat), true,
                                          &e, &a, &b);
        if (st != PL_OK) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", pl_last_error());
            fail_c(s, st, "%s", msg);
            pl_gt_free(&e);
            pop_seg(s, old);
            return false;
        }
        pop_seg(s, old);
        pl_gt_printf(o, "\"\\\"\" %s%s %s %s%s \"\\\"\"", a ? "" : chn, a ? "" : "*", e.p ? e.p : "",
                     b ? "" : chn, b ? "" : "*");
        pl_gt_free(&e);
        return true;
    }
    if (fmt) {
        if (!json_is_string(fmt)) {
            size_t old = push_seg(s, "format");
            fail(s, "must be a string");
            pop_seg(s, old);
            return false;
        }
        const char *f = json_string_value(fmt);
        static const char *const date =
            "[0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | "
            "\"3\" [01] ) | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | "
            "\"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )";
        static const char *const time =
            "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
            "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )";
        static const char *const label = "[a-z0-9] ( [a-z0-9-]{0,20} [a-z0-9] )?";
        pl_gt_puts(o, "\"\\\"\" ");
        if (!strcmp(f, "date")) pl_gt_puts(o, date);
        else if (!strcmp(f, "time")) pl_gt_puts(o, time);
        else if (!strcmp(f, "date-time")) pl_gt_printf(o, "%s \"T\" %s", date, time);
        else if (!strcmp(f, "uuid"))
            pl_gt_puts(o, "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" "
                          "[0-9a-f]{12}");
        else if (!strcmp(f, "email"))
            pl_gt_printf(o, "[a-zA-Z0-9_+-]{1,24} ( \".\" [a-zA-Z0-9_+-]{1,24} ){0,2} \"@\" %s "
                            "( \".\" %s ){1,3}", label, label);
        else if (!strcmp(f, "hostname"))
            pl_gt_printf(o, "%s ( \".\" %s ){0,3}", label, label);
        else if (!strcmp(f, "ipv4"))
            pl_gt_puts(o, "( ( \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9] ) "
                          "\".\" ){3} ( \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | "
                          "[1-9]? [0-9] )");
        else if (!strcmp(f, "uri"))
            pl_gt_printf(o, "\"http\" \"s\"? \"://\" %s ( \".\" %s ){0,3} ( \"/\" "
                            "[a-zA-Z0-9._~-]{0,16} ){0,4}", label, label);
        else {
            size_t old = push_seg(s, "format");
            fail(s, "format \"%.64s\" is not supported (date, time, date-time, uuid, email, "
                    "hostname, ipv4, uri are)", f);
            pop_seg(s, old);
            return false;
        }
        pl_gt_puts(o, " \"\\\"\"");
        return true;
    }
    pl_gt_printf(o, "\"\\\"\" %s", chn);
    if (!has_min && !has_max) pl_gt_puts(o, "*");
    else reps(o, mn, has_max, mx);
    pl_gt_puts(o, " \"\\\"\"");
    return true;
}

static bool gen_number(sc *s, const json_t *node, bool integer, pl_gtext *o) {
    bool h_min, h_max, h_xmin, h_xmax;
    double mn = 0, mx = 0, xmn = 0, xmx = 0;
    if (!num_kw(s, node, "minimum", &h_min, &mn) || !num_kw(s, node, "maximum", &h_max, &mx) ||
        !num_kw(s, node, "exclusiveMinimum", &h_xmin, &xmn) ||
        !num_kw(s, node, "exclusiveMaximum", &h_xmax, &xmx))
        return false;
    if (!h_min && !h_max && !h_xmin && !h_xmax) {
        pl_gt_puts(o, integer ? prim(s, "integer", &s->used_integer)
                              : prim(s, "number", &s->used_number));
        return true;
    }
    /* the integer bounds: the smallest and largest whole numbers the bounds allow */
    bool has_lo = h_min || h_xmin, has_hi = h_max || h_xmax;
    double lo = -INFINITY, hi = INFINITY;
    if (h_min) lo = ceil(mn);
    if (h_xmin) lo = fmax(lo, floor(xmn) + 1);
    if (h_max) hi = floor(mx);
    if (h_xmax) hi = fmin(hi, ceil(xmx) - 1);
    const double lim = 1e15;
    if ((has_lo && fabs(lo) > lim) || (has_hi && fabs(hi) > lim))
        return fail(s, "bounds beyond +-1e15 are not supported");
    if (has_lo && has_hi && lo > hi)
        return fail(s, "no %s lies within the bounds%s", integer ? "integer" : "number",
                    integer ? "" : " (fractional bounds are taken to the integers inside them)");
    /* the unbounded sides as 0: never read (has_lo / has_hi say so), and no infinity cast */
    long long lo_i = has_lo ? (long long)lo : 0, hi_i = has_hi ? (long long)hi : 0;
    if (integer) {
        int_range(o, has_lo, lo_i, has_hi, hi_i);
        return true;
    }
    /* numbers: an integer part in range, and a fraction only where it stays inside:
     * x.f >= 0 grows away from zero, so a non-negative part i takes one when i < hi, a
     * negative part -k when -k - 1 >= lo (k < -lo); "-0.f" when lo <= -1 and hi >= 0 */
    pl_gt_puts(o, "(");
    int alts = 0;
    const char *frac = "( \".\" [0-9]{1,16} )";
    if (!has_hi || hi >= 0) {
        long long a = has_lo && lo > 0 ? lo_i : 0;
        if (!has_hi || hi > (double)a) {
            /* [a, hi - 1] with a fraction */
            if (alts++) pl_gt_puts(o, " | ");
            nonneg_range(o, a, has_hi ? hi_i - 1 : -1);
            pl_gt_printf(o, " %s?", frac);
        }
        if (has_hi && hi >= (double)a) {
            if (alts++) pl_gt_puts(o, " | ");
            char b[24];
            snprintf(b, sizeof b, "%lld", hi_i);
            pl_gt_literal(o, b, strlen(b));
        }
    }
    if (!has_lo || lo < 0) {
        long long k_lo = has_hi && hi < 0 ? -hi_i : 1;
        long long k_hi = has_lo ? -lo_i : -1; /* -1: unbounded */
        if (k_hi < 0 || k_lo <= k_hi) {
            if (alts++) pl_gt_puts(o, " | ");
            /* -k with a fraction when k < -lo; -(-lo) without one */
            if (k_hi < 0) {
                pl_gt_puts(o, "\"-\" ");
                nonneg_range(o, k_lo, -1);
                pl_gt_printf(o, " %s?", frac);
            } else {
                pl_gt_puts(o, "\"-\" ( ");
                int a2 = 0;
                if (k_lo <= k_hi - 1) {
                    nonneg_range(o, k_lo, k_hi - 1);
                    pl_gt_printf(o, " %s?", frac);
                    a2++;
                }
                char b[24];
                snprintf(b, sizeof b, "%lld", k_hi);
                if (a2) pl_gt_puts(o, " | ");
                pl_gt_literal(o, b, strlen(b));
                pl_gt_puts(o, " )");
            }
        }
        if ((!has_lo || lo <= -1) && (!has_hi || hi >= 0)) {
            if (alts++) pl_gt_puts(o, " | ");
            pl_gt_printf(o, "\"-0\" %s", frac);
        }
    }
    pl_gt_puts(o, ")");
    return true;
}

/* Strings other than the given keys (as raw text: keys are emitted without escapes so a
 * key's text is its value). A trie over the keys' code points: at each node the string may
 * take a child's character (and go on in the child), take any other character (and then
 * anything), or end if no key ends there. */
typedef struct knode {
    uint32_t cp;
    bool end;
    struct knode *kids, *next;
} knode;

static void knode_free(knode *n) {
    while (n) {
        knode *nx = n->next;
        knode_free(n->kids);
        pl_free(n);
        n = nx;
    }
}

static bool not_keys_rule(sc *s, const knode *n, const char *name, const char *any) {
    /* children first (their rules are named after this one) */
    size_t k = 0;
    char child[160];
    pl_gtext alt = {0};
    pl_gt_printf(&alt, "%s ::= ", name);
    int alts = 0;
    pl_gt_puts(&alt, "( [^\"\\\\\\x00-\\x1F");
    for (const knode *c = n->kids; c; c = c->next) pl_gt_class_char(&alt, c->cp);
    pl_gt_printf(&alt, "] %s* )", any);
    alts++;
    for (const knode *c = n->kids; c; c = c->next) {
        snprintf(child, sizeof child, "%s-%zu", name, k++);
        pl_gt_puts(&alt, " | ");
        char one[8];
        size_t len = 0;
        uint32_t cp = c->cp;
        /* UTF-8 of cp as a literal */
        if (cp < 0x80) one[len++] = (char)cp;
        else if (cp < 0x800) one[len++] = (char)(0xC0 | (cp >> 6)), one[len++] = (char)(0x80 | (cp & 0x3F));
        else if (cp < 0x10000)
            one[len++] = (char)(0xE0 | (cp >> 12)), one[len++] = (char)(0x80 | ((cp >> 6) & 0x3F)),
            one[len++] = (char)(0x80 | (cp & 0x3F));
        else
            one[len++] = (char)(0xF0 | (cp >> 18)), one[len++] = (char)(0x80 | ((cp >> 12) & 0x3F)),
            one[len++] = (char)(0x80 | ((cp >> 6) & 0x3F)), one[len++] = (char)(0x80 | (cp & 0x3F));
        pl_gt_literal(&alt, one, len);
        pl_gt_printf(&alt, " %s", child);
        alts++;
    }
    if (!n->end) pl_gt_puts(&alt, " | \"\"");
    pl_gt_puts(&alt, "\n");
    if (alt.oom) {
        pl_gt_free(&alt);
        return fail_c(s, PL_ERR_OUT_OF_MEMORY, "out of memory");
    }
    pl_gt_put(&s->out, alt.p, alt.n);
    pl_gt_free(&alt);
    k = 0;
    for (const knode *c = n->kids; c; c = c->next) {
        snprintf(child, sizeof child, "%s-%zu", name, k++);
        if (!not_keys_rule(s, c, child, any)) return false;
    }
    return true;
}

static bool gen_object(sc *s, const json_t *node, pl_gtext *o) {
    const json_t *props = json_object_get(node, "properties");
    const json_t *req = json_object_get(node, "required");
    const json_t *add = json_object_get(node, "additionalProperties");
    if (props && !json_is_object(props)) {
        size_t old = push_seg(s, "properties");
        fail(s, "must be an object");
        pop_seg(s, old);
        return false;
    }
    if (req && !json_is_array(req)) {
        size_t old = push_seg(s, "required");
        fail(s, "must be an array of strings");
        pop_seg(s, old);
        return false;
    }
    /* the properties, in order: those of "properties", then required ones not among them */
    size_t n_props = props ? json_object_size(props) : 0, n_req = req ? json_array_size(req) : 0;
    size_t n = 0;
    const char **names = pl_calloc(n_props + n_req + 1, sizeof *names);
    const json_t **schemas = pl_calloc(n_props + n_req + 1, sizeof *schemas);
    bool *required = pl_calloc(n_props + n_req + 1, sizeof *required);
    char (*rules)[128] = pl_calloc(n_props + n_req + 1, sizeof *rules);
    bool ok = names && schemas && required && rules;
    if (!ok) fail_c(s, PL_ERR_OUT_OF_MEMORY, "out of memory");
    const char *k;
    const json_t *v;
    if (ok && props) json_object_foreach((json_t *)props, k, v) {
        names[n] = k;
        schemas[n] = v;
        n++;
    }
    for (size_t i = 0; ok && i < n_req; i++) {
        const json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) {
            size_t old = push_seg(s, "required");
            push_idx(s, i);
            ok = fail(s, "must be a string");
            pop_seg(s, old);
            break;
        }
        size_t j = 0;
        while (j < n && strcmp(names[j], json_string_value(r))) j++;
        if (j == n) {
            names[n] = json_string_value(r);
            schemas[n] = NULL; /* any value */
            n++;
        }
        required[j] = true;
    }
    /* each property's value rule */
    for (size_t i = 0; ok && i < n; i++) {
        if (!schemas[i]) {
            snprintf(rules[i], sizeof rules[i], "%s", prim(s, "value", &s->used_value));
            continue;
        }
        size_t old = push_seg(s, "properties");
        push_seg(s, names[i]);
        ok = gen(s, schemas[i], names[i], rules[i], sizeof rules[i]);
        pop_seg(s, old);
    }
    /* additional properties */
    char add_rule[128] = "";
    if (ok && add && !json_is_false(add)) {
        size_t old = push_seg(s, "additionalProperties");
        char val[128];
        if (json_is_true(add)) snprintf(val, sizeof val, "%s", prim(s, "value", &s->used_value));
        else ok = gen(s, add, "additional", val, sizeof val);
        pop_seg(s, old);
        if (ok) {
            /* keys other than the declared ones */
            knode root = {0};
            for (size_t i = 0; ok && i < n; i++) {
                knode *at = &root;
                const char *p = names[i];
                size_t len = strlen(p);
                for (size_t b = 0; b < len;) {
                    uint32_t cp;
                    int l = pl_gt_utf8(p + b, len - b, &cp);
                    if (!l) {
                        ok = fail(s, "a property name that is not UTF-8");
                        break;
                    }
                    b += (size_t)l;
                    knode *c = at->kids;
                    while (c && c->cp != cp) c = c->next;
                    if (!c) {
                        c = pl_calloc(1, sizeof *c);
                        if (!c) {
                            ok = fail_c(s, PL_ERR_OUT_OF_MEMORY, "out of memory");
                            break;
                        }
                        c->cp = cp;
                        c->next = at->kids;
                        at->kids = c;
                    }
                    at = c;
                }
                at->end = true;
            }
            char keyname[128], anyc[128];
            new_name(s, "other-key", keyname, sizeof keyname);
            snprintf(anyc, sizeof anyc, "%sanychar", s->prefix);
            if (ok) ok = not_keys_rule(s, &root, keyname, anyc);
            knode_free(root.kids);
            if (ok) {
                new_name(s, "additional-kv", add_rule, sizeof add_rule);
                pl_gt_printf(&s->out, "%s ::= \"\\\"\" %s \"\\\"\" %s \":\" %s %s\n", add_rule,
                             keyname, prim(s, "ws", &s->used_ws), prim(s, "ws", &s->used_ws), val);
                s->used_anychar = true;
            }
        }
    }
    if (ok) {
        /* F_i: from property i on, nothing written yet; T_i: something written (so each
         * property starts with a comma) */
        const char *ws = prim(s, "ws", &s->used_ws);
        char base[128];
        new_name(s, "obj", base, sizeof base);
        for (size_t i = n + 1; i-- > 0;) {
            for (int t = 0; t < 2; t++) {
                pl_gt_printf(&s->out, "%s-%c%zu ::= ", base, t ? 'T' : 'F', i);
                const char *comma = t ? "\",\" " : "";
                if (i == n) {
                    if (add_rule[0]) {
                        if (t) pl_gt_printf(&s->out, "( \",\" %s %s %s )*\n", ws, add_rule, ws);
                        else pl_gt_printf(&s->out, "( %s %s ( \",\" %s %s %s )* )?\n", add_rule, ws,
                                          ws, add_rule, ws);
                    } else {
                        pl_gt_puts(&s->out, "\"\"\n");
                    }
                    continue;
                }
                json_t *ks = json_string(names[i]);
                char *key = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
                json_decref(ks);
                if (!key) {
                    ok = fail_c(s, PL_ERR_OUT_OF_MEMORY, "out of memory");
                    break;
                }
                pl_gt_puts(&s->out, comma);
                if (t) pl_gt_printf(&s->out, "%s ", ws);
                pl_gt_literal(&s->out, key, strlen(key));
                free(key);
                pl_gt_printf(&s->out, " %s \":\" %s %s %s %s-T%zu", ws, ws, rules[i], ws, base, i + 1);
                if (!required[i]) pl_gt_printf(&s->out, " | %s-%c%zu", base, t ? 'T' : 'F', i + 1);
                pl_gt_puts(&s->out, "\n");
            }
            if (!ok) break;
        }
        pl_gt_printf(o, "\"{\" %s %s-F0 \"}\"", ws, base);
    }
    pl_free(names);
    pl_free((void *)schemas);
    pl_free(required);
    pl_free(rules);
    return ok;
}

static bool gen_array(sc *s, const json_t *node, pl_gtext *o) {
    const json_t *items = json_object_get(node, "items"), *prefix = json_object_get(node, "prefixItems");
    bool has_min, has_max;
    long long mn = 0, mx = 0;
    if (!count_kw(s, node, "minItems", &has_min, &mn) || !count_kw(s, node, "maxItems", &has_max, &mx))
        return false;
    if (has_max && mx < mn) return fail(s, "maxItems %lld is below minItems %lld", mx, mn);
    if (prefix && !json_is_array(prefix)) {
        size_t old = push_seg(s, "prefixItems");
        fail(s, "must be an array of schemas");
        pop_seg(s, old);
        return false;
    }
    if (items && json_is_array(items)) {
        size_t old = push_seg(s, "items");
        fail(s, "an array of schemas (draft 4-7 tuples) is not supported: use prefixItems");
        pop_seg(s, old);
        return false;
    }
    size_t k = prefix ? json_array_size(prefix) : 0;
    bool more = !(items && json_is_false(items));
    char item[128] = "";
    if (more) {
        if (!items || json_is_true(items)) snprintf(item, sizeof item, "%s", prim(s, "value", &s->used_value));
        else {
            size_t old = push_seg(s, "items");
            bool ok = gen(s, items, "item", item, sizeof item);
            pop_seg(s, old);
            if (!ok) return false;
        }
    }
    if (!more && (long long)k < mn)
        return fail(s, "minItems %lld needs more items than prefixItems gives with items false", mn);
    if (!more && (!has_max || mx > (long long)k)) has_max = true, mx = (long long)k;
    char (*pre)[128] = pl_calloc(k + 1, sizeof *pre);
    if (!pre) return fail_c(s, PL_ERR_OUT_OF_MEMORY, "out of memory");
    bool ok = true;
    for (size_t i = 0; ok && i < k; i++) {
        size_t old = push_seg(s, "prefixItems");
        push_idx(s, i);
        ok = gen(s, json_array_get(prefix, i), "prefix", pre[i], sizeof pre[i]);
        pop_seg(s, old);
    }
    const char *ws = prim(s, "ws", &s->used_ws);
    if (ok) {
        /* R_j: the items from position j on, after at least one: "," item R_{j+1} or end */
        char base[128];
        new_name(s, "arr", base, sizeof base);
        long long top = has_max ? mx : -1;
        size_t last = k > 0 ? k : 1; /* positions >= k are all `item`: one repetition */
        for (size_t j = last + 1; j-- > 1;) {
            pl_gt_printf(&s->out, "%s-R%zu ::= ", base, j);
            if (j < k) {
                if (has_max && (long long)j >= top) pl_gt_puts(&s->out, "\"\"");
                else {
                    pl_gt_printf(&s->out, "\",\" %s %s %s %s-R%zu", ws, pre[j], ws, base, j + 1);
                    if ((long long)j >= mn) pl_gt_puts(&s->out, " | \"\"");
                }
            } else if (!more || (has_max && (long long)j >= top)) {
                pl_gt_puts(&s->out, "\"\"");
            } else {
                long long need = mn > (long long)j ? mn - (long long)j : 0;
                pl_gt_printf(&s->out, "( \",\" %s %s %s )", ws, item, ws);
                reps(&s->out, need, has_max, has_max ? top - (long long)j : 0);
            }
            pl_gt_puts(&s->out, "\n");
        }
        if (has_max && top == 0) {
            pl_gt_printf(o, "\"[\" %s \"]\"", ws);
        } else {
            const char *first = k > 0 ? pre[0] : item;
            pl_gt_printf(o, "\"[\" %s ( %s %s %s-R1 )%s \"]\"", ws, first, ws, base,
                         mn == 0 ? "?" : "");
        }
    }
    pl_free(pre);
    return ok;
}

/* The rule for a $ref target (memoised by pointer, so recursion ends). */
static bool gen_ref(sc *s, const char *ref, char *name, size_t cap) {
    for (size_t i = 0; i < s->n_refs; i++)
        if (!strcmp(s->refs[i].ptr, ref)) {
            snprintf(name, cap, "%s", s->refs[i].rule);
            return true;
        }
    if (ref[0] != '#') return fail(s, "$ref \"%.64s\": only references within the schema "
                                      "(\"#...\") are supported", ref);
    /* resolve the JSON pointer */
    const json_t *t = s->doc;
    const char *p = ref + 1;
    while (*p && t) {
        if (*p != '/') return fail(s, "$ref \"%.64s\" is not a JSON pointer", ref);
        p++;
        char seg[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof seg) {
            if (p[0] == '~' && p[1] == '0') seg[n++] = '~', p += 2;
            else if (p[0] == '~' && p[1] == '1') seg[n++] = '/', p += 2;
            else seg[n++] = *p++;
        }
        seg[n] = '\0';
        if (json_is_object(t)) t = json_object_get(t, seg);
        else if (json_is_array(t)) {
            char *end;
            unsigned long i = strtoul(seg, &end, 10);
            t = *end || !*seg ? NULL : json_array_get(t, i);
        } else t = NULL;
    }
    if (!t) return fail(s, "$ref \"%.64s\" points at nothing", ref);
    void *arr = s->refs;
    if (pl_grow_array(&arr, &s->cap_refs, s->n_refs + 1, sizeof(ref_memo), "schema refs") != PL_OK)
        return fail_c(s, PL_ERR_OUT_OF_MEMORY, "out of memory");
    s->refs = arr;
    char rule[128];
    new_name(s, "ref", rule, sizeof rule);
    ref_memo *m = &s->refs[s->n_refs];
    m->ptr = pl_strdup(ref);
    m->rule = pl_strdup(rule);
    if (!m->ptr || !m->rule) {
        pl_free(m->ptr), pl_free(m->rule);
        return fail_c(s, PL_ERR_OUT_OF_MEMORY, "out of memory");
    }
    s->n_refs++;
    snprintf(name, cap, "%s", rule);
    /* the target's body, converted where it lives (its pointer in messages) */
    char saved[sizeof s->path];
    size_t saved_len = s->path_len;
    memcpy(saved, s->path, sizeof saved);
    snprintf(s->path, sizeof s->path, "%s", ref + 1);
    s->path_len = strlen(s->path);
    char body[128];
    int depth = s->depth;
    s->depth = 0; /* a reference starts a new nesting count: recursion ends through the memo */
    bool ok = gen(s, t, "def", body, sizeof body);
    s->depth = depth;
    memcpy(s->path, saved, sizeof saved);
    s->path_len = saved_len;
    if (ok) pl_gt_printf(&s->out, "%s ::= %s\n", rule, body);
    return ok;
}

/* One type's expression. */
static bool gen_type(sc *s, const json_t *node, int t, pl_gtext *o) {
    switch (t) {
    case T_NULL: pl_gt_puts(o, "\"null\""); return true;
    case T_BOOL: pl_gt_puts(o, "( \"true\" | \"false\" )"); return true;
    case T_INT: return gen_number(s, node, true, o);
    case T_NUM: return gen_number(s, node, false, o);
    case T_STR: return gen_string(s, node, o);
    case T_ARR: return gen_array(s, node, o);
    case T_OBJ: return gen_object(s, node, o);
    }
    return false;
}

/* Converts node into a rule; name gets the rule's name. */
static bool gen(sc *s, const json_t *node, const char *hint, char *name, size_t cap) {
    if (s->err != PL_OK) return false;
    if (++s->depth > MAX_SCHEMA_DEPTH) {
        s->depth--;
        return fail_c(s, PL_ERR_TOO_LONG, "schemas nested deeper than %d", MAX_SCHEMA_DEPTH);
    }
    bool ok = true;
    pl_gtext e = {0};
    if (json_is_true(node)) {
        pl_gt_puts(&e, prim(s, "value", &s->used_value));
    } else if (json_is_false(node)) {
        ok = fail(s, "the schema false matches nothing");
    } else if (!json_is_object(node)) {
        ok = fail(s, "a schema must be an object or a boolean");
    } else {
        const char *k;
        const json_t *v;
        bool only_annotations = true;
        json_object_foreach((json_t *)node, k, v) {
            if (!is_supported(k)) {
                size_t old = push_seg(s, k);
                ok = fail(s, "unsupported keyword \"%.64s\" (refused rather than ignored)", k);
                pop_seg(s, old);
                break;
            }
            if (!is_annotation(k)) only_annotations = false;
        }
        const json_t *ref = json_object_get(node, "$ref");
        const json_t *any = json_object_get(node, "anyOf"), *one = json_object_get(node, "oneOf");
        const json_t *en = json_object_get(node, "enum"), *cn = json_object_get(node, "const");
        const json_t *type = json_object_get(node, "type");
        int types = 0;
        if (ok && type) {
            size_t old = push_seg(s, "type");
            if (json_is_string(type)) {
                types = type_bit(json_string_value(type));
                if (!types) ok = fail(s, "unknown type \"%.32s\"", json_string_value(type));
            } else if (json_is_array(type) && json_array_size(type) > 0) {
                for (size_t i = 0; ok && i < json_array_size(type); i++) {
                    const json_t *x = json_array_get(type, i);
                    int b = json_is_string(x) ? type_bit(json_string_value(x)) : 0;
                    if (!b) {
                        push_idx(s, i);
                        ok = fail(s, "not a type name");
                    }
                    types |= b;
                }
            } else {
                ok = fail(s, "must be a type name or a list of them");
            }
            pop_seg(s, old);
        }
        /* which keywords stand beside which */
        size_t n_kw = 0;
        json_object_foreach((json_t *)node, k, v) if (!is_annotation(k)) n_kw++;
        if (ok && ref) {
            if (n_kw > 1) ok = fail(s, "$ref beside other keywords is not supported");
            else if (!json_is_string(ref)) ok = fail(s, "$ref must be a string");
            else {
                char r[128];
                ok = gen_ref(s, json_string_value(ref), r, sizeof r);
                if (ok) pl_gt_puts(&e, r);
            }
        } else if (ok && (any || one)) {
            const json_t *list = any ? any : one;
            const char *kw = any ? "anyOf" : "oneOf";
            if (any && one) ok = fail(s, "anyOf and oneOf together are not supported");
            else if (n_kw > 1) ok = fail(s, "%s beside other keywords is not supported", kw);
            else if (!json_is_array(list) || json_array_size(list) == 0) {
                size_t old = push_seg(s, kw);
                ok = fail(s, "must be a non-empty array of schemas");
                pop_seg(s, old);
            } else {
                pl_gt_puts(&e, "(");
                for (size_t i = 0; ok && i < json_array_size(list); i++) {
                    size_t old = push_seg(s, kw);
                    push_idx(s, i);
                    char r[128];
                    ok = gen(s, json_array_get(list, i), kw, r, sizeof r);
                    pop_seg(s, old);
                    if (ok) pl_gt_printf(&e, "%s%s", i ? " | " : " ", r);
                }
                pl_gt_puts(&e, " )");
            }
        } else if (ok && (en || cn)) {
            if (en && cn) ok = fail(s, "enum and const together are not supported");
            else if (n_kw > 1 + (type != NULL))
                ok = fail(s, "%s beside keywords other than type is not supported", en ? "enum" : "const");
            else if (en && (!json_is_array(en) || json_array_size(en) == 0)) {
                size_t old = push_seg(s, "enum");
                ok = fail(s, "must be a non-empty array");
                pop_seg(s, old);
            } else if (en && json_array_size(en) > MAX_ENUM) {
                size_t old = push_seg(s, "enum");
                ok = fail_c(s, PL_ERR_TOO_LONG, "%zu members: at most %d are supported",
                            json_array_size(en), MAX_ENUM);
                pop_seg(s, old);
            } else {
                size_t m = en ? json_array_size(en) : 1, kept = 0;
                pl_gt_puts(&e, "(");
                for (size_t i = 0; ok && i < m; i++) {
                    const json_t *x = en ? json_array_get(en, i) : cn;
                    if (type && !value_fits(x, types)) continue;
                    pl_gt_puts(&e, kept++ ? " | " : " ");
                    ok = literal(s, x, &e);
                }
                pl_gt_puts(&e, " )");
                if (ok && kept == 0)
                    ok = fail(s, "no %s value has the type given", en ? "enum" : "const");
            }
        } else if (ok) {
            if (!type) {
                /* the type the keywords imply; none: any value */
                bool obj = json_object_get(node, "properties") || json_object_get(node, "required") ||
                           json_object_get(node, "additionalProperties");
                bool arr = json_object_get(node, "items") || json_object_get(node, "prefixItems") ||
                           json_object_get(node, "minItems") || json_object_get(node, "maxItems");
                bool str = json_object_get(node, "minLength") || json_object_get(node, "maxLength") ||
                           json_object_get(node, "pattern") || json_object_get(node, "format");
                bool num = json_object_get(node, "minimum") || json_object_get(node, "maximum") ||
                           json_object_get(node, "exclusiveMinimum") ||
                           json_object_get(node, "exclusiveMaximum");
                types = (obj ? T_OBJ : 0) | (arr ? T_ARR : 0) | (str ? T_STR : 0) | (num ? T_NUM : 0);
                (void)only_annotations;
                if (!types) pl_gt_puts(&e, prim(s, "value", &s->used_value));
            }
            if (types) {
                /* integer within number: number covers it */
                if ((types & T_NUM) && (types & T_INT)) types &= ~T_INT;
                int n_t = 0;
                pl_gt_puts(&e, "(");
                for (int b = 1; ok && b <= T_OBJ; b <<= 1) {
                    if (!(types & b)) continue;
                    pl_gt_puts(&e, n_t++ ? " | " : " ");
                    ok = gen_type(s, node, b, &e);
                }
                pl_gt_puts(&e, " )");
            }
        }
    }
    if (ok && e.oom) ok = fail_c(s, PL_ERR_OUT_OF_MEMORY, "out of memory");
    if (ok) {
        new_name(s, hint, name, cap);
        pl_gt_printf(&s->out, "%s ::= %s\n", name, e.p ? e.p : "\"\"");
    }
    pl_gt_free(&e);
    s->depth--;
    return ok;
}

pl_status pl_gram_schema_to_gbnf(const char *schema, size_t len, const char *prefix, char **out) {
    json_error_t jerr;
    json_t *doc = json_loadb(schema, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!doc)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "json_schema: not JSON (%s at line %d column %d)",
                       jerr.text, jerr.line, jerr.column);
    sc s = {.doc = doc, .prefix = prefix ? prefix : ""};
    snprintf(s.n_ws, sizeof s.n_ws, "%.60sws", s.prefix);
    snprintf(s.n_string, sizeof s.n_string, "%.60sstring", s.prefix);
    snprintf(s.n_char, sizeof s.n_char, "%.60schar", s.prefix);
    snprintf(s.n_number, sizeof s.n_number, "%.60snumber", s.prefix);
    snprintf(s.n_integer, sizeof s.n_integer, "%.60sinteger", s.prefix);
    snprintf(s.n_value, sizeof s.n_value, "%.60svalue", s.prefix);
    if (strlen(s.prefix) > 60) {
        json_decref(doc);
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "json_schema: rule prefix longer than 60 bytes");
    }
    for (const char *p = s.prefix; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-')) {
            json_decref(doc);
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "json_schema: rule prefix \"%.32s\" may hold "
                           "only letters, digits and '-'", s.prefix);
        }
    char top[128];
    bool ok = gen(&s, doc, "schema", top, sizeof top);
    if (ok) {
        pl_gt_printf(&s.out, "%sroot ::= %s\n", s.prefix, top);
        emit_prims(&s);
    }
    for (size_t i = 0; i < s.n_refs; i++) {
        pl_free(s.refs[i].ptr);
        pl_free(s.refs[i].rule);
    }
    pl_free(s.refs);
    json_decref(doc);
    if (!ok) {
        pl_gt_free(&s.out);
        return s.err;
    }
    if (s.out.n > PL_GRAM_MAX_TEXT) {
        pl_gt_free(&s.out);
        return pl_fail(PL_ERR_TOO_LONG, "json_schema: the grammar would exceed %u bytes",
                       PL_GRAM_MAX_TEXT);
    }
    return pl_gt_take(&s.out, out);
}
