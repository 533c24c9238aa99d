/*
 * tests/e2e/test_e2e_families.c - random-weight Llama (Llama 3 numerics), Mistral, Qwen2 and
 * Qwen3 models in Hugging Face format: the engine's greedy tokens on the ref and cpu backends
 * equal the dense reference's for 200 tokens per prompt, each prompt alone and all batched;
 * the features under test change the tokens (so the comparison would see them missing); the
 * EOS set of config.json + generation_config.json ends generation on any of its ids.
 *
 * What each family checks (shapes in pl_fixture_family_config):
 *   Llama  - GQA 6/2, theta 500000 with llama3 RoPE scaling, tied and untied, EOS list.
 *   Mistral- sliding_window read from config.json, here the whole context (256): the window
 *            inside the attention kernels is tested by mistral_window_* below.
 *   Qwen2  - q/k/v biases (add_bias after the grouped q/k/v product), tied and untied.
 *   Qwen3  - head_dim 14 with dim 40 and 4 heads (q is 56 wide), per-head q/k RMSNorm before
 *            RoPE (rmsnorm over n_tokens * n_heads rows).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dense_ref.h"
#include "families.h"
#include "model_fixtures.h"

static void check_family(const family_case *fc) {
    family_run f;
    family_setup(&f, fc, PL_DTYPE_AUTO, false);
    const pl_backend_kind backends[] = {PL_BACKEND_REF, PL_BACKEND_CPU};
    for (int b = 0; b < 2; b++) {
        family_check_engine(&f, backends[b], true);
        family_check_engine(&f, backends[b], false);
    }
    family_teardown(&f);
}

static void check_arch(pl_arch arch) {
    check_family(&(family_case){.arch = arch, .variant = 0, .seed = 11});
    check_family(&(family_case){.arch = arch, .variant = 1, .seed = 12});
    /* bf16 safetensors, kept bf16 in memory */
    check_family(&(family_case){.arch = arch, .variant = 1, .seed = 13, .stored = PL_DTYPE_BF16});
    PL_ASSERT_NO_LEAKS();
}

Test(families, llama3_matches_the_dense_reference, .timeout = 240) { check_arch(PL_ARCH_LLAMA); }
Test(families, mistral_matches_the_dense_reference, .timeout = 240) {
    check_arch(PL_ARCH_MISTRAL);
}
Test(families, qwen2_matches_the_dense_reference, .timeout = 240) { check_arch(PL_ARCH_QWEN2); }
Test(families, qwen3_matches_the_dense_reference, .timeout = 240) { check_arch(PL_ARCH_QWEN3); }
Test(families, mixtral_matches_the_dense_reference, .timeout = 240) {
    check_arch(PL_ARCH_MIXTRAL);
}
Test(families, qwen2_moe_matches_the_dense_reference, .timeout = 240) {
    check_arch(PL_ARCH_QWEN2_MOE);
}
Test(families, qwen3_moe_matches_the_dense_reference, .timeout = 240) {
    check_arch(PL_ARCH_QWEN3_MOE);
}
Test(families, gemma2_matches_the_dense_reference, .timeout = 240) {
    check_arch(PL_ARCH_GEMMA2);
}
Test(families, gemma3_matches_the_dense_reference, .timeout = 240) {
    check_arch(PL_ARCH_GEMMA3);
}
Test(families, phi3_matches_the_dense_reference, .timeout = 240) { check_arch(PL_ARCH_PHI3); }

// ----------------------------------------------------------------------------
// the features change the tokens

/* Greedy tokens of the dense reference on m (n_out after prompt). */
static void dense_tokens(const pl_model *m, const int32_t *prompt, int n_prompt, int n_out,
                         int32_t *out) {
    dense_ref *d = dense_ref_create(m, n_prompt + n_out);
    cr_assert(d);
    dense_ref_set_kv_dtype(d, PL_DTYPE_F32);
    cr_assert_eq(dense_ref_greedy(d, prompt, n_prompt, n_out, out), 0);
    dense_ref_free(d);
}

static bool same_tokens(const int32_t *a, const int32_t *b, int n) {
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* Were biases or q/k norms dropped by the engine, the comparison above would see it: the
 * dense reference without them (the same weights read as a Llama model) gives other tokens. */
Test(families, biases_and_qk_norms_change_the_tokens) {
    const pl_arch archs[] = {PL_ARCH_QWEN2, PL_ARCH_QWEN3};
    for (int a = 0; a < 2; a++) {
        family_run f;
        family_setup(&f, &(family_case){.arch = archs[a], .variant = 0, .seed = 11},
                     PL_DTYPE_AUTO, false);
        pl_model plain = *f.model; /* shallow: the dense reference only reads */
        plain.cfg.arch = PL_ARCH_LLAMA;
        int32_t *other = malloc(FAMILY_OUT * sizeof *other);
        dense_tokens(&plain, f.prompts.ids[0], f.prompts.len[0], FAMILY_OUT, other);
        cr_assert_not(same_tokens(other, f.want.ids[0], FAMILY_OUT),
                      "%s: the same tokens without its biases / q-k norms",
                      family_name(&f.fc));
        free(other);
        family_teardown(&f);
    }
    PL_ASSERT_NO_LEAKS();
}

// ----------------------------------------------------------------------------
// end of text

/* Llama 3's list: config.json says 2, generation_config.json [2, 5, 7]. Without ignore_eos
 * each prompt stops at the first output token of the set (included, finish reason stop), and
 * at least one stops on an id that only generation_config.json names. */
Test(families, eos_set_from_generation_config_ends_generation) {
    family_run f;
    family_setup(&f, &(family_case){.arch = PL_ARCH_LLAMA, .variant = 0, .seed = 11},
                 PL_DTYPE_AUTO, false);
    const pl_model_config *c = &f.model->cfg;
    cr_assert_eq(c->n_eos, 3);
    cr_assert(c->eos_ids[0] == 2 && c->eos_ids[1] == 5 && c->eos_ids[2] == 7);
    pl_engine_config ec;
    pl_engine_config_default(&ec);
    ec.model_path = f.dir;
    ec.backend = PL_BACKEND_CPU;
    ec.kv_dtype = PL_DTYPE_F32;
    ec.n_threads = 2;
    pl_engine *e = e2e_engine(&ec);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = FAMILY_OUT;
    e2e_outputs got;
    e2e_run(e, &f.prompts, &sp, false, &got);
    int stops_on_later_id = 0;
    for (int i = 0; i < FAMILY_PROMPTS; i++) {
        int k = 0;
        while (k < FAMILY_OUT && f.want.ids[i][k] != 2 && f.want.ids[i][k] != 5 &&
               f.want.ids[i][k] != 7)
            k++;
        int want_len = k < FAMILY_OUT ? k + 1 : FAMILY_OUT;
        cr_assert_eq(got.len[i], want_len, "prompt %d: %d tokens, want %d", i, got.len[i],
                     want_len);
        cr_assert(same_tokens(got.ids[i], f.want.ids[i], want_len), "prompt %d", i);
        cr_assert_eq(got.reason[i], k < FAMILY_OUT ? PL_FINISH_STOP : PL_FINISH_LENGTH);
        stops_on_later_id += k < FAMILY_OUT && f.want.ids[i][k] != 2;
    }
    cr_assert_gt(stops_on_later_id, 0, "no prompt stopped on 5 or 7: the test shows nothing");
    e2e_outputs_free(&got);
    pl_engine_destroy(e);
    family_teardown(&f);
    PL_ASSERT_NO_LEAKS();
}

// ----------------------------------------------------------------------------
// Mistral's window shorter than the sequences

/* The window matters: with 24 positions the dense reference's tokens differ from full
 * attention's, so mistral_window_* compares something the kernels must do. */
Test(families, mistral_window_changes_the_tokens) {
    family_run f, full;
    family_setup(&f, &(family_case){.arch = PL_ARCH_MISTRAL, .variant = 1, .seed = 21,
                                    .sliding_window = 24},
                 PL_DTYPE_AUTO, false);
    family_setup(&full, &(family_case){.arch = PL_ARCH_MISTRAL, .variant = 1, .seed = 21},
                 PL_DTYPE_AUTO, false);
    cr_assert_eq(f.model->cfg.sliding_window, 24, "config.json's sliding_window");
    for (int i = 0; i < FAMILY_PROMPTS; i++)
        cr_assert_not(same_tokens(f.want.ids[i], full.want.ids[i], FAMILY_OUT),
                      "prompt %d: a 24-token window gives the tokens of full attention", i);
    family_teardown(&f);
    family_teardown(&full);
    PL_ASSERT_NO_LEAKS();
}

/* A 24-token window over 200+ token sequences, prefill chunks and decode, alone and batched, on
 * ref and cpu, against the dense reference: the window reaches the attention kernels through
 * pl_attn_batch.sliding_window. */
Test(families, mistral_window_shorter_than_the_sequence, .timeout = 240) {
    check_family(&(family_case){.arch = PL_ARCH_MISTRAL, .variant = 1, .seed = 21,
                                .sliding_window = 24});
    PL_ASSERT_NO_LEAKS();
}

// ----------------------------------------------------------------------------
// model facts of a mixture of experts

/* The Mixtral fixture (tied): dim 32, 4 heads and 2 KV heads of 8, 4 experts of 40, 2 per
 * token, vocab 91, 2 layers. Per layer: norms 2 x 32, q 32x32, k and v 16x32, o 32x32,
 * router 4x32, experts 4 x 3 x 40x32 (2 of them active); the embedding once (tied), the
 * final norm. */
Test(families, model_info_counts_active_parameters) {
    family_run f;
    family_setup(&f, &(family_case){.arch = PL_ARCH_MIXTRAL, .variant = 0, .seed = 11},
                 PL_DTYPE_AUTO, false);
    pl_engine_config ec;
    pl_engine_config_default(&ec);
    ec.model_path = f.dir;
    ec.backend = PL_BACKEND_REF;
    pl_engine *e = e2e_engine(&ec);
    pl_model_info info;
    cr_assert_eq(pl_engine_model_info(e, &info), PL_OK);
    const uint64_t attn = 32 * 32 + 2 * 16 * 32 + 32 * 32, router = 4 * 32;
    const uint64_t expert = 3 * 40 * 32, embd = 91 * 32;
    cr_assert_str_eq(info.architecture, "mixtral");
    cr_assert_eq(info.n_experts, 4);
    cr_assert_eq(info.n_experts_used, 2);
    cr_assert_eq(info.n_params, embd + 2 * (2 * 32 + attn + router + 4 * expert) + 32);
    cr_assert_eq(info.n_active_params, embd + 2 * (2 * 32 + attn + router + 2 * expert) + 32);
    /* what a decode step reads: the products of every layer, 2 of the 4 experts, and the
     * output projection (the tied embedding, once) */
    cr_assert_eq(pl_engine_matmul_params(e), 2 * (attn + router + 2 * expert) + embd);
    cr_assert_eq(pl_engine_weight_bytes(e), 4 * pl_engine_matmul_params(e));
    pl_engine_destroy(e);
    family_teardown(&f);
    PL_ASSERT_NO_LEAKS();
}

// ----------------------------------------------------------------------------
// the new families' features change the tokens, ties, KV pressure

/* Greedy tokens of the dense reference on a shallow copy of m with cfg changed by `tweak`. */
static bool tokens_change(const family_run *f, void (*tweak)(pl_model *m)) {
    pl_model other = *f->model;
    pl_weight *w = malloc(pl_model_n_slots(&other.cfg) * sizeof *w);
    memcpy(w, f->model->w, pl_model_n_slots(&other.cfg) * sizeof *w);
    other.w = w;
    tweak(&other);
    int32_t *ids = malloc(FAMILY_OUT * sizeof *ids);
    bool changed = false;
    for (int i = 0; i < FAMILY_PROMPTS && !changed; i++) {
        dense_tokens(&other, f->prompts.ids[i], f->prompts.len[i], FAMILY_OUT, ids);
        changed = !same_tokens(ids, f->want.ids[i], FAMILY_OUT);
    }
    free(ids);
    free(w);
    return changed;
}

static void no_attn_cap(pl_model *m) { m->cfg.attn_softcap = 0.0f; }
static void no_window(pl_model *m) { m->cfg.sliding_window = 0; }
static void global_theta_everywhere(pl_model *m) { m->cfg.rope_theta_local = m->cfg.rope_theta; }
static void flip_norm_topk(pl_model *m) { m->cfg.norm_topk_prob = !m->cfg.norm_topk_prob; }
static void short_factors(pl_model *m) { m->cfg.rope_original_max_pos = m->cfg.max_seq_len; }
static void default_query_scale(pl_model *m) { m->cfg.query_pre_attn_scalar = 0.0f; }
static void no_shared_expert(pl_model *m) {
    /* its down projection zeroed: the shared expert then adds nothing */
    for (int l = 0; l < m->cfg.n_layers; l++) {
        pl_weight *w = &m->w[pl_model_slot(&m->cfg, PL_T_FFN_DOWN_SHEXP, l)];
        static float zeros[4096];
        cr_assert_leq((size_t)w->rows * w->cols, sizeof zeros / sizeof zeros[0]);
        w->data = zeros;
    }
}

/* Were any of these dropped by the engine, the family comparisons would see it: the dense
 * reference without each gives other tokens. */
Test(families, new_family_features_change_the_tokens, .timeout = 120) {
    const struct {
        pl_arch arch;
        void (*tweak)(pl_model *m);
        const char *what;
    } cases[] = {
        {PL_ARCH_GEMMA2, no_attn_cap, "the attention soft-cap"},
        {PL_ARCH_GEMMA2, no_window, "the 12-token window on even layers"},
        {PL_ARCH_GEMMA2, default_query_scale, "query_pre_attn_scalar"},
        {PL_ARCH_GEMMA3, no_window, "the 12-token window on local layers"},
        {PL_ARCH_GEMMA3, global_theta_everywhere, "the local layers' theta"},
        {PL_ARCH_QWEN3_MOE, flip_norm_topk, "norm_topk_prob"},
        {PL_ARCH_QWEN2_MOE, flip_norm_topk, "norm_topk_prob (off)"},
        {PL_ARCH_QWEN2_MOE, no_shared_expert, "the shared expert"},
        {PL_ARCH_PHI3, short_factors, "longrope's long factors"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        family_run f;
        family_setup(&f, &(family_case){.arch = cases[i].arch, .variant = 1, .seed = 12},
                     PL_DTYPE_AUTO, false);
        cr_assert(tokens_change(&f, cases[i].tweak), "%s: the same tokens without %s",
                  family_name(&f.fc), cases[i].what);
        family_teardown(&f);
    }
    PL_ASSERT_NO_LEAKS();
}

/* Experts 1, 4 and 6 tie at the top of every router: the lower index wins (1 and 4, as
 * torch.topk on the CPU). The engine on ref and cpu gives the dense reference's tokens, and
 * they are not the tokens of the same model with experts 4 and 6 swapped: a tie broken
 * the other way would be seen. */
static void swap_experts_4_and_6(pl_model *m) {
    static float buf[3][8 * 40 * 40];
    const pl_tensor_role roles[3] = {PL_T_FFN_GATE_EXPS, PL_T_FFN_UP_EXPS, PL_T_FFN_DOWN_EXPS};
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int k = 0; k < 3; k++) {
            pl_weight *w = &m->w[pl_model_slot(&m->cfg, roles[k], l)];
            size_t per = (size_t)w->rows / m->cfg.n_experts * w->cols;
            float *copy = l == 0 ? buf[k] : malloc((size_t)w->rows * w->cols * 4);
            cr_assert_leq((size_t)w->rows * w->cols, sizeof buf[0] / sizeof buf[0][0]);
            memcpy(copy, w->data, (size_t)w->rows * w->cols * 4);
            memcpy(copy + 4 * per, (const float *)w->data + 6 * per, per * 4);
            memcpy(copy + 6 * per, (const float *)w->data + 4 * per, per * 4);
            w->data = copy; /* layer > 0's copies leak into the test's lifetime: freed below */
        }
}

Test(families, router_ties_go_to_the_lower_expert, .timeout = 120) {
    family_run f;
    family_setup(&f, &(family_case){.arch = PL_ARCH_QWEN3_MOE, .variant = 1, .seed = 12,
                                    .router_tie = true},
                 PL_DTYPE_AUTO, false);
    const pl_backend_kind backends[] = {PL_BACKEND_REF, PL_BACKEND_CPU};
    for (int b = 0; b < 2; b++) family_check_engine(&f, backends[b], false);
    pl_model other = *f.model;
    size_t n = pl_model_n_slots(&other.cfg);
    pl_weight *w = malloc(n * sizeof *w);
    memcpy(w, f.model->w, n * sizeof *w);
    other.w = w;
    swap_experts_4_and_6(&other);
    int32_t *ids = malloc(FAMILY_OUT * sizeof *ids);
    bool changed = false;
    for (int i = 0; i < FAMILY_PROMPTS && !changed; i++) {
        dense_tokens(&other, f.prompts.ids[i], f.prompts.len[i], FAMILY_OUT, ids);
        changed = !same_tokens(ids, f.want.ids[i], FAMILY_OUT);
    }
    cr_assert(changed, "swapping the tied experts 4 and 6 changes nothing: the tie is not tested");
    for (int l = 1; l < other.cfg.n_layers; l++) {
        free((void *)other.w[pl_model_slot(&other.cfg, PL_T_FFN_GATE_EXPS, l)].data);
        free((void *)other.w[pl_model_slot(&other.cfg, PL_T_FFN_UP_EXPS, l)].data);
        free((void *)other.w[pl_model_slot(&other.cfg, PL_T_FFN_DOWN_EXPS, l)].data);
    }
    free(ids);
    free(w);
    family_teardown(&f);
    PL_ASSERT_NO_LEAKS();
}

/* A pool too small for the four prompts at once: preemptions and recomputation change no
 * token, for every family added (experts, Gemma's windows and soft-caps, Phi-3's longrope). */
Test(families, new_families_under_kv_pressure, .timeout = 240) {
    for (int a = PL_ARCH_MIXTRAL; a < PL_ARCH_COUNT; a++) {
        family_run f;
        family_setup(&f, &(family_case){.arch = (pl_arch)a, .variant = 1, .seed = 12},
                     PL_DTYPE_AUTO, false);
        family_check_engine_pool(&f, PL_BACKEND_CPU, 80);
        family_teardown(&f);
    }
    PL_ASSERT_NO_LEAKS();
}

/* Greedy tokens cannot show Gemma 2's final soft-cap (tanh is monotonic): its logprobs do.
 * The engine's logprob of each output token (greedy, 40 tokens) equals the dense reference's
 * log-softmax of capped logits, every capped logit is inside (-cap, cap), and without the cap
 * the reference's logprobs are elsewhere. */
Test(families, gemma2_final_softcap_in_the_logprobs, .timeout = 120) {
    family_run f;
    family_setup(&f, &(family_case){.arch = PL_ARCH_GEMMA2, .variant = 1, .seed = 12},
                 PL_DTYPE_AUTO, false);
    const int n_out = 40, n_prompt = f.prompts.len[0], V = f.model->cfg.vocab_size;
    const float cap = f.model->cfg.final_softcap;
    pl_engine_config ec;
    pl_engine_config_default(&ec);
    ec.model_path = f.dir;
    ec.backend = PL_BACKEND_CPU;
    ec.kv_dtype = PL_DTYPE_F32;
    ec.n_threads = 2;
    pl_engine *e = e2e_engine(&ec);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = n_out;
    sp.ignore_eos = true;
    sp.logprobs = 0;
    pl_request_id id;
    cr_assert_eq(pl_engine_submit_tokens(e, f.prompts.ids[0], (size_t)n_prompt, &sp, &id), PL_OK);
    pl_completion *c;
    size_t n;
    cr_assert_eq(pl_engine_run(e, &c, &n), PL_OK, "%s", pl_last_error());
    cr_assert_eq(n, 1);
    cr_assert_eq(c[0].n_logprobs, (size_t)n_out);
    pl_model uncapped = *f.model;
    uncapped.cfg.final_softcap = 0.0f;
    dense_ref *d = dense_ref_create(f.model, n_prompt + n_out);
    dense_ref *u = dense_ref_create(&uncapped, n_prompt + n_out);
    dense_ref_set_kv_dtype(d, PL_DTYPE_F32);
    dense_ref_set_kv_dtype(u, PL_DTYPE_F32);
    const float *lc = NULL, *lu = NULL;
    for (int j = 0; j < n_prompt; j++) {
        lc = dense_ref_forward(d, f.prompts.ids[0][j], j);
        lu = dense_ref_forward(u, f.prompts.ids[0][j], j);
    }
    double max_shift = 0;
    for (int k = 0; k < n_out; k++) {
        int32_t t = c[0].output_ids[k];
        cr_assert_eq(t, f.want.ids[0][k], "output %d", k);
        double zc = 0, zu = 0, mc = -INFINITY, mu = -INFINITY;
        for (int v = 0; v < V; v++) {
            cr_assert_lt(fabsf(lc[v]), cap, "a capped logit %g", (double)lc[v]);
            mc = lc[v] > mc ? lc[v] : mc;
            mu = lu[v] > mu ? lu[v] : mu;
        }
        for (int v = 0; v < V; v++) zc += exp(lc[v] - mc), zu += exp(lu[v] - mu);
        double want = lc[t] - mc - log(zc), without = lu[t] - mu - log(zu);
        cr_assert(fabs(c[0].logprobs[k].logprob - want) <= 2e-4 + 1e-4 * fabs(want),
                  "output %d: logprob %.6f, capped reference %.6f", k,
                  (double)c[0].logprobs[k].logprob, want);
        max_shift = fabs(want - without) > max_shift ? fabs(want - without) : max_shift;
        if (k + 1 < n_out) {
            lc = dense_ref_forward(d, t, n_prompt + k);
            lu = dense_ref_forward(u, t, n_prompt + k);
        }
    }
    cr_assert_gt(max_shift, 0.05, "the cap moves no logprob by more than %g", max_shift);
    dense_ref_free(d);
    dense_ref_free(u);
    pl_completions_free(c, n);
    pl_engine_destroy(e);
    family_teardown(&f);
    PL_ASSERT_NO_LEAKS();
}
