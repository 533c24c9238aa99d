/*
 * tests/e2e/test_e2e_formats.c - random tiny models written in every supported format
 * (llama2.c legacy tied/untied, ak42 v1, Hugging Face safetensors f32/f16/bf16, sharded),
 * loaded by the engine: greedy tokens equal the dense reference run on the same file's weights;
 * and Hugging Face models with linear and llama3 RoPE scaling, at contexts where the scaling
 * changes the tokens.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dense_ref.h"
#include "e2e_util.h"
#include "model_fixtures.h"

typedef enum { FMT_LLAMA2C, FMT_AK42, FMT_HF_F32, FMT_HF_F16, FMT_HF_BF16, FMT_HF_SHARDED,
               FMT_COUNT } fmt;
static const char *const fmt_names[FMT_COUNT] = {"llama2c", "ak42", "hf-f32", "hf-f16",
                                                 "hf-bf16", "hf-sharded"};

static const char *write_format(const pl_model *m, fmt f, const char *dir) {
    static char path[1024];
    bool ok;
    switch (f) {
    case FMT_LLAMA2C:
        snprintf(path, sizeof path, "%s/model.bin", dir);
        ok = pl_fixture_write_llama2c(m, path);
        break;
    case FMT_AK42:
        snprintf(path, sizeof path, "%s/model_ak42.bin", dir);
        ok = pl_fixture_write_ak42(m, path);
        break;
    default: {
        pl_fixture_hf_options o = {.dtype = PL_DTYPE_F32};
        if (f == FMT_HF_F16) o.dtype = PL_DTYPE_F16;
        if (f == FMT_HF_BF16) o.dtype = PL_DTYPE_BF16;
        if (f == FMT_HF_SHARDED) o.n_shards = 3;
        snprintf(path, sizeof path, "%s/hf-%s", dir, fmt_names[f]);
        ok = pl_fixture_write_hf(m, path, &o);
    }
    }
    cr_assert(ok, "writing %s", fmt_names[f]);
    return path;
}

/* Greedy tokens (ignoring EOS) of a fresh engine on the model at path: out (n_out). */
static void engine_greedy(const char *path, pl_backend_kind backend, const int32_t *prompt,
                          int n_prompt, int n_out, int32_t *out) {
    pl_engine_config ec;
    pl_engine_config_default(&ec);
    ec.model_path = path;
    ec.backend = backend;
    ec.block_size = 4;
    ec.max_num_blocks = 128;
    ec.n_threads = 2;
    pl_engine *e = e2e_engine(&ec);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = n_out;
    sp.ignore_eos = true;
    cr_assert_eq(pl_engine_submit_tokens(e, prompt, (size_t)n_prompt, &sp, NULL), PL_OK, "%s",
                 pl_last_error());
    pl_completion *c;
    size_t n;
    cr_assert_eq(pl_engine_run(e, &c, &n), PL_OK, "%s", pl_last_error());
    cr_assert_eq(n, 1);
    cr_assert_eq(c[0].n_output_ids, (size_t)n_out);
    memcpy(out, c[0].output_ids, (size_t)n_out * sizeof(int32_t));
    pl_completions_free(c, n);
    pl_engine_destroy(e);
}

static void check_format(uint64_t seed, fmt f, pl_backend_kind backend) {
    pl_test_rng r;
    pl_test_rng_seed(&r, seed);
    pl_model_config cfg;
    pl_fixture_random_config(&r, &cfg);
    if (cfg.vocab_size < 8) cfg.vocab_size = 8;
    if (cfg.max_seq_len < 48) cfg.max_seq_len = 48;
    pl_model *m = pl_fixture_model(&cfg, seed);
    cr_assert(m);
    const char *dir = pl_test_tmpdir();
    cr_assert(dir);
    char dir_copy[512];
    snprintf(dir_copy, sizeof dir_copy, "%s", dir);
    const char *path = write_format(m, f, dir_copy);

    pl_model *loaded;
    cr_assert_eq(pl_model_load(path, NULL, &loaded), PL_OK, "%s: %s", fmt_names[f], pl_last_error());

    int n_prompt = 5 + (int)pl_test_rng_below(&r, 12);
    int n_out = cfg.max_seq_len - n_prompt;
    if (n_out > 30) n_out = 30;
    int32_t prompt[32], want[64], got[64];
    prompt[0] = 1;
    for (int i = 1; i < n_prompt; i++) prompt[i] = 3 + (int32_t)pl_test_rng_below(&r, (uint32_t)cfg.vocab_size - 3);
    dense_ref *d = dense_ref_create(loaded, n_prompt + n_out);
    cr_assert(d);
    dense_ref_set_kv_dtype(d, PL_DTYPE_F16); /* the engine's default KV cache */
    cr_assert_eq(dense_ref_greedy(d, prompt, n_prompt, n_out, want), 0);

    engine_greedy(path, backend, prompt, n_prompt, n_out, got);
    for (int k = 0; k < n_out; k++)
        cr_assert_eq(got[k], want[k], "seed %llu %s: token %d engine %d dense %d",
                     (unsigned long long)seed, fmt_names[f], k, got[k], want[k]);
    dense_ref_free(d);
    pl_model_free(loaded);
    pl_model_free(m);
    pl_fixture_remove_dir(dir_copy);
}

Test(formats, every_format_matches_the_dense_reference, .timeout = 120) {
    for (uint64_t seed = 1; seed <= 4; seed++)
        for (int f = 0; f < FMT_COUNT; f++) {
            check_format(seed, (fmt)f, PL_BACKEND_CPU);
            check_format(seed, (fmt)f, PL_BACKEND_REF);
        }
    PL_ASSERT_NO_LEAKS();
}

// ----------------------------------------------------------------------------
// RoPE scaling (Hugging Face config.json only: the llama2.c formats cannot state it)

/* head_dim 16, theta 10000: wavelengths 2 pi 10000^(j/8) = 6.3, 19.9, 62.8, 199, 628, ...
 * With original_max_position_embeddings 64 and low/high_freq_factor 1/4, llama3 keeps the
 * wavelengths under 16, blends 16..64 (j = 1, 2) and divides the rest by factor: every
 * branch of the rule is used. Sequences reach 200 positions, three times the original
 * length, which is what scaling is for. */
enum { SCALE_PROMPT = 12, SCALE_OUT = 188 };

static pl_model_config scaling_config(void) {
    return (pl_model_config){.dim = 48, .hidden_dim = 61, .n_layers = 2, .n_heads = 3,
                             .n_kv_heads = 1, .head_dim = 16, .vocab_size = 64,
                             .max_seq_len = 256, .norm_eps = 1e-5f, .rope_theta = 10000.0f,
                             .rope_factor = 1.0f, .tied_embeddings = false, .bos_id = 1,
                             .eos_ids = {2}, .n_eos = 1};
}

static void dense_greedy(const pl_model *m, const int32_t *prompt, int32_t *out) {
    dense_ref *d = dense_ref_create(m, SCALE_PROMPT + SCALE_OUT);
    cr_assert(d);
    dense_ref_set_kv_dtype(d, PL_DTYPE_F16); /* the engine's default KV cache */
    cr_assert_eq(dense_ref_greedy(d, prompt, SCALE_PROMPT, SCALE_OUT, out), 0);
    dense_ref_free(d);
}

/* Greedy tokens of the dense reference on m's very weights under another RoPE config (a
 * shallow copy: dense_ref only reads), to show the scaling under test matters. */
static void dense_greedy_as(const pl_model *m, const pl_model_config *rope_cfg,
                            const int32_t *prompt, int32_t *out) {
    pl_model other = *m;
    other.cfg.rope_scaling = rope_cfg->rope_scaling;
    other.cfg.rope_factor = rope_cfg->rope_factor;
    other.cfg.rope_low_freq_factor = rope_cfg->rope_low_freq_factor;
    other.cfg.rope_high_freq_factor = rope_cfg->rope_high_freq_factor;
    other.cfg.rope_original_max_pos = rope_cfg->rope_original_max_pos;
    dense_greedy(&other, prompt, out);
}

static const char *rope_name(const pl_model_config *c) {
    switch (c->rope_scaling) {
    case PL_ROPE_SCALING_NONE: return "unscaled";
    case PL_ROPE_SCALING_LINEAR: return "linear";
    case PL_ROPE_SCALING_LLAMA3: return "llama3";
    case PL_ROPE_SCALING_LONGROPE: return "longrope";
    }
    return "?";
}

static int first_difference(const int32_t *a, const int32_t *b, int n) {
    for (int k = 0; k < n; k++)
        if (a[k] != b[k]) return k;
    return -1;
}

/* cfg (scaled) in an HF directory of dtype dt, weights from seed: the engine on both CPU
 * backends gives the dense reference's greedy tokens, and those differ from the tokens of the
 * same weights under each RoPE config of `instead` (n_instead of them). */
static void check_scaled(const pl_model_config *cfg, pl_dtype dt, uint64_t seed,
                         const pl_model_config *instead, int n_instead) {
    pl_model *m = pl_fixture_model(cfg, seed);
    cr_assert(m);
    const char *tmp = pl_test_tmpdir();
    cr_assert(tmp);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tmp);
    cr_assert(pl_fixture_write_hf(m, dir, &(pl_fixture_hf_options){.dtype = dt}));
    pl_model *loaded;
    cr_assert_eq(pl_model_load(dir, NULL, &loaded), PL_OK, "%s", pl_last_error());
    /* dense_ref reads the loaded config: it must be the scaling asked for, value for value */
    const pl_model_config *lc = &loaded->cfg;
    cr_assert(lc->rope_scaling == cfg->rope_scaling && lc->rope_factor == cfg->rope_factor,
              "config.json kept the scaling");
    if (cfg->rope_scaling == PL_ROPE_SCALING_LLAMA3)
        cr_assert(lc->rope_low_freq_factor == cfg->rope_low_freq_factor &&
                      lc->rope_high_freq_factor == cfg->rope_high_freq_factor &&
                      lc->rope_original_max_pos == cfg->rope_original_max_pos,
                  "config.json kept the llama3 parameters");

    pl_test_rng r;
    pl_test_rng_seed(&r, seed * 7919);
    int32_t prompt[SCALE_PROMPT], want[SCALE_OUT], other[SCALE_OUT], got[SCALE_OUT];
    prompt[0] = 1;
    for (int i = 1; i < SCALE_PROMPT; i++)
        prompt[i] = 3 + (int32_t)pl_test_rng_below(&r, (uint32_t)cfg->vocab_size - 3);
    dense_greedy(loaded, prompt, want);
    for (int i = 0; i < n_instead; i++) {
        dense_greedy_as(loaded, &instead[i], prompt, other);
        int k = first_difference(want, other, SCALE_OUT);
        cr_assert_geq(k, 0, "seed %llu: %s gives the same %d tokens as %s: the test would not "
                      "see the difference", (unsigned long long)seed, rope_name(cfg), SCALE_OUT,
                      rope_name(&instead[i]));
        cr_log_info("seed %llu: %s departs from %s (factor %g) at output %d",
                    (unsigned long long)seed, rope_name(cfg), rope_name(&instead[i]),
                    (double)instead[i].rope_factor, k);
    }
    const pl_backend_kind backends[] = {PL_BACKEND_CPU, PL_BACKEND_REF};
    for (int b = 0; b < 2; b++) {
        engine_greedy(dir, backends[b], prompt, SCALE_PROMPT, SCALE_OUT, got);
        int k = first_difference(want, got, SCALE_OUT);
        cr_assert_eq(k, -1, "seed %llu %s %s: token %d engine %d dense %d",
                     (unsigned long long)seed, rope_name(cfg),
                     b == 0 ? "cpu" : "ref", k, k >= 0 ? got[k] : 0, k >= 0 ? want[k] : 0);
    }
    pl_model_free(loaded);
    pl_model_free(m);
    pl_fixture_remove_dir(dir);
}

/* A llama2.c file cannot state the scaling: a writer that dropped it would hand the engine
 * another model than the dense reference gets. */
Test(formats, llama2c_writers_refuse_a_scaled_model) {
    pl_model_config c = scaling_config();
    pl_fixture_set_rope_linear(&c, 4.0f);
    pl_model *m = pl_fixture_model(&c, 1);
    cr_assert(m);
    const char *dir = pl_test_tmpdir();
    cr_assert(dir);
    char path[600];
    snprintf(path, sizeof path, "%s/model.bin", dir);
    cr_assert_not(pl_fixture_write_llama2c(m, path));
    cr_assert_not(pl_fixture_write_ak42(m, path));
    pl_fixture_remove_dir(dir);
    pl_model_free(m);
    PL_ASSERT_NO_LEAKS();
}

Test(formats, rope_scaling_linear_matches_the_dense_reference, .timeout = 120) {
    pl_model_config c = scaling_config(), none = scaling_config();
    pl_fixture_set_rope_linear(&c, 4.0f);
    for (uint64_t seed = 1; seed <= 2; seed++) {
        check_scaled(&c, PL_DTYPE_F32, seed, &none, 1);
        check_scaled(&c, PL_DTYPE_BF16, seed + 10, &none, 1);
    }
    PL_ASSERT_NO_LEAKS();
}

/* Besides unscaled, the tokens must differ from plain linear scaling by the same factor:
 * otherwise an engine that ignored the kept and blended bands would pass. */
Test(formats, rope_scaling_llama3_matches_the_dense_reference, .timeout = 120) {
    pl_model_config c = scaling_config(), instead[2] = {scaling_config(), scaling_config()};
    pl_fixture_set_rope_llama3(&c, 8.0f, 1.0f, 4.0f, 64);
    pl_fixture_set_rope_linear(&instead[1], 8.0f);
    for (uint64_t seed = 1; seed <= 2; seed++) {
        check_scaled(&c, PL_DTYPE_F32, seed, instead, 2);
        check_scaled(&c, PL_DTYPE_BF16, seed + 10, instead, 2);
    }
    PL_ASSERT_NO_LEAKS();
}
