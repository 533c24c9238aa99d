/*
 * tests/cuda/test_cuemu.cpp - self-tests of the CUDA emulation (tests/support/cuemu.h).
 *
 * Each kernel below is written as for nvcc (through kernels/cuda/cuda_common.cuh) and checked
 * against a plain loop: barriers, warp-scoped shuffles (warp-0-only reductions, widths < 32,
 * partial last warps), atomics across blocks running on different OS threads, dynamic shared
 * memory, and the failures the emulation must report instead of hanging (divergent
 * __syncthreads, exited lanes in a shuffle, host pointers handed to kernels).
 */
#include <criterion/criterion.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "test_support.h"

// ---------------------------------------------------------------------------------------------
// Kernels under test

// out[b] = sum of in[b*n .. b*n + n): strided loads, warp shuffles, warp-0-only final reduction.
static __global__ void block_sum_kernel(float *out, const float *in, int n) {
    __shared__ float red[32];
    float s = 0.f;
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) s += in[(size_t)blockIdx.x * n + i];
    s = pl_block_reduce<false>(s, red);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}

// Every lane of every warp stores the ballot of (tid % 3 == 0) and a full-width sum.
static __global__ void ballot_kernel(unsigned *ballots, int *all_any) {
    const unsigned tid = threadIdx.x;
    unsigned b = __ballot_sync(0xffffffffu, tid % 3 == 0);
    int any = __any_sync(0xffffffffu, tid == 70);
    int all = __all_sync(0xffffffffu, tid < 1000);
    ballots[tid] = b;
    all_any[2 * tid] = any;
    all_any[2 * tid + 1] = all;
}

// out[4*t + k] = the four shuffle flavours with a sub-warp width.
static __global__ void shuffle_kernel(int *out, int width) {
    const int t = (int)threadIdx.x, v = 100 + t;
    out[4 * t + 0] = __shfl_sync(0xffffffffu, v, 3, width);
    out[4 * t + 1] = __shfl_up_sync(0xffffffffu, v, 2, width);
    out[4 * t + 2] = __shfl_down_sync(0xffffffffu, v, 2, width);
    out[4 * t + 3] = __shfl_xor_sync(0xffffffffu, v, 5, width);
}

static __global__ void divergent_sync_kernel(int *out) {
    if (threadIdx.x < 32)
        __syncthreads();
    else
        __syncthreads();
    out[threadIdx.x] = 1;
}

static __global__ void exit_then_sync_kernel(int *out) {
    if (threadIdx.x == 5) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

static __global__ void missing_lane_shuffle_kernel(int *out) {
    int v = (int)threadIdx.x;
    if (threadIdx.x != 7) v = __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}

static __global__ void atomics_kernel(int *count, float *fsum, int *maxv) {
    atomicAdd(count, 1);
    atomicAdd(fsum, 0.5f);
    atomicMax(maxv, (int)(blockIdx.x * blockDim.x + threadIdx.x));
}

// Reverses each block's slice through dynamic shared memory.
static __global__ void reverse_kernel(float *out, const float *in, int n) {
    DYNAMIC_SMEM(float, buf);
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) buf[i] = in[(size_t)blockIdx.x * n + i];
    __syncthreads();
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x)
        out[(size_t)blockIdx.x * n + i] = buf[n - 1 - i];
}

static __global__ void write_kernel(float *p) { p[threadIdx.x] = 1.f; }

// iters barriers and nothing else: the speed report's fiber-switch figure.
static __global__ void sync_loop_kernel(int *out, int iters) {
    for (int i = 0; i < iters; i++) __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = iters;
}

// ---------------------------------------------------------------------------------------------
// Helpers

template <typename T> static T *dev_alloc(size_t n) {
    void *p = nullptr;
    cr_assert_eq(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
    return (T *)p;
}
template <typename T> static void to_dev(T *d, const std::vector<T> &h) {
    cr_assert_eq(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice),
                 cudaSuccess);
}
template <typename T> static std::vector<T> from_dev(const T *d, size_t n) {
    std::vector<T> h(n);
    cr_assert_eq(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
}

TestSuite(cuemu, .timeout = 30.0);

// ---------------------------------------------------------------------------------------------
// Tests

Test(cuemu, block_reduction_with_warp0_shuffles) {
    const int n_blocks = 257, n = 1000;
    pl_test_rng rng;
    pl_test_rng_seed(&rng, 11);
    std::vector<float> in((size_t)n_blocks * n);
    pl_test_fill(&rng, in.data(), in.size(), 1.f);
    float *d_in = dev_alloc<float>(in.size()), *d_out = dev_alloc<float>(n_blocks);
    to_dev(d_in, in);
    // 96 threads: three warps, so the second reduction stage reads a partially filled red[].
    for (unsigned threads : {32u, 96u, 128u, 1024u}) {
        cr_assert_eq(launch(block_sum_kernel, dim3(n_blocks), dim3(threads), 0, nullptr, d_out,
                            (const float *)d_in, n),
                     cudaSuccess);
        std::vector<float> out = from_dev(d_out, n_blocks);
        for (int b = 0; b < n_blocks; b++) {
            double ref = 0;
            for (int i = 0; i < n; i++) ref += in[(size_t)b * n + i];
            cr_assert(std::fabs(out[b] - ref) <= 1e-4 * (1 + std::fabs(ref)),
                      "threads %u block %d: %g vs %g", threads, b, out[b], ref);
        }
    }
    cudaFree(d_in);
    cudaFree(d_out);
}

Test(cuemu, ballot_with_partial_last_warp) {
    const unsigned threads = 80; // warp 2 has lanes 0..15 only
    unsigned *d_b = dev_alloc<unsigned>(threads);
    int *d_aa = dev_alloc<int>(2 * threads);
    cr_assert_eq(launch(ballot_kernel, dim3(1), dim3(threads), 0, nullptr, d_b, d_aa), cudaSuccess);
    std::vector<unsigned> b = from_dev(d_b, threads);
    std::vector<int> aa = from_dev(d_aa, 2 * threads);
    for (unsigned t = 0; t < threads; t++) {
        unsigned warp = t / 32, expect = 0;
        for (unsigned l = 0; l < 32; l++) {
            unsigned u = warp * 32 + l;
            if (u < threads && u % 3 == 0) expect |= 1u << l;
        }
        cr_assert_eq(b[t], expect, "thread %u: ballot %#x, expected %#x", t, b[t], expect);
        cr_assert_eq(aa[2 * t], warp == 2 ? 1 : 0, "thread %u: __any_sync", t);
        cr_assert_eq(aa[2 * t + 1], 1, "thread %u: __all_sync", t);
    }
    cudaFree(d_b);
    cudaFree(d_aa);
}

Test(cuemu, shuffle_flavours_and_widths) {
    int *d = dev_alloc<int>(4 * 64);
    for (int width : {32, 16, 8, 4}) {
        cr_assert_eq(launch(shuffle_kernel, dim3(1), dim3(64), 0, nullptr, d, width), cudaSuccess);
        std::vector<int> out = from_dev(d, 4 * 64);
        for (int t = 0; t < 64; t++) {
            int lane = t % 32, seg = lane / width * width, wbase = t - lane;
            int idx = wbase + seg + 3 % width;
            int up = lane - 2 >= seg ? t - 2 : t;
            int down = lane + 2 < seg + width ? t + 2 : t;
            int x = lane ^ 5, xr = x < seg + width ? wbase + x : t;
            cr_assert_eq(out[4 * t + 0], 100 + idx, "width %d t %d idx", width, t);
            cr_assert_eq(out[4 * t + 1], 100 + up, "width %d t %d up", width, t);
            cr_assert_eq(out[4 * t + 2], 100 + down, "width %d t %d down", width, t);
            cr_assert_eq(out[4 * t + 3], 100 + xr, "width %d t %d xor", width, t);
        }
    }
    cudaFree(d);
}

Test(cuemu, divergent_syncthreads_fails_the_launch) {
    int *d = dev_alloc<int>(64);
    cr_assert_eq(launch(divergent_sync_kernel, dim3(3), dim3(64), 0, nullptr, d),
                 cudaErrorLaunchFailure);
    cr_assert(cuemu::last_failure().find("divergent __syncthreads") != std::string::npos, "%s",
              cuemu::last_failure().c_str());
    cr_assert_eq(cudaGetLastError(), cudaSuccess, "launch() already returned the error");
    cr_assert_eq(cudaDeviceSynchronize(), cudaErrorLaunchFailure, "reported once at the next sync");
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    cudaGetLastError();

    cr_assert_eq(launch(exit_then_sync_kernel, dim3(2), dim3(64), 0, nullptr, d),
                 cudaErrorLaunchFailure);
    cr_assert(cuemu::last_failure().find("exited") != std::string::npos, "%s",
              cuemu::last_failure().c_str());
    cudaDeviceSynchronize();
    cudaGetLastError();

    cr_assert_eq(launch(missing_lane_shuffle_kernel, dim3(1), dim3(32), 0, nullptr, d),
                 cudaErrorLaunchFailure);
    cr_assert(cuemu::last_failure().find("lane 7") != std::string::npos ||
                  cuemu::last_failure().find("deadlock") != std::string::npos,
              "%s", cuemu::last_failure().c_str());
    cudaDeviceSynchronize();
    cudaGetLastError();

    // The emulator is usable again after failures (stacks reused, state reset).
    float *s = dev_alloc<float>(4);
    std::vector<float> ones(4 * 100, 1.f);
    float *in = dev_alloc<float>(ones.size());
    to_dev(in, ones);
    cr_assert_eq(launch(block_sum_kernel, dim3(4), dim3(64), 0, nullptr, s, (const float *)in, 100),
                 cudaSuccess);
    cr_assert_eq(from_dev(s, 4)[3], 100.f);
    cudaFree(s);
    cudaFree(in);
    cudaFree(d);
}

Test(cuemu, atomics_across_parallel_blocks) {
    int *d_count = dev_alloc<int>(1), *d_max = dev_alloc<int>(1);
    float *d_f = dev_alloc<float>(1);
    cudaMemset(d_count, 0, sizeof(int));
    cudaMemset(d_max, 0, sizeof(int));
    cudaMemset(d_f, 0, sizeof(float));
    const int blocks = 200, threads = 64;
    cr_assert_eq(launch(atomics_kernel, dim3(blocks), dim3(threads), 0, nullptr, d_count, d_f, d_max),
                 cudaSuccess);
    cr_assert_eq(from_dev(d_count, 1)[0], blocks * threads);
    cr_assert_eq(from_dev(d_f, 1)[0], 0.5f * blocks * threads); // exact: sums of halves
    cr_assert_eq(from_dev(d_max, 1)[0], blocks * threads - 1);
    cudaFree(d_count);
    cudaFree(d_max);
    cudaFree(d_f);
}

Test(cuemu, dynamic_shared_memory_and_its_limit) {
    const int n = 20000, blocks = 3; // 80 KB of dynamic shared memory
    std::vector<float> in((size_t)n * blocks);
    for (size_t i = 0; i < in.size(); i++) in[i] = (float)i;
    float *d_in = dev_alloc<float>(in.size()), *d_out = dev_alloc<float>(in.size());
    to_dev(d_in, in);
    const size_t smem = (size_t)n * sizeof(float);
    cr_assert_eq(launch(reverse_kernel, dim3(blocks), dim3(128), smem, nullptr, d_out,
                        (const float *)d_in, n),
                 cudaErrorInvalidValue, "above 48 KiB without the attribute");
    cr_assert_eq(cudaFuncSetAttribute(reverse_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)smem),
                 cudaSuccess);
    cr_assert_eq(launch(reverse_kernel, dim3(blocks), dim3(128), smem, nullptr, d_out,
                        (const float *)d_in, n),
                 cudaSuccess);
    std::vector<float> out = from_dev(d_out, in.size());
    for (int b = 0; b < blocks; b++)
        for (int i = 0; i < n; i++)
            cr_assert_eq(out[(size_t)b * n + i], in[(size_t)b * n + n - 1 - i]);
    cudaFree(d_in);
    cudaFree(d_out);
}

Test(cuemu, host_pointers_are_refused) {
    std::vector<float> host(64);
    cr_assert_eq(launch(write_kernel, dim3(1), dim3(32), 0, nullptr, host.data()),
                 cudaErrorInvalidValue);
    cr_assert(cuemu::last_failure().find("not device memory") != std::string::npos);
    cudaGetLastError();
    float *d = dev_alloc<float>(32);
    cr_assert_eq(cudaMemcpy(host.data(), d, 128, cudaMemcpyHostToDevice), cudaErrorInvalidValue,
                 "direction swapped");
    cr_assert_eq(cudaMemcpy(d, host.data(), 256, cudaMemcpyHostToDevice), cudaErrorInvalidValue,
                 "past the end of the allocation");
    cr_assert_eq(cudaFree(host.data()), cudaErrorInvalidValue);
    cudaGetLastError();
    cudaFree(d);
}

Test(cuemu, invalid_configuration) {
    float *d = dev_alloc<float>(32);
    cr_assert_eq(launch(write_kernel, dim3(1), dim3(1025), 0, nullptr, d),
                 cudaErrorInvalidConfiguration);
    cr_assert_eq(launch(write_kernel, dim3(0), dim3(32), 0, nullptr, d),
                 cudaErrorInvalidConfiguration);
    cudaGetLastError();
    cudaFree(d);
}

Test(cuemu, gemm_ex_matches_loops) {
    // C (m x n) = A^T B with A stored (k x m) column-major, f16 operands, f32 out.
    const int m = 7, n = 3, k = 19;
    pl_test_rng rng;
    pl_test_rng_seed(&rng, 5);
    std::vector<float> a((size_t)m * k), b((size_t)k * n);
    pl_test_fill(&rng, a.data(), a.size(), 1.f);
    pl_test_fill(&rng, b.data(), b.size(), 1.f);
    std::vector<__half> ah(a.size()), bh(b.size());
    for (size_t i = 0; i < a.size(); i++) ah[i] = __float2half_rn(a[i]);
    for (size_t i = 0; i < b.size(); i++) bh[i] = __float2half_rn(b[i]);
    __half *da = dev_alloc<__half>(ah.size()), *db = dev_alloc<__half>(bh.size());
    float *dc = dev_alloc<float>((size_t)m * n);
    to_dev(da, ah);
    to_dev(db, bh);
    cublasHandle_t h = nullptr;
    cr_assert_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    const float one = 1.f, zero = 0.f;
    cr_assert_eq(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, da, CUDA_R_16F, k, db,
                              CUDA_R_16F, k, &zero, dc, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_SUCCESS);
    std::vector<float> c = from_dev(dc, (size_t)m * n);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double ref = 0;
            for (int l = 0; l < k; l++)
                ref += (double)__half2float(ah[(size_t)i * k + l]) *
                       __half2float(bh[(size_t)j * k + l]);
            cr_assert(std::fabs(c[(size_t)i + (size_t)j * m] - ref) < 1e-5, "c[%d,%d]", i, j);
        }
    std::vector<float> host(4);
    cr_assert_eq(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, da, CUDA_R_16F, k,
                              host.data(), CUDA_R_16F, k, &zero, dc, CUDA_R_32F, m,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_INVALID_VALUE, "host operand");
    cublasDestroy(h);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
}

Test(cuemu, half_conversions_round_to_nearest_even) {
    cr_assert_eq(__half_as_ushort(__float2half_rn(1.0f)), 0x3c00);
    cr_assert_eq(__half_as_ushort(__float2half_rn(65520.f)), 0x7c00, "overflow to inf");
    cr_assert_eq(__half_as_ushort(__float2half_rn(1.0f + 1.0f / 2048)), 0x3c00, "tie to even");
    cr_assert_eq(__half_as_ushort(__float2half_rn(1.0f + 3.0f / 2048)), 0x3c02, "tie to even");
    cr_assert_eq(__half2float(__ushort_as_half(0x0001)), std::ldexp(1.f, -24), "subnormal");
    cr_assert_eq(__bfloat16_as_ushort(__float2bfloat16_rn(1.0f + 1.0f / 256)), 0x3f80);
    cr_assert_eq(__bfloat162float(__float2bfloat16_rn(-2.5f)), -2.5f);
}

// Emulation speed (printed for docs/kernels.md; asserts only that the kernels ran):
// - block_sum: 128 threads, 2 __syncthreads and 10 shuffle rounds per block, 2000 blocks
//   spread over CUEMU_THREADS OS threads.
// - fiber switch: one block (so one OS thread whatever CUEMU_THREADS says) of 128 threads
//   doing nothing but __syncthreads. At each barrier every thread switches to the scheduler
//   once and the scheduler switches into every thread once (the last arriver keeps running
//   into the next barrier), so a barrier is 2 x 128 switches; the figure includes the
//   scheduler's round-robin scan and the barrier bookkeeping, not only the 14 instructions.
Test(cuemu, speed_report) {
    const int n_blocks = 2000, n = 1024;
    std::vector<float> in((size_t)n_blocks * n, 1.f);
    float *d_in = dev_alloc<float>(in.size()), *d_out = dev_alloc<float>(n_blocks);
    to_dev(d_in, in);
    double t0 = cuemu::now_s();
    cr_assert_eq(launch(block_sum_kernel, dim3(n_blocks), dim3(128), 0, nullptr, d_out,
                        (const float *)d_in, n),
                 cudaSuccess);
    double dt = cuemu::now_s() - t0;
    cr_assert_eq(from_dev(d_out, n_blocks)[n_blocks - 1], (float)n);
    fprintf(stderr, "cuemu speed: block_sum 128 threads x %d blocks: %.0f blocks/s (%u threads)\n",
            n_blocks, n_blocks / dt, cuemu::n_threads());
    cudaFree(d_in);
    cudaFree(d_out);

    const int threads = 128, iters = 16000;
    int *d_it = dev_alloc<int>(1);
    t0 = cuemu::now_s();
    cr_assert_eq(launch(sync_loop_kernel, dim3(1), dim3(threads), 0, nullptr, d_it, iters),
                 cudaSuccess);
    dt = cuemu::now_s() - t0;
    cr_assert_eq(from_dev(d_it, 1)[0], iters);
    const double switches = 2.0 * threads * iters;
    fprintf(stderr, "cuemu speed: fiber switch: %.1f ns (%d __syncthreads x %d threads, one OS "
                    "thread, %.0f switches in %.1f ms)\n",
            dt / switches * 1e9, iters, threads, switches, dt * 1e3);
    cudaFree(d_it);
}
