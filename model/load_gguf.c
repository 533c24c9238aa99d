/*
 * model/load_gguf.c - GGUF files (llama.cpp's format): general.architecture llama (Llama 1/2/3,
 * TinyLlama, and Mistral, which llama.cpp files as llama with a sliding window), qwen2 and
 * qwen3, memory-mapped, tensors in any type util/wtype.h has a row for (F32, F16, BF16 today).
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
 * The end of text: tokenizer.ggml.eos_token_id, eot_token_id and eom_token_id (each when
 * present) form the EOS set; BOS is bos_token_id. The tokenizer lives in the same file: when
 * tokenizer.ggml.model is present, the model names the file itself as its tokenizer.
 *
 * Types: a tensor keeps its stored type (and aliases the mapping) unless a dtype is asked for
 * and the tensor is a plain float type; block-quantised tensors stay as they are. A type
 * GGUF knows but this build has no weight type for is refused with the tensor and the type.
 */
#include <inttypes.h>
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
    char buf[12][96];
    const char *pairs[26];
} key_names;

static void name_keys(ctx *x, key_names *k) {
    static const char *const map[][2] = {
        {"dim", "embedding_length"},         {"hidden_dim", "feed_forward_length"},
        {"n_layers", "block_count"},         {"n_heads", "attention.head_count"},
        {"n_kv_heads", "attention.head_count_kv"}, {"head_dim", "attention.key_length"},
        {"max_seq_len", "context_length"},   {"norm_eps", "attention.layer_norm_rms_epsilon"},
        {"rope_theta", "rope.freq_base"},    {"sliding_window", "attention.sliding_window"},
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
    c->arch = arch->arch;
    int experts;
    PL_TRY(get_i(x, "expert_count", false, 0, &experts));
    if (experts > 0)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: %s = %d: mixture-of-experts models are not "
                       "supported", x->path, x->key, experts);
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
    PL_TRY(get_i(x, "attention.sliding_window", false, 0, &c->sliding_window));
    if (c->sliding_window > 0) {
        if (arch->arch != PL_ARCH_LLAMA)
            return pl_fail(PL_ERR_UNSUPPORTED, "%s: %s = %d: a sliding window is not supported "
                           "for %s", x->path, x->key, c->sliding_window, x->arch);
        c->arch = PL_ARCH_MISTRAL; /* llama.cpp files Mistral as llama */
    }
    c->rope_layout = arch->arch == PL_ARCH_LLAMA ? 0 : 1; /* see the header comment */
    if (c->head_dim >= 2 && c->head_dim <= PL_MODEL_MAX_HEAD_DIM) PL_TRY(read_rope(x, c));

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

/* Every tensor of the file is one the model takes (or rope_freqs, read above). */
static pl_status check_unexpected(ctx *x, const pl_model_config *c) {
    for (size_t i = 0; i < x->g->n_tensors; i++) {
        char name[PL_GGUF_MAX_NAME + 1];
        const pl_gguf_tensor *t = &x->g->tensors[i];
        snprintf(name, sizeof name, "%.*s", (int)t->name.n, t->name.p);
        if (strcmp(name, ROPE_FREQS) == 0 && c->arch != PL_ARCH_QWEN2 && c->arch != PL_ARCH_QWEN3)
            continue;
        bool known = false;
        for (int r = 0; r < PL_T_COUNT && !known; r++) {
            long layer;
            if (!pl_tensor_name_match(pl_tensor_spec_of((pl_tensor_role)r)->gguf, name, &layer))
                continue;
            if (!pl_model_has_tensor(c, (pl_tensor_role)r)) break;
            if (layer >= c->n_layers)
                return pl_fail(PL_ERR_FORMAT, "%s: tensor %s is beyond %s.block_count = %d",
                               x->path, name, x->arch, c->n_layers);
            known = true;
        }
        if (!known)
            return pl_fail(PL_ERR_FORMAT, "%s: tensor %s is not part of a %s model", x->path, name,
                           pl_arch_get(c->arch)->hf_class);
    }
    return PL_OK;
}

/* The tensor of (role, layer): present, of a type this build stores, of the config's shape. */
static pl_status find_tensor(ctx *x, const pl_model_config *c, pl_tensor_role role, int layer,
                             const pl_gguf_tensor **out, pl_wtype *type, char *name, size_t cap) {
    snprintf(name, cap, pl_tensor_spec_of(role)->gguf, layer);
    const pl_gguf_tensor *t = pl_gguf_tensor_find(x->g, name);
    if (!t) return pl_fail(PL_ERR_NOT_FOUND, "%s: missing tensor %s", x->path, name);
    *type = pl_gguf_wtype(t->type);
    if (*type == PL_WTYPE_NONE)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: tensor %s: type %s is not supported by this "
                       "build", x->path, name, t->type->name);
    int rows, cols;
    pl_model_tensor_shape(c, role, &rows, &cols);
    bool vector = pl_tensor_spec_of(role)->rows == PL_DIM_NONE;
    bool ok = vector ? t->n_dims == 1 && t->ne[0] == (uint64_t)cols
                     : t->n_dims == 2 && t->ne[0] == (uint64_t)cols && t->ne[1] == (uint64_t)rows;
    if (!ok) {
        char got[96] = "";
        for (int d = 0, o = 0; d < t->n_dims; d++)
            o += snprintf(got + o, sizeof got - (size_t)o, "%s%" PRIu64, d ? ", " : "", t->ne[d]);
        if (vector)
            return pl_fail(PL_ERR_FORMAT, "%s: tensor %s has ne [%s], the config needs [%d]",
                           x->path, name, got, cols);
        return pl_fail(PL_ERR_FORMAT, "%s: tensor %s has ne [%s], the config needs [%d, %d] "
                       "(cols, rows)", x->path, name, got, cols, rows);
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
        PL_TRY(find_tensor(x, c, r, layer, &t, &src, name, sizeof name));
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
        PL_TRY(find_tensor(x, &m->cfg, r, layer, &t, &src, name, sizeof name));
        PL_TRY(pl_model_bind(m, r, layer, t->data, src, target_type(r, src, want), name));
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
                       "(llama, qwen2, qwen3)", f->path, arch_name);
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
