/*
 * kernels/cpu/gather_rows.c - out (n_rows, dim) = x[rows[i]], rows (n_rows) int32 in range.
 *
 * A handful of rows per step (one per sampling sequence): memcpy on the caller, no threads.
 */
#include <string.h>

#include "kernels/cpu/cpu.h"

pl_status pl_cpu_gather_rows(pl_backend *be, float *out, const float *x, const int32_t *rows,
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
        memcpy(out + (size_t)i * dim, x + (size_t)rows[i] * dim, (size_t)dim * sizeof(float));
    }
    return PL_OK;
}
