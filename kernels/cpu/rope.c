/*
 * kernels/cpu/rope.c - rotary position embedding, in place, both pair layouts.
 *
 * q (n_tokens, n_heads, head_dim), k (n_tokens, n_kv_heads, head_dim). For each token the
 * cosines and sines of its head_dim/2 angles (positions[i] * inv_freq[j], formed in f32 as
 * in ref) are computed once into the thread's scratch and applied to all n_heads + n_kv_heads
 * heads, so the transcendental cost is per token, not per head. The rotation loops are plain
 * C the compiler vectorises; RoPE is a small share of a step. Tokens split over threads.
 */
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"

typedef struct rope_job {
    pl_cpu_ctx *c;
    float *q, *k;               /* (n_tokens, n_heads | n_kv_heads, head_dim) */
    const int32_t *positions;   /* (n_tokens) */
    const float *inv_freq;      /* (head_dim / 2) */
    int n_tokens, n_heads, n_kv_heads, head_dim, per_task;
    pl_rope_layout layout;
} rope_job;

/* Rotates n heads x (n, head_dim) by the angles whose cos/sin are cs (half) and sn (half). */
static void rotate(float *restrict x, int n, int head_dim, const float *restrict cs,
                   const float *restrict sn, pl_rope_layout layout) {
    int half = head_dim / 2;
    for (int h = 0; h < n; h++) {
        float *restrict xh = x + (size_t)h * head_dim;
        if (layout == PL_ROPE_INTERLEAVED) {
            for (int j = 0; j < half; j++) {
                float x0 = xh[2 * j], x1 = xh[2 * j + 1];
                xh[2 * j] = x0 * cs[j] - x1 * sn[j];
                xh[2 * j + 1] = x0 * sn[j] + x1 * cs[j];
            }
        } else {
            for (int j = 0; j < half; j++) {
                float x0 = xh[j], x1 = xh[j + half];
                xh[j] = x0 * cs[j] - x1 * sn[j];
                xh[j + half] = x0 * sn[j] + x1 * cs[j];
            }
        }
    }
}

static void rope_task(void *arg, int task, int thread) {
    const rope_job *J = arg;
    int half = J->head_dim / 2;
    float *cs = J->c->scratch[thread], *sn = cs + half; /* (half) each */
    int i1 = (task + 1) * J->per_task < J->n_tokens ? (task + 1) * J->per_task : J->n_tokens;
    for (int i = task * J->per_task; i < i1; i++) {
        for (int j = 0; j < half; j++) {
            float angle = (float)J->positions[i] * J->inv_freq[j];
            cs[j] = cosf(angle);
            sn[j] = sinf(angle);
        }
        rotate(J->q + (size_t)i * J->n_heads * J->head_dim, J->n_heads, J->head_dim, cs, sn,
               J->layout);
        rotate(J->k + (size_t)i * J->n_kv_heads * J->head_dim, J->n_kv_heads, J->head_dim, cs,
               sn, J->layout);
    }
}

pl_status pl_cpu_rope(pl_backend *be, float *q, float *k, const int32_t *positions,
                      const float *inv_freq, int n_tokens, int n_heads, int n_kv_heads,
                      int head_dim, pl_rope_layout layout) {
    PL_TRY(pl_ref_check_rope(q, k, positions, inv_freq, n_tokens, n_heads, n_kv_heads, head_dim,
                             layout));
    if (n_tokens == 0 || head_dim < 2) return PL_OK;
    pl_cpu_ctx *c = be->ctx;
    PL_TRY(pl_cpu_reserve(c, (size_t)head_dim, 0));
    size_t work = (size_t)n_tokens * (size_t)(n_heads + n_kv_heads) * head_dim;
    int n_tasks = pl_cpu_n_tasks(c, work, 1u << 14);
    rope_job J = {.c = c, .q = q, .k = k, .positions = positions, .inv_freq = inv_freq,
                  .n_tokens = n_tokens, .n_heads = n_heads, .n_kv_heads = n_kv_heads,
                  .head_dim = head_dim, .layout = layout,
                  .per_task = (n_tokens + n_tasks - 1) / n_tasks};
    pl_threadpool_run(c->pool, (n_tokens + J.per_task - 1) / J.per_task, rope_task, &J);
    return PL_OK;
}
