/*
 * tools/ppl_stats.h - the figures of `pagellm perplexity`: per scored token, the negative
 * log-likelihood of the true next token and, against a base model's distribution, the KL
 * divergence, the change in the true token's probability and whether the most likely token
 * is the same; over the text, llama-perplexity's statistics with their uncertainties, printed
 * in its wording so the lines can be compared.
 *
 * Everything is accumulated in double in token order, so the figures do not depend on how the
 * tokens were spread over threads.
 */
#ifndef PL_TOOLS_PPL_STATS_H
#define PL_TOOLS_PPL_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One scored token. */
typedef struct ppl_token {
    double nll;      /* -log p_Q(token) */
    double nll_base; /* -log p_base(token) (with a base) */
    double kld;      /* sum_t p_base(t) (log p_base(t) - log p_Q(t)) */
    double dp;       /* p_Q(token) - p_base(token) */
    bool same_top;   /* argmax of Q = argmax of base (lowest id on ties) */
} ppl_token;

/* The log-softmax of logits (n) into out (n, may alias logits), in double internally. */
void ppl_log_softmax(const float *logits, int n, float *out);

/* Token `token` scored from log-probabilities lp (vocab) of the model under test and, when
 * base_lp is not NULL, of the base. */
ppl_token ppl_score(const float *lp, const float *base_lp, int vocab, int32_t token);

typedef struct ppl_stats {
    bool has_base;
    size_t count, n_same_top;
    double sum_nll, sum_nll2, sum_nll_base, sum_nll_base2, sum_nll_nll_base;
    double sum_kld, sum_kld2, sum_dp, sum_dp2, sum_dp4;
    float *kld, *dp; /* (count) per token, for percentiles (with a base) */
    size_t cap;
} ppl_stats;

/* false: out of memory. */
bool ppl_stats_add(ppl_stats *s, const ppl_token *t);
void ppl_stats_free(ppl_stats *s);

/* A sum's mean and the standard error of that mean: (mean, sqrt(var / (count - 1))). */
typedef struct ppl_value {
    double val, unc;
} ppl_value;

/* The figures the statistics print (and the tests compare). */
typedef struct ppl_summary {
    size_t count;
    ppl_value ppl;       /* exp(mean nll) with its standard error */
    ppl_value ppl_base, log_ratio, ratio, diff;
    double cor;          /* correlation of the two models' nll */
    ppl_value kld;       /* mean KL divergence */
    double kld_max, kld_p99, kld_p999, kld_p95, kld_p90, kld_median, kld_p10, kld_p5, kld_p1,
        kld_p01, kld_min;
    ppl_value dp;        /* mean change of the true token's probability */
    double dp_max, dp_p999, dp_p99, dp_p95, dp_p90, dp_p75, dp_median, dp_p25, dp_p10, dp_p5,
        dp_p1, dp_p01, dp_min;
    ppl_value dp_rms;    /* RMS of that change */
    ppl_value same_top;  /* fraction of tokens whose most likely token is the base's */
} ppl_summary;

/* Computes the summary (sorts s's per-token values). */
void ppl_stats_summarize(ppl_stats *s, ppl_summary *out);

/* llama-perplexity's lines: without a base "Final estimate: PPL = ... +/- ..."; with one the
 * perplexity, KL divergence and token probability sections. */
void ppl_stats_print(FILE *f, const ppl_summary *r, bool has_base);

#endif
