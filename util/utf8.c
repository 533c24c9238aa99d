/*
 * util/utf8.c - see utf8.h.
 *
 * The second byte of a sequence carries all of RFC 3629's range rules (overlongs, surrogates,
 * the U+10FFFF ceiling); later bytes only need to be continuation bytes. SentencePiece's
 * DecodeUTF8 accepts the same set, which is what lets tokenizer/spm_detok.c cut byte runs as
 * it does.
 */
#include "util/utf8.h"

/* How many bytes the lead byte c starts (0: not a lead byte) and the range of the second. */
static int lead(unsigned char c, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80, *hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) {
        if (c == 0xE0) *lo = 0xA0; /* overlong */
        if (c == 0xED) *hi = 0x9F; /* surrogates */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (c == 0xF0) *lo = 0x90; /* overlong */
        if (c == 0xF4) *hi = 0x8F; /* above U+10FFFF */
        return 4;
    }
    return 0;
}

int pl_utf8_step(const unsigned char *b, size_t n) {
    unsigned char c = b[0];
    if (c < 0x80) return 1;
    unsigned char lo, hi;
    int need = lead(c, &lo, &hi);
    if (!need) return -1;
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= n) return 0;
        unsigned char x = b[i];
        if (i == 1 ? (x < lo || x > hi) : (x & 0xC0) != 0x80) return -1;
    }
    return need;
}

int pl_utf8_subpart(const unsigned char *b, size_t n) {
    unsigned char c = b[0];
    if (c < 0x80) return 1;
    unsigned char lo, hi;
    int need = lead(c, &lo, &hi);
    if (!need) return 0;
    int k = 1;
    for (; k < need && (size_t)k < n; k++) {
        unsigned char x = b[k];
        if (k == 1 ? (x < lo || x > hi) : (x & 0xC0) != 0x80) break;
    }
    return k;
}

size_t pl_utf8_validate(const char *p, size_t n) {
    const unsigned char *u = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int k = pl_utf8_step(u + i, n - i);
        if (k <= 0) return i;
        i += (size_t)k;
    }
    return n;
}

int pl_utf8_decode(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *p = (const unsigned char *)s;
    if (n == 0) {
        *cp = 0;
        return 0;
    }
    unsigned c = p[0];
    if (c < 0x80 || n < 2) {
        *cp = c;
        return 1;
    }
    if (c < 0xE0) {
        *cp = ((c & 0x1Fu) << 6) | (p[1] & 0x3Fu);
        return 2;
    }
    if (c < 0xF0 || n < 4) {
        if (n < 3) {
            *cp = c;
            return 1;
        }
        *cp = ((c & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
        return 3;
    }
    *cp = ((c & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
    return 4;
}

int pl_utf8_encode(uint32_t cp, char *o) {
    unsigned char *out = (unsigned char *)o;
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}
