/*
 * model/quant_recipe.c - which type each tensor of a model is written in by pl_model_save_gguf
 * (see model.h): a plain type for every matrix, or one of the two K-quant mixes users
 * download, and the fallback for a tensor whose rows are not whole blocks of its type.
 *
 * The mixes follow llama.cpp's Q4_K_M / Q5_K_M for its llama architecture in spirit (our
 * table, not its code): the base type everywhere but the tensors whose errors cost the most,
 * which get Q6_K:
 *   - the output projection (the embedding when tied, since it is then the output too);
 *   - attn_v and ffn_down (the experts' and the shared expert's too) in the layers where
 *     more_bits() holds: the first and last eighth of the layers and every third layer
 *     between (half of them or so).
 *
 * Fallback: llama.cpp's K-quants need rows of 256 elements; stories15M's are 288 wide, so a
 * K-quant asked of such a tensor is written in the 32-element type of at least as many bits
 * per weight that this build has (Q4_K 4.5 -> Q4_0 4.5; Q5_K 5.5 and Q6_K 6.6 -> Q8_0 8.5),
 * and a 32-element type asked of a row that is not whole 32-element blocks (stories260K's
 * 172-wide ffn_down) in F16, as llama.cpp ends its own chain.
 */
#include <ctype.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model.h"

static const struct {
    const char *name;
    pl_wtype base;
    int ftype; /* llama.cpp's general.file_type (LLAMA_FTYPE_*) */
} mixes[] = {{"q4_k_m", PL_WTYPE_Q4_K, 15}, {"q5_k_m", PL_WTYPE_Q5_K, 17}};

/* general.file_type of a file whose matrices are all of one type (llama.cpp's names: a pure
 * Q4_K / Q5_K file counts as its _S). */
static int plain_ftype(pl_wtype t) {
    switch (t) {
    case PL_WTYPE_F32: return 0;
    case PL_WTYPE_F16: return 1;
    case PL_WTYPE_Q4_0: return 2;
    case PL_WTYPE_Q8_0: return 7;
    case PL_WTYPE_Q4_K: return 14;
    case PL_WTYPE_Q5_K: return 16;
    case PL_WTYPE_Q6_K: return 18;
    case PL_WTYPE_BF16: return 32;
    default: return -1;
    }
}

static bool name_eq(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return false;
    return *a == *b;
}

pl_status pl_quant_recipe_parse(const char *name, pl_quant_recipe *out) {
    for (size_t i = 0; i < sizeof mixes / sizeof mixes[0]; i++)
        if (name_eq(name, mixes[i].name)) {
            *out = (pl_quant_recipe){.base = mixes[i].base, .mix = (int)i + 1,
                                     .file_type = mixes[i].ftype, .name = mixes[i].name};
            return PL_OK;
        }
    pl_wtype w = pl_gguf_wtype(pl_gguf_type_by_name(name));
    const pl_wtype_traits *tr = pl_wtype_traits_of(w);
    if (tr && tr->from_f32 && pl_gguf_type_of_wtype(w)) {
        *out = (pl_quant_recipe){.base = w, .mix = 0, .file_type = plain_ftype(w),
                                 .name = tr->name};
        return PL_OK;
    }
    return pl_fail(PL_ERR_UNSUPPORTED, "quantize: %s is not a type this build can write", name);
}

const char *pl_quant_recipe_names(void) { return "q4_k_m, q5_k_m"; }

/* llama.cpp's use_more_bits: the first and last eighth, and every third layer between. */
static bool more_bits(int layer, int n_layers) {
    return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

pl_wtype pl_quant_fallback(pl_wtype t, int cols) {
    for (;;) {
        const pl_wtype_traits *tr = pl_wtype_traits_of(t);
        if (!tr || cols % tr->block_elems == 0) return t;
        switch (t) {
        case PL_WTYPE_Q4_K: t = PL_WTYPE_Q4_0; break;
        case PL_WTYPE_Q5_K: case PL_WTYPE_Q6_K: t = PL_WTYPE_Q8_0; break;
        default: t = PL_WTYPE_F16; break;
        }
    }
}

pl_wtype pl_quant_recipe_type(const pl_quant_recipe *r, const pl_model_config *c,
                              pl_tensor_role role, int layer, pl_wtype *asked) {
    pl_wtype t = pl_model_tensor_type(role, r->base);
    if (r->mix && t != PL_WTYPE_F32) {
        bool output = role == PL_T_OUTPUT || (role == PL_T_TOKEN_EMBD && c->tied_embeddings);
        bool v_down = (role == PL_T_ATTN_V || role == PL_T_FFN_DOWN ||
                       role == PL_T_FFN_DOWN_EXPS || role == PL_T_FFN_DOWN_SHEXP) &&
                      more_bits(layer, c->n_layers);
        if (output || v_down) t = PL_WTYPE_Q6_K;
    }
    if (asked) *asked = t;
    int rows, cols;
    pl_model_tensor_shape(c, role, &rows, &cols);
    return pl_quant_fallback(t, cols);
}
