/*
 * server/metrics_text.c - GET /metrics: Prometheus text format 0.0.4 with vLLM's metric names
 * under the prefix "pagellm:", so dashboards and `bench serve` read either server alike.
 *
 * Gauges and counters come from pl_engine_metrics, histograms from
 * pl_engine_latency_histogram at vLLM's bucket bounds (with a few finer ones below 10 ms for
 * the token latencies, which a CPU serving a small model reaches), all taken by the stepping
 * thread between two steps (a snapshot: every figure of one scrape is of the same moment).
 * Counters are the engine's since start; request_success_total counts finished samples (vLLM
 * counts each of n samples as a request too). The server's own figures follow under
 * pagellm:server_*: the stepping thread's time stepping, delivering results and idle (the
 * HTTP layer's cost on that thread is the delivering share), and requests aborted because
 * the client hung up or read too slowly.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

static const double TTFT_BOUNDS[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25,
                                     0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
                                     160.0, 640.0, 2560.0};
static const double TOKEN_BOUNDS[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                      0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                                      10.0, 20.0, 40.0, 80.0};
static const double REQUEST_BOUNDS[] = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
                                        20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
                                        960.0, 1920.0, 7680.0};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
_Static_assert(COUNT(TTFT_BOUNDS) <= 32 && COUNT(TOKEN_BOUNDS) <= 32 &&
                   COUNT(REQUEST_BOUNDS) <= 32,
               "pl_srv_histogram holds 32 buckets");

const double *pl_srv_buckets(pl_latency kind, size_t *out_n) {
    switch (kind) {
    case PL_LATENCY_TTFT: *out_n = COUNT(TTFT_BOUNDS); return TTFT_BOUNDS;
    case PL_LATENCY_ITL:
    case PL_LATENCY_TPOT: *out_n = COUNT(TOKEN_BOUNDS); return TOKEN_BOUNDS;
    default: *out_n = COUNT(REQUEST_BOUNDS); return REQUEST_BOUNDS;
    }
}

typedef struct text_buf {
    char *p;
    size_t len, cap;
    bool failed;
} text_buf;

static void put(text_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text_buf *b, const char *fmt, ...) {
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n;
        char *g = realloc(b->p, cap);
        if (!g) {
            b->failed = true;
            return;
        }
        b->p = g;
        b->cap = cap;
    }
}

static void head(text_buf *b, const char *name, const char *type, const char *help) {
    put(b, "# HELP pagellm:%s %s\n# TYPE pagellm:%s %s\n", name, help, name, type);
}

static void sample(text_buf *b, const char *name, const char *labels, const char *model,
                   double v) {
    put(b, "pagellm:%s{model_name=\"%s\"%s} %.17g\n", name, model, labels, v);
}

static void gauge(text_buf *b, const char *name, const char *help, const char *model, double v) {
    head(b, name, "gauge", help);
    sample(b, name, "", model, v);
}

static void counter(text_buf *b, const char *name, const char *help, const char *model,
                    double v) {
    head(b, name, "counter", help);
    sample(b, name, "", model, v);
}

static void histogram(text_buf *b, const char *name, const char *help, const char *model,
                      pl_latency kind, const pl_srv_histogram *h) {
    size_t n;
    const double *bounds = pl_srv_buckets(kind, &n);
    head(b, name, "histogram", help);
    for (size_t i = 0; i < n; i++)
        put(b, "pagellm:%s_bucket{model_name=\"%s\",le=\"%g\"} %llu\n", name, model, bounds[i],
            (unsigned long long)h->counts[i]);
    put(b, "pagellm:%s_bucket{model_name=\"%s\",le=\"+Inf\"} %llu\n", name, model,
        (unsigned long long)h->count);
    put(b, "pagellm:%s_sum{model_name=\"%s\"} %.17g\n", name, model, h->sum);
    put(b, "pagellm:%s_count{model_name=\"%s\"} %llu\n", name, model,
        (unsigned long long)h->count);
}

/* A label value: backslash, quote and newline escaped. */
static void label_value(const char *in, char *out, size_t cap) {
    size_t k = 0;
    for (const char *p = in; *p && k + 3 < cap; p++) {
        if (*p == '\\' || *p == '"') out[k++] = '\\', out[k++] = *p;
        else if (*p == '\n') out[k++] = '\\', out[k++] = 'n';
        else out[k++] = *p;
    }
    out[k] = '\0';
}

char *pl_srv_metrics_text(pl_srv *s, const pl_srv_snapshot *snap, size_t *out_len) {
    text_buf b = {.cap = 16384};
    b.p = malloc(b.cap);
    if (!b.p) return NULL;
    b.p[0] = '\0';
    char model[512];
    label_value(s->model_name, model, sizeof model);
    const pl_metrics *m = &snap->m;

    gauge(&b, "num_requests_running", "Number of requests in model execution batches.", model,
          m->n_running);
    gauge(&b, "num_requests_waiting", "Number of requests waiting to be processed.", model,
          m->n_waiting);
    gauge(&b, "kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", model,
          m->kv_usage);
    gauge(&b, "kv_cache_blocks_total", "KV-cache blocks in the pool.", model, m->kv_blocks_total);
    gauge(&b, "kv_cache_blocks_free", "KV-cache blocks free (cached prefixes included).", model,
          m->kv_blocks_free);
    counter(&b, "num_preemptions_total", "Cumulative number of preemptions.", model,
            (double)m->preemptions);
    counter(&b, "prompt_tokens_total", "Number of prefill tokens processed.", model,
            (double)m->prompt_tokens);
    counter(&b, "generation_tokens_total", "Number of generation tokens processed.", model,
            (double)m->output_tokens);
    counter(&b, "prefix_cache_queries_total", "Prefix cache queries, in terms of number of "
            "queried tokens.", model, (double)m->prefix_cache_queries);
    counter(&b, "prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached "
            "tokens.", model, (double)m->prefix_cache_hits);

    head(&b, "request_success_total", "counter", "Count of successfully processed requests.");
    static const pl_finish_reason reasons[] = {PL_FINISH_STOP, PL_FINISH_LENGTH, PL_FINISH_ABORT,
                                               PL_FINISH_OVERLOADED, PL_FINISH_ERROR};
    for (size_t i = 0; i < COUNT(reasons); i++) {
        char labels[64];
        snprintf(labels, sizeof labels, ",finished_reason=\"%s\"",
                 pl_srv_finish_name(reasons[i]));
        sample(&b, "request_success_total", labels, model,
               (double)m->samples_by_reason[reasons[i]]);
    }

    histogram(&b, "time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              model, PL_LATENCY_TTFT, &snap->hist[PL_LATENCY_TTFT]);
    histogram(&b, "inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              model, PL_LATENCY_ITL, &snap->hist[PL_LATENCY_ITL]);
    histogram(&b, "request_time_per_output_token_seconds", "Histogram of time_per_output_token_"
              "seconds per request.", model, PL_LATENCY_TPOT, &snap->hist[PL_LATENCY_TPOT]);
    histogram(&b, "e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
              model, PL_LATENCY_E2E, &snap->hist[PL_LATENCY_E2E]);
    histogram(&b, "request_queue_time_seconds", "Histogram of time spent in WAITING phase for "
              "request.", model, PL_LATENCY_QUEUE, &snap->hist[PL_LATENCY_QUEUE]);

    counter(&b, "server_step_seconds_total", "Stepping thread: time inside pl_engine_step.",
            model, snap->step_s);
    counter(&b, "server_deliver_seconds_total", "Stepping thread: time copying step results "
            "into requests and resuming their connections (the HTTP layer's share).", model,
            snap->deliver_s);
    counter(&b, "server_idle_seconds_total", "Stepping thread: time asleep in pl_engine_wait.",
            model, snap->idle_s);
    counter(&b, "server_step_cpu_seconds_total", "Stepping thread: its CPU time inside "
            "pl_engine_step (backend worker threads not counted).", model, snap->step_cpu_s);
    counter(&b, "server_deliver_cpu_seconds_total", "Stepping thread: its CPU time delivering "
            "step results.", model, snap->deliver_cpu_s);
    counter(&b, "server_aborted_disconnect_total", "Requests aborted because the client hung up.",
            model, (double)atomic_load(&s->aborted_disconnect));
    counter(&b, "server_aborted_slow_reader_total", "Streams aborted because the client read "
            "more slowly than the engine generated (--max-pending-deltas).", model,
            (double)atomic_load(&s->aborted_overflow));
    gauge(&b, "server_http_requests_active", "HTTP requests being answered.", model,
          atomic_load(&s->active));
    if (m->tensor_parallel_size > 1) {
        gauge(&b, "tp_size", "Ranks the model is split over (tensor parallelism).", model,
              m->tensor_parallel_size);
        counter(&b, "tp_all_reduce_calls_total", "All-reduces this rank (0) ran: two per layer "
                "per step.", model, (double)m->tp_all_reduce_calls);
        counter(&b, "tp_all_reduce_bytes_total", "Bytes all-reduced (nccl-tests' size: 4 per "
                "float), 2 x layers x hidden x 4 per computed token.", model,
                (double)m->tp_all_reduce_bytes);
        counter(&b, "tp_all_gather_calls_total", "All-gathers (the logits).", model,
                (double)m->tp_all_gather_calls);
        counter(&b, "tp_all_gather_bytes_total", "Bytes all-gathered.", model,
                (double)m->tp_all_gather_bytes);
        counter(&b, "tp_broadcast_calls_total", "Broadcasts (step plans and heartbeats).", model,
                (double)m->tp_broadcast_calls);
        counter(&b, "tp_broadcast_bytes_total", "Bytes broadcast.", model,
                (double)m->tp_broadcast_bytes);
        counter(&b, "tp_comm_seconds_total", "Seconds inside collectives.", model, m->tp_comm_s);
        gauge(&b, "tp_comm_seconds_last_step", "Seconds inside collectives in the latest step's "
              "forward pass.", model, m->tp_comm_last_step_s);
        counter(&b, "tokens_computed_total", "Tokens through the model (prompt chunks, decodes, "
                "recomputed after preemption).", model, (double)m->tokens_computed);
    }
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    *out_len = b.len;
    return b.p;
}
