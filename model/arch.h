/*
 * model/arch.h - the architectures as data: which tensors a model has, their shapes in config
 * terms, how they are stored and what each file format calls them.
 *
 * One tensor table describes the decoder every family shares (RMSNorm, rotary grouped-query
 * attention, a gated FFN) and what some of them add: every tensor once, with
 *   - its role (pl_tensor_role: the model and the runner index weights by it),
 *   - its shape as (rows, cols) in config terms (a vector has rows PL_DIM_NONE); a per-expert
 *     tensor stacks n_experts such matrices along its rows, expert e's rows at
 *     [e * rows, (e + 1) * rows), as GGUF's ffn_*_exps tensors do,
 *   - when it exists (always; only untied for the output projection; only in architectures
 *     with q/k/v biases, q/k norms, experts, a shared expert, Gemma's post-norms; the dense
 *     FFN only without experts),
 *   - its storage (norms and biases always f32; routers f32 matrices, as llama.cpp keeps
 *     them; other matrices in the model's weight type),
 *   - its name in Hugging Face safetensors and in GGUF ("%d" = the layer, then the expert),
 *     and its place in the two llama2.c file orders.
 * Each architecture row (pl_arch_info) names the family in each format, says which optional
 * tensors it has and how it computes (activation, norms, scales), and may rename tensors
 * (Mixtral's block_sparse_moe.experts.N.w1, Gemma's pre_feedforward_layernorm): the names
 * of a role in an architecture come from pl_tensor_hf_name / pl_tensor_gguf_name. Loaders,
 * the memory figures, dummy weights and the runner's upload are loops over these tables;
 * nothing else lists tensors.
 *
 * Adding an architecture that uses the same tensors: a row in arch.c (names, features), the
 * config keys it needs in load_hf.c, and its numerics in engine/runner.c if it computes
 * anything new. One with other tensors (fused qkv, extra norms) adds roles here and rows to
 * the tensor table with a `when` that selects them.
 */
#ifndef PL_MODEL_ARCH_H
#define PL_MODEL_ARCH_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pl_arch {
    PL_ARCH_LLAMA = 0, /* LlamaForCausalLM: Llama 1/2/3, TinyLlama, SmolLM; llama2.c files */
    PL_ARCH_MISTRAL,   /* MistralForCausalLM: Llama's tensors, sliding-window attention */
    PL_ARCH_QWEN2,     /* Qwen2ForCausalLM: biases on q, k and v */
    PL_ARCH_QWEN3,     /* Qwen3ForCausalLM: per-head RMSNorm of q and k before RoPE */
    PL_ARCH_MIXTRAL,   /* MixtralForCausalLM: Mistral with experts (softmax, top-k, renormed) */
    PL_ARCH_QWEN2_MOE, /* Qwen2MoeForCausalLM: Qwen2 with experts and a gated shared expert */
    PL_ARCH_QWEN3_MOE, /* Qwen3MoeForCausalLM: Qwen3 with experts (norm_topk_prob) */
    PL_ARCH_GEMMA2,    /* Gemma2ForCausalLM: GeGLU, (1 + w) norms, post-norms, soft-capping,
                          alternating sliding and global layers */
    PL_ARCH_GEMMA3,    /* Gemma3ForCausalLM (text): Gemma 2 with q/k norms, 5 local : 1
                          global layers with their own rope theta, no soft-capping */
    PL_ARCH_PHI3,      /* Phi3ForCausalLM: Phi-3/3.5/4; fused qkv and gate_up split at load,
                          longrope */
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
    PL_T_ATTN_POST_NORM, /* Gemma: the attention output's norm, before the residual add */
    PL_T_FFN_NORM,
    PL_T_FFN_GATE,
    PL_T_FFN_DOWN,
    PL_T_FFN_UP,
    PL_T_FFN_POST_NORM,  /* Gemma: the FFN output's norm, before the residual add */
    PL_T_FFN_GATE_INP,   /* the router: (n_experts, dim), f32 */
    PL_T_FFN_GATE_EXPS,  /* the experts' gate projections, stacked: n_experts x (moe_ffn, dim) */
    PL_T_FFN_DOWN_EXPS,  /* n_experts x (dim, moe_ffn) */
    PL_T_FFN_UP_EXPS,    /* n_experts x (moe_ffn, dim) */
    PL_T_FFN_GATE_INP_SHEXP, /* Qwen2-MoE: the shared expert's gate, (1, dim), f32 */
    PL_T_FFN_GATE_SHEXP, /* the shared expert: (shared_ffn, dim) */
    PL_T_FFN_DOWN_SHEXP,
    PL_T_FFN_UP_SHEXP,
    PL_T_OUTPUT_NORM, /* model-wide again */
    PL_T_OUTPUT,      /* (vocab, dim); shares the embedding's data when tied */
    PL_T_COUNT
} pl_tensor_role;

#define PL_T_FIRST_LAYER PL_T_ATTN_NORM
#define PL_T_LAST_LAYER PL_T_FFN_UP_SHEXP
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
    PL_DIM_ONE,      /* as rows: a matrix of one row (Qwen2-MoE's shared expert gate) */
    PL_DIM_EXPERTS,  /* n_experts */
    PL_DIM_EXP_FFN,  /* expert_hidden_dim (moe_intermediate_size) */
    PL_DIM_SHEXP_FFN,/* shared_hidden_dim (shared_expert_intermediate_size) */
} pl_dim;

/* When a tensor exists. */
typedef enum pl_tensor_when {
    PL_WHEN_ALWAYS = 0,
    PL_WHEN_UNTIED,   /* stored only when the output projection is not tied to the embedding */
    PL_WHEN_QKV_BIAS, /* architectures with q/k/v biases */
    PL_WHEN_QK_NORM,  /* architectures with per-head q/k norms */
    PL_WHEN_DENSE_FFN,/* architectures without experts */
    PL_WHEN_MOE,      /* architectures with experts */
    PL_WHEN_SHARED_EXPERT, /* with a shared expert beside the routed ones */
    PL_WHEN_POST_NORMS,    /* with norms after attention and FFN (Gemma) */
} pl_tensor_when;

typedef enum pl_storage {
    PL_STORE_MATRIX = 0, /* the model's weight type (as stored, or converted on request) */
    PL_STORE_F32,        /* always f32, converted at load: norms, biases, routers */
} pl_storage;

typedef struct pl_tensor_spec {
    pl_tensor_role role;
    pl_dim rows, cols;
    pl_tensor_when when;
    pl_storage storage;
    const char *hf;      /* Hugging Face safetensors name (an architecture may rename it:
                            pl_tensor_hf_name); a per-expert tensor's has the expert's "%d"
                            after the layer's: one tensor per expert */
    const char *gguf;    /* GGUF name (pl_tensor_gguf_name): one stacked tensor */
    const char *llama2c; /* llama2.c's name (for messages); NULL when the format lacks it */
    signed char l2c_legacy, l2c_v1; /* position in the legacy and ak42 v1 orders; -1 none */
    bool per_expert;     /* n_experts matrices of (rows, cols) stacked along the rows */
} pl_tensor_spec;

/* The FFN's activation: gate' = act(gate) before gate' * up. */
typedef enum pl_ffn_act {
    PL_ACT_SILU = 0,      /* SwiGLU: x / (1 + e^-x) */
    PL_ACT_GELU_TANH = 1, /* GeGLU with the tanh approximation (gelu_pytorch_tanh) */
} pl_ffn_act;

typedef struct pl_arch_info {
    pl_arch arch;
    const char *hf_class;   /* config.json "architectures" entry */
    const char *model_type; /* config.json "model_type" */
    const char *gguf;       /* GGUF general.architecture */
    bool qkv_bias;          /* has PL_WHEN_QKV_BIAS tensors */
    bool qk_norm;           /* has PL_WHEN_QK_NORM tensors */
    bool sliding_window;    /* config.json's sliding_window applies */
    bool moe;               /* routed experts instead of the dense FFN */
    bool shared_expert;     /* a sigmoid-gated shared expert beside them (Qwen2-MoE) */
    bool post_norms;        /* norms of the attention and FFN outputs before each residual
                               add (Gemma) */
    bool gemma;             /* Gemma's numerics: embeddings x sqrt(dim), (1 + w) RMSNorm
                               weights in Hugging Face files, GeGLU, query_pre_attn_scalar */
    bool fused;             /* Phi-3: qkv_proj and gate_up_proj are single tensors in the
                               files, split into the q/k/v and gate/up roles at load */
    pl_ffn_act act;
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

/* The name pattern of role in architecture arch: the row's own or the architecture's
 * renaming. NULL for a role or arch outside the enums. */
const char *pl_tensor_hf_name(pl_arch arch, pl_tensor_role role);
const char *pl_tensor_gguf_name(pl_arch arch, pl_tensor_role role);

/* Whether name is pattern (a column of the tensor table) with its "%d"s (none, the layer, or
 * the layer and the expert) replaced by decimal numbers, stored in *layer and *expert (-1
 * where the pattern has none; a number too large for int saturates at 10^8, beyond any
 * count). expert may be NULL for a pattern with at most one "%d". */
bool pl_tensor_name_match2(const char *pattern, const char *name, long *layer, long *expert);
static inline bool pl_tensor_name_match(const char *pattern, const char *name, long *layer) {
    return pl_tensor_name_match2(pattern, name, layer, NULL);
}

#ifdef __cplusplus
}
#endif
#endif
