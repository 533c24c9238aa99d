/*
 * kernels/cpu/matmul.c - out (n_rows, d_out) = x (n_rows, d_in) @ w^T, w (d_out, d_in) of
 * any weight type (f32, f16, bf16, the quantised types), on the thread pool.
 *
 * Three kernels, because the cost has different limits (the choice: pl_cpu_ctx's thresholds,
 * measured by bench/internal/kernels/bench_kernels):
 * - GEMV (few rows: decode of a handful of sequences): bound by reading the weights, so each
 *   weight row streams from memory exactly once for all rows of x. It walks the weight rows
 *   4 at a time, one from each quarter of the matrix (rows k, k + q, k + 2q, k + 3q), and for
 *   each group of 4 runs over x in groups of up to 4 rows (2 on AVX2) with a 4x4 (4x2) block
 *   of vector accumulators (dot products along d_in, a tree sum at the end). The 4 weight rows
 *   stay in L1 between x-row groups; f16/bf16 are widened to f32 in registers (F16C / shift).
 *   Taking the 4 rows from the quarters makes each thread read 4 long sequential streams,
 *   which the hardware prefetcher follows: 4 adjacent rows (1.5-3 KB each at d_in 768) were 4
 *   short streams per block, and even with a software prefetch of the next block batch-1
 *   decode read its weights at 77-93% of the bandwidth probe, against 98-110% now (f16 and
 *   f32 stories110m, alternating runs). A chunk (the unit of work stealing) is a run of rows
 *   in each quarter, so a thread's chunks continue its streams. Each output is one chain of
 *   FMAs along d_in whatever the number of x rows, so a row's result does not depend on the
 *   others in the call. Quantised weights run the integer GEMV of qgemv.c through the same
 *   chunks and quarters, after x is quantised once per call (pl_cpu_qact).
 * - Own GEMM (AVX-512 and AVX2; batched decode and prefill, own_gemm.c): register-tiled
 *   outer products on a transposed copy of x, every weight element read from memory once per
 *   256 rows. Quantised weights are dequantised chunk by chunk into its f32 buffers.
 * - Int8 GEMM (quantised weights from qgemm_min_rows rows: batched decode and prefill,
 *   qgemm.c): the activations quantised as for the GEMV, each panel of weight rows unpacked
 *   to int8 tiles once per call and multiplied with every row by register-blocked integer
 *   kernels (AVX-512 VNNI, AVX-VNNI, AVX2, AMX tiles where the CPU and OS allow them).
 * - OpenBLAS sgemm (single-threaded, one tile of output features per task): large batches
 *   where it measures faster, and every batch on CPUs without AVX2; f16/bf16 tiles are first
 *   widened (quantised tiles dequantised) into the task's thread scratch (TILE_FLOATS).
 * A matmul group (products of one x: q, k, v; gate, up) runs its GEMV products as one pool call
 * (gemv_group); the other kernels run product by product, where each call is long enough that
 * its start and end cost little.
 */
#include <cblas.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/qgemm.h"
#include "kernels/cpu/ranges.h"
#include "kernels/ref/ref.h"
#include "util/dtype.h"

/* Weight elements widened per f16/bf16 GEMM tile (1 MiB of f32 per thread). */
#define TILE_FLOATS (256u * 1024u)

typedef struct mm_job {
    pl_cpu_ctx *c;
    float *out;      /* (n_rows, d_out) */
    const float *x;  /* (n_rows, d_in) */
    const void *w;   /* (d_out, d_in) of wt */
    pl_wtype wt;
    pl_dtype dt;     /* wt as a pl_dtype for f32/f16/bf16; AUTO for the quantised types */
    const pl_cpu_qact *qa; /* GEMV of a quantised type: x quantised */
    int n_rows, d_in, d_out;
    int rows_per_task; /* GEMM: output features per task. GEMV: rows per quarter per chunk */
    int quarter;       /* GEMV: d_out / 4; rows 4 * quarter .. d_out - 1 are the tail */
    int tile_rows;     /* GEMM f16/bf16: weight rows widened at once */
} mm_job;

/* The GEMV products of one x (a matmul group: q, k, v), run as one pool call: their chunks are
 * numbered across all parts and cut into one range per thread, so one barrier ends them all,
 * and a thread done early steals from another product instead of waiting at each one's end. */
typedef struct gemv_group {
    mm_job part[PL_MATMUL_MAX_PARTS];
    int first_chunk[PL_MATMUL_MAX_PARTS + 1]; /* part p's chunks: first_chunk[p] .. [p+1]-1 */
    int n_parts;
    pl_ranges chunks;
} gemv_group;

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

/* out[r * d_out + o0 + j * quarter] = x_r . w_{o0 + j * quarter} for r < R (x rows from x),
 * j < W: one weight row from each quarter of the matrix (see the header). R, W, dt are
 * constants at every call site, so the accumulator block lives in registers. */
PL_INLINE PL_TARGET_AVX512 void gemv_blk_avx512(const mm_job *J, const float *x, float *out,
                                                int o0, const int R, const int W,
                                                const pl_dtype dt) {
    const size_t ld = (size_t)J->d_in;
    const int d_in = J->d_in;
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < W; j++) acc[r][j] = _mm512_setzero_ps();
    size_t wrow[4];
    for (int j = 0; j < W; j++) wrow[j] = (size_t)(o0 + j * J->quarter) * ld;
    int i = 0;
    for (; i + 16 <= d_in; i += 16) {
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
        float *o = out + (size_t)r * J->d_out + o0, s[4];
        if (W == 4)
            _mm_storeu_ps(s, pl_avx512_hsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
        else
            for (int j = 0; j < W; j++) s[j] = _mm512_reduce_add_ps(acc[r][j]);
        for (int j = 0; j < W; j++) o[(size_t)j * J->quarter] = s[j];
    }
}

/* Every x row against weight rows o0 + j * quarter (j < W), in x-row groups of 4. */
PL_INLINE PL_TARGET_AVX512 void gemv_rows_avx512(const mm_job *J, int o0, const int W,
                                                 const pl_dtype dt) {
    int r = 0;
    const size_t ld = (size_t)J->d_in, ldo = (size_t)J->d_out;
    for (; r + 4 <= J->n_rows; r += 4)
        gemv_blk_avx512(J, J->x + r * ld, J->out + r * ldo, o0, 4, W, dt);
    switch (J->n_rows - r) {
    case 3: gemv_blk_avx512(J, J->x + r * ld, J->out + r * ldo, o0, 3, W, dt); break;
    case 2: gemv_blk_avx512(J, J->x + r * ld, J->out + r * ldo, o0, 2, W, dt); break;
    case 1: gemv_blk_avx512(J, J->x + r * ld, J->out + r * ldo, o0, 1, W, dt); break;
    default: break;
    }
}

PL_INLINE PL_TARGET_AVX512 void gemv_avx512_dt(const mm_job *J, int k0, int k1, bool tail,
                                               const pl_dtype dt) {
    for (int k = k0; k < k1; k++) gemv_rows_avx512(J, k, 4, dt);
    if (tail)
        for (int o = 4 * J->quarter; o < J->d_out; o++) gemv_rows_avx512(J, o, 1, dt);
}

static PL_TARGET_AVX512 void gemv_avx512(const mm_job *J, int k0, int k1, bool tail) {
    switch (J->dt) {
    case PL_DTYPE_F16: gemv_avx512_dt(J, k0, k1, tail, PL_DTYPE_F16); break;
    case PL_DTYPE_BF16: gemv_avx512_dt(J, k0, k1, tail, PL_DTYPE_BF16); break;
    default: gemv_avx512_dt(J, k0, k1, tail, PL_DTYPE_F32); break;
    }
}

// ---------------------------------------------------------------------------------------------
// AVX2 GEMV: 16 registers hold a 4 (weight rows) x 2 (x rows) accumulator block

PL_INLINE PL_TARGET_AVX2 void gemv_blk_avx2(const mm_job *J, const float *x, float *out, int o0,
                                            const int R, const int W, const pl_dtype dt) {
    const size_t ld = (size_t)J->d_in;
    const int d_in = J->d_in;
    __m256 acc[2][4];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < W; j++) acc[r][j] = _mm256_setzero_ps();
    size_t wrow[4];
    for (int j = 0; j < W; j++) wrow[j] = (size_t)(o0 + j * J->quarter) * ld;
    int i = 0;
    for (; i + 8 <= d_in; i += 8) {
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
        float *o = out + (size_t)r * J->d_out + o0, s[4];
        if (W == 4)
            _mm_storeu_ps(s, pl_avx2_hsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
        else
            for (int j = 0; j < W; j++) s[j] = pl_avx2_hsum(acc[r][j]);
        for (int j = 0; j < W; j++) o[(size_t)j * J->quarter] = s[j];
    }
}

PL_INLINE PL_TARGET_AVX2 void gemv_rows_avx2(const mm_job *J, int o0, const int W,
                                             const pl_dtype dt) {
    int r = 0;
    const size_t ld = (size_t)J->d_in, ldo = (size_t)J->d_out;
    for (; r + 2 <= J->n_rows; r += 2)
        gemv_blk_avx2(J, J->x + r * ld, J->out + r * ldo, o0, 2, W, dt);
    if (r < J->n_rows) gemv_blk_avx2(J, J->x + r * ld, J->out + r * ldo, o0, 1, W, dt);
}

PL_INLINE PL_TARGET_AVX2 void gemv_avx2_dt(const mm_job *J, int k0, int k1, bool tail,
                                           const pl_dtype dt) {
    for (int k = k0; k < k1; k++) gemv_rows_avx2(J, k, 4, dt);
    if (tail)
        for (int o = 4 * J->quarter; o < J->d_out; o++) gemv_rows_avx2(J, o, 1, dt);
}

static PL_TARGET_AVX2 void gemv_avx2(const mm_job *J, int k0, int k1, bool tail) {
    switch (J->dt) {
    case PL_DTYPE_F16: gemv_avx2_dt(J, k0, k1, tail, PL_DTYPE_F16); break;
    case PL_DTYPE_BF16: gemv_avx2_dt(J, k0, k1, tail, PL_DTYPE_BF16); break;
    default: gemv_avx2_dt(J, k0, k1, tail, PL_DTYPE_F32); break;
    }
}

#endif /* PL_CPU_X86 */

// ---------------------------------------------------------------------------------------------
// tasks

/* Chunk c: rows k .. k1-1 of each quarter (k = c * rows_per_task), and the last chunk also
 * the tail. */
static void gemv_chunk(mm_job *J, int chunk, int thread) {
    int k0 = chunk * J->rows_per_task, k1 = k0 + J->rows_per_task;
    if (k1 > J->quarter) k1 = J->quarter;
    bool tail = k1 == J->quarter;
    if (J->qa) {
        pl_cpu_qgemv_job Q = {.c = J->c, .a = J->qa, .w = J->w, .wt = J->wt, .out = J->out,
                              .n_rows = J->n_rows, .d_in = J->d_in, .d_out = J->d_out,
                              .quarter = J->quarter};
        pl_cpu_qgemv(&Q, k0, k1, tail);
        return;
    }
    switch (J->c->isa) {
#ifdef PL_CPU_X86
    case PL_CPU_ISA_AVX512: gemv_avx512(J, k0, k1, tail); break;
    case PL_CPU_ISA_AVX2: gemv_avx2(J, k0, k1, tail); break;
#endif
    default:
        for (int q = 0; q < 4; q++)
            gemv_scalar(J, k0 + q * J->quarter, k1 + q * J->quarter, J->c->scratch[thread]);
        if (tail) gemv_scalar(J, 4 * J->quarter, J->d_out, J->c->scratch[thread]);
        break;
    }
}

/* Task r: range r's chunks in order, then the others' from their backs. */
static void gemv_task(void *arg, int r, int thread) {
    gemv_group *G = arg;
    bool own;
    for (int ch; (ch = pl_ranges_next(&G->chunks, r, &own)) >= 0;) {
        int p = 0;
        while (ch >= G->first_chunk[p + 1]) p++;
        gemv_chunk(&G->part[p], ch - G->first_chunk[p], thread);
    }
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
    uint64_t row_bytes;
    pl_wtype_bytes(J->wt, (uint64_t)d_in, &row_bytes);
    for (int t0 = o0; t0 < o1; t0 += J->tile_rows) {
        int n = o1 - t0 < J->tile_rows ? o1 - t0 : J->tile_rows;
        const unsigned char *src = (const unsigned char *)J->w + (size_t)t0 * row_bytes;
        if (J->dt == PL_DTYPE_AUTO) /* quantised: whole rows are a run of whole blocks */
            pl_cpu_dequant(J->c->isa, tile, src, J->wt, 0, (size_t)n * d_in / 32);
        else
            pl_cpu_convert_row(J->c->isa, tile, src, J->dt, (size_t)n * d_in);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, J->n_rows, n, d_in, 1.0f, J->x, d_in,
                    tile, d_in, 0.0f, J->out + t0, J->d_out);
    }
}

static pl_cpu_mm_path choose_path(const pl_cpu_ctx *c, pl_wtype wt, int n_rows) {
    pl_cpu_mm_path path = c->mm_force;
    bool own_ok = c->isa >= PL_CPU_ISA_AVX2, quant = pl_wtype_is_quant(wt);
    if (path == PL_CPU_MM_OWN && !own_ok) path = PL_CPU_MM_AUTO;
    if (path == PL_CPU_MM_QGEMM && !quant) path = PL_CPU_MM_AUTO;
    if (path != PL_CPU_MM_AUTO) return path;
    int d = pl_cpu_mm_class(wt);
    if (quant) /* the integer kernels, on the activations quantised once */
        return n_rows >= c->qgemm_min_rows[d] ? PL_CPU_MM_QGEMM : PL_CPU_MM_GEMV;
    if (!own_ok) return n_rows >= c->gemm_min_rows ? PL_CPU_MM_BLAS : PL_CPU_MM_GEMV;
    if (n_rows < c->own_min_rows[d]) return PL_CPU_MM_GEMV;
    return c->own_max_rows[d] > 0 && n_rows > c->own_max_rows[d] ? PL_CPU_MM_BLAS : PL_CPU_MM_OWN;
}

static pl_status run_own(pl_cpu_ctx *c, const mm_job *J) {
    /* blocks of PL_CPU_OWN_MAX_ROWS rows: each reads the weights again, from L3 if they fit */
    for (int r0 = 0; r0 < J->n_rows; r0 += PL_CPU_OWN_MAX_ROWS) {
        int r = J->n_rows - r0 < PL_CPU_OWN_MAX_ROWS ? J->n_rows - r0 : PL_CPU_OWN_MAX_ROWS;
        PL_TRY(pl_cpu_own_gemm(c, J->out + (size_t)r0 * J->d_out, J->x + (size_t)r0 * J->d_in,
                               J->w, J->wt, r, J->d_in, J->d_out));
    }
    return PL_OK;
}

static pl_status run_blas(pl_cpu_ctx *c, mm_job *J) {
    /* Tiles of >= 64 features keep sgemm's packing overhead small; 2 per thread balance a
     * core lost to another process. */
    int n_tasks = pl_cpu_n_tasks(c, (size_t)J->d_out, 64);
    if (n_tasks > 2 * c->n_threads) n_tasks = 2 * c->n_threads;
    J->rows_per_task = pl_cpu_round_up((J->d_out + n_tasks - 1) / n_tasks, 16);
    if (J->wt != PL_WTYPE_F32) {
        int tr = (int)(TILE_FLOATS / (unsigned)J->d_in) / 16 * 16;
        J->tile_rows = tr < 16 ? 16 : tr;
        PL_TRY(pl_cpu_reserve(c, (size_t)J->tile_rows * J->d_in, 0));
    }
    pl_threadpool_run(c->pool, (J->d_out + J->rows_per_task - 1) / J->rows_per_task, gemm_task,
                      J);
    return PL_OK;
}

/* Cuts J's output features into GEMV chunks (sets rows_per_task); returns their count.
 * A chunk is the unit a thread steals once its own range is done, so its length is the wait
 * at the call's end when one thread was held up: with chunks of 64K multiply-adds (8 per
 * thread at most) a decode-at-batch-1 call ended a mean 4.3-4.7 us after its threads' tasks
 * (p90 7.4-7.9 us), with these 1.6-2.2 us (p90 2.2-2.8 us), in calls of ~165 us (f16
 * stories110m, 3 alternating instrumented runs). Claims are cheap: a CAS on the thread's own
 * range word, no wake-up. */
#define GEMV_CHUNK_MACS (1u << 14)
#define GEMV_CHUNKS_PER_THREAD 32

static int gemv_chunks(const pl_cpu_ctx *c, mm_job *J) {
    size_t work = (size_t)J->d_out * J->d_in * J->n_rows, want = work / GEMV_CHUNK_MACS;
    size_t cap = (size_t)c->n_threads * GEMV_CHUNKS_PER_THREAD;
    int n = c->n_threads <= 1 || want < 2 ? 1 : (int)(want < cap ? want : cap);
    /* a whole number of chunks per thread: 9 chunks on 2 threads take 5 chunk-times, 10 take 5
     * shorter ones */
    n = pl_cpu_round_up(n, c->n_threads);
    J->quarter = J->d_out / 4;
    if (J->quarter == 0) {
        J->rows_per_task = 0;
        return 1; /* the tail alone */
    }
    J->rows_per_task = (J->quarter + n - 1) / n;
    return (J->quarter + J->rows_per_task - 1) / J->rows_per_task;
}

pl_status pl_cpu_matmul_group(pl_backend *be, const pl_matmul_part *parts, int n_parts,
                              const float *x, int n_rows, int d_in) {
    PL_TRY(pl_check_matmul_parts(parts, n_parts));
    for (int p = 0; p < n_parts; p++)
        PL_TRY(pl_ref_check_matmul(parts[p].out, x, parts[p].w, parts[p].w_type, n_rows, d_in,
                                   parts[p].d_out));
    if (n_rows == 0) return PL_OK;
    pl_cpu_ctx *c = be->ctx;
    gemv_group G = {.n_parts = 0};
    int quant[PL_MATMUL_MAX_PARTS], n_quant = 0;
    bool is_qgemm[PL_MATMUL_MAX_PARTS] = {false};
    unsigned layouts = 0;
    for (int p = 0; p < n_parts; p++) {
        mm_job J = {.c = c, .out = parts[p].out, .x = x, .w = parts[p].w,
                    .wt = parts[p].w_type, .dt = pl_wtype_dtype(parts[p].w_type),
                    .n_rows = n_rows, .d_in = d_in, .d_out = parts[p].d_out};
        switch (choose_path(c, J.wt, n_rows)) {
        case PL_CPU_MM_OWN: PL_TRY(run_own(c, &J)); break;
        case PL_CPU_MM_BLAS: PL_TRY(run_blas(c, &J)); break;
        case PL_CPU_MM_QGEMM: /* after the others, on x quantised once */
            is_qgemm[n_quant] = true;
            quant[n_quant++] = p;
            layouts |= PL_CPU_QA_SUMS;
            break;
        default: /* GEMV: gathered into one pool call below */
            if (pl_wtype_is_quant(J.wt)) { /* after the others, on x quantised once */
                quant[n_quant++] = p;
                layouts |= pl_cpu_qact_layouts(c, J.wt);
                break;
            }
            if (c->isa == PL_CPU_ISA_SCALAR && J.dt != PL_DTYPE_F32)
                PL_TRY(pl_cpu_reserve(c, (size_t)d_in, 0));
            G.first_chunk[G.n_parts + 1] = G.first_chunk[G.n_parts] + gemv_chunks(c, &J);
            G.part[G.n_parts++] = J;
            break;
        }
    }
    if (G.n_parts > 0) {
        pl_ranges_init(&G.chunks, G.first_chunk[G.n_parts], c->n_threads);
        pl_threadpool_run(c->pool, G.chunks.n, gemv_task, &G);
    }
    /* The quantised parts, in blocks of rows whose quantised x (a few bytes a value) stays
     * small: x quantised once per block for all of them, then the integer GEMV parts as one
     * pool call and the int8 GEMM parts as another. */
    for (int r0 = 0; n_quant > 0 && r0 < n_rows; r0 += PL_CPU_QGEMV_BLOCK_ROWS) {
        int rb = n_rows - r0 < PL_CPU_QGEMV_BLOCK_ROWS ? n_rows - r0 : PL_CPU_QGEMV_BLOCK_ROWS;
        pl_cpu_qact qa;
        PL_TRY(pl_cpu_qact_quantize(c, x + (size_t)r0 * d_in, rb, d_in, layouts, &qa));
        gemv_group Q = {.n_parts = 0};
        pl_cpu_qgemm_part qg[PL_MATMUL_MAX_PARTS];
        int n_qg = 0;
        for (int k = 0; k < n_quant; k++) {
            const pl_matmul_part *pp = &parts[quant[k]];
            if (is_qgemm[k]) {
                qg[n_qg++] = (pl_cpu_qgemm_part){.out = pp->out + (size_t)r0 * pp->d_out,
                                                 .ldo = (size_t)pp->d_out, .w = pp->w,
                                                 .wt = pp->w_type, .d_out = pp->d_out};
                continue;
            }
            mm_job J = {.c = c, .out = pp->out + (size_t)r0 * pp->d_out, .x = NULL, .w = pp->w,
                        .wt = pp->w_type, .dt = PL_DTYPE_AUTO, .qa = &qa, .n_rows = rb,
                        .d_in = d_in, .d_out = pp->d_out};
            Q.first_chunk[Q.n_parts + 1] = Q.first_chunk[Q.n_parts] + gemv_chunks(c, &J);
            Q.part[Q.n_parts++] = J;
        }
        if (Q.n_parts > 0) {
            pl_ranges_init(&Q.chunks, Q.first_chunk[Q.n_parts], c->n_threads);
            pl_threadpool_run(c->pool, Q.chunks.n, gemv_task, &Q);
        }
        if (n_qg > 0) PL_TRY(pl_cpu_qgemm(c, &qa, NULL, rb, qg, n_qg));
    }
    return PL_OK;
}

pl_status pl_cpu_matmul(pl_backend *be, float *out, const float *x, const void *w,
                        pl_wtype w_type, int n_rows, int d_in, int d_out) {
    pl_matmul_part part = {.out = out, .w = w, .w_type = w_type, .d_out = d_out};
    return pl_cpu_matmul_group(be, &part, 1, x, n_rows, d_in);
}
