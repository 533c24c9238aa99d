/*
 * bench/bench_throughput.c - `pagellm bench throughput`: the offline batch benchmark.
 *
 * Modelled on `vllm bench throughput`: every prompt is submitted at once and the engine runs
 * until the last one finishes; throughput is requests, all tokens (prompt + output) and output
 * tokens over that wall-clock time. The first three result lines have vLLM's exact format so
 * scripts written for it keep working:
 *
 *   Throughput: X requests/s, Y total tokens/s, Z output tokens/s
 *   Total num prompt tokens: N
 *   Total num output tokens: N
 *
 * followed by the engine's counters (one fresh engine per run, so its totals are this run's).
 * The default model is dummy:stories15m with 32 prompts of 128 + 128 tokens, so that the
 * README's first command runs anywhere, in seconds, without model files.
 */
#include <stdio.h>
#include <string.h>

#include "bench/bench_internal.h"
#include "cli/cli.h"

#define DEFAULT_MODEL "dummy:stories15m"

static void usage(const pl_bench_workload_opts *d) {
    printf("usage: pagellm bench throughput [--model PATH|dummy:NAME] [workload flags]\n"
           "                                [engine flags] [--output-json FILE]\n"
           "                                [--profile FILE]\n\n"
           "Offline batch benchmark: submits every prompt at once and runs until all finish.\n"
           "Default: --model " DEFAULT_MODEL " (random weights, no files).\n\n");
    pl_bench_print_workload_flags(d);
    printf("  --n N                      samples per prompt (vLLM's --n), sharing its KV\n"
           "                             blocks; output tokens count every sample's [1]\n");
    printf("output flags:\n"
           "  --output-json FILE    results as JSON\n"
           "  --profile FILE        profile the run: Chrome trace to FILE and a summary table\n"
           "                        (per-op sync: throughput then includes its overhead)\n"
           "  --no-roofline         with --profile: skip measuring the machine's ceilings\n"
           "  --no-progress         no progress bar (it is drawn only on a terminal anyway)\n");
    pl_bench_print_roofline_flags();
    cli_print_engine_flags();
}

static void help(void) {
    pl_bench_workload_opts d;
    pl_bench_workload_opts_default(&d);
    usage(&d);
}

/* Prints the result lines and returns the JSON of the same numbers. */
static json_t *report(const pl_bench_run *run, const pl_metrics *m, int n_samples) {
    double el = run->elapsed_s > 0 ? run->elapsed_s : 1e-9;
    uint64_t total = run->prompt_tokens + run->output_tokens;
    /* a request is a prompt, whatever its number of samples (vLLM counts so too) */
    size_t n_done = (run->n_reqs - run->n_dropped) / (size_t)n_samples;
    double req_s = (double)n_done / el, tok_s = (double)total / el;
    double out_s = (double)run->output_tokens / el;
    printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n", req_s, tok_s,
           out_s);
    printf("Total num prompt tokens: %llu\n", (unsigned long long)run->prompt_tokens);
    printf("Total num output tokens: %llu\n", (unsigned long long)run->output_tokens);
    printf("Elapsed: %.3f s for %zu requests\n", run->elapsed_s, n_done);
    printf("Mean batch: %.2f sequences/step, %.2f tokens/step over %llu steps\n",
           m->mean_batch_seqs, m->mean_batch_tokens, (unsigned long long)m->steps);
    printf("Peak KV usage: %.2f%% of %d blocks of %d tokens\n", 100.0 * m->kv_usage_peak,
           m->kv_blocks_total, m->block_size);
    printf("Preemptions: %llu\n", (unsigned long long)m->preemptions);
    printf("Prefix cache hit rate: %.2f%%\n", 100.0 * m->prefix_cache_hit_rate);
    pl_bench_summary ttft, tpot;
    pl_bench_latency_summaries(run, &ttft, &tpot);
    printf("TTFT (ms): mean %.2f, median %.2f, p99 %.2f\n", ttft.mean * 1e3, ttft.median * 1e3,
           ttft.p99 * 1e3);
    printf("TPOT (ms): mean %.2f, median %.2f, p99 %.2f\n", tpot.mean * 1e3, tpot.median * 1e3,
           tpot.p99 * 1e3);
    if (run->n_dropped) printf("Dropped (abort/overloaded): %zu\n", run->n_dropped);

    /* vLLM's keys first, then ours. */
    json_t *o = json_object();
    json_object_set_new(o, "elapsed_time", json_real(run->elapsed_s));
    json_object_set_new(o, "num_requests", json_integer((json_int_t)n_done));
    json_object_set_new(o, "total_num_tokens", json_integer((json_int_t)total));
    json_object_set_new(o, "requests_per_second", json_real(req_s));
    json_object_set_new(o, "tokens_per_second", json_real(tok_s));
    json_object_set_new(o, "output_tokens_per_second", json_real(out_s));
    json_object_set_new(o, "total_num_prompt_tokens", json_integer((json_int_t)run->prompt_tokens));
    json_object_set_new(o, "total_num_output_tokens", json_integer((json_int_t)run->output_tokens));
    json_t *eng = json_object();
    json_object_set_new(eng, "steps", json_integer((json_int_t)m->steps));
    json_object_set_new(eng, "mean_batch_seqs", json_real(m->mean_batch_seqs));
    json_object_set_new(eng, "mean_batch_tokens", json_real(m->mean_batch_tokens));
    json_object_set_new(eng, "kv_usage_peak", json_real(m->kv_usage_peak));
    json_object_set_new(eng, "kv_blocks_total", json_integer(m->kv_blocks_total));
    json_object_set_new(eng, "preemptions", json_integer((json_int_t)m->preemptions));
    json_object_set_new(eng, "prefix_cache_hit_rate", json_real(m->prefix_cache_hit_rate));
    json_object_set_new(eng, "prompt_tokens_computed",
                        json_integer((json_int_t)m->prompt_tokens_computed));
    json_object_set_new(eng, "engine_elapsed_s", json_real(m->elapsed_s));
    json_object_set_new(o, "engine", eng);
    json_object_set_new(o, "ttft_ms", pl_bench_summary_json_ms(&ttft));
    json_object_set_new(o, "tpot_ms", pl_bench_summary_json_ms(&tpot));
    json_object_set_new(o, "num_dropped", json_integer((json_int_t)run->n_dropped));
    return o;
}

int pl_bench_throughput_main(int argc, char **argv) {
    pl_engine_config cfg;
    pl_engine_config_default(&cfg);
    cfg.model_path = DEFAULT_MODEL;
    pl_bench_workload_opts wo;
    pl_bench_workload_opts_default(&wo);
    pl_bench_profiling prof = {0};
    pl_bench_roofline_opts_default(&prof.roof_opts);
    const char *json_path = NULL;
    bool progress = true;
    long long n_samples = 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_engine_flag(&cfg, argc, argv, &i);
        if (r == 0) r = pl_bench_workload_flag(&wo, argc, argv, &i);
        if (r == 0) r = pl_bench_profiling_flag(&prof, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (cli_is(a, "--help") || !strcmp(a, "-h")) {
            pl_bench_workload_opts d;
            pl_bench_workload_opts_default(&d);
            usage(&d);
            return 0;
        } else if (cli_is(a, "--output-json") && i + 1 < argc) {
            json_path = argv[++i];
        } else if (cli_is(a, "--n") && i + 1 < argc) {
            if (!cli_int(a, argv[++i], 1, 64, &n_samples)) return 2;
        } else if (cli_is(a, "--no-progress") || cli_is(a, "--disable-tqdm")) {
            progress = false;
        } else {
            return cli_unknown_flag("bench throughput", a, help);
        }
    }
    const char *build = pl_bench_build_describe(true);
    if (pl_bench_profiling_prepare(&prof, &cfg)) return 1;

    pl_engine *e = NULL;
    int rc = pl_bench_engine_create("bench throughput", &cfg, &e);
    if (rc) return rc;
    pl_bench_workload w;
    if ((rc = pl_bench_workload_build(&wo, e, 0, &w))) {
        pl_engine_destroy(e);
        return rc;
    }
    char desc[512];
    pl_bench_workload_describe(&wo, &w, desc, sizeof desc);
    pl_bench_print_model(stdout, &cfg, e, build);
    printf("Workload: %s\n", desc);
    fflush(stdout);

    pl_sampling_params sp;
    pl_bench_sampling_default(&sp, wo.ignore_eos);
    sp.n = (int)n_samples;
    pl_bench_run run = {0};
    pl_profile profile;
    json_t *root = NULL;
    if (prof.trace_path && (rc = pl_bench_profiling_start(e, prof.trace_path))) goto done;
    pl_progress bar;
    pl_progress_start(&bar, progress, "output tokens",
                      pl_bench_workload_output_tokens(&w) * (uint64_t)n_samples);
    rc = pl_bench_run_workload(e, &w, &sp, &bar, &run);
    pl_progress_finish(&bar);
    if (prof.trace_path) {
        int rc2 = pl_bench_profiling_stop(e, &profile);
        if (!rc) rc = rc2;
    }
    if (rc) goto done;

    pl_metrics m;
    pl_engine_metrics(e, &m);
    root = report(&run, &m, (int)n_samples);
    if (prof.trace_path) {
        printf("\n");
        if (prof.have_roof) pl_bench_roofline_print(stdout, &prof.roof);
        pl_bench_profile_print(stdout, &profile, prof.have_roof ? &prof.roof : NULL);
        printf("Trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n",
               prof.trace_path);
        json_object_set_new(root, "profile",
                            pl_bench_profile_json(&profile, prof.have_roof ? &prof.roof : NULL));
    }
    if (json_path) {
        json_object_set_new(root, "config", pl_bench_config_json(&cfg));
        json_object_set_new(root, "model", pl_bench_model_json(&cfg, e));
        json_t *wj = json_object();
        json_object_set_new(wj, "description", json_string(desc));
        json_object_set_new(wj, "num_prompts", json_integer((json_int_t)w.n));
        json_object_set_new(wj, "input_len", json_integer(wo.input_len));
        json_object_set_new(wj, "output_len", json_integer(wo.output_len));
        json_object_set_new(wj, "prefix_len", json_integer(wo.prefix_len));
        json_object_set_new(wj, "random_range_ratio", json_real(wo.range_ratio));
        json_object_set_new(wj, "dataset", wo.dataset ? json_string(wo.dataset) : json_null());
        json_object_set_new(wj, "seed", json_integer((json_int_t)wo.seed));
        json_object_set_new(wj, "ignore_eos", json_boolean(wo.ignore_eos));
        json_object_set_new(wj, "n", json_integer(n_samples));
        json_object_set_new(root, "workload", wj);
        json_object_set_new(root, "build", pl_bench_build_json());
        if (!pl_bench_write_json(json_path, root)) rc = 1;
    }
done:
    json_decref(root);
    pl_bench_run_free(&run);
    pl_bench_workload_free(&w);
    pl_engine_destroy(e);
    return rc;
}
