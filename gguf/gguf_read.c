/*
 * gguf/gguf_read.c - parsing and validating a GGUF file held in memory (see gguf.h).
 *
 * One pass with a cursor over the buffer: every read first checks that the bytes are there
 * (need()), every count is bounded by what the remaining bytes could hold before any loop or
 * allocation uses it, and sizes are computed with overflow checks. Then the cross-checks that
 * need everything: general.alignment, the data section, each tensor inside the file and
 * aligned, no overlap between tensors (sorted by offset), no duplicate key or tensor name
 * (sorted by name; the sorted orders are kept for the lookups).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "util/alloc.h"

#define MAX_ARRAY_DEPTH 3

typedef struct cursor {
    const uint8_t *base;
    uint64_t size, pos;
    const char *name;
} cursor;

static const char *const k_vtype_names[PL_GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64",
    "f64",
};

const char *pl_gguf_vtype_name(pl_gguf_vtype t) {
    return (int)t >= 0 && t < PL_GGUF_VTYPE_COUNT ? k_vtype_names[t] : "?";
}

/* Bytes of a fixed-size value; 0 for STRING, ARRAY and unknown types. */
static unsigned scalar_size(pl_gguf_vtype t) {
    switch (t) {
    case PL_GGUF_U8: case PL_GGUF_I8: case PL_GGUF_BOOL: return 1;
    case PL_GGUF_U16: case PL_GGUF_I16: return 2;
    case PL_GGUF_U32: case PL_GGUF_I32: case PL_GGUF_F32: return 4;
    case PL_GGUF_U64: case PL_GGUF_I64: case PL_GGUF_F64: return 8;
    default: return 0;
    }
}

static bool is_int_type(pl_gguf_vtype t) {
    return t == PL_GGUF_U8 || t == PL_GGUF_I8 || t == PL_GGUF_U16 || t == PL_GGUF_I16 ||
           t == PL_GGUF_U32 || t == PL_GGUF_I32 || t == PL_GGUF_U64 || t == PL_GGUF_I64;
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

// ----------------------------------------------------------------------------
// the cursor

static bool need(const cursor *c, uint64_t n) { return n <= c->size - c->pos; }

static pl_status truncated(const cursor *c, uint64_t n, const char *what) {
    return pl_fail(PL_ERR_FORMAT, "%s: truncated at byte %" PRIu64 ": %s needs %" PRIu64
                   " bytes, %" PRIu64 " are left", c->name, c->pos, what, n, c->size - c->pos);
}

static pl_status rd(cursor *c, int n, const char *what, uint64_t *out) {
    *out = 0;
    if (!need(c, (uint64_t)n)) return truncated(c, (uint64_t)n, what);
    *out = le(c->base + c->pos, n);
    c->pos += (uint64_t)n;
    return PL_OK;
}

/* A string: u64 length (at most max) then the bytes. */
static pl_status rd_str(cursor *c, uint64_t max, const char *what, pl_gguf_str *out) {
    uint64_t start = c->pos, n;
    PL_TRY(rd(c, 8, what, &n));
    if (n > max)
        return pl_fail(PL_ERR_FORMAT, "%s: byte %" PRIu64 ": %s of %" PRIu64 " bytes (at most %"
                       PRIu64 ")", c->name, start, what, n, max);
    if (!need(c, n)) return truncated(c, n, what);
    out->p = (const char *)c->base + c->pos;
    out->n = n;
    c->pos += n;
    return PL_OK;
}

/* Keys and names are used as C-like strings in messages and lookups: no NUL inside. */
static bool has_nul(pl_gguf_str s) { return s.n && memchr(s.p, 0, (size_t)s.n) != NULL; }

static int cmp_str(pl_gguf_str a, pl_gguf_str b) {
    size_t n = (size_t)(a.n < b.n ? a.n : b.n);
    int r = n ? memcmp(a.p, b.p, n) : 0;
    return r ? r : (a.n > b.n) - (a.n < b.n);
}

bool pl_gguf_str_eq(pl_gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.n == n && (n == 0 || memcmp(s.p, c, n) == 0);
}

// ----------------------------------------------------------------------------
// values

/* Skips over a value of type t (an array: its elements, nested arrays to MAX_ARRAY_DEPTH),
 * checking every length against the bytes left. For the top-level array, *elem and *n get
 * its element type and count. */
static pl_status skip_value(cursor *c, pl_gguf_vtype t, int depth, const char *key,
                            pl_gguf_vtype *elem, uint64_t *n) {
    unsigned sz = scalar_size(t);
    if (sz) {
        if (!need(c, sz)) return truncated(c, sz, key);
        c->pos += sz;
        return PL_OK;
    }
    if (t == PL_GGUF_STRING) {
        pl_gguf_str s;
        return rd_str(c, UINT64_MAX, key, &s);
    }
    if (t != PL_GGUF_ARRAY)
        return pl_fail(PL_ERR_FORMAT, "%s: byte %" PRIu64 ": key \"%s\": value type %d is not a "
                       "GGUF type", c->name, c->pos, key, (int)t);
    uint64_t et, count;
    PL_TRY(rd(c, 4, key, &et));
    PL_TRY(rd(c, 8, key, &count));
    if (elem) *elem = (pl_gguf_vtype)et, *n = count;
    uint64_t left = c->size - c->pos;
    if (et >= PL_GGUF_VTYPE_COUNT)
        return pl_fail(PL_ERR_FORMAT, "%s: byte %" PRIu64 ": key \"%s\": array element type %"
                       PRIu64 " is not a GGUF type", c->name, c->pos, key, et);
    sz = scalar_size((pl_gguf_vtype)et);
    if (sz) {
        if (count > left / sz)
            return pl_fail(PL_ERR_FORMAT, "%s: byte %" PRIu64 ": key \"%s\": %" PRIu64 " %s "
                           "elements do not fit in the %" PRIu64 " bytes left", c->name, c->pos,
                           key, count, pl_gguf_vtype_name((pl_gguf_vtype)et), left);
        c->pos += count * sz;
        return PL_OK;
    }
    /* strings take at least 8 bytes each, nested arrays 12: a count beyond that is a lie */
    unsigned min = et == PL_GGUF_STRING ? 8 : 12;
    if (count > left / min)
        return pl_fail(PL_ERR_FORMAT, "%s: byte %" PRIu64 ": key \"%s\": %" PRIu64 " %s "
                       "elements do not fit in the %" PRIu64 " bytes left", c->name, c->pos, key,
                       count, pl_gguf_vtype_name((pl_gguf_vtype)et), left);
    if (et == PL_GGUF_ARRAY && depth >= MAX_ARRAY_DEPTH)
        return pl_fail(PL_ERR_FORMAT, "%s: key \"%s\": arrays nested more than %d deep", c->name,
                       key, MAX_ARRAY_DEPTH);
    for (uint64_t i = 0; i < count; i++)
        PL_TRY(skip_value(c, (pl_gguf_vtype)et, depth + 1, key, NULL, NULL));
    return PL_OK;
}

static pl_status read_kv(cursor *c, size_t i, pl_gguf_kv *kv) {
    char what[48];
    snprintf(what, sizeof what, "key %zu", i);
    PL_TRY(rd_str(c, PL_GGUF_MAX_KEY, what, &kv->key));
    if (kv->key.n == 0 || has_nul(kv->key))
        return pl_fail(PL_ERR_FORMAT, "%s: byte %" PRIu64 ": key %zu is empty or holds a NUL "
                       "byte", c->name, c->pos, i);
    char key[96];
    snprintf(key, sizeof key, "%.*s", (int)(kv->key.n > 80 ? 80 : kv->key.n), kv->key.p);
    uint64_t t;
    PL_TRY(rd(c, 4, key, &t));
    if (t >= PL_GGUF_VTYPE_COUNT)
        return pl_fail(PL_ERR_FORMAT, "%s: byte %" PRIu64 ": key \"%s\": value type %" PRIu64
                       " is not a GGUF type", c->name, c->pos - 4, key, t);
    kv->type = (pl_gguf_vtype)t;
    uint64_t start = c->pos;
    PL_TRY(skip_value(c, kv->type, 0, key, &kv->elem, &kv->n));
    kv->data = c->base + start + (kv->type == PL_GGUF_ARRAY ? 12 : 0);
    kv->n_bytes = c->pos - start;
    return PL_OK;
}

// ----------------------------------------------------------------------------
// tensor infos

static pl_status read_tensor(cursor *c, size_t i, pl_gguf_tensor *t) {
    char what[48];
    snprintf(what, sizeof what, "tensor %zu's name", i);
    PL_TRY(rd_str(c, PL_GGUF_MAX_NAME, what, &t->name));
    if (t->name.n == 0 || has_nul(t->name))
        return pl_fail(PL_ERR_FORMAT, "%s: byte %" PRIu64 ": tensor %zu's name is empty or holds "
                       "a NUL byte", c->name, c->pos, i);
    char name[PL_GGUF_MAX_NAME + 16];
    snprintf(name, sizeof name, "tensor %.*s", (int)t->name.n, t->name.p);
    uint64_t n_dims, type;
    PL_TRY(rd(c, 4, name, &n_dims));
    if (n_dims < 1 || n_dims > PL_GGUF_MAX_DIMS)
        return pl_fail(PL_ERR_FORMAT, "%s: %s: n_dims = %" PRIu64 " (1 to %d)", c->name, name,
                       n_dims, PL_GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    uint64_t elems = 1;
    for (int d = 0; d < PL_GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims) continue;
        PL_TRY(rd(c, 8, name, &t->ne[d]));
        if (t->ne[d] == 0 || t->ne[d] > INT64_MAX)
            return pl_fail(PL_ERR_FORMAT, "%s: %s: ne[%d] = %" PRIu64 " is out of range", c->name,
                           name, d, t->ne[d]);
        if (__builtin_mul_overflow(elems, t->ne[d], &elems) || elems > INT64_MAX)
            return pl_fail(PL_ERR_FORMAT, "%s: %s: the element count overflows", c->name, name);
    }
    PL_TRY(rd(c, 4, name, &type));
    PL_TRY(rd(c, 8, name, &t->offset));
    t->type = pl_gguf_type_info_of((uint32_t)type);
    if (type > UINT32_MAX || !t->type)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: %s: ggml type id %" PRIu64 " is unknown", c->name,
                       name, type);
    if (t->ne[0] % (uint64_t)t->type->block_elems != 0)
        return pl_fail(PL_ERR_FORMAT, "%s: %s: rows of %" PRIu64 " elements are not whole blocks "
                       "of %s (%d)", c->name, name, t->ne[0], t->type->name,
                       t->type->block_elems);
    if (__builtin_mul_overflow(elems / (uint64_t)t->type->block_elems,
                               (uint64_t)t->type->block_bytes, &t->n_bytes))
        return pl_fail(PL_ERR_FORMAT, "%s: %s: its size overflows", c->name, name);
    return PL_OK;
}

// ----------------------------------------------------------------------------
// cross-checks

typedef struct sorted {
    pl_gguf_str s;
    uint64_t off;
    uint32_t i;
} sorted;

static int cmp_by_str(const void *a, const void *b) {
    const sorted *x = a, *y = b;
    int r = cmp_str(x->s, y->s);
    return r ? r : (x->i > y->i) - (x->i < y->i);
}

static int cmp_by_off(const void *a, const void *b) {
    const sorted *x = a, *y = b;
    return (x->off > y->off) - (x->off < y->off);
}

/* Sorts n names (fills idx in sorted order) and refuses a name given twice. */
static pl_status sort_names(const pl_gguf *g, size_t n, pl_gguf_str (*name_of)(const pl_gguf *,
                                                                            size_t),
                            const char *what, uint32_t *idx) {
    sorted *s = pl_calloc(n ? n : 1, sizeof *s);
    if (!s) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: sorting %zu %ss", g->name, n, what);
    for (size_t i = 0; i < n; i++) s[i] = (sorted){name_of(g, i), 0, (uint32_t)i};
    qsort(s, n, sizeof *s, cmp_by_str);
    pl_status st = PL_OK;
    for (size_t i = 0; i < n; i++) {
        idx[i] = s[i].i;
        if (i > 0 && cmp_str(s[i].s, s[i - 1].s) == 0 && st == PL_OK)
            st = pl_fail(PL_ERR_FORMAT, "%s: %s \"%.*s\" appears twice (entries %u and %u)",
                         g->name, what, (int)(s[i].s.n > 80 ? 80 : s[i].s.n), s[i].s.p,
                         s[i - 1].i, s[i].i);
    }
    pl_free(s);
    return st;
}

static pl_gguf_str kv_name(const pl_gguf *g, size_t i) { return g->kv[i].key; }
static pl_gguf_str tensor_name(const pl_gguf *g, size_t i) { return g->tensors[i].name; }

static pl_status check_alignment(pl_gguf *g) {
    g->alignment = PL_GGUF_DEFAULT_ALIGNMENT;
    const pl_gguf_kv *kv = pl_gguf_find(g, "general.alignment");
    if (!kv) return PL_OK;
    if (kv->type != PL_GGUF_U32)
        return pl_fail(PL_ERR_FORMAT, "%s: general.alignment is a %s, not a u32", g->name,
                       pl_gguf_vtype_name(kv->type));
    uint64_t a = le(kv->data, 4);
    if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 24))
        return pl_fail(PL_ERR_FORMAT, "%s: general.alignment = %" PRIu64 " is not a power of two "
                       "up to 2^24", g->name, a);
    g->alignment = (uint32_t)a;
    return PL_OK;
}

/* Each tensor aligned and inside the file, none overlapping another. */
static pl_status check_tensor_data(pl_gguf *g, uint64_t header_end) {
    uint64_t a = g->alignment;
    g->data_offset = (header_end + a - 1) / a * a;
    if (g->n_tensors == 0) return PL_OK;
    if (g->data_offset > g->size)
        return pl_fail(PL_ERR_FORMAT, "%s: truncated: the data section would start at byte %"
                       PRIu64 ", the file has %zu", g->name, g->data_offset, g->size);
    uint64_t room = g->size - g->data_offset;
    for (size_t i = 0; i < g->n_tensors; i++) {
        pl_gguf_tensor *t = &g->tensors[i];
        if (t->offset % a != 0)
            return pl_fail(PL_ERR_FORMAT, "%s: tensor %.*s: offset %" PRIu64 " is not a multiple "
                           "of the alignment %" PRIu64, g->name, (int)t->name.n, t->name.p,
                           t->offset, a);
        if (t->offset > room || t->n_bytes > room - t->offset)
            return pl_fail(PL_ERR_FORMAT, "%s: tensor %.*s: %" PRIu64 " bytes at data offset %"
                           PRIu64 " end past the end of the file (%" PRIu64 " bytes of data)",
                           g->name, (int)t->name.n, t->name.p, t->n_bytes, t->offset, room);
        t->data = g->base + g->data_offset + t->offset;
    }
    sorted *s = pl_calloc(g->n_tensors, sizeof *s);
    if (!s) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: sorting tensors", g->name);
    for (size_t i = 0; i < g->n_tensors; i++)
        s[i] = (sorted){g->tensors[i].name, g->tensors[i].offset, (uint32_t)i};
    qsort(s, g->n_tensors, sizeof *s, cmp_by_off);
    pl_status st = PL_OK;
    for (size_t i = 1; i < g->n_tensors && st == PL_OK; i++) {
        const pl_gguf_tensor *p = &g->tensors[s[i - 1].i], *q = &g->tensors[s[i].i];
        if (p->offset + p->n_bytes > q->offset)
            st = pl_fail(PL_ERR_FORMAT, "%s: tensors %.*s and %.*s overlap (data offsets %" PRIu64
                         " + %" PRIu64 " bytes and %" PRIu64 ")", g->name, (int)p->name.n,
                         p->name.p, (int)q->name.n, q->name.p, p->offset, p->n_bytes, q->offset);
    }
    pl_free(s);
    return st;
}

// ----------------------------------------------------------------------------
// the file

bool pl_gguf_has_magic(const void *data, size_t size) {
    return size >= 4 && memcmp(data, "GGUF", 4) == 0;
}

static pl_status parse(cursor *c, pl_gguf *g) {
    if (c->size < 4 || !pl_gguf_has_magic(c->base, (size_t)c->size))
        return pl_fail(PL_ERR_FORMAT, "%s: not a GGUF file (no \"GGUF\" magic)", c->name);
    c->pos = 4;
    uint64_t version, n_tensors, n_kv;
    PL_TRY(rd(c, 4, "the version", &version));
    if (version == 1)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: GGUF version 1 is not supported (2 and 3 are)",
                       c->name);
    if (version != 2 && version != 3)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: GGUF version %" PRIu64 " is not supported (2 and "
                       "3 are; a big-endian file reads as a huge version)", c->name, version);
    g->version = (uint32_t)version;
    PL_TRY(rd(c, 8, "the tensor count", &n_tensors));
    PL_TRY(rd(c, 8, "the key count", &n_kv));
    /* smallest key/value: 8 + 1 + 4 + 1 bytes; smallest tensor info: 8 + 1 + 4 + 8 + 4 + 8 */
    uint64_t left = c->size - c->pos;
    if (n_kv > left / 14)
        return pl_fail(PL_ERR_FORMAT, "%s: %" PRIu64 " keys cannot fit in %" PRIu64 " bytes",
                       c->name, n_kv, left);
    if (n_tensors > left / 33 || n_tensors > UINT32_MAX)
        return pl_fail(PL_ERR_FORMAT, "%s: %" PRIu64 " tensors cannot fit in %" PRIu64 " bytes",
                       c->name, n_tensors, left);
    g->kv = pl_calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->kv_by_key = pl_calloc(n_kv ? n_kv : 1, sizeof *g->kv_by_key);
    g->tensors = pl_calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    g->by_name = pl_calloc(n_tensors ? n_tensors : 1, sizeof *g->by_name);
    if (!g->kv || !g->kv_by_key || !g->tensors || !g->by_name)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: %" PRIu64 " keys, %" PRIu64 " tensors", c->name,
                       n_kv, n_tensors);
    for (size_t i = 0; i < n_kv; i++) {
        PL_TRY(read_kv(c, i, &g->kv[i]));
        g->n_kv = i + 1;
    }
    PL_TRY(sort_names(g, g->n_kv, kv_name, "key", g->kv_by_key));
    for (size_t i = 0; i < n_tensors; i++) {
        PL_TRY(read_tensor(c, i, &g->tensors[i]));
        g->n_tensors = i + 1;
    }
    PL_TRY(sort_names(g, g->n_tensors, tensor_name, "tensor", g->by_name));
    PL_TRY(check_alignment(g));
    return check_tensor_data(g, c->pos);
}

pl_status pl_gguf_parse(const void *data, size_t size, const char *name, pl_gguf *out) {
    memset(out, 0, sizeof *out);
    out->name = name ? name : "gguf";
    out->base = data;
    out->size = size;
    cursor c = {data, size, 0, out->name};
    pl_status s = parse(&c, out);
    if (s != PL_OK) pl_gguf_free(out);
    return s;
}

void pl_gguf_free(pl_gguf *g) {
    if (!g) return;
    pl_free(g->kv);
    pl_free(g->kv_by_key);
    pl_free(g->tensors);
    pl_free(g->by_name);
    memset(g, 0, sizeof *g);
}

// ----------------------------------------------------------------------------
// lookups and getters

const pl_gguf_kv *pl_gguf_find(const pl_gguf *g, const char *key) {
    pl_gguf_str k = {key, strlen(key)};
    size_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = cmp_str(g->kv[g->kv_by_key[mid]].key, k);
        if (r == 0) return &g->kv[g->kv_by_key[mid]];
        if (r < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const pl_gguf_tensor *pl_gguf_tensor_find(const pl_gguf *g, const char *name) {
    pl_gguf_str k = {name, strlen(name)};
    size_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = cmp_str(g->tensors[g->by_name[mid]].name, k);
        if (r == 0) return &g->tensors[g->by_name[mid]];
        if (r < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* A value of integer type t at p, as int64 (false for a u64 beyond INT64_MAX). */
static bool int_at(pl_gguf_vtype t, const uint8_t *p, int64_t *out) {
    uint64_t u = le(p, (int)scalar_size(t));
    switch (t) {
    case PL_GGUF_I8: *out = (int8_t)u; return true;
    case PL_GGUF_I16: *out = (int16_t)u; return true;
    case PL_GGUF_I32: *out = (int32_t)u; return true;
    case PL_GGUF_I64: *out = (int64_t)u; return true;
    default: *out = (int64_t)u; return u <= INT64_MAX;
    }
}

static double float_at(pl_gguf_vtype t, const uint8_t *p) {
    if (t == PL_GGUF_F32) {
        uint32_t u = (uint32_t)le(p, 4);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    uint64_t u = le(p, 8);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

static pl_status absent(const pl_gguf *g, const char *key, bool required) {
    return required ? pl_fail(PL_ERR_FORMAT, "%s: %s is missing", g->name, key) : PL_OK;
}

static pl_status wrong_type(const pl_gguf *g, const char *key, const pl_gguf_kv *kv,
                            const char *want) {
    return pl_fail(PL_ERR_FORMAT, "%s: %s is a %s%s%s, not %s", g->name, key,
                   pl_gguf_vtype_name(kv->type), kv->type == PL_GGUF_ARRAY ? " of " : "",
                   kv->type == PL_GGUF_ARRAY ? pl_gguf_vtype_name(kv->elem) : "", want);
}

pl_status pl_gguf_get_int(const pl_gguf *g, const char *key, bool required, int64_t dflt,
                          int64_t lo, int64_t hi, int64_t *out) {
    const pl_gguf_kv *kv = pl_gguf_find(g, key);
    *out = dflt;
    if (!kv) return absent(g, key, required);
    if (!is_int_type(kv->type)) return wrong_type(g, key, kv, "an integer");
    int64_t v;
    if (!int_at(kv->type, kv->data, &v) || v < lo || v > hi)
        return pl_fail(PL_ERR_FORMAT, "%s: %s = %" PRIu64 " is out of range [%" PRId64 ", %"
                       PRId64 "]", g->name, key, kv->type == PL_GGUF_U64 ? le(kv->data, 8)
                       : (uint64_t)v, lo, hi);
    *out = v;
    return PL_OK;
}

pl_status pl_gguf_get_float(const pl_gguf *g, const char *key, bool required, double dflt,
                            double *out) {
    const pl_gguf_kv *kv = pl_gguf_find(g, key);
    *out = dflt;
    if (!kv) return absent(g, key, required);
    if (kv->type == PL_GGUF_F32 || kv->type == PL_GGUF_F64) {
        *out = float_at(kv->type, kv->data);
        return PL_OK;
    }
    int64_t v;
    if (is_int_type(kv->type) && int_at(kv->type, kv->data, &v)) {
        *out = (double)v;
        return PL_OK;
    }
    return wrong_type(g, key, kv, "a number");
}

pl_status pl_gguf_get_bool(const pl_gguf *g, const char *key, bool required, bool dflt,
                           bool *out) {
    const pl_gguf_kv *kv = pl_gguf_find(g, key);
    *out = dflt;
    if (!kv) return absent(g, key, required);
    if (kv->type != PL_GGUF_BOOL) return wrong_type(g, key, kv, "a bool");
    if (kv->data[0] > 1)
        return pl_fail(PL_ERR_FORMAT, "%s: %s = %u is not a bool (0 or 1)", g->name, key,
                       kv->data[0]);
    *out = kv->data[0] == 1;
    return PL_OK;
}

pl_status pl_gguf_get_str(const pl_gguf *g, const char *key, bool required, pl_gguf_str *out) {
    const pl_gguf_kv *kv = pl_gguf_find(g, key);
    *out = (pl_gguf_str){NULL, 0};
    if (!kv) return absent(g, key, required);
    if (kv->type != PL_GGUF_STRING) return wrong_type(g, key, kv, "a string");
    out->n = le(kv->data, 8);
    out->p = (const char *)kv->data + 8;
    return PL_OK;
}

pl_status pl_gguf_get_array(const pl_gguf *g, const char *key, pl_gguf_vtype elem, bool required,
                            const pl_gguf_kv **out) {
    const pl_gguf_kv *kv = pl_gguf_find(g, key);
    *out = NULL;
    if (!kv) return absent(g, key, required);
    bool ok = kv->type == PL_GGUF_ARRAY &&
              (kv->elem == elem || (is_int_type(elem) && is_int_type(kv->elem)) ||
               (elem == PL_GGUF_F32 && kv->elem == PL_GGUF_F64));
    if (!ok) {
        char want[32];
        snprintf(want, sizeof want, "an array of %s", pl_gguf_vtype_name(elem));
        return wrong_type(g, key, kv, want);
    }
    *out = kv;
    return PL_OK;
}

int64_t pl_gguf_array_int(const pl_gguf_kv *kv, uint64_t i) {
    int64_t v;
    unsigned sz = scalar_size(kv->elem);
    return int_at(kv->elem, kv->data + i * sz, &v) ? v : INT64_MAX;
}

double pl_gguf_array_float(const pl_gguf_kv *kv, uint64_t i) {
    return float_at(kv->elem, kv->data + i * scalar_size(kv->elem));
}

pl_gguf_str pl_gguf_array_next_str(const uint8_t **pos) {
    pl_gguf_str s = {(const char *)*pos + 8, le(*pos, 8)};
    *pos += 8 + s.n;
    return s;
}

// ----------------------------------------------------------------------------
// files

pl_status pl_gguf_open(const char *path, pl_gguf_file *out) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return pl_fail(PL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return pl_fail(PL_ERR_IO, "%s: not a regular file that fits in memory", path);
    }
    out->size = (size_t)st.st_size;
    if (out->size > 0) {
        void *p = mmap(NULL, out->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            memset(out, 0, sizeof *out);
            return pl_fail(PL_ERR_IO, "%s: cannot map: %s", path, strerror(e));
        }
        out->map = p;
    }
    close(fd);
    out->path = pl_strdup(path);
    pl_status s = out->path ? pl_gguf_parse(out->map, out->size, out->path, &out->g)
                            : pl_fail(PL_ERR_OUT_OF_MEMORY, "%s", path);
    if (s != PL_OK) pl_gguf_close(out);
    return s;
}

void pl_gguf_close(pl_gguf_file *f) {
    if (!f) return;
    pl_gguf_free(&f->g);
    if (f->map) munmap(f->map, f->size);
    pl_free(f->path);
    memset(f, 0, sizeof *f);
}
