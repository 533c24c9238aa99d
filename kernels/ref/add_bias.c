/*
 * kernels/ref/add_bias.c - reference bias add: x (n_rows, dim) += bias (dim) on every row.
 */
#include "kernels/ref/ref.h"

pl_status pl_ref_add_bias(pl_backend *be, float *x, const float *bias, int n_rows, int dim) {
    (void)be;
    if (n_rows < 0 || dim <= 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "add_bias: n_rows %d, dim %d", n_rows, dim);
    if (n_rows == 0) return PL_OK;
    if (!x || !bias) return pl_fail(PL_ERR_INVALID_ARGUMENT, "add_bias: x or bias is NULL");
    for (int r = 0; r < n_rows; r++)
        for (int i = 0; i < dim; i++) x[(size_t)r * dim + i] += bias[i];
    return PL_OK;
}
