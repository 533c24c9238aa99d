/*
 * kernels/cuda/prefill_attention.cu - causal attention for the prefill chunks of a flattened
 * batch (sequences with q_len > 1), reading all keys and values, earlier context included,
 * through the block tables. Called by pl_cuda_attention (attention.cu) after the decode kernel.
 *
 * Shapes as in attention.cu. Sequence s's query rows are query_start[s] .. +q_len-1; row j is at
 * position p = context_lens[s] - q_len + j and sees keys 0 .. p, so chunked prefill and
 * prefix-cache hits (context already in the cache) need nothing special. With a sliding window
 * W > 0 it sees keys max(0, p - W + 1) .. p: a block's key walk starts at its first row's first
 * key (the tiles before are never gathered) and each row masks the keys below its own.
 *
 * Grid (ceil(max_query_len / BQ), n_heads, n_seqs), 128 threads = 4 warps. A block takes BQ
 * query rows of one head: Q is loaded pre-scaled into shared memory, then the keys are walked
 * in tiles of BK = 32 (only up to the tile's last row's position: causal tiles past it are
 * skipped). Per tile: K rows are gathered from the paged cache into shared memory as f32
 * (row stride head_dim|1, odd, so lane j reading row j hits distinct banks); each warp owns
 * RPW query rows and each lane one key, so a row's 32 scores sit in one warp and the online
 * softmax (running max m, sum l, rescale by exp(m_old - m_new)) needs only shuffles; the
 * probabilities go to shared memory, V overwrites K, and each lane accumulates p * V for its
 * head_dim slice (d = lane + 32 k) in registers. Accumulation is f32 throughout.
 *
 * RPW (rows per warp) shrinks as the head grows so the accumulator stays at 32 registers:
 * MAXD 64/128 -> 8 rows (BQ 32), 256 -> 4 (BQ 16), 512 -> 2 (BQ 8). Shared memory is
 * (BQ * hd + BK * (hd|1) + BQ * BK) floats: 37 KiB at head_dim 128, 51 KiB at 256 (opt-in).
 *
 * Not done (see docs/kernels.md): tensor cores (mma), sharing one K/V tile between the query
 * heads of a GQA group, splitting very long single prompts over more blocks.
 */
#include "kernels/cuda/backend_cuda.cuh"

static constexpr int kThreads = 128;
static constexpr int kBK = 32;

template <int MAXD> struct prefill_shape {
    static constexpr int RPW = MAXD <= 128 ? 8 : (MAXD <= 256 ? 4 : 2);
    static constexpr int BQ = (kThreads / 32) * RPW;
};

/* dst (nk, ld) f32 = cache rows of tokens k0 .. k0+nk-1 of one KV head. */
template <typename T>
static __device__ __forceinline__ void gather_rows(float *dst, int ld, const T *__restrict__ cache,
                                                   const int32_t *__restrict__ table, int k0,
                                                   int nk, int hd, int block_size,
                                                   size_t block_stride, size_t head_off) {
    for (int e = (int)threadIdx.x; e < nk * hd; e += kThreads) {
        const int j = e / hd, d = e - j * hd, t = k0 + j, b = t / block_size;
        dst[j * ld + d] = pl_to_f32(cache[(size_t)table[b] * block_stride + head_off +
                                          (size_t)(t - b * block_size) * hd + d]);
    }
}

template <typename T, int MAXD>
static __global__ void __launch_bounds__(kThreads)
paged_prefill_kernel(float *__restrict__ out, const float *__restrict__ q,
                     const T *__restrict__ k_cache, const T *__restrict__ v_cache,
                     const int32_t *__restrict__ query_start,
                     const int32_t *__restrict__ context_lens,
                     const int32_t *__restrict__ block_tables, int max_blocks_per_seq,
                     int n_heads, int n_kv_heads, int hd, int block_size, float scale,
                     int window, float softcap) {
    constexpr int RPW = prefill_shape<MAXD>::RPW, BQ = prefill_shape<MAXD>::BQ;
    constexpr int ND = MAXD / 32; /* head_dim elements per lane */
    const int head = (int)blockIdx.y, seq = (int)blockIdx.z;
    const int qs = query_start[seq], q_len = query_start[seq + 1] - qs;
    if (q_len <= 1) return; /* decode rows belong to the decode kernel */
    const int q0 = (int)blockIdx.x * BQ;
    if (q0 >= q_len) return;
    const int nq = q_len - q0 < BQ ? q_len - q0 : BQ;
    const int pos0 = context_lens[seq] - q_len + q0; /* position of this tile's row 0 */
    const int n_keys = pos0 + nq;                    /* keys k_begin .. pos0 + nq - 1 */
    const int k_begin = window > 0 && pos0 >= window ? pos0 - window + 1 : 0;
    const int kvh = head / (n_heads / n_kv_heads);
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int ld = hd | 1;

    DYNAMIC_SMEM(float, smem);
    float *q_s = smem;             /* (BQ, hd) pre-scaled queries */
    float *kv_s = q_s + BQ * hd;   /* (BK, ld) K, then V, of one tile */
    float *p_s = kv_s + kBK * ld;  /* (BQ, BK) probabilities */

    for (int e = tid; e < BQ * hd; e += kThreads) {
        const int r = e / hd, d = e - r * hd;
        q_s[e] = r < nq ? q[((size_t)(qs + q0 + r) * n_heads + head) * (size_t)hd + d] * scale : 0.f;
    }

    const int32_t *table = block_tables + (size_t)seq * max_blocks_per_seq;
    const size_t head_stride = (size_t)block_size * hd;
    const size_t block_stride = head_stride * (size_t)n_kv_heads;
    const size_t head_off = (size_t)kvh * head_stride;

    float m[RPW], l[RPW], acc[RPW][ND];
    PL_UNROLL
    for (int i = 0; i < RPW; i++) {
        m[i] = -INFINITY;
        l[i] = 0.f;
        PL_UNROLL
        for (int k = 0; k < ND; k++) acc[i][k] = 0.f;
    }

    for (int k0 = k_begin; k0 < n_keys; k0 += kBK) {
        const int nk = n_keys - k0 < kBK ? n_keys - k0 : kBK;
        __syncthreads(); /* q_s written (first tile); kv_s free (later tiles) */
        gather_rows(kv_s, ld, k_cache, table, k0, nk, hd, block_size, block_stride, head_off);
        __syncthreads();
        PL_UNROLL
        for (int i = 0; i < RPW; i++) {
            const int r = warp * RPW + i;
            float s = -INFINITY;
            const int t = k0 + lane, pos = pos0 + r; /* key, row position */
            if (r < nq && lane < nk && t <= pos && (window <= 0 || t > pos - window)) {
                const float *qr = q_s + r * hd, *kr = kv_s + lane * ld;
                float a0 = 0.f, a1 = 0.f;
                int d = 0;
                for (; d + 2 <= hd; d += 2) {
                    a0 += qr[d] * kr[d];
                    a1 += qr[d + 1] * kr[d + 1];
                }
                if (d < hd) a0 += qr[d] * kr[d];
                s = a0 + a1;
                if (softcap > 0.f) s = tanhf(s / softcap) * softcap;
            }
            const float m_new = fmaxf(m[i], pl_warp_max(s));
            /* a row with no visible key yet (padding rows r >= nq; with a window, rows whose
             * window starts past this tile) keeps m = -inf */
            const float alpha = m_new == -INFINITY ? 1.f : __expf(m[i] - m_new);
            const float p = s == -INFINITY ? 0.f : __expf(s - m_new);
            l[i] = l[i] * alpha + pl_warp_sum(p);
            m[i] = m_new;
            PL_UNROLL
            for (int k = 0; k < ND; k++) acc[i][k] *= alpha;
            p_s[r * kBK + lane] = p;
        }
        __syncthreads(); /* every warp is done with K */
        gather_rows(kv_s, ld, v_cache, table, k0, nk, hd, block_size, block_stride, head_off);
        __syncthreads();
        PL_UNROLL
        for (int i = 0; i < RPW; i++) {
            const int r = warp * RPW + i;
            if (r >= nq) continue;
            for (int j = 0; j < nk; j++) {
                const float p = p_s[r * kBK + j];
                const float *vr = kv_s + j * ld;
                PL_UNROLL
                for (int k = 0; k < ND; k++) {
                    const int d = lane + 32 * k;
                    if (d < hd) acc[i][k] += p * vr[d];
                }
            }
        }
    }
    PL_UNROLL
    for (int i = 0; i < RPW; i++) {
        const int r = warp * RPW + i;
        if (r >= nq) continue;
        const float inv = 1.f / l[i]; /* key 0 is visible to every row: l > 0 */
        float *o = out + ((size_t)(qs + q0 + r) * n_heads + head) * (size_t)hd;
        PL_UNROLL
        for (int k = 0; k < ND; k++) {
            const int d = lane + 32 * k;
            if (d < hd) o[d] = acc[i][k] * inv;
        }
    }
}

template <typename T, int MAXD>
static pl_status launch_prefill(pl_cuda_ctx *c, float *out, const float *q, const void *k_cache,
                                const void *v_cache, const pl_attn_batch *b) {
    constexpr int BQ = prefill_shape<MAXD>::BQ;
    const int hd = b->head_dim;
    const size_t smem = ((size_t)BQ * hd + (size_t)kBK * (hd | 1) + (size_t)BQ * kBK) * sizeof(float);
    if (smem > (size_t)c->smem_optin)
        return pl_fail(PL_ERR_UNSUPPORTED,
                       "attention: prefill with head_dim %d needs %zu bytes of shared memory, "
                       "the device allows %d",
                       hd, smem, c->smem_optin);
    auto kernel = paged_prefill_kernel<T, MAXD>;
    if (smem > 48 * 1024)
        PL_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem));
    const dim3 grid((unsigned)pl_cdiv(b->max_query_len, BQ), (unsigned)b->n_heads,
                    (unsigned)b->n_seqs);
    PL_CUDA_TRY(launch(kernel, grid, dim3(kThreads), smem, c->stream, out, q, (const T *)k_cache,
                       (const T *)v_cache, b->query_start, b->context_lens, b->block_tables,
                       b->max_blocks_per_seq, b->n_heads, b->n_kv_heads, hd, b->block_size,
                       b->scale, b->sliding_window, b->softcap));
    return PL_OK;
}

template <typename T>
static pl_status prefill_for_type(pl_cuda_ctx *c, float *out, const float *q, const void *k_cache,
                                  const void *v_cache, const pl_attn_batch *b) {
    const int hd = b->head_dim;
    if (hd <= 64) return launch_prefill<T, 64>(c, out, q, k_cache, v_cache, b);
    if (hd <= 128) return launch_prefill<T, 128>(c, out, q, k_cache, v_cache, b);
    if (hd <= 256) return launch_prefill<T, 256>(c, out, q, k_cache, v_cache, b);
    return launch_prefill<T, 512>(c, out, q, k_cache, v_cache, b);
}

pl_status pl_cuda_prefill_attention(pl_cuda_ctx *c, pl_dtype kv_dtype, float *out,
                                    const float *q, const void *k_cache, const void *v_cache,
                                    const pl_attn_batch *b) {
    switch (kv_dtype) {
    case PL_DTYPE_F16: return prefill_for_type<__half>(c, out, q, k_cache, v_cache, b);
    case PL_DTYPE_BF16: return prefill_for_type<__nv_bfloat16>(c, out, q, k_cache, v_cache, b);
    default: return prefill_for_type<float>(c, out, q, k_cache, v_cache, b);
    }
}
