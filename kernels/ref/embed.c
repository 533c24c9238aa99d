/*
 * kernels/ref/embed.c - reference token embedding lookup.
 *
 * out (n_tokens, dim) f32 = table[ids[i]], table (vocab, dim) of any weight type. Each row is
 * read through its type's reference dequantiser (util/wtype.h's to_f32), so this op is exact:
 * f16/bf16 widen exactly, and a quantised row is the format's definition of its values.
 */
#include "kernels/ref/ref.h"

pl_status pl_ref_embed(pl_backend *be, float *out, const int32_t *ids, int n_tokens,
                       const void *table, pl_wtype type, int dim) {
    (void)be;
    PL_TRY(pl_ref_check_embed(out, ids, n_tokens, table, type, dim));
    const pl_wtype_traits *t = pl_wtype_traits_of(type);
    const size_t row_bytes = (size_t)dim / (size_t)t->block_elems * (size_t)t->block_bytes;
    for (int i = 0; i < n_tokens; i++) /* table row of token i */
        t->to_f32((const unsigned char *)table + (size_t)ids[i] * row_bytes,
                  out + (size_t)i * dim, (size_t)dim);
    return PL_OK;
}
