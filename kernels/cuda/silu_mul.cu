/*
 * kernels/cuda/silu_mul.cu - SwiGLU's gate: out (n) = silu(gate) * up, silu(x) = x/(1+exp(-x)).
 *
 * Elementwise, grid-stride over a size_t count; out may alias gate (each element is read
 * before it is written by the same thread).
 */
#include "kernels/cuda/backend_cuda.cuh"

static constexpr int kThreads = 256;

static __global__ void __launch_bounds__(kThreads)
silu_mul_kernel(float *out, const float *gate, const float *__restrict__ up, size_t n) {
    const size_t stride = (size_t)gridDim.x * kThreads;
    for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
        const float g = gate[i];
        out[i] = g / (1.f + __expf(-g)) * up[i];
    }
}

pl_status pl_cuda_silu_mul(pl_backend *be, float *out, const float *gate, const float *up,
                           size_t n) {
    if (n == 0) return PL_OK;
    if (!out || !gate || !up)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "silu_mul: out, gate or up is NULL");
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    const size_t want = (n + kThreads - 1) / kThreads, cap = (size_t)c->n_sm * 32;
    const unsigned blocks = (unsigned)(want < cap ? want : cap);
    PL_CUDA_TRY(launch(silu_mul_kernel, dim3(blocks), dim3(kThreads), 0, c->stream, out, gate, up,
                       n));
    return PL_OK;
}
