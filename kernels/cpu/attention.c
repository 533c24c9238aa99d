/*
 * kernels/cpu/attention.c - paged causal attention with grouped-query heads, reading K/V
 * straight from the cache blocks.
 *
 * Shapes as in backend.h: q, out (n_tokens, n_heads, head_dim) f32; one layer's caches
 * (n_blocks, n_kv_heads, block_size, head_dim) of kv_dtype (f32 or f16).
 *
 * Work units. A unit is (sequence s, KV head kh, a tile of up to TQ of s's query rows); it
 * computes every query head of kh's group (G = n_heads / n_kv_heads) for those rows, so the
 * M = rows x G query vectors share each K/V row read: with GQA the cache is read once per KV
 * head, not once per query head. Decode rows give n_seqs x n_kv_heads units; a prefill chunk
 * gives more (its rows are tiled). Units run on the pool, claimed dynamically, so a long
 * context does not hold up the others more than its own cost.
 *
 * Inside a unit, keys are visited in tiles of KEY_TILE positions. A tile's K/V row pointers
 * are resolved once through the block table, block by block (positions t -> block
 * table[t / block_size], offset t % block_size; a row is head_dim contiguous elements), then
 * for each query vector: scores (AVX2: 8 keys at a time for one query vector, 4 for two;
 * AVX-512: 4), online softmax (running max m and sum l,
 * the accumulator rescaled by exp(m_old - m_new)), and the V accumulation o = o * c + sum p V.
 * Causality: query row j at position p attends to t <= p, so each row stops at its own limit
 * within a tile; rows of a prefill chunk also see all earlier context.
 *
 * Sliding window W: row j also starts at its own first position lo_j = max(0, p - W + 1) (the
 * kernels get the tile's pointer arrays from that key on), and the unit's tiles start at its
 * first row's lo, so K/V blocks wholly before the window are never resolved nor read: a decode
 * reads W keys whatever the context. Without a window (or W >= the context) every lo is 0 and
 * the tiles, calls and sums are those of the plain causal path, bit for bit.
 *
 * Soft-capping (Gemma 2): a tile's scores are capped, tanh(s / c) * c, before the softmax.
 *
 * Query vectors go through the kernels in groups (up to 4 with AVX-512: the heads of a row
 * and, in a prefill chunk, the next rows; AVX2: two heads of a row), so each K and V row
 * loaded serves all of them: a chunk's rows see different numbers of keys, and the keys
 * beyond those all of a group see go through alone, so each row's bits are the same whatever
 * the chunk or batch it comes in (attend_group).
 *
 * Scratch per thread (floats): O (M, head_dim), m (M), l (M), scores (4 x KEY_TILE), K and V
 * row pointers (2 x KEY_TILE). No allocation once reserved.
 */
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"
#include "util/dtype.h"

#define KEY_TILE 128     /* keys per online-softmax step */
#define MAX_UNIT_VECS 32 /* query vectors (rows x group heads) per unit, unless G is larger */

/* Kernel set for one ISA and KV dtype. Each takes nq (1 or 2) query vectors at once, so with
 * grouped-query heads two heads of a group share every K and V row load. */
typedef struct attn_fns {
    /* s[e] (n) = scale * q[e] . K(kp[t]), mx[e] = max over s[e], e < nq. q[e] (hd); kp[t] -> a
     * K row of kv dtype. */
    void (*scores)(float *const *s, const float *const *q, int nq, const void *const *kp, int n,
                   int hd, float scale, float *mx);
    /* s (n) = exp(s - mx); returns the sum. */
    float (*exp_sum)(float *s, int n, float mx);
    /* o[e] (hd) = o[e] * c[e] + sum_t p[e][t] * V(vp[t]), e < nq. */
    void (*pv)(float *const *o, const float *c, const float *const *p, int nq,
               const void *const *vp, int n, int hd);
    int max_nq;    /* query vectors per call: up to 4 where the registers hold them */
    /* Keys the scores kernel reduces together (4 for AVX-512): a key's score has the same bits
     * in any call where it falls inside such a group, so vectors of different rows (different
     * key counts) share calls up to their common multiple of it, the rest going alone. 0: a
     * score's bits depend on nq (AVX2 takes keys 8 at a time alone, 4 in pairs), so only the
     * heads of one row share calls, as a fixed grouping. */
    int key_block;
} attn_fns;

/* The exported kernels of one ISA and dtype: 1 or 2 query vectors, constant in the body. */
#define ATTN_WRAPPERS(ISA, TARGET, T, DT)                                                     \
    static TARGET void scores_##ISA##_##T(float *const *s, const float *const *q, int nq,     \
                                          const void *const *kp, int n, int hd, float scale,  \
                                          float *mx) {                                        \
        if (nq == 2)                                                                          \
            scores_##ISA(s, q, kp, n, hd, scale, mx, 2, DT);                                  \
        else                                                                                  \
            scores_##ISA(s, q, kp, n, hd, scale, mx, 1, DT);                                  \
    }                                                                                         \
    static TARGET void pv_##ISA##_##T(float *const *o, const float *c, const float *const *p, \
                                      int nq, const void *const *vp, int n, int hd) {         \
        if (nq == 2)                                                                          \
            pv_##ISA(o, c, p, vp, n, hd, 2, DT);                                              \
        else                                                                                  \
            pv_##ISA(o, c, p, vp, n, hd, 1, DT);                                              \
    }

/* The same for 1 to 4 query vectors. */
#define ATTN_WRAPPERS4(ISA, TARGET, T, DT)                                                    \
    static TARGET void scores_##ISA##_##T(float *const *s, const float *const *q, int nq,     \
                                          const void *const *kp, int n, int hd, float scale,  \
                                          float *mx) {                                        \
        switch (nq) {                                                                         \
        case 4: scores_##ISA(s, q, kp, n, hd, scale, mx, 4, DT); break;                       \
        case 3: scores_##ISA(s, q, kp, n, hd, scale, mx, 3, DT); break;                       \
        case 2: scores_##ISA(s, q, kp, n, hd, scale, mx, 2, DT); break;                       \
        default: scores_##ISA(s, q, kp, n, hd, scale, mx, 1, DT);                             \
        }                                                                                     \
    }                                                                                         \
    static TARGET void pv_##ISA##_##T(float *const *o, const float *c, const float *const *p, \
                                      int nq, const void *const *vp, int n, int hd) {         \
        switch (nq) {                                                                         \
        case 4: pv_##ISA(o, c, p, vp, n, hd, 4, DT); break;                                   \
        case 3: pv_##ISA(o, c, p, vp, n, hd, 3, DT); break;                                   \
        case 2: pv_##ISA(o, c, p, vp, n, hd, 2, DT); break;                                   \
        default: pv_##ISA(o, c, p, vp, n, hd, 1, DT);                                         \
        }                                                                                     \
    }

// ---------------------------------------------------------------------------------------------
// scalar kernels

static float load_kv(const void *p, pl_dtype t, int i) {
    return t == PL_DTYPE_F16 ? pl_f16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static inline void scores_scalar(float *const *s, const float *const *q, const void *const *kp,
                                 int n, int hd, float scale, float *mx, const int nq,
                                 const pl_dtype t) {
    for (int e = 0; e < nq; e++) {
        mx[e] = -INFINITY;
        for (int k = 0; k < n; k++) {
            float acc = 0;
            for (int i = 0; i < hd; i++) acc += q[e][i] * load_kv(kp[k], t, i);
            s[e][k] = acc * scale;
            mx[e] = s[e][k] > mx[e] ? s[e][k] : mx[e];
        }
    }
}

static float exp_sum_scalar(float *s, int n, float mx) {
    float sum = 0;
    for (int k = 0; k < n; k++) {
        s[k] = expf(s[k] - mx);
        sum += s[k];
    }
    return sum;
}

static inline void pv_scalar(float *const *o, const float *c, const float *const *p,
                             const void *const *vp, int n, int hd, const int nq,
                             const pl_dtype t) {
    for (int e = 0; e < nq; e++) {
        for (int i = 0; i < hd; i++) o[e][i] *= c[e];
        for (int k = 0; k < n; k++)
            for (int i = 0; i < hd; i++) o[e][i] += p[e][k] * load_kv(vp[k], t, i);
    }
}
ATTN_WRAPPERS4(scalar, , f32, PL_DTYPE_F32)
ATTN_WRAPPERS4(scalar, , f16, PL_DTYPE_F16)

#ifdef PL_CPU_X86
/* The SIMD scores and pv prefetch the K (V) row PF_KEYS keys ahead of the one they read: one
 * block of 16. A block's rows of one head are 2-4 KB, and the same head's next block lies
 * elsewhere, where the hardware prefetchers, which stop at 4 KB pages, start over (the tile
 * start only touches each block's first lines). bench_kernels --only attention, decode,
 * medians of 5 alternating runs, GB/s of KV: f32 32 x 256 positions 27.0 -> 31.3, 64 x 512
 * 23.3 -> 23.8; f16 26.0 -> 27.5, 17.5 -> 18.3 (32 keys ahead: 32.8, 23.9, 25.3, 18.4). */
#define PF_KEYS 16

/* Every line of a K or V row (bytes long) into L1. */
PL_INLINE void prefetch_row(const void *row, size_t bytes) {
    for (size_t b = 0; b < bytes; b += 64) _mm_prefetch((const char *)row + b, _MM_HINT_T0);
}

// ---------------------------------------------------------------------------------------------
// AVX-512 kernels: 4 keys at a time (q loaded once per 4 keys), NQ (up to 4) query vectors per
// K or V load: 16 accumulators at most

PL_INLINE PL_TARGET_AVX512 void scores_avx512(float *const *s, const float *const *q,
                                              const void *const *kp, int n, int hd,
                                              float scale, float *mx, const int NQ,
                                              const pl_dtype t) {
    const __mmask16 tm = pl_avx512_mask(hd & 15);
    const int full = hd & ~15;
    const __m128 sc = _mm_set1_ps(scale);
    const size_t row_bytes = (size_t)hd * pl_dtype_size(t);
    __m128 mx4[4];
    for (int e = 0; e < NQ; e++) mx4[e] = _mm_set1_ps(-INFINITY);
    int k = 0;
    for (; k + 4 <= n; k += 4) {
        if (k + PF_KEYS + 4 <= n)
            for (int r = 0; r < 4; r++) prefetch_row(kp[k + PF_KEYS + r], row_bytes);
        __m512 a[4][4], kv[4];
        for (int e = 0; e < NQ; e++)
            for (int r = 0; r < 4; r++) a[e][r] = _mm512_setzero_ps();
        int i = 0;
        for (; i < full; i += 16) {
            for (int r = 0; r < 4; r++) kv[r] = pl_avx512_load(kp[k + r], t, (size_t)i);
            for (int e = 0; e < NQ; e++) {
                __m512 qv = _mm512_loadu_ps(q[e] + i);
                for (int r = 0; r < 4; r++) a[e][r] = _mm512_fmadd_ps(qv, kv[r], a[e][r]);
            }
        }
        if (tm) {
            for (int r = 0; r < 4; r++) kv[r] = pl_avx512_load_mask(kp[k + r], t, (size_t)i, tm);
            for (int e = 0; e < NQ; e++) {
                __m512 qv = _mm512_maskz_loadu_ps(tm, q[e] + i);
                for (int r = 0; r < 4; r++) a[e][r] = _mm512_fmadd_ps(qv, kv[r], a[e][r]);
            }
        }
        for (int e = 0; e < NQ; e++) {
            __m128 v = _mm_mul_ps(pl_avx512_hsum4(a[e][0], a[e][1], a[e][2], a[e][3]), sc);
            _mm_storeu_ps(s[e] + k, v);
            mx4[e] = _mm_max_ps(mx4[e], v);
        }
    }
    for (int e = 0; e < NQ; e++) {
        __m128 m = _mm_max_ps(mx4[e], _mm_movehl_ps(mx4[e], mx4[e]));
        mx[e] = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    }
    for (; k < n; k++) {
        __m512 a[4];
        for (int e = 0; e < NQ; e++) a[e] = _mm512_setzero_ps();
        int i = 0;
        for (; i < full; i += 16) {
            __m512 kv = pl_avx512_load(kp[k], t, (size_t)i);
            for (int e = 0; e < NQ; e++) a[e] = _mm512_fmadd_ps(_mm512_loadu_ps(q[e] + i), kv, a[e]);
        }
        if (tm) {
            __m512 kv = pl_avx512_load_mask(kp[k], t, (size_t)i, tm);
            for (int e = 0; e < NQ; e++)
                a[e] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tm, q[e] + i), kv, a[e]);
        }
        for (int e = 0; e < NQ; e++) {
            s[e][k] = _mm512_reduce_add_ps(a[e]) * scale;
            mx[e] = s[e][k] > mx[e] ? s[e][k] : mx[e];
        }
    }
}

static PL_TARGET_AVX512 float exp_sum_avx512(float *s, int n, float mx) {
    __m512 sum = _mm512_setzero_ps(), m = _mm512_set1_ps(mx);
    for (int k = 0; k < n; k += 16) {
        __mmask16 mk = pl_avx512_mask(n - k < 16 ? n - k : 16);
        __m512 e = pl_avx512_exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, s + k), m));
        _mm512_mask_storeu_ps(s + k, mk, e);
        sum = _mm512_mask_add_ps(sum, mk, sum, e);
    }
    return _mm512_reduce_add_ps(sum);
}

/* A 64-wide slice of every o[e] in registers (4 x NQ accumulators) across all keys. */
PL_INLINE PL_TARGET_AVX512 void pv_avx512(float *const *o, const float *c,
                                          const float *const *p, const void *const *vp, int n,
                                          int hd, const int NQ, const pl_dtype t) {
    const size_t row_bytes = (size_t)hd * pl_dtype_size(t);
    int d = 0;
    for (; d + 64 <= hd; d += 64) {
        __m512 a[4][4], v[4];
        for (int e = 0; e < NQ; e++)
            for (int u = 0; u < 4; u++)
                a[e][u] = _mm512_mul_ps(_mm512_loadu_ps(o[e] + d + 16 * u), _mm512_set1_ps(c[e]));
        for (int k = 0; k < n; k++) {
            if (d == 0 && k + PF_KEYS < n) prefetch_row(vp[k + PF_KEYS], row_bytes);
            for (int u = 0; u < 4; u++) v[u] = pl_avx512_load(vp[k], t, (size_t)(d + 16 * u));
            for (int e = 0; e < NQ; e++) {
                __m512 pk = _mm512_set1_ps(p[e][k]);
                for (int u = 0; u < 4; u++) a[e][u] = _mm512_fmadd_ps(pk, v[u], a[e][u]);
            }
        }
        for (int e = 0; e < NQ; e++)
            for (int u = 0; u < 4; u++) _mm512_storeu_ps(o[e] + d + 16 * u, a[e][u]);
    }
    for (; d < hd; d += 16) {
        __mmask16 m = pl_avx512_mask(hd - d < 16 ? hd - d : 16);
        __m512 a[4];
        for (int e = 0; e < NQ; e++)
            a[e] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, o[e] + d), _mm512_set1_ps(c[e]));
        for (int k = 0; k < n; k++) {
            __m512 v = pl_avx512_load_mask(vp[k], t, (size_t)d, m);
            for (int e = 0; e < NQ; e++) a[e] = _mm512_fmadd_ps(_mm512_set1_ps(p[e][k]), v, a[e]);
        }
        for (int e = 0; e < NQ; e++) _mm512_mask_storeu_ps(o[e] + d, m, a[e]);
    }
}
ATTN_WRAPPERS4(avx512, PL_TARGET_AVX512, f32, PL_DTYPE_F32)
ATTN_WRAPPERS4(avx512, PL_TARGET_AVX512, f16, PL_DTYPE_F16)

// ---------------------------------------------------------------------------------------------
// AVX2 kernels: the same with 8-wide vectors

/* Scores of keys k .. k+KG-1 (KG 8 or 4) for NQ query vectors: KG x NQ accumulator chains,
 * each head_dim / 8 FMAs deep; mx4[e] takes their maximum. */
PL_INLINE PL_TARGET_AVX2 void scores_step_avx2(float *const *s, const float *const *q,
                                               const void *const *kp, int k, int n, int hd,
                                               __m256 sc, __m128 *mx4, const int NQ,
                                               const int KG, const pl_dtype t) {
    const int full = hd & ~7, rem = hd & 7;
    const size_t row_bytes = (size_t)hd * pl_dtype_size(t);
    if (k + PF_KEYS + KG <= n)
        for (int r = 0; r < KG; r++) prefetch_row(kp[k + PF_KEYS + r], row_bytes);
    __m256 a[2][8], kv[8];
    for (int e = 0; e < NQ; e++)
        for (int r = 0; r < KG; r++) a[e][r] = _mm256_setzero_ps();
    int i = 0;
    for (; i < full; i += 8) {
        for (int r = 0; r < KG; r++) kv[r] = pl_avx2_load(kp[k + r], t, (size_t)i);
        for (int e = 0; e < NQ; e++) {
            __m256 qv = _mm256_loadu_ps(q[e] + i);
            for (int r = 0; r < KG; r++) a[e][r] = _mm256_fmadd_ps(qv, kv[r], a[e][r]);
        }
    }
    if (rem) {
        for (int r = 0; r < KG; r++) kv[r] = pl_avx2_load_part(kp[k + r], t, (size_t)i, rem);
        for (int e = 0; e < NQ; e++) {
            __m256 qv = pl_avx2_load_part(q[e], PL_DTYPE_F32, (size_t)i, rem);
            for (int r = 0; r < KG; r++) a[e][r] = _mm256_fmadd_ps(qv, kv[r], a[e][r]);
        }
    }
    for (int e = 0; e < NQ; e++) {
        __m128 v4;
        if (KG == 8) {
            __m256 v = _mm256_mul_ps(pl_avx2_hsum8(a[e]), sc);
            _mm256_storeu_ps(s[e] + k, v);
            v4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        } else {
            v4 = _mm_mul_ps(pl_avx2_hsum4(a[e][0], a[e][1], a[e][2], a[e][3]),
                            _mm256_castps256_ps128(sc));
            _mm_storeu_ps(s[e] + k, v4);
        }
        mx4[e] = _mm_max_ps(mx4[e], v4);
    }
}

/* One query vector takes keys 8 at a time, two take 4: 8 independent FMA chains either way
 * (with 4 chains of head_dim / 8 FMAs, the FMA latency set the pace). */
PL_INLINE PL_TARGET_AVX2 void scores_avx2(float *const *s, const float *const *q,
                                          const void *const *kp, int n, int hd, float scale,
                                          float *mx, const int NQ, const pl_dtype t) {
    const int full = hd & ~7, rem = hd & 7;
    const __m256 sc = _mm256_set1_ps(scale);
    __m128 mx4[2];
    for (int e = 0; e < NQ; e++) mx4[e] = _mm_set1_ps(-INFINITY);
    int k = 0;
    if (NQ == 1)
        for (; k + 8 <= n; k += 8) scores_step_avx2(s, q, kp, k, n, hd, sc, mx4, NQ, 8, t);
    for (; k + 4 <= n; k += 4) scores_step_avx2(s, q, kp, k, n, hd, sc, mx4, NQ, 4, t);
    for (int e = 0; e < NQ; e++) {
        __m128 m = _mm_max_ps(mx4[e], _mm_movehl_ps(mx4[e], mx4[e]));
        mx[e] = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    }
    for (; k < n; k++) {
        __m256 a[2];
        for (int e = 0; e < NQ; e++) a[e] = _mm256_setzero_ps();
        int i = 0;
        for (; i < full; i += 8) {
            __m256 kv = pl_avx2_load(kp[k], t, (size_t)i);
            for (int e = 0; e < NQ; e++) a[e] = _mm256_fmadd_ps(_mm256_loadu_ps(q[e] + i), kv, a[e]);
        }
        if (rem) {
            __m256 kv = pl_avx2_load_part(kp[k], t, (size_t)i, rem);
            for (int e = 0; e < NQ; e++)
                a[e] = _mm256_fmadd_ps(pl_avx2_load_part(q[e], PL_DTYPE_F32, (size_t)i, rem), kv,
                                       a[e]);
        }
        for (int e = 0; e < NQ; e++) {
            s[e][k] = pl_avx2_hsum(a[e]) * scale;
            mx[e] = s[e][k] > mx[e] ? s[e][k] : mx[e];
        }
    }
}

static PL_TARGET_AVX2 float exp_sum_avx2(float *s, int n, float mx) {
    __m256 sum = _mm256_setzero_ps(), m = _mm256_set1_ps(mx);
    int k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 e = pl_avx2_exp(_mm256_sub_ps(_mm256_loadu_ps(s + k), m));
        _mm256_storeu_ps(s + k, e);
        sum = _mm256_add_ps(sum, e);
    }
    float total = pl_avx2_hsum(sum);
    for (; k < n; k++) {
        s[k] = expf(s[k] - mx);
        total += s[k];
    }
    return total;
}

/* Columns d .. d + 8U - 1 of every o[e] in registers (U x NQ accumulators) across all keys;
 * the first slice (d == 0) prefetches the V rows ahead. */
PL_INLINE PL_TARGET_AVX2 void pv_slice_avx2(float *const *o, const float *c,
                                            const float *const *p, const void *const *vp, int n,
                                            int hd, int d, const int NQ, const int U,
                                            const pl_dtype t) {
    const size_t row_bytes = (size_t)hd * pl_dtype_size(t);
    __m256 a[2][8], v[8];
    for (int e = 0; e < NQ; e++)
        for (int u = 0; u < U; u++)
            a[e][u] = _mm256_mul_ps(_mm256_loadu_ps(o[e] + d + 8 * u), _mm256_set1_ps(c[e]));
    for (int k = 0; k < n; k++) {
        if (d == 0 && k + PF_KEYS < n) prefetch_row(vp[k + PF_KEYS], row_bytes);
        for (int u = 0; u < U; u++) v[u] = pl_avx2_load(vp[k], t, (size_t)(d + 8 * u));
        for (int e = 0; e < NQ; e++) {
            __m256 pk = _mm256_set1_ps(p[e][k]);
            for (int u = 0; u < U; u++) a[e][u] = _mm256_fmadd_ps(pk, v[u], a[e][u]);
        }
    }
    for (int e = 0; e < NQ; e++)
        for (int u = 0; u < U; u++) _mm256_storeu_ps(o[e] + d + 8 * u, a[e][u]);
}

/* One query vector takes 64 columns per pass over the keys, two take 32: 8 accumulator chains
 * either way, and head_dim 64 needs one pass for one vector. */
PL_INLINE PL_TARGET_AVX2 void pv_avx2(float *const *o, const float *c, const float *const *p,
                                      const void *const *vp, int n, int hd, const int NQ,
                                      const pl_dtype t) {
    int d = 0;
    if (NQ == 1)
        for (; d + 64 <= hd; d += 64) pv_slice_avx2(o, c, p, vp, n, hd, d, NQ, 8, t);
    for (; d + 32 <= hd; d += 32) pv_slice_avx2(o, c, p, vp, n, hd, d, NQ, 4, t);
    for (; d < hd; d += 8) {
        int w = hd - d < 8 ? hd - d : 8;
        __m256 a[2];
        for (int e = 0; e < NQ; e++)
            a[e] = _mm256_mul_ps(pl_avx2_load_part(o[e], PL_DTYPE_F32, (size_t)d, w),
                                 _mm256_set1_ps(c[e]));
        for (int k = 0; k < n; k++) {
            __m256 v = pl_avx2_load_part(vp[k], t, (size_t)d, w);
            for (int e = 0; e < NQ; e++) a[e] = _mm256_fmadd_ps(_mm256_set1_ps(p[e][k]), v, a[e]);
        }
        for (int e = 0; e < NQ; e++) pl_avx2_store_part(o[e] + d, a[e], w);
    }
}
ATTN_WRAPPERS(avx2, PL_TARGET_AVX2, f32, PL_DTYPE_F32)
ATTN_WRAPPERS(avx2, PL_TARGET_AVX2, f16, PL_DTYPE_F16)
#endif /* PL_CPU_X86 */

static attn_fns select_fns(pl_cpu_isa isa, pl_dtype kv) {
    bool f16 = kv == PL_DTYPE_F16;
#ifdef PL_CPU_X86
    if (isa == PL_CPU_ISA_AVX512)
        return (attn_fns){f16 ? scores_avx512_f16 : scores_avx512_f32, exp_sum_avx512,
                          f16 ? pv_avx512_f16 : pv_avx512_f32, 4, 4};
    if (isa == PL_CPU_ISA_AVX2)
        return (attn_fns){f16 ? scores_avx2_f16 : scores_avx2_f32, exp_sum_avx2,
                          f16 ? pv_avx2_f16 : pv_avx2_f32, 2, 0};
#endif
    (void)isa;
    return (attn_fns){f16 ? scores_scalar_f16 : scores_scalar_f32, exp_sum_scalar,
                      f16 ? pv_scalar_f16 : pv_scalar_f32, 4, 1};
}

// ---------------------------------------------------------------------------------------------
// work units

typedef struct attn_job {
    pl_cpu_ctx *c;
    const pl_attn_batch *b;
    float *out;                 /* (n_tokens, n_heads, head_dim) */
    const float *q;             /* (n_tokens, n_heads, head_dim) */
    const unsigned char *k_cache, *v_cache;
    size_t esize;               /* bytes per cache element */
    attn_fns f;
    int group;                  /* G: query heads per KV head */
    int tq;                     /* query rows per unit */
    const int32_t *unit_start;  /* (n_seqs + 1): first unit of each sequence */
    size_t off_m, off_l, off_s, off_ptr; /* scratch layout, in floats from the thread's base */
} attn_job;

/* One group of query vectors over one tile's keys: vector e sees keys [0, n[e]) of kp / vp
 * (later rows of a chunk see more of them). Scores, the online softmax step and the V
 * accumulation, each vector's bits those of a call of its own: the keys every vector sees go
 * through the kernels together, each vector's further keys alone (attn_fns.key_block). */
static void attend_group(const attn_job *J, float *const *Oq, float *const *Sq,
                         const float *const *qv, int nq, const int *n, const void *const *kp,
                         const void *const *vp, float *mrow, float *lrow) {
    const pl_attn_batch *b = J->b;
    int hd = b->head_dim, n_min = n[0], n_max = n[0];
    for (int e = 1; e < nq; e++) {
        n_min = n[e] < n_min ? n[e] : n_min;
        n_max = n[e] > n_max ? n[e] : n_max;
    }
    int kb = J->f.key_block;
    int shared = n_min == n_max ? n_min : kb > 0 ? n_min - n_min % kb : 0;
    float mx[4], corr[4];
    for (int e = 0; e < nq; e++) mx[e] = -INFINITY;
    if (shared > 0) J->f.scores(Sq, qv, nq, kp, shared, hd, b->scale, mx);
    for (int e = 0; e < nq; e++) {
        if (n[e] == shared) continue;
        float *se = Sq[e] + shared, m1;
        J->f.scores(&se, &qv[e], 1, kp + shared, n[e] - shared, hd, b->scale, &m1);
        mx[e] = m1 > mx[e] ? m1 : mx[e];
    }
    if (b->softcap > 0.0f)
        for (int e = 0; e < nq; e++)
            mx[e] = pl_cpu_softcap(J->c->isa, Sq[e], (size_t)n[e], 1.0f, b->softcap);
    for (int e = 0; e < nq; e++) {
        if (mrow[e] > mx[e]) mx[e] = mrow[e];
        float sum = J->f.exp_sum(Sq[e], n[e], mx[e]);
        corr[e] = mrow[e] == -INFINITY ? 0.0f : expf(mrow[e] - mx[e]);
        lrow[e] = lrow[e] * corr[e] + sum;
        mrow[e] = mx[e];
    }
    J->f.pv(Oq, corr, (const float *const *)Sq, nq, vp, n_min, hd);
    for (int e = 0; e < nq; e++) {
        if (n[e] == n_min) continue;
        float one = 1.0f, *oe = Oq[e];
        const float *pe = Sq[e] + n_min;
        J->f.pv(&oe, &one, &pe, 1, vp + n_min, n[e] - n_min, hd);
    }
}

static void attn_unit(void *arg, int u, int thread) {
    const attn_job *J = arg;
    const pl_attn_batch *b = J->b;
    /* the sequence owning unit u: the last s with unit_start[s] <= u */
    int lo = 0, hi = b->n_seqs - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (J->unit_start[mid] <= u) lo = mid; else hi = mid - 1;
    }
    int s = lo, local = u - J->unit_start[s];
    int kh = local % b->n_kv_heads, tile = local / b->n_kv_heads;
    int q0 = b->query_start[s], q_len = b->query_start[s + 1] - q0, ctx = b->context_lens[s];
    int j0 = tile * J->tq, j1 = j0 + J->tq < q_len ? j0 + J->tq : q_len;
    int hd = b->head_dim, G = J->group, M = (j1 - j0) * G, bs = b->block_size;

    float *base = J->c->scratch[thread];
    float *O = base;                  /* (M, hd) unnormalised outputs */
    float *mrow = base + J->off_m;    /* (M) running max */
    float *lrow = base + J->off_l;    /* (M) running sum of exp */
    float *S = base + J->off_s;       /* (4, KEY_TILE) scores, then probabilities */
    const void **kp = (const void **)(void *)(base + J->off_ptr); /* (KEY_TILE) */
    const void **vp = kp + KEY_TILE;                                /* (KEY_TILE) */
    for (int i = 0; i < M * hd; i++) O[i] = 0.0f;
    for (int m = 0; m < M; m++) {
        mrow[m] = -INFINITY;
        lrow[m] = 0.0f;
    }

    const int32_t *table = b->block_tables + (size_t)s * b->max_blocks_per_seq;
    size_t row_bytes = (size_t)hd * J->esize;
    int pmax = ctx - q_len + j1 - 1; /* position of the unit's last row */
    int window = b->sliding_window;
    int first = pl_attn_window_start(ctx - q_len + j0, window); /* first row's lo */
    for (int t0 = first; t0 <= pmax; t0 += KEY_TILE) {
        int t1 = t0 + KEY_TILE < pmax + 1 ? t0 + KEY_TILE : pmax + 1;
        for (int t = t0; t < t1;) { /* block by block: one division per block, not per key */
            int off = t % bs, n = bs - off < t1 - t ? bs - off : t1 - t;
            size_t row = ((size_t)table[t / bs] * b->n_kv_heads + kh) * bs + (size_t)off;
            const unsigned char *kr = J->k_cache + row * row_bytes;
            const unsigned char *vr = J->v_cache + row * row_bytes;
            /* A block's rows of one head are contiguous (4 KB at head_dim 64, f32), but the
             * next block is elsewhere, where the hardware streamer has to start over;
             * touching its first lines now gets every block of the tile going (K into L1,
             * needed first; V into L2). Decode, 64 sequences x 512 positions, 2 threads: f32
             * KV 26.3 -> 29.9 GB/s, f16 22.4 -> 29.8. */
            for (int l = 0; l < 4; l++) {
                __builtin_prefetch(kr + 64 * l, 0, 3);
                __builtin_prefetch(vr + 64 * l, 0, 2);
            }
            for (int i = 0; i < n; i++, t++) {
                kp[t - t0] = kr + (size_t)i * row_bytes;
                vp[t - t0] = vr + (size_t)i * row_bytes;
            }
        }
        /* the unit's query vectors in order (row j0 first, then its heads): a group of up
         * to max_nq with the same first key shares every K and V load */
        for (int m = 0; m < M;) {
            int nq = 0, skip = 0, n_keys[4];
            const float *qv[4];
            float *Oq[4], *Sq[4];
            for (; nq < J->f.max_nq && m + nq < M; nq++) {
                int v = m + nq, j = j0 + v / G, g = v % G;
                int pos = ctx - q_len + j;
                int lim = (pos + 1 < t1 ? pos + 1 : t1) - t0; /* keys of this tile row j sees */
                int sk = 0; /* ... from key sk on: t0 + sk = max(t0, row j's window start) */
                if (window > 0) {
                    int lo = pl_attn_window_start(pos, window);
                    sk = lo > t0 ? lo - t0 : 0;
                }
                if (nq > 0 && (sk != skip || (g == 0 && J->f.key_block == 0))) break;
                if (lim <= sk) break; /* sees no key of this tile (only rows before the first
                                       * that does, or at a window's edge) */
                skip = sk;
                n_keys[nq] = lim - sk;
                qv[nq] = J->q + ((size_t)(q0 + j) * b->n_heads + (size_t)kh * G + g) * hd;
                Oq[nq] = O + (size_t)v * hd;
                Sq[nq] = S + (size_t)nq * KEY_TILE;
            }
            if (nq == 0) { /* vector m sees nothing here */
                m++;
                continue;
            }
            attend_group(J, Oq, Sq, qv, nq, n_keys, kp + skip, vp + skip, mrow + m, lrow + m);
            m += nq;
        }
    }
    for (int j = j0; j < j1; j++)
        for (int g = 0; g < G; g++) {
            int m = (j - j0) * G + g;
            float inv = 1.0f / lrow[m];
            float *o = J->out + ((size_t)(q0 + j) * b->n_heads + (size_t)kh * G + g) * hd;
            for (int d = 0; d < hd; d++) o[d] = O[(size_t)m * hd + d] * inv;
        }
}

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

pl_status pl_cpu_attention(pl_backend *be, float *out, const float *q, const void *k_cache,
                           const void *v_cache, const pl_attn_batch *b) {
    PL_TRY(pl_ref_check_attention(be, out, q, k_cache, v_cache, b));
    if (b->n_seqs == 0) return PL_OK;
    pl_cpu_ctx *c = be->ctx;
    int G = b->n_heads / b->n_kv_heads;
    int tq = MAX_UNIT_VECS / G > 0 ? MAX_UNIT_VECS / G : 1;
    size_t M = (size_t)tq * G;

    attn_job J = {.c = c, .b = b, .out = out, .q = q, .k_cache = k_cache, .v_cache = v_cache,
                  .esize = pl_dtype_size(be->kv_dtype), .f = select_fns(c->isa, be->kv_dtype),
                  .group = G, .tq = tq};
    J.off_m = round16(M * (size_t)b->head_dim);
    J.off_l = J.off_m + round16(M);
    J.off_s = J.off_l + round16(M);
    J.off_ptr = J.off_s + 4 * KEY_TILE;
    size_t ptr_floats = 2 * KEY_TILE * sizeof(void *) / sizeof(float);
    PL_TRY(pl_cpu_reserve(c, J.off_ptr + ptr_floats, (size_t)b->n_seqs + 1));

    int32_t *us = c->ints; /* (n_seqs + 1) */
    us[0] = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int q_len = b->query_start[s + 1] - b->query_start[s];
        long next = (long)us[s] + (long)b->n_kv_heads * ((q_len + tq - 1) / tq);
        if (next > INT32_MAX)
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "attention: batch too large (%ld units)", next);
        us[s + 1] = (int32_t)next;
    }
    J.unit_start = us;
    pl_threadpool_run(c->pool, us[b->n_seqs], attn_unit, &J);
    return PL_OK;
}
