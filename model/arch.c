/*
 * model/arch.c - the tensor table and the architecture rows (see arch.h).
 */
#include "model/arch.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define M PL_STORE_MATRIX
#define F PL_STORE_F32
#define N PL_DIM_NONE
#define L "model.layers.%d."
#define B "blk.%d."

/* Indexed by role. The llama2.c orders: legacy (as stories260K.bin) is token_embedding,
 * rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, [11: the RoPE tables], wcls;
 * ak42 v1 is rms_att, rms_ffn, rms_final, token_embedding, wq .. w3, wcls. */
static const pl_tensor_spec k_tensors[PL_T_COUNT] = {
    [PL_T_TOKEN_EMBD] = {PL_T_TOKEN_EMBD, PL_DIM_VOCAB, PL_DIM_EMBD, PL_WHEN_ALWAYS, M,
                         "model.embed_tokens.weight", "token_embd.weight", "token_embedding",
                         0, 3, false},
    [PL_T_ATTN_NORM] = {PL_T_ATTN_NORM, N, PL_DIM_EMBD, PL_WHEN_ALWAYS, F,
                        L "input_layernorm.weight", B "attn_norm.weight", "rms_att", 1, 0, false},
    [PL_T_ATTN_Q] = {PL_T_ATTN_Q, PL_DIM_Q, PL_DIM_EMBD, PL_WHEN_ALWAYS, M,
                     L "self_attn.q_proj.weight", B "attn_q.weight", "wq", 2, 4, false},
    [PL_T_ATTN_K] = {PL_T_ATTN_K, PL_DIM_KV, PL_DIM_EMBD, PL_WHEN_ALWAYS, M,
                     L "self_attn.k_proj.weight", B "attn_k.weight", "wk", 3, 5, false},
    [PL_T_ATTN_V] = {PL_T_ATTN_V, PL_DIM_KV, PL_DIM_EMBD, PL_WHEN_ALWAYS, M,
                     L "self_attn.v_proj.weight", B "attn_v.weight", "wv", 4, 6, false},
    [PL_T_ATTN_Q_BIAS] = {PL_T_ATTN_Q_BIAS, N, PL_DIM_Q, PL_WHEN_QKV_BIAS, F,
                          L "self_attn.q_proj.bias", B "attn_q.bias", NULL, -1, -1, false},
    [PL_T_ATTN_K_BIAS] = {PL_T_ATTN_K_BIAS, N, PL_DIM_KV, PL_WHEN_QKV_BIAS, F,
                          L "self_attn.k_proj.bias", B "attn_k.bias", NULL, -1, -1, false},
    [PL_T_ATTN_V_BIAS] = {PL_T_ATTN_V_BIAS, N, PL_DIM_KV, PL_WHEN_QKV_BIAS, F,
                          L "self_attn.v_proj.bias", B "attn_v.bias", NULL, -1, -1, false},
    [PL_T_ATTN_Q_NORM] = {PL_T_ATTN_Q_NORM, N, PL_DIM_HEAD, PL_WHEN_QK_NORM, F,
                          L "self_attn.q_norm.weight", B "attn_q_norm.weight", NULL, -1, -1, false},
    [PL_T_ATTN_K_NORM] = {PL_T_ATTN_K_NORM, N, PL_DIM_HEAD, PL_WHEN_QK_NORM, F,
                          L "self_attn.k_norm.weight", B "attn_k_norm.weight", NULL, -1, -1, false},
    [PL_T_ATTN_OUT] = {PL_T_ATTN_OUT, PL_DIM_EMBD, PL_DIM_Q, PL_WHEN_ALWAYS, M,
                       L "self_attn.o_proj.weight", B "attn_output.weight", "wo", 5, 7, false},
    [PL_T_ATTN_POST_NORM] = {PL_T_ATTN_POST_NORM, N, PL_DIM_EMBD, PL_WHEN_POST_NORMS, F,
                             L "post_attention_layernorm.weight", B "post_attention_norm.weight",
                             NULL, -1, -1, false},
    [PL_T_FFN_NORM] = {PL_T_FFN_NORM, N, PL_DIM_EMBD, PL_WHEN_ALWAYS, F,
                       L "post_attention_layernorm.weight", B "ffn_norm.weight", "rms_ffn", 6, 1,
                       false},
    [PL_T_FFN_GATE] = {PL_T_FFN_GATE, PL_DIM_FFN, PL_DIM_EMBD, PL_WHEN_DENSE_FFN, M,
                       L "mlp.gate_proj.weight", B "ffn_gate.weight", "w1", 7, 8, false},
    [PL_T_FFN_DOWN] = {PL_T_FFN_DOWN, PL_DIM_EMBD, PL_DIM_FFN, PL_WHEN_DENSE_FFN, M,
                       L "mlp.down_proj.weight", B "ffn_down.weight", "w2", 8, 9, false},
    [PL_T_FFN_UP] = {PL_T_FFN_UP, PL_DIM_FFN, PL_DIM_EMBD, PL_WHEN_DENSE_FFN, M,
                     L "mlp.up_proj.weight", B "ffn_up.weight", "w3", 9, 10, false},
    [PL_T_FFN_POST_NORM] = {PL_T_FFN_POST_NORM, N, PL_DIM_EMBD, PL_WHEN_POST_NORMS, F,
                            L "post_feedforward_layernorm.weight", B "post_ffw_norm.weight",
                            NULL, -1, -1, false},
    [PL_T_FFN_GATE_INP] = {PL_T_FFN_GATE_INP, PL_DIM_EXPERTS, PL_DIM_EMBD, PL_WHEN_MOE, F,
                           L "mlp.gate.weight", B "ffn_gate_inp.weight", NULL, -1, -1, false},
    [PL_T_FFN_GATE_EXPS] = {PL_T_FFN_GATE_EXPS, PL_DIM_EXP_FFN, PL_DIM_EMBD, PL_WHEN_MOE, M,
                            L "mlp.experts.%d.gate_proj.weight", B "ffn_gate_exps.weight", NULL,
                            -1, -1, true},
    [PL_T_FFN_DOWN_EXPS] = {PL_T_FFN_DOWN_EXPS, PL_DIM_EMBD, PL_DIM_EXP_FFN, PL_WHEN_MOE, M,
                            L "mlp.experts.%d.down_proj.weight", B "ffn_down_exps.weight", NULL,
                            -1, -1, true},
    [PL_T_FFN_UP_EXPS] = {PL_T_FFN_UP_EXPS, PL_DIM_EXP_FFN, PL_DIM_EMBD, PL_WHEN_MOE, M,
                          L "mlp.experts.%d.up_proj.weight", B "ffn_up_exps.weight", NULL, -1,
                          -1, true},
    [PL_T_FFN_GATE_INP_SHEXP] = {PL_T_FFN_GATE_INP_SHEXP, PL_DIM_ONE, PL_DIM_EMBD,
                                 PL_WHEN_SHARED_EXPERT, F, L "mlp.shared_expert_gate.weight",
                                 B "ffn_gate_inp_shexp.weight", NULL, -1, -1, false},
    [PL_T_FFN_GATE_SHEXP] = {PL_T_FFN_GATE_SHEXP, PL_DIM_SHEXP_FFN, PL_DIM_EMBD,
                             PL_WHEN_SHARED_EXPERT, M, L "mlp.shared_expert.gate_proj.weight",
                             B "ffn_gate_shexp.weight", NULL, -1, -1, false},
    [PL_T_FFN_DOWN_SHEXP] = {PL_T_FFN_DOWN_SHEXP, PL_DIM_EMBD, PL_DIM_SHEXP_FFN,
                             PL_WHEN_SHARED_EXPERT, M, L "mlp.shared_expert.down_proj.weight",
                             B "ffn_down_shexp.weight", NULL, -1, -1, false},
    [PL_T_FFN_UP_SHEXP] = {PL_T_FFN_UP_SHEXP, PL_DIM_SHEXP_FFN, PL_DIM_EMBD,
                           PL_WHEN_SHARED_EXPERT, M, L "mlp.shared_expert.up_proj.weight",
                           B "ffn_up_shexp.weight", NULL, -1, -1, false},
    [PL_T_OUTPUT_NORM] = {PL_T_OUTPUT_NORM, N, PL_DIM_EMBD, PL_WHEN_ALWAYS, F,
                          "model.norm.weight", "output_norm.weight", "rms_final", 10, 2, false},
    [PL_T_OUTPUT] = {PL_T_OUTPUT, PL_DIM_VOCAB, PL_DIM_EMBD, PL_WHEN_UNTIED, M,
                     "lm_head.weight", "output.weight", "wcls", 12, 11, false},
};

#undef M
#undef F
#undef N
#undef L
#undef B

/* An architecture's names for a role where they differ from the table's (NULL: the table's). */
typedef struct arch_rename {
    pl_arch arch;
    pl_tensor_role role;
    const char *hf, *gguf;
} arch_rename;

#define L "model.layers.%d."
static const arch_rename k_renames[] = {
    /* Mixtral: the router and the experts under block_sparse_moe, w1/w2/w3 as in Mistral's
     * own checkpoints */
    {PL_ARCH_MIXTRAL, PL_T_FFN_GATE_INP, L "block_sparse_moe.gate.weight", NULL},
    {PL_ARCH_MIXTRAL, PL_T_FFN_GATE_EXPS, L "block_sparse_moe.experts.%d.w1.weight", NULL},
    {PL_ARCH_MIXTRAL, PL_T_FFN_DOWN_EXPS, L "block_sparse_moe.experts.%d.w2.weight", NULL},
    {PL_ARCH_MIXTRAL, PL_T_FFN_UP_EXPS, L "block_sparse_moe.experts.%d.w3.weight", NULL},
    /* Gemma: post_attention_layernorm is the attention output's norm; the FFN's input norm is
     * pre_feedforward_layernorm */
    {PL_ARCH_GEMMA2, PL_T_FFN_NORM, L "pre_feedforward_layernorm.weight", NULL},
    {PL_ARCH_GEMMA3, PL_T_FFN_NORM, L "pre_feedforward_layernorm.weight", NULL},
};
#undef L

/* hf_class, model_type, gguf, qkv_bias, qk_norm, sliding_window, moe, shared_expert,
 * post_norms, gemma, fused, act */
static const pl_arch_info k_archs[PL_ARCH_COUNT] = {
#define ROW(a, cls, type, gg) .arch = a, .hf_class = cls, .model_type = type, .gguf = gg
    [PL_ARCH_LLAMA] = {ROW(PL_ARCH_LLAMA, "LlamaForCausalLM", "llama", "llama")},
    [PL_ARCH_MISTRAL] = {ROW(PL_ARCH_MISTRAL, "MistralForCausalLM", "mistral", "llama"),
                         .sliding_window = true},
    [PL_ARCH_QWEN2] = {ROW(PL_ARCH_QWEN2, "Qwen2ForCausalLM", "qwen2", "qwen2"), .qkv_bias = true},
    [PL_ARCH_QWEN3] = {ROW(PL_ARCH_QWEN3, "Qwen3ForCausalLM", "qwen3", "qwen3"), .qk_norm = true},
    [PL_ARCH_MIXTRAL] = {ROW(PL_ARCH_MIXTRAL, "MixtralForCausalLM", "mixtral", "llama"),
                         .sliding_window = true, .moe = true},
    [PL_ARCH_QWEN2_MOE] = {ROW(PL_ARCH_QWEN2_MOE, "Qwen2MoeForCausalLM", "qwen2_moe", "qwen2moe"),
                           .qkv_bias = true, .moe = true, .shared_expert = true},
    [PL_ARCH_QWEN3_MOE] = {ROW(PL_ARCH_QWEN3_MOE, "Qwen3MoeForCausalLM", "qwen3_moe", "qwen3moe"),
                           .qk_norm = true, .moe = true},
    [PL_ARCH_GEMMA2] = {ROW(PL_ARCH_GEMMA2, "Gemma2ForCausalLM", "gemma2", "gemma2"),
                        .sliding_window = true, .post_norms = true, .gemma = true,
                        .act = PL_ACT_GELU_TANH},
    [PL_ARCH_GEMMA3] = {ROW(PL_ARCH_GEMMA3, "Gemma3ForCausalLM", "gemma3_text", "gemma3"),
                        .qk_norm = true, .sliding_window = true, .post_norms = true,
                        .gemma = true, .act = PL_ACT_GELU_TANH},
    [PL_ARCH_PHI3] = {ROW(PL_ARCH_PHI3, "Phi3ForCausalLM", "phi3", "phi3"),
                      .sliding_window = true, .fused = true},
#undef ROW
};

const pl_arch_info *pl_arch_get(pl_arch arch) {
    return (int)arch >= 0 && (int)arch < PL_ARCH_COUNT ? &k_archs[arch] : NULL;
}

const pl_arch_info *pl_arch_by_hf_class(const char *name) {
    for (int i = 0; name && i < PL_ARCH_COUNT; i++)
        if (strcmp(name, k_archs[i].hf_class) == 0) return &k_archs[i];
    return NULL;
}

const pl_arch_info *pl_arch_by_model_type(const char *name) {
    for (int i = 0; name && i < PL_ARCH_COUNT; i++)
        if (strcmp(name, k_archs[i].model_type) == 0) return &k_archs[i];
    return NULL;
}

const pl_arch_info *pl_arch_by_gguf(const char *name) {
    /* in enum order: "llama" is Llama first (Mistral and Mixtral are told apart by keys) */
    for (int i = 0; name && i < PL_ARCH_COUNT; i++)
        if (strcmp(name, k_archs[i].gguf) == 0) return &k_archs[i];
    return NULL;
}

const char *pl_arch_hf_class_list(void) {
    static _Thread_local char list[256];
    if (!list[0])
        for (int i = 0, o = 0; i < PL_ARCH_COUNT && o < (int)sizeof list; i++)
            o += snprintf(list + o, sizeof list - (size_t)o, "%s%s", i ? ", " : "",
                          k_archs[i].hf_class);
    return list;
}

const pl_tensor_spec *pl_tensor_spec_of(pl_tensor_role role) {
    return (int)role >= 0 && (int)role < PL_T_COUNT ? &k_tensors[role] : NULL;
}

static const arch_rename *renamed(pl_arch arch, pl_tensor_role role) {
    for (size_t i = 0; i < sizeof k_renames / sizeof k_renames[0]; i++)
        if (k_renames[i].arch == arch && k_renames[i].role == role) return &k_renames[i];
    return NULL;
}

const char *pl_tensor_hf_name(pl_arch arch, pl_tensor_role role) {
    const pl_tensor_spec *t = pl_tensor_spec_of(role);
    if (!t || !pl_arch_get(arch)) return NULL;
    const arch_rename *r = renamed(arch, role);
    return r && r->hf ? r->hf : t->hf;
}

const char *pl_tensor_gguf_name(pl_arch arch, pl_tensor_role role) {
    const pl_tensor_spec *t = pl_tensor_spec_of(role);
    if (!t || !pl_arch_get(arch)) return NULL;
    const arch_rename *r = renamed(arch, role);
    return r && r->gguf ? r->gguf : t->gguf;
}

/* Matches the digits at *p into *v (saturating at 10^8); false when there are none. */
static bool number(const char **p, long *v) {
    if (**p < '0' || **p > '9') return false;
    *v = 0;
    for (; **p >= '0' && **p <= '9'; (*p)++) *v = *v < 100000000 ? *v * 10 + (**p - '0') : 100000000;
    return true;
}

bool pl_tensor_name_match2(const char *pattern, const char *name, long *layer, long *expert) {
    long *out[2] = {layer, expert};
    long scratch;
    *layer = -1;
    if (expert) *expert = -1;
    const char *p = pattern, *n = name;
    for (int k = 0;; k++) {
        const char *pct = strstr(p, "%d");
        if (!pct) return strcmp(p, n) == 0;
        size_t pre = (size_t)(pct - p);
        if (k >= 2 || strncmp(p, n, pre) != 0) return false;
        n += pre;
        if (!number(&n, out[k] ? out[k] : &scratch)) return false;
        p = pct + 2;
    }
}
