/*
 * engine/sampler.c - penalties, greedy, temperature, top-k, top-p, min-p and the draw, each a
 * named step of pl_sampler_sample (the fast paths: greedy; no filter, one pass in id order;
 * a confident top id that holds the nucleus alone).
 *
 * Greedy takes the first maximum (lowest id on ties) so results are reproducible across
 * backends whose logits agree. For top-p without top-k the candidates are first cut to those
 * with probability >= (1 - top_p) / (vocab - 1): a token below that can never be inside the
 * nucleus (llama2.c's argument), and only the prefix of the candidates (in descending
 * probability, ties by id) that reaches the nucleus mass is sorted, by radix.
 *
 * Cost: the step loop samples every running sequence on the engine's thread, so the passes
 * over the vocabulary are vectorised loops (~45 us per sequence at 32000 ids, was ~200 us).
 * Reproducibility: softmax numerators come from the own exp below (within ~2 ulp of libm's
 * expf, the same bits on every x86-64) and logits are multiplied by 1/T instead of divided
 * by T, so a seeded draw can differ from the first version of this file when it falls within
 * float rounding of a boundary between two tokens; the distribution is unchanged.
 */
#include "engine/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"
#include "util/status.h"

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
    s->scratch = pl_calloc((size_t)vocab, sizeof(int32_t));
    s->seen = pl_calloc((size_t)vocab, 1);
    if (!s->probs || !s->idx || !s->counts || !s->scratch || !s->seen) {
        pl_sampler_deinit(s);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "sampler: cannot allocate scratch for %d ids", vocab);
    }
    return PL_OK;
}

void pl_sampler_deinit(pl_sampler *s) {
    pl_free(s->probs);
    pl_free(s->idx);
    pl_free(s->counts);
    pl_free(s->scratch);
    pl_free(s->seen);
    memset(s, 0, sizeof *s);
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

// ---------------------------------------------------------------------------------------------
// The passes over the whole vocabulary (32000 ids on Llama): written as independent lanes so
// that gcc -O3 vectorises them with the baseline x86-64 SSE2 (no intrinsics here: the engine
// builds on any target). Measured on stories110m logits, one sequence: the first version's
// serial compare loops, libm expf with a division and a double sum chain took ~0.2 ms; these
// take ~0.05 ms.

#define LANES 16

/* max over x (n >= 1). The lanes hold independent maxima (no loop-carried dependency). */
static float max_of(const float *x, int n) {
    float m[LANES];
    for (int l = 0; l < LANES; l++) m[l] = x[0];
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) m[l] = x[i + l] > m[l] ? x[i + l] : m[l];
    for (; i < n; i++) m[0] = x[i] > m[0] ? x[i] : m[0];
    float r = m[0];
    for (int l = 1; l < LANES; l++) r = m[l] > r ? m[l] : r;
    return r;
}

/* The first (lowest) id of the maximum: reproducible across backends whose logits agree. */
static int32_t argmax(const float *x, int n) {
    float m = max_of(x, n);
    for (int i = 0; i < n; i++)
        if (x[i] == m) return i;
    return 0; /* only NaN logits get here */
}

/* exp(x) for x <= 0, relative error ~2 ulp: x = n ln2 + r (n by the 1.5 * 2^23 rounding
 * trick, r in [-ln2/2, ln2/2] by a two-constant Cody-Waite reduction), a degree-7 Taylor
 * polynomial of r (truncation < 1e-8), 2^n built in the exponent bits. Below -87.3 (where
 * e^x is subnormal or 0, and a softmax weight below 1e-38 of the maximum's) it returns 0.
 * The range test compares the float's bits as integers (for x <= 0 a larger magnitude is a
 * larger signed value): a float comparison made gcc (trapping math) keep a branch and not
 * vectorise the loop. */
static inline float exp_neg(float x) {
    const float lo = -87.3f;
    int32_t xb, lb;
    memcpy(&xb, &x, sizeof xb);
    memcpy(&lb, &lo, sizeof lb);
    int32_t under = (xb < 0) & (xb > lb);
    int32_t cb = xb ^ ((xb ^ lb) & -under); /* lb when under: a select without a branch */
    float xc;
    memcpy(&xc, &cb, sizeof xc);
    float t = xc * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    bits &= (uint32_t)under - 1u; /* scale 0 below the range */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* e (n) = exp((x - mx) * inv_t); returns the sum of e, accumulated in double lanes. */
static inline __attribute__((always_inline)) double exp_pass_body(float *e, const float *x,
                                                                  int n, float mx,
                                                                  float inv_t) {
    int i = 0;
    for (; i < n; i++) e[i] = exp_neg((x[i] - mx) * inv_t);
    double a[LANES] = {0};
    for (i = 0; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) a[l] += (double)e[i + l];
    double sum = 0;
    for (; i < n; i++) sum += (double)e[i];
    for (int l = 0; l < LANES; l++) sum += a[l];
    return sum;
}

static double exp_pass_base(float *e, const float *x, int n, float mx, float inv_t) {
    return exp_pass_body(e, x, n, mx, inv_t);
}

/* The same loop compiled for wider vectors where the CPU has them (chosen per call: the
 * check is a load of libgcc's CPU model). Operations and their order are the same (ISO C
 * mode contracts no multiply-add into an FMA), so every version gives the same bits. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define SAMPLER_X86 1
static __attribute__((target("avx2"))) double exp_pass_avx2(float *e, const float *x, int n,
                                                            float mx, float inv_t) {
    return exp_pass_body(e, x, n, mx, inv_t);
}
static __attribute__((target("avx512f"))) double exp_pass_avx512(float *e, const float *x,
                                                                int n, float mx, float inv_t) {
    return exp_pass_body(e, x, n, mx, inv_t);
}
#endif

static double exp_pass(float *e, const float *x, int n, float mx, float inv_t) {
#ifdef SAMPLER_X86
    if (__builtin_cpu_supports("avx512f")) return exp_pass_avx512(e, x, n, mx, inv_t);
    if (__builtin_cpu_supports("avx2")) return exp_pass_avx2(e, x, n, mx, inv_t);
#endif
    return exp_pass_base(e, x, n, mx, inv_t);
}

/* The id where the running sum of e (in id order) first exceeds r, for the plain softmax
 * draw (no top-k, top-p or min-p: the benchmarks' setting). Blocks of 64 ids are summed in
 * independent lanes and skipped whole while the sum stays below r; only the crossing block
 * is walked id by id (a serial double sum over 32000 ids took ~40 us). If rounding lets r
 * pass the end, the last id with e > 0 is taken. */
static int32_t draw_in_id_order(const float *e, int n, double r) {
    enum { BLOCK = 64 };
    double acc = 0;
    int i0 = 0;
    for (; i0 + BLOCK <= n; i0 += BLOCK) {
        double a[LANES] = {0};
        for (int i = 0; i < BLOCK; i += LANES)
            for (int l = 0; l < LANES; l++) a[l] += (double)e[i0 + i + l];
        double bs = 0;
        for (int l = 0; l < LANES; l++) bs += a[l];
        if (acc + bs > r) break;
        acc += bs;
    }
    for (int i = i0; i < n; i++) {
        acc += e[i];
        if (r < acc) return i;
    }
    int last = n - 1;
    while (last > 0 && e[last] == 0.0f) last--;
    return last;
}

/* idx[0 .. returned) = the ids with e[i] >= floor, in id order (branchless compaction). */
static int select_at_least(const float *e, int n, float floor, int32_t *idx) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        idx[k] = i;
        k += e[i] >= floor;
    }
    return k;
}

static int cmp_prob_desc(const void *a, const void *b, void *probs) {
    float pa = ((const float *)probs)[*(const int32_t *)a];
    float pb = ((const float *)probs)[*(const int32_t *)b];
    if (pa != pb) return pa < pb ? 1 : -1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

/* Sorts idx (n ids, in increasing id order) by e descending, ties in id order: the order of
 * cmp_prob_desc, by a stable LSD radix sort on the bits of e (non-negative floats order as
 * their bits) in 3 passes of 11 bits, skipping a pass whose digit is the same for all.
 * tmp (n) is scratch. O(n): qsort_r took 3.3 ms for the ~30000 candidates of a flat 32000-id
 * distribution, this ~0.1 ms. */
static void sort_desc_radix(const float *e, int32_t *idx, int32_t *tmp, int n) {
    enum { BITS = 11, BUCKETS = 1 << BITS };
    int32_t *src = idx, *dst = tmp;
    for (int shift = 0; shift < 32; shift += BITS) {
        int32_t count[BUCKETS] = {0};
        for (int i = 0; i < n; i++) {
            uint32_t b;
            memcpy(&b, &e[src[i]], sizeof b);
            count[(~b >> shift) & (BUCKETS - 1)]++;
        }
        uint32_t b0;
        memcpy(&b0, &e[src[0]], sizeof b0);
        if (count[(~b0 >> shift) & (BUCKETS - 1)] == n) continue; /* one digit for all */
        int32_t pos = 0;
        for (int d = 0; d < BUCKETS; d++) {
            int32_t c = count[d];
            count[d] = pos;
            pos += c;
        }
        for (int i = 0; i < n; i++) {
            uint32_t b;
            memcpy(&b, &e[src[i]], sizeof b);
            dst[count[(~b >> shift) & (BUCKETS - 1)]++] = src[i];
        }
        int32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != idx) memcpy(idx, src, (size_t)n * sizeof *idx);
}

/* The nucleus needs the candidates in descending order only until their sum reaches the
 * target, usually a small prefix (the dummy models put ~0.95 of the mass on one id and
 * spread the rest so thinly that all 32000 ids pass the candidate cut). One pass sums e per
 * bucket of the top 10 bits of the order key (sign, exponent, one mantissa bit); the
 * buckets down to the one where the sum reaches target, and one more (so that summing in
 * another order cannot move the crossing past them), hold a prefix of the full order. Keeps
 * those ids (in id order, as sort_desc_radix expects) and sorts them: the same prefix, in
 * the same order, as sorting all n. Returns how many. */
static int nucleus_prefix(const float *e, int32_t *idx, int32_t *tmp, int n, double target) {
    enum { HB = 10, NB = 1 << HB };
    /* 4 interleaved histograms: consecutive ids often fall in one bucket, and one array
     * would chain every add on the previous one's latency */
    double mass[4][NB];
    memset(mass, 0, sizeof mass);
    int i = 0;
    for (; i + 4 <= n; i += 4)
        for (int h = 0; h < 4; h++) {
            uint32_t b;
            memcpy(&b, &e[idx[i + h]], sizeof b);
            mass[h][~b >> (32 - HB)] += e[idx[i + h]];
        }
    for (; i < n; i++) {
        uint32_t b;
        memcpy(&b, &e[idx[i]], sizeof b);
        mass[0][~b >> (32 - HB)] += e[idx[i]];
    }
    uint32_t last = NB - 1;
    double acc = 0;
    for (uint32_t d = 0; d < NB; d++) {
        acc += (mass[0][d] + mass[1][d]) + (mass[2][d] + mass[3][d]);
        if (acc >= target) {
            last = d + 1 < NB ? d + 1 : d;
            break;
        }
    }
    int m = 0;
    for (i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &e[idx[i]], sizeof b);
        idx[m] = idx[i];
        m += (~b >> (32 - HB)) <= last;
    }
    if (m > 1) sort_desc_radix(e, idx, tmp, m);
    return m;
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

// ---------------------------------------------------------------------------------------------
// The filters. Each works on the candidates: ids into s->probs, which hold softmax numerators
// e = exp((l - max) / T) (the maximum's is exactly 1), with z their sum over the vocabulary.
// Probabilities are e / z, but no filter needs them normalised: each compares numerators with
// each other or with a fraction of a sum, so thresholds are scaled by z instead (saving a pass
// over the vocabulary).

typedef struct cands {
    int32_t *idx;  /* (n) candidate ids: s->idx */
    int n;
    double mass;   /* sum of e over what the nucleus is measured against */
    bool sorted;   /* idx is in descending e (ties by id); else in id order */
} cands;

/* top-k: the k most likely, by a heap, then sorted; their mass is the nucleus' whole. */
static void filter_top_k(pl_sampler *s, int k, cands *c) {
    const float *e = s->probs;
    c->n = top_k_ids(e, s->vocab, k, c->idx);
    c->mass = 0;
    for (int i = 0; i < c->n; i++) c->mass += e[c->idx[i]];
    if (c->n > 1) qsort_r(c->idx, (size_t)c->n, sizeof(int32_t), cmp_prob_desc, s->probs);
    c->sorted = true;
}

/* top-p where the top id alone (e = 1: the first id of the candidates' order) holds the
 * nucleus' mass: the common case of a confident model (and of the dummy models), found
 * without a pass over the candidates. min-p keeps the top id. */
static bool filter_confident_top(pl_sampler *s, float top_p, double z, cands *c) {
    if (!(top_p < 1.0f && (double)top_p * z <= 1.0)) return false;
    const float *e = s->probs;
    int top = 0;
    while (top < s->vocab - 1 && e[top] != 1.0f) top++;
    c->idx[0] = top;
    c->n = 1;
    c->mass = z;
    c->sorted = true;
    return true;
}

/* Without top-k: min-p is relative to the top probability (e = 1), which no other filter
 * removes, so it prunes first; and tokens below (1 - top_p) / (V - 1) of the mass are never
 * in the nucleus (llama2.c's argument), so they go too. Leaves the survivors in id order. */
static void filter_floor(pl_sampler *s, const pl_sampling_params *p, double z, cands *c) {
    float cut = p->min_p;
    int V = s->vocab;
    if (p->top_p < 1.0f && V > 1) {
        float nucleus_cut = (float)((1.0 - p->top_p) / (double)(V - 1) * z);
        if (nucleus_cut > cut) cut = nucleus_cut;
    }
    c->n = select_at_least(s->probs, V, cut, c->idx);
    c->mass = z;
    c->sorted = false;
}

/* The nucleus: the most likely candidates until their sum reaches top_p of the mass. Only
 * the prefix it needs is sorted (nucleus_prefix). */
static void filter_top_p(pl_sampler *s, float top_p, cands *c) {
    const float *e = s->probs;
    double target = top_p * c->mass;
    if (!c->sorted && c->n > 1) {
        c->n = nucleus_prefix(e, c->idx, s->scratch, c->n, target);
        c->sorted = true;
    }
    double acc = 0;
    for (int i = 0; i < c->n; i++) {
        acc += e[c->idx[i]];
        if (acc >= target) {
            c->n = i + 1;
            return;
        }
    }
}

/* min-p after top-k (without top-k, filter_floor already applied it). */
static void filter_min_p(pl_sampler *s, float min_p, cands *c) {
    const float *e = s->probs;
    int kept = 0;
    for (int i = 0; i < c->n; i++)
        if (e[c->idx[i]] >= min_p) c->idx[kept++] = c->idx[i];
    c->n = kept;
}

/* One draw among the candidates, in proportion to e. */
static int32_t draw_candidates(const pl_sampler *s, const cands *c, pl_rng *rng) {
    const float *e = s->probs;
    double total = 0;
    for (int i = 0; i < c->n; i++) total += e[c->idx[i]];
    double r = pl_rng_uniform(rng) * total, acc = 0;
    for (int i = 0; i < c->n; i++) {
        acc += e[c->idx[i]];
        if (r < acc) return c->idx[i];
    }
    return c->idx[c->n - 1];
}

int32_t pl_sampler_sample(pl_sampler *s, float *logits, const pl_sampling_params *p,
                          const int32_t *tokens, int n_prompt, int n_output, pl_rng *rng) {
    int V = s->vocab;
    apply_penalties(s, logits, p, tokens, n_prompt, n_output);
    if (p->temperature == 0.0f) return argmax(logits, V);

    float mx = max_of(logits, V);
    double z = exp_pass(s->probs, logits, V, mx, 1.0f / p->temperature);
    if (p->top_k == 0 && p->top_p >= 1.0f && p->min_p == 0.0f) /* no filter: one pass */
        return draw_in_id_order(s->probs, V, pl_rng_uniform(rng) * z);

    cands c = {.idx = s->idx};
    if (p->top_k > 0) filter_top_k(s, p->top_k, &c);
    else if (!filter_confident_top(s, p->top_p, z, &c)) filter_floor(s, p, z, &c);
    if (p->top_p < 1.0f) filter_top_p(s, p->top_p, &c);
    if (p->top_k > 0 && p->min_p > 0.0f) filter_min_p(s, p->min_p, &c);
    if (c.n == 0) return argmax(logits, V);
    return draw_candidates(s, &c, rng);
}

size_t pl_sampler_mask_row(float *logits, const uint64_t *allowed, int vocab) {
    size_t left = 0;
    for (int w0 = 0; w0 < vocab; w0 += 64) {
        uint64_t m = allowed[w0 / 64];
        int n = vocab - w0 < 64 ? vocab - w0 : 64;
        float *x = logits + w0;
        if (m == ~0ull && n == 64) {
            for (int j = 0; j < 64; j++) left += x[j] != -INFINITY;
            continue;
        }
        for (int j = 0; j < n; j++) {
            if ((m >> j) & 1) left += x[j] != -INFINITY;
            else x[j] = -INFINITY;
        }
    }
    return left;
}
