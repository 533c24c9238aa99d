/*
 * tests/unit/test_sampler.c - the sampler: greedy, temperature, top-k, top-p, min-p,
 * penalties, seeded reproducibility and parameter validation. Expected distributions are
 * computed here from the definitions, not by the sampler.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "engine/sampler.h"
#include "test_support.h"

static pl_sampling_params params(float t) {
    pl_sampling_params p;
    pl_sampling_params_default(&p);
    p.temperature = t;
    p.top_p = 1.0f;
    return p;
}

/* Draws n samples from logits (copied each time) and returns the frequency of each id. */
static void frequencies(pl_sampler *s, const float *logits, int V, const pl_sampling_params *p,
                        int n, double *freq) {
    pl_rng rng;
    pl_rng_seed(&rng, 1234);
    float tmp[16];
    memset(freq, 0, (size_t)V * sizeof *freq);
    int32_t none[1] = {0};
    for (int i = 0; i < n; i++) {
        memcpy(tmp, logits, (size_t)V * sizeof(float));
        int32_t t = pl_sampler_sample(s, tmp, p, none, 0, 0, &rng);
        cr_assert(t >= 0 && t < V);
        freq[t] += 1.0 / n;
    }
}

Test(sampler, greedy_takes_the_first_maximum) {
    pl_sampler s;
    cr_assert_eq(pl_sampler_init(&s, 6), PL_OK);
    float logits[6] = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f, 0.0f};
    pl_sampling_params p = params(0.0f);
    pl_rng rng;
    pl_rng_seed(&rng, 1);
    cr_assert_eq(pl_sampler_sample(&s, logits, &p, NULL, 0, 0, &rng), 1);
    pl_sampler_deinit(&s);
}

Test(sampler, temperature_follows_the_softmax) {
    pl_sampler s;
    cr_assert_eq(pl_sampler_init(&s, 4), PL_OK);
    float logits[4] = {1.0f, 0.0f, -0.5f, 2.0f};
    for (int ti = 0; ti < 2; ti++) {
        float T = ti ? 2.0f : 0.7f;
        pl_sampling_params p = params(T);
        double freq[4], want[4], z = 0;
        for (int i = 0; i < 4; i++) z += exp(logits[i] / T);
        for (int i = 0; i < 4; i++) want[i] = exp(logits[i] / T) / z;
        frequencies(&s, logits, 4, &p, 40000, freq);
        for (int i = 0; i < 4; i++)
            cr_assert(fabs(freq[i] - want[i]) < 0.01, "T %g id %d: %g vs %g", T, i, freq[i], want[i]);
    }
    pl_sampler_deinit(&s);
}

Test(sampler, top_k_top_p_min_p_restrict_the_candidates) {
    pl_sampler s;
    cr_assert_eq(pl_sampler_init(&s, 5), PL_OK);
    /* probabilities 0.5, 0.3, 0.15, 0.04, 0.01 */
    float logits[5] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.04f), logf(0.01f)};
    double f[5];
    pl_sampling_params p = params(1.0f);
    p.top_k = 2; /* renormalised over {0, 1}: 0.625, 0.375 */
    frequencies(&s, logits, 5, &p, 20000, f);
    cr_assert(fabs(f[0] - 0.625) < 0.015 && fabs(f[1] - 0.375) < 0.015);
    cr_assert(f[2] == 0 && f[3] == 0 && f[4] == 0);

    p = params(1.0f);
    p.top_p = 0.7f; /* 0.5 < 0.7 <= 0.8: {0, 1} */
    frequencies(&s, logits, 5, &p, 20000, f);
    cr_assert(f[0] > 0.55 && f[1] > 0.3 && f[2] == 0 && f[3] == 0 && f[4] == 0);
    p.top_p = 0.85f; /* {0, 1, 2} */
    frequencies(&s, logits, 5, &p, 20000, f);
    cr_assert(f[2] > 0.1 && f[3] == 0 && f[4] == 0);

    p = params(1.0f);
    p.min_p = 0.5f; /* keep p >= 0.25: {0, 1} */
    frequencies(&s, logits, 5, &p, 20000, f);
    cr_assert(f[0] > 0.55 && f[1] > 0.3 && f[2] == 0);

    p = params(1.0f);
    p.top_k = 1;
    frequencies(&s, logits, 5, &p, 1000, f);
    cr_assert_float_eq(f[0], 1.0, 1e-9);
    pl_sampler_deinit(&s);
}

Test(sampler, penalties_change_the_greedy_choice) {
    pl_sampler s;
    cr_assert_eq(pl_sampler_init(&s, 4), PL_OK);
    pl_rng rng;
    pl_rng_seed(&rng, 1);
    int32_t seq[3] = {0, 2, 0}; /* prompt {0}, output {2, 0} */
    float l1[4] = {2.0f, 1.9f, 1.0f, -5.0f};
    pl_sampling_params p = params(0.0f);
    p.repetition_penalty = 2.0f; /* 2.0 -> 1.0 for id 0 */
    cr_assert_eq(pl_sampler_sample(&s, l1, &p, seq, 1, 2, &rng), 1);
    float l2[4] = {2.0f, 1.9f, 1.0f, -5.0f};
    p = params(0.0f);
    p.frequency_penalty = 0.2f; /* id 0 appears once in the output: 2.0 - 0.2 = 1.8 */
    cr_assert_eq(pl_sampler_sample(&s, l2, &p, seq, 1, 2, &rng), 1);
    float l3[4] = {2.0f, 1.95f, 1.0f, -5.0f};
    p = params(0.0f);
    p.presence_penalty = 0.04f; /* 2.0 - 0.04 = 1.96 still wins */
    cr_assert_eq(pl_sampler_sample(&s, l3, &p, seq, 1, 2, &rng), 0);
    float l4[4] = {2.0f, 1.95f, 1.0f, -5.0f};
    int32_t prompt_only[1] = {0};
    p = params(0.0f);
    p.presence_penalty = 1.0f; /* presence counts output tokens only */
    cr_assert_eq(pl_sampler_sample(&s, l4, &p, prompt_only, 1, 0, &rng), 0);
    pl_sampler_deinit(&s);
}

Test(sampler, a_seed_fixes_the_stream) {
    pl_sampler s;
    cr_assert_eq(pl_sampler_init(&s, 16), PL_OK);
    float base[16];
    pl_test_rng tr;
    pl_test_rng_seed(&tr, 3);
    pl_test_fill(&tr, base, 16, 2.0f);
    pl_sampling_params p = params(1.0f);
    int32_t a[50], b[50];
    for (int run = 0; run < 2; run++) {
        pl_rng rng;
        pl_rng_seed(&rng, 99);
        for (int i = 0; i < 50; i++) {
            float l[16];
            memcpy(l, base, sizeof l);
            (run ? b : a)[i] = pl_sampler_sample(&s, l, &p, NULL, 0, 0, &rng);
        }
    }
    cr_assert_eq(memcmp(a, b, sizeof a), 0);
    pl_sampler_deinit(&s);
}

Test(sampler, validation_names_the_field) {
    struct { const char *field; void (*f)(pl_sampling_params *); } cases[] = {
        {"max_tokens", NULL}, {"temperature", NULL}, {"top_p", NULL}, {"top_k", NULL},
        {"min_p", NULL}, {"repetition_penalty", NULL}, {"presence_penalty", NULL},
        {"frequency_penalty", NULL}, {"stop_ids", NULL}, {"n", NULL}, {"min_tokens", NULL},
        {"stop[0]", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pl_sampling_params p;
        pl_sampling_params_default(&p);
        cr_assert_eq(pl_sampling_params_validate(&p), PL_OK);
        static const int32_t neg_id = -3;
        static const char *const empty[] = {""};
        switch (i) {
        case 0: p.max_tokens = -1; break;
        case 1: p.temperature = -1.0f; break;
        case 2: p.top_p = 1.5f; break;
        case 3: p.top_k = -2; break;
        case 4: p.min_p = NAN; break;
        case 5: p.repetition_penalty = 0.0f; break;
        case 6: p.presence_penalty = 3.0f; break;
        case 7: p.frequency_penalty = INFINITY; break;
        case 8: p.n_stop_ids = 1; p.stop_ids = &neg_id; break;
        case 9: p.n = 0; break;
        case 10: p.min_tokens = p.max_tokens + 1; break;
        case 11: p.n_stop = 1; p.stop = empty; break;
        }
        cr_assert_eq(pl_sampling_params_validate(&p), PL_ERR_INVALID_ARGUMENT, "%s",
                     cases[i].field);
        cr_assert(strstr(pl_last_error(), cases[i].field), "'%s' lacks %s", pl_last_error(),
                  cases[i].field);
    }
}

/* The token mask's one place: every id whose bit is 0 becomes -inf, the others keep their logit
 * (-inf included), and it says whether anything is left above -inf; words all ones, all zeros
 * and mixed, and a vocabulary that ends inside a word. */
Test(sampler, mask_row_keeps_exactly_the_allowed_ids) {
    enum { V = 64 * 7 + 23 };
    static float x[V], ref[V];
    uint64_t bits[(V + 63) / 64];
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (int round = 0; round < 60; round++) {
        for (size_t w = 0; w < sizeof bits / sizeof bits[0]; w++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            bits[w] = round >= 50 ? ~0ull : w % 3 == 0 ? ~0ull : w % 3 == 1 && round % 2 ? 0 : r;
        }
        size_t want = 0;
        for (int i = 0; i < V; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            /* the last rounds: nothing finite, or one finite logit (in a word, in the tail) */
            bool finite = round < 50 ? r % 11 != 0
                                     : (round % 3 == 1 && i == 200) || (round % 3 == 2 && i == V - 1);
            x[i] = finite ? (float)(r % 1000) * 0.01f - 5.0f : -INFINITY;
            bool keep = (bits[i / 64] >> (i % 64)) & 1;
            ref[i] = keep ? x[i] : -INFINITY;
            want += keep && x[i] != -INFINITY;
        }
        cr_assert_eq(pl_sampler_mask_row(x, bits, V), want > 0, "round %d", round);
        cr_assert_eq(memcmp(x, ref, sizeof x), 0, "round %d", round);
    }
}
