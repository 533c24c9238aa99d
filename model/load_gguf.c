/*
 * model/load_gguf.c - GGUF files (llama.cpp's format): general.architecture llama (Llama 1/2/3,
 * TinyLlama, Mistral, which llama.cpp files as llama with a sliding window, and Mixtral, llama
 * with expert_count), qwen2, qwen3, qwen2moe, qwen3moe, gemma2, gemma3 and phi3,
 * memory-mapped, tensors in any type util/wtype.h has a row for.
 *
 * The container is parsed and validated by gguf/ (every length, count, dim and offset checked
 * against the file). Here: the hyperparameters from the <arch>.* keys, checked by
 * pl_model_config_check under their GGUF names; the tensors by the tensor table's GGUF names
 * (blk.N.attn_q.weight ...), each checked for shape (ne = {cols, rows}) and type; anything
 * else in the file (a tensor the architecture lacks, a layer past block_count) is refused, as
 * a config and weights that disagree would compute another model.
 *
 * RoPE without a copy: llama.cpp's converter permutes the q/k rows of llama models back to
 * Meta's interleaved order, which its "normal" rope rotates (pairs 2j, 2j+1); Qwen2/Qwen3 keep
 * Hugging Face's order and use its "neox" rope (pairs j, j + head_dim/2). So the weights are
 * used as stored and rope_layout says which: interleaved for llama, rotate-half for qwen.
 * Llama 3 scaling comes as rope_freqs.weight (gguf_rope.c); linear as rope.scaling.type.
 *
 * What the other families add, under llama.cpp's keys and names:
 *   - experts: <arch>.expert_count, expert_used_count, expert_feed_forward_length (llama:
 *     feed_forward_length), expert_shared_feed_forward_length (qwen2moe), and the stacked
 *     blk.N.ffn_{gate,up,down}_exps (ne {cols, rows, n_expert}); the chosen experts' weights
 *     are renormalised for llama and qwen3moe, not for qwen2moe (llama.cpp's builds), unless
 *     expert_weights_norm says otherwise.
 *   - gemma2/gemma3: norms already stored as 1 + w (llama.cpp's converter adds the 1);
 *     attention.sliding_window on all but every sliding_window_pattern-th layer (2 and 6 by
 *     default); gemma2's attn_logit_softcapping and final_logit_softcapping (50 and 30 when
 *     absent, as llama.cpp), gemma3's final one (none when absent); gemma3's local layers
 *     rotate with rope.freq_base_swa (10000 when absent). The query scale is llama.cpp's:
 *     head_dim, or dim / n_heads for the 27B shapes (46 and 62 layers), unless pagellm's own
 *     attention.query_pre_attn_scalar key says otherwise.
 *   - phi3: attn_qkv (q, k, v rows) and ffn_up (gate rows, then up rows) split at load;
 *     longrope as rope_factors_long/short.weight, rope.scaling.attn_factor and
 *     rope.scaling.original_context_length.
 *
 * The end of text: tokenizer.ggml.eos_token_id, eot_token_id and eom_token_id (each when
 * present) form the EOS set; BOS is bos_token_id. The tokenizer lives in the same file: when
 * tokenizer.ggml.model is present, the model names the file itself as its tokenizer.
 *
 * Types: a tensor keeps its stored type (and aliases the mapping) unless a dtype is asked for
 * and the tensor is a plain float type; block-quantised tensors stay as they are. A type
 * GGUF knows but this build has no weight type for is refused with the tensor and the type.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model_internal.h"
#include "util/alloc.h"

#define ROPE_FREQS "rope_freqs.weight"
#define LLAMA3_ORIG_CTX 8192

typedef struct ctx {
    const char *path;
    const pl_gguf *g;
    const char *arch; /* general.architecture */
    char key[128];
} ctx;

/* "<arch>.<k>" */
static const char *K(ctx *x, const char *k) {
    snprintf(x->key, sizeof x->key, "%s.%s", x->arch, k);
    return x->key;
}

static pl_status get_i(ctx *x, const char *k, bool required, int64_t dflt, int *out) {
    int64_t v;
    PL_TRY(pl_gguf_get_int(x->g, K(x, k), required, dflt, 0, INT32_MAX, &v));
    *out = (int)v;
    return PL_OK;
}

// ----------------------------------------------------------------------------
// hyperparameters

static pl_status get_f(ctx *x, const char *k, bool required, double dflt, float *out) {
    double v;
    PL_TRY(pl_gguf_get_float(x->g, K(x, k), required, dflt, &v));
    *out = (float)v;
    return PL_OK;
}

/* head_dim / 2 floats of the tensor called name into out (absent: *found false). */
static pl_status read_factors(ctx *x, const char *name, int half, float *out, bool *found) {
    const pl_gguf_tensor *t = pl_gguf_tensor_find(x->g, name);
    *found = t != NULL;
    if (!t) return PL_OK;
    if (t->n_dims != 1 || t->ne[0] != (uint64_t)half || pl_gguf_wtype(t->type) == PL_WTYPE_NONE ||
        t->type->block_elems != 1)
        return pl_fail(PL_ERR_FORMAT, "%s: %s must be %d floats (head_dim / 2)", x->path, name,
                       half);
    pl_wtype_convert(out, PL_WTYPE_F32, t->data, pl_gguf_wtype(t->type), (size_t)half);
    return PL_OK;
}

#define PHI3_LONG "rope_factors_long.weight"
#define PHI3_SHORT "rope_factors_short.weight"

/* Phi-3's longrope: both factor tensors, the original context and the attention factor. */
static pl_status read_longrope(ctx *x, pl_model_config *c) {
    int half = c->head_dim / 2;
    bool has_long, has_short;
    PL_TRY(read_factors(x, PHI3_LONG, half, c->rope_long_factors, &has_long));
    PL_TRY(read_factors(x, PHI3_SHORT, half, c->rope_short_factors, &has_short));
    if (!has_long && !has_short) return PL_OK;
    if (!has_long || !has_short)
        return pl_fail(PL_ERR_FORMAT, "%s: %s without %s", x->path,
                       has_long ? PHI3_LONG : PHI3_SHORT, has_long ? PHI3_SHORT : PHI3_LONG);
    c->rope_scaling = PL_ROPE_SCALING_LONGROPE;
    PL_TRY(get_i(x, "rope.scaling.original_context_length", true, 0,
                 &c->rope_original_max_pos));
    return get_f(x, "rope.scaling.attn_factor", false, 1.0, &c->rope_attn_factor);
}

/* The experts of a qwen2moe/qwen3moe/llama (Mixtral) file. */
static pl_status read_experts(ctx *x, const pl_arch_info *arch, pl_model_config *c) {
    PL_TRY(get_i(x, "expert_count", true, 0, &c->n_experts));
    PL_TRY(get_i(x, "expert_used_count", true, 0, &c->n_experts_used));
    if (arch->arch == PL_ARCH_MIXTRAL) c->expert_hidden_dim = c->hidden_dim;
    else PL_TRY(get_i(x, "expert_feed_forward_length", true, 0, &c->expert_hidden_dim));
    if (arch->shared_expert)
        PL_TRY(get_i(x, "expert_shared_feed_forward_length", true, 0, &c->shared_hidden_dim));
    return pl_gguf_get_bool(x->g, K(x, "expert_weights_norm"), false,
                            arch->arch != PL_ARCH_QWEN2_MOE, &c->norm_topk_prob);
}

/* A soft-cap key: present, it must be positive (llama.cpp divides by it). */
static pl_status read_cap(ctx *x, const char *k, double dflt, float *out) {
    PL_TRY(get_f(x, k, false, dflt, out));
    if (pl_gguf_find(x->g, K(x, k)) && !(*out > 0.0f && isfinite(*out)))
        return pl_fail(PL_ERR_FORMAT, "%s: %s = %g must be positive (a soft-cap of 0 divides by "
                       "zero)", x->path, x->key, (double)*out);
    return PL_OK;
}

static pl_status read_gemma(ctx *x, const pl_arch_info *arch, pl_model_config *c) {
    bool g2 = arch->arch == PL_ARCH_GEMMA2;
    PL_TRY(get_i(x, "attention.sliding_window", false, g2 ? 4096 : 0, &c->sliding_window));
    int pattern;
    PL_TRY(get_i(x, "attention.sliding_window_pattern", false, g2 ? 2 : 6, &pattern));
    if (pattern < 1 || pattern > PL_MODEL_MAX_LAYERS)
        return pl_fail(PL_ERR_FORMAT, "%s: %s = %d is out of range", x->path, x->key, pattern);
    c->swa_pattern = pattern == 1 ? 0 : pattern;
    if (pattern == 1) c->sliding_window = 0;
    if (c->sliding_window > c->max_seq_len)
        return pl_fail(PL_ERR_FORMAT, "%s: %s.attention.sliding_window = %d is larger than the "
                       "context (%s.context_length = %d)", x->path, x->arch, c->sliding_window,
                       x->arch, c->max_seq_len);
    if (g2) {
        PL_TRY(read_cap(x, "attn_logit_softcapping", 50.0, &c->attn_softcap));
        PL_TRY(read_cap(x, "final_logit_softcapping", 30.0, &c->final_softcap));
    } else {
        PL_TRY(read_cap(x, "final_logit_softcapping", 0.0, &c->final_softcap));
        if (c->swa_pattern > 1)
            PL_TRY(get_f(x, "rope.freq_base_swa", false, 10000.0, &c->rope_theta_local));
    }
    bool big = c->n_layers == (g2 ? 46 : 62); /* llama.cpp's 27B rule */
    double dflt = big && c->n_heads > 0 ? (double)c->dim / c->n_heads : (double)c->head_dim;
    return get_f(x, "attention.query_pre_attn_scalar", false, dflt, &c->query_pre_attn_scalar);
}

static pl_status read_rope(ctx *x, pl_model_config *c) {
    pl_gguf_str type;
    PL_TRY(pl_gguf_get_str(x->g, K(x, "rope.scaling.type"), false, &type));
    const pl_gguf_tensor *freqs = pl_gguf_tensor_find(x->g, ROPE_FREQS);
    c->rope_scaling = PL_ROPE_SCALING_NONE;
    c->rope_factor = 1.0f;
    if (type.p && !pl_gguf_str_eq(type, "none")) {
        if (!pl_gguf_str_eq(type, "linear"))
            return pl_fail(PL_ERR_UNSUPPORTED, "%s: %s = %.*s is not supported (none, linear; "
                           "Llama 3 scaling as rope_freqs.weight)", x->path, x->key,
                           (int)(type.n > 32 ? 32 : type.n), type.p);
        if (freqs)
            return pl_fail(PL_ERR_UNSUPPORTED, "%s: both linear scaling and %s", x->path,
                           ROPE_FREQS);
        double f;
        PL_TRY(pl_gguf_get_float(x->g, K(x, "rope.scaling.factor"), true, 1.0, &f));
        c->rope_scaling = PL_ROPE_SCALING_LINEAR;
        c->rope_factor = (float)f;
        return PL_OK;
    }
    if (!freqs) return PL_OK;
    int half = c->head_dim / 2;
    if (freqs->n_dims != 1 || freqs->ne[0] != (uint64_t)half || pl_gguf_wtype(freqs->type) ==
        PL_WTYPE_NONE || freqs->type->block_elems != 1)
        return pl_fail(PL_ERR_FORMAT, "%s: %s must be %d floats (head_dim / 2)", x->path,
                       ROPE_FREQS, half);
    float f[PL_MODEL_MAX_HEAD_DIM / 2];
    pl_wtype_convert(f, PL_WTYPE_F32, freqs->data, pl_gguf_wtype(freqs->type), (size_t)half);
    int orig;
    PL_TRY(get_i(x, "rope.scaling.original_context_length", false, LLAMA3_ORIG_CTX, &orig));
    if (orig < 1 || orig > PL_MODEL_MAX_SEQ)
        return pl_fail(PL_ERR_FORMAT, "%s: %s = %d is out of range", x->path, x->key, orig);
    return pl_model_rope_from_factors(c, f, orig, x->path);
}

/* A token id key of tokenizer.ggml.*: -1 when absent. */
static pl_status token_id(ctx *x, const char *key, int vocab, int *out) {
    int64_t v;
    PL_TRY(pl_gguf_get_int(x->g, key, false, -1, -1, vocab - 1, &v));
    *out = (int)v;
    return PL_OK;
}

static pl_status read_ids(ctx *x, pl_model_config *c) {
    PL_TRY(token_id(x, "tokenizer.ggml.bos_token_id", c->vocab_size, &c->bos_id));
    static const char *const eos_keys[] = {"tokenizer.ggml.eos_token_id",
                                           "tokenizer.ggml.eot_token_id",
                                           "tokenizer.ggml.eom_token_id"};
    c->n_eos = 0;
    for (size_t i = 0; i < 3; i++) {
        int id;
        PL_TRY(token_id(x, eos_keys[i], c->vocab_size, &id));
        if (id >= 0) pl_model_config_add_eos(c, id);
    }
    return PL_OK;
}

/* The names pl_model_config_check reports fields by (filled per architecture). */
typedef struct key_names {
    char buf[16][96];
    const char *pairs[40];
} key_names;

static void name_keys(ctx *x, key_names *k) {
    static const char *const map[][2] = {
        {"dim", "embedding_length"},         {"hidden_dim", "feed_forward_length"},
        {"n_layers", "block_count"},         {"n_heads", "attention.head_count"},
        {"n_kv_heads", "attention.head_count_kv"}, {"head_dim", "attention.key_length"},
        {"max_seq_len", "context_length"},   {"norm_eps", "attention.layer_norm_rms_epsilon"},
        {"rope_theta", "rope.freq_base"},    {"sliding_window", "attention.sliding_window"},
        {"n_experts", "expert_count"},       {"n_experts_used", "expert_used_count"},
        {"expert_hidden_dim", "expert_feed_forward_length"},
        {"shared_hidden_dim", "expert_shared_feed_forward_length"},
    };
    size_t n = 0;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        snprintf(k->buf[i], sizeof k->buf[i], "%s.%s", x->arch, map[i][1]);
        k->pairs[n++] = map[i][0];
        k->pairs[n++] = k->buf[i];
    }
    k->pairs[n++] = "vocab_size";
    k->pairs[n++] = "token_embd.weight's rows";
    k->pairs[n++] = "bos_id";
    k->pairs[n++] = "tokenizer.ggml.bos_token_id";
    k->pairs[n] = NULL;
}

static pl_status read_config(ctx *x, const pl_arch_info *arch, pl_model_config *c) {
    memset(c, 0, sizeof *c);
    int experts;
    PL_TRY(get_i(x, "expert_count", false, 0, &experts));
    if (arch->arch == PL_ARCH_LLAMA && experts > 0)
        arch = pl_arch_get(PL_ARCH_MIXTRAL); /* llama.cpp files Mixtral as llama */
    else if (experts > 0 && !arch->moe)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: %s = %d: %s has no experts", x->path, x->key,
                       experts, x->arch);
    c->arch = arch->arch;
    PL_TRY(get_i(x, "embedding_length", true, 0, &c->dim));
    PL_TRY(get_i(x, "feed_forward_length", true, 0, &c->hidden_dim));
    PL_TRY(get_i(x, "block_count", true, 0, &c->n_layers));
    PL_TRY(get_i(x, "attention.head_count", true, 0, &c->n_heads));
    PL_TRY(get_i(x, "attention.head_count_kv", false, c->n_heads, &c->n_kv_heads));
    PL_TRY(get_i(x, "context_length", true, 0, &c->max_seq_len));
    double eps, theta;
    PL_TRY(pl_gguf_get_float(x->g, K(x, "attention.layer_norm_rms_epsilon"), true, 1e-5, &eps));
    PL_TRY(pl_gguf_get_float(x->g, K(x, "rope.freq_base"), false, 10000.0, &theta));
    c->norm_eps = (float)eps;
    c->rope_theta = (float)theta;
    int hd = c->n_heads > 0 && c->dim % c->n_heads == 0 ? c->dim / c->n_heads : 0;
    PL_TRY(get_i(x, "attention.key_length", false, hd, &c->head_dim));
    if (c->head_dim == 0)
        return pl_fail(PL_ERR_FORMAT, "%s: %s.embedding_length = %d is not a multiple of "
                       "attention.head_count = %d and attention.key_length is not given",
                       x->path, x->arch, c->dim, c->n_heads);
    int vl, rot;
    PL_TRY(get_i(x, "attention.value_length", false, c->head_dim, &vl));
    if (vl != c->head_dim)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: %s = %d differs from attention.key_length = %d",
                       x->path, x->key, vl, c->head_dim);
    PL_TRY(get_i(x, "rope.dimension_count", false, c->head_dim, &rot));
    if (rot != c->head_dim)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: %s = %d: partial rotary embeddings (other than "
                       "the head size %d) are not supported", x->path, x->key, rot, c->head_dim);
    if (arch->moe) PL_TRY(read_experts(x, arch, c));
    if (arch->gemma) {
        PL_TRY(read_gemma(x, arch, c));
    } else {
        PL_TRY(get_i(x, "attention.sliding_window", false, 0, &c->sliding_window));
        /* llama.cpp's phi3 converter states twice the context for the 128k models */
        if (arch->arch == PL_ARCH_PHI3 && c->sliding_window >= c->max_seq_len)
            c->sliding_window = 0;
    }
    if (c->sliding_window > 0 && !arch->sliding_window) {
        if (arch->arch != PL_ARCH_LLAMA)
            return pl_fail(PL_ERR_UNSUPPORTED, "%s: %s.attention.sliding_window = %d: a sliding "
                           "window is not supported for %s", x->path, x->arch,
                           c->sliding_window, x->arch);
        c->arch = PL_ARCH_MISTRAL; /* llama.cpp files Mistral as llama */
    }
    /* llama.cpp's "normal" rope for llama files, "neox" for the others */
    c->rope_layout = pl_gguf_rope_interleaved(arch->arch) ? 0 : 1;
    if (c->head_dim >= 2 && c->head_dim <= PL_MODEL_MAX_HEAD_DIM) {
        PL_TRY(read_rope(x, c));
        if (arch->arch == PL_ARCH_PHI3) PL_TRY(read_longrope(x, c));
    }

    const pl_gguf_tensor *embd = pl_gguf_tensor_find(x->g, "token_embd.weight");
    if (!embd) return pl_fail(PL_ERR_NOT_FOUND, "%s: missing tensor token_embd.weight", x->path);
    if (embd->n_dims != 2 || embd->ne[1] > PL_MODEL_MAX_VOCAB)
        return pl_fail(PL_ERR_FORMAT, "%s: tensor token_embd.weight must be (vocab, dim) with a "
                       "vocabulary of at most %d", x->path, PL_MODEL_MAX_VOCAB);
    c->vocab_size = (int)embd->ne[1];
    int vocab_key;
    PL_TRY(get_i(x, "vocab_size", false, c->vocab_size, &vocab_key));
    if (vocab_key != c->vocab_size)
        return pl_fail(PL_ERR_FORMAT, "%s: %s = %d but token_embd.weight has %d rows", x->path,
                       x->key, vocab_key, c->vocab_size);
    c->tied_embeddings = pl_gguf_tensor_find(x->g, "output.weight") == NULL;
    PL_TRY(read_ids(x, c));
    key_names k;
    name_keys(x, &k);
    return pl_model_config_check(c, PL_ERR_FORMAT, x->path, k.pairs);
}

// ----------------------------------------------------------------------------
// tensors

#define PHI3_QKV "blk.%d.attn_qkv.weight"

/* Whether name is one of the tensors c's architecture stores beside the table's: Llama 3's
 * rope_freqs, Phi-3's rope factors and fused attn_qkv (its fused ffn_up has the table's
 * name). */
static bool extra_tensor(const pl_model_config *c, const char *name, long *layer) {
    if (strcmp(name, ROPE_FREQS) == 0)
        return c->arch != PL_ARCH_QWEN2 && c->arch != PL_ARCH_QWEN3;
    if (c->arch != PL_ARCH_PHI3) return false;
    return strcmp(name, PHI3_LONG) == 0 || strcmp(name, PHI3_SHORT) == 0 ||
           pl_tensor_name_match(PHI3_QKV, name, layer);
}

/* Every tensor of the file is one the model takes (or rope_freqs, read above). */
static pl_status check_unexpected(ctx *x, const pl_model_config *c) {
    for (size_t i = 0; i < x->g->n_tensors; i++) {
        char name[PL_GGUF_MAX_NAME + 1];
        const pl_gguf_tensor *t = &x->g->tensors[i];
        snprintf(name, sizeof name, "%.*s", (int)t->name.n, t->name.p);
        long layer = -1;
        bool known = extra_tensor(c, name, &layer);
        for (int r = 0; r < PL_T_COUNT && !known; r++) {
            if (!pl_model_has_tensor(c, (pl_tensor_role)r)) continue;
            known = pl_tensor_name_match(pl_tensor_gguf_name(c->arch, (pl_tensor_role)r), name,
                                         &layer);
        }
        if (!known)
            return pl_fail(PL_ERR_FORMAT, "%s: tensor %s is not part of a %s model", x->path, name,
                           pl_arch_get(c->arch)->hf_class);
        if (layer >= c->n_layers)
            return pl_fail(PL_ERR_FORMAT, "%s: tensor %s is beyond %s.block_count = %d", x->path,
                           name, x->arch, c->n_layers);
    }
    return PL_OK;
}

/* Phi-3's fused tensors: the fused tensor a part of role lives in, its rows and the part's
 * first row. False for any other role (and q/k/v of a file that stores them apart). */
static bool fused_source(ctx *x, const pl_model_config *c, pl_tensor_role role, int layer,
                         char *name, size_t cap, int *rows, int *row0) {
    if (c->arch != PL_ARCH_PHI3) return false;
    int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim, F = c->hidden_dim;
    if (role == PL_T_FFN_GATE || role == PL_T_FFN_UP) {
        snprintf(name, cap, "blk.%d.ffn_up.weight", layer);
        *rows = 2 * F;
        *row0 = role == PL_T_FFN_UP ? F : 0;
        return true;
    }
    if (role != PL_T_ATTN_Q && role != PL_T_ATTN_K && role != PL_T_ATTN_V) return false;
    snprintf(name, cap, PHI3_QKV, layer);
    if (!pl_gguf_tensor_find(x->g, name)) return false;
    *rows = qd + 2 * kvd;
    *row0 = role == PL_T_ATTN_K ? qd : role == PL_T_ATTN_V ? qd + kvd : 0;
    return true;
}

/* The tensor of (role, layer): present, of a type this build stores, of the config's shape
 * (a stacked one with ne {cols, rows, n_experts}; a one-row matrix also as ne {cols}); a
 * part of a fused tensor: that tensor, with *src_off the part's byte offset in it. */
static pl_status find_tensor(ctx *x, const pl_model_config *c, pl_tensor_role role, int layer,
                             const pl_gguf_tensor **out, pl_wtype *type, char *name, size_t cap,
                             size_t *src_off) {
    int rows, cols, row0 = 0;
    pl_model_tensor_shape(c, role, &rows, &cols);
    const pl_tensor_spec *spec = pl_tensor_spec_of(role);
    bool fused = fused_source(x, c, role, layer, name, cap, &rows, &row0);
    if (!fused) snprintf(name, cap, pl_tensor_gguf_name(c->arch, role), layer);
    *src_off = 0;
    const pl_gguf_tensor *t = pl_gguf_tensor_find(x->g, name);
    if (!t) return pl_fail(PL_ERR_NOT_FOUND, "%s: missing tensor %s", x->path, name);
    *type = pl_gguf_wtype(t->type);
    if (*type == PL_WTYPE_NONE)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: tensor %s: type %s is not supported by this "
                       "build", x->path, name, t->type->name);
    bool vector = spec->rows == PL_DIM_NONE;
    uint64_t E = (uint64_t)c->n_experts;
    bool ok = vector ? t->n_dims == 1 && t->ne[0] == (uint64_t)cols
            : spec->per_expert ? t->n_dims == 3 && t->ne[0] == (uint64_t)cols &&
                                     t->ne[1] * E == (uint64_t)rows && t->ne[2] == E
            : (t->n_dims == 2 && t->ne[0] == (uint64_t)cols && t->ne[1] == (uint64_t)rows) ||
                  (rows == 1 && t->n_dims == 1 && t->ne[0] == (uint64_t)cols);
    if (!ok) {
        char got[96] = "";
        for (int d = 0, o = 0; d < t->n_dims; d++)
            o += snprintf(got + o, sizeof got - (size_t)o, "%s%" PRIu64, d ? ", " : "", t->ne[d]);
        if (vector)
            return pl_fail(PL_ERR_FORMAT, "%s: tensor %s has ne [%s], the config needs [%d]",
                           x->path, name, got, cols);
        if (spec->per_expert)
            return pl_fail(PL_ERR_FORMAT, "%s: tensor %s has ne [%s], the config needs [%d, %d, "
                           "%d] (cols, rows, experts)", x->path, name, got, cols,
                           rows / c->n_experts, c->n_experts);
        return pl_fail(PL_ERR_FORMAT, "%s: tensor %s has ne [%s], the config needs [%d, %d] "
                       "(cols, rows)", x->path, name, got, cols, rows);
    }
    if (fused) {
        uint64_t row_bytes = 0;
        pl_wtype_bytes(*type, (uint64_t)cols, &row_bytes);
        *src_off = (size_t)row0 * (size_t)row_bytes;
    }
    *out = t;
    return PL_OK;
}

/* The type a tensor stored as src ends up in: norms and biases f32; a float matrix the asked
 * type (or its own); a block-quantised matrix stays as it is. */
static pl_wtype target_type(pl_tensor_role role, pl_wtype src, pl_wtype want) {
    const pl_wtype_traits *tr = pl_wtype_traits_of(src);
    bool is_float = tr && tr->block_elems == 1;
    return pl_model_tensor_type(role, want != PL_WTYPE_NONE && is_float ? want : src);
}

/* The memory limit from the tensor directory alone, before any weight is read or converted:
 * what pl_model_config_weight_bytes would count, tensor by tensor in its own type. */
static pl_status check_limit(ctx *x, const pl_model_config *c, pl_wtype want, uint64_t limit) {
    if (!limit) return PL_OK;
    uint64_t total = 0;
    size_t n = pl_model_n_slots(c);
    for (size_t s = 0; s < n; s++) {
        int layer, rows, cols;
        pl_tensor_role r = pl_model_slot_role(c, s, &layer);
        if (!pl_model_stores_tensor(c, r)) continue;
        const pl_gguf_tensor *t;
        pl_wtype src;
        char name[128];
        size_t off;
        PL_TRY(find_tensor(x, c, r, layer, &t, &src, name, sizeof name, &off));
        pl_model_tensor_shape(c, r, &rows, &cols);
        uint64_t bytes;
        if (!pl_wtype_bytes(target_type(r, src, want), (uint64_t)rows * (uint64_t)cols, &bytes) ||
            !pl_model_add_ok(total, (bytes + 63) & ~(uint64_t)63, &total))
            return pl_fail(PL_ERR_FORMAT, "%s: tensor %s: its size overflows", x->path, name);
    }
    if (total <= limit) return PL_OK;
    return pl_fail(PL_ERR_OUT_OF_MEMORY,
                   "%s: weights take %" PRIu64 " bytes (%.1f MiB) as loaded, more than the %" PRIu64
                   " bytes (%.1f MiB) of memory available (memory_limit_bytes, else physical "
                   "memory)", x->path, total, (double)total / 1048576.0, limit,
                   (double)limit / 1048576.0);
}

static pl_status bind_all(ctx *x, pl_model *m, pl_wtype want) {
    size_t n = pl_model_n_slots(&m->cfg);
    for (size_t s = 0; s < n; s++) {
        int layer;
        pl_tensor_role r = pl_model_slot_role(&m->cfg, s, &layer);
        if (!pl_model_stores_tensor(&m->cfg, r)) continue;
        const pl_gguf_tensor *t;
        pl_wtype src;
        char name[128];
        size_t off;
        PL_TRY(find_tensor(x, &m->cfg, r, layer, &t, &src, name, sizeof name, &off));
        PL_TRY(pl_model_bind(m, r, layer, t->data + off, src, target_type(r, src, want), name));
    }
    pl_model_tie_output(m);
    return PL_OK;
}

/* The tokenizer: the file's own when it has one, else one beside it. */
static pl_status find_tokenizer(ctx *x, pl_model *m) {
    if (pl_gguf_find(x->g, "tokenizer.ggml.model")) {
        char *p = pl_strdup(x->path);
        if (!p) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory", x->path);
        pl_free(m->tokenizer_path);
        m->tokenizer_path = p;
        return PL_OK;
    }
    char dir[4096];
    const char *slash = strrchr(x->path, '/');
    size_t n = slash ? (size_t)(slash - x->path) : 0;
    if (n >= sizeof dir) return PL_OK; /* a path this long has no neighbours we can name */
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (n == 0) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)n, x->path);
    static const char *const names[] = {"tokenizer.json", "tokenizer.model", NULL};
    return pl_model_find_tokenizer(m, dir, names);
}

static pl_status load(pl_model_file *f, const pl_gguf *g, const pl_model_load_options *opt,
                      uint64_t limit, pl_model **out) {
    ctx x = {.path = f->path, .g = g};
    pl_gguf_str an;
    PL_TRY(pl_gguf_get_str(g, "general.architecture", true, &an));
    char arch_name[64];
    snprintf(arch_name, sizeof arch_name, "%.*s", (int)(an.n > 48 ? 48 : an.n), an.p);
    const pl_arch_info *arch = pl_gguf_str_eq(an, arch_name) ? pl_arch_by_gguf(arch_name) : NULL;
    if (!arch)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: general.architecture = %s is not supported "
                       "(llama, qwen2, qwen3, qwen2moe, qwen3moe, gemma2, gemma3, phi3)", f->path,
                       arch_name);
    x.arch = arch_name;
    pl_model_config c;
    PL_TRY(read_config(&x, arch, &c));
    PL_TRY(check_unexpected(&x, &c));
    pl_wtype want = pl_wtype_of_dtype(opt->dtype);
    PL_TRY(check_limit(&x, &c, want, limit));
    pl_model *m;
    PL_TRY(pl_model_shell_create(&c, f->path, &m));
    pl_status s = bind_all(&x, m, want);
    if (s == PL_OK) s = find_tokenizer(&x, m);
    if (s == PL_OK) s = pl_model_own_file(m, f);
    if (s != PL_OK) {
        pl_model_free(m);
        return s;
    }
    *out = m;
    return PL_OK;
}

pl_status pl_model_load_gguf(const char *path, const pl_model_load_options *opt,
                             uint64_t max_weight_bytes, pl_model **out) {
    pl_model_file f;
    PL_TRY(pl_model_file_map(path, &f));
    pl_gguf g;
    pl_status s = pl_gguf_parse(f.data, f.size, f.path, &g);
    if (s == PL_OK) {
        s = load(&f, &g, opt, max_weight_bytes, out);
        pl_gguf_free(&g);
    }
    pl_model_file_unmap(&f); /* no-op when the model took the mapping */
    return s;
}
