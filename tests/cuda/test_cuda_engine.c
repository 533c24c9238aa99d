/*
 * tests/cuda/test_cuda_engine.c - the whole engine on the CUDA backend (under the CPU emulation
 * in suite 'cuda', natively in suite 'gpu': skipped without a device) generates the same greedy
 * tokens as on the CPU backend.
 *
 * Precision: the CUDA backend stores weights and the KV cache in f16 and rounds matmul inputs
 * to f16 (relative ~1e-3 on logits); the CPU engine keeps its defaults, f32 weights and an
 * f16 KV cache. Over the lengths compared (40 tokens x 6 prompts on dummy:tiny, 96 x 3 on stories260K)
 * no greedy choice is that close, so the tokens must be identical; a wrong kernel is not that
 * subtle (checked: flipping one sign in RoPE changes a token by step 8 on stories260K and by
 * step 23 on dummy:tiny). If a model change ever makes a near-tie fall inside f16's error,
 * run the CPU side with weight_dtype = kv_dtype = F16 (as tight as the comparison can be).
 *
 * dummy:tiny runs always; stories260K (llama2.c format, tok512 tokenizer) only with
 * PAGELLM_TEST_MODELS set (this binary is skipped otherwise when built with models_main, or
 * with gpu_main and PL_GPU_MAIN_NEEDS_MODELS natively, see meson.build: the stories test lives
 * in its own binary).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagellm.h"
#include "test_support.h"

typedef struct {
    int n;
    int32_t *ids[8];
    size_t len[8];
} outputs;

static void outputs_free(outputs *o) {
    for (int i = 0; i < o->n; i++) free(o->ids[i]);
}

/* Runs every prompt (token ids, or text when ids is NULL) greedily, batched. */
static void run(pl_backend_kind kind, const char *model, const char *tok, int n,
                int32_t *const *ids, const size_t *lens, const char *const *texts, int max_tokens,
                int max_total_tokens, outputs *out) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = model;
    c.tokenizer_path = tok;
    c.backend = kind;
    c.block_size = 8;
    c.max_num_blocks = 256;
    c.max_total_tokens = max_total_tokens; /* small: prompts are cut into prefill chunks */
    c.n_threads = 1;
    c.weight_dtype = PL_DTYPE_AUTO; /* f32 on the CPU; the CUDA backend stores f16 */
    c.kv_dtype = PL_DTYPE_AUTO;     /* f16 on both */
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_create(&c, &e), PL_OK, "backend %d: %s", (int)kind, pl_last_error());
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.f;
    sp.max_tokens = max_tokens;
    sp.ignore_eos = true;
    pl_request_id rid[8];
    for (int i = 0; i < n; i++) {
        pl_status st = ids ? pl_engine_submit_tokens(e, ids[i], lens[i], &sp, &rid[i])
                           : pl_engine_submit_request(e, texts[i], &sp, &rid[i]);
        cr_assert_eq(st, PL_OK, "%s", pl_last_error());
    }
    pl_completion *comp = NULL;
    size_t nc = 0;
    cr_assert_eq(pl_engine_run(e, &comp, &nc), PL_OK, "backend %d: %s", (int)kind,
                 pl_last_error());
    cr_assert_eq(nc, (size_t)n);
    out->n = n;
    for (int i = 0; i < n; i++) {
        const pl_completion *ci = NULL;
        for (size_t k = 0; k < nc; k++)
            if (comp[k].id == rid[i]) ci = &comp[k];
        cr_assert_not_null(ci);
        cr_assert_eq(ci->finish_reason, PL_FINISH_LENGTH, "prompt %d finished with %s", i,
                     pl_finish_reason_name(ci->finish_reason));
        out->len[i] = ci->n_output_ids;
        out->ids[i] = malloc(ci->n_output_ids * sizeof(int32_t));
        memcpy(out->ids[i], ci->output_ids, ci->n_output_ids * sizeof(int32_t));
    }
    pl_completions_free(comp, nc);
    pl_engine_destroy(e);
}

static void assert_same(const outputs *cpu, const outputs *cuda) {
    for (int i = 0; i < cpu->n; i++) {
        cr_assert_eq(cpu->len[i], cuda->len[i], "prompt %d: %zu vs %zu tokens", i, cpu->len[i],
                     cuda->len[i]);
        for (size_t k = 0; k < cpu->len[i]; k++)
            cr_assert_eq(cpu->ids[i][k], cuda->ids[i][k], "prompt %d token %zu: cpu %d cuda %d",
                         i, k, cpu->ids[i][k], cuda->ids[i][k]);
    }
}

#ifndef PL_CUDA_ENGINE_STORIES

Test(cuda_engine, tiny_greedy_equals_cpu, .timeout = 120) {
    pl_test_rng r;
    pl_test_rng_seed(&r, 77);
    int32_t *ids[6];
    size_t lens[6];
    for (int i = 0; i < 6; i++) {
        lens[i] = 3 + pl_test_rng_below(&r, 45); /* crosses blocks of 8 and the 32-token budget */
        ids[i] = malloc(lens[i] * sizeof(int32_t));
        ids[i][0] = 1;
        for (size_t k = 1; k < lens[i]; k++) ids[i][k] = 3 + (int32_t)pl_test_rng_below(&r, 509);
    }
    outputs cpu = {0}, cuda = {0};
    run(PL_BACKEND_CPU, "dummy:tiny", NULL, 6, ids, lens, NULL, 40, 32, &cpu);
    run(PL_BACKEND_CUDA, "dummy:tiny", NULL, 6, ids, lens, NULL, 40, 32, &cuda);
    assert_same(&cpu, &cuda);
    outputs_free(&cpu);
    outputs_free(&cuda);
    for (int i = 0; i < 6; i++) free(ids[i]);
    PL_ASSERT_NO_LEAKS();
}

#else

Test(cuda_engine, stories260k_greedy_equals_cpu, .timeout = 240) {
    char model[1024], tok[1024];
    cr_assert(pl_test_model_path("stories260K.bin", model, sizeof model));
    cr_assert(pl_test_model_path("tok512.model", tok, sizeof tok));
    const char *const prompts[] = {
        "Once upon a time",
        "Lily and Ben went to the park. They saw a big dog with a red ball and",
        "One day, a little bird",
    };
    outputs cpu = {0}, cuda = {0};
    run(PL_BACKEND_CPU, model, tok, 3, NULL, NULL, prompts, 96, 64, &cpu);
    run(PL_BACKEND_CUDA, model, tok, 3, NULL, NULL, prompts, 96, 64, &cuda);
    assert_same(&cpu, &cuda);
    outputs_free(&cpu);
    outputs_free(&cuda);
    PL_ASSERT_NO_LEAKS();
}

#endif
