/*
 * kernels/ref/kv_store.c - reference write of new keys and values into the paged cache.
 *
 * k, v (n_tokens, n_kv_heads, head_dim) f32; slots (n_tokens) int64, slot = block_id *
 * block_size + offset, negative = padding (skipped). One layer's caches, each
 * (n_blocks, n_kv_heads, block_size, head_dim) of the backend's kv_dtype; element
 * ((block * n_kv_heads + h) * block_size + offset) * head_dim holds (slot, head h).
 */
#include "kernels/ref/ref.h"
#include "util/dtype.h"

/* Stores f32 value f as element i of a cache of type t (rounding to nearest even). */
static void store_elem(void *cache, pl_dtype t, size_t i, float f) {
    switch (t) {
    case PL_DTYPE_F16: ((uint16_t *)cache)[i] = pl_f32_to_f16(f); break;
    case PL_DTYPE_BF16: ((uint16_t *)cache)[i] = pl_f32_to_bf16(f); break;
    default: ((float *)cache)[i] = f; break;
    }
}

pl_status pl_ref_kv_store(pl_backend *be, void *k_cache, void *v_cache, const float *k,
                          const float *v, const int64_t *slots, int n_tokens, int n_kv_heads,
                          int head_dim, int block_size) {
    PL_TRY(pl_ref_check_kv_store(be, k_cache, v_cache, k, v, slots, n_tokens, n_kv_heads,
                                 head_dim, block_size));
    for (int i = 0; i < n_tokens; i++) {
        int64_t slot = slots[i];
        if (slot < 0) continue;
        int64_t block = slot / block_size, offset = slot % block_size;
        for (int h = 0; h < n_kv_heads; h++) {
            size_t dst = (size_t)(((block * n_kv_heads + h) * block_size + offset) * head_dim);
            size_t src = ((size_t)i * n_kv_heads + h) * head_dim;
            for (int d = 0; d < head_dim; d++) {
                store_elem(k_cache, be->kv_dtype, dst + d, k[src + d]);
                store_elem(v_cache, be->kv_dtype, dst + d, v[src + d]);
            }
        }
    }
    return PL_OK;
}
