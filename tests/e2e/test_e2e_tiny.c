/*
 * tests/e2e/test_e2e_tiny.c - the whole engine on a seeded random tiny model (dummy:tiny):
 * greedy tokens against the dense reference, batch invariance under KV pressure and chunking,
 * backends against each other, stop conditions, parallel samples, abort, queue overflow and
 * refused requests.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dense_ref.h"
#include "e2e_util.h"
#include "engine/engine_internal.h"
#include "model/model.h"

#define TINY "dummy:tiny"

static void tiny_config(pl_engine_config *c) {
    pl_engine_config_default(c);
    c->model_path = TINY;
    /* exact token comparisons across schedules and with the dense reference: f32 K/V
     * (docs/api.md, "Greedy output and batching"; the f16 cache: test_e2e_stories.c) */
    c->kv_dtype = PL_DTYPE_F32;
    c->block_size = 8;
    c->max_num_blocks = 512;
    c->n_threads = 2;
    if (getenv("PL_TEST_BACKEND_REF")) c->backend = PL_BACKEND_REF;
}

static void greedy(pl_sampling_params *p, int max_tokens) {
    pl_sampling_params_default(p);
    p->temperature = 0.0f;
    p->max_tokens = max_tokens;
    p->ignore_eos = true;
}

static void dense_outputs(const e2e_prompts *p, int n_out, e2e_outputs *out) {
    pl_engine_config c;
    tiny_config(&c);
    pl_model_load_options mo = {.dummy_seed = c.dummy_seed}; /* the weights the engine loads */
    pl_model *m;
    cr_assert_eq(pl_model_load(TINY, &mo, &m), PL_OK, "%s", pl_last_error());
    out->n = p->n;
    out->ids = calloc((size_t)p->n, sizeof *out->ids);
    out->len = calloc((size_t)p->n, sizeof *out->len);
    out->reason = calloc((size_t)p->n, sizeof *out->reason);
    for (int i = 0; i < p->n; i++) {
        dense_ref *d = dense_ref_create(m, p->len[i] + n_out);
        cr_assert(d);
        out->ids[i] = malloc((size_t)n_out * sizeof(int32_t));
        out->len[i] = n_out;
        cr_assert_eq(dense_ref_greedy(d, p->ids[i], p->len[i], n_out, out->ids[i]), 0);
        dense_ref_free(d);
    }
    pl_model_free(m);
}

Test(e2e_tiny, greedy_matches_dense_reference_on_both_cpu_backends) {
    e2e_prompts p;
    e2e_prompts_make(&p, 6, 3, 40, 512, 11);
    e2e_outputs want;
    dense_outputs(&p, 40, &want);
    pl_backend_kind kinds[] = {PL_BACKEND_CPU, PL_BACKEND_REF};
    for (int k = 0; k < 2; k++) {
        pl_engine_config c;
        tiny_config(&c);
        c.backend = kinds[k];
        pl_engine *e = e2e_engine(&c);
        pl_sampling_params sp;
        greedy(&sp, 40);
        e2e_outputs got;
        e2e_run(e, &p, &sp, false, &got);
        cr_assert(e2e_outputs_equal(kinds[k] == PL_BACKEND_CPU ? "cpu vs dense" : "ref vs dense",
                                    &want, &got));
        e2e_outputs_free(&got);
        pl_engine_destroy(e);
    }
    e2e_outputs_free(&want);
    e2e_prompts_free(&p);
    PL_ASSERT_NO_LEAKS();
}

/* The same 32 prompts through differently constrained engines must give the same tokens. */
static void check_invariance(const pl_sampling_params *sp, const char *what) {
    e2e_prompts p;
    e2e_prompts_make(&p, 32, 2, 60, 512, 23);
    pl_engine_config c;
    tiny_config(&c);
    pl_engine *e = e2e_engine(&c);
    e2e_outputs base;
    e2e_run(e, &p, sp, false, &base);
    pl_engine_destroy(e);

    struct variant { const char *name; int blocks, budget, batch; bool chunked, one; } vs[] = {
        {"one at a time", 512, 4096, 32, true, true},
        {"tiny KV pool (preemption)", 24, 4096, 32, true, false},
        {"budget 16 (chunked prefill)", 512, 16, 16, true, false},
        {"chunked prefill off", 512, 512, 32, false, false},
        {"batch of 3", 512, 64, 3, true, false},
    };
    for (size_t v = 0; v < sizeof vs / sizeof vs[0]; v++) {
        tiny_config(&c);
        c.max_num_blocks = vs[v].blocks;
        c.max_total_tokens = vs[v].budget;
        c.max_batch_size = vs[v].batch;
        c.enable_chunked_prefill = vs[v].chunked;
        c.max_model_len = 512;
        e = e2e_engine(&c);
        e2e_outputs got;
        e2e_run(e, &p, sp, vs[v].one, &got);
        char label[128];
        snprintf(label, sizeof label, "%s: %s", what, vs[v].name);
        cr_assert(e2e_outputs_equal(label, &base, &got), "%s", label);
        pl_metrics m;
        pl_engine_metrics(e, &m);
        if (vs[v].blocks == 24) cr_assert_gt(m.preemptions, 0, "%s: expected preemptions", label);
        cr_assert_eq(m.kv_blocks_used, 0, "%s: blocks still used after the run", label);
        e2e_outputs_free(&got);
        pl_engine_destroy(e);
    }
    e2e_outputs_free(&base);
    e2e_prompts_free(&p);
}

Test(e2e_tiny, greedy_is_batch_invariant_under_pressure_and_chunking, .timeout = 120) {
    pl_sampling_params sp;
    greedy(&sp, 24);
    check_invariance(&sp, "greedy");
    PL_ASSERT_NO_LEAKS();
}

Test(e2e_tiny, seeded_sampling_is_batch_invariant, .timeout = 120) {
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.max_tokens = 24;
    sp.temperature = 0.9f;
    sp.top_p = 0.95f;
    sp.top_k = 40;
    sp.seed = 77;
    sp.has_seed = true;
    sp.ignore_eos = true;
    check_invariance(&sp, "seeded");
    PL_ASSERT_NO_LEAKS();
}

Test(e2e_tiny, stop_ids_and_lengths_end_outputs) {
    pl_engine_config c;
    tiny_config(&c);
    pl_engine *e = e2e_engine(&c);
    e2e_prompts p;
    e2e_prompts_make(&p, 1, 10, 10, 512, 5);
    pl_sampling_params sp;
    greedy(&sp, 30);
    e2e_outputs full;
    e2e_run(e, &p, &sp, false, &full);
    cr_assert_eq(full.len[0], 30);
    cr_assert_eq(full.reason[0], PL_FINISH_LENGTH);

    /* stop at the first occurrence of the 8th token */
    int32_t stop = full.ids[0][7];
    int first = 0;
    while (full.ids[0][first] != stop) first++;
    sp.stop_ids = &stop;
    sp.n_stop_ids = 1;
    e2e_outputs got;
    e2e_run(e, &p, &sp, false, &got);
    cr_assert_eq(got.len[0], first + 1, "stop id included, nothing after it");
    cr_assert_eq(got.reason[0], PL_FINISH_STOP);
    for (int i = 0; i <= first; i++) cr_assert_eq(got.ids[0][i], full.ids[0][i]);

    /* min_tokens keeps going past the stop id */
    sp.min_tokens = first + 1;
    e2e_outputs later;
    e2e_run(e, &p, &sp, false, &later);
    cr_assert_gt(later.len[0], first + 1);
    e2e_outputs_free(&later);
    e2e_outputs_free(&got);
    e2e_outputs_free(&full);
    e2e_prompts_free(&p);
    pl_engine_destroy(e);
    PL_ASSERT_NO_LEAKS();
}

Test(e2e_tiny, parallel_samples_share_the_prompt_and_copy_on_write) {
    pl_engine_config cfg;
    tiny_config(&cfg);
    pl_engine *e = e2e_engine(&cfg);
    int32_t prompt[13];
    for (int i = 0; i < 13; i++) prompt[i] = 5 + 7 * i; /* 13 % 8 != 0: a shared partial block */
    pl_sampling_params sp;
    greedy(&sp, 12);
    pl_request_id single;
    cr_assert_eq(pl_engine_submit_tokens(e, prompt, 13, &sp, &single), PL_OK);
    pl_completion *c1;
    size_t n1;
    cr_assert_eq(pl_engine_run(e, &c1, &n1), PL_OK);
    cr_assert_eq(n1, 1);

    sp.n = 3;
    cr_assert_eq(pl_engine_submit_tokens(e, prompt, 13, &sp, NULL), PL_OK, "%s", pl_last_error());
    pl_completion *c;
    size_t n;
    cr_assert_eq(pl_engine_run(e, &c, &n), PL_OK, "%s", pl_last_error());
    cr_assert_eq(n, 3);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(c[i].index, (int)i);
        cr_assert_eq(c[i].n_output_ids, c1[0].n_output_ids);
        cr_assert_eq(memcmp(c[i].output_ids, c1[0].output_ids, c1[0].n_output_ids * 4), 0,
                     "greedy sample %zu differs from the single run", i);
    }
    pl_kv_stats kv;
    pl_kv_get_stats(e->pool, &kv);
    cr_assert_geq(kv.cow_copies, 2, "children wrote into the shared partial block");

    /* sampled children diverge but each is reproducible */
    pl_completions_free(c, n);
    sp.temperature = 1.0f;
    sp.top_p = 1.0f;
    sp.seed = 3;
    sp.has_seed = true;
    cr_assert_eq(pl_engine_submit_tokens(e, prompt, 13, &sp, NULL), PL_OK);
    cr_assert_eq(pl_engine_run(e, &c, &n), PL_OK);
    pl_completion *d;
    size_t nd;
    cr_assert_eq(pl_engine_submit_tokens(e, prompt, 13, &sp, NULL), PL_OK);
    cr_assert_eq(pl_engine_run(e, &d, &nd), PL_OK);
    cr_assert_eq(n, 3);
    cr_assert_eq(nd, 3);
    bool differ = false;
    for (size_t i = 0; i < 3; i++) {
        cr_assert_eq(memcmp(c[i].output_ids, d[i].output_ids, c[i].n_output_ids * 4), 0);
        if (i && memcmp(c[i].output_ids, c[0].output_ids, c[0].n_output_ids * 4)) differ = true;
    }
    cr_assert(differ, "three sampled continuations were identical");
    pl_completions_free(c, n);
    pl_completions_free(d, nd);
    pl_completions_free(c1, n1);
    pl_metrics m;
    pl_engine_metrics(e, &m);
    cr_assert_eq(m.kv_blocks_used, 0);
    pl_engine_destroy(e);
    PL_ASSERT_NO_LEAKS();
}

Test(e2e_tiny, abort_finishes_requests_and_frees_blocks) {
    pl_engine_config c;
    tiny_config(&c);
    pl_engine *e = e2e_engine(&c);
    e2e_prompts p;
    e2e_prompts_make(&p, 4, 20, 20, 512, 9);
    pl_sampling_params sp;
    greedy(&sp, 50);
    pl_request_id ids[4];
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pl_engine_submit_tokens(e, p.ids[i], 20, &sp, &ids[i]), PL_OK);
    cr_assert_eq(pl_engine_abort(e, ids[3]), PL_OK); /* still in the intake */
    pl_step_result r;
    int aborted = 0, finished = 0;
    for (int step = 0; pl_engine_has_pending_work(e); step++) {
        cr_assert_eq(pl_engine_step(e, &r), PL_OK);
        if (step == 0) {
            cr_assert_eq(r.n_finished, 1, "aborted in the intake: reported by the first step");
            cr_assert_eq(pl_engine_abort(e, ids[1]), PL_OK); /* running */
            cr_assert_eq(pl_engine_abort(e, 999999), PL_ERR_NOT_FOUND);
            cr_assert_eq(pl_engine_abort(e, 0), PL_ERR_NOT_FOUND);
        }
        for (size_t i = 0; i < r.n_finished; i++) {
            finished++;
            if (r.finished[i].finish_reason == PL_FINISH_ABORT) {
                aborted++;
                cr_assert(r.finished[i].id == ids[1] || r.finished[i].id == ids[3]);
            }
        }
    }
    cr_assert_eq(aborted, 2);
    cr_assert_eq(finished, 4, "every request is reported once, aborted ones included");
    cr_assert_eq(pl_engine_abort(e, ids[0]), PL_ERR_NOT_FOUND, "finished ids are gone");
    pl_metrics m;
    pl_engine_metrics(e, &m);
    cr_assert_eq(m.kv_blocks_used, 0);
    e2e_prompts_free(&p);
    pl_engine_destroy(e);
    PL_ASSERT_NO_LEAKS();
}

Test(e2e_tiny, queue_overflow_policies) {
    int32_t prompt[4] = {1, 10, 20, 30};
    pl_sampling_params sp;
    greedy(&sp, 4);
    for (int policy = 0; policy < 2; policy++) {
        pl_engine_config c;
        tiny_config(&c);
        c.max_waiting = 2;
        c.max_num_seqs = c.max_batch_size = 1; /* 1 running + 2 waiting slots */
        c.overflow_policy = policy ? PL_OVERFLOW_DROP_OLDEST : PL_OVERFLOW_REJECT_NEWEST;
        pl_engine *e = e2e_engine(&c);
        pl_request_id a, b, b2, d;
        cr_assert_eq(pl_engine_submit_tokens(e, prompt, 4, &sp, &a), PL_OK);
        cr_assert_eq(pl_engine_submit_tokens(e, prompt, 4, &sp, &b), PL_OK);
        cr_assert_eq(pl_engine_submit_tokens(e, prompt, 4, &sp, &b2), PL_OK);
        pl_status s = pl_engine_submit_tokens(e, prompt, 4, &sp, &d);
        pl_completion *out;
        size_t n;
        if (!policy) {
            cr_assert_eq(s, PL_ERR_QUEUE_FULL);
            cr_assert(strstr(pl_last_error(), "max_waiting"));
            cr_assert_eq(pl_engine_run(e, &out, &n), PL_OK);
            cr_assert_eq(n, 3, "the refused request left no trace");
        } else {
            cr_assert_eq(s, PL_OK, "%s", pl_last_error());
            cr_assert_eq(pl_engine_run(e, &out, &n), PL_OK);
            cr_assert_eq(n, 4);
            int overloaded = 0;
            for (size_t i = 0; i < n; i++)
                if (out[i].finish_reason == PL_FINISH_OVERLOADED) {
                    overloaded++;
                    cr_assert_eq(out[i].id, a, "the oldest waiting request is dropped");
                }
            cr_assert_eq(overloaded, 1);
        }
        pl_completions_free(out, n);
        pl_engine_destroy(e);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(e2e_tiny, bad_requests_are_refused_with_a_named_problem) {
    pl_engine_config c;
    tiny_config(&c);
    c.max_model_len = 64;
    pl_engine *e = e2e_engine(&c);
    int32_t ok_ids[3] = {1, 2, 3}, bad_ids[2] = {1, 512};
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    cr_assert_eq(pl_engine_submit_tokens(e, bad_ids, 2, &sp, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "vocabulary"));
    cr_assert_eq(pl_engine_submit_tokens(e, ok_ids, 0, &sp, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_engine_submit_tokens(NULL, ok_ids, 3, &sp, NULL), PL_ERR_INVALID_ARGUMENT);
    sp.temperature = NAN;
    cr_assert_eq(pl_engine_submit_tokens(e, ok_ids, 3, &sp, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "temperature"));
    pl_sampling_params_default(&sp);
    sp.top_p = 0.0f;
    cr_assert_eq(pl_engine_submit_tokens(e, ok_ids, 3, &sp, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "top_p"));
    pl_sampling_params_default(&sp);
    sp.max_tokens = 62;
    cr_assert_eq(pl_engine_submit_tokens(e, ok_ids, 3, &sp, NULL), PL_ERR_TOO_LONG);
    sp.max_tokens = 61;
    cr_assert_eq(pl_engine_submit_tokens(e, ok_ids, 3, &sp, NULL), PL_OK, "%s", pl_last_error());
    pl_sampling_params_default(&sp);
    const int32_t bad_stop = -4;
    sp.stop_ids = &bad_stop;
    sp.n_stop_ids = 1;
    cr_assert_eq(pl_engine_submit_tokens(e, ok_ids, 3, &sp, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "stop_ids"));
    cr_assert_eq(pl_engine_submit_request(e, "hello", &sp, NULL), PL_ERR_INVALID_ARGUMENT,
                 "no tokenizer loaded for dummy:tiny");
    pl_completion *out;
    size_t n;
    cr_assert_eq(pl_engine_run(e, &out, &n), PL_OK);
    cr_assert_eq(n, 1);
    pl_completions_free(out, n);
    pl_engine_destroy(e);
    PL_ASSERT_NO_LEAKS();
}

Test(e2e_tiny, capacity_comes_from_the_pool) {
    pl_engine_config c;
    tiny_config(&c);
    c.max_num_blocks = 100;
    pl_engine *e = e2e_engine(&c);
    size_t cap;
    /* 30 + 10 - 1 = 39 slots = 5 blocks of 8 */
    cr_assert_eq(pl_engine_capacity(e, 30, 10, &cap), PL_OK, "%s", pl_last_error());
    cr_assert_eq(cap, 20);
    cr_assert_eq(pl_engine_capacity(e, 0, 10, &cap), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_engine_capacity(e, 600, 10, &cap), PL_ERR_TOO_LONG);
    pl_engine_destroy(e);
    PL_ASSERT_NO_LEAKS();
}

Test(e2e_tiny, engine_create_failures_leave_nothing) {
    pl_engine_config c;
    tiny_config(&c);
    c.model_path = "dummy:no-such-preset";
    pl_engine *e = NULL;
    cr_assert_neq(pl_engine_create(&c, &e), PL_OK);
    cr_assert_null(e);
    cr_assert(strstr(pl_last_error(), "no-such-preset"), "%s", pl_last_error());
    tiny_config(&c);
    c.max_model_len = 100000;
    cr_assert_eq(pl_engine_create(&c, &e), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "max_model_len"));
    tiny_config(&c);
    c.block_size = 3;
    cr_assert_eq(pl_engine_create(&c, &e), PL_ERR_INVALID_ARGUMENT);
    tiny_config(&c);
    c.backend = PL_BACKEND_CUDA;
    pl_status s = pl_engine_create(&c, &e);
    if (s == PL_OK) pl_engine_destroy(e); /* a machine with a GPU */
    else cr_assert(s == PL_ERR_UNSUPPORTED || s == PL_ERR_BACKEND, "%s", pl_last_error());
    PL_ASSERT_NO_LEAKS();
}
