/*
 * util/buf.c - see buf.h.
 */
#include "util/buf.h"

#include <stdint.h>
#include <string.h>

#include "util/alloc.h"
#include "util/status.h"

pl_status pl_buf_reserve(pl_buf *b, size_t more, const char *what) {
    if (b->cap - b->n >= more) return PL_OK;
    if (more > SIZE_MAX / 2 - b->n) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s", what);
    return pl_grow_array((void **)&b->p, &b->cap, b->n + more, 1, what);
}

pl_status pl_buf_put(pl_buf *b, const void *s, size_t n, const char *what) {
    pl_status st = pl_buf_reserve(b, n, what);
    if (st != PL_OK) return st;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    return PL_OK;
}

void pl_buf_free(pl_buf *b) {
    pl_free(b->p);
    *b = (pl_buf){0};
}
