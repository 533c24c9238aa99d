/*
 * kernels/cpu/scale.c - x (n) = scale * x, soft-capped when cap > 0 (tanh(x / cap) * cap):
 * Gemma's embedding scale (n_tokens x dim) and final logit soft-cap (sampled rows x vocab),
 * and the soft-cap of attention scores (attention.c). Plain loops on the calling thread; the
 * cap's tanh in vectors: with tanhf per score and logit, a stories110M-sized Gemma 2 Q4_0
 * prefilled 512 tokens at 1592 tokens/s, with these 3089 (bench/peer/run.py, 2 threads).
 */
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"

/* The soft-cap one element at a time (tanhf); returns the largest result. */
static float softcap_scalar(float *x, size_t n, float scale, float cap) {
    const float inv = 1.0f / cap;
    float best = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        x[i] = tanhf(scale * x[i] * inv) * cap;
        best = x[i] > best ? x[i] : best;
    }
    return best;
}

#ifdef PL_CPU_X86
/* tanh(y) as 1 - 2 / (exp(2y) + 1), and below |y| = 0.2, where that form loses the low bits
 * to cancellation, as its odd Taylor series to y^9 (next term < 2e-10 of y there). */
#define TANH_SMALL 0.2f

static PL_TARGET_AVX512 __m512 tanh_avx512(__m512 y) {
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 e = pl_avx512_exp(_mm512_add_ps(y, y));
    __m512 big = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
    __m512 y2 = _mm512_mul_ps(y, y);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(62.0f / 2835.0f), y2,
                               _mm512_set1_ps(-17.0f / 315.0f));
    p = _mm512_fmadd_ps(p, y2, _mm512_set1_ps(2.0f / 15.0f));
    p = _mm512_fmadd_ps(p, y2, _mm512_set1_ps(-1.0f / 3.0f));
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, y2), y, y);
    __mmask16 near0 =
        _mm512_cmp_ps_mask(_mm512_abs_ps(y), _mm512_set1_ps(TANH_SMALL), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(near0, big, small);
}

static PL_TARGET_AVX2 __m256 tanh_avx2(__m256 y) {
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 e = pl_avx2_exp(_mm256_add_ps(y, y));
    __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
    __m256 y2 = _mm256_mul_ps(y, y);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(62.0f / 2835.0f), y2,
                               _mm256_set1_ps(-17.0f / 315.0f));
    p = _mm256_fmadd_ps(p, y2, _mm256_set1_ps(2.0f / 15.0f));
    p = _mm256_fmadd_ps(p, y2, _mm256_set1_ps(-1.0f / 3.0f));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, y2), y, y);
    __m256 ay = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), y);
    return _mm256_blendv_ps(big, small, _mm256_cmp_ps(ay, _mm256_set1_ps(TANH_SMALL), _CMP_LT_OQ));
}

static PL_TARGET_AVX512 float softcap_avx512(float *x, size_t n, float scale, float cap) {
    const __m512 k = _mm512_set1_ps(scale / cap), c = _mm512_set1_ps(cap);
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = pl_avx512_mask(n - i < 16 ? (int)(n - i) : 16);
        __m512 y = _mm512_mul_ps(tanh_avx512(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), k)), c);
        _mm512_mask_storeu_ps(x + i, m, y);
        mx = _mm512_mask_max_ps(mx, m, mx, y);
    }
    return _mm512_reduce_max_ps(mx);
}

static PL_TARGET_AVX2 float softcap_avx2(float *x, size_t n, float scale, float cap) {
    const __m256 k = _mm256_set1_ps(scale / cap), c = _mm256_set1_ps(cap);
    __m256 mx = _mm256_set1_ps(-INFINITY);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 y = _mm256_mul_ps(tanh_avx2(_mm256_mul_ps(_mm256_loadu_ps(x + i), k)), c);
        _mm256_storeu_ps(x + i, y);
        mx = _mm256_max_ps(mx, y);
    }
    float out[8], best = -INFINITY;
    _mm256_storeu_ps(out, mx);
    for (int l = 0; l < 8; l++) best = out[l] > best ? out[l] : best;
    float tail = softcap_scalar(x + i, n - i, scale, cap);
    return tail > best ? tail : best;
}
#endif

float pl_cpu_softcap(pl_cpu_isa isa, float *x, size_t n, float scale, float cap) {
#ifdef PL_CPU_X86
    if (isa == PL_CPU_ISA_AVX512) return softcap_avx512(x, n, scale, cap);
    if (isa == PL_CPU_ISA_AVX2) return softcap_avx2(x, n, scale, cap);
#endif
    (void)isa;
    return softcap_scalar(x, n, scale, cap);
}

pl_status pl_cpu_scale(pl_backend *be, float *x, size_t n, float scale, float cap) {
    PL_TRY(pl_ref_check_scale(x, n, scale, cap));
    if (cap > 0.0f) {
        pl_cpu_softcap(((pl_cpu_ctx *)be->ctx)->isa, x, n, scale, cap);
    } else {
        for (size_t i = 0; i < n; i++) x[i] *= scale;
    }
    return PL_OK;
}
