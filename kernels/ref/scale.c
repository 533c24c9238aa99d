/*
 * kernels/ref/scale.c - x (n) = scale * x, then soft-capped when cap > 0: tanh(x / cap) * cap
 * (Gemma's embedding scale and final logit soft-cap), in double.
 */
#include <math.h>

#include "kernels/ref/ref.h"

pl_status pl_ref_check_scale(const float *x, size_t n, float scale, float cap) {
    if (!isfinite(scale) || !(cap >= 0.0f) || isinf(cap))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "scale: scale %g must be finite and cap %g "
                       "finite and >= 0", (double)scale, (double)cap);
    if (n > 0 && !x) return pl_fail(PL_ERR_INVALID_ARGUMENT, "scale: x is NULL");
    return PL_OK;
}

pl_status pl_ref_scale(pl_backend *be, float *x, size_t n, float scale, float cap) {
    (void)be;
    PL_TRY(pl_ref_check_scale(x, n, scale, cap));
    for (size_t i = 0; i < n; i++) {
        double v = (double)scale * x[i];
        x[i] = (float)(cap > 0.0f ? tanh(v / cap) * cap : v);
    }
    return PL_OK;
}
