/*
 * tests/support/models_main.c - a Criterion main for suites that need ../shared/models.
 *
 * When PAGELLM_TEST_MODELS is unset the whole binary says so and exits 77, which meson reports
 * as SKIP: a missing model folder never looks like a pass.
 */
#include <criterion/criterion.h>
#include <stdio.h>

#include "test_support.h"

int main(int argc, char *argv[]) {
    if (!pl_test_models_dir()) {
        fprintf(stderr, "SKIP: PAGELLM_TEST_MODELS is not set; these tests need the shared "
                        "models folder (.ci/run sets it to ../shared/models)\n");
        return 77;
    }
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true)) result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return result;
}
