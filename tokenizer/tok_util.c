/*
 * tokenizer/tok_util.c - the helpers of tok_internal.h: growable id lists and byte buffers,
 * the string -> id map, reading files, UTF-8, and the few Unicode properties the tokenizers
 * ask about (from utf8proc's tables).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>
#include <xxhash.h>

#include "tokenizer/tok_internal.h"
#include "util/alloc.h"

// ---- growable lists --------------------------------------------------------------------------

pl_status pl_tok_ids_push(pl_tok_ids *l, int32_t id) {
    if (l->n == l->cap)
        PL_TRY(pl_grow_array((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v, "token ids"));
    l->v[l->n++] = id;
    return PL_OK;
}

pl_status pl_tok_ids_append(pl_tok_ids *l, const int32_t *ids, size_t n) {
    if (n == 0) return PL_OK;
    if (l->cap - l->n < n)
        PL_TRY(pl_grow_array((void **)&l->v, &l->cap, l->n + n, sizeof *l->v, "token ids"));
    memcpy(l->v + l->n, ids, n * sizeof *ids);
    l->n += n;
    return PL_OK;
}

// ---- string -> id map ------------------------------------------------------------------------

uint64_t pl_tok_hash_bytes(const void *p, size_t n) { return XXH3_64bits(p, n); }

static size_t slots_for(size_t n) {
    size_t s = 16;
    while (s < 2 * n) s *= 2;
    return s;
}

static void insert_slot(uint32_t *slots, size_t mask, const pl_tok_strmap_entry *e, uint32_t ix) {
    size_t i = e->hash & mask;
    while (slots[i]) i = (i + 1) & mask;
    slots[i] = ix + 1;
}

pl_status pl_tok_strmap_init(pl_tok_strmap *m, size_t n_expected) {
    *m = (pl_tok_strmap){0};
    size_t ns = slots_for(n_expected);
    m->slots = pl_calloc(ns, sizeof *m->slots);
    if (!m->slots) return pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer: map of %zu strings", n_expected);
    m->mask = ns - 1;
    if (n_expected) {
        m->entries = pl_reallocarray(NULL, n_expected, sizeof *m->entries);
        if (!m->entries) {
            pl_tok_strmap_free(m);
            return pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer: map of %zu strings", n_expected);
        }
        m->cap = n_expected;
    }
    return PL_OK;
}

void pl_tok_strmap_free(pl_tok_strmap *m) {
    pl_free(m->entries);
    pl_free(m->slots);
    *m = (pl_tok_strmap){0};
}

static int64_t find_entry(const pl_tok_strmap *m, const char *key, size_t len, uint32_t h) {
    if (!m->slots) return -1;
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        uint32_t s = m->slots[i];
        if (!s) return -1;
        const pl_tok_strmap_entry *e = &m->entries[s - 1];
        if (e->hash == h && e->len == len && memcmp(e->key, key, len) == 0) return s - 1;
    }
}

pl_status pl_tok_strmap_put(pl_tok_strmap *m, const char *key, size_t len, int32_t id,
                            int32_t *out_prev) {
    if (len > UINT32_MAX) return pl_fail(PL_ERR_FORMAT, "tokenizer: a %zu-byte token", len);
    if (!m->slots) PL_TRY(pl_tok_strmap_init(m, 16));
    uint32_t h = (uint32_t)pl_tok_hash_bytes(key, len);
    int64_t at = find_entry(m, key, len, h);
    if (out_prev) *out_prev = at >= 0 ? m->entries[at].id : -1;
    if (at >= 0) return PL_OK;
    if (m->n == m->cap)
        PL_TRY(pl_grow_array((void **)&m->entries, &m->cap, m->n + 1, sizeof *m->entries,
                             "tokenizer: string map"));
    if (2 * (m->n + 1) > m->mask + 1) { /* keep the table at most half full */
        size_t ns = slots_for(m->n + 1);
        uint32_t *slots = pl_calloc(ns, sizeof *slots);
        if (!slots) return pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer: string map");
        for (size_t i = 0; i < m->n; i++) insert_slot(slots, ns - 1, &m->entries[i], (uint32_t)i);
        pl_free(m->slots);
        m->slots = slots;
        m->mask = ns - 1;
    }
    m->entries[m->n] = (pl_tok_strmap_entry){key, (uint32_t)len, h, id};
    insert_slot(m->slots, m->mask, &m->entries[m->n], (uint32_t)m->n);
    m->n++;
    return PL_OK;
}

int32_t pl_tok_strmap_get(const pl_tok_strmap *m, const char *key, size_t len) {
    if (len > UINT32_MAX) return -1;
    int64_t at = find_entry(m, key, len, (uint32_t)pl_tok_hash_bytes(key, len));
    return at >= 0 ? m->entries[at].id : -1;
}

// ---- files -----------------------------------------------------------------------------------

bool pl_tok_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

pl_status pl_tok_read_file(const char *path, char **out, size_t *out_n) {
    FILE *f = fopen(path, "rb");
    if (!f) return pl_fail(PL_ERR_IO, "tokenizer %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        int e = errno;
        fclose(f);
        return pl_fail(PL_ERR_IO, "tokenizer %s: stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        fclose(f);
        return pl_fail(PL_ERR_IO, "tokenizer %s: not a regular file", path);
    }
    if ((unsigned long long)st.st_size > PL_TOK_MAX_FILE_BYTES) {
        fclose(f);
        return pl_fail(PL_ERR_FORMAT, "tokenizer %s: %lld bytes is larger than the %zu-byte "
                       "limit for a tokenizer file", path, (long long)st.st_size,
                       PL_TOK_MAX_FILE_BYTES);
    }
    size_t n = (size_t)st.st_size;
    char *buf = pl_malloc(n + 1);
    if (!buf) {
        fclose(f);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer %s: %zu bytes for the file", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    int read_err = ferror(f);
    fclose(f);
    if (read_err || got != n) {
        pl_free(buf);
        return pl_fail(PL_ERR_IO, "tokenizer %s: short read (%zu of %zu bytes)", path, got, n);
    }
    buf[n] = '\0';
    *out = buf;
    *out_n = n;
    return PL_OK;
}

// ---- Unicode properties ----------------------------------------------------------------------

bool pl_tok_is_white_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool pl_tok_is_word_char(uint32_t cp) {
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
               cp == '_';
    if (cp == 0x200C || cp == 0x200D) return true;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}

bool pl_tok_is_numeric(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}
