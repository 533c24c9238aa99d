/*
 * model/config.c - checking a model configuration, and llama2.c's fixed conventions.
 *
 * Every loader fills a pl_model_config from its header and passes it here before computing a
 * single size: each field is range-checked on its own first (so a header claiming 10^9 layers
 * is reported as "n_layers = 1000000000" rather than as an overflow or a failed allocation),
 * then the relations between fields (heads divide, ids inside the vocabulary).
 */
#include <math.h>

#include "model/model_internal.h"

static pl_status range(pl_status code, const char *what, const char *field, long long v,
                       long long lo, long long hi) {
    if (v >= lo && v <= hi) return PL_OK;
    return pl_fail(code, "%s: %s = %lld is out of range [%lld, %lld]", what, field, v, lo, hi);
}

static pl_status positive_finite(pl_status code, const char *what, const char *field, float v) {
    if (isfinite(v) && v > 0.0f) return PL_OK;
    return pl_fail(code, "%s: %s = %g must be finite and positive", what, field, (double)v);
}

pl_status pl_model_config_check(const pl_model_config *c, pl_status code, const char *what) {
    PL_TRY(range(code, what, "dim", c->dim, 1, PL_MODEL_MAX_DIM));
    PL_TRY(range(code, what, "hidden_dim", c->hidden_dim, 1, PL_MODEL_MAX_HIDDEN));
    PL_TRY(range(code, what, "n_layers", c->n_layers, 1, PL_MODEL_MAX_LAYERS));
    PL_TRY(range(code, what, "n_heads", c->n_heads, 1, PL_MODEL_MAX_HEADS));
    PL_TRY(range(code, what, "n_kv_heads", c->n_kv_heads, 1, c->n_heads));
    PL_TRY(range(code, what, "head_dim", c->head_dim, 2, PL_MODEL_MAX_HEAD_DIM));
    PL_TRY(range(code, what, "vocab_size", c->vocab_size, 1, PL_MODEL_MAX_VOCAB));
    PL_TRY(range(code, what, "max_seq_len", c->max_seq_len, 1, PL_MODEL_MAX_SEQ));
    if (c->n_heads % c->n_kv_heads != 0)
        return pl_fail(code, "%s: n_heads = %d is not a multiple of n_kv_heads = %d", what,
                       c->n_heads, c->n_kv_heads);
    if (c->head_dim % 2 != 0)
        return pl_fail(code, "%s: head_dim = %d must be even (RoPE rotates pairs)", what,
                       c->head_dim);
    PL_TRY(positive_finite(code, what, "norm_eps", c->norm_eps));
    PL_TRY(positive_finite(code, what, "rope_theta", c->rope_theta));
    PL_TRY(range(code, what, "rope_layout", c->rope_layout, 0, 1));
    switch (c->rope_scaling) {
    case PL_ROPE_SCALING_NONE: break;
    case PL_ROPE_SCALING_LINEAR:
        PL_TRY(positive_finite(code, what, "rope_scaling.factor", c->rope_factor));
        break;
    case PL_ROPE_SCALING_LLAMA3:
        PL_TRY(positive_finite(code, what, "rope_scaling.factor", c->rope_factor));
        PL_TRY(positive_finite(code, what, "rope_scaling.low_freq_factor",
                               c->rope_low_freq_factor));
        PL_TRY(positive_finite(code, what, "rope_scaling.high_freq_factor",
                               c->rope_high_freq_factor));
        if (!(c->rope_high_freq_factor > c->rope_low_freq_factor))
            return pl_fail(code,
                           "%s: rope_scaling.high_freq_factor = %g must exceed "
                           "low_freq_factor = %g",
                           what, (double)c->rope_high_freq_factor,
                           (double)c->rope_low_freq_factor);
        PL_TRY(range(code, what, "rope_scaling.original_max_position_embeddings",
                     c->rope_original_max_pos, 1, PL_MODEL_MAX_SEQ));
        break;
    default:
        return pl_fail(code, "%s: rope_scaling = %d is not a known kind", what,
                       (int)c->rope_scaling);
    }
    PL_TRY(range(code, what, "bos_id", c->bos_id, -1, (long long)c->vocab_size - 1));
    PL_TRY(range(code, what, "eos_id", c->eos_id, -1, (long long)c->vocab_size - 1));
    return PL_OK;
}

pl_status pl_model_config_validate(const pl_model_config *cfg) {
    if (!cfg) return pl_fail(PL_ERR_INVALID_ARGUMENT, "model config: cfg is NULL");
    return pl_model_config_check(cfg, PL_ERR_INVALID_ARGUMENT, "model config");
}

void pl_model_config_llama2c_defaults(pl_model_config *c) {
    c->norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->rope_layout = 0; /* interleaved pairs (2j, 2j+1), as run.c */
    c->rope_scaling = PL_ROPE_SCALING_NONE;
    c->rope_factor = 1.0f;
    c->rope_low_freq_factor = 0.0f;
    c->rope_high_freq_factor = 0.0f;
    c->rope_original_max_pos = 0;
    c->bos_id = 1;
    c->eos_id = 2;
    c->bos_ends_text = true; /* stories end with BOS (id 1); EOS is never trained */
}
