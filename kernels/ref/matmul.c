/*
 * kernels/ref/matmul.c - reference matrix product with a transposed weight.
 *
 * out (n_rows, d_out) = x (n_rows, d_in) @ w^T, w (d_out, d_in) f32/f16/bf16 (row o of w is
 * output feature o, as in nn.Linear). Each dot product is accumulated in double.
 */
#include "kernels/ref/ref.h"
#include "util/dtype.h"

pl_status pl_ref_matmul(pl_backend *be, float *out, const float *x, const void *w,
                        pl_dtype w_dtype, int n_rows, int d_in, int d_out) {
    (void)be;
    PL_TRY(pl_ref_check_matmul(out, x, w, w_dtype, n_rows, d_in, d_out));
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * d_in; /* (d_in) */
        for (int o = 0; o < d_out; o++) {
            size_t wrow = (size_t)o * d_in;     /* w row o: (d_in) */
            double acc = 0.0;
            for (int i = 0; i < d_in; i++) acc += (double)xr[i] * pl_load_f32(w, w_dtype, wrow + i);
            out[(size_t)r * d_out + o] = (float)acc;
        }
    }
    return PL_OK;
}
