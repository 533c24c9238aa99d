/*
 * kernels/ref/rmsnorm.c - reference RMSNorm, and RMSNorm with the residual add before it.
 *
 * out (n_rows, dim) = x / sqrt(mean(x^2) + eps) * w, w (dim) f32. The sum of squares is
 * accumulated in double so the oracle's own rounding is far below any tolerance.
 */
#include <math.h>

#include "kernels/ref/ref.h"

/* One row: out (dim) from x (dim); out may alias x because x is read fully first. */
static void rmsnorm_row(float *out, const float *x, const float *w, int dim, float eps) {
    double ss = 0.0;
    for (int d = 0; d < dim; d++) ss += (double)x[d] * x[d];
    double inv = 1.0 / sqrt(ss / dim + eps);
    for (int d = 0; d < dim; d++) out[d] = (float)(x[d] * inv * w[d]);
}

pl_status pl_ref_rmsnorm(pl_backend *be, float *out, const float *x, const float *w, int n_rows,
                         int dim, float eps) {
    (void)be;
    PL_TRY(pl_ref_check_rmsnorm("rmsnorm", out, x, w, n_rows, dim, eps));
    for (int r = 0; r < n_rows; r++)
        rmsnorm_row(out + (size_t)r * dim, x + (size_t)r * dim, w, dim, eps);
    return PL_OK;
}

pl_status pl_ref_add_rmsnorm(pl_backend *be, float *out, float *residual, const float *delta,
                             const float *w, int n_rows, int dim, float eps) {
    (void)be;
    PL_TRY(pl_ref_check_rmsnorm("add_rmsnorm", out, residual, w, n_rows, dim, eps));
    if (n_rows > 0 && !delta)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "add_rmsnorm: delta is NULL");
    /* residual (n_rows, dim) += delta (n_rows, dim) */
    for (size_t i = 0; i < (size_t)n_rows * dim; i++) residual[i] += delta[i];
    for (int r = 0; r < n_rows; r++)
        rmsnorm_row(out + (size_t)r * dim, residual + (size_t)r * dim, w, dim, eps);
    return PL_OK;
}
