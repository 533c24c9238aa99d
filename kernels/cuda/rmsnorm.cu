/*
 * kernels/cuda/rmsnorm.cu - RMSNorm, and the residual add fused in front of it.
 *
 *   rmsnorm:      out (n_rows, dim) = x / sqrt(mean(x^2) + eps) * w         (w: (dim) f32)
 *   add_rmsnorm:  residual (n_rows, dim) += delta; out = rmsnorm(residual) * w
 *
 * Long rows (dim > kWarpRowMax: the hidden size of a real model): one block of 256 threads
 * per row; the sum of squares is an f32 block reduction (warp shuffles, then warp 0 over the
 * warps' partials). Short rows (rmsnorm only: Qwen3's per-head q/k norm runs it over
 * n_tokens * n_heads rows of head_dim 64-256): one warp per row, 8 rows per block, a warp
 * reduction and no barrier; a block per 64-element row would leave 3/4 of its threads idle
 * and pay two block barriers per row. Either way a thread touches the same elements in both
 * passes (the sum of squares, then the scaling), so out may alias x (and, for the fused op,
 * residual or delta) without a hazard.
 */
#include "kernels/cuda/backend_cuda.cuh"
#include "kernels/ref/ref.h"

static constexpr int kThreads = 256;
static constexpr int kRowsPerBlock = kThreads / 32; /* short rows: one warp each */
static constexpr int kWarpRowMax = 256;             /* longest row the warp path takes */

static __global__ void __launch_bounds__(kThreads)
rmsnorm_rows_kernel(float *out, const float *x, const float *__restrict__ w, int n_rows, int dim,
                    float eps) {
    const int row = (int)blockIdx.x * kRowsPerBlock + (int)(threadIdx.x >> 5);
    const int lane = (int)(threadIdx.x & 31u);
    if (row >= n_rows) return; /* the whole warp: no collective below is left short */
    const float *xr = x + (size_t)row * (size_t)dim; /* (dim) */
    float *outr = out + (size_t)row * (size_t)dim;   /* (dim) */
    float ss = 0.f;
    for (int d = lane; d < dim; d += 32) ss += xr[d] * xr[d];
    ss = pl_warp_sum(ss);
    const float inv = rsqrtf(ss / (float)dim + eps);
    for (int d = lane; d < dim; d += 32) outr[d] = xr[d] * inv * w[d];
}

static __global__ void __launch_bounds__(kThreads)
rmsnorm_kernel(float *out, const float *x, const float *__restrict__ w, int dim, float eps) {
    __shared__ float red[32];
    const float *xr = x + (size_t)blockIdx.x * (size_t)dim; /* (dim) */
    float *outr = out + (size_t)blockIdx.x * (size_t)dim;   /* (dim) */
    float ss = 0.f;
    for (int d = (int)threadIdx.x; d < dim; d += kThreads) ss += xr[d] * xr[d];
    ss = pl_block_reduce<false>(ss, red);
    const float inv = rsqrtf(ss / (float)dim + eps);
    for (int d = (int)threadIdx.x; d < dim; d += kThreads) outr[d] = xr[d] * inv * w[d];
}

static __global__ void __launch_bounds__(kThreads)
add_rmsnorm_kernel(float *out, float *residual, const float *delta, const float *__restrict__ w,
                   int dim, float eps) {
    __shared__ float red[32];
    float *res = residual + (size_t)blockIdx.x * (size_t)dim;     /* (dim) */
    const float *dr = delta + (size_t)blockIdx.x * (size_t)dim;   /* (dim) */
    float *outr = out + (size_t)blockIdx.x * (size_t)dim;         /* (dim) */
    float ss = 0.f;
    for (int d = (int)threadIdx.x; d < dim; d += kThreads) {
        const float v = res[d] + dr[d];
        res[d] = v;
        ss += v * v;
    }
    ss = pl_block_reduce<false>(ss, red);
    const float inv = rsqrtf(ss / (float)dim + eps);
    for (int d = (int)threadIdx.x; d < dim; d += kThreads) outr[d] = res[d] * inv * w[d];
}

pl_status pl_cuda_rmsnorm(pl_backend *be, float *out, const float *x, const float *w, int n_rows,
                          int dim, float eps) {
    PL_TRY(pl_ref_check_rmsnorm("rmsnorm", out, x, w, n_rows, dim, eps));
    if (n_rows == 0) return PL_OK;
    if (dim <= kWarpRowMax) {
        PL_CUDA_TRY(launch(rmsnorm_rows_kernel,
                           dim3((unsigned)(((long)n_rows + kRowsPerBlock - 1) / kRowsPerBlock)),
                           dim3(kThreads), 0, pl_cuda_ctx_of(be)->stream, out, x, w, n_rows, dim,
                           eps));
        return PL_OK;
    }
    PL_CUDA_TRY(launch(rmsnorm_kernel, dim3((unsigned)n_rows), dim3(kThreads), 0,
                       pl_cuda_ctx_of(be)->stream, out, x, w, dim, eps));
    return PL_OK;
}

pl_status pl_cuda_add_rmsnorm(pl_backend *be, float *out, float *residual, const float *delta,
                              const float *w, int n_rows, int dim, float eps) {
    PL_TRY(pl_ref_check_rmsnorm("add_rmsnorm", out, residual, w, n_rows, dim, eps));
    if (n_rows == 0) return PL_OK;
    if (!delta) return pl_fail(PL_ERR_INVALID_ARGUMENT, "add_rmsnorm: delta is NULL");
    PL_CUDA_TRY(launch(add_rmsnorm_kernel, dim3((unsigned)n_rows), dim3(kThreads), 0,
                       pl_cuda_ctx_of(be)->stream, out, residual, delta, w, dim, eps));
    return PL_OK;
}
