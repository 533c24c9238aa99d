/*
 * kernels/cpu/silu_mul.c - SwiGLU gate: out (n) = silu(gate) * up, silu(x) = x / (1 + e^-x).
 *
 * Vectorised with the backend's own exp (cpu.h, ~2 ulp), so out differs from ref by a few ulp.
 * out may alias gate: each vector is loaded before the same lanes are stored. Splits over
 * threads in chunks once n is large (batched FFN activations).
 */
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"

typedef struct silu_job {
    pl_cpu_isa isa;
    float *out;          /* (n) */
    const float *gate;   /* (n) */
    const float *up;     /* (n) */
    size_t n, per_task;  /* per_task: a multiple of 16 */
} silu_job;

static void silu_scalar(float *out, const float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

#ifdef PL_CPU_X86
static PL_TARGET_AVX512 void silu_avx512(float *out, const float *g, const float *u, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = pl_avx512_mask(n - i < 16 ? (int)(n - i) : 16);
        __m512 gv = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
        __m512 e = pl_avx512_exp(_mm512_sub_ps(_mm512_setzero_ps(), gv));
        __m512 s = _mm512_div_ps(gv, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, uv));
    }
}

static PL_TARGET_AVX2 void silu_avx2(float *out, const float *g, const float *u, size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i), uv = _mm256_loadu_ps(u + i);
        __m256 e = pl_avx2_exp(_mm256_sub_ps(_mm256_setzero_ps(), gv));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), uv));
    }
    if (i < n) {
        int r = (int)(n - i);
        __m256 gv = pl_avx2_load_part(g, PL_DTYPE_F32, i, r);
        __m256 uv = pl_avx2_load_part(u, PL_DTYPE_F32, i, r);
        __m256 e = pl_avx2_exp(_mm256_sub_ps(_mm256_setzero_ps(), gv));
        pl_avx2_store_part(out + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), uv),
                           r);
    }
}
#endif

static void silu_task(void *arg, int task, int thread) {
    (void)thread;
    const silu_job *J = arg;
    size_t i0 = (size_t)task * J->per_task;
    size_t n = J->n - i0 < J->per_task ? J->n - i0 : J->per_task;
    switch (J->isa) {
#ifdef PL_CPU_X86
    case PL_CPU_ISA_AVX512: silu_avx512(J->out + i0, J->gate + i0, J->up + i0, n); break;
    case PL_CPU_ISA_AVX2: silu_avx2(J->out + i0, J->gate + i0, J->up + i0, n); break;
#endif
    default: silu_scalar(J->out + i0, J->gate + i0, J->up + i0, n); break;
    }
}

pl_status pl_cpu_silu_mul(pl_backend *be, float *out, const float *gate, const float *up,
                          size_t n) {
    if (n == 0) return PL_OK;
    if (!out || !gate || !up)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "silu_mul: out, gate or up is NULL");
    pl_cpu_ctx *c = be->ctx;
    int n_tasks = pl_cpu_n_tasks(c, n, 1u << 14);
    size_t per = ((n + (size_t)n_tasks - 1) / (size_t)n_tasks + 15) & ~(size_t)15;
    silu_job J = {.isa = c->isa, .out = out, .gate = gate, .up = up, .n = n, .per_task = per};
    pl_threadpool_run(c->pool, (int)((n + per - 1) / per), silu_task, &J);
    return PL_OK;
}
