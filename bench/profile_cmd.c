/*
 * bench/profile_cmd.c - `pagellm profile`: where a workload's time goes, and what profiling
 * itself costs.
 *
 * One engine, one warm-up run, then --reps rounds of three runs of the same workload shape:
 * profiling off, on without a trace (per-op timing with a backend sync after each op), and on
 * with the Chrome trace written, in rotating order so that drift of a shared machine (other
 * tenants, frequency) lands on every mode.
 * Every run gets fresh random prompts (seed + run) so the prefix cache cannot make later runs
 * cheaper. Reported:
 * - this machine's ceilings (roofline.c), measured first, before the engine exists;
 * - the overhead: median throughput of each mode, with its spread;
 * - the summary table over all profiled runs, with and without trace (profile_report.c);
 * - the trace of the last profiled run.
 * "Off" still times the step phases (two clock reads per phase: the engine always does); what
 * "on" adds is the per-op timing with its backend sync, and the trace writing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_internal.h"
#include "cli/cli.h"

#define DEFAULT_MODEL "dummy:stories15m"
#define DEFAULT_TRACE "pagellm-trace.json"

static void usage(const pl_bench_workload_opts *d) {
    printf("usage: pagellm profile [--model PATH|dummy:NAME] [workload flags] [engine flags]\n"
           "                       [--trace FILE] [--reps N] [--no-overhead] [--no-roofline]\n"
           "                       [--output-json FILE]\n\n"
           "Runs a workload with profiling on: writes a Chrome trace (Perfetto,\n"
           "chrome://tracing), prints time per phase and per op, achieved GB/s and GFLOP/s as\n"
           "fractions of this machine's ceilings measured in the same run, and the profiling\n"
           "overhead (throughput off vs on).\n"
           "  --trace FILE      trace file (default " DEFAULT_TRACE "; --profile is a synonym)\n"
           "  --reps N (3)      rounds of off / on / on+trace runs; medians are reported\n"
           "  --no-overhead     one profiled run only\n"
           "  --no-roofline     skip the ceilings (no fractions in the table)\n"
           "  --output-json FILE\n\n");
    pl_bench_print_workload_flags(d);
    pl_bench_print_roofline_flags();
    cli_print_engine_flags();
}

static void help(void) {
    pl_bench_workload_opts d;
    pl_bench_workload_opts_default(&d);
    usage(&d);
}

static void set_defaults(pl_bench_workload_opts *wo) {
    pl_bench_workload_opts_default(wo);
    wo->num_prompts = 16;
    wo->input_len = 64;
    wo->output_len = 64;
}

/* The three ways a run is done for the overhead: what each adds over the previous one. */
enum { MODE_OFF, MODE_ON, MODE_TRACE, N_MODES };
static const char *const k_mode_names[N_MODES] = {"off", "on (no trace)", "on + trace"};
static const char *const k_mode_keys[N_MODES] = {"off", "on", "on_trace"};

/* One run of the workload drawn with seed offset k, profiling as mode says (trace: the file
 * for MODE_TRACE); adds the profile to *acc when on. Returns total tokens/s in *tok_s. */
/* bar counts the output tokens of every run, each estimated at `estimate` until drawn. */
static int one_run(pl_engine *e, const pl_bench_workload_opts *wo, uint64_t k,
                   const pl_sampling_params *sp, int mode, const char *trace, pl_profile *acc,
                   pl_progress *bar, uint64_t estimate, double *tok_s) {
    pl_bench_workload w;
    int rc = pl_bench_workload_build(wo, e, k, &w);
    if (rc) return rc;
    bar->total = bar->total - estimate + pl_bench_workload_output_tokens(&w);
    pl_bench_run run = {0};
    bool on = mode != MODE_OFF;
    if (on && (rc = pl_bench_profiling_start(e, mode == MODE_TRACE ? trace : NULL))) goto done;
    rc = pl_bench_run_workload(e, &w, sp, bar, &run);
    if (on) {
        pl_profile p;
        int rc2 = pl_bench_profiling_stop(e, &p);
        if (!rc) rc = rc2;
        if (!rc && acc) pl_bench_profile_add(acc, &p);
    }
    if (!rc)
        *tok_s = (double)(run.prompt_tokens + run.output_tokens) /
                 (run.elapsed_s > 0 ? run.elapsed_s : 1e-9);
done:
    pl_bench_run_free(&run);
    pl_bench_workload_free(&w);
    return rc;
}

/* The floor of a step's forward pass: every matmul weight is read once per step whatever the
 * batch, so no step can be faster than the weights over the measured read bandwidth. */
static void print_floor(const pl_profile *p, const pl_bench_roofline *roof, const pl_engine *e) {
    double fwd = 0;
    uint64_t calls = 0;
    for (int k = 0; k < p->n_phases; k++)
        if (p->phases[k].name && !strcmp(p->phases[k].name, "forward")) {
            fwd = p->phases[k].seconds;
            calls = p->phases[k].calls;
        }
    double wb = (double)pl_engine_weight_bytes(e);
    if (calls == 0 || roof->read_gbs <= 0 || wb <= 0) return;
    double floor_ms = wb / (roof->read_gbs * 1e9) * 1e3, got_ms = fwd / (double)calls * 1e3;
    printf("Forward: %.2f ms per step on average; reading the %.1f MB of matmul weights once at "
           "%.2f GB/s takes %.2f ms (%.0f%% of the step)\n",
           got_ms, wb * 1e-6, roof->read_gbs, floor_ms, got_ms > 0 ? 100.0 * floor_ms / got_ms : 0);
}

static json_t *array_json(const double *v, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
    return a;
}

static void spread(const double *v, size_t n, double *lo, double *hi) {
    *lo = *hi = n ? v[0] : 0;
    for (size_t i = 1; i < n; i++) {
        if (v[i] < *lo) *lo = v[i];
        if (v[i] > *hi) *hi = v[i];
    }
}

int pl_bench_profile_main(int argc, char **argv) {
    pl_engine_config cfg;
    pl_engine_config_default(&cfg);
    cfg.model_path = DEFAULT_MODEL;
    pl_bench_workload_opts wo;
    set_defaults(&wo);
    pl_bench_profiling prof = {0};
    pl_bench_roofline_opts_default(&prof.roof_opts);
    prof.trace_path = DEFAULT_TRACE;
    const char *json_path = NULL;
    long long reps = 3;
    bool overhead = true;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int r = cli_engine_flag(&cfg, argc, argv, &i);
        if (r == 0) r = pl_bench_workload_flag(&wo, argc, argv, &i);
        if (r == 0) r = pl_bench_profiling_flag(&prof, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (cli_is(a, "--help") || !strcmp(a, "-h")) {
            pl_bench_workload_opts d;
            set_defaults(&d);
            usage(&d);
            return 0;
        } else if (cli_is(a, "--trace")) {
            if (!v || !v[0]) {
                fprintf(stderr, "pagellm: --trace: missing value\n");
                return 2;
            }
            prof.trace_path = v, i++;
        } else if (cli_is(a, "--reps")) {
            long long n;
            if (!cli_int(a, v, 1, 1000, &n)) return 2;
            reps = n, i++;
        } else if (cli_is(a, "--no-overhead")) {
            overhead = false;
        } else if (cli_is(a, "--output-json") && v) {
            json_path = v, i++;
        } else {
            return cli_unknown_flag("profile", a, help);
        }
    }
    const char *build = pl_bench_build_describe(true);
    if (pl_bench_profiling_prepare(&prof, &cfg)) return 1;
    pl_engine *e = NULL;
    int rc = pl_bench_engine_create("profile", &cfg, &e);
    if (rc) return rc;

    size_t n_runs = overhead ? (size_t)reps : 1;
    double *tps[N_MODES]; /* (n_runs) total tokens/s per mode */
    for (int m = 0; m < N_MODES; m++) tps[m] = calloc(n_runs, sizeof *tps[m]);
    pl_profile acc;
    memset(&acc, 0, sizeof acc);
    pl_progress bar = {0};
    json_t *root = NULL;
    if (!tps[MODE_OFF] || !tps[MODE_ON] || !tps[MODE_TRACE]) {
        fprintf(stderr, "pagellm profile: out of memory\n");
        rc = 1;
        goto done;
    }
    pl_sampling_params sp;
    pl_bench_sampling_default(&sp, wo.ignore_eos);
    pl_bench_print_model(stdout, &cfg, e, build);
    uint64_t estimate = 0; /* output tokens of one run (random lengths: drawn per run) */
    {
        pl_bench_workload w;
        if ((rc = pl_bench_workload_build(&wo, e, 0, &w))) goto done;
        estimate = pl_bench_workload_output_tokens(&w);
        char desc[512];
        pl_bench_workload_describe(&wo, &w, desc, sizeof desc);
        pl_bench_workload_free(&w);
        printf("Workload: %s\n", desc);
        if (wo.dataset && cfg.enable_prefix_caching && overhead)
            printf("Note: the dataset's prompts repeat in every run, so runs after the first "
                   "hit the prefix cache (use --no-prefix-caching to avoid it)\n");
    }
    if (prof.have_roof) pl_bench_roofline_print(stdout, &prof.roof);
    fflush(stdout);

    /* Warm-up: thread pool, page faults of the KV pool and the weights. */
    size_t n_total = 1 + n_runs * (overhead ? N_MODES : 1), run_no = 0;
    pl_progress_start(&bar, true, "output tokens", (uint64_t)n_total * estimate);
    double ignored = 0;
    uint64_t k = 1000;
    snprintf(bar.label, sizeof bar.label, "run %zu/%zu warm-up", ++run_no, n_total);
    if ((rc = one_run(e, &wo, k++, &sp, MODE_OFF, NULL, NULL, &bar, estimate, &ignored)))
        goto done;
    /* Rotating the order (off, on, trace / on, trace, off / ...) spreads a noisy neighbour's
     * bursts over all three modes. The traced run of the last repetition is the trace kept. */
    for (size_t r = 0; r < n_runs; r++) {
        for (int j = 0; j < N_MODES && rc == 0; j++) {
            int mode = overhead ? (int)((r + (size_t)j) % N_MODES) : MODE_TRACE;
            if (!overhead && j > 0) break;
            snprintf(bar.label, sizeof bar.label, "run %zu/%zu %s", ++run_no, n_total,
                     k_mode_keys[mode]);
            rc = one_run(e, &wo, k++, &sp, mode, prof.trace_path, &acc, &bar, estimate,
                         &tps[mode][r]);
        }
        if (rc) goto done;
    }
    pl_progress_finish(&bar);

    root = json_object();
    if (overhead) {
        printf("\nProfiling overhead (%zu runs of each mode, order rotated):\n", n_runs);
        json_t *oj = json_object();
        double med[N_MODES];
        for (int m = 0; m < N_MODES; m++) {
            double lo, hi;
            med[m] = pl_bench_median(tps[m], n_runs);
            spread(tps[m], n_runs, &lo, &hi);
            printf("  %-14s median %9.2f total tokens/s (range %.2f .. %.2f, spread %.1f%%)\n",
                   k_mode_names[m], med[m], lo, hi, med[m] > 0 ? 100.0 * (hi - lo) / med[m] : 0);
            char key[64];
            snprintf(key, sizeof key, "%s_tokens_per_second", k_mode_keys[m]);
            json_object_set_new(oj, key, array_json(tps[m], n_runs));
            snprintf(key, sizeof key, "%s_median", k_mode_keys[m]);
            json_object_set_new(oj, key, json_real(med[m]));
        }
        double base = med[MODE_OFF] > 0 ? med[MODE_OFF] : 1;
        double cost_on = (med[MODE_OFF] - med[MODE_ON]) / base;
        double cost_trace = (med[MODE_OFF] - med[MODE_TRACE]) / base;
        printf("  overhead: %.2f%% with per-op timing, %.2f%% with the trace as well "
               "(of the off median; negative = within noise)\n", 100.0 * cost_on,
               100.0 * cost_trace);
        json_object_set_new(oj, "overhead_fraction_on", json_real(cost_on));
        json_object_set_new(oj, "overhead_fraction", json_real(cost_trace));
        json_object_set_new(root, "overhead", oj);
    }
    printf("\n");
    pl_bench_profile_print(stdout, &acc, prof.have_roof ? &prof.roof : NULL);
    if (prof.have_roof) print_floor(&acc, &prof.roof, e);
    printf("Trace: %s (the last profiled run; open in https://ui.perfetto.dev)\n",
           prof.trace_path);
    json_object_set_new(root, "profile",
                        pl_bench_profile_json(&acc, prof.have_roof ? &prof.roof : NULL));
    json_object_set_new(root, "trace", json_string(prof.trace_path));
    if (json_path) {
        json_object_set_new(root, "config", pl_bench_config_json(&cfg));
        json_object_set_new(root, "model", pl_bench_model_json(&cfg, e));
        json_object_set_new(root, "build", pl_bench_build_json());
        if (!pl_bench_write_json(json_path, root)) rc = 1;
    }
done:
    pl_progress_finish(&bar);
    json_decref(root);
    for (int m = 0; m < N_MODES; m++) free(tps[m]);
    pl_engine_destroy(e);
    return rc;
}
