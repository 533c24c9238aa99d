/*
 * kernels/cuda/matmul.cu - out (n_rows, d_out) f32 = x (n_rows, d_in) f32 @ w^T, w (d_out, d_in)
 * row-major in device memory, through cuBLAS (the quantised types: qmatmul.cu).
 *
 * f16/bf16 weights: x is first converted to the weights' type (pl_cuda_convert_f32, ctx.cu,
 * into a scratch buffer), then cublasGemmEx (pl_cuda_gemm_ld, ctx.cu) multiplies with f32
 * accumulation (CUBLAS_COMPUTE_32F) into f32 out. f32 weights: cublasGemmEx in f32 throughout (no TF32: the handle keeps the
 * default math mode). In cuBLAS's column-major terms out^T (d_out x n_rows) = w (row-major
 * (d_out, d_in) is column-major d_in x d_out, hence OP_T) times x^T (column-major d_in x
 * n_rows, OP_N): both operands are read along d_in, contiguously.
 *
 * Activations above 65504 become inf in f16 (Llama-family activations stay far below; bf16
 * weights keep f32's range). Under the CPU emulation pl_cuda_gemm's cublasGemmEx is a plain
 * CPU GEMM (tests/support/cuemu.h).
 */
#include "kernels/cuda/backend_cuda.cuh"
#include "kernels/ref/ref.h"

static pl_status pl_cuda_gemm(pl_cuda_ctx *c, float *out, const void *x, const void *w,
                              cudaDataType_t t, int n_rows, int d_in, int d_out) {
    return pl_cuda_gemm_ld(c, out, x, w, t, n_rows, d_in, d_out, d_out);
}

pl_status pl_cuda_matmul(pl_backend *be, float *out, const float *x, const void *w,
                         pl_wtype w_type, int n_rows, int d_in, int d_out) {
    PL_TRY(pl_ref_check_matmul(out, x, w, w_type, n_rows, d_in, d_out));
    if (n_rows == 0) return PL_OK;
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    if (pl_wtype_is_quant(w_type))
        return pl_cuda_qmatmul(c, out, x, w, w_type, n_rows, d_in, d_out);
    const pl_dtype w_dtype = pl_wtype_dtype(w_type);
    if (w_dtype == PL_DTYPE_F32) return pl_cuda_gemm(c, out, x, w, CUDA_R_32F, n_rows, d_in, d_out);
    const size_t n = (size_t)n_rows * (size_t)d_in;
    PL_TRY(pl_cuda_scratch(&c->act16, &c->act16_bytes, n * 2, "matmul activations"));
    PL_TRY(pl_cuda_convert_f32(c, c->act16, w_dtype, x, n));
    return pl_cuda_gemm(c, out, c->act16, w, w_dtype == PL_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF,
                        n_rows, d_in, d_out);
}
