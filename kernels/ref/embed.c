/*
 * kernels/ref/embed.c - reference token embedding lookup.
 *
 * out (n_tokens, dim) f32 = table[ids[i]], table (vocab, dim) of f32/f16/bf16. Conversion goes
 * through util/dtype.h's exact scalar conversions, so this op is exact.
 */
#include "kernels/ref/ref.h"
#include "util/dtype.h"

pl_status pl_ref_embed(pl_backend *be, float *out, const int32_t *ids, int n_tokens,
                       const void *table, pl_dtype dtype, int dim) {
    (void)be;
    PL_TRY(pl_ref_check_embed(out, ids, n_tokens, table, dtype, dim));
    for (int i = 0; i < n_tokens; i++) {
        size_t row = (size_t)ids[i] * (size_t)dim; /* table row of token i */
        for (int d = 0; d < dim; d++) out[(size_t)i * dim + d] = pl_load_f32(table, dtype, row + d);
    }
    return PL_OK;
}
