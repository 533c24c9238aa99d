/*
 * util/alloc.c - malloc wrappers with overflow checks and a fail-after-N test hook.
 */
#include "util/alloc.h"

#include "util/status.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static atomic_long g_fail_after = -1;
static atomic_ulong g_count;

static int should_fail(void) {
    atomic_fetch_add(&g_count, 1);
    long left = atomic_load(&g_fail_after);
    if (left < 0) return 0;
    if (left == 0) return 1;
    atomic_fetch_sub(&g_fail_after, 1);
    return 0;
}

void pl_alloc_fail_after(long n) { atomic_store(&g_fail_after, n); }
unsigned long pl_alloc_count(void) { return atomic_load(&g_count); }

void *pl_malloc(size_t n_bytes) {
    if (should_fail()) return NULL;
    return malloc(n_bytes ? n_bytes : 1);
}

void *pl_calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    if (should_fail()) return NULL;
    return calloc(n ? n : 1, size ? size : 1);
}

void *pl_reallocarray(void *p, size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    if (should_fail()) return NULL;
    size_t bytes = n * size;
    return realloc(p, bytes ? bytes : 1);
}

void pl_free(void *p) { free(p); }

#define HUGE_PAGE ((size_t)2 << 20)

/* The raw pl_calloc pointer is kept in the word before the aligned block. */
void *pl_calloc_aligned(size_t n_bytes, bool huge) {
    huge = huge && n_bytes >= 2 * HUGE_PAGE;
    size_t align = huge ? HUGE_PAGE : 64;
    if (n_bytes > SIZE_MAX - align - sizeof(void *)) return NULL;
    unsigned char *raw = pl_calloc(1, n_bytes + align + sizeof(void *));
    if (!raw) return NULL;
    uintptr_t a = ((uintptr_t)raw + sizeof(void *) + align - 1) & ~(uintptr_t)(align - 1);
    ((void **)a)[-1] = raw;
#ifdef MADV_HUGEPAGE
    if (huge) (void)madvise((void *)a, n_bytes & ~(HUGE_PAGE - 1), MADV_HUGEPAGE);
#endif
    return (void *)a;
}

void pl_free_aligned(void *p) {
    if (p) pl_free(((void **)p)[-1]);
}

char *pl_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = pl_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

pl_status pl_grow_array(void **arr, size_t *cap, size_t need, size_t elem_size, const char *what) {
    if (need <= *cap) return PL_OK;
    size_t n = *cap ? *cap : 16;
    while (n < need) n = n > SIZE_MAX / 2 ? need : 2 * n;
    void *p = pl_reallocarray(*arr, n, elem_size);
    if (!p) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: room for %zu", what, n);
    *arr = p;
    *cap = n;
    return PL_OK;
}
