/*
 * kernels/ref/matmul.c - reference matrix product with a transposed weight.
 *
 * out (n_rows, d_out) = x (n_rows, d_in) @ w^T, w (d_out, d_in) of any weight type (row o of
 * w is output feature o, as in nn.Linear). Each weight row is read through its type's
 * reference dequantiser (util/wtype.h's to_f32: exact for f16/bf16, the format's definition
 * for the quantised types) into an f32 row, then each dot product is accumulated in double.
 */
#include "kernels/ref/ref.h"
#include "util/alloc.h"

pl_status pl_ref_matmul(pl_backend *be, float *out, const float *x, const void *w,
                        pl_wtype w_type, int n_rows, int d_in, int d_out) {
    (void)be;
    PL_TRY(pl_ref_check_matmul(out, x, w, w_type, n_rows, d_in, d_out));
    if (n_rows == 0) return PL_OK;
    const pl_wtype_traits *t = pl_wtype_traits_of(w_type);
    const size_t row_bytes = (size_t)d_in / (size_t)t->block_elems * (size_t)t->block_bytes;
    float *wrow = pl_malloc((size_t)d_in * sizeof(float)); /* (d_in) w row o in f32 */
    if (!wrow)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "matmul: no memory for a row of %d floats", d_in);
    for (int o = 0; o < d_out; o++) {
        t->to_f32((const unsigned char *)w + (size_t)o * row_bytes, wrow, (size_t)d_in);
        for (int r = 0; r < n_rows; r++) {
            const float *xr = x + (size_t)r * d_in; /* (d_in) */
            double acc = 0.0;
            for (int i = 0; i < d_in; i++) acc += (double)xr[i] * wrow[i];
            out[(size_t)r * d_out + o] = (float)acc;
        }
    }
    pl_free(wrow);
    return PL_OK;
}
