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
                         0, 3},
    [PL_T_ATTN_NORM] = {PL_T_ATTN_NORM, N, PL_DIM_EMBD, PL_WHEN_ALWAYS, F,
                        L "input_layernorm.weight", B "attn_norm.weight", "rms_att", 1, 0},
    [PL_T_ATTN_Q] = {PL_T_ATTN_Q, PL_DIM_Q, PL_DIM_EMBD, PL_WHEN_ALWAYS, M,
                     L "self_attn.q_proj.weight", B "attn_q.weight", "wq", 2, 4},
    [PL_T_ATTN_K] = {PL_T_ATTN_K, PL_DIM_KV, PL_DIM_EMBD, PL_WHEN_ALWAYS, M,
                     L "self_attn.k_proj.weight", B "attn_k.weight", "wk", 3, 5},
    [PL_T_ATTN_V] = {PL_T_ATTN_V, PL_DIM_KV, PL_DIM_EMBD, PL_WHEN_ALWAYS, M,
                     L "self_attn.v_proj.weight", B "attn_v.weight", "wv", 4, 6},
    [PL_T_ATTN_Q_BIAS] = {PL_T_ATTN_Q_BIAS, N, PL_DIM_Q, PL_WHEN_QKV_BIAS, F,
                          L "self_attn.q_proj.bias", B "attn_q.bias", NULL, -1, -1},
    [PL_T_ATTN_K_BIAS] = {PL_T_ATTN_K_BIAS, N, PL_DIM_KV, PL_WHEN_QKV_BIAS, F,
                          L "self_attn.k_proj.bias", B "attn_k.bias", NULL, -1, -1},
    [PL_T_ATTN_V_BIAS] = {PL_T_ATTN_V_BIAS, N, PL_DIM_KV, PL_WHEN_QKV_BIAS, F,
                          L "self_attn.v_proj.bias", B "attn_v.bias", NULL, -1, -1},
    [PL_T_ATTN_Q_NORM] = {PL_T_ATTN_Q_NORM, N, PL_DIM_HEAD, PL_WHEN_QK_NORM, F,
                          L "self_attn.q_norm.weight", B "attn_q_norm.weight", NULL, -1, -1},
    [PL_T_ATTN_K_NORM] = {PL_T_ATTN_K_NORM, N, PL_DIM_HEAD, PL_WHEN_QK_NORM, F,
                          L "self_attn.k_norm.weight", B "attn_k_norm.weight", NULL, -1, -1},
    [PL_T_ATTN_OUT] = {PL_T_ATTN_OUT, PL_DIM_EMBD, PL_DIM_Q, PL_WHEN_ALWAYS, M,
                       L "self_attn.o_proj.weight", B "attn_output.weight", "wo", 5, 7},
    [PL_T_FFN_NORM] = {PL_T_FFN_NORM, N, PL_DIM_EMBD, PL_WHEN_ALWAYS, F,
                       L "post_attention_layernorm.weight", B "ffn_norm.weight", "rms_ffn", 6, 1},
    [PL_T_FFN_GATE] = {PL_T_FFN_GATE, PL_DIM_FFN, PL_DIM_EMBD, PL_WHEN_ALWAYS, M,
                       L "mlp.gate_proj.weight", B "ffn_gate.weight", "w1", 7, 8},
    [PL_T_FFN_DOWN] = {PL_T_FFN_DOWN, PL_DIM_EMBD, PL_DIM_FFN, PL_WHEN_ALWAYS, M,
                       L "mlp.down_proj.weight", B "ffn_down.weight", "w2", 8, 9},
    [PL_T_FFN_UP] = {PL_T_FFN_UP, PL_DIM_FFN, PL_DIM_EMBD, PL_WHEN_ALWAYS, M,
                     L "mlp.up_proj.weight", B "ffn_up.weight", "w3", 9, 10},
    [PL_T_OUTPUT_NORM] = {PL_T_OUTPUT_NORM, N, PL_DIM_EMBD, PL_WHEN_ALWAYS, F,
                          "model.norm.weight", "output_norm.weight", "rms_final", 10, 2},
    [PL_T_OUTPUT] = {PL_T_OUTPUT, PL_DIM_VOCAB, PL_DIM_EMBD, PL_WHEN_UNTIED, M,
                     "lm_head.weight", "output.weight", "wcls", 12, 11},
};

#undef M
#undef F
#undef N
#undef L
#undef B

static const pl_arch_info k_archs[PL_ARCH_COUNT] = {
    [PL_ARCH_LLAMA] = {PL_ARCH_LLAMA, "LlamaForCausalLM", "llama", "llama", false, false, false},
    [PL_ARCH_MISTRAL] = {PL_ARCH_MISTRAL, "MistralForCausalLM", "mistral", "llama", false, false,
                         true},
    [PL_ARCH_QWEN2] = {PL_ARCH_QWEN2, "Qwen2ForCausalLM", "qwen2", "qwen2", true, false, false},
    [PL_ARCH_QWEN3] = {PL_ARCH_QWEN3, "Qwen3ForCausalLM", "qwen3", "qwen3", false, true, false},
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

bool pl_tensor_name_match(const char *pattern, const char *name, long *layer) {
    const char *pct = strstr(pattern, "%d");
    *layer = -1;
    if (!pct) return strcmp(pattern, name) == 0;
    size_t pre = (size_t)(pct - pattern);
    if (strncmp(pattern, name, pre) != 0) return false;
    const char *p = name + pre;
    if (*p < '0' || *p > '9') return false;
    long v = 0;
    for (; *p >= '0' && *p <= '9'; p++) v = v < 100000000 ? v * 10 + (*p - '0') : 100000000;
    *layer = v;
    return strcmp(p, pct + 2) == 0;
}
