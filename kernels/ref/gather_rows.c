/*
 * kernels/ref/gather_rows.c - reference row gather: out (n_rows, dim) = x[rows[i]].
 *
 * The runner uses it to pick the last hidden row of each sampling sequence before the LM head,
 * so logits are computed only where they are needed. rows (n_rows) int32 must be in range.
 */
#include "kernels/ref/ref.h"

pl_status pl_ref_gather_rows(pl_backend *be, float *out, const float *x, const int32_t *rows,
                             int n_rows, int dim) {
    (void)be;
    if (n_rows < 0 || dim <= 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "gather_rows: n_rows %d, dim %d", n_rows, dim);
    if (n_rows == 0) return PL_OK;
    if (!out || !x || !rows)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "gather_rows: out, x or rows is NULL");
    for (int i = 0; i < n_rows; i++) {
        if (rows[i] < 0)
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "gather_rows: rows[%d] = %d is negative", i,
                           (int)rows[i]);
        for (int d = 0; d < dim; d++)
            out[(size_t)i * dim + d] = x[(size_t)rows[i] * dim + d];
    }
    return PL_OK;
}
