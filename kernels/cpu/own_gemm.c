/*
 * kernels/cpu/own_gemm.c - the own register-tiled GEMM (AVX-512 and AVX2): out (R, N) = x (R,
 * K) @ w^T, w (N, K) of any weight type, R <= PL_CPU_OWN_MAX_ROWS, for batched decode and
 * prefill (matmul.c decides when).
 *
 * Outer products of a transposed copy of x with broadcast weights. x is first transposed (on
 * the pool) into xt (K, Rp), Rp = R rounded up to the vector width L (16 floats for AVX-512,
 * 8 for AVX2), rows past R zero: one k of all rows is Rp contiguous floats. A tile is V
 * vectors of rows (L V rows) by J weight rows, with V x J accumulators in registers:
 *     acc[j][v] += xt[k][L v .. L v + L-1] * broadcast(w[j][k])        for every k
 * V vector loads and J broadcasts per L V J multiply-adds, so the FMA units set the pace.
 * AVX-512 (32 registers) holds 24 accumulators: V 1..4 -> J 24, 12, 8, 6, more than 4 vectors
 * of rows run as several tiles with J 6. AVX2 (16 registers) holds 12, plus V x vectors and
 * one broadcast: V 1 -> J 12, more than 1 vector as tiles of 2 x 6 (the shape of BLIS's
 * Haswell kernel). Measured in L1, one core: AVX-512 168-185 GFLOP/s of the 211 a pure FMA
 * loop reaches (Xeon); AVX2 2 x 6 87-90 of ~98 (Zen 3), 72-81 for the whole kernel.
 *
 * Blocking. Work comes in groups of GK_GROUP_ROWS weight rows (whole J-blocks of J rows); each
 * thread owns a contiguous range of groups and walks it in order, then steals groups from the
 * back of the others' ranges (ranges.h); k runs in chunks of KC. For each chunk, the group's
 * weights are widened (f16/bf16), copied (f32) or dequantised (the quantised types, whose
 * chunks are whole 32-element pieces: dequant.c) into an L1 buffer (rows, KC), so every
 * broadcast has a constant offset (with 24 row pointers gcc spilled), and each tile's xt
 * slice (KC, L V) is loaded into L1 once and used for all J-blocks of the group. Partial sums
 * wait in a per-(tile, J-block) slot between chunks; after the last chunk the group's sums
 * are transposed back and stored row by row. Accumulates each output in one f32 lane over
 * all of K, in k order.
 * Memory: while a group is multiplied the next group is prefetched into L2 (whole rows, a few
 * lines per k), and with at most 32 rows, where the FMAs keep pace with memory, also the next
 * chunk into L1 for the copy. Every weight element is read from memory once per call. KC 64
 * and groups of 24 rows keep buffer, xt slice and the prefetched chunk in L1 together (bench,
 * AVX-512: 32 rows x 2048 x 768, 2 threads, 180 -> 196 GFLOP/s against KC 128 and 48 rows,
 * whose copies evicted the tiles' operands).
 *
 * The driver (pl_cpu_own_gemm, gk_group) is ISA-neutral; each ISA supplies its transpose, widen,
 * tiles and store through a gk_isa table.
 */
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/ranges.h"
#include "util/dtype.h"

#ifdef PL_CPU_X86

#define KC 64            /* k per chunk */
#define GK_GROUP_ROWS 24 /* weight rows per group (whole J-blocks) */
#define GK_SLOT 384      /* floats of partial sums per (tile, J-block): V J L at most */

typedef struct gk_job gk_job;

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

/* One tile, one chunk: acc[j][v] (+)= sum_{k < n} xt[k][L v ..] * w[j KC + k], the partial
 * sums read from (unless first) and written back to accm (J, V, L). */
typedef void (*gk_tile_fn)(const float *xt, size_t ldx, const float *w, int n, float *accm,
                           bool first, const gk_pf *pf, int l0, const gk_near *nr);

/* What an ISA brings to the driver. */
typedef struct gk_isa {
    int lanes;  /* floats per vector, L */
    int n_acc;  /* accumulator registers of a tile: J = n_acc / min(nv, tile_v) */
    int tile_v; /* most vectors of rows per tile */
    pl_threadpool_fn transpose_task; /* xt = x^T for task's k's (gk_job) */
    /* dst (rows_pad, KC) f32 = columns c0 .. c0+n of weight rows n0 .. n0+rows-1, the rest
     * of each row up to n and rows rows .. rows_pad-1 zero */
    void (*widen)(float *dst, const void *w, pl_dtype dt, size_t ld, int n0, int rows,
                  int rows_pad, int c0, int n);
    gk_tile_fn (*tile_for)(int V, int J);
    /* out rows of J-blocks g .. g+nb-1 of a group = their finished sums in accs */
    void (*store)(const gk_job *G, const float *accs, int g, int nb);
} gk_isa;

struct gk_job {
    const gk_isa *isa;
    float *out;     /* (R, N) */
    const float *x; /* (R, K) */
    const void *w;  /* (N, K) of wt */
    pl_wtype wt;
    pl_dtype dt;    /* wt as a pl_dtype for f32/f16/bf16, AUTO for the quantised types */
    pl_cpu_isa cpu_isa;
    size_t row_bytes;
    int R, K, N;
    float *xt;       /* (K, Rp) */
    int Rp, nv;      /* Rp = L nv */
    int kt_per_task; /* transpose: k's per task */
    int J, GJ;       /* weight rows per J-block, J-blocks per group */
    int n_tiles;     /* tiles of up to tile_v vectors across the rows */
    int n_groups;
    float **scratch; /* per thread */
    pl_ranges groups; /* one range of groups per task */
};

/* The prefetches of one tile call, issued over its n k's: lines l0 .. l0 + per_call - 1 of
 * the group prefetch (those < n_lines) evenly, and the near prefetch's lines one per k. */
typedef struct gk_pf_walk {
    const char *pp;
    int todo, spread, n;
    const gk_near *nr;
    int near_n, near_mask;
} gk_pf_walk;

PL_INLINE gk_pf_walk gk_pf_begin(const gk_pf *pf, int l0, const gk_near *nr, int n) {
    int todo = pf->n_lines - l0 < pf->per_call ? pf->n_lines - l0 : pf->per_call;
    return (gk_pf_walk){.pp = pf->base + (size_t)l0 * 64, .todo = todo < 0 ? 0 : todo, .n = n,
                        .nr = nr, .near_n = nr->rows << nr->shift,
                        .near_mask = (1 << nr->shift) - 1};
}

/* The prefetches due over k's k .. k+step-1 (step a constant: 1, or 4 where a k has too few
 * multiply-adds to hide the bookkeeping). */
PL_INLINE void gk_pf_step(gk_pf_walk *p, int k, const int step) {
    for (int l = k; l < k + step && l < p->near_n; l++)
        _mm_prefetch(p->nr->base + (size_t)(l >> p->nr->shift) * p->nr->stride +
                         (size_t)(l & p->near_mask) * 64,
                     _MM_HINT_T0);
    for (p->spread += step * p->todo; p->spread >= p->n; p->spread -= p->n) {
        _mm_prefetch(p->pp, _MM_HINT_T1);
        p->pp += 64;
    }
}

// ---------------------------------------------------------------------------------------------
// AVX-512

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
static PL_TARGET_AVX512 void transpose_avx512(void *arg, int task, int thread) {
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

PL_INLINE PL_TARGET_AVX512 void widen_avx512_dt(float *dst, const void *w, size_t ld, int n0,
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

static PL_TARGET_AVX512 void widen_avx512(float *dst, const void *w, pl_dtype dt, size_t ld,
                                          int n0, int rows, int rows_pad, int c0, int n) {
    switch (dt) {
    case PL_DTYPE_F16: widen_avx512_dt(dst, w, ld, n0, rows, rows_pad, c0, n, PL_DTYPE_F16); break;
    case PL_DTYPE_BF16: widen_avx512_dt(dst, w, ld, n0, rows, rows_pad, c0, n, PL_DTYPE_BF16); break;
    default: widen_avx512_dt(dst, w, ld, n0, rows, rows_pad, c0, n, PL_DTYPE_F32); break;
    }
}

PL_INLINE PL_TARGET_AVX512 void tile_avx512(const float *xt, size_t ldx, const float *w, int n,
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
    gk_pf_walk p = gk_pf_begin(pf, l0, nr, n);
    for (int k = 0; k < n; k++) {
        gk_pf_step(&p, k, 1);
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
#define GK_TILE_FN(ISA, V, J)                                                                   \
    static __attribute__((noinline)) PL_TARGET_##ISA void tile_##ISA##_##V##x##J(              \
        const float *xt, size_t ldx, const float *w, int n, float *accm, bool first,            \
        const gk_pf *pf, int l0, const gk_near *nr) {                                           \
        tile_##ISA(xt, ldx, w, n, accm, first, pf, l0, nr, V, J);                               \
    }
#define tile_AVX512 tile_avx512
GK_TILE_FN(AVX512, 1, 24)
GK_TILE_FN(AVX512, 2, 12)
GK_TILE_FN(AVX512, 3, 8)
GK_TILE_FN(AVX512, 4, 6)
GK_TILE_FN(AVX512, 1, 6)
GK_TILE_FN(AVX512, 2, 6)
GK_TILE_FN(AVX512, 3, 6)

static gk_tile_fn tile_for_avx512(int V, int J) {
    if (J == 24) return tile_AVX512_1x24;
    if (J == 12) return tile_AVX512_2x12;
    if (J == 8) return tile_AVX512_3x8;
    return V == 4 ? tile_AVX512_4x6 : V == 3 ? tile_AVX512_3x6 : V == 2 ? tile_AVX512_2x6
                                                                          : tile_AVX512_1x6;
}

/* A slot holds, for each of its J columns, V vectors of 16 rows; 16 columns at a time are
 * transposed into 16 row pieces and stored (scattering the columns straight into out hit one
 * L1 set for every row and took 17% of the time). */
static PL_TARGET_AVX512 void store_avx512(const gk_job *G, const float *accs, int g, int nb) {
    const int J = G->J, N = G->N;
    for (int t = 0; t < G->n_tiles; t++) {
        int v0 = 4 * t, V = G->nv - v0 < 4 ? G->nv - v0 : 4;
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

static const gk_isa GK_AVX512 = {.lanes = 16, .n_acc = 24, .tile_v = 4,
                                 .transpose_task = transpose_avx512, .widen = widen_avx512,
                                 .tile_for = tile_for_avx512, .store = store_avx512};

// ---------------------------------------------------------------------------------------------
// AVX2

/* r[i] (8 rows of 8 floats) becomes its transpose: r[c] = column c. */
PL_INLINE PL_TARGET_AVX2 void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4 i + q], lane l of each 128-bit half = column 4 half + q of row 4 i + l */
    for (int i = 0; i < 2; i++) {
        __m256 a = t[4 * i], b = t[4 * i + 1], c = t[4 * i + 2], d = t[4 * i + 3];
        u[4 * i] = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 1] = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * i + 2] = _mm256_shuffle_ps(b, d, _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 3] = _mm256_shuffle_ps(b, d, _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int q = 0; q < 4; q++) {
        r[q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x20);
        r[4 + q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x31);
    }
}

/* Transpose task: xt[k][r] = x[r][k] (0 for r >= R) for this task's k's, in 8 x 8 blocks. */
static PL_TARGET_AVX2 void transpose_avx2(void *arg, int task, int thread) {
    (void)thread;
    const gk_job *G = arg;
    int k0 = task * G->kt_per_task, k1 = k0 + G->kt_per_task < G->K ? k0 + G->kt_per_task : G->K;
    for (int r0 = 0; r0 < G->Rp; r0 += 8) {
        int nr = G->R - r0 < 8 ? G->R - r0 : 8;
        for (int k = k0; k < k1; k += 8) {
            int nk = k1 - k < 8 ? k1 - k : 8;
            __m256 b[8];
            for (int i = 0; i < 8; i++) {
                const float *src = G->x + (size_t)(r0 + i) * G->K;
                b[i] = i >= nr   ? _mm256_setzero_ps()
                       : nk == 8 ? _mm256_loadu_ps(src + k)
                                 : pl_avx2_load_part(src, PL_DTYPE_F32, (size_t)k, nk);
            }
            transpose8(b);
            for (int i = 0; i < nk; i++)
                _mm256_storeu_ps(G->xt + (size_t)(k + i) * G->Rp + r0, b[i]);
        }
    }
}

PL_INLINE PL_TARGET_AVX2 void widen_avx2_dt(float *dst, const void *w, size_t ld, int n0,
                                            int rows, int rows_pad, int c0, int n,
                                            const pl_dtype dt) {
    const int full = n & ~7, tail = n & 7;
    for (int j = 0; j < rows; j++, dst += KC) {
        size_t base = (size_t)(n0 + j) * ld + (size_t)c0;
        int i = 0;
        for (; i < full; i += 8) _mm256_storeu_ps(dst + i, pl_avx2_load(w, dt, base + i));
        if (tail) _mm256_storeu_ps(dst + i, pl_avx2_load_part(w, dt, base + i, tail));
    }
    for (int j = rows; j < rows_pad; j++, dst += KC)
        for (int i = 0; i < n; i += 8) _mm256_storeu_ps(dst + i, _mm256_setzero_ps());
}

static PL_TARGET_AVX2 void widen_avx2(float *dst, const void *w, pl_dtype dt, size_t ld, int n0,
                                      int rows, int rows_pad, int c0, int n) {
    switch (dt) {
    case PL_DTYPE_F16: widen_avx2_dt(dst, w, ld, n0, rows, rows_pad, c0, n, PL_DTYPE_F16); break;
    case PL_DTYPE_BF16: widen_avx2_dt(dst, w, ld, n0, rows, rows_pad, c0, n, PL_DTYPE_BF16); break;
    default: widen_avx2_dt(dst, w, ld, n0, rows, rows_pad, c0, n, PL_DTYPE_F32); break;
    }
}

/* One k: acc[j][v] += xk[8 v ..] * w[j KC]. 12 accumulators, V (<= 2) x vectors and one
 * broadcast: 15 of the 16 registers. */
PL_INLINE PL_TARGET_AVX2 void tile_avx2_k(const float *xk, const float *w, __m256 *acc,
                                          const int V, const int J) {
    __m256 xv[2];
#pragma GCC unroll 2
    for (int v = 0; v < V; v++) xv[v] = _mm256_loadu_ps(xk + 8 * v);
#pragma GCC unroll 12
    for (int j = 0; j < J; j++) {
        __m256 b = _mm256_broadcast_ss(w + j * KC);
#pragma GCC unroll 2
        for (int v = 0; v < V; v++) acc[j * V + v] = _mm256_fmadd_ps(xv[v], b, acc[j * V + v]);
    }
}

/* The k loop runs 4 k's per round of prefetch bookkeeping: with 12 multiply-adds per k, the
 * per-k bookkeeping cost as much issue bandwidth as the multiply-adds. */
PL_INLINE PL_TARGET_AVX2 void tile_avx2(const float *xt, size_t ldx, const float *w, int n,
                                        float *accm, bool first, const gk_pf *pf, int l0,
                                        const gk_near *nr, const int V, const int J) {
    __m256 acc[12];
    if (first) {
#pragma GCC unroll 12
        for (int a = 0; a < V * J; a++) acc[a] = _mm256_setzero_ps();
    } else {
#pragma GCC unroll 12
        for (int a = 0; a < V * J; a++) acc[a] = _mm256_load_ps(accm + 8 * a);
    }
    gk_pf_walk p = gk_pf_begin(pf, l0, nr, n);
    int k = 0;
    for (; k + 4 <= n; k += 4) {
        gk_pf_step(&p, k, 4);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) tile_avx2_k(xt + (size_t)(k + u) * ldx, w + k + u, acc, V, J);
    }
    for (; k < n; k++) {
        gk_pf_step(&p, k, 1);
        tile_avx2_k(xt + (size_t)k * ldx, w + k, acc, V, J);
    }
#pragma GCC unroll 12
    for (int a = 0; a < V * J; a++) _mm256_store_ps(accm + 8 * a, acc[a]);
}

#define tile_AVX2 tile_avx2
GK_TILE_FN(AVX2, 1, 12)
GK_TILE_FN(AVX2, 2, 6)
GK_TILE_FN(AVX2, 1, 6)

static gk_tile_fn tile_for_avx2(int V, int J) {
    return J == 12 ? tile_AVX2_1x12 : V == 2 ? tile_AVX2_2x6 : tile_AVX2_1x6;
}

/* Lanes [0, n) of v to p, n in [1, 8], in 128-bit pieces (a masked store costs ~10x more on
 * AMD Zen). */
PL_INLINE PL_TARGET_AVX2 void store_first(float *p, __m256 v, int n) {
    if (n == 8) {
        _mm256_storeu_ps(p, v);
        return;
    }
    __m128 h = _mm256_castps256_ps128(v);
    if (n >= 4) {
        _mm_storeu_ps(p, h);
        h = _mm256_extractf128_ps(v, 1);
        p += 4;
        n -= 4;
    }
    if (n >= 2) {
        _mm_storel_pi((__m64 *)p, h);
        h = _mm_movehl_ps(h, h);
        p += 2;
        n -= 2;
    }
    if (n) _mm_store_ss(p, h);
}

/* As store_avx512, with 8 x 8 transposes. */
static PL_TARGET_AVX2 void store_avx2(const gk_job *G, const float *accs, int g, int nb) {
    const int J = G->J, N = G->N;
    for (int t = 0; t < G->n_tiles; t++) {
        int v0 = 2 * t, V = G->nv - v0 < 2 ? G->nv - v0 : 2;
        for (int b = 0; b < nb; b++) {
            const float *slot = accs + ((size_t)t * G->GJ + b) * GK_SLOT;
            int n0 = (g + b) * J;
            for (int j0 = 0; j0 < J && n0 + j0 < N; j0 += 8) {
                int nj = J - j0 < 8 ? J - j0 : 8;
                if (n0 + j0 + nj > N) nj = N - n0 - j0;
                for (int v = 0; v < V; v++) {
                    __m256 c[8];
                    for (int j = 0; j < 8; j++)
                        c[j] = j < nj ? _mm256_load_ps(slot + ((size_t)(j0 + j) * V + v) * 8)
                                      : _mm256_setzero_ps();
                    transpose8(c); /* c[l] = row 8 (v0 + v) + l, columns j0 .. */
                    int r0 = 8 * (v0 + v), nr = G->R - r0 < 8 ? G->R - r0 : 8;
                    for (int l = 0; l < nr; l++)
                        store_first(G->out + (size_t)(r0 + l) * N + n0 + j0, c[l], nj);
                }
            }
        }
    }
}

static const gk_isa GK_AVX2 = {.lanes = 8, .n_acc = 12, .tile_v = 2,
                               .transpose_task = transpose_avx2, .widen = widen_avx2,
                               .tile_for = tile_for_avx2, .store = store_avx2};

// ---------------------------------------------------------------------------------------------
// driver

/* Floats of a thread's scratch: the widened chunk (GJ J, KC), then the partial sums. */
static size_t scratch_floats(const gk_job *G) {
    return (size_t)G->GJ * G->J * KC + (size_t)G->n_tiles * G->GJ * GK_SLOT;
}

/* Group g (J-blocks g GJ .. g GJ + GJ - 1): every chunk, tile and J-block, then the store.
 * Group next (or -1) is the one this thread will most likely take next: prefetched into L2
 * across this group's tile calls. */
static void gk_group(const gk_job *G, float *scratch, int g, int next) {
    const gk_isa *isa = G->isa;
    const int K = G->K, N = G->N, J = G->J, n_chunks = (K + KC - 1) / KC;
    const size_t row_bytes = G->row_bytes;
    /* bytes of a chunk of a row (KC elements: 68 for Q8_0 .. 256 for f32), and log2 of the
     * cache lines it spans, for the near prefetch */
    const size_t chunk_bytes = row_bytes * KC / (size_t)K;
    const int near_shift = chunk_bytes > 128 ? 2 : chunk_bytes > 64 ? 1 : 0;
    float *wbuf = scratch;                           /* (GJ J, KC) */
    float *accs = scratch + (size_t)G->GJ * J * KC;  /* (tiles, GJ, GK_SLOT) */
    const int n_jb = (N + J - 1) / J;
    int jb0 = g * G->GJ, nb = n_jb - jb0 < G->GJ ? n_jb - jb0 : G->GJ;
    int n0 = jb0 * J, rows = N - n0 < nb * J ? N - n0 : nb * J;
    int nn0 = next >= 0 ? next * G->GJ * J : N, nrows = N - nn0 < G->GJ * J ? N - nn0 : G->GJ * J;
    gk_pf pf = {.base = (const char *)G->w + (size_t)nn0 * row_bytes,
                .n_lines = nrows > 0 ? (int)(((size_t)nrows * row_bytes + 63) / 64) : 0};
    int calls = n_chunks * G->n_tiles * nb;
    pf.per_call = (pf.n_lines + calls - 1) / calls;
    if (pf.per_call > 2 * KC) pf.per_call = 2 * KC;
    int l0 = 0;
    for (int c = 0; c < n_chunks; c++) {
        int c0 = c * KC, n = K - c0 < KC ? K - c0 : KC;
        if (G->dt != PL_DTYPE_AUTO) {
            isa->widen(wbuf, G->w, G->dt, (size_t)K, n0, rows, nb * J, c0, n);
        } else { /* quantised: K and the chunk are whole pieces of 32 */
            for (int j = 0; j < rows; j++)
                pl_cpu_dequant(G->cpu_isa, wbuf + (size_t)j * KC,
                               (const char *)G->w + (size_t)(n0 + j) * row_bytes, G->wt,
                               (size_t)c0 / 32, (size_t)n / 32);
            for (int j = rows; j < nb * J; j++) memset(wbuf + (size_t)j * KC, 0, (size_t)n * 4);
        }
        for (int t = 0; t < G->n_tiles; t++) {
            int v0 = t * isa->tile_v, V = G->nv - v0 < isa->tile_v ? G->nv - v0 : isa->tile_v;
            gk_tile_fn tile = isa->tile_for(V, J);
            const float *xs = G->xt + (size_t)c0 * G->Rp + (size_t)isa->lanes * v0;
            for (int b = 0; b < nb; b++, l0 += pf.per_call) {
                /* J-block b's rows of the next chunk: same rows further right, or the next
                 * group's rows at column 0 */
                gk_near nr = {.stride = row_bytes, .shift = near_shift};
                if (G->Rp > 32) {
                    /* compute bound: the copy's stall matters less than the extra
                     * instructions (AVX-512: measured 3% slower at 64 rows, 5% faster at 32) */
                } else if (c + 1 < n_chunks) {
                    nr.base = (const char *)G->w + (size_t)(n0 + b * J) * row_bytes +
                              (size_t)(c0 + KC) / KC * chunk_bytes;
                    nr.rows = rows - b * J < J ? rows - b * J : J;
                } else if (b * J < nrows) {
                    nr.base = (const char *)G->w + (size_t)(nn0 + b * J) * row_bytes;
                    nr.rows = nrows - b * J < J ? nrows - b * J : J;
                }
                if (nr.rows < 0) nr.rows = 0;
                tile(xs, (size_t)G->Rp, wbuf + (size_t)b * J * KC, n,
                     accs + ((size_t)t * G->GJ + b) * GK_SLOT, c == 0, &pf, l0, &nr);
            }
        }
    }
    isa->store(G, accs, jb0, nb);
}

static void gk_task(void *arg, int r, int thread) {
    gk_job *G = arg;
    /* a group of the own range prefetches the next; stolen groups have no next */
    bool own;
    for (int g; (g = pl_ranges_next(&G->groups, r, &own)) >= 0;)
        gk_group(G, G->scratch[thread], g, own ? pl_ranges_peek_next(&G->groups, r, g) : -1);
}

pl_status pl_cpu_own_gemm(pl_cpu_ctx *c, float *out, const float *x, const void *w, pl_wtype wt,
                          int R, int K, int N) {
    if (c->isa < PL_CPU_ISA_AVX2 || R < 1 || R > PL_CPU_OWN_MAX_ROWS)
        return pl_fail(PL_ERR_UNSUPPORTED, "own gemm: %d rows on isa %s", R,
                       pl_cpu_isa_name(c->isa));
    const gk_isa *isa = c->isa == PL_CPU_ISA_AVX512 ? &GK_AVX512 : &GK_AVX2;
    uint64_t row_bytes;
    if (!pl_wtype_bytes(wt, (uint64_t)K, &row_bytes) || (pl_wtype_is_quant(wt) && K % 32 != 0))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "own gemm: rows of %d are not whole %s blocks",
                       K, pl_wtype_name(wt));
    gk_job G = {.isa = isa, .out = out, .x = x, .w = w, .wt = wt, .dt = pl_wtype_dtype(wt),
                .cpu_isa = c->isa, .row_bytes = (size_t)row_bytes, .R = R, .K = K, .N = N};
    G.Rp = pl_cpu_round_up(R, isa->lanes);
    G.nv = G.Rp / isa->lanes;
    G.J = isa->n_acc / (G.nv < isa->tile_v ? G.nv : isa->tile_v);
    G.GJ = (GK_GROUP_ROWS + G.J - 1) / G.J;
    G.n_tiles = (G.nv + isa->tile_v - 1) / isa->tile_v;
    PL_TRY(pl_cpu_reserve(c, scratch_floats(&G), 0));
    PL_TRY(pl_cpu_reserve_shared(c, (size_t)K * G.Rp));
    G.xt = c->shared;
    G.scratch = c->scratch;

    int n_t = pl_cpu_n_tasks(c, (size_t)G.Rp * K, 1u << 14);
    G.kt_per_task = (K + n_t - 1) / n_t;
    pl_threadpool_run(c->pool, (K + G.kt_per_task - 1) / G.kt_per_task, isa->transpose_task, &G);

    /* One contiguous range of groups per thread (so each group's prefetch of the next one
     * pays off: with 8 short tasks per thread as before, 768x768 at 32 rows took 12% longer),
     * balanced by stealing groups, not by small tasks. */
    int n_jb = (N + G.J - 1) / G.J;
    G.n_groups = (n_jb + G.GJ - 1) / G.GJ;
    int n_ranges = c->own_ranges > 0 ? c->own_ranges : c->n_threads;
    if ((size_t)R * K * N < (1u << 18) && c->own_ranges <= 0) n_ranges = 1; /* a wake-up
                                                                         costs more */
    pl_ranges_init(&G.groups, G.n_groups, n_ranges);
    pl_threadpool_run(c->pool, G.groups.n, gk_task, &G);
    return PL_OK;
}

#else /* !PL_CPU_X86 */

pl_status pl_cpu_own_gemm(pl_cpu_ctx *c, float *out, const float *x, const void *w, pl_wtype wt,
                          int R, int K, int N) {
    (void)c, (void)out, (void)x, (void)w, (void)wt, (void)R, (void)K, (void)N;
    return pl_fail(PL_ERR_UNSUPPORTED, "own gemm: not built for this CPU architecture");
}

#endif
