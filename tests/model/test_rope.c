/*
 * tests/model/test_rope.c - pl_model_rope_inv_freq against values computed here.
 *
 * The expectations are written differently from model.c on purpose: frequencies as
 * exp(-(2j/d) ln theta) in long double, and Llama 3.1 scaling stated on frequencies (cut-offs
 * 2*pi*factor/original_ctx) rather than on wavelengths, plus the structural facts the scaling
 * must have (high frequencies untouched, low ones divided by factor exactly, the band between
 * monotone and bounded by the two).
 */
#include <criterion/criterion.h>
#include <math.h>

#include "model/model.h"
#include "test_support.h"

static pl_model_config base(int head_dim, float theta) {
    pl_model_config c = {.dim = head_dim * 2, .hidden_dim = 8, .n_layers = 1, .n_heads = 2,
                         .n_kv_heads = 1, .head_dim = head_dim, .vocab_size = 8,
                         .max_seq_len = 8, .norm_eps = 1e-5f, .rope_theta = theta,
                         .rope_factor = 1.0f, .bos_id = 1, .eos_ids = {2}, .n_eos = 1};
    return c;
}

static long double plain(int j, int head_dim, float theta) {
    return expl(-(2.0L * j / head_dim) * logl((long double)theta));
}

static void expect_close(float got, long double want, const char *what, int j) {
    long double rel = fabsl((long double)got - want) / want;
    cr_assert_leq(rel, 1.2e-7L, "%s j=%d: got %.9g want %.12Lg", what, j, got, want);
}

Test(rope, default_frequencies) {
    float out[512];
    pl_model_config c = base(8, 10000.0f);
    pl_model_rope_inv_freq(&c, out);
    const float known[] = {1.0f, 0.1f, 0.01f, 0.001f};
    for (int j = 0; j < 4; j++) cr_assert_float_eq(out[j], known[j], 1e-9f * (1 + 1e3f * j));
    const int dims[] = {2, 6, 8, 64, 80, 128, 1024};
    const float thetas[] = {10000.0f, 500000.0f, 1e6f, 100.0f};
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
        for (size_t t = 0; t < sizeof thetas / sizeof thetas[0]; t++) {
            c = base(dims[d], thetas[t]);
            pl_model_rope_inv_freq(&c, out);
            for (int j = 0; j < dims[d] / 2; j++)
                expect_close(out[j], plain(j, dims[d], thetas[t]), "default", j);
        }
}

Test(rope, linear_scaling_divides_every_frequency) {
    float out[64];
    pl_model_config c = base(128, 10000.0f);
    c.rope_scaling = PL_ROPE_SCALING_LINEAR;
    c.rope_factor = 4.0f;
    pl_model_rope_inv_freq(&c, out);
    for (int j = 0; j < 64; j++) expect_close(out[j], plain(j, 128, 10000.0f) / 4, "linear", j);
}

/* Llama 3.1 on frequencies: f > 2 pi high / ctx keeps f; f < 2 pi low / ctx gives f / factor;
 * between, s = (ctx f / (2 pi) - low) / (high - low) blends f / factor (s = 0) into f (s = 1). */
static long double llama3(long double f, long double factor, long double low, long double high,
                          long double ctx) {
    const long double two_pi = 6.283185307179586476925L;
    if (f > two_pi * high / ctx) return f;
    if (f < two_pi * low / ctx) return f / factor;
    long double s = (ctx * f / two_pi - low) / (high - low);
    return f / factor + s * (f - f / factor);
}

Test(rope, llama3_scaling) {
    /* Llama 3.1 8B: theta 500000, head_dim 128, factor 8, low 1, high 4, original ctx 8192 */
    const struct {
        int head_dim;
        float theta, factor, low, high;
        int ctx;
    } cases[] = {{128, 500000.0f, 8.0f, 1.0f, 4.0f, 8192}, {64, 10000.0f, 4.0f, 1.0f, 2.0f, 512},
                 {128, 500000.0f, 32.0f, 1.0f, 4.0f, 8192}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        float out[64];
        int hd = cases[k].head_dim;
        pl_model_config c = base(hd, cases[k].theta);
        c.rope_scaling = PL_ROPE_SCALING_LLAMA3;
        c.rope_factor = cases[k].factor;
        c.rope_low_freq_factor = cases[k].low;
        c.rope_high_freq_factor = cases[k].high;
        c.rope_original_max_pos = cases[k].ctx;
        pl_model_rope_inv_freq(&c, out);
        int kept = 0, divided = 0, blended = 0;
        for (int j = 0; j < hd / 2; j++) {
            long double f = plain(j, hd, cases[k].theta);
            long double want = llama3(f, cases[k].factor, cases[k].low, cases[k].high,
                                      cases[k].ctx);
            expect_close(out[j], want, "llama3", j);
            cr_assert_leq(out[j], f * (1 + 1e-6L));
            cr_assert_geq(out[j], f / cases[k].factor * (1 - 1e-6L));
            if (j > 0) cr_assert_lt(out[j], out[j - 1], "monotone at %d", j);
            if (fabsl(out[j] - f) <= f * 1e-7L) kept++;
            else if (fabsl(out[j] - f / cases[k].factor) <= f * 1e-7L) divided++;
            else blended++;
        }
        cr_assert_eq(out[0], 1.0f);
        cr_assert_gt(kept, 0);
        cr_assert_gt(divided, 0);
        cr_assert_gt(blended, 0, "case %zu has frequencies in the blend band", k);
    }
    /* 8B: blend band is 2 pi/8192 .. 8 pi/8192, i.e. j = 29..34 of 64 */
    float out[64];
    pl_model_config c = base(128, 500000.0f);
    c.rope_scaling = PL_ROPE_SCALING_LLAMA3;
    c.rope_factor = 8.0f;
    c.rope_low_freq_factor = 1.0f;
    c.rope_high_freq_factor = 4.0f;
    c.rope_original_max_pos = 8192;
    pl_model_rope_inv_freq(&c, out);
    expect_close(out[28], plain(28, 128, 500000.0f), "kept", 28);
    expect_close(out[35], plain(35, 128, 500000.0f) / 8, "divided", 35);
    cr_assert_gt(out[29], plain(29, 128, 500000.0f) / 8 * 1.01L);
    cr_assert_lt(out[34], plain(34, 128, 500000.0f) * 0.99L);
}
