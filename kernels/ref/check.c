/*
 * kernels/ref/check.c - the argument checks every op runs before touching memory (the ref and
 * cpu backends share them). Below the ops; calls none of them.
 */
#include <math.h>
#include <string.h>

#include "kernels/ref/ref.h"
#include "util/dtype.h"

// ---------------------------------------------------------------------------------------------
// argument checks

bool pl_ref_dtype_ok(pl_dtype t) {
    return t == PL_DTYPE_F32 || t == PL_DTYPE_F16 || t == PL_DTYPE_BF16;
}

/* A weight type with a row in util/wtype.h, and rows of row_len elements that are whole
 * blocks of it. */
static pl_status check_wtype(const char *op, const char *what, pl_wtype t, int row_len) {
    const pl_wtype_traits *tr = pl_wtype_traits_of(t);
    if (!tr)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "%s: %s type %d is not a weight type", op, what,
                       (int)t);
    if (row_len % tr->block_elems != 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "%s: rows of %d elements are not whole %s blocks of %d elements", op,
                       row_len, tr->name, tr->block_elems);
    return PL_OK;
}

#define NEED(ptr, op, name)                                                                   \
    do {                                                                                      \
        if (!(ptr)) return pl_fail(PL_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, name);      \
    } while (0)

pl_status pl_ref_check_embed(const float *out, const int32_t *ids, int n_tokens,
                             const void *table, pl_wtype type, int dim) {
    if (n_tokens < 0) return pl_fail(PL_ERR_INVALID_ARGUMENT, "embed: n_tokens %d < 0", n_tokens);
    if (dim <= 0) return pl_fail(PL_ERR_INVALID_ARGUMENT, "embed: dim %d must be positive", dim);
    PL_TRY(check_wtype("embed", "table", type, dim));
    if (n_tokens == 0) return PL_OK;
    NEED(out, "embed", "out");
    NEED(ids, "embed", "ids");
    NEED(table, "embed", "table");
    return PL_OK;
}

pl_status pl_ref_check_rmsnorm(const char *op, const float *out, const float *x, const float *w,
                               int n_rows, int dim, float eps) {
    if (n_rows < 0) return pl_fail(PL_ERR_INVALID_ARGUMENT, "%s: n_rows %d < 0", op, n_rows);
    if (dim <= 0) return pl_fail(PL_ERR_INVALID_ARGUMENT, "%s: dim %d must be positive", op, dim);
    if (!(eps >= 0.0f) || isinf(eps))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "%s: eps %g must be finite and >= 0", op,
                       (double)eps);
    if (n_rows == 0) return PL_OK;
    NEED(out, op, "out");
    NEED(x, op, "x/residual");
    NEED(w, op, "w");
    return PL_OK;
}

pl_status pl_ref_check_matmul(const float *out, const float *x, const void *w, pl_wtype w_type,
                              int n_rows, int d_in, int d_out) {
    if (n_rows < 0) return pl_fail(PL_ERR_INVALID_ARGUMENT, "matmul: n_rows %d < 0", n_rows);
    if (d_in <= 0 || d_out <= 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "matmul: d_in %d and d_out %d must be positive",
                       d_in, d_out);
    PL_TRY(check_wtype("matmul", "weight", w_type, d_in));
    if (n_rows == 0) return PL_OK;
    NEED(out, "matmul", "out");
    NEED(x, "matmul", "x");
    NEED(w, "matmul", "w");
    return PL_OK;
}

pl_status pl_ref_check_rope(const float *q, const float *k, const int32_t *positions,
                            const float *inv_freq, int n_tokens, int n_heads, int n_kv_heads,
                            int head_dim, pl_rope_layout layout) {
    if (n_tokens < 0) return pl_fail(PL_ERR_INVALID_ARGUMENT, "rope: n_tokens %d < 0", n_tokens);
    if (n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "rope: n_heads %d, n_kv_heads %d, head_dim %d must be positive", n_heads,
                       n_kv_heads, head_dim);
    if (layout != PL_ROPE_INTERLEAVED && layout != PL_ROPE_HALF)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "rope: unknown layout %d", (int)layout);
    if (n_tokens == 0) return PL_OK;
    NEED(q, "rope", "q");
    NEED(k, "rope", "k");
    NEED(positions, "rope", "positions");
    if (head_dim >= 2) NEED(inv_freq, "rope", "inv_freq");
    return PL_OK;
}

static pl_status check_kv_dtype(const pl_backend *be, const char *op) {
    pl_dtype t = be->kv_dtype;
    if (!pl_ref_dtype_ok(t))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "%s: backend kv_dtype %d is not f32/f16/bf16", op,
                       (int)t);
    return PL_OK;
}

pl_status pl_ref_check_kv_store(const pl_backend *be, const void *k_cache, const void *v_cache,
                                const float *k, const float *v, const int64_t *slots,
                                int n_tokens, int n_kv_heads, int head_dim, int block_size) {
    PL_TRY(check_kv_dtype(be, "kv_store"));
    if (n_tokens < 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "kv_store: n_tokens %d < 0", n_tokens);
    if (n_kv_heads <= 0 || head_dim <= 0 || block_size <= 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "kv_store: n_kv_heads %d, head_dim %d, block_size %d must be positive",
                       n_kv_heads, head_dim, block_size);
    if (n_tokens == 0) return PL_OK;
    NEED(k_cache, "kv_store", "k_cache");
    NEED(v_cache, "kv_store", "v_cache");
    NEED(k, "kv_store", "k");
    NEED(v, "kv_store", "v");
    NEED(slots, "kv_store", "slots");
    return PL_OK;
}

pl_status pl_ref_check_attention_sizes(const pl_attn_batch *b) {
    NEED(b, "attention", "batch");
    if (b->n_seqs < 0 || b->n_tokens < 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "attention: n_seqs %d, n_tokens %d < 0",
                       b->n_seqs, b->n_tokens);
    if (b->n_heads <= 0 || b->n_kv_heads <= 0 || b->n_heads % b->n_kv_heads != 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "attention: n_heads %d must be a positive multiple of n_kv_heads %d",
                       b->n_heads, b->n_kv_heads);
    if (b->head_dim <= 0 || b->block_size <= 0 || b->max_blocks_per_seq <= 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "attention: head_dim %d, block_size %d, max_blocks_per_seq %d must be "
                       "positive",
                       b->head_dim, b->block_size, b->max_blocks_per_seq);
    if (!isfinite(b->scale))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "attention: scale %g is not finite",
                       (double)b->scale);
    if (b->sliding_window < 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "attention: sliding_window %d < 0 (0 means no window)", b->sliding_window);
    if (b->n_seqs == 0 && b->n_tokens != 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "attention: n_tokens %d with no sequences",
                       b->n_tokens);
    return PL_OK;
}

pl_status pl_ref_check_attention(const pl_backend *be, const float *out, const float *q,
                                 const void *k_cache, const void *v_cache,
                                 const pl_attn_batch *b) {
    PL_TRY(check_kv_dtype(be, "attention"));
    PL_TRY(pl_ref_check_attention_sizes(b));
    if (b->n_seqs == 0) return PL_OK;
    NEED(out, "attention", "out");
    NEED(q, "attention", "q");
    NEED(k_cache, "attention", "k_cache");
    NEED(v_cache, "attention", "v_cache");
    NEED(b->query_start, "attention", "batch.query_start");
    NEED(b->context_lens, "attention", "batch.context_lens");
    NEED(b->block_tables, "attention", "batch.block_tables");
    if (b->query_start[0] != 0 || b->query_start[b->n_seqs] != b->n_tokens)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "attention: query_start must run from 0 to n_tokens %d (got %d .. %d)",
                       b->n_tokens, (int)b->query_start[0], (int)b->query_start[b->n_seqs]);
    long cap = (long)b->max_blocks_per_seq * b->block_size;
    for (int s = 0; s < b->n_seqs; s++) {
        int q_len = b->query_start[s + 1] - b->query_start[s];
        int ctx = b->context_lens[s];
        if (q_len < 1 || q_len > b->max_query_len)
            return pl_fail(PL_ERR_INVALID_ARGUMENT,
                           "attention: sequence %d has q_len %d outside [1, max_query_len %d]", s,
                           q_len, b->max_query_len);
        if (ctx < q_len || ctx > b->max_context_len || ctx > cap)
            return pl_fail(PL_ERR_INVALID_ARGUMENT,
                           "attention: sequence %d has context_len %d outside [q_len %d, "
                           "min(max_context_len %d, %ld slots of its block table)]",
                           s, ctx, q_len, b->max_context_len, cap);
    }
    return PL_OK;
}

pl_status pl_ref_check_copy_blocks(const pl_backend *be, const void *kv_cache,
                                   const pl_kv_layout *layout, const int32_t *pairs,
                                   int n_pairs) {
    NEED(layout, "copy_blocks", "layout");
    if (layout->dtype != be->kv_dtype)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "copy_blocks: layout dtype %s differs from the backend's kv_dtype %s",
                       pl_dtype_name(layout->dtype), pl_dtype_name(be->kv_dtype));
    if (layout->n_layers <= 0 || layout->n_blocks <= 0 || layout->n_kv_heads <= 0 ||
        layout->block_size <= 0 || layout->head_dim <= 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "copy_blocks: layout sizes must be positive (layers %d, blocks %d, kv "
                       "heads %d, block_size %d, head_dim %d)",
                       layout->n_layers, layout->n_blocks, layout->n_kv_heads,
                       layout->block_size, layout->head_dim);
    if (n_pairs < 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "copy_blocks: n_pairs %d < 0", n_pairs);
    if (n_pairs == 0) return PL_OK;
    NEED(kv_cache, "copy_blocks", "kv_cache");
    NEED(pairs, "copy_blocks", "pairs");
    for (int i = 0; i < 2 * n_pairs; i++)
        if (pairs[i] < 0 || pairs[i] >= layout->n_blocks)
            return pl_fail(PL_ERR_INVALID_ARGUMENT,
                           "copy_blocks: pair %d names block %d outside [0, %d)", i / 2,
                           (int)pairs[i], layout->n_blocks);
    return PL_OK;
}
