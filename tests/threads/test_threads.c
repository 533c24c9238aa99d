/*
 * tests/threads/test_threads.c - submit and abort from several threads while the main thread
 * steps (suite e2e; also the test the ThreadSanitizer build runs, see scripts/tsan.sh).
 *
 * Every accepted request must complete exactly once per sample, with the greedy tokens of a
 * sequential run; an aborted one with reason abort and a prefix of those tokens. A KV pool
 * small enough to preempt and a bounded waiting queue (submitters retry on QUEUE_FULL) put
 * the intake's every path under contention.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_support.h"
#include "threads_util.h"

static thr_job *make_jobs(int n, uint64_t seed) {
    pl_test_rng r;
    pl_test_rng_seed(&r, seed);
    thr_job *jobs = calloc((size_t)n, sizeof *jobs);
    for (int i = 0; i < n; i++) {
        thr_job *j = &jobs[i];
        j->n_ids = 1 + (int)pl_test_rng_below(&r, 40);
        j->ids[0] = 1;
        for (int k = 1; k < j->n_ids; k++) j->ids[k] = 3 + (int32_t)pl_test_rng_below(&r, 500);
        pl_sampling_params_default(&j->sp);
        j->sp.temperature = 0.0f;
        j->sp.max_tokens = 1 + (int)pl_test_rng_below(&r, 24);
        j->sp.n = pl_test_rng_below(&r, 4) == 0 ? 2 : 1;
        j->sp.priority = (int)pl_test_rng_below(&r, 2);
        j->sp.ignore_eos = pl_test_rng_below(&r, 2) == 0;
    }
    return jobs;
}

static void config(pl_engine_config *c, pl_backend_kind backend, int max_num_blocks) {
    pl_engine_config_default(c);
    c->model_path = "dummy:tiny";
    c->backend = backend;
    c->n_threads = 2;
    c->block_size = 4;
    c->max_model_len = 96;
    c->max_batch_size = 8;
    c->max_num_seqs = 16;
    c->max_total_tokens = 64;
    c->max_num_blocks = max_num_blocks;
    c->max_waiting = 12;
}

static void run(pl_backend_kind backend, int n_submitters, int per_thread) {
    int n = n_submitters * per_thread;
    thr_job *jobs = make_jobs(n, pl_test_run_seed("threads"));
    pl_engine_config c;
    config(&c, backend, 512);
    c.max_waiting = 0;
    thr_reference(&c, jobs, n);
    config(&c, backend, 36);
    thr_result r;
    thr_run(&c, jobs, n, n_submitters, true, &r);
    fprintf(stderr, "threads: %d submitters, %ld requests accepted (%ld QUEUE_FULL retries), "
            "%ld aborts accepted, %ld refused, %ld completions (%ld aborted), %ld steps\n",
            n_submitters, r.accepted, r.rejected, r.aborts_accepted, r.aborts_refused,
            r.completions, r.aborted, r.steps);
    thr_jobs_free(jobs, n);
}

Test(threads, submitters_and_aborter_ref_backend, .timeout = 240) {
    run(PL_BACKEND_REF, 3, 60);
    PL_ASSERT_NO_LEAKS();
}

Test(threads, submitters_and_aborter_cpu_backend, .timeout = 240) {
    run(PL_BACKEND_CPU, 4, 40);
    PL_ASSERT_NO_LEAKS();
}
