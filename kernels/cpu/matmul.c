/*
 * kernels/cpu/matmul.c - out (n_rows, d_out) = x (n_rows, d_in) @ w^T, w (d_out, d_in) of
 * f32/f16/bf16, on the thread pool.
 *
 * Three kernels, because the cost has different limits (the choice: pl_cpu_ctx's thresholds,
 * measured by bench/internal/kernels/bench_kernels):
 * - GEMV (few rows: decode of a handful of sequences): bound by reading the weights, so each
 *   weight row streams from memory exactly once for all rows of x. A task owns a range of
 *   output features (weight rows); it walks them 4 at a time and, for each group of 4, runs
 *   over x in groups of up to 4 rows (2 on AVX2) with a 4x4 (4x2) block of vector
 *   accumulators (dot products along d_in, a tree sum at the end). The 4 weight rows stay in
 *   L1 between x-row groups; f16/bf16 are widened to f32 in registers (F16C / shift).
 * - Own GEMM (AVX-512; batched decode and prefill): register-tiled outer products on a
 *   transposed copy of x, every weight element read from memory once per 256 rows; see its
 *   section. Accumulates each output in one f32 lane over all of d_in, in k order.
 * - OpenBLAS sgemm (single-threaded, one tile of output features per task): large f32
 *   batches where it measures faster, and every batch without AVX-512; f16/bf16 tiles are
 *   first widened into the task's thread scratch (TILE_FLOATS).
 */
#include <cblas.h>
#include <stdatomic.h>

#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"
#include "util/dtype.h"

/* Most activation rows the own GEMM takes (its transposed x is at most 256 x d_in). */
#define GK_MAX_ROWS 256

/* Weight elements widened per f16/bf16 GEMM tile (1 MiB of f32 per thread). */
#define TILE_FLOATS (256u * 1024u)

// ---------------------------------------------------------------------------------------------
// work ranges: a call's work items (GEMV row chunks, GEMM row groups) cut into contiguous
// ranges, one per task; a task takes its own range's items from the front, in order, then
// steals from the back of the others'. A thread thus walks one contiguous stretch of weights,
// where the prefetches (software and hardware) run on from one item into the next, and the
// stealing still evens out a thread slowed by another process.

#define MAX_RANGES 64 /* ranges of one call (more threads just steal) */

typedef struct ranges {
    int n;
    _Atomic uint64_t q[MAX_RANGES]; /* (back << 32) | front: items front .. back-1 untaken */
} ranges;

/* n_items cut into n_ranges (at most MAX_RANGES, at most n_items, at least 1) ranges. */
static void ranges_init(ranges *R, int n_items, int n_ranges) {
    if (n_ranges > MAX_RANGES) n_ranges = MAX_RANGES;
    if (n_ranges > n_items) n_ranges = n_items;
    if (n_ranges < 1) n_ranges = 1;
    R->n = n_ranges;
    for (int r = 0; r < n_ranges; r++) {
        uint64_t front = (uint64_t)n_items * r / n_ranges;
        uint64_t back = (uint64_t)n_items * (r + 1) / n_ranges;
        atomic_init(&R->q[r], back << 32 | front);
    }
}

/* Takes the item at the front (from_back false) or the back of range r; -1 if it is empty. */
static int ranges_take(ranges *R, int r, bool from_back) {
    uint64_t v = atomic_load_explicit(&R->q[r], memory_order_relaxed);
    for (;;) {
        uint32_t front = (uint32_t)v, back = (uint32_t)(v >> 32);
        if (front >= back) return -1;
        uint64_t nv = from_back ? ((uint64_t)(back - 1) << 32) | front
                                : ((uint64_t)back << 32) | (front + 1);
        if (atomic_compare_exchange_weak_explicit(&R->q[r], &v, nv, memory_order_relaxed,
                                                  memory_order_relaxed))
            return (int)(from_back ? back - 1 : front);
    }
}

/* Task r's next item: from the front of its own range (*own true), else from the back of
 * another's; -1 when all are taken. */
static int ranges_next(ranges *R, int r, bool *own) {
    int g = ranges_take(R, r, false);
    *own = g >= 0;
    for (int i = 1; g < 0 && i < R->n; i++) g = ranges_take(R, (r + i) % R->n, true);
    return g;
}

/* The item after g in range r if its owner is likely to take it next (-1 at the range's end). */
static int ranges_peek_next(ranges *R, int r, int g) {
    uint64_t v = atomic_load_explicit(&R->q[r], memory_order_relaxed);
    return g + 1 < (int)(uint32_t)(v >> 32) ? g + 1 : -1;
}

typedef struct mm_job {
    pl_cpu_ctx *c;
    float *out;      /* (n_rows, d_out) */
    const float *x;  /* (n_rows, d_in) */
    const void *w;   /* (d_out, d_in) of dt */
    pl_dtype dt;
    int n_rows, d_in, d_out;
    int rows_per_task; /* output features per task (GEMM) or chunk (GEMV; a multiple of 4) */
    int tile_rows;     /* GEMM f16/bf16: weight rows widened at once */
    ranges chunks;     /* GEMV: chunks of rows_per_task rows, one range per task */
} mm_job;

// ---------------------------------------------------------------------------------------------
// scalar GEMV: reference-speed fallback for CPUs without AVX2

static void gemv_scalar(const mm_job *J, int o_begin, int o_end, float *wrow_f32) {
    const size_t ld = (size_t)J->d_in;
    for (int o = o_begin; o < o_end; o++) {
        const float *wr;
        if (J->dt == PL_DTYPE_F32) {
            wr = (const float *)J->w + (size_t)o * ld;
        } else {
            for (size_t i = 0; i < ld; i++)
                wrow_f32[i] = pl_load_f32(J->w, J->dt, (size_t)o * ld + i);
            wr = wrow_f32;
        }
        for (int r = 0; r < J->n_rows; r++) {
            const float *xr = J->x + (size_t)r * ld;
            float s0 = 0, s1 = 0, s2 = 0, s3 = 0; /* 4 chains hide the add latency */
            size_t i = 0;
            for (; i + 4 <= ld; i += 4) {
                s0 += wr[i] * xr[i];
                s1 += wr[i + 1] * xr[i + 1];
                s2 += wr[i + 2] * xr[i + 2];
                s3 += wr[i + 3] * xr[i + 3];
            }
            for (; i < ld; i++) s0 += wr[i] * xr[i];
            J->out[(size_t)r * J->d_out + o] = (s0 + s1) + (s2 + s3);
        }
    }
}

#ifdef PL_CPU_X86
// ---------------------------------------------------------------------------------------------
// AVX-512 GEMV

/* out[r * d_out + o0 + j] = x_r . w_{o0 + j} for r < R (x rows from x), j < W. R, W, dt are
 * constants at every call site, so the accumulator block lives in registers.
 * pf (or NULL): the next block of 4 weight rows, prefetched while this one streams. Rows are
 * short (1.5-3 KB at d_in 768), too short for the hardware prefetcher to ramp up on each, and
 * without it f16 rows reached only ~60% of the f32 bandwidth (the reorder window covers half
 * as many bytes of loads). */
PL_INLINE PL_TARGET_AVX512 void gemv_blk_avx512(const mm_job *J, const float *x, float *out,
                                                int o0, const int R, const int W,
                                                const pl_dtype dt, const char *pf) {
    const size_t es = pl_dtype_size(dt);
    const size_t ld = (size_t)J->d_in;
    const int d_in = J->d_in;
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < W; j++) acc[r][j] = _mm512_setzero_ps();
    size_t wrow[4];
    for (int j = 0; j < W; j++) wrow[j] = (size_t)(o0 + j) * ld;
    int i = 0;
    for (; i + 16 <= d_in; i += 16) {
        if (pf) { /* this step consumes 64 * es bytes of the block: fetch as much of the next */
            const char *p = pf + (size_t)i * 4 * es;
            for (size_t b = 0; b < 64 * es; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
        }
        __m512 wv[4];
        for (int j = 0; j < W; j++) wv[j] = pl_avx512_load(J->w, dt, wrow[j] + (size_t)i);
        for (int r = 0; r < R; r++) {
            __m512 xv = _mm512_loadu_ps(x + (size_t)r * ld + (size_t)i);
            for (int j = 0; j < W; j++) acc[r][j] = _mm512_fmadd_ps(wv[j], xv, acc[r][j]);
        }
    }
    if (i < d_in) {
        __mmask16 m = pl_avx512_mask(d_in - i);
        __m512 wv[4];
        for (int j = 0; j < W; j++) wv[j] = pl_avx512_load_mask(J->w, dt, wrow[j] + (size_t)i, m);
        for (int r = 0; r < R; r++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + (size_t)r * ld + (size_t)i);
            for (int j = 0; j < W; j++) acc[r][j] = _mm512_fmadd_ps(wv[j], xv, acc[r][j]);
        }
    }
    for (int r = 0; r < R; r++) {
        float *o = out + (size_t)r * J->d_out + o0;
        if (W == 4)
            _mm_storeu_ps(o, pl_avx512_hsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
        else
            for (int j = 0; j < W; j++) o[j] = _mm512_reduce_add_ps(acc[r][j]);
    }
}

/* The next 4-row block's address for prefetching while rows o0.. stream, or NULL past the end
 * (the first x-row group prefetches; later groups find the block in L1). Only rows shorter
 * than a page need it: measured at 1 row, 1 thread, f16 768 wide went from 8.8 to 12.3 GB/s,
 * f32 768 wide was unchanged, and 2048-wide rows (4-8 KB) lost 7-12%, because the hardware
 * streamer already covers them. */
static inline const char *next_block(const mm_job *J, int o0) {
    size_t row_bytes = (size_t)J->d_in * pl_dtype_size(J->dt);
    if (row_bytes > 4096 || o0 + 8 > J->d_out) return NULL;
    return (const char *)J->w + (size_t)(o0 + 4) * row_bytes;
}

/* Every x row against weight rows o0 .. o0+W-1, in x-row groups of 4. */
PL_INLINE PL_TARGET_AVX512 void gemv_rows_avx512(const mm_job *J, int o0, const int W,
                                                 const pl_dtype dt) {
    int r = 0;
    const size_t ld = (size_t)J->d_in, ldo = (size_t)J->d_out;
    const char *pf = W == 4 ? next_block(J, o0) : NULL;
    for (; r + 4 <= J->n_rows; r += 4, pf = NULL)
        gemv_blk_avx512(J, J->x + r * ld, J->out + r * ldo, o0, 4, W, dt, pf);
    switch (J->n_rows - r) {
    case 3: gemv_blk_avx512(J, J->x + r * ld, J->out + r * ldo, o0, 3, W, dt, pf); break;
    case 2: gemv_blk_avx512(J, J->x + r * ld, J->out + r * ldo, o0, 2, W, dt, pf); break;
    case 1: gemv_blk_avx512(J, J->x + r * ld, J->out + r * ldo, o0, 1, W, dt, pf); break;
    default: break;
    }
}

PL_INLINE PL_TARGET_AVX512 void gemv_avx512_dt(const mm_job *J, int o_begin, int o_end,
                                               const pl_dtype dt) {
    int o = o_begin;
    for (; o + 4 <= o_end; o += 4) gemv_rows_avx512(J, o, 4, dt);
    for (; o < o_end; o++) gemv_rows_avx512(J, o, 1, dt);
}

static PL_TARGET_AVX512 void gemv_avx512(const mm_job *J, int o_begin, int o_end) {
    switch (J->dt) {
    case PL_DTYPE_F16: gemv_avx512_dt(J, o_begin, o_end, PL_DTYPE_F16); break;
    case PL_DTYPE_BF16: gemv_avx512_dt(J, o_begin, o_end, PL_DTYPE_BF16); break;
    default: gemv_avx512_dt(J, o_begin, o_end, PL_DTYPE_F32); break;
    }
}

// ---------------------------------------------------------------------------------------------
// AVX2 GEMV: 16 registers hold a 4 (weight rows) x 2 (x rows) accumulator block

PL_INLINE PL_TARGET_AVX2 void gemv_blk_avx2(const mm_job *J, const float *x, float *out, int o0,
                                            const int R, const int W, const pl_dtype dt,
                                            const char *pf) {
    const size_t es = pl_dtype_size(dt);
    const size_t ld = (size_t)J->d_in;
    const int d_in = J->d_in;
    __m256 acc[2][4];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < W; j++) acc[r][j] = _mm256_setzero_ps();
    size_t wrow[4];
    for (int j = 0; j < W; j++) wrow[j] = (size_t)(o0 + j) * ld;
    int i = 0;
    for (; i + 8 <= d_in; i += 8) {
        if (pf && (i & 15) == 0) { /* 2 steps consume 64 * es bytes of the block */
            const char *p = pf + (size_t)i * 4 * es;
            for (size_t b = 0; b < 64 * es; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
        }
        __m256 wv[4];
        for (int j = 0; j < W; j++) wv[j] = pl_avx2_load(J->w, dt, wrow[j] + (size_t)i);
        for (int r = 0; r < R; r++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)r * ld + (size_t)i);
            for (int j = 0; j < W; j++) acc[r][j] = _mm256_fmadd_ps(wv[j], xv, acc[r][j]);
        }
    }
    if (i < d_in) {
        int n = d_in - i;
        __m256 wv[4];
        for (int j = 0; j < W; j++) wv[j] = pl_avx2_load_part(J->w, dt, wrow[j] + (size_t)i, n);
        for (int r = 0; r < R; r++) {
            __m256 xv = pl_avx2_load_part(x + (size_t)r * ld, PL_DTYPE_F32, (size_t)i, n);
            for (int j = 0; j < W; j++) acc[r][j] = _mm256_fmadd_ps(wv[j], xv, acc[r][j]);
        }
    }
    for (int r = 0; r < R; r++) {
        float *o = out + (size_t)r * J->d_out + o0;
        if (W == 4)
            _mm_storeu_ps(o, pl_avx2_hsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
        else
            for (int j = 0; j < W; j++) o[j] = pl_avx2_hsum(acc[r][j]);
    }
}

PL_INLINE PL_TARGET_AVX2 void gemv_rows_avx2(const mm_job *J, int o0, const int W,
                                             const pl_dtype dt) {
    int r = 0;
    const size_t ld = (size_t)J->d_in, ldo = (size_t)J->d_out;
    const char *pf = W == 4 ? next_block(J, o0) : NULL;
    for (; r + 2 <= J->n_rows; r += 2, pf = NULL)
        gemv_blk_avx2(J, J->x + r * ld, J->out + r * ldo, o0, 2, W, dt, pf);
    if (r < J->n_rows) gemv_blk_avx2(J, J->x + r * ld, J->out + r * ldo, o0, 1, W, dt, pf);
}

PL_INLINE PL_TARGET_AVX2 void gemv_avx2_dt(const mm_job *J, int o_begin, int o_end,
                                           const pl_dtype dt) {
    int o = o_begin;
    for (; o + 4 <= o_end; o += 4) gemv_rows_avx2(J, o, 4, dt);
    for (; o < o_end; o++) gemv_rows_avx2(J, o, 1, dt);
}

static PL_TARGET_AVX2 void gemv_avx2(const mm_job *J, int o_begin, int o_end) {
    switch (J->dt) {
    case PL_DTYPE_F16: gemv_avx2_dt(J, o_begin, o_end, PL_DTYPE_F16); break;
    case PL_DTYPE_BF16: gemv_avx2_dt(J, o_begin, o_end, PL_DTYPE_BF16); break;
    default: gemv_avx2_dt(J, o_begin, o_end, PL_DTYPE_F32); break;
    }
}

// ---------------------------------------------------------------------------------------------
// own GEMM (AVX-512): outer products of a transposed copy of x with broadcast weights
//
// x (R, K), R <= GK_MAX_ROWS, is first transposed (on the pool) into xt (K, Rp), Rp = R
// rounded up to 16, rows past R zero: one k of all rows is Rp contiguous floats. A tile is V
// vectors of rows (16 V) by J weight rows, with V x J = 24 accumulators in registers:
//     acc[j][v] += xt[k][16v .. 16v+15] * broadcast(w[j][k])        for every k
// V vector loads and J broadcasts per 16 V J multiply-adds, so the FMA units set the pace
// (V 1..4 -> J 24, 12, 8, 6; more than 4 vectors of rows run as several tiles with J 6).
// Measured in L1, one core: 168-185 GFLOP/s of the 211 a pure FMA loop reaches.
//
// Blocking. Work comes in groups of GK_GROUP_ROWS weight rows (whole J-blocks of J rows); each
// thread owns a contiguous range of groups and walks it in order, then steals groups from the back
// of the others' ranges (see gk_work); k runs in chunks of KC. For each chunk, the group's weights
// are widened (f16/bf16) or copied (f32) into an L1 buffer (rows, KC), so every broadcast has a
// constant offset (with 24 row pointers gcc spilled), and each tile's xt slice (KC, 16 V) is loaded
// into L1 once and used for all J-blocks of the group. Partial sums wait in a per-(tile, J-block)
// slot between chunks; after the last chunk the group's sums are stored row by row.
// Memory: while a group is multiplied the next group is prefetched into L2 (whole rows, a
// few lines per k), and with one or two row vectors, where the FMAs keep pace with memory,
// also the next chunk into L1 for the copy. Every weight element is read from memory once per
// call. KC 64 and groups of 24 rows keep buffer, xt slice and the prefetched chunk in L1
// together (bench: 32 rows x 2048 x 768, 2 threads, 180 -> 196 GFLOP/s against KC 128 and
// 48 rows, whose copies evicted the tiles' operands).

#define KC 64              /* k per chunk */
#define GK_GROUP_ROWS 24   /* weight rows per group (whole J-blocks) */
#define GK_SLOT 384        /* floats of partial sums per (tile, J-block): V J 16 */

typedef struct gk_job {
    pl_cpu_ctx *c;
    float *out;        /* (R, N) */
    const float *x;    /* (R, K) */
    const void *w;     /* (N, K) of dt */
    pl_dtype dt;
    int R, K, N;
    float *xt;         /* (K, Rp) */
    int Rp, nv;        /* Rp = 16 nv */
    int kt_per_task;   /* transpose: k's per task */
    int J, GJ;         /* weight rows per J-block, J-blocks per group */
    int n_groups;
    ranges groups; /* one range of groups per task */
} gk_job;

/* J weight rows per tile for nv vectors of rows. */
static int gk_j(int nv) { return nv >= 4 ? 6 : 24 / nv; }

/* Floats of a thread's scratch: the widened chunk (GJ J, KC), then the partial sums. */
static size_t gk_scratch_floats(int J, int GJ, int nv) {
    return (size_t)GJ * J * KC + (size_t)((nv + 3) / 4) * GJ * GK_SLOT;
}

/* r[i] (16 rows of 16 floats) becomes its transpose: r[c] = column c. Three rounds of
 * in-lane interleaves and one of 128-bit lane shuffles (48 shuffles for 256 elements;
 * gathering the columns instead cost 10% of a 32-row matmul). */
PL_INLINE PL_TARGET_AVX512 void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4 i + q], lane L = column 4 L + q of rows 4 i .. 4 i + 3 */
    for (int i = 0; i < 4; i++) {
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int q = 0; q < 4; q++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x88);
        __m512 w0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xdd);
        __m512 v1 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x88);
        __m512 w1 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xdd);
        r[q] = _mm512_shuffle_f32x4(v0, v1, 0x88);
        r[8 + q] = _mm512_shuffle_f32x4(v0, v1, 0xdd);
        r[4 + q] = _mm512_shuffle_f32x4(w0, w1, 0x88);
        r[12 + q] = _mm512_shuffle_f32x4(w0, w1, 0xdd);
    }
}

/* Transpose task: xt[k][r] = x[r][k] (0 for r >= R) for this task's k's, in 16 x 16 blocks. */
static PL_TARGET_AVX512 void gk_transpose_task(void *arg, int task, int thread) {
    (void)thread;
    const gk_job *G = arg;
    int k0 = task * G->kt_per_task, k1 = k0 + G->kt_per_task < G->K ? k0 + G->kt_per_task : G->K;
    for (int r0 = 0; r0 < G->Rp; r0 += 16) {
        int nr = G->R - r0 < 16 ? G->R - r0 : 16;
        for (int k = k0; k < k1; k += 16) {
            int nk = k1 - k < 16 ? k1 - k : 16;
            __mmask16 m = pl_avx512_mask(nk);
            __m512 b[16];
            for (int i = 0; i < 16; i++)
                b[i] = i < nr ? _mm512_maskz_loadu_ps(m, G->x + (size_t)(r0 + i) * G->K + k)
                              : _mm512_setzero_ps();
            transpose16(b);
            for (int i = 0; i < nk; i++)
                _mm512_storeu_ps(G->xt + (size_t)(k + i) * G->Rp + r0, b[i]);
        }
    }
}

/* dst (rows_pad, KC) f32 = columns c0 .. c0+n of weight rows n0 .. n0+rows-1; rows rows ..
 * rows_pad-1 zero. */
PL_INLINE PL_TARGET_AVX512 void gk_widen(float *dst, const void *w, size_t ld, int n0,
                                         int rows, int rows_pad, int c0, int n,
                                         const pl_dtype dt) {
    const __mmask16 tm = pl_avx512_mask(n & 15);
    const int full = n & ~15;
    for (int j = 0; j < rows; j++, dst += KC) {
        size_t base = (size_t)(n0 + j) * ld + (size_t)c0;
        int i = 0;
        for (; i < full; i += 16) _mm512_storeu_ps(dst + i, pl_avx512_load(w, dt, base + i));
        if (tm) _mm512_storeu_ps(dst + i, pl_avx512_load_mask(w, dt, base + i, tm));
    }
    for (int j = rows; j < rows_pad; j++, dst += KC)
        for (int i = 0; i < n; i += 16) _mm512_storeu_ps(dst + i, _mm512_setzero_ps());
}

/* The next group's weights, prefetched into L2 while this group is multiplied: n_lines
 * lines from base (whole rows, contiguous in w), per_call of them by each tile call, spread
 * evenly over its k's (in bursts of two per k they stalled the loads behind full fill
 * buffers: 32 rows x 2048 x 768, 2 threads, 518 -> 473 us). Software prefetches are capped
 * by the L1 fill buffers (~10 GB/s per core measured), so a contiguous walk, which also
 * trains the L2 streamer, beats walking the next chunk row piece by row piece. */
typedef struct gk_pf {
    const char *base;
    int n_lines;
    int per_call; /* <= 2 KC */
} gk_pf;

/* The J-block's rows of the next chunk (the one the next widen copies), prefetched into L1
 * one line per k, so that copy hits L1: rows rows of stride bytes apart from base, 1 << shift
 * lines each. */
typedef struct gk_near {
    const char *base;
    size_t stride;
    int rows, shift;
} gk_near;

/* One tile, one chunk: acc[j][v] (+)= sum_{k < n} xt[k][16 v ..] * w[j KC + k], the partial
 * sums read from (unless first) and written back to accm (J, V, 16); lines l0 ..
 * l0 + per_call - 1 of the group prefetch (those < n_lines) are issued over the n k's, and
 * the near prefetch's lines one per k. */
PL_INLINE PL_TARGET_AVX512 void gk_tile(const float *xt, size_t ldx, const float *w, int n,
                                        float *accm, bool first, const gk_pf *pf, int l0,
                                        const gk_near *nr, const int V, const int J) {
    __m512 acc[24];
    if (first) {
#pragma GCC unroll 24
        for (int a = 0; a < V * J; a++) acc[a] = _mm512_setzero_ps();
    } else {
#pragma GCC unroll 24
        for (int a = 0; a < V * J; a++) acc[a] = _mm512_load_ps(accm + 16 * a);
    }
    int todo = pf->n_lines - l0 < pf->per_call ? pf->n_lines - l0 : pf->per_call;
    const char *pp = pf->base + (size_t)l0 * 64;
    int spread = 0;
    if (todo < 0) todo = 0;
    const int near_n = nr->rows << nr->shift, near_mask = (1 << nr->shift) - 1;
    for (int k = 0; k < n; k++) {
        if (k < near_n)
            _mm_prefetch(nr->base + (size_t)(k >> nr->shift) * nr->stride +
                             (size_t)(k & near_mask) * 64,
                         _MM_HINT_T0);
        for (spread += todo; spread >= n; spread -= n) { /* todo lines evenly over n k's */
            _mm_prefetch(pp, _MM_HINT_T1);
            pp += 64;
        }
        __m512 xv[4];
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) xv[v] = _mm512_loadu_ps(xt + (size_t)k * ldx + 16 * v);
#pragma GCC unroll 24
        for (int j = 0; j < J; j++) {
            __m512 b = _mm512_set1_ps(w[j * KC + k]);
#pragma GCC unroll 4
            for (int v = 0; v < V; v++) acc[j * V + v] = _mm512_fmadd_ps(xv[v], b, acc[j * V + v]);
        }
    }
#pragma GCC unroll 24
    for (int a = 0; a < V * J; a++) _mm512_store_ps(accm + 16 * a, acc[a]);
}

/* The tile shapes, each its own function so that register allocation sees nothing but the
 * tile (inlined into the loops around it, gcc spilled an x vector to the stack). */
typedef void (*gk_tile_fn)(const float *xt, size_t ldx, const float *w, int n, float *accm,
                           bool first, const gk_pf *pf, int l0, const gk_near *nr);
#define GK_TILE_FN(V, J)                                                                        \
    static __attribute__((noinline)) PL_TARGET_AVX512 void gk_tile_##V##x##J(                  \
        const float *xt, size_t ldx, const float *w, int n, float *accm, bool first,            \
        const gk_pf *pf, int l0, const gk_near *nr) {                                           \
        gk_tile(xt, ldx, w, n, accm, first, pf, l0, nr, V, J);                                  \
    }
GK_TILE_FN(1, 24)
GK_TILE_FN(2, 12)
GK_TILE_FN(3, 8)
GK_TILE_FN(4, 6)
GK_TILE_FN(1, 6)
GK_TILE_FN(2, 6)
GK_TILE_FN(3, 6)

static gk_tile_fn gk_tile_for(int V, int J) {
    if (J == 24) return gk_tile_1x24;
    if (J == 12) return gk_tile_2x12;
    if (J == 8) return gk_tile_3x8;
    return V == 4 ? gk_tile_4x6 : V == 3 ? gk_tile_3x6 : V == 2 ? gk_tile_2x6 : gk_tile_1x6;
}

/* out rows of the group's J-blocks g .. g+nb-1 = their finished sums. A slot holds, for
 * each of its J columns, V vectors of 16 rows; 16 columns at a time are transposed into 16
 * row pieces and stored (scattering the columns straight into out hit one L1 set for every
 * row and took 17% of the time). */
static PL_TARGET_AVX512 void gk_store(const gk_job *G, const float *accs, int g, int nb) {
    const int J = G->J, N = G->N;
    int n_tiles = J == 6 ? (G->nv + 3) / 4 : 1;
    for (int t = 0; t < n_tiles; t++) {
        int v0 = 4 * t, V = J == 6 ? (G->nv - v0 < 4 ? G->nv - v0 : 4) : G->nv;
        for (int b = 0; b < nb; b++) {
            const float *slot = accs + ((size_t)t * G->GJ + b) * GK_SLOT;
            int n0 = (g + b) * J;
            for (int j0 = 0; j0 < J && n0 + j0 < N; j0 += 16) {
                int nj = J - j0 < 16 ? J - j0 : 16;
                if (n0 + j0 + nj > N) nj = N - n0 - j0;
                __mmask16 m = pl_avx512_mask(nj);
                for (int v = 0; v < V; v++) {
                    __m512 c[16];
                    for (int j = 0; j < 16; j++)
                        c[j] = j < nj ? _mm512_load_ps(slot + ((size_t)(j0 + j) * V + v) * 16)
                                      : _mm512_setzero_ps();
                    transpose16(c); /* c[l] = row 16 (v0 + v) + l, columns j0 .. */
                    int r0 = 16 * (v0 + v), nr = G->R - r0 < 16 ? G->R - r0 : 16;
                    for (int l = 0; l < nr; l++)
                        _mm512_mask_storeu_ps(G->out + (size_t)(r0 + l) * N + n0 + j0, m, c[l]);
                }
            }
        }
    }
}

/* Group g (J-blocks g GJ .. g GJ + GJ - 1): every chunk, tile and J-block, then the store.
 * Group next (or -1) is the one this thread will most likely take next: prefetched into L2
 * across this group's tile calls. */
PL_INLINE PL_TARGET_AVX512 void gk_group(const gk_job *G, float *scratch, int g, int next,
                                         const pl_dtype dt) {
    const int K = G->K, N = G->N, J = G->J, nv = G->nv, n_chunks = (K + KC - 1) / KC;
    const size_t es = pl_dtype_size(dt), row_bytes = (size_t)K * es;
    const int near_shift = es == 4 ? 2 : 1; /* log2(lines per row of a chunk: KC es / 64) */
    float *wbuf = scratch;                                   /* (GJ J, KC) */
    float *accs = scratch + (size_t)G->GJ * J * KC;          /* (tiles, GJ, GK_SLOT) */
    const int n_tiles = J == 6 ? (nv + 3) / 4 : 1;
    const int n_jb = (N + J - 1) / J;
    int jb0 = g * G->GJ, nb = n_jb - jb0 < G->GJ ? n_jb - jb0 : G->GJ;
    int n0 = jb0 * J, rows = N - n0 < nb * J ? N - n0 : nb * J;
    int nn0 = next >= 0 ? next * G->GJ * J : N, nrows = N - nn0 < G->GJ * J ? N - nn0 : G->GJ * J;
    gk_pf pf = {.base = (const char *)G->w + (size_t)nn0 * row_bytes,
                .n_lines = nrows > 0 ? (int)(((size_t)nrows * row_bytes + 63) / 64) : 0};
    int calls = n_chunks * n_tiles * nb;
    pf.per_call = (pf.n_lines + calls - 1) / calls;
    if (pf.per_call > 2 * KC) pf.per_call = 2 * KC;
    int l0 = 0;
    for (int c = 0; c < n_chunks; c++) {
        int c0 = c * KC, n = K - c0 < KC ? K - c0 : KC;
        gk_widen(wbuf, G->w, (size_t)K, n0, rows, nb * J, c0, n, dt);
        for (int t = 0; t < nv; t += 4) {
            int V = J == 6 ? (nv - t < 4 ? nv - t : 4) : nv;
            gk_tile_fn tile = gk_tile_for(V, J);
            const float *xs = G->xt + (size_t)c0 * G->Rp + 16 * t;
            for (int b = 0; b < nb; b++, l0 += pf.per_call) {
                /* J-block b's rows of the next chunk: same rows further right, or the next
                 * group's rows at column 0 */
                gk_near nr = {.stride = row_bytes, .shift = near_shift};
                if (nv > 2) {
                    /* compute bound: the copy's stall matters less than the extra
                     * instructions (measured 3% slower at 64 rows, 5% faster at 32) */
                } else if (c + 1 < n_chunks) {
                    nr.base = (const char *)G->w + (size_t)(n0 + b * J) * row_bytes +
                              (size_t)(c0 + KC) * es;
                    nr.rows = rows - b * J < J ? rows - b * J : J;
                } else if (b * J < nrows) {
                    nr.base = (const char *)G->w + (size_t)(nn0 + b * J) * row_bytes;
                    nr.rows = nrows - b * J < J ? nrows - b * J : J;
                }
                if (nr.rows < 0) nr.rows = 0;
                tile(xs, (size_t)G->Rp, wbuf + (size_t)b * J * KC, n,
                     accs + ((size_t)(t / 4) * G->GJ + b) * GK_SLOT, c == 0, &pf, l0, &nr);
            }
            if (J != 6) break;
        }
    }
    gk_store(G, accs, jb0, nb);
}

PL_INLINE PL_TARGET_AVX512 void gk_work(gk_job *G, float *scratch, int r, const pl_dtype dt) {
    /* a group of the own range prefetches the next; stolen groups have no next */
    bool own;
    for (int g; (g = ranges_next(&G->groups, r, &own)) >= 0;)
        gk_group(G, scratch, g, own ? ranges_peek_next(&G->groups, r, g) : -1, dt);
}

static PL_TARGET_AVX512 void gk_task(void *arg, int task, int thread) {
    gk_job *G = arg;
    float *scratch = G->c->scratch[thread];
    switch (G->dt) {
    case PL_DTYPE_F16: gk_work(G, scratch, task, PL_DTYPE_F16); break;
    case PL_DTYPE_BF16: gk_work(G, scratch, task, PL_DTYPE_BF16); break;
    default: gk_work(G, scratch, task, PL_DTYPE_F32); break;
    }
}

#endif /* PL_CPU_X86 */

// ---------------------------------------------------------------------------------------------
// tasks

static void gemv_chunk(mm_job *J, int chunk, int thread) {
    int o0 = chunk * J->rows_per_task;
    int o1 = o0 + J->rows_per_task < J->d_out ? o0 + J->rows_per_task : J->d_out;
    switch (J->c->isa) {
#ifdef PL_CPU_X86
    case PL_CPU_ISA_AVX512: gemv_avx512(J, o0, o1); break;
    case PL_CPU_ISA_AVX2: gemv_avx2(J, o0, o1); break;
#endif
    default: gemv_scalar(J, o0, o1, J->c->scratch[thread]); break;
    }
}

/* Task r: range r's chunks in order, then the others' from their backs. */
static void gemv_task(void *arg, int r, int thread) {
    mm_job *J = arg;
    bool own;
    for (int ch; (ch = ranges_next(&J->chunks, r, &own)) >= 0;) gemv_chunk(J, ch, thread);
}

static void gemm_task(void *arg, int task, int thread) {
    const mm_job *J = arg;
    int o0 = task * J->rows_per_task;
    int o1 = o0 + J->rows_per_task < J->d_out ? o0 + J->rows_per_task : J->d_out;
    const int d_in = J->d_in;
    if (J->dt == PL_DTYPE_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, J->n_rows, o1 - o0, d_in, 1.0f,
                    J->x, d_in, (const float *)J->w + (size_t)o0 * d_in, d_in, 0.0f, J->out + o0,
                    J->d_out);
        return;
    }
    float *tile = J->c->scratch[thread]; /* (tile_rows, d_in) f32 */
    for (int t0 = o0; t0 < o1; t0 += J->tile_rows) {
        int n = o1 - t0 < J->tile_rows ? o1 - t0 : J->tile_rows;
        const uint16_t *src = (const uint16_t *)J->w + (size_t)t0 * d_in;
        pl_cpu_convert_row(J->c->isa, tile, src, J->dt, (size_t)n * d_in);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, J->n_rows, n, d_in, 1.0f, J->x, d_in,
                    tile, d_in, 0.0f, J->out + t0, J->d_out);
    }
}

static int round_up(int v, int m) { return (v + m - 1) / m * m; }

#ifdef PL_CPU_X86
/* The own GEMM (R <= GK_MAX_ROWS): transpose x on the pool, then the J-block ranges. */
static pl_status own_gemm(pl_cpu_ctx *c, float *out, const float *x, const void *w, pl_dtype dt,
                          int R, int K, int N) {
    gk_job G = {.c = c, .out = out, .x = x, .w = w, .dt = dt, .R = R, .K = K, .N = N};
    G.Rp = round_up(R, 16);
    G.nv = G.Rp / 16;
    G.J = gk_j(G.nv);
    G.GJ = (GK_GROUP_ROWS + G.J - 1) / G.J;
    PL_TRY(pl_cpu_reserve(c, gk_scratch_floats(G.J, G.GJ, G.nv), 0));
    PL_TRY(pl_cpu_reserve_shared(c, (size_t)K * G.Rp));
    G.xt = c->shared;

    int n_t = pl_cpu_n_tasks(c, (size_t)G.Rp * K, 1u << 14);
    G.kt_per_task = (K + n_t - 1) / n_t;
    pl_threadpool_run(c->pool, (K + G.kt_per_task - 1) / G.kt_per_task, gk_transpose_task, &G);

    /* One contiguous range of groups per thread (so each group's prefetch of the next one
     * pays off: with 8 short tasks per thread as before, 768x768 at 32 rows took 12% longer),
     * balanced by stealing groups, not by small tasks. */
    int n_jb = (N + G.J - 1) / G.J;
    G.n_groups = (n_jb + G.GJ - 1) / G.GJ;
    int n_ranges = c->own_ranges > 0 ? c->own_ranges : c->n_threads;
    if ((size_t)R * K * N < (1u << 18) && c->own_ranges <= 0) n_ranges = 1; /* a wake-up
                                                                         costs more */
    ranges_init(&G.groups, G.n_groups, n_ranges);
    pl_threadpool_run(c->pool, G.groups.n, gk_task, &G);
    return PL_OK;
}
#endif

pl_status pl_cpu_matmul(pl_backend *be, float *out, const float *x, const void *w,
                        pl_dtype w_dtype, int n_rows, int d_in, int d_out) {
    PL_TRY(pl_ref_check_matmul(out, x, w, w_dtype, n_rows, d_in, d_out));
    if (n_rows == 0) return PL_OK;
    pl_cpu_ctx *c = be->ctx;
    mm_job J = {.c = c, .out = out, .x = x, .w = w, .dt = w_dtype, .n_rows = n_rows,
                .d_in = d_in, .d_out = d_out};
    pl_cpu_mm_path path = c->mm_force;
    bool own_ok = c->isa == PL_CPU_ISA_AVX512;
    if (path == PL_CPU_MM_OWN && !own_ok) path = PL_CPU_MM_AUTO;
    if (path == PL_CPU_MM_AUTO) {
        int d = w_dtype == PL_DTYPE_F32 ? 0 : 1;
        if (c->isa == PL_CPU_ISA_AVX512)
            path = n_rows < c->own_min_rows[d] ? PL_CPU_MM_GEMV
                   : c->own_max_rows[d] > 0 && n_rows > c->own_max_rows[d] ? PL_CPU_MM_BLAS
                                                                           : PL_CPU_MM_OWN;
        else
            path = n_rows >= c->gemm_min_rows ? PL_CPU_MM_BLAS : PL_CPU_MM_GEMV;
    }
#ifdef PL_CPU_X86
    if (path == PL_CPU_MM_OWN) {
        /* blocks of GK_MAX_ROWS rows: each reads the weights again, from L3 if they fit */
        for (int r0 = 0; r0 < n_rows; r0 += GK_MAX_ROWS) {
            int r = n_rows - r0 < GK_MAX_ROWS ? n_rows - r0 : GK_MAX_ROWS;
            PL_TRY(own_gemm(c, out + (size_t)r0 * d_out, x + (size_t)r0 * d_in, w, w_dtype, r,
                            d_in, d_out));
        }
        return PL_OK;
    }
#endif
    bool gemm = path == PL_CPU_MM_BLAS;
    if (gemm) {
        /* Tiles of >= 64 features keep sgemm's packing overhead small; 2 per thread balance
         * a core lost to another process. */
        int n_tasks = pl_cpu_n_tasks(c, (size_t)d_out, 64);
        if (n_tasks > 2 * c->n_threads) n_tasks = 2 * c->n_threads;
        J.rows_per_task = round_up((d_out + n_tasks - 1) / n_tasks, 16);
        if (w_dtype != PL_DTYPE_F32) {
            int tr = (int)(TILE_FLOATS / (unsigned)d_in) / 16 * 16;
            J.tile_rows = tr < 16 ? 16 : tr;
            PL_TRY(pl_cpu_reserve(c, (size_t)J.tile_rows * d_in, 0));
        }
        pl_threadpool_run(c->pool, (d_out + J.rows_per_task - 1) / J.rows_per_task, gemm_task, &J);
        return PL_OK;
    }
    if (c->isa == PL_CPU_ISA_SCALAR && w_dtype != PL_DTYPE_F32)
        PL_TRY(pl_cpu_reserve(c, (size_t)d_in, 0));
    /* Chunks of ~64K multiply-adds at least: below that a wake-up costs more than the work. */
    int n_chunks = pl_cpu_n_tasks(c, (size_t)d_out * d_in * n_rows, 1u << 16);
    /* a whole number of chunks per thread: 9 chunks on 2 threads take 5 chunk-times, 10 take 5
     * shorter ones */
    n_chunks = round_up(n_chunks, c->n_threads);
    J.rows_per_task = round_up((d_out + n_chunks - 1) / n_chunks, 4);
    n_chunks = (d_out + J.rows_per_task - 1) / J.rows_per_task;
    ranges_init(&J.chunks, n_chunks, c->n_threads);
    pl_threadpool_run(c->pool, J.chunks.n, gemv_task, &J);
    return PL_OK;
}
