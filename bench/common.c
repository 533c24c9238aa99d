/*
 * bench/common.c - the run loop every benchmark uses, statistics and report helpers.
 *
 * The run loop is the offline-batch pattern of vLLM's `LLM.generate`: submit everything, then
 * step until the last request finishes, timing the whole with a monotonic clock. Per-request
 * numbers (TTFT, total) come from the completions the engine reports, so the statistics here
 * are computed from the same events the engine timed.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_internal.h"
#include "cli/cli.h"

#ifndef PL_BENCH_BUILDTYPE
#define PL_BENCH_BUILDTYPE "unknown"
#endif
#ifndef PL_BENCH_OPTIMIZATION
#define PL_BENCH_OPTIMIZATION "unknown"
#endif
#ifndef PL_BENCH_SANITIZE
#define PL_BENCH_SANITIZE "none"
#endif

/* ------------------------------------------------------------------------------------------
 * Clock, build, small helpers
 * ---------------------------------------------------------------------------------------- */

double pl_bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int pl_bench_online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

const char *pl_bench_build_describe(bool warn) {
    /* The engine is built by the same meson project with the same options, so this build's
     * type describes the library's too. */
    static const char desc[] = PL_BENCH_BUILDTYPE " -O" PL_BENCH_OPTIMIZATION
                               " sanitize=" PL_BENCH_SANITIZE;
    bool slow = !strcmp(PL_BENCH_OPTIMIZATION, "0") || !strcmp(PL_BENCH_OPTIMIZATION, "g") ||
                !strcmp(PL_BENCH_OPTIMIZATION, "plain") || strcmp(PL_BENCH_SANITIZE, "none");
    if (warn && slow)
        fprintf(stderr, "pagellm: WARNING: this build is not optimised (%s): the numbers below "
                        "do not describe the engine; use buildtype=release\n", desc);
    return desc;
}

json_t *pl_bench_build_json(void) {
    json_t *o = json_object();
    json_object_set_new(o, "pagellm_version", json_string(pl_version()));
    json_object_set_new(o, "buildtype", json_string(PL_BENCH_BUILDTYPE));
    json_object_set_new(o, "optimization", json_string(PL_BENCH_OPTIMIZATION));
    json_object_set_new(o, "sanitize", json_string(PL_BENCH_SANITIZE));
    json_object_set_new(o, "online_cpus", json_integer(pl_bench_online_cpus()));
    return o;
}

static const char *backend_name(pl_backend_kind b) {
    switch (b) {
    case PL_BACKEND_CPU: return "cpu";
    case PL_BACKEND_REF: return "ref";
    case PL_BACKEND_CUDA: return "cuda";
    }
    return "unknown";
}

json_t *pl_bench_config_json(const pl_engine_config *given) {
    pl_engine_config resolved = *given; /* the batch limits as the engine derives them */
    pl_engine_config_resolve(&resolved);
    const pl_engine_config *cfg = &resolved;
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(cfg->model_path ? cfg->model_path : ""));
    json_object_set_new(o, "backend", json_string(backend_name(cfg->backend)));
    json_object_set_new(o, "n_threads", json_integer(cfg->n_threads));
    json_object_set_new(o, "block_size", json_integer(cfg->block_size));
    json_object_set_new(o, "max_num_blocks", json_integer(cfg->max_num_blocks));
    json_object_set_new(o, "max_batch_size", json_integer(cfg->max_batch_size));
    json_object_set_new(o, "max_num_seqs", json_integer(cfg->max_num_seqs));
    json_object_set_new(o, "max_total_tokens", json_integer(cfg->max_total_tokens));
    json_object_set_new(o, "max_model_len", json_integer(cfg->max_model_len));
    json_object_set_new(o, "enable_prefix_caching", json_boolean(cfg->enable_prefix_caching));
    json_object_set_new(o, "enable_chunked_prefill", json_boolean(cfg->enable_chunked_prefill));
    return o;
}

bool pl_bench_write_json(const char *path, json_t *root) {
    if (json_dump_file(root, path, JSON_INDENT(2) | JSON_SORT_KEYS) != 0) {
        fprintf(stderr, "pagellm: --output-json: cannot write %s: %s\n", path, strerror(errno));
        return false;
    }
    return true;
}

int pl_bench_unknown_flag(const char *cmd, const char *flag) {
    fprintf(stderr, "pagellm %s: unknown or incomplete flag '%s' (see --help)\n", cmd, flag);
    return 2;
}

int pl_bench_engine_create(const char *cmd, const pl_engine_config *cfg, pl_engine **out) {
    int role = cli_rank_role(cmd, cfg); /* a tensor-parallel worker does not return */
    if (role) return role;
    pl_status s = pl_engine_create(cfg, out);
    if (s == PL_OK) return 0;
    fprintf(stderr, "pagellm %s: %s (%s)\n", cmd, pl_last_error(), pl_status_name(s));
    /* A bad config value is the user's flag: a usage error. */
    return s == PL_ERR_INVALID_ARGUMENT ? 2 : 1;
}

void pl_bench_print_model(FILE *f, const pl_engine_config *cfg, const pl_engine *e,
                          const char *build) {
    pl_model_info info;
    pl_engine_model_info(e, &info);
    fprintf(f, "Model: %s (%s; %.1fM matmul params, %.1f MB of matmul weights; %d threads, "
            "build %s)\n", cfg->model_path, info.weight_type,
            (double)pl_engine_matmul_params(e) * 1e-6,
            (double)pl_engine_weight_bytes(e) * 1e-6,
            cfg->n_threads ? cfg->n_threads : pl_bench_online_cpus(), build);
    if (info.tensor_parallel_size > 1) fprintf(f, "Tensor parallel: %s\n", info.distributed);
}

json_t *pl_bench_model_json(const pl_engine_config *cfg, const pl_engine *e) {
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(cfg->model_path ? cfg->model_path : ""));
    json_object_set_new(o, "matmul_params", json_integer((json_int_t)pl_engine_matmul_params(e)));
    json_object_set_new(o, "weight_bytes", json_integer((json_int_t)pl_engine_weight_bytes(e)));
    pl_model_info info;
    pl_engine_model_info(e, &info);
    json_object_set_new(o, "weight_type", json_string(info.weight_type));
    return o;
}

void pl_bench_sampling_default(pl_sampling_params *sp, bool ignore_eos) {
    pl_sampling_params_default(sp);
    sp->temperature = 1.0f;
    sp->top_p = 1.0f;
    sp->ignore_eos = ignore_eos;
}

/* ------------------------------------------------------------------------------------------
 * Statistics
 * ---------------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void pl_bench_sort(double *v, size_t n) {
    if (n > 1) qsort(v, n, sizeof *v, cmp_double);
}

double pl_bench_percentile(const double *sorted, size_t n, double pct) {
    if (n == 0) return 0.0;
    if (pct <= 0) return sorted[0];
    if (pct >= 100) return sorted[n - 1];
    double pos = pct / 100.0 * (double)(n - 1);
    size_t lo = (size_t)pos;
    double frac = pos - (double)lo;
    if (lo + 1 >= n) return sorted[n - 1];
    return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

double pl_bench_median(const double *v, size_t n) {
    if (n == 0) return 0.0;
    double *tmp = malloc(n * sizeof *tmp);
    if (!tmp) return v[0];
    memcpy(tmp, v, n * sizeof *tmp);
    pl_bench_sort(tmp, n);
    double m = pl_bench_percentile(tmp, n, 50);
    free(tmp);
    return m;
}

void pl_bench_summarize(double *v, size_t n, pl_bench_summary *out) {
    memset(out, 0, sizeof *out);
    out->n = n;
    if (n == 0) return;
    pl_bench_sort(v, n);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    out->mean = sum / (double)n;
    out->median = pl_bench_percentile(v, n, 50);
    out->p99 = pl_bench_percentile(v, n, 99);
    out->min = v[0];
    out->max = v[n - 1];
}

int pl_bench_latency_summaries(const pl_bench_run *r, pl_bench_summary *ttft,
                               pl_bench_summary *tpot) {
    size_t n = r->n_reqs ? r->n_reqs : 1;
    double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    if (!a || !b) {
        free(a);
        free(b);
        fprintf(stderr, "pagellm: out of memory for statistics\n");
        return 1;
    }
    size_t na = 0, nb = 0;
    for (size_t i = 0; i < r->n_reqs; i++) {
        const pl_bench_request *q = &r->reqs[i];
        if (q->n_output == 0) continue; /* dropped before producing anything */
        a[na++] = q->ttft_s;
        /* vLLM's TPOT: decode time spread over the tokens after the first. */
        if (q->n_output > 1) b[nb++] = (q->total_s - q->ttft_s) / (double)(q->n_output - 1);
    }
    pl_bench_summarize(a, na, ttft);
    pl_bench_summarize(b, nb, tpot);
    free(a);
    free(b);
    return 0;
}

json_t *pl_bench_summary_json_ms(const pl_bench_summary *s) {
    json_t *o = json_object();
    json_object_set_new(o, "n", json_integer((json_int_t)s->n));
    json_object_set_new(o, "mean", json_real(s->mean * 1e3));
    json_object_set_new(o, "median", json_real(s->median * 1e3));
    json_object_set_new(o, "p99", json_real(s->p99 * 1e3));
    json_object_set_new(o, "min", json_real(s->min * 1e3));
    json_object_set_new(o, "max", json_real(s->max * 1e3));
    return o;
}

/* ------------------------------------------------------------------------------------------
 * The run loop
 * ---------------------------------------------------------------------------------------- */

static int submit_one(pl_engine *e, const pl_bench_prompt *p, const pl_sampling_params *base,
                      size_t index, pl_request_id *id, bool *queue_full) {
    pl_sampling_params sp = *base;
    sp.max_tokens = p->output_len;
    pl_status s = p->text ? pl_engine_submit_request(e, p->text, &sp, id)
                          : pl_engine_submit_tokens(e, p->ids, p->n_ids, &sp, id);
    *queue_full = s == PL_ERR_QUEUE_FULL;
    if (s == PL_OK || *queue_full) return 0;
    fprintf(stderr, "pagellm: request %zu (%zu prompt tokens, %d output tokens) refused: %s (%s)\n",
            index + 1, p->n_ids, p->output_len, pl_last_error(), pl_status_name(s));
    return 1;
}

uint64_t pl_bench_workload_output_tokens(const pl_bench_workload *w) {
    uint64_t n = 0;
    for (size_t i = 0; i < w->n; i++) n += (uint64_t)w->prompts[i].output_len;
    return n;
}

/* The prompt a completion belongs to: completions come roughly in submit order, so the search
 * starts where the last one was found. */
static size_t find_request(const pl_request_id *ids, size_t n, pl_request_id id, size_t *hint) {
    for (size_t k = 0; k < n; k++) {
        size_t i = (*hint + k) % n;
        if (ids[i] == id) return *hint = i;
    }
    return n;
}

int pl_bench_run_workload(pl_engine *e, const pl_bench_workload *w, const pl_sampling_params *sp,
                          pl_progress *pr, pl_bench_run *out) {
    memset(out, 0, sizeof *out);
    out->reqs = calloc(w->n ? w->n : 1, sizeof *out->reqs);
    pl_request_id *ids = calloc(w->n ? w->n : 1, sizeof *ids);
    if (!out->reqs || !ids) {
        free(ids);
        fprintf(stderr, "pagellm: out of memory for %zu request records\n", w->n);
        return 1;
    }
    pl_metrics m0;
    pl_engine_metrics(e, &m0);

    double t0 = pl_bench_now_s();
    size_t next = 0, hint = 0;
    int rc = 0;
    while (out->n_reqs < w->n) {
        /* A bounded waiting queue refuses what does not fit: submit the rest as it drains. */
        bool full = false;
        while (next < w->n && !full) {
            if ((rc = submit_one(e, &w->prompts[next], sp, next, &ids[next], &full))) goto done;
            if (!full) next++;
        }
        pl_step_result r;
        pl_status s = pl_engine_step(e, &r);
        if (s != PL_OK) {
            if (pr) pl_progress_clear(pr);
            fprintf(stderr, "pagellm: engine step failed: %s (%s)\n", pl_last_error(),
                    pl_status_name(s));
            rc = 1;
            goto done;
        }
        if (pr) pr->done += r.n_deltas;
        for (size_t k = 0; k < r.n_finished && out->n_reqs < w->n; k++) {
            const pl_completion *c = &r.finished[k];
            pl_bench_request *q = &out->reqs[out->n_reqs++];
            *q = (pl_bench_request){.n_prompt = c->n_prompt_ids, .n_output = c->n_output_ids,
                                    .n_cached = c->n_cached_prompt_ids, .ttft_s = c->ttft_s,
                                    .total_s = c->total_s, .finish = c->finish_reason};
            out->output_tokens += c->n_output_ids;
            if (c->finish_reason == PL_FINISH_ERROR) out->n_errors++;
            /* A dropped request's prompt was never (fully) computed: it is not throughput. */
            if (c->finish_reason == PL_FINISH_ABORT || c->finish_reason == PL_FINISH_OVERLOADED)
                out->n_dropped++;
            else
                out->prompt_tokens += c->n_prompt_ids;
            /* the bar's total counted max_tokens: give back what an early stop left unused */
            size_t i = find_request(ids, next, c->id, &hint);
            uint64_t budget = i < next ? (uint64_t)w->prompts[i].output_len : c->n_output_ids;
            if (pr && budget > c->n_output_ids) {
                uint64_t unused = budget - c->n_output_ids;
                pr->total = pr->total > unused ? pr->total - unused : 0;
            }
        }
        if (next == w->n && out->n_reqs < w->n && !pl_engine_has_pending_work(e)) {
            if (pr) pl_progress_clear(pr);
            fprintf(stderr, "pagellm: the engine went idle with %zu of %zu requests unreported\n",
                    w->n - out->n_reqs, w->n);
            rc = 1;
            goto done;
        }
        if (pr) {
            snprintf(pr->note, sizeof pr->note, "%zu/%zu requests", out->n_reqs, w->n);
            pl_progress_update(pr);
        }
    }
    out->elapsed_s = pl_bench_now_s() - t0;
    pl_metrics m1;
    pl_engine_metrics(e, &m1);
    out->steps = m1.steps - m0.steps;
    if (out->n_errors) {
        if (pr) pl_progress_clear(pr);
        fprintf(stderr, "pagellm: %zu request(s) finished with a backend error: %s\n",
                out->n_errors, pl_last_error());
        rc = 1;
    }
done:
    /* On failure, requests may still be queued: pl_engine_destroy frees them. */
    free(ids);
    return rc;
}

void pl_bench_run_free(pl_bench_run *r) {
    if (!r) return;
    free(r->reqs);
    memset(r, 0, sizeof *r);
}
