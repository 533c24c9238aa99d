/*
 * kernels/cuda/moe.cu - mixture-of-experts ops on the device: the router's top-k, the grouped
 * expert products and the weighted combination (shapes in kernels/backend.h).
 *
 * moe_route: one warp per token. The lanes take the experts e = lane, lane + 32, ...; the max
 * and the softmax's sum are warp reductions; each of the k picks is a warp arg-max over the
 * experts not yet taken, whose comparison prefers the larger logit and, on a tie, the lower
 * index (NaN below everything), the reference's rule. Probabilities in f32 (ref: double).
 *
 * moe_matmul: no host round trip and no launch per expert, whatever the batch:
 *   1. moe_sort_kernel (one block): a stable counting sort of the slots by expert (thread e
 *      counts and places expert e's slots: no atomics), then a chunk list: each expert's
 *      slots in chunks of up to kRows, as (expert, first position in the order, rows). The
 *      host bounds the chunks by n_slots / kRows + n_experts, which sizes the grid.
 *   2. moe_gemv_kernel<T> per part: grid (output features / kWarps, chunk bound); a block
 *      past the chunk count returns at once. One warp per output feature of the chunk's
 *      expert reads that weight row once (lanes over the row: coalesced; quantised rows in
 *      32-element pieces through quant.cuh, as qmatmul.cu's GEMV) against the chunk's rows of
 *      x, gathered through the order (rounded to f16/bf16 for such weights, as matmul.cu
 *      rounds them before cuBLAS), and writes each slot's output.
 * A decode step of k experts is so one sort plus one launch per part, each expert's weights
 * read once; prefill chunks re-read an expert's rows once per kRows slots (a GEMV, not a
 * tensor-core GEMM: the next step for large batches).
 *
 * moe_combine: one thread per output element sums its token's k weighted slots (and the
 * sigmoid-gated shared expert).
 */
#include <math.h>

#include "kernels/cuda/backend_cuda.cuh"
#include "kernels/cuda/quant.cuh"
#include "kernels/ref/ref.h"

static constexpr int kThreads = 256;
static constexpr int kRows = 8;   /* slots of one expert per chunk */
static constexpr int kWarps = 4;  /* output features per block */
static constexpr int kSortThreads = 256;

// ---------------------------------------------------------------------------------------------
// router

/* (v, i) beats (w, j): larger value, NaN lowest, ties to the lower index. */
static __device__ __forceinline__ bool pick_better(float v, int i, float w, int j) {
    if (j < 0) return i >= 0;
    if (i < 0) return false;
    const bool vn = isnan(v), wn = isnan(w);
    if (vn != wn) return wn;
    if (!vn && v != w) return v > w;
    return i < j;
}

static __global__ void __launch_bounds__(kThreads)
moe_route_kernel(int32_t *__restrict__ ids, float *__restrict__ weights,
                 const float *__restrict__ logits, int n_tokens, int n_experts, int k, int norm) {
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    const int t = (int)blockIdx.x * (kThreads / 32) + warp;
    if (t >= n_tokens) return; /* the whole warp */
    const float *l = logits + (size_t)t * n_experts;
    int32_t *id = ids + (size_t)t * k;
    float *w = weights + (size_t)t * k;
    float mx = -INFINITY;
    for (int e = lane; e < n_experts; e += 32) mx = fmaxf(mx, l[e]);
    mx = pl_warp_max(mx);
    float sum = 0.f;
    for (int e = lane; e < n_experts; e += 32) sum += __expf(l[e] - mx);
    sum = pl_warp_sum(sum);
    float chosen = 0.f;
    for (int j = 0; j < k; j++) {
        float bv = 0.f;
        int bi = -1;
        for (int e = lane; e < n_experts; e += 32) {
            bool taken = false;
            for (int i = 0; i < j; i++) taken |= id[i] == e;
            if (!taken && pick_better(l[e], e, bv, bi)) {
                bv = l[e];
                bi = e;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (pick_better(ov, oi, bv, bi)) {
                bv = ov;
                bi = oi;
            }
        }
        const float p = __expf(bv - mx) / sum;
        chosen += p;
        if (lane == 0) {
            id[j] = bi;
            w[j] = p;
        }
        __syncwarp(); /* id[j] is read by every lane in the next pick */
    }
    if (norm)
        for (int j = lane; j < k; j += 32) w[j] = w[j] / chosen;
}

pl_status pl_cuda_moe_route(pl_backend *be, int32_t *ids, float *weights,
                                       const float *logits, int n_tokens, int n_experts, int k,
                                       bool norm) {
    PL_TRY(pl_ref_check_moe_route(ids, weights, logits, n_tokens, n_experts, k));
    if (n_tokens == 0) return PL_OK;
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    const int per_block = kThreads / 32;
    PL_CUDA_TRY(launch(moe_route_kernel, dim3((unsigned)pl_cdiv(n_tokens, per_block)),
                       dim3(kThreads), 0, c->stream, ids, weights, logits, n_tokens, n_experts,
                       k, norm ? 1 : 0));
    return PL_OK;
}

// ---------------------------------------------------------------------------------------------
// grouping

/* order (n_slots): slots by expert, stable; chunk_e/first/n (max_chunks); *n_chunks. */
static __global__ void __launch_bounds__(kSortThreads)
moe_sort_kernel(int32_t *__restrict__ order, int32_t *__restrict__ start,
                int32_t *__restrict__ chunk_e, int32_t *__restrict__ chunk_first,
                int32_t *__restrict__ chunk_n, int32_t *__restrict__ n_chunks,
                const int32_t *__restrict__ ids, int n_slots, int n_experts) {
    const int tid = (int)threadIdx.x;
    for (int e = tid; e < n_experts; e += kSortThreads) {
        int n = 0;
        for (int s = 0; s < n_slots; s++) n += ids[s] == e;
        start[e + 1] = n;
    }
    __syncthreads();
    if (tid == 0) {
        start[0] = 0;
        int c = 0;
        for (int e = 0; e < n_experts; e++) {
            const int n = start[e + 1];
            start[e + 1] = start[e] + n;
            for (int r = 0; r < n; r += kRows, c++) {
                chunk_e[c] = e;
                chunk_first[c] = start[e] + r;
                chunk_n[c] = n - r < kRows ? n - r : kRows;
            }
        }
        *n_chunks = c;
    }
    __syncthreads();
    for (int e = tid; e < n_experts; e += kSortThreads) {
        int o = start[e];
        for (int s = 0; s < n_slots; s++)
            if (ids[s] == e) order[o++] = s;
    }
}

/* One 32-element piece p of a weight row of type T (a plain float type or a quantised one),
 * as f32 into v; the plain types read elements 32p .. 32p + 31 (rows of d_in, d_in % 32 may
 * be nonzero: the tail piece is zero-padded). */
template <int T>
static __device__ __forceinline__ void row_piece(const uint8_t *__restrict__ row, int p, int d_in,
                                                 float v[32]) {
    if constexpr (T == PL_WTYPE_F32 || T == PL_WTYPE_F16 || T == PL_WTYPE_BF16) {
        PL_UNROLL
        for (int i = 0; i < 32; i++) {
            const int c = 32 * p + i;
            if (c >= d_in) {
                v[i] = 0.f;
            } else if constexpr (T == PL_WTYPE_F32) {
                v[i] = reinterpret_cast<const float *>(row)[c];
            } else if constexpr (T == PL_WTYPE_F16) {
                v[i] = pl_to_f32(reinterpret_cast<const __half *>(row)[c]);
            } else {
                v[i] = pl_to_f32(reinterpret_cast<const __nv_bfloat16 *>(row)[c]);
            }
        }
    } else {
        pl_q_piece<T>(row, p, v);
    }
}

/* x as the product sees it: rounded to the weights' type for f16/bf16 weights (as matmul.cu
 * converts activations before cuBLAS), f32 for f32 and the quantised types (as qmatmul.cu). */
template <int T> static __device__ __forceinline__ float act(float x) {
    if constexpr (T == PL_WTYPE_F16) return __half2float(__float2half_rn(x));
    else if constexpr (T == PL_WTYPE_BF16) return __bfloat162float(__float2bfloat16_rn(x));
    else return x;
}

template <int T>
static __global__ void __launch_bounds__(kWarps * 32)
moe_gemv_kernel(float *__restrict__ out, const float *__restrict__ x, int x_div,
                const uint8_t *__restrict__ w, size_t row_bytes, int d_in, int d_out,
                const int32_t *__restrict__ order, const int32_t *__restrict__ chunk_e,
                const int32_t *__restrict__ chunk_first, const int32_t *__restrict__ chunk_n,
                const int32_t *__restrict__ n_chunks) {
    const int chunk = (int)blockIdx.y;
    if (chunk >= *n_chunks) return;
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    const int o = (int)blockIdx.x * kWarps + warp;
    if (o >= d_out) return; /* the whole warp */
    const int e = chunk_e[chunk], first = chunk_first[chunk], n = chunk_n[chunk];
    const uint8_t *row = w + ((size_t)e * d_out + o) * row_bytes;
    /* x's row of each slot as an index (32 bits, not a pointer each: with the dequantised
     * piece and the sums that is what fits in registers) */
    int xrow[kRows];
    PL_UNROLL
    for (int r = 0; r < kRows; r++) xrow[r] = order[first + (r < n ? r : 0)] / x_div;
    float acc[kRows];
    PL_UNROLL
    for (int r = 0; r < kRows; r++) acc[r] = 0.f;
    const int n_pieces = (d_in + 31) / 32;
    for (int p = lane; p < n_pieces; p += 32) {
        float v[32];
        row_piece<T>(row, p, d_in, v);
        const int len = d_in - 32 * p < 32 ? d_in - 32 * p : 32;
        PL_UNROLL
        for (int r = 0; r < kRows; r++) {
            if (r < n) {
                const float *xp = x + (size_t)xrow[r] * d_in + 32 * p;
                float s = 0.f;
                PL_UNROLL /* whole: v stays in registers (a run-time bound would index it) */
                for (int i = 0; i < 32; i++) s += i < len ? v[i] * act<T>(xp[i]) : 0.f;
                acc[r] += s;
            }
        }
    }
    PL_UNROLL
    for (int r = 0; r < kRows; r++) {
        if (r < n) {
            const float s = pl_warp_sum(acc[r]);
            if (lane == 0) out[(size_t)order[first + r] * d_out + o] = s;
        }
    }
}

pl_status pl_cuda_moe_matmul(pl_backend *be, const pl_matmul_part *parts,
                                        int n_parts, const float *x, int x_div,
                                        const int32_t *ids, int n_slots, int n_experts,
                                        int d_in) {
    PL_TRY(pl_ref_check_moe_matmul(parts, n_parts, x, x_div, ids, n_slots, n_experts, d_in));
    if (n_slots == 0) return PL_OK;
    for (int i = 0; i < n_parts; i++)
        if (!(pl_wtype_traits_of(parts[i].w_type)->backends & PL_WTYPE_ON_CUDA))
            return pl_fail(PL_ERR_UNSUPPORTED, "moe_matmul: weight type %s",
                           pl_wtype_name(parts[i].w_type));
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    const int max_chunks = n_slots / kRows + n_experts + 1;
    const size_t ints = (size_t)n_slots + (size_t)n_experts + 1 + 3 * (size_t)max_chunks + 1;
    PL_TRY(pl_cuda_scratch(&c->moe, &c->moe_bytes, ints * sizeof(int32_t), "expert grouping"));
    int32_t *order = (int32_t *)c->moe, *start = order + n_slots;
    int32_t *chunk_e = start + n_experts + 1, *chunk_first = chunk_e + max_chunks;
    int32_t *chunk_n = chunk_first + max_chunks, *n_chunks = chunk_n + max_chunks;
    PL_CUDA_TRY(launch(moe_sort_kernel, dim3(1), dim3(kSortThreads), 0, c->stream, order, start,
                       chunk_e, chunk_first, chunk_n, n_chunks, ids, n_slots, n_experts));
    for (int i = 0; i < n_parts; i++) {
        const pl_matmul_part *p = &parts[i];
        uint64_t rb = 0;
        pl_wtype_bytes(p->w_type, (uint64_t)d_in, &rb);
        const dim3 grid((unsigned)pl_cdiv(p->d_out, kWarps), (unsigned)max_chunks);
        const uint8_t *w = (const uint8_t *)p->w;
#define PL_MOE_GEMV(T)                                                                        \
    PL_CUDA_TRY(launch(moe_gemv_kernel<T>, grid, dim3(kWarps * 32), 0, c->stream, p->out, x,  \
                       x_div, w, (size_t)rb, d_in, p->d_out, (const int32_t *)order,          \
                       (const int32_t *)chunk_e, (const int32_t *)chunk_first,                \
                       (const int32_t *)chunk_n, (const int32_t *)n_chunks))
        switch (p->w_type) {
        case PL_WTYPE_F32: PL_MOE_GEMV(PL_WTYPE_F32); break;
        case PL_WTYPE_F16: PL_MOE_GEMV(PL_WTYPE_F16); break;
        case PL_WTYPE_BF16: PL_MOE_GEMV(PL_WTYPE_BF16); break;
        default: PL_Q_DISPATCH(p->w_type, PL_MOE_GEMV)
        }
#undef PL_MOE_GEMV
    }
    return PL_OK;
}

// ---------------------------------------------------------------------------------------------
// combination

static __global__ void __launch_bounds__(kThreads)
moe_combine_kernel(float *__restrict__ out, const float *__restrict__ y,
                   const float *__restrict__ weights, int n_tokens, int k, int dim,
                   const float *__restrict__ shared, const float *__restrict__ shared_gate) {
    const size_t n = (size_t)n_tokens * dim, stride = (size_t)gridDim.x * kThreads;
    for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
        const size_t t = i / (size_t)dim, d = i - t * (size_t)dim;
        float acc = shared ? shared[i] / (1.f + __expf(-shared_gate[t])) : 0.f;
        for (int j = 0; j < k; j++)
            acc += weights[t * k + j] * y[(t * k + j) * (size_t)dim + d];
        out[i] = acc;
    }
}

pl_status pl_cuda_moe_combine(pl_backend *be, float *out, const float *y,
                                         const float *weights, int n_tokens, int k, int dim,
                                         const float *shared, const float *shared_gate) {
    PL_TRY(pl_ref_check_moe_combine(out, y, weights, n_tokens, k, dim, shared, shared_gate));
    if (n_tokens == 0) return PL_OK;
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    const size_t n = (size_t)n_tokens * dim;
    const size_t want = (n + kThreads - 1) / kThreads, cap = (size_t)c->n_sm * 32;
    PL_CUDA_TRY(launch(moe_combine_kernel, dim3((unsigned)(want < cap ? want : cap)),
                       dim3(kThreads), 0, c->stream, out, y, weights, n_tokens, k, dim, shared,
                       shared_gate));
    return PL_OK;
}
