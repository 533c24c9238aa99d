/*
 * kernels/cuda/embed.cu - token embedding gather: out (n_tokens, dim) f32 = table[ids[i]],
 * table (vocab, dim) of any weight type in device memory.
 *
 * One block per token, threads striding over dim (consecutive threads read consecutive
 * elements of one row: coalesced); quantised rows one 32-element piece per thread, through
 * the same reader as the matrix products (quant.cuh), exact as the reference dequantiser.
 * ids are trusted to be in range (backend.h).
 */
#include "kernels/cuda/backend_cuda.cuh"
#include "kernels/cuda/quant.cuh"
#include "kernels/ref/ref.h"

template <typename T>
static __global__ void __launch_bounds__(256)
embed_kernel(float *__restrict__ out, const int32_t *__restrict__ ids, const T *__restrict__ table,
             int dim) {
    const T *src = table + (size_t)ids[blockIdx.x] * (size_t)dim; /* (dim) */
    float *dst = out + (size_t)blockIdx.x * (size_t)dim;          /* (dim) */
    for (int d = (int)threadIdx.x; d < dim; d += (int)blockDim.x) dst[d] = pl_to_f32(src[d]);
}

/* VO: out is 16-byte aligned (checked by the host; scalar stores otherwise). */
template <int T, bool VO>
static __global__ void __launch_bounds__(256)
embed_q_kernel(float *__restrict__ out, const int32_t *__restrict__ ids,
               const uint8_t *__restrict__ table, size_t row_bytes, int dim) {
    const uint8_t *src = table + (size_t)ids[blockIdx.x] * row_bytes; /* (dim) quantised */
    float *dst = out + (size_t)blockIdx.x * (size_t)dim;             /* (dim) */
    for (int p = (int)threadIdx.x; p < dim / 32; p += (int)blockDim.x) {
        float v[32];
        pl_q_piece<T>(src, p, v);
        float *d = dst + 32 * (size_t)p;
        if constexpr (VO) {
            PL_VEC_ALIGNED(d, 16);
            float4 *o = reinterpret_cast<float4 *>(d);
            PL_UNROLL
            for (int i = 0; i < 8; i++)
                o[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
        } else {
            PL_UNROLL
            for (int i = 0; i < 32; i++) d[i] = v[i];
        }
    }
}

pl_status pl_cuda_embed(pl_backend *be, float *out, const int32_t *ids, int n_tokens,
                        const void *table, pl_wtype type, int dim) {
    PL_TRY(pl_ref_check_embed(out, ids, n_tokens, table, type, dim));
    if (n_tokens == 0) return PL_OK;
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    const dim3 grid((unsigned)n_tokens), block(256);
    if (pl_wtype_is_quant(type)) {
        PL_TRY(pl_q_check_aligned(table, type, "embed"));
        uint64_t rb = 0;
        pl_wtype_bytes(type, (uint64_t)dim, &rb); /* checked: whole blocks */
        const uint8_t *t8 = (const uint8_t *)table;
        const bool vo = (uintptr_t)out % 16 == 0;
#define PL_EMBED_Q(T)                                                                         \
    PL_CUDA_TRY(launch(vo ? embed_q_kernel<T, true> : embed_q_kernel<T, false>, grid, block, 0, \
                       c->stream, out, ids, t8, (size_t)rb, dim))
        PL_Q_DISPATCH(type, PL_EMBED_Q)
#undef PL_EMBED_Q
        return PL_OK;
    }
    switch (type) {
    case PL_WTYPE_F16:
        PL_CUDA_TRY(launch(embed_kernel<__half>, grid, block, 0, c->stream, out, ids,
                           (const __half *)table, dim));
        break;
    case PL_WTYPE_BF16:
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
