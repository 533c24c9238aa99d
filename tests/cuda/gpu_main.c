/*
 * tests/cuda/gpu_main.c - Criterion main for the native CUDA suite ('gpu'): exit 77 (SKIP)
 * when no CUDA device is usable, so a machine without a GPU never reports a silent pass.
 *
 * The probe runs in a forked child: initialising CUDA in this process before Criterion forks
 * its test workers would leave them with an unusable CUDA state.
 *
 * Built with -DPL_GPU_MAIN_NEEDS_MODELS (suites that read ../shared/models, as models_main.c
 * does for the emulated ones), a missing PAGELLM_TEST_MODELS is a SKIP too.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/backend.h"
#ifdef PL_GPU_MAIN_NEEDS_MODELS
#include "test_support.h"
#endif

static int device_usable(void) {
    pid_t pid = fork();
    if (pid < 0) return 0;
    if (pid == 0) {
        pl_backend *be = NULL;
        pl_status st = pl_backend_cuda_create(NULL, &be);
        if (st != PL_OK) fprintf(stderr, "SKIP: %s\n", pl_last_error());
        pl_backend_destroy(be);
        _exit(st == PL_OK ? 0 : 1);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char *argv[]) {
#ifdef PL_GPU_MAIN_NEEDS_MODELS
    if (!pl_test_models_dir()) {
        fprintf(stderr, "SKIP: PAGELLM_TEST_MODELS is not set; these tests need the shared "
                        "models folder (.ci/run sets it to ../shared/models)\n");
        return 77;
    }
#endif
    if (!device_usable()) {
        fprintf(stderr, "SKIP: no usable CUDA device; the 'cuda' suite runs these tests under "
                        "the CPU emulation\n");
        return 77;
    }
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true)) result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return result;
}
