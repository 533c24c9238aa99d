/*
 * kernels/cuda/sample.cu - greedy sampling on the device: out (n_rows) int32 = argmax of each
 * logits row (n_rows, vocab) f32.
 *
 * Ties go to the lowest index and NaN never wins (a row of NaN gives 0), the same rule as a
 * left-to-right `if (x > best)` scan. One block of 256 threads per row: each thread scans a
 * strided slice, then (value, index) pairs are reduced with shuffles and across warps.
 * Temperature / top-k / top-p sampling stays on the host: it needs the sorted or partially
 * sorted distribution and per-request RNG state, and at batch 64 x 32k vocab the logits are
 * 8 MiB per step, which PCIe moves in well under a millisecond.
 */
#include "kernels/cuda/backend_cuda.cuh"

static constexpr int kThreads = 256;

/* Does (v, i) beat (best, bi)? Larger value, or equal value at a lower index. */
static __device__ __forceinline__ bool beats(float v, int i, float best, int bi) {
    return v > best || (v == best && i < bi);
}

static __global__ void __launch_bounds__(kThreads)
argmax_kernel(int32_t *__restrict__ out, const float *__restrict__ logits, int vocab) {
    __shared__ float val_s[kThreads / 32];
    __shared__ int idx_s[kThreads / 32];
    const float *row = logits + (size_t)blockIdx.x * (size_t)vocab; /* (vocab) */
    float best = -INFINITY;
    int bi = vocab; /* sentinel: nothing yet (-inf still beats it, NaN never does) */
    for (int i = (int)threadIdx.x; i < vocab; i += kThreads)
        if (beats(row[i], i, best, bi)) {
            best = row[i];
            bi = i;
        }
    PL_UNROLL
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (beats(ov, oi, best, bi)) {
            best = ov;
            bi = oi;
        }
    }
    const int lane = (int)(threadIdx.x & 31u), warp = (int)(threadIdx.x >> 5);
    if (lane == 0) {
        val_s[warp] = best;
        idx_s[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kThreads / 32; w++)
            if (beats(val_s[w], idx_s[w], best, bi)) {
                best = val_s[w];
                bi = idx_s[w];
            }
        out[blockIdx.x] = bi < vocab ? bi : 0;
    }
}

static pl_status launch_argmax(pl_backend *be, int32_t *out, const float *logits, int n_rows,
                               int vocab) {
    PL_CUDA_TRY(launch(argmax_kernel, dim3((unsigned)n_rows), dim3(kThreads), 0,
                       pl_cuda_ctx_of(be)->stream, out, logits, vocab));
    return PL_OK;
}

pl_status pl_cuda_argmax(pl_backend *be, int32_t *out, const float *logits, int n_rows,
                         int vocab) {
    if (!pl_backend_is_cuda(be))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "argmax: not a CUDA backend");
    if (n_rows < 0 || vocab <= 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "argmax: n_rows %d, vocab %d", n_rows, vocab);
    if (n_rows == 0) return PL_OK;
    if (!out || !logits) return pl_fail(PL_ERR_INVALID_ARGUMENT, "argmax: out or logits is NULL");
    PL_TRY(pl_cuda_enter(be));
    return pl_cuda_leave(be, launch_argmax(be, out, logits, n_rows, vocab));
}
