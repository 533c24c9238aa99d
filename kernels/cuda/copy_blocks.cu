/*
 * kernels/cuda/copy_blocks.cu - copy-on-write of KV blocks in every layer.
 *
 * kv_cache: the whole cache (see kernels/backend.h), 2 * n_layers tensors of
 * (n_blocks, n_kv_heads, block_size, head_dim); pairs (n_pairs, 2) int32 (src, dst) in device
 * memory. A block is one contiguous run of n_kv_heads * block_size * head_dim elements, so the
 * copy is a byte copy: grid (n_pairs, 2 * n_layers), 16-byte words when sizes allow.
 *
 * Pairs are copied in parallel, so no block may be both a destination and a source in the same
 * call (the engine's copy-on-write pairs a shared block with a fresh one). Block ids outside
 * [0, n_blocks) are skipped: they live in device memory, where the host cannot check them.
 */
#include "kernels/cuda/backend_cuda.cuh"
#include "util/dtype.h"

static constexpr int kThreads = 256;

template <typename W>
static __global__ void __launch_bounds__(kThreads)
copy_blocks_kernel(unsigned char *kv, const int32_t *__restrict__ pairs, size_t tensor_bytes,
                   size_t block_bytes, int n_blocks) {
    const int src = pairs[2 * blockIdx.x], dst = pairs[2 * blockIdx.x + 1];
    if (src < 0 || src >= n_blocks || dst < 0 || dst >= n_blocks) return;
    unsigned char *tensor = kv + (size_t)blockIdx.y * tensor_bytes;
    const W *s = reinterpret_cast<const W *>(tensor + (size_t)src * block_bytes);
    W *d = reinterpret_cast<W *>(tensor + (size_t)dst * block_bytes);
    const size_t n = block_bytes / sizeof(W);
    for (size_t i = threadIdx.x; i < n; i += kThreads) d[i] = s[i];
}

pl_status pl_cuda_copy_blocks(pl_backend *be, void *kv_cache, const pl_kv_layout *layout,
                              const int32_t *pairs, int n_pairs) {
    if (!layout) return pl_fail(PL_ERR_INVALID_ARGUMENT, "copy_blocks: layout is NULL");
    if (layout->dtype != be->kv_dtype)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "copy_blocks: layout dtype %s differs from the backend's kv_dtype %s",
                       pl_dtype_name(layout->dtype), pl_dtype_name(be->kv_dtype));
    if (layout->n_layers <= 0 || layout->n_blocks <= 0 || layout->n_kv_heads <= 0 ||
        layout->block_size <= 0 || layout->head_dim <= 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "copy_blocks: layout sizes must be positive");
    if (n_pairs < 0) return pl_fail(PL_ERR_INVALID_ARGUMENT, "copy_blocks: n_pairs %d < 0", n_pairs);
    if (n_pairs == 0) return PL_OK;
    if (!kv_cache || !pairs)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "copy_blocks: kv_cache or pairs is NULL");
    if (2 * layout->n_layers > 65535)
        return pl_fail(PL_ERR_UNSUPPORTED, "copy_blocks: %d layers", layout->n_layers);
    const size_t esize = pl_dtype_size(layout->dtype);
    const size_t block_bytes =
        (size_t)layout->n_kv_heads * (size_t)layout->block_size * (size_t)layout->head_dim * esize;
    const size_t tensor_bytes = pl_kv_layer_elems(layout) * esize;
    const dim3 grid((unsigned)n_pairs, (unsigned)(2 * layout->n_layers)), block(kThreads);
    unsigned char *kv = (unsigned char *)kv_cache;
    cudaStream_t s = pl_cuda_ctx_of(be)->stream;
    if (block_bytes % 16 == 0 && (uintptr_t)kv % 16 == 0)
        PL_CUDA_TRY(launch(copy_blocks_kernel<uint4>, grid, block, 0, s, kv, pairs, tensor_bytes,
                           block_bytes, layout->n_blocks));
    else
        PL_CUDA_TRY(launch(copy_blocks_kernel<unsigned char>, grid, block, 0, s, kv, pairs,
                           tensor_bytes, block_bytes, layout->n_blocks));
    return PL_OK;
}
