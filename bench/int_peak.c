/*
 * bench/int_peak.c - the cores' int8 multiply-add peak, per instruction path the int8 GEMM
 * (kernels/cpu/qgemm.c) has: every thread runs independent accumulator chains on registers
 * (tiles for AMX), so only the multiply units bound it.
 *
 * Operations are counted as FLOPs are: a multiply and an add per int8 product, so GOPS sit
 * beside the f32 GFLOP/s of fma_peak.c.
 * - AVX-512 VNNI: vpdpbusd on 512 bits, 64 products per instruction.
 * - AVX-VNNI: vpdpbusd on 256 bits (VEX), 32.
 * - AVX2: vpmaddubsw + vpmaddwd + vpaddd, 32 products per three instructions (what the
 *   GEMM's AVX2 kernel issues per 4 k of 8 columns).
 * - AMX: tdpbusd on 16 x 64-byte tiles, 16 x 16 x 64 products per instruction, four C tiles
 *   in turn. Linux grants the tile state on request (arch_prctl); refused or absent: 0.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define ITERS 2000000L   /* x 12 chains per thread per run */
#define ITERS_AMX 100000L /* x 4 tile products */

/* Twelve named accumulators kept live in registers by empty asm (see fma_peak.c). */
#define KEEP6(a, b, c, d, e, f) __asm__ volatile("" : "+v"(a), "+v"(b), "+v"(c), "+v"(d), "+v"(e), "+v"(f))

#define CHAINS12(T, OP, x, y)                                                                  \
    T a0 = x, a1 = x, a2 = x, a3 = x, a4 = x, a5 = x, a6 = x, a7 = x, a8 = x, a9 = x, a10 = x, \
      a11 = x;                                                                                 \
    for (long it = 0; it < ITERS; it++) {                                                      \
        a0 = OP(a0, x, y); a1 = OP(a1, x, y); a2 = OP(a2, x, y); a3 = OP(a3, x, y);             \
        a4 = OP(a4, x, y); a5 = OP(a5, x, y); a6 = OP(a6, x, y); a7 = OP(a7, x, y);             \
        a8 = OP(a8, x, y); a9 = OP(a9, x, y); a10 = OP(a10, x, y); a11 = OP(a11, x, y);         \
        KEEP6(a0, a1, a2, a3, a4, a5);                                                         \
        KEEP6(a6, a7, a8, a9, a10, a11);                                                       \
    }

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static int chains_vnni512(void) {
    const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
#define OP(acc, a, b) _mm512_dpbusd_epi32(acc, a, b)
    CHAINS12(__m512i, OP, x, y)
#undef OP
    __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                 _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
    return _mm512_reduce_add_epi32(s);
}

__attribute__((target("avx2,avxvnni"))) static int chains_avxvnni(void) {
    const __m256i x = _mm256_set1_epi8(3), y = _mm256_set1_epi8(-2);
#define OP(acc, a, b) _mm256_dpbusd_avx_epi32(acc, a, b)
    CHAINS12(__m256i, OP, x, y)
#undef OP
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                                 _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7)));
    s = _mm256_add_epi32(s, _mm256_add_epi32(_mm256_add_epi32(a8, a9), _mm256_add_epi32(a10, a11)));
    return _mm256_extract_epi32(s, 0);
}

/* AVX2 has 16 registers: 12 chains leave x, y and the two temporaries room. The products
 * do not depend on the accumulators, so x and y are "changed" by an empty asm before each
 * one, else the compiler computes them once outside the loop. */
__attribute__((target("avx2"))) static int chains_avx2(void) {
    __m256i x = _mm256_set1_epi8(3), y = _mm256_set1_epi8(-2);
#define OP(acc, a, b)                                                                          \
    (__extension__({                                                                           \
        __asm__ volatile("" : "+v"(a), "+v"(b));                                               \
        _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b),                    \
                                                _mm256_set1_epi16(1)));                        \
    }))
    CHAINS12(__m256i, OP, x, y)
#undef OP
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                                 _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7)));
    s = _mm256_add_epi32(s, _mm256_add_epi32(_mm256_add_epi32(a8, a9), _mm256_add_epi32(a10, a11)));
    return _mm256_extract_epi32(s, 0);
}

typedef struct tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

__attribute__((target("amx-tile,amx-int8"))) static int tiles_amx(void) {
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    __asm__ volatile("" : : "m"(cfg) : "memory"); /* GCC 12 drops stores ldtilecfg reads */
    _tile_loadconfig(&cfg);
    int8_t src[16 * 64];
    memset(src, 1, sizeof src);
    _tile_loadd(4, src, 64);
    _tile_loadd(5, src, 64);
    _tile_loadd(6, src, 64);
    _tile_loadd(7, src, 64);
    for (int t = 0; t < 4; t++) {
        switch (t) {
        case 0: _tile_zero(0); break;
        case 1: _tile_zero(1); break;
        case 2: _tile_zero(2); break;
        default: _tile_zero(3); break;
        }
    }
    for (long it = 0; it < ITERS_AMX; it++) {
        _tile_dpbusd(0, 4, 6);
        _tile_dpbusd(1, 4, 7);
        _tile_dpbusd(2, 5, 6);
        _tile_dpbusd(3, 5, 7);
    }
    int32_t out[16 * 16];
    _tile_stored(0, out, 64);
    _tile_release();
    return out[0];
}

enum { P_VNNI512, P_AVXVNNI, P_AVX2, P_AMX, N_PATHS };
static const char *const PATH_NAMES[N_PATHS] = {"AVX-512 VNNI", "AVX-VNNI", "AVX2", "AMX"};
/* int8 operations (multiply + add per product) per thread per run */
static const double PATH_OPS[N_PATHS] = {2.0 * 64 * 12 * ITERS, 2.0 * 32 * 12 * ITERS,
                                         2.0 * 32 * 12 * ITERS, 2.0 * 16 * 16 * 64 * 4 * ITERS_AMX};

static bool have_path(int p) {
    __builtin_cpu_init();
    unsigned a, b, c, d;
    switch (p) {
    case P_VNNI512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vnni");
    case P_AVXVNNI:
        return __builtin_cpu_supports("avx2") && __get_cpuid_count(7, 1, &a, &b, &c, &d) &&
               (a & (1u << 4));
    case P_AVX2: return __builtin_cpu_supports("avx2");
    default:
#ifdef __linux__
        if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25)))
            return false;
        __asm__ volatile("xgetbv" : "=a"(a), "=d"(d) : "c"(0));
        if ((a & (3u << 17)) != (3u << 17)) return false;
        return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
#else
        return false;
#endif
    }
}

typedef struct int_run {
    int path;
    int sink;
} int_run;

static void *int_main(void *arg) {
    int_run *r = arg;
    switch (r->path) {
    case P_VNNI512: r->sink = chains_vnni512(); break;
    case P_AVXVNNI: r->sink = chains_avxvnni(); break;
    case P_AVX2: r->sink = chains_avx2(); break;
    default: r->sink = tiles_amx(); break;
    }
    return NULL;
}

int pl_bench_int_peaks(int n_threads, int reps, pl_bench_int_peak *out) {
    if (n_threads < 1) n_threads = 1;
    int_run *runs = calloc((size_t)n_threads, sizeof *runs);
    pthread_t *tid = calloc((size_t)n_threads, sizeof *tid);
    int n = 0;
    for (int p = 0; p < N_PATHS && runs && tid; p++) {
        if (!have_path(p)) continue;
        double best = 0;
        for (int r = 0; r <= reps; r++) { /* r == 0 warms up */
            double t0 = pl_bench_now_s();
            int started = 1;
            for (int k = 0; k < n_threads; k++) runs[k].path = p;
            for (; started < n_threads; started++)
                if (pthread_create(&tid[started], NULL, int_main, &runs[started]) != 0) break;
            int_main(&runs[0]);
            for (int k = 1; k < started; k++) pthread_join(tid[k], NULL);
            double dt = pl_bench_now_s() - t0, ops = PATH_OPS[p] * started;
            if (r > 0 && ops / dt > best) best = ops / dt;
        }
        out[n++] = (pl_bench_int_peak){.path = PATH_NAMES[p], .gops = best * 1e-9};
    }
    free(runs);
    free(tid);
    return n;
}

#else

int pl_bench_int_peaks(int n_threads, int reps, pl_bench_int_peak *out) {
    (void)n_threads, (void)reps, (void)out;
    return 0;
}

#endif
