/*
 * tests/e2e/families.c - see families.h.
 */
#include "families.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dense_ref.h"
#include "model_fixtures.h"

const char *family_name(const family_case *fc) {
    static _Thread_local char buf[64];
    static const char *const names[] = {"Llama", "Mistral", "Qwen2", "Qwen3", "Mixtral",
                                        "Qwen2-MoE", "Qwen3-MoE", "Gemma 2", "Gemma 3",
                                        "Phi-3"};
    snprintf(buf, sizeof buf, "%s (%s, seed %llu)", names[fc->arch],
             fc->variant % 2 == 0 ? "tied" : "untied", (unsigned long long)fc->seed);
    return buf;
}

/* Router rows 4 and 6 become copies of row 1 and all three are tripled: the three lead every
 * token's choice with equal logits, so with two per token the tie decides between 4 and 6. */
static void plant_router_tie(pl_model *m) {
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const pl_weight *w = pl_model_weight(m, PL_T_FFN_GATE_INP, l);
        cr_assert(w->data && w->type == PL_WTYPE_F32 && w->rows > 6);
        float *r = (float *)w->data;
        int D = w->cols;
        for (int i = 0; i < D; i++) r[1 * D + i] *= 3.0f;
        memcpy(r + 4 * D, r + 1 * D, (size_t)D * sizeof *r);
        memcpy(r + 6 * D, r + 1 * D, (size_t)D * sizeof *r);
    }
}

void family_setup(family_run *f, const family_case *fc, pl_dtype weights, bool round_inputs) {
    memset(f, 0, sizeof *f);
    f->fc = *fc;
    f->weights = weights;
    pl_model_config c;
    pl_fixture_family_config(fc->arch, fc->variant, &c);
    if (fc->sliding_window > 0) c.sliding_window = fc->sliding_window;
    pl_model *m = pl_fixture_family_model(&c, fc->seed);
    cr_assert(m, "%s: fixture model", family_name(fc));
    if (fc->router_tie) plant_router_tie(m);
    const char *tmp = pl_test_tmpdir();
    cr_assert(tmp);
    snprintf(f->dir, sizeof f->dir, "%s", tmp);
    pl_fixture_hf_options o = {.dtype = fc->stored == PL_DTYPE_BF16 ? PL_DTYPE_BF16
                                                                     : PL_DTYPE_F32};
    cr_assert(pl_fixture_write_hf(m, f->dir, &o), "%s: writing", family_name(fc));

    pl_model_load_options lo = {.dtype = weights};
    cr_assert_eq(pl_model_load(f->dir, &lo, &f->model), PL_OK, "%s: %s", family_name(fc),
                 pl_last_error());
    cr_assert_eq(f->model->cfg.arch, fc->arch, "%s: config.json's architecture",
                 family_name(fc));
    /* the loaded tensors are the written ones: experts stacked in order, Phi-3's fused
     * tensors split at the right rows, Gemma's stored w read as 1 + w */
    if (weights == PL_DTYPE_AUTO && fc->stored != PL_DTYPE_BF16)
        cr_assert(pl_fixture_compare(m, f->model, 1e-6f, 0.0f), "%s: loaded weights",
                  family_name(fc));
    pl_model_free(m);

    e2e_prompts_make(&f->prompts, FAMILY_PROMPTS, 3, 40, c.vocab_size, fc->seed * 31 + 7);
    f->want = (e2e_outputs){.n = FAMILY_PROMPTS};
    f->want.ids = calloc(FAMILY_PROMPTS, sizeof *f->want.ids);
    f->want.len = calloc(FAMILY_PROMPTS, sizeof *f->want.len);
    f->want.reason = calloc(FAMILY_PROMPTS, sizeof *f->want.reason);
    for (int i = 0; i < FAMILY_PROMPTS; i++) {
        dense_ref *d = dense_ref_create(f->model, f->prompts.len[i] + FAMILY_OUT);
        cr_assert(d);
        dense_ref_set_kv_dtype(d, PL_DTYPE_F32);
        dense_ref_set_round_matmul_inputs(d, round_inputs);
        f->want.ids[i] = malloc(FAMILY_OUT * sizeof(int32_t));
        f->want.len[i] = FAMILY_OUT;
        cr_assert_eq(dense_ref_greedy(d, f->prompts.ids[i], f->prompts.len[i], FAMILY_OUT,
                                      f->want.ids[i]), 0);
        dense_ref_free(d);
    }
    /* tokens that wander (pl_fixture_family_model): a run of one repeated token would make
     * the comparison weak */
    bool seen[4096] = {false};
    int distinct = 0;
    for (int i = 0; i < FAMILY_PROMPTS; i++)
        for (int k = 0; k < FAMILY_OUT; k++)
            if (f->want.ids[i][k] < 4096 && !seen[f->want.ids[i][k]]) {
                seen[f->want.ids[i][k]] = true;
                distinct++;
            }
    cr_assert_geq(distinct, 12, "%s: %d distinct tokens in %d x %d greedy ones",
                  family_name(fc), distinct, FAMILY_PROMPTS, FAMILY_OUT);
}

void family_teardown(family_run *f) {
    e2e_outputs_free(&f->want);
    e2e_prompts_free(&f->prompts);
    pl_model_free(f->model);
    pl_fixture_remove_dir(f->dir);
}

static void check_engine(const family_run *f, pl_backend_kind backend, bool one_at_a_time,
                         int n_blocks) {
    pl_engine_config ec;
    pl_engine_config_default(&ec);
    ec.model_path = f->dir;
    ec.backend = backend;
    ec.weight_dtype = f->weights;
    ec.kv_dtype = PL_DTYPE_F32;
    ec.block_size = 4;
    ec.max_num_blocks = n_blocks;
    ec.max_total_tokens = 32;
    ec.n_threads = 2;
    pl_engine *e = e2e_engine(&ec);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = FAMILY_OUT;
    sp.ignore_eos = true;
    e2e_outputs got;
    e2e_run(e, &f->prompts, &sp, one_at_a_time, &got);
    char what[160];
    snprintf(what, sizeof what, "%s on backend %d, %s", family_name(&f->fc), (int)backend,
             one_at_a_time ? "alone" : "batched");
    for (int i = 0; i < got.n; i++)
        cr_assert_eq(got.len[i], FAMILY_OUT, "%s: prompt %d gave %d tokens", what, i, got.len[i]);
    cr_assert(e2e_outputs_equal(what, &f->want, &got), "%s: tokens differ from the dense "
              "reference (stderr has the first)", what);
    if (n_blocks < 512) {
        pl_metrics m;
        pl_engine_metrics(e, &m);
        cr_assert_gt(m.preemptions, 0, "%s: a pool of %d blocks preempted nothing", what,
                     n_blocks);
    }
    e2e_outputs_free(&got);
    pl_engine_destroy(e);
}

void family_check_engine(const family_run *f, pl_backend_kind backend, bool one_at_a_time) {
    check_engine(f, backend, one_at_a_time, 512);
}

void family_check_engine_pool(const family_run *f, pl_backend_kind backend, int n_blocks) {
    check_engine(f, backend, false, n_blocks);
}
