/*
 * bench/bench_latency.c - `pagellm bench latency`: how long one batch takes, end to end.
 *
 * Modelled on `vllm bench latency`: a batch of --batch-size requests of --input-len prompt
 * tokens and exactly --output-len output tokens (EOS ignored) is submitted at once and run to
 * completion; that is one iteration. After --num-iters-warmup unmeasured iterations,
 * --num-iters are timed. Output lines follow vLLM's ("Avg latency: X seconds",
 * "P% percentile latency: X seconds"), then TTFT and TPOT over all measured requests.
 *
 * One engine serves every iteration. Each iteration draws fresh random prompts (seed +
 * iteration) so the prefix cache cannot turn later iterations' prefill into cache hits.
 * Unless --max-batch-size / --max-num-seqs are given, they are raised to --batch-size so the
 * whole batch really runs together.
 *
 * --bandwidth measures the memory read bandwidth (bench/membw.c) before the first measured
 * iteration and after each, and compares each iteration's weight streaming rate (weight bytes
 * per decode step over the median TPOT of its requests) with the mean of the two readings
 * around it. On a shared machine whose bandwidth swings from minute to minute, that ratio is
 * what decode at batch 1 is judged by (issue 8), and pairing it with a `bench roofline` run
 * made at another moment adds the swing to it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_internal.h"
#include "cli/cli.h"

#define DEFAULT_MODEL "dummy:stories15m"

static const int k_pcts[] = {10, 25, 50, 75, 90, 99};
#define N_PCTS (sizeof k_pcts / sizeof k_pcts[0])

static void usage(void) {
    printf("usage: pagellm bench latency [--model PATH|dummy:NAME] [--batch-size N (8)]\n"
           "                             [--input-len N (32)] [--output-len N (128)]\n"
           "                             [--num-iters-warmup N (2)] [--num-iters N (10)]\n"
           "                             [--seed N] [--output-json FILE] [--profile FILE]\n"
           "                             [--no-progress] [engine flags]\n\n"
           "Times whole batches: average latency and its 10/25/50/75/90/99th percentiles,\n"
           "TTFT and TPOT. Default: --model " DEFAULT_MODEL ".\n"
           "  --profile FILE   profile the measured iterations (trace + summary table)\n"
           "  --no-roofline    with --profile: skip measuring the machine's ceilings\n"
           "  --bandwidth      measure the read bandwidth around every measured iteration\n"
           "                   (3 arrays as in bench roofline) and report weight bytes per\n"
           "                   decode step / TPOT as a fraction of it\n"
           "  --no-progress    no progress bar (it is drawn only on a terminal anyway)\n\n");
    pl_bench_print_roofline_flags();
    cli_print_engine_flags();
}

/* --bandwidth: the probe and what it read; read_gbs[0] before the first measured iteration,
 * read_gbs[i + 1] after iteration i. */
typedef struct bw_track {
    pl_bench_membw m;
    int reps;
    double *read_gbs;   /* (iters + 1) */
    double *weight_gbs; /* (iters) weight bytes per decode step / the iteration's median TPOT */
    double *ratio;      /* (iters) weight_gbs / mean of the readings before and after */
} bw_track;

static int bw_init(bw_track *b, const pl_bench_roofline_opts *o, long long iters) {
    b->reps = o->reps;
    b->read_gbs = calloc((size_t)iters + 1, sizeof *b->read_gbs);
    b->weight_gbs = calloc((size_t)iters, sizeof *b->weight_gbs);
    b->ratio = calloc((size_t)iters, sizeof *b->ratio);
    if (!b->read_gbs || !b->weight_gbs || !b->ratio) {
        fprintf(stderr, "pagellm bench latency: out of memory\n");
        return 1;
    }
    return pl_bench_membw_init(&b->m, o);
}

static void bw_free(bw_track *b) {
    pl_bench_membw_free(&b->m);
    free(b->read_gbs);
    free(b->weight_gbs);
    free(b->ratio);
}

/* Reading k (0: before the first measured iteration). */
static int bw_read(bw_track *b, long long k) {
    return pl_bench_membw_measure(&b->m, b->reps, &b->read_gbs[k], NULL);
}

/* Iteration it, whose requests are in run, ended and reading it + 1 was taken. */
static int bw_iteration(bw_track *b, long long it, const pl_bench_run *run, uint64_t w_bytes) {
    pl_bench_summary ttft, tpot;
    if (pl_bench_latency_summaries(run, &ttft, &tpot)) return 1;
    double around = 0.5 * (b->read_gbs[it] + b->read_gbs[it + 1]);
    b->weight_gbs[it] = tpot.median > 0 ? (double)w_bytes / tpot.median * 1e-9 : 0;
    b->ratio[it] = around > 0 ? b->weight_gbs[it] / around : 0;
    return 0;
}

static void bw_report(const bw_track *b, long long iters, json_t *root) {
    double med_bw = pl_bench_median(b->read_gbs, (size_t)iters + 1);
    double med_w = pl_bench_median(b->weight_gbs, (size_t)iters);
    double med_r = pl_bench_median(b->ratio, (size_t)iters);
    printf("Read bandwidth around the iterations (GB/s, 3 x %zu MiB, %s loads, %d threads):",
           b->m.array_bytes >> 20, b->m.isa, b->m.n_threads);
    for (long long k = 0; k <= iters; k++) printf(" %.2f", b->read_gbs[k]);
    printf("\nWeight streaming (weight bytes per decode step, a mixture of experts' active "
           "ones / median TPOT) per iteration:");
    for (long long k = 0; k < iters; k++)
        printf(" %.2f GB/s (%.1f%%)", b->weight_gbs[k], 100.0 * b->ratio[k]);
    printf("\nWeight streaming: median %.2f GB/s = %.1f%% of the bandwidth around each "
           "iteration (median of the per-iteration ratios; median bandwidth %.2f GB/s)\n",
           med_w, 100.0 * med_r, med_bw);
    json_t *o = json_object(), *r = json_array(), *w = json_array(), *q = json_array();
    for (long long k = 0; k <= iters; k++) json_array_append_new(r, json_real(b->read_gbs[k]));
    for (long long k = 0; k < iters; k++) {
        json_array_append_new(w, json_real(b->weight_gbs[k]));
        json_array_append_new(q, json_real(b->ratio[k]));
    }
    json_object_set_new(o, "read_gbs", r);
    json_object_set_new(o, "weight_gbs", w);
    json_object_set_new(o, "ratio", q);
    json_object_set_new(o, "median_ratio", json_real(med_r));
    json_object_set_new(o, "array_bytes", json_integer((json_int_t)b->m.array_bytes));
    json_object_set_new(o, "isa", json_string(b->m.isa));
    json_object_set_new(o, "threads", json_integer(b->m.n_threads));
    json_object_set_new(root, "bandwidth", o);
}

static int one_iteration(pl_engine *e, const pl_bench_workload_opts *wo, uint64_t iter,
                         const pl_sampling_params *sp, pl_progress *bar, pl_bench_run *run) {
    pl_bench_workload w;
    int rc = pl_bench_workload_build(wo, e, iter, &w);
    if (rc) return rc;
    rc = pl_bench_run_workload(e, &w, sp, bar, run);
    size_t n = w.n;
    pl_bench_workload_free(&w);
    if (rc == 0 && run->n_reqs != n) {
        pl_progress_clear(bar);
        fprintf(stderr, "pagellm bench latency: %zu of %zu requests finished\n", run->n_reqs, n);
        rc = 1;
    }
    return rc;
}

int pl_bench_latency_main(int argc, char **argv) {
    pl_engine_config cfg;
    pl_engine_config_default(&cfg);
    cfg.model_path = DEFAULT_MODEL;
    cfg.max_batch_size = 0; /* 0: not given, follow --batch-size */
    cfg.max_num_seqs = 0;
    pl_bench_workload_opts wo;
    pl_bench_workload_opts_default(&wo);
    wo.num_prompts = 8;
    wo.input_len = 32;
    wo.output_len = 128;
    long long warmup = 2, iters = 10;
    pl_bench_profiling prof = {0};
    pl_bench_roofline_opts_default(&prof.roof_opts);
    const char *json_path = NULL;
    bool bandwidth = false, progress = true;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int r = cli_engine_flag(&cfg, argc, argv, &i);
        if (r == 0) r = pl_bench_profiling_flag(&prof, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        long long n;
        if (cli_is(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return 0;
        } else if (cli_is(a, "--batch-size")) {
            if (!cli_int(a, v, 1, 1 << 20, &n)) return 2;
            wo.num_prompts = n, i++;
        } else if (cli_is(a, "--input-len")) {
            if (!cli_int(a, v, 1, 1 << 24, &n)) return 2;
            wo.input_len = n, i++;
        } else if (cli_is(a, "--output-len")) {
            if (!cli_int(a, v, 1, 1 << 24, &n)) return 2;
            wo.output_len = n, i++;
        } else if (cli_is(a, "--num-iters-warmup")) {
            if (!cli_int(a, v, 0, 1000000, &n)) return 2;
            warmup = n, i++;
        } else if (cli_is(a, "--num-iters")) {
            if (!cli_int(a, v, 1, 1000000, &n)) return 2;
            iters = n, i++;
        } else if (cli_is(a, "--seed")) {
            if (!cli_int(a, v, 0, INT64_MAX, &n)) return 2;
            wo.seed = (uint64_t)n, i++;
        } else if (cli_is(a, "--output-json") && v) {
            json_path = v, i++;
        } else if (cli_is(a, "--bandwidth")) {
            bandwidth = true;
        } else if (cli_is(a, "--no-progress") || cli_is(a, "--disable-tqdm")) {
            progress = false;
        } else {
            return cli_unknown_flag("bench latency", a, usage);
        }
    }
    int batch = (int)wo.num_prompts;
    if (cfg.max_batch_size == 0) cfg.max_batch_size = batch > 32 ? batch : 32;
    if (cfg.max_num_seqs == 0) cfg.max_num_seqs = batch > 256 ? batch : 256;
    if (cfg.max_num_seqs < cfg.max_batch_size) cfg.max_num_seqs = cfg.max_batch_size;

    const char *build = pl_bench_build_describe(true);
    if (pl_bench_profiling_prepare(&prof, &cfg)) return 1;
    bw_track bw = {0};
    /* the engine's threads against the bandwidth of as many threads */
    if (prof.roof_opts.n_threads == 0) prof.roof_opts.n_threads = cfg.n_threads;
    /* the probe's arrays are touched before the engine's memory, as bench roofline's are */
    if (bandwidth && bw_init(&bw, &prof.roof_opts, iters)) {
        bw_free(&bw);
        return 1;
    }
    pl_engine *e = NULL;
    int rc = pl_bench_engine_create("bench latency", &cfg, &e);
    if (rc) {
        bw_free(&bw);
        return rc;
    }
    pl_bench_print_model(stdout, &cfg, e, build);
    printf("Batch: %d requests x (%lld prompt + %lld output tokens); %lld warm-up, %lld measured "
           "iterations\n", batch, wo.input_len, wo.output_len, warmup, iters);
    fflush(stdout);

    pl_sampling_params sp;
    pl_bench_sampling_default(&sp, true);
    double *lat = calloc((size_t)iters, sizeof *lat);
    /* every measured request's TTFT and TPOT, gathered into one run for the summaries */
    pl_bench_run all = {0};
    all.reqs = calloc((size_t)iters * (size_t)batch, sizeof *all.reqs);
    pl_profile profile;
    json_t *root = NULL;
    if (!lat || !all.reqs) {
        fprintf(stderr, "pagellm bench latency: out of memory\n");
        rc = 1;
        goto done;
    }
    /* one bar over every iteration, warm-up included: all their output tokens (EOS ignored) */
    pl_progress bar;
    pl_progress_start(&bar, progress, "output tokens",
                      (uint64_t)(warmup + iters) * (uint64_t)batch * (uint64_t)wo.output_len);
    for (long long it = 0; it < warmup && rc == 0; it++) {
        pl_bench_run run = {0};
        snprintf(bar.label, sizeof bar.label, "warm-up %lld/%lld", it + 1, warmup);
        rc = one_iteration(e, &wo, (uint64_t)it, &sp, &bar, &run);
        pl_bench_run_free(&run);
    }
    if (rc == 0 && prof.trace_path) rc = pl_bench_profiling_start(e, prof.trace_path);
    if (rc == 0 && bandwidth) rc = bw_read(&bw, 0);
    for (long long it = 0; it < iters && rc == 0; it++) {
        pl_bench_run run = {0};
        snprintf(bar.label, sizeof bar.label, "iteration %lld/%lld", it + 1, iters);
        rc = one_iteration(e, &wo, (uint64_t)(warmup + it), &sp, &bar, &run);
        if (rc == 0 && bandwidth) rc = bw_read(&bw, it + 1);
        if (rc == 0 && bandwidth) rc = bw_iteration(&bw, it, &run, pl_engine_weight_bytes(e));
        if (rc == 0) {
            lat[it] = run.elapsed_s;
            memcpy(all.reqs + all.n_reqs, run.reqs, run.n_reqs * sizeof *run.reqs);
            all.n_reqs += run.n_reqs;
        }
        pl_bench_run_free(&run);
    }
    pl_progress_finish(&bar);
    if (prof.trace_path) {
        int rc2 = pl_bench_profiling_stop(e, &profile);
        if (!rc) rc = rc2;
    }
    if (rc) goto done;

    double sum = 0;
    for (long long it = 0; it < iters; it++) sum += lat[it];
    json_t *lj = json_array();
    for (long long it = 0; it < iters; it++) json_array_append_new(lj, json_real(lat[it]));
    pl_bench_sort(lat, (size_t)iters);
    double avg = sum / (double)iters;
    printf("Avg latency: %.6f seconds\n", avg);
    json_t *pj = json_object();
    for (size_t k = 0; k < N_PCTS; k++) {
        double p = pl_bench_percentile(lat, (size_t)iters, k_pcts[k]);
        printf("%d%% percentile latency: %.6f seconds\n", k_pcts[k], p);
        char key[8];
        snprintf(key, sizeof key, "%d", k_pcts[k]);
        json_object_set_new(pj, key, json_real(p));
    }
    pl_bench_summary ttft, tpot;
    pl_bench_latency_summaries(&all, &ttft, &tpot);
    printf("TTFT (ms): mean %.2f, median %.2f, p99 %.2f\n", ttft.mean * 1e3, ttft.median * 1e3,
           ttft.p99 * 1e3);
    printf("TPOT (ms): mean %.2f, median %.2f, p99 %.2f\n", tpot.mean * 1e3, tpot.median * 1e3,
           tpot.p99 * 1e3);

    root = json_object();
    json_object_set_new(root, "avg_latency", json_real(avg));
    json_object_set_new(root, "latencies", lj);
    json_object_set_new(root, "percentiles", pj);
    json_object_set_new(root, "ttft_ms", pl_bench_summary_json_ms(&ttft));
    json_object_set_new(root, "tpot_ms", pl_bench_summary_json_ms(&tpot));
    json_object_set_new(root, "batch_size", json_integer(batch));
    json_object_set_new(root, "input_len", json_integer(wo.input_len));
    json_object_set_new(root, "output_len", json_integer(wo.output_len));
    json_object_set_new(root, "num_iters_warmup", json_integer(warmup));
    json_object_set_new(root, "num_iters", json_integer(iters));
    if (bandwidth) bw_report(&bw, iters, root);
    if (prof.trace_path) {
        printf("\n");
        if (prof.have_roof) pl_bench_roofline_print(stdout, &prof.roof);
        pl_bench_profile_print(stdout, &profile, prof.have_roof ? &prof.roof : NULL);
        printf("Trace: %s\n", prof.trace_path);
        json_object_set_new(root, "profile",
                            pl_bench_profile_json(&profile, prof.have_roof ? &prof.roof : NULL));
    }
    if (json_path) {
        json_object_set_new(root, "config", pl_bench_config_json(&cfg));
        json_object_set_new(root, "model", pl_bench_model_json(&cfg, e));
        json_object_set_new(root, "build", pl_bench_build_json());
        if (!pl_bench_write_json(json_path, root)) rc = 1;
    }
done:
    json_decref(root);
    bw_free(&bw);
    free(all.reqs);
    free(lat);
    pl_engine_destroy(e);
    return rc;
}
