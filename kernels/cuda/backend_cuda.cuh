/*
 * kernels/cuda/backend_cuda.cuh - the CUDA backend's private state and its ops, shared by the
 * .cu files of kernels/cuda/ (one file per op, same stems as kernels/ref/ and kernels/cpu/).
 *
 * Invariants
 * - All work goes to ctx->stream, in order; an op returns once its kernels are enqueued, so a
 *   device fault surfaces at the next sync/download as PL_ERR_BACKEND.
 * - Scratch buffers only grow. Growing frees the old buffer with cudaFree, which waits for the
 *   device, so a kernel still reading the old buffer is never cut short.
 * - Every entry into the backend (each function of the ops table and of cuda_backend.h) runs
 *   through pl_cuda_enter/pl_cuda_leave: the device is made current on the calling thread
 *   (the current device is per host thread, so a serving thread or Python's step() from
 *   another thread would otherwise use device 0), a lost backend fails at once, and a sticky
 *   error seen inside marks the backend lost (be->lost).
 * - Every op validates its host-side arguments (sizes, dtypes, NULLs) with the same checks as
 *   the host backends where they do not read device memory, and naming the argument.
 */
#ifndef PL_KERNELS_CUDA_BACKEND_CUDA_CUH
#define PL_KERNELS_CUDA_BACKEND_CUDA_CUH

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_common.cuh"

struct pl_cuda_ctx {
    int device;
    int n_sm;       /* streaming multiprocessors: the split-K heuristic */
    int smem_optin; /* max dynamic shared memory per block with the opt-in attribute */
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;            /* cuBLAS's workspace, ours so the KV pool is sized after it */
    size_t blas_ws_bytes;
    char lost_msg[320];       /* why be->lost was set */

    /* device scratch, grown on demand */
    void *act16;              /* matmul: x converted to f16/bf16, (n_rows, d_in) */
    size_t act16_bytes;
    void *wdeq;               /* matmul of quantised weights: a tile dequantised to f16 */
    size_t wdeq_bytes;
    float *attn_part;         /* split-K partials: (n_seqs, n_heads, n_parts) x (2 + head_dim) */
    size_t attn_part_bytes;
    float *wstage;            /* upload_weight: one f32 chunk before conversion (freed after) */
    size_t wstage_bytes;
    void *moe;                /* moe_matmul: the slots by expert and the chunk list (moe.cu) */
    size_t moe_bytes;

    /* pinned host staging for small uploads (per-step metadata): two halves used in turn;
     * half_free[h] is recorded after the last copy out of half h was enqueued */
    unsigned char *pinned;
    size_t pinned_bytes;      /* both halves */
    size_t pinned_used;       /* bytes used in the current half */
    int pinned_half;
    cudaEvent_t half_free[2];

    /* attention: split-K policy */
    pl_cuda_split_mode split_mode;
    int partition_tokens;     /* context tokens per split-K partition (multiple of 32) */
};

static inline pl_cuda_ctx *pl_cuda_ctx_of(pl_backend *be) { return (pl_cuda_ctx *)be->ctx; }

/* Every entry into the backend: pl_cuda_enter binds c->device to this thread and fails when the
 * backend is lost; pl_cuda_leave(be, st) returns st, marking the backend lost when st came from
 * a sticky error (and rewording st's message to say so). */
pl_status pl_cuda_enter(pl_backend *be);
pl_status pl_cuda_leave(pl_backend *be, pl_status st);

/* Scratch that ops grow into, for the reserve op: the dequantised tile of a quantised matmul of
 * these sizes with more than the matrix-vector kernel's rows (qmatmul.cu), and split-K's
 * partitions for a decode step of n_seqs sequences whose longest context is max_context under
 * the current split policy (attention.cu). */
size_t pl_cuda_wdeq_bytes(int d_in, int d_out);
size_t pl_cuda_attn_part_bytes(const pl_cuda_ctx *c, int n_seqs, int n_heads, int head_dim,
                               int max_context);

/* Makes *buf hold at least need bytes of device memory (contents not kept). */
pl_status pl_cuda_scratch(void **buf, size_t *cap, size_t need, const char *what);

/* dst (n) of dtype = src (n) f32 on the device (round to nearest even); dtype f16/bf16/f32. */
pl_status pl_cuda_convert_f32(pl_cuda_ctx *c, void *dst, pl_dtype dtype, const float *src,
                              size_t n);

/* out (n_rows, ld_out) = x (n_rows, d_in) @ w^T into its first d_out columns, x and w both of
 * type t (f32, f16 or bf16), through cuBLAS (matmul.cu). */
pl_status pl_cuda_gemm_ld(pl_cuda_ctx *c, float *out, const void *x, const void *w,
                          cudaDataType_t t, int n_rows, int d_in, int d_out, int ld_out);

/* pl_cuda_matmul for w of a quantised type (qmatmul.cu); arguments already checked. */
pl_status pl_cuda_qmatmul(pl_cuda_ctx *c, float *out, const float *x, const void *w,
                          pl_wtype wt, int n_rows, int d_in, int d_out);

/* ---- ops (kernels/cuda/<op>.cu), signatures of pl_backend_ops ---- */
pl_status pl_cuda_embed(pl_backend *be, float *out, const int32_t *ids, int n_tokens,
                        const void *table, pl_wtype type, int dim);
pl_status pl_cuda_rmsnorm(pl_backend *be, float *out, const float *x, const float *w, int n_rows,
                          int dim, float eps);
pl_status pl_cuda_add_rmsnorm(pl_backend *be, float *out, float *residual, const float *delta,
                              const float *w, int n_rows, int dim, float eps);
pl_status pl_cuda_matmul(pl_backend *be, float *out, const float *x, const void *w,
                         pl_wtype w_type, int n_rows, int d_in, int d_out);
pl_status pl_cuda_rope(pl_backend *be, float *q, float *k, const int32_t *positions,
                       const float *inv_freq, int n_tokens, int n_heads, int n_kv_heads,
                       int head_dim, pl_rope_layout layout);
pl_status pl_cuda_kv_store(pl_backend *be, void *k_cache, void *v_cache, const float *k,
                           const float *v, const int64_t *slots, int n_tokens, int n_kv_heads,
                           int head_dim, int block_size);
pl_status pl_cuda_attention(pl_backend *be, float *out, const float *q, const void *k_cache,
                            const void *v_cache, const pl_attn_batch *b);
pl_status pl_cuda_add_bias(pl_backend *be, float *x, const float *bias, int n_rows, int dim);
pl_status pl_cuda_silu_mul(pl_backend *be, float *out, const float *gate, const float *up,
                           size_t n);
pl_status pl_cuda_gather_rows(pl_backend *be, float *out, const float *x, const int32_t *rows,
                              int n_rows, int dim);
pl_status pl_cuda_copy_blocks(pl_backend *be, void *kv_cache, const pl_kv_layout *layout,
                              const int32_t *pairs, int n_pairs);
pl_status pl_cuda_moe_route(pl_backend *be, int32_t *ids, float *weights,
                                       const float *logits, int n_tokens, int n_experts, int k,
                                       bool norm);
pl_status pl_cuda_moe_matmul(pl_backend *be, const pl_matmul_part *parts,
                                        int n_parts, const float *x, int x_div,
                                        const int32_t *ids, int n_slots, int n_experts,
                                        int d_in);
pl_status pl_cuda_moe_combine(pl_backend *be, float *out, const float *y,
                                         const float *weights, int n_tokens, int k, int dim,
                                         const float *shared, const float *shared_gate);
pl_status pl_cuda_gelu_mul(pl_backend *be, float *out, const float *gate,
                                      const float *up, size_t n);
pl_status pl_cuda_scale(pl_backend *be, float *x, size_t n, float scale, float cap);

/* Prefill part of pl_cuda_attention (prefill_attention.cu): sequences with q_len > 1. */
pl_status pl_cuda_prefill_attention(pl_cuda_ctx *c, pl_dtype kv_dtype, float *out,
                                    const float *q, const void *k_cache, const void *v_cache,
                                    const pl_attn_batch *b);

#endif
