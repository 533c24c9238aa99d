/*
 * util/alloc.h - the library's heap allocation, with a fault-injection hook for tests.
 *
 * All library code allocates through these, so a test can make the Nth allocation fail and
 * check that every caller returns PL_ERR_OUT_OF_MEMORY and leaves its state usable.
 * pl_calloc and pl_reallocarray check n * size for overflow.
 */
#ifndef PL_UTIL_ALLOC_H
#define PL_UTIL_ALLOC_H

#include <stdbool.h>
#include <stddef.h>

#include "pagellm.h"

#ifdef __cplusplus
extern "C" {
#endif

void *pl_malloc(size_t n_bytes);
void *pl_calloc(size_t n, size_t size);
void *pl_reallocarray(void *p, size_t n, size_t size);
void pl_free(void *p);
char *pl_strdup(const char *s);

/* n_bytes zeroed, aligned to 64 bytes. With `huge` and n_bytes of two huge pages (4 MiB) or
 * more, aligned to 2 MiB instead and advised as transparent huge pages where the kernel allows
 * them (THP "madvise" mode; the memory is still untouched, so the advice takes effect at first
 * touch, and its failure only costs speed): streaming a large buffer (weights, the KV pool)
 * with 4 KB pages costs a TLB miss per 4 KB. Below 4 MiB the 2 MiB of alignment padding would
 * cost more than it saves. Such huge blocks are mapped from the kernel, so pages the caller
 * never touches are never faulted in (whatever MALLOC_PERTURB_ says). Freed with
 * pl_free_aligned. */
void *pl_calloc_aligned(size_t n_bytes, bool huge);
void pl_free_aligned(void *p);

/* Grows *arr (elements of elem_size, *cap of them) geometrically to hold at least need; on
 * failure *arr and *cap are unchanged and PL_ERR_OUT_OF_MEMORY names `what`. */
pl_status pl_grow_array(void **arr, size_t *cap, size_t need, size_t elem_size, const char *what);

/* Test hook: after `n` more successful allocations, every allocation fails until reset with
 * a negative n (the default: never fail). Process-wide; for single-threaded tests. */
void pl_alloc_fail_after(long n);
/* Allocations made through this module since process start (for the fault sweep). */
unsigned long pl_alloc_count(void);

#ifdef __cplusplus
}
#endif
#endif
