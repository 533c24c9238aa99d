/*
 * model/gguf_rope.c - RoPE scaling as GGUF files carry it: llama.cpp stores Llama 3.1's
 * frequency-dependent scaling not as parameters but as rope_freqs.weight, one factor per
 * frequency that divides it. Writing computes the factors from the config; reading finds the
 * scaling (none, linear, llama3) that gives them back.
 *
 * Why a fit works: with u = 1 / wavelength, Llama 3's blend is s = clamp(a u - b, 0, 1) with
 * 1 / factor = 1 / F + s (1 - 1 / F), F the factor of the lowest frequencies: a line in u
 * clamped to [0, 1]. Its two crossings u0 (s = 0) and u1 (s = 1) are low_freq_factor and
 * high_freq_factor divided by the original context, which therefore may be any value (the
 * file's rope.scaling.original_context_length, else Llama 3.1's 8192). Frequencies strictly
 * between 1 and F fix the line (two or more) or pin it (one); with none, any crossings
 * between the last unscaled and the first fully scaled frequency do. The result is checked
 * against every factor, so a file whose factors are not of this family is refused rather
 * than run with another rotation.
 */
#include <math.h>
#include <stdio.h>

#include "model/model_internal.h"

void pl_model_rope_freq_factors(const pl_model_config *c, float *out) {
    float scaled[PL_MODEL_MAX_HEAD_DIM / 2], plain[PL_MODEL_MAX_HEAD_DIM / 2];
    pl_model_config u = *c;
    u.rope_scaling = PL_ROPE_SCALING_NONE;
    pl_model_rope_inv_freq(c, scaled);
    pl_model_rope_inv_freq(&u, plain);
    for (int j = 0; j < c->head_dim / 2; j++) out[j] = plain[j] / scaled[j];
}

static bool close_to(double a, double b) { return fabs(a - b) <= 1e-5 * fmax(1.0, fabs(b)); }

/* True when c's factors equal want's. */
static bool reproduces(const pl_model_config *c, const float *want) {
    float got[PL_MODEL_MAX_HEAD_DIM / 2];
    pl_model_rope_freq_factors(c, got);
    for (int j = 0; j < c->head_dim / 2; j++)
        if (!close_to(got[j], want[j])) return false;
    return true;
}

static pl_status refuse(const char *what) {
    return pl_fail(PL_ERR_UNSUPPORTED, "%s: rope_freqs.weight holds frequency factors that are "
                   "neither linear nor Llama 3 scaling", what);
}

pl_status pl_model_rope_from_factors(pl_model_config *c, const float *f, int orig_ctx,
                                     const char *what) {
    int half = c->head_dim / 2;
    double big = 0;
    for (int j = 0; j < half; j++) {
        if (!isfinite(f[j]) || f[j] <= 0)
            return pl_fail(PL_ERR_FORMAT, "%s: rope_freqs.weight[%d] = %g is not a positive "
                           "factor", what, j, (double)f[j]);
        big = fmax(big, f[j]);
    }
    c->rope_scaling = PL_ROPE_SCALING_NONE;
    c->rope_factor = 1.0f;
    if (reproduces(c, f)) return PL_OK;
    c->rope_scaling = PL_ROPE_SCALING_LINEAR;
    c->rope_factor = (float)big;
    if (reproduces(c, f)) return PL_OK;

    /* llama3: s per frequency, and the u = 1 / wavelength of each */
    double u_one = INFINITY, u_full = 0;  /* lowest u left unscaled, highest fully scaled */
    double ua = 0, sa = 0, ub = 0, sb = 0; /* the extreme partly scaled points */
    int n_mid = 0;
    for (int j = 0; j < half; j++) {
        double inv = pow((double)c->rope_theta, -2.0 * j / c->head_dim);
        double u = inv / (2.0 * M_PI);
        double s = (1.0 / f[j] - 1.0 / big) / (1.0 - 1.0 / big);
        if (close_to(f[j], 1.0)) {
            u_one = fmin(u_one, u);
        } else if (close_to(f[j], big)) {
            u_full = fmax(u_full, u);
        } else {
            if (n_mid == 0 || u < ua) ua = u, sa = s;
            if (n_mid == 0 || u > ub) ub = u, sb = s;
            n_mid++;
        }
    }
    double u0, u1; /* where s crosses 0 and 1 */
    if (n_mid >= 2 && ub > ua && sb > sa) {
        double a = (sb - sa) / (ub - ua);
        u0 = ua - sa / a;
        u1 = u0 + 1.0 / a;
    } else if (n_mid == 1) {
        /* through the point, reaching 1 halfway to the next unscaled frequency (or at twice
         * its u when none is left unscaled) */
        double top = isfinite(u_one) ? (ua + u_one) / 2 : 2 * ua;
        double a = (1.0 - sa) / (top - ua);
        u0 = ua - sa / a;
        u1 = top;
        if (u0 <= u_full) { /* too steep for the scaled side: reach 0 halfway down instead */
            u0 = (u_full + ua) / 2;
            u1 = u0 + (ua - u0) / sa;
        }
    } else if (n_mid == 0 && isfinite(u_one) && u_full > 0 && u_full < u_one) {
        u0 = u_full + (u_one - u_full) / 3;
        u1 = u_full + 2 * (u_one - u_full) / 3;
    } else {
        return refuse(what);
    }
    if (!(u0 > 0) || !(u1 > u0)) return refuse(what);
    c->rope_scaling = PL_ROPE_SCALING_LLAMA3;
    c->rope_factor = (float)big;
    c->rope_original_max_pos = orig_ctx;
    c->rope_low_freq_factor = (float)(u0 * orig_ctx);
    c->rope_high_freq_factor = (float)(u1 * orig_ctx);
    if (!reproduces(c, f)) return refuse(what);
    return PL_OK;
}
