/*
 * kernels/cpu/scale.c - x (n) = scale * x, soft-capped when cap > 0 (tanh(x / cap) * cap):
 * Gemma's embedding scale (n_tokens x dim) and final logit soft-cap (sampled rows x vocab).
 * Both are small beside the products around them: plain loops on the calling thread.
 */
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"

pl_status pl_cpu_scale(pl_backend *be, float *x, size_t n, float scale, float cap) {
    (void)be;
    PL_TRY(pl_ref_check_scale(x, n, scale, cap));
    if (cap > 0.0f) {
        const float inv = 1.0f / cap;
        for (size_t i = 0; i < n; i++) x[i] = tanhf(scale * x[i] * inv) * cap;
    } else {
        for (size_t i = 0; i < n; i++) x[i] *= scale;
    }
    return PL_OK;
}
