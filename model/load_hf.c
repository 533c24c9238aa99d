/*
 * model/load_hf.c - Hugging Face model directories: config.json + model.safetensors, or shards
 * listed by model.safetensors.index.json; LlamaForCausalLM (and MistralForCausalLM, the same
 * tensors) with F32/F16/BF16 weights.
 *
 * config.json gives the dims and numerics (rms_norm_eps, rope_theta, rope_scaling "linear" or
 * "llama3", tie_word_embeddings, bos/eos ids); every field is type-checked and then range-
 * checked by pl_model_config_check, naming the field. Tensor names:
 *   model.embed_tokens.weight                      (vocab, dim)
 *   model.layers.N.input_layernorm.weight          (dim)
 *   model.layers.N.self_attn.{q,k,v,o}_proj.weight q (n_heads*hd, dim), k and v (kv*hd, dim),
 *                                                  o (dim, n_heads*hd)
 *   model.layers.N.post_attention_layernorm.weight (dim)
 *   model.layers.N.mlp.{gate,up,down}_proj.weight  (hidden, dim) x2 (dim, hidden)
 *   model.norm.weight                              (dim)
 *   lm_head.weight                                 (vocab, dim); absent when tied
 * Hugging Face's conversion permutes the rows of q_proj and k_proj within each head so that
 * rotate-half RoPE computes what Meta's interleaved RoPE did; the weights are used as stored
 * and the model says rope_layout = 1 (rotate-half). Other tensors (e.g. old checkpoints'
 * rotary_emb.inv_freq) are ignored, except a layer index beyond num_hidden_layers, which means
 * config and weights disagree.
 *
 * Shard names in the index must be plain file names inside the directory (no '/'), so an
 * index cannot make the loader open files elsewhere.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/safetensors.h"
#include "util/alloc.h"
#include "util/log.h"

#define MAX_CONFIG_BYTES (16u << 20)
#define MAX_SHARDS 4096

static char *join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = pl_malloc(a + b + 2);
    if (p) snprintf(p, a + b + 2, "%s/%s", dir, name);
    return p;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Maps a JSON file and parses it (duplicate keys refused). */
static pl_status load_json(const char *path, json_t **out) {
    *out = NULL;
    pl_model_file f;
    PL_TRY(pl_model_file_map(path, &f));
    pl_status s = PL_OK;
    if (f.size > MAX_CONFIG_BYTES) {
        s = pl_fail(PL_ERR_FORMAT, "%s: %zu bytes is too large for a JSON config", path, f.size);
    } else {
        json_error_t err;
        bool oom;
        *out = pl_model_json_loadb(f.size ? (const char *)f.data : "", f.size,
                                   JSON_REJECT_DUPLICATES, &err, &oom);
        if (!*out && oom)
            s = pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory parsing %zu bytes of JSON",
                        path, f.size);
        else if (!*out)
            s = pl_fail(PL_ERR_FORMAT, "%s: line %d column %d: %s", path, err.line, err.column,
                        err.text);
        else if (!json_is_object(*out))
            s = pl_fail(PL_ERR_FORMAT, "%s: not a JSON object", path);
    }
    if (s != PL_OK) {
        json_decref(*out);
        *out = NULL;
    }
    pl_model_file_unmap(&f);
    return s;
}

// ----------------------------------------------------------------------------
// config.json

/* An integer field. Absent or null gives dflt when !required. */
static pl_status get_int(const char *path, json_t *root, const char *key, bool required,
                         int dflt, int *out) {
    json_t *v = json_object_get(root, key);
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

/* bos/eos: an integer, null (none), or a list whose first entry is used (Llama 3.1 lists
 * several EOS ids; the engine stops on one). */
static pl_status get_token_id(const char *path, json_t *root, const char *key, int dflt,
                              int *out) {
    json_t *v = json_object_get(root, key);
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
            return pl_fail(PL_ERR_FORMAT, "%s: \"%s\" is an empty list", path, key);
        if (json_array_size(v) > 1)
            pl_log(PL_LOG_INFO, "%s: \"%s\" lists %zu ids; using the first", path, key,
                   json_array_size(v));
        v = json_array_get(v, 0);
    }
    if (!json_is_integer(v) || json_integer_value(v) < -1 ||
        json_integer_value(v) > PL_MODEL_MAX_VOCAB)
        return pl_fail(PL_ERR_FORMAT, "%s: \"%s\" is not a token id", path, key);
    *out = (int)json_integer_value(v);
    return PL_OK;
}

static pl_status check_architecture(const char *path, json_t *root) {
    static const char *const archs[] = {"LlamaForCausalLM", "MistralForCausalLM"};
    static const char *const types[] = {"llama", "mistral"};
    json_t *a = json_object_get(root, "architectures"), *t = json_object_get(root, "model_type");
    if (a && !json_is_array(a))
        return pl_fail(PL_ERR_FORMAT, "%s: \"architectures\" is not a list", path);
    if (t && !json_is_string(t))
        return pl_fail(PL_ERR_FORMAT, "%s: \"model_type\" is not a string", path);
    if (!a && !t)
        return pl_fail(PL_ERR_FORMAT, "%s: neither \"architectures\" nor \"model_type\" is set",
                       path);
    for (size_t i = 0; a && i < json_array_size(a); i++) {
        const char *name = json_string_value(json_array_get(a, i));
        if (!name) return pl_fail(PL_ERR_FORMAT, "%s: architectures[%zu] is not a string", path, i);
        bool ok = false;
        for (size_t k = 0; k < 2; k++) ok = ok || strcmp(name, archs[k]) == 0;
        if (!ok)
            return pl_fail(PL_ERR_UNSUPPORTED, "%s: architecture %.64s is not supported "
                           "(LlamaForCausalLM, MistralForCausalLM)", path, name);
    }
    if (t) {
        const char *name = json_string_value(t);
        if (strcmp(name, types[0]) != 0 && strcmp(name, types[1]) != 0)
            return pl_fail(PL_ERR_UNSUPPORTED, "%s: model_type %.64s is not supported (llama, "
                           "mistral)", path, name);
    }
    json_t *act = json_object_get(root, "hidden_act");
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "silu") != 0))
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: hidden_act must be \"silu\" (SwiGLU)", path);
    const char *biases[] = {"attention_bias", "mlp_bias"};
    for (size_t i = 0; i < 2; i++)
        if (json_is_true(json_object_get(root, biases[i])))
            return pl_fail(PL_ERR_UNSUPPORTED, "%s: %s = true is not supported", path, biases[i]);
    return PL_OK;
}

static pl_status parse_rope_scaling(const char *path, json_t *root, pl_model_config *c) {
    c->rope_scaling = PL_ROPE_SCALING_NONE;
    c->rope_factor = 1.0f;
    json_t *rs = json_object_get(root, "rope_scaling");
    if (!rs || json_is_null(rs)) return PL_OK;
    if (!json_is_object(rs))
        return pl_fail(PL_ERR_FORMAT, "%s: \"rope_scaling\" is not an object", path);
    /* transformers wrote "type" before 4.43 and "rope_type" since */
    json_t *t = json_object_get(rs, "rope_type");
    if (!t) t = json_object_get(rs, "type");
    if (!json_is_string(t))
        return pl_fail(PL_ERR_FORMAT, "%s: rope_scaling has no \"rope_type\" string", path);
    const char *type = json_string_value(t);
    if (strcmp(type, "default") == 0) return PL_OK;
    if (strcmp(type, "linear") == 0) {
        c->rope_scaling = PL_ROPE_SCALING_LINEAR;
        return get_float(path, rs, "rope_scaling.", "factor", true, 1.0f, &c->rope_factor);
    }
    if (strcmp(type, "llama3") == 0) {
        c->rope_scaling = PL_ROPE_SCALING_LLAMA3;
        PL_TRY(get_float(path, rs, "rope_scaling.", "factor", true, 1.0f, &c->rope_factor));
        PL_TRY(get_float(path, rs, "rope_scaling.", "low_freq_factor", true, 1.0f,
                         &c->rope_low_freq_factor));
        PL_TRY(get_float(path, rs, "rope_scaling.", "high_freq_factor", true, 4.0f,
                         &c->rope_high_freq_factor));
        return get_int(path, rs, "original_max_position_embeddings", true, 0,
                       &c->rope_original_max_pos);
    }
    return pl_fail(PL_ERR_UNSUPPORTED, "%s: rope_scaling type %.32s is not supported (linear, "
                   "llama3)", path, type);
}

/* Fills c from config.json. *tie_set tells whether tie_word_embeddings was given. */
static pl_status parse_config(const char *path, pl_model_config *c, bool *tie_set) {
    json_t *root;
    PL_TRY(load_json(path, &root));
    memset(c, 0, sizeof *c);
    pl_status s = check_architecture(path, root);
#define TRY(x)                                                                                \
    do {                                                                                      \
        if (s == PL_OK) s = (x);                                                              \
    } while (0)
    TRY(get_int(path, root, "hidden_size", true, 0, &c->dim));
    TRY(get_int(path, root, "intermediate_size", true, 0, &c->hidden_dim));
    TRY(get_int(path, root, "num_hidden_layers", true, 0, &c->n_layers));
    TRY(get_int(path, root, "num_attention_heads", true, 0, &c->n_heads));
    TRY(get_int(path, root, "num_key_value_heads", false, c->n_heads, &c->n_kv_heads));
    TRY(get_int(path, root, "vocab_size", true, 0, &c->vocab_size));
    TRY(get_int(path, root, "max_position_embeddings", false, 2048, &c->max_seq_len));
    TRY(get_float(path, root, "", "rms_norm_eps", false, 1e-6f, &c->norm_eps));
    TRY(get_float(path, root, "", "rope_theta", false, 10000.0f, &c->rope_theta));
    TRY(parse_rope_scaling(path, root, c));
    TRY(get_token_id(path, root, "bos_token_id", 1, &c->bos_id));
    TRY(get_token_id(path, root, "eos_token_id", 2, &c->eos_id));
    int hd_default = c->n_heads > 0 && c->dim % c->n_heads == 0 ? c->dim / c->n_heads : 0;
    TRY(get_int(path, root, "head_dim", false, hd_default, &c->head_dim));
    if (s == PL_OK && c->head_dim == 0)
        s = pl_fail(PL_ERR_FORMAT, "%s: hidden_size = %d is not a multiple of "
                    "num_attention_heads = %d and head_dim is not given", path, c->dim, c->n_heads);
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    *tie_set = tie && !json_is_null(tie);
    if (s == PL_OK && *tie_set && !json_is_boolean(tie))
        s = pl_fail(PL_ERR_FORMAT, "%s: \"tie_word_embeddings\" is not a boolean", path);
    c->tied_embeddings = *tie_set && json_is_true(tie);
    /* Mistral's sliding window: attention over at most that many tokens equals full attention,
     * so a context capped there is exact. */
    int window = 0;
    TRY(get_int(path, root, "sliding_window", false, 0, &window));
    if (s == PL_OK && window > 0 && window < c->max_seq_len) {
        pl_log(PL_LOG_INFO, "%s: sliding_window %d: context capped from %d", path, window,
               c->max_seq_len);
        c->max_seq_len = window;
    }
#undef TRY
    json_decref(root);
    c->rope_layout = 1; /* rotate-half; see the file comment */
    c->bos_ends_text = false;
    PL_TRY(s);
    return pl_model_config_check(c, PL_ERR_FORMAT, path);
}

// ----------------------------------------------------------------------------
// weights files

typedef struct hf_files {
    pl_model_file *f; /* (n) mapped files */
    const char **paths; /* (n) f[i].path, for messages */
    size_t n;
    pl_st_table tab;
    json_t *index;    /* the index document, or NULL */
} hf_files;

static void hf_files_free(hf_files *h) {
    for (size_t i = 0; i < h->n; i++) pl_model_file_unmap(&h->f[i]);
    pl_free(h->f);
    pl_free(h->paths);
    pl_model_st_table_free(&h->tab);
    json_decref(h->index);
    memset(h, 0, sizeof *h);
}

static pl_status map_and_parse(hf_files *h, const char *path) {
    size_t i = h->n;
    pl_model_file *nf = pl_reallocarray(h->f, i + 1, sizeof *nf);
    if (!nf) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    h->f = nf;
    const char **np = pl_reallocarray(h->paths, i + 1, sizeof *np);
    if (!np) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    h->paths = np;
    PL_TRY(pl_model_file_map(path, &h->f[i]));
    h->paths[i] = h->f[i].path;
    h->n = i + 1;
    return pl_model_st_parse(&h->f[i], (int)i, &h->tab);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Reads the index, maps each distinct shard once, and checks every weight_map entry names a
 * tensor that its shard holds. */
static pl_status load_index(hf_files *h, const char *dir, const char *index_path) {
    PL_TRY(load_json(index_path, &h->index));
    json_t *wm = json_object_get(h->index, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0)
        return pl_fail(PL_ERR_FORMAT, "%s: \"weight_map\" is missing or empty", index_path);
    size_t n = json_object_size(wm), k = 0;
    const char **names = pl_calloc(n, sizeof *names);
    if (!names) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory", index_path);
    const char *key;
    json_t *v;
    pl_status s = PL_OK;
    json_object_foreach(wm, key, v) {
        const char *file = json_string_value(v);
        if (!file || !file[0] || strchr(file, '/') || strcmp(file, ".") == 0 ||
            strcmp(file, "..") == 0) {
            s = pl_fail(PL_ERR_FORMAT, "%s: weight_map[%s] is not a file name in the directory",
                        index_path, key);
            break;
        }
        names[k++] = file;
    }
    if (s == PL_OK) qsort(names, k, sizeof *names, cmp_str);
    size_t n_unique = 0;
    for (size_t i = 0; s == PL_OK && i < k; i++) {
        if (i > 0 && strcmp(names[i], names[i - 1]) == 0) continue;
        if (++n_unique > MAX_SHARDS) {
            s = pl_fail(PL_ERR_FORMAT, "%s: more than %d shards", index_path, MAX_SHARDS);
            break;
        }
        char *p = join(dir, names[i]);
        if (!p) {
            s = pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory", index_path);
            break;
        }
        s = map_and_parse(h, p);
        pl_free(p);
    }
    pl_free(names);
    PL_TRY(s);
    PL_TRY(pl_model_st_finish(&h->tab, h->paths));
    json_object_foreach(wm, key, v) {
        const pl_st_tensor *t = pl_model_st_find(&h->tab, key);
        const char *file = json_string_value(v);
        const char *got = t ? strrchr(h->paths[t->file], '/') : NULL;
        if (!t || strcmp(got ? got + 1 : h->paths[t->file], file) != 0)
            return pl_fail(PL_ERR_FORMAT, "%s: weight_map puts %s in %s, which does not hold it",
                           index_path, key, file);
    }
    return PL_OK;
}

static pl_status load_weights_files(hf_files *h, const char *dir, const char *weights) {
    if (weights) {
        if (ends_with(weights, ".index.json")) return load_index(h, dir, weights);
        PL_TRY(map_and_parse(h, weights));
        return pl_model_st_finish(&h->tab, h->paths);
    }
    char *index = join(dir, "model.safetensors.index.json");
    char *single = join(dir, "model.safetensors");
    pl_status s;
    if (!index || !single)
        s = pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory", dir);
    else if (access(index, F_OK) == 0)
        s = load_index(h, dir, index);
    else if (access(single, F_OK) == 0)
        s = load_weights_files(h, dir, single);
    else
        s = pl_fail(PL_ERR_NOT_FOUND, "%s: neither model.safetensors nor "
                    "model.safetensors.index.json is there", dir);
    pl_free(index);
    pl_free(single);
    return s;
}

// ----------------------------------------------------------------------------
// binding tensors to the model

static pl_status bind_named(pl_model *m, const hf_files *h, pl_weight *w, const char *name,
                            int rows, int cols, bool is_norm, pl_dtype want) {
    const pl_st_tensor *t = pl_model_st_find(&h->tab, name);
    if (!t) return pl_fail(PL_ERR_NOT_FOUND, "%s: missing tensor %s", m->name, name);
    const char *file = h->paths[t->file];
    if (t->type == PL_DTYPE_AUTO)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s (supported: F32, F16, "
                       "BF16)", file, name, t->dtype);
    bool ok = is_norm ? t->rank == 1 && t->shape[0] == cols
                      : t->rank == 2 && t->shape[0] == rows && t->shape[1] == cols;
    if (!ok) {
        char got[96] = "";
        for (int d = 0, o = 0; d < t->rank && o < (int)sizeof got - 24; d++)
            o += snprintf(got + o, sizeof got - (size_t)o, "%s%lld", d ? ", " : "",
                          (long long)t->shape[d]);
        if (is_norm)
            return pl_fail(PL_ERR_FORMAT, "%s: tensor %s has shape [%s], config needs [%d]", file,
                           name, got, cols);
        return pl_fail(PL_ERR_FORMAT, "%s: tensor %s has shape [%s], config needs [%d, %d]",
                       file, name, got, rows, cols);
    }
    return pl_model_bind(m, w, t->data, t->type, rows, cols, is_norm ? PL_DTYPE_F32 : want, name);
}

/* Tied when the config says so; also when it is silent and there is no lm_head. */
static bool resolve_tied(const pl_model_config *c, const hf_files *h, bool tie_set) {
    return c->tied_embeddings ||
           (!tie_set && pl_model_st_find(&h->tab, "lm_head.weight") == NULL);
}

/* The memory limit, from the headers alone (no tensor byte is read yet): matrices keep the
 * embedding's stored type unless a dtype is asked for. A missing embedding or one of an
 * unsupported type is left to bind_all, which names the problem precisely. */
static pl_status check_limit(const char *dir, const pl_model_config *c, const hf_files *h,
                             bool tie_set, pl_dtype want, uint64_t limit) {
    if (!limit) return PL_OK;
    pl_dtype dt = want;
    if (dt == PL_DTYPE_AUTO) {
        const pl_st_tensor *t = pl_model_st_find(&h->tab, "model.embed_tokens.weight");
        if (!t || t->type == PL_DTYPE_AUTO) return PL_OK;
        dt = t->type;
    }
    pl_model_config sized = *c;
    sized.tied_embeddings = resolve_tied(c, h, tie_set);
    return pl_model_check_weight_limit(dir, &sized, dt, limit);
}

static pl_status bind_all(pl_model *m, const hf_files *h, bool tie_set, pl_dtype want) {
    const pl_model_config *c = &m->cfg;
    int q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim;
    PL_TRY(bind_named(m, h, &m->tok_embed, "model.embed_tokens.weight", c->vocab_size, c->dim,
                      false, want));
    char name[96];
    for (int l = 0; l < c->n_layers; l++) {
        pl_model_layer *L = &m->layers[l];
        const struct {
            const char *suffix;
            pl_weight *w;
            int rows, cols;
            bool norm;
        } t[] = {
            {"input_layernorm", &L->attn_norm, 1, c->dim, true},
            {"self_attn.q_proj", &L->wq, q, c->dim, false},
            {"self_attn.k_proj", &L->wk, kv, c->dim, false},
            {"self_attn.v_proj", &L->wv, kv, c->dim, false},
            {"self_attn.o_proj", &L->wo, c->dim, q, false},
            {"post_attention_layernorm", &L->ffn_norm, 1, c->dim, true},
            {"mlp.gate_proj", &L->w1, c->hidden_dim, c->dim, false},
            {"mlp.down_proj", &L->w2, c->dim, c->hidden_dim, false},
            {"mlp.up_proj", &L->w3, c->hidden_dim, c->dim, false},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, t[i].suffix);
            PL_TRY(bind_named(m, h, t[i].w, name, t[i].rows, t[i].cols, t[i].norm, want));
        }
    }
    PL_TRY(bind_named(m, h, &m->final_norm, "model.norm.weight", 1, c->dim, true, want));
    m->cfg.tied_embeddings = resolve_tied(c, h, tie_set);
    if (m->cfg.tied_embeddings) {
        m->lm_head = m->tok_embed;
        return PL_OK;
    }
    return bind_named(m, h, &m->lm_head, "lm_head.weight", c->vocab_size, c->dim, false, want);
}

/* Layer tensors past n_layers mean the config and the weights disagree. */
static pl_status check_extra_layers(const pl_model *m, const hf_files *h) {
    for (size_t i = 0; i < h->tab.n; i++) {
        long l;
        char *end;
        const char *name = h->tab.t[i].name;
        if (strncmp(name, "model.layers.", 13) != 0) continue;
        errno = 0;
        l = strtol(name + 13, &end, 10);
        if (end != name + 13 && *end == '.' && (errno != 0 || l < 0 || l >= m->cfg.n_layers))
            return pl_fail(PL_ERR_FORMAT, "%s: tensor %s is beyond num_hidden_layers = %d",
                           h->paths[h->tab.t[i].file], name, m->cfg.n_layers);
    }
    return PL_OK;
}

pl_status pl_model_load_hf(const char *dir, const char *weights, const pl_model_load_options *opt,
                           uint64_t max_weight_bytes, pl_model **out) {
    *out = NULL;
    char *cfg_path = join(dir, "config.json");
    if (!cfg_path) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory", dir);
    pl_model_config c;
    bool tie_set = false;
    pl_status s = parse_config(cfg_path, &c, &tie_set);
    pl_free(cfg_path);
    PL_TRY(s);

    hf_files h = {0};
    pl_model *m = NULL;
    s = load_weights_files(&h, dir, weights);
    if (s == PL_OK) s = check_limit(dir, &c, &h, tie_set, opt->dtype, max_weight_bytes);
    if (s == PL_OK) s = pl_model_shell_create(&c, dir, &m);
    if (s == PL_OK) s = check_extra_layers(m, &h);
    if (s == PL_OK) s = bind_all(m, &h, tie_set, opt->dtype);
    for (size_t i = 0; s == PL_OK && i < h.n; i++) s = pl_model_own_file(m, &h.f[i]);
    if (s == PL_OK) {
        char *tok = join(dir, "tokenizer.model");
        if (!tok) s = pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory", dir);
        else if (access(tok, R_OK) == 0) m->tokenizer_path = tok;
        else pl_free(tok);
    }
    hf_files_free(&h);
    if (s != PL_OK) {
        pl_model_free(m);
        return s;
    }
    *out = m;
    return PL_OK;
}
