/*
 * kernels/cpu/cpu.h - the fast CPU backend's internals: state, run-time ISA dispatch, scratch,
 * and the SIMD helpers its op files share.
 *
 * Every op exists in up to three builds chosen at run time from the CPU's features: AVX-512
 * (F, BW, VL, DQ with FMA and F16C), AVX2 (with FMA and F16C) and portable scalar C (the
 * quantised GEMV's 512-bit kernels also need AVX-512 VNNI, else it runs its AVX2 ones). The
 * SIMD variants are compiled with per-function target attributes (PL_TARGET_AVX512/AVX2), so
 * the library itself needs no -march flag and runs on any x86-64 (or other) machine.
 *
 * Invariants
 * - Ops never allocate while running tasks: per-thread scratch is grown (at most to the
 *   largest request seen) by pl_cpu_reserve() on the calling thread before tasks start, so an
 *   allocation failure is reported as a status instead of being lost inside a worker.
 * - Work is split by output rows (or (sequence, KV head) units for attention) into tasks for
 *   the persistent pool in util/threadpool.h; small ops run inline on the caller, because a
 *   wake-up costs more than they do. The own GEMM gives each thread one contiguous range (its
 *   prefetching runs ahead within it) and balances by stealing from the others' ranges.
 * - One caller at a time: ops of one backend must not run concurrently (they share the pool
 *   and the scratch), as the runner calls them from its step loop.
 * - OpenBLAS is called single-threaded from inside the pool's tasks (the backend sets
 *   openblas_set_num_threads(1) process-wide), so OpenBLAS's own spinning threads never
 *   compete with the pool for the same cores.
 */
#ifndef PL_KERNELS_CPU_H
#define PL_KERNELS_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "util/threadpool.h"

#if defined(__x86_64__) || defined(__i386__)
#define PL_CPU_X86 1
#include <immintrin.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pl_cpu_isa {
    PL_CPU_ISA_SCALAR = 0,
    PL_CPU_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    PL_CPU_ISA_AVX512 = 2, /* AVX-512 F/BW/VL/DQ + FMA + F16C */
} pl_cpu_isa;

/* The matmul kernels; AUTO picks by rows and dtype (tests and benchmarks force one; OWN
 * needs AVX2 and falls back to AUTO without it). */
typedef enum pl_cpu_mm_path {
    PL_CPU_MM_AUTO = 0,
    PL_CPU_MM_GEMV = 1,
    PL_CPU_MM_OWN = 2,
    PL_CPU_MM_BLAS = 3,
    PL_CPU_MM_QGEMM = 4, /* the int8 GEMM (qgemm.c); quantised weights only, else AUTO */
} pl_cpu_mm_path;

/* The int8 GEMM's micro-kernels (qgemm.c), in order of preference; AUTO: the best one this
 * ctx may use (pl_cpu_qgemm_usable). */
typedef enum pl_cpu_qgemm_kernel {
    PL_QGEMM_AUTO = 0,
    PL_QGEMM_SCALAR = 1,  /* portable C */
    PL_QGEMM_AVX2 = 2,    /* vpmaddubsw + vpmaddwd, 8 columns a vector */
    PL_QGEMM_AVXVNNI = 3, /* VEX vpdpbusd (AVX-VNNI), 8 columns a vector */
    PL_QGEMM_VNNI512 = 4, /* EVEX vpdpbusd (AVX-512 VNNI), 16 columns a vector */
    PL_QGEMM_AMX = 5,     /* AMX tiles (tdpbssd) */
    PL_QGEMM_COUNT = 6,
} pl_cpu_qgemm_kernel;

/* The matmul thresholds' classes of weight types: 0 f32, 1 f16/bf16, 2 + the quantised type's
 * place from Q8_0 (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K). */
#define PL_CPU_MM_CLASSES (2 + PL_WTYPE_COUNT - PL_WTYPE_Q8_0)
static inline int pl_cpu_mm_class(pl_wtype t) {
    return t == PL_WTYPE_F32 ? 0 : pl_wtype_is_quant(t) ? 2 + (int)t - (int)PL_WTYPE_Q8_0 : 1;
}

typedef struct pl_cpu_ctx {
    pl_threadpool *pool;
    int n_threads;
    pl_cpu_isa isa;
    /* AVX-512 VNNI (vpdpbusd) present: the quantised GEMV uses its 512-bit kernels; without
     * it an AVX-512 CPU runs the AVX2 ones (tests clear it to run those). */
    bool vnni;
    /* AVX-VNNI (VEX vpdpbusd on 256 bits) present; AMX tiles present and granted by the OS.
     * Tests clear them, as vnni, to run the kernels below them. */
    bool avxvnni, amx;

    /* matmul regime by activation rows R (see matmul.c), unless mm_force names one:
     * - f32, f16, bf16 on AVX-512 and AVX2, indexed by pl_cpu_mm_class (f32; f16/bf16):
     *   R < own_min_rows streams the weights through the GEMV kernel; up to own_max_rows
     *   (0: no limit) the own register-tiled GEMM runs; beyond, OpenBLAS sgemm on tiles.
     * - f32, f16, bf16 on scalar CPUs: R < gemm_min_rows GEMV, otherwise OpenBLAS.
     * - the quantised types, on every ISA: R < qgemm_min_rows the integer GEMV (qgemv.c),
     *   otherwise the int8 GEMM (qgemm.c). The own GEMM and OpenBLAS on dequantised chunks
     *   run them only when forced. */
    pl_cpu_mm_path mm_force;
    int own_min_rows[PL_CPU_MM_CLASSES], own_max_rows[PL_CPU_MM_CLASSES];
    int gemm_min_rows;
    /* Quantised types (indexed as own_min_rows' classes from 2): from this many rows the int8
     * GEMM (qgemm.c) instead of the GEMV; qgemm_force names its kernel (tests, benchmarks;
     * AUTO: the best usable). */
    int qgemm_min_rows[PL_CPU_MM_CLASSES];
    pl_cpu_qgemm_kernel qgemm_force;
    /* Own GEMM work ranges per call, 0: one per thread (tests set more than the threads, so
     * that finished tasks must steal from the others' ranges). */
    int own_ranges;

    /* Per-thread scratch, n_threads arrays of scratch_cap floats each, 64-byte aligned. */
    float **scratch;
    size_t scratch_cap;
    /* Caller-side int scratch (attention's work-unit prefix sums), int_cap entries. */
    int32_t *ints;
    size_t int_cap;
    /* Scratch shared by all tasks of one op (matmul's transposed activations), shared_cap
     * floats, 64-byte aligned; written in one pool run and read in the next. */
    float *shared;
    size_t shared_cap;
    /* The quantised GEMV's activations (pl_cpu_qact), qbuf_cap bytes, 64-byte aligned. */
    unsigned char *qbuf;
    size_t qbuf_cap;
    /* moe_matmul's slot order and gathered rows (moe.c), bytes of capacity each. */
    int32_t *moe_ints;
    size_t moe_ints_cap;
    float *moe_floats;
    size_t moe_floats_cap;
    /* The int8 GEMM's AMX path: the call's quantised rows gathered contiguously (qx_cap
     * bytes, 64-byte aligned). */
    unsigned char *qx;
    size_t qx_cap;
} pl_cpu_ctx;

/* The best ISA this machine supports. */
pl_cpu_isa pl_cpu_detect_isa(void);
const char *pl_cpu_isa_name(pl_cpu_isa isa); /* ctx.c */

/* As pl_backend_cpu_create, but never using an ISA above `isa` (tests and benchmarks run every
 * code path on one machine). Asking for more than the machine has gives the machine's best. */
pl_status pl_cpu_backend_create_isa(const pl_backend_options *opt, pl_cpu_isa isa,
                                    pl_backend **out);

/* ctx.c: what the ops share. */
/* Grows every thread's scratch to at least n_floats and the int scratch to n_ints. */
pl_status pl_cpu_reserve(pl_cpu_ctx *c, size_t n_floats, size_t n_ints);

/* Grows the shared scratch to at least n_floats. */
pl_status pl_cpu_reserve_shared(pl_cpu_ctx *c, size_t n_floats);

/* Splits `work` units into tasks of at least `min_per_task` units, at most 8 per thread. */
int pl_cpu_n_tasks(const pl_cpu_ctx *c, size_t work, size_t min_per_task);

/* v rounded up to a multiple of m (v >= 0, m > 0). */
static inline int pl_cpu_round_up(int v, int m) { return (v + m - 1) / m * m; }

/* Most activation rows of one own-GEMM call (its transposed x is at most that x d_in). */
#define PL_CPU_OWN_MAX_ROWS 256

/* out (R, N) = x (R, K) @ w^T with the own register-tiled GEMM (own_gemm.c), R in [1,
 * PL_CPU_OWN_MAX_ROWS], isa AVX2 or AVX-512 (PL_ERR_UNSUPPORTED otherwise); w of any weight
 * type (quantised rows are dequantised chunk by chunk into its f32 buffers). */
pl_status pl_cpu_own_gemm(pl_cpu_ctx *c, float *out, const float *x, const void *w, pl_wtype wt,
                          int R, int K, int N);

/* dst (n) f32 = src (n) of t, widened with the ISA's conversion (exact for f16 and bf16).
 * Defined in embed.c; matmul widens f16/bf16 weight tiles with it. */
void pl_cpu_convert_row(pl_cpu_isa isa, float *dst, const void *src, pl_dtype t, size_t n);

/* dst (32 n_pieces) f32 = pieces p0 .. p0 + n_pieces - 1 of the quantised row (or run of
 * whole blocks) src of type t, a piece being 32 consecutive elements (a Q8_0/Q4_0 block, a
 * K-quant sub-block or half a Q6_K group pair). Equal bit for bit to the type's reference
 * dequantiser (util/quant.h: every value is rounded once). Defined in dequant.c. */
void pl_cpu_dequant(pl_cpu_isa isa, float *dst, const void *src, pl_wtype t, size_t p0,
                    size_t n_pieces);

/* Activations quantised for the integer GEMV (qgemv.c): each x row cut into blocks of 32,
 * block b scaled by d[b] = max |x| / 127 to int8 q (rounded to nearest even, the same on
 * every ISA). Row r lives at base + r * stride: q (K int8), dl (K/4 f32: the block scale of
 * each lane of 4 values), s4n (K/4 int32: minus the sum of each 4 consecutive q), d (K/32),
 * ds (K/32: d[b] * sum of block b's q); then the extra layouts (qgemv.c). Valid until the
 * next matmul of the backend. */
typedef struct pl_cpu_qact {
    int n_rows, K;
    unsigned layouts;
    size_t stride;
    unsigned char *base;
} pl_cpu_qact;

/* The layouts beyond the natural one that the integer GEMV of type t reads on this ctx
 * (bits: PL_CPU_QA_HALVES for the 512-bit Q8_0/Q4_0 kernel, PL_CPU_QA_PAIRS for its
 * Q4_K/Q5_K one). */
#define PL_CPU_QA_HALVES 1u
#define PL_CPU_QA_PAIRS 2u
/* The int8 GEMM's: minus the sum of each block of 32 q (K/32 int32) and of each 16 (K/16
 * int32), at the end of the row. */
#define PL_CPU_QA_SUMS 4u
unsigned pl_cpu_qact_layouts(const pl_cpu_ctx *c, pl_wtype t);

/* Row r's parts of the natural layout and of the sums (PL_CPU_QA_SUMS). */
static inline const int8_t *pl_cpu_qact_q(const pl_cpu_qact *a, int r) {
    return (const int8_t *)(a->base + (size_t)r * a->stride);
}
static inline const float *pl_cpu_qact_d(const pl_cpu_qact *a, int r) {
    return (const float *)(a->base + (size_t)r * a->stride + 3 * (size_t)a->K);
}
static inline const float *pl_cpu_qact_ds(const pl_cpu_qact *a, int r) {
    return (const float *)(a->base + (size_t)r * a->stride + 3 * (size_t)a->K +
                           (size_t)a->K / 8);
}
static inline const int32_t *pl_cpu_qact_sn32(const pl_cpu_qact *a, int r) {
    return (const int32_t *)(a->base + (size_t)(r + 1) * a->stride - 3 * (size_t)a->K / 8);
}
static inline const int32_t *pl_cpu_qact_sn16(const pl_cpu_qact *a, int r) {
    return (const int32_t *)(a->base + (size_t)(r + 1) * a->stride - (size_t)a->K / 4);
}

/* Most x rows quantised at once (matmul.c runs larger products in blocks of these): the int8
 * GEMM reads a block's quantised rows once per panel, so they must stay in L2. TinyLlama's
 * 512-token Q4_K_M prefill on a Xeon with 2 MiB of L2: 1.47-1.51 s at 256, 1.47-1.52 s at 128,
 * 1.67-1.69 s at 512 (its 5632-wide rows then take 2.9 MB). */
#define PL_CPU_QGEMV_BLOCK_ROWS 256

/* Quantises x (n_rows, K), K a multiple of 32, into the ctx's qbuf (grown; on the pool when
 * large), with the natural layout and the extra ones in layouts. */
pl_status pl_cpu_qact_quantize(pl_cpu_ctx *c, const float *x, int n_rows, int K,
                               unsigned layouts, pl_cpu_qact *out);

/* One GEMV product of quantised weights: the activations a (n_rows, d_in) against w (d_out,
 * d_in) of type wt, out (n_rows, d_out). Weight rows go 4 at a time, one from each quarter
 * (rows k, k + quarter, k + 2 quarter, k + 3 quarter: see matmul.c), the rows from 4 quarter
 * up to d_out one at a time (the tail). */
typedef struct pl_cpu_qgemv_job {
    const pl_cpu_ctx *c;
    const pl_cpu_qact *a;
    const void *w;
    pl_wtype wt;
    float *out;
    int n_rows, d_in, d_out, quarter;
} pl_cpu_qgemv_job;

/* Rows k0 .. k1-1 of each quarter, and the tail when tail is true. */
void pl_cpu_qgemv(const pl_cpu_qgemv_job *J, int k0, int k1, bool tail);


/* ---- ops (kernels/cpu/<op>.c), signatures of pl_backend_ops ---- */
pl_status pl_cpu_embed(pl_backend *be, float *out, const int32_t *ids, int n_tokens,
                       const void *table, pl_wtype type, int dim);
pl_status pl_cpu_rmsnorm(pl_backend *be, float *out, const float *x, const float *w, int n_rows,
                         int dim, float eps);
pl_status pl_cpu_add_rmsnorm(pl_backend *be, float *out, float *residual, const float *delta,
                             const float *w, int n_rows, int dim, float eps);
pl_status pl_cpu_matmul(pl_backend *be, float *out, const float *x, const void *w,
                        pl_wtype w_type, int n_rows, int d_in, int d_out);
pl_status pl_cpu_matmul_group(pl_backend *be, const pl_matmul_part *parts, int n_parts,
                              const float *x, int n_rows, int d_in);
pl_status pl_cpu_rope(pl_backend *be, float *q, float *k, const int32_t *positions,
                      const float *inv_freq, int n_tokens, int n_heads, int n_kv_heads,
                      int head_dim, pl_rope_layout layout);
pl_status pl_cpu_kv_store(pl_backend *be, void *k_cache, void *v_cache, const float *k,
                          const float *v, const int64_t *slots, int n_tokens, int n_kv_heads,
                          int head_dim, int block_size);
pl_status pl_cpu_attention(pl_backend *be, float *out, const float *q, const void *k_cache,
                           const void *v_cache, const pl_attn_batch *b);
pl_status pl_cpu_silu_mul(pl_backend *be, float *out, const float *gate, const float *up,
                          size_t n);
pl_status pl_cpu_gather_rows(pl_backend *be, float *out, const float *x, const int32_t *rows,
                             int n_rows, int dim);
pl_status pl_cpu_add_bias(pl_backend *be, float *x, const float *bias, int n_rows, int dim);
pl_status pl_cpu_moe_route(pl_backend *be, int32_t *ids, float *weights, const float *logits,
                           int n_tokens, int n_experts, int k, bool norm);
pl_status pl_cpu_moe_matmul(pl_backend *be, const pl_matmul_part *parts, int n_parts,
                            const float *x, int x_div, const int32_t *ids, int n_slots,
                            int n_experts, int d_in);
pl_status pl_cpu_moe_combine(pl_backend *be, float *out, const float *y, const float *weights,
                             int n_tokens, int k, int dim, const float *shared,
                             const float *shared_gate);
pl_status pl_cpu_gelu_mul(pl_backend *be, float *out, const float *gate, const float *up,
                          size_t n);
pl_status pl_cpu_scale(pl_backend *be, float *x, size_t n, float scale, float cap);
/* x (n) = tanh(scale * x / cap) * cap with the ISA's vectors (the soft-cap of Gemma's logits
 * and attention scores); returns the largest result (-inf for n 0). Within a few ulp of
 * tanhf's; exactly +-cap where it saturates. */
float pl_cpu_softcap(pl_cpu_isa isa, float *x, size_t n, float scale, float cap);
pl_status pl_cpu_copy_blocks(pl_backend *be, void *kv_cache, const pl_kv_layout *layout,
                             const int32_t *pairs, int n_pairs);

/* ---------------------------------------------------------------------------------------------
 * SIMD helpers. Every helper carries its ISA's target attribute and is always inlined, so a
 * caller with the same attribute gets straight-line code and constant dtypes fold away. */

#define PL_INLINE static inline __attribute__((always_inline))

#ifdef PL_CPU_X86
#define PL_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define PL_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define PL_TARGET_AVX512_VNNI                                                                 \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define PL_TARGET_AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define PL_TARGET_AMX                                                                         \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,amx-tile,amx-int8")))

/* ---- AVX-512: 16 floats per vector ---- */

/* Lanes [0, n) set, n in [0, 16]. */
PL_INLINE PL_TARGET_AVX512 __mmask16 pl_avx512_mask(int n) {
    return (__mmask16)((1u << n) - 1u);
}

/* 16 elements i .. i+15 of an f32/f16/bf16 array p, as f32. */
PL_INLINE PL_TARGET_AVX512 __m512 pl_avx512_load(const void *p, pl_dtype t, size_t i) {
    if (t == PL_DTYPE_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i)));
    if (t == PL_DTYPE_BF16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return _mm512_loadu_ps((const float *)p + i);
}

/* As pl_avx512_load, reading only the lanes in m (others are 0 and never touched). */
PL_INLINE PL_TARGET_AVX512 __m512 pl_avx512_load_mask(const void *p, pl_dtype t, size_t i,
                                                      __mmask16 m) {
    if (t == PL_DTYPE_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i));
    if (t == PL_DTYPE_BF16) {
        __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return _mm512_maskz_loadu_ps(m, (const float *)p + i);
}

/* The four horizontal sums of a, b, c, d as one vector (a, b, c, d). */
PL_INLINE PL_TARGET_AVX512 __m128 pl_avx512_hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
    __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    __m256 b8 = _mm256_add_ps(_mm512_castps512_ps256(b), _mm512_extractf32x8_ps(b, 1));
    __m256 c8 = _mm256_add_ps(_mm512_castps512_ps256(c), _mm512_extractf32x8_ps(c, 1));
    __m256 d8 = _mm256_add_ps(_mm512_castps512_ps256(d), _mm512_extractf32x8_ps(d, 1));
    __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
    __m128 b4 = _mm_add_ps(_mm256_castps256_ps128(b8), _mm256_extractf128_ps(b8, 1));
    __m128 c4 = _mm_add_ps(_mm256_castps256_ps128(c8), _mm256_extractf128_ps(c8, 1));
    __m128 d4 = _mm_add_ps(_mm256_castps256_ps128(d8), _mm256_extractf128_ps(d8, 1));
    return _mm_hadd_ps(_mm_hadd_ps(a4, b4), _mm_hadd_ps(c4, d4));
}

/* exp(x) lane-wise, relative error ~2 ulp over the f32 range. Cody-Waite reduction
 * x = n ln2 + r, |r| <= ln2/2, then a degree-7 Taylor polynomial (truncation error < 1e-8) and
 * 2^n by scalef. Inputs above 88.7 give +inf; inputs below -87.3 (and NaN) give exactly 0
 * instead of a subnormal: softmax weights that small are noise, and subnormal operands make
 * every later multiply-add take a microcode assist (measured: 10x slower attention). */
PL_INLINE PL_TARGET_AVX512 __m512 pl_avx512_exp(__m512 x) {
    __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.8f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps(normal, _mm512_scalef_ps(p, n));
}

/* ---- AVX2: 8 floats per vector ---- */

PL_INLINE PL_TARGET_AVX2 __m256 pl_avx2_load(const void *p, pl_dtype t, size_t i) {
    if (t == PL_DTYPE_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
    if (t == PL_DTYPE_BF16) {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    return _mm256_loadu_ps((const float *)p + i);
}

/* Elements i .. i+n-1 (n in [0, 8]) as f32, the other lanes 0; never reads past them. */
PL_INLINE PL_TARGET_AVX2 __m256 pl_avx2_load_part(const void *p, pl_dtype t, size_t i, int n) {
    if (t == PL_DTYPE_F32) {
        __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
        return _mm256_maskload_ps((const float *)p + i, m);
    }
    uint16_t buf[8] = {0};
    for (int k = 0; k < n; k++) buf[k] = ((const uint16_t *)p)[i + (size_t)k];
    return pl_avx2_load(buf, t, 0);
}

/* Stores lanes [0, n) of v to p (n in [0, 8]). */
PL_INLINE PL_TARGET_AVX2 void pl_avx2_store_part(float *p, __m256 v, int n) {
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane), v);
}

PL_INLINE PL_TARGET_AVX2 float pl_avx2_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The four horizontal sums of a, b, c, d as one vector (a, b, c, d). */
PL_INLINE PL_TARGET_AVX2 __m128 pl_avx2_hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 b4 = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
    __m128 c4 = _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
    __m128 d4 = _mm_add_ps(_mm256_castps256_ps128(d), _mm256_extractf128_ps(d, 1));
    return _mm_hadd_ps(_mm_hadd_ps(a4, b4), _mm_hadd_ps(c4, d4));
}

/* The eight horizontal sums of a[0..7] as one vector (sum a[0], ..., sum a[7]). */
PL_INLINE PL_TARGET_AVX2 __m256 pl_avx2_hsum8(const __m256 *a) {
    /* hadd pairs within 128-bit lanes: after two rounds the low lanes hold the sums of
     * elements 0-3 of each input, the high lanes those of elements 4-7 */
    __m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    __m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20),
                         _mm256_permute2f128_ps(h0, h1, 0x31));
}

/* exp(x) lane-wise as pl_avx512_exp (0 below -87.3, for the same reason); 2^n is built in
 * the exponent field, so x is clamped to [-87.3, 88.3] where n stays in the normal range. */
PL_INLINE PL_TARGET_AVX2 __m256 pl_avx2_exp(__m256 x) {
    __m256 normal = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_GE_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
                                  23);
    return _mm256_and_ps(normal, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}
#endif /* PL_CPU_X86 */

#ifdef __cplusplus
}
#endif
#endif
