/*
 * kernels/cpu/gelu_mul.c - GeGLU gate: out (n) = gelu_tanh(gate) * up.
 *
 * gelu_tanh(x) = 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3), and since
 * 1 + tanh(u) = 2 / (1 + e^-2u) that is x / (1 + e^-2u): silu_mul.c's form with the exponent
 * -2u, vectorised with the same exp (cpu.h, ~2 ulp). out may alias gate. Splits over threads
 * in chunks once n is large.
 */
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"

typedef struct gelu_job {
    pl_cpu_isa isa;
    float *out;          /* (n) */
    const float *gate;   /* (n) */
    const float *up;     /* (n) */
    size_t n, per_task;  /* per_task: a multiple of 16 */
} gelu_job;

#define K2 1.5957691216057308f /* 2 sqrt(2 / pi) */
#define KC 0.044715f

static void gelu_scalar(float *out, const float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = g[i];
        out[i] = x / (1.0f + expf(-K2 * (x + KC * x * x * x))) * u[i];
    }
}

#ifdef PL_CPU_X86
static PL_TARGET_AVX512 void gelu_avx512(float *out, const float *g, const float *u, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = pl_avx512_mask(n - i < 16 ? (int)(n - i) : 16);
        __m512 gv = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
        __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(gv, gv), gv);
        __m512 z = _mm512_mul_ps(_mm512_set1_ps(-K2), _mm512_fmadd_ps(_mm512_set1_ps(KC), x3, gv));
        __m512 e = pl_avx512_exp(z);
        __m512 s = _mm512_div_ps(gv, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, uv));
    }
}

/* -2u for x */
static PL_TARGET_AVX2 __m256 gelu_arg(__m256 x) {
    __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    return _mm256_mul_ps(_mm256_set1_ps(-K2), _mm256_fmadd_ps(_mm256_set1_ps(KC), x3, x));
}

static PL_TARGET_AVX2 void gelu_avx2(float *out, const float *g, const float *u, size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i), uv = _mm256_loadu_ps(u + i);
        __m256 e = pl_avx2_exp(gelu_arg(gv));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), uv));
    }
    if (i < n) {
        int r = (int)(n - i);
        __m256 gv = pl_avx2_load_part(g, PL_DTYPE_F32, i, r);
        __m256 uv = pl_avx2_load_part(u, PL_DTYPE_F32, i, r);
        __m256 e = pl_avx2_exp(gelu_arg(gv));
        pl_avx2_store_part(out + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), uv),
                           r);
    }
}
#endif

static void gelu_task(void *arg, int task, int thread) {
    (void)thread;
    const gelu_job *J = arg;
    size_t i0 = (size_t)task * J->per_task;
    size_t n = J->n - i0 < J->per_task ? J->n - i0 : J->per_task;
    switch (J->isa) {
#ifdef PL_CPU_X86
    case PL_CPU_ISA_AVX512: gelu_avx512(J->out + i0, J->gate + i0, J->up + i0, n); break;
    case PL_CPU_ISA_AVX2: gelu_avx2(J->out + i0, J->gate + i0, J->up + i0, n); break;
#endif
    default: gelu_scalar(J->out + i0, J->gate + i0, J->up + i0, n); break;
    }
}

pl_status pl_cpu_gelu_mul(pl_backend *be, float *out, const float *gate, const float *up,
                          size_t n) {
    if (n == 0) return PL_OK;
    if (!out || !gate || !up)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "gelu_mul: out, gate or up is NULL");
    pl_cpu_ctx *c = be->ctx;
    int n_tasks = pl_cpu_n_tasks(c, n, 1u << 14);
    size_t per = ((n + (size_t)n_tasks - 1) / (size_t)n_tasks + 15) & ~(size_t)15;
    gelu_job J = {.isa = c->isa, .out = out, .gate = gate, .up = up, .n = n, .per_task = per};
    pl_threadpool_run(c->pool, (int)((n + per - 1) / per), gelu_task, &J);
    return PL_OK;
}
