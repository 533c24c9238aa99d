/*
 * model/config.c - checking a model configuration, llama2.c's fixed conventions, and the
 * rotary frequencies a config implies.
 *
 * Every loader fills a pl_model_config from its header and passes it here before computing a
 * single size: each field is range-checked on its own first (so a header claiming 10^9 layers
 * is reported as "n_layers = 1000000000" rather than as an overflow or a failed allocation),
 * then the relations between fields (heads divide, ids inside the vocabulary).
 */
#include <math.h>
#include <string.h>

#include "model/model_internal.h"

/* The name a file gives field: keys holds (field, name) pairs, NULL-terminated. */
static const char *named(const char *const *keys, const char *field) {
    for (size_t i = 0; keys && keys[i] && keys[i + 1]; i += 2)
        if (strcmp(keys[i], field) == 0) return keys[i + 1];
    return field;
}

static pl_status range(pl_status code, const char *what, const char *const *keys,
                       const char *field, long long v, long long lo, long long hi) {
    if (v >= lo && v <= hi) return PL_OK;
    return pl_fail(code, "%s: %s = %lld is out of range [%lld, %lld]", what, named(keys, field),
                   v, lo, hi);
}

static pl_status positive_finite(pl_status code, const char *what, const char *const *keys,
                                 const char *field, float v) {
    if (isfinite(v) && v > 0.0f) return PL_OK;
    return pl_fail(code, "%s: %s = %g must be finite and positive", what, named(keys, field),
                   (double)v);
}

/* Experts: all four sizes set, top-k within the experts, and none for a dense family. */
static pl_status check_experts(const pl_model_config *c, const pl_arch_info *arch,
                               pl_status code, const char *what, const char *const *keys) {
    if (!arch->moe) {
        if (c->n_experts != 0 || c->n_experts_used != 0)
            return pl_fail(code, "%s: %s = %d, but %s has no experts", what,
                           named(keys, "n_experts"), c->n_experts, arch->hf_class);
        return PL_OK;
    }
    PL_TRY(range(code, what, keys, "n_experts", c->n_experts, 1, PL_MODEL_MAX_EXPERTS));
    if (c->n_experts_used < 1 || c->n_experts_used > c->n_experts)
        return pl_fail(code, "%s: %s = %d must be in [1, %s = %d]", what,
                       named(keys, "n_experts_used"), c->n_experts_used,
                       named(keys, "n_experts"), c->n_experts);
    PL_TRY(range(code, what, keys, "expert_hidden_dim", c->expert_hidden_dim, 1,
                 PL_MODEL_MAX_HIDDEN));
    if (arch->shared_expert)
        PL_TRY(range(code, what, keys, "shared_hidden_dim", c->shared_hidden_dim, 1,
                     PL_MODEL_MAX_HIDDEN));
    return PL_OK;
}

/* Gemma's scales: a soft-cap of 0 means none, so a stated cap must be positive and finite
 * (checked where it is read: a config.json null is none, 0.0 is refused there). */
static pl_status check_gemma(const pl_model_config *c, pl_status code, const char *what,
                             const char *const *keys) {
    const struct { const char *field; float v; } v[] = {
        {"query_pre_attn_scalar", c->query_pre_attn_scalar},
        {"attn_logit_softcapping", c->attn_softcap},
        {"final_logit_softcapping", c->final_softcap},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (v[i].v != 0.0f) PL_TRY(positive_finite(code, what, keys, v[i].field, v[i].v));
    return PL_OK;
}

pl_status pl_model_config_check(const pl_model_config *c, pl_status code, const char *what,
                                const char *const *keys) {
    const pl_arch_info *arch = pl_arch_get(c->arch);
    if (!arch)
        return pl_fail(code, "%s: arch = %d is not a known architecture", what, (int)c->arch);
    PL_TRY(range(code, what, keys, "dim", c->dim, 1, PL_MODEL_MAX_DIM));
    PL_TRY(range(code, what, keys, "hidden_dim", c->hidden_dim, 1, PL_MODEL_MAX_HIDDEN));
    PL_TRY(range(code, what, keys, "n_layers", c->n_layers, 1, PL_MODEL_MAX_LAYERS));
    PL_TRY(range(code, what, keys, "n_heads", c->n_heads, 1, PL_MODEL_MAX_HEADS));
    PL_TRY(range(code, what, keys, "n_kv_heads", c->n_kv_heads, 1, c->n_heads));
    PL_TRY(range(code, what, keys, "head_dim", c->head_dim, 2, PL_MODEL_MAX_HEAD_DIM));
    PL_TRY(range(code, what, keys, "vocab_size", c->vocab_size, 1, PL_MODEL_MAX_VOCAB));
    PL_TRY(range(code, what, keys, "max_seq_len", c->max_seq_len, 1, PL_MODEL_MAX_SEQ));
    if (c->n_heads % c->n_kv_heads != 0)
        return pl_fail(code, "%s: %s = %d is not a multiple of %s = %d", what,
                       named(keys, "n_heads"), c->n_heads, named(keys, "n_kv_heads"),
                       c->n_kv_heads);
    if (c->head_dim % 2 != 0)
        return pl_fail(code, "%s: head_dim = %d must be even (RoPE rotates pairs)", what,
                       c->head_dim);
    PL_TRY(positive_finite(code, what, keys, "norm_eps", c->norm_eps));
    PL_TRY(positive_finite(code, what, keys, "rope_theta", c->rope_theta));
    PL_TRY(range(code, what, keys, "rope_layout", c->rope_layout, 0, 1));
    switch (c->rope_scaling) {
    case PL_ROPE_SCALING_NONE: break;
    case PL_ROPE_SCALING_LINEAR:
        PL_TRY(positive_finite(code, what, keys, "rope_scaling.factor", c->rope_factor));
        break;
    case PL_ROPE_SCALING_LLAMA3:
        PL_TRY(positive_finite(code, what, keys, "rope_scaling.factor", c->rope_factor));
        PL_TRY(positive_finite(code, what, keys, "rope_scaling.low_freq_factor",
                               c->rope_low_freq_factor));
        PL_TRY(positive_finite(code, what, keys, "rope_scaling.high_freq_factor",
                               c->rope_high_freq_factor));
        if (!(c->rope_high_freq_factor > c->rope_low_freq_factor))
            return pl_fail(code,
                           "%s: rope_scaling.high_freq_factor = %g must exceed "
                           "low_freq_factor = %g",
                           what, (double)c->rope_high_freq_factor,
                           (double)c->rope_low_freq_factor);
        PL_TRY(range(code, what, keys, "rope_scaling.original_max_position_embeddings",
                     c->rope_original_max_pos, 1, PL_MODEL_MAX_SEQ));
        break;
    case PL_ROPE_SCALING_LONGROPE:
        PL_TRY(range(code, what, keys, "rope_scaling.original_max_position_embeddings",
                     c->rope_original_max_pos, 1, PL_MODEL_MAX_SEQ));
        PL_TRY(positive_finite(code, what, keys, "rope_scaling.attention_factor",
                               c->rope_attn_factor));
        for (int j = 0; j < c->head_dim / 2; j++) {
            PL_TRY(positive_finite(code, what, keys, "rope_scaling.short_factor[]",
                                   c->rope_short_factors[j]));
            PL_TRY(positive_finite(code, what, keys, "rope_scaling.long_factor[]",
                                   c->rope_long_factors[j]));
        }
        break;
    default:
        return pl_fail(code, "%s: rope_scaling = %d is not a known kind", what,
                       (int)c->rope_scaling);
    }
    PL_TRY(range(code, what, keys, "sliding_window", c->sliding_window, 0, PL_MODEL_MAX_SEQ));
    if (c->sliding_window > 0 && !arch->sliding_window)
        return pl_fail(code, "%s: sliding_window = %d, but %s has no sliding-window attention",
                       what, c->sliding_window, arch->hf_class);
    PL_TRY(range(code, what, keys, "swa_pattern", c->swa_pattern, 0, PL_MODEL_MAX_LAYERS));
    if (c->rope_theta_local != 0.0f)
        PL_TRY(positive_finite(code, what, keys, "rope_theta_local", c->rope_theta_local));
    PL_TRY(check_experts(c, arch, code, what, keys));
    PL_TRY(check_gemma(c, code, what, keys));
    PL_TRY(range(code, what, keys, "bos_id", c->bos_id, -1, (long long)c->vocab_size - 1));
    PL_TRY(range(code, what, keys, "n_eos", c->n_eos, 0, PL_MODEL_MAX_EOS));
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] < 0 || c->eos_ids[i] >= c->vocab_size)
            return pl_fail(code, "%s: %s = %d (EOS id %d of %d) is out of range [0, %d]", what,
                           named(keys, "eos_id"), c->eos_ids[i], i + 1, c->n_eos,
                           c->vocab_size - 1);
    return PL_OK;
}

pl_status pl_model_config_validate(const pl_model_config *cfg) {
    if (!cfg) return pl_fail(PL_ERR_INVALID_ARGUMENT, "model config: cfg is NULL");
    return pl_model_config_check(cfg, PL_ERR_INVALID_ARGUMENT, "model config", NULL);
}

void pl_model_config_llama2c_defaults(pl_model_config *c) {
    c->arch = PL_ARCH_LLAMA;
    c->sliding_window = 0;
    c->norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->rope_layout = 0; /* interleaved pairs (2j, 2j+1), as run.c */
    c->rope_scaling = PL_ROPE_SCALING_NONE;
    c->rope_factor = 1.0f;
    c->rope_low_freq_factor = 0.0f;
    c->rope_high_freq_factor = 0.0f;
    c->rope_original_max_pos = 0;
    c->bos_id = 1;
    c->eos_ids[0] = 2;
    c->eos_ids[1] = 1; /* stories end with BOS (id 1); EOS is never trained */
    c->n_eos = 2;
}

bool pl_model_config_add_eos(pl_model_config *c, int id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == id) return true;
    if (c->n_eos >= PL_MODEL_MAX_EOS) return false;
    c->eos_ids[c->n_eos++] = id;
    return true;
}

// ----------------------------------------------------------------------------
// rotary frequencies

void pl_model_rope_inv_freq(const pl_model_config *cfg, float *out) {
    pl_model_rope_inv_freq_layer(cfg, -1, 0, out);
}

bool pl_model_layer_windowed(const pl_model_config *cfg, int layer) {
    if (cfg->sliding_window <= 0) return false;
    return cfg->swa_pattern <= 1 || (layer + 1) % cfg->swa_pattern != 0;
}

float pl_model_attn_scale(const pl_model_config *cfg) {
    double s = cfg->query_pre_attn_scalar > 0.0f ? cfg->query_pre_attn_scalar : cfg->head_dim;
    double a = cfg->rope_scaling == PL_ROPE_SCALING_LONGROPE && cfg->rope_attn_factor > 0.0f
                   ? cfg->rope_attn_factor : 1.0;
    return (float)(a * a / sqrt(s));
}

void pl_model_rope_inv_freq_layer(const pl_model_config *cfg, int layer, int ctx, float *out) {
    int half = cfg->head_dim / 2;
    if (layer >= 0 && cfg->swa_pattern > 1 && cfg->rope_theta_local > 0.0f &&
        pl_model_layer_windowed(cfg, layer)) {
        for (int j = 0; j < half; j++)
            out[j] = (float)pow((double)cfg->rope_theta_local, -2.0 * j / cfg->head_dim);
        return;
    }
    if (cfg->rope_scaling == PL_ROPE_SCALING_LONGROPE) {
        const float *f = ctx > cfg->rope_original_max_pos ? cfg->rope_long_factors
                                                          : cfg->rope_short_factors;
        for (int j = 0; j < half; j++)
            out[j] = (float)(pow((double)cfg->rope_theta, -2.0 * j / cfg->head_dim) / f[j]);
        return;
    }
    /* Llama 3.1: wavelengths shorter than original_ctx / high_freq_factor keep their frequency,
     * longer than original_ctx / low_freq_factor are slowed by factor, and the band between
     * blends the two linearly in original_ctx / wavelength. */
    double orig = cfg->rope_original_max_pos, lo = cfg->rope_low_freq_factor,
           hi = cfg->rope_high_freq_factor, factor = cfg->rope_factor;
    for (int j = 0; j < half; j++) {
        double f = pow((double)cfg->rope_theta, -2.0 * j / cfg->head_dim);
        if (cfg->rope_scaling == PL_ROPE_SCALING_LINEAR) {
            f /= factor;
        } else if (cfg->rope_scaling == PL_ROPE_SCALING_LLAMA3) {
            double wavelen = 2.0 * M_PI / f;
            if (wavelen > orig / lo) {
                f /= factor;
            } else if (wavelen >= orig / hi) {
                double smooth = (orig / wavelen - lo) / (hi - lo);
                f = (1.0 - smooth) * f / factor + smooth * f;
            }
        }
        out[j] = (float)f;
    }
}

