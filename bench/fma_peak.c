/*
 * bench/fma_peak.c - the cores' f32 multiply-add peak: every thread runs independent FMA
 * chains on registers, so nothing but the FMA units bounds it.
 *
 * The roofline's GEMM peak is OpenBLAS's sgemm, which is what the targets are stated
 * against; but a BLAS that does not know the CPU (Debian's 0.3.21 on AMD Zen 5) stays well
 * under what the FMA units can do, and a kernel can then exceed "100% of peak". This number is
 * the ceiling no kernel can pass, reported beside it.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "bench/bench_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define CHAINS 16        /* independent accumulators: covers 4-cycle latency x 2 FMA pipes x 2 */
#define ITERS 4000000L   /* x CHAINS FMAs per thread per run: ~10-40 ms on one core */

/* Sixteen named accumulators, not an array: an array passed to asm operands lives in memory
 * and every iteration would store and reload it. The empty asm keeps each one live in a
 * register on every iteration, so the compiler can neither fold nor shorten the chains. */
#define FMA16(FMA, x, y)                                                                       \
    do {                                                                                       \
        a0 = FMA(a0, x, y); a1 = FMA(a1, x, y); a2 = FMA(a2, x, y); a3 = FMA(a3, x, y);       \
        a4 = FMA(a4, x, y); a5 = FMA(a5, x, y); a6 = FMA(a6, x, y); a7 = FMA(a7, x, y);       \
        a8 = FMA(a8, x, y); a9 = FMA(a9, x, y); a10 = FMA(a10, x, y); a11 = FMA(a11, x, y);   \
        a12 = FMA(a12, x, y); a13 = FMA(a13, x, y); a14 = FMA(a14, x, y);                     \
        a15 = FMA(a15, x, y);                                                                  \
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5),     \
                              "+v"(a6), "+v"(a7));                                             \
        __asm__ volatile("" : "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11), "+v"(a12),           \
                              "+v"(a13), "+v"(a14), "+v"(a15));                                \
    } while (0)
#define SUM16(ADD)                                                                             \
    ADD(ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7))),                     \
        ADD(ADD(ADD(a8, a9), ADD(a10, a11)), ADD(ADD(a12, a13), ADD(a14, a15))))

__attribute__((target("avx512f"))) static float chains_avx512(void) {
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2);
    __m512 a3 = _mm512_set1_ps(3), a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5);
    __m512 a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7), a8 = _mm512_set1_ps(8);
    __m512 a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
    __m512 a12 = _mm512_set1_ps(12), a13 = _mm512_set1_ps(13), a14 = _mm512_set1_ps(14);
    __m512 a15 = _mm512_set1_ps(15);
    for (long it = 0; it < ITERS; it++) FMA16(_mm512_fmadd_ps, x, y);
    return _mm512_reduce_add_ps(SUM16(_mm512_add_ps));
}

/* AVX2 has 16 vector registers: 16 chains plus the two operands spilled to the stack (Zen 3:
 * 55 GFLOP/s against sgemm's 160). 12 chains, more than the 8 that 4-cycle FMAs on 2 pipes
 * need, leave room for x and y (196). */
#define FMA12(FMA, x, y)                                                                       \
    do {                                                                                       \
        a0 = FMA(a0, x, y); a1 = FMA(a1, x, y); a2 = FMA(a2, x, y); a3 = FMA(a3, x, y);       \
        a4 = FMA(a4, x, y); a5 = FMA(a5, x, y); a6 = FMA(a6, x, y); a7 = FMA(a7, x, y);       \
        a8 = FMA(a8, x, y); a9 = FMA(a9, x, y); a10 = FMA(a10, x, y); a11 = FMA(a11, x, y);   \
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));    \
        __asm__ volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));  \
    } while (0)
#define CHAINS_AVX2 12

__attribute__((target("avx2,fma"))) static float chains_avx2(void) {
    const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2);
    __m256 a3 = _mm256_set1_ps(3), a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5);
    __m256 a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7), a8 = _mm256_set1_ps(8);
    __m256 a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11);
    for (long it = 0; it < ITERS; it++) FMA12(_mm256_fmadd_ps, x, y);
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float v[8];
    _mm256_storeu_ps(v, s);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

typedef struct fma_run {
    bool avx512;
    float sink;
} fma_run;

static void *fma_main(void *arg) {
    fma_run *r = arg;
    r->sink = r->avx512 ? chains_avx512() : chains_avx2();
    return NULL;
}

double pl_bench_fma_peak_gflops(int n_threads, int reps, const char **isa) {
    __builtin_cpu_init();
    bool avx512 = __builtin_cpu_supports("avx512f");
    if (!avx512 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
        *isa = "none";
        return 0.0;
    }
    *isa = avx512 ? "AVX-512" : "AVX2";
    if (n_threads < 1) n_threads = 1;
    fma_run *runs = calloc((size_t)n_threads, sizeof *runs);
    pthread_t *tid = calloc((size_t)n_threads, sizeof *tid);
    double best = 0;
    if (!runs || !tid) goto done;
    for (int r = 0; r <= reps; r++) { /* r == 0 warms up (clock ramp, thread start) */
        double t0 = pl_bench_now_s();
        int started = 1;
        for (int k = 0; k < n_threads; k++) runs[k].avx512 = avx512;
        for (; started < n_threads; started++)
            if (pthread_create(&tid[started], NULL, fma_main, &runs[started]) != 0) break;
        fma_main(&runs[0]);
        for (int k = 1; k < started; k++) pthread_join(tid[k], NULL);
        double dt = pl_bench_now_s() - t0;
        double flops = 2.0 * (avx512 ? 16 * CHAINS : 8 * CHAINS_AVX2) * (double)ITERS * started;
        if (r > 0 && flops / dt > best) best = flops / dt;
    }
done:
    free(runs);
    free(tid);
    return best * 1e-9;
}

#else

double pl_bench_fma_peak_gflops(int n_threads, int reps, const char **isa) {
    (void)n_threads;
    (void)reps;
    *isa = "none";
    return 0.0;
}

#endif
