/*
 * model/model.h - a LLaMA-family decoder's configuration and host weights, and its loaders.
 *
 * The model is RMSNorm -> attention (RoPE, grouped-query) -> residual -> RMSNorm -> SwiGLU
 * FFN -> residual, n_layers times, then a final RMSNorm and the output projection.
 *
 * Loaders validate every size and offset against the file length before touching data, and
 * memory-map where the format allows (the weights then point into the mapping). Norm weights
 * are always f32 (converted at load); matrices keep the stored type unless a dtype is asked
 * for. Nothing here knows about backends: the runner uploads what it needs.
 */
#ifndef PL_MODEL_H
#define PL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pl_rope_scaling_kind {
    PL_ROPE_SCALING_NONE = 0,
    PL_ROPE_SCALING_LINEAR = 1, /* positions divided by factor */
    PL_ROPE_SCALING_LLAMA3 = 2, /* Llama 3.1 frequency-dependent scaling */
} pl_rope_scaling_kind;

typedef struct pl_model_config {
    int dim;          /* hidden size */
    int hidden_dim;   /* FFN inner size */
    int n_layers;
    int n_heads;
    int n_kv_heads;   /* n_heads % n_kv_heads == 0 */
    int head_dim;     /* usually dim / n_heads */
    int vocab_size;
    int max_seq_len;  /* the model's context length */
    float norm_eps;   /* RMSNorm epsilon (1e-5 for llama2.c) */
    float rope_theta; /* 10000 for Llama 1/2 */
    int rope_layout;  /* a pl_rope_layout value: 0 interleaved (llama2.c), 1 rotate-half (HF) */
    pl_rope_scaling_kind rope_scaling;
    float rope_factor;             /* linear and llama3 */
    float rope_low_freq_factor;    /* llama3 */
    float rope_high_freq_factor;   /* llama3 */
    int rope_original_max_pos;     /* llama3 */
    bool tied_embeddings;          /* lm_head shares tok_embed's data */
    int bos_id;                    /* -1 if none */
    int eos_id;                    /* -1 if none */
    bool bos_ends_text;            /* llama2.c models emit BOS at the end of a story */
} pl_model_config;

/* A host tensor: row-major (rows, cols) of dtype, at data. */
typedef struct pl_weight {
    const void *data;
    pl_dtype dtype;
    int rows;
    int cols;
} pl_weight;

typedef struct pl_model_layer {
    pl_weight attn_norm; /* (1, dim) f32 */
    pl_weight wq;        /* (n_heads * head_dim, dim) */
    pl_weight wk;        /* (n_kv_heads * head_dim, dim) */
    pl_weight wv;        /* (n_kv_heads * head_dim, dim) */
    pl_weight wo;        /* (dim, n_heads * head_dim) */
    pl_weight ffn_norm;  /* (1, dim) f32 */
    pl_weight w1;        /* gate (hidden_dim, dim) */
    pl_weight w2;        /* down (dim, hidden_dim) */
    pl_weight w3;        /* up (hidden_dim, dim) */
} pl_model_layer;

typedef struct pl_model {
    pl_model_config cfg;
    pl_weight tok_embed;   /* (vocab_size, dim) */
    pl_model_layer *layers;/* (n_layers) */
    pl_weight final_norm;  /* (1, dim) f32 */
    pl_weight lm_head;     /* (vocab_size, dim); same data as tok_embed when tied */
    char *tokenizer_path;  /* a tokenizer.model found beside the model, or NULL */
    char *name;            /* file name or dummy preset, for messages */
    void *priv;            /* loader-owned backing: mapping, converted copies */
} pl_model;

typedef struct pl_model_load_options {
    pl_dtype dtype;        /* AUTO keeps the stored type of matrices; else convert */
    uint64_t dummy_seed;   /* seed for dummy: weights */
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

/* Checks a config: every dim inside generous limits (a header claiming 10^9 layers is refused
 * on that field), n_heads a multiple of n_kv_heads, head_dim even, eps/theta finite and
 * positive, rope scaling parameters sane, bos/eos inside the vocabulary or -1.
 * Errors: PL_ERR_INVALID_ARGUMENT naming the field, its value and the allowed range. */
pl_status pl_model_config_validate(const pl_model_config *cfg);

/* Allocates a model for cfg whose weights are zeroed, model-owned and writable (cast away the
 * const of pl_weight.data): norms f32, matrices (tok_embed, layers, lm_head) of `dtype`
 * (F32/F16/BF16), lm_head sharing tok_embed's data when cfg->tied_embeddings. For dummy
 * models and test fixtures that fill weights themselves. name is copied (for messages).
 * Errors: PL_ERR_INVALID_ARGUMENT (bad config or dtype), PL_ERR_OUT_OF_MEMORY (the message
 * gives the bytes needed; also when they exceed the machine's physical memory). */
pl_status pl_model_alloc(const pl_model_config *cfg, pl_dtype dtype, const char *name,
                         pl_model **out);

/* The names accepted after "dummy:", NULL-terminated. Static storage. */
const char *const *pl_model_dummy_names(void);
/* The config of a dummy preset ("tiny" or "dummy:tiny"), without generating any weight (to
 * size memory before loading). Errors: PL_ERR_NOT_FOUND (unknown name), INVALID_ARGUMENT. */
pl_status pl_model_dummy_config(const char *name, pl_model_config *out);

/* Rotary inverse frequencies (head_dim / 2 floats) with the config's theta and scaling:
 * inv_freq[j] = theta^(-2j / head_dim), then scaled. */
void pl_model_rope_inv_freq(const pl_model_config *cfg, float *out);

/* Bytes every weight of a model of cfg takes when its matrices are stored as dtype
 * (F32/F16/BF16) and its norms as f32: exactly what pl_model_alloc allocates, and what
 * pl_model_load_within checks max_weight_bytes against, so a model can be sized from its
 * config alone. Errors: PL_ERR_INVALID_ARGUMENT (bad config or dtype),
 * PL_ERR_OUT_OF_MEMORY (the size overflows 64 bits). */
pl_status pl_model_config_weight_bytes(const pl_model_config *cfg, pl_dtype dtype,
                                       uint64_t *out);

/* Bytes of matrix weights (what decode streams per token), for benchmarks. */
size_t pl_model_weight_bytes(const pl_model *m);
/* Parameters in matrix products per token (2x this = matmul FLOPs per token). */
size_t pl_model_matmul_params(const pl_model *m);

#ifdef __cplusplus
}
#endif
#endif
