/*
 * model/arch.h - the architectures as data: which tensors a model has, their shapes in config
 * terms, how they are stored and what each file format calls them.
 *
 * One tensor table describes the decoder that Llama, Mistral, Qwen2 and Qwen3 share (RMSNorm,
 * rotary grouped-query attention, SwiGLU): every tensor once, with
 *   - its role (pl_tensor_role: the model and the runner index weights by it),
 *   - its shape as (rows, cols) in config terms (a vector has rows PL_DIM_NONE),
 *   - when it exists (always; only untied for the output projection; only in architectures
 *     with q/k/v biases or with q/k norms),
 *   - its storage (norms and biases always f32; matrices in the model's weight type),
 *   - its name in Hugging Face safetensors and in GGUF ("%d" = the layer), and its place in
 *     the two llama2.c file orders.
 * Each architecture row (pl_arch_info) names the family in each format and says which
 * optional tensors it has. Loaders, the memory figures, dummy weights and the runner's upload
 * are loops over these tables; nothing else lists tensors.
 *
 * Adding an architecture that uses the same tensors: a row in arch.c (names, features), the
 * config keys it needs in load_hf.c, and its numerics in engine/runner.c if it computes
 * anything new. One with other tensors (fused qkv, extra norms) adds roles here and rows to
 * the tensor table with a `when` that selects them.
 */
#ifndef PL_MODEL_ARCH_H
#define PL_MODEL_ARCH_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pl_arch {
    PL_ARCH_LLAMA = 0, /* LlamaForCausalLM: Llama 1/2/3, TinyLlama, SmolLM; llama2.c files */
    PL_ARCH_MISTRAL,   /* MistralForCausalLM: Llama's tensors, sliding-window attention */
    PL_ARCH_QWEN2,     /* Qwen2ForCausalLM: biases on q, k and v */
    PL_ARCH_QWEN3,     /* Qwen3ForCausalLM: per-head RMSNorm of q and k before RoPE */
    PL_ARCH_COUNT
} pl_arch;

/* Every tensor a model can have, in model order: the embedding, then each layer's tensors
 * (ATTN_NORM .. FFN_UP), then the final norm and the output projection. */
typedef enum pl_tensor_role {
    PL_T_TOKEN_EMBD, /* (vocab, dim) */
    PL_T_ATTN_NORM,  /* per layer from here to FFN_UP */
    PL_T_ATTN_Q,
    PL_T_ATTN_K,
    PL_T_ATTN_V,
    PL_T_ATTN_Q_BIAS,
    PL_T_ATTN_K_BIAS,
    PL_T_ATTN_V_BIAS,
    PL_T_ATTN_Q_NORM,
    PL_T_ATTN_K_NORM,
    PL_T_ATTN_OUT,
    PL_T_FFN_NORM,
    PL_T_FFN_GATE,
    PL_T_FFN_DOWN,
    PL_T_FFN_UP,
    PL_T_OUTPUT_NORM, /* model-wide again */
    PL_T_OUTPUT,      /* (vocab, dim); shares the embedding's data when tied */
    PL_T_COUNT
} pl_tensor_role;

#define PL_T_FIRST_LAYER PL_T_ATTN_NORM
#define PL_T_LAST_LAYER PL_T_FFN_UP
#define PL_T_N_LAYER (PL_T_LAST_LAYER - PL_T_FIRST_LAYER + 1)

static inline bool pl_tensor_role_per_layer(pl_tensor_role r) {
    return r >= PL_T_FIRST_LAYER && r <= PL_T_LAST_LAYER;
}

/* A dimension in config terms. */
typedef enum pl_dim {
    PL_DIM_NONE = 0, /* as rows: the tensor is a vector */
    PL_DIM_EMBD,     /* dim (hidden_size) */
    PL_DIM_FFN,      /* hidden_dim (intermediate_size) */
    PL_DIM_VOCAB,
    PL_DIM_Q,        /* n_heads * head_dim */
    PL_DIM_KV,       /* n_kv_heads * head_dim */
    PL_DIM_HEAD,     /* head_dim */
} pl_dim;

/* When a tensor exists. */
typedef enum pl_tensor_when {
    PL_WHEN_ALWAYS = 0,
    PL_WHEN_UNTIED,   /* stored only when the output projection is not tied to the embedding */
    PL_WHEN_QKV_BIAS, /* architectures with q/k/v biases */
    PL_WHEN_QK_NORM,  /* architectures with per-head q/k norms */
} pl_tensor_when;

typedef enum pl_storage {
    PL_STORE_MATRIX = 0, /* the model's weight type (as stored, or converted on request) */
    PL_STORE_F32,        /* always f32, converted at load: norms, biases */
} pl_storage;

typedef struct pl_tensor_spec {
    pl_tensor_role role;
    pl_dim rows, cols;
    pl_tensor_when when;
    pl_storage storage;
    const char *hf;      /* Hugging Face safetensors name */
    const char *gguf;    /* GGUF name */
    const char *llama2c; /* llama2.c's name (for messages); NULL when the format lacks it */
    signed char l2c_legacy, l2c_v1; /* position in the legacy and ak42 v1 orders; -1 none */
} pl_tensor_spec;

typedef struct pl_arch_info {
    pl_arch arch;
    const char *hf_class;   /* config.json "architectures" entry */
    const char *model_type; /* config.json "model_type" */
    const char *gguf;       /* GGUF general.architecture */
    bool qkv_bias;          /* has PL_WHEN_QKV_BIAS tensors */
    bool qk_norm;           /* has PL_WHEN_QK_NORM tensors */
    bool sliding_window;    /* config.json's sliding_window applies */
} pl_arch_info;

/* The row of arch, or NULL for a value outside the enum. */
const pl_arch_info *pl_arch_get(pl_arch arch);
/* The architecture whose hf_class (or model_type) is name; NULL when none. */
const pl_arch_info *pl_arch_by_hf_class(const char *name);
const pl_arch_info *pl_arch_by_model_type(const char *name);
/* The first architecture whose GGUF general.architecture is name (Mistral files say "llama":
 * the loader tells them apart by the sliding window); NULL when none. */
const pl_arch_info *pl_arch_by_gguf(const char *name);
/* "LlamaForCausalLM, MistralForCausalLM, ..." (static storage), for messages. */
const char *pl_arch_hf_class_list(void);

/* The tensor table row of role (the table is indexed by role). */
const pl_tensor_spec *pl_tensor_spec_of(pl_tensor_role role);

/* Whether name is pattern (a column of the tensor table) with its "%d" (if any) replaced by
 * a decimal number, stored in *layer (-1 for a pattern without one; a number too large for
 * int saturates at 10^8, beyond any layer count). */
bool pl_tensor_name_match(const char *pattern, const char *name, long *layer);

#ifdef __cplusplus
}
#endif
#endif
