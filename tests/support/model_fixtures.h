/*
 * tests/support/model_fixtures.h - tiny random models written in every format the model
 * module loads, and helpers to damage files, for the loader tests and the end-to-end tests.
 *
 * The writers are written from the format descriptions (../shared/models/README.md, llama2.c's
 * export.py design, the safetensors layout), not from the loaders, so a loader bug is not
 * mirrored here. Typical use:
 *
 *     pl_model_config c; pl_fixture_random_config(&rng, &c);
 *     pl_model *ref = pl_fixture_model(&c, seed);           // f32 random weights
 *     pl_fixture_write_llama2c(ref, "/tmp/x/model.bin");
 *     pl_fixture_write_hf(ref, "/tmp/x/hf", &(pl_fixture_hf_options){.dtype = PL_DTYPE_BF16});
 *     ... pl_model_load(...) each, then pl_fixture_compare(ref, loaded, atol, rtol)
 *
 * RoPE layouts: the llama2.c formats store q/k rows in Meta's interleaved order, HF in
 * rotate-half order. Each writer permutes q_proj/k_proj rows when the model's rope_layout is
 * the other one (as Hugging Face's conversion script does), so every written file computes
 * the same function as the in-memory model. pl_fixture_compare undoes the permutation when the
 * two models' layouts differ.
 *
 * All functions return false (or NULL) on failure after printing the reason on stderr.
 */
#ifndef PL_TEST_MODEL_FIXTURES_H
#define PL_TEST_MODEL_FIXTURES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "test_support.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- models ---- */

/* A random small config: head_dim even in [2, 16], n_kv_heads in [1, 3], 1-3 query heads per
 * KV head, dim = n_heads * head_dim, odd hidden sizes, 1-3 layers, vocab in [3, 202],
 * max_seq_len in [8, 127], tied or not, interleaved RoPE, theta 10000, eps 1e-5, BOS 1, EOS 2,
 * no rope scaling (llama2.c-compatible, so every format can hold it). */
void pl_fixture_random_config(pl_test_rng *r, pl_model_config *out);

/* A fixed small config of a family (Llama with Llama 3's numerics, Mistral, Qwen2, Qwen3) with
 * odd sizes, grouped-query attention, rotate-half RoPE and max_seq_len 256; tied embeddings
 * for even variants, untied for odd. Llama: theta 500000, llama3 RoPE scaling, EOS ids
 * {2, 5, 7}; Mistral: sliding_window 256 (the whole context: narrow it to test the window);
 * Qwen2: q/k/v biases, EOS {2, 4}; Qwen3: head_dim 14 != dim / n_heads (40 / 4), q/k norms,
 * EOS {2, 3}. BOS 1. */
void pl_fixture_family_config(pl_arch arch, int variant, pl_model_config *out);

/* pl_fixture_family_config with sizes tensor parallelism can split: heads, KV heads (Mistral
 * keeps its one, replicated over the ranks) and FFN units over 2 ranks; Llama's variants 2
 * and 3 have 8 heads and 2 KV heads, which 4 ranks split (each KV head kept by two). The
 * vocabularies stay odd: the last rank's share of the output projection is smaller. */
void pl_fixture_tp_config(pl_arch arch, int variant, pl_model_config *out);

/* RoPE scaling as a Hugging Face config.json states it in "rope_scaling": {"type": "linear",
 * "factor"} or {"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
 * "original_max_position_embeddings"}. Only pl_fixture_write_hf stores it (the llama2.c
 * formats have no field for it: their writers refuse a scaled config). The weights
 * pl_fixture_model draws do not depend on the scaling, so the same seed gives the same
 * weights scaled and unscaled. */
void pl_fixture_set_rope_linear(pl_model_config *c, float factor);
void pl_fixture_set_rope_llama3(pl_model_config *c, float factor, float low_freq_factor,
                                float high_freq_factor, int original_max_position_embeddings);

/* A model of cfg with f32 weights drawn from seed (matrices uniform in +-1/sqrt(fan_in),
 * embeddings +-1, norms 1 +- 0.25, biases +-0.5), every tensor its architecture has. Free
 * with pl_model_free. */
pl_model *pl_fixture_model(const pl_model_config *cfg, uint64_t seed);

/* pl_fixture_model with gains that make greedy tokens wander: with the usual init a small
 * random model repeats one token (tied, a token's own logit is |e|^2 and the layers add
 * little), and 200 repeats of it compare little. The embedding x0.3, q and k x4 (sharper
 * attention), o x6, down x0.3, biases x0.2 (a large v bias pulls every step one way), q/k
 * norms x3 (they undo the q/k gain). Measured on the family configs, seed 11: 15 to 70
 * distinct tokens in 200 greedy ones (1 to 37 without). */
pl_model *pl_fixture_family_model(const pl_model_config *cfg, uint64_t seed);

/* True when every weight of got equals ref's within |got - ref| <= atol + rtol * |ref|
 * (0, 0 = bit-exact), reading both in f32 whatever their dtypes, and the dims agree. Rows of
 * q/k (and their biases, and the elements of q/k norms) are matched through the RoPE
 * permutation when the rope layouts differ. Prints the first mismatch. */
bool pl_fixture_compare(const pl_model *ref, const pl_model *got, float atol, float rtol);

/* Row permutations of a q or k projection (n_heads * head_dim, cols) between layouts:
 * rotate-half row h*hd + p*hd/2 + j holds interleaved row h*hd + 2j + p. */
void pl_fixture_permute_to_half(float *dst, const float *src, int n_heads, int head_dim,
                                int cols);
void pl_fixture_permute_to_interleaved(float *dst, const float *src, int n_heads, int head_dim,
                                       int cols);

/* ---- writers ---- */

/* llama2.c legacy checkpoint: 7 int32 header (vocab_size negated when the model is untied),
 * f32 tensors, freq_cis tables, wcls when untied. Needs a Llama model with head_dim ==
 * dim / n_heads, and (as for ak42) rope_theta 10000 without scaling: the format cannot say
 * otherwise, and a file
 * that silently computes another function than m would make every comparison meaningless. */
bool pl_fixture_write_llama2c(const pl_model *m, const char *path);
/* llama2.c "ak42" version 1: 256-byte header, f32 tensors in export.py's version-1 order. */
bool pl_fixture_write_ak42(const pl_model *m, const char *path);

typedef struct pl_fixture_hf_options {
    pl_dtype dtype;        /* F32 (also for AUTO), F16 or BF16: every tensor, norms too */
    int n_shards;          /* <= 1: model.safetensors; else shards + model.safetensors.index.json */
    bool misalign;         /* header length = 1 mod 8, so tensor data is not type-aligned */
    bool lm_head_when_tied;/* also write lm_head.weight for a tied model */
    bool omit_tie_key;     /* leave tie_word_embeddings out of config.json */
} pl_fixture_hf_options;

/* A Hugging Face directory (created if missing): config.json (the model's architecture, as
 * transformers writes that family's: Mistral's sliding_window, Qwen's use_sliding_window
 * false, Qwen3's head_dim), generation_config.json when the model has several EOS ids
 * (config.json then holds the first, as Llama 3 ships them), and safetensors with the
 * biases and q/k norms the architecture has. opt may be NULL (f32, one file). */
bool pl_fixture_write_hf(const pl_model *m, const char *dir, const pl_fixture_hf_options *opt);
/* Only config.json (and generation_config.json) for m's config (used by
 * pl_fixture_write_hf). */
bool pl_fixture_write_hf_config(const pl_model_config *c, const char *dir, bool omit_tie_key);

/* Every format at once, under dir (created if missing), at the relative paths listed by
 * pl_fixture_formats(): llama2.c legacy, ak42 v1, and HF directories in F32, F16, BF16 and
 * F32 in 3 shards. The llama2.c files are tied or untied as m is. */
bool pl_fixture_write_all(const pl_model *m, const char *dir);
typedef struct pl_fixture_format {
    const char *path;  /* relative to the directory given to pl_fixture_write_all */
    pl_dtype stored;   /* the type the matrices are stored in */
} pl_fixture_format;
/* The formats pl_fixture_write_all writes; ends with {NULL, 0}. Static storage. */
const pl_fixture_format *pl_fixture_formats(void);

/* A safetensors file from a header given as text (written verbatim after its uint64 length)
 * and a data section: for hand-made hostile headers. */
bool pl_fixture_write_safetensors_raw(const char *path, const char *header, const void *data,
                                      size_t n_data);

/* ---- files ---- */

/* Reads a whole file into *out (malloc'd, caller frees with free()). */
bool pl_fixture_read_file(const char *path, uint8_t **out, size_t *n);
bool pl_fixture_write_file(const char *path, const void *data, size_t n);
/* Cuts the file to its first n bytes. */
bool pl_fixture_truncate(const char *path, size_t n);
/* Writes n bytes at offset (extending the file if needed). */
bool pl_fixture_overwrite(const char *path, size_t offset, const void *bytes, size_t n);
/* Removes dir and everything in it (for scratch directories from pl_test_tmpdir). */
bool pl_fixture_remove_dir(const char *dir);
/* "<dir>/<name>" in one of four rotating per-thread buffers: valid until the fourth next call
 * (the writers call it too: copy a path you keep across them). */
const char *pl_fixture_path(const char *dir, const char *name);

#ifdef __cplusplus
}
#endif
#endif
