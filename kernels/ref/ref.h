/*
 * kernels/ref/ref.h - the reference backend's ops, and the argument checks every host
 * backend shares.
 *
 * The ref backend is the specification: naive loops, double accumulation where a reduction is
 * long, no threads, no SIMD. Every faster path (cpu/, cuda/) is tested against it, so its ops
 * keep the exact signatures of pl_backend_ops (see kernels/backend.h for shapes).
 *
 * The pl_ref_check_* functions validate what an op can check cheaply (sizes, dtypes, NULL
 * pointers, batch metadata read on the host) and name the offending argument; the cpu backend
 * calls the same checks, so both backends refuse exactly the same inputs. They read
 * pl_attn_batch's device arrays, so only host backends may use the batch checks.
 */
#ifndef PL_KERNELS_REF_H
#define PL_KERNELS_REF_H

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- ops (kernels/ref/<op>.c) ---- */
pl_status pl_ref_embed(pl_backend *be, float *out, const int32_t *ids, int n_tokens,
                       const void *table, pl_wtype type, int dim);
pl_status pl_ref_rmsnorm(pl_backend *be, float *out, const float *x, const float *w, int n_rows,
                         int dim, float eps);
pl_status pl_ref_add_rmsnorm(pl_backend *be, float *out, float *residual, const float *delta,
                             const float *w, int n_rows, int dim, float eps);
pl_status pl_ref_matmul(pl_backend *be, float *out, const float *x, const void *w,
                        pl_wtype w_type, int n_rows, int d_in, int d_out);
pl_status pl_ref_rope(pl_backend *be, float *q, float *k, const int32_t *positions,
                      const float *inv_freq, int n_tokens, int n_heads, int n_kv_heads,
                      int head_dim, pl_rope_layout layout);
pl_status pl_ref_kv_store(pl_backend *be, void *k_cache, void *v_cache, const float *k,
                          const float *v, const int64_t *slots, int n_tokens, int n_kv_heads,
                          int head_dim, int block_size);
pl_status pl_ref_attention(pl_backend *be, float *out, const float *q, const void *k_cache,
                           const void *v_cache, const pl_attn_batch *b);
pl_status pl_ref_silu_mul(pl_backend *be, float *out, const float *gate, const float *up,
                          size_t n);
pl_status pl_ref_gather_rows(pl_backend *be, float *out, const float *x, const int32_t *rows,
                             int n_rows, int dim);
pl_status pl_ref_add_bias(pl_backend *be, float *x, const float *bias, int n_rows, int dim);
pl_status pl_ref_copy_blocks(pl_backend *be, void *kv_cache, const pl_kv_layout *layout,
                             const int32_t *pairs, int n_pairs);

/* ---- argument checks shared by host backends (kernels/ref/check.c) ---- */
/* f32, f16 or bf16: the storage types the host backends keep weights and KV in. */
bool pl_ref_dtype_ok(pl_dtype t);
/* embed and matmul also check that the weight type has a row in util/wtype.h and that a row
 * (dim, d_in) is a whole number of its blocks. */
pl_status pl_ref_check_embed(const float *out, const int32_t *ids, int n_tokens,
                             const void *table, pl_wtype type, int dim);
pl_status pl_ref_check_rmsnorm(const char *op, const float *out, const float *x, const float *w,
                               int n_rows, int dim, float eps);
pl_status pl_ref_check_matmul(const float *out, const float *x, const void *w, pl_wtype w_type,
                              int n_rows, int d_in, int d_out);
pl_status pl_ref_check_rope(const float *q, const float *k, const int32_t *positions,
                            const float *inv_freq, int n_tokens, int n_heads, int n_kv_heads,
                            int head_dim, pl_rope_layout layout);
pl_status pl_ref_check_kv_store(const pl_backend *be, const void *k_cache, const void *v_cache,
                                const float *k, const float *v, const int64_t *slots,
                                int n_tokens, int n_kv_heads, int head_dim, int block_size);
/* The batch's host fields only (sizes, scale, sliding_window >= 0, no tokens without
 * sequences); reads no array, so device backends use it too. */
pl_status pl_ref_check_attention_sizes(const pl_attn_batch *b);
/* The sizes above, and the host-readable batch arrays: query_start non-decreasing from 0 to n_tokens,
 * 1 <= q_len <= context_lens[s] <= min(max_context_len, max_blocks_per_seq * block_size),
 * q_len <= max_query_len. Block ids cannot be checked (the op does not know n_blocks). */
pl_status pl_ref_check_attention(const pl_backend *be, const float *out, const float *q,
                                 const void *k_cache, const void *v_cache,
                                 const pl_attn_batch *b);
pl_status pl_ref_check_copy_blocks(const pl_backend *be, const void *kv_cache,
                                   const pl_kv_layout *layout, const int32_t *pairs,
                                   int n_pairs);

/* Shared by host backends: n_elems of src_type returned as is (zero copy). */
pl_status pl_ref_host_upload_weight(pl_backend *be, const void *src, pl_wtype src_type,
                                    size_t n_elems, void **out, pl_wtype *out_type);
/* Host RAM: available and total physical pages (sysconf). */
pl_status pl_ref_host_memory_info(pl_backend *be, size_t *out_free, size_t *out_total);

#ifdef __cplusplus
}
#endif
#endif
