/*
 * tests/kernels/test_sampler_paths.c - the sampler's fast paths (engine/sampler.c: the
 * vectorised exp and max, the radix sort of the nucleus prefix, the branchless candidate cut)
 * against a naive sampler written here from the definitions: softmax in double with libm exp,
 * every id sorted by qsort (descending probability, ties by id), the nucleus, min-p, and the
 * same draw from the same random stream.
 *
 * Both draw u from the same pl_rng stream and walk their kept ids in the same order, so they
 * pick the same token unless float rounding decides: u within rounding of a boundary between
 * two tokens, or (the flat shape, where 32000 probabilities differ by ~1%) two ids whose
 * probabilities are equal in float but not in double, ranked differently. Measured: 3 of 540
 * draws at 32000 ids, all in the flat shape; the test allows 1 in 100, and checks that every
 * top-p pick lies in the naive nucleus widened by 1e-5 of the mass. It lives in the kernels
 * suite as the test of the speed work; tests/unit/test_sampler.c holds the behaviour tests.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"
#include "test_support.h"

typedef struct naive_ctx {
    const double *p;
} naive_ctx;

static int cmp_desc(const void *a, const void *b, void *ctx) {
    const double *p = ((naive_ctx *)ctx)->p;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (p[x] != p[y]) return p[x] < p[y] ? 1 : -1;
    return x - y;
}

/* The naive sampler (no penalties); returns the token. p (V): the probabilities, left for the
 * caller; idx (V) scratch. *out_n_ok: how many ids, in descending order, start below
 * top_p * mass + 1e-5 of cumulative mass (a top-p pick of the fast sampler must rank among
 * them). */
static int32_t naive_sample(const float *logits, int V, const pl_sampling_params *sp, double *p,
                            int32_t *idx, pl_rng *rng, int *out_n_ok) {
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int i = 0; i < V; i++) z += p[i] = exp(((double)logits[i] - mx) / sp->temperature);
    for (int i = 0; i < V; i++) p[i] /= z;
    for (int i = 0; i < V; i++) idx[i] = i;
    naive_ctx c = {p};
    /* with neither top-k nor top-p the sampler draws over the ids in id order */
    if (sp->top_k > 0 || sp->top_p < 1.0f) qsort_r(idx, (size_t)V, sizeof *idx, cmp_desc, &c);
    int n = sp->top_k > 0 && sp->top_k < V ? sp->top_k : V;
    double mass = 0;
    for (int i = 0; i < n; i++) mass += p[idx[i]];
    int keep = n, n_ok = n;
    if (sp->top_p < 1.0f) {
        double acc = 0;
        keep = n_ok = 0;
        for (int i = 0; i < n; i++) {
            if (acc < sp->top_p * mass + 1e-5) n_ok = i + 1;
            acc += p[idx[i]];
            if (acc >= sp->top_p * mass && keep == 0) keep = i + 1;
        }
        if (keep == 0) keep = n;
    }
    double pmax = 0, total = 0;
    for (int i = 0; i < V; i++) pmax = p[i] > pmax ? p[i] : pmax;
    double floor_p = sp->min_p * pmax;
    int kept = 0;
    for (int i = 0; i < keep; i++)
        if (p[idx[i]] >= floor_p) {
            idx[kept++] = idx[i];
            total += p[idx[i]];
        }
    *out_n_ok = n_ok;
    double r = pl_rng_uniform(rng) * total, acc = 0;
    for (int i = 0; i < kept; i++) {
        acc += p[idx[i]];
        if (r < acc) return idx[i];
    }
    return idx[kept - 1];
}

/* Logit shapes: flat, normal-ish at two widths, one dominant id over a flat tail (the dummy
 * models' shape), and many exact ties. */
static void make_logits(float *l, int V, int shape, pl_test_rng *r) {
    for (int i = 0; i < V; i++) {
        float u = pl_test_rng_float(r);
        switch (shape) {
        case 0: l[i] = 0.01f * u; break;
        case 1: l[i] = 1.0f * (u + pl_test_rng_float(r) + pl_test_rng_float(r)); break;
        case 2: l[i] = 4.0f * (u + pl_test_rng_float(r) + pl_test_rng_float(r)); break;
        case 3: l[i] = 0.3f * u; break;
        default: l[i] = (float)(pl_test_rng_below(r, 4)); break;
        }
    }
    if (shape == 3) l[pl_test_rng_below(r, (uint32_t)V)] += 14.0f;
}

static void compare(int V, int draws) {
    pl_sampler s;
    cr_assert_eq(pl_sampler_init(&s, V), PL_OK);
    float *logits = malloc((size_t)V * sizeof *logits), *tmp = malloc((size_t)V * sizeof *tmp);
    double *p = malloc((size_t)V * sizeof *p);
    int32_t *idx = malloc((size_t)V * sizeof *idx);
    pl_test_rng tr;
    pl_test_rng_seed(&tr, 77 + (uint64_t)V);
    static const float TOP_P[] = {0.9f, 0.5f, 1.0f, 0.99f};
    static const float TEMP[] = {1.0f, 0.7f, 1.5f};
    int disagree = 0, total = 0;
    for (int shape = 0; shape < 5; shape++)
        for (int pi = 0; pi < 4; pi++)
            for (int ti = 0; ti < 3; ti++)
                for (int variant = 0; variant < 3; variant++) {
                    make_logits(logits, V, shape, &tr);
                    pl_sampling_params sp;
                    pl_sampling_params_default(&sp);
                    sp.top_p = TOP_P[pi];
                    sp.temperature = TEMP[ti];
                    if (variant == 1) sp.min_p = 0.05f;
                    if (variant == 2) sp.top_k = V > 50 ? 40 : 3;
                    pl_rng a, b;
                    pl_rng_seed(&a, 1000 + (uint64_t)total);
                    pl_rng_seed(&b, 1000 + (uint64_t)total);
                    for (int d = 0; d < draws; d++, total++) {
                        memcpy(tmp, logits, (size_t)V * sizeof *tmp);
                        int32_t got = pl_sampler_sample(&s, tmp, &sp, NULL, 0, 0, &a);
                        int n_ok;
                        int32_t want = naive_sample(logits, V, &sp, p, idx, &b, &n_ok);
                        disagree += got != want;
                        cr_assert(got >= 0 && got < V);
                        if (sp.top_k == 0 && sp.min_p == 0.0f) {
                            /* got's rank in the double order must be below n_ok */
                            int rank = 0;
                            for (int i = 0; i < V; i++)
                                rank += p[i] > p[got] || (p[i] == p[got] && i < got);
                            cr_assert(rank < n_ok, "shape %d top_p %g T %g: id %d rank %d of %d",
                                      shape, sp.top_p, sp.temperature, got, rank, n_ok);
                        }
                    }
                }
    cr_assert(disagree * 100 <= total, "V %d: %d of %d draws differ from the naive sampler", V,
              disagree, total);
    free(logits), free(tmp), free(p), free(idx);
    pl_sampler_deinit(&s);
}

Test(sampler_paths, small_vocab_matches_naive) {
    compare(37, 40);
    PL_ASSERT_NO_LEAKS();
}

Test(sampler_paths, llama_vocab_matches_naive) {
    compare(32000, 2);
    PL_ASSERT_NO_LEAKS();
}

/* Greedy: the first maximum, also when the maximum repeats and sits past a 16-lane block. */
Test(sampler_paths, greedy_first_maximum_any_position) {
    pl_sampler s;
    int V = 1000;
    cr_assert_eq(pl_sampler_init(&s, V), PL_OK);
    float *l = calloc((size_t)V, sizeof *l);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    pl_rng rng;
    pl_rng_seed(&rng, 1);
    for (int at = 0; at < V; at += 37) {
        for (int i = 0; i < V; i++) l[i] = -1.0f;
        l[at] = 3.0f;
        if (at + 5 < V) l[at + 5] = 3.0f;
        cr_assert_eq(pl_sampler_sample(&s, l, &sp, NULL, 0, 0, &rng), at);
    }
    free(l);
    pl_sampler_deinit(&s);
    PL_ASSERT_NO_LEAKS();
}
