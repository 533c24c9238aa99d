/*
 * kernels/ref/copy_blocks.c - reference copy-on-write of KV blocks.
 *
 * kv_cache: the whole cache of every layer (see backend.h); pairs (n_pairs, 2) int32 of
 * (src, dst) block ids. For every layer, in K and in V, block dst becomes a copy of block src:
 * n_kv_heads * block_size * head_dim contiguous elements starting at block * that many.
 */
#include "kernels/ref/ref.h"
#include "util/dtype.h"

pl_status pl_ref_copy_blocks(pl_backend *be, void *kv_cache, const pl_kv_layout *layout,
                             const int32_t *pairs, int n_pairs) {
    PL_TRY(pl_ref_check_copy_blocks(be, kv_cache, layout, pairs, n_pairs));
    size_t esize = pl_dtype_size(layout->dtype);
    size_t block_elems = (size_t)layout->n_kv_heads * layout->block_size * layout->head_dim;
    size_t layer_elems = pl_kv_layer_elems(layout);
    unsigned char *base = kv_cache;
    for (int l = 0; l < 2 * layout->n_layers; l++) { /* K of layer l/2 for even l, V for odd */
        unsigned char *tensor = base + (size_t)l * layer_elems * esize;
        for (int p = 0; p < n_pairs; p++) {
            const unsigned char *src = tensor + (size_t)pairs[2 * p] * block_elems * esize;
            unsigned char *dst = tensor + (size_t)pairs[2 * p + 1] * block_elems * esize;
            for (size_t b = 0; b < block_elems * esize; b++) dst[b] = src[b];
        }
    }
    return PL_OK;
}
