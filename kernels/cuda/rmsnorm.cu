/*
 * kernels/cuda/rmsnorm.cu - RMSNorm, and the residual add fused in front of it.
 *
 *   rmsnorm:      out (n_rows, dim) = x / sqrt(mean(x^2) + eps) * w         (w: (dim) f32)
 *   add_rmsnorm:  residual (n_rows, dim) += delta; out = rmsnorm(residual) * w
 *
 * One block of 256 threads per row. A thread touches the same elements in both passes (the
 * sum of squares, then the scaling), so out may alias x (and, for the fused op, residual or
 * delta) without a hazard. The sum of squares is an f32 block reduction (warp shuffles, then
 * warp 0 over the warps' partials).
 */
#include "kernels/cuda/backend_cuda.cuh"
#include "kernels/ref/ref.h"

static constexpr int kThreads = 256;

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
