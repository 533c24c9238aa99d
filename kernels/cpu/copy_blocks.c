/*
 * kernels/cpu/copy_blocks.c - copy-on-write of KV blocks: for each (src, dst) pair of
 * pairs (n_pairs, 2) int32, block dst becomes a copy of block src in K and V of every layer.
 *
 * A block of one tensor is n_kv_heads * block_size * head_dim contiguous elements, so each
 * (tensor, pair) is one memcpy. Pairs are applied in order (as in ref), on the caller: copies
 * happen only when parallel samples diverge, a few blocks per step.
 */
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"
#include "util/dtype.h"

pl_status pl_cpu_copy_blocks(pl_backend *be, void *kv_cache, const pl_kv_layout *layout,
                             const int32_t *pairs, int n_pairs) {
    PL_TRY(pl_ref_check_copy_blocks(be, kv_cache, layout, pairs, n_pairs));
    size_t block_bytes = (size_t)layout->n_kv_heads * layout->block_size * layout->head_dim *
                         pl_dtype_size(layout->dtype);
    size_t tensor_bytes = pl_kv_layer_elems(layout) * pl_dtype_size(layout->dtype);
    unsigned char *base = kv_cache;
    for (int p = 0; p < n_pairs; p++) {
        if (pairs[2 * p] == pairs[2 * p + 1]) continue;
        for (int l = 0; l < 2 * layout->n_layers; l++) { /* K, V, K, V, ... by layer */
            unsigned char *tensor = base + (size_t)l * tensor_bytes;
            memcpy(tensor + (size_t)pairs[2 * p + 1] * block_bytes,
                   tensor + (size_t)pairs[2 * p] * block_bytes, block_bytes);
        }
    }
    return PL_OK;
}
