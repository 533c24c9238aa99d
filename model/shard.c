/*
 * model/shard.c - one tensor-parallel rank's part of a model (Megatron-LM's split).
 *
 *   q, k, v (and their biases)   by output rows, in whole heads: rank r computes its heads
 *   o                            by input columns (the same heads): a partial sum of the full
 *                                output, completed by an all-reduce
 *   gate, up                     by output rows (hidden units)
 *   down                         by input columns (the same units): all-reduce after it
 *   output projection            by vocabulary rows: each rank's logits, gathered
 *   embedding, norms, q/k norms  whole on every rank
 * KV heads go with their query heads; with fewer KV heads than ranks each KV head is kept by
 * size / n_kv_heads ranks (vLLM's rule), each rank holding one. A quantised matrix split by
 * columns must be split on its blocks.
 *
 * pl_model_shard copies this rank's slices into buffers the model owns, then releases the
 * loader's backing (the mapping or the generated whole): afterwards the process holds its
 * shard and nothing else. The config stays the whole model's (the engine's vocabulary, EOS ids
 * and lengths do not change); the rank's sizes are in m->shard, and pl_model_local_config
 * gives the config of what this rank computes.
 */
#include <stdio.h>
#include <string.h>

#include "model/model_internal.h"
#include "util/alloc.h"

/* A split that cannot be made, with the numbers. */
#define REFUSE(...) pl_fail(PL_ERR_UNSUPPORTED, __VA_ARGS__)

pl_status pl_model_shard_plan_make(const pl_model_config *c, int rank, int size,
                                   pl_model_shard_plan *out) {
    if (size < 1 || rank < 0 || rank >= size)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "tensor parallelism: rank %d of %d", rank, size);
    pl_model_shard_plan p = {.rank = rank, .size = size};
    /* the families whose every tensor has a rule in slice_of; others (mixture-of-experts,
     * other layer shapes) would be split wrong, so they are refused until they get theirs */
    if (size > 1 && c->arch != PL_ARCH_LLAMA && c->arch != PL_ARCH_MISTRAL &&
        c->arch != PL_ARCH_QWEN2 && c->arch != PL_ARCH_QWEN3) {
        const pl_arch_info *a = pl_arch_get(c->arch);
        return REFUSE("--tensor-parallel-size %d: models of the %s architecture are not split "
                      "over ranks yet (Llama, Mistral, Qwen2 and Qwen3 are)", size,
                      a ? a->hf_class : "unknown");
    }
    if (c->n_heads % size)
        return REFUSE("--tensor-parallel-size %d: the model's %d attention heads cannot be "
                      "split over %d ranks (the heads must be a multiple of the ranks)",
                      size, c->n_heads, size);
    if (c->n_kv_heads >= size ? c->n_kv_heads % size : size % c->n_kv_heads)
        return REFUSE("--tensor-parallel-size %d: the model's %d KV heads can be split over "
                      "ranks only when one is a multiple of the other", size, c->n_kv_heads);
    if (c->hidden_dim % size)
        return REFUSE("--tensor-parallel-size %d: the FFN's %d hidden units cannot be split "
                      "over %d ranks", size, c->hidden_dim, size);
    p.n_heads = c->n_heads / size;
    p.head0 = rank * p.n_heads;
    p.kv_replicated = c->n_kv_heads < size;
    p.n_kv_heads = p.kv_replicated ? 1 : c->n_kv_heads / size;
    p.kv_head0 = p.kv_replicated ? rank / (size / c->n_kv_heads) : rank * p.n_kv_heads;
    p.hidden = c->hidden_dim / size;
    p.hidden0 = rank * p.hidden;
    p.vocab_stride = (c->vocab_size + size - 1) / size;
    p.vocab0 = rank * p.vocab_stride;
    int left = c->vocab_size - p.vocab0;
    p.vocab = left < p.vocab_stride ? left : p.vocab_stride;
    if (c->vocab_size - (size - 1) * p.vocab_stride < 1)
        return REFUSE("--tensor-parallel-size %d: a vocabulary of %d tokens leaves the last "
                      "rank no rows of the output projection", size, c->vocab_size);
    *out = p;
    return PL_OK;
}

void pl_model_local_config(const pl_model *m, pl_model_config *out) {
    *out = m->cfg;
    if (m->shard.size <= 1) return;
    out->n_heads = m->shard.n_heads;
    out->n_kv_heads = m->shard.n_kv_heads;
    out->hidden_dim = m->shard.hidden;
}

/* The slice of a tensor this rank keeps: rows [r0, r0 + nr) and columns [c0, c0 + nc). */
typedef struct slice {
    int r0, nr, c0, nc;
} slice;

/* The slice of role this rank keeps; false for a role without a rule (a tensor this file does
 * not know how to split must not be kept whole by accident: every rank would add it in). */
static bool slice_of(const pl_model_config *c, const pl_model_shard_plan *p, pl_tensor_role role,
                     const pl_weight *w, slice *out) {
    int hd = c->head_dim;
    slice s = {0, w->rows, 0, w->cols};
    switch (role) {
    case PL_T_ATTN_Q: s.r0 = p->head0 * hd, s.nr = p->n_heads * hd; break;
    case PL_T_ATTN_K:
    case PL_T_ATTN_V: s.r0 = p->kv_head0 * hd, s.nr = p->n_kv_heads * hd; break;
    /* biases are vectors: rows 1, the slice is of their elements */
    case PL_T_ATTN_Q_BIAS: s.c0 = p->head0 * hd, s.nc = p->n_heads * hd; break;
    case PL_T_ATTN_K_BIAS:
    case PL_T_ATTN_V_BIAS: s.c0 = p->kv_head0 * hd, s.nc = p->n_kv_heads * hd; break;
    case PL_T_ATTN_OUT: s.c0 = p->head0 * hd, s.nc = p->n_heads * hd; break;
    case PL_T_FFN_GATE:
    case PL_T_FFN_UP: s.r0 = p->hidden0, s.nr = p->hidden; break;
    case PL_T_FFN_DOWN: s.c0 = p->hidden0, s.nc = p->hidden; break;
    case PL_T_OUTPUT: s.r0 = p->vocab0, s.nr = p->vocab; break;
    /* whole on every rank: they act on the whole residual stream or on every head alike */
    case PL_T_TOKEN_EMBD:
    case PL_T_ATTN_NORM:
    case PL_T_FFN_NORM:
    case PL_T_OUTPUT_NORM:
    case PL_T_ATTN_Q_NORM:
    case PL_T_ATTN_K_NORM: break;
    default: return false;
    }
    *out = s;
    return true;
}

/* Copies slice s of w (of its type) into dst. Columns must start and end on blocks. */
static pl_status copy_slice(const pl_weight *w, slice s, const char *name, int layer,
                            const pl_model_shard_plan *p, void *dst) {
    const pl_wtype_traits *t = pl_wtype_traits_of(w->type);
    int be = t->block_elems;
    if (s.c0 % be || s.nc % be)
        return REFUSE("--tensor-parallel-size %d: %s (layer %d) is stored as %s in blocks of %d "
                      "values; rank %d's columns %d..%d do not fall on block boundaries",
                      p->size, name, layer, pl_wtype_name(w->type), be, p->rank, s.c0,
                      s.c0 + s.nc - 1);
    size_t row_bytes = (size_t)w->cols / (size_t)be * (size_t)t->block_bytes;
    size_t off = (size_t)s.c0 / (size_t)be * (size_t)t->block_bytes;
    size_t n = (size_t)s.nc / (size_t)be * (size_t)t->block_bytes;
    const char *src = (const char *)w->data;
    for (int r = 0; r < s.nr; r++)
        memcpy((char *)dst + (size_t)r * n, src + (size_t)(s.r0 + r) * row_bytes + off, n);
    return PL_OK;
}

pl_status pl_model_shard_copy(const pl_model *m, int rank, int size, pl_model **out) {
    if (m->shard.size > 1)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "%s: already a shard", m->name);
    pl_model_shard_plan p;
    PL_TRY(pl_model_shard_plan_make(&m->cfg, rank, size, &p));
    const pl_model_config *c = &m->cfg;
    size_t n_slots = pl_model_n_slots(c);
    pl_model *sh;
    PL_TRY(pl_model_shell_create(c, m->name, &sh));
    pl_status st = PL_OK;
    for (size_t s = 0; s < n_slots && st == PL_OK; s++) {
        int layer;
        pl_tensor_role role = pl_model_slot_role(c, s, &layer);
        const pl_weight *w = &m->w[s];
        /* tied: the output projection's rows are the embedding's */
        if (role == PL_T_OUTPUT && c->tied_embeddings) w = &m->w[0];
        if (!w->data) continue;
        slice sl = {0, w->rows, 0, w->cols};
        if (size > 1 && !slice_of(c, &p, role, w, &sl)) {
            st = REFUSE("--tensor-parallel-size %d: tensor %s has no rule for splitting over "
                        "ranks", size, pl_tensor_spec_of(role)->hf);
            break;
        }
        const pl_wtype_traits *t = pl_wtype_traits_of(w->type);
        uint64_t bytes;
        if (!t || !pl_wtype_bytes(w->type, (uint64_t)sl.nr * (uint64_t)sl.nc, &bytes)) {
            st = pl_fail(PL_ERR_INVALID_ARGUMENT, "%s: tensor %s has no size", m->name,
                         pl_tensor_spec_of(role)->hf);
            break;
        }
        void *dst;
        st = pl_model_own_alloc(sh, (size_t)bytes, &dst);
        if (st == PL_OK) st = copy_slice(w, sl, pl_tensor_spec_of(role)->hf, layer, &p, dst);
        sh->w[s] = (pl_weight){.data = dst, .type = w->type, .rows = sl.nr, .cols = sl.nc};
    }
    if (st != PL_OK) {
        pl_model_free(sh);
        return st;
    }
    if (size > 1) sh->shard = p;
    *out = sh;
    return PL_OK;
}

pl_status pl_model_shard(pl_model *m, int rank, int size) {
    if (size == 1 && m->shard.size <= 1) return PL_OK;
    pl_model *sh;
    PL_TRY(pl_model_shard_copy(m, rank, size, &sh));
    /* swap: m keeps its identity (name, tokenizer path) with the shard's weights and backing;
     * the whole model's mapping or heap blocks go with sh */
    void *old_priv = m->priv;
    pl_weight *old_w = m->w;
    m->priv = sh->priv;
    m->w = sh->w;
    m->shard = sh->shard;
    sh->priv = old_priv;
    sh->w = old_w;
    pl_model_free(sh);
    return PL_OK;
}
