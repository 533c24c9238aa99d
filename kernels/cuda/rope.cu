/*
 * kernels/cuda/rope.cu - rotary position embedding, in place, both pair layouts.
 *
 * q (n_tokens, n_heads, head_dim), k (n_tokens, n_kv_heads, head_dim) f32; positions
 * (n_tokens) int32; inv_freq (head_dim / 2) f32. Pair j of token i rotates by
 * angle = (float)positions[i] * inv_freq[j], formed in f32 as every backend does (so results
 * agree at large positions); interleaved pairs are (2j, 2j+1), half pairs (j, j + head_dim/2);
 * with an odd head_dim the last element is left alone.
 *
 * One block per token: the block first computes the token's cos/sin table (head_dim / 2
 * entries, dynamic shared memory) once, then rotates every pair of every q and k head.
 */
#include "kernels/cuda/backend_cuda.cuh"
#include "kernels/ref/ref.h"

static constexpr int kThreads = 128;

static __global__ void __launch_bounds__(kThreads)
rope_kernel(float *__restrict__ q, float *__restrict__ k, const int32_t *__restrict__ positions,
            const float *__restrict__ inv_freq, int n_heads, int n_kv_heads, int head_dim,
            int interleaved) {
    DYNAMIC_SMEM(float, cs); /* (2, half): cos then sin */
    const int half = head_dim / 2;
    const float pos = (float)positions[blockIdx.x];
    for (int j = (int)threadIdx.x; j < half; j += kThreads) {
        float s, c;
        sincosf(pos * inv_freq[j], &s, &c);
        cs[j] = c;
        cs[half + j] = s;
    }
    __syncthreads();
    const int total = (n_heads + n_kv_heads) * half;
    for (int e = (int)threadIdx.x; e < total; e += kThreads) {
        const int h = e / half, j = e - h * half;
        float *x = h < n_heads
                       ? q + ((size_t)blockIdx.x * n_heads + h) * (size_t)head_dim
                       : k + ((size_t)blockIdx.x * n_kv_heads + (h - n_heads)) * (size_t)head_dim;
        const int a = interleaved ? 2 * j : j, b = interleaved ? 2 * j + 1 : j + half;
        const float c = cs[j], s = cs[half + j], x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

pl_status pl_cuda_rope(pl_backend *be, float *q, float *k, const int32_t *positions,
                       const float *inv_freq, int n_tokens, int n_heads, int n_kv_heads,
                       int head_dim, pl_rope_layout layout) {
    PL_TRY(pl_ref_check_rope(q, k, positions, inv_freq, n_tokens, n_heads, n_kv_heads, head_dim,
                             layout));
    if (n_tokens == 0 || head_dim < 2) return PL_OK;
    const size_t smem = (size_t)(head_dim / 2) * 2 * sizeof(float); /* the cos/sin table */
    if (smem > 48 * 1024)
        return pl_fail(PL_ERR_UNSUPPORTED, "rope: head_dim %d above 12288", head_dim);
    PL_CUDA_TRY(launch(rope_kernel, dim3((unsigned)n_tokens), dim3(kThreads), smem,
                       pl_cuda_ctx_of(be)->stream, q, k, positions, inv_freq, n_heads,
                       n_kv_heads, head_dim, layout == PL_ROPE_INTERLEAVED ? 1 : 0));
    return PL_OK;
}
