/*
 * template/jstr.c - strings as JavaScript sees them: the oracle stores strings as UTF-16, so
 * lengths and integer indices count code units, `<` compares code units, trim() strips
 * JavaScript's white space (Unicode spaces included), and Number("...")/parseInt/parseFloat
 * follow their own grammars. Strings here are UTF-8 (the template and the variables are
 * checked to be valid), so these helpers translate.
 */
#include "template/tmpl_internal.h"
#include "util/utf8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t pl_tm_utf16_len(pl_tm_str s) {
    size_t n = 0;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        if (!pl_utf8_is_cont(c)) n += c >= 0xF0 ? 2 : 1;
    }
    return n;
}

/* JavaScript's WhiteSpace and LineTerminator: TAB LF VT FF CR SP, U+00A0, U+1680,
 * U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF. */
static bool space3(const unsigned char *p) {
    if (p[0] == 0xE1) return p[1] == 0x9A && p[2] == 0x80;
    if (p[0] == 0xE2) {
        if (p[1] == 0x80) return p[2] <= 0x8A || p[2] == 0xA8 || p[2] == 0xA9 || p[2] == 0xAF;
        return p[1] == 0x81 && p[2] == 0x9F;
    }
    if (p[0] == 0xE3) return p[1] == 0x80 && p[2] == 0x80;
    if (p[0] == 0xEF) return p[1] == 0xBB && p[2] == 0xBF;
    return false;
}

int pl_tm_js_space(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    if (n == 0) return 0;
    if (p[0] == ' ' || (p[0] >= 0x09 && p[0] <= 0x0D)) return 1;
    if (n >= 2 && p[0] == 0xC2 && p[1] == 0xA0) return 2;
    if (n >= 3 && space3(p) && (p[2] & 0xC0) == 0x80) return 3;
    return 0;
}

int pl_tm_js_space_back(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    if (n == 0) return 0;
    unsigned char c = p[n - 1];
    if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return 1;
    if (n >= 2 && p[n - 2] == 0xC2 && c == 0xA0) return 2;
    if (n >= 3 && space3(p + n - 3)) return 3;
    return 0;
}

pl_tm_str pl_tm_trim(pl_tm_str s, bool left, bool right) {
    if (left) {
        int k;
        while ((k = pl_tm_js_space(s.p, s.n)) > 0) {
            s.p += k;
            s.n -= (size_t)k;
        }
    }
    if (right) {
        int k;
        while ((k = pl_tm_js_space_back(s.p, s.n)) > 0) s.n -= (size_t)k;
    }
    return s;
}

/* The first UTF-16 code unit of a code point: the code point itself, or its high surrogate. */
static uint32_t unit16(uint32_t cp) { return cp < 0x10000 ? cp : 0xD800 + ((cp - 0x10000) >> 10); }

int pl_tm_js_cmp(pl_tm_str a, pl_tm_str b) {
    size_t i = 0, j = 0;
    while (i < a.n && j < b.n) {
        uint32_t ca, cb;
        i += (size_t)pl_utf8_decode(a.p + i, a.n - i, &ca);
        j += (size_t)pl_utf8_decode(b.p + j, b.n - j, &cb);
        if (ca == cb) continue;
        uint32_t ua = unit16(ca), ub = unit16(cb);
        if (ua != ub) return ua < ub ? -1 : 1;
        /* same high surrogate: the low surrogates order as the code points do */
        return ca < cb ? -1 : 1;
    }
    if (i < a.n) return 1;
    if (j < b.n) return -1;
    return 0;
}

/* Code points that toUpperCase/toLowerCase leave alone for certain: conservative ranges
 * (scripts without case, symbols, CJK, emoji). Anything else outside ASCII may have a case
 * mapping, some of them to several characters, which we do not carry tables for. */
static bool caseless(uint32_t c) {
    static const uint32_t ok[][2] = {
        {0x80, 0xB4},       {0xB6, 0xBF},       {0xD7, 0xD7},       {0xF7, 0xF7},
        {0x2B0, 0x2FF},     {0x300, 0x344},     {0x346, 0x36F},     {0x590, 0x109F},
        {0x1100, 0x139F},   {0x1400, 0x1C7F},   {0x2000, 0x20FF},   {0x2190, 0x245F},
        {0x2500, 0x2BFF},   {0x2E00, 0xA63F},   {0xA6A0, 0xA71F},   {0xA800, 0xAB2F},
        {0xABC0, 0xFAFF},   {0xFB1D, 0xFF20},   {0xFF3B, 0xFF40},   {0xFF5B, 0xFFFF},
        {0x10000, 0x103FF}, {0x10500, 0x1056F}, {0x105C0, 0x10C7F}, {0x10D00, 0x10D3F},
        {0x10D90, 0x1189F}, {0x11900, 0x16E3F}, {0x16EA0, 0x1E8FF}, {0x1E960, 0x10FFFF},
    };
    size_t lo = 0, hi = sizeof ok / sizeof ok[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < ok[mid][0])
            hi = mid;
        else if (c > ok[mid][1])
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

int pl_tm_case(pl_tm_rs *rs, pl_tm_str s, bool upper, pl_tm_str *out) {
    PL_TRY(pl_tm_charge_n(rs, s.n));
    bool changes = false;
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        int k = pl_utf8_decode(s.p + i, s.n - i, &cp);
        if (cp >= 0x80 && !caseless(cp))
            return pl_tm_fail(rs, PL_ERR_UNSUPPORTED,
                              "%s-casing the non-ASCII character U+%04X (no Unicode case tables)",
                              upper ? "upper" : "lower", (unsigned)cp);
        if (upper ? (cp >= 'a' && cp <= 'z') : (cp >= 'A' && cp <= 'Z')) changes = true;
        i += (size_t)k;
    }
    if (!changes) {
        *out = s;
        return 0;
    }
    char *p;
    PL_TRY(pl_tm_str_new(rs, s.n, &p));
    for (size_t i = 0; i < s.n; i++) {
        char c = s.p[i];
        if (upper && c >= 'a' && c <= 'z')
            c = (char)(c - 32);
        else if (!upper && c >= 'A' && c <= 'Z')
            c = (char)(c + 32);
        p[i] = c;
    }
    *out = (pl_tm_str){p, s.n};
    return 0;
}

/* ---- numbers from strings -------------------------------------------------------------- */

static bool digit(char c) { return c >= '0' && c <= '9'; }

/* Length of the longest prefix of s that is a StrDecimalLiteral (sign, "Infinity", digits with
 * an optional fraction and exponent), 0 if none. */
static size_t decimal_prefix(const char *s, size_t n) {
    size_t i = 0;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    if (n - i >= 8 && memcmp(s + i, "Infinity", 8) == 0) return i + 8;
    size_t int_digits = 0, frac_digits = 0;
    while (i < n && digit(s[i])) i++, int_digits++;
    size_t end = int_digits ? i : 0;
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && digit(s[i])) i++, frac_digits++;
        if (int_digits || frac_digits) end = i;
    }
    if (!int_digits && !frac_digits) return 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < n && (s[j] == '+' || s[j] == '-')) j++;
        size_t exp_digits = 0;
        while (j < n && digit(s[j])) j++, exp_digits++;
        if (exp_digits) end = j;
    }
    return end;
}

static double decimal_value(const char *s, size_t n) {
    size_t i = 0;
    bool neg = false;
    if (n && (s[0] == '+' || s[0] == '-')) neg = s[0] == '-', i = 1;
    if (n - i == 8 && memcmp(s + i, "Infinity", 8) == 0) return neg ? -INFINITY : INFINITY;
    char buf[512];
    if (n >= sizeof buf) {
        /* a long literal: strtod needs a terminated copy */
        char *big = malloc(n + 1);
        if (!big) return NAN;
        memcpy(big, s, n);
        big[n] = 0;
        double v = strtod(big, NULL);
        free(big);
        return v;
    }
    memcpy(buf, s, n);
    buf[n] = 0;
    return strtod(buf, NULL);
}

double pl_tm_js_to_number(pl_tm_str s) {
    s = pl_tm_trim(s, true, true);
    if (s.n == 0) return 0;
    if (s.n > 2 && s.p[0] == '0') {
        int base = 0;
        char x = s.p[1];
        if (x == 'x' || x == 'X')
            base = 16;
        else if (x == 'o' || x == 'O')
            base = 8;
        else if (x == 'b' || x == 'B')
            base = 2;
        if (base) {
            double v = 0;
            for (size_t i = 2; i < s.n; i++) {
                char c = s.p[i];
                int d = digit(c)                 ? c - '0'
                        : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                        : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                                 : 99;
                if (d >= base) return NAN;
                v = v * base + d;
            }
            return v;
        }
    }
    size_t k = decimal_prefix(s.p, s.n);
    if (k != s.n) return NAN;
    return decimal_value(s.p, s.n);
}

double pl_tm_js_parse_float(pl_tm_str s) {
    s = pl_tm_trim(s, true, false);
    size_t k = decimal_prefix(s.p, s.n);
    if (!k) return NAN;
    return decimal_value(s.p, k);
}

double pl_tm_js_parse_int(pl_tm_str s) {
    s = pl_tm_trim(s, true, false);
    size_t i = 0;
    bool neg = false;
    if (i < s.n && (s.p[i] == '+' || s.p[i] == '-')) neg = s.p[i] == '-', i++;
    size_t start = i;
    while (i < s.n && digit(s.p[i])) i++;
    if (i == start) return NAN;
    double v = decimal_value(s.p + start, i - start);
    return neg ? -v : v;
}
