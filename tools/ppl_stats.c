/*
 * tools/ppl_stats.c - perplexity and KL-divergence statistics (ppl_stats.h).
 *
 * The definitions are llama-perplexity's, so the printed lines compare one to one: the mean of
 * a per-token value with the standard error of the mean, sqrt(var / (n - 1)); perplexity as
 * exp(mean nll) with the error carried through exp; the RMS of dp with the error of the mean
 * square halved over the RMS; percentiles interpolated linearly between sorted values. One
 * difference: the KL divergence sums over the whole vocabulary (llama-perplexity leaves out
 * base tokens below e^-16, whose terms are < 1e-6 together).
 */
#include "ppl_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ppl_log_softmax(const float *logits, int n, float *out) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (double)expf(logits[i] - mx);
    double lse = (double)mx + log(sum);
    for (int i = 0; i < n; i++) out[i] = (float)((double)logits[i] - lse);
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

ppl_token ppl_score(const float *lp, const float *base_lp, int vocab, int32_t token) {
    ppl_token t = {.nll = -(double)lp[token]};
    if (!base_lp) return t;
    t.nll_base = -(double)base_lp[token];
    double kld = 0;
    for (int i = 0; i < vocab; i++) {
        float b = base_lp[i];
        kld += (double)expf(b) * ((double)b - (double)lp[i]);
    }
    t.kld = kld;
    t.dp = exp((double)lp[token]) - exp((double)base_lp[token]);
    t.same_top = argmax(lp, vocab) == argmax(base_lp, vocab);
    return t;
}

bool ppl_stats_add(ppl_stats *s, const ppl_token *t) {
    if (s->has_base && s->count == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 4096;
        float *k = realloc(s->kld, cap * sizeof *k);
        if (!k) return false;
        s->kld = k;
        float *d = realloc(s->dp, cap * sizeof *d);
        if (!d) return false;
        s->dp = d;
        s->cap = cap;
    }
    s->sum_nll += t->nll;
    s->sum_nll2 += t->nll * t->nll;
    if (s->has_base) {
        s->sum_nll_base += t->nll_base;
        s->sum_nll_base2 += t->nll_base * t->nll_base;
        s->sum_nll_nll_base += t->nll * t->nll_base;
        s->sum_kld += t->kld;
        s->sum_kld2 += t->kld * t->kld;
        double d2 = t->dp * t->dp;
        s->sum_dp += t->dp;
        s->sum_dp2 += d2;
        s->sum_dp4 += d2 * d2;
        s->n_same_top += t->same_top;
        s->kld[s->count] = (float)t->kld;
        s->dp[s->count] = (float)t->dp;
    }
    s->count++;
    return true;
}

void ppl_stats_free(ppl_stats *s) {
    free(s->kld);
    free(s->dp);
    s->kld = s->dp = NULL;
    s->cap = 0;
}

static ppl_value mean_unc(double sum, double sum2, size_t n) {
    ppl_value v = {.val = n ? sum / (double)n : 0.0};
    double var = n ? sum2 / (double)n - v.val * v.val : 0.0;
    v.unc = var > 0 && n > 1 ? sqrt(var / (double)(n - 1)) : 0.0;
    return v;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* The value at fraction q of the sorted v (n >= 1), interpolated linearly. */
static double percentile(const float *v, size_t n, double q) {
    if (q <= 0) return v[0];
    if (q >= 1) return v[n - 1];
    double p = q * (double)(n - 1);
    size_t i = (size_t)p;
    double f = p - (double)i;
    return (1 - f) * v[i] + f * v[i + 1 < n ? i + 1 : n - 1];
}

static double median(const float *v, size_t n) {
    return n % 2 ? v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + (double)v[n / 2]);
}

void ppl_stats_summarize(ppl_stats *s, ppl_summary *out) {
    memset(out, 0, sizeof *out);
    size_t n = s->count;
    out->count = n;
    ppl_value lq = mean_unc(s->sum_nll, s->sum_nll2, n);
    out->ppl = (ppl_value){exp(lq.val), exp(lq.val) * lq.unc};
    if (!s->has_base || n == 0) return;
    ppl_value lb = mean_unc(s->sum_nll_base, s->sum_nll_base2, n);
    out->ppl_base = (ppl_value){exp(lb.val), exp(lb.val) * lb.unc};
    double cov = n > 1 ? (s->sum_nll_nll_base / (double)n - lq.val * lb.val) / (double)(n - 1)
                       : 0.0;
    out->cor = lq.unc > 0 && lb.unc > 0 ? cov / (lq.unc * lb.unc) : 0.0;
    double lr_var = lq.unc * lq.unc + lb.unc * lb.unc - 2 * cov;
    out->log_ratio = (ppl_value){lq.val - lb.val, lr_var > 0 ? sqrt(lr_var) : 0.0};
    out->ratio = (ppl_value){exp(out->log_ratio.val), exp(out->log_ratio.val) * out->log_ratio.unc};
    double d_var = out->ppl.unc * out->ppl.unc + out->ppl_base.unc * out->ppl_base.unc -
                   2 * out->ppl.val * out->ppl_base.val * cov;
    out->diff = (ppl_value){out->ppl.val - out->ppl_base.val, d_var > 0 ? sqrt(d_var) : 0.0};
    out->kld = mean_unc(s->sum_kld, s->sum_kld2, n);
    out->dp = mean_unc(s->sum_dp, s->sum_dp2, n);
    ppl_value mse = mean_unc(s->sum_dp2, s->sum_dp4, n);
    double rms = sqrt(mse.val);
    out->dp_rms = (ppl_value){rms, rms > 0 ? 0.5 / rms * mse.unc : 0.0};
    double st = (double)s->n_same_top / (double)n;
    out->same_top = (ppl_value){st, n > 1 ? sqrt(st * (1 - st) / (double)(n - 1)) : 0.0};
    qsort(s->kld, n, sizeof *s->kld, cmp_float);
    qsort(s->dp, n, sizeof *s->dp, cmp_float);
    const float *k = s->kld, *d = s->dp;
    out->kld_max = k[n - 1], out->kld_min = k[0], out->kld_median = median(k, n);
    out->kld_p999 = percentile(k, n, 0.999), out->kld_p99 = percentile(k, n, 0.99);
    out->kld_p95 = percentile(k, n, 0.95), out->kld_p90 = percentile(k, n, 0.90);
    out->kld_p10 = percentile(k, n, 0.10), out->kld_p5 = percentile(k, n, 0.05);
    out->kld_p1 = percentile(k, n, 0.01), out->kld_p01 = percentile(k, n, 0.001);
    out->dp_max = d[n - 1], out->dp_min = d[0], out->dp_median = median(d, n);
    out->dp_p999 = percentile(d, n, 0.999), out->dp_p99 = percentile(d, n, 0.99);
    out->dp_p95 = percentile(d, n, 0.95), out->dp_p90 = percentile(d, n, 0.90);
    out->dp_p75 = percentile(d, n, 0.75), out->dp_p25 = percentile(d, n, 0.25);
    out->dp_p10 = percentile(d, n, 0.10), out->dp_p5 = percentile(d, n, 0.05);
    out->dp_p1 = percentile(d, n, 0.01), out->dp_p01 = percentile(d, n, 0.001);
}

void ppl_stats_print(FILE *f, const ppl_summary *r, bool has_base) {
    if (!has_base) {
        fprintf(f, "Final estimate: PPL = %.4f +/- %.5f\n", r->ppl.val, r->ppl.unc);
        return;
    }
    fprintf(f, "====== Perplexity statistics ======\n");
    fprintf(f, "Mean PPL(Q)                   : %10.6f ± %10.6f\n", r->ppl.val, r->ppl.unc);
    fprintf(f, "Mean PPL(base)                : %10.6f ± %10.6f\n", r->ppl_base.val,
            r->ppl_base.unc);
    fprintf(f, "Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * r->cor);
    fprintf(f, "Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", r->log_ratio.val,
            r->log_ratio.unc);
    fprintf(f, "Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", r->ratio.val, r->ratio.unc);
    fprintf(f, "Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n\n", r->diff.val, r->diff.unc);
    fprintf(f, "====== KL divergence statistics ======\n");
    fprintf(f, "Mean    KLD: %10.6f ± %10.6f\n", r->kld.val, r->kld.unc);
    fprintf(f, "Maximum KLD: %10.6f\n", r->kld_max);
    fprintf(f, "99.9%%   KLD: %10.6f\n", r->kld_p999);
    fprintf(f, "99.0%%   KLD: %10.6f\n", r->kld_p99);
    fprintf(f, "95.0%%   KLD: %10.6f\n", r->kld_p95);
    fprintf(f, "90.0%%   KLD: %10.6f\n", r->kld_p90);
    fprintf(f, "Median  KLD: %10.6f\n", r->kld_median);
    fprintf(f, "10.0%%   KLD: %10.6f\n", r->kld_p10);
    fprintf(f, " 5.0%%   KLD: %10.6f\n", r->kld_p5);
    fprintf(f, " 1.0%%   KLD: %10.6f\n", r->kld_p1);
    fprintf(f, " 0.1%%   KLD: %10.6f\n", r->kld_p01);
    fprintf(f, "Minimum KLD: %10.6f\n\n", r->kld_min);
    fprintf(f, "====== Token probability statistics ======\n");
    fprintf(f, "Mean    Δp: %6.3f ± %5.3f %%\n", 100.0 * r->dp.val, 100.0 * r->dp.unc);
    fprintf(f, "Maximum Δp: %6.3f%%\n", 100.0 * r->dp_max);
    fprintf(f, "99.9%%   Δp: %6.3f%%\n", 100.0 * r->dp_p999);
    fprintf(f, "99.0%%   Δp: %6.3f%%\n", 100.0 * r->dp_p99);
    fprintf(f, "95.0%%   Δp: %6.3f%%\n", 100.0 * r->dp_p95);
    fprintf(f, "90.0%%   Δp: %6.3f%%\n", 100.0 * r->dp_p90);
    fprintf(f, "75.0%%   Δp: %6.3f%%\n", 100.0 * r->dp_p75);
    fprintf(f, "Median  Δp: %6.3f%%\n", 100.0 * r->dp_median);
    fprintf(f, "25.0%%   Δp: %6.3f%%\n", 100.0 * r->dp_p25);
    fprintf(f, "10.0%%   Δp: %6.3f%%\n", 100.0 * r->dp_p10);
    fprintf(f, " 5.0%%   Δp: %6.3f%%\n", 100.0 * r->dp_p5);
    fprintf(f, " 1.0%%   Δp: %6.3f%%\n", 100.0 * r->dp_p1);
    fprintf(f, " 0.1%%   Δp: %6.3f%%\n", 100.0 * r->dp_p01);
    fprintf(f, "Minimum Δp: %6.3f%%\n", 100.0 * r->dp_min);
    fprintf(f, "RMS Δp    : %6.3f ± %5.3f %%\n", 100.0 * r->dp_rms.val, 100.0 * r->dp_rms.unc);
    fprintf(f, "Same top p: %6.3f ± %5.3f %%\n", 100.0 * r->same_top.val,
            100.0 * r->same_top.unc);
}
