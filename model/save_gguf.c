/*
 * model/save_gguf.c - writing a model as a GGUF file laid out as llama.cpp's converters do,
 * so that llama.cpp reads it and load_gguf.c reads it back as the same model.
 *
 * Metadata: general.architecture (Mistral is "llama" with attention.sliding_window, Mixtral
 * "llama" with expert_count), the <arch>.* hyperparameters (experts, Gemma's window pattern,
 * soft-caps and local theta, Phi-3's longrope; the query scale as pagellm's own
 * attention.query_pre_attn_scalar only where it is not what llama.cpp infers), general.file_type
 * (the recipe's), and the EOS set as
 * tokenizer.ggml.eos/eot/eom_token_id (the first three ids; GGUF has no list) with
 * bos_token_id, each unless the writer holds the key already (a tokenizer's export wrote it).
 * Tensors in model order by their GGUF names; each matrix in the type the recipe gives it
 * (quant_recipe.c: a mix, and the fallback for rows that are not whole blocks), norms, biases
 * and routers F32; rope_freqs.weight for Llama 3 scaling, rope.scaling.* for linear. Experts
 * stacked as ne {cols, rows, n_experts}; Phi-3's q/k/v as one attn_qkv and gate/up as one
 * ffn_up (gate rows first), in the q and up types, with rope_factors_long/short.weight.
 *
 * Each tensor is produced when the writer asks for it (pl_gguf_fill_fn), its rows spread
 * over a thread pool: the source row (through the RoPE permutation for q and k when the source
 * layout is not the one the architecture's GGUF expects) to f32, then to the stored type with
 * its quantiser, so a thread holds one row of f32. A row already of its stored type is copied
 * as it is (a GGUF source re-written, a tensor left in its type): bytes, not a round trip
 * through f32 and the quantiser, which need not give the same blocks back.
 */
#include <stdio.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model_internal.h"
#include "util/alloc.h"
#include "util/threadpool.h"

typedef struct save_item {
    pl_tensor_role role;
    int layer;
    pl_wtype type; /* as stored in the file */
    int n_parts;   /* Phi-3's fused tensors: the rows of parts[0 .. n_parts) one after the
                      other; 0 or 1 otherwise */
    pl_tensor_role parts[3];
    int factors;   /* rope_factors_long (1) / short (2) */
} save_item;

typedef struct save_ctx {
    const pl_model *m;
    save_item *items; /* (n) in the order added to the writer; rope_freqs has role -1 */
    size_t n;
    bool permute;     /* q/k rows change RoPE layout */
    float *row;       /* (2 * widest) f32 scratch per thread, thread t's at row + t * row_stride */
    size_t row_stride;
    pl_threadpool *pool;
    /* the matrix being converted (fill -> convert_rows) */
    const pl_weight *w;
    const pl_wtype_traits *st, *tt;
    int heads;
    bool to_inter;
    size_t src_row, dst_row;
    uint8_t *out;
} save_ctx;

#define ROWS_PER_TASK 16

// ----------------------------------------------------------------------------
// metadata

typedef struct meta {
    pl_gguf_writer *w;
    const char *arch;
    char key[128];
} meta;

static const char *K(meta *x, const char *k) {
    snprintf(x->key, sizeof x->key, "%s.%s", x->arch, k);
    return x->key;
}

static pl_status u32(meta *x, const char *key, uint32_t v) {
    return pl_gguf_writer_has(x->w, key) ? PL_OK : pl_gguf_add_u32(x->w, key, v);
}

static pl_status f32(meta *x, const char *key, float v) {
    return pl_gguf_writer_has(x->w, key) ? PL_OK : pl_gguf_add_f32(x->w, key, v);
}

/* Gemma: the window and its pattern, the soft-caps (gemma2 always states both: llama.cpp
 * assumes 50 and 30 without them), gemma3's local theta, the query scale where llama.cpp
 * would not infer it. */
static pl_status write_gemma(meta *x, const pl_model_config *c) {
    bool g2 = c->arch == PL_ARCH_GEMMA2;
    PL_TRY(u32(x, K(x, "attention.sliding_window"), (uint32_t)c->sliding_window));
    PL_TRY(u32(x, K(x, "attention.sliding_window_pattern"),
               (uint32_t)(c->swa_pattern > 1 ? c->swa_pattern : 1)));
    if (g2) {
        if (c->attn_softcap > 0.0f) PL_TRY(f32(x, K(x, "attn_logit_softcapping"), c->attn_softcap));
        if (c->final_softcap > 0.0f)
            PL_TRY(f32(x, K(x, "final_logit_softcapping"), c->final_softcap));
    } else if (c->final_softcap > 0.0f) {
        PL_TRY(f32(x, K(x, "final_logit_softcapping"), c->final_softcap));
    }
    if (!g2 && c->rope_theta_local > 0.0f)
        PL_TRY(f32(x, K(x, "rope.freq_base_swa"), c->rope_theta_local));
    bool big = c->n_layers == (g2 ? 46 : 62);
    float inferred = big ? (float)c->dim / (float)c->n_heads : (float)c->head_dim;
    if (c->query_pre_attn_scalar > 0.0f && c->query_pre_attn_scalar != inferred)
        PL_TRY(f32(x, K(x, "attention.query_pre_attn_scalar"), c->query_pre_attn_scalar));
    return PL_OK;
}

static pl_status write_meta(meta *x, const pl_model *m, int file_type) {
    const pl_model_config *c = &m->cfg;
    if (!pl_gguf_writer_has(x->w, "general.architecture"))
        PL_TRY(pl_gguf_add_str(x->w, "general.architecture", x->arch, strlen(x->arch)));
    if (!pl_gguf_writer_has(x->w, "general.name")) {
        const char *slash = strrchr(m->name, '/');
        const char *name = slash && slash[1] ? slash + 1 : m->name;
        PL_TRY(pl_gguf_add_str(x->w, "general.name", name, strlen(name)));
    }
    if (file_type >= 0) PL_TRY(u32(x, "general.file_type", (uint32_t)file_type));
    PL_TRY(u32(x, K(x, "context_length"), (uint32_t)c->max_seq_len));
    PL_TRY(u32(x, K(x, "embedding_length"), (uint32_t)c->dim));
    PL_TRY(u32(x, K(x, "block_count"), (uint32_t)c->n_layers));
    PL_TRY(u32(x, K(x, "feed_forward_length"), (uint32_t)c->hidden_dim));
    PL_TRY(u32(x, K(x, "attention.head_count"), (uint32_t)c->n_heads));
    PL_TRY(u32(x, K(x, "attention.head_count_kv"), (uint32_t)c->n_kv_heads));
    PL_TRY(u32(x, K(x, "attention.key_length"), (uint32_t)c->head_dim));
    PL_TRY(u32(x, K(x, "attention.value_length"), (uint32_t)c->head_dim));
    PL_TRY(u32(x, K(x, "rope.dimension_count"), (uint32_t)c->head_dim));
    PL_TRY(u32(x, K(x, "vocab_size"), (uint32_t)c->vocab_size));
    PL_TRY(f32(x, K(x, "attention.layer_norm_rms_epsilon"), c->norm_eps));
    PL_TRY(f32(x, K(x, "rope.freq_base"), c->rope_theta));
    if (c->sliding_window > 0)
        PL_TRY(u32(x, K(x, "attention.sliding_window"), (uint32_t)c->sliding_window));
    if (c->rope_scaling == PL_ROPE_SCALING_LINEAR) {
        const char *k = K(x, "rope.scaling.type");
        if (!pl_gguf_writer_has(x->w, k)) PL_TRY(pl_gguf_add_str(x->w, k, "linear", 6));
        PL_TRY(f32(x, K(x, "rope.scaling.factor"), c->rope_factor));
    } else if (c->rope_scaling == PL_ROPE_SCALING_LLAMA3) {
        PL_TRY(u32(x, K(x, "rope.scaling.original_context_length"),
                   (uint32_t)c->rope_original_max_pos));
    }
    if (c->n_experts > 0) {
        PL_TRY(u32(x, K(x, "expert_count"), (uint32_t)c->n_experts));
        PL_TRY(u32(x, K(x, "expert_used_count"), (uint32_t)c->n_experts_used));
        if (c->arch != PL_ARCH_MIXTRAL)
            PL_TRY(u32(x, K(x, "expert_feed_forward_length"), (uint32_t)c->expert_hidden_dim));
        if (c->shared_hidden_dim > 0)
            PL_TRY(u32(x, K(x, "expert_shared_feed_forward_length"),
                       (uint32_t)c->shared_hidden_dim));
        /* llama.cpp renormalises for llama and qwen3moe, not for qwen2moe */
        if (c->norm_topk_prob != (c->arch != PL_ARCH_QWEN2_MOE)) {
            const char *k = K(x, "expert_weights_norm");
            if (!pl_gguf_writer_has(x->w, k)) PL_TRY(pl_gguf_add_bool(x->w, k, c->norm_topk_prob));
        }
    }
    if (pl_arch_get(c->arch)->gemma) PL_TRY(write_gemma(x, c));
    if (c->rope_scaling == PL_ROPE_SCALING_LONGROPE) {
        PL_TRY(u32(x, K(x, "rope.scaling.original_context_length"),
                   (uint32_t)c->rope_original_max_pos));
        PL_TRY(f32(x, K(x, "rope.scaling.attn_factor"),
                   c->rope_attn_factor > 0.0f ? c->rope_attn_factor : 1.0f));
    }
    if (c->bos_id >= 0) PL_TRY(u32(x, "tokenizer.ggml.bos_token_id", (uint32_t)c->bos_id));
    static const char *const eos_keys[] = {"tokenizer.ggml.eos_token_id",
                                           "tokenizer.ggml.eot_token_id",
                                           "tokenizer.ggml.eom_token_id"};
    for (int i = 0; i < c->n_eos && i < 3; i++)
        PL_TRY(u32(x, eos_keys[i], (uint32_t)c->eos_ids[i]));
    return PL_OK;
}

// ----------------------------------------------------------------------------
// tensors

/* Heads a q/k-like tensor rotates over, 0 for any other tensor. */
static int rope_heads(const pl_model_config *c, pl_tensor_role r) {
    switch (r) {
    case PL_T_ATTN_Q: case PL_T_ATTN_Q_BIAS: return c->n_heads;
    case PL_T_ATTN_K: case PL_T_ATTN_K_BIAS: return c->n_kv_heads;
    case PL_T_ATTN_Q_NORM: case PL_T_ATTN_K_NORM: return 1;
    default: return 0;
    }
}

/* The source row (or element, for a vector) that holds output row/element i of a head-
 * structured tensor stored in the other RoPE layout. half: rotate-half row h*hd + p*hd/2 + j
 * is interleaved row h*hd + 2j + p. */
static int source_index(int i, int head_dim, bool to_interleaved) {
    int h = i / head_dim, r = i % head_dim, half = head_dim / 2;
    int src = to_interleaved ? (r % 2) * half + r / 2  /* out 2j+p <- in p*half+j */
                             : 2 * (r % half) + r / half; /* out p*half+j <- in 2j+p */
    return h * head_dim + src;
}

/* Rows [task * ROWS_PER_TASK, ...) of the matrix in x, on pool thread `thread`. */
static void convert_rows(void *vctx, int task, int thread) {
    save_ctx *x = vctx;
    const pl_weight *w = x->w;
    const uint8_t *in = w->data;
    float *row = x->row + (size_t)thread * x->row_stride;
    int r1 = (task + 1) * ROWS_PER_TASK < w->rows ? (task + 1) * ROWS_PER_TASK : w->rows;
    for (int r = task * ROWS_PER_TASK; r < r1; r++) {
        int sr = x->heads ? source_index(r, x->m->cfg.head_dim, x->to_inter) : r;
        if (x->st == x->tt) {
            memcpy(x->out + (size_t)r * x->dst_row, in + (size_t)sr * x->src_row, x->dst_row);
            continue;
        }
        x->st->to_f32(in + (size_t)sr * x->src_row, row, (size_t)w->cols);
        x->tt->from_f32(row, x->out + (size_t)r * x->dst_row, (size_t)w->cols);
    }
}

static pl_status fill(void *vctx, size_t index, void *dst, size_t n_bytes) {
    save_ctx *x = vctx;
    const pl_model *m = x->m;
    const save_item *it = &x->items[index];
    const pl_wtype_traits *tt = pl_wtype_traits_of(it->type);
    if (it->layer < -1) { /* rope_freqs.weight, Phi-3's rope factors */
        float f[PL_MODEL_MAX_HEAD_DIM / 2];
        if (it->factors)
            memcpy(f, it->factors == 1 ? m->cfg.rope_long_factors : m->cfg.rope_short_factors,
                   sizeof f);
        else
            pl_model_rope_freq_factors(&m->cfg, f);
        memcpy(dst, f, n_bytes);
        return PL_OK;
    }
    if (it->n_parts > 1) { /* Phi-3's fused tensor: each part's rows in turn */
        uint8_t *out = dst;
        for (int k = 0; k < it->n_parts; k++) {
            save_item part = {it->parts[k], it->layer, it->type, 0, {0}, 0};
            save_item *items = x->items;
            x->items = &part;
            pl_status s = fill(vctx, 0, out, n_bytes);
            x->items = items;
            PL_TRY(s);
            const pl_weight *w = pl_model_weight(m, part.role, part.layer);
            uint64_t b = 0;
            pl_wtype_bytes(it->type, (uint64_t)w->rows * (uint64_t)w->cols, &b);
            out += b;
        }
        return PL_OK;
    }
    const pl_weight *w = pl_model_weight(m, it->role, it->layer);
    const pl_wtype_traits *st = pl_wtype_traits_of(w->type);
    bool vector = pl_tensor_spec_of(it->role)->rows == PL_DIM_NONE;
    int heads = x->permute ? rope_heads(&m->cfg, it->role) : 0;
    bool to_inter = m->cfg.rope_layout != 0;
    size_t src_row = (size_t)w->cols / (size_t)st->block_elems * (size_t)st->block_bytes;
    size_t dst_row = (size_t)w->cols / (size_t)tt->block_elems * (size_t)tt->block_bytes;
    uint8_t *out = dst;
    const uint8_t *in = w->data;
    if (vector) { /* one row; permuted element-wise */
        st->to_f32(in, x->row, (size_t)w->cols);
        if (heads) {
            float *tmp = x->row + w->cols;
            for (int i = 0; i < w->cols; i++)
                tmp[i] = x->row[source_index(i, m->cfg.head_dim, to_inter)];
            memcpy(x->row, tmp, (size_t)w->cols * sizeof *tmp);
        }
        tt->from_f32(x->row, out, (size_t)w->cols);
        return PL_OK;
    }
    x->w = w;
    x->st = st;
    x->tt = tt;
    x->heads = heads;
    x->to_inter = to_inter;
    x->src_row = src_row;
    x->dst_row = dst_row;
    x->out = out;
    pl_threadpool_run(x->pool, (w->rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK, convert_rows, x);
    return PL_OK;
}

/* Phi-3 writes q/k/v as one tensor and gate/up as one: the first role of each group opens it
 * (with the parts that follow it in the enum), the others are skipped. */
static int fused_parts(const pl_model_config *c, pl_tensor_role r) {
    if (!pl_arch_get(c->arch)->fused) return 1;
    switch (r) {
    case PL_T_ATTN_Q: return 3;  /* Q, K, V */
    case PL_T_FFN_GATE: return 0; /* written with UP */
    case PL_T_ATTN_K: case PL_T_ATTN_V: return 0;
    default: return 1;
    }
}

static pl_status add_tensors(save_ctx *x, pl_gguf_writer *w, const pl_quant_recipe *rc,
                             pl_quant_report_fn report, void *user) {
    const pl_model_config *c = &x->m->cfg;
    size_t n = pl_model_n_slots(c);
    x->items = pl_calloc(n + 2, sizeof *x->items);
    if (!x->items) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: tensor list", x->m->name);
    for (size_t s = 0; s < n; s++) {
        int layer, rows, cols;
        pl_tensor_role r = pl_model_slot_role(c, s, &layer);
        if (!pl_model_stores_tensor(c, r)) continue;
        int parts = fused_parts(c, r);
        if (parts == 0) continue;
        pl_tensor_role first = r, roles[3] = {r};
        if (parts == 3) roles[1] = PL_T_ATTN_K, roles[2] = PL_T_ATTN_V;
        /* Phi-3's ffn_up holds gate's rows then up's */
        if (pl_arch_get(c->arch)->fused && r == PL_T_FFN_UP)
            first = roles[0] = PL_T_FFN_GATE, roles[1] = PL_T_FFN_UP, parts = 2;
        pl_wtype asked;
        pl_wtype t = pl_quant_recipe_type(rc, c, r, layer, &asked);
        const pl_gguf_type_info *ti = pl_gguf_type_of_wtype(t);
        pl_model_tensor_shape(c, r, &rows, &cols);
        if (parts > 1) { /* the fused tensor's rows */
            rows = 0;
            for (int k = 0; k < parts; k++) {
                int rk, ck;
                pl_model_tensor_shape(c, roles[k], &rk, &ck);
                rows += rk;
            }
        }
        char name[128];
        if (first == PL_T_ATTN_Q && parts > 1) snprintf(name, sizeof name, "blk.%d.attn_qkv.weight",
                                                      layer);
        else snprintf(name, sizeof name, pl_tensor_gguf_name(c->arch, r), layer);
        if (report) report(user, name, t, asked, rows, cols);
        const pl_tensor_spec *spec = pl_tensor_spec_of(r);
        bool vector = spec->rows == PL_DIM_NONE;
        if (spec->per_expert) {
            uint64_t ne[3] = {(uint64_t)cols, (uint64_t)(rows / c->n_experts),
                              (uint64_t)c->n_experts};
            PL_TRY(pl_gguf_add_tensor(w, name, ti, 3, ne, NULL));
        } else {
            uint64_t ne[2] = {(uint64_t)cols, (uint64_t)rows};
            PL_TRY(pl_gguf_add_tensor(w, name, ti, vector ? 1 : 2, ne, NULL));
        }
        x->items[x->n++] = (save_item){first, layer, t, parts, {roles[0], roles[1], roles[2]}, 0};
    }
    if (c->rope_scaling == PL_ROPE_SCALING_LLAMA3) {
        uint64_t ne[1] = {(uint64_t)c->head_dim / 2};
        PL_TRY(pl_gguf_add_tensor(w, "rope_freqs.weight", pl_gguf_type_of_wtype(PL_WTYPE_F32), 1,
                                  ne, NULL));
        x->items[x->n++] = (save_item){PL_T_COUNT, -2, PL_WTYPE_F32, 0, {0}, 0};
    }
    if (c->rope_scaling == PL_ROPE_SCALING_LONGROPE) {
        uint64_t ne[1] = {(uint64_t)c->head_dim / 2};
        const char *names[2] = {"rope_factors_long.weight", "rope_factors_short.weight"};
        for (int k = 0; k < 2; k++) {
            PL_TRY(pl_gguf_add_tensor(w, names[k], pl_gguf_type_of_wtype(PL_WTYPE_F32), 1, ne,
                                      NULL));
            x->items[x->n++] = (save_item){PL_T_COUNT, -2, PL_WTYPE_F32, 0, {0}, k + 1};
        }
    }
    return PL_OK;
}

pl_status pl_model_save_gguf_recipe(const pl_model *m, const pl_quant_recipe *rc,
                                    pl_quant_report_fn report, void *user, int n_threads,
                                    pl_gguf_writer *w, const char *path) {
    const pl_arch_info *arch = pl_arch_get(m->cfg.arch);
    meta mx = {.w = w, .arch = arch->gguf};
    PL_TRY(write_meta(&mx, m, rc->file_type));
    int target_layout = pl_gguf_rope_interleaved(m->cfg.arch) ? 0 : 1;
    save_ctx x = {.m = m, .permute = m->cfg.rope_layout != target_layout};
    /* a row of the widest tensor, twice (a vector's permutation needs a second copy) */
    int widest = m->cfg.dim;
    if (m->cfg.hidden_dim > widest) widest = m->cfg.hidden_dim;
    if (m->cfg.expert_hidden_dim > widest) widest = m->cfg.expert_hidden_dim;
    if (m->cfg.shared_hidden_dim > widest) widest = m->cfg.shared_hidden_dim;
    if (m->cfg.n_heads * m->cfg.head_dim > widest) widest = m->cfg.n_heads * m->cfg.head_dim;
    PL_TRY(pl_threadpool_create(n_threads, &x.pool));
    x.row_stride = 2 * (size_t)widest;
    x.row = pl_malloc((size_t)pl_threadpool_size(x.pool) * x.row_stride * sizeof *x.row);
    pl_status s = x.row ? add_tensors(&x, w, rc, report, user)
                        : pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: row buffer", m->name);
    if (s == PL_OK) s = pl_gguf_writer_write(w, path, fill, &x);
    pl_free(x.row);
    pl_free(x.items);
    pl_threadpool_destroy(x.pool);
    return s;
}

pl_status pl_model_save_gguf(const pl_model *m, pl_wtype type, pl_gguf_writer *w,
                             const char *path) {
    const pl_wtype_traits *tr = pl_wtype_traits_of(type);
    if (!tr || !tr->from_f32 || !pl_gguf_type_of_wtype(type))
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: weight type %s cannot be written to GGUF by this "
                       "build", path, pl_wtype_name(type));
    pl_quant_recipe rc;
    PL_TRY(pl_quant_recipe_parse(tr->name, &rc));
    return pl_model_save_gguf_recipe(m, &rc, NULL, NULL, 1, w, path);
}
