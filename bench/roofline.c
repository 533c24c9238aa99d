/*
 * bench/roofline.c - `pagellm bench roofline`: this machine's ceilings, measured now.
 *
 * Two numbers bound every kernel on a CPU: how fast memory can be streamed and how fast the
 * cores multiply. They are measured here rather than taken from a datasheet, because this
 * project runs on shared virtual machines whose real limits are neither documented nor
 * stable; profiles then read as fractions of what the machine did in the same run.
 *
 * - Memory: three arrays of doubles, each far larger than the last-level cache, split into
 *   one contiguous chunk per thread (pthreads, all online CPUs by default). Each thread first
 *   touches its own chunk so that pages are placed where they are used. Two kernels:
 *   read (sum of all three arrays in one pass: 8 bytes per element read, no writes: the
 *   pattern of a matmul streaming its weights) and STREAM's triad a = b + s*c (24 bytes per element
 *   counted; the write-allocate traffic is not counted, as in STREAM). Best of --roofline-reps.
 * - Compute: f32 square sgemm through OpenBLAS (cblas_sgemm, its own threads), best of reps
 *   after one warm-up call, 2*n^3 FLOPs per call; and the FMA units' peak (bench/fma_peak.c),
 *   the ceiling no kernel passes even where OpenBLAS stays under it.
 *
 * Sizing: per array max(32 MiB, 8/3 x LLC) capped at 1 GiB and at an eighth of the memory
 * available now; --array-mib overrides. Some hypervisors report a host-wide LLC (hundreds of
 * MiB); the cap keeps the footprint bounded and the result says which sizes were used.
 */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_internal.h"
#include "tools/cli.h"

/* ------------------------------------------------------------------------------------------
 * Options
 * ---------------------------------------------------------------------------------------- */

void pl_bench_roofline_opts_default(pl_bench_roofline_opts *o) {
    *o = (pl_bench_roofline_opts){.array_mib = 0, .n_threads = 0, .gemm_n = 2048, .reps = 5};
}

int pl_bench_roofline_flag(pl_bench_roofline_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    long long n;
    if (!strcmp(a, "--array-mib")) {
        if (!cli_int(a, v, 1, 1 << 20, &n)) return -1;
        o->array_mib = n;
    } else if (!strcmp(a, "--roofline-threads")) {
        if (!cli_int(a, v, 0, 4096, &n)) return -1;
        o->n_threads = (int)n;
    } else if (!strcmp(a, "--gemm-n")) {
        if (!cli_int(a, v, 16, 16384, &n)) return -1;
        o->gemm_n = (int)n;
    } else if (!strcmp(a, "--roofline-reps")) {
        if (!cli_int(a, v, 1, 1000, &n)) return -1;
        o->reps = (int)n;
    } else {
        return 0;
    }
    ++*i;
    return 1;
}

void pl_bench_print_roofline_flags(void) {
    printf("roofline flags:\n"
           "  --array-mib N         size of each of the 3 arrays (default: from the LLC, <= 1024)\n"
           "  --roofline-threads N  memory kernel threads (0 = all online CPUs)\n"
           "  --gemm-n N (2048)     sgemm size (N x N x N)\n"
           "  --roofline-reps N (5) best of N\n");
}

/* ------------------------------------------------------------------------------------------
 * Memory kernels
 * ---------------------------------------------------------------------------------------- */

enum { K_INIT, K_TRIAD, K_READ };

typedef struct team team;
typedef struct worker {
    team *t;
    size_t lo, hi;  /* element range of this thread in each array */
    double sum;     /* keeps the read kernel's loads alive */
} worker;

struct team {
    pthread_barrier_t bar;
    /* The start gate: threads wait here until all exist (go) or one could not be made
     * (abort); the barrier counts every thread, so a missing one would hang the others. */
    pthread_mutex_t gate_mu;
    pthread_cond_t gate_cv;
    bool go, abort;
    double *a, *b, *c;   /* (n) each, 64-byte aligned */
    size_t n;
    int n_threads;
    int kind;            /* written by thread 0 between barriers */
    int reps;
    double best[3];      /* best seconds per kind, thread 0 only */
    worker *w;           /* (n_threads) */
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

static void run_kernel(team *t, worker *w, int kind) {
    double *restrict a = t->a;
    const double *restrict b = t->b, *restrict c = t->c;
    switch (kind) {
    case K_INIT:
        for (size_t i = w->lo; i < w->hi; i++) {
            t->a[i] = 0.0;
            t->b[i] = 1.0;
            t->c[i] = 2.0;
        }
        break;
    case K_TRIAD:
        for (size_t i = w->lo; i < w->hi; i++) a[i] = b[i] + 3.0 * c[i];
        break;
    case K_READ:
        w->sum += read_sum(a, b, c, w->lo, w->hi);
        break;
    }
}

/* Every thread runs: init once, then reps of triad, then reps of read, each rep between two
 * barriers; thread 0 times from the first barrier to the second, so a rep lasts until the
 * slowest thread is done. */
static void *worker_main(void *arg) {
    worker *w = arg;
    team *t = w->t;
    bool lead = w == &t->w[0];
    pthread_mutex_lock(&t->gate_mu);
    while (!t->go && !t->abort) pthread_cond_wait(&t->gate_cv, &t->gate_mu);
    bool abort = t->abort;
    pthread_mutex_unlock(&t->gate_mu);
    if (abort) return NULL;
    static const int kinds[] = {K_INIT, K_TRIAD, K_READ};
    for (int k = 0; k < 3; k++) {
        int reps = kinds[k] == K_INIT ? 1 : t->reps;
        for (int r = 0; r < reps; r++) {
            pthread_barrier_wait(&t->bar);
            double t0 = lead ? pl_bench_now_s() : 0;
            run_kernel(t, w, kinds[k]);
            pthread_barrier_wait(&t->bar);
            if (lead) {
                double dt = pl_bench_now_s() - t0;
                if (r == 0 || dt < t->best[k]) t->best[k] = dt;
            }
        }
    }
    return NULL;
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

static int measure_memory(const pl_bench_roofline_opts *o, pl_bench_roofline *out) {
    long llc = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
    llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    out->llc_bytes = llc > 0 ? (size_t)llc : 0;
    size_t bytes = o->array_mib ? (size_t)o->array_mib << 20 : auto_array_bytes(out->llc_bytes);
    team t = {.n = bytes / sizeof(double), .reps = o->reps,
              .gate_mu = PTHREAD_MUTEX_INITIALIZER, .gate_cv = PTHREAD_COND_INITIALIZER};
    t.n_threads = o->n_threads > 0 ? o->n_threads : pl_bench_online_cpus();
    out->array_bytes = t.n * sizeof(double);
    out->n_threads = t.n_threads;
    size_t alloc = (out->array_bytes + 63) / 64 * 64;
    t.a = aligned_alloc(64, alloc);
    t.b = aligned_alloc(64, alloc);
    t.c = aligned_alloc(64, alloc);
    t.w = calloc((size_t)t.n_threads, sizeof *t.w);
    pthread_t *tid = calloc((size_t)t.n_threads, sizeof *tid);
    int rc = 0, started = 1;
    bool have_bar = false;
    if (!t.a || !t.b || !t.c || !t.w || !tid) {
        fprintf(stderr, "pagellm roofline: cannot allocate 3 x %zu MiB (try --array-mib)\n",
                out->array_bytes >> 20);
        rc = 1;
        goto done;
    }
    if (pthread_barrier_init(&t.bar, NULL, (unsigned)t.n_threads) != 0) {
        fprintf(stderr, "pagellm roofline: pthread_barrier_init failed\n");
        rc = 1;
        goto done;
    }
    have_bar = true;
    for (int k = 0; k < t.n_threads; k++) {
        t.w[k] = (worker){.t = &t, .lo = t.n * (size_t)k / (size_t)t.n_threads,
                          .hi = t.n * (size_t)(k + 1) / (size_t)t.n_threads};
    }
    for (started = 1; started < t.n_threads; started++) {
        int e = pthread_create(&tid[started], NULL, worker_main, &t.w[started]);
        if (e) {
            fprintf(stderr, "pagellm roofline: pthread_create: %s; use --roofline-threads %d\n",
                    strerror(e), started);
            rc = 1;
            break;
        }
    }
    pthread_mutex_lock(&t.gate_mu);
    if (rc) t.abort = true; else t.go = true;
    pthread_cond_broadcast(&t.gate_cv);
    pthread_mutex_unlock(&t.gate_mu);
    if (!rc) worker_main(&t.w[0]);
    for (int k = 1; k < started; k++) pthread_join(tid[k], NULL);
    if (rc) goto done;
    double sink = 0;
    for (int k = 0; k < t.n_threads; k++) sink += t.w[k].sum;
    if (!(sink > 0)) fprintf(stderr, "pagellm roofline: unexpected checksum %g\n", sink);
    out->triad_gbs = 3.0 * (double)out->array_bytes / t.best[K_TRIAD] * 1e-9;
    out->read_gbs = 3.0 * (double)out->array_bytes / t.best[K_READ] * 1e-9;
done:
    if (have_bar) pthread_barrier_destroy(&t.bar);
    free(tid);
    free(t.w);
    free(t.a);
    free(t.b);
    free(t.c);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * GEMM peak
 * ---------------------------------------------------------------------------------------- */

static int measure_gemm(const pl_bench_roofline_opts *o, pl_bench_roofline *out) {
    size_t n = (size_t)o->gemm_n;
    float *a = malloc(n * n * sizeof *a), *b = malloc(n * n * sizeof *b);
    float *c = malloc(n * n * sizeof *c);
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        fprintf(stderr, "pagellm roofline: cannot allocate 3 x %zu x %zu floats (--gemm-n)\n", n,
                n);
        return 1;
    }
    for (size_t i = 0; i < n * n; i++) {
        /* Small, varied values: no denormals, no overflow, nothing a BLAS could shortcut. */
        a[i] = (float)((i * 7919u) % 1000u) * 1e-3f;
        b[i] = (float)((i * 104729u) % 1000u) * 1e-3f;
    }
    double best = 0;
    for (int r = 0; r <= o->reps; r++) { /* r == 0 warms up (thread start, packing buffers) */
        double t0 = pl_bench_now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a,
                    (int)n, b, (int)n, 0.0f, c, (int)n);
        double dt = pl_bench_now_s() - t0;
        if (r == 1 || (r > 1 && dt < best)) best = dt;
    }
    out->gemm_n = (int)n;
    out->gemm_gflops = 2.0 * (double)n * (double)n * (double)n / best * 1e-9;
    out->blas_threads = openblas_get_num_threads();
    int bad = !isfinite(c[n * n - 1]);
    free(a);
    free(b);
    free(c);
    if (bad) {
        fprintf(stderr, "pagellm roofline: sgemm produced a non-finite result\n");
        return 1;
    }
    return 0;
}

int pl_bench_roofline_measure(const pl_bench_roofline_opts *o, pl_bench_roofline *out) {
    memset(out, 0, sizeof *out);
    double t0 = pl_bench_now_s();
    int rc = measure_memory(o, out);
    if (rc == 0) rc = measure_gemm(o, out);
    if (rc == 0) out->fma_gflops = pl_bench_fma_peak_gflops(out->n_threads, o->reps, &out->fma_isa);
    out->seconds = pl_bench_now_s() - t0;
    return rc;
}

void pl_bench_roofline_print(FILE *f, const pl_bench_roofline *r) {
    fprintf(f, "Memory read bandwidth: %.2f GB/s (sum over 3 x %zu MiB, %d threads; LLC %zu MiB)\n",
            r->read_gbs, r->array_bytes >> 20, r->n_threads, r->llc_bytes >> 20);
    fprintf(f, "Memory triad bandwidth: %.2f GB/s (a = b + s*c, 24 bytes/element)\n", r->triad_gbs);
    fprintf(f, "GEMM peak (f32 OpenBLAS sgemm %d^3, %d threads): %.2f GFLOP/s\n", r->gemm_n,
            r->blas_threads, r->gemm_gflops);
    fprintf(f, "Ridge point: %.2f FLOP/byte (GEMM peak / read bandwidth)\n",
            r->read_gbs > 0 ? r->gemm_gflops / r->read_gbs : 0.0);
    if (r->fma_gflops > 0)
        fprintf(f, "FMA peak (f32 %s FMAs on registers, %d threads): %.2f GFLOP/s; sgemm reaches "
                   "%.0f%% of it\n", r->fma_isa, r->n_threads, r->fma_gflops,
                100.0 * r->gemm_gflops / r->fma_gflops);
}

json_t *pl_bench_roofline_json(const pl_bench_roofline *r) {
    json_t *o = json_object();
    json_object_set_new(o, "read_gbs", json_real(r->read_gbs));
    json_object_set_new(o, "triad_gbs", json_real(r->triad_gbs));
    json_object_set_new(o, "gemm_gflops", json_real(r->gemm_gflops));
    json_object_set_new(o, "gemm_n", json_integer(r->gemm_n));
    json_object_set_new(o, "blas_threads", json_integer(r->blas_threads));
    json_object_set_new(o, "memory_threads", json_integer(r->n_threads));
    json_object_set_new(o, "array_bytes", json_integer((json_int_t)r->array_bytes));
    json_object_set_new(o, "llc_bytes", json_integer((json_int_t)r->llc_bytes));
    json_object_set_new(o, "ridge_flop_per_byte",
                        json_real(r->read_gbs > 0 ? r->gemm_gflops / r->read_gbs : 0.0));
    json_object_set_new(o, "fma_gflops", json_real(r->fma_gflops));
    json_object_set_new(o, "fma_isa", json_string(r->fma_isa ? r->fma_isa : "none"));
    json_object_set_new(o, "seconds", json_real(r->seconds));
    return o;
}

/* ------------------------------------------------------------------------------------------
 * The command
 * ---------------------------------------------------------------------------------------- */

static void usage(void) {
    printf("usage: pagellm bench roofline [roofline flags] [--output-json FILE]\n\n"
           "Measures this machine's memory bandwidth (read and STREAM triad, all threads, arrays\n"
           "far larger than the last-level cache), f32 GEMM peak (OpenBLAS sgemm) and the\n"
           "cores' f32 FMA peak (independent FMA chains on registers).\n\n");
    pl_bench_print_roofline_flags();
}

int pl_bench_roofline_main(int argc, char **argv) {
    pl_bench_roofline_opts o;
    pl_bench_roofline_opts_default(&o);
    const char *json_path = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int r = pl_bench_roofline_flag(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return 0;
        } else if (!strcmp(a, "--output-json") && i + 1 < argc) {
            json_path = argv[++i];
        } else {
            return pl_bench_unknown_flag("bench roofline", a);
        }
    }
    pl_bench_build_describe(true);
    pl_bench_roofline r;
    if (pl_bench_roofline_measure(&o, &r)) return 1;
    pl_bench_roofline_print(stdout, &r);
    int rc = 0;
    if (json_path) {
        json_t *root = pl_bench_roofline_json(&r);
        json_object_set_new(root, "build", pl_bench_build_json());
        if (!pl_bench_write_json(json_path, root)) rc = 1;
        json_decref(root);
    }
    return rc;
}
