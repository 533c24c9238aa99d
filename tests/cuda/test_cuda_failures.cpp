/*
 * tests/cuda/test_cuda_failures.cpp - the CUDA backend's failure paths, which need the
 * emulation's hooks to provoke (suite 'cuda' only): no device at all, device allocations
 * failing at every point of backend creation, the device running out of memory, and a CUDA
 * error inside an op coming back as PL_ERR_BACKEND naming the call and CUDA's error string.
 */
#include <criterion/criterion.h>

#include <string>

#include "cuemu.h"
#include "kernels/backend.h"
#include "test_support.h"
#include "util/alloc.h"

TestSuite(cuda_failures, .timeout = 60.0);

static bool has(const char *haystack, const char *needle) {
    return std::string(haystack).find(needle) != std::string::npos;
}

Test(cuda_failures, no_device_is_a_clear_error) {
    cuemu::set_device_count(0);
    pl_backend *be = (pl_backend *)&be; /* must come back NULL */
    cr_assert_eq(pl_backend_cuda_create(nullptr, &be), PL_ERR_BACKEND);
    cr_assert_null(be);
    cr_assert(has(pl_last_error(), "no CUDA device found"), "%s", pl_last_error());
    cr_assert(has(pl_last_error(), "cudaGetDeviceCount"), "%s", pl_last_error());
    cr_assert(has(pl_last_error(), "no CUDA-capable device"), "%s", pl_last_error());
    cuemu::set_device_count(1);
    cr_assert_eq(pl_backend_cuda_create(nullptr, &be), PL_OK, "%s", pl_last_error());
    pl_backend_destroy(be);
    PL_ASSERT_NO_LEAKS();
}

Test(cuda_failures, every_failure_during_create_cleans_up) {
    const size_t base = cuemu::device_bytes_in_use();
    /* device allocations: fail the n-th one for every n until creation succeeds */
    for (long n = 0;; n++) {
        cuemu::fail_malloc_after(n);
        pl_backend *be = nullptr;
        pl_status st = pl_backend_cuda_create(nullptr, &be);
        cuemu::fail_malloc_after(-1);
        if (st == PL_OK) {
            pl_backend_destroy(be);
            break;
        }
        cr_assert_eq(st, PL_ERR_BACKEND, "n %ld: %s", n, pl_last_error());
        cr_assert_null(be);
        cr_assert_eq(cuemu::device_bytes_in_use(), base, "n %ld: device memory leaked", n);
        cr_assert(n < 20, "creation never succeeded");
    }
    /* host allocations (the library's pl_malloc) */
    for (long n = 0;; n++) {
        pl_alloc_fail_after(n);
        pl_backend *be = nullptr;
        pl_status st = pl_backend_cuda_create(nullptr, &be);
        pl_alloc_fail_after(-1);
        if (st == PL_OK) {
            pl_backend_destroy(be);
            break;
        }
        cr_assert_eq(st, PL_ERR_OUT_OF_MEMORY, "n %ld: %s", n, pl_last_error());
        cr_assert_null(be);
        cr_assert(n < 20, "creation never succeeded");
    }
    cr_assert_eq(cuemu::device_bytes_in_use(), base);
    PL_ASSERT_NO_LEAKS();
}

Test(cuda_failures, device_out_of_memory) {
    pl_backend *be = nullptr;
    cr_assert_eq(pl_backend_cuda_create(nullptr, &be), PL_OK, "%s", pl_last_error());
    size_t free_b = 0, total = 0;
    cr_assert_eq(be->ops->memory_info(be, &free_b, &total), PL_OK);
    void *p = nullptr;
    cr_assert_eq(be->ops->alloc(be, free_b + 1, &p), PL_ERR_OUT_OF_MEMORY);
    cr_assert_null(p);
    cr_assert(has(pl_last_error(), "cudaMalloc") && has(pl_last_error(), "out of memory"), "%s",
              pl_last_error());
    cr_assert_eq(be->ops->alloc(be, 1 << 20, &p), PL_OK);
    size_t free2 = 0;
    cr_assert_eq(be->ops->memory_info(be, &free2, &total), PL_OK);
    cr_assert_eq(free2, free_b - (1 << 20), "memory_info follows allocations");
    be->ops->free(be, p);
    pl_backend_destroy(be);
    PL_ASSERT_NO_LEAKS();
}

Test(cuda_failures, cuda_errors_become_backend_errors) {
    pl_backend *be = nullptr;
    cr_assert_eq(pl_backend_cuda_create(nullptr, &be), PL_OK, "%s", pl_last_error());
    /* host memory handed to an op: the launch is refused, and the op says which call failed
     * and how (a GPU would fault at the next sync instead; both end in PL_ERR_BACKEND) */
    float host[64] = {0}, w[8] = {0};
    cr_assert_eq(be->ops->rmsnorm(be, host, host, w, 8, 8, 1e-5f), PL_ERR_BACKEND);
    cr_assert(has(pl_last_error(), "launch(rmsnorm_rows_kernel"), "%s", pl_last_error());
    cr_assert(has(pl_last_error(), "cudaErrorInvalidValue"), "%s", pl_last_error());
    cr_assert(has(pl_last_error(), "rmsnorm.cu"), "%s", pl_last_error());
    /* download into device memory is a wrong direction */
    void *d = nullptr;
    cr_assert_eq(be->ops->alloc(be, 256, &d), PL_OK);
    cr_assert_eq(be->ops->download(be, d, d, 256), PL_ERR_BACKEND);
    cr_assert(has(pl_last_error(), "cudaMemcpyAsync"), "%s", pl_last_error());
    /* the backend stays usable */
    cr_assert_eq(be->ops->sync(be), PL_OK, "%s", pl_last_error());
    float back[64];
    cr_assert_eq(be->ops->download(be, back, d, 256), PL_OK, "%s", pl_last_error());
    cr_assert_eq(back[63], 0.f);
    be->ops->free(be, d);
    pl_backend_destroy(be);
    PL_ASSERT_NO_LEAKS();
}
