/*
 * kernels/ref/gelu_mul.c - GeGLU gate: out (n) = gelu_tanh(gate) * up, PyTorch's
 * gelu(approximate="tanh"): 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), in double.
 * out may alias gate.
 */
#include <math.h>

#include "kernels/ref/ref.h"

pl_status pl_ref_gelu_mul(pl_backend *be, float *out, const float *gate, const float *up,
                          size_t n) {
    (void)be;
    if (n == 0) return PL_OK;
    if (!out || !gate || !up)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "gelu_mul: out, gate or up is NULL");
    const double c = sqrt(2.0 / M_PI);
    for (size_t i = 0; i < n; i++) {
        double x = gate[i];
        out[i] = (float)(0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x))) * up[i]);
    }
    return PL_OK;
}
