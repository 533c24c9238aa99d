/*
 * tests/unit/test_alloc.c - util/alloc's aligned blocks: alignment, zeroing, the huge-page
 * variant, overflow and injected failures.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "util/alloc.h"

static bool all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

Test(alloc, aligned_blocks_are_zeroed_and_aligned) {
    for (size_t n = 1; n < 5000; n = n * 3 + 1) {
        unsigned char *p = pl_calloc_aligned(n, false);
        cr_assert_not_null(p);
        cr_assert_eq((uintptr_t)p % 64, 0, "%zu bytes at %p", n, (void *)p);
        cr_assert(all_zero(p, n));
        memset(p, 0xab, n); /* the whole block is writable */
        pl_free_aligned(p);
    }
    pl_free_aligned(NULL);
}

Test(alloc, huge_blocks_start_on_a_huge_page) {
    size_t n = ((size_t)5 << 20) + 123;
    unsigned char *p = pl_calloc_aligned(n, true);
    cr_assert_not_null(p);
    cr_assert_eq((uintptr_t)p % ((size_t)2 << 20), 0);
    cr_assert(p[0] == 0 && p[n / 2] == 0 && p[n - 1] == 0);
    memset(p, 1, n);
    pl_free_aligned(p);
    /* under two huge pages the padding would cost more: 64-byte aligned, nothing advised */
    p = pl_calloc_aligned(4096, true);
    cr_assert_not_null(p);
    cr_assert_eq((uintptr_t)p % 64, 0);
    cr_assert(all_zero(p, 4096));
    pl_free_aligned(p);
}

Test(alloc, sizes_that_overflow_and_injected_failures_return_null) {
    cr_assert_null(pl_calloc_aligned(SIZE_MAX, false));
    cr_assert_null(pl_calloc_aligned(SIZE_MAX - 100, true));
    pl_alloc_fail_after(0);
    void *p = pl_calloc_aligned(64, false);
    pl_alloc_fail_after(-1);
    cr_assert_null(p);
}
