/*
 * bench/bench_sweep.c - `pagellm bench sweep`: what continuous batching buys, as a curve.
 *
 * Two sweeps of the offline batch benchmark on one model, each point on a fresh engine:
 * - batch: max_batch_size = 1, 2, 4, ... up to --max-batch-size-limit (the limit itself
 *   included), at --input-len/--output-len. Each point runs max(--num-prompts, 2 x batch)
 *   prompts so that the batch can fill and stay full for most of the run.
 * - lengths: at the configured max_batch_size, the prompt length over --input-lens (output
 *   fixed at --output-len), then the output length over --output-lens (prompt fixed at
 *   --input-len). Points longer than max_model_len are skipped with a note.
 * With --reps N each point runs N times and the median throughput is reported, with the
 * spread (max - min) / median of output tokens/s.
 *
 * The result is CSV (one row per point; stdout, or --output-csv FILE) and, with --plot PREFIX,
 * PREFIX.csv plus a picture: gnuplot (scripts/plot_sweep.gp, found under the current directory
 * or from the executable: build/tools/pagellm -> ../../scripts) writes PREFIX.png and PREFIX.svg
 * when it is installed; otherwise the built-in writer (bench_plot.c) writes PREFIX.svg.
 */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_internal.h"
#include "cli/cli.h"

#define DEFAULT_MODEL "dummy:stories15m"
#define DEFAULT_SCRIPT "scripts/plot_sweep.gp"
#ifndef PL_BENCH_SOURCE_DIR
#define PL_BENCH_SOURCE_DIR "."
#endif
#define MAX_LENS 32

extern char **environ;

typedef struct point {
    const char *sweep;   /* "batch", "input_len", "output_len" */
    int max_batch_size;
    long long input_len, output_len;
    size_t num_prompts;
    double elapsed_s, req_s, tok_s, out_s, spread;
    double mean_batch_seqs, mean_batch_tokens, kv_usage_peak;
    uint64_t preemptions;
    double ttft_ms, tpot_ms;
    double matmul_gbs, matmul_gflops, attention_gbs; /* 0 unless profiling */
} point;

typedef struct sweep_opts {
    pl_engine_config cfg;
    pl_bench_workload_opts wo;
    long long limit;
    long long input_lens[MAX_LENS], output_lens[MAX_LENS];
    int n_input_lens, n_output_lens;
    bool do_batch, do_lengths;
    long long reps;
    const char *csv_path, *plot_prefix, *script, *json_path, *profile_prefix;
    bool progress;
} sweep_opts;

static void usage(void) {
    printf("usage: pagellm bench sweep [--model PATH|dummy:NAME] [flags] [engine flags]\n\n"
           "Throughput against max_batch_size (1, 2, 4, ... limit) and against prompt and\n"
           "output lengths, one fresh engine per point. Default --model " DEFAULT_MODEL ".\n"
           "  --sweep batch|lengths|all (all)\n"
           "  --max-batch-size-limit N (256)  largest batch of the batch sweep\n"
           "  --num-prompts N (32)            prompts per point at least (2 x batch if more)\n"
           "  --input-len N (64) --output-len N (64) --random-range-ratio R --prefix-len N\n"
           "  --input-lens A,B,.. (16,32,64,128)   --output-lens A,B,.. (16,32,64,128)\n"
           "  --seed N (0)       --reps N (1): median of N runs per point\n"
           "  --output-csv FILE  CSV there (default: CSV on stdout)\n"
           "  --plot PREFIX      PREFIX.csv and PREFIX.png + PREFIX.svg (gnuplot), or PREFIX.svg\n"
           "                     (built-in) when gnuplot is not installed\n"
           "  --gnuplot-script FILE (" DEFAULT_SCRIPT " under the current directory, else\n"
           "                     EXE_DIR/../../" DEFAULT_SCRIPT ": the source tree of a build)\n"
           "  --profile PREFIX   profile every point: trace PREFIX-<point>.json, and matmul\n"
           "                     and attention rates in the CSV\n"
           "  --output-json FILE --no-progress\n\n");
    cli_print_engine_flags();
}

static bool parse_list(const char *flag, const char *s, long long *out, int *n_out) {
    if (!s) {
        fprintf(stderr, "pagellm: %s: missing value\n", flag);
        return false;
    }
    int n = 0;
    const char *p = s;
    while (*p) {
        char num[32];
        size_t k = 0;
        while (*p && *p != ',' && k < sizeof num - 1) num[k++] = *p++;
        num[k] = '\0';
        if (*p && *p != ',') {
            fprintf(stderr, "pagellm: %s: '%s' has an over-long number\n", flag, s);
            return false;
        }
        if (n == MAX_LENS) {
            fprintf(stderr, "pagellm: %s: at most %d values\n", flag, MAX_LENS);
            return false;
        }
        if (!cli_int(flag, num, 1, 1 << 24, &out[n])) return false;
        n++;
        if (*p == ',') p++;
    }
    if (n == 0) {
        fprintf(stderr, "pagellm: %s: no values given\n", flag);
        return false;
    }
    *n_out = n;
    return true;
}

/* ------------------------------------------------------------------------------------------
 * One point
 * ---------------------------------------------------------------------------------------- */

/* Runs point number point_no (from 1) of n_points. */
static int run_point(const sweep_opts *o, point *pt, size_t point_no, size_t n_points,
                     bool *skipped) {
    pl_engine_config cfg = o->cfg;
    cfg.max_batch_size = pt->max_batch_size;
    if (cfg.max_num_seqs < pt->max_batch_size) cfg.max_num_seqs = pt->max_batch_size;
    pl_bench_workload_opts wo = o->wo;
    wo.input_len = pt->input_len;
    wo.output_len = pt->output_len;
    wo.num_prompts = (long long)pt->num_prompts;
    double *req = calloc((size_t)o->reps, sizeof *req), *tok = calloc((size_t)o->reps, sizeof *tok);
    double *out = calloc((size_t)o->reps, sizeof *out);
    int rc = 0;
    *skipped = false;
    if (!req || !tok || !out) {
        fprintf(stderr, "pagellm bench sweep: out of memory\n");
        rc = 1;
        goto done;
    }
    for (long long r = 0; r < o->reps && rc == 0; r++) {
        pl_engine *e = NULL;
        if ((rc = pl_bench_engine_create("bench sweep", &cfg, &e))) break;
        pl_metrics m;
        pl_engine_metrics(e, &m);
        if (m.max_model_len > 0 && wo.prefix_len + wo.input_len + wo.output_len > m.max_model_len) {
            fprintf(stderr, "pagellm bench sweep: skipping input %lld + output %lld: longer than "
                            "max_model_len %d\n", wo.input_len, wo.output_len, m.max_model_len);
            *skipped = true;
            pl_engine_destroy(e);
            break;
        }
        pl_bench_workload w;
        if ((rc = pl_bench_workload_build(&wo, e, (uint64_t)r, &w))) {
            pl_engine_destroy(e);
            break;
        }
        char trace[4096];
        if (o->profile_prefix) {
            if (!strcmp(pt->sweep, "batch"))
                snprintf(trace, sizeof trace, "%s-bs%d.json", o->profile_prefix,
                         pt->max_batch_size);
            else
                snprintf(trace, sizeof trace, "%s-in%lld-out%lld.json", o->profile_prefix,
                         pt->input_len, pt->output_len);
            rc = pl_bench_profiling_start(e, trace);
        }
        pl_sampling_params sp;
        pl_bench_sampling_default(&sp, wo.ignore_eos);
        pl_bench_run run = {0};
        pl_progress bar;
        pl_progress_start(&bar, o->progress, "output tokens",
                          pl_bench_workload_output_tokens(&w));
        if (o->reps > 1)
            snprintf(bar.label, sizeof bar.label, "point %zu/%zu run %lld/%lld", point_no,
                     n_points, r + 1, o->reps);
        else
            snprintf(bar.label, sizeof bar.label, "point %zu/%zu", point_no, n_points);
        if (rc == 0) rc = pl_bench_run_workload(e, &w, &sp, &bar, &run);
        pl_progress_finish(&bar);
        pl_profile prof;
        if (o->profile_prefix) {
            int rc2 = pl_bench_profiling_stop(e, &prof);
            if (!rc) rc = rc2;
        }
        if (rc == 0) {
            double el = run.elapsed_s > 0 ? run.elapsed_s : 1e-9;
            req[r] = (double)(run.n_reqs - run.n_dropped) / el;
            tok[r] = (double)(run.prompt_tokens + run.output_tokens) / el;
            out[r] = (double)run.output_tokens / el;
            pl_engine_metrics(e, &m);
            pl_bench_summary ttft, tpot;
            pl_bench_latency_summaries(&run, &ttft, &tpot);
            /* counters of the last repetition; throughput is the median below */
            pt->elapsed_s = run.elapsed_s;
            pt->mean_batch_seqs = m.mean_batch_seqs;
            pt->mean_batch_tokens = m.mean_batch_tokens;
            pt->kv_usage_peak = m.kv_usage_peak;
            pt->preemptions = m.preemptions;
            pt->ttft_ms = ttft.median * 1e3;
            pt->tpot_ms = tpot.median * 1e3;
            if (o->profile_prefix) {
                const pl_profile_entry *mm = pl_bench_profile_op(&prof, "matmul");
                const pl_profile_entry *at = pl_bench_profile_op(&prof, "attention");
                if (mm && mm->seconds > 0) {
                    pt->matmul_gbs = mm->bytes / mm->seconds * 1e-9;
                    pt->matmul_gflops = mm->flops / mm->seconds * 1e-9;
                }
                if (at && at->seconds > 0) pt->attention_gbs = at->bytes / at->seconds * 1e-9;
            }
        }
        pl_bench_run_free(&run);
        pl_bench_workload_free(&w);
        pl_engine_destroy(e);
    }
    if (rc == 0 && !*skipped) {
        size_t n = (size_t)o->reps;
        pt->req_s = pl_bench_median(req, n);
        pt->tok_s = pl_bench_median(tok, n);
        pt->out_s = pl_bench_median(out, n);
        double lo = out[0], hi = out[0];
        for (size_t i = 1; i < n; i++) {
            if (out[i] < lo) lo = out[i];
            if (out[i] > hi) hi = out[i];
        }
        pt->spread = pt->out_s > 0 ? (hi - lo) / pt->out_s : 0;
    }
done:
    free(req);
    free(tok);
    free(out);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Output
 * ---------------------------------------------------------------------------------------- */

static const char k_csv_header[] =
    "sweep,max_batch_size,input_len,output_len,num_prompts,elapsed_s,requests_per_s,"
    "total_tokens_per_s,output_tokens_per_s,spread,mean_batch_seqs,mean_batch_tokens,"
    "kv_usage_peak,preemptions,ttft_median_ms,tpot_median_ms,matmul_gbs,matmul_gflops,"
    "attention_gbs\n";

static void csv_row(FILE *f, const point *p) {
    fprintf(f, "%s,%d,%lld,%lld,%zu,%.4f,%.4f,%.2f,%.2f,%.4f,%.3f,%.3f,%.4f,%llu,%.3f,%.3f,%.3f,"
               "%.3f,%.3f\n",
            p->sweep, p->max_batch_size, p->input_len, p->output_len, p->num_prompts,
            p->elapsed_s, p->req_s, p->tok_s, p->out_s, p->spread, p->mean_batch_seqs,
            p->mean_batch_tokens, p->kv_usage_peak, (unsigned long long)p->preemptions,
            p->ttft_ms, p->tpot_ms, p->matmul_gbs, p->matmul_gflops, p->attention_gbs);
}

static bool write_csv(const char *path, const point *pts, size_t n) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "pagellm bench sweep: cannot write %s: %s\n", path, strerror(errno));
        return false;
    }
    fputs(k_csv_header, f);
    for (size_t i = 0; i < n; i++) csv_row(f, &pts[i]);
    bool ok = !ferror(f);
    if (fclose(f) != 0 || !ok) {
        fprintf(stderr, "pagellm bench sweep: error writing %s\n", path);
        return false;
    }
    return true;
}

static bool on_path(const char *prog) {
    const char *path = getenv("PATH");
    if (!path) return false;
    char buf[4096];
    while (*path) {
        size_t k = strcspn(path, ":");
        if (k > 0 && k + strlen(prog) + 2 < sizeof buf) {
            snprintf(buf, sizeof buf, "%.*s/%s", (int)k, path, prog);
            if (access(buf, X_OK) == 0) return true;
        }
        path += k + (path[k] == ':');
    }
    return false;
}

/* The gnuplot script into buf: --gnuplot-script FILE, else DEFAULT_SCRIPT under the current
 * directory, beside the executable (build/tools/pagellm -> ../../scripts/plot_sweep.gp), or
 * in the source tree this binary was built from (a build directory outside it). Returns
 * false, with a note on stderr saying what was tried, when none is readable. */
static bool find_script(const sweep_opts *o, char *buf, size_t cap) {
    if (o->script) {
        snprintf(buf, cap, "%s", o->script);
        if (access(buf, R_OK) == 0) return true;
        fprintf(stderr, "pagellm bench sweep: gnuplot script %s not found (--gnuplot-script): "
                        "no PNG\n", o->script);
        return false;
    }
    snprintf(buf, cap, "%s", DEFAULT_SCRIPT);
    if (access(buf, R_OK) == 0) return true;
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *slash = k > 0 ? (exe[k] = '\0', strrchr(exe, '/')) : NULL;
    if (slash) {
        *slash = '\0';
        int len = snprintf(buf, cap, "%s/../../%s", exe, DEFAULT_SCRIPT);
        if (len > 0 && (size_t)len < cap && access(buf, R_OK) == 0) return true;
    }
    char tried[4096];
    snprintf(tried, sizeof tried, "%s", slash ? buf : "");
    int len = snprintf(buf, cap, "%s/%s", PL_BENCH_SOURCE_DIR, DEFAULT_SCRIPT);
    if (len > 0 && (size_t)len < cap && access(buf, R_OK) == 0) return true;
    fprintf(stderr, "pagellm bench sweep: no gnuplot script (tried ./%s, %s%s%s): no PNG; give "
                    "one with --gnuplot-script FILE\n", DEFAULT_SCRIPT, tried, slash ? " and " : "",
            buf);
    return false;
}

/* Runs gnuplot on the CSV with script (NULL: none was found); returns true when it wrote
 * PREFIX.png and PREFIX.svg. */
static bool plot_gnuplot(FILE *info, const sweep_opts *o, const char *script, const char *csv,
                         const char *title) {
    if (!on_path("gnuplot")) {
        fprintf(info, "gnuplot is not installed (Debian: gnuplot-nox): no PNG; ");
        return false;
    }
    if (!script) {
        fprintf(info, "no gnuplot script: no PNG; ");
        return false;
    }
    /* Paths become gnuplot string literals in single quotes. */
    if (strchr(csv, '\'') || strchr(o->plot_prefix, '\'') || strchr(title, '\'')) {
        fprintf(info, "a path contains a quote: gnuplot skipped; ");
        return false;
    }
    char expr[8192];
    snprintf(expr, sizeof expr, "csv='%s'; out='%s'; plot_title='%s'", csv, o->plot_prefix,
             title);
    char *argv[] = {"gnuplot", "-e", expr, (char *)script, NULL};
    pid_t pid;
    if (posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ) != 0) {
        fprintf(info, "gnuplot could not be started: no PNG; ");
        return false;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(info, "gnuplot failed (status %d): no PNG; ", status);
        return false;
    }
    return true;
}

static bool plot_builtin(FILE *info, const sweep_opts *o, const point *pts, size_t n,
                         const char *title) {
    double bx[64], bo[64], bt[64], ix[MAX_LENS], it[MAX_LENS], io[MAX_LENS], ox[MAX_LENS],
        ot[MAX_LENS], oo[MAX_LENS];
    size_t nb = 0, ni = 0, no = 0;
    for (size_t i = 0; i < n; i++) {
        const point *p = &pts[i];
        if (!strcmp(p->sweep, "batch") && nb < 64) {
            bx[nb] = p->max_batch_size, bo[nb] = p->out_s, bt[nb++] = p->tok_s;
        } else if (!strcmp(p->sweep, "input_len") && ni < MAX_LENS) {
            ix[ni] = (double)p->input_len, io[ni] = p->out_s, it[ni++] = p->tok_s;
        } else if (!strcmp(p->sweep, "output_len") && no < MAX_LENS) {
            ox[no] = (double)p->output_len, oo[no] = p->out_s, ot[no++] = p->tok_s;
        }
    }
    pl_bench_series batch[] = {
        {"total tokens/s", "#1f77b4", bx, bt, nb},
        {"output tokens/s", "#d62728", bx, bo, nb},
    };
    pl_bench_series lens[] = {
        {"total tokens/s vs prompt length", "#1f77b4", ix, it, ni},
        {"output tokens/s vs prompt length", "#d62728", ix, io, ni},
        {"total tokens/s vs output length", "#2ca02c", ox, ot, no},
        {"output tokens/s vs output length", "#ff7f0e", ox, oo, no},
    };
    char t1[160], t2[160];
    snprintf(t1, sizeof t1, "vs max batch size (input %lld, output %lld)", o->wo.input_len,
             o->wo.output_len);
    snprintf(t2, sizeof t2, "vs length (max batch %d; other length fixed at %lld/%lld)",
             o->cfg.max_batch_size, o->wo.input_len, o->wo.output_len);
    pl_bench_panel panels[2];
    size_t np = 0;
    if (nb) panels[np++] = (pl_bench_panel){t1, "max_batch_size", "tokens/s", true, batch, 2};
    if (ni || no)
        panels[np++] = (pl_bench_panel){t2, "length (tokens)", "tokens/s", false, lens, 4};
    char path[4096];
    snprintf(path, sizeof path, "%s.svg", o->plot_prefix);
    if (!pl_bench_svg_write(path, title, panels, np)) {
        fprintf(info, "\n");
        fprintf(stderr, "pagellm bench sweep: cannot write %s: %s\n", path, strerror(errno));
        return false;
    }
    fprintf(info, "wrote %s with the built-in plotter\n", path);
    return true;
}

static json_t *point_json(const point *p) {
    json_t *o = json_object();
    json_object_set_new(o, "sweep", json_string(p->sweep));
    json_object_set_new(o, "max_batch_size", json_integer(p->max_batch_size));
    json_object_set_new(o, "input_len", json_integer(p->input_len));
    json_object_set_new(o, "output_len", json_integer(p->output_len));
    json_object_set_new(o, "num_prompts", json_integer((json_int_t)p->num_prompts));
    json_object_set_new(o, "elapsed_time", json_real(p->elapsed_s));
    json_object_set_new(o, "requests_per_second", json_real(p->req_s));
    json_object_set_new(o, "tokens_per_second", json_real(p->tok_s));
    json_object_set_new(o, "output_tokens_per_second", json_real(p->out_s));
    json_object_set_new(o, "spread", json_real(p->spread));
    json_object_set_new(o, "mean_batch_seqs", json_real(p->mean_batch_seqs));
    json_object_set_new(o, "mean_batch_tokens", json_real(p->mean_batch_tokens));
    json_object_set_new(o, "kv_usage_peak", json_real(p->kv_usage_peak));
    json_object_set_new(o, "preemptions", json_integer((json_int_t)p->preemptions));
    json_object_set_new(o, "ttft_median_ms", json_real(p->ttft_ms));
    json_object_set_new(o, "tpot_median_ms", json_real(p->tpot_ms));
    return o;
}

/* ------------------------------------------------------------------------------------------
 * The command
 * ---------------------------------------------------------------------------------------- */

static int parse(sweep_opts *o, int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int r = cli_engine_flag(&o->cfg, argc, argv, &i);
        if (r == 0) r = pl_bench_workload_flag(&o->wo, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        long long n;
        if (cli_is(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return -1;
        } else if (cli_is(a, "--max-batch-size-limit")) {
            if (!cli_int(a, v, 1, 1 << 16, &n)) return 2;
            o->limit = n, i++;
        } else if (cli_is(a, "--input-lens")) {
            if (!parse_list(a, v, o->input_lens, &o->n_input_lens)) return 2;
            i++;
        } else if (cli_is(a, "--output-lens")) {
            if (!parse_list(a, v, o->output_lens, &o->n_output_lens)) return 2;
            i++;
        } else if (cli_is(a, "--sweep")) {
            if (!v || (strcmp(v, "batch") && strcmp(v, "lengths") && strcmp(v, "all"))) {
                fprintf(stderr, "pagellm: --sweep: '%s' is not one of batch, lengths, all\n",
                        v ? v : "");
                return 2;
            }
            o->do_batch = strcmp(v, "lengths") != 0;
            o->do_lengths = strcmp(v, "batch") != 0;
            i++;
        } else if (cli_is(a, "--reps")) {
            if (!cli_int(a, v, 1, 1000, &n)) return 2;
            o->reps = n, i++;
        } else if (cli_is(a, "--output-csv") && v) {
            o->csv_path = v, i++;
        } else if (cli_is(a, "--plot") && v) {
            o->plot_prefix = v, i++;
        } else if (cli_is(a, "--gnuplot-script") && v) {
            o->script = v, i++;
        } else if (cli_is(a, "--profile") && v) {
            o->profile_prefix = v, i++;
        } else if (cli_is(a, "--output-json") && v) {
            o->json_path = v, i++;
        } else if (cli_is(a, "--no-progress")) {
            o->progress = false;
        } else {
            return cli_unknown_flag("bench sweep", a, usage);
        }
    }
    if (o->wo.dataset) {
        fprintf(stderr, "pagellm: --dataset: the sweep uses random prompts of the lengths it "
                        "varies; use bench throughput for datasets\n");
        return 2;
    }
    return 0;
}

int pl_bench_sweep_main(int argc, char **argv) {
    sweep_opts o = {.limit = 256, .do_batch = true, .do_lengths = true, .reps = 1,
                    .progress = true,
                    .input_lens = {16, 32, 64, 128}, .output_lens = {16, 32, 64, 128},
                    .n_input_lens = 4, .n_output_lens = 4};
    pl_engine_config_default(&o.cfg);
    o.cfg.model_path = DEFAULT_MODEL;
    pl_bench_workload_opts_default(&o.wo);
    o.wo.input_len = 64;
    o.wo.output_len = 64;
    int prc = parse(&o, argc, argv);
    if (prc) return prc < 0 ? 0 : prc;

    point pts[64 + 2 * MAX_LENS];
    size_t n = 0;
    if (o.do_batch) {
        for (long long bs = 1;; bs *= 2) {
            long long b = bs < o.limit ? bs : o.limit;
            long long np = o.wo.num_prompts > 2 * b ? o.wo.num_prompts : 2 * b;
            pts[n++] = (point){.sweep = "batch", .max_batch_size = (int)b,
                               .input_len = o.wo.input_len, .output_len = o.wo.output_len,
                               .num_prompts = (size_t)np};
            if (b >= o.limit) break;
        }
    }
    if (o.do_lengths) {
        pl_engine_config resolved = o.cfg;
        pl_engine_config_resolve(&resolved);
        int bs = resolved.max_batch_size;
        size_t np = (size_t)(o.wo.num_prompts > 2 * bs ? o.wo.num_prompts : 2 * bs);
        for (int k = 0; k < o.n_input_lens; k++)
            pts[n++] = (point){.sweep = "input_len", .max_batch_size = bs,
                               .input_len = o.input_lens[k], .output_len = o.wo.output_len,
                               .num_prompts = np};
        for (int k = 0; k < o.n_output_lens; k++)
            pts[n++] = (point){.sweep = "output_len", .max_batch_size = bs,
                               .input_len = o.wo.input_len, .output_len = o.output_lens[k],
                               .num_prompts = np};
    }

    const char *build = pl_bench_build_describe(true);
    FILE *csv = o.csv_path ? NULL : stdout;
    FILE *info = o.csv_path ? stdout : stderr; /* keep stdout pure CSV when it carries it */
    fprintf(info, "Model: %s (%d threads, build %s); %zu points, %lld run(s) each\n",
            o.cfg.model_path, o.cfg.n_threads ? o.cfg.n_threads : pl_bench_online_cpus(), build,
            n, o.reps);
    if (csv) fputs(k_csv_header, csv);
    point done[64 + 2 * MAX_LENS];
    size_t n_done = 0;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        bool skipped = false;
        if ((rc = run_point(&o, &pts[i], i + 1, n, &skipped))) break;
        if (skipped) continue;
        done[n_done++] = pts[i];
        fprintf(info, "%-10s batch %4d  in %5lld  out %5lld  prompts %5zu: %10.2f total tok/s "
                      "%10.2f output tok/s  mean batch %.1f\n", pts[i].sweep,
                pts[i].max_batch_size, pts[i].input_len, pts[i].output_len, pts[i].num_prompts,
                pts[i].tok_s, pts[i].out_s, pts[i].mean_batch_seqs);
        if (csv) {
            csv_row(csv, &pts[i]);
            fflush(csv);
        }
    }
    if (rc == 0 && o.csv_path && !write_csv(o.csv_path, done, n_done)) rc = 1;
    if (rc == 0 && o.plot_prefix) {
        char csv_path[4096], title[256];
        snprintf(csv_path, sizeof csv_path, "%s.csv", o.plot_prefix);
        snprintf(title, sizeof title, "pagellm bench sweep: %s, %d threads", o.cfg.model_path,
                 o.cfg.n_threads ? o.cfg.n_threads : pl_bench_online_cpus());
        if (!write_csv(csv_path, done, n_done)) {
            rc = 1;
        } else {
            char script[4096];
            bool have_script = on_path("gnuplot") && find_script(&o, script, sizeof script);
            fprintf(info, "Plot: ");
            if (plot_gnuplot(info, &o, have_script ? script : NULL, csv_path, title))
                fprintf(info, "gnuplot wrote %s.png and %s.svg\n", o.plot_prefix, o.plot_prefix);
            else if (!plot_builtin(info, &o, done, n_done, title))
                rc = 1;
        }
    }
    if (rc == 0 && o.json_path) {
        json_t *root = json_object(), *arr = json_array();
        for (size_t i = 0; i < n_done; i++) json_array_append_new(arr, point_json(&done[i]));
        json_object_set_new(root, "points", arr);
        json_object_set_new(root, "config", pl_bench_config_json(&o.cfg));
        json_object_set_new(root, "build", pl_bench_build_json());
        if (!pl_bench_write_json(o.json_path, root)) rc = 1;
        json_decref(root);
    }
    return rc;
}
