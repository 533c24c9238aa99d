/*
 * template/arena.c - bump allocation for the syntax tree (one arena per template) and for the
 * values of one render (one arena per render, with the memory limit).
 *
 * Nothing is freed alone: a render makes values that share strings, lists and objects freely,
 * and the arena goes at once when the render ends. Chunks grow geometrically up to 1 MiB;
 * a request bigger than half a chunk gets a chunk of its own.
 */
#include "template/tmpl_internal.h"

#include <string.h>

#include "util/alloc.h"

struct pl_tm_chunk {
    pl_tm_chunk *next;
    size_t cap, used;
    _Alignas(16) unsigned char data[];
};

#define MIN_CHUNK ((size_t)4096)
#define MAX_CHUNK ((size_t)1 << 20)

void pl_tm_arena_init(pl_tm_arena *a, size_t limit) {
    memset(a, 0, sizeof *a);
    a->limit = limit;
}

void pl_tm_arena_free(pl_tm_arena *a) {
    pl_tm_chunk *c = a->head;
    while (c) {
        pl_tm_chunk *next = c->next;
        pl_free(c);
        c = next;
    }
    a->head = NULL;
    a->used_bytes = 0;
}

static pl_tm_chunk *new_chunk(pl_tm_arena *a, size_t cap) {
    size_t bytes = sizeof(pl_tm_chunk) + cap;
    if (a->limit && (bytes > a->limit || a->used_bytes > a->limit - bytes)) {
        a->over_limit = true;
        return NULL;
    }
    pl_tm_chunk *c = pl_malloc(bytes);
    if (!c) return NULL;
    c->cap = cap;
    c->used = 0;
    a->used_bytes += bytes;
    return c;
}

void *pl_tm_alloc(pl_tm_arena *a, size_t n) {
    if (n > SIZE_MAX / 2) return NULL;
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    pl_tm_chunk *c = a->head;
    if (c && c->cap - c->used >= n) {
        void *p = c->data + c->used;
        c->used += n;
        return p;
    }
    size_t grow = c ? c->cap * 2 : MIN_CHUNK;
    if (grow > MAX_CHUNK) grow = MAX_CHUNK;
    if (n > grow / 2) {
        /* a big block: its own chunk, kept behind the current one so the current one's free
         * space is still used */
        pl_tm_chunk *big = new_chunk(a, n);
        if (!big) return NULL;
        big->used = n;
        if (c) {
            big->next = c->next;
            c->next = big;
        } else {
            big->next = NULL;
            a->head = big;
        }
        return big->data;
    }
    pl_tm_chunk *fresh = new_chunk(a, grow);
    if (!fresh) return NULL;
    fresh->next = c;
    a->head = fresh;
    fresh->used = n;
    return fresh->data;
}

void *pl_tm_zalloc(pl_tm_arena *a, size_t n) {
    void *p = pl_tm_alloc(a, n);
    if (p) memset(p, 0, n);
    return p;
}

void *pl_tm_alloc_n(pl_tm_arena *a, size_t n, size_t sz) {
    if (sz && n > SIZE_MAX / 4 / sz) return NULL;
    return pl_tm_alloc(a, n * sz);
}

bool pl_tm_str_eq(pl_tm_str a, pl_tm_str b) {
    return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0);
}

bool pl_tm_str_eqc(pl_tm_str a, const char *c) {
    size_t n = strlen(c);
    return a.n == n && memcmp(a.p, c, n) == 0;
}
