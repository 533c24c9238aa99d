/*
 * kernels/ref/silu_mul.c - reference SwiGLU gate: out (n) = silu(gate) * up.
 *
 * silu(x) = x / (1 + exp(-x)), evaluated in double. out may alias gate (element i is read
 * before it is written).
 */
#include <math.h>

#include "kernels/ref/ref.h"

pl_status pl_ref_silu_mul(pl_backend *be, float *out, const float *gate, const float *up,
                          size_t n) {
    (void)be;
    if (n == 0) return PL_OK;
    if (!out || !gate || !up)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "silu_mul: out, gate or up is NULL");
    for (size_t i = 0; i < n; i++) {
        double g = gate[i];
        out[i] = (float)(g / (1.0 + exp(-g)) * up[i]);
    }
    return PL_OK;
}
