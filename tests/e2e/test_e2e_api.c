/*
 * tests/e2e/test_e2e_api.c - the calls a server needs, on a real engine: logprobs (of output
 * and prompt tokens, checked against a log-softmax of the dense reference's logits: the
 * model's raw distribution, whatever the sampling transforms), stream deltas carrying them,
 * detokenize, model facts, metrics of requests and samples, and the blocking wait.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dense_ref.h"
#include "e2e_util.h"
#include "model/model.h"
#include "pagellm.h"
#include "test_support.h"

#define TINY "dummy:tiny"

static pl_engine_config tiny_config(void) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = TINY;
    c.backend = PL_BACKEND_REF;
    c.kv_dtype = PL_DTYPE_F32; /* the dense reference keeps f32 K/V */
    c.block_size = 4;
    c.max_num_blocks = 96;
    c.max_model_len = 64;
    c.max_num_seqs = 8;
    return c;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- logprobs against the dense reference ----------------------------------------------- */

/* log-softmax (double) of the dense reference's logits at every position of tokens[0..n):
 * lp[pos * V + t] is log p(t | tokens[0..pos]). */
static double *dense_log_softmax(const pl_model *m, const int32_t *tokens, int n) {
    int V = m->cfg.vocab_size;
    dense_ref *d = dense_ref_create(m, n + 1);
    cr_assert_not_null(d);
    double *lp = calloc((size_t)n * V, sizeof *lp);
    for (int pos = 0; pos < n; pos++) {
        const float *x = dense_ref_forward(d, tokens[pos], pos);
        double mx = -INFINITY, sum = 0;
        for (int t = 0; t < V; t++) mx = x[t] > mx ? x[t] : mx;
        for (int t = 0; t < V; t++) sum += exp((double)x[t] - mx);
        for (int t = 0; t < V; t++) lp[(size_t)pos * V + t] = (double)x[t] - mx - log(sum);
    }
    dense_ref_free(d);
    return lp;
}

static bool close_to(double got, double want) {
    return fabs(got - want) <= 2e-4 + 1e-4 * fabs(want);
}

/* One position: the entry's token, logprob, rank and top list against the reference row. */
static void check_entry(const char *what, int pos, const pl_token_logprobs *e, int32_t token,
                        int k, const double *row, int V) {
    cr_assert_eq(e->token, token, "%s %d: token %d, want %d", what, pos, e->token, token);
    cr_assert(close_to(e->logprob, row[token]), "%s %d: logprob %.6f, reference %.6f", what, pos,
              e->logprob, row[token]);
    int above_hi = 0, above_lo = 0; /* tokens surely / possibly more likely */
    for (int t = 0; t < V; t++) {
        above_hi += row[t] > row[token] + 1e-4;
        above_lo += row[t] > row[token] - 1e-4;
    }
    cr_assert(e->rank >= 1 + above_hi && e->rank <= 1 + above_lo, "%s %d: rank %d, not in [%d, %d]",
              what, pos, e->rank, 1 + above_hi, 1 + above_lo);
    cr_assert_eq(e->n_top, k, "%s %d: %d alternatives, want %d", what, pos, e->n_top, k);
    /* the k largest reference values, in order; the engine's list must match them */
    double prev = INFINITY;
    for (int i = 0; i < k; i++) {
        double best = -INFINITY;
        for (int t = 0; t < V; t++)
            if (row[t] < prev && row[t] > best) best = row[t];
        const pl_logprob *a = &e->top[i];
        cr_assert(close_to(a->logprob, best), "%s %d: top[%d] %.6f, reference %.6f", what, pos,
                  i, a->logprob, best);
        cr_assert(close_to(row[a->token], a->logprob), "%s %d: top[%d] is token %d (%.6f), the "
                  "reference gives it %.6f", what, pos, i, a->token, a->logprob, row[a->token]);
        if (i > 0) cr_assert_geq(e->top[i - 1].logprob, a->logprob);
        prev = best;
    }
}

/* Runs one request with logprobs K and prompt_logprobs PK, streaming, and checks every
 * entry against the reference. The sampling here (temperature, penalties, top-k) changes
 * which token is drawn, never the logprobs reported for it. */
static void logprobs_case(const pl_sampling_params *sp, int K, int PK) {
    pl_engine_config c = tiny_config();
    pl_engine *e = e2e_engine(&c);
    pl_model *m;
    pl_model_load_options mo = {.dummy_seed = c.dummy_seed}; /* the engine's weights */
    cr_assert_eq(pl_model_load(TINY, &mo, &m), PL_OK, "%s", pl_last_error());
    int V = m->cfg.vocab_size;

    int32_t prompt[11] = {1, 45, 7, 300, 12, 12, 99, 401, 3, 250, 18};
    int n_prompt = 11;
    pl_request_id id;
    cr_assert_eq(pl_engine_submit_tokens(e, prompt, (size_t)n_prompt, sp, &id), PL_OK, "%s",
                 pl_last_error());
    /* stream: each delta's logprobs are those of its token */
    int32_t streamed[64];
    pl_token_logprobs seen[64];
    pl_logprob seen_top[64][PL_MAX_LOGPROBS];
    int n_streamed = 0;
    pl_completion done = {0};
    pl_token_logprobs *out_lp = NULL, *prompt_lp = NULL;
    pl_logprob *out_top = NULL, *prompt_top = NULL;
    while (pl_engine_has_pending_work(e)) {
        pl_step_result r;
        cr_assert_eq(pl_engine_step(e, &r), PL_OK, "%s", pl_last_error());
        for (size_t i = 0; i < r.n_deltas; i++) {
            const pl_stream_delta *d = &r.deltas[i];
            if (d->token < 0) continue;
            cr_assert_not_null(d->logprobs, "a delta without its token's logprobs");
            cr_assert_eq(d->logprobs->token, d->token);
            streamed[n_streamed] = d->token;
            seen[n_streamed] = *d->logprobs;
            if (d->logprobs->n_top > 0)
                memcpy(seen_top[n_streamed], d->logprobs->top,
                       (size_t)d->logprobs->n_top * sizeof(pl_logprob));
            n_streamed++;
        }
        for (size_t i = 0; i < r.n_finished; i++) {
            /* step results live until the next step: keep copies */
            done = r.finished[i];
            out_lp = malloc((done.n_logprobs + 1) * sizeof *out_lp);
            out_top = malloc((done.n_logprobs * (size_t)K + 1) * sizeof *out_top);
            for (size_t j = 0; j < done.n_logprobs; j++) {
                out_lp[j] = done.logprobs[j];
                if (K > 0)
                    memcpy(out_top + j * (size_t)K, done.logprobs[j].top,
                           (size_t)K * sizeof *out_top);
                out_lp[j].top = out_top + j * (size_t)K;
            }
            prompt_lp = malloc((done.n_prompt_logprobs + 1) * sizeof *prompt_lp);
            prompt_top = malloc((done.n_prompt_logprobs * (size_t)(PK > 0 ? PK : 0) + 1) *
                                sizeof *prompt_top);
            for (size_t j = 0; j < done.n_prompt_logprobs; j++) {
                prompt_lp[j] = done.prompt_logprobs[j];
                if (PK > 0)
                    memcpy(prompt_top + j * (size_t)PK, done.prompt_logprobs[j].top,
                           (size_t)PK * sizeof *prompt_top);
                prompt_lp[j].top = prompt_top + j * (size_t)(PK > 0 ? PK : 0);
            }
            int32_t *ids = malloc((done.n_output_ids + 1) * sizeof *ids);
            memcpy(ids, done.output_ids, done.n_output_ids * sizeof *ids);
            done.output_ids = ids;
        }
    }
    cr_assert_eq(done.id, id);
    int n_out = (int)done.n_output_ids;
    cr_assert_gt(n_out, 0);
    cr_assert_eq(n_streamed, n_out);
    cr_assert_eq(done.n_logprobs, (size_t)n_out, "one entry per output token");
    cr_assert_eq(done.n_prompt_logprobs, PK >= 0 ? (size_t)n_prompt - 1 : 0);
    cr_assert_eq(done.n_cached_prompt_ids, 0);

    int32_t all[64];
    memcpy(all, prompt, (size_t)n_prompt * sizeof *all);
    memcpy(all + n_prompt, done.output_ids, (size_t)n_out * sizeof *all);
    double *lp = dense_log_softmax(m, all, n_prompt + n_out - 1);
    for (int j = 0; j < n_out; j++) {
        const double *row = lp + (size_t)(n_prompt - 1 + j) * V;
        check_entry("output", j, &out_lp[j], done.output_ids[j], K, row, V);
        seen[j].top = seen_top[j];
        check_entry("streamed", j, &seen[j], streamed[j], K, row, V);
    }
    for (int p = 0; PK >= 0 && p < n_prompt - 1; p++)
        check_entry("prompt", p + 1, &prompt_lp[p], prompt[p + 1], PK, lp + (size_t)p * V, V);
    free(lp);
    free(out_lp);
    free(out_top);
    free(prompt_lp);
    free(prompt_top);
    free((void *)done.output_ids);
    pl_model_free(m);
    pl_engine_destroy(e);
}

Test(logprobs, greedy_output_and_prompt_match_the_reference_log_softmax) {
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = 9;
    sp.ignore_eos = true;
    sp.logprobs = 5;
    sp.prompt_logprobs = 3;
    logprobs_case(&sp, 5, 3);
    PL_ASSERT_NO_LEAKS();
}

/* Penalties, temperature and top-k shape the draw; the reported distribution stays the
 * model's raw one (vLLM's default). Drawn tokens then need not be the most likely. */
Test(logprobs, are_the_raw_distribution_under_penalties_and_temperature) {
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 1.7f;
    sp.top_k = 40;
    sp.repetition_penalty = 1.5f;
    sp.frequency_penalty = 1.0f;
    sp.has_seed = true;
    sp.seed = 11;
    sp.max_tokens = 12;
    sp.ignore_eos = true;
    sp.logprobs = 20;
    sp.prompt_logprobs = 0;
    logprobs_case(&sp, 20, 0);
    sp.logprobs = 0; /* the sampled token's own only */
    sp.prompt_logprobs = -1;
    logprobs_case(&sp, 0, -1);
    PL_ASSERT_NO_LEAKS();
}

/* Full-vocabulary prompt logits (sampling.prompt_logits = P): rows for prompt positions P ..
 * n_prompt - 1, each the reference's distribution there (compared as log-softmax, which is
 * what perplexity and KL divergence read), whether the prompt is computed in one step or in
 * chunks across steps, with or without prompt logprobs, and with a plain request of the same
 * prompt cached before it (the logits request computes it again). P at or past the prompt's
 * end gives none. */
Test(logprobs, prompt_logits_match_the_reference_at_every_position) {
    static const int from[] = {0, 6, 10, 11, 40};
    static const int budget[] = {4096, 3}; /* one step; chunks of 3 tokens */
    int32_t prompt[11] = {1, 45, 7, 300, 12, 12, 99, 401, 3, 250, 18};
    const int n_prompt = 11;
    pl_model *m;
    pl_engine_config c0 = tiny_config();
    pl_model_load_options mo = {.dummy_seed = c0.dummy_seed};
    cr_assert_eq(pl_model_load(TINY, &mo, &m), PL_OK, "%s", pl_last_error());
    const int V = m->cfg.vocab_size;
    double *lp = dense_log_softmax(m, prompt, n_prompt);
    for (int bi = 0; bi < 2; bi++) {
        pl_engine_config c = tiny_config();
        c.max_total_tokens = budget[bi];
        c.max_batch_size = 3;
        pl_engine *e = e2e_engine(&c);
        pl_sampling_params sp;
        pl_sampling_params_default(&sp);
        sp.temperature = 0.0f;
        sp.max_tokens = 2;
        cr_assert_eq(pl_engine_submit_tokens(e, prompt, n_prompt, &sp, NULL), PL_OK);
        pl_completion *cs;
        size_t n;
        cr_assert_eq(pl_engine_run(e, &cs, &n), PL_OK); /* the prompt is in the cache now */
        pl_completions_free(cs, n);
        for (int fi = 0; fi < 5; fi++) {
            sp.prompt_logits = from[fi];
            sp.prompt_logprobs = fi % 2 ? 2 : -1;
            cr_assert_eq(pl_engine_submit_tokens(e, prompt, n_prompt, &sp, NULL), PL_OK);
            cr_assert_eq(pl_engine_run(e, &cs, &n), PL_OK, "%s", pl_last_error());
            cr_assert_eq(n, 1);
            int rows = from[fi] < n_prompt ? n_prompt - from[fi] : 0;
            cr_assert_eq(cs[0].n_prompt_logits, (size_t)rows, "from %d", from[fi]);
            cr_assert_eq(cs[0].n_cached_prompt_ids, 0);
            cr_assert(rows > 0 ? cs[0].prompt_logits != NULL : cs[0].prompt_logits == NULL);
            cr_assert_eq(cs[0].n_prompt_logprobs, fi % 2 ? (size_t)n_prompt - 1 : 0);
            for (int i = 0; i < rows; i++) {
                const float *x = cs[0].prompt_logits + (size_t)i * V;
                const double *want = lp + (size_t)(from[fi] + i) * V;
                double mx = -INFINITY, sum = 0;
                for (int t = 0; t < V; t++) mx = x[t] > mx ? x[t] : mx;
                for (int t = 0; t < V; t++) sum += exp((double)x[t] - mx);
                for (int t = 0; t < V; t++)
                    cr_assert(close_to((double)x[t] - mx - log(sum), want[t]),
                              "budget %d from %d row %d token %d: %.6f, reference %.6f",
                              budget[bi], from[fi], i, t, (double)x[t] - mx - log(sum), want[t]);
            }
            /* the last row is the distribution the first output token was drawn from */
            if (rows > 0) {
                const float *x = cs[0].prompt_logits + (size_t)(rows - 1) * V;
                int best = 0;
                for (int t = 1; t < V; t++) best = x[t] > x[best] ? t : best;
                cr_assert_eq(cs[0].output_ids[0], best);
            }
            pl_completions_free(cs, n);
        }
        pl_engine_destroy(e);
    }
    free(lp);
    pl_model_free(m);
    PL_ASSERT_NO_LEAKS();
}

/* prompt_logits below -1 is refused at submit, naming the field, and nothing is queued. */
Test(logprobs, prompt_logits_out_of_range_is_refused_at_submit) {
    pl_engine_config c = tiny_config();
    pl_engine *e = e2e_engine(&c);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.prompt_logits = -2;
    int32_t prompt[3] = {1, 2, 3};
    cr_assert_eq(pl_engine_submit_tokens(e, prompt, 3, &sp, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "prompt_logits"), "%s", pl_last_error());
    cr_assert(!pl_engine_has_pending_work(e));
    pl_engine_destroy(e);
    PL_ASSERT_NO_LEAKS();
}

/* A prompt already in the prefix cache is computed again for a request that wants its
 * logprobs (cached tokens have no logits); others still hit the cache. Parallel samples each
 * get their own output logprobs; the prompt's come with sample 0. */
Test(logprobs, prompt_logprobs_bypass_the_prefix_cache_and_come_once) {
    pl_engine_config c = tiny_config();
    pl_engine *e = e2e_engine(&c);
    int32_t prompt[20];
    for (int i = 0; i < 20; i++) prompt[i] = 5 + 11 * i;
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = 3;
    sp.ignore_eos = true;
    pl_completion *cs;
    size_t n;
    cr_assert_eq(pl_engine_submit_tokens(e, prompt, 20, &sp, NULL), PL_OK);
    cr_assert_eq(pl_engine_run(e, &cs, &n), PL_OK);
    pl_completions_free(cs, n);

    cr_assert_eq(pl_engine_submit_tokens(e, prompt, 20, &sp, NULL), PL_OK);
    sp.prompt_logprobs = 2;
    sp.logprobs = 1;
    sp.n = 2;
    sp.temperature = 0.8f;
    cr_assert_eq(pl_engine_submit_tokens(e, prompt, 20, &sp, NULL), PL_OK);
    cr_assert_eq(pl_engine_run(e, &cs, &n), PL_OK, "%s", pl_last_error());
    cr_assert_eq(n, 3);
    cr_assert_gt(cs[0].n_cached_prompt_ids, 0, "a plain request still reads the cache");
    cr_assert_null(cs[0].logprobs);
    cr_assert_null(cs[0].prompt_logprobs);
    cr_assert_eq(cs[1].index, 0);
    cr_assert_eq(cs[1].n_cached_prompt_ids, 0);
    cr_assert_eq(cs[1].n_prompt_logprobs, 19);
    for (size_t i = 0; i < 19; i++) {
        cr_assert_eq(cs[1].prompt_logprobs[i].token, prompt[i + 1]);
        cr_assert_eq(cs[1].prompt_logprobs[i].n_top, 2);
        cr_assert_leq(cs[1].prompt_logprobs[i].logprob, 0.0f);
    }
    cr_assert_eq(cs[2].index, 1);
    cr_assert_null(cs[2].prompt_logprobs, "the prompt's logprobs come once, with sample 0");
    for (size_t s = 1; s <= 2; s++) {
        cr_assert_eq(cs[s].n_logprobs, cs[s].n_output_ids);
        for (size_t i = 0; i < cs[s].n_logprobs; i++)
            cr_assert_eq(cs[s].logprobs[i].token, cs[s].output_ids[i]);
    }
    pl_completions_free(cs, n);
    pl_engine_destroy(e);
    PL_ASSERT_NO_LEAKS();
}

/* ---- model facts, metrics ---------------------------------------------------------------- */

Test(api, model_info_states_the_model_and_the_pool) {
    pl_engine_config c = tiny_config();
    c.max_num_seqs = 4; /* alone: the batch follows it */
    pl_engine *e = e2e_engine(&c);
    pl_model_config mc;
    cr_assert_eq(pl_model_dummy_config("tiny", &mc), PL_OK);
    pl_model_info info;
    memset(&info, 0xEE, sizeof info);
    cr_assert_eq(pl_engine_model_info(e, &info), PL_OK, "%s", pl_last_error());
    cr_assert_eq(info.struct_size, sizeof info);
    cr_assert_str_eq(info.name, TINY);
    cr_assert_str_eq(info.architecture, "llama");
    cr_assert_eq(info.vocab_size, mc.vocab_size);
    cr_assert_eq(info.bos_id, mc.bos_id);
    cr_assert_eq(info.eos_id, mc.n_eos > 0 ? mc.eos_ids[0] : -1);
    cr_assert_eq(info.eot_id, -1);
    cr_assert_eq(info.context_length, mc.max_seq_len);
    cr_assert_eq(info.max_model_len, 64);
    cr_assert_eq(info.n_layers, mc.n_layers);
    cr_assert_eq(info.head_dim, mc.head_dim);
    cr_assert_eq(info.kv_dtype, PL_DTYPE_F32);
    cr_assert_eq(info.kv_bytes_per_token,
                 2u * (size_t)mc.n_layers * (size_t)mc.n_kv_heads * (size_t)mc.head_dim * 4u);
    cr_assert_eq(info.block_size, 4);
    cr_assert_eq(info.kv_blocks, 96);
    cr_assert_eq(info.kv_tokens, 384);
    cr_assert_float_eq(info.max_concurrency, 384.0 / 64.0, 1e-12);
    cr_assert_eq(info.max_batch_size, 4);
    cr_assert_eq(info.max_num_seqs, 4);
    uint64_t qd = (uint64_t)mc.n_heads * mc.head_dim, kvd = (uint64_t)mc.n_kv_heads * mc.head_dim;
    uint64_t per_layer = 2ull * mc.dim + qd * mc.dim + 2 * kvd * mc.dim + qd * mc.dim +
                         3ull * mc.dim * mc.hidden_dim;
    uint64_t want = (uint64_t)mc.vocab_size * mc.dim * (mc.tied_embeddings ? 1 : 2) +
                    (uint64_t)mc.n_layers * per_layer + (uint64_t)mc.dim;
    cr_assert_eq(info.n_params, want, "%llu parameters, want %llu",
                 (unsigned long long)info.n_params, (unsigned long long)want);
    cr_assert_geq(info.weight_bytes, info.n_params * 2);
    /* a dense model: no experts, every parameter active */
    cr_assert(info.n_experts == 0 && info.n_experts_used == 0);
    cr_assert_eq(info.n_active_params, info.n_params);
    /* the capacity figure agrees with pl_engine_capacity for full-length requests */
    size_t cap;
    cr_assert_eq(pl_engine_capacity(e, 63, 1, &cap), PL_OK);
    cr_assert_eq((double)cap, floor(info.max_concurrency));
    cr_assert_eq(pl_engine_model_info(NULL, &info), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_engine_model_info(e, NULL), PL_OK);
    pl_engine_destroy(e);
}

/* requests_finished counted samples (8 requests, one with n = 2, gave 9). */
Test(api, metrics_count_requests_and_samples_apart) {
    pl_engine_config c = tiny_config();
    pl_engine *e = e2e_engine(&c);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.max_tokens = 4;
    sp.ignore_eos = true;
    int32_t p[] = {1, 2, 3};
    for (int i = 0; i < 8; i++) {
        sp.n = i == 3 ? 2 : 1;
        cr_assert_eq(pl_engine_submit_tokens(e, p, 3, &sp, NULL), PL_OK, "%s", pl_last_error());
    }
    pl_completion *cs;
    size_t n;
    cr_assert_eq(pl_engine_run(e, &cs, &n), PL_OK);
    cr_assert_eq(n, 9);
    pl_completions_free(cs, n);
    pl_metrics m;
    pl_engine_metrics(e, &m);
    cr_assert_eq(m.requests_finished, 8);
    cr_assert_eq(m.samples_finished, 9);
    cr_assert_eq(m.output_tokens, 36);
    cr_assert_eq(m.prompt_tokens, 24, "once per request");
    pl_engine_destroy(e);
}

/* Token counters move with every step, as vLLM's prompt_tokens_total and
 * generation_tokens_total do: a dashboard sees tokens/s while requests run, not a burst when
 * they finish. A prompt counts when its request has its first output token; a request aborted
 * before that adds nothing. */
Test(api, token_counters_grow_every_step) {
    pl_engine_config c = tiny_config();
    pl_engine *e = e2e_engine(&c);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.max_tokens = 6;
    sp.ignore_eos = true;
    int32_t p[] = {1, 2, 3, 4, 5};
    for (int i = 0; i < 3; i++) {
        sp.n = i == 2 ? 2 : 1;
        cr_assert_eq(pl_engine_submit_tokens(e, p, 5, &sp, NULL), PL_OK, "%s", pl_last_error());
    }
    pl_step_result r;
    uint64_t out = 0;
    for (int step = 1; step <= 3; step++) {
        cr_assert_eq(pl_engine_step(e, &r), PL_OK);
        out += 4; /* four samples, one token each, every step (the prefill step draws one) */
        pl_metrics m;
        pl_engine_metrics(e, &m);
        cr_assert_eq(m.output_tokens, out, "step %d: %llu output tokens counted, %llu made", step,
                     (unsigned long long)m.output_tokens, (unsigned long long)out);
        cr_assert_eq(m.prompt_tokens, 15, "step %d: the prompts once each", step);
        cr_assert_eq(m.requests_finished, 0);
    }
    int32_t q[] = {1, 9};
    pl_request_id id;
    cr_assert_eq(pl_engine_submit_tokens(e, q, 2, &sp, &id), PL_OK);
    cr_assert_eq(pl_engine_abort(e, id), PL_OK);
    pl_completion *cs;
    size_t n;
    cr_assert_eq(pl_engine_run(e, &cs, &n), PL_OK);
    pl_completions_free(cs, n);
    pl_metrics m;
    pl_engine_metrics(e, &m);
    cr_assert_eq(m.output_tokens, 24);
    cr_assert_eq(m.prompt_tokens, 15, "an aborted request computed no prompt");
    pl_engine_destroy(e);
}

/* ---- detokenize -------------------------------------------------------------------------- */

Test(api, detokenize_inverts_tokenize) {
    char model[512], tok[512];
    if (!pl_test_models_dir() || !pl_test_model_path("stories260K.bin", model, sizeof model) ||
        !pl_test_model_path("tok512.model", tok, sizeof tok))
        cr_skip_test("PAGELLM_TEST_MODELS unset: no tokenizer");
    pl_engine_config c = tiny_config();
    c.model_path = model;
    c.tokenizer_path = tok;
    c.max_model_len = 0;
    pl_engine *e = e2e_engine(&c);
    const char *texts[] = {"Once upon a time", "Lily saw a big red ball. She was happy!",
                           "caf\xc3\xa9 \xe2\x9c\x93"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int32_t *ids;
        size_t n;
        cr_assert_eq(pl_engine_tokenize(e, texts[i], &ids, &n), PL_OK, "%s", pl_last_error());
        char *text;
        size_t len = 0;
        cr_assert_eq(pl_engine_detokenize(e, ids, n, &text, &len), PL_OK, "%s", pl_last_error());
        cr_assert_str_eq(text, texts[i], "BOS gives nothing, the leading space is dropped");
        cr_assert_eq(len, strlen(texts[i]));
        pl_free_text(text);
        pl_free_ids(ids);
    }
    char *text;
    cr_assert_eq(pl_engine_detokenize(e, NULL, 0, &text, NULL), PL_OK);
    cr_assert_str_eq(text, "");
    pl_free_text(text);
    int32_t bad[] = {1, 600};
    cr_assert_eq(pl_engine_detokenize(e, bad, 2, &text, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "index 1"), "%s", pl_last_error());
    cr_assert_eq(pl_engine_detokenize(e, bad, 1, NULL, NULL), PL_ERR_INVALID_ARGUMENT);
    pl_engine_destroy(e);

    c = tiny_config();
    e = e2e_engine(&c);
    cr_assert_eq(pl_engine_detokenize(e, bad, 1, &text, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "no tokenizer"), "%s", pl_last_error());
    pl_engine_destroy(e);
    PL_ASSERT_NO_LEAKS();
}

/* ---- the blocking wait ------------------------------------------------------------------- */

typedef struct delayed {
    pl_engine *e;
    double delay_s;
    bool wake_only;
} delayed;

static void *submit_later(void *p) {
    delayed *d = p;
    struct timespec ts = {0, (long)(d->delay_s * 1e9)};
    nanosleep(&ts, NULL);
    if (d->wake_only) {
        pl_engine_wake(d->e);
    } else {
        int32_t ids[] = {1, 2};
        pl_sampling_params sp;
        pl_sampling_params_default(&sp);
        sp.max_tokens = 4;
        if (pl_engine_submit_tokens(d->e, ids, 2, &sp, NULL) != PL_OK) abort();
    }
    return NULL;
}

Test(wait, returns_when_work_arrives_or_the_timeout_passes) {
    pl_engine_config c = tiny_config();
    pl_engine *e = e2e_engine(&c);
    bool work = true;
    double t0 = now_s();
    cr_assert_eq(pl_engine_wait(e, 0, &work), PL_OK);
    cr_assert(!work);
    cr_assert_eq(pl_engine_wait(e, 0.1, &work), PL_OK);
    cr_assert(!work);
    cr_assert_geq(now_s() - t0, 0.09, "a timed wait on an idle engine sleeps its time");

    /* a submit from another thread ends a long wait at once */
    pthread_t th;
    delayed d = {e, 0.05, false};
    pthread_create(&th, NULL, submit_later, &d);
    t0 = now_s();
    cr_assert_eq(pl_engine_wait(e, 30.0, &work), PL_OK);
    double waited = now_s() - t0;
    pthread_join(th, NULL);
    cr_assert(work);
    cr_assert_lt(waited, 10.0, "woke after %.3f s", waited);
    /* work pending: no sleep */
    cr_assert_eq(pl_engine_wait(e, 30.0, &work), PL_OK);
    cr_assert(work);
    pl_completion *cs;
    size_t n;
    cr_assert_eq(pl_engine_run(e, &cs, &n), PL_OK);
    pl_completions_free(cs, n);
    cr_assert_eq(pl_engine_wait(e, 0, &work), PL_OK);
    cr_assert(!work);

    /* wake ends a wait with no timeout; a wake before the wait is not lost */
    d = (delayed){e, 0.05, true};
    pthread_create(&th, NULL, submit_later, &d);
    cr_assert_eq(pl_engine_wait(e, -1, &work), PL_OK);
    pthread_join(th, NULL);
    cr_assert(!work);
    pl_engine_wake(e);
    t0 = now_s();
    cr_assert_eq(pl_engine_wait(e, 30.0, NULL), PL_OK);
    cr_assert_lt(now_s() - t0, 10.0);

    cr_assert_eq(pl_engine_wait(e, NAN, &work), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_engine_wait(NULL, 1, &work), PL_ERR_INVALID_ARGUMENT);
    pl_engine_wake(NULL);
    pl_engine_destroy(e);
}

/* ---- latency histograms, finish reasons, prefix-cache counts, occupancy ------------------ */

/* Every histogram counts what its definition says, from the completions themselves: TTFT and
 * E2E once per sample, TPOT per sample with 2+ tokens, ITL per token after a sample's first,
 * queue time once per request; the cumulative counts ascend to the total and the sums are the
 * completions' own timings. */
Test(api, latency_histograms_count_samples_tokens_and_requests) {
    pl_engine_config c = tiny_config();
    pl_engine *e = e2e_engine(&c);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.ignore_eos = true;
    int32_t p[] = {1, 2, 3};
    const int max_tokens[] = {1, 3, 5, 7};
    for (int i = 0; i < 4; i++) {
        sp.max_tokens = max_tokens[i];
        sp.n = i == 2 ? 3 : 1;
        cr_assert_eq(pl_engine_submit_tokens(e, p, 3, &sp, NULL), PL_OK, "%s", pl_last_error());
    }
    pl_completion *cs;
    size_t n;
    cr_assert_eq(pl_engine_run(e, &cs, &n), PL_OK);
    cr_assert_eq(n, 6);
    uint64_t tokens_after_first = 0, multi = 0;
    double ttft_sum = 0, e2e_sum = 0;
    for (size_t i = 0; i < n; i++) {
        tokens_after_first += cs[i].n_output_ids - 1;
        multi += cs[i].n_output_ids > 1;
        ttft_sum += cs[i].ttft_s;
        e2e_sum += cs[i].total_s;
    }
    const double bounds[] = {1e-7, 1e-3, 0.5, 1e6};
    uint64_t counts[4], total;
    double sum;
    const struct { pl_latency kind; uint64_t want; } kinds[] = {
        {PL_LATENCY_TTFT, 6}, {PL_LATENCY_E2E, 6}, {PL_LATENCY_TPOT, multi},
        {PL_LATENCY_ITL, tokens_after_first}, {PL_LATENCY_QUEUE, 4}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        cr_assert_eq(pl_engine_latency_histogram(e, kinds[k].kind, bounds, 4, counts, &total, &sum),
                     PL_OK, "%s", pl_last_error());
        cr_assert_eq(total, kinds[k].want, "kind %d: %llu observations, expected %llu",
                     (int)kinds[k].kind, (unsigned long long)total,
                     (unsigned long long)kinds[k].want);
        cr_assert_eq(counts[0], 0, "nothing takes 0.1 us");
        cr_assert_eq(counts[3], total, "everything within 11 days");
        cr_assert(counts[1] <= counts[2] && counts[2] <= counts[3]);
        cr_assert_geq(sum, 0);
    }
    cr_assert_eq(pl_engine_latency_histogram(e, PL_LATENCY_TTFT, NULL, 0, NULL, &total, &sum),
                 PL_OK);
    cr_assert_float_eq(sum, ttft_sum, 1e-9 + 1e-9 * ttft_sum);
    cr_assert_eq(pl_engine_latency_histogram(e, PL_LATENCY_E2E, NULL, 0, NULL, NULL, &sum), PL_OK);
    cr_assert_float_eq(sum, e2e_sum, 1e-9 + 1e-9 * e2e_sum);
    pl_completions_free(cs, n);

    const double unsorted[] = {0.1, 0.1};
    cr_assert_eq(pl_engine_latency_histogram(e, PL_LATENCY_TTFT, unsorted, 2, counts, NULL, NULL),
                 PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "bounds[1]"), "%s", pl_last_error());
    const double nan_bound[] = {NAN};
    cr_assert_eq(pl_engine_latency_histogram(e, PL_LATENCY_TTFT, nan_bound, 1, counts, NULL, NULL),
                 PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_engine_latency_histogram(e, (pl_latency)99, NULL, 0, NULL, NULL, NULL),
                 PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_engine_latency_histogram(e, PL_LATENCY_TTFT, bounds, 4, NULL, NULL, NULL),
                 PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_engine_latency_histogram(NULL, PL_LATENCY_TTFT, NULL, 0, NULL, NULL, NULL),
                 PL_ERR_INVALID_ARGUMENT);
    pl_engine_destroy(e);
}

/* A bound sits between two known observations: the histogram puts each on its side. */
Test(api, latency_histogram_buckets_split_at_the_bound) {
    pl_engine_config c = tiny_config();
    pl_engine *e = e2e_engine(&c);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.ignore_eos = true;
    sp.max_tokens = 2;
    int32_t p[] = {1, 2, 3};
    cr_assert_eq(pl_engine_submit_tokens(e, p, 3, &sp, NULL), PL_OK);
    pl_completion *cs;
    size_t n;
    cr_assert_eq(pl_engine_run(e, &cs, &n), PL_OK);
    double t = cs[0].total_s;
    pl_completions_free(cs, n);
    double bounds[] = {t * 0.97, t * 1.03};
    uint64_t counts[2], total;
    cr_assert_eq(pl_engine_latency_histogram(e, PL_LATENCY_E2E, bounds, 2, counts, &total, NULL),
                 PL_OK);
    cr_assert_eq(total, 1);
    cr_assert_eq(counts[0], 0, "%.9f s is above %.9f", t, bounds[0]);
    cr_assert_eq(counts[1], 1, "%.9f s is below %.9f", t, bounds[1]);
    pl_engine_destroy(e);
}

Test(api, metrics_count_finish_reasons_and_prefix_cache_tokens) {
    pl_engine_config c = tiny_config();
    pl_engine *e = e2e_engine(&c);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.ignore_eos = true;
    sp.max_tokens = 3;
    int32_t p[] = {5, 6, 7, 8, 9, 10, 11, 12, 13}; /* two full blocks of 4 */
    pl_completion *cs;
    size_t n;
    for (int i = 0; i < 2; i++) { /* one after the other: the second finds the first's blocks */
        cr_assert_eq(pl_engine_submit_tokens(e, p, 9, &sp, NULL), PL_OK);
        cr_assert_eq(pl_engine_run(e, &cs, &n), PL_OK);
        pl_completions_free(cs, n);
    }
    pl_request_id id;
    sp.max_tokens = 30;
    cr_assert_eq(pl_engine_submit_tokens(e, p, 3, &sp, &id), PL_OK);
    cr_assert_eq(pl_engine_abort(e, id), PL_OK);
    cr_assert_eq(pl_engine_run(e, &cs, &n), PL_OK);
    pl_completions_free(cs, n);
    pl_metrics m;
    pl_engine_metrics(e, &m);
    cr_assert_eq(m.samples_by_reason[PL_FINISH_LENGTH], 2);
    cr_assert_eq(m.samples_by_reason[PL_FINISH_ABORT], 1);
    cr_assert_eq(m.samples_by_reason[PL_FINISH_STOP], 0);
    cr_assert_eq(m.samples_by_reason[PL_FINISH_ERROR], 0);
    cr_assert_eq(m.prefix_cache_hits, 8, "the second request found two blocks of 4");
    cr_assert_geq(m.prefix_cache_queries, 16);
    cr_assert_float_eq(m.prefix_cache_hit_rate,
                       (double)m.prefix_cache_hits / (double)m.prefix_cache_queries, 1e-12);
    pl_engine_destroy(e);
}

/* Occupancy, read from the submitting side: waiting includes what the intake holds, running
 * and the pool are as of the latest step, and all is 0 again when the work is done. */
Test(api, occupancy_follows_the_intake_and_the_steps) {
    pl_engine_config c = tiny_config();
    pl_engine *e = e2e_engine(&c);
    pl_occupancy o;
    pl_engine_occupancy(e, &o);
    cr_assert_eq(o.struct_size, sizeof o);
    cr_assert_eq(o.kv_blocks_total, 96, "the pool is known before the first step");
    cr_assert_eq(o.n_waiting + o.n_running + o.kv_blocks_used, 0);
    cr_assert_eq(o.max_waiting, c.max_waiting);
    cr_assert_eq(o.n_free_slots, c.max_num_seqs);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.ignore_eos = true;
    sp.max_tokens = 5;
    int32_t p[] = {1, 2, 3};
    for (int i = 0; i < 3; i++) cr_assert_eq(pl_engine_submit_tokens(e, p, 3, &sp, NULL), PL_OK);
    pl_engine_occupancy(e, &o);
    cr_assert_eq(o.n_waiting, 3);
    cr_assert_eq(o.n_waiting_new, 3);
    cr_assert_eq(o.n_running, 0);
    pl_step_result r;
    cr_assert_eq(pl_engine_step(e, &r), PL_OK);
    pl_engine_occupancy(e, &o);
    cr_assert_eq(o.n_waiting, 0);
    cr_assert_eq(o.n_running, 3);
    cr_assert_eq(o.n_free_slots, c.max_num_seqs - 3);
    cr_assert_gt(o.kv_blocks_used, 0);
    cr_assert_float_eq(o.kv_usage, (double)o.kv_blocks_used / 96.0, 1e-12);
    pl_completion *cs;
    size_t n;
    cr_assert_eq(pl_engine_run(e, &cs, &n), PL_OK);
    pl_completions_free(cs, n);
    pl_engine_occupancy(e, &o);
    cr_assert_eq(o.n_waiting + o.n_running + o.kv_blocks_used, 0);
    pl_engine_occupancy(NULL, &o);
    cr_assert_eq(o.kv_blocks_total, 0);
    pl_engine_occupancy(e, NULL);
    pl_engine_destroy(e);
}

/* ---- an empty prompt ------------------------------------------------------------------- */

static pl_engine *tiny_with_tokenizer(const char *tokenizer) {
    pl_engine_config c = tiny_config();
    c.tokenizer_path = tokenizer;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_create(&c, &e), PL_OK, "%s", pl_last_error());
    return e;
}

/* The greedy output of one request (submitted already) to completion. Its text, when the
 * prompt is BOS alone, starts a text: it is the output's decode (a leading space of the
 * first piece dropped), as llama2.c prints a story generated from BOS. */
static void run_one(pl_engine *e, int32_t *out, size_t *n_out, size_t *n_prompt) {
    pl_completion *c;
    size_t n;
    cr_assert_eq(pl_engine_run(e, &c, &n), PL_OK, "%s", pl_last_error());
    cr_assert_eq(n, 1);
    memcpy(out, c[0].output_ids, c[0].n_output_ids * sizeof *out);
    *n_out = c[0].n_output_ids;
    *n_prompt = c[0].n_prompt_ids;
    if (c[0].n_prompt_ids == 1 && c[0].prompt_ids[0] == 1) {
        char *text;
        cr_assert_eq(pl_engine_detokenize(e, c[0].output_ids, c[0].n_output_ids, &text, NULL),
                     PL_OK);
        cr_assert_str_eq(c[0].text, text, "the text after BOS alone is not a text's start");
        pl_free_text(text);
    }
    pl_completions_free(c, n);
}

/* llama2.c and vLLM generate from BOS alone when the prompt is empty: so does submit. Only an
 * empty token list (no BOS to add) is refused. */
Test(api, an_empty_prompt_generates_from_bos) {
    pl_engine *e = tiny_with_tokenizer(PL_TEST_DATA_DIR "/tok512_hf/tokenizer.json");
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = 12;
    int32_t a[16], b[16];
    size_t na, nb, pa, pb;
    cr_assert_eq(pl_engine_submit_request(e, "", &sp, NULL), PL_OK, "%s", pl_last_error());
    run_one(e, a, &na, &pa);
    const int32_t bos = 1;
    cr_assert_eq(pl_engine_submit_tokens(e, &bos, 1, &sp, NULL), PL_OK);
    run_one(e, b, &nb, &pb);
    cr_assert_eq(pa, 1, "the empty prompt became %zu tokens, not BOS alone", pa);
    cr_assert_eq(na, nb);
    cr_assert_arr_eq(a, b, na * sizeof *a, "\"\" and [BOS] generate differently");
    /* sampled replies to "" start a text too, whatever their first piece */
    pl_sampling_params hot = sp;
    hot.temperature = 1.0f;
    hot.top_p = 1.0f;
    hot.n = 8;
    cr_assert_eq(pl_sampling_params_set(&hot, "seed", "3"), PL_OK);
    cr_assert_eq(pl_engine_submit_request(e, "", &hot, NULL), PL_OK, "%s", pl_last_error());
    pl_completion *c;
    size_t n;
    cr_assert_eq(pl_engine_run(e, &c, &n), PL_OK, "%s", pl_last_error());
    int spaced = 0;
    for (size_t i = 0; i < n; i++) {
        char *text;
        cr_assert_eq(pl_engine_detokenize(e, c[i].output_ids, c[i].n_output_ids, &text, NULL),
                     PL_OK);
        cr_assert_str_eq(c[i].text, text, "sample %zu after BOS alone: not a text's start", i);
        const char *piece = pl_tokenizer_piece(pl_engine_tokenizer(e), c[i].output_ids[0]);
        spaced += !strncmp(piece, "\xe2\x96\x81", 3); /* a first piece "▁..." */
        pl_free_text(text);
    }
    cr_assert_gt(spaced, 0, "no sample began with a \"\xe2\x96\x81\" piece: nothing checked");
    pl_completions_free(c, n);
    /* token ids are used as given: an empty list has nothing to generate from */
    cr_assert_eq(pl_engine_submit_tokens(e, &bos, 0, &sp, NULL), PL_ERR_INVALID_ARGUMENT);
    pl_engine_destroy(e);

    /* a tokenizer that adds no BOS: "" is no tokens at all */
    const char *dir = pl_test_tmpdir();
    char path[512], link_to[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    snprintf(link_to, sizeof link_to, "%s/tok512_hf/tokenizer.json", PL_TEST_DATA_DIR);
    cr_assert_eq(symlink(link_to, path), 0);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"tokenizer_class\": \"LlamaTokenizerFast\", \"add_bos_token\": false, "
          "\"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}", f);
    fclose(f);
    e = tiny_with_tokenizer(dir);
    cr_assert_eq(pl_engine_submit_request(e, "", &sp, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "empty"), "%s", pl_last_error());
    cr_assert_eq(pl_engine_submit_request(e, "Once", &sp, NULL), PL_OK, "%s", pl_last_error());
    run_one(e, a, &na, &pa);
    pl_engine_destroy(e);
    PL_ASSERT_NO_LEAKS();
}
