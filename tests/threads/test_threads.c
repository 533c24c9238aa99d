/*
 * tests/threads/test_threads.c - submit and abort from several threads while the main thread
 * steps (suite e2e). The same harness runs without Criterion under ThreadSanitizer
 * (tsan_threads.c, scripts/tsan.sh).
 *
 * Every accepted request must complete exactly once per sample, with the greedy tokens of a
 * sequential run; an aborted one with reason abort and a prefix of those tokens. A KV pool
 * small enough to preempt and a bounded waiting queue (submitters retry on QUEUE_FULL) put
 * the intake's every path under contention.
 */
#include <criterion/criterion.h>

#include "test_support.h"
#include "threads_util.h"

Test(threads, submitters_and_aborter_ref_backend, .timeout = 240) {
    bool ok = thr_check(PL_BACKEND_REF, 3, 60, pl_test_run_seed("threads"), NULL);
    cr_assert(ok, "%s", thr_failure());
    PL_ASSERT_NO_LEAKS();
}

Test(threads, submitters_and_aborter_cpu_backend, .timeout = 240) {
    bool ok = thr_check(PL_BACKEND_CPU, 4, 40, pl_test_run_seed("threads"), NULL);
    cr_assert(ok, "%s", thr_failure());
    PL_ASSERT_NO_LEAKS();
}

/* A stepping thread that sleeps in pl_engine_wait while requests trickle in. */
Test(threads, stepping_thread_sleeps_until_work_arrives, .timeout = 120) {
    cr_assert(thr_trickle(PL_BACKEND_REF, 12), "%s", thr_failure());
    PL_ASSERT_NO_LEAKS();
}

/* Text prompts: tokenization (the sentencepiece shim) runs on the submitting threads. Uses
 * tok512 from PAGELLM_TEST_MODELS (512 pieces, as dummy:tiny's vocabulary). */
Test(threads, text_submitters_with_tokenizer, .timeout = 240) {
    char tok[512];
    if (!pl_test_models_dir() || !pl_test_model_path("tok512.model", tok, sizeof tok))
        cr_skip_test("PAGELLM_TEST_MODELS unset: no tokenizer");
    bool ok = thr_check(PL_BACKEND_CPU, 3, 40, pl_test_run_seed("threads"), tok);
    cr_assert(ok, "%s", thr_failure());
    PL_ASSERT_NO_LEAKS();
}
