/*
 * tests/e2e/test_e2e_quant.c - whole models with quantised weights: greedy decoding of a small
 * random model whose matrices are quantised (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, and a Q4_K_M-like
 * mix) runs through the runner on a fast backend (cpu here; with -DPL_QUANT_CUDA the CUDA
 * backend, emulated in suite 'cuda') and on ref with the SAME weights dequantised to f32
 * (util/quant.h's reference dequantiser). Both see the same prompts; three sequences decode
 * together, so decode runs the integer GEMV on several rows, and the prompts (70 rows in all)
 * take the integer GEMV too on a CPU with AVX-512 VNNI (with AVX2 alone the dequantising own
 * GEMM, from 8-24 rows: kernels/cpu/backend_cpu.c) and dequantise-to-f16 + cuBLAS on CUDA.
 *
 * What must hold (the model is pl_fixture_model's, vocabulary 64, untied):
 * 1. Free greedy runs: the fast backend picks ref's token at every step of every sequence up
 *    to its first step where ref's greedy choice is not clear (its top-1 logit ahead of the
 *    second by less than MARGIN); from there a tie broken by rounding may part the histories.
 * 2. Fed ref's tokens (teacher forcing, so the histories never part): at every step every
 *    logit is within LOGIT_TOL of ref's, and the token is ref's wherever ref's margin is at
 *    least MARGIN. At least half the steps must be such decisive steps and the model must
 *    not repeat itself, or the test proves nothing.
 *
 * Tolerances (max |logit - ref logit|; logits here of magnitude ~3-4):
 * - cpu: decode and the output projection round the activations to 8 bits per block of 32
 *   (at most 1/254 of a block's largest value each, tests/kernels/tolerances.h); measured
 *   worst 0.030 (Q5_K), 0.024-0.027 for the others, below 1e-4 with the rounding switched
 *   off (the own GEMM forced), so the error is the activations' alone. LOGIT_TOL 0.06.
 * - CUDA: decode keeps f32 activations; the prompts go through f16 weights and activations
 *   (dequantise-to-f16 + cuBLAS), whose rounding the KV cache carries on: measured worst
 *   7.9e-4. LOGIT_TOL 0.004.
 * - MARGIN 0.12, twice cpu's tolerance: where ref leads by more, errors within the tolerance
 *   on both logits cannot swap them.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/runner.h"
#include "model_fixtures.h"

#ifdef PL_QUANT_CUDA
#define FAST_NAME "cuda"
#define LOGIT_TOL 0.004f
#else
#define FAST_NAME "cpu"
#define LOGIT_TOL 0.06f
#endif
#define MARGIN 0.12f

/* the emulated CUDA backend runs each thread as a fiber: fewer steps (under ASan 3.5 min
 * at 40); natively (PL_QUANT_NATIVE, suite 'gpu') the cpu test's */
#if defined(PL_QUANT_CUDA) && !defined(PL_QUANT_NATIVE)
enum { N_SEQS = 3, N_GEN = 20, BLOCK = 16 };
#else
enum { N_SEQS = 3, N_GEN = 40, BLOCK = 16 };
#endif
static const int PROMPT_LEN[N_SEQS] = {20, 27, 23};

/* A random model whose every matrix row is whole K-quant super-blocks. */
static pl_model_config quant_config(pl_arch arch, int variant) {
    pl_model_config c;
    pl_fixture_family_config(arch, variant, &c);
    c.dim = 256, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 64, c.hidden_dim = 512;
    c.vocab_size = 64, c.n_layers = 2, c.max_seq_len = 128;
    return c;
}

/* A copy of f (f32) with matrices quantised to t (norms, biases f32). mix: Q4_K_M-like, the
 * output projection (when untied) and every layer's v and down projections in Q6_K. */
static pl_model *quantise(const pl_model *f, pl_wtype t, bool mix) {
    pl_model *m = NULL;
    cr_assert_eq(pl_model_alloc(&f->cfg, t, "quantised", &m), PL_OK, "%s", pl_last_error());
    size_t n_slots = pl_model_n_slots(&f->cfg);
    for (size_t s = 0; s < n_slots; s++) {
        int layer;
        pl_tensor_role role = pl_model_slot_role(&f->cfg, s, &layer);
        pl_weight *d = &m->w[s];
        const pl_weight *src = &f->w[s];
        if (!d->data || !pl_model_stores_tensor(&f->cfg, role)) continue;
        size_t n = (size_t)d->rows * (size_t)d->cols;
        cr_assert_eq(src->type, PL_WTYPE_F32);
        if (d->type == PL_WTYPE_F32) {
            memcpy((void *)d->data, src->data, n * sizeof(float));
            continue;
        }
        /* the mix's Q6_K tensors do not fit the space pl_model_alloc left for Q4_K: they get
         * buffers of their own (free_quantised) */
        pl_wtype tt = t;
        if (mix && (role == PL_T_OUTPUT || role == PL_T_ATTN_V || role == PL_T_FFN_DOWN))
            tt = PL_WTYPE_Q6_K;
        if (tt != d->type) {
            uint64_t bytes;
            cr_assert(pl_wtype_bytes(tt, n, &bytes));
            void *buf = malloc((size_t)bytes);
            cr_assert_not_null(buf);
            d->data = buf;
            d->type = tt;
        }
        pl_wtype_traits_of(tt)->from_f32(src->data, (void *)d->data, n);
    }
    return m;
}

/* Frees the buffers quantise gave the Q6_K tensors of a mix, then the model. */
static void free_quantised(pl_model *m, pl_wtype t) {
    size_t n_slots = pl_model_n_slots(&m->cfg);
    for (size_t s = 0; s < n_slots; s++) {
        int layer;
        pl_tensor_role role = pl_model_slot_role(&m->cfg, s, &layer);
        if (m->w[s].data && m->w[s].type != t && m->w[s].type != PL_WTYPE_F32 &&
            pl_model_stores_tensor(&m->cfg, role))
            free((void *)m->w[s].data);
    }
    pl_model_free(m);
}

/* The f32 model of q's values as the reference dequantiser reads them. */
static pl_model *dequantise(const pl_model *q) {
    pl_model *m = NULL;
    cr_assert_eq(pl_model_alloc(&q->cfg, PL_WTYPE_F32, "dequantised", &m), PL_OK, "%s",
                 pl_last_error());
    size_t n_slots = pl_model_n_slots(&q->cfg);
    for (size_t s = 0; s < n_slots; s++) {
        int layer;
        pl_tensor_role role = pl_model_slot_role(&q->cfg, s, &layer);
        if (!m->w[s].data || !pl_model_stores_tensor(&q->cfg, role)) continue;
        size_t n = (size_t)q->w[s].rows * (size_t)q->w[s].cols;
        pl_wtype_traits_of(q->w[s].type)->to_f32(q->w[s].data, (float *)m->w[s].data, n);
    }
    return m;
}

/* Greedy decoding of N_SEQS prompts together: one prefill step of all prompts, then N_GEN - 1
 * decode steps of one token each. tokens (N_SEQS, N_GEN), logits (N_SEQS, N_GEN, vocab). */
typedef struct run {
    int32_t tokens[N_SEQS][N_GEN];
    float *logits;
} run;

static int argmax(const float *v, int n, float *margin) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    float second = -INFINITY;
    for (int i = 0; i < n; i++)
        if (i != best && v[i] > second) second = v[i];
    if (margin) *margin = v[best] - second;
    return best;
}

/* forced (NULL: greedy) gives the tokens fed back instead of the run's own choices (teacher
 * forcing: the run then sees another run's history). */
static void greedy(const pl_model *m, pl_backend *be, int32_t prompts[N_SEQS][32],
                   const run *forced, run *out) {
    const int V = m->cfg.vocab_size;
    int mbps = (32 + N_GEN + BLOCK - 1) / BLOCK, total = 0;
    for (int s = 0; s < N_SEQS; s++) total += PROMPT_LEN[s];
    pl_runner_limits lim = {.max_tokens = total, .max_seqs = N_SEQS, .max_blocks_per_seq = mbps,
                            .n_blocks = N_SEQS * mbps, .block_size = BLOCK};
    pl_runner *r = NULL;
    cr_assert_eq(pl_runner_create(m, be, &lim, &r), PL_OK, "%s", pl_last_error());
    out->logits = malloc((size_t)N_SEQS * N_GEN * V * sizeof(float));
    float *step_logits = malloc((size_t)N_SEQS * V * sizeof(float));
    int32_t ids[128], pos[128], qstart[N_SEQS + 1], ctx[N_SEQS], rows[N_SEQS];
    int32_t tables[N_SEQS * 8];
    int64_t slots[128];
    for (int s = 0; s < N_SEQS; s++)
        for (int b = 0; b < mbps; b++) tables[s * mbps + b] = s * mbps + b;
    for (int step = 0; step < N_GEN; step++) {
        int n = 0, max_q = 0, max_ctx = 0;
        for (int s = 0; s < N_SEQS; s++) {
            qstart[s] = n;
            int first = step == 0 ? 0 : PROMPT_LEN[s] + step - 1;
            int count = step == 0 ? PROMPT_LEN[s] : 1;
            for (int i = 0; i < count; i++, n++) {
                int p = first + i;
                ids[n] = step == 0 ? prompts[s][i]
                         : forced  ? forced->tokens[s][step - 1]
                                   : out->tokens[s][step - 1];
                pos[n] = p;
                slots[n] = (int64_t)tables[s * mbps + p / BLOCK] * BLOCK + p % BLOCK;
            }
            ctx[s] = first + count;
            rows[s] = n - 1;
            max_q = count > max_q ? count : max_q;
            max_ctx = ctx[s] > max_ctx ? ctx[s] : max_ctx;
        }
        qstart[N_SEQS] = n;
        pl_runner_batch b = {.n_seqs = N_SEQS, .n_tokens = n, .token_ids = ids, .positions = pos,
                             .slots = slots, .query_start = qstart, .context_lens = ctx,
                             .block_tables = tables, .max_query_len = max_q,
                             .max_context_len = max_ctx, .sample_rows = rows,
                             .n_sample = N_SEQS};
        cr_assert_eq(pl_runner_run(r, &b, step_logits), PL_OK, "%s step %d: %s", be->ops->name,
                     step, pl_last_error());
        for (int s = 0; s < N_SEQS; s++) {
            float *l = out->logits + ((size_t)s * N_GEN + step) * V;
            memcpy(l, step_logits + (size_t)s * V, (size_t)V * sizeof(float));
            out->tokens[s][step] = argmax(l, V, NULL);
        }
    }
    free(step_logits);
    pl_runner_destroy(r);
}

static pl_backend *fast_backend(void) {
    pl_backend_options o = {.n_threads = 2, .kv_dtype = PL_DTYPE_F32};
    pl_backend *be = NULL;
#ifdef PL_QUANT_CUDA
    cr_assert_eq(pl_backend_cuda_create(&o, &be), PL_OK, "%s", pl_last_error());
#else
    cr_assert_eq(pl_backend_cpu_create(&o, &be), PL_OK, "%s", pl_last_error());
#endif
    return be;
}

static void check(pl_arch arch, int variant, pl_wtype t, bool mix) {
    pl_model_config c = quant_config(arch, variant);
    pl_model *f = pl_fixture_model(&c, 17 + (uint64_t)t);
    cr_assert_not_null(f);
    pl_model *q = quantise(f, t, mix);
    pl_model *d = dequantise(q);
    pl_test_rng rng;
    pl_test_rng_seed(&rng, 5 + (uint64_t)t);
    int32_t prompts[N_SEQS][32];
    for (int s = 0; s < N_SEQS; s++)
        for (int i = 0; i < PROMPT_LEN[s]; i++)
            prompts[s][i] = i == 0 ? 1 : 3 + (int32_t)pl_test_rng_below(&rng, (uint32_t)c.vocab_size - 3);

    pl_backend_options ro = {.n_threads = 1, .kv_dtype = PL_DTYPE_F32};
    pl_backend *ref = NULL, *fast = fast_backend();
    cr_assert_eq(pl_backend_ref_create(&ro, &ref), PL_OK);
    static run want, got, taught;
    greedy(d, ref, prompts, NULL, &want);
    greedy(q, fast, prompts, NULL, &got);
    greedy(q, fast, prompts, &want, &taught);
    const char *what = pl_wtype_name(t), *mix_s = mix ? " mix" : "";

    /* 1. free greedy runs: the same tokens up to each sequence's first near tie */
    const int V = c.vocab_size;
    int prefix = 0;
    for (int s = 0; s < N_SEQS; s++)
        for (int step = 0; step < N_GEN; step++) {
            float margin;
            argmax(want.logits + ((size_t)s * N_GEN + step) * V, V, &margin);
            if (margin < MARGIN) break; /* a near tie: the histories may part from here */
            cr_assert_eq(got.tokens[s][step], want.tokens[s][step],
                         "%s %s%s seq %d step %d: token %d, ref %d (margin %g)", FAST_NAME, what,
                         mix_s, s, step, got.tokens[s][step], want.tokens[s][step],
                         (double)margin);
            prefix++;
        }
    /* 2. fed ref's tokens, every step: logits within LOGIT_TOL, the same token where ref's
     * choice is clear */
    int decisive = 0, distinct = 0;
    float worst = 0;
    for (int s = 0; s < N_SEQS; s++)
        for (int step = 0; step < N_GEN; step++) {
            const float *w = want.logits + ((size_t)s * N_GEN + step) * V;
            const float *g = taught.logits + ((size_t)s * N_GEN + step) * V;
            float margin, err = 0;
            argmax(w, V, &margin);
            for (int i = 0; i < V; i++) err = fmaxf(err, fabsf(w[i] - g[i]));
            cr_assert(err <= LOGIT_TOL, "%s %s%s seq %d step %d: logits differ by %g > %g",
                      FAST_NAME, what, mix_s, s, step, (double)err, (double)LOGIT_TOL);
            worst = fmaxf(worst, err);
            bool seen = false;
            for (int k = 0; k < step && !seen; k++) seen = want.tokens[s][k] == want.tokens[s][step];
            distinct += !seen;
            if (margin < MARGIN) continue;
            cr_assert_eq(taught.tokens[s][step], want.tokens[s][step],
                         "%s %s%s seq %d step %d (fed ref's tokens): token %d, ref %d (margin %g)",
                         FAST_NAME, what, mix_s, s, step, taught.tokens[s][step],
                         want.tokens[s][step], (double)margin);
            decisive++;
        }
    cr_log_info("%s %s%s: greedy prefixes %d of %d steps; fed ref's tokens: %d decisive steps, "
                "%d distinct tokens, worst logit error %.4g",
                FAST_NAME, what, mix_s, prefix, N_SEQS * N_GEN, decisive, distinct,
                (double)worst);
    /* a test that compares nothing proves nothing */
    cr_assert(decisive >= N_SEQS * N_GEN / 2, "only %d decisive steps", decisive);
    cr_assert(distinct >= 6, "the model repeats itself (%d distinct tokens)", distinct);
    free(want.logits), free(got.logits), free(taught.logits);
    pl_backend_destroy(ref);
    pl_backend_destroy(fast);
    pl_model_free(d);
    free_quantised(q, t);
    pl_model_free(f);
}

#ifdef PL_QUANT_CUDA
#define SUITE cuda_quant
#else
#define SUITE e2e_quant
#endif

Test(SUITE, q8_0, .timeout = 240) { check(PL_ARCH_LLAMA, 1, PL_WTYPE_Q8_0, false); }
Test(SUITE, q4_0, .timeout = 240) { check(PL_ARCH_LLAMA, 1, PL_WTYPE_Q4_0, false); }
Test(SUITE, q4_k, .timeout = 240) { check(PL_ARCH_LLAMA, 1, PL_WTYPE_Q4_K, false); }
Test(SUITE, q5_k, .timeout = 240) { check(PL_ARCH_LLAMA, 1, PL_WTYPE_Q5_K, false); }
Test(SUITE, q6_k, .timeout = 240) { check(PL_ARCH_LLAMA, 1, PL_WTYPE_Q6_K, false); }
/* Q4_K_M's mix, on a tied Qwen2 (q/k/v biases): the embedding (and so the output projection)
 * Q4_K, wv and w2 Q6_K, the other matrices Q4_K */
Test(SUITE, q4_k_m_mix_qwen2, .timeout = 240) { check(PL_ARCH_QWEN2, 1, PL_WTYPE_Q4_K, true); }
