/*
 * model/weights.c - the tensor tables applied to a config: which tensors a model has and their
 * shapes, the layout of a model's weights in one block, and every size figure (bytes to
 * allocate, the memory limit, bytes and parameters streamed per token), each one loop over the
 * model's tensors.
 *
 * The layout (pl_model_layout): every stored tensor in model order (pl_model_slot), each from a
 * 64-byte boundary, in one block. pl_model_alloc (backing.c) places a blank model with it and
 * pl_model_config_weight_bytes is the same walk without a block, so sizing a model from its
 * config and allocating it cannot disagree.
 */
#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "model/model_internal.h"

// ----------------------------------------------------------------------------
// tensors of a config

static bool when_holds(const pl_model_config *c, pl_tensor_when when) {
    const pl_arch_info *a = pl_arch_get(c->arch);
    switch (when) {
    case PL_WHEN_ALWAYS: return true;
    case PL_WHEN_UNTIED: return true; /* tied, it exists as the embedding's data */
    case PL_WHEN_QKV_BIAS: return a && a->qkv_bias;
    case PL_WHEN_QK_NORM: return a && a->qk_norm;
    }
    return false;
}

bool pl_model_has_tensor(const pl_model_config *c, pl_tensor_role r) {
    const pl_tensor_spec *t = pl_tensor_spec_of(r);
    return t && when_holds(c, t->when);
}

bool pl_model_stores_tensor(const pl_model_config *c, pl_tensor_role r) {
    const pl_tensor_spec *t = pl_tensor_spec_of(r);
    return t && when_holds(c, t->when) && !(t->when == PL_WHEN_UNTIED && c->tied_embeddings);
}

int pl_model_dim(const pl_model_config *c, pl_dim d) {
    switch (d) {
    case PL_DIM_NONE: return 1;
    case PL_DIM_EMBD: return c->dim;
    case PL_DIM_FFN: return c->hidden_dim;
    case PL_DIM_VOCAB: return c->vocab_size;
    case PL_DIM_Q: return c->n_heads * c->head_dim;
    case PL_DIM_KV: return c->n_kv_heads * c->head_dim;
    case PL_DIM_HEAD: return c->head_dim;
    }
    return 0;
}

void pl_model_tensor_shape(const pl_model_config *c, pl_tensor_role r, int *rows, int *cols) {
    const pl_tensor_spec *t = pl_tensor_spec_of(r);
    *rows = t ? pl_model_dim(c, t->rows) : 0;
    *cols = t ? pl_model_dim(c, t->cols) : 0;
}

pl_wtype pl_model_tensor_type(pl_tensor_role r, pl_wtype matrices) {
    const pl_tensor_spec *t = pl_tensor_spec_of(r);
    return t && t->storage == PL_STORE_F32 ? PL_WTYPE_F32 : matrices;
}

// ----------------------------------------------------------------------------
// layout and blank models

/* Bytes of the tensor of role stored as its type under `matrices`, into *out; false when a
 * row is not whole blocks of the type or the size overflows. */
static bool tensor_bytes(const pl_model_config *c, pl_tensor_role r, pl_wtype matrices,
                         uint64_t *out) {
    int rows, cols;
    pl_model_tensor_shape(c, r, &rows, &cols);
    pl_wtype t = pl_model_tensor_type(r, matrices);
    const pl_wtype_traits *tr = pl_wtype_traits_of(t);
    uint64_t row;
    return tr && cols % tr->block_elems == 0 && pl_wtype_bytes(t, (uint64_t)cols, &row) &&
           pl_model_mul_ok(row, (uint64_t)rows, out);
}

/* See model_internal.h. */
bool pl_model_layout(pl_model *m, const pl_model_config *c, pl_wtype matrices, uint8_t *base,
                   uint64_t *total) {
    uint64_t off = 0;
    size_t n = pl_model_n_slots(c);
    for (size_t s = 0; s < n; s++) {
        int layer;
        pl_tensor_role r = pl_model_slot_role(c, s, &layer);
        if (!pl_model_stores_tensor(c, r)) continue;
        uint64_t bytes, end;
        if (!tensor_bytes(c, r, matrices, &bytes) || !pl_model_add_ok(off, bytes, &end) ||
            !pl_model_add_ok(end, 63, &end))
            return false;
        if (base) {
            pl_weight *w = &m->w[s];
            w->data = base + off;
            w->type = pl_model_tensor_type(r, matrices);
            pl_model_tensor_shape(c, r, &w->rows, &w->cols);
        }
        off = end & ~(uint64_t)63;
    }
    *total = off;
    return true;
}

void pl_model_tie_output(pl_model *m) {
    if (m->cfg.tied_embeddings)
        m->w[pl_model_slot(&m->cfg, PL_T_OUTPUT, 0)] =
            m->w[pl_model_slot(&m->cfg, PL_T_TOKEN_EMBD, 0)];
}

// ----------------------------------------------------------------------------
// size figures

pl_status pl_model_config_weight_bytes(const pl_model_config *cfg, pl_wtype matrices,
                                       uint64_t *out) {
    if (!out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_model_config_weight_bytes: out is NULL");
    PL_TRY(pl_model_config_validate(cfg));
    if (!pl_wtype_traits_of(matrices))
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "pl_model_config_weight_bytes: weight type %d is not a weight type",
                       (int)matrices);
    if (!pl_model_layout(NULL, cfg, matrices, NULL, out))
        return pl_fail(PL_ERR_OUT_OF_MEMORY,
                       "model config: weight bytes overflow 64 bits, or rows of %d (dim), %d "
                       "(hidden_dim) or %d (head_dim) elements are not whole blocks of %s",
                       cfg->dim, cfg->hidden_dim, cfg->head_dim, pl_wtype_name(matrices));
    return PL_OK;
}

pl_status pl_model_check_weight_limit(const char *name, const pl_model_config *cfg,
                                      pl_wtype matrices, uint64_t limit) {
    if (!limit) return PL_OK;
    uint64_t bytes;
    PL_TRY(pl_model_config_weight_bytes(cfg, matrices, &bytes));
    if (bytes <= limit) return PL_OK;
    return pl_fail(PL_ERR_OUT_OF_MEMORY,
                   "%s: weights take %" PRIu64 " bytes (%.1f MiB) stored as %s, more than the "
                   "%" PRIu64 " bytes (%.1f MiB) of memory available (memory_limit_bytes, else "
                   "physical memory)",
                   name, bytes, (double)bytes / 1048576.0, pl_wtype_name(matrices),
                   limit, (double)limit / 1048576.0);
}

/* True for the matrices decode multiplies: every matrix but the embedding (gathered). */
static bool streamed(const pl_model_config *c, pl_tensor_role r) {
    const pl_tensor_spec *t = pl_tensor_spec_of(r);
    return r != PL_T_TOKEN_EMBD && t->rows != PL_DIM_NONE && pl_model_has_tensor(c, r);
}

size_t pl_model_weight_bytes(const pl_model *m) {
    size_t n = 0, slots = pl_model_n_slots(&m->cfg);
    for (size_t s = 0; s < slots; s++) {
        int layer;
        pl_tensor_role r = pl_model_slot_role(&m->cfg, s, &layer);
        const pl_weight *w = &m->w[s];
        uint64_t bytes;
        if (streamed(&m->cfg, r) && w->data &&
            pl_wtype_bytes(w->type, (uint64_t)w->rows * (uint64_t)w->cols, &bytes))
            n += (size_t)bytes;
    }
    return n;
}

size_t pl_model_matmul_params(const pl_model *m) {
    const pl_model_config *c = &m->cfg;
    size_t n = 0;
    for (int r = 0; r < PL_T_COUNT; r++) {
        if (!streamed(c, (pl_tensor_role)r)) continue;
        int rows, cols;
        pl_model_tensor_shape(c, (pl_tensor_role)r, &rows, &cols);
        size_t k = (size_t)rows * (size_t)cols;
        n += pl_tensor_role_per_layer((pl_tensor_role)r) ? k * (size_t)c->n_layers : k;
    }
    return n;
}
