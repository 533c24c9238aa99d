/*
 * model/model_internal.h - what the loaders in model/ share: memory-mapped files with bounds
 * checks, overflow-checked size arithmetic, the model's backing store (mappings and heap
 * blocks its weights point into), weight binding with type conversion, config checks, the
 * memory limit. The front door (model.c) calls the loaders; the loaders call only these.
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

/* Allocates a model shell: the struct, its weight slots (all zeroed: absent), its backing and
 * a copy of name. Fails with PL_ERR_OUT_OF_MEMORY. */
pl_status pl_model_shell_create(const pl_model_config *cfg, const char *name, pl_model **out);
/* Allocates n_bytes owned by m (freed with it), zeroed, 64-byte aligned, and from 4 MiB on in
 * transparent huge pages (pl_calloc_aligned with huge: large blocks are fresh pages, so the
 * zeroing costs nothing until touched). */
pl_status pl_model_own_alloc(pl_model *m, size_t n_bytes, void **out);
/* Moves a mapping into m's backing (takes ownership; *f is zeroed even on failure, when the
 * mapping is unmapped). */
pl_status pl_model_own_file(pl_model *m, pl_model_file *f);

/* Points the slot of (role, layer) at the tensor stored as src_type at src, shaped as m->cfg
 * says (pl_model_tensor_shape), in the type the table gives it: f32 for norms and biases,
 * `matrices` for matrices (PL_WTYPE_NONE: as stored). When that is src_type and src is
 * aligned for it, the weight aliases src (zero copy); otherwise the tensor is converted into a
 * buffer owned by m. `name` is only for messages. */
pl_status pl_model_bind(pl_model *m, pl_tensor_role role, int layer, const void *src,
                        pl_wtype src_type, pl_wtype matrices, const char *name);
/* Ties the output projection to the embedding (same data) when m->cfg.tied_embeddings. */
void pl_model_tie_output(pl_model *m);
/* Walks every stored tensor of c in model order, placing each at the next 64-byte boundary;
 * with base, points m's slots there. Total bytes into *total; false on overflow or a shape
 * the type cannot hold (weights.c). */
bool pl_model_layout(pl_model *m, const pl_model_config *c, pl_wtype matrices, uint8_t *base,
                     uint64_t *total);

/* ---- config checks (config.c) ---- */
/* Checks every field of cfg against the limits above and the model's own rules (a known
 * architecture, heads divide, even head_dim, ids inside the vocabulary, finite positive
 * eps/theta, sane rope scaling, a window only where the architecture has one). Fails with
 * `code` and a message "<what>: <field> = <value> ...", the field called by its name in the
 * file: keys holds (field, name in the file) pairs, NULL-terminated (NULL: the field names of
 * pl_model_config). */
pl_status pl_model_config_check(const pl_model_config *cfg, pl_status code, const char *what,
                                const char *const *keys);

/* ---- Hugging Face config.json + generation_config.json (hf_config.c) ---- */
/* Reads dir's config.json (and generation_config.json when present) into out, checked with
 * pl_model_config_check. *tie_set tells whether config.json gave tie_word_embeddings.
 * Errors: PL_ERR_IO, PL_ERR_FORMAT and PL_ERR_UNSUPPORTED naming the file and the key. */
pl_status pl_model_hf_config(const char *dir, pl_model_config *out, bool *tie_set);
/* llama2.c's fixed conventions (Llama, eps 1e-5, theta 10000, interleaved RoPE, BOS 1, and
 * EOS 2 and BOS 1 ending a text: a story ends with BOS), on top of whatever dims cfg holds. */
void pl_model_config_llama2c_defaults(pl_model_config *cfg);
/* Adds id to cfg's EOS set unless it is there. False when the set is full. */
bool pl_model_config_add_eos(pl_model_config *cfg, int id);

/* ---- the memory limit (weights.c) ---- */
/* With max_weight_bytes set (not 0), refuses (PL_ERR_OUT_OF_MEMORY, naming `name`, the bytes
 * and the limit) a model of cfg whose matrices will be stored as `matrices` (the type after
 * any conversion). Loaders call it once the header or config is checked and before any weight
 * is read, converted or generated, so a model that cannot fit costs nothing to refuse. */
pl_status pl_model_check_weight_limit(const char *name, const pl_model_config *cfg,
                                      pl_wtype matrices, uint64_t max_weight_bytes);

/* ---- RoPE frequency factors, as GGUF stores Llama 3 scaling (gguf_rope.c) ---- */
/* llama.cpp keeps Llama 3.1's scaling as a tensor, rope_freqs.weight: head_dim / 2 factors
 * that divide the unscaled frequencies. The factors of c's scaling into out (head_dim / 2). */
void pl_model_rope_freq_factors(const pl_model_config *c, float *out);
/* Sets c's rope scaling (none, linear or llama3; theta and head_dim set already) to one that
 * reproduces factors[0 .. head_dim / 2) to 1e-5, with orig_ctx as llama3's original context
 * (its thresholds are only defined relative to it). PL_ERR_UNSUPPORTED naming `what` when no
 * such scaling exists. */
pl_status pl_model_rope_from_factors(pl_model_config *c, const float *factors, int orig_ctx,
                                     const char *what);

/* ---- the tokenizer beside a model (tokenizer_beside.c) ---- */
/* Sets m->tokenizer_path to the first of names (NULL-terminated) that is a readable file in
 * dir, or leaves it NULL. Fails only with PL_ERR_OUT_OF_MEMORY. */
pl_status pl_model_find_tokenizer(pl_model *m, const char *dir, const char *const *names);

/* ---- loaders (max_weight_bytes: see pl_model_load_within) ---- */
pl_status pl_model_load_llama2c(const char *path, const pl_model_load_options *opt,
                                uint64_t max_weight_bytes, pl_model **out);
/* dir holds config.json; weights names the safetensors file or index to read, or NULL for
 * the directory's model.safetensors.index.json, else model.safetensors. */
pl_status pl_model_load_hf(const char *dir, const char *weights, const pl_model_load_options *opt,
                           uint64_t max_weight_bytes, pl_model **out);
/* A GGUF file (load_gguf.c): llama, qwen2 and qwen3 files with F32/F16/BF16 tensors (and
 * any block type util/wtype.h has a row for). */
pl_status pl_model_load_gguf(const char *path, const pl_model_load_options *opt,
                             uint64_t max_weight_bytes, pl_model **out);
pl_status pl_model_load_dummy(const char *preset, const pl_model_load_options *opt,
                              uint64_t max_weight_bytes, pl_model **out);

#ifdef __cplusplus
}
#endif
#endif
