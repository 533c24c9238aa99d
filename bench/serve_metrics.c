/*
 * bench/serve_metrics.c - the figures of `bench serve`, as vLLM's calculate_metrics makes them.
 *
 * Over the successful requests: input tokens are the server's usage.prompt_tokens (else the
 * workload's count), output tokens its usage.completion_tokens (else the tokens the chunks
 * named, one per chunk that named none); TPOT is (E2EL - TTFT) / (output tokens - 1) for
 * requests with more than one token; ITL is every gap between content chunks of every request;
 * throughputs divide by the benchmark's duration. Statistics are numpy's: mean, median,
 * population standard deviation, percentiles interpolated linearly between closest ranks.
 *
 * Peak output token throughput: the tokens of every content chunk go into one-second buckets
 * from the first request's start; the fullest bucket. Peak concurrency: the most requests open
 * at one instant, each open over [start, start + E2EL) (a sweep over the starts and ends,
 * ends first on a tie).
 *
 * Goodput: the requests that meet every objective given (TTFT, TPOT, E2EL; a request of one
 * token counts TPOT 0), per second.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_internal.h"
#include "bench/serve.h"

const char *const pl_bench_metric_names[PL_BENCH_N_METRICS] = {"ttft", "tpot", "itl", "e2el"};

double pl_bench_serve_tpot(const pl_bench_serve_result *r) {
    if (r->output_tokens <= 1) return 0.0;
    return (r->e2el_s - r->ttft_s) / (double)(r->output_tokens - 1);
}

/* v (n, seconds) summarised in ms; v is sorted in place. */
static void stats_of(double *v, size_t n, const double *pct, size_t n_pct,
                     pl_bench_serve_stats *s) {
    memset(s, 0, sizeof *s);
    if (n == 0) return;
    pl_bench_sort(v, n);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    double mean = sum / (double)n, ss = 0;
    for (size_t i = 0; i < n; i++) ss += (v[i] - mean) * (v[i] - mean);
    s->mean_ms = mean * 1e3;
    s->std_ms = sqrt(ss / (double)n) * 1e3;
    s->median_ms = pl_bench_percentile(v, n, 50) * 1e3;
    for (size_t k = 0; k < n_pct; k++) s->pct_ms[k] = pl_bench_percentile(v, n, pct[k]) * 1e3;
}

typedef struct edge {
    double t;
    int delta; /* -1 an end, +1 a start */
} edge;

static int cmp_edge(const void *a, const void *b) {
    const edge *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->delta - y->delta;
}

static size_t peak_concurrency(const pl_bench_serve_result *r, size_t n, edge *edges) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!r[i].success) continue;
        edges[m++] = (edge){r[i].start_s, +1};
        edges[m++] = (edge){r[i].start_s + r[i].e2el_s, -1};
    }
    qsort(edges, m, sizeof *edges, cmp_edge);
    long cur = 0, peak = 0;
    for (size_t i = 0; i < m; i++) {
        cur += edges[i].delta;
        if (cur > peak) peak = cur;
    }
    return (size_t)peak;
}

/* The fullest one-second bucket of output tokens; -1 when memory runs out. */
static double peak_tokens_per_s(const pl_bench_serve_result *r, size_t n) {
    double t_lo = INFINITY, t_hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (!r[i].success) continue;
        if (r[i].start_s < t_lo) t_lo = r[i].start_s;
        if (r[i].start_s + r[i].e2el_s > t_hi) t_hi = r[i].start_s + r[i].e2el_s;
    }
    if (t_lo > t_hi) return 0.0;
    size_t n_buckets = (size_t)ceil(t_hi - t_lo) + 1;
    double *bucket = calloc(n_buckets, sizeof *bucket);
    if (!bucket) return -1.0;
    for (size_t i = 0; i < n; i++) {
        if (!r[i].success) continue;
        double t = r[i].start_s + r[i].ttft_s;
        for (size_t j = 0; j < r[i].n_chunks; j++) {
            if (j > 0) t += r[i].itl[j - 1];
            double at = t - t_lo;
            size_t b = at > 0 ? (size_t)at : 0;
            if (b < n_buckets) bucket[b] += r[i].chunk_tokens[j];
        }
    }
    double peak = 0;
    for (size_t b = 0; b < n_buckets; b++)
        if (bucket[b] > peak) peak = bucket[b];
    free(bucket);
    return peak;
}

/* A value (s) meets an objective (ms; negative: none set). */
static bool within(double slo_ms, double value_s) { return slo_ms < 0 || value_s * 1e3 <= slo_ms; }

int pl_bench_serve_metrics_compute(const pl_bench_serve_result *r, const long long *prompt_len,
                                   size_t n, double duration_s, const double *percentiles,
                                   size_t n_percentiles, const pl_bench_goodput *goodput,
                                   pl_bench_serve_metrics *out) {
    memset(out, 0, sizeof *out);
    if (n_percentiles > PL_BENCH_MAX_PERCENTILES) n_percentiles = PL_BENCH_MAX_PERCENTILES;
    out->duration_s = duration_s;
    out->percentiles = percentiles;
    out->n_percentiles = n_percentiles;
    size_t n_itl = 0;
    for (size_t i = 0; i < n; i++)
        if (r[i].success && r[i].n_chunks > 1) n_itl += r[i].n_chunks - 1;
    size_t cap = n ? n : 1;
    double *v[PL_BENCH_N_METRICS];
    for (int k = 0; k < PL_BENCH_N_METRICS; k++)
        v[k] = malloc((k == PL_BENCH_METRIC_ITL ? (n_itl ? n_itl : 1) : cap) * sizeof(double));
    edge *edges = malloc(2 * cap * sizeof *edges);
    size_t cnt[PL_BENCH_N_METRICS] = {0};
    int rc = 0;
    for (int k = 0; k < PL_BENCH_N_METRICS; k++)
        if (!v[k]) rc = 1;
    if (!edges || rc) {
        rc = 1;
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const pl_bench_serve_result *q = &r[i];
        if (!q->success) {
            out->failed++;
            continue;
        }
        out->completed++;
        out->total_input += q->prompt_tokens >= 0 ? q->prompt_tokens : prompt_len[i];
        out->total_output += q->output_tokens;
        double tpot = pl_bench_serve_tpot(q);
        v[PL_BENCH_METRIC_TTFT][cnt[PL_BENCH_METRIC_TTFT]++] = q->ttft_s;
        v[PL_BENCH_METRIC_E2EL][cnt[PL_BENCH_METRIC_E2EL]++] = q->e2el_s;
        if (q->output_tokens > 1) v[PL_BENCH_METRIC_TPOT][cnt[PL_BENCH_METRIC_TPOT]++] = tpot;
        for (size_t j = 0; j + 1 < q->n_chunks; j++)
            v[PL_BENCH_METRIC_ITL][cnt[PL_BENCH_METRIC_ITL]++] = q->itl[j];
        if (goodput && goodput->set && within(goodput->slo_ms[PL_BENCH_METRIC_TTFT], q->ttft_s) &&
            within(goodput->slo_ms[PL_BENCH_METRIC_TPOT], tpot) &&
            within(goodput->slo_ms[PL_BENCH_METRIC_E2EL], q->e2el_s))
            out->good++;
    }
    double d = duration_s > 0 ? duration_s : 1e-9;
    out->request_throughput = (double)out->completed / d;
    out->request_goodput = (double)out->good / d;
    out->output_throughput = (double)out->total_output / d;
    out->total_token_throughput = (double)(out->total_input + out->total_output) / d;
    for (int k = 0; k < PL_BENCH_N_METRICS; k++)
        stats_of(v[k], cnt[k], percentiles, n_percentiles, &out->stats[k]);
    out->max_concurrent_requests = peak_concurrency(r, n, edges);
    out->max_output_tokens_per_s = peak_tokens_per_s(r, n);
    if (out->max_output_tokens_per_s < 0) rc = 1;
done:
    if (rc) fprintf(stderr, "pagellm bench serve: out of memory for the statistics\n");
    for (int k = 0; k < PL_BENCH_N_METRICS; k++) free(v[k]);
    free(edges);
    return rc;
}
