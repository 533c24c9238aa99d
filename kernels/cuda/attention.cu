/*
 * kernels/cuda/attention.cu - paged attention: the op's dispatcher, the decode kernel (one
 * query token per sequence), its split-K variant and the kernel that reduces the partitions.
 * Prefill (q_len > 1) lives in prefill_attention.cu.
 *
 * Shapes (kernels/backend.h): q, out (n_tokens, n_heads, head_dim) f32; one layer's k_cache,
 * v_cache (n_blocks, n_kv_heads, block_size, head_dim) of kv_dtype T (f16, bf16 or f32);
 * block_tables (n_seqs, max_blocks_per_seq); query head h reads KV head h / (n_heads /
 * n_kv_heads). Sequence s's query row (decode: q_len 1) is at position p = context_lens[s] - 1
 * and attends to positions lo .. p, lo = 0, or max(0, p - W + 1) with a sliding window W > 0.
 * With a soft-cap c > 0 each score becomes tanh(score / c) * c before the softmax (Gemma 2).
 *
 * Decode kernel: grid (n_heads, n_seqs, n_parts), 128 threads = 4 warps. The block owns one
 * (head, sequence) and the context tokens of partition blockIdx.z (all of them when not split).
 * q is pre-scaled into shared memory. Each warp takes 32 consecutive tokens at a time, one
 * token per lane: the lane finds its token's row through the block table and computes q.k with
 * 16-byte loads (head sizes that are multiples of 8). The warp then updates a running max m,
 * rescales its sum l and accumulator by exp(m_old - m_new) (online softmax), parks the 32
 * probabilities and row offsets in shared memory and accumulates p * V with the lanes split
 * over head_dim (2 or 4 elements per lane per load, coalesced across the warp). At the end the
 * 4 warps' (m, l, acc) are merged through shared memory. All arithmetic is f32.
 * Head sizes 64/80/96/112/128/256 get exact-size instantiations (unrolled, vector loads);
 * every other size up to 512 runs the generic instantiation with a compile-time bound (scalar
 * loads, guarded). Larger heads: PL_ERR_UNSUPPORTED.
 *
 * Split-K: when the context is long and (n_heads * n_seqs) blocks cannot fill the GPU, the
 * attended keys lo .. p are cut into partitions of partition_tokens counted from lo (with a
 * window, the number of keys is min(context, W), which also decides whether to split, and the
 * blocks before the window are never read); each block writes its partition's
 * normalised output with (max, sum), and the reduce kernel combines them with weights
 * sum_i * exp(max_i - max) / sum_j (sum_j * exp(max_j - max)). The choice is made per batch
 * from min(max_context_len, W) (pl_cuda_set_attention_split forces it either way).
 *
 * Mixed batches (max_query_len > 1): the decode kernel takes the sequences with q_len == 1 and
 * the prefill kernel the others; each returns at once for the other's sequences. The kernels
 * trust the batch's device arrays (the host cannot read them): context_lens[s] <=
 * max_context_len and <= max_blocks_per_seq * block_size, block ids in range.
 */
#include <limits.h>
#include <math.h>

#include "kernels/cuda/backend_cuda.cuh"
#include "kernels/ref/ref.h"

static constexpr int kThreads = 128;
static constexpr int kWarps = kThreads / 32;
static constexpr int kMaxHeadDim = 512;
static constexpr int kMaxParts = 65535;       /* split-K partitions: the grid's z limit */
static constexpr int kReduceChunk = 1024;     /* reduce kernel: weights staged per pass */

// ---------------------------------------------------------------------------------------------
// Decode kernel

/* q . k for one cache row of hd elements against q_s (pre-scaled, shared memory). */
template <typename T, int D>
static __device__ __forceinline__ float qk_dot(const T *__restrict__ kr, const float *q_s, int hd) {
    float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
    if constexpr (D > 0 && D % 8 == 0) {
        /* 2 loads of 16 bytes in flight per lane (the warps of an SM supply the rest of the
         * memory parallelism); unrolling 4x, 8x or fully made ptxas spill 8 bytes on sm_80 */
        PL_UNROLL_N(2)
        for (int d = 0; d < D; d += 8) {
            float kf[8];
            pl_load_vec<8>(kr + d, kf);
            PL_VEC_ALIGNED(q_s + d, 16);
            const float4 qa = *reinterpret_cast<const float4 *>(q_s + d);
            const float4 qb = *reinterpret_cast<const float4 *>(q_s + d + 4);
            a0 += kf[0] * qa.x + kf[4] * qb.x;
            a1 += kf[1] * qa.y + kf[5] * qb.y;
            a2 += kf[2] * qa.z + kf[6] * qb.z;
            a3 += kf[3] * qa.w + kf[7] * qb.w;
        }
    } else {
        int d = 0;
        for (; d + 4 <= hd; d += 4) {
            a0 += pl_to_f32(kr[d]) * q_s[d];
            a1 += pl_to_f32(kr[d + 1]) * q_s[d + 1];
            a2 += pl_to_f32(kr[d + 2]) * q_s[d + 2];
            a3 += pl_to_f32(kr[d + 3]) * q_s[d + 3];
        }
        for (; d < hd; d++) a0 += pl_to_f32(kr[d]) * q_s[d];
    }
    return (a0 + a1) + (a2 + a3);
}

/* D > 0: head_dim == D (MAXD == D). D == 0: any head_dim <= MAXD. part_out == NULL: no split,
 * write out directly. Otherwise part_ml (n_seqs, n_heads, n_parts) x (max, sum) and part_out
 * (n_seqs, n_heads, n_parts, head_dim) receive this partition's result. */
template <typename T, int D, int MAXD>
static __global__ void __launch_bounds__(kThreads)
paged_decode_kernel(float *__restrict__ out, float *__restrict__ part_ml,
                    float *__restrict__ part_out, const float *__restrict__ q,
                    const T *__restrict__ k_cache, const T *__restrict__ v_cache,
                    const int32_t *__restrict__ query_start,
                    const int32_t *__restrict__ context_lens,
                    const int32_t *__restrict__ block_tables, int max_blocks_per_seq,
                    int n_heads, int n_kv_heads, int head_dim, int block_size, float scale,
                    int window, float softcap, int part_tokens) {
    constexpr int VD = D == 0 ? 1 : (D % 128 == 0 ? 4 : 2); /* V elements per lane per load */
    constexpr int NV = (MAXD + 32 * VD - 1) / (32 * VD);    /* V loads per lane per token */
    __shared__ __align__(16) float q_s[MAXD];
    __shared__ float p_s[kWarps][32];
    __shared__ size_t row_s[kWarps][32];
    __shared__ float wm_s[kWarps], wl_s[kWarps];
    __shared__ float acc_s[kWarps][MAXD];

    const int hd = D > 0 ? D : head_dim;
    const int head = (int)blockIdx.x, seq = (int)blockIdx.y, part = (int)blockIdx.z;
    const int q_row = query_start[seq];
    if (query_start[seq + 1] - q_row != 1) return; /* a prefill sequence */
    const int ctx = context_lens[seq];
    const int lo = window > 0 && ctx > window ? ctx - window : 0; /* first attended position */
    const int t_begin = lo + part * part_tokens;
    if (part > 0 && t_begin >= ctx) return; /* past this sequence's context */
    const int t_end = ctx - t_begin < part_tokens ? ctx : t_begin + part_tokens;
    const int kvh = head / (n_heads / n_kv_heads);
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;

    const float *qp = q + ((size_t)q_row * n_heads + head) * (size_t)hd; /* (hd) */
    for (int d = tid; d < hd; d += kThreads) q_s[d] = qp[d] * scale;
    __syncthreads();

    const int32_t *table = block_tables + (size_t)seq * max_blocks_per_seq;
    const size_t head_stride = (size_t)block_size * hd;           /* one KV head of a block */
    const size_t block_stride = head_stride * (size_t)n_kv_heads; /* one block */
    const size_t head_off = (size_t)kvh * head_stride;

    float m = -INFINITY, l = 0.f, acc[NV * VD];
    PL_UNROLL
    for (int i = 0; i < NV * VD; i++) acc[i] = 0.f;

    for (int c0 = t_begin + warp * 32; c0 < t_end; c0 += kWarps * 32) {
        const int t = c0 + lane;
        const bool valid = t < t_end;
        float s = -INFINITY;
        size_t row = 0;
        if (valid) {
            const int b = t / block_size;
            row = (size_t)table[b] * block_stride + head_off + (size_t)(t - b * block_size) * hd;
            s = qk_dot<T, D>(k_cache + row, q_s, hd);
            if (softcap > 0.f) s = tanhf(s / softcap) * softcap;
        }
        /* lane 0's token is always valid (c0 < t_end), so m_new is finite */
        const float m_new = fmaxf(m, pl_warp_max(s));
        const float alpha = __expf(m - m_new); /* 0 on the first chunk (m = -inf) */
        const float p = valid ? __expf(s - m_new) : 0.f;
        l = l * alpha + p;
        PL_UNROLL
        for (int i = 0; i < NV * VD; i++) acc[i] *= alpha;
        m = m_new;
        p_s[warp][lane] = p;
        row_s[warp][lane] = row;
        __syncwarp();
        const int n = t_end - c0 < 32 ? t_end - c0 : 32;
        for (int j = 0; j < n; j++) {
            const float pj = p_s[warp][j];
            const T *vr = v_cache + row_s[warp][j];
            PL_UNROLL
            for (int i = 0; i < NV; i++) {
                const int d = (i * 32 + lane) * VD;
                if (d < hd) {
                    float vf[VD];
                    pl_load_vec<VD>(vr + d, vf);
                    PL_UNROLL
                    for (int e = 0; e < VD; e++) acc[i * VD + e] += pj * vf[e];
                }
            }
        }
        __syncwarp(); /* p_s/row_s are rewritten by the next chunk */
    }

    /* merge the warps: weight each by exp(m_w - M) */
    l = pl_warp_sum(l);
    if (lane == 0) {
        wm_s[warp] = m;
        wl_s[warp] = l;
    }
    PL_UNROLL
    for (int i = 0; i < NV; i++) {
        const int d = (i * 32 + lane) * VD;
        if (d < hd) {
            PL_UNROLL
            for (int e = 0; e < VD; e++) acc_s[warp][d + e] = acc[i * VD + e];
        }
    }
    __syncthreads();
    float M = -INFINITY;
    PL_UNROLL
    for (int w = 0; w < kWarps; w++) M = fmaxf(M, wm_s[w]);
    float wgt[kWarps], L = 0.f;
    PL_UNROLL
    for (int w = 0; w < kWarps; w++) {
        wgt[w] = wm_s[w] == -INFINITY ? 0.f : __expf(wm_s[w] - M);
        L += wl_s[w] * wgt[w];
    }
    const float inv_l = L > 0.f ? 1.f / L : 0.f;
    float *dst;
    if (part_out) {
        const size_t idx = ((size_t)seq * n_heads + head) * gridDim.z + part;
        dst = part_out + idx * (size_t)hd;
        if (tid == 0) {
            part_ml[2 * idx] = M;
            part_ml[2 * idx + 1] = L;
        }
    } else {
        dst = out + ((size_t)q_row * n_heads + head) * (size_t)hd;
    }
    for (int d = tid; d < hd; d += kThreads) {
        float o = 0.f;
        PL_UNROLL
        for (int w = 0; w < kWarps; w++) o += acc_s[w][d] * wgt[w];
        dst[d] = o * inv_l;
    }
}

// ---------------------------------------------------------------------------------------------
// Split-K reduce: grid (n_heads, n_seqs). The partitions' weights pass through shared memory
// kReduceChunk at a time, so the kernel's shared memory is fixed (4.1 KiB) whatever the number
// of partitions: staging all of them at once needed n_parts floats of dynamic shared memory,
// past the 48 KiB a launch gets without an opt-in at 12,288 partitions (6.3M tokens of 512).

template <int NPT> /* head_dim elements per thread: pl_cdiv(head_dim, kThreads) <= NPT */
static __global__ void __launch_bounds__(kThreads)
paged_decode_reduce_kernel(float *__restrict__ out, const float *__restrict__ part_ml,
                           const float *__restrict__ part_out,
                           const int32_t *__restrict__ query_start,
                           const int32_t *__restrict__ context_lens, int n_heads, int head_dim,
                           int window, int part_tokens, int n_parts) {
    __shared__ float w_s[kReduceChunk];
    __shared__ float red[32];
    const int head = (int)blockIdx.x, seq = (int)blockIdx.y, tid = (int)threadIdx.x;
    const int q_row = query_start[seq];
    if (query_start[seq + 1] - q_row != 1) return;
    const int ctx = context_lens[seq];
    const int n_keys = window > 0 && ctx > window ? window : ctx; /* as the decode kernel cut them */
    int n_valid = n_keys > 0 ? pl_cdiv(n_keys, part_tokens) : 1;
    if (n_valid > n_parts) n_valid = n_parts;
    const size_t base = ((size_t)seq * n_heads + head) * (size_t)n_parts;

    float mx = -INFINITY;
    for (int p = tid; p < n_valid; p += kThreads) mx = fmaxf(mx, part_ml[2 * (base + p)]);
    mx = pl_block_reduce<true>(mx, red);
    float sum = 0.f;
    for (int p = tid; p < n_valid; p += kThreads) {
        const float mp = part_ml[2 * (base + p)];
        sum += mp == -INFINITY ? 0.f : __expf(mp - mx) * part_ml[2 * (base + p) + 1];
    }
    sum = pl_block_reduce<false>(sum, red);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;

    float o[NPT];
    PL_UNROLL
    for (int k = 0; k < NPT; k++) o[k] = 0.f;
    for (int c0 = 0; c0 < n_valid; c0 += kReduceChunk) { /* the same trip count in every thread */
        const int nc = n_valid - c0 < kReduceChunk ? n_valid - c0 : kReduceChunk;
        for (int i = tid; i < nc; i += kThreads) {
            const float mp = part_ml[2 * (base + c0 + i)];
            w_s[i] = mp == -INFINITY ? 0.f : __expf(mp - mx) * part_ml[2 * (base + c0 + i) + 1];
        }
        __syncthreads();
        for (int i = 0; i < nc; i++) {
            const float w = w_s[i];
            const float *po = part_out + (base + c0 + i) * head_dim; /* (head_dim) */
            PL_UNROLL
            for (int k = 0; k < NPT; k++) { /* o stays in registers: k is unrolled */
                const int d = tid + k * kThreads;
                if (d < head_dim) o[k] += w * po[d];
            }
        }
        __syncthreads(); /* w_s is rewritten by the next chunk */
    }
    float *dst = out + ((size_t)q_row * n_heads + head) * (size_t)head_dim;
    PL_UNROLL
    for (int k = 0; k < NPT; k++) {
        const int d = tid + k * kThreads;
        if (d < head_dim) dst[d] = o[k] * inv;
    }
}

// ---------------------------------------------------------------------------------------------
// Host side

/* Split-K partitions for a decode batch whose queries attend to at most max_keys keys: 1 (no
 * split), the count, or minus the count when forced splitting needs more than kMaxParts. */
static long split_parts(const pl_cuda_ctx *c, int n_seqs, int n_heads, int max_keys) {
    const int pt = c->partition_tokens;
    const long n = ((long)max_keys + pt - 1) / pt;
    if (n <= 1 || c->split_mode == PL_CUDA_SPLIT_NEVER) return 1;
    if (c->split_mode != PL_CUDA_SPLIT_ALWAYS && (long)n_seqs * n_heads >= 4L * c->n_sm) return 1;
    if (n > kMaxParts) return c->split_mode == PL_CUDA_SPLIT_ALWAYS ? -n : 1;
    return n;
}

static size_t part_bytes(int n_seqs, int n_heads, long n_parts, int head_dim) {
    return (size_t)n_seqs * (size_t)n_heads * (size_t)n_parts * (2 + (size_t)head_dim) *
           sizeof(float);
}

size_t pl_cuda_attn_part_bytes(const pl_cuda_ctx *c, int n_seqs, int n_heads, int head_dim,
                               int max_context) {
    /* AUTO splits only batches of fewer than 4 x SMs (head, sequence) blocks */
    int seqs = n_seqs;
    if (c->split_mode == PL_CUDA_SPLIT_AUTO && n_heads > 0) {
        const int fit = (4 * c->n_sm - 1) / n_heads;
        seqs = seqs < fit ? seqs : fit;
    }
    if (seqs < 1) return 0;
    const long n = split_parts(c, seqs, n_heads, max_context);
    return n > 1 ? part_bytes(seqs, n_heads, n, head_dim) : 0;
}

template <typename T> static decltype(&paged_decode_kernel<T, 0, 64>) pick_decode(int hd, bool aligned) {
    if (aligned) {
        switch (hd) {
        case 64: return paged_decode_kernel<T, 64, 64>;
        case 80: return paged_decode_kernel<T, 80, 80>;
        case 96: return paged_decode_kernel<T, 96, 96>;
        case 112: return paged_decode_kernel<T, 112, 112>;
        case 128: return paged_decode_kernel<T, 128, 128>;
        case 256: return paged_decode_kernel<T, 256, 256>;
        default: break;
        }
    }
    if (hd <= 64) return paged_decode_kernel<T, 0, 64>;
    if (hd <= 128) return paged_decode_kernel<T, 0, 128>;
    if (hd <= 256) return paged_decode_kernel<T, 0, 256>;
    return paged_decode_kernel<T, 0, kMaxHeadDim>;
}

template <typename T>
static pl_status launch_decode(pl_cuda_ctx *c, float *out, const float *q, const void *k_cache,
                               const void *v_cache, const pl_attn_batch *b, int part_tokens,
                               int n_parts) {
    const bool aligned = (uintptr_t)k_cache % 16 == 0 && (uintptr_t)v_cache % 16 == 0;
    auto kernel = pick_decode<T>(b->head_dim, aligned);
    float *part_ml = nullptr, *part_out = nullptr;
    if (n_parts > 1) {
        const size_t n = (size_t)b->n_seqs * (size_t)b->n_heads * (size_t)n_parts;
        PL_TRY(pl_cuda_scratch((void **)&c->attn_part, &c->attn_part_bytes,
                               part_bytes(b->n_seqs, b->n_heads, n_parts, b->head_dim),
                               "attention partitions"));
        part_ml = c->attn_part;
        part_out = c->attn_part + 2 * n;
    }
    const dim3 grid((unsigned)b->n_heads, (unsigned)b->n_seqs, (unsigned)n_parts);
    PL_CUDA_TRY(launch(kernel, grid, dim3(kThreads), 0, c->stream, out, part_ml, part_out, q,
                       (const T *)k_cache, (const T *)v_cache, b->query_start, b->context_lens,
                       b->block_tables, b->max_blocks_per_seq, b->n_heads, b->n_kv_heads,
                       b->head_dim, b->block_size, b->scale, b->sliding_window, b->softcap,
                       part_tokens));
    if (n_parts > 1) {
        auto reduce = b->head_dim <= kThreads       ? paged_decode_reduce_kernel<1>
                      : b->head_dim <= 2 * kThreads ? paged_decode_reduce_kernel<2>
                                                    : paged_decode_reduce_kernel<kMaxHeadDim / kThreads>;
        PL_CUDA_TRY(launch(reduce, dim3((unsigned)b->n_heads, (unsigned)b->n_seqs), dim3(kThreads),
                           0, c->stream, out, (const float *)part_ml, (const float *)part_out,
                           b->query_start, b->context_lens, b->n_heads, b->head_dim,
                           b->sliding_window, part_tokens, n_parts));
    }
    return PL_OK;
}

/* What the host can check without reading the batch's device arrays. */
static pl_status check_batch(const pl_backend *be, const float *out, const float *q,
                             const void *k_cache, const void *v_cache, const pl_attn_batch *b) {
    const pl_dtype t = be->kv_dtype;
    if (t != PL_DTYPE_F16 && t != PL_DTYPE_BF16 && t != PL_DTYPE_F32)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "attention: backend kv_dtype %d", (int)t);
    PL_TRY(pl_ref_check_attention_sizes(b));
    if (b->n_seqs == 0) return PL_OK;
    if (!out || !q || !k_cache || !v_cache || !b->query_start || !b->context_lens ||
        !b->block_tables)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "attention: out, q, k_cache, v_cache or a batch array is NULL");
    if (b->max_query_len < 1 || b->max_context_len < b->max_query_len ||
        (long)b->max_context_len > (long)b->max_blocks_per_seq * b->block_size)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "attention: max_query_len %d, max_context_len %d outside [1, "
                       "max_blocks_per_seq %d * block_size %d]",
                       b->max_query_len, b->max_context_len, b->max_blocks_per_seq,
                       b->block_size);
    if (b->head_dim > kMaxHeadDim)
        return pl_fail(PL_ERR_UNSUPPORTED, "attention: head_dim %d above %d", b->head_dim,
                       kMaxHeadDim);
    if (b->n_seqs > 65535 || b->n_heads > 65535)
        return pl_fail(PL_ERR_UNSUPPORTED, "attention: %d sequences x %d heads exceed the grid",
                       b->n_seqs, b->n_heads);
    return PL_OK;
}

pl_status pl_cuda_attention(pl_backend *be, float *out, const float *q, const void *k_cache,
                            const void *v_cache, const pl_attn_batch *b) {
    PL_TRY(check_batch(be, out, q, k_cache, v_cache, b));
    if (b->n_seqs == 0) return PL_OK;
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);

    /* split-K choice, from host-side sizes only: the most keys a query attends to */
    const int max_keys = b->sliding_window > 0 && b->sliding_window < b->max_context_len
                             ? b->sliding_window
                             : b->max_context_len;
    const long n_parts_split = split_parts(c, b->n_seqs, b->n_heads, max_keys);
    if (n_parts_split < 0)
        return pl_fail(PL_ERR_UNSUPPORTED,
                       "attention: %ld split-K partitions (max %d); raise partition_tokens",
                       -n_parts_split, kMaxParts);
    const bool split = n_parts_split > 1;
    const int part_tokens = split ? c->partition_tokens : INT_MAX;
    const int n_parts = split ? (int)n_parts_split : 1;

    pl_status st;
    switch (be->kv_dtype) {
    case PL_DTYPE_F16:
        st = launch_decode<__half>(c, out, q, k_cache, v_cache, b, part_tokens, n_parts);
        break;
    case PL_DTYPE_BF16:
        st = launch_decode<__nv_bfloat16>(c, out, q, k_cache, v_cache, b, part_tokens, n_parts);
        break;
    default: st = launch_decode<float>(c, out, q, k_cache, v_cache, b, part_tokens, n_parts); break;
    }
    if (st != PL_OK) return st;
    if (b->max_query_len > 1)
        return pl_cuda_prefill_attention(c, be->kv_dtype, out, q, k_cache, v_cache, b);
    return PL_OK;
}
