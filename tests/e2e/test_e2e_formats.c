/*
 * tests/e2e/test_e2e_formats.c - random tiny models written in every supported format
 * (llama2.c legacy tied/untied, ak42 v1, Hugging Face safetensors f32/f16/bf16, sharded),
 * loaded by the engine: greedy tokens equal the dense reference run on the same file's weights.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

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

    pl_engine_config ec;
    pl_engine_config_default(&ec);
    ec.model_path = path;
    ec.backend = backend;
    ec.block_size = 4;
    ec.max_num_blocks = 128;
    ec.n_threads = 2;
    pl_engine *e = e2e_engine(&ec);

    int n_prompt = 5 + (int)pl_test_rng_below(&r, 12);
    int n_out = cfg.max_seq_len - n_prompt;
    if (n_out > 30) n_out = 30;
    int32_t prompt[32], want[64];
    prompt[0] = 1;
    for (int i = 1; i < n_prompt; i++) prompt[i] = 3 + (int32_t)pl_test_rng_below(&r, (uint32_t)cfg.vocab_size - 3);
    dense_ref *d = dense_ref_create(loaded, n_prompt + n_out);
    cr_assert_eq(dense_ref_greedy(d, prompt, n_prompt, n_out, want), 0);

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
    for (int k = 0; k < n_out; k++)
        cr_assert_eq(c[0].output_ids[k], want[k], "seed %llu %s: token %d engine %d dense %d",
                     (unsigned long long)seed, fmt_names[f], k, c[0].output_ids[k], want[k]);
    pl_completions_free(c, n);
    pl_engine_destroy(e);
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
