/*
 * kernels/cuda/qmatmul.cu - out (n_rows, d_out) f32 = x (n_rows, d_in) f32 @ w^T for w of a
 * block-quantised type (util/quant.h), kept quantised in device memory.
 *
 * Decode (n_rows <= kQRows): a matrix-vector kernel that reads every weight byte once. One
 * warp per output feature; lane l takes the row's pieces l, l + 32, ... (consecutive lanes,
 * consecutive blocks: coalesced), dequantises each to 32 f32 values in registers
 * (quant.cuh) and multiplies them with every x row (f32, 16-byte loads through the cache:
 * x is small and shared by all warps), then the warp sums its lanes. Activations stay f32:
 * the GPU has the arithmetic to spare and the result only differs from ref by rounding.
 * Larger batches: the weights are dequantised to f16 tile by tile into a scratch buffer and
 * multiplied by cuBLAS with x in f16 (pl_cuda_gemm), as f16 weights are.
 */
#include "kernels/cuda/backend_cuda.cuh"
#include "kernels/cuda/quant.cuh"

static constexpr int kQRows = 8;          /* most x rows of the matrix-vector kernel */
static constexpr int kQWarps = 4;         /* output features per block of the kernel */
static constexpr size_t kDeqTile = (size_t)16 << 20; /* f16 elements dequantised per cuBLAS call */

/* VX: x is 16-byte aligned (kernels/backend.h's contract for activations; the host checks and
 * takes scalar loads otherwise). */
template <int T, bool VX>
static __global__ void __launch_bounds__(kQWarps * 32)
qgemv_kernel(float *__restrict__ out, const float *__restrict__ x, const uint8_t *__restrict__ w,
             size_t row_bytes, int n_rows, int d_in, int d_out) {
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    const int o = (int)blockIdx.x * kQWarps + warp;
    if (o >= d_out) return; /* the whole warp */
    const uint8_t *row = w + (size_t)o * row_bytes;
    float acc[kQRows];
    PL_UNROLL
    for (int r = 0; r < kQRows; r++) acc[r] = 0.f;
    const int n_pieces = d_in / 32;
    for (int p = lane; p < n_pieces; p += 32) {
        float v[32];
        pl_q_piece<T>(row, p, v);
        PL_UNROLL
        for (int r = 0; r < kQRows; r++) {
            if (r < n_rows) {
                const float *xp = x + (size_t)r * d_in + 32 * p;
                float s = 0.f;
                PL_UNROLL
                for (int i = 0; i < 8; i++) {
                    float4 xv;
                    if constexpr (VX) {
                        PL_VEC_ALIGNED(xp + 4 * i, 16);
                        xv = reinterpret_cast<const float4 *>(xp)[i];
                    } else {
                        xv = make_float4(xp[4 * i], xp[4 * i + 1], xp[4 * i + 2], xp[4 * i + 3]);
                    }
                    s += v[4 * i] * xv.x + v[4 * i + 1] * xv.y + v[4 * i + 2] * xv.z +
                         v[4 * i + 3] * xv.w;
                }
                acc[r] += s;
            }
        }
    }
    PL_UNROLL
    for (int r = 0; r < kQRows; r++) {
        if (r < n_rows) {
            const float s = pl_warp_sum(acc[r]);
            if (lane == 0) out[(size_t)r * d_out + o] = s;
        }
    }
}

/* dst (rows, d_in) f16 = the rows at w, one thread per piece. */
template <int T>
static __global__ void __launch_bounds__(256)
dequant_f16_kernel(__half *__restrict__ dst, const uint8_t *__restrict__ w, size_t row_bytes,
                   int d_in, size_t n_pieces) {
    const size_t g = (size_t)blockIdx.x * 256 + threadIdx.x;
    if (g >= n_pieces) return;
    const int ppr = d_in / 32;
    const size_t row = g / (size_t)ppr;
    const int p = (int)(g % (size_t)ppr);
    float v[32];
    pl_q_piece<T>(w + row * row_bytes, p, v);
    uint4 *o = reinterpret_cast<uint4 *>(dst + row * (size_t)d_in + 32 * (size_t)p);
    PL_VEC_ALIGNED(o, 16); /* dst: the backend's own scratch (256-byte aligned); d_in % 32 == 0 */
    PL_UNROLL
    for (int i = 0; i < 4; i++) {
        uint32_t h[4];
        PL_UNROLL
        for (int k = 0; k < 4; k++)
            h[k] = (uint32_t)__half_as_ushort(__float2half_rn(v[8 * i + 2 * k])) |
                   (uint32_t)__half_as_ushort(__float2half_rn(v[8 * i + 2 * k + 1])) << 16;
        o[i] = make_uint4(h[0], h[1], h[2], h[3]);
    }
}

/* Rows of one dequantised tile of a (d_out, d_in) matrix. */
static size_t tile_rows_of(int d_in, int d_out) {
    size_t rows = kDeqTile / (size_t)d_in;
    if (rows < 1) rows = 1;
    return rows > (size_t)d_out ? (size_t)d_out : rows;
}

size_t pl_cuda_wdeq_bytes(int d_in, int d_out) {
    return d_in > 0 && d_out > 0 ? tile_rows_of(d_in, d_out) * (size_t)d_in * 2 : 0;
}

pl_status pl_cuda_qmatmul(pl_cuda_ctx *c, float *out, const float *x, const void *w,
                          pl_wtype wt, int n_rows, int d_in, int d_out) {
    PL_TRY(pl_q_check_aligned(w, wt, "matmul"));
    uint64_t rb = 0;
    pl_wtype_bytes(wt, (uint64_t)d_in, &rb); /* checked by the caller: whole blocks */
    const size_t row_bytes = (size_t)rb;
    const uint8_t *wb = (const uint8_t *)w;
    if (n_rows <= kQRows) {
        const dim3 grid((unsigned)((d_out + kQWarps - 1) / kQWarps)), block(kQWarps * 32);
        const bool vx = (uintptr_t)x % 16 == 0;
#define PL_QGEMV(T)                                                                           \
    PL_CUDA_TRY(launch(vx ? qgemv_kernel<T, true> : qgemv_kernel<T, false>, grid, block, 0,     \
                       c->stream, out, x, wb, row_bytes, n_rows, d_in, d_out))
        PL_Q_DISPATCH(wt, PL_QGEMV)
#undef PL_QGEMV
        return PL_OK;
    }
    const size_t nx = (size_t)n_rows * (size_t)d_in;
    PL_TRY(pl_cuda_scratch(&c->act16, &c->act16_bytes, nx * 2, "matmul activations"));
    PL_TRY(pl_cuda_convert_f32(c, c->act16, PL_DTYPE_F16, x, nx));
    const size_t tile_rows = tile_rows_of(d_in, d_out);
    PL_TRY(pl_cuda_scratch(&c->wdeq, &c->wdeq_bytes, pl_cuda_wdeq_bytes(d_in, d_out),
                           "dequantised weights"));
    for (size_t t0 = 0; t0 < (size_t)d_out; t0 += tile_rows) {
        const size_t n = (size_t)d_out - t0 < tile_rows ? (size_t)d_out - t0 : tile_rows;
        const size_t pieces = n * (size_t)(d_in / 32);
        const dim3 grid((unsigned)((pieces + 255) / 256)), block(256);
        const uint8_t *src = wb + t0 * row_bytes;
#define PL_DEQ(T)                                                                             \
    PL_CUDA_TRY(launch(dequant_f16_kernel<T>, grid, block, 0, c->stream, (__half *)c->wdeq,    \
                       src, row_bytes, d_in, pieces))
        PL_Q_DISPATCH(wt, PL_DEQ)
#undef PL_DEQ
        /* out[:, t0 .. t0 + n) = x @ tile^T: in cuBLAS's column-major terms the tile's rows
         * of out^T, leading dimension d_out */
        PL_TRY(pl_cuda_gemm_ld(c, out + t0, c->act16, c->wdeq, CUDA_R_16F, n_rows, d_in, (int)n,
                               d_out));
    }
    return PL_OK;
}
