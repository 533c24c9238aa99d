/*
 * gguf/gguf_write.c - writing a GGUF file (version 3, little-endian; see gguf.h).
 *
 * The metadata is serialised as it is added (one byte buffer), the tensor directory is kept
 * as entries; pl_gguf_writer_write lays the data section out (each tensor from a multiple of
 * the alignment), writes everything to "<path>.tmp" and renames it over path, so a failed or
 * interrupted write never leaves a truncated file under the final name.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gguf/gguf.h"
#include "util/alloc.h"

typedef struct wtensor {
    char *name;
    const pl_gguf_type_info *ti;
    int n_dims;
    uint64_t ne[PL_GGUF_MAX_DIMS];
    uint64_t n_bytes, offset;
    const void *data;
} wtensor;

struct pl_gguf_writer {
    uint8_t *meta; /* (n_meta, cap_meta) serialised key/values */
    size_t n_meta, cap_meta;
    char **keys;   /* (n_kv, cap_keys) */
    size_t n_kv, cap_keys;
    wtensor *t;    /* (n_tensors, cap_t) */
    size_t n_tensors, cap_t;
    uint32_t alignment;
};

pl_status pl_gguf_writer_create(pl_gguf_writer **out) {
    *out = pl_calloc(1, sizeof **out);
    if (!*out) return pl_fail(PL_ERR_OUT_OF_MEMORY, "gguf writer");
    (*out)->alignment = PL_GGUF_DEFAULT_ALIGNMENT;
    return PL_OK;
}

void pl_gguf_writer_free(pl_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) pl_free(w->keys[i]);
    for (size_t i = 0; i < w->n_tensors; i++) pl_free(w->t[i].name);
    pl_free(w->keys);
    pl_free(w->t);
    pl_free(w->meta);
    pl_free(w);
}

// ----------------------------------------------------------------------------
// metadata

static pl_status put(pl_gguf_writer *w, const void *p, size_t n) {
    if (n > SIZE_MAX - w->n_meta) return pl_fail(PL_ERR_OUT_OF_MEMORY, "gguf writer: metadata");
    PL_TRY(pl_grow_array((void **)&w->meta, &w->cap_meta, w->n_meta + n, 1, "gguf metadata"));
    if (n) memcpy(w->meta + w->n_meta, p, n);
    w->n_meta += n;
    return PL_OK;
}

static pl_status put_le(pl_gguf_writer *w, uint64_t v, int n) {
    uint8_t b[8];
    for (int i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
    return put(w, b, (size_t)n);
}

static pl_status put_str(pl_gguf_writer *w, const char *s, size_t n) {
    PL_TRY(put_le(w, n, 8));
    return put(w, s, n);
}

bool pl_gguf_writer_has(const pl_gguf_writer *w, const char *key) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0) return true;
    return false;
}

/* Starts a key/value: refuses a key already written, remembers it, writes it and the type. */
static pl_status begin(pl_gguf_writer *w, const char *key, size_t key_len, pl_gguf_vtype t) {
    char *k = pl_malloc(key_len + 1);
    if (!k) return pl_fail(PL_ERR_OUT_OF_MEMORY, "gguf writer: key");
    memcpy(k, key, key_len);
    k[key_len] = '\0';
    if (key_len == 0 || strlen(k) != key_len || pl_gguf_writer_has(w, k)) {
        pl_status s = pl_fail(PL_ERR_INVALID_ARGUMENT, "gguf writer: key \"%s\" is empty, holds "
                              "a NUL or is there already", k);
        pl_free(k);
        return s;
    }
    pl_status s = pl_grow_array((void **)&w->keys, &w->cap_keys, w->n_kv + 1, sizeof *w->keys,
                                "gguf keys");
    if (s != PL_OK) {
        pl_free(k);
        return s;
    }
    w->keys[w->n_kv++] = k;
    PL_TRY(put_str(w, key, key_len));
    return put_le(w, (uint64_t)t, 4);
}

pl_status pl_gguf_add_u32(pl_gguf_writer *w, const char *key, uint32_t v) {
    PL_TRY(begin(w, key, strlen(key), PL_GGUF_U32));
    if (strcmp(key, "general.alignment") == 0) {
        if (v == 0 || (v & (v - 1)) != 0)
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "gguf writer: alignment %u", v);
        w->alignment = v;
    }
    return put_le(w, v, 4);
}

pl_status pl_gguf_add_i32(pl_gguf_writer *w, const char *key, int32_t v) {
    PL_TRY(begin(w, key, strlen(key), PL_GGUF_I32));
    return put_le(w, (uint32_t)v, 4);
}

pl_status pl_gguf_add_u64(pl_gguf_writer *w, const char *key, uint64_t v) {
    PL_TRY(begin(w, key, strlen(key), PL_GGUF_U64));
    return put_le(w, v, 8);
}

pl_status pl_gguf_add_f32(pl_gguf_writer *w, const char *key, float v) {
    PL_TRY(begin(w, key, strlen(key), PL_GGUF_F32));
    uint32_t u;
    memcpy(&u, &v, 4);
    return put_le(w, u, 4);
}

pl_status pl_gguf_add_bool(pl_gguf_writer *w, const char *key, bool v) {
    PL_TRY(begin(w, key, strlen(key), PL_GGUF_BOOL));
    return put_le(w, v ? 1 : 0, 1);
}

pl_status pl_gguf_add_str(pl_gguf_writer *w, const char *key, const char *s, size_t len) {
    PL_TRY(begin(w, key, strlen(key), PL_GGUF_STRING));
    return put_str(w, s, len);
}

static unsigned elem_size(pl_gguf_vtype t) {
    switch (t) {
    case PL_GGUF_U8: case PL_GGUF_I8: case PL_GGUF_BOOL: return 1;
    case PL_GGUF_U16: case PL_GGUF_I16: return 2;
    case PL_GGUF_U32: case PL_GGUF_I32: case PL_GGUF_F32: return 4;
    case PL_GGUF_U64: case PL_GGUF_I64: case PL_GGUF_F64: return 8;
    default: return 0;
    }
}

pl_status pl_gguf_add_array(pl_gguf_writer *w, const char *key, pl_gguf_vtype elem,
                            const void *data, size_t n) {
    unsigned sz = elem_size(elem);
    if (!sz) return pl_fail(PL_ERR_INVALID_ARGUMENT, "gguf writer: %s: array of %s", key,
                            pl_gguf_vtype_name(elem));
    PL_TRY(begin(w, key, strlen(key), PL_GGUF_ARRAY));
    PL_TRY(put_le(w, (uint64_t)elem, 4));
    PL_TRY(put_le(w, n, 8));
    const uint8_t *p = data;
    /* elements in little-endian order whatever the host */
    for (size_t i = 0; i < n; i++) {
        uint64_t v = 0;
        memcpy(&v, p + i * sz, sz); /* host order: little-endian hosts only (x86, arm) */
        PL_TRY(put_le(w, v, (int)sz));
    }
    return PL_OK;
}

pl_status pl_gguf_add_str_array(pl_gguf_writer *w, const char *key, const char *const *strs,
                                const size_t *lens, size_t n) {
    PL_TRY(begin(w, key, strlen(key), PL_GGUF_ARRAY));
    PL_TRY(put_le(w, PL_GGUF_STRING, 4));
    PL_TRY(put_le(w, n, 8));
    for (size_t i = 0; i < n; i++)
        PL_TRY(put_str(w, strs[i], lens ? lens[i] : strlen(strs[i])));
    return PL_OK;
}

pl_status pl_gguf_add_kv_copy(pl_gguf_writer *w, const pl_gguf_kv *kv) {
    PL_TRY(begin(w, kv->key.p, (size_t)kv->key.n, kv->type));
    if (kv->type == PL_GGUF_ARRAY) {
        PL_TRY(put_le(w, (uint64_t)kv->elem, 4));
        PL_TRY(put_le(w, kv->n, 8));
        return put(w, kv->data, (size_t)(kv->n_bytes - 12));
    }
    if (kv->type == PL_GGUF_U32 && pl_gguf_str_eq(kv->key, "general.alignment")) {
        uint32_t a = (uint32_t)kv->data[0] | (uint32_t)kv->data[1] << 8 |
                     (uint32_t)kv->data[2] << 16 | (uint32_t)kv->data[3] << 24;
        if (a && (a & (a - 1)) == 0) w->alignment = a;
    }
    return put(w, kv->data, (size_t)kv->n_bytes);
}

// ----------------------------------------------------------------------------
// tensors

pl_status pl_gguf_add_tensor(pl_gguf_writer *w, const char *name, const pl_gguf_type_info *ti,
                             int n_dims, const uint64_t *ne, const void *data) {
    size_t len = strlen(name);
    if (!ti || n_dims < 1 || n_dims > PL_GGUF_MAX_DIMS || len == 0 || len > PL_GGUF_MAX_NAME)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "gguf writer: tensor %s: bad name, type or "
                       "dims", name);
    uint64_t elems = 1;
    for (int d = 0; d < n_dims; d++)
        if (ne[d] == 0 || __builtin_mul_overflow(elems, ne[d], &elems))
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "gguf writer: tensor %s: bad dims", name);
    if (ne[0] % (uint64_t)ti->block_elems != 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "gguf writer: tensor %s: rows of %llu elements "
                       "are not whole blocks of %s (%d)", name, (unsigned long long)ne[0],
                       ti->name, ti->block_elems);
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "gguf writer: tensor %s added twice", name);
    PL_TRY(pl_grow_array((void **)&w->t, &w->cap_t, w->n_tensors + 1, sizeof *w->t,
                         "gguf tensors"));
    wtensor *t = &w->t[w->n_tensors];
    *t = (wtensor){.ti = ti, .n_dims = n_dims, .data = data};
    for (int d = 0; d < PL_GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->n_bytes = elems / (uint64_t)ti->block_elems * (uint64_t)ti->block_bytes;
    if (!(t->name = pl_strdup(name))) return pl_fail(PL_ERR_OUT_OF_MEMORY, "gguf writer");
    w->n_tensors++;
    return PL_OK;
}

// ----------------------------------------------------------------------------
// the file

typedef struct out {
    FILE *f;
    const char *path;
    uint64_t pos;
} out;

static pl_status emit(out *o, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, o->f) != n)
        return pl_fail(PL_ERR_IO, "%s: write failed at byte %llu: %s", o->path,
                       (unsigned long long)o->pos, strerror(errno));
    o->pos += n;
    return PL_OK;
}

static pl_status emit_le(out *o, uint64_t v, int n) {
    uint8_t b[8];
    for (int i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
    return emit(o, b, (size_t)n);
}

static pl_status pad(out *o, uint64_t a) {
    static const uint8_t zeros[64];
    while (o->pos % a) {
        uint64_t k = a - o->pos % a;
        PL_TRY(emit(o, zeros, (size_t)(k < sizeof zeros ? k : sizeof zeros)));
    }
    return PL_OK;
}

static pl_status write_all(pl_gguf_writer *w, out *o, pl_gguf_fill_fn fill, void *ctx) {
    uint64_t a = w->alignment, off = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        w->t[i].offset = off;
        off = (off + w->t[i].n_bytes + a - 1) / a * a;
    }
    PL_TRY(emit(o, "GGUF", 4));
    PL_TRY(emit_le(o, 3, 4));
    PL_TRY(emit_le(o, w->n_tensors, 8));
    PL_TRY(emit_le(o, w->n_kv, 8));
    PL_TRY(emit(o, w->meta, w->n_meta));
    for (size_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->t[i];
        size_t len = strlen(t->name);
        PL_TRY(emit_le(o, len, 8));
        PL_TRY(emit(o, t->name, len));
        PL_TRY(emit_le(o, (uint64_t)t->n_dims, 4));
        for (int d = 0; d < t->n_dims; d++) PL_TRY(emit_le(o, t->ne[d], 8));
        PL_TRY(emit_le(o, t->ti->id, 4));
        PL_TRY(emit_le(o, t->offset, 8));
    }
    PL_TRY(pad(o, a));
    uint64_t data_start = o->pos;
    for (size_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->t[i];
        if (o->pos - data_start != t->offset) PL_TRY(pad(o, a));
        if (t->data) {
            PL_TRY(emit(o, t->data, (size_t)t->n_bytes));
            continue;
        }
        if (!fill)
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "gguf writer: tensor %s has no data", t->name);
        void *buf = pl_malloc(t->n_bytes ? (size_t)t->n_bytes : 1);
        if (!buf)
            return pl_fail(PL_ERR_OUT_OF_MEMORY, "gguf writer: %llu bytes for tensor %s",
                           (unsigned long long)t->n_bytes, t->name);
        pl_status s = fill(ctx, i, buf, (size_t)t->n_bytes);
        if (s == PL_OK) s = emit(o, buf, (size_t)t->n_bytes);
        pl_free(buf);
        PL_TRY(s);
    }
    return PL_OK;
}

pl_status pl_gguf_writer_write(pl_gguf_writer *w, const char *path, pl_gguf_fill_fn fill,
                               void *ctx) {
    size_t n = strlen(path) + 5;
    char *tmp = pl_malloc(n);
    if (!tmp) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s", path);
    snprintf(tmp, n, "%s.tmp", path);
    out o = {fopen(tmp, "wb"), path, 0};
    pl_status s = PL_OK;
    if (!o.f) {
        s = pl_fail(PL_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        pl_free(tmp);
        return s;
    }
    s = write_all(w, &o, fill, ctx);
    if (fclose(o.f) != 0 && s == PL_OK)
        s = pl_fail(PL_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    if (s == PL_OK && rename(tmp, path) != 0)
        s = pl_fail(PL_ERR_IO, "%s: cannot rename %s: %s", path, tmp, strerror(errno));
    if (s != PL_OK) remove(tmp);
    pl_free(tmp);
    return s;
}
