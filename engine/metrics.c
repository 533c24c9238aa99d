/*
 * engine/metrics.c - counters and latency percentiles.
 *
 * Percentiles come from log-scale histograms (bin i covers 1 us * 1.01^i), so memory does not
 * grow with the number of requests served and a quantile is within 1% of the exact value.
 */
#include <math.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/fields.h"
#include "util/status.h"

#define HIST_BASE 1e-6
#define HIST_GROWTH 1.01

void pl_hist_add(pl_hist *h, double s) {
    int i = 0;
    if (s > HIST_BASE) i = (int)(log(s / HIST_BASE) / log(HIST_GROWTH)) + 1;
    if (i >= PL_HIST_BINS) i = PL_HIST_BINS - 1;
    h->bins[i]++;
    h->n++;
    h->sum += s;
}

double pl_hist_quantile(const pl_hist *h, double q) {
    if (h->n == 0) return 0;
    uint64_t target = (uint64_t)ceil(q * (double)h->n), acc = 0;
    if (target < 1) target = 1;
    for (int i = 0; i < PL_HIST_BINS; i++) {
        acc += h->bins[i];
        if (acc >= target) /* the bin's geometric middle */
            return i == 0 ? HIST_BASE : HIST_BASE * pow(HIST_GROWTH, i - 0.5);
    }
    return HIST_BASE * pow(HIST_GROWTH, PL_HIST_BINS);
}

/* The value a bin stands for: its geometric middle (what pl_hist_quantile returns). */
static double bin_value(int i) {
    return i == 0 ? HIST_BASE : HIST_BASE * pow(HIST_GROWTH, i - 0.5);
}

pl_status pl_engine_latency_histogram(const pl_engine *e, pl_latency kind, const double *bounds,
                                      size_t n_bounds, uint64_t *out_counts,
                                      uint64_t *out_count, double *out_sum) {
    if (!e) return pl_fail(PL_ERR_INVALID_ARGUMENT, "latency_histogram: engine is NULL");
    const pl_engine_stats *s = &e->stats;
    const pl_hist *h = kind == PL_LATENCY_TTFT ? &s->ttft : kind == PL_LATENCY_ITL ? &s->itl
                       : kind == PL_LATENCY_TPOT ? &s->tpot : kind == PL_LATENCY_E2E ? &s->latency
                       : kind == PL_LATENCY_QUEUE ? &s->queue : NULL;
    if (!h) return pl_fail(PL_ERR_INVALID_ARGUMENT, "latency_histogram: unknown kind %d", (int)kind);
    if (n_bounds > 0 && (!bounds || !out_counts))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "latency_histogram: %zu bounds but %s is NULL",
                       n_bounds, bounds ? "out_counts" : "bounds");
    for (size_t i = 0; i < n_bounds; i++)
        if (isnan(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
            return pl_fail(PL_ERR_INVALID_ARGUMENT,
                           "latency_histogram: bounds[%zu] = %g: bounds must ascend strictly", i,
                           bounds[i]);
    /* one walk over the bins, the bounds advancing with it */
    size_t k = 0;
    uint64_t acc = 0;
    for (int i = 0; i < PL_HIST_BINS && k < n_bounds; i++) {
        double v = bin_value(i);
        while (k < n_bounds && v > bounds[k]) out_counts[k++] = acc;
        acc += h->bins[i];
    }
    while (k < n_bounds) out_counts[k++] = acc;
    if (out_count) *out_count = h->n;
    if (out_sum) *out_sum = h->sum;
    return PL_OK;
}

static void fill(const pl_engine *e, pl_metrics *out) {
    const pl_engine_stats *s = &e->stats;
    out->requests_finished = s->requests_finished;
    out->samples_finished = s->samples_finished;
    out->prompt_tokens = s->prompt_tokens;
    out->prompt_tokens_computed = s->prompt_tokens_computed;
    out->output_tokens = s->output_tokens;
    out->steps = s->steps;
    out->elapsed_s = (double)s->elapsed_ns * 1e-9;
    if (s->steps) {
        out->mean_batch_seqs = (double)s->step_seqs / (double)s->steps;
        out->mean_batch_tokens = (double)s->step_tokens / (double)s->steps;
    }
    if (out->elapsed_s > 0) {
        out->throughput_tok_s = (double)(s->prompt_tokens + s->output_tokens) / out->elapsed_s;
        out->output_tok_s = (double)s->output_tokens / out->elapsed_s;
    }
    out->mean_latency_s = s->latency.n ? s->latency.sum / (double)s->latency.n : 0;
    out->ttft_mean_s = s->ttft.n ? s->ttft.sum / (double)s->ttft.n : 0;
    out->ttft_p50_s = pl_hist_quantile(&s->ttft, 0.5);
    out->ttft_p99_s = pl_hist_quantile(&s->ttft, 0.99);
    out->tpot_mean_s = s->tpot.n ? s->tpot.sum / (double)s->tpot.n : 0;
    out->tpot_p50_s = pl_hist_quantile(&s->tpot, 0.5);
    out->tpot_p99_s = pl_hist_quantile(&s->tpot, 0.99);

    pl_sched_counts c;
    pl_sched_get_counts(e->sched, &c);
    out->n_waiting = c.n_waiting;
    out->n_running = c.n_running;
    out->n_preempted = c.n_preempted;
    out->preemptions = c.n_preemptions;

    out->tokens_computed = s->step_tokens;
    out->tensor_parallel_size = e->cfg.tensor_parallel_size;
    if (e->tp && e->tp->link_on) {
        pl_comm_stats cs;
        pl_tp_link_lock(&e->tp->link); /* the keep-alive thread counts its heartbeats */
        cs = e->tp->comm->stats;
        pl_tp_link_unlock(&e->tp->link);
        out->tp_all_reduce_calls = cs.calls[PL_COMM_ALL_REDUCE];
        out->tp_all_reduce_bytes = cs.bytes[PL_COMM_ALL_REDUCE];
        out->tp_all_gather_calls = cs.calls[PL_COMM_ALL_GATHER];
        out->tp_all_gather_bytes = cs.bytes[PL_COMM_ALL_GATHER];
        out->tp_broadcast_calls = cs.calls[PL_COMM_BROADCAST];
        out->tp_broadcast_bytes = cs.bytes[PL_COMM_BROADCAST];
        uint64_t ns = 0;
        for (int k = 0; k < PL_COMM_N_OPS; k++) ns += cs.ns[k];
        out->tp_comm_s = (double)ns * 1e-9;
        out->tp_comm_last_step_s = (double)s->tp_comm_last_ns * 1e-9;
    }

    pl_kv_stats kv;
    pl_kv_get_stats(e->pool, &kv);
    out->kv_blocks_total = kv.n_blocks_total;
    out->kv_blocks_free = kv.n_blocks_free;
    out->kv_blocks_used = kv.n_blocks_used;
    out->kv_usage = kv.usage;
    out->kv_usage_peak = s->kv_usage_peak > kv.usage ? s->kv_usage_peak : kv.usage;
    out->prefix_cache_hit_rate = kv.prefix_queries_tokens
        ? (double)kv.prefix_hits_tokens / (double)kv.prefix_queries_tokens : 0;
    out->prefix_cache_queries = kv.prefix_queries_tokens;
    out->prefix_cache_hits = kv.prefix_hits_tokens;
    memcpy(out->samples_by_reason, s->samples_by_reason, sizeof out->samples_by_reason);
    out->block_size = e->cfg.block_size;
    out->max_model_len = e->max_model_len;
    out->vocab_size = e->vocab;
}

void pl_engine_metrics_sized(const pl_engine *e, pl_metrics *dst, size_t dst_size) {
    if (!dst) return;
    pl_metrics m = {.struct_size = sizeof m};
    if (e) fill(e, &m);
    pl_fields_fill_out(dst, dst_size, &m, sizeof m);
}
