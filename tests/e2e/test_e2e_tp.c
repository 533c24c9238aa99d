/*
 * tests/e2e/test_e2e_tp.c - tensor parallelism in one process (distributed_backend threads,
 * the in-process reference whose collectives MPI matches bit for bit: tests/dist/): the same
 * outputs with the model split over 2 and 4 ranks as with one rank.
 *
 * Models: every family (Llama with GQA, Mistral with one KV head, so it is replicated on both
 * ranks, Qwen2's biases, Qwen3's q/k norms and wide heads), tied and untied, random weights
 * written as Hugging Face directories, with sizes that split (an odd vocabulary: the last
 * rank's rows are fewer). Checks:
 *   - greedy ids equal one rank's, alone and batched, with logprobs within 1e-4;
 *   - the runner's logits of a mixed prefill/decode batch within 1e-5 of one rank's, relative
 *     to the row's largest;
 *   - preemption (a tiny KV pool), chunked prefill (an 8-token budget), n > 1 with seeded
 *     sampling and prompt logprobs, an abort: the same completions;
 *   - 4 ranks with 2 KV heads (each kept by two ranks); a Q8_0 model split on its blocks;
 *   - every rank's all-reduce bytes are 2 x layers x dim x 4 per computed token;
 *   - splits that cannot be made are refused at create with the numbers;
 *   - a rank that dies fails the engine within the timeout, naming rank and collective.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e_util.h"
#include "engine/engine_internal.h"
#include "gguf/gguf.h"
#include "model_fixtures.h"
#include "util/timer.h"

#define OUT 40

static void write_model(const pl_model_config *c, uint64_t seed, char *dir, size_t cap) {
    pl_model *m = pl_fixture_family_model(c, seed);
    cr_assert(m);
    snprintf(dir, cap, "%s", pl_test_tmpdir());
    pl_fixture_hf_options o = {.dtype = PL_DTYPE_F32};
    cr_assert(pl_fixture_write_hf(m, dir, &o));
    pl_model_free(m);
}

static void base_config(pl_engine_config *ec, const char *dir, int tp) {
    pl_engine_config_default(ec);
    ec->model_path = dir;
    ec->kv_dtype = PL_DTYPE_F32;
    ec->block_size = 4;
    ec->max_num_blocks = 512;
    ec->max_total_tokens = 32;
    ec->n_threads = 1;
    ec->tensor_parallel_size = tp;
    ec->distributed_backend = PL_DIST_THREADS;
    ec->distributed_timeout = 5.0;
}

/* Every completion of a run (sorted by id, then index, as pl_engine_run returns them). */
typedef struct run_out {
    pl_completion *c;
    size_t n;
    pl_metrics m;
} run_out;

static void run(pl_engine *e, const e2e_prompts *p, const pl_sampling_params *sp, run_out *out) {
    for (int i = 0; i < p->n; i++) {
        pl_request_id id;
        cr_assert_eq(pl_engine_submit_tokens(e, p->ids[i], (size_t)p->len[i], sp, &id), PL_OK,
                     "%s", pl_last_error());
    }
    cr_assert_eq(pl_engine_run(e, &out->c, &out->n), PL_OK, "%s", pl_last_error());
    pl_engine_metrics(e, &out->m);
}

static void same_logprobs(const char *what, const pl_token_logprobs *a, const pl_token_logprobs *b,
                          size_t n) {
    for (size_t k = 0; k < n; k++) {
        cr_assert_eq(a[k].token, b[k].token, "%s: logprob %zu token", what, k);
        cr_assert(fabsf(a[k].logprob - b[k].logprob) <= 1e-4f, "%s: logprob %zu: %g vs %g",
                  what, k, (double)a[k].logprob, (double)b[k].logprob);
    }
}

/* Completions of the two runs: the same ids, reasons and (within 1e-4) logprobs. */
static void same_runs(const char *what, const run_out *a, const run_out *b) {
    cr_assert_eq(a->n, b->n, "%s: %zu vs %zu completions", what, a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        const pl_completion *x = &a->c[i], *y = &b->c[i];
        cr_assert_eq(x->index, y->index);
        cr_assert_eq(x->finish_reason, y->finish_reason, "%s: completion %zu: reason %d vs %d",
                     what, i, x->finish_reason, y->finish_reason);
        cr_assert_eq(x->n_output_ids, y->n_output_ids, "%s: completion %zu: %zu vs %zu tokens",
                     what, i, x->n_output_ids, y->n_output_ids);
        for (size_t k = 0; k < x->n_output_ids; k++)
            cr_assert_eq(x->output_ids[k], y->output_ids[k],
                         "%s: completion %zu differs at output %zu: %d vs %d", what, i, k,
                         x->output_ids[k], y->output_ids[k]);
        cr_assert_eq(x->n_logprobs, y->n_logprobs);
        same_logprobs(what, x->logprobs, y->logprobs, x->n_logprobs);
        cr_assert_eq(x->n_prompt_logprobs, y->n_prompt_logprobs);
        same_logprobs(what, x->prompt_logprobs, y->prompt_logprobs, x->n_prompt_logprobs);
    }
}

static void free_run(run_out *r) { pl_completions_free(r->c, r->n); }

/* One rank against tp ranks on the same config and prompts. */
static void compare(const char *what, const pl_engine_config *ec1, int tp, const e2e_prompts *p,
                    const pl_sampling_params *sp, run_out *out_tp) {
    pl_engine_config ec2 = *ec1;
    ec2.tensor_parallel_size = tp;
    pl_engine *e1 = e2e_engine(ec1), *e2 = e2e_engine(&ec2);
    pl_model_info info;
    pl_engine_model_info(e2, &info);
    cr_assert_eq(info.tensor_parallel_size, tp);
    cr_assert(strstr(info.distributed, "threads: "), "%s", info.distributed);
    run_out a, b;
    run(e1, p, sp, &a);
    run(e2, p, sp, &b);
    same_runs(what, &a, &b);
    cr_assert_eq(pl_engine_health(e2), PL_OK);
    free_run(&a);
    if (out_tp) *out_tp = b;
    else free_run(&b);
    pl_engine_destroy(e1);
    pl_engine_destroy(e2);
}

static void greedy(pl_sampling_params *sp) {
    pl_sampling_params_default(sp);
    sp->temperature = 0.0f;
    sp->max_tokens = OUT;
    sp->ignore_eos = true;
    sp->logprobs = 3;
}

static void family(pl_arch arch) {
    for (int variant = 0; variant < 2; variant++) {
        pl_model_config c;
        pl_fixture_tp_config(arch, variant, &c);
        char dir[512], what[96];
        write_model(&c, 11 + (uint64_t)variant, dir, sizeof dir);
        snprintf(what, sizeof what, "arch %d %s", (int)arch, variant ? "untied" : "tied");
        e2e_prompts p;
        e2e_prompts_make(&p, 3, 3, 30, c.vocab_size, 5 + (uint64_t)variant);
        pl_engine_config ec;
        base_config(&ec, dir, 1);
        pl_sampling_params sp;
        greedy(&sp);
        run_out b;
        compare(what, &ec, 2, &p, &sp, &b);
        /* the outputs wander: equal outputs that repeat one token would prove little */
        int distinct = 0;
        bool seen[256] = {false};
        for (size_t i = 0; i < b.n; i++)
            for (size_t k = 0; k < b.c[i].n_output_ids; k++)
                if (!seen[b.c[i].output_ids[k] & 255]) seen[b.c[i].output_ids[k] & 255] = true, distinct++;
        cr_assert_geq(distinct, 8, "%s: %d distinct tokens", what, distinct);
        free_run(&b);
        e2e_prompts_free(&p);
        pl_fixture_remove_dir(dir);
    }
}

Test(tp, llama_gqa_tied_and_untied) { family(PL_ARCH_LLAMA); }
Test(tp, mistral_one_kv_head_replicated) { family(PL_ARCH_MISTRAL); }
Test(tp, qwen2_biases) { family(PL_ARCH_QWEN2); }
Test(tp, qwen3_qk_norms) { family(PL_ARCH_QWEN3); }

Test(tp, four_ranks_two_kv_heads) {
    pl_model_config c;
    pl_fixture_tp_config(PL_ARCH_LLAMA, 3, &c);
    char dir[512];
    write_model(&c, 21, dir, sizeof dir);
    e2e_prompts p;
    e2e_prompts_make(&p, 3, 3, 30, c.vocab_size, 9);
    pl_engine_config ec;
    base_config(&ec, dir, 1);
    pl_sampling_params sp;
    greedy(&sp);
    compare("4 ranks", &ec, 4, &p, &sp, NULL);
    e2e_prompts_free(&p);
    pl_fixture_remove_dir(dir);
}

/* Preemption, chunked prefill, n > 1 with seeds, prompt logprobs, an abort: the scheduler's
 * business, which lives on rank 0 and reaches the others only as plans. */
Test(tp, preemption_chunking_n_seeds_prompt_logprobs) {
    pl_model_config c;
    pl_fixture_tp_config(PL_ARCH_LLAMA, 1, &c);
    char dir[512];
    write_model(&c, 13, dir, sizeof dir);
    e2e_prompts p;
    e2e_prompts_make(&p, 4, 20, 40, c.vocab_size, 3);
    pl_engine_config ec;
    base_config(&ec, dir, 1);
    ec.max_num_blocks = 30; /* 120 slots for 4 x 3 samples of up to 80 tokens: preemption */
    ec.max_total_tokens = 8; /* prompts of 20-40 tokens go in chunks */
    ec.max_batch_size = 8;
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.9f;
    sp.top_p = 0.95f;
    sp.seed = 77;
    sp.has_seed = true;
    sp.n = 3;
    sp.max_tokens = 30;
    sp.ignore_eos = true;
    sp.logprobs = 2;
    sp.prompt_logprobs = 1;
    run_out b;
    compare("pressure", &ec, 2, &p, &sp, &b);
    cr_assert_gt(b.m.preemptions, 0, "the pool was meant to be too small");
    cr_assert_eq(b.n, 12);
    free_run(&b);

    /* an abort in the middle leaves the group stepping */
    pl_engine_config ec2 = ec;
    ec2.tensor_parallel_size = 2;
    pl_engine *e = e2e_engine(&ec2);
    pl_request_id id, id2;
    cr_assert_eq(pl_engine_submit_tokens(e, p.ids[0], (size_t)p.len[0], &sp, &id), PL_OK);
    for (int i = 0; i < 6; i++) {
        pl_step_result r;
        cr_assert_eq(pl_engine_step(e, &r), PL_OK, "%s", pl_last_error());
    }
    cr_assert_eq(pl_engine_abort(e, id), PL_OK);
    sp.n = 1;
    cr_assert_eq(pl_engine_submit_tokens(e, p.ids[1], (size_t)p.len[1], &sp, &id2), PL_OK);
    pl_completion *out;
    size_t n;
    cr_assert_eq(pl_engine_run(e, &out, &n), PL_OK, "%s", pl_last_error());
    cr_assert_eq(n, 4);
    cr_assert_eq(out[0].finish_reason, PL_FINISH_ABORT);
    cr_assert_eq(out[3].finish_reason, PL_FINISH_LENGTH);
    cr_assert_eq(out[3].n_output_ids, 30);
    pl_completions_free(out, n);
    pl_engine_destroy(e);
    e2e_prompts_free(&p);
    pl_fixture_remove_dir(dir);
}

/* Logits of every row of a prefill chunk and of decode rows, through the runners: within
 * 1e-5 of one rank's, relative to the row's largest magnitude. */
Test(tp, runner_logits_within_1e5) {
    for (int arch = 0; arch < PL_ARCH_COUNT; arch++) {
        pl_model_config c;
        pl_fixture_tp_config((pl_arch)arch, 1, &c);
        char dir[512];
        write_model(&c, 17, dir, sizeof dir);
        pl_engine_config ec;
        base_config(&ec, dir, 1);
        pl_engine *e1 = e2e_engine(&ec);
        ec.tensor_parallel_size = 2;
        pl_engine *e2 = e2e_engine(&ec);
        /* step 1: a 13-token prefill (blocks 5, 2, 9, 0) and a 7-token one (blocks 3, 8);
         * step 2: one decode row each */
        enum { B = 64 };
        int32_t ids[20], pos[20], qs[3], ctx[2], tables[2 * B] = {0}, rows[20];
        int64_t slots[20];
        int32_t t0[] = {5, 2, 9, 0}, t1[] = {3, 8};
        for (int i = 0; i < 20; i++) {
            int s = i < 13 ? 0 : 1, k = s ? i - 13 : i;
            ids[i] = 3 + (i * 7) % (c.vocab_size - 3);
            pos[i] = k;
            slots[i] = (int64_t)(s ? t1[k / 4] : t0[k / 4]) * 4 + k % 4;
            rows[i] = i;
        }
        memcpy(tables, t0, sizeof t0);
        memcpy(tables + B, t1, sizeof t1);
        qs[0] = 0, qs[1] = 13, qs[2] = 20;
        ctx[0] = 13, ctx[1] = 7;
        pl_runner_batch b = {.n_seqs = 2, .n_tokens = 20, .max_query_len = 13,
                             .max_context_len = 13, .n_sample = 2, .token_ids = ids,
                             .positions = pos, .slots = slots, .query_start = qs,
                             .context_lens = ctx, .block_tables = tables, .sample_rows = rows};
        cr_assert_eq(e1->max_blocks_per_seq, B);
        int V = c.vocab_size;
        float *l1 = calloc((size_t)20 * V, sizeof *l1), *l2 = calloc((size_t)20 * V, sizeof *l2);
        for (int step = 0; step < 2; step++) {
            int n_rows = 2;
            if (step == 0) {
                cr_assert_eq(pl_runner_run(e1->runner, &b, l1), PL_OK, "%s", pl_last_error());
                cr_assert_eq(pl_runner_run(e2->runner, &b, l2), PL_OK, "%s", pl_last_error());
                /* every row of both prefills (prompt logprobs' path) */
                n_rows = 20;
                for (int k = 0; k < 20; k += 10) {
                    cr_assert_eq(pl_runner_logits(e1->runner, rows + k, 10, l1 + (size_t)k * V), PL_OK);
                    cr_assert_eq(pl_runner_logits(e2->runner, rows + k, 10, l2 + (size_t)k * V), PL_OK);
                }
            } else {
                int32_t dids[2] = {7, 11}, dpos[2] = {13, 7}, dqs[3] = {0, 1, 2}, dctx[2] = {14, 8};
                int64_t dslots[2] = {(int64_t)t0[3] * 4 + 1, (int64_t)t1[1] * 4 + 3};
                int32_t drows[2] = {0, 1};
                pl_runner_batch d = b;
                d.n_tokens = 2, d.max_query_len = 1, d.max_context_len = 14;
                d.token_ids = dids, d.positions = dpos, d.slots = dslots, d.query_start = dqs;
                d.context_lens = dctx, d.sample_rows = drows;
                cr_assert_eq(pl_runner_run(e1->runner, &d, l1), PL_OK, "%s", pl_last_error());
                cr_assert_eq(pl_runner_run(e2->runner, &d, l2), PL_OK, "%s", pl_last_error());
            }
            double worst = 0;
            for (int r = 0; r < n_rows; r++) {
                float big = 0;
                for (int v = 0; v < V; v++) big = fmaxf(big, fabsf(l1[(size_t)r * V + v]));
                for (int v = 0; v < V; v++) {
                    double d = fabs((double)l1[(size_t)r * V + v] - l2[(size_t)r * V + v]) / big;
                    if (d > worst) worst = d;
                }
            }
            cr_assert(worst <= 1e-5, "arch %d step %d: logits differ by %.3g of the row's "
                      "largest", arch, step, worst);
        }
        free(l1);
        free(l2);
        pl_engine_destroy(e1);
        pl_engine_destroy(e2);
        pl_fixture_remove_dir(dir);
    }
}

/* All-reduce bytes per computed token: 2 x layers x dim x 4, on every rank. */
Test(tp, all_reduce_bytes_per_token_on_every_rank) {
    pl_model_config c;
    pl_fixture_tp_config(PL_ARCH_QWEN2, 1, &c);
    char dir[512];
    write_model(&c, 19, dir, sizeof dir);
    e2e_prompts p;
    e2e_prompts_make(&p, 3, 5, 30, c.vocab_size, 4);
    pl_engine_config ec;
    base_config(&ec, dir, 2);
    pl_engine *e = e2e_engine(&ec);
    pl_sampling_params sp;
    greedy(&sp);
    sp.prompt_logprobs = 2; /* LOGITS plans: no all-reduce, one all-gather each */
    run_out r;
    run(e, &p, &sp, &r);
    uint64_t per_token = 2ull * (uint64_t)c.n_layers * (uint64_t)c.dim * 4u;
    cr_assert_gt(r.m.tokens_computed, 90);
    cr_assert_eq(r.m.tp_all_reduce_bytes, per_token * r.m.tokens_computed,
                 "rank 0: %llu bytes for %llu tokens", (unsigned long long)r.m.tp_all_reduce_bytes,
                 (unsigned long long)r.m.tokens_computed);
    cr_assert_eq(r.m.tp_all_reduce_calls, 2ull * c.n_layers * r.m.steps);
    cr_assert_gt(r.m.tp_broadcast_calls, r.m.steps); /* a plan per step, logits plans, ... */
    pl_tp_finish(e->tp, e->runner);
    for (int i = 0; i < e->tp->size - 1; i++) {
        const pl_tp_thread *t = pl_tp_thread_at(e->tp, i);
        cr_assert_eq(t->status, PL_OK, "%s", t->error);
        cr_assert_eq(t->stats.bytes[PL_COMM_ALL_REDUCE], r.m.tp_all_reduce_bytes,
                     "rank %d", i + 1);
        cr_assert_eq(t->steps, r.m.steps, "rank %d", i + 1);
        cr_assert_eq(t->tokens, r.m.tokens_computed, "rank %d", i + 1);
        cr_assert_eq(t->stats.bytes[PL_COMM_ALL_REDUCE], per_token * t->tokens, "rank %d",
                     i + 1);
    }
    free_run(&r);
    pl_engine_destroy(e);
    e2e_prompts_free(&p);
    pl_fixture_remove_dir(dir);
}

static void refused(const pl_model_config *c, int tp, const char *want) {
    char dir[512];
    write_model(c, 3, dir, sizeof dir);
    pl_engine_config ec;
    base_config(&ec, dir, tp);
    pl_engine *e = NULL;
    pl_status s = pl_engine_create(&ec, &e);
    cr_assert_eq(s, PL_ERR_UNSUPPORTED, "tp %d: %s", tp, pl_last_error());
    cr_assert(strstr(pl_last_error(), want), "%s", pl_last_error());
    cr_assert(strstr(pl_last_error(), "--tensor-parallel-size"), "%s", pl_last_error());
    pl_fixture_remove_dir(dir);
}

Test(tp, impossible_splits_are_refused_with_the_numbers) {
    pl_model_config c;
    pl_fixture_family_config(PL_ARCH_MISTRAL, 1, &c); /* 5 heads, 69 hidden units */
    refused(&c, 2, "5 attention heads cannot be split over 2 ranks");
    pl_fixture_tp_config(PL_ARCH_LLAMA, 1, &c);
    c.hidden_dim = 75;
    refused(&c, 2, "75 hidden units cannot be split over 2 ranks");
    pl_fixture_tp_config(PL_ARCH_LLAMA, 1, &c); /* 6 heads, 2 KV heads: over 3 ranks neither divides */
    refused(&c, 3, "2 KV heads");
}

/* A Q8_0 model (blocks of 32): 2 ranks split o's 64 and down's 64 columns on blocks and give
 * one rank's outputs; 4 ranks would cut blocks in half and are refused, naming the tensor. */
Test(tp, quantised_split_on_blocks) {
    pl_model_config c;
    pl_fixture_tp_config(PL_ARCH_LLAMA, 1, &c);
    c.dim = 64, c.n_heads = 8, c.head_dim = 8, c.n_kv_heads = 4, c.hidden_dim = 64;
    pl_model *m = pl_fixture_family_model(&c, 23);
    cr_assert(m);
    char path[600];
    const char *tmp = pl_test_tmpdir();
    snprintf(path, sizeof path, "%s/q8.gguf", tmp);
    pl_gguf_writer *w;
    cr_assert_eq(pl_gguf_writer_create(&w), PL_OK);
    cr_assert_eq(pl_model_save_gguf(m, PL_WTYPE_Q8_0, w, path), PL_OK, "%s", pl_last_error());
    pl_gguf_writer_free(w);
    pl_model_free(m);
    e2e_prompts p;
    e2e_prompts_make(&p, 2, 3, 20, c.vocab_size, 8);
    pl_engine_config ec;
    base_config(&ec, path, 1);
    pl_sampling_params sp;
    greedy(&sp);
    compare("q8_0", &ec, 2, &p, &sp, NULL);
    ec.tensor_parallel_size = 4;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_create(&ec, &e), PL_ERR_UNSUPPORTED);
    cr_assert(strstr(pl_last_error(), "stored as q8_0 in blocks of 32"), "%s", pl_last_error());
    e2e_prompts_free(&p);
    pl_fixture_remove_dir(tmp);
}

/* PAGELLM_FAULT_RANK=1:3: rank 1 leaves without a word when its 4th step comes. Rank 0's
 * collective times out (0.5 s), the requests finish with an error, and health says which
 * rank and which collective; the next requests fail at once. */
Test(tp, a_dead_rank_fails_the_engine_within_the_timeout) {
    pl_model_config c;
    pl_fixture_tp_config(PL_ARCH_LLAMA, 1, &c);
    char dir[512];
    write_model(&c, 29, dir, sizeof dir);
    setenv("PAGELLM_FAULT_RANK", "1:3", 1);
    pl_engine_config ec;
    base_config(&ec, dir, 2);
    ec.distributed_timeout = 0.5;
    pl_engine *e = e2e_engine(&ec);
    pl_sampling_params sp;
    greedy(&sp);
    int32_t prompt[] = {1, 5, 9, 13};
    pl_request_id id;
    cr_assert_eq(pl_engine_submit_tokens(e, prompt, 4, &sp, &id), PL_OK);
    uint64_t t0 = pl_now_ns();
    pl_completion *out;
    size_t n;
    pl_engine_run(e, &out, &n);
    double secs = (double)(pl_now_ns() - t0) * 1e-9;
    cr_assert_eq(n, 1);
    cr_assert_eq(out[0].finish_reason, PL_FINISH_ERROR);
    cr_assert_eq(out[0].n_output_ids, 3);
    pl_completions_free(out, n);
    cr_assert(secs >= 0.45 && secs < 3, "%.2f s", secs);
    cr_assert_eq(pl_engine_health(e), PL_ERR_BACKEND);
    cr_assert(strstr(pl_last_error(), "rank 0: broadcast: timed out after 0.5 s waiting for "
                     "rank 1") || strstr(pl_last_error(), "rank 0: all_reduce: timed out after "
                     "0.5 s waiting for rank 1"), "%s", pl_last_error());
    /* broken for good: the next request fails at once */
    cr_assert_eq(pl_engine_submit_tokens(e, prompt, 4, &sp, &id), PL_OK);
    t0 = pl_now_ns();
    pl_engine_run(e, &out, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(out[0].finish_reason, PL_FINISH_ERROR);
    cr_assert_lt((double)(pl_now_ns() - t0) * 1e-9, 0.4);
    pl_completions_free(out, n);
    pl_engine_destroy(e);
    unsetenv("PAGELLM_FAULT_RANK");
    pl_fixture_remove_dir(dir);
}

Test(tp, backends_and_flags) {
    cr_assert(strstr(pl_distributed_backends(), "threads"));
    pl_engine_config ec;
    base_config(&ec, "dummy:tiny", 2);
    ec.distributed_backend = PL_DIST_MPI; /* not under mpirun */
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_create(&ec, &e), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "mpirun -n 2"), "%s", pl_last_error());
    bool worker = true;
    base_config(&ec, "dummy:tiny", 2);
    cr_assert_eq(pl_engine_config_is_worker(&ec, &worker), PL_OK);
    cr_assert(!worker);
    cr_assert_eq(pl_engine_config_set(&ec, "distributed_backend", "nccl"), PL_OK);
    cr_assert_eq(ec.distributed_backend, PL_DIST_NCCL);
}
