/*
 * kernels/cuda/kv_store.cu - writes this step's keys and values into one layer's paged cache
 * ("reshape and cache").
 *
 * k, v (n_tokens, n_kv_heads, head_dim) f32; slots (n_tokens) int64, slot = block_id *
 * block_size + offset, negative = padding (skipped). k_cache, v_cache: one layer, each
 * (n_blocks, n_kv_heads, block_size, head_dim) of the backend's kv_dtype (converted with round
 * to nearest even). One block per token; slots are trusted to lie inside the cache (the op
 * does not know n_blocks).
 */
#include "kernels/cuda/backend_cuda.cuh"
#include "kernels/ref/ref.h"

static constexpr int kThreads = 128;

template <typename T>
static __global__ void __launch_bounds__(kThreads)
kv_store_kernel(T *__restrict__ k_cache, T *__restrict__ v_cache, const float *__restrict__ k,
                const float *__restrict__ v, const int64_t *__restrict__ slots, int n_kv_heads,
                int head_dim, int block_size) {
    const int64_t slot = slots[blockIdx.x];
    if (slot < 0) return;
    const int64_t blk = slot / block_size, off = slot - blk * block_size;
    const int n = n_kv_heads * head_dim;
    const float *ks = k + (size_t)blockIdx.x * (size_t)n; /* (n_kv_heads, head_dim) */
    const float *vs = v + (size_t)blockIdx.x * (size_t)n;
    for (int e = (int)threadIdx.x; e < n; e += kThreads) {
        const int h = e / head_dim, d = e - h * head_dim;
        const size_t dst = (size_t)(((blk * n_kv_heads + h) * block_size + off) * head_dim + d);
        k_cache[dst] = pl_elem<T>::from_f32(ks[e]);
        v_cache[dst] = pl_elem<T>::from_f32(vs[e]);
    }
}

pl_status pl_cuda_kv_store(pl_backend *be, void *k_cache, void *v_cache, const float *k,
                           const float *v, const int64_t *slots, int n_tokens, int n_kv_heads,
                           int head_dim, int block_size) {
    PL_TRY(pl_ref_check_kv_store(be, k_cache, v_cache, k, v, slots, n_tokens, n_kv_heads,
                                 head_dim, block_size));
    if (n_tokens == 0) return PL_OK;
    const dim3 grid((unsigned)n_tokens), block(kThreads);
    cudaStream_t s = pl_cuda_ctx_of(be)->stream;
    switch (be->kv_dtype) {
    case PL_DTYPE_F16:
        PL_CUDA_TRY(launch(kv_store_kernel<__half>, grid, block, 0, s, (__half *)k_cache,
                           (__half *)v_cache, k, v, slots, n_kv_heads, head_dim, block_size));
        break;
    case PL_DTYPE_BF16:
        PL_CUDA_TRY(launch(kv_store_kernel<__nv_bfloat16>, grid, block, 0, s,
                           (__nv_bfloat16 *)k_cache, (__nv_bfloat16 *)v_cache, k, v, slots,
                           n_kv_heads, head_dim, block_size));
        break;
    default:
        PL_CUDA_TRY(launch(kv_store_kernel<float>, grid, block, 0, s, (float *)k_cache,
                           (float *)v_cache, k, v, slots, n_kv_heads, head_dim, block_size));
        break;
    }
    return PL_OK;
}
