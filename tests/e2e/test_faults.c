/*
 * tests/e2e/test_faults.c - allocation failure anywhere along a whole engine lifetime.
 *
 * For every N, the Nth library allocation of a create -> submit -> run -> destroy sequence
 * fails. The call that hit it must return PL_ERR_OUT_OF_MEMORY (nothing else, no crash), and
 * the engine must stay usable: with allocation working again, the same engine finishes every
 * request it accepted, each exactly once, and frees every block. Under AddressSanitizer the
 * sweep also proves nothing leaks on any failure path.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "pagellm.h"
#include "test_support.h"
#include "util/alloc.h"

typedef struct outcome {
    bool injected_failure_seen; /* some call returned OUT_OF_MEMORY */
    bool completed;             /* the sequence ran to the end without a reported failure */
} outcome;

static void expect_oom_or_ok(pl_status s, const char *what, long n, outcome *o) {
    if (s == PL_OK) return;
    cr_assert_eq(s, PL_ERR_OUT_OF_MEMORY, "fail-after %ld: %s returned %s (%s)", n, what,
                 pl_status_name(s), pl_last_error());
    o->injected_failure_seen = true;
}

static pl_engine_config small_pool_config(void) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = "dummy:tiny";
    c.backend = PL_BACKEND_REF;
    c.block_size = 4;
    c.max_num_blocks = 24; /* small enough to preempt */
    c.max_total_tokens = 32;
    c.max_batch_size = 4;
    c.max_num_seqs = 8;
    return c;
}

static outcome run_sequence(long fail_after) {
    outcome o = {false, false};
    pl_engine_config c = small_pool_config();

    pl_alloc_fail_after(fail_after);
    pl_engine *e = NULL;
    pl_status s = pl_engine_create(&c, &e);
    expect_oom_or_ok(s, "engine_create", fail_after, &o);
    if (s != PL_OK) {
        cr_assert_null(e);
        pl_alloc_fail_after(-1);
        return o;
    }
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = 12;
    sp.ignore_eos = true;
    int32_t prompt[3][9] = {{1, 5, 9, 13, 17, 21, 25, 29, 33},
                            {1, 6, 10, 14, 18, 22, 26, 30, 34},
                            {1, 7, 11, 15, 19, 23, 27, 31, 35}};
    int accepted_samples = 0;
    for (int i = 0; i < 3; i++) {
        sp.n = i == 1 ? 2 : 1;
        s = pl_engine_submit_tokens(e, prompt[i], 9, &sp, NULL);
        expect_oom_or_ok(s, "submit", fail_after, &o);
        if (s == PL_OK) accepted_samples += sp.n;
    }
    int reported = 0;
    while (pl_engine_has_pending_work(e)) {
        pl_step_result r;
        s = pl_engine_step(e, &r);
        expect_oom_or_ok(s, "step", fail_after, &o);
        if (s != PL_OK) pl_alloc_fail_after(-1); /* recover: the engine must carry on */
        reported += (int)r.n_finished;
    }
    pl_alloc_fail_after(-1);
    cr_assert_eq(reported, accepted_samples, "fail-after %ld: every accepted sample is reported "
                 "exactly once", fail_after);
    pl_metrics m;
    pl_engine_metrics(e, &m);
    cr_assert_eq(m.kv_blocks_used, 0, "fail-after %ld: blocks leaked in the pool", fail_after);
    pl_engine_destroy(e);
    o.completed = !o.injected_failure_seen;
    return o;
}

Test(faults, every_allocation_can_fail, .timeout = 300) {
    unsigned long before = pl_alloc_count();
    outcome clean = run_sequence(-1);
    cr_assert(clean.completed);
    long total = (long)(pl_alloc_count() - before);
    cr_assert_gt(total, 20, "only %ld allocations in a whole engine lifetime?", total);
    int failures = 0;
    for (long n = 0; n < total; n++)
        if (run_sequence(n).injected_failure_seen) failures++;
    /* a failure may be absorbed where a fallback exists (a fork that fails finishes that one
     * sample with reason error), but most points must surface as OUT_OF_MEMORY */
    cr_assert_gt(failures, total / 2, "%d of %ld failure points surfaced", failures, total);
    fprintf(stderr, "faults: %ld allocation points swept, %d surfaced as PL_ERR_OUT_OF_MEMORY\n",
            total, failures);
    PL_ASSERT_NO_LEAKS();
}

/* pl_engine_run under an allocation failure at every point of its run: whatever finished
 * before the failure comes back with the error, the rest comes back from a second run, and
 * across the two every accepted sample appears exactly once. */
Test(faults, run_hands_back_what_finished_before_a_failure, .timeout = 300) {
    pl_engine_config c = small_pool_config();
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.ignore_eos = true;
    int partial_runs = 0;
    for (long fail_after = 0;; fail_after++) {
        pl_engine *e = NULL;
        cr_assert_eq(pl_engine_create(&c, &e), PL_OK, "%s", pl_last_error());
        pl_request_id ids[4];
        for (int i = 0; i < 4; i++) { /* different lengths: they finish in different steps */
            int32_t prompt[] = {1, 5 + i, 9, 13 + i, 17};
            sp.max_tokens = 3 + 4 * i;
            sp.n = i == 2 ? 2 : 1;
            cr_assert_eq(pl_engine_submit_tokens(e, prompt, 5, &sp, &ids[i]), PL_OK);
        }
        pl_completion *c1 = NULL, *c2 = NULL;
        size_t n1 = 0, n2 = 0;
        pl_alloc_fail_after(fail_after);
        pl_status s = pl_engine_run(e, &c1, &n1);
        pl_alloc_fail_after(-1);
        if (s == PL_OK) { /* past the last allocation of a run: the sweep is over */
            cr_assert_eq(n1, 5);
            pl_completions_free(c1, n1);
            pl_engine_destroy(e);
            break;
        }
        cr_assert_eq(s, PL_ERR_OUT_OF_MEMORY, "fail-after %ld: %s", fail_after, pl_last_error());
        if (n1 > 0) partial_runs++;
        cr_assert_eq(pl_engine_run(e, &c2, &n2), PL_OK, "%s", pl_last_error());
        int seen[4][2] = {{0}};
        for (size_t k = 0; k < n1 + n2; k++) {
            const pl_completion *x = k < n1 ? &c1[k] : &c2[k - n1];
            int r = 0;
            while (r < 4 && ids[r] != x->id) r++;
            cr_assert_lt(r, 4, "fail-after %ld: unknown request id", fail_after);
            seen[r][x->index]++;
        }
        for (int r = 0; r < 4; r++)
            for (int i = 0; i < (r == 2 ? 2 : 1); i++) {
                cr_assert_eq(seen[r][i], 1, "fail-after %ld: request %d sample %d reported %d "
                             "times", fail_after, r, i, seen[r][i]);
            }
        pl_completions_free(c1, n1);
        pl_completions_free(c2, n2);
        pl_metrics m;
        pl_engine_metrics(e, &m);
        cr_assert_eq(m.kv_blocks_used, 0, "fail-after %ld: blocks leaked", fail_after);
        pl_engine_destroy(e);
        cr_assert_lt(fail_after, 100000, "no end to the allocations of one run");
    }
    cr_assert_gt(partial_runs, 0, "no failure fell after a request had finished");
    fprintf(stderr, "faults: run: %d failures handed back finished requests\n", partial_runs);
    PL_ASSERT_NO_LEAKS();
}
