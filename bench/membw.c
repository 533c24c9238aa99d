/*
 * bench/membw.c - the memory bandwidth probe: three arrays far larger than the last-level
 * cache, kept between measurements so a benchmark can measure the machine again between its
 * own iterations (bench latency) without paying the arrays' first touch each time.
 *
 * The arrays (doubles) are split into one contiguous chunk per thread (pthreads, all online
 * CPUs by default); each thread first touches its own chunk, so pages are placed where they
 * are used. Two kernels: read (sum of all three arrays in one pass: 8 bytes per element read,
 * no writes: the pattern of a matmul streaming its weights) and STREAM's triad a = b + s*c
 * (24 bytes per element counted; the write-allocate traffic is not counted, as in STREAM).
 * Both use the widest loads the CPU has among those built here (AVX-512, AVX2, else what the
 * compiler makes of plain C for baseline x86-64 or other machines): a ceiling must be reached
 * the way the kernels measured against it read. On the Zen 3 machine the baseline build (8-
 * and 16-byte loads) read 3-23% less than 32-byte loads (7 alternating runs of 3 x 682 MiB,
 * 2 threads), and less than the AVX2 GEMV streamed its weights.
 *
 * Sizing: per array max(32 MiB, 8/3 x LLC) capped at 1 GiB and at an eighth of the memory
 * available now; --array-mib overrides. Some hypervisors report a host-wide LLC (hundreds of
 * MiB); the cap keeps the footprint bounded and the result says which sizes were used.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_internal.h"

enum { K_INIT, K_TRIAD, K_READ, N_KINDS };

typedef struct team team;
typedef struct worker {
    team *t;
    size_t lo, hi;  /* element range of this thread in each array */
    double sum;     /* keeps the read kernel's loads alive */
} worker;

struct team {
    pl_bench_membw *m;
    pthread_barrier_t bar;
    /* The start gate: threads wait here until all exist (go) or one could not be made
     * (abort); the barrier counts every thread, so a missing one would hang the others. */
    pthread_mutex_t gate_mu;
    pthread_cond_t gate_cv;
    bool go, abort;
    int reps[N_KINDS];     /* repetitions of each kernel in this run, in kind order; 0 skips */
    double best[N_KINDS];  /* best seconds per kind, thread 0 only */
    worker *w;             /* (n_threads) */
};

/* Sums a, b and c over [lo, hi) in one pass: three concurrent streams keep more misses in
 * flight than one (measured here: ~15% more bandwidth per core than three passes), and eight
 * independent chains keep the adds from serialising, so the loads set the pace. */
static double read_sum(const double *a, const double *b, const double *c, size_t lo,
                       size_t hi) {
    double s[8] = {0};
    size_t i = lo;
    for (; i + 4 <= hi; i += 4)
        for (int k = 0; k < 4; k++) {
            s[k] += a[i + k] + b[i + k];
            s[k + 4] += c[i + k];
        }
    for (; i < hi; i++) s[0] += a[i] + b[i] + c[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* Inlined into one function per target below, each vectorised with that target's vectors */
static inline __attribute__((always_inline)) void triad_body(double *restrict a,
                                                             const double *restrict b,
                                                             const double *restrict c,
                                                             size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++) a[i] = b[i] + 3.0 * c[i];
}

static void triad(double *restrict a, const double *restrict b, const double *restrict c,
                  size_t lo, size_t hi) {
    triad_body(a, b, c, lo, hi);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MEMBW_X86 1

/* read_sum with 32-byte loads: two sums per array pair, so the adds never wait on each other */
__attribute__((target("avx2"))) static double read_sum_avx2(const double *a, const double *b,
                                                            const double *c, size_t lo,
                                                            size_t hi) {
    __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        s0 = _mm256_add_pd(s0, _mm256_add_pd(_mm256_loadu_pd(a + i), _mm256_loadu_pd(b + i)));
        s1 = _mm256_add_pd(s1, _mm256_loadu_pd(c + i));
        s2 = _mm256_add_pd(s2,
                           _mm256_add_pd(_mm256_loadu_pd(a + i + 4), _mm256_loadu_pd(b + i + 4)));
        s3 = _mm256_add_pd(s3, _mm256_loadu_pd(c + i + 4));
    }
    double v[4];
    _mm256_storeu_pd(v, _mm256_add_pd(_mm256_add_pd(s0, s1), _mm256_add_pd(s2, s3)));
    return (v[0] + v[1]) + (v[2] + v[3]) + read_sum(a, b, c, i, hi);
}

__attribute__((target("avx512f"))) static double read_sum_avx512(const double *a,
                                                                 const double *b,
                                                                 const double *c, size_t lo,
                                                                 size_t hi) {
    __m512d s0 = _mm512_setzero_pd(), s1 = s0;
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        s0 = _mm512_add_pd(s0, _mm512_add_pd(_mm512_loadu_pd(a + i), _mm512_loadu_pd(b + i)));
        s1 = _mm512_add_pd(s1, _mm512_loadu_pd(c + i));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1)) + read_sum(a, b, c, i, hi);
}

__attribute__((target("avx2"))) static void triad_avx2(double *restrict a,
                                                       const double *restrict b,
                                                       const double *restrict c, size_t lo,
                                                       size_t hi) {
    triad_body(a, b, c, lo, hi);
}

__attribute__((target("avx512f"))) static void triad_avx512(double *restrict a,
                                                           const double *restrict b,
                                                           const double *restrict c,
                                                           size_t lo, size_t hi) {
    triad_body(a, b, c, lo, hi);
}
#endif

static const char ISA_AVX512[] = "AVX-512", ISA_AVX2[] = "AVX2", ISA_BASELINE[] = "baseline";

static const char *pick_isa(void) {
#ifdef MEMBW_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return ISA_AVX512;
    if (__builtin_cpu_supports("avx2")) return ISA_AVX2;
#endif
    return ISA_BASELINE;
}

static double read_any(const pl_bench_membw *m, size_t lo, size_t hi) {
#ifdef MEMBW_X86
    if (m->isa == ISA_AVX512) return read_sum_avx512(m->a, m->b, m->c, lo, hi);
    if (m->isa == ISA_AVX2) return read_sum_avx2(m->a, m->b, m->c, lo, hi);
#endif
    return read_sum(m->a, m->b, m->c, lo, hi);
}

static void triad_any(const pl_bench_membw *m, size_t lo, size_t hi) {
#ifdef MEMBW_X86
    if (m->isa == ISA_AVX512) {
        triad_avx512(m->a, m->b, m->c, lo, hi);
        return;
    }
    if (m->isa == ISA_AVX2) {
        triad_avx2(m->a, m->b, m->c, lo, hi);
        return;
    }
#endif
    triad(m->a, m->b, m->c, lo, hi);
}

static void run_kernel(const pl_bench_membw *m, worker *w, int kind) {
    switch (kind) {
    case K_INIT:
        for (size_t i = w->lo; i < w->hi; i++) {
            m->a[i] = 0.0;
            m->b[i] = 1.0;
            m->c[i] = 2.0;
        }
        break;
    case K_TRIAD:
        triad_any(m, w->lo, w->hi);
        break;
    case K_READ:
        w->sum += read_any(m, w->lo, w->hi);
        break;
    }
}

/* Every thread runs each kind's reps, each rep between two barriers; thread 0 times from the
 * first barrier to the second, so a rep lasts until the slowest thread is done. */
static void *worker_main(void *arg) {
    worker *w = arg;
    team *t = w->t;
    bool lead = w == &t->w[0];
    pthread_mutex_lock(&t->gate_mu);
    while (!t->go && !t->abort) pthread_cond_wait(&t->gate_cv, &t->gate_mu);
    bool abort = t->abort;
    pthread_mutex_unlock(&t->gate_mu);
    if (abort) return NULL;
    for (int k = 0; k < N_KINDS; k++) {
        for (int r = 0; r < t->reps[k]; r++) {
            pthread_barrier_wait(&t->bar);
            double t0 = lead ? pl_bench_now_s() : 0;
            run_kernel(t->m, w, k);
            pthread_barrier_wait(&t->bar);
            if (lead) {
                double dt = pl_bench_now_s() - t0;
                if (r == 0 || dt < t->best[k]) t->best[k] = dt;
            }
        }
    }
    return NULL;
}

/* Runs t->reps on m's threads (the caller is thread 0). Exit status. */
static int run_team(pl_bench_membw *m, team *t) {
    int n_threads = m->n_threads;
    t->m = m;
    t->gate_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    t->gate_cv = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    t->w = calloc((size_t)n_threads, sizeof *t->w);
    pthread_t *tid = calloc((size_t)n_threads, sizeof *tid);
    int rc = 0, started = 1;
    if (!t->w || !tid) {
        fprintf(stderr, "pagellm roofline: out of memory for %d threads\n", n_threads);
        rc = 1;
        goto done;
    }
    if (pthread_barrier_init(&t->bar, NULL, (unsigned)n_threads) != 0) {
        fprintf(stderr, "pagellm roofline: pthread_barrier_init failed\n");
        rc = 1;
        goto done;
    }
    for (int k = 0; k < n_threads; k++)
        t->w[k] = (worker){.t = t, .lo = m->n * (size_t)k / (size_t)n_threads,
                           .hi = m->n * (size_t)(k + 1) / (size_t)n_threads};
    for (started = 1; started < n_threads; started++) {
        int e = pthread_create(&tid[started], NULL, worker_main, &t->w[started]);
        if (e) {
            fprintf(stderr, "pagellm roofline: pthread_create: %s; use --roofline-threads %d\n",
                    strerror(e), started);
            rc = 1;
            break;
        }
    }
    pthread_mutex_lock(&t->gate_mu);
    if (rc) t->abort = true; else t->go = true;
    pthread_cond_broadcast(&t->gate_cv);
    pthread_mutex_unlock(&t->gate_mu);
    if (!rc) worker_main(&t->w[0]);
    for (int k = 1; k < started; k++) pthread_join(tid[k], NULL);
    pthread_barrier_destroy(&t->bar);
    if (!rc && t->reps[K_READ] > 0) {
        double sink = 0;
        for (int k = 0; k < n_threads; k++) sink += t->w[k].sum;
        if (!(sink > 0)) fprintf(stderr, "pagellm roofline: unexpected checksum %g\n", sink);
    }
done:
    free(tid);
    free(t->w);
    t->w = NULL;
    return rc;
}

static size_t auto_array_bytes(size_t llc) {
    size_t mib = (size_t)1 << 20;
    size_t want = llc ? llc / 3 * 8 : 256 * mib;
    if (want < 32 * mib) want = 32 * mib;
    if (want > 1024 * mib) want = 1024 * mib;
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0) {
        size_t avail = (size_t)pages * (size_t)psz / 8;
        if (want > avail && avail >= 8 * mib) want = avail;
    }
    return want;
}

int pl_bench_membw_init(pl_bench_membw *m, const pl_bench_roofline_opts *o) {
    memset(m, 0, sizeof *m);
    long llc = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
    llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    m->llc_bytes = llc > 0 ? (size_t)llc : 0;
    size_t bytes = o->array_mib ? (size_t)o->array_mib << 20 : auto_array_bytes(m->llc_bytes);
    m->n = bytes / sizeof(double);
    m->array_bytes = m->n * sizeof(double);
    m->n_threads = o->n_threads > 0 ? o->n_threads : pl_bench_online_cpus();
    m->isa = pick_isa();
    size_t alloc = (m->array_bytes + 63) / 64 * 64;
    m->a = aligned_alloc(64, alloc);
    m->b = aligned_alloc(64, alloc);
    m->c = aligned_alloc(64, alloc);
    if (!m->a || !m->b || !m->c) {
        fprintf(stderr, "pagellm roofline: cannot allocate 3 x %zu MiB (try --array-mib)\n",
                m->array_bytes >> 20);
        pl_bench_membw_free(m);
        return 1;
    }
    team t = {.reps = {[K_INIT] = 1}};
    int rc = run_team(m, &t);
    if (rc) pl_bench_membw_free(m);
    return rc;
}

int pl_bench_membw_measure(pl_bench_membw *m, int reps, double *read_gbs, double *triad_gbs) {
    team t = {.reps = {[K_TRIAD] = triad_gbs ? reps : 0, [K_READ] = reps}};
    int rc = run_team(m, &t);
    if (rc) return rc;
    double bytes = 3.0 * (double)m->array_bytes;
    *read_gbs = bytes / t.best[K_READ] * 1e-9;
    if (triad_gbs) *triad_gbs = bytes / t.best[K_TRIAD] * 1e-9;
    return 0;
}

void pl_bench_membw_free(pl_bench_membw *m) {
    free(m->a);
    free(m->b);
    free(m->c);
    m->a = m->b = m->c = NULL;
}
