/*
 * kernels/cuda/scale.cu - x (n) = scale * x, soft-capped (tanh(x / cap) * cap) when cap > 0:
 * Gemma's embedding scale and final logit soft-cap. Elementwise, grid-stride.
 */
#include <math.h>

#include "kernels/cuda/backend_cuda.cuh"
#include "kernels/ref/ref.h"

static constexpr int kThreads = 256;

static __global__ void __launch_bounds__(kThreads)
scale_kernel(float *x, size_t n, float scale, float cap) {
    const size_t stride = (size_t)gridDim.x * kThreads;
    for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
        const float v = scale * x[i];
        x[i] = cap > 0.f ? tanhf(v / cap) * cap : v;
    }
}

pl_status pl_cuda_scale(pl_backend *be, float *x, size_t n, float scale, float cap) {
    PL_TRY(pl_ref_check_scale(x, n, scale, cap));
    if (n == 0) return PL_OK;
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    const size_t want = (n + kThreads - 1) / kThreads, cap_blocks = (size_t)c->n_sm * 32;
    PL_CUDA_TRY(launch(scale_kernel, dim3((unsigned)(want < cap_blocks ? want : cap_blocks)),
                       dim3(kThreads), 0, c->stream, x, n, scale, cap));
    return PL_OK;
}
