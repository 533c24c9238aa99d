/*
 * kernels/cuda/embed.cu - token embedding gather: out (n_tokens, dim) f32 = table[ids[i]],
 * table (vocab, dim) of f32, f16 or bf16 in device memory.
 *
 * One block per token, threads striding over dim (consecutive threads read consecutive
 * elements of one row: coalesced). ids are trusted to be in range (backend.h).
 */
#include "kernels/cuda/backend_cuda.cuh"
#include "kernels/ref/ref.h"

template <typename T>
static __global__ void __launch_bounds__(256)
embed_kernel(float *__restrict__ out, const int32_t *__restrict__ ids, const T *__restrict__ table,
             int dim) {
    const T *src = table + (size_t)ids[blockIdx.x] * (size_t)dim; /* (dim) */
    float *dst = out + (size_t)blockIdx.x * (size_t)dim;          /* (dim) */
    for (int d = (int)threadIdx.x; d < dim; d += (int)blockDim.x) dst[d] = pl_to_f32(src[d]);
}

pl_status pl_cuda_embed(pl_backend *be, float *out, const int32_t *ids, int n_tokens,
                        const void *table, pl_dtype dtype, int dim) {
    PL_TRY(pl_ref_check_embed(out, ids, n_tokens, table, dtype, dim));
    if (n_tokens == 0) return PL_OK;
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    const dim3 grid((unsigned)n_tokens), block(256);
    switch (dtype) {
    case PL_DTYPE_F16:
        PL_CUDA_TRY(launch(embed_kernel<__half>, grid, block, 0, c->stream, out, ids,
                           (const __half *)table, dim));
        break;
    case PL_DTYPE_BF16:
        PL_CUDA_TRY(launch(embed_kernel<__nv_bfloat16>, grid, block, 0, c->stream, out, ids,
                           (const __nv_bfloat16 *)table, dim));
        break;
    default:
        PL_CUDA_TRY(launch(embed_kernel<float>, grid, block, 0, c->stream, out, ids,
                           (const float *)table, dim));
        break;
    }
    return PL_OK;
}
