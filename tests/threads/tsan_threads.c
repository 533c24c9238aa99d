/*
 * tests/threads/tsan_threads.c - the concurrent-intake check as a plain program, for the
 * ThreadSanitizer build (Criterion's runner cannot start under TSan). Exit 0 when every check
 * passed (and, under TSan, halt_on_error turns any race report into a non-zero exit).
 *
 * usage: tsan_threads [ROUNDS]   (default 2: each round runs a trickle of requests to a
 * thread sleeping in pl_engine_wait, the ref and the cpu backend on token prompts, and text
 * prompts through tok512 when PAGELLM_TEST_MODELS is set)
 */
#include <stdio.h>
#include <stdlib.h>

#include "test_support.h"
#include "threads_util.h"

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 2;
    uint64_t seed = pl_test_run_seed("tsan_threads");
    /* text prompts too when the shared tok512 model is there */
    char tok[512];
    const char *tk = pl_test_models_dir() && pl_test_model_path("tok512.model", tok, sizeof tok)
                         ? tok : NULL;
    for (int i = 0; i < rounds; i++) {
        if (!thr_trickle(PL_BACKEND_REF, 12) ||
            !thr_check(PL_BACKEND_REF, 3, 40, seed + (uint64_t)i, NULL) ||
            !thr_check(PL_BACKEND_CPU, 4, 30, seed + (uint64_t)i, NULL) ||
            (tk && !thr_check(PL_BACKEND_CPU, 3, 30, seed + (uint64_t)i, tk))) {
            fprintf(stderr, "tsan_threads: FAILED: %s\n", thr_failure());
            return 1;
        }
    }
    printf("tsan_threads: %d rounds passed\n", rounds);
    return 0;
}
