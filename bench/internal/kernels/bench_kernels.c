/*
 * bench/internal/kernels/bench_kernels.c - micro-benchmarks of the cpu backend's hot ops,
 * against this machine's own read bandwidth measured in the same run.
 *
 *   bench_kernels [--threads N] [--isa scalar|avx2|avx512] [--quick] [--only SECTION]
 *                 [--rows N,N,...] (the batch section's row counts)
 *
 * Prints key=value lines, one measurement per line: medians of repeats and, where marked
 * best/for batch, gemm and attention, the fastest repeat (see summarize):
 * - stream: read bandwidth of a plain vector sum over 1 GiB on the pool (the roof for decode),
 *   whole passes and the median of 4 MiB pieces (see bench_stream).
 * - gemv: matmul at 1 row for dummy:stories110m shapes (d_out x d_in), f32/f16/bf16, as weight
 *   GB/s and % of stream. Weights rotate through a 1 GiB arena so every call reads DRAM, as a
 *   decode step does (a whole model does not fit in cache).
 * - qgemv: the quantised types (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) beside f16 on stories110m and
 *   TinyLlama feed-forward shapes at 1, 8, 32, 64 rows (--rows): weight GB/s, % of stream,
 *   speed against f16, and the integer GEMV against the own GEMM on dequantised chunks.
 * - qgemm: the int8 GEMM's kernels against the integer GEMV, quantised types, 4..512 rows,
 *   as GOPS.
 * - batch: 2048x768 at 1..256 rows through the three regimes (GEMV kernel, own register-tiled
 *   GEMM, OpenBLAS sgemm on tiles), the data behind the own_min_rows / gemm_min_rows defaults.
 * - gemm: 32..1024 rows on the model shapes, GFLOP/s of sgemm and of the own GEMM, f32, f16.
 * - attention: decode batches and a prefill chunk over paged KV (block 16), as KV GB/s and
 *   GFLOP/s; then long contexts (8192 decode, 4096 prefill chunks) without and with a sliding
 *   window (Mistral shape), where GB/s counts only the keys inside the window: time_us shows
 *   what skipping the blocks before the window saves.
 * Correctness is the test suite's job (tests/kernels); this program only times.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/qgemm.h"
#include "util/dtype.h"
#include "util/threadpool.h"
#include "util/timer.h"

#ifndef PL_BUILDTYPE
#define PL_BUILDTYPE "unknown"
#endif

#define ARENA_BYTES ((size_t)1 << 30)

static int g_quick;
static int g_rows[32], g_n_rows; /* --rows: restrict the batch section to these row counts */
static const char *g_only; /* run only this section (stream always runs) */

static int want(const char *section) { return !g_only || !strcmp(g_only, section); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Median and fastest of n timings (seconds). The fastest approximates an undisturbed run on a
 * machine shared with other work; the median is what a user sees there. */
typedef struct timing {
    double med, best;
} timing;

static timing summarize(double *v, int n) {
    double m = median(v, n); /* sorts v */
    return (timing){m, v[0]};
}

static void check(pl_status st, const char *what) {
    if (st != PL_OK) {
        fprintf(stderr, "bench_kernels: %s: %s\n", what, pl_last_error());
        exit(1);
    }
}

// ---------------------------------------------------------------------------------------------
// stream read bandwidth

typedef struct stream_job {
    pl_cpu_isa isa;
    const float *p;
    size_t n, per_task;
    double *sums; /* (n_tasks) */
} stream_job;

/* Sums n floats (n a multiple of 64) as 4 interleaved sub-streams: one core keeps more misses
 * in flight over 4 streams than over 1 (measured 17.2 vs 14.6 GB/s on one core), and the GEMV
 * kernel reads 4 weight rows at once, so a single-stream sum would understate the roof. */
#ifdef PL_CPU_X86
static PL_TARGET_AVX512 double sum_avx512(const float *p, size_t n) {
    size_t q = n / 4;
    __m512 a = _mm512_setzero_ps(), b = a, c = a, d = a;
    for (size_t i = 0; i < q; i += 16) {
        a = _mm512_add_ps(a, _mm512_loadu_ps(p + i));
        b = _mm512_add_ps(b, _mm512_loadu_ps(p + q + i));
        c = _mm512_add_ps(c, _mm512_loadu_ps(p + 2 * q + i));
        d = _mm512_add_ps(d, _mm512_loadu_ps(p + 3 * q + i));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d)));
}

static PL_TARGET_AVX2 double sum_avx2(const float *p, size_t n) {
    size_t q = n / 4;
    __m256 a = _mm256_setzero_ps(), b = a, c = a, d = a;
    for (size_t i = 0; i < q; i += 8) {
        a = _mm256_add_ps(a, _mm256_loadu_ps(p + i));
        b = _mm256_add_ps(b, _mm256_loadu_ps(p + q + i));
        c = _mm256_add_ps(c, _mm256_loadu_ps(p + 2 * q + i));
        d = _mm256_add_ps(d, _mm256_loadu_ps(p + 3 * q + i));
    }
    return pl_avx2_hsum(_mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
}
#endif

static void stream_task(void *arg, int task, int thread) {
    (void)thread;
    stream_job *J = arg;
    size_t i0 = (size_t)task * J->per_task;
    size_t n = J->n - i0 < J->per_task ? J->n - i0 : J->per_task;
#ifdef PL_CPU_X86
    if (J->isa == PL_CPU_ISA_AVX512) {
        J->sums[task] = sum_avx512(J->p + i0, n);
        return;
    }
    if (J->isa == PL_CPU_ISA_AVX2) {
        J->sums[task] = sum_avx2(J->p + i0, n);
        return;
    }
#endif
    double s = 0;
    for (size_t i = 0; i < n; i++) s += J->p[i0 + i];
    J->sums[task] = s;
}

/* Read bandwidth two ways: whole 1 GiB passes, and 4 MiB pieces (the size of one weight matrix
 * of the GEMV runs) cycling through the arena, each timed alone. On a shared machine a long
 * pass almost always includes a time slice lost to another process; the median piece does
 * not, and it is what the GEMV medians (calls of 0.1-15 ms) compare with. */
static timing bench_stream(pl_threadpool *pool, pl_cpu_isa isa, const float *arena) {
    enum { TASKS = 64, PIECE_TASKS = 16 };
    double sums[TASKS], t[7];
    stream_job J = {.isa = isa, .p = arena, .n = ARENA_BYTES / 4,
                    .per_task = ARENA_BYTES / 4 / TASKS,
                    .sums = sums};
    int reps = g_quick ? 3 : 7;
    for (int r = -1; r < reps; r++) {
        uint64_t t0 = pl_now_ns();
        pl_threadpool_run(pool, TASKS, stream_task, &J);
        if (r >= 0) t[r] = (double)(pl_now_ns() - t0) * 1e-9;
    }
    double pass = (double)ARENA_BYTES / median(t, reps) / 1e9;

    const size_t piece = (size_t)4 << 20, n_pieces = ARENA_BYTES / piece;
    double tp[256];
    for (size_t k = 0; k < n_pieces; k++) {
        stream_job P = {.isa = isa, .p = arena + k * (piece / 4), .n = piece / 4,
                        .per_task = piece / 4 / PIECE_TASKS, .sums = sums};
        uint64_t t0 = pl_now_ns();
        pl_threadpool_run(pool, PIECE_TASKS, stream_task, &P);
        tp[k] = (double)(pl_now_ns() - t0) * 1e-9;
    }
    timing tm = summarize(tp, (int)n_pieces);
    timing gbs = {(double)piece / tm.med / 1e9, (double)piece / tm.best / 1e9};
    printf("stream bytes=%zu pass_GBps=%.2f piece_bytes=%zu piece_GBps=%.2f piece_best_GBps=%.2f\n",
           ARENA_BYTES, pass, piece, gbs.med, gbs.best);
    return gbs;
}

// ---------------------------------------------------------------------------------------------
// matmul

/* Bytes of a (d_out, d_in) weight of type t. */
static size_t weight_bytes(pl_wtype t, int d_in, int d_out) {
    uint64_t b = 0;
    pl_wtype_bytes(t, (uint64_t)d_in * (uint64_t)d_out, &b);
    return (size_t)b;
}

/* Seconds per matmul call, each call on weights at a new place in the arena. */
static timing time_matmul(pl_backend *be, float *out, const float *x, const unsigned char *arena,
                          pl_wtype t, int rows, int d_in, int d_out, int reps) {
    size_t wbytes = weight_bytes(t, d_in, d_out);
    size_t slots = ARENA_BYTES / wbytes;
    if (slots < 1) slots = 1;
    double *ts = malloc((size_t)reps * sizeof *ts);
    for (int r = -2; r < reps; r++) {
        const void *w = arena + ((size_t)(r + 2) % slots) * wbytes;
        uint64_t t0 = pl_now_ns();
        check(be->ops->matmul(be, out, x, w, t, rows, d_in, d_out), "matmul");
        if (r >= 0) ts[r] = (double)(pl_now_ns() - t0) * 1e-9;
    }
    timing m = summarize(ts, reps);
    free(ts);
    return m;
}

static int reps_for(size_t bytes, double flops) {
    /* ~0.15 s (0.05 s quick) per measurement, assuming ~15 GB/s and ~100 GFLOP/s */
    double est = fmax((double)bytes / 15e9, flops / 100e9);
    int r = (int)((g_quick ? 0.05 : 0.15) / fmax(est, 1e-6));
    return r < 5 ? 5 : r > 400 ? 400 : r;
}

static const int SHAPES[][2] = {{768, 768}, {2048, 768}, {768, 2048}, {32000, 768}}; /* out, in */

static void bench_gemv(pl_backend *be, const unsigned char *arena, float *x, float *out,
                       timing stream_gbs) {
    const pl_wtype types[] = {PL_WTYPE_F32, PL_WTYPE_F16, PL_WTYPE_BF16};
    for (int ti = 0; ti < 3; ti++)
        for (int si = 0; si < 4; si++) {
            int d_out = SHAPES[si][0], d_in = SHAPES[si][1];
            size_t wbytes = weight_bytes(types[ti], d_in, d_out);
            timing s = time_matmul(be, out, x, arena, types[ti], 1, d_in, d_out,
                                   reps_for(wbytes, 0));
            double gbs = (double)wbytes / s.med / 1e9, best = (double)wbytes / s.best / 1e9;
            printf("gemv dtype=%s rows=1 d_out=%d d_in=%d time_us=%.1f weight_GBps=%.2f "
                   "pct_of_stream=%.0f best_GBps=%.2f best_pct_of_stream_best=%.0f\n",
                   pl_wtype_name(types[ti]), d_out, d_in, s.med * 1e6, gbs,
                   100.0 * gbs / stream_gbs.med, best, 100.0 * best / stream_gbs.best);
        }
}

/* The three matmul kernels, forced. */
typedef enum mm_path { MM_GEMV, MM_OWN, MM_BLAS } mm_path;

static void set_path(pl_cpu_ctx *c, mm_path p) {
    c->mm_force = p == MM_GEMV ? PL_CPU_MM_GEMV : p == MM_OWN ? PL_CPU_MM_OWN : PL_CPU_MM_BLAS;
}

static void bench_batch(pl_backend *be, const unsigned char *arena, float *x, float *out) {
    pl_cpu_ctx *c = be->ctx;
    static const int all_rows[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256};
    const int *rows = g_n_rows ? g_rows : all_rows;
    int n_rows = g_n_rows ? g_n_rows : (int)(sizeof all_rows / sizeof all_rows[0]);
    const pl_wtype types[] = {PL_WTYPE_F32, PL_WTYPE_F16};
    int d_out = 2048, d_in = 768;
    for (int ti = 0; ti < 2; ti++)
        for (int ri = 0; ri < n_rows; ri++) {
            double flops = 2.0 * rows[ri] * d_in * d_out;
            size_t wbytes = weight_bytes(types[ti], d_in, d_out);
            int reps = reps_for(wbytes, flops);
            double s[3];
            for (int p = 0; p < 3; p++) {
                set_path(c, (mm_path)p);
                s[p] = time_matmul(be, out, x, arena, types[ti], rows[ri], d_in, d_out, reps).best;
            }
            int f = s[0] <= s[1] && s[0] <= s[2] ? 0 : s[1] <= s[2] ? 1 : 2;
            printf("batch dtype=%s rows=%d d_out=%d d_in=%d gemv_us=%.1f gemv_GFLOPs=%.1f "
                   "own_us=%.1f own_GFLOPs=%.1f own_weight_GBps=%.2f sgemm_us=%.1f "
                   "sgemm_GFLOPs=%.1f faster=%s\n",
                   pl_wtype_name(types[ti]), rows[ri], d_out, d_in, s[0] * 1e6,
                   flops / s[0] / 1e9, s[1] * 1e6, flops / s[1] / 1e9,
                   (double)wbytes / s[1] / 1e9, s[2] * 1e6, flops / s[2] / 1e9,
                   f == 0 ? "gemv" : f == 1 ? "own" : "sgemm");
        }
    c->mm_force = PL_CPU_MM_AUTO;
}

/* Quantised weights (decode and small batches): per shape and row count, the automatic path
 * (what the engine runs) as weight GB/s, % of the stream roof and speed against f16 weights
 * at the same rows; with more than one row also the integer GEMV and the own GEMM on
 * dequantised chunks forced (the data behind own_min_rows of the quantised types). Shapes: stories110m's and
 * TinyLlama-1.1B's feed-forward matrices, both ways round (out x in). */
static void bench_qgemv(pl_backend *be, const unsigned char *arena, float *x, float *out,
                        timing stream_gbs) {
    pl_cpu_ctx *c = be->ctx;
    static const int shapes[][2] = {{2048, 768}, {768, 2048}, {5632, 2048}, {2048, 5632}};
    static const int all_rows[] = {1, 8, 32, 64};
    const int *rows = g_n_rows ? g_rows : all_rows;
    int n_rows = g_n_rows ? g_n_rows : 4;
    const pl_wtype types[] = {PL_WTYPE_F16,  PL_WTYPE_Q8_0, PL_WTYPE_Q4_0,
                              PL_WTYPE_Q4_K, PL_WTYPE_Q5_K, PL_WTYPE_Q6_K};
    for (int si = 0; si < 4; si++)
        for (int ri = 0; ri < n_rows; ri++) {
            int d_out = shapes[si][0], d_in = shapes[si][1];
            double f16_s = 0, flops = 2.0 * rows[ri] * d_in * d_out;
            for (int ti = 0; ti < 6; ti++) {
                size_t wbytes = weight_bytes(types[ti], d_in, d_out);
                int reps = reps_for(wbytes, flops);
                c->mm_force = PL_CPU_MM_AUTO;
                timing a = time_matmul(be, out, x, arena, types[ti], rows[ri], d_in, d_out, reps);
                if (ti == 0) f16_s = a.med;
                double gbs = (double)wbytes / a.med / 1e9;
                printf("qgemv type=%s rows=%d d_out=%d d_in=%d time_us=%.1f weight_GBps=%.2f "
                       "pct_of_stream=%.0f best_GBps=%.2f GFLOPs=%.1f speed_vs_f16=%.2f",
                       pl_wtype_name(types[ti]), rows[ri], d_out, d_in, a.med * 1e6, gbs,
                       100.0 * gbs / stream_gbs.med, (double)wbytes / a.best / 1e9,
                       flops / a.med / 1e9, f16_s / a.med);
                if (rows[ri] > 1 && c->isa >= PL_CPU_ISA_AVX2) {
                    set_path(c, MM_GEMV);
                    timing g = time_matmul(be, out, x, arena, types[ti], rows[ri], d_in, d_out,
                                           reps);
                    set_path(c, MM_OWN);
                    timing o = time_matmul(be, out, x, arena, types[ti], rows[ri], d_in, d_out,
                                           reps);
                    printf(" gemv_us=%.1f own_us=%.1f", g.med * 1e6, o.med * 1e6);
                }
                printf("\n");
                fflush(stdout);
            }
        }
    c->mm_force = PL_CPU_MM_AUTO;
}

/* The int8 GEMM (qgemm.c) against the integer GEMV on the quantised types, per row count and
 * shape: the GEMV and each of the GEMM's kernels this machine has, forced, as GOPS (2 x rows
 * x d_in x d_out integer multiply-adds counted twice, as FLOPs are) of the fastest repeat:
 * the data behind qgemm_min_rows and the GEMM's figures against `bench roofline`'s integer
 * peaks. Weights rotate through the arena as in the other sections (from DRAM at few rows). */
static void bench_qgemm(pl_backend *be, const unsigned char *arena, float *x, float *out) {
    pl_cpu_ctx *c = be->ctx;
    static const int shapes[][2] = {{2048, 768}, {768, 2048}, {5632, 2048}, {2048, 5632}};
    static const int all_rows[] = {4, 8, 16, 32, 64, 128, 256, 512};
    const int *rows = g_n_rows ? g_rows : all_rows;
    int n_rows = g_n_rows ? g_n_rows : (int)(sizeof all_rows / sizeof all_rows[0]);
    const pl_wtype types[] = {PL_WTYPE_Q8_0, PL_WTYPE_Q4_0, PL_WTYPE_Q4_K, PL_WTYPE_Q5_K,
                              PL_WTYPE_Q6_K};
    for (int si = 0; si < 4; si++)
        for (int ti = 0; ti < 5; ti++)
            for (int ri = 0; ri < n_rows; ri++) {
                int d_out = shapes[si][0], d_in = shapes[si][1];
                if (g_quick && (si % 2 || rows[ri] > 256)) continue;
                double ops = 2.0 * rows[ri] * d_in * d_out;
                size_t wbytes = weight_bytes(types[ti], d_in, d_out);
                int reps = reps_for(wbytes, ops / 4);
                c->qgemm_force = PL_QGEMM_AUTO;
                c->mm_force = PL_CPU_MM_GEMV;
                timing g = time_matmul(be, out, x, arena, types[ti], rows[ri], d_in, d_out, reps);
                printf("qgemm type=%s rows=%d d_out=%d d_in=%d gemv_GOPS=%.1f",
                       pl_wtype_name(types[ti]), rows[ri], d_out, d_in, ops / g.best / 1e9);
                c->mm_force = PL_CPU_MM_QGEMM;
                for (int k = PL_QGEMM_AVX2; k < PL_QGEMM_COUNT; k++) {
                    if (!pl_cpu_qgemm_usable(c, (pl_cpu_qgemm_kernel)k)) continue;
                    c->qgemm_force = (pl_cpu_qgemm_kernel)k;
                    timing q = time_matmul(be, out, x, arena, types[ti], rows[ri], d_in, d_out,
                                           reps);
                    printf(" %s_GOPS=%.1f", pl_cpu_qgemm_kernel_name((pl_cpu_qgemm_kernel)k),
                           ops / q.best / 1e9);
                }
                printf("\n");
                fflush(stdout);
            }
    c->mm_force = PL_CPU_MM_AUTO;
    c->qgemm_force = PL_QGEMM_AUTO;
}

static void bench_gemm(pl_backend *be, const unsigned char *arena, float *x, float *out) {
    const pl_wtype types[] = {PL_WTYPE_F32, PL_WTYPE_F16};
    const int rows[] = {32, 64, 256, 1024};
    pl_cpu_ctx *c = be->ctx;
    for (int ti = 0; ti < 2; ti++)
        for (int ri = 0; ri < 4; ri++)
            for (int si = 0; si < 4; si++) {
                int d_out = SHAPES[si][0], d_in = SHAPES[si][1];
                if (g_quick && rows[ri] > 256) continue;
                double flops = 2.0 * rows[ri] * d_in * d_out;
                size_t wbytes = weight_bytes(types[ti], d_in, d_out);
                int reps = reps_for(wbytes, flops);
                set_path(c, MM_BLAS);
                timing s = time_matmul(be, out, x, arena, types[ti], rows[ri], d_in, d_out, reps);
                set_path(c, MM_OWN);
                timing g = time_matmul(be, out, x, arena, types[ti], rows[ri], d_in, d_out, reps);
                printf("gemm dtype=%s rows=%d d_out=%d d_in=%d sgemm_GFLOPs=%.1f "
                       "own_kernel_GFLOPs=%.1f median: sgemm_GFLOPs=%.1f own_kernel_GFLOPs=%.1f\n",
                       pl_wtype_name(types[ti]), rows[ri], d_out, d_in, flops / s.best / 1e9,
                       flops / g.best / 1e9, flops / s.med / 1e9, flops / g.med / 1e9);
            }
    c->mm_force = PL_CPU_MM_AUTO;
}

// ---------------------------------------------------------------------------------------------
// attention

static void bench_attention(pl_backend *be, int n_heads, int n_kv, int hd, int n_seqs, int q_len,
                            int ctx, int window, const char *label) {
    const int bs = 16;
    int bps = (ctx + bs - 1) / bs, n_blocks = n_seqs * bps;
    size_t layer = (size_t)n_blocks * n_kv * bs * hd, esize = pl_dtype_size(be->kv_dtype);
    void *kc, *vc;
    check(be->ops->alloc(be, layer * esize, &kc), "alloc K");
    check(be->ops->alloc(be, layer * esize, &vc), "alloc V");
    /* Values in [-1, 1]: random bytes would include subnormals, which take microcode assists.
     * Hashed, not periodic, and V unlike K: pages with the same bytes may be merged into one by
     * a host that deduplicates memory (KSM), and the "KV" then streams from cache. Presumably
     * that happened here with the earlier fill (period 2001 elements, V a copy of K): 200 MB
     * of f32 KV read at 70 GB/s while the read probe gave 33. */
    for (size_t i = 0; i < 2 * layer; i++) {
        uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
        float f = (float)((int)(h % 2001u) - 1000) / 1000.0f;
        void *cache = i < layer ? kc : vc;
        size_t j = i < layer ? i : i - layer;
        if (be->kv_dtype == PL_DTYPE_F16)
            ((uint16_t *)cache)[j] = pl_f32_to_f16(f);
        else
            ((float *)cache)[j] = f;
    }
    int32_t *tables = malloc((size_t)n_seqs * bps * sizeof *tables);
    for (int i = 0; i < n_seqs * bps; i++) tables[i] = (int32_t)((i * 7919L) % n_blocks);
    int32_t *qs = malloc(((size_t)n_seqs + 1) * sizeof *qs), *cl = malloc((size_t)n_seqs * 4);
    for (int s = 0; s <= n_seqs; s++) qs[s] = s * q_len;
    for (int s = 0; s < n_seqs; s++) cl[s] = ctx;
    int n_tok = n_seqs * q_len;
    float *q = malloc((size_t)n_tok * n_heads * hd * 4),
          *out = malloc((size_t)n_tok * n_heads * hd * 4);
    for (size_t i = 0; i < (size_t)n_tok * n_heads * hd; i++)
        q[i] = (float)((int)(i % 17) - 8) / 16.0f;
    pl_attn_batch b = {.n_seqs = n_seqs, .n_tokens = n_tok, .query_start = qs, .context_lens = cl,
                       .block_tables = tables, .max_blocks_per_seq = bps, .max_query_len = q_len,
                       .max_context_len = ctx, .n_heads = n_heads, .n_kv_heads = n_kv,
                       .head_dim = hd, .block_size = bs, .scale = 1.0f / sqrtf((float)hd),
                       .sliding_window = window};
    /* KV bytes each sequence's unit reads (K and V of the positions its rows attend to, every
     * KV head) and the multiply-adds of scores and V sums over the causal band */
    int first = pl_attn_window_start(ctx - q_len, window);
    double kv_bytes = 2.0 * n_seqs * (ctx - first) * n_kv * hd * (double)esize;
    double pairs = 0;
    for (int j = 0; j < q_len; j++) {
        int pos = ctx - q_len + j;
        pairs += pos - pl_attn_window_start(pos, window) + 1;
    }
    double flops = 4.0 * n_seqs * pairs * n_heads * hd;
    int reps = reps_for((size_t)kv_bytes, flops);
    double *ts = malloc((size_t)reps * sizeof *ts);
    for (int r = -2; r < reps; r++) {
        uint64_t t0 = pl_now_ns();
        check(be->ops->attention(be, out, q, kc, vc, &b), "attention");
        if (r >= 0) ts[r] = (double)(pl_now_ns() - t0) * 1e-9;
    }
    double s = summarize(ts, reps).best;
    printf("attention case=%s kv=%s heads=%d/%d hd=%d seqs=%d q_len=%d ctx=%d window=%d "
           "time_us=%.1f kv_GBps=%.2f GFLOPs=%.2f\n",
           label, pl_dtype_name(be->kv_dtype), n_heads, n_kv, hd, n_seqs, q_len, ctx, window,
           s * 1e6, kv_bytes / s / 1e9, flops / s / 1e9);
    be->ops->free(be, kc);
    be->ops->free(be, vc);
    free(tables), free(qs), free(cl), free(q), free(out), free(ts);
}

// ---------------------------------------------------------------------------------------------

int main(int argc, char **argv) {
    int n_threads = 2;
    if (getenv("FTZ")) _mm_setcsr(_mm_getcsr() | 0x8040);
    pl_cpu_isa isa = PL_CPU_ISA_AVX512;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            n_threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
            const char *v = argv[++i];
            isa = !strcmp(v, "scalar") ? PL_CPU_ISA_SCALAR
                  : !strcmp(v, "avx2") ? PL_CPU_ISA_AVX2
                                       : PL_CPU_ISA_AVX512;
        } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            g_only = argv[++i];
        } else if (!strcmp(argv[i], "--rows") && i + 1 < argc) {
            for (char *p = argv[++i]; *p && g_n_rows < 32; p++) {
                g_rows[g_n_rows++] = (int)strtol(p, &p, 10);
                if (!*p) break;
            }
        } else if (!strcmp(argv[i], "--quick")) {
            g_quick = 1;
        } else {
            fprintf(stderr, "usage: %s [--threads N] [--isa scalar|avx2|avx512] [--quick]\n"
                    "       [--only gemv|qgemv|qgemm|batch|gemm|attention] [--rows N,N,...]\n",
                    argv[0]);
            return 2;
        }
    }
    if (!strcmp(PL_BUILDTYPE, "debug") || !strcmp(PL_BUILDTYPE, "plain"))
        fprintf(stderr, "bench_kernels: warning: buildtype %s is unoptimised\n", PL_BUILDTYPE);

    pl_backend *be, *be16;
    pl_backend_options opt = {.n_threads = n_threads, .kv_dtype = PL_DTYPE_F32};
    check(pl_cpu_backend_create_isa(&opt, isa, &be), "cpu backend");
    opt.kv_dtype = PL_DTYPE_F16;
    check(pl_cpu_backend_create_isa(&opt, isa, &be16), "cpu backend (f16 KV)");
    pl_cpu_ctx *c = be->ctx;
    printf("config buildtype=%s isa=%s vnni=%d threads=%d gemm_min_rows=%d "
           "own_min_rows=%d/%d qgemm_min_rows=%d\n",
           PL_BUILDTYPE, pl_cpu_isa_name(c->isa), c->vnni, c->n_threads, c->gemm_min_rows,
           c->own_min_rows[0], c->own_min_rows[1], c->qgemm_min_rows[2]);

    /* The arena holds every weight matrix the GEMV/GEMM runs read: finite values in every
     * dtype (f16/bf16 bit patterns below 0x3c00 are small normals or zero). */
    unsigned char *arena;
    check(be->ops->alloc(be, ARENA_BYTES, (void **)&arena), "arena");
    uint32_t *a32 = (uint32_t *)arena;
    for (size_t i = 0; i < ARENA_BYTES / 4; i++) {
        uint32_t r = (uint32_t)(i * 2654435761u);
        a32[i] = ((r >> 4) & 0x3bff3bffu) | 0x20002000u; /* as f32: ~1e-19..; as f16: normal */
    }
    size_t xn = (size_t)1024 * 32000;
    float *x = malloc(xn * 4), *out = malloc(xn * 4);
    for (size_t i = 0; i < xn; i++) x[i] = (float)((int)(i % 29) - 14) / 14.0f;

    timing gbs = bench_stream(c->pool, c->isa, (const float *)arena);
    if (want("gemv")) bench_gemv(be, arena, x, out, gbs);
    if (want("qgemv")) bench_qgemv(be, arena, x, out, gbs);
    if (want("qgemm")) bench_qgemm(be, arena, x, out);
    if (want("batch")) bench_batch(be, arena, x, out);
    if (want("gemm")) bench_gemm(be, arena, x, out);
    for (int k = 0; k < 2 && want("attention"); k++) {
        pl_backend *b = k ? be16 : be;
        bench_attention(b, 12, 12, 64, 1, 1, 256, 0, "decode");
        bench_attention(b, 12, 12, 64, 32, 1, 256, 0, "decode");
        bench_attention(b, 12, 12, 64, 64, 1, 512, 0, "decode");
        bench_attention(b, 32, 4, 64, 16, 1, 1024, 0, "decode_gqa");
        bench_attention(b, 12, 12, 64, 1, 128, 128, 0, "prefill");
        bench_attention(b, 12, 12, 64, 4, 128, 512, 0, "prefill_chunk");
        /* Mistral's head shape (32 query heads over 8 KV heads of 128) at long contexts */
        for (int w = 0; w <= 1024; w += 1024) {
            bench_attention(b, 32, 8, 128, 4, 1, 8192, w, "decode_long");
            bench_attention(b, 32, 8, 128, 1, 128, 4096, w, "prefill_chunk_long");
        }
    }
    be->ops->free(be, arena);
    free(x), free(out);
    pl_backend_destroy(be);
    pl_backend_destroy(be16);
    return 0;
}
