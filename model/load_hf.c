/*
 * model/load_hf.c - Hugging Face model directories: config.json (hf_config.c) + model.safetensors,
 * or shards listed by model.safetensors.index.json, with F32/F16/BF16 weights, for every
 * architecture of model/arch.c.
 *
 * The tensors are the tensor table's "hf" names (model.embed_tokens.weight,
 * model.layers.N.self_attn.q_proj.weight, ...), each bound in model order and checked against
 * the shape the config implies; lm_head.weight is absent when tied. Every tensor in the files
 * must be one the architecture has (check_unexpected): a q_proj.bias in a Llama checkpoint,
 * or a layer past num_hidden_layers, means config and weights disagree. Only old
 * checkpoints' rotary_emb.inv_freq buffers are skipped.
 *
 * Hugging Face's conversion permutes the rows of q_proj and k_proj within each head so that
 * rotate-half RoPE computes what Meta's interleaved RoPE did; the weights are used as stored
 * and the model says rope_layout = 1 (rotate-half).
 *
 * Shard names in the index must be plain file names inside the directory (no '/'), so an
 * index cannot make the loader open files elsewhere.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/safetensors.h"
#include "util/alloc.h"

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
    PL_TRY(pl_model_json_load_file(index_path, &h->index));
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

/* Tensors the loader knows and skips: buffers of old transformers checkpoints. */
static bool ignorable(const char *name) {
    static const char suffix[] = "rotary_emb.inv_freq";
    size_t n = strlen(name), k = sizeof suffix - 1;
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

/* Phi-3's fused tensors: qkv_proj holds q, k and v's rows, gate_up_proj gate's then up's. */
#define PHI3_QKV "model.layers.%d.self_attn.qkv_proj.weight"
#define PHI3_GATE_UP "model.layers.%d.mlp.gate_up_proj.weight"

static bool fused_part(const pl_model_config *c, pl_tensor_role r) {
    return pl_arch_get(c->arch)->fused && (r == PL_T_ATTN_Q || r == PL_T_ATTN_K ||
                                           r == PL_T_ATTN_V || r == PL_T_FFN_GATE ||
                                           r == PL_T_FFN_UP);
}

/* Every tensor of the files is one the model takes (or an ignorable one, or an lm_head.weight
 * beside a tied embedding): a bias in a Llama checkpoint or a layer past num_hidden_layers
 * means config and weights disagree, and loading anyway would compute another model. */
static pl_status check_unexpected(const pl_model *m, const hf_files *h) {
    const pl_model_config *c = &m->cfg;
    const pl_arch_info *arch = pl_arch_get(c->arch);
    for (size_t i = 0; i < h->tab.n; i++) {
        const char *name = h->tab.t[i].name, *file = h->paths[h->tab.t[i].file];
        if (ignorable(name)) continue;
        bool known = false;
        long layer = -1, expert = -1;
        for (int r = 0; r < PL_T_COUNT && !known; r++) {
            if (!pl_model_has_tensor(c, (pl_tensor_role)r) || fused_part(c, (pl_tensor_role)r))
                continue;
            known = pl_tensor_name_match2(pl_tensor_hf_name(c->arch, (pl_tensor_role)r), name,
                                          &layer, &expert);
        }
        if (!known && arch->fused)
            known = pl_tensor_name_match(PHI3_QKV, name, &layer) ||
                    pl_tensor_name_match(PHI3_GATE_UP, name, &layer);
        if (!known)
            return pl_fail(PL_ERR_FORMAT, "%s: tensor %s is not part of a %s model", file, name,
                           arch->hf_class);
        if (layer >= c->n_layers)
            return pl_fail(PL_ERR_FORMAT, "%s: tensor %s is beyond num_hidden_layers = %d",
                           file, name, c->n_layers);
        if (expert >= c->n_experts)
            return pl_fail(PL_ERR_FORMAT, "%s: tensor %s is beyond %s = %d", file, name,
                           c->arch == PL_ARCH_MIXTRAL ? "num_local_experts" : "num_experts",
                           c->n_experts);
    }
    return PL_OK;
}

static void shape_text(char *buf, size_t n, const int64_t *shape, int rank) {
    buf[0] = '\0';
    for (int d = 0, o = 0; d < rank && o < (int)n - 24; d++)
        o += snprintf(buf + o, n - (size_t)o, "%s%lld", d ? ", " : "", (long long)shape[d]);
}

/* The tensor called name, present, of a supported type and of shape [rows, cols] ([cols] for
 * a vector). */
static pl_status find(const pl_model *m, const hf_files *h, const char *name, bool vector,
                      int rows, int cols, const pl_st_tensor **out) {
    const pl_st_tensor *t = pl_model_st_find(&h->tab, name);
    if (!t) return pl_fail(PL_ERR_NOT_FOUND, "%s: missing tensor %s", m->name, name);
    const char *file = h->paths[t->file];
    if (t->type == PL_WTYPE_NONE)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s (supported: F32, F16, "
                       "BF16)", file, name, t->dtype);
    bool ok = vector ? t->rank == 1 && t->shape[0] == cols
                     : t->rank == 2 && t->shape[0] == rows && t->shape[1] == cols;
    if (!ok) {
        char got[96];
        shape_text(got, sizeof got, t->shape, t->rank);
        if (vector)
            return pl_fail(PL_ERR_FORMAT, "%s: tensor %s has shape [%s], config needs [%d]", file,
                           name, got, cols);
        return pl_fail(PL_ERR_FORMAT, "%s: tensor %s has shape [%s], config needs [%d, %d]",
                       file, name, got, rows, cols);
    }
    *out = t;
    return PL_OK;
}

/* A per-expert role from its n_experts tensors: each present, of one shape and one dtype. */
static pl_status bind_experts(pl_model *m, const hf_files *h, pl_tensor_role role, int layer,
                              pl_wtype want) {
    const pl_model_config *c = &m->cfg;
    int rows, cols;
    pl_model_tensor_shape(c, role, &rows, &cols);
    rows /= c->n_experts;
    const void **srcs = pl_calloc((size_t)c->n_experts, sizeof *srcs);
    if (!srcs) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory", m->name);
    pl_status s = PL_OK;
    pl_wtype type = PL_WTYPE_NONE;
    char name[160], first[160] = "";
    for (int e = 0; s == PL_OK && e < c->n_experts; e++) {
        snprintf(name, sizeof name, pl_tensor_hf_name(c->arch, role), layer, e);
        const pl_st_tensor *t;
        s = find(m, h, name, false, rows, cols, &t);
        if (s != PL_OK) break;
        if (e == 0) {
            type = t->type;
            snprintf(first, sizeof first, "%s", name);
        } else if (t->type != type) {
            s = pl_fail(PL_ERR_FORMAT, "%s: tensor %s is %s but %s is %s: experts of one layer "
                        "must share a type", h->paths[t->file], name, t->dtype, first,
                        pl_wtype_name(type));
            break;
        }
        srcs[e] = t->data;
    }
    if (s == PL_OK) s = pl_model_bind_stacked(m, role, layer, srcs, type, want, first);
    pl_free(srcs);
    return s;
}

/* q/k/v or gate/up of Phi-3 from its fused tensor: the role's rows of it. */
static pl_status bind_fused(pl_model *m, const hf_files *h, pl_tensor_role role, int layer,
                            pl_wtype want) {
    const pl_model_config *c = &m->cfg;
    int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim, F = c->hidden_dim;
    bool attn = role == PL_T_ATTN_Q || role == PL_T_ATTN_K || role == PL_T_ATTN_V;
    char name[160];
    snprintf(name, sizeof name, attn ? PHI3_QKV : PHI3_GATE_UP, layer);
    const pl_st_tensor *t;
    PL_TRY(find(m, h, name, false, attn ? qd + 2 * kvd : 2 * F, c->dim, &t));
    int row0 = role == PL_T_ATTN_K ? qd : role == PL_T_ATTN_V ? qd + kvd
             : role == PL_T_FFN_UP ? F : 0;
    uint64_t row_bytes = 0;
    pl_wtype_bytes(t->type, (uint64_t)c->dim, &row_bytes);
    return pl_model_bind(m, role, layer, (const uint8_t *)t->data + (size_t)row0 * row_bytes,
                         t->type, want, name);
}

/* Binds the tensor of (role, layer) from the files, checking its type and shape. */
static pl_status bind_tensor(pl_model *m, const hf_files *h, pl_tensor_role role, int layer,
                             pl_wtype want) {
    const pl_tensor_spec *spec = pl_tensor_spec_of(role);
    if (spec->per_expert) return bind_experts(m, h, role, layer, want);
    if (fused_part(&m->cfg, role)) return bind_fused(m, h, role, layer, want);
    char name[160];
    snprintf(name, sizeof name, pl_tensor_hf_name(m->cfg.arch, role), layer);
    int rows, cols;
    pl_model_tensor_shape(&m->cfg, role, &rows, &cols);
    bool vector = spec->rows == PL_DIM_NONE;
    const pl_st_tensor *t;
    PL_TRY(find(m, h, name, vector, rows, cols, &t));
    /* Gemma's RMSNorm multiplies by (1 + w): kept as the factor itself */
    if (vector && pl_arch_get(m->cfg.arch)->gemma)
        return pl_model_bind_shifted(m, role, layer, t->data, t->type, 1.0f, name);
    return pl_model_bind(m, role, layer, t->data, t->type, want, name);
}

/* Tied when the config says so; also when it is silent and there is no lm_head. */
static bool resolve_tied(const pl_model_config *c, const hf_files *h, bool tie_set) {
    return c->tied_embeddings ||
           (!tie_set &&
            pl_model_st_find(&h->tab, pl_tensor_hf_name(c->arch, PL_T_OUTPUT)) == NULL);
}

/* The memory limit, from the headers alone (no tensor byte is read yet): matrices keep the
 * embedding's stored type unless a type is asked for. A missing embedding or one of an
 * unsupported type is left to bind_all, which names the problem precisely. */
static pl_status check_limit(const char *dir, const pl_model_config *c, const hf_files *h,
                             bool tie_set, pl_wtype want, uint64_t limit) {
    if (!limit) return PL_OK;
    pl_wtype dt = want;
    if (dt == PL_WTYPE_NONE) {
        const pl_st_tensor *t =
            pl_model_st_find(&h->tab, pl_tensor_hf_name(c->arch, PL_T_TOKEN_EMBD));
        if (!t || t->type == PL_WTYPE_NONE) return PL_OK;
        dt = t->type;
    }
    pl_model_config sized = *c;
    sized.tied_embeddings = resolve_tied(c, h, tie_set);
    return pl_model_check_weight_limit(dir, &sized, dt, limit);
}

/* Every tensor the model stores, in model order. */
static pl_status bind_all(pl_model *m, const hf_files *h, bool tie_set, pl_wtype want) {
    m->cfg.tied_embeddings = resolve_tied(&m->cfg, h, tie_set);
    size_t n = pl_model_n_slots(&m->cfg);
    for (size_t s = 0; s < n; s++) {
        int layer;
        pl_tensor_role r = pl_model_slot_role(&m->cfg, s, &layer);
        if (pl_model_stores_tensor(&m->cfg, r)) PL_TRY(bind_tensor(m, h, r, layer, want));
    }
    pl_model_tie_output(m);
    return PL_OK;
}

pl_status pl_model_load_hf(const char *dir, const char *weights, const pl_model_load_options *opt,
                           uint64_t max_weight_bytes, pl_model **out) {
    *out = NULL;
    pl_model_config c;
    bool tie_set = false;
    PL_TRY(pl_model_hf_config(dir, &c, &tie_set));

    hf_files h = {0};
    pl_model *m = NULL;
    pl_wtype want = pl_wtype_of_dtype(opt->dtype);
    pl_status s = load_weights_files(&h, dir, weights);
    if (s == PL_OK) s = check_limit(dir, &c, &h, tie_set, want, max_weight_bytes);
    if (s == PL_OK) s = pl_model_shell_create(&c, dir, &m);
    if (s == PL_OK) s = check_unexpected(m, &h);
    if (s == PL_OK) s = bind_all(m, &h, tie_set, want);
    for (size_t i = 0; s == PL_OK && i < h.n; i++) s = pl_model_own_file(m, &h.f[i]);
    /* tokenizer.json first: the byte-level BPE of Llama 3 and Qwen has no .model, and where a
     * directory has both (Llama 2, Mistral) they describe the same tokenizer */
    static const char *const tokenizers[] = {"tokenizer.json", "tokenizer.model", NULL};
    if (s == PL_OK) s = pl_model_find_tokenizer(m, dir, tokenizers);
    hf_files_free(&h);
    if (s != PL_OK) {
        pl_model_free(m);
        return s;
    }
    *out = m;
    return PL_OK;
}
