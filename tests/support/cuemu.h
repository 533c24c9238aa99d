/*
 * tests/support/cuemu.h - a CPU emulation of the CUDA execution model, used only by tests.
 *
 * The CUDA kernels in kernels/cuda/ are written once; nvcc compiles them for the GPU and g++
 * (or clang++) compiles the same text against this header, so every kernel's logic is run and
 * checked on a machine without a GPU (kernels/cuda/cuda_common.cuh holds the one
 * `#if defined(__CUDACC__)` that picks cuda_runtime.h or this file). C++17, x86-64 only,
 * header-only.
 *
 * Execution model
 * - A launch runs its blocks on a small pool of OS threads (CUEMU_THREADS, default: the
 *   hardware threads, at most 8), one block at a time per OS thread, so atomics must be and
 *   are real atomics.
 * - Inside a block every CUDA thread is a fiber with its own mmap'd stack (guard page below,
 *   registered with valgrind and announced to AddressSanitizer on every switch). The switch
 *   is a hand-written x86-64 stack swap (six callee-saved registers + rsp), about 10x cheaper
 *   than swapcontext, which makes a sigprocmask system call per switch.
 * - The fibers of a block run round-robin; a fiber only gives up the CPU at a barrier:
 *   __syncthreads() (all threads of the block; the last one to arrive releases the others and
 *   keeps running) or a warp collective (__shfl*_sync, __ballot_sync, __any/__all_sync,
 *   __syncwarp), which waits only for the lanes of its mask within its own warp, so
 *   `if (warp == 0) { shuffles }` works as on hardware.
 * - __shared__ is `static thread_local`: an OS thread runs one block at a time, so per-thread
 *   storage is per-block storage. Dynamic shared memory is one buffer per launch and worker,
 *   allocated at the exact size so AddressSanitizer sees overruns.
 * - Errors fail the launch (cudaErrorLaunchFailure, message on stderr and in
 *   cuemu::last_failure()) instead of hanging: a block where no fiber can run (deadlock), a
 *   __syncthreads reached at different source lines (divergent barrier) or after some threads
 *   exited, a warp collective whose mask names an exited lane or mixes collectives, a block of
 *   more than 1024 threads, dynamic shared memory above 48 KiB without
 *   cudaFuncAttributeMaxDynamicSharedMemorySize, and a non-null pointer argument that is not
 *   device memory (a host pointer handed to a kernel).
 * - Device memory is host memory from posix_memalign, tracked so that cudaMemcpy directions,
 *   cudaFree and cuBLAS operands are checked; new allocations are filled with 0xff bytes (NaN
 *   as f32, f16 and bf16) so reads of never-written memory show up in results.
 * - Streams and events exist but every call is synchronous. The last error is per host
 *   thread; a failed launch is also reported once by the next synchronising call.
 * - Devices: set_device_count(n) makes n; the current device is per host thread (cudaSetDevice,
 *   0 in a new thread, as CUDA's), allocations, streams and cuBLAS handles belong to the device
 *   current when they were made, and a launch on another device's stream
 *   (cudaErrorInvalidResourceHandle), with another device's memory as an argument, or a cuBLAS
 *   call on another device's handle fails, as they fail or fault on a GPU.
 * - Sticky errors: inject_fault_after_launches(n, e) (or CUEMU_FAULT_AFTER_LAUNCHES=n in the
 *   environment, for whole programs: an illegal address) lets n launches run, then the next one
 *   "faults" as a kernel reading a wild address does: it returns cudaSuccess (launches are
 *   asynchronous), and from then on every call returns e (cudaErrorIllegalAddress, say), as
 *   the runtime does for the rest of the process; frees still release the emulated memory.
 *   clear_sticky_error() is a test's process restart.
 * - A 16-byte vector access (PL_VEC_ALIGNED in kernels/cuda/cuda_common.cuh) at a misaligned
 *   address fails the launch.
 * - cuBLAS: cublasGemmEx (f32/f16/bf16 operands, f32 compute) is a plain CPU GEMM.
 *
 * Limits (what this cannot tell you)
 * - Threads of a block are not concurrent: intra-block data races and missing __syncwarp in
 *   warp-synchronous code are not detected (that needs compute-sanitizer on a GPU).
 * - __CUDA_ARCH__ is undefined, so arch-specific paths take their fallback; __expf, rsqrtf
 *   and friends are exact here; nvcc contracts a*b+c into FMA and g++ does not. Compare with
 *   tolerances, never bit for bit against a GPU.
 * - Register pressure, occupancy, coalescing and speed are not modelled; nvcc -Xptxas -v is
 *   the source for those.
 * - Not provided: cooperative groups, textures, __constant__ + cudaMemcpyToSymbol, graphs,
 *   the driver API. cublasSetWorkspace is recorded and checked, never used.
 */
#ifndef PL_CUEMU_H
#define PL_CUEMU_H

#if defined(__CUDACC__)
#error "cuemu.h is the CPU emulation of CUDA; nvcc builds include cuda_runtime.h instead"
#endif
#if !defined(__x86_64__)
#error "cuemu.h: the fiber switch is written for x86-64"
#endif

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define CUEMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUEMU_ASAN 1
#endif
#endif
#ifdef CUEMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define CUEMU_VALGRIND 1
#endif

// ---------------------------------------------------------------------------------------------
// Keywords

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define __align__(n) __attribute__((aligned(n)))

// ---------------------------------------------------------------------------------------------
// Vector types and the index variables

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) int2 {
    int x, y;
};
struct alignas(16) int4 {
    int x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }

static constexpr int warpSize = 32;

namespace cuemu {
inline thread_local uint3 tl_threadIdx;
inline thread_local uint3 tl_blockIdx;
inline thread_local dim3 tl_blockDim;
inline thread_local dim3 tl_gridDim;
} // namespace cuemu

#define threadIdx (::cuemu::tl_threadIdx)
#define blockIdx (::cuemu::tl_blockIdx)
#define blockDim (::cuemu::tl_blockDim)
#define gridDim (::cuemu::tl_gridDim)

// ---------------------------------------------------------------------------------------------
// Half and bfloat16 (storage types; arithmetic goes through float as in our kernels)

namespace cuemu {
inline uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float bits_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
// Round to nearest even, overflow to inf, subnormals kept: what __float2half_rn does.
inline uint16_t f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {
        if (a < 0x33000000u) return sign;
        uint32_t man = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23);
        uint32_t r = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}
inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (e == 0) {
        if (man == 0) return bits_f32(sign);
        int k = -1;
        do {
            man <<= 1;
            k++;
        } while (!(man & 0x400u));
        return bits_f32(sign | ((uint32_t)(127 - 15 - k) << 23) | ((man & 0x3ffu) << 13));
    }
    if (e == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
    return bits_f32(sign | ((e + 127 - 15) << 23) | (man << 13));
}
inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
} // namespace cuemu

struct __half {
    unsigned short bits_;
};
struct alignas(4) __half2 {
    __half x, y;
};
struct __nv_bfloat16 {
    unsigned short bits_;
};
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
inline unsigned short __half_as_ushort(__half h) { return h.bits_; }
inline __half __float2half_rn(float f) { return __half{cuemu::f32_to_f16(f)}; }
inline __half __float2half(float f) { return __float2half_rn(f); }
inline float __half2float(__half h) { return cuemu::f16_to_f32(h.bits_); }
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half_rn(a), __float2half_rn(b)}; }
inline __half2 __float22half2_rn(float2 v) { return __floats2half2_rn(v.x, v.y); }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16{u}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits_; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{cuemu::f32_to_bf16(f)}; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return cuemu::bits_f32((uint32_t)h.bits_ << 16); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}
inline float2 __bfloat1622float2(__nv_bfloat162 h) {
    return {__bfloat162float(h.x), __bfloat162float(h.y)};
}

// ---------------------------------------------------------------------------------------------
// Device math and bit intrinsics (exact here; the GPU's fast versions differ in the last bits)

inline unsigned __float_as_uint(float f) { return cuemu::f32_bits(f); }
inline float __uint_as_float(unsigned u) { return cuemu::bits_f32(u); }
inline int __float_as_int(float f) { return (int)cuemu::f32_bits(f); }
inline float __int_as_float(int i) { return cuemu::bits_f32((uint32_t)i); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline void __sincosf(float x, float *s, float *c) {
    *s = sinf(x);
    *c = cosf(x);
}
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
template <typename T> inline T __ldg(const T *p) { return *p; }

// ---------------------------------------------------------------------------------------------
// Atomics: blocks run truly in parallel on the pool, so these are real atomics.

inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned *p, unsigned v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
template <typename F> inline F cuemu_atomic_float_update(F *p, F v, int op) {
    F old, upd;
    __atomic_load(p, &old, __ATOMIC_SEQ_CST);
    do {
        upd = op == 0 ? old + v : (op == 1 ? (old > v ? old : v) : (old < v ? old : v));
    } while (!__atomic_compare_exchange(p, &old, &upd, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return old;
}
inline float atomicAdd(float *p, float v) { return cuemu_atomic_float_update(p, v, 0); }
inline double atomicAdd(double *p, double v) { return cuemu_atomic_float_update(p, v, 0); }
inline int atomicSub(int *p, int v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }
template <typename T> inline T cuemu_atomic_minmax(T *p, T v, bool is_max) {
    T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while ((is_max ? v > old : v < old) &&
           !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    return old;
}
inline int atomicMax(int *p, int v) { return cuemu_atomic_minmax(p, v, true); }
inline unsigned atomicMax(unsigned *p, unsigned v) { return cuemu_atomic_minmax(p, v, true); }
inline int atomicMin(int *p, int v) { return cuemu_atomic_minmax(p, v, false); }
inline unsigned atomicMin(unsigned *p, unsigned v) { return cuemu_atomic_minmax(p, v, false); }
template <typename T> inline T cuemu_atomic_cas(T *p, T cmp, T v) {
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp; // the old value either way
}
inline int atomicCAS(int *p, int cmp, int v) { return cuemu_atomic_cas(p, cmp, v); }
inline unsigned atomicCAS(unsigned *p, unsigned cmp, unsigned v) {
    return cuemu_atomic_cas(p, cmp, v);
}
inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long cmp,
                                    unsigned long long v) {
    return cuemu_atomic_cas(p, cmp, v);
}
inline int atomicExch(int *p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicExch(unsigned *p, unsigned v) {
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}
inline float atomicExch(float *p, float v) {
    float old;
    __atomic_exchange(p, &v, &old, __ATOMIC_SEQ_CST);
    return old;
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// ---------------------------------------------------------------------------------------------
// Runtime API types

enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorECCUncorrectable = 214,
    cudaErrorInsufficientDriver = 35,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorLaunchTimeout = 702,
    cudaErrorAssert = 710,
    cudaErrorHardwareStackError = 714,
    cudaErrorIllegalInstruction = 715,
    cudaErrorMisalignedAddress = 716,
    cudaErrorInvalidAddressSpace = 717,
    cudaErrorInvalidPc = 718,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};
enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrWarpSize = 10,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
};
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int multiProcessorCount;
    int major;
    int minor;
};
struct CUstream_st {
    int id;
    int device; // current when it was created
};
struct CUevent_st {
    double t;
};
typedef CUstream_st *cudaStream_t;
typedef CUevent_st *cudaEvent_t;
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00

// ---------------------------------------------------------------------------------------------
// Emulator state: device memory registry, errors, test hooks

namespace cuemu {

constexpr size_t kStaticSmemLimit = 48 * 1024;   // dynamic smem above this needs an attribute
constexpr size_t kSmemOptin = 227 * 1024;        // H100's opt-in maximum
constexpr int kNumSMs = 16;                      // what the emulated device reports

struct State {
    std::mutex mu;
    std::map<uintptr_t, size_t> device; // base -> bytes
    std::map<uintptr_t, int> device_of; // base -> the device it was allocated on
    std::map<uintptr_t, size_t> pinned;
    size_t used = 0;
    size_t total = (size_t)256 << 20;
    int n_devices = 1;
    long malloc_fail_after = -1; // test hook: cudaMalloc/cudaMallocHost fail after n successes
    bool check_args = true;
    std::map<const void *, int> max_dyn_smem;
    cudaError_t pending = cudaSuccess; // a failed launch, reported by the next sync
    std::string last_failure;
    std::atomic<unsigned long long> blocks_run{0};
    int next_stream_id = 1;
    std::atomic<int> sticky{0};  // a sticky error (cudaError_t): every later call returns it
    long fault_after = -1;       // test hook: launches left before an injected sticky fault
    cudaError_t fault_error = cudaSuccess;
    // A whole program linked with the emulation (pagellm_cuda_emu) takes the hook from the
    // environment: CUEMU_FAULT_AFTER_LAUNCHES=N faults the launch after the N-th with an
    // illegal address.
    State() {
        const char *e = std::getenv("CUEMU_FAULT_AFTER_LAUNCHES");
        if (e && *e) {
            fault_after = std::strtol(e, nullptr, 10);
            fault_error = cudaErrorIllegalAddress;
        }
    }
};
inline State &state() {
    static State s;
    return s;
}
inline thread_local cudaError_t tl_last_error = cudaSuccess;
inline thread_local int tl_device = 0; // the host thread's current device, as CUDA's

// The process's sticky error, or cudaSuccess.
inline cudaError_t sticky() { return (cudaError_t)state().sticky.load(); }

inline cudaError_t set_error(cudaError_t e) {
    if (e != cudaSuccess) tl_last_error = e;
    return e;
}

__attribute__((format(printf, 1, 2))) inline void report(const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuemu: %s\n", buf);
    std::lock_guard<std::mutex> lk(state().mu);
    state().last_failure = buf;
}

// Is [p, p + n) inside one live device allocation?
inline bool is_device_range(const void *p, size_t n) {
    State &s = state();
    std::lock_guard<std::mutex> lk(s.mu);
    uintptr_t a = (uintptr_t)p;
    auto it = s.device.upper_bound(a);
    if (it == s.device.begin()) return false;
    --it;
    return a >= it->first && a - it->first <= it->second && n <= it->second - (a - it->first);
}

// Test hooks.
inline void set_device_count(int n) { state().n_devices = n; }
// After n more launches, the next one faults with e, which then sticks (see the header).
inline void inject_fault_after_launches(long n, cudaError_t e) {
    std::lock_guard<std::mutex> lk(state().mu);
    state().fault_after = n;
    state().fault_error = e;
}
inline void clear_sticky_error() {
    std::lock_guard<std::mutex> lk(state().mu);
    state().sticky = 0;
    state().fault_after = -1;
    state().pending = cudaSuccess;
}
// The device whose allocation holds p, or -1 when p is not device memory.
inline int device_of(const void *p) {
    State &s = state();
    std::lock_guard<std::mutex> lk(s.mu);
    uintptr_t a = (uintptr_t)p;
    auto it = s.device.upper_bound(a);
    if (it == s.device.begin()) return -1;
    --it;
    if (a - it->first > it->second) return -1;
    auto d = s.device_of.find(it->first);
    return d == s.device_of.end() ? -1 : d->second;
}
inline void set_device_memory(size_t total_bytes) { state().total = total_bytes; }
inline void fail_malloc_after(long n) { state().malloc_fail_after = n; }
inline void set_check_kernel_args(bool on) { state().check_args = on; }
inline std::string last_failure() {
    std::lock_guard<std::mutex> lk(state().mu);
    return state().last_failure;
}
inline unsigned long long blocks_run() { return state().blocks_run.load(); }
inline size_t device_bytes_in_use() {
    std::lock_guard<std::mutex> lk(state().mu);
    return state().used;
}

// ---------------------------------------------------------------------------------------------
// Fibers

// Saves the callee-saved registers on the current stack, stores rsp in *save, switches to
// load and restores that stack's registers; `ret` then continues wherever load was saved (or
// at the entry written into a fresh stack's frame).
inline __attribute__((naked, noinline)) void switch_stack(void ** /*save*/, void * /*load*/) {
    __asm__("pushq %rbp\n\t"
            "pushq %rbx\n\t"
            "pushq %r12\n\t"
            "pushq %r13\n\t"
            "pushq %r14\n\t"
            "pushq %r15\n\t"
            "movq %rsp, (%rdi)\n\t"
            "movq %rsi, %rsp\n\t"
            "popq %r15\n\t"
            "popq %r14\n\t"
            "popq %r13\n\t"
            "popq %r12\n\t"
            "popq %rbx\n\t"
            "popq %rbp\n\t"
            "ret\n\t");
}

constexpr size_t kStackBytes = 128 * 1024; // usable stack per fiber
constexpr size_t kGuardBytes = 4096;

struct Stack {
    char *map = nullptr; // guard page + stack
    char *lo = nullptr;  // lowest usable byte
    unsigned vg_id = 0;
};

enum class St : unsigned char { Ready, AtSync, AtWarp, Done };
enum Op : int { kShfl = 1, kBallot = 2, kSyncwarp = 3 };

struct Fiber {
    void *sp = nullptr;
    char *stack_lo = nullptr;
    St st = St::Ready;
    uint3 tid{0, 0, 0};
    unsigned lane = 0, warp = 0;
    uint64_t cval = 0, cres = 0; // warp collective: this lane's input and result
    int csrc = 0;
    void *asan_fake = nullptr;
};

struct Pending { // one warp collective in progress
    unsigned mask, arrived;
    int op;
};

struct Block {
    std::vector<Fiber> fibers;
    unsigned n = 0, n_warps = 0;
    std::vector<unsigned> warp_lanes; // lanes that exist in each warp
    std::vector<std::vector<Pending>> pending;
    unsigned sync_arrived = 0, n_done = 0;
    const char *sync_file = nullptr;
    int sync_line = 0;
    bool failed = false;
    std::string msg;
    void (*body)(void *) = nullptr;
    void *arg = nullptr;
};

struct Worker {
    Block block;
    Fiber *cur = nullptr;
    void *sched_sp = nullptr;
    const void *sched_lo = nullptr; // the scheduler's own stack, for ASan's fiber switches
    size_t sched_size = 0;
    std::vector<Stack> stacks;
    void *dyn_smem = nullptr;
    ~Worker() {
        for (Stack &s : stacks) {
#ifdef CUEMU_VALGRIND
            VALGRIND_STACK_DEREGISTER(s.vg_id);
#endif
            munmap(s.map, kStackBytes + kGuardBytes);
        }
    }
};
inline thread_local Worker tl_worker;

inline void *dynamic_smem() { return tl_worker.dyn_smem; }

inline void to_fiber(Worker &w, Fiber &f) {
    w.cur = &f;
    tl_threadIdx = f.tid;
#ifdef CUEMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stack_lo, kStackBytes);
    switch_stack(&w.sched_sp, f.sp);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
    switch_stack(&w.sched_sp, f.sp);
#endif
}

inline void to_scheduler(Worker &w, Fiber &f, bool dying) {
#ifdef CUEMU_ASAN
    __sanitizer_start_switch_fiber(dying ? nullptr : &f.asan_fake, w.sched_lo, w.sched_size);
    switch_stack(&f.sp, w.sched_sp);
    __sanitizer_finish_switch_fiber(f.asan_fake, nullptr, nullptr);
#else
    (void)dying;
    switch_stack(&f.sp, w.sched_sp);
#endif
}

// Every fiber starts here (via the `ret` of its first switch) and never returns.
inline __attribute__((noinline)) void fiber_main() {
    Worker &w = tl_worker;
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &w.sched_lo, &w.sched_size);
#endif
    Fiber &f = *w.cur;
    w.block.body(w.block.arg);
    f.st = St::Done;
    w.block.n_done++;
    to_scheduler(w, f, true);
    __builtin_trap(); // a finished fiber is never resumed
}

// Ends the current fiber's part in the launch: the block is marked failed and abandoned.
[[noreturn]] __attribute__((format(printf, 1, 2))) inline void fiber_fail(const char *fmt, ...) {
    Worker &w = tl_worker;
    char buf[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    Block &b = w.block;
    if (!b.failed) {
        char head[128];
        snprintf(head, sizeof head, "block (%u,%u,%u) thread (%u,%u,%u): ", tl_blockIdx.x,
                 tl_blockIdx.y, tl_blockIdx.z, w.cur->tid.x, w.cur->tid.y, w.cur->tid.z);
        b.failed = true;
        b.msg = std::string(head) + buf;
    }
    w.cur->st = St::AtSync;
    for (;;) to_scheduler(w, *w.cur, false);
}

// PL_VEC_ALIGNED (kernels/cuda/cuda_common.cuh): an n-byte vector access at p. A GPU faults
// on a misaligned one (cudaErrorMisalignedAddress, sticky); x86 would just load it.
inline void check_aligned(const void *p, size_t n, const char *file, int line) {
    if ((uintptr_t)p % n != 0)
        fiber_fail("misaligned %zu-byte vector access at %p (%s:%d)", n, p, file, line);
}

// Sizes the fibers and stacks of this worker for blocks of `bd` threads.
inline void prepare_block(Worker &w, dim3 bd) {
    Block &b = w.block;
    b.n = bd.x * bd.y * bd.z;
    b.n_warps = (b.n + 31) / 32;
    b.fibers.assign(b.n, Fiber{});
    b.warp_lanes.assign(b.n_warps, 0);
    b.pending.assign(b.n_warps, {});
    while (w.stacks.size() < b.n) {
        Stack s;
        void *m = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
        if (m == MAP_FAILED) {
            fprintf(stderr, "cuemu: mmap of a fiber stack failed\n");
            std::abort(); // tests only: out of address space is not recoverable
        }
        s.map = (char *)m;
        mprotect(s.map, kGuardBytes, PROT_NONE);
        s.lo = s.map + kGuardBytes;
#ifdef CUEMU_VALGRIND
        s.vg_id = VALGRIND_STACK_REGISTER(s.lo, s.lo + kStackBytes);
#endif
        w.stacks.push_back(s);
    }
    for (unsigned i = 0; i < b.n; i++) {
        Fiber &f = b.fibers[i];
        f.tid = uint3{i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y)};
        f.lane = i % 32;
        f.warp = i / 32;
        f.stack_lo = w.stacks[i].lo;
        b.warp_lanes[f.warp] |= 1u << f.lane;
    }
}

inline void start_fiber(Fiber &f) {
    // Frame popped by switch_stack: r15 r14 r13 r12 rbx rbp, then the return address. With the
    // stack top 16-byte aligned, fiber_main starts with rsp = top - 8, as after a call.
    void **frame = (void **)(f.stack_lo + kStackBytes - 64);
    for (int i = 0; i < 6; i++) frame[i] = nullptr;
    frame[6] = (void *)&fiber_main;
    frame[7] = nullptr;
    f.sp = frame;
    f.st = St::Ready;
    f.asan_fake = nullptr;
}

inline void run_block(Worker &w, uint3 bidx) {
    Block &b = w.block;
    tl_blockIdx = bidx;
    for (Fiber &f : b.fibers) start_fiber(f);
    for (auto &p : b.pending) p.clear();
    b.sync_arrived = 0;
    b.n_done = 0;
    b.failed = false;
    for (;;) {
        bool ran = false;
        for (Fiber &f : b.fibers) {
            if (f.st != St::Ready) continue;
            ran = true;
            to_fiber(w, f);
            if (b.failed) break;
        }
        if (b.failed || b.n_done == b.n) break;
        if (!ran) {
            unsigned at_sync = 0, at_warp = 0;
            for (Fiber &f : b.fibers) {
                at_sync += f.st == St::AtSync;
                at_warp += f.st == St::AtWarp;
            }
            char buf[256];
            snprintf(buf, sizeof buf,
                     "block (%u,%u,%u): deadlock: %u threads at __syncthreads (%s:%d), %u at a "
                     "warp collective, %u exited",
                     bidx.x, bidx.y, bidx.z, at_sync, b.sync_file ? b.sync_file : "-",
                     b.sync_line, at_warp, b.n_done);
            b.failed = true;
            b.msg = buf;
            break;
        }
    }
#ifdef CUEMU_ASAN
    // Abandoned fibers left their frames' redzones poisoned; the stacks are reused.
    if (b.failed)
        for (Fiber &f : b.fibers)
            if (f.st != St::Done) __asan_unpoison_memory_region(f.stack_lo, kStackBytes);
#endif
}

// ---------------------------------------------------------------------------------------------
// Barriers

inline void syncthreads(const char *file, int line) {
    Worker &w = tl_worker;
    Block &b = w.block;
    Fiber &f = *w.cur;
    if (b.n_done)
        fiber_fail("__syncthreads at %s:%d after %u threads of the block exited (undefined on "
                   "a GPU)",
                   file, line, b.n_done);
    if (b.sync_arrived == 0) {
        b.sync_file = file;
        b.sync_line = line;
    } else if (line != b.sync_line || std::strcmp(file, b.sync_file) != 0) {
        fiber_fail("divergent __syncthreads: this thread is at %s:%d while %u others wait at "
                   "%s:%d",
                   file, line, b.sync_arrived, b.sync_file, b.sync_line);
    }
    if (++b.sync_arrived == b.n) { // last arriver releases everyone and keeps running
        b.sync_arrived = 0;
        for (Fiber &g : b.fibers)
            if (g.st == St::AtSync) g.st = St::Ready;
        return;
    }
    f.st = St::AtSync;
    to_scheduler(w, f, false);
}

// One warp collective over the lanes of `mask` in the caller's warp. Each lane contributes
// val (and for shuffles the lane it reads, src); the last lane to arrive computes every
// lane's result, so the per-warp slot is free again at once.
inline uint64_t warp_op(int op, unsigned mask, uint64_t val, int src) {
    Worker &w = tl_worker;
    Block &b = w.block;
    Fiber &f = *w.cur;
    const unsigned bit = 1u << f.lane;
    if (!(mask & bit)) fiber_fail("warp collective with mask %#x that excludes lane %u", mask, f.lane);
    const unsigned eff = mask & b.warp_lanes[f.warp];
    Fiber *lanes = &b.fibers[(size_t)f.warp * 32];
    std::vector<Pending> &pl = b.pending[f.warp];
    size_t gi = 0;
    while (gi < pl.size() && pl[gi].mask != eff) gi++;
    if (gi == pl.size()) {
        for (const Pending &o : pl)
            if (o.mask & eff)
                fiber_fail("warp %u: collectives with overlapping masks %#x and %#x", f.warp,
                           o.mask, eff);
        for (unsigned l = 0; l < 32; l++)
            if ((eff >> l & 1u) && lanes[l].st == St::Done)
                fiber_fail("warp %u: collective with mask %#x but lane %u has exited", f.warp,
                           mask, l);
        pl.push_back(Pending{eff, 0, op});
    }
    Pending &g = pl[gi];
    if (g.op != op)
        fiber_fail("warp %u: lanes of mask %#x are at different collectives", f.warp, eff);
    f.cval = val;
    f.csrc = src;
    g.arrived |= bit;
    if (g.arrived != eff) {
        f.st = St::AtWarp;
        to_scheduler(w, f, false);
        return f.cres;
    }
    if (op == kShfl) {
        for (unsigned l = 0; l < 32; l++) {
            if (!(eff >> l & 1u)) continue;
            int s = lanes[l].csrc;
            bool ok = s >= 0 && s < 32 && (eff >> s & 1u);
            lanes[l].cres = ok ? lanes[s].cval : lanes[l].cval;
        }
    } else if (op == kBallot) {
        uint64_t bits = 0;
        for (unsigned l = 0; l < 32; l++)
            if ((eff >> l & 1u) && lanes[l].cval) bits |= 1ull << l;
        for (unsigned l = 0; l < 32; l++)
            if (eff >> l & 1u) lanes[l].cres = bits;
    }
    for (unsigned l = 0; l < 32; l++)
        if ((eff >> l & 1u) && l != f.lane) lanes[l].st = St::Ready;
    pl.erase(pl.begin() + (long)gi);
    return f.cres;
}

inline unsigned lane_id() { return tl_worker.cur->lane; }
inline unsigned my_warp_lanes() { return tl_worker.block.warp_lanes[tl_worker.cur->warp]; }

template <typename T> inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "warp shuffles move at most 8 bytes");
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof v);
    return u;
}
template <typename T> inline T from_bits(uint64_t u) {
    T v;
    std::memcpy(&v, &u, sizeof v);
    return v;
}
inline void check_width(int width) {
    if (width <= 0 || width > 32 || (width & (width - 1)))
        fiber_fail("shuffle width %d is not a power of two in [1, 32]", width);
}

// ---------------------------------------------------------------------------------------------
// Launch: blocks spread over a persistent pool of OS threads

struct LaunchDesc {
    void (*body)(void *);
    void *arg;
    dim3 grid, block;
    size_t smem;
    unsigned long long n_blocks;
    std::atomic<unsigned long long> next{0};
    std::atomic<bool> failed{false};
    std::mutex mu;
    std::string msg;
};

inline void worker_run(LaunchDesc &L) {
    Worker &w = tl_worker;
    prepare_block(w, L.block);
    w.block.body = L.body;
    w.block.arg = L.arg;
    tl_blockDim = L.block;
    tl_gridDim = L.grid;
    w.dyn_smem = nullptr;
    if (L.smem) {
        void *p = nullptr;
        if (posix_memalign(&p, 16, L.smem) != 0) std::abort();
        w.dyn_smem = p;
    }
    const unsigned long long gx = L.grid.x, gy = L.grid.y;
    for (;;) {
        if (L.failed.load()) break;
        unsigned long long i = L.next.fetch_add(1);
        if (i >= L.n_blocks) break;
        uint3 bi{(unsigned)(i % gx), (unsigned)((i / gx) % gy), (unsigned)(i / (gx * gy))};
        run_block(w, bi);
        state().blocks_run.fetch_add(1, std::memory_order_relaxed);
        if (w.block.failed) {
            std::lock_guard<std::mutex> lk(L.mu);
            if (!L.failed.load()) L.msg = w.block.msg;
            L.failed = true;
        }
    }
    std::free(w.dyn_smem);
    w.dyn_smem = nullptr;
}

class Pool {
  public:
    ~Pool() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        for (std::thread &t : threads_) t.join();
    }
    // Runs L on the calling thread plus up to `helpers` pool threads; returns when all blocks ran.
    void run(LaunchDesc &L, unsigned helpers) {
        std::unique_lock<std::mutex> lk(mu_);
        while (threads_.size() < helpers) threads_.emplace_back([this] { loop(); });
        job_ = &L;
        want_ = helpers;
        gen_++;
        lk.unlock();
        cv_.notify_all();
        worker_run(L);
        lk.lock();
        done_.wait(lk, [this] { return want_ == 0 && active_ == 0; });
        job_ = nullptr;
    }

  private:
    void loop() {
        unsigned long long seen = 0;
        std::unique_lock<std::mutex> lk(mu_);
        for (;;) {
            cv_.wait(lk, [&] { return stop_ || (gen_ != seen && want_ > 0); });
            if (stop_) return;
            seen = gen_;
            want_--;
            active_++;
            LaunchDesc *L = job_;
            lk.unlock();
            worker_run(*L);
            lk.lock();
            active_--;
            if (want_ == 0 && active_ == 0) done_.notify_all();
        }
    }
    std::mutex mu_;
    std::condition_variable cv_, done_;
    std::vector<std::thread> threads_;
    LaunchDesc *job_ = nullptr;
    unsigned long long gen_ = 0;
    unsigned want_ = 0, active_ = 0;
    bool stop_ = false;
};

inline unsigned n_threads() {
    static unsigned n = [] {
        const char *e = std::getenv("CUEMU_THREADS");
        long v = e ? std::strtol(e, nullptr, 10) : (long)std::thread::hardware_concurrency();
        return (unsigned)(v < 1 ? 1 : (v > 8 ? 8 : v));
    }();
    return n;
}

inline cudaError_t run_launch(void (*body)(void *), void *arg, const void *kernel, dim3 grid,
                              dim3 block, size_t smem) {
    static std::mutex launch_mu; // one launch at a time: the pool serves one job
    std::lock_guard<std::mutex> guard(launch_mu);
    const unsigned long long nthr = (unsigned long long)block.x * block.y * block.z;
    if (nthr == 0 || nthr > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
        grid.y > 65535 || grid.z > 65535 || grid.x > 0x7fffffffu) {
        report("launch: invalid configuration grid (%u,%u,%u) block (%u,%u,%u)", grid.x, grid.y,
               grid.z, block.x, block.y, block.z);
        return set_error(cudaErrorInvalidConfiguration);
    }
    if (smem > kStaticSmemLimit) {
        int allowed = 0;
        {
            std::lock_guard<std::mutex> lk(state().mu);
            auto it = state().max_dyn_smem.find(kernel);
            if (it != state().max_dyn_smem.end()) allowed = it->second;
        }
        if (smem > (size_t)allowed) {
            report("launch: %zu bytes of dynamic shared memory exceed 48 KiB and the kernel's "
                   "cudaFuncAttributeMaxDynamicSharedMemorySize (%d)",
                   smem, allowed);
            return set_error(cudaErrorInvalidValue);
        }
    }
    {
        std::lock_guard<std::mutex> lk(state().mu);
        if (state().fault_after == 0) { // the injected fault: nothing runs, everything after fails
            state().fault_after = -1;
            state().sticky = (int)state().fault_error;
            std::fprintf(stderr, "cuemu: injected sticky fault (error %d) at this launch\n",
                         (int)state().fault_error);
            return cudaSuccess;
        }
        if (state().fault_after > 0) state().fault_after--;
    }
    LaunchDesc L;
    L.body = body;
    L.arg = arg;
    L.grid = grid;
    L.block = block;
    L.smem = smem;
    L.n_blocks = (unsigned long long)grid.x * grid.y * grid.z;
    unsigned long long workers = std::min<unsigned long long>(n_threads(), L.n_blocks);
    if (workers <= 1) {
        worker_run(L);
    } else {
        static Pool pool;
        pool.run(L, (unsigned)(workers - 1));
    }
    if (L.failed.load()) {
        report("kernel launch failed: %s", L.msg.c_str());
        std::lock_guard<std::mutex> lk(state().mu);
        state().pending = cudaErrorLaunchFailure;
        return set_error(cudaErrorLaunchFailure);
    }
    return cudaSuccess;
}

template <typename T> inline bool arg_ok(const T &v, int idx) {
    if constexpr (std::is_pointer<T>::value) {
        if (v != nullptr && !is_device_range((const void *)v, 0)) {
            report("launch: pointer argument %d (%p) is not device memory", idx, (const void *)v);
            return false;
        }
        const int dev = v != nullptr ? device_of((const void *)v) : tl_device;
        if (dev != tl_device) {
            report("launch: pointer argument %d (%p) is memory of device %d but device %d is "
                   "current on this thread",
                   idx, (const void *)v, dev, tl_device);
            return false;
        }
    }
    (void)v;
    (void)idx;
    return true;
}
template <typename Tuple, size_t... I> inline bool args_ok(const Tuple &t, std::index_sequence<I...>) {
    return (arg_ok(std::get<I>(t), (int)I) && ... && true);
}

// launch(kernel, grid, block, dynamic smem bytes, stream, args...): kernel<<<grid, block, smem,
// stream>>>(args...) for both compilers. Returns what cudaGetLastError() would after the launch
// (here the launch has also already run).
template <typename... P, typename... A>
inline cudaError_t launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, A &&...args) {
    static_assert(sizeof...(P) == sizeof...(A), "launch: wrong number of kernel arguments");
    if (cudaError_t st = sticky()) return tl_last_error = st;
    if (stream && stream->device != tl_device) {
        report("launch: the stream belongs to device %d but device %d is current on this thread",
               stream->device, tl_device);
        tl_last_error = cudaSuccess;
        return cudaErrorInvalidResourceHandle;
    }
    struct Closure {
        void (*k)(P...);
        std::tuple<std::decay_t<P>...> params;
        static void call(void *c) {
            Closure *cl = (Closure *)c;
            auto params = cl->params; // each thread gets its own copy, as on a GPU
            std::apply(cl->k, params);
        }
    };
    Closure c{kernel, std::tuple<std::decay_t<P>...>(static_cast<std::decay_t<P>>(args)...)};
    cudaError_t e = cudaErrorInvalidValue;
    if (!state().check_args || args_ok(c.params, std::index_sequence_for<P...>{}))
        e = run_launch(&Closure::call, &c, reinterpret_cast<const void *>(kernel), grid, block,
                       smem);
    tl_last_error = cudaSuccess; // as cudaGetLastError() in the nvcc version of launch()
    return e;
}

inline double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

} // namespace cuemu

// ---------------------------------------------------------------------------------------------
// Barriers and warp collectives as CUDA spells them

#define __syncthreads() ::cuemu::syncthreads(__FILE__, __LINE__)

inline void __syncwarp(unsigned mask = 0xffffffffu) { cuemu::warp_op(cuemu::kSyncwarp, mask, 0, 0); }

template <typename T> inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32) {
    cuemu::check_width(width);
    int lane = (int)cuemu::lane_id(), seg = lane & ~(width - 1);
    int src = seg + (src_lane & (width - 1));
    return cuemu::from_bits<T>(cuemu::warp_op(cuemu::kShfl, mask, cuemu::to_bits(var), src));
}
template <typename T> inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    cuemu::check_width(width);
    int lane = (int)cuemu::lane_id(), seg = lane & ~(width - 1);
    int src = lane - (int)delta;
    if (src < seg) src = lane;
    return cuemu::from_bits<T>(cuemu::warp_op(cuemu::kShfl, mask, cuemu::to_bits(var), src));
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    cuemu::check_width(width);
    int lane = (int)cuemu::lane_id(), seg = lane & ~(width - 1);
    int src = lane + (int)delta;
    if (src >= seg + width) src = lane;
    return cuemu::from_bits<T>(cuemu::warp_op(cuemu::kShfl, mask, cuemu::to_bits(var), src));
}
template <typename T> inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
    cuemu::check_width(width);
    int lane = (int)cuemu::lane_id(), seg = lane & ~(width - 1);
    int src = lane ^ lane_mask;
    if (src >= seg + width) src = lane;
    return cuemu::from_bits<T>(cuemu::warp_op(cuemu::kShfl, mask, cuemu::to_bits(var), src));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
    return (unsigned)cuemu::warp_op(cuemu::kBallot, mask, pred != 0, 0);
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) {
    return __ballot_sync(mask, pred) == (mask & cuemu::my_warp_lanes());
}
// The lanes of this warp that have not exited: the emulation keeps no finer notion of
// convergence.
inline unsigned __activemask() {
    cuemu::Worker &w = cuemu::tl_worker;
    unsigned m = 0;
    const cuemu::Fiber *lanes = &w.block.fibers[(size_t)w.cur->warp * 32];
    for (unsigned l = 0; l < 32; l++)
        if ((w.block.warp_lanes[w.cur->warp] >> l & 1u) && lanes[l].st != cuemu::St::Done)
            m |= 1u << l;
    return m;
}

// ---------------------------------------------------------------------------------------------
// Runtime API subset (synchronous)

inline const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorECCUncorrectable: return "cudaErrorECCUncorrectable";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchTimeout: return "cudaErrorLaunchTimeout";
    case cudaErrorAssert: return "cudaErrorAssert";
    case cudaErrorHardwareStackError: return "cudaErrorHardwareStackError";
    case cudaErrorIllegalInstruction: return "cudaErrorIllegalInstruction";
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    case cudaErrorInvalidAddressSpace: return "cudaErrorInvalidAddressSpace";
    case cudaErrorInvalidPc: return "cudaErrorInvalidPc";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
    }
}
inline const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorECCUncorrectable: return "uncorrectable ECC error encountered";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchTimeout: return "the launch timed out and was terminated";
    case cudaErrorAssert: return "device-side assert triggered";
    case cudaErrorHardwareStackError: return "hardware stack error";
    case cudaErrorIllegalInstruction: return "an illegal instruction was encountered";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorInvalidAddressSpace: return "operation not supported on global/shared address space";
    case cudaErrorInvalidPc: return "invalid program counter";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
    }
}
inline cudaError_t cudaGetLastError() {
    if (cudaError_t st = cuemu::sticky()) return st; // a sticky error is never cleared
    cudaError_t e = cuemu::tl_last_error;
    cuemu::tl_last_error = cudaSuccess;
    return e;
}
inline cudaError_t cudaPeekAtLastError() {
    if (cudaError_t st = cuemu::sticky()) return st;
    return cuemu::tl_last_error;
}

namespace cuemu {
// What a synchronising call returns: a launch failure not yet reported by one.
inline cudaError_t take_pending() {
    if (cudaError_t st = sticky()) return st;
    std::lock_guard<std::mutex> lk(state().mu);
    cudaError_t e = state().pending;
    state().pending = cudaSuccess;
    return e;
}
inline cudaError_t need_device() {
    if (cudaError_t st = sticky()) return set_error(st);
    return state().n_devices > 0 ? cudaSuccess : set_error(cudaErrorNoDevice);
}
} // namespace cuemu

inline cudaError_t cudaGetDeviceCount(int *n) {
    *n = cuemu::state().n_devices > 0 ? cuemu::state().n_devices : 0;
    return cuemu::state().n_devices > 0 ? cudaSuccess : cuemu::set_error(cudaErrorNoDevice);
}
inline cudaError_t cudaSetDevice(int d) {
    if (cudaError_t e = cuemu::need_device()) return e;
    if (d < 0 || d >= cuemu::state().n_devices) return cuemu::set_error(cudaErrorInvalidDevice);
    cuemu::tl_device = d;
    return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int *d) {
    *d = cuemu::tl_device;
    return cuemu::need_device();
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (d < 0 || d >= cuemu::state().n_devices) return cuemu::set_error(cudaErrorInvalidDevice);
    std::memset(p, 0, sizeof *p);
    std::snprintf(p->name, sizeof p->name, "cuemu (CPU emulation)");
    p->totalGlobalMem = cuemu::state().total;
    p->sharedMemPerBlock = cuemu::kStaticSmemLimit;
    p->sharedMemPerBlockOptin = cuemu::kSmemOptin;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->multiProcessorCount = cuemu::kNumSMs;
    p->major = 9;
    p->minor = 0;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d) {
    if (d < 0 || d >= cuemu::state().n_devices) return cuemu::set_error(cudaErrorInvalidDevice);
    switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)cuemu::kStaticSmemLimit; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrMultiProcessorCount: *v = cuemu::kNumSMs; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)cuemu::kSmemOptin; break;
    default: return cuemu::set_error(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}
inline cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value) {
    if (cudaError_t e = cuemu::sticky()) return cuemu::set_error(e);
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
        (size_t)value > cuemu::kSmemOptin)
        return cuemu::set_error(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lk(cuemu::state().mu);
    cuemu::state().max_dyn_smem[func] = value;
    return cudaSuccess;
}
template <typename... P>
inline cudaError_t cudaFuncSetAttribute(void (*func)(P...), cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute(reinterpret_cast<const void *>(func), attr, value);
}

inline cudaError_t cudaMalloc(void **p, size_t n) {
    *p = nullptr;
    if (cudaError_t e = cuemu::need_device()) return e;
    cuemu::State &s = cuemu::state();
    {
        std::lock_guard<std::mutex> lk(s.mu);
        if (s.malloc_fail_after == 0 || n > s.total - s.used)
            return cuemu::set_error(cudaErrorMemoryAllocation);
        if (s.malloc_fail_after > 0) s.malloc_fail_after--;
    }
    void *m = nullptr;
    if (posix_memalign(&m, 256, n ? n : 1) != 0) return cuemu::set_error(cudaErrorMemoryAllocation);
    std::memset(m, 0xff, n); // NaN in f32/f16/bf16: reads of unwritten memory show up
    std::lock_guard<std::mutex> lk(s.mu);
    s.device[(uintptr_t)m] = n;
    s.device_of[(uintptr_t)m] = cuemu::tl_device;
    s.used += n;
    *p = m;
    return cudaSuccess;
}
template <typename T> inline cudaError_t cudaMalloc(T **p, size_t n) {
    return cudaMalloc(reinterpret_cast<void **>(p), n);
}
inline cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    cuemu::State &s = cuemu::state();
    std::lock_guard<std::mutex> lk(s.mu);
    auto it = s.device.find((uintptr_t)p);
    if (it == s.device.end()) {
        std::fprintf(stderr, "cuemu: cudaFree(%p): not a device allocation\n", p);
        return cuemu::set_error(cudaErrorInvalidValue);
    }
    s.used -= it->second;
    s.device.erase(it);
    s.device_of.erase((uintptr_t)p);
    std::free(p);
    return cuemu::sticky(); // freed either way: the emulated memory is the host's
}
inline cudaError_t cudaMallocHost(void **p, size_t n) {
    *p = nullptr;
    if (cudaError_t e = cuemu::sticky()) return cuemu::set_error(e);
    {
        std::lock_guard<std::mutex> lk(cuemu::state().mu);
        long &fail = cuemu::state().malloc_fail_after;
        if (fail == 0) return cuemu::set_error(cudaErrorMemoryAllocation);
        if (fail > 0) fail--;
    }
    void *m = nullptr;
    if (posix_memalign(&m, 64, n ? n : 1) != 0) return cuemu::set_error(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> lk(cuemu::state().mu);
    cuemu::state().pinned[(uintptr_t)m] = n;
    *p = m;
    return cudaSuccess;
}
inline cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) {
    (void)flags;
    return cudaMallocHost(p, n);
}
inline cudaError_t cudaFreeHost(void *p) {
    if (!p) return cudaSuccess;
    std::lock_guard<std::mutex> lk(cuemu::state().mu);
    if (!cuemu::state().pinned.erase((uintptr_t)p)) return cuemu::set_error(cudaErrorInvalidValue);
    std::free(p);
    return cuemu::sticky();
}
inline cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
    if (cudaError_t e = cuemu::need_device()) return e;
    std::lock_guard<std::mutex> lk(cuemu::state().mu);
    *total = cuemu::state().total;
    *free_bytes = cuemu::state().total - cuemu::state().used;
    return cudaSuccess;
}

namespace cuemu {
inline cudaError_t check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    bool dd = kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyHostToDevice;
    bool sd = kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyDeviceToHost;
    if (kind == cudaMemcpyDefault || kind == cudaMemcpyHostToHost) return cudaSuccess;
    if (dd && !is_device_range(dst, n)) {
        report("cudaMemcpy(kind %d): destination %p (+%zu) is not device memory", (int)kind, dst, n);
        return set_error(cudaErrorInvalidValue);
    }
    if (sd && !is_device_range(src, n)) {
        report("cudaMemcpy(kind %d): source %p (+%zu) is not device memory", (int)kind, src, n);
        return set_error(cudaErrorInvalidValue);
    }
    if (!dd && is_device_range(dst, 1)) {
        report("cudaMemcpy(kind %d): destination %p is device memory", (int)kind, dst);
        return set_error(cudaErrorInvalidValue);
    }
    if (!sd && is_device_range(src, 1)) {
        report("cudaMemcpy(kind %d): source %p is device memory", (int)kind, src);
        return set_error(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}
} // namespace cuemu

inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                                   cudaStream_t s = nullptr) {
    (void)s;
    if (cudaError_t e = cuemu::sticky()) return cuemu::set_error(e);
    if (n == 0) return cudaSuccess;
    if (cudaError_t e = cuemu::check_copy(dst, src, n, kind)) return e;
    std::memmove(dst, src, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    if (cudaError_t e = cuemu::take_pending()) return cuemu::set_error(e);
    return cudaMemcpyAsync(dst, src, n, kind, nullptr);
}
inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s = nullptr) {
    (void)s;
    if (cudaError_t e = cuemu::sticky()) return cuemu::set_error(e);
    if (n == 0) return cudaSuccess;
    if (!cuemu::is_device_range(p, n)) {
        cuemu::report("cudaMemset: %p (+%zu) is not device memory", p, n);
        return cuemu::set_error(cudaErrorInvalidValue);
    }
    std::memset(p, v, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemset(void *p, int v, size_t n) { return cudaMemsetAsync(p, v, n, nullptr); }

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    (void)flags;
    if (cudaError_t e = cuemu::need_device()) return e;
    *s = new CUstream_st{cuemu::state().next_stream_id++, cuemu::tl_device};
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    delete s;
    return cuemu::sticky();
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    (void)s;
    return cuemu::set_error(cuemu::take_pending());
}
inline cudaError_t cudaDeviceSynchronize() { return cuemu::set_error(cuemu::take_pending()); }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    (void)flags;
    *e = new CUevent_st{0.0};
    return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr) {
    (void)s;
    if (cudaError_t st = cuemu::sticky()) return cuemu::set_error(st);
    e->t = cuemu::now_s();
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    (void)e;
    return cuemu::set_error(cuemu::take_pending());
}
inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = (float)((b->t - a->t) * 1e3);
    return cudaSuccess;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0) {
    (void)s;
    (void)e;
    (void)flags;
    return cudaSuccess;
}
inline cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = 13000;
    return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// cuBLAS subset: cublasGemmEx as a CPU GEMM (column-major, as cuBLAS)

struct cublasContext {
    cudaStream_t stream;
    int device;           // current when it was created
    void *workspace;      // cublasSetWorkspace's, checked and never used
    size_t workspace_bytes;
};
typedef cublasContext *cublasHandle_t;
enum cublasStatus_t {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
typedef cudaDataType_t cudaDataType;
enum cublasComputeType_t {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
};
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 };

inline cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = nullptr;
    if (cuemu::state().n_devices <= 0 || cuemu::sticky()) return CUBLAS_STATUS_NOT_INITIALIZED;
    *h = new cublasContext{nullptr, cuemu::tl_device, nullptr, 0};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *workspace, size_t bytes) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes > 0 && (!cuemu::is_device_range(workspace, bytes) ||
                      cuemu::device_of(workspace) != h->device || (uintptr_t)workspace % 256)) {
        cuemu::report("cublasSetWorkspace: %p (+%zu) is not 256-byte aligned memory of the "
                      "handle's device %d", workspace, bytes, h->device);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    h->workspace = workspace;
    h->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
    (void)m;
    return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
inline const char *cublasGetStatusName(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}
inline const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "cuBLAS error";
    }
}

namespace cuemu {
inline float load_as_f32(const void *p, cudaDataType_t t, size_t i) {
    switch (t) {
    case CUDA_R_16F: return f16_to_f32(((const uint16_t *)p)[i]);
    case CUDA_R_16BF: return bits_f32((uint32_t)((const uint16_t *)p)[i] << 16);
    default: return ((const float *)p)[i];
    }
}
inline size_t dtype_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }
} // namespace cuemu

// C (m x n, ldc) = alpha * op(A) (m x k) * op(B) (k x n) + beta * C, column-major, f32
// accumulation in k order. beta == 0 never reads C (as cuBLAS).
inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t transa,
                                   cublasOperation_t transb, int m, int n, int k,
                                   const void *alpha, const void *A, cudaDataType_t Atype, int lda,
                                   const void *B, cudaDataType_t Btype, int ldb, const void *beta,
                                   void *C, cudaDataType_t Ctype, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)algo;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (cuemu::sticky()) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (h->device != cuemu::tl_device) {
        cuemu::report("cublasGemmEx: the handle belongs to device %d but device %d is current "
                      "on this thread", h->device, cuemu::tl_device);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
    if (lda < (ta ? (k > 1 ? k : 1) : (m > 1 ? m : 1)) ||
        ldb < (tb ? (n > 1 ? n : 1) : (k > 1 ? k : 1)) || ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (Atype != Btype || (Ctype != CUDA_R_32F && Ctype != Atype) ||
        (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    const size_t a_elems = (size_t)lda * (size_t)((ta ? m : k) - 1) + (size_t)(ta ? k : m);
    const size_t b_elems = (size_t)ldb * (size_t)((tb ? k : n) - 1) + (size_t)(tb ? n : k);
    const size_t c_elems = (size_t)ldc * (size_t)(n - 1) + (size_t)m;
    if ((k > 0 && (!cuemu::is_device_range(A, a_elems * cuemu::dtype_bytes(Atype)) ||
                   !cuemu::is_device_range(B, b_elems * cuemu::dtype_bytes(Btype)))) ||
        !cuemu::is_device_range(C, c_elems * cuemu::dtype_bytes(Ctype))) {
        cuemu::report("cublasGemmEx: an operand is not (entirely) device memory");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const float al = *(const float *)alpha, be = *(const float *)beta;
    // op(A) rows and op(B) columns as contiguous f32 vectors over k.
    std::vector<float> a((size_t)m * (size_t)k), b((size_t)n * (size_t)k);
    for (int i = 0; i < m; i++)
        for (int l = 0; l < k; l++)
            a[(size_t)i * k + l] = cuemu::load_as_f32(
                A, Atype, ta ? (size_t)l + (size_t)i * lda : (size_t)i + (size_t)l * lda);
    for (int j = 0; j < n; j++)
        for (int l = 0; l < k; l++)
            b[(size_t)j * k + l] = cuemu::load_as_f32(
                B, Btype, tb ? (size_t)j + (size_t)l * ldb : (size_t)l + (size_t)j * ldb);
    for (int j = 0; j < n; j++) {
        for (int i = 0; i < m; i++) {
            const float *ar = &a[(size_t)i * k], *bc = &b[(size_t)j * k];
            float acc = 0.f;
            for (int l = 0; l < k; l++) acc += ar[l] * bc[l];
            size_t ci = (size_t)i + (size_t)j * ldc;
            float c = be == 0.f ? 0.f : be * cuemu::load_as_f32(C, Ctype, ci);
            float r = al * acc + c;
            if (Ctype == CUDA_R_32F)
                ((float *)C)[ci] = r;
            else if (Ctype == CUDA_R_16F)
                ((uint16_t *)C)[ci] = cuemu::f32_to_f16(r);
            else
                ((uint16_t *)C)[ci] = cuemu::f32_to_bf16(r);
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}

#endif
