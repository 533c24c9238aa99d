/*
 * kernels/cuda/ctx.cu - what every op of the CUDA backend uses, below them all: the entry
 * bracket (device binding, sticky errors, lost backends), scratch buffers that grow, the f32
 * conversion kernel and the one cuBLAS call. The ops (one .cu each) call down into this file;
 * backend_cuda.cu (memory, lifecycle, the table) calls the ops and this file; nothing here
 * calls up, so the files form no loop (tests/unit/file_graph.py).
 */
#include <stdio.h>

#include "kernels/cuda/backend_cuda.cuh"

static constexpr int kThreads = 256;

// ---------------------------------------------------------------------------------------------
// Entries: device binding and sticky errors

/* Errors after which the CUDA context is unusable for the rest of the process. */
static bool pl_cuda_is_sticky(cudaError_t e) {
    switch (e) {
    case cudaErrorECCUncorrectable:
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure: return true;
    default: return false;
    }
}

/* The sticky error PL_CUDA_TRY saw last on this thread, for the entry that is running. */
static thread_local cudaError_t tl_sticky = cudaSuccess;

void pl_cuda_note_error(cudaError_t e) {
    if (pl_cuda_is_sticky(e)) tl_sticky = e;
}

pl_status pl_cuda_enter(pl_backend *be) {
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    if (be->lost) return pl_fail(PL_ERR_BACKEND, "%s", c->lost_msg);
    tl_sticky = cudaSuccess;
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != c->device) {
        cudaError_t e = cudaSetDevice(c->device);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            pl_cuda_note_error(e);
            return pl_cuda_leave(be, pl_fail(PL_ERR_BACKEND, "cuda: cudaSetDevice(%d): %s (%s)",
                                             c->device, cudaGetErrorName(e),
                                             cudaGetErrorString(e)));
        }
    }
    return PL_OK;
}

pl_status pl_cuda_leave(pl_backend *be, pl_status st) {
    if (st == PL_OK) return PL_OK;
    /* cuBLAS reports a fault as its own status: the runtime's sticky error says what it was */
    if (tl_sticky == cudaSuccess) pl_cuda_note_error(cudaPeekAtLastError());
    if (tl_sticky == cudaSuccess) return st;
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    const cudaError_t e = tl_sticky;
    tl_sticky = cudaSuccess;
    snprintf(c->lost_msg, sizeof c->lost_msg,
             "backend cuda (device %d) is lost: %s (%s) left the device unusable for the rest "
             "of this process; restart it",
             c->device, cudaGetErrorName(e), cudaGetErrorString(e));
    be->lost = true;
    return pl_fail_prefix(PL_ERR_BACKEND, "%s", c->lost_msg);
}

// ---------------------------------------------------------------------------------------------
// Scratch

pl_status pl_cuda_scratch(void **buf, size_t *cap, size_t need, const char *what) {
    if (need <= *cap) return PL_OK;
    size_t n = need > *cap + *cap / 2 ? need : *cap + *cap / 2;
    if (*buf) {
        cudaError_t e = cudaFree(*buf);
        *buf = NULL;
        *cap = 0;
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return pl_fail(PL_ERR_BACKEND, "cuda: freeing the %s scratch: %s (%s)", what,
                           cudaGetErrorName(e), cudaGetErrorString(e));
        }
    }
    cudaError_t e = cudaMalloc(buf, n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *buf = NULL;
        return pl_fail(PL_ERR_BACKEND, "cuda: cudaMalloc(%zu bytes) for the %s scratch: %s (%s)",
                       n, what, cudaGetErrorName(e), cudaGetErrorString(e));
    }
    *cap = n;
    return PL_OK;
}

// ---------------------------------------------------------------------------------------------
// f32 conversion and cuBLAS (matmul.cu, qmatmul.cu, upload_weight)

template <typename T>
static __global__ void __launch_bounds__(kThreads)
convert_f32_kernel(T *__restrict__ dst, const float *__restrict__ src, size_t n) {
    const size_t stride = (size_t)gridDim.x * kThreads;
    for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride)
        dst[i] = pl_elem<T>::from_f32(src[i]);
}

pl_status pl_cuda_convert_f32(pl_cuda_ctx *c, void *dst, pl_dtype dtype, const float *src,
                              size_t n) {
    if (n == 0) return PL_OK;
    const size_t want = (n + kThreads - 1) / kThreads, cap = (size_t)c->n_sm * 32;
    const dim3 grid((unsigned)(want < cap ? want : cap)), block(kThreads);
    switch (dtype) {
    case PL_DTYPE_F16:
        PL_CUDA_TRY(launch(convert_f32_kernel<__half>, grid, block, 0, c->stream, (__half *)dst,
                           src, n));
        break;
    case PL_DTYPE_BF16:
        PL_CUDA_TRY(launch(convert_f32_kernel<__nv_bfloat16>, grid, block, 0, c->stream,
                           (__nv_bfloat16 *)dst, src, n));
        break;
    case PL_DTYPE_F32:
        PL_CUDA_TRY(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                    c->stream));
        break;
    default: return pl_fail(PL_ERR_INVALID_ARGUMENT, "convert: dtype %d", (int)dtype);
    }
    return PL_OK;
}

/* The one cuBLAS call: out (n_rows, ld_out) = x (n_rows, d_in) @ w^T (its first d_out
 * columns), x and w both of type t. */
pl_status pl_cuda_gemm_ld(pl_cuda_ctx *c, float *out, const void *x, const void *w,
                          cudaDataType_t t, int n_rows, int d_in, int d_out, int ld_out) {
    const float one = 1.f, zero = 0.f;
    PL_CUBLAS_TRY(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, d_out, n_rows, d_in, &one, w, t,
                               d_in, x, t, d_in, &zero, out, CUDA_R_32F, ld_out,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return PL_OK;
}

