/*
 * model/model_internal.h - what the loaders in model/ share: memory-mapped files with bounds
 * checks, overflow-checked size arithmetic, the model's backing store (mappings and heap
 * blocks its weights point into), weight binding with dtype conversion, config checks.
 *
 * Invariants:
 * - A loader never reads a byte of a mapping before checking that [offset, offset + len) lies
 *   inside the file (pl_model_file_has); every size is computed in uint64_t through the
 *   checked helpers below, so a hostile header cannot wrap an offset back into the file.
 * - Everything a pl_model's weights point into is owned by its backing (m->priv) and lives
 *   until pl_model_free; a failed load frees what it made, so nothing is returned half-built.
 */
#ifndef PL_MODEL_INTERNAL_H
#define PL_MODEL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- limits: far above any real LLaMA-family model, far below what would overflow ----
 * They let a header claiming 10^9 layers fail on the field itself, before any size math. */
#define PL_MODEL_MAX_DIM (1 << 16)
#define PL_MODEL_MAX_HIDDEN (1 << 20)
#define PL_MODEL_MAX_LAYERS 1024
#define PL_MODEL_MAX_HEADS 1024
#define PL_MODEL_MAX_HEAD_DIM 1024
#define PL_MODEL_MAX_VOCAB (1 << 22)
#define PL_MODEL_MAX_SEQ (1 << 24)

/* ---- checked arithmetic ---- */
static inline bool pl_model_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool pl_model_add_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* ---- memory-mapped files (file_map.c) ---- */
typedef struct pl_model_file {
    char *path;          /* owned copy, for messages */
    const uint8_t *data; /* (size) bytes, read-only mapping; NULL when size is 0 */
    size_t size;
} pl_model_file;

/* Maps a regular file read-only. PL_ERR_IO names the path and the system error; a directory
 * or device is refused (mapping one could block or have no size). */
pl_status pl_model_file_map(const char *path, pl_model_file *out);
void pl_model_file_unmap(pl_model_file *f); /* zeroed or mapped; leaves it zeroed */
/* True when [off, off + len) lies inside the file (overflow-safe). */
bool pl_model_file_has(const pl_model_file *f, uint64_t off, uint64_t len);

/* ---- backing store and weight binding (backing.c) ---- */
typedef struct pl_model_backing {
    pl_model_file *files; /* (n_files) mappings that weights may point into */
    size_t n_files;
    void **bufs;          /* (n_bufs) heap blocks owned by the model; room for cap_bufs */
    size_t n_bufs, cap_bufs;
} pl_model_backing;

/* Allocates a model shell: the struct, its layers (n_layers, zeroed weights), its backing and
 * a copy of name. Fails with PL_ERR_OUT_OF_MEMORY. */
pl_status pl_model_shell_create(const pl_model_config *cfg, const char *name, pl_model **out);
/* Allocates n_bytes owned by m (freed with it), zeroed, 64-byte aligned, and from 4 MiB on in
 * transparent huge pages (pl_calloc_aligned with huge: large blocks are fresh pages, so the
 * zeroing costs nothing until touched). */
pl_status pl_model_own_alloc(pl_model *m, size_t n_bytes, void **out);
/* Moves a mapping into m's backing (takes ownership; *f is zeroed even on failure, when the
 * mapping is unmapped). */
pl_status pl_model_own_file(pl_model *m, pl_model_file *f);

/* Points w at a (rows, cols) tensor stored as src_dtype at src. When want is AUTO or equal to
 * src_dtype and src is aligned for its type, w aliases src (zero copy); otherwise the tensor
 * is converted into a buffer owned by m. `name` is only for messages. */
pl_status pl_model_bind(pl_model *m, pl_weight *w, const void *src, pl_dtype src_dtype, int rows,
                        int cols, pl_dtype want, const char *name);

/* ---- config checks (config.c) ---- */
/* Checks every field of cfg against the limits above and the model's own rules (heads divide,
 * even head_dim, ids inside the vocabulary, finite positive eps/theta, sane rope scaling).
 * Fails with `code` and a message "<what>: <field> = <value> ...". */
pl_status pl_model_config_check(const pl_model_config *cfg, pl_status code, const char *what);
/* llama2.c's fixed conventions (eps 1e-5, theta 10000, interleaved RoPE, BOS 1 / EOS 2 with BOS
 * ending a story), on top of whatever dims cfg already holds. */
void pl_model_config_llama2c_defaults(pl_model_config *cfg);

/* ---- the memory limit (model.c) ---- */
/* With max_weight_bytes set (not 0), refuses (PL_ERR_OUT_OF_MEMORY, naming `name`, the bytes
 * and the limit) a model of cfg whose matrices will be stored as dtype (F32/F16/BF16, the type
 * after any conversion). Loaders call it once the header or config is checked and before any
 * weight is read, converted or generated, so a model that cannot fit costs nothing to refuse. */
pl_status pl_model_check_weight_limit(const char *name, const pl_model_config *cfg,
                                      pl_dtype dtype, uint64_t max_weight_bytes);

/* ---- loaders (max_weight_bytes: see pl_model_load_within) ---- */
pl_status pl_model_load_llama2c(const char *path, const pl_model_load_options *opt,
                                uint64_t max_weight_bytes, pl_model **out);
/* dir holds config.json; weights names the safetensors file or index to read, or NULL for
 * the directory's model.safetensors.index.json, else model.safetensors. */
pl_status pl_model_load_hf(const char *dir, const char *weights, const pl_model_load_options *opt,
                           uint64_t max_weight_bytes, pl_model **out);
pl_status pl_model_load_dummy(const char *preset, const pl_model_load_options *opt,
                              uint64_t max_weight_bytes, pl_model **out);

#ifdef __cplusplus
}
#endif
#endif
