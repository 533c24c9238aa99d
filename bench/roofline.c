/*
 * bench/roofline.c - `pagellm bench roofline`: this machine's ceilings, measured now.
 *
 * Two numbers bound every kernel on a CPU: how fast memory can be streamed and how fast the
 * cores multiply. They are measured here rather than taken from a datasheet, because this
 * project runs on shared virtual machines whose real limits are neither documented nor
 * stable; profiles then read as fractions of what the machine did in the same run.
 *
 * - Memory: read and STREAM triad bandwidth over three arrays far larger than the last-level
 *   cache, all threads (bench/membw.c). Best of --roofline-reps.
 * - Compute: f32 square sgemm through OpenBLAS (cblas_sgemm, its own threads), best of reps
 *   after one warm-up call, 2*n^3 FLOPs per call; and the FMA units' peak (bench/fma_peak.c),
 *   the ceiling no kernel passes even where OpenBLAS stays under it; and the int8
 *   multiply-add peak of each path the int8 GEMM has (bench/int_peak.c: AVX-512 VNNI,
 *   AVX-VNNI, AVX2, AMX), the ceilings of quantised batches.
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_internal.h"
#include "cli/cli.h"

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
    if (cli_is(a, "--array-mib")) {
        if (!cli_int(a, v, 1, 1 << 20, &n)) return -1;
        o->array_mib = n;
    } else if (cli_is(a, "--roofline-threads")) {
        if (!cli_int(a, v, 0, 4096, &n)) return -1;
        o->n_threads = (int)n;
    } else if (cli_is(a, "--gemm-n")) {
        if (!cli_int(a, v, 16, 16384, &n)) return -1;
        o->gemm_n = (int)n;
    } else if (cli_is(a, "--roofline-reps")) {
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
           "  --roofline-threads N  threads of the memory, GEMM and FMA kernels (0 = all online\n"
           "                        CPUs; with an engine: default its --threads)\n"
           "  --gemm-n N (2048)     sgemm size (N x N x N)\n"
           "  --roofline-reps N (5) best of N\n");
}

static int measure_memory(const pl_bench_roofline_opts *o, pl_bench_roofline *out) {
    pl_bench_membw m;
    int rc = pl_bench_membw_init(&m, o);
    if (rc) return rc;
    out->llc_bytes = m.llc_bytes;
    out->array_bytes = m.array_bytes;
    out->n_threads = m.n_threads;
    out->read_isa = m.isa;
    rc = pl_bench_membw_measure(&m, o->reps, &out->read_gbs, &out->triad_gbs);
    pl_bench_membw_free(&m);
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
    /* OpenBLAS runs its own threads: as many as the memory kernels and the engine use */
    openblas_set_num_threads(o->n_threads > 0 ? o->n_threads : pl_bench_online_cpus());
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
    pl_progress bar; /* three ceilings, seconds each */
    pl_progress_start(&bar, true, "ceilings", 4);
    bar.show_rate = false;
    snprintf(bar.label, sizeof bar.label, "roofline");
    snprintf(bar.note, sizeof bar.note, "memory bandwidth");
    pl_progress_update(&bar);
    double t0 = pl_bench_now_s();
    int rc = measure_memory(o, out);
    bar.done++;
    snprintf(bar.note, sizeof bar.note, "GEMM peak");
    pl_progress_update(&bar);
    if (rc == 0) rc = measure_gemm(o, out);
    bar.done++;
    snprintf(bar.note, sizeof bar.note, "FMA peak");
    pl_progress_update(&bar);
    if (rc == 0) out->fma_gflops = pl_bench_fma_peak_gflops(out->n_threads, o->reps, &out->fma_isa);
    bar.done++;
    snprintf(bar.note, sizeof bar.note, "int8 peaks");
    pl_progress_update(&bar);
    if (rc == 0) out->n_int_peaks = pl_bench_int_peaks(out->n_threads, o->reps, out->int_peaks);
    bar.done++;
    bar.note[0] = '\0';
    out->seconds = pl_bench_now_s() - t0;
    pl_progress_finish(&bar);
    return rc;
}

void pl_bench_roofline_print(FILE *f, const pl_bench_roofline *r) {
    fprintf(f,
            "Memory read bandwidth: %.2f GB/s (sum over 3 x %zu MiB, %s loads, %d threads; LLC "
            "%zu MiB)\n",
            r->read_gbs, r->array_bytes >> 20, r->read_isa, r->n_threads, r->llc_bytes >> 20);
    fprintf(f, "Memory triad bandwidth: %.2f GB/s (a = b + s*c, 24 bytes/element)\n", r->triad_gbs);
    fprintf(f, "GEMM peak (f32 OpenBLAS sgemm %d^3, %d threads): %.2f GFLOP/s\n", r->gemm_n,
            r->blas_threads, r->gemm_gflops);
    fprintf(f, "Ridge point: %.2f FLOP/byte (GEMM peak / read bandwidth)\n",
            r->read_gbs > 0 ? r->gemm_gflops / r->read_gbs : 0.0);
    if (r->fma_gflops > 0)
        fprintf(f, "FMA peak (f32 %s FMAs on registers, %d threads): %.2f GFLOP/s; sgemm reaches "
                   "%.0f%% of it\n", r->fma_isa, r->n_threads, r->fma_gflops,
                100.0 * r->gemm_gflops / r->fma_gflops);
    for (int i = 0; i < r->n_int_peaks; i++)
        fprintf(f, "Int8 peak (%s multiply-adds on registers, %d threads): %.2f GOPS\n",
                r->int_peaks[i].path, r->n_threads, r->int_peaks[i].gops);
}

json_t *pl_bench_roofline_json(const pl_bench_roofline *r) {
    json_t *o = json_object();
    json_object_set_new(o, "read_gbs", json_real(r->read_gbs));
    json_object_set_new(o, "triad_gbs", json_real(r->triad_gbs));
    json_object_set_new(o, "gemm_gflops", json_real(r->gemm_gflops));
    json_object_set_new(o, "gemm_n", json_integer(r->gemm_n));
    json_object_set_new(o, "blas_threads", json_integer(r->blas_threads));
    json_object_set_new(o, "memory_threads", json_integer(r->n_threads));
    json_object_set_new(o, "memory_isa", json_string(r->read_isa ? r->read_isa : "none"));
    json_object_set_new(o, "array_bytes", json_integer((json_int_t)r->array_bytes));
    json_object_set_new(o, "llc_bytes", json_integer((json_int_t)r->llc_bytes));
    json_object_set_new(o, "ridge_flop_per_byte",
                        json_real(r->read_gbs > 0 ? r->gemm_gflops / r->read_gbs : 0.0));
    json_object_set_new(o, "fma_gflops", json_real(r->fma_gflops));
    json_object_set_new(o, "fma_isa", json_string(r->fma_isa ? r->fma_isa : "none"));
    json_t *ip = json_object();
    for (int i = 0; i < r->n_int_peaks; i++)
        json_object_set_new(ip, r->int_peaks[i].path, json_real(r->int_peaks[i].gops));
    json_object_set_new(o, "int8_gops", ip);
    json_object_set_new(o, "seconds", json_real(r->seconds));
    return o;
}

/* ------------------------------------------------------------------------------------------
 * The command
 * ---------------------------------------------------------------------------------------- */

static void usage(void) {
    printf("usage: pagellm bench roofline [roofline flags] [--output-json FILE]\n\n"
           "Measures this machine's memory bandwidth (read and STREAM triad, all threads, arrays\n"
           "far larger than the last-level cache), f32 GEMM peak (OpenBLAS sgemm), the cores'\n"
           "f32 FMA peak (independent FMA chains on registers) and their int8 multiply-add peak\n"
           "per instruction path (AVX-512 VNNI, AVX-VNNI, AVX2, AMX: what the CPU has).\n\n");
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
        if (cli_is(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return 0;
        } else if (cli_is(a, "--output-json") && i + 1 < argc) {
            json_path = argv[++i];
        } else {
            return cli_unknown_flag("bench roofline", a, usage);
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
