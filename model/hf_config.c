/*
 * model/hf_config.c - a Hugging Face directory's config.json (and generation_config.json) as a
 * pl_model_config.
 *
 * The architecture comes from "architectures" (and "model_type", which must agree) through
 * the rows of model/arch.c. Every field is type-checked here, naming the file and the key,
 * then range-checked by pl_model_config_check, which names the config.json key too. What the
 * families add:
 *   - Llama 3: rope_scaling "llama3"; eos_token_id as a list; tie_word_embeddings (3.2).
 *   - RoPE in both layouts: top-level rope_theta + rope_scaling (transformers 4), or
 *     rope_parameters {rope_type, rope_theta, factor, ...} (transformers 5).
 *   - Mistral: sliding_window (null or absent = none).
 *   - Qwen2: q/k/v biases (always); use_sliding_window must be false (per-layer windows with
 *     max_window_layers are not implemented), and its sliding_window is then ignored.
 *   - Qwen3: head_dim given apart from hidden_size / num_attention_heads; q/k norms.
 *   - Mixtral: num_local_experts, num_experts_per_tok, intermediate_size (each expert's);
 *     the chosen experts' probabilities are renormalised.
 *   - Qwen2-MoE / Qwen3-MoE: num_experts, num_experts_per_tok, moe_intermediate_size,
 *     norm_topk_prob (absent: false, transformers' default); Qwen2-MoE's
 *     shared_expert_intermediate_size. Dense layers among the sparse ones (decoder_sparse_step
 *     other than 1, mlp_only_layers) are refused by key.
 *   - Gemma 2/3: hidden_activation gelu_pytorch_tanh, query_pre_attn_scalar, the soft-caps
 *     (null or absent: none; 0 is refused), sliding_window with the layers that use it
 *     (layer_types, else Gemma 2's alternation or Gemma 3's sliding_window_pattern),
 *     Gemma 3's rope_local_base_freq. Norm weights are stored as w for x * (1 + w): the
 *     loader adds the 1 (load_hf.c).
 *   - Phi-3: rope_scaling longrope/su with short_factor and long_factor (head_dim / 2 each)
 *     and original_max_position_embeddings; partial_rotary_factor below 1 is refused.
 * attention_bias = true is refused except for Qwen2 (whose biases it describes): Llama's
 * attention_bias also biases o_proj, which no architecture row has. mlp_bias is refused.
 * A sliding window wider than max_position_embeddings is refused (Phi-3's 128k configs state
 * twice their context: a window that never binds, taken as none).
 *
 * End of text: the union of config.json's and generation_config.json's eos_token_id (each an
 * id, a list of ids, or null), config.json's first. transformers' generate() stops on
 * generation_config's list; config.json's id is kept with it because Llama 3's first release
 * listed <|eot_id|> (128009) only in generation_config.json and 128001 only in config.json.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "model/safetensors.h"
#include "util/alloc.h"
#include "util/log.h"

/* An integer field. Absent or null gives dflt when !required. */
static pl_status get_int(const char *path, json_t *obj, const char *key, bool required, int dflt,
                         int *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (required) return pl_fail(PL_ERR_FORMAT, "%s: \"%s\" is missing", path, key);
        *out = dflt;
        return PL_OK;
    }
    if (!json_is_integer(v))
        return pl_fail(PL_ERR_FORMAT, "%s: \"%s\" is not an integer", path, key);
    json_int_t i = json_integer_value(v);
    if (i < INT_MIN || i > INT_MAX)
        return pl_fail(PL_ERR_FORMAT, "%s: \"%s\" = %lld is out of range", path, key,
                       (long long)i);
    *out = (int)i;
    return PL_OK;
}

static pl_status get_float(const char *path, json_t *obj, const char *where, const char *key,
                           bool required, float dflt, float *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (required) return pl_fail(PL_ERR_FORMAT, "%s: \"%s%s\" is missing", path, where, key);
        *out = dflt;
        return PL_OK;
    }
    if (!json_is_number(v))
        return pl_fail(PL_ERR_FORMAT, "%s: \"%s%s\" is not a number", path, where, key);
    *out = (float)json_number_value(v);
    return PL_OK;
}

/* A boolean field; absent or null gives false. */
static pl_status get_bool(const char *path, json_t *obj, const char *key, bool *out) {
    json_t *v = json_object_get(obj, key);
    *out = false;
    if (!v || json_is_null(v)) return PL_OK;
    if (!json_is_boolean(v))
        return pl_fail(PL_ERR_FORMAT, "%s: \"%s\" is not a boolean", path, key);
    *out = json_is_true(v);
    return PL_OK;
}

/* An id, or -1 (some configs' way of saying none). */
static bool token_id_ok(json_t *v) {
    return json_is_integer(v) && json_integer_value(v) >= -1 &&
           json_integer_value(v) <= PL_MODEL_MAX_VOCAB;
}

/* bos_token_id: an id, null (none), or a list whose first entry is used. */
static pl_status get_bos(const char *path, json_t *root, int dflt, int *out) {
    json_t *v = json_object_get(root, "bos_token_id");
    if (!v) {
        *out = dflt;
        return PL_OK;
    }
    if (json_is_null(v)) {
        *out = -1;
        return PL_OK;
    }
    if (json_is_array(v)) {
        if (json_array_size(v) == 0)
            return pl_fail(PL_ERR_FORMAT, "%s: \"bos_token_id\" is an empty list", path);
        v = json_array_get(v, 0);
    }
    if (!token_id_ok(v))
        return pl_fail(PL_ERR_FORMAT, "%s: \"bos_token_id\" is not a token id", path);
    *out = (int)json_integer_value(v);
    return PL_OK;
}

/* Adds eos_token_id of obj (an id, a list of ids, or null) to c's EOS set; *given tells
 * whether the key was there at all. c->vocab_size must be read already. */
static pl_status add_eos(const char *path, json_t *obj, pl_model_config *c, bool *given) {
    json_t *v = json_object_get(obj, "eos_token_id");
    *given = v != NULL;
    if (!v || json_is_null(v)) return PL_OK;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (json_is_array(v) && n == 0)
        return pl_fail(PL_ERR_FORMAT, "%s: \"eos_token_id\" is an empty list", path);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
        if (!token_id_ok(e))
            return json_is_array(v)
                       ? pl_fail(PL_ERR_FORMAT, "%s: \"eos_token_id\"[%zu] is not a token id",
                                 path, i)
                       : pl_fail(PL_ERR_FORMAT, "%s: \"eos_token_id\" is not a token id", path);
        json_int_t id = json_integer_value(e);
        if (id < 0) continue;
        if (id >= c->vocab_size) /* named here: the range check would blame config.json */
            return pl_fail(PL_ERR_FORMAT, "%s: eos_token_id = %lld is outside the vocabulary "
                           "(vocab_size = %d)", path, (long long)id, c->vocab_size);
        if (!pl_model_config_add_eos(c, (int)id))
            return pl_fail(PL_ERR_FORMAT, "%s: \"eos_token_id\": more than %d end-of-text ids",
                           path, PL_MODEL_MAX_EOS);
    }
    return PL_OK;
}

/* "llama, mistral, ..." for messages. */
static const char *model_type_list(void) {
    static _Thread_local char list[256];
    if (!list[0])
        for (int i = 0, o = 0; i < PL_ARCH_COUNT && o < (int)sizeof list; i++)
            o += snprintf(list + o, sizeof list - (size_t)o, "%s%s", i ? ", " : "",
                          pl_arch_get((pl_arch)i)->model_type);
    return list;
}

/* The architecture row config.json names. */
static pl_status get_architecture(const char *path, json_t *root, const pl_arch_info **out) {
    json_t *a = json_object_get(root, "architectures"), *t = json_object_get(root, "model_type");
    if (a && !json_is_array(a))
        return pl_fail(PL_ERR_FORMAT, "%s: \"architectures\" is not a list", path);
    if (t && !json_is_string(t))
        return pl_fail(PL_ERR_FORMAT, "%s: \"model_type\" is not a string", path);
    if ((!a || json_array_size(a) == 0) && !t)
        return pl_fail(PL_ERR_FORMAT, "%s: neither \"architectures\" nor \"model_type\" is set",
                       path);
    const pl_arch_info *arch = NULL;
    for (size_t i = 0; a && i < json_array_size(a); i++) {
        const char *name = json_string_value(json_array_get(a, i));
        if (!name) return pl_fail(PL_ERR_FORMAT, "%s: architectures[%zu] is not a string", path, i);
        const pl_arch_info *k = pl_arch_by_hf_class(name);
        if (!k)
            return pl_fail(PL_ERR_UNSUPPORTED, "%s: architecture %.64s is not supported (%s)",
                           path, name, pl_arch_hf_class_list());
        if (arch && k != arch)
            return pl_fail(PL_ERR_FORMAT, "%s: \"architectures\" lists both %s and %s", path,
                           arch->hf_class, k->hf_class);
        arch = k;
    }
    if (t) {
        const char *name = json_string_value(t);
        const pl_arch_info *k = pl_arch_by_model_type(name);
        if (!k)
            return pl_fail(PL_ERR_UNSUPPORTED, "%s: model_type %.64s is not supported (%s)",
                           path, name, model_type_list());
        if (arch && k != arch)
            return pl_fail(PL_ERR_FORMAT, "%s: model_type %s does not match architecture %s",
                           path, name, arch->hf_class);
        arch = k;
    }
    *out = arch;
    return PL_OK;
}

/* What the architecture row cannot express: activations and biases. */
static pl_status check_features(const char *path, json_t *root, const pl_arch_info *arch) {
    /* Gemma names it hidden_activation (its hidden_act is an older key that may disagree) */
    const char *key = arch->gemma && json_object_get(root, "hidden_activation")
                          ? "hidden_activation" : "hidden_act";
    const char *want = arch->act == PL_ACT_GELU_TANH ? "gelu_pytorch_tanh" : "silu";
    json_t *act = json_object_get(root, key);
    if (act && !json_is_null(act) &&
        (!json_is_string(act) || strcmp(json_string_value(act), want) != 0))
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: %s must be \"%s\" for %s", path, key, want,
                       arch->hf_class);
    bool attn_bias, mlp_bias;
    PL_TRY(get_bool(path, root, "attention_bias", &attn_bias));
    PL_TRY(get_bool(path, root, "mlp_bias", &mlp_bias));
    if (attn_bias && !arch->qkv_bias)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: attention_bias = true is not supported for %s",
                       path, arch->hf_class);
    if (mlp_bias)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: mlp_bias = true is not supported", path);
    return PL_OK;
}

/* factors of rope_scaling.<key>: head_dim / 2 positive numbers into out. */
static pl_status get_factors(const char *path, json_t *rs, const char *key, int n, float *out) {
    json_t *a = json_object_get(rs, key);
    if (!json_is_array(a) || json_array_size(a) != (size_t)n)
        return pl_fail(PL_ERR_FORMAT, "%s: rope_scaling.%s must be a list of %d numbers "
                       "(head_dim / 2)", path, key, n);
    for (int j = 0; j < n; j++) {
        json_t *v = json_array_get(a, (size_t)j);
        if (!json_is_number(v))
            return pl_fail(PL_ERR_FORMAT, "%s: rope_scaling.%s[%d] is not a number", path, key,
                           j);
        out[j] = (float)json_number_value(v);
    }
    return PL_OK;
}

/* Phi-3's longrope (transformers' _compute_longrope_parameters): the factors, the original
 * context (config.json's top-level original_max_position_embeddings, else the scaling's,
 * else max_position_embeddings) and the attention factor (stated, else
 * sqrt(1 + ln(factor) / ln(original)) with factor = max_position_embeddings / original). */
static pl_status parse_longrope(const char *path, json_t *root, json_t *rs, pl_model_config *c) {
    int half = c->head_dim / 2;
    if (half < 1 || half > PL_MODEL_MAX_HEAD_DIM / 2)
        return pl_fail(PL_ERR_FORMAT, "%s: head_dim = %d is out of range", path, c->head_dim);
    c->rope_scaling = PL_ROPE_SCALING_LONGROPE;
    PL_TRY(get_factors(path, rs, "short_factor", half, c->rope_short_factors));
    PL_TRY(get_factors(path, rs, "long_factor", half, c->rope_long_factors));
    int orig = c->max_seq_len;
    bool top = json_object_get(root, "original_max_position_embeddings") != NULL;
    PL_TRY(get_int(path, top ? root : rs, "original_max_position_embeddings", false,
                   c->max_seq_len, &orig));
    c->rope_original_max_pos = orig;
    double factor;
    if (top) {
        factor = orig > 0 ? (double)c->max_seq_len / orig : 1.0;
    } else {
        float f;
        PL_TRY(get_float(path, rs, "rope_scaling.", "factor", false, 1.0f, &f));
        factor = f;
    }
    float af;
    double dflt = factor <= 1.0 || orig <= 1 ? 1.0 : sqrt(1.0 + log(factor) / log((double)orig));
    PL_TRY(get_float(path, rs, "rope_scaling.", "attention_factor", false, (float)dflt, &af));
    c->rope_attn_factor = af;
    return PL_OK;
}

/* RoPE scaling from obj (config.json's "rope_scaling", or transformers 5's "rope_parameters",
 * named `where` in messages): "rope_type" (or "type", before transformers 4.43) default,
 * linear or llama3 with their fields. llama3's original_max_position_embeddings may sit at the
 * top of config.json instead (transformers 5 moves it in when it standardises). */
static pl_status parse_scaling(const char *path, json_t *root, json_t *obj, const char *where,
                               pl_model_config *c) {
    c->rope_scaling = PL_ROPE_SCALING_NONE;
    c->rope_factor = 1.0f;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%s.", where);
    json_t *t = json_object_get(obj, "rope_type");
    if (!t) t = json_object_get(obj, "type");
    if (!json_is_string(t))
        return pl_fail(PL_ERR_FORMAT, "%s: %s has no \"rope_type\" string", path, where);
    const char *type = json_string_value(t);
    if (strcmp(type, "default") == 0) return PL_OK;
    if (strcmp(type, "linear") == 0) {
        c->rope_scaling = PL_ROPE_SCALING_LINEAR;
        return get_float(path, obj, prefix, "factor", true, 1.0f, &c->rope_factor);
    }
    if (strcmp(type, "llama3") == 0) {
        c->rope_scaling = PL_ROPE_SCALING_LLAMA3;
        PL_TRY(get_float(path, obj, prefix, "factor", true, 1.0f, &c->rope_factor));
        PL_TRY(get_float(path, obj, prefix, "low_freq_factor", true, 1.0f,
                         &c->rope_low_freq_factor));
        PL_TRY(get_float(path, obj, prefix, "high_freq_factor", true, 4.0f,
                         &c->rope_high_freq_factor));
        json_t *from = json_object_get(obj, "original_max_position_embeddings") ? obj : root;
        return get_int(path, from, "original_max_position_embeddings", true, 0,
                       &c->rope_original_max_pos);
    }
    if ((strcmp(type, "longrope") == 0 || strcmp(type, "su") == 0) &&
        c->arch == PL_ARCH_PHI3)
        return parse_longrope(path, root, obj, c);
    return pl_fail(PL_ERR_UNSUPPORTED, "%s: %s rope_type %.32s is not supported for %s "
                   "(default, linear, llama3%s)", path, where, type,
                   pl_arch_get(c->arch)->hf_class, c->arch == PL_ARCH_PHI3 ? ", longrope, su" : "");
}

/* rope_theta and the scaling, in either layout: transformers 4's top-level "rope_theta" and
 * "rope_scaling", or transformers 5's "rope_parameters" holding both (read first: a file with
 * both keeps the old keys for older readers). Reading only the old keys would load a
 * transformers 5 Llama 3 or Qwen file with theta 10000 and no scaling: wrong logits, no
 * error. Per-layer-type parameters (hybrid models) are refused by name. */
static pl_status parse_rope(const char *path, json_t *root, pl_model_config *c) {
    json_t *rp = json_object_get(root, "rope_parameters");
    json_t *rs = json_object_get(root, "rope_scaling");
    json_t *th = json_object_get(root, "rope_theta");
    PL_TRY(get_float(path, root, "", "rope_theta", false, 10000.0f, &c->rope_theta));
    if (!rp || json_is_null(rp)) {
        c->rope_scaling = PL_ROPE_SCALING_NONE;
        c->rope_factor = 1.0f;
        if (!rs || json_is_null(rs)) return PL_OK;
        if (!json_is_object(rs))
            return pl_fail(PL_ERR_FORMAT, "%s: \"rope_scaling\" is not an object", path);
        return parse_scaling(path, root, rs, "rope_scaling", c);
    }
    if (!json_is_object(rp))
        return pl_fail(PL_ERR_FORMAT, "%s: \"rope_parameters\" is not an object", path);
    if (!json_object_get(rp, "rope_type") && !json_object_get(rp, "type") &&
        !json_object_get(rp, "rope_theta")) {
        const char *key;
        json_t *v;
        json_object_foreach(rp, key, v) {
            if (json_is_object(v))
                return pl_fail(PL_ERR_UNSUPPORTED, "%s: rope_parameters per layer type (%.32s, "
                               "...) are not supported: one set for every layer only", path,
                               key);
        }
    }
    if (json_object_get(rp, "rope_theta")) {
        float theta = 0;
        PL_TRY(get_float(path, rp, "rope_parameters.", "rope_theta", true, 10000.0f, &theta));
        if (th && !json_is_null(th) && theta != c->rope_theta)
            return pl_fail(PL_ERR_FORMAT, "%s: rope_theta = %g but rope_parameters.rope_theta "
                           "= %g", path, (double)c->rope_theta, (double)theta);
        c->rope_theta = theta;
    }
    PL_TRY(parse_scaling(path, root, rp, "rope_parameters", c));
    if (rs && !json_is_null(rs)) { /* the old key beside it must say the same */
        pl_model_config old = *c;
        if (!json_is_object(rs))
            return pl_fail(PL_ERR_FORMAT, "%s: \"rope_scaling\" is not an object", path);
        PL_TRY(parse_scaling(path, root, rs, "rope_scaling", &old));
        if (old.rope_scaling != c->rope_scaling || old.rope_factor != c->rope_factor)
            return pl_fail(PL_ERR_FORMAT, "%s: rope_scaling and rope_parameters describe "
                           "different scalings", path);
    }
    return PL_OK;
}

/* Which Gemma layers use the window: layer_types (transformers >= 4.53: "sliding_attention"
 * or "full_attention" per layer) must follow one period of local layers then a global one;
 * without it, Gemma 2 alternates (period 2) and Gemma 3 says sliding_window_pattern (6). */
static pl_status parse_layer_types(const char *path, json_t *root, const pl_arch_info *arch,
                                   pl_model_config *c) {
    int period = arch->arch == PL_ARCH_GEMMA2 ? 2 : 6;
    if (arch->arch == PL_ARCH_GEMMA3)
        PL_TRY(get_int(path, root, "sliding_window_pattern", false, 6, &period));
    json_t *lt = json_object_get(root, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || json_array_size(lt) != (size_t)c->n_layers)
            return pl_fail(PL_ERR_FORMAT, "%s: \"layer_types\" must list num_hidden_layers = %d "
                           "entries", path, c->n_layers);
        int first_global = -1;
        for (int l = 0; l < c->n_layers && first_global < 0; l++)
            if (json_is_string(json_array_get(lt, (size_t)l)) &&
                strcmp(json_string_value(json_array_get(lt, (size_t)l)), "full_attention") == 0)
                first_global = l;
        period = first_global < 0 ? c->n_layers + 1 : first_global + 1;
        for (int l = 0; l < c->n_layers; l++) {
            const char *t = json_string_value(json_array_get(lt, (size_t)l));
            bool global = (l + 1) % period == 0;
            if (!t || strcmp(t, global ? "full_attention" : "sliding_attention") != 0)
                return pl_fail(PL_ERR_UNSUPPORTED, "%s: layer_types[%d] = %.32s: only a "
                               "repeating run of sliding layers then one full layer is "
                               "supported (period %d here)", path, l, t ? t : "(not a string)",
                               period);
        }
    }
    if (period < 1)
        return pl_fail(PL_ERR_FORMAT, "%s: sliding_window_pattern = %d must be positive", path,
                       period);
    c->swa_pattern = period == 1 ? 0 : period;
    if (period == 1) c->sliding_window = 0; /* every layer global */
    return PL_OK;
}

/* The attention window: Mistral's sliding_window; Qwen's only with use_sliding_window, which
 * is refused. */
static pl_status parse_window(const char *path, json_t *root, const pl_arch_info *arch,
                              pl_model_config *c) {
    c->sliding_window = 0;
    if (arch->sliding_window) {
        PL_TRY(get_int(path, root, "sliding_window", false, 0, &c->sliding_window));
        if (arch->arch == PL_ARCH_PHI3 && c->sliding_window >= c->max_seq_len)
            c->sliding_window = 0; /* see the header comment */
        if (c->sliding_window > c->max_seq_len)
            return pl_fail(PL_ERR_FORMAT, "%s: sliding_window = %d is larger than the context "
                           "(max_position_embeddings = %d)", path, c->sliding_window,
                           c->max_seq_len);
        return arch->gemma ? parse_layer_types(path, root, arch, c) : PL_OK;
    }
    bool use;
    PL_TRY(get_bool(path, root, "use_sliding_window", &use));
    if (use)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: use_sliding_window = true is not supported for "
                       "%s (windows on some layers only, max_window_layers)", path,
                       arch->hf_class);
    return PL_OK;
}

/* A soft-cap: null or absent is none (0); a number must be positive (0 would divide). */
static pl_status get_softcap(const char *path, json_t *root, const char *key, float *out) {
    json_t *v = json_object_get(root, key);
    *out = 0.0f;
    if (!v || json_is_null(v)) return PL_OK;
    PL_TRY(get_float(path, root, "", key, false, 0.0f, out));
    if (!(*out > 0.0f) || isinf(*out))
        return pl_fail(PL_ERR_FORMAT, "%s: %s = %g must be positive and finite (null for no "
                       "soft-capping)", path, key, (double)*out);
    return PL_OK;
}

static pl_status parse_gemma(const char *path, json_t *root, const pl_arch_info *arch,
                             pl_model_config *c) {
    PL_TRY(get_float(path, root, "", "query_pre_attn_scalar", false, (float)c->head_dim,
                     &c->query_pre_attn_scalar));
    if (!(c->query_pre_attn_scalar > 0.0f) || isinf(c->query_pre_attn_scalar))
        return pl_fail(PL_ERR_FORMAT, "%s: query_pre_attn_scalar = %g must be positive and "
                       "finite", path, (double)c->query_pre_attn_scalar);
    PL_TRY(get_softcap(path, root, "attn_logit_softcapping", &c->attn_softcap));
    PL_TRY(get_softcap(path, root, "final_logit_softcapping", &c->final_softcap));
    if (arch->arch == PL_ARCH_GEMMA3 && c->swa_pattern > 1)
        PL_TRY(get_float(path, root, "", "rope_local_base_freq", false, 10000.0f,
                         &c->rope_theta_local));
    return PL_OK;
}

/* The experts: counts and sizes under each family's keys, every layer sparse. */
static pl_status parse_experts(const char *path, json_t *root, const pl_arch_info *arch,
                               pl_model_config *c) {
    bool mixtral = arch->arch == PL_ARCH_MIXTRAL;
    PL_TRY(get_int(path, root, mixtral ? "num_local_experts" : "num_experts", true, 0,
                   &c->n_experts));
    PL_TRY(get_int(path, root, "num_experts_per_tok", true, 0, &c->n_experts_used));
    if (mixtral) {
        c->expert_hidden_dim = c->hidden_dim;
        c->norm_topk_prob = true; /* MixtralSparseMoeBlock always renormalises */
        return PL_OK;
    }
    PL_TRY(get_int(path, root, "moe_intermediate_size", true, 0, &c->expert_hidden_dim));
    if (arch->shared_expert)
        PL_TRY(get_int(path, root, "shared_expert_intermediate_size", true, 0,
                       &c->shared_hidden_dim));
    PL_TRY(get_bool(path, root, "norm_topk_prob", &c->norm_topk_prob));
    int step = 1;
    PL_TRY(get_int(path, root, "decoder_sparse_step", false, 1, &step));
    json_t *dense = json_object_get(root, "mlp_only_layers");
    if (step != 1 || (json_is_array(dense) && json_array_size(dense) > 0))
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: decoder_sparse_step = %d, mlp_only_layers: "
                       "dense layers among the expert layers are not supported", path, step);
    return PL_OK;
}

/* The names pl_model_config_check reports fields by: config.json's keys. */
static const char *const k_keys[] = {
    "dim", "hidden_size", "hidden_dim", "intermediate_size", "n_layers", "num_hidden_layers",
    "n_heads", "num_attention_heads", "n_kv_heads", "num_key_value_heads",
    "vocab_size", "vocab_size", "max_seq_len", "max_position_embeddings",
    "norm_eps", "rms_norm_eps", "eos_id", "eos_token_id", "bos_id", "bos_token_id",
    "n_experts", "num_experts", "n_experts_used", "num_experts_per_tok",
    "expert_hidden_dim", "moe_intermediate_size",
    "shared_hidden_dim", "shared_expert_intermediate_size", NULL,
};
/* Mixtral's names for the same */
static const char *const k_keys_mixtral[] = {
    "dim", "hidden_size", "hidden_dim", "intermediate_size", "n_layers", "num_hidden_layers",
    "n_heads", "num_attention_heads", "n_kv_heads", "num_key_value_heads",
    "vocab_size", "vocab_size", "max_seq_len", "max_position_embeddings",
    "norm_eps", "rms_norm_eps", "eos_id", "eos_token_id", "bos_id", "bos_token_id",
    "n_experts", "num_local_experts", "n_experts_used", "num_experts_per_tok",
    "expert_hidden_dim", "intermediate_size", NULL,
};

static pl_status parse_config(const char *path, json_t *root, pl_model_config *c,
                              bool *tie_set) {
    const pl_arch_info *arch = NULL;
    PL_TRY(get_architecture(path, root, &arch));
    PL_TRY(check_features(path, root, arch));
    c->arch = arch->arch;
    PL_TRY(get_int(path, root, "hidden_size", true, 0, &c->dim));
    PL_TRY(get_int(path, root, "intermediate_size", true, 0, &c->hidden_dim));
    PL_TRY(get_int(path, root, "num_hidden_layers", true, 0, &c->n_layers));
    PL_TRY(get_int(path, root, "num_attention_heads", true, 0, &c->n_heads));
    PL_TRY(get_int(path, root, "num_key_value_heads", false, c->n_heads, &c->n_kv_heads));
    PL_TRY(get_int(path, root, "vocab_size", true, 0, &c->vocab_size));
    PL_TRY(get_int(path, root, "max_position_embeddings", false, 2048, &c->max_seq_len));
    PL_TRY(get_float(path, root, "", "rms_norm_eps", false, 1e-6f, &c->norm_eps));
    int hd_default = c->n_heads > 0 && c->dim % c->n_heads == 0 ? c->dim / c->n_heads : 0;
    PL_TRY(get_int(path, root, "head_dim", false, hd_default, &c->head_dim));
    if (c->head_dim == 0)
        return pl_fail(PL_ERR_FORMAT, "%s: hidden_size = %d is not a multiple of "
                       "num_attention_heads = %d and head_dim is not given", path, c->dim,
                       c->n_heads);
    PL_TRY(parse_rope(path, root, c));
    PL_TRY(parse_window(path, root, arch, c));
    PL_TRY(get_bos(path, root, 1, &c->bos_id));
    bool given;
    PL_TRY(add_eos(path, root, c, &given));
    if (!given) pl_model_config_add_eos(c, 2); /* transformers' LlamaConfig default */
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    *tie_set = tie && !json_is_null(tie);
    PL_TRY(get_bool(path, root, "tie_word_embeddings", &c->tied_embeddings));
    c->rope_layout = 1; /* rotate-half: see load_hf.c */
    if (arch->moe) PL_TRY(parse_experts(path, root, arch, c));
    if (arch->gemma) PL_TRY(parse_gemma(path, root, arch, c));
    if (arch->arch == PL_ARCH_PHI3) {
        float prf;
        PL_TRY(get_float(path, root, "", "partial_rotary_factor", false, 1.0f, &prf));
        if (prf != 1.0f)
            return pl_fail(PL_ERR_UNSUPPORTED, "%s: partial_rotary_factor = %g: rotary "
                           "embeddings over part of a head are not supported", path,
                           (double)prf);
    }
    return PL_OK;
}

/* generation_config.json, when the directory has one: its EOS ids join config.json's. */
static pl_status parse_generation_config(const char *dir, pl_model_config *c) {
    size_t n = strlen(dir) + 32;
    char *path = pl_malloc(n);
    if (!path) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory", dir);
    snprintf(path, n, "%s/generation_config.json", dir);
    json_t *root = NULL;
    pl_status s = PL_OK;
    struct stat st;
    if (stat(path, &st) == 0) {
        bool given;
        s = pl_model_json_load_file(path, &root);
        if (s == PL_OK) s = add_eos(path, root, c, &given);
    }
    json_decref(root);
    pl_free(path);
    return s;
}

pl_status pl_model_hf_config(const char *dir, pl_model_config *out, bool *tie_set) {
    size_t n = strlen(dir) + 16;
    char *path = pl_malloc(n);
    if (!path) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory", dir);
    snprintf(path, n, "%s/config.json", dir);
    memset(out, 0, sizeof *out);
    json_t *root;
    pl_status s = pl_model_json_load_file(path, &root);
    if (s == PL_OK) {
        s = parse_config(path, root, out, tie_set);
        json_decref(root);
    }
    if (s == PL_OK) s = parse_generation_config(dir, out);
    if (s == PL_OK)
        s = pl_model_config_check(out, PL_ERR_FORMAT, path,
                                  out->arch == PL_ARCH_MIXTRAL ? k_keys_mixtral : k_keys);
    pl_free(path);
    return s;
}
