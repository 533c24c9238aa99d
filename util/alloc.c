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

/* Kept in the 16 bytes before every aligned block: where its memory came from. */
typedef struct block_head {
    void *raw;      /* the pl_calloc pointer, or the start of the mapping */
    size_t mapped;  /* length of the mapping; 0: raw came from pl_calloc */
} block_head;

/* Huge blocks are mapped directly rather than taken from calloc: the kernel's anonymous pages
 * are zero and cost nothing until touched, whereas glibc's calloc clears even a fresh mapping
 * when MALLOC_PERTURB_ is set (meson test sets it), which faulted in a whole KV pool of which
 * a test uses a few blocks. Under AddressSanitizer they stay on calloc, whose red zones catch
 * a kernel running past the end of the pool; a mapping's padding would not. */
#if defined(__SANITIZE_ADDRESS__)
#define MAP_HUGE_BLOCKS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MAP_HUGE_BLOCKS 0
#endif
#endif
#ifndef MAP_HUGE_BLOCKS
#define MAP_HUGE_BLOCKS 1
#endif

static void advise_huge(void *a, size_t n_bytes) {
#ifdef MADV_HUGEPAGE
    (void)madvise(a, n_bytes & ~(HUGE_PAGE - 1), MADV_HUGEPAGE);
#else
    (void)a, (void)n_bytes;
#endif
}

static void *map_huge(size_t n_bytes) {
    if (n_bytes > SIZE_MAX - 2 * HUGE_PAGE || should_fail()) return NULL;
    /* room to align up; the mapping starts on a page, so the head fits before the block */
    size_t len = n_bytes + HUGE_PAGE;
    void *raw = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uintptr_t a = ((uintptr_t)raw + sizeof(block_head) + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    ((block_head *)a)[-1] = (block_head){raw, len};
    advise_huge((void *)a, n_bytes);
    return (void *)a;
}

void *pl_calloc_aligned(size_t n_bytes, bool huge) {
    huge = huge && n_bytes >= 2 * HUGE_PAGE;
    if (huge && MAP_HUGE_BLOCKS) return map_huge(n_bytes);
    const size_t align = huge ? HUGE_PAGE : 64;
    if (n_bytes > SIZE_MAX - align - sizeof(block_head)) return NULL;
    unsigned char *raw = pl_calloc(1, n_bytes + align + sizeof(block_head));
    if (!raw) return NULL;
    uintptr_t a = ((uintptr_t)raw + sizeof(block_head) + align - 1) & ~(uintptr_t)(align - 1);
    ((block_head *)a)[-1] = (block_head){raw, 0};
    if (huge) advise_huge((void *)a, n_bytes);
    return (void *)a;
}

void pl_free_aligned(void *p) {
    if (!p) return;
    block_head h = ((block_head *)p)[-1];
    if (h.mapped)
        (void)munmap(h.raw, h.mapped);
    else
        pl_free(h.raw);
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
