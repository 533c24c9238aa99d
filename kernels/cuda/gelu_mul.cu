/*
 * kernels/cuda/gelu_mul.cu - GeGLU's gate: out (n) = gelu_tanh(gate) * up, in the form
 * x / (1 + exp(-2u)), u = sqrt(2 / pi) (x + 0.044715 x^3) (= 0.5 x (1 + tanh(u))).
 *
 * Elementwise, grid-stride; out may alias gate.
 */
#include "kernels/cuda/backend_cuda.cuh"

static constexpr int kThreads = 256;

static __global__ void __launch_bounds__(kThreads)
gelu_mul_kernel(float *out, const float *gate, const float *__restrict__ up, size_t n) {
    const size_t stride = (size_t)gridDim.x * kThreads;
    for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
        const float g = gate[i];
        const float z = -1.5957691216057308f * (g + 0.044715f * g * g * g);
        out[i] = g / (1.f + __expf(z)) * up[i];
    }
}

pl_status pl_cuda_gelu_mul(pl_backend *be, float *out, const float *gate,
                                      const float *up, size_t n) {
    if (n == 0) return PL_OK;
    if (!out || !gate || !up)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "gelu_mul: out, gate or up is NULL");
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    const size_t want = (n + kThreads - 1) / kThreads, cap = (size_t)c->n_sm * 32;
    const unsigned blocks = (unsigned)(want < cap ? want : cap);
    PL_CUDA_TRY(launch(gelu_mul_kernel, dim3(blocks), dim3(kThreads), 0, c->stream, out, gate,
                       up, n));
    return PL_OK;
}
