/*
 * util/utf8.h - UTF-8 as RFC 3629 defines it: no overlong forms, no surrogates, nothing past
 * U+10FFFF. The one copy the tokenizer, the template interpreter and the engine share.
 */
#ifndef PL_UTIL_UTF8_H
#define PL_UTIL_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of the valid character at b[0..n) (n >= 1): 1..4; 0 when the end cuts a sequence
 * whose bytes so far are valid; -1 when it is invalid. Stops at the first bad byte, so a NUL
 * (never a continuation byte) ends a sequence: b may be a C string with n = SIZE_MAX. */
int pl_utf8_step(const unsigned char *b, size_t n);

/* The maximal subpart at b[0..n) (n >= 1), Unicode's unit for replacing ill-formed bytes by
 * one U+FFFD each: the bytes that could start a valid sequence (the whole sequence when it is
 * valid); 0 for a byte that cannot start one. ASCII is 1. */
int pl_utf8_subpart(const unsigned char *b, size_t n);

/* Offset of the first byte of p[0..n) that does not start a valid sequence (one cut by the
 * end included), or n when all of it is valid. NUL bytes are valid. */
size_t pl_utf8_validate(const char *p, size_t n);

/* Decodes the character at s[0..n) of text already known to be valid; nothing is checked.
 * Returns its bytes (0 when n is 0). Lenient by design, for callers that rely on it: a byte
 * that is not a lead byte decodes as the start of a 2-byte sequence, and a sequence longer
 * than what is left yields its lead byte alone (a 4-byte lead with 3 bytes left: 3 bytes). */
int pl_utf8_decode(const char *s, size_t n, uint32_t *cp);

/* Writes cp (at most U+10FFFF) to out; returns the bytes written (1..4). */
int pl_utf8_encode(uint32_t cp, char *out);

/* The length a lead byte announces (1..4; 2 for a continuation byte), without checks. */
static inline int pl_utf8_lead_len(unsigned char c) {
    return c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
}

/* A continuation byte (10xxxxxx): not the start of a character. */
static inline bool pl_utf8_is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

#ifdef __cplusplus
}
#endif
#endif
