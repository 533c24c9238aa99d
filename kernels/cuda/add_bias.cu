/*
 * kernels/cuda/add_bias.cu - bias add: x (n_rows, dim) += bias (dim) on every row.
 *
 * Elementwise, grid-stride over the n_rows * dim elements; the bias is read through the
 * read-only cache (every row reads the same dim floats).
 */
#include "kernels/cuda/backend_cuda.cuh"

static constexpr int kThreads = 256;

static __global__ void __launch_bounds__(kThreads)
add_bias_kernel(float *x, const float *__restrict__ bias, size_t n, int dim) {
    const size_t stride = (size_t)gridDim.x * kThreads;
    for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride)
        x[i] += __ldg(&bias[i % (size_t)dim]);
}

pl_status pl_cuda_add_bias(pl_backend *be, float *x, const float *bias, int n_rows, int dim) {
    if (n_rows < 0 || dim <= 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "add_bias: n_rows %d, dim %d", n_rows, dim);
    if (n_rows == 0) return PL_OK;
    if (!x || !bias) return pl_fail(PL_ERR_INVALID_ARGUMENT, "add_bias: x or bias is NULL");
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    const size_t n = (size_t)n_rows * (size_t)dim;
    const size_t want = (n + kThreads - 1) / kThreads, cap = (size_t)c->n_sm * 32;
    const unsigned blocks = (unsigned)(want < cap ? want : cap);
    PL_CUDA_TRY(launch(add_bias_kernel, dim3(blocks), dim3(kThreads), 0, c->stream, x, bias, n,
                       dim));
    return PL_OK;
}
