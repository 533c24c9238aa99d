/*
 * engine/sampler.c - penalties, greedy, temperature, top-k, top-p, min-p and the draw.
 *
 * Greedy takes the first maximum (lowest id on ties) so results are reproducible across
 * backends whose logits agree. For top-p without top-k the candidates are first cut to those
 * with probability >= (1 - top_p) / (vocab - 1): a token below that can never be inside the
 * nucleus (llama2.c's argument), which avoids sorting the whole vocabulary.
 */
#include "engine/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"
#include "util/status.h"

void pl_sampling_params_default(pl_sampling_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->max_tokens = 100;
    p->temperature = 1.0f;
    p->top_p = 0.9f;
    p->repetition_penalty = 1.0f;
    p->n = 1;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void pl_rng_seed(pl_rng *r, uint64_t seed) {
    r->s[0] = splitmix64(&seed);
    r->s[1] = splitmix64(&seed);
}

double pl_rng_uniform(pl_rng *r) {
    /* xoroshiro128+ */
    uint64_t s0 = r->s[0], s1 = r->s[1], out = s0 + s1;
    s1 ^= s0;
    r->s[0] = ((s0 << 24) | (s0 >> 40)) ^ s1 ^ (s1 << 16);
    r->s[1] = (s1 << 37) | (s1 >> 27);
    return (double)(out >> 11) * (1.0 / 9007199254740992.0);
}

pl_status pl_sampler_init(pl_sampler *s, int vocab) {
    memset(s, 0, sizeof *s);
    s->vocab = vocab;
    s->probs = pl_calloc((size_t)vocab, sizeof(float));
    s->idx = pl_calloc((size_t)vocab, sizeof(int32_t));
    s->counts = pl_calloc((size_t)vocab, sizeof(int32_t));
    s->seen = pl_calloc((size_t)vocab, 1);
    if (!s->probs || !s->idx || !s->counts || !s->seen) {
        pl_sampler_deinit(s);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "sampler: cannot allocate scratch for %d ids", vocab);
    }
    return PL_OK;
}

void pl_sampler_deinit(pl_sampler *s) {
    pl_free(s->probs);
    pl_free(s->idx);
    pl_free(s->counts);
    pl_free(s->seen);
    memset(s, 0, sizeof *s);
}

static pl_status bad(const char *field, double v, const char *range) {
    return pl_fail(PL_ERR_INVALID_ARGUMENT, "sampling.%s = %g: must be %s", field, v, range);
}

pl_status pl_sampling_params_validate(const pl_sampling_params *p, int vocab) {
    if (p->max_tokens < 1) return bad("max_tokens", p->max_tokens, ">= 1");
    if (p->min_tokens < 0 || p->min_tokens > p->max_tokens)
        return bad("min_tokens", p->min_tokens, "in [0, max_tokens]");
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return bad("temperature", p->temperature, "finite and >= 0");
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) return bad("top_p", p->top_p, "in (0, 1]");
    if (p->top_k < 0) return bad("top_k", p->top_k, ">= 0 (0 = off)");
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) return bad("min_p", p->min_p, "in [0, 1]");
    if (!(p->repetition_penalty > 0.0f) || !isfinite(p->repetition_penalty))
        return bad("repetition_penalty", p->repetition_penalty, "finite and > 0");
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return bad("presence_penalty", p->presence_penalty, "in [-2, 2]");
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return bad("frequency_penalty", p->frequency_penalty, "in [-2, 2]");
    if (p->n_stop_ids < 0 || p->n_stop_ids > PL_MAX_STOP_IDS)
        return bad("n_stop_ids", p->n_stop_ids, "in [0, " "16" "]");
    for (int i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] < 0 || p->stop_ids[i] >= vocab)
            return pl_fail(PL_ERR_INVALID_ARGUMENT,
                           "sampling.stop_ids[%d] = %d: outside the vocabulary [0, %d)", i,
                           (int)p->stop_ids[i], vocab);
    if (p->n_stop < 0 || p->n_stop > PL_MAX_STOP_STRINGS)
        return bad("n_stop", p->n_stop, "in [0, 8]");
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "sampling.stop[%d] is NULL or empty", i);
    if (p->n < 1 || p->n > 64) return bad("n", p->n, "in [1, 64]");
    return PL_OK;
}

static void apply_penalties(pl_sampler *s, float *logits, const pl_sampling_params *p,
                            const int32_t *tokens, int n_prompt, int n_output) {
    bool rep = p->repetition_penalty != 1.0f;
    bool pres = p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    if (!rep && !pres) return;
    int n = n_prompt + n_output;
    for (int i = 0; i < n; i++) {
        int32_t t = tokens[i];
        s->seen[t] = 1;
        if (i >= n_prompt) s->counts[t]++;
    }
    for (int i = 0; i < n; i++) {
        int32_t t = tokens[i];
        if (!s->seen[t]) continue; /* already handled (seen is cleared below) */
        if (rep) logits[t] = logits[t] > 0 ? logits[t] / p->repetition_penalty
                                           : logits[t] * p->repetition_penalty;
        if (s->counts[t] > 0)
            logits[t] -= p->presence_penalty + p->frequency_penalty * (float)s->counts[t];
        s->seen[t] = 0;
        s->counts[t] = 0;
    }
}

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int cmp_prob_desc(const void *a, const void *b, void *probs) {
    float pa = ((const float *)probs)[*(const int32_t *)a];
    float pb = ((const float *)probs)[*(const int32_t *)b];
    if (pa != pb) return pa < pb ? 1 : -1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

/* Heap order for top-k: a is "worse" than b when less probable (ties: the higher id). */
static bool worse(const float *probs, int32_t a, int32_t b) {
    return probs[a] < probs[b] || (probs[a] == probs[b] && a > b);
}

static void sift_down(const float *probs, int32_t *h, int n, int j) {
    for (;;) {
        int c = 2 * j + 1;
        if (c >= n) return;
        if (c + 1 < n && worse(probs, h[c + 1], h[c])) c++;
        if (!worse(probs, h[c], h[j])) return;
        int32_t t = h[c];
        h[c] = h[j];
        h[j] = t;
        j = c;
    }
}

/* Puts the k most probable ids in idx[0..k) (unordered) with a min-heap: O(V log k). */
static int top_k_ids(const float *probs, int V, int k, int32_t *idx) {
    if (k > V) k = V;
    for (int i = 0; i < k; i++) idx[i] = i;
    for (int j = k / 2 - 1; j >= 0; j--) sift_down(probs, idx, k, j);
    for (int i = k; i < V; i++)
        if (worse(probs, idx[0], i)) {
            idx[0] = i;
            sift_down(probs, idx, k, 0);
        }
    return k;
}

int32_t pl_sampler_sample(pl_sampler *s, float *logits, const pl_sampling_params *p,
                  const int32_t *tokens, int n_prompt, int n_output, pl_rng *rng) {
    int V = s->vocab;
    apply_penalties(s, logits, p, tokens, n_prompt, n_output);
    if (p->temperature == 0.0f) return argmax(logits, V);

    /* softmax(logits / T) into probs */
    float mx = logits[argmax(logits, V)];
    double sum = 0;
    for (int i = 0; i < V; i++) {
        float e = expf((logits[i] - mx) / p->temperature);
        s->probs[i] = e;
        sum += e;
    }
    float inv = (float)(1.0 / sum), pmax = 0;
    for (int i = 0; i < V; i++) {
        s->probs[i] *= inv;
        if (s->probs[i] > pmax) pmax = s->probs[i];
    }

    /* Candidates. min-p is relative to the top probability, which no other filter removes, so
     * it can prune first; with no top-k, tokens below (1 - top_p) / (V - 1) are never in the
     * nucleus and are pruned too, so only the survivors are sorted. */
    float floor_p = p->min_p * pmax;
    int n;
    double mass;
    if (p->top_k > 0) {
        n = top_k_ids(s->probs, V, p->top_k, s->idx);
        mass = 0;
        for (int i = 0; i < n; i++) mass += s->probs[s->idx[i]];
    } else {
        if (p->top_p < 1.0f && V > 1) {
            float cut = (1.0f - p->top_p) / (float)(V - 1);
            if (cut > floor_p) floor_p = cut;
        }
        n = 0;
        for (int i = 0; i < V; i++)
            if (s->probs[i] >= floor_p) s->idx[n++] = i;
        mass = 1.0;
    }
    if (p->top_k > 0 || p->top_p < 1.0f)
        qsort_r(s->idx, (size_t)n, sizeof(int32_t), cmp_prob_desc, s->probs);
    if (p->top_p < 1.0f) { /* the nucleus of the (top-k) distribution */
        double target = p->top_p * mass, acc = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            acc += s->probs[s->idx[i]];
            if (acc >= target) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    int kept = 0; /* min-p (a no-op when it already pruned the candidates above) */
    double total = 0;
    for (int i = 0; i < n; i++)
        if (s->probs[s->idx[i]] >= floor_p || p->top_k == 0) {
            s->idx[kept++] = s->idx[i];
            total += s->probs[s->idx[i]];
        }
    if (kept == 0) return argmax(logits, V);
    double r = pl_rng_uniform(rng) * total, acc = 0;
    for (int i = 0; i < kept; i++) {
        acc += s->probs[s->idx[i]];
        if (r < acc) return s->idx[i];
    }
    return s->idx[kept - 1];
}
