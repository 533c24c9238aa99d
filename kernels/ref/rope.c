/*
 * kernels/ref/rope.c - reference rotary position embedding, both pair layouts.
 *
 * q (n_tokens, n_heads, head_dim) and k (n_tokens, n_kv_heads, head_dim), rotated in place.
 * Pair j (0 <= j < head_dim/2) of token i rotates by angle positions[i] * inv_freq[j]; the
 * angle is formed in f32 (as every backend must, so they agree at large positions) and its
 * cosine and sine taken in double. With an odd head_dim the last element is left alone.
 *   interleaved: pair j is (2j, 2j+1)          half: pair j is (j, j + head_dim/2)
 */
#include <math.h>

#include "kernels/ref/ref.h"

/* Rotates every head of one token: x (n, head_dim). */
static void rotate_heads(float *x, int n, int head_dim, int pos, const float *inv_freq,
                         pl_rope_layout layout) {
    int half = head_dim / 2;
    for (int h = 0; h < n; h++) {
        float *xh = x + (size_t)h * head_dim;
        for (int j = 0; j < half; j++) {
            float angle = (float)pos * inv_freq[j];
            double c = cos((double)angle), s = sin((double)angle);
            int a = layout == PL_ROPE_INTERLEAVED ? 2 * j : j;
            int b = layout == PL_ROPE_INTERLEAVED ? 2 * j + 1 : j + half;
            double x0 = xh[a], x1 = xh[b];
            xh[a] = (float)(x0 * c - x1 * s);
            xh[b] = (float)(x0 * s + x1 * c);
        }
    }
}

pl_status pl_ref_rope(pl_backend *be, float *q, float *k, const int32_t *positions,
                      const float *inv_freq, int n_tokens, int n_heads, int n_kv_heads,
                      int head_dim, pl_rope_layout layout) {
    (void)be;
    PL_TRY(pl_ref_check_rope(q, k, positions, inv_freq, n_tokens, n_heads, n_kv_heads, head_dim,
                             layout));
    for (int i = 0; i < n_tokens; i++) {
        rotate_heads(q + (size_t)i * n_heads * head_dim, n_heads, head_dim, positions[i],
                     inv_freq, layout);
        rotate_heads(k + (size_t)i * n_kv_heads * head_dim, n_kv_heads, head_dim, positions[i],
                     inv_freq, layout);
    }
    return PL_OK;
}
