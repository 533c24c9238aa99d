/*
 * kernels/cuda/cuda_common.cuh - what every CUDA source of the backend includes first.
 *
 * This is the one place that tells the two compilers apart: nvcc gets cuda_runtime.h, the
 * fp16/bf16 headers and cuBLAS; a host C++ compiler (the tests) gets tests/support/cuemu.h,
 * which emulates the same names on the CPU. Kernel text is shared verbatim, with two
 * concessions both compilers accept:
 * - launch(kernel, grid, block, smem, stream, args...) instead of kernel<<<...>>>(args...);
 *   it returns the launch's cudaError_t (cudaGetLastError()).
 * - DYNAMIC_SMEM(T, name) declares `T *name` over the block's dynamic shared memory
 *   (16-byte aligned) instead of `extern __shared__ T name[]`.
 * Device helpers here are `static __device__ __forceinline__`: the backend is built without
 * relocatable device code (-rdc), so nothing device-side crosses a translation unit.
 *
 * Also here: PL_CUDA_TRY / PL_CUBLAS_TRY, which turn every CUDA and cuBLAS error into
 * PL_ERR_BACKEND with the failing call, file:line and CUDA's own error name and string.
 */
#ifndef PL_KERNELS_CUDA_COMMON_CUH
#define PL_KERNELS_CUDA_COMMON_CUH

#include <stddef.h>
#include <stdint.h>

#include <utility>

#if defined(__CUDACC__)
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define DYNAMIC_SMEM(T, name)                                                                 \
    extern __shared__ __align__(16) unsigned char pl_dyn_smem_[];                             \
    T *name = reinterpret_cast<T *>(pl_dyn_smem_)
// PL_VEC_ALIGNED(p, n): p, the address of an n-byte vector access (n = 8 or 16), is n-byte
// aligned. Nothing on the GPU (a misaligned vector access faults there: cudaErrorMisalignedAddress);
// the emulation fails the launch, naming the file and line, so a kernel that relies on an
// alignment the host side did not check is caught on the CPU.
#define PL_VEC_ALIGNED(p, n) ((void)0)
#define PL_UNROLL _Pragma("unroll")
#define PL_PRAGMA_(x) _Pragma(#x)
#define PL_UNROLL_N(n) PL_PRAGMA_(unroll n)

template <typename... P, typename... A>
static inline cudaError_t launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                                 cudaStream_t stream, A &&...args) {
    kernel<<<grid, block, smem, stream>>>(std::forward<A>(args)...);
    return cudaGetLastError();
}
#else
#include "cuemu.h"

#define DYNAMIC_SMEM(T, name) T *name = reinterpret_cast<T *>(::cuemu::dynamic_smem())
#define PL_VEC_ALIGNED(p, n) ::cuemu::check_aligned((const void *)(p), (n), __FILE__, __LINE__)
#define PL_UNROLL
#define PL_UNROLL_N(n)
using cuemu::launch;
#endif

#include "kernels/backend.h"
#include "util/status.h"

// ---------------------------------------------------------------------------------------------
// Error checks: return PL_ERR_BACKEND from the calling function, never exit.

// Records a sticky error (one that leaves the device unusable for the rest of the process:
// an illegal address, a misaligned access, a device-side trap, an ECC error...) for the
// backend entry on this thread (backend_cuda.cu), which marks its backend lost.
void pl_cuda_note_error(cudaError_t e);

#define PL_CUDA_TRY(call)                                                                     \
    do {                                                                                      \
        cudaError_t pl_cu_e_ = (call);                                                        \
        if (pl_cu_e_ != cudaSuccess) {                                                        \
            (void)cudaGetLastError(); /* clear it so the next check sees only new errors */   \
            pl_cuda_note_error(pl_cu_e_);                                                     \
            return pl_fail(PL_ERR_BACKEND, "%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call,   \
                           cudaGetErrorName(pl_cu_e_), cudaGetErrorString(pl_cu_e_));         \
        }                                                                                     \
    } while (0)

#define PL_CUBLAS_TRY(call)                                                                   \
    do {                                                                                      \
        cublasStatus_t pl_cb_s_ = (call);                                                     \
        if (pl_cb_s_ != CUBLAS_STATUS_SUCCESS)                                                \
            return pl_fail(PL_ERR_BACKEND, "%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call,   \
                           cublasGetStatusName(pl_cb_s_), cublasGetStatusString(pl_cb_s_));   \
    } while (0)

// ---------------------------------------------------------------------------------------------
// Element types: f32 at the interface, f16/bf16 (or f32) in storage, f32 arithmetic.

static __device__ __forceinline__ float pl_to_f32(float x) { return x; }
static __device__ __forceinline__ float pl_to_f32(__half x) { return __half2float(x); }
static __device__ __forceinline__ float pl_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> struct pl_elem;
template <> struct pl_elem<float> {
    static __device__ __forceinline__ float from_f32(float x) { return x; }
};
template <> struct pl_elem<__half> {
    static __device__ __forceinline__ __half from_f32(float x) { return __float2half_rn(x); }
};
template <> struct pl_elem<__nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 from_f32(float x) {
        return __float2bfloat16_rn(x);
    }
};

// 16-bit float bits -> f32, without going through the storage struct.
static __device__ __forceinline__ float pl_bits_to_f32(unsigned bits, const __half *) {
    return __half2float(__ushort_as_half((unsigned short)bits));
}
static __device__ __forceinline__ float pl_bits_to_f32(unsigned bits, const __nv_bfloat16 *) {
    return __uint_as_float(bits << 16);
}

// Loads N consecutive elements (N = 1, 2, 4 or 8) starting at p into f[0..N) as f32. p must be
// aligned to N elements (the caller checks alignment before choosing a vector width).
template <int N> static __device__ __forceinline__ void pl_load_vec(const float *p, float *f) {
    if constexpr (N == 1) {
        f[0] = p[0];
    } else if constexpr (N == 2) {
        PL_VEC_ALIGNED(p, 8);
        float2 v = *reinterpret_cast<const float2 *>(p);
        f[0] = v.x;
        f[1] = v.y;
    } else {
        PL_UNROLL
        for (int i = 0; i < N; i += 4) {
            PL_VEC_ALIGNED(p + i, 16);
            float4 v = *reinterpret_cast<const float4 *>(p + i);
            f[i] = v.x;
            f[i + 1] = v.y;
            f[i + 2] = v.z;
            f[i + 3] = v.w;
        }
    }
}
template <int N, typename H> static __device__ __forceinline__ void pl_load_vec(const H *p, float *f) {
    if constexpr (N == 1) {
        f[0] = pl_to_f32(p[0]);
    } else if constexpr (N == 2) {
        unsigned u = *reinterpret_cast<const unsigned *>(p);
        f[0] = pl_bits_to_f32(u & 0xffffu, p);
        f[1] = pl_bits_to_f32(u >> 16, p);
    } else if constexpr (N == 4) {
        PL_VEC_ALIGNED(p, 8);
        uint2 u = *reinterpret_cast<const uint2 *>(p);
        f[0] = pl_bits_to_f32(u.x & 0xffffu, p);
        f[1] = pl_bits_to_f32(u.x >> 16, p);
        f[2] = pl_bits_to_f32(u.y & 0xffffu, p);
        f[3] = pl_bits_to_f32(u.y >> 16, p);
    } else {
        PL_VEC_ALIGNED(p, 16);
        uint4 u = *reinterpret_cast<const uint4 *>(p);
        const unsigned w[4] = {u.x, u.y, u.z, u.w};
        PL_UNROLL
        for (int i = 0; i < 4; i++) {
            f[2 * i] = pl_bits_to_f32(w[i] & 0xffffu, p);
            f[2 * i + 1] = pl_bits_to_f32(w[i] >> 16, p);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reductions. The block versions use the warp-0 pattern: each warp reduces with shuffles, lane 0
// parks the result in shared memory, then warp 0 alone reduces the partials. `red` is a
// __shared__ float[32] of the caller; all threads of the block must call (it syncs).

static __device__ __forceinline__ float pl_warp_sum(float v) {
    PL_UNROLL
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float pl_warp_max(float v) {
    PL_UNROLL
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

template <bool IS_MAX>
static __device__ __forceinline__ float pl_block_reduce(float v, float *red) {
    const int lane = (int)(threadIdx.x & 31u), warp = (int)(threadIdx.x >> 5);
    const int n_warps = (int)((blockDim.x + 31u) >> 5);
    const float identity = IS_MAX ? -INFINITY : 0.f;
    v = IS_MAX ? pl_warp_max(v) : pl_warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < n_warps ? red[lane] : identity;
        v = IS_MAX ? pl_warp_max(v) : pl_warp_sum(v);
        if (lane == 0) red[0] = v;
    }
    __syncthreads();
    const float r = red[0];
    __syncthreads(); // red may be reused by the caller's next reduction
    return r;
}

// Ceil division for positive ints.
static __host__ __device__ __forceinline__ int pl_cdiv(int a, int b) { return (a + b - 1) / b; }

#endif
