/*
 * tests/e2e/test_e2e_vocab.c - a model vocabulary padded past its tokenizer's (Qwen2.5/Qwen3's
 * config.json says 151936 ids, the tokenizer has 151669): the ids the tokenizer cannot decode
 * are never drawn, in any sampling mode, and logprobs never list them.
 *
 * The padded model is the plain one (tok512's 512 ids) with 512 more output rows, each twice
 * the row of a real id, so that wherever a real id has a positive logit some padding id beats
 * it. With the padding masked, the padded model must draw and score exactly as the plain one:
 * the same greedy and seeded tokens, the same logprobs.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model_fixtures.h"
#include "pagellm.h"
#include "test_support.h"

#define REAL 512   /* tok512's ids */
#define PADDED 1024
#define N_PROMPTS 4
#define MAX_OUT 24

static const char *tok512_json(void) { return PL_TEST_DATA_DIR "/tok512_hf/tokenizer.json"; }

/* Copies src's tensors into dst (same config but vocab): the vocabulary-sized rows that both
 * have; dst's further output rows become twice src's rows (modulo src's vocabulary). */
static void pad_from(pl_model *dst, const pl_model *src) {
    const pl_model_config *c = &dst->cfg;
    for (size_t i = 0; i < pl_model_n_slots(c); i++) {
        int layer;
        pl_tensor_role role = pl_model_slot_role(c, i, &layer);
        if (!pl_model_stores_tensor(c, role)) continue;
        const pl_weight *d = &dst->w[i], *s = &src->w[i];
        float *dd = (float *)d->data;
        const float *sd = s->data;
        cr_assert_eq(d->cols, s->cols);
        memcpy(dd, sd, (size_t)s->rows * (size_t)s->cols * sizeof(float));
        if (role != PL_T_OUTPUT) continue;
        for (int r = s->rows; r < d->rows; r++)
            for (int k = 0; k < d->cols; k++)
                dd[(size_t)r * d->cols + k] = 2.0f * sd[(size_t)(r % s->rows) * s->cols + k];
    }
}

static char g_plain[512], g_padded[512];

static void write_models(void) {
    const char *dir = pl_test_tmpdir();
    cr_assert_not_null(dir);
    pl_model_config c;
    pl_fixture_family_config(PL_ARCH_LLAMA, 1, &c); /* untied: the output rows are its own */
    c.vocab_size = REAL;
    pl_model *plain = pl_fixture_family_model(&c, 7);
    c.vocab_size = PADDED;
    pl_model *padded = pl_fixture_family_model(&c, 7);
    cr_assert(plain && padded);
    pad_from(padded, plain);
    snprintf(g_plain, sizeof g_plain, "%s/plain", dir);
    snprintf(g_padded, sizeof g_padded, "%s/padded", dir);
    cr_assert(pl_fixture_write_hf(plain, g_plain, NULL));
    cr_assert(pl_fixture_write_hf(padded, g_padded, NULL));
    pl_model_free(plain);
    pl_model_free(padded);
}

static pl_engine *engine_for(const char *model, const char *tokenizer) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = model;
    c.tokenizer_path = tokenizer;
    c.backend = PL_BACKEND_REF;
    c.kv_dtype = PL_DTYPE_F32;
    c.block_size = 4;
    c.max_num_blocks = 256;
    c.max_model_len = 64;
    c.max_num_seqs = 16;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_create(&c, &e), PL_OK, "%s: %s", model, pl_last_error());
    return e;
}

/* One sample's output: ids and (when asked) logprobs, prompt logprobs on sample 0. */
typedef struct sample_out {
    int32_t ids[MAX_OUT];
    int n;
    pl_token_logprobs lp[MAX_OUT], plp[32];
    pl_logprob tops[MAX_OUT][PL_MAX_LOGPROBS], ptops[32][PL_MAX_LOGPROBS];
    int n_plp;
} sample_out;

static void copy_lp(pl_token_logprobs *dst, pl_logprob *tops, const pl_token_logprobs *src) {
    *dst = *src;
    memcpy(tops, src->top, (size_t)src->n_top * sizeof *tops);
    dst->top = NULL;
}

/* Runs N_PROMPTS random prompts (ids in [3, REAL)) with sp; out[prompt * n + sample]. */
static void run(pl_engine *e, const pl_sampling_params *sp, sample_out *out) {
    pl_test_rng r;
    pl_test_rng_seed(&r, 99);
    pl_request_id ids[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++) {
        int32_t p[12];
        int n = 4 + i * 2;
        p[0] = 1;
        for (int k = 1; k < n; k++) p[k] = 3 + (int32_t)pl_test_rng_below(&r, REAL - 3);
        cr_assert_eq(pl_engine_submit_tokens(e, p, (size_t)n, sp, &ids[i]), PL_OK, "%s",
                     pl_last_error());
    }
    int done = 0, n = sp->n;
    while (done < N_PROMPTS * n) {
        pl_step_result res;
        cr_assert_eq(pl_engine_step(e, &res), PL_OK, "step: %s", pl_last_error());
        for (size_t f = 0; f < res.n_finished; f++) {
            const pl_completion *c = &res.finished[f];
            int i = 0;
            while (i < N_PROMPTS && ids[i] != c->id) i++;
            cr_assert_lt(i, N_PROMPTS);
            cr_assert_neq(c->finish_reason, PL_FINISH_ERROR);
            sample_out *o = &out[i * n + c->index];
            o->n = (int)c->n_output_ids;
            cr_assert_leq(o->n, MAX_OUT);
            memcpy(o->ids, c->output_ids, c->n_output_ids * sizeof(int32_t));
            for (size_t k = 0; k < c->n_logprobs; k++) copy_lp(&o->lp[k], o->tops[k], &c->logprobs[k]);
            o->n_plp = (int)c->n_prompt_logprobs;
            for (size_t k = 0; k < c->n_prompt_logprobs; k++)
                copy_lp(&o->plp[k], o->ptops[k], &c->prompt_logprobs[k]);
            done++;
        }
    }
}

static void same_lp(const char *what, int i, const pl_token_logprobs *a, const pl_logprob *at,
                    const pl_token_logprobs *b, const pl_logprob *bt) {
    cr_assert_eq(a->token, b->token, "%s %d: token %d vs %d", what, i, a->token, b->token);
    cr_assert(fabsf(a->logprob - b->logprob) <= 1e-4f, "%s %d: logprob %g vs %g", what, i,
              a->logprob, b->logprob);
    cr_assert_eq(a->rank, b->rank, "%s %d: rank %d vs %d", what, i, a->rank, b->rank);
    cr_assert_eq(a->n_top, b->n_top, "%s %d", what, i);
    for (int k = 0; k < a->n_top; k++) {
        cr_assert_lt(at[k].token, REAL, "%s %d: a padding id (%d) listed", what, i, at[k].token);
        cr_assert_eq(at[k].token, bt[k].token, "%s %d top %d: %d vs %d", what, i, k, at[k].token,
                     bt[k].token);
        cr_assert(fabsf(at[k].logprob - bt[k].logprob) <= 1e-4f, "%s %d top %d", what, i, k);
    }
}

/* The padded model with its tokenizer against the plain one, sample by sample. */
static void check_same(pl_sampling_params *sp) {
    sample_out *a = calloc(N_PROMPTS * 4, sizeof *a), *b = calloc(N_PROMPTS * 4, sizeof *b);
    pl_engine *padded = engine_for(g_padded, tok512_json());
    pl_engine *plain = engine_for(g_plain, tok512_json());
    pl_model_info info;
    cr_assert_eq(pl_engine_model_info(padded, &info), PL_OK);
    cr_assert_eq(info.vocab_size, PADDED);
    run(padded, sp, a);
    run(plain, sp, b);
    for (int i = 0; i < N_PROMPTS * sp->n; i++) {
        cr_assert_eq(a[i].n, b[i].n, "output %d: %d tokens vs %d", i, a[i].n, b[i].n);
        for (int k = 0; k < a[i].n; k++) {
            cr_assert_lt(a[i].ids[k], REAL, "output %d token %d: padding id %d drawn", i, k,
                         a[i].ids[k]);
            cr_assert_eq(a[i].ids[k], b[i].ids[k], "output %d token %d: %d vs %d", i, k,
                         a[i].ids[k], b[i].ids[k]);
            if (sp->logprobs >= 0) same_lp("logprobs", k, &a[i].lp[k], a[i].tops[k], &b[i].lp[k],
                                           b[i].tops[k]);
        }
        cr_assert_eq(a[i].n_plp, b[i].n_plp);
        for (int k = 0; k < a[i].n_plp; k++)
            same_lp("prompt logprobs", k, &a[i].plp[k], a[i].ptops[k], &b[i].plp[k], b[i].ptops[k]);
    }
    pl_engine_destroy(padded);
    pl_engine_destroy(plain);
    free(a);
    free(b);
}

static pl_sampling_params params(float temperature, int n) {
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.max_tokens = MAX_OUT;
    sp.ignore_eos = true;
    sp.temperature = temperature;
    sp.top_p = 1.0f;
    sp.n = n;
    pl_sampling_params_set(&sp, "seed", "1234");
    return sp;
}

TestSuite(vocab, .init = write_models);

/* The fixture is what the other cases rely on: without a tokenizer nothing is masked (every
 * id is a valid token id then), and greedy decoding picks padding ids. */
Test(vocab, padding_wins_unmasked) {
    pl_engine *e = engine_for(g_padded, NULL);
    pl_sampling_params sp = params(0.0f, 1);
    sample_out *o = calloc(N_PROMPTS, sizeof *o);
    run(e, &sp, o);
    int padding = 0;
    for (int i = 0; i < N_PROMPTS; i++)
        for (int k = 0; k < o[i].n; k++) padding += o[i].ids[k] >= REAL;
    cr_assert_gt(padding, N_PROMPTS * MAX_OUT / 2, "only %d padding ids drawn", padding);
    free(o);
    pl_engine_destroy(e);
    PL_ASSERT_NO_LEAKS();
}

Test(vocab, greedy_never_draws_padding) {
    pl_sampling_params sp = params(0.0f, 1);
    check_same(&sp);
    PL_ASSERT_NO_LEAKS();
}

Test(vocab, seeded_samples_never_draw_padding) {
    pl_sampling_params sp = params(1.0f, 3);
    check_same(&sp);
    sp = params(0.8f, 2);
    sp.top_k = 40;
    sp.top_p = 0.9f;
    sp.min_p = 0.01f;
    sp.repetition_penalty = 1.2f;
    check_same(&sp);
    PL_ASSERT_NO_LEAKS();
}

Test(vocab, logprobs_never_list_padding) {
    pl_sampling_params sp = params(1.0f, 2);
    sp.logprobs = 8;
    sp.prompt_logprobs = 8;
    check_same(&sp);
    PL_ASSERT_NO_LEAKS();
}
