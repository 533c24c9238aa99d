/*
 * tests/cuda/test_cuda_failures.cpp - the CUDA backend's failure paths, which need the
 * emulation's hooks to provoke (suite 'cuda' only): no device at all, device allocations
 * failing at every point of backend creation, the device running out of memory, and a CUDA
 * error inside an op coming back as PL_ERR_BACKEND naming the call and CUDA's error string.
 */
#include <criterion/criterion.h>

#include <string>
#include <thread>
#include <vector>

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

/* The current CUDA device is per host thread. A backend made for device 1 and then used from
 * a thread that never called cudaSetDevice (a server's stepping thread, Python's step() from
 * another thread) must still run on device 1: every entry binds its device. Under the
 * emulation a launch on another device's stream fails (cudaErrorInvalidResourceHandle) and an
 * allocation lands on the thread's current device, as on a GPU. */
Test(cuda_failures, every_entry_binds_the_backend_device) {
    cuemu::set_device_count(2);
    pl_backend_options o = {};
    o.n_threads = 1;
    o.device = 1;
    o.kv_dtype = PL_DTYPE_AUTO;
    pl_backend *be = nullptr;
    cr_assert_eq(pl_backend_cuda_create(&o, &be), PL_OK, "%s", pl_last_error());
    cudaSetDevice(0); /* the creating thread moves on to device 0 */
    struct result {
        pl_status alloc = PL_ERR_BACKEND, norm = PL_ERR_BACKEND, get = PL_ERR_BACKEND;
        int alloc_device = -1;
        float back[8] = {0};
        std::string msg;
    } r;
    auto work = [&]() {
        void *d = nullptr;
        r.alloc = be->ops->alloc(be, 64 * sizeof(float), &d);
        if (r.alloc != PL_OK) return;
        r.alloc_device = cuemu::device_of(d);
        float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        float *x = (float *)d, *w = x + 8;
        be->ops->upload(be, x, ones, sizeof ones);
        be->ops->upload(be, w, ones, sizeof ones);
        r.norm = be->ops->rmsnorm(be, x + 16, x, w, 1, 8, 1e-5f);
        if (r.norm != PL_OK) r.msg = pl_last_error();
        r.get = be->ops->download(be, r.back, x + 16, sizeof r.back);
        be->ops->free(be, d);
    };
    std::thread t(work); /* a new thread: device 0 is current there */
    t.join();
    cr_assert_eq(r.alloc, PL_OK);
    cr_assert_eq(r.alloc_device, 1, "allocated on device %d", r.alloc_device);
    cr_assert_eq(r.norm, PL_OK, "%s", r.msg.c_str());
    cr_assert_eq(r.get, PL_OK);
    for (int i = 0; i < 8; i++) cr_assert_float_eq(r.back[i], 1.f, 1e-5f);
    /* this thread, now on device 0, too */
    void *d = nullptr;
    cr_assert_eq(be->ops->alloc(be, 256, &d), PL_OK, "%s", pl_last_error());
    cr_assert_eq(cuemu::device_of(d), 1);
    be->ops->free(be, d);
    pl_backend_destroy(be);
    cudaSetDevice(0);
    cuemu::set_device_count(1);
    PL_ASSERT_NO_LEAKS();
}

/* A device fault (an illegal address) is sticky: the op that launched the faulting kernel
 * returned, the next sync reports it, and from then on every call fails. The backend says so
 * once (be->lost, PL_ERR_BACKEND naming the error and that the process must restart) and every
 * later entry fails at once with the same words, without touching the device. */
Test(cuda_failures, a_sticky_device_error_marks_the_backend_lost) {
    pl_backend *be = nullptr;
    cr_assert_eq(pl_backend_cuda_create(nullptr, &be), PL_OK, "%s", pl_last_error());
    float *d = nullptr;
    cr_assert_eq(be->ops->alloc(be, 64 * sizeof(float), (void **)&d), PL_OK);
    float ones[16];
    for (float &v : ones) v = 1.f;
    cr_assert_eq(be->ops->upload(be, d, ones, sizeof ones), PL_OK);
    cuemu::inject_fault_after_launches(0, cudaErrorIllegalAddress);
    /* the faulting launch itself returns: launches are asynchronous */
    cr_assert_eq(be->ops->rmsnorm(be, d + 16, d, d + 8, 1, 8, 1e-5f), PL_OK, "%s",
                 pl_last_error());
    cr_assert(!be->lost);
    cr_assert_eq(be->ops->sync(be), PL_ERR_BACKEND);
    cr_assert(be->lost, "a sticky error must mark the backend lost");
    cr_assert(has(pl_last_error(), "is lost") && has(pl_last_error(), "cudaErrorIllegalAddress") &&
                  has(pl_last_error(), "restart"),
              "%s", pl_last_error());
    /* every later entry: refused at once, the same reason */
    void *p = nullptr;
    cr_assert_eq(be->ops->alloc(be, 16, &p), PL_ERR_BACKEND);
    cr_assert(has(pl_last_error(), "cudaErrorIllegalAddress"), "%s", pl_last_error());
    float back[8];
    cr_assert_eq(be->ops->download(be, back, d, sizeof back), PL_ERR_BACKEND);
    cr_assert_eq(be->ops->rmsnorm(be, d + 16, d, d + 8, 1, 8, 1e-5f), PL_ERR_BACKEND);
    size_t f = 0, t = 0;
    cr_assert_eq(be->ops->memory_info(be, &f, &t), PL_ERR_BACKEND);
    /* freeing still works (destroying an engine after a fault must not leak) */
    be->ops->free(be, d);
    pl_backend_destroy(be);
    /* a new backend in the same process fails too: the error is the process's */
    cr_assert_eq(pl_backend_cuda_create(nullptr, &be), PL_ERR_BACKEND);
    cr_assert(has(pl_last_error(), "cudaErrorIllegalAddress"), "%s", pl_last_error());
    cuemu::clear_sticky_error();
    PL_ASSERT_NO_LEAKS();
}

/* Errors that leave the device usable do not mark it lost: out of memory, a refused launch. */
Test(cuda_failures, recoverable_errors_keep_the_backend) {
    pl_backend *be = nullptr;
    cr_assert_eq(pl_backend_cuda_create(nullptr, &be), PL_OK, "%s", pl_last_error());
    size_t free_b = 0, total = 0;
    cr_assert_eq(be->ops->memory_info(be, &free_b, &total), PL_OK);
    void *p = nullptr;
    cr_assert_eq(be->ops->alloc(be, free_b + 1, &p), PL_ERR_OUT_OF_MEMORY);
    float host[64] = {0}, w[8] = {0};
    cr_assert_eq(be->ops->rmsnorm(be, host, host, w, 8, 8, 1e-5f), PL_ERR_BACKEND);
    cr_assert(!be->lost);
    cr_assert_eq(be->ops->alloc(be, 256, &p), PL_OK, "%s", pl_last_error());
    cr_assert_eq(be->ops->sync(be), PL_OK, "%s", pl_last_error());
    be->ops->free(be, p);
    pl_backend_destroy(be);
    PL_ASSERT_NO_LEAKS();
}

/* reserve (kernels/backend.h): once the scratch for the largest step exists, steps within it
 * allocate nothing on the device, so the KV pool sized after it cannot be squeezed out by a
 * large prefill. The matmul activations, a quantised prefill's dequantised tile and split-K's
 * partitions for the longest context: device memory in use is the same before and after. */
Test(cuda_failures, reserve_makes_the_largest_step_allocate_nothing) {
    pl_backend *be = nullptr;
    cr_assert_eq(pl_backend_cuda_create(nullptr, &be), PL_OK, "%s", pl_last_error());
    cr_assert_not_null(be->ops->reserve);
    const int rows = 24, d_in = 256, d_out = 96, heads = 2, hd = 16, ctx = 1200, bs = 16;
    pl_backend_reserve rs = {};
    rs.max_rows = rows, rs.max_d_in = d_in, rs.max_d_out = d_out, rs.quantized = true;
    rs.max_seqs = 1, rs.n_heads = heads, rs.head_dim = hd, rs.max_context = ctx;
    /* device buffers the test needs, allocated first */
    float *x = nullptr, *out = nullptr, *q = nullptr, *att = nullptr;
    void *wq = nullptr, *kc = nullptr, *vc = nullptr;
    int32_t *meta = nullptr;
    const size_t n_blocks = ctx / bs;
    const size_t cache_bytes = n_blocks * bs * hd * 2; /* one KV head, f16 */
    cr_assert_eq(be->ops->alloc(be, (size_t)rows * d_in * 4, (void **)&x), PL_OK);
    cr_assert_eq(be->ops->alloc(be, (size_t)rows * d_out * 4, (void **)&out), PL_OK);
    cr_assert_eq(be->ops->alloc(be, (size_t)heads * hd * 4, (void **)&q), PL_OK);
    cr_assert_eq(be->ops->alloc(be, (size_t)heads * hd * 4, (void **)&att), PL_OK);
    cr_assert_eq(be->ops->alloc(be, cache_bytes, &kc), PL_OK);
    cr_assert_eq(be->ops->alloc(be, cache_bytes, &vc), PL_OK);
    std::vector<uint8_t> qblocks((size_t)d_out * d_in / 32 * 34, 0);
    pl_wtype st = PL_WTYPE_NONE;
    cr_assert_eq(be->ops->upload_weight(be, qblocks.data(), PL_WTYPE_Q8_0, (size_t)d_out * d_in,
                                        &wq, &st), PL_OK, "%s", pl_last_error());
    std::vector<int32_t> hmeta(3 + n_blocks);
    hmeta[0] = 0, hmeta[1] = 1, hmeta[2] = ctx; /* query_start (2), context_lens (1), table */
    for (size_t i = 0; i < n_blocks; i++) hmeta[3 + i] = (int32_t)i;
    cr_assert_eq(be->ops->alloc(be, hmeta.size() * 4, (void **)&meta), PL_OK);
    cr_assert_eq(be->ops->upload(be, meta, hmeta.data(), hmeta.size() * 4), PL_OK);

    cr_assert_eq(be->ops->reserve(be, &rs), PL_OK, "%s", pl_last_error());
    const size_t before = cuemu::device_bytes_in_use();
    cr_assert_eq(be->ops->matmul(be, out, x, wq, st, rows, d_in, d_out), PL_OK, "%s",
                 pl_last_error());
    pl_attn_batch ab = {};
    ab.n_seqs = 1, ab.n_tokens = 1, ab.query_start = meta, ab.context_lens = meta + 2;
    ab.block_tables = meta + 3, ab.max_blocks_per_seq = (int)n_blocks, ab.max_query_len = 1;
    ab.max_context_len = ctx, ab.n_heads = heads, ab.n_kv_heads = 1, ab.head_dim = hd;
    ab.block_size = bs, ab.scale = 0.25f;
    cr_assert_eq(be->ops->attention(be, att, q, kc, vc, &ab), PL_OK, "%s", pl_last_error());
    cr_assert_eq(be->ops->sync(be), PL_OK, "%s", pl_last_error());
    cr_assert_eq(cuemu::device_bytes_in_use(), before,
                 "a step within the reservation allocated %zd bytes",
                 (ssize_t)(cuemu::device_bytes_in_use() - before));
    void *bufs[] = {x, out, q, att, kc, vc, meta};
    for (void *b : bufs) be->ops->free(be, b);
    be->ops->free_weight(be, wq, nullptr);
    pl_backend_destroy(be);
    PL_ASSERT_NO_LEAKS();
}
