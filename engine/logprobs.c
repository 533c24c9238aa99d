/*
 * engine/logprobs.c - log-probabilities of tokens, from the model's raw distribution (the
 * log-softmax of the logits before penalties, temperature and the sampling filters, as vLLM
 * returns by default), and the growing lists a sample keeps them in.
 *
 * Cost: one pass for the maximum, one of exp for the normaliser, one for the rank and one of
 * a k-entry heap for the alternatives: a few passes over the vocabulary per token, paid only
 * by requests that ask.
 */
#include <math.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "util/alloc.h"

/* "a is worse than b": less likely, ties to the higher id (the top list prefers low ids). */
static bool worse(const float *x, int32_t a, int32_t b) {
    return x[a] < x[b] || (x[a] == x[b] && a > b);
}

static void sift_down(const float *x, int32_t *h, int n, int j) {
    for (;;) {
        int c = 2 * j + 1;
        if (c >= n) return;
        if (c + 1 < n && worse(x, h[c + 1], h[c])) c++;
        if (!worse(x, h[c], h[j])) return;
        int32_t t = h[c];
        h[c] = h[j];
        h[j] = t;
        j = c;
    }
}

void pl_logprobs_compute(const float *raw, int vocab, int32_t token, int k,
                         pl_token_logprobs *out, pl_logprob *tops) {
    float mx = -INFINITY;
    for (int i = 0; i < vocab; i++) mx = raw[i] > mx ? raw[i] : mx;
    double sum = 0;
    for (int i = 0; i < vocab; i++) sum += (double)expf(raw[i] - mx);
    double lse = (double)mx + log(sum);
    int rank = 1;
    for (int i = 0; i < vocab; i++) rank += raw[i] > raw[token];
    *out = (pl_token_logprobs){.token = token, .logprob = (float)((double)raw[token] - lse),
                               .rank = rank};
    if (k > vocab) k = vocab;
    if (k <= 0) return;
    /* the k most likely by a min-heap (its root is the worst kept), then sorted */
    int32_t heap[PL_MAX_LOGPROBS];
    for (int i = 0; i < k; i++) heap[i] = i;
    for (int j = k / 2 - 1; j >= 0; j--) sift_down(raw, heap, k, j);
    for (int i = k; i < vocab; i++)
        if (worse(raw, heap[0], i)) {
            heap[0] = i;
            sift_down(raw, heap, k, 0);
        }
    for (int n = k; n > 0; n--) { /* pop the worst to the back: best first */
        int32_t w = heap[0];
        heap[0] = heap[n - 1];
        sift_down(raw, heap, n - 1, 0);
        tops[n - 1] = (pl_logprob){.token = w, .logprob = (float)((double)raw[w] - lse)};
    }
    out->n_top = k;
}

pl_status pl_logprob_list_reserve(pl_logprob_list *l, size_t n) {
    if (n <= l->cap) return PL_OK;
    size_t cap = l->cap ? l->cap : 16;
    while (cap < n) cap *= 2;
    pl_token_logprobs *e = pl_reallocarray(l->entries, cap, sizeof *e);
    if (!e) return pl_fail(PL_ERR_OUT_OF_MEMORY, "logprobs of %zu tokens", n);
    l->entries = e;
    if (l->k > 0) {
        pl_logprob *t = pl_reallocarray(l->tops, cap * (size_t)l->k, sizeof *t);
        if (!t) return pl_fail(PL_ERR_OUT_OF_MEMORY, "logprobs of %zu tokens", n);
        l->tops = t;
        for (size_t i = 0; i < l->n; i++) /* the tops moved: point at the new copy */
            if (e[i].n_top) e[i].top = t + i * (size_t)l->k;
    }
    l->cap = cap;
    return PL_OK;
}

pl_status pl_logprob_list_push(pl_logprob_list *l, const pl_token_logprobs *e,
                               const pl_logprob *tops) {
    PL_TRY(pl_logprob_list_reserve(l, l->n + 1));
    pl_token_logprobs *d = &l->entries[l->n];
    *d = *e;
    d->top = NULL;
    if (e->n_top > 0) {
        pl_logprob *t = l->tops + l->n * (size_t)l->k;
        memcpy(t, tops, (size_t)e->n_top * sizeof *t);
        d->top = t;
    }
    l->n++;
    return PL_OK;
}

void pl_logprob_list_free(pl_logprob_list *l) {
    pl_free(l->entries);
    pl_free(l->tops);
    l->entries = NULL;
    l->tops = NULL;
    l->n = l->cap = 0;
}
