/*
 * tests/e2e/test_e2e_gguf.c - models written as GGUF run exactly as their sources:
 *   - random Llama (Llama 3 numerics, scaling as rope_freqs.weight), Mistral, Qwen2, Qwen3,
 *     Mixtral, Qwen2-MoE, Qwen3-MoE, Gemma 2, Gemma 3 and Phi-3 models in GGUF F32, F16 and
 *     BF16 give the dense reference's greedy tokens of the same
 *     weights loaded from Hugging Face files, 200 per prompt (so q/k went to llama.cpp's
 *     interleaved layout for llama and Mistral and the RoPE layout follows, without a copy);
 *   - stories260K.bin written by pl_model_quantize as an F32 GGUF with its tok512 vocabulary
 *     inside (PAGELLM_TEST_MODELS; skipped without) gives the .bin's tokens for 256 greedy
 *     steps and the same text with the embedded tokenizer as with tok512.model, and stops on
 *     the same ids (llama2.c's {EOS, BOS} carried as eos/eot ids).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "families.h"
#include "gguf/gguf.h"
#include "model_fixtures.h"

static void gguf_family(pl_arch arch, int variant, pl_dtype stored, pl_dtype weights,
                        pl_wtype type) {
    family_run f;
    family_case fc = {.arch = arch, .variant = variant, .seed = 21 + (uint64_t)variant,
                      .stored = stored};
    family_setup(&f, &fc, weights, false);
    family_run g = f;
    cr_assert_lt(strlen(f.dir), sizeof g.dir - 16);
    memcpy(g.dir + strlen(f.dir), "/model.gguf", 12);
    pl_gguf_writer *w;
    cr_assert_eq(pl_gguf_writer_create(&w), PL_OK);
    cr_assert_eq(pl_model_save_gguf(f.model, type, w, g.dir), PL_OK, "%s", pl_last_error());
    pl_gguf_writer_free(w);
    g.weights = PL_DTYPE_AUTO;
    family_check_engine(&g, PL_BACKEND_CPU, false);
    if (type == PL_WTYPE_F32) family_check_engine(&g, PL_BACKEND_REF, true);
    family_teardown(&f);
}

static void gguf_arch(pl_arch arch) {
    gguf_family(arch, 0, PL_DTYPE_F32, PL_DTYPE_AUTO, PL_WTYPE_F32);
    gguf_family(arch, 1, PL_DTYPE_F32, PL_DTYPE_F16, PL_WTYPE_F16);
    gguf_family(arch, 1, PL_DTYPE_BF16, PL_DTYPE_AUTO, PL_WTYPE_BF16);
    PL_ASSERT_NO_LEAKS();
}

Test(e2e_gguf, llama3_in_gguf_matches_the_dense_reference, .timeout = 300) {
    gguf_arch(PL_ARCH_LLAMA);
}
Test(e2e_gguf, mistral_in_gguf_matches_the_dense_reference, .timeout = 300) {
    gguf_arch(PL_ARCH_MISTRAL);
}
Test(e2e_gguf, qwen2_in_gguf_matches_the_dense_reference, .timeout = 300) {
    gguf_arch(PL_ARCH_QWEN2);
}
Test(e2e_gguf, qwen3_in_gguf_matches_the_dense_reference, .timeout = 300) {
    gguf_arch(PL_ARCH_QWEN3);
}
/* llama with expert_count, stacked ffn_*_exps */
Test(e2e_gguf, mixtral_in_gguf_matches_the_dense_reference, .timeout = 300) {
    gguf_arch(PL_ARCH_MIXTRAL);
}
Test(e2e_gguf, qwen2_moe_in_gguf_matches_the_dense_reference, .timeout = 300) {
    gguf_arch(PL_ARCH_QWEN2_MOE);
}
Test(e2e_gguf, qwen3_moe_in_gguf_matches_the_dense_reference, .timeout = 300) {
    gguf_arch(PL_ARCH_QWEN3_MOE);
}
/* norms as 1 + w, the window pattern, soft-caps, the query scale in pagellm's own key */
Test(e2e_gguf, gemma2_in_gguf_matches_the_dense_reference, .timeout = 300) {
    gguf_arch(PL_ARCH_GEMMA2);
}
Test(e2e_gguf, gemma3_in_gguf_matches_the_dense_reference, .timeout = 300) {
    gguf_arch(PL_ARCH_GEMMA3);
}
/* fused attn_qkv and ffn_up, the rope factors */
Test(e2e_gguf, phi3_in_gguf_matches_the_dense_reference, .timeout = 300) {
    gguf_arch(PL_ARCH_PHI3);
}

// ----------------------------------------------------------------------------
// stories260K

static pl_engine *engine(const char *model, const char *tok) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = model;
    c.tokenizer_path = tok;
    c.n_threads = 2;
    c.kv_dtype = PL_DTYPE_F32;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_create(&c, &e), PL_OK, "%s: %s", model, pl_last_error());
    return e;
}

static const char *prompts[] = {
    "Once upon a time",
    "Lily and Ben went to the park. They saw a big dog with a red ball and",
    "The sun was hot. Tom wanted to swim in the lake with his friends, but his mom said",
    "One day, a little bird",
};
#define N_PROMPTS (int)(sizeof prompts / sizeof prompts[0])

static void run(pl_engine *e, bool ignore_eos, pl_completion **c, size_t *n) {
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = 256;
    sp.ignore_eos = ignore_eos;
    for (int i = 0; i < N_PROMPTS; i++)
        cr_assert_eq(pl_engine_submit_request(e, prompts[i], &sp, NULL), PL_OK, "%s",
                     pl_last_error());
    cr_assert_eq(pl_engine_run(e, c, n), PL_OK, "%s", pl_last_error());
    cr_assert_eq(*n, (size_t)N_PROMPTS);
}

static void same_completions(const pl_completion *a, const pl_completion *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(a[i].n_prompt_ids, b[i].n_prompt_ids, "prompt %zu", i);
        cr_assert_arr_eq(a[i].prompt_ids, b[i].prompt_ids, a[i].n_prompt_ids * sizeof(int32_t));
        cr_assert_eq(a[i].n_output_ids, b[i].n_output_ids, "prompt %zu", i);
        cr_assert_arr_eq(a[i].output_ids, b[i].output_ids, a[i].n_output_ids * sizeof(int32_t),
                         "prompt %zu: the tokens differ", i);
        cr_assert_str_eq(a[i].text, b[i].text, "prompt %zu", i);
        cr_assert_eq(a[i].finish_reason, b[i].finish_reason, "prompt %zu", i);
    }
}

Test(e2e_gguf, stories260k_as_gguf_gives_the_same_tokens_and_text, .timeout = 300) {
    char bin[1024], tok[1024], gguf[1100];
    if (!pl_test_models_dir()) cr_skip_test("PAGELLM_TEST_MODELS is not set");
    cr_assert(pl_test_model_path("stories260K.bin", bin, sizeof bin));
    cr_assert(pl_test_model_path("tok512.model", tok, sizeof tok));
    const char *dir = pl_test_tmpdir();
    snprintf(gguf, sizeof gguf, "%s/stories260K.gguf", dir);
    /* the tokenizer beside the .bin (tok512.model) goes into the file */
    cr_assert_eq(pl_model_quantize(bin, gguf, "f32", NULL), PL_OK, "%s", pl_last_error());
    pl_engine *a = engine(bin, tok), *b = engine(gguf, NULL);
    for (int eos = 0; eos < 2; eos++) {
        pl_completion *ca, *cb;
        size_t na, nb;
        run(a, eos == 0, &ca, &na);
        run(b, eos == 0, &cb, &nb);
        if (eos == 0)
            for (size_t i = 0; i < na; i++) cr_assert_eq(ca[i].n_output_ids, 256);
        same_completions(ca, cb, na);
        pl_completions_free(ca, na);
        pl_completions_free(cb, nb);
    }
    pl_model_info ia, ib;
    cr_assert_eq(pl_engine_model_info(a, &ia), PL_OK);
    cr_assert_eq(pl_engine_model_info(b, &ib), PL_OK);
    cr_assert_eq(ia.bos_id, ib.bos_id);
    cr_assert_eq(ia.eos_id, ib.eos_id);
    cr_assert_eq(ia.vocab_size, ib.vocab_size);
    cr_assert_eq(ia.n_params, ib.n_params);
    pl_engine_destroy(a);
    pl_engine_destroy(b);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

Test(e2e_gguf, quantize_refuses_what_it_cannot_write) {
    const char *dir = pl_test_tmpdir();
    char out[600];
    snprintf(out, sizeof out, "%s/x.gguf", dir);
    cr_assert_eq(pl_model_quantize("dummy:tiny", out, "q3_k_xs", NULL), PL_ERR_UNSUPPORTED);
    cr_assert(strstr(pl_last_error(), "q3_k_xs"), "%s", pl_last_error());
    cr_assert_eq(pl_model_quantize("dummy:tiny", out, "IQ2_XS", NULL), PL_ERR_UNSUPPORTED);
    cr_assert_eq(pl_model_quantize(NULL, out, "f16", NULL), PL_ERR_INVALID_ARGUMENT);
    pl_quantize_options o;
    pl_quantize_options_default(&o);
    o.struct_size = 3;
    cr_assert_eq(pl_model_quantize("dummy:tiny", out, "f16", &o), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_model_quantize("/nonexistent/model.bin", out, "f16", NULL), PL_ERR_IO);
    FILE *f = fopen(out, "rb");
    cr_assert_null(f, "nothing was written");
    /* dummy:tiny in f32: the engine runs it with the same tokens as the preset itself */
    cr_assert_eq(pl_model_quantize("dummy:tiny", out, "F32", NULL), PL_OK, "%s", pl_last_error());
    pl_engine *a = engine("dummy:tiny", NULL), *b = engine(out, NULL);
    int32_t prompt[] = {1, 5, 9, 12};
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = 24;
    sp.ignore_eos = true;
    pl_completion *ca, *cb;
    size_t na, nb;
    cr_assert_eq(pl_engine_submit_tokens(a, prompt, 4, &sp, NULL), PL_OK);
    cr_assert_eq(pl_engine_run(a, &ca, &na), PL_OK);
    cr_assert_eq(pl_engine_submit_tokens(b, prompt, 4, &sp, NULL), PL_OK);
    cr_assert_eq(pl_engine_run(b, &cb, &nb), PL_OK);
    cr_assert_eq(ca[0].n_output_ids, cb[0].n_output_ids);
    cr_assert_arr_eq(ca[0].output_ids, cb[0].output_ids, 24 * sizeof(int32_t));
    pl_completions_free(ca, na);
    pl_completions_free(cb, nb);
    pl_engine_destroy(a);
    pl_engine_destroy(b);
    /* and in bf16, which the loaded model keeps */
    cr_assert_eq(pl_model_quantize("dummy:tiny", out, "bf16", NULL), PL_OK, "%s",
                 pl_last_error());
    b = engine(out, NULL);
    pl_model_info info;
    cr_assert_eq(pl_engine_model_info(b, &info), PL_OK);
    cr_assert_eq(info.weight_dtype, PL_DTYPE_BF16);
    pl_engine_destroy(b);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}
