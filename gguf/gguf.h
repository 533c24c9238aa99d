/*
 * gguf/gguf.h - the GGUF container (llama.cpp's model file): reading a file's metadata and
 * tensor directory, validated against the file before anything is used, and writing one.
 * Knows the container only: what the keys mean for a model or a tokenizer is model/'s and
 * tokenizer/'s business.
 *
 * Layout (little-endian; versions 2 and 3, which differ only in allowing big-endian files,
 * which are refused here):
 *   "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv x (string key, u32 value type, value),
 *   n_tensors x (string name, u32 n_dims, n_dims x u64 ne, u32 ggml type, u64 offset),
 *   padding to general.alignment (default 32), then the tensor data; each tensor at its offset
 *   from there, a multiple of the alignment.
 * A string is a u64 length and that many bytes (no NUL); an array is a u32 element type, a u64
 * count and the elements. ne[0] is the innermost dimension: a row-major (rows, cols) matrix
 * has ne = {cols, rows}.
 *
 * The reader treats the file as hostile: every count, length, dimension and offset is checked
 * against the bytes that remain before it is used or multiplied (arrays cannot claim more
 * elements than bytes are left, dims cannot overflow, tensor data lies inside the file,
 * aligned, and no two tensors overlap), duplicate keys and tensor names are refused, arrays of
 * arrays are skipped (depth-limited; they have no accessor), and every failure is
 * PL_ERR_FORMAT (PL_ERR_UNSUPPORTED for a valid file this code cannot read: version 1, a
 * big-endian file, a tensor type id it does not know) naming the file and the key, tensor or
 * byte offset. A parsed pl_gguf points into the caller's buffer and holds no copy of it.
 *
 * Tensor types: pl_gguf_type_info has one row per ggml type id this code knows the block
 * layout of (so every tensor's size can be checked, whatever its type), and pl_gguf_wtype
 * maps a row to the weight storage type of util/wtype.h that has the same name and block
 * layout, or to PL_WTYPE_NONE when this build has no such row: a new block-quantised row in
 * wtype.h is picked up here with no change.
 */
#ifndef PL_GGUF_H
#define PL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"
#include "util/wtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PL_GGUF_DEFAULT_ALIGNMENT 32
#define PL_GGUF_MAX_DIMS 4
/* Longest key and tensor name accepted (the format's own limits are 65535 and 64 bytes). */
#define PL_GGUF_MAX_KEY 65535
#define PL_GGUF_MAX_NAME 256

typedef enum pl_gguf_vtype {
    PL_GGUF_U8 = 0,
    PL_GGUF_I8 = 1,
    PL_GGUF_U16 = 2,
    PL_GGUF_I16 = 3,
    PL_GGUF_U32 = 4,
    PL_GGUF_I32 = 5,
    PL_GGUF_F32 = 6,
    PL_GGUF_BOOL = 7,
    PL_GGUF_STRING = 8,
    PL_GGUF_ARRAY = 9,
    PL_GGUF_U64 = 10,
    PL_GGUF_I64 = 11,
    PL_GGUF_F64 = 12,
    PL_GGUF_VTYPE_COUNT
} pl_gguf_vtype;

/* "u32", "string", ... ("?" for a value outside the enum). */
const char *pl_gguf_vtype_name(pl_gguf_vtype t);

/* A string inside the file: n bytes at p, not NUL-terminated. */
typedef struct pl_gguf_str {
    const char *p;
    uint64_t n;
} pl_gguf_str;

/* One key/value. For arrays, elem and n describe the elements and data points at the first;
 * for a scalar or a string, data points at the value's bytes (a string's u64 length). */
typedef struct pl_gguf_kv {
    pl_gguf_str key;
    pl_gguf_vtype type;
    pl_gguf_vtype elem; /* arrays only */
    uint64_t n;         /* arrays only: the element count */
    const uint8_t *data;
    uint64_t n_bytes;   /* bytes of the value (for copying it verbatim) */
} pl_gguf_kv;

/* A ggml tensor type whose block layout this code knows. */
typedef struct pl_gguf_type_info {
    uint32_t id;      /* the ggml type id stored in the file */
    const char *name; /* "F32", "Q4_K", ... as llama.cpp prints them */
    int block_elems;
    int block_bytes;
} pl_gguf_type_info;

typedef struct pl_gguf_tensor {
    pl_gguf_str name;
    int n_dims;
    uint64_t ne[PL_GGUF_MAX_DIMS]; /* ne[0] innermost; unused dims are 1 */
    const pl_gguf_type_info *type;
    uint64_t offset;               /* from the start of the data section */
    uint64_t n_bytes;
    const uint8_t *data;           /* inside the buffer parsed */
} pl_gguf_tensor;

typedef struct pl_gguf {
    const char *name;              /* for messages; borrowed from the caller */
    const uint8_t *base;           /* the buffer parsed (borrowed) */
    size_t size;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;          /* where the data section starts */
    pl_gguf_kv *kv;                /* (n_kv) in file order */
    size_t n_kv;
    uint32_t *kv_by_key;           /* (n_kv) indices sorted by key */
    pl_gguf_tensor *tensors;       /* (n_tensors) in file order */
    size_t n_tensors;
    uint32_t *by_name;             /* (n_tensors) indices sorted by name */
} pl_gguf;

/* Parses a GGUF file held in data[0..size) (a mapping). name is used in messages and must
 * outlive *out. On failure *out is zeroed and nothing is left to free. */
pl_status pl_gguf_parse(const void *data, size_t size, const char *name, pl_gguf *out);
void pl_gguf_free(pl_gguf *g); /* zeroed or parsed; leaves it zeroed */

/* A file mapped read-only and parsed (for readers that need only the metadata: the
 * tokenizer). PL_ERR_IO naming the path, then pl_gguf_parse's errors. */
typedef struct pl_gguf_file {
    pl_gguf g;
    char *path;
    void *map;
    size_t size;
} pl_gguf_file;
pl_status pl_gguf_open(const char *path, pl_gguf_file *out);
void pl_gguf_close(pl_gguf_file *f); /* zeroed or opened; leaves it zeroed */

/* True when data starts with the GGUF magic. */
bool pl_gguf_has_magic(const void *data, size_t size);

/* ---- metadata ---- */

const pl_gguf_kv *pl_gguf_find(const pl_gguf *g, const char *key); /* NULL when absent */

/* Typed getters. Each fails with PL_ERR_FORMAT naming the file and the key when the key is
 * present with another type or out of [lo, hi]; an absent key gives dflt, or PL_ERR_FORMAT
 * ("... is missing") when required. Integers accept every integer type (and bool does not);
 * floats accept f32 and f64. */
pl_status pl_gguf_get_int(const pl_gguf *g, const char *key, bool required, int64_t dflt,
                          int64_t lo, int64_t hi, int64_t *out);
pl_status pl_gguf_get_float(const pl_gguf *g, const char *key, bool required, double dflt,
                            double *out);
pl_status pl_gguf_get_bool(const pl_gguf *g, const char *key, bool required, bool dflt,
                           bool *out);
/* A string value; absent: out->p NULL (or an error when required). */
pl_status pl_gguf_get_str(const pl_gguf *g, const char *key, bool required, pl_gguf_str *out);
/* An array of elem (strings too); absent: *out NULL (or an error when required). */
pl_status pl_gguf_get_array(const pl_gguf *g, const char *key, pl_gguf_vtype elem, bool required,
                            const pl_gguf_kv **out);

/* Element i of a numeric array as int64 (integer element types) or double (f32, f64). i must
 * be below kv->n. */
int64_t pl_gguf_array_int(const pl_gguf_kv *kv, uint64_t i);
double pl_gguf_array_float(const pl_gguf_kv *kv, uint64_t i);

/* Walks a string array in order: start with *pos = kv->data; each call gives the next string
 * (the array's bytes were checked at parse time). */
pl_gguf_str pl_gguf_array_next_str(const uint8_t **pos);

/* True when s equals the NUL-terminated c. */
bool pl_gguf_str_eq(pl_gguf_str s, const char *c);

/* ---- tensors ---- */

const pl_gguf_tensor *pl_gguf_tensor_find(const pl_gguf *g, const char *name); /* NULL: absent */

/* ---- tensor types ---- */

/* The row of ggml type id, or NULL when this code does not know its blocks. */
const pl_gguf_type_info *pl_gguf_type_info_of(uint32_t id);
/* The row named name (case-insensitive: "q4_k", "F16"), or NULL. */
const pl_gguf_type_info *pl_gguf_type_by_name(const char *name);
/* The weight type of util/wtype.h with the same name and block layout, or PL_WTYPE_NONE when
 * this build stores no such type (the tensor can be read past, not used). */
pl_wtype pl_gguf_wtype(const pl_gguf_type_info *ti);
/* The row for a weight type (NULL when GGUF has no such type). */
const pl_gguf_type_info *pl_gguf_type_of_wtype(pl_wtype t);

/* ---- writing ----
 *
 * Build the metadata and the tensor directory, then write the file in one pass: header, keys,
 * tensor infos, padding, and each tensor's bytes, either given when added or produced by the
 * fill callback at write time (so a converter holds one converted tensor at a time). The file
 * is written to "<path>.tmp" and renamed over path when complete. Keys are written in the
 * order added; adding a key twice replaces nothing and fails. */
typedef struct pl_gguf_writer pl_gguf_writer;

pl_status pl_gguf_writer_create(pl_gguf_writer **out);
void pl_gguf_writer_free(pl_gguf_writer *w); /* NULL is a no-op */

pl_status pl_gguf_add_u32(pl_gguf_writer *w, const char *key, uint32_t v);
pl_status pl_gguf_add_i32(pl_gguf_writer *w, const char *key, int32_t v);
pl_status pl_gguf_add_u64(pl_gguf_writer *w, const char *key, uint64_t v);
pl_status pl_gguf_add_f32(pl_gguf_writer *w, const char *key, float v);
pl_status pl_gguf_add_bool(pl_gguf_writer *w, const char *key, bool v);
pl_status pl_gguf_add_str(pl_gguf_writer *w, const char *key, const char *s, size_t len);
/* An array of n fixed-size elements (not STRING or ARRAY) from data (copied). */
pl_status pl_gguf_add_array(pl_gguf_writer *w, const char *key, pl_gguf_vtype elem,
                            const void *data, size_t n);
/* An array of n strings: strs[i] of lens[i] bytes (lens NULL: NUL-terminated). Copied. */
pl_status pl_gguf_add_str_array(pl_gguf_writer *w, const char *key, const char *const *strs,
                                const size_t *lens, size_t n);
/* A key/value of another file, copied as it is (its key too). */
pl_status pl_gguf_add_kv_copy(pl_gguf_writer *w, const pl_gguf_kv *kv);
/* True when the writer has key already. */
bool pl_gguf_writer_has(const pl_gguf_writer *w, const char *key);

/* Called at write time for a tensor added without data: writes its n_bytes into dst. */
typedef pl_status (*pl_gguf_fill_fn)(void *ctx, size_t index, void *dst, size_t n_bytes);

/* Adds a tensor of type ti and dims ne[0..n_dims) (ne[0] innermost, a whole number of
 * blocks). data (n_bytes, borrowed until the write) or NULL for the fill callback. Its index
 * (0, 1, ...) is what the callback receives. */
pl_status pl_gguf_add_tensor(pl_gguf_writer *w, const char *name, const pl_gguf_type_info *ti,
                             int n_dims, const uint64_t *ne, const void *data);

/* Writes the file (alignment PL_GGUF_DEFAULT_ALIGNMENT unless general.alignment was added).
 * PL_ERR_IO naming the path; errors of fill are passed on. */
pl_status pl_gguf_writer_write(pl_gguf_writer *w, const char *path, pl_gguf_fill_fn fill,
                               void *ctx);

#ifdef __cplusplus
}
#endif
#endif
