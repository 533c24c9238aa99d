/*
 * tests/unit/test_alloc.c - util/alloc's aligned blocks: alignment, zeroing, the huge-page
 * variant, overflow and injected failures.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

/* Resident bytes of this process, from /proc/self/statm. */
static size_t resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    cr_assert_not_null(f);
    unsigned long size = 0, resident = 0;
    cr_assert_eq(fscanf(f, "%lu %lu", &size, &resident), 2);
    fclose(f);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* A huge block costs no memory until it is touched, whatever the C library is told to do with
 * fresh allocations: meson runs this test with MALLOC_PERTURB_ set (meson.build), under which
 * glibc's calloc clears the whole block. A KV pool sized from the machine's memory is one such
 * block, and a test uses a few of its pages. (Under AddressSanitizer huge blocks stay on its
 * calloc, which does not clear fresh mappings either.) */
Test(alloc, huge_blocks_are_not_touched_until_used) {
    size_t n = (size_t)512 << 20;
    size_t before = resident_bytes();
    unsigned char *p = pl_calloc_aligned(n, true);
    cr_assert_not_null(p);
    size_t grew = resident_bytes() - before;
    cr_assert_lt(grew, (size_t)16 << 20, "allocating %zu MiB made %zu MiB resident", n >> 20,
                 grew >> 20);
    p[n - 1] = 1; /* the last byte is inside the block */
    cr_assert(p[0] == 0 && p[n / 2] == 0);
    pl_free_aligned(p);
}

Test(alloc, sizes_that_overflow_and_injected_failures_return_null) {
    cr_assert_null(pl_calloc_aligned(SIZE_MAX, false));
    cr_assert_null(pl_calloc_aligned(SIZE_MAX - 100, true));
    pl_alloc_fail_after(0);
    void *p = pl_calloc_aligned(64, false);
    pl_alloc_fail_after(-1);
    cr_assert_null(p);
    pl_alloc_fail_after(0);
    p = pl_calloc_aligned((size_t)8 << 20, true); /* a mapped huge block counts too */
    pl_alloc_fail_after(-1);
    cr_assert_null(p);
}
