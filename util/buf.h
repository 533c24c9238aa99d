/*
 * util/buf.h - a growable byte buffer: the one the tokenizer, the template interpreter and the
 * engine share for text they build piece by piece.
 */
#ifndef PL_UTIL_BUF_H
#define PL_UTIL_BUF_H

#include <stddef.h>

#include "pagellm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* p[0..n) is the content, cap the bytes allocated; {0} is an empty buffer. The buffer does
 * not keep a NUL after the content: a caller that wants one reserves a byte for it. */
typedef struct pl_buf {
    char *p;
    size_t n, cap;
} pl_buf;

/* Room for `more` bytes past n, growing geometrically (amortised O(1) appends). On failure
 * the buffer is unchanged and PL_ERR_OUT_OF_MEMORY names `what`. */
pl_status pl_buf_reserve(pl_buf *b, size_t more, const char *what);
/* Appends s[0..n). */
pl_status pl_buf_put(pl_buf *b, const void *s, size_t n, const char *what);
/* Frees the memory; b is empty again. */
void pl_buf_free(pl_buf *b);

#ifdef __cplusplus
}
#endif
#endif
