/*
 * bench/bench_internal.h - what the benchmark commands share: the workload (random token-id
 * prompts or a dataset file), the run loop that drives an engine through it, statistics,
 * JSON/report helpers, the roofline measurements and the profile summary.
 *
 * Invariants
 * - Only the public API (pagellm.h) and the command-line helpers (cli/cli.h) are used.
 * - Functions returning int return an exit status (0 ok, 1 runtime failure, 2 usage error)
 *   and have already printed a message naming the flag, file or request on stderr.
 * - Whoever fills a struct that owns memory frees it with the matching *_free.
 */
#ifndef PL_BENCH_INTERNAL_H
#define PL_BENCH_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "bench/progress.h"
#include "pagellm.h"

/* ------------------------------------------------------------------------------------------
 * Workload
 * ---------------------------------------------------------------------------------------- */

/* One request: token ids or text, and how many tokens it asks for. */
typedef struct pl_bench_prompt {
    int32_t *ids;    /* (n_ids) token ids, owned; NULL when text is set */
    size_t n_ids;
    char *text;      /* NUL-terminated prompt, owned; NULL when ids are set */
    size_t n_tokens; /* its length in tokens as counted here: n_ids, or the text's tokens
                        (with BOS) when a tokenizer counted them; 0 not counted */
    int output_len;  /* max_tokens of the request, >= 1 */
} pl_bench_prompt;

typedef struct pl_bench_workload {
    pl_bench_prompt *prompts; /* (n), owned */
    size_t n;
} pl_bench_workload;

/* The workload flags shared by throughput, sweep and profile (vLLM's names). */
typedef struct pl_bench_workload_opts {
    long long num_prompts;
    bool num_prompts_set;     /* with a dataset: take only the first num_prompts */
    long long input_len;      /* random prompts: tokens after the shared prefix */
    long long output_len;
    bool output_len_set;      /* with a dataset: overrides every item's own output length */
    double range_ratio;       /* lengths uniform in [len*(1-r), len*(1+r)] */
    long long prefix_len;     /* shared random prefix before every prompt */
    const char *dataset;      /* JSONL prompts file or ShareGPT JSON; NULL = random */
    const char *dataset_name; /* "random", "sharegpt" or "custom" (JSONL); NULL: random
                                 without a dataset file, else what the file holds */
    uint64_t seed;
    bool ignore_eos;
} pl_bench_workload_opts;

void pl_bench_workload_opts_default(pl_bench_workload_opts *o);
/* If argv[*i] is a workload flag, parses it (advancing *i past its value) and returns 1;
 * 0 when it is not one; -1 on a bad value (message printed). */
int pl_bench_workload_flag(pl_bench_workload_opts *o, int argc, char **argv, int *i);
void pl_bench_print_workload_flags(const pl_bench_workload_opts *defaults);

/* What building a workload needs to know of the model: an engine's facts (offline), or what a
 * client knows of a server (online: a tokenizer loaded alone, the server's model list). */
typedef struct pl_bench_model_facts {
    int vocab_size;          /* random ids are drawn from [3, vocab_size) */
    int max_model_len;       /* bounds prompt + output; 0 unknown (not checked) */
    const pl_engine *engine; /* the engine that runs the prompts (KV capacity check, its
                                tokenizer's BOS rule); NULL online */
    const pl_tokenizer *tok; /* NULL: token ids only */
    bool text_prompts;       /* online: with tok, random prompts become text of their token
                                length; a dataset's text prompts need no tokenizer here (the
                                server has one) and are counted when tok is set */
} pl_bench_model_facts;

/* Builds the prompts for an engine (its vocabulary and max_model_len bound the random ids and
 * lengths). seed_offset is added to o->seed so repeated runs get fresh prompts. Returns an
 * exit status; on failure *out is left empty. */
int pl_bench_workload_build(const pl_bench_workload_opts *o, const pl_engine *e,
                            uint64_t seed_offset, pl_bench_workload *out);
/* Whether the flags agree with each other (--dataset-name and --dataset-path): an exit
 * status, the message printed. The builders check it too. */
int pl_bench_workload_check(const pl_bench_workload_opts *o);
/* The same from facts (pl_bench_workload_build fills them from its engine). */
int pl_bench_workload_build_for(const pl_bench_workload_opts *o, const pl_bench_model_facts *f,
                                uint64_t seed_offset, pl_bench_workload *out);
void pl_bench_workload_free(pl_bench_workload *w);
/* Describes the workload in one line ("64 random prompts, input 128, output 128"). */
void pl_bench_workload_describe(const pl_bench_workload_opts *o, const pl_bench_workload *w,
                                char *buf, size_t cap);

/* ------------------------------------------------------------------------------------------
 * Running a workload
 * ---------------------------------------------------------------------------------------- */

/* What one finished request reported. */
typedef struct pl_bench_request {
    size_t n_prompt;
    size_t n_output;
    size_t n_cached;      /* prompt tokens served from the prefix cache */
    double ttft_s;
    double total_s;
    pl_finish_reason finish;
} pl_bench_request;

typedef struct pl_bench_run {
    double elapsed_s;          /* first submit -> last request finished (wall clock) */
    pl_bench_request *reqs;    /* (n_reqs) in finish order, owned: one per sample (sp->n per
                                  prompt) */
    size_t n_reqs;
    size_t n_prompts;          /* prompts submitted (n_reqs / sp->n when all finished) */
    uint64_t prompt_tokens;    /* of requests not dropped (abort, overloaded); once per prompt
                                  whatever its number of samples (they share its KV blocks) */
    uint64_t output_tokens;
    uint64_t steps;            /* engine steps taken by this run */
    size_t n_errors;           /* finished with reason error */
    size_t n_dropped;          /* finished with reason abort or overloaded */
} pl_bench_run;

/* Submits every prompt (feeding the waiting queue as it drains when it is bounded) and steps
 * the engine until all have finished. progress (may be NULL): a bar counting output tokens,
 * started by the caller with pl_bench_workload_output_tokens in its total (or more, for a
 * bar that spans several runs); the run adds the tokens produced, gives back the budget of
 * requests that stop early, sets the note to the requests finished and redraws; the caller
 * finishes the bar. Returns an exit status: 1 when the engine fails or a request is refused. */
int pl_bench_run_workload(pl_engine *e, const pl_bench_workload *w, const pl_sampling_params *sp,
                          pl_progress *progress, pl_bench_run *out);
/* Output tokens the workload asks for at most (the sum of its max_tokens), per sample. */
uint64_t pl_bench_workload_output_tokens(const pl_bench_workload *w);
void pl_bench_run_free(pl_bench_run *r);
/* The sampling parameters the benchmarks use (vLLM's: temperature 1, top_p 1). */
void pl_bench_sampling_default(pl_sampling_params *sp, bool ignore_eos);

/* ------------------------------------------------------------------------------------------
 * Statistics
 * ---------------------------------------------------------------------------------------- */

/* Linear interpolation between closest ranks (numpy's default); sorted: (n) ascending. */
double pl_bench_percentile(const double *sorted, size_t n, double pct);
void pl_bench_sort(double *v, size_t n);
double pl_bench_median(const double *v, size_t n); /* v is not modified */

typedef struct pl_bench_summary {
    size_t n;
    double mean, median, p99, min, max;
} pl_bench_summary;

/* Sorts v (n) in place and summarises it; n == 0 gives zeros. */
void pl_bench_summarize(double *v, size_t n, pl_bench_summary *out);
/* TTFT and TPOT (time per output token after the first) over the run's requests, seconds. */
int pl_bench_latency_summaries(const pl_bench_run *r, pl_bench_summary *ttft,
                               pl_bench_summary *tpot);
json_t *pl_bench_summary_json_ms(const pl_bench_summary *s);

/* ------------------------------------------------------------------------------------------
 * Reports
 * ---------------------------------------------------------------------------------------- */

double pl_bench_now_s(void); /* monotonic clock */
/* Writes root (indented) to path; prints the error and returns false on failure. */
bool pl_bench_write_json(const char *path, json_t *root);
json_t *pl_bench_config_json(const pl_engine_config *cfg);
/* Build type, optimisation and sanitizers of this build, and the pagellm version. */
json_t *pl_bench_build_json(void);
/* "release -O3" etc.; warns on stderr when the build is not optimised. */
const char *pl_bench_build_describe(bool warn);
int pl_bench_online_cpus(void);
/* Creates the engine, printing the error (exit status 1) on failure. */
int pl_bench_engine_create(const char *cmd, const pl_engine_config *cfg, pl_engine **out);
/* "Model: NAME (f32; 15.2M matmul params, 60.7 MB of matmul weights per token[; 2 of 8
 * experts per token: ...M of ...M params active]; 2 threads, build ...)". */
void pl_bench_print_model(FILE *f, const pl_engine_config *cfg, const pl_engine *e,
                          const char *build);
json_t *pl_bench_model_json(const pl_engine_config *cfg, const pl_engine *e);

/* ------------------------------------------------------------------------------------------
 * Roofline: this machine's ceilings
 * ---------------------------------------------------------------------------------------- */

typedef struct pl_bench_roofline_opts {
    long long array_mib;  /* per array; 0 = sized from the last-level cache */
    int n_threads;        /* memory, GEMM and FMA kernels; 0 = all online CPUs */
    int gemm_n;           /* square sgemm size */
    int reps;             /* best of */
} pl_bench_roofline_opts;

/* The int8 multiply-add peak of one instruction path (bench/int_peak.c). */
typedef struct pl_bench_int_peak {
    const char *path;      /* "AVX-512 VNNI", "AVX-VNNI", "AVX2", "AMX"; static storage */
    double gops;           /* a multiply and an add per int8 product, per second, / 1e9 */
} pl_bench_int_peak;
#define PL_BENCH_INT_PATHS 4

typedef struct pl_bench_roofline {
    int n_threads;
    size_t array_bytes;    /* per array; three arrays */
    size_t llc_bytes;      /* as the OS reports it; 0 unknown */
    double read_gbs;       /* best read-and-sum bandwidth over the three arrays */
    const char *read_isa;  /* the memory kernels' loads (pl_bench_membw.isa) */
    double triad_gbs;      /* best a = b + s*c (24 bytes per element counted, as STREAM) */
    double gemm_gflops;    /* best f32 sgemm */
    int gemm_n;
    int blas_threads;
    double fma_gflops;     /* register-resident f32 FMAs on n_threads threads: the cores' peak */
    const char *fma_isa;   /* "AVX-512", "AVX2" or "none" (fma_gflops 0) */
    pl_bench_int_peak int_peaks[PL_BENCH_INT_PATHS]; /* the paths this CPU has, best first */
    int n_int_peaks;
    double seconds;        /* time the measurement took */
} pl_bench_roofline;

/* The memory bandwidth probe (bench/membw.c): three arrays far larger than the last-level
 * cache, allocated and first touched once, measured as often as wanted. */
typedef struct pl_bench_membw {
    double *a, *b, *c;     /* (n) each, 64-byte aligned, owned */
    size_t n;
    size_t array_bytes;    /* n doubles */
    size_t llc_bytes;      /* as the OS reports it; 0 unknown */
    int n_threads;
    const char *isa;       /* the kernels' loads: "AVX-512", "AVX2" or "baseline" (plain C) */
} pl_bench_membw;

/* Sizes the arrays from o (array_mib, n_threads), allocates them and touches each thread's
 * chunk from that thread. Exit status; on failure nothing is left to free. */
int pl_bench_membw_init(pl_bench_membw *m, const pl_bench_roofline_opts *o);
/* Best of reps of the read kernel into *read_gbs; with triad_gbs, first the triad's. */
int pl_bench_membw_measure(pl_bench_membw *m, int reps, double *read_gbs, double *triad_gbs);
void pl_bench_membw_free(pl_bench_membw *m);

void pl_bench_roofline_opts_default(pl_bench_roofline_opts *o);
/* --array-mib, --roofline-threads, --gemm-n, --roofline-reps: as pl_bench_workload_flag. */
int pl_bench_roofline_flag(pl_bench_roofline_opts *o, int argc, char **argv, int *i);
void pl_bench_print_roofline_flags(void);
int pl_bench_roofline_measure(const pl_bench_roofline_opts *o, pl_bench_roofline *out);
/* f32 FMA peak in GFLOP/s of n_threads threads, best of reps (bench/fma_peak.c); 0 and
 * *isa "none" without AVX2+FMA. */
double pl_bench_fma_peak_gflops(int n_threads, int reps, const char **isa);
/* int8 multiply-add peaks of n_threads threads, best of reps, for each path this CPU (and
 * OS, for AMX) has, into out (PL_BENCH_INT_PATHS entries); returns how many. */
int pl_bench_int_peaks(int n_threads, int reps, pl_bench_int_peak *out);
void pl_bench_roofline_print(FILE *f, const pl_bench_roofline *r);
json_t *pl_bench_roofline_json(const pl_bench_roofline *r);

/* ------------------------------------------------------------------------------------------
 * Profile summary
 * ---------------------------------------------------------------------------------------- */

/* acc += p, entry by entry (entries are matched by position; names are static). */
void pl_bench_profile_add(pl_profile *acc, const pl_profile *p);
/* The table: share of step time per phase, share of forward time per op, and for ops with
 * byte/FLOP counts the achieved GB/s and GFLOP/s, as fractions of roof when it is not NULL. */
void pl_bench_profile_print(FILE *f, const pl_profile *p, const pl_bench_roofline *roof);
json_t *pl_bench_profile_json(const pl_profile *p, const pl_bench_roofline *roof);
/* The entry called name among the ops (NULL if absent). */
const pl_profile_entry *pl_bench_profile_op(const pl_profile *p, const char *name);

/* The --profile handling every bench command shares: ceilings measured first, profiling on
 * with a trace around the measured part, then the table. */
typedef struct pl_bench_profiling {
    const char *trace_path;     /* NULL: profiling off */
    bool no_roofline;           /* skip measuring ceilings for the table */
    pl_bench_roofline_opts roof_opts;
    pl_bench_roofline roof;
    bool have_roof;
} pl_bench_profiling;

/* --profile FILE, --no-roofline and the roofline flags. */
int pl_bench_profiling_flag(pl_bench_profiling *p, int argc, char **argv, int *i);
/* Measures the ceilings when profiling is wanted (before the engine exists, so the two do
 * not compete for memory bandwidth), on cfg's thread count unless --roofline-threads says. */
int pl_bench_profiling_prepare(pl_bench_profiling *p, const pl_engine_config *cfg);
/* Resets the engine's profile and turns profiling on, writing the trace to trace_path. */
int pl_bench_profiling_start(pl_engine *e, const char *trace_path);
/* Fills *out and turns profiling off (which completes the trace file). */
int pl_bench_profiling_stop(pl_engine *e, pl_profile *out);

/* ------------------------------------------------------------------------------------------
 * Commands
 * ---------------------------------------------------------------------------------------- */

int pl_bench_throughput_main(int argc, char **argv);
int pl_bench_latency_main(int argc, char **argv);
int pl_bench_sweep_main(int argc, char **argv);
int pl_bench_roofline_main(int argc, char **argv);
int pl_bench_serve_main(int argc, char **argv); /* bench_serve.c */

/* ------------------------------------------------------------------------------------------
 * Plots (bench_plot.c): a small self-contained SVG line chart, used when gnuplot is absent.
 * ---------------------------------------------------------------------------------------- */

typedef struct pl_bench_series {
    const char *name;
    const char *color;   /* CSS colour */
    const double *x;     /* (n) */
    const double *y;     /* (n) */
    size_t n;
} pl_bench_series;

typedef struct pl_bench_panel {
    const char *title;
    const char *xlabel;
    const char *ylabel;
    bool log2_x;
    const pl_bench_series *series; /* (n_series) */
    size_t n_series;
} pl_bench_panel;

/* Writes the panels side by side as one SVG file. Returns false (errno set) on I/O failure. */
bool pl_bench_svg_write(const char *path, const char *title, const pl_bench_panel *panels,
                        size_t n_panels);

#endif
