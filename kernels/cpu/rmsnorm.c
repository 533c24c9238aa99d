/*
 * kernels/cpu/rmsnorm.c - RMSNorm and residual-add + RMSNorm, one row per pass pair.
 *
 * out (n_rows, dim) = x / sqrt(mean(x^2) + eps) * w, w (dim) f32. add_rmsnorm first does
 * residual += delta; it is fused: the add and the sum of squares happen in the same pass over
 * the row, so the residual is read from memory once and the scaling pass reads it from L1.
 * Sums of squares are f32 in 32 (AVX-512) / 16 (AVX2) partial lanes. Rows split over threads
 * once a batch is large enough to pay for the wake-up.
 */
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"

// ---------------------------------------------------------------------------------------------
// one row: if delta, res += delta first; then out = res * inv_rms * w. out may alias res.

static void row_scalar(float *out, float *res, const float *x, const float *delta,
                       const float *w, int dim, float eps) {
    float s0 = 0, s1 = 0;
    int i = 0;
    if (delta) {
        for (i = 0; i < dim; i++) {
            res[i] += delta[i];
            s0 += res[i] * res[i];
        }
        x = res;
    } else {
        for (; i + 2 <= dim; i += 2) {
            s0 += x[i] * x[i];
            s1 += x[i + 1] * x[i + 1];
        }
        for (; i < dim; i++) s0 += x[i] * x[i];
    }
    float inv = 1.0f / sqrtf((s0 + s1) / (float)dim + eps);
    for (i = 0; i < dim; i++) out[i] = x[i] * inv * w[i];
}

#ifdef PL_CPU_X86
static PL_TARGET_AVX512 void row_avx512(float *out, float *res, const float *x,
                                        const float *delta, const float *w, int dim, float eps) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int i = 0;
    if (delta) {
        for (; i + 16 <= dim; i += 16) {
            __m512 v = _mm512_add_ps(_mm512_loadu_ps(res + i), _mm512_loadu_ps(delta + i));
            _mm512_storeu_ps(res + i, v);
            a0 = _mm512_fmadd_ps(v, v, a0);
        }
        if (i < dim) {
            __mmask16 m = pl_avx512_mask(dim - i);
            __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, res + i),
                                     _mm512_maskz_loadu_ps(m, delta + i));
            _mm512_mask_storeu_ps(res + i, m, v);
            a1 = _mm512_fmadd_ps(v, v, a1);
        }
        x = res;
    } else {
        for (; i + 32 <= dim; i += 32) {
            __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
            a0 = _mm512_fmadd_ps(v0, v0, a0);
            a1 = _mm512_fmadd_ps(v1, v1, a1);
        }
        for (; i < dim; i += 16) {
            __m512 v = _mm512_maskz_loadu_ps(pl_avx512_mask(dim - i < 16 ? dim - i : 16), x + i);
            a0 = _mm512_fmadd_ps(v, v, a0);
        }
    }
    float inv = 1.0f / sqrtf(_mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) / (float)dim + eps);
    __m512 vi = _mm512_set1_ps(inv);
    for (i = 0; i < dim; i += 16) {
        __mmask16 m = pl_avx512_mask(dim - i < 16 ? dim - i : 16);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vi);
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
    }
}

static PL_TARGET_AVX2 void row_avx2(float *out, float *res, const float *x, const float *delta,
                                    const float *w, int dim, float eps) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int i = 0;
    if (delta) {
        for (; i + 8 <= dim; i += 8) {
            __m256 v = _mm256_add_ps(_mm256_loadu_ps(res + i), _mm256_loadu_ps(delta + i));
            _mm256_storeu_ps(res + i, v);
            a0 = _mm256_fmadd_ps(v, v, a0);
        }
        x = res;
    } else {
        for (; i + 16 <= dim; i += 16) {
            __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
            a0 = _mm256_fmadd_ps(v0, v0, a0);
            a1 = _mm256_fmadd_ps(v1, v1, a1);
        }
        for (; i + 8 <= dim; i += 8) {
            __m256 v = _mm256_loadu_ps(x + i);
            a0 = _mm256_fmadd_ps(v, v, a0);
        }
    }
    float ss = pl_avx2_hsum(_mm256_add_ps(a0, a1));
    for (; i < dim; i++) { /* tail: the add (if any) and the square, scalar */
        if (delta) res[i] += delta[i];
        ss += x[i] * x[i];
    }
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    __m256 vi = _mm256_set1_ps(inv);
    for (i = 0; i + 8 <= dim; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vi);
        _mm256_storeu_ps(out + i, _mm256_mul_ps(v, _mm256_loadu_ps(w + i)));
    }
    for (; i < dim; i++) out[i] = x[i] * inv * w[i];
}
#endif

// ---------------------------------------------------------------------------------------------
// tasks

typedef struct norm_job {
    pl_cpu_isa isa;
    float *out;          /* (n_rows, dim) */
    float *res;          /* (n_rows, dim) residual, add_rmsnorm only */
    const float *x;      /* (n_rows, dim) input, rmsnorm only */
    const float *delta;  /* (n_rows, dim), add_rmsnorm only */
    const float *w;      /* (dim) */
    int n_rows, dim, per_task;
    float eps;
} norm_job;

static void norm_task(void *arg, int task, int thread) {
    (void)thread;
    const norm_job *J = arg;
    int r1 = (task + 1) * J->per_task < J->n_rows ? (task + 1) * J->per_task : J->n_rows;
    for (int r = task * J->per_task; r < r1; r++) {
        size_t o = (size_t)r * J->dim;
        float *res = J->res ? J->res + o : NULL;
        const float *x = J->x ? J->x + o : NULL;
        const float *delta = J->delta ? J->delta + o : NULL;
        switch (J->isa) {
#ifdef PL_CPU_X86
        case PL_CPU_ISA_AVX512: row_avx512(J->out + o, res, x, delta, J->w, J->dim, J->eps); break;
        case PL_CPU_ISA_AVX2: row_avx2(J->out + o, res, x, delta, J->w, J->dim, J->eps); break;
#endif
        default: row_scalar(J->out + o, res, x, delta, J->w, J->dim, J->eps); break;
        }
    }
}

static void run(pl_cpu_ctx *c, norm_job *J) {
    int n_tasks = pl_cpu_n_tasks(c, (size_t)J->n_rows * J->dim, 1u << 14);
    J->per_task = (J->n_rows + n_tasks - 1) / n_tasks;
    pl_threadpool_run(c->pool, (J->n_rows + J->per_task - 1) / J->per_task, norm_task, J);
}

pl_status pl_cpu_rmsnorm(pl_backend *be, float *out, const float *x, const float *w, int n_rows,
                         int dim, float eps) {
    PL_TRY(pl_ref_check_rmsnorm("rmsnorm", out, x, w, n_rows, dim, eps));
    if (n_rows == 0) return PL_OK;
    pl_cpu_ctx *c = be->ctx;
    norm_job J = {.isa = c->isa, .out = out, .x = x, .w = w, .n_rows = n_rows, .dim = dim,
                  .eps = eps};
    run(c, &J);
    return PL_OK;
}

pl_status pl_cpu_add_rmsnorm(pl_backend *be, float *out, float *residual, const float *delta,
                             const float *w, int n_rows, int dim, float eps) {
    PL_TRY(pl_ref_check_rmsnorm("add_rmsnorm", out, residual, w, n_rows, dim, eps));
    if (n_rows == 0) return PL_OK;
    if (!delta) return pl_fail(PL_ERR_INVALID_ARGUMENT, "add_rmsnorm: delta is NULL");
    pl_cpu_ctx *c = be->ctx;
    norm_job J = {.isa = c->isa, .out = out, .res = residual, .delta = delta, .w = w,
                  .n_rows = n_rows, .dim = dim, .eps = eps};
    run(c, &J);
    return PL_OK;
}
