/*
 * bench/soak.c - `pagellm bench soak`: a long run of random requests under KV pressure.
 *
 * The workload (from --seed): prompt lengths in [1, --max-prompt], output lengths in
 * [1, --max-output], priorities in {-1, 0, 1}, n = 1 (70%), 2 or 3, greedy (70%) or seeded
 * sampling, stop ids (a third of the requests), stop strings (a third, when a tokenizer is
 * loaded: prompts are then text made of common words), min_tokens now and then. Requests
 * arrive in random bursts between steps, a random live one is aborted now and then, and a
 * bounded waiting queue refuses some submits (they are retried later). The defaults put
 * dummy:tiny on a 40-block pool of 4-token blocks, so sequences are preempted constantly.
 *
 * Checks (exit 1 if any fails): every sample of every accepted request is reported exactly
 * once; abort only after an accepted abort; length only at max_tokens (or max_model_len);
 * no step fails; every KV block is free at the end. Memory: the resident set is measured
 * when the engine is idle after 10% of the requests and after all of them; the growth
 * between the two is reported (and flagged when above --max-growth-kib).
 *
 * --output-json and --profile are the other bench commands' (bench_internal.h): the JSON holds
 * the printed counts under the same names, the profile is measured over the whole run.
 *
 * Uses only pagellm.h, the command line's engine flags (cli/cli.h) and the bench helpers.
 */
#include "bench/soak.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench/bench_internal.h"
#include "pagellm.h"
#include "cli/cli.h"

/* One request of the workload, and what became of it. */
typedef struct soak_req {
    int32_t *ids;        /* (n_ids) token prompt, when no tokenizer */
    int n_ids;
    char *text;          /* text prompt, when a tokenizer is loaded */
    pl_sampling_params sp;
    char stop_buf[2][16];/* the stop strings sp.stop points at */
    const char *stop_ptrs[2];
    int32_t stop_id_buf[3]; /* sp.stop_ids */
    pl_request_id id;    /* 0 until accepted */
    bool abort_accepted;
    int n_reported;
    uint8_t seen;        /* bit per sample index */
} soak_req;

typedef struct soak_opts {
    long n_requests, max_prompt, max_output, abort_every, max_growth_kib;
    uint64_t seed;
    const char *json_path;   /* --output-json */
    pl_bench_profiling prof; /* --profile and its flags */
} soak_opts;

/* splitmix64: the workload generator (deterministic from --seed). */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int below(uint64_t *s, int n) { return (int)(next_u64(s) % (uint64_t)n); }

/* Resident set now, in KiB (from /proc/self/statm); 0 if unknown. */
static long rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static long peak_rss_kib(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : 0;
}

static const char *const k_words[] = {
    "Once", "upon", "a", "time", "there", "was", "little", "girl", "named", "Lily", "she",
    "liked", "to", "play", "in", "the", "park", "with", "her", "dog", "one", "day", "saw",
    "big", "red", "ball", "and", "said", "happy", "mom", "tree", "sun", "went", "home", "."};
#define N_WORDS (sizeof k_words / sizeof k_words[0])
static const char *const k_stops[] = {".", " the", "and", "!", " he", "day", ",", "\n"};
#define N_STOPS (sizeof k_stops / sizeof k_stops[0])

static bool make_request(soak_req *q, uint64_t *rng, const soak_opts *o, int vocab,
                         bool text) {
    int len = 1 + below(rng, (int)o->max_prompt);
    if (text) {
        size_t cap = (size_t)len * 8 + 1, n = 0;
        q->text = malloc(cap);
        if (!q->text) return false;
        for (int i = 0; i < len; i++) {
            const char *w = k_words[below(rng, N_WORDS)];
            size_t wl = strlen(w);
            if (n + wl + 2 > cap) break;
            if (i) q->text[n++] = ' ';
            memcpy(q->text + n, w, wl);
            n += wl;
        }
        q->text[n] = '\0';
    } else {
        q->ids = malloc((size_t)len * sizeof(int32_t));
        if (!q->ids) return false;
        q->n_ids = len;
        q->ids[0] = 1;
        for (int i = 1; i < len; i++) q->ids[i] = 3 + below(rng, vocab - 3);
    }
    pl_sampling_params *sp = &q->sp;
    pl_sampling_params_default(sp);
    sp->max_tokens = 1 + below(rng, (int)o->max_output);
    sp->priority = below(rng, 3) - 1;
    int r = below(rng, 10);
    sp->n = r < 7 ? 1 : r < 9 ? 2 : 3;
    bool greedy = below(rng, 10) < 7;
    sp->temperature = greedy ? 0.0f : 0.9f;
    sp->has_seed = !greedy;
    sp->seed = next_u64(rng);
    sp->ignore_eos = below(rng, 4) == 0;
    if (below(rng, 3) == 0) {
        sp->n_stop_ids = (size_t)(1 + below(rng, 3));
        for (size_t i = 0; i < sp->n_stop_ids; i++) q->stop_id_buf[i] = 3 + below(rng, vocab - 3);
        sp->stop_ids = q->stop_id_buf;
    }
    if (text && below(rng, 3) == 0) {
        sp->n_stop = (size_t)(1 + below(rng, 2));
        for (size_t i = 0; i < sp->n_stop; i++) {
            snprintf(q->stop_buf[i], sizeof q->stop_buf[i], "%s", k_stops[below(rng, N_STOPS)]);
            q->stop_ptrs[i] = q->stop_buf[i];
        }
        sp->stop = q->stop_ptrs;
    }
    if (below(rng, 5) == 0) sp->min_tokens = below(rng, sp->max_tokens + 1);
    return true;
}

static void usage(void) {
    printf("usage: pagellm bench soak [--requests N] [--seed S] [--max-prompt N] "
           "[--max-output N]\n"
           "                          [--abort-every K] [--max-growth-kib N] [engine flags]\n"
           "                          [--output-json FILE] [--profile FILE]\n\n"
           "  --requests N        requests to serve (10000)\n"
           "  --seed S            workload seed (1)\n"
           "  --max-prompt N      prompt length at most, tokens or words (64)\n"
           "  --max-output N      max_tokens at most (48)\n"
           "  --abort-every K     abort a random live request once per K steps on average "
           "(12; 0 = never)\n"
           "  --max-growth-kib N  fail if the idle resident set grows more than this (4096)\n"
           "  --output-json FILE  the results (every printed count) as JSON\n"
           "  --profile FILE      profile the run: Chrome trace to FILE and a summary table\n"
           "                      (per-op sync: requests/s then includes its overhead)\n"
           "  --no-roofline       with --profile: skip measuring the machine's ceilings\n\n"
           "Defaults: --model dummy:tiny --backend cpu --block-size 4 --max-num-blocks 40\n"
           "--max-model-len 128 --max-batch-size 8 --max-num-seqs 16 --max-total-tokens 64\n"
           "--max-waiting 48. With a tokenizer (--tokenizer, or one beside the model) prompts\n"
           "are text and a third of the requests carry stop strings.\n\n");
    pl_bench_print_roofline_flags();
    cli_print_engine_flags();
}

static int parse(int argc, char **argv, pl_engine_config *cfg, soak_opts *o) {
    pl_engine_config_default(cfg);
    cfg->model_path = "dummy:tiny";
    cfg->backend = PL_BACKEND_CPU;
    cfg->block_size = 4;
    cfg->max_num_blocks = 40;
    cfg->max_model_len = 128;
    cfg->max_batch_size = 8;
    cfg->max_num_seqs = 16;
    cfg->max_total_tokens = 64;
    cfg->max_waiting = 48;
    *o = (soak_opts){.n_requests = 10000, .max_prompt = 64, .max_output = 48,
                     .abort_every = 12, .max_growth_kib = 4096, .seed = 1};
    pl_bench_roofline_opts_default(&o->prof.roof_opts);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_engine_flag(cfg, argc, argv, &i);
        if (r == 0) r = pl_bench_profiling_flag(&o->prof, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        long long v;
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return 0;
        } else if (cli_is(a, "--requests")) {
            if (!cli_int(a, val, 1, 100000000, &v)) return 2;
            o->n_requests = (long)v;
        } else if (cli_is(a, "--seed")) {
            if (!cli_int(a, val, 0, INT64_MAX, &v)) return 2;
            o->seed = (uint64_t)v;
        } else if (cli_is(a, "--max-prompt")) {
            if (!cli_int(a, val, 1, 1 << 20, &v)) return 2;
            o->max_prompt = (long)v;
        } else if (cli_is(a, "--max-output")) {
            if (!cli_int(a, val, 1, 1 << 20, &v)) return 2;
            o->max_output = (long)v;
        } else if (cli_is(a, "--abort-every")) {
            if (!cli_int(a, val, 0, 1 << 30, &v)) return 2;
            o->abort_every = (long)v;
        } else if (cli_is(a, "--max-growth-kib")) {
            if (!cli_int(a, val, 0, 1LL << 40, &v)) return 2;
            o->max_growth_kib = (long)v;
        } else if (cli_is(a, "--output-json") && val && val[0]) {
            o->json_path = val;
        } else {
            return cli_unknown_flag("bench soak", a, usage);
        }
        i++;
    }
    return -1; /* parsed: run */
}

/* Checks one completion against its request; returns false (message printed) on a breach. */
static bool check_completion(const soak_req *q, const pl_completion *c, int max_model_len) {
    const char *why = NULL;
    if (c->index < 0 || c->index >= q->sp.n) why = "sample index out of range";
    else if (q->seen & (1u << c->index)) why = "sample reported twice";
    else if (c->finish_reason == PL_FINISH_ABORT && !q->abort_accepted)
        why = "finished 'abort' but no abort was accepted";
    else if (q->abort_accepted && c->finish_reason != PL_FINISH_ABORT)
        why = "an accepted abort did not finish it 'abort'";
    else if (c->finish_reason == PL_FINISH_LENGTH &&
             c->n_output_ids != (size_t)q->sp.max_tokens &&
             c->n_prompt_ids + c->n_output_ids != (size_t)max_model_len)
        why = "'length' before max_tokens";
    else if (c->n_output_ids > (size_t)q->sp.max_tokens) why = "more than max_tokens";
    else if (c->finish_reason != PL_FINISH_STOP && c->finish_reason != PL_FINISH_LENGTH &&
             c->finish_reason != PL_FINISH_ABORT)
        why = "unexpected finish reason";
    if (!why) return true;
    fprintf(stderr, "pagellm bench soak: request %llu sample %d (%s, %zu tokens, max %d): %s\n",
            (unsigned long long)c->id, c->index, pl_finish_reason_name(c->finish_reason),
            c->n_output_ids, q->sp.max_tokens, why);
    return false;
}

int cmd_bench_soak(int argc, char **argv) {
    pl_engine_config cfg;
    soak_opts o;
    int pr = parse(argc, argv, &cfg, &o);
    if (pr >= 0) return pr;

    if (pl_bench_profiling_prepare(&o.prof, &cfg)) return 1;
    pl_engine *e = NULL;
    int rc = pl_bench_engine_create("bench soak", &cfg, &e);
    if (rc) return rc;
    pl_metrics m0;
    pl_engine_metrics(e, &m0);
    int32_t *probe = NULL;
    size_t n_probe = 0;
    bool text = pl_engine_tokenize(e, "a", &probe, &n_probe) == PL_OK;
    pl_free_ids(probe);
    long n = o.n_requests;
    soak_req *w = calloc((size_t)n, sizeof *w);
    /* ids are handed out in submit order from 1; accepted requests only take one */
    long *by_id = calloc((size_t)n + 2, sizeof *by_id);
    pl_profile profile = {0};
    if (!w || !by_id) {
        fprintf(stderr, "pagellm bench soak: out of memory for %ld requests\n", n);
        rc = 1;
        goto out;
    }
    for (long i = 0; i < n + 2; i++) by_id[i] = -1; /* touched now: RSS counts it at the mark */
    uint64_t rng = o.seed * 0x2545F4914F6CDD1Dull + 1;
    for (long i = 0; i < n; i++)
        if (!make_request(&w[i], &rng, &o, m0.vocab_size, text)) {
            fprintf(stderr, "pagellm bench soak: out of memory building the workload\n");
            rc = 1;
            goto out;
        }
    printf("soak: %ld requests on %s (%s prompts), %d KV blocks of %d tokens, "
           "max_model_len %d\n", n, cfg.model_path, text ? "text" : "token",
           m0.kv_blocks_total, m0.block_size, m0.max_model_len);
    fflush(stdout);

    long next = 0, accepted = 0, refused_full = 0, refused_other = 0, finished = 0;
    long samples_expected = 0, samples_reported = 0, steps = 0, preemptions = 0;
    long reasons[6] = {0};
    long mark_at = n / 10 > 0 ? n / 10 : 1, rss_mark = 0, rss_end = 0;
    bool marked = false;
    pl_progress bar; /* requests settled: every sample reported, or refused for good */
    pl_progress_start(&bar, true, "requests", (uint64_t)n);
    if (o.prof.trace_path && (rc = pl_bench_profiling_start(e, o.prof.trace_path))) goto out;
    double t0 = pl_bench_now_s();
    while (next < n || pl_engine_has_pending_work(e)) {
        bool draining = !marked && next >= mark_at;
        if (draining && !pl_engine_has_pending_work(e)) {
            pl_engine_step(e, NULL); /* frees the last step's requests */
            rss_mark = rss_kib();
            marked = true;
            draining = false;
        }
        for (int k = draining ? 0 : below(&rng, 4); k > 0 && next < n; k--) {
            soak_req *q = &w[next];
            pl_status s = q->text ? pl_engine_submit_request(e, q->text, &q->sp, &q->id)
                                  : pl_engine_submit_tokens(e, q->ids, (size_t)q->n_ids,
                                                            &q->sp, &q->id);
            if (s == PL_ERR_QUEUE_FULL) { /* retried on a later step */
                refused_full++;
                q->id = 0;
                break;
            }
            if (s != PL_OK) { /* e.g. a text prompt whose tokens exceed max_model_len */
                refused_other++;
                q->id = 0;
                next++;
                continue;
            }
            if (q->id > (pl_request_id)n + 1) {
                pl_progress_clear(&bar);
                fprintf(stderr, "pagellm bench soak: unexpected id %llu\n",
                        (unsigned long long)q->id);
                rc = 1;
                goto out;
            }
            by_id[q->id] = next++;
            accepted++;
            samples_expected += q->sp.n;
        }
        if (o.abort_every > 0 && next > 0 && below(&rng, (int)o.abort_every) == 0) {
            soak_req *q = &w[below(&rng, (int)next)];
            if (q->id && pl_engine_abort(e, q->id) == PL_OK) q->abort_accepted = true;
        }
        pl_step_result r;
        if (pl_engine_step(e, &r) != PL_OK) {
            pl_progress_clear(&bar);
            fprintf(stderr, "pagellm bench soak: step %ld: %s\n", steps, pl_last_error_as(PL_NAMING_FLAG));
            rc = 1;
            goto out;
        }
        steps++;
        preemptions += r.n_preempted;
        for (size_t k = 0; k < r.n_finished; k++) {
            const pl_completion *c = &r.finished[k];
            if (c->id == 0 || c->id > (pl_request_id)n + 1) {
                pl_progress_clear(&bar);
                fprintf(stderr, "pagellm bench soak: completion for unknown id %llu\n",
                        (unsigned long long)c->id);
                rc = 1;
                continue;
            }
            soak_req *q = &w[by_id[c->id]];
            if (!check_completion(q, c, m0.max_model_len)) rc = 1;
            if (c->index >= 0 && c->index < 8) q->seen |= (uint8_t)(1u << c->index);
            samples_reported++;
            if ((int)c->finish_reason >= 0 && (int)c->finish_reason < 6)
                reasons[c->finish_reason]++;
            if (++q->n_reported == q->sp.n) finished++;
        }
        bar.done = (uint64_t)(finished + refused_other);
        snprintf(bar.note, sizeof bar.note, "%ld submitted", next);
        pl_progress_update(&bar);
    }
    pl_engine_step(e, NULL);
    double elapsed = pl_bench_now_s() - t0;
    rss_end = rss_kib();
    pl_progress_finish(&bar);
    if (o.prof.trace_path && pl_bench_profiling_stop(e, &profile)) {
        rc = 1;
        goto out;
    }

    pl_metrics m;
    pl_engine_metrics(e, &m);
    printf("served: %ld accepted (%ld refused as QUEUE_FULL and retried, %ld refused), "
           "%ld samples in %ld steps\n", accepted, refused_full, refused_other,
           samples_reported, steps);
    printf("time: %.2f s: %.1f requests/s, %.0f tokens/s (prompt %llu computed of %llu, "
           "output %llu)\n", elapsed, (double)finished / elapsed,
           (double)(m.prompt_tokens_computed + m.output_tokens) / elapsed,
           (unsigned long long)m.prompt_tokens_computed, (unsigned long long)m.prompt_tokens,
           (unsigned long long)m.output_tokens);
    printf("preemptions: %ld (%.2f per request), KV usage peak %.0f%%, prefix cache hit rate "
           "%.0f%%\n", preemptions, (double)preemptions / (double)(accepted ? accepted : 1),
           m.kv_usage_peak * 100, m.prefix_cache_hit_rate * 100);
    printf("finish: stop %ld, length %ld, abort %ld, other %ld\n", reasons[PL_FINISH_STOP],
           reasons[PL_FINISH_LENGTH], reasons[PL_FINISH_ABORT],
           reasons[PL_FINISH_NONE] + reasons[PL_FINISH_OVERLOADED] + reasons[PL_FINISH_ERROR]);
    long growth = rss_end - rss_mark, peak = peak_rss_kib();
    if (peak < rss_end) peak = rss_end; /* the two counters are sampled differently */
    printf("memory: peak RSS %.1f MiB; RSS idle after %ld requests %.1f MiB, after %ld "
           "%.1f MiB (%+ld KiB)\n", (double)peak / 1024, mark_at,
           (double)rss_mark / 1024, n, (double)rss_end / 1024, growth);
    if (samples_reported != samples_expected || finished != accepted) {
        printf("FAIL: %ld of %ld samples reported, %ld of %ld requests finished\n",
               samples_reported, samples_expected, finished, accepted);
        rc = 1;
    }
    if (m.kv_blocks_used != 0 || m.kv_blocks_free != m.kv_blocks_total) {
        printf("FAIL: %d KV blocks still used at the end\n", m.kv_blocks_used);
        rc = 1;
    }
    if (marked && growth > o.max_growth_kib) {
        printf("FAIL: resident set grew by %ld KiB (limit %ld)\n", growth, o.max_growth_kib);
        rc = 1;
    }
    printf("checks: %s\n", rc == 0 ? "all passed" : "FAILED");
    if (o.prof.trace_path) {
        const pl_bench_roofline *roof = o.prof.have_roof ? &o.prof.roof : NULL;
        printf("\n");
        if (roof) pl_bench_roofline_print(stdout, roof);
        pl_bench_profile_print(stdout, &profile, roof);
        printf("Trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n",
               o.prof.trace_path);
    }
    if (o.json_path) {
        json_t *root = json_object();
        json_object_set_new(root, "num_requests", json_integer(n));
        json_object_set_new(root, "accepted", json_integer(accepted));
        json_object_set_new(root, "refused_queue_full", json_integer(refused_full));
        json_object_set_new(root, "refused", json_integer(refused_other));
        json_object_set_new(root, "finished", json_integer(finished));
        json_object_set_new(root, "samples_expected", json_integer(samples_expected));
        json_object_set_new(root, "samples_reported", json_integer(samples_reported));
        json_object_set_new(root, "steps", json_integer(steps));
        json_object_set_new(root, "elapsed_time", json_real(elapsed));
        json_object_set_new(root, "requests_per_second", json_real((double)finished / elapsed));
        json_object_set_new(root, "tokens_per_second",
                            json_real((double)(m.prompt_tokens_computed + m.output_tokens) /
                                      elapsed));
        json_object_set_new(root, "prompt_tokens", json_integer((json_int_t)m.prompt_tokens));
        json_object_set_new(root, "prompt_tokens_computed",
                            json_integer((json_int_t)m.prompt_tokens_computed));
        json_object_set_new(root, "output_tokens", json_integer((json_int_t)m.output_tokens));
        json_object_set_new(root, "preemptions", json_integer(preemptions));
        json_object_set_new(root, "kv_usage_peak", json_real(m.kv_usage_peak));
        json_object_set_new(root, "prefix_cache_hit_rate", json_real(m.prefix_cache_hit_rate));
        json_t *fin = json_object();
        json_object_set_new(fin, "stop", json_integer(reasons[PL_FINISH_STOP]));
        json_object_set_new(fin, "length", json_integer(reasons[PL_FINISH_LENGTH]));
        json_object_set_new(fin, "abort", json_integer(reasons[PL_FINISH_ABORT]));
        json_object_set_new(fin, "other", json_integer(reasons[PL_FINISH_NONE] +
                                                       reasons[PL_FINISH_OVERLOADED] +
                                                       reasons[PL_FINISH_ERROR]));
        json_object_set_new(root, "finish", fin);
        json_t *mem = json_object();
        json_object_set_new(mem, "peak_rss_kib", json_integer(peak));
        json_object_set_new(mem, "idle_rss_mark_kib", json_integer(rss_mark));
        json_object_set_new(mem, "idle_rss_end_kib", json_integer(rss_end));
        json_object_set_new(mem, "mark_after_requests", json_integer(mark_at));
        json_object_set_new(mem, "growth_kib", json_integer(growth));
        json_object_set_new(mem, "max_growth_kib", json_integer(o.max_growth_kib));
        json_object_set_new(root, "memory", mem);
        json_object_set_new(root, "checks_passed", json_boolean(rc == 0));
        json_t *wj = json_object();
        json_object_set_new(wj, "seed", json_integer((json_int_t)o.seed));
        json_object_set_new(wj, "max_prompt", json_integer(o.max_prompt));
        json_object_set_new(wj, "max_output", json_integer(o.max_output));
        json_object_set_new(wj, "abort_every", json_integer(o.abort_every));
        json_object_set_new(wj, "text_prompts", json_boolean(text));
        json_object_set_new(root, "workload", wj);
        if (o.prof.trace_path)
            json_object_set_new(root, "profile", pl_bench_profile_json(
                                    &profile, o.prof.have_roof ? &o.prof.roof : NULL));
        json_object_set_new(root, "config", pl_bench_config_json(&cfg));
        json_object_set_new(root, "model", pl_bench_model_json(&cfg, e));
        json_object_set_new(root, "build", pl_bench_build_json());
        if (!pl_bench_write_json(o.json_path, root)) rc = 1;
        json_decref(root);
    }
out:
    if (w)
        for (long i = 0; i < n; i++) {
            free(w[i].ids);
            free(w[i].text);
        }
    free(w);
    free(by_id);
    pl_engine_destroy(e);
    return rc;
}
