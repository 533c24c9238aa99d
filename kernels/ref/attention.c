/*
 * kernels/ref/attention.c - reference paged causal attention with grouped-query heads.
 *
 * q, out (n_tokens, n_heads, head_dim) f32; k_cache, v_cache: one layer,
 * (n_blocks, n_kv_heads, block_size, head_dim) of the backend's kv_dtype. For each sequence s,
 * each of its query rows j (position p = context_lens[s] - q_len + j), each head h (KV head
 * h / (n_heads / n_kv_heads)):
 *   score[t] = scale * q . K[t]                for t = lo .. p, K[t] found via block_tables[s]
 *   out      = sum_t softmax(score)[t] * V[t]  (softmax with the maximum subtracted)
 * where lo = 0, or with a sliding window W > 0, lo = max(0, p - W + 1); with a soft-cap c > 0
 * each score is first replaced by tanh(score / c) * c.
 * Everything is accumulated in double. This is the textbook formula, not a fast one: each
 * (row, head) reads its whole context.
 */
#include <math.h>

#include "kernels/ref/ref.h"
#include "util/alloc.h"
#include "util/dtype.h"

/* Element offset of (position t, KV head kh) in one layer's cache, via the block table. */
static size_t cache_offset(const pl_attn_batch *b, const int32_t *table, int t, int kh) {
    size_t block = (size_t)table[t / b->block_size];
    size_t offset = (size_t)(t % b->block_size);
    return ((block * b->n_kv_heads + kh) * b->block_size + offset) * b->head_dim;
}

pl_status pl_ref_attention(pl_backend *be, float *out, const float *q, const void *k_cache,
                           const void *v_cache, const pl_attn_batch *b) {
    PL_TRY(pl_ref_check_attention(be, out, q, k_cache, v_cache, b));
    if (b->n_seqs == 0) return PL_OK;
    int hd = b->head_dim, group = b->n_heads / b->n_kv_heads;
    pl_dtype kt = be->kv_dtype;
    /* scratch: scores (max_context_len), then the output accumulator (head_dim) */
    double *score = pl_malloc(((size_t)b->max_context_len + (size_t)hd) * sizeof(double));
    if (!score)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "attention: no memory for %d scores",
                       b->max_context_len);
    double *acc = score + b->max_context_len;

    for (int s = 0; s < b->n_seqs; s++) {
        const int32_t *table = b->block_tables + (size_t)s * b->max_blocks_per_seq;
        int q0 = b->query_start[s], q_len = b->query_start[s + 1] - q0;
        int ctx = b->context_lens[s];
        for (int j = 0; j < q_len; j++) {
            int pos = ctx - q_len + j, lo = pl_attn_window_start(pos, b->sliding_window);
            for (int h = 0; h < b->n_heads; h++) {
                int kh = h / group;
                const float *qh = q + ((size_t)(q0 + j) * b->n_heads + h) * hd; /* (hd) */
                double mx = -INFINITY;
                for (int t = lo; t <= pos; t++) {
                    size_t off = cache_offset(b, table, t, kh);
                    double dot = 0.0;
                    for (int d = 0; d < hd; d++)
                        dot += (double)qh[d] * pl_load_f32(k_cache, kt, off + d);
                    score[t] = dot * b->scale;
                    if (b->softcap > 0.0f) score[t] = tanh(score[t] / b->softcap) * b->softcap;
                    if (score[t] > mx) mx = score[t];
                }
                double sum = 0.0;
                for (int t = lo; t <= pos; t++) {
                    score[t] = exp(score[t] - mx);
                    sum += score[t];
                }
                for (int d = 0; d < hd; d++) acc[d] = 0.0;
                for (int t = lo; t <= pos; t++) {
                    size_t off = cache_offset(b, table, t, kh);
                    for (int d = 0; d < hd; d++)
                        acc[d] += score[t] * pl_load_f32(v_cache, kt, off + d);
                }
                float *oh = out + ((size_t)(q0 + j) * b->n_heads + h) * hd; /* (hd) */
                for (int d = 0; d < hd; d++) oh[d] = (float)(acc[d] / sum);
            }
        }
    }
    pl_free(score);
    return PL_OK;
}
