/*
 * kernels/cuda/gather_rows.cu - out (n_rows, dim) = x[rows[i]] for x (*, dim) f32; rows
 * (n_rows) int32 in device memory, trusted to be in range. Used to pick each sequence's last
 * hidden state before the classifier. One block per output row.
 */
#include "kernels/cuda/backend_cuda.cuh"

static constexpr int kThreads = 128;

static __global__ void __launch_bounds__(kThreads)
gather_rows_kernel(float *__restrict__ out, const float *__restrict__ x,
                   const int32_t *__restrict__ rows, int dim) {
    const float *src = x + (size_t)rows[blockIdx.x] * (size_t)dim; /* (dim) */
    float *dst = out + (size_t)blockIdx.x * (size_t)dim;
    for (int d = (int)threadIdx.x; d < dim; d += kThreads) dst[d] = src[d];
}

pl_status pl_cuda_gather_rows(pl_backend *be, float *out, const float *x, const int32_t *rows,
                              int n_rows, int dim) {
    if (n_rows < 0 || dim <= 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "gather_rows: n_rows %d, dim %d", n_rows, dim);
    if (n_rows == 0) return PL_OK;
    if (!out || !x || !rows)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "gather_rows: out, x or rows is NULL");
    PL_CUDA_TRY(launch(gather_rows_kernel, dim3((unsigned)n_rows), dim3(kThreads), 0,
                       pl_cuda_ctx_of(be)->stream, out, x, rows, dim));
    return PL_OK;
}
