/*
 * model/model.h - a decoder model's configuration and host weights, and its loaders.
 *
 * The model is RMSNorm -> attention (RoPE, grouped-query; q/k/v biases in Qwen2, per-head q/k
 * RMSNorm in Qwen3, a sliding window in Mistral) -> residual -> RMSNorm -> SwiGLU FFN ->
 * residual, n_layers times, then a final RMSNorm and the output projection. Which tensors a
 * model has, their shapes and their names in each file format are data: model/arch.h. The
 * weights live in one array indexed by (role, layer) through pl_model_weight.
 *
 * Loaders validate every size and offset against the file length before touching data, and
 * memory-map where the format allows (the weights then point into the mapping). Norms and
 * biases are always f32 (converted at load); matrices keep the stored type unless a dtype is
 * asked for. Nothing here knows about backends: the runner uploads what it needs.
 *
 * The module: model.c (the front door: picks a loader by path) -> load_hf.c, load_llama2c.c,
 * load_gguf.c, dummy.c (one per source; save_gguf.c writes GGUF) -> the helpers they share
 * (config.c, weights.c, backing.c, file_map.c, safetensors.c, gguf_rope.c, arch.c); the
 * arrows run one way.
 */
#ifndef PL_MODEL_H
#define PL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/arch.h"
#include "util/status.h"
#include "util/wtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pl_rope_scaling_kind {
    PL_ROPE_SCALING_NONE = 0,
    PL_ROPE_SCALING_LINEAR = 1, /* positions divided by factor */
    PL_ROPE_SCALING_LLAMA3 = 2, /* Llama 3.1 frequency-dependent scaling */
} pl_rope_scaling_kind;

#define PL_MODEL_MAX_EOS 16

typedef struct pl_model_config {
    pl_arch arch;     /* the family: which tensors exist and how they combine (model/arch.h) */
    int dim;          /* hidden size */
    int hidden_dim;   /* FFN inner size */
    int n_layers;
    int n_heads;
    int n_kv_heads;   /* n_heads % n_kv_heads == 0 */
    int head_dim;     /* dim / n_heads unless the config says otherwise (Qwen3) */
    int vocab_size;
    int max_seq_len;  /* the model's context length */
    float norm_eps;   /* RMSNorm epsilon (1e-5 for llama2.c); also the q/k norms' */
    float rope_theta; /* 10000 for Llama 1/2 */
    int rope_layout;  /* a pl_rope_layout value: 0 interleaved (llama2.c), 1 rotate-half (HF) */
    pl_rope_scaling_kind rope_scaling;
    float rope_factor;             /* linear and llama3 */
    float rope_low_freq_factor;    /* llama3 */
    float rope_high_freq_factor;   /* llama3 */
    int rope_original_max_pos;     /* llama3 */
    int sliding_window;            /* 0 = none; else a position attends to itself and the
                                      sliding_window - 1 before it (Mistral) */
    bool tied_embeddings;          /* the output projection shares the embedding's data */
    int bos_id;                    /* -1 if none */
    int eos_ids[PL_MODEL_MAX_EOS]; /* (n_eos) ids that end a text: config.json's and
                                      generation_config.json's eos_token_id (an id or a list);
                                      for llama2.c models EOS 2 and BOS 1 (a story ends with
                                      BOS: EOS was never trained) */
    int n_eos;                     /* 0 = none known (the tokenizer's EOS is used) */
} pl_model_config;

/* A host tensor: row-major (rows, cols) of type, at data; a vector has rows 1. An absent
 * tensor has data NULL. */
typedef struct pl_weight {
    const void *data;
    pl_wtype type;
    int rows;
    int cols;
} pl_weight;

/* One tensor-parallel rank's part of a model (model/shard.c has the split). size 0 or 1: the
 * whole model. */
typedef struct pl_model_shard_plan {
    int rank, size;
    int n_heads, head0;       /* this rank's query heads: head0 .. head0 + n_heads - 1 */
    int n_kv_heads, kv_head0; /* its KV heads (one, shared with other ranks, when replicated) */
    bool kv_replicated;       /* fewer KV heads than ranks */
    int hidden, hidden0;      /* its FFN units */
    int vocab, vocab0;        /* its rows of the output projection */
    int vocab_stride;         /* ceil(vocab_size / size): rank r's rows start at r * stride */
} pl_model_shard_plan;

typedef struct pl_model {
    pl_model_config cfg;
    pl_weight *w;          /* (pl_model_n_slots(&cfg)) in model order: see pl_model_weight */
    char *tokenizer_path;  /* a tokenizer found beside the model, or NULL */
    char *name;            /* file name or dummy preset, for messages */
    void *priv;            /* loader-owned backing: mapping, converted copies */
    pl_model_shard_plan shard; /* size > 1: w holds only this rank's slices (cfg stays whole;
                                  a tied output projection then has its own slot) */
} pl_model;

/* The split of a model of c for rank of size ranks. PL_ERR_UNSUPPORTED, with the numbers and
 * the flag, when it cannot be made: heads, KV heads (neither a multiple of the other), FFN
 * units not divisible by the ranks, or a vocabulary too small. */
pl_status pl_model_shard_plan_make(const pl_model_config *c, int rank, int size,
                                   pl_model_shard_plan *out);
/* A new model holding rank's part of m (m unchanged; the result is independent of it). */
pl_status pl_model_shard_copy(const pl_model *m, int rank, int size, pl_model **out);
/* Keeps only rank's part of m (copied into m's own buffers; the whole model's mapping or
 * memory is released). Also PL_ERR_UNSUPPORTED for a quantised matrix whose column split does
 * not fall on its blocks, naming the tensor. On failure m is unchanged. */
pl_status pl_model_shard(pl_model *m, int rank, int size);
/* m's config as this rank computes it: its heads, KV heads and FFN units (vocab_size stays
 * the whole vocabulary; the output rows are m->shard.vocab). */
void pl_model_local_config(const pl_model *m, pl_model_config *out);

// ----------------------------------------------------------------------------
// tensors by role (the tables of model/arch.h applied to a config)

/* Slots of the weight array: the embedding, n_layers x PL_T_N_LAYER layer tensors, the final
 * norm and the output projection; a tensor the architecture lacks keeps a zeroed slot. */
static inline size_t pl_model_n_slots(const pl_model_config *c) {
    return 3 + (size_t)c->n_layers * PL_T_N_LAYER;
}

/* The slot of role in layer (layer is ignored for model-wide roles). */
static inline size_t pl_model_slot(const pl_model_config *c, pl_tensor_role r, int layer) {
    if (r == PL_T_TOKEN_EMBD) return 0;
    if (pl_tensor_role_per_layer(r))
        return 1 + (size_t)layer * PL_T_N_LAYER + (size_t)(r - PL_T_FIRST_LAYER);
    return 1 + (size_t)c->n_layers * PL_T_N_LAYER + (size_t)(r - PL_T_OUTPUT_NORM);
}

/* The role and layer (-1 for model-wide) of a slot: the inverse of pl_model_slot. */
static inline pl_tensor_role pl_model_slot_role(const pl_model_config *c, size_t slot,
                                                int *layer) {
    size_t layer_slots = (size_t)c->n_layers * PL_T_N_LAYER;
    *layer = -1;
    if (slot == 0) return PL_T_TOKEN_EMBD;
    if (slot > layer_slots)
        return (pl_tensor_role)(PL_T_OUTPUT_NORM + (int)(slot - 1 - layer_slots));
    *layer = (int)((slot - 1) / PL_T_N_LAYER);
    return (pl_tensor_role)(PL_T_FIRST_LAYER + (int)((slot - 1) % PL_T_N_LAYER));
}

static inline const pl_weight *pl_model_weight(const pl_model *m, pl_tensor_role r, int layer) {
    return &m->w[pl_model_slot(&m->cfg, r, layer)];
}

/* Whether a model of c has the tensor of role: its architecture has it (biases, q/k norms);
 * the output projection always exists (tied, it is the embedding's data). */
bool pl_model_has_tensor(const pl_model_config *c, pl_tensor_role r);
/* Whether the tensor has data of its own: it exists and is not the tied output projection. */
bool pl_model_stores_tensor(const pl_model_config *c, pl_tensor_role r);
/* The size of a config dimension (1 for PL_DIM_NONE). */
int pl_model_dim(const pl_model_config *c, pl_dim d);
/* The (rows, cols) of role in a model of c: rows 1 for a vector. */
void pl_model_tensor_shape(const pl_model_config *c, pl_tensor_role r, int *rows, int *cols);
/* The type a tensor of role is stored as when matrices are stored as `matrices`. */
pl_wtype pl_model_tensor_type(pl_tensor_role r, pl_wtype matrices);

typedef struct pl_model_load_options {
    pl_dtype dtype;        /* AUTO keeps the stored type of matrices; else convert */
    uint64_t dummy_seed;   /* seed for dummy: weights */
    int dummy_vocab;       /* dummy: models: the vocabulary size when larger than the preset's
                              (the engine passes its tokenizer's); 0: the preset's */
} pl_model_load_options;

/* Loads `path`: "dummy:NAME" (a named preset with seeded random weights), a directory
 * (Hugging Face: config.json + model.safetensors or an index of shards), or a file (GGUF by
 * magic, llama2.c "ak42" versioned, else llama2.c legacy). opt may be NULL (defaults).
 * Errors: PL_ERR_IO (cannot open/read/map), PL_ERR_FORMAT (malformed: the message names the
 * file and the field or offset), PL_ERR_UNSUPPORTED (valid but not handled: architecture,
 * dtype), PL_ERR_NOT_FOUND (unknown dummy preset, missing tensor), PL_ERR_OUT_OF_MEMORY. */
pl_status pl_model_load(const char *path, const pl_model_load_options *opt, pl_model **out);
/* As pl_model_load, but a model whose weights, as they will be stored (the bytes
 * pl_model_config_weight_bytes gives for its config and storage type), exceed
 * max_weight_bytes (0 = no limit) is refused with PL_ERR_OUT_OF_MEMORY and both numbers, once
 * its header or config is read and before any weight is read, converted or generated. */
pl_status pl_model_load_within(const char *path, const pl_model_load_options *opt,
                               uint64_t max_weight_bytes, pl_model **out);
void pl_model_free(pl_model *m); /* NULL is a no-op */

/* Checks a config: a known architecture, every dim inside generous limits (a header claiming
 * 10^9 layers is refused on that field), n_heads a multiple of n_kv_heads, head_dim even,
 * eps/theta finite and positive, rope scaling parameters sane, the sliding window only where
 * the architecture has one, bos and every EOS id inside the vocabulary (bos may be -1).
 * Errors: PL_ERR_INVALID_ARGUMENT naming the field, its value and the allowed range. */
pl_status pl_model_config_validate(const pl_model_config *cfg);

/* Allocates a model for cfg with every tensor its architecture has, zeroed, model-owned and
 * writable (cast away the const of pl_weight.data): norms and biases f32, matrices of
 * `matrices` (a type with a quantiser: F32/F16/BF16 or a quantised type, whose matrices'
 * rows must then be whole blocks), the output projection sharing the
 * embedding's data when cfg->tied_embeddings. For dummy models and test fixtures that fill
 * weights themselves. name is copied (for messages).
 * Errors: PL_ERR_INVALID_ARGUMENT (bad config or type), PL_ERR_OUT_OF_MEMORY (the message
 * gives the bytes needed; also when they exceed the machine's physical memory). */
pl_status pl_model_alloc(const pl_model_config *cfg, pl_wtype matrices, const char *name,
                         pl_model **out);

/* The names accepted after "dummy:", NULL-terminated. Static storage. */
const char *const *pl_model_dummy_names(void);
/* The config of a dummy preset ("tiny" or "dummy:tiny"), without generating any weight (to
 * size memory before loading). Errors: PL_ERR_NOT_FOUND (unknown name), INVALID_ARGUMENT. */
pl_status pl_model_dummy_config(const char *name, pl_model_config *out);

/* Rotary inverse frequencies (head_dim / 2 floats) with the config's theta and scaling:
 * inv_freq[j] = theta^(-2j / head_dim), then scaled. */
void pl_model_rope_inv_freq(const pl_model_config *cfg, float *out);

/* Bytes every weight of a model of cfg takes when its matrices are stored as `matrices` and
 * its norms and biases as f32, each tensor from a 64-byte boundary: exactly what
 * pl_model_alloc allocates, and what pl_model_load_within checks max_weight_bytes against, so
 * a model can be sized from its config alone. Sizes come from the type's blocks.
 * Errors: PL_ERR_INVALID_ARGUMENT (bad config or type, a row that is not whole blocks),
 * PL_ERR_OUT_OF_MEMORY (the size overflows 64 bits). */
pl_status pl_model_config_weight_bytes(const pl_model_config *cfg, pl_wtype matrices,
                                       uint64_t *out);

/* How pl_model_save_gguf picks each tensor's stored type (model/quant_recipe.c): `base` for
 * every matrix, or with `mix` one of the K-quant mixes ("q4_k_m", "q5_k_m": base Q4_K/Q5_K,
 * Q6_K for the output projection and for attn_v and ffn_down in about half the layers); then
 * a type whose blocks a row does not fill falls back (Q4_K -> Q4_0; Q5_K, Q6_K -> Q8_0;
 * Q8_0, Q4_0 -> F16). Norms and biases are F32 whatever the recipe. */
typedef struct pl_quant_recipe {
    pl_wtype base;
    int mix;         /* 0: none; else a mix of the table */
    int file_type;   /* llama.cpp's general.file_type for the recipe; -1 when it has none */
    const char *name; /* "q4_k_m", "q8_0", ...: static */
} pl_quant_recipe;

/* The recipe named `name` (a mix, or a weight type with a quantiser and a GGUF type id; case
 * does not matter). Errors: PL_ERR_UNSUPPORTED (no such recipe in this build). */
pl_status pl_quant_recipe_parse(const char *name, pl_quant_recipe *out);
/* The mixes' names, for messages: "q4_k_m, q5_k_m". */
const char *pl_quant_recipe_names(void);
/* The type a tensor of role (in layer) of a model of c is written in; *asked (may be NULL)
 * gets the recipe's type before the fallback. */
pl_wtype pl_quant_recipe_type(const pl_quant_recipe *r, const pl_model_config *c,
                              pl_tensor_role role, int layer, pl_wtype *asked);
/* t, or the type t falls back to when rows of `cols` elements are not whole blocks of it. */
pl_wtype pl_quant_fallback(pl_wtype t, int cols);

/* Called by pl_model_save_gguf_recipe once per tensor, in file order, before it is written:
 * its GGUF name, the type it is written in, and the type the recipe asked (different when the
 * tensor fell back). */
typedef void (*pl_quant_report_fn)(void *user, const char *name, pl_wtype type, pl_wtype asked,
                                   int rows, int cols);

/* Writes m as a GGUF file at path (llama.cpp's layout: general.architecture and the <arch>.*
 * hyperparameters, then every tensor by its GGUF name), adding them to w, which may already
 * hold other metadata (a tokenizer's; keys already there are left alone). Each tensor is
 * stored in the type recipe r gives it (pl_quant_recipe_type), general.file_type is the
 * recipe's; q and k rows are permuted to the RoPE layout llama.cpp's rope expects for the
 * architecture (interleaved for llama/Mistral, rotate-half for Qwen), and Llama 3 RoPE
 * scaling becomes rope_freqs.weight. Converts one tensor at a time. report may be NULL.
 * Errors: PL_ERR_IO naming the path, PL_ERR_OUT_OF_MEMORY. */
typedef struct pl_gguf_writer pl_gguf_writer;
pl_status pl_model_save_gguf_recipe(const pl_model *m, const pl_quant_recipe *r,
                                    pl_quant_report_fn report, void *user, pl_gguf_writer *w,
                                    const char *path);
/* pl_model_save_gguf_recipe with every matrix of `type` (falling back where rows are not whole
 * blocks of it). Errors: also PL_ERR_UNSUPPORTED (a type GGUF or this build cannot write). */
pl_status pl_model_save_gguf(const pl_model *m, pl_wtype type, pl_gguf_writer *w,
                             const char *path);

/* Bytes of the matrices decode streams per token (every matrix but the embedding, which is
 * gathered, not multiplied; a tied output projection counts once), for benchmarks. */
size_t pl_model_weight_bytes(const pl_model *m);
/* Parameters in matrix products per token (2x this = matmul FLOPs per token): the elements of
 * the same matrices. */
size_t pl_model_matmul_params(const pl_model *m);

#ifdef __cplusplus
}
#endif
#endif
