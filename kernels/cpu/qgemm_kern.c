/*
 * kernels/cpu/qgemm_kern.c - the int8 GEMM's micro-kernels on a panel (qgemm.h): portable C,
 * AVX2 and AVX-VNNI (qgemm_k256.h) and AVX-512 VNNI. The AMX one is in qgemm_amx.c.
 *
 * Each is an outer product: per step of 4 k, one vector load per 16 (8) panel columns and one
 * 4-byte broadcast per activation row feed (rows x vectors) vpdpbusd into integer
 * accumulators; at the end of each block (kb k) those are converted and scaled into f32 ones
 * (qgemm.h's order), and restarted from the block's offset correction (-offset x the
 * activations' block sum, a shifted broadcast).
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/qgemm.h"

void pl_qg_kernel_scalar(const pl_qg_panel *P, const pl_qg_tile *T) {
    const int nr = P->nr, kb = P->kb, b0 = T->k0 / kb, b1 = T->k1 / kb;
    for (int m = 0; m < T->n_rows; m++) {
        const int8_t *q = T->q[m];
        for (int n = 0; n < P->n_valid; n++) {
            float acc = 0;
            for (int b = b0; b < b1; b++) {
                int32_t I = P->shift ? T->sn[m][b] * (1 << P->shift) : 0;
                for (int k = b * kb; k < (b + 1) * kb; k++) {
                    uint8_t l = P->lev[((size_t)(k / 4) * nr + n) * 4 + k % 4];
                    I += (P->is_signed ? (int)(int8_t)l : (int)l) * q[k];
                }
                float t = (float)I * P->sc[(size_t)b * nr + n];
                acc = fmaf(t, T->d[m][b * kb / 32], acc);
                if (P->has_mn) acc = fmaf(-P->mn[(size_t)b * nr + n], T->ds[m][b], acc);
            }
            T->out[m][n] = T->accumulate ? T->out[m][n] + acc : acc;
        }
    }
}

#ifdef PL_CPU_X86
#define K256_(x) k256_avx2_##x
#define K256_NAME pl_qg_kernel_avx2
#define K256_TARGET PL_TARGET_AVX2
#define K256_VNNI 0
#include "kernels/cpu/qgemm_k256.h"
#undef K256_
#undef K256_NAME
#undef K256_TARGET
#undef K256_VNNI

#define K256_(x) k256_vnni_##x
#define K256_NAME pl_qg_kernel_avxvnni
#define K256_TARGET PL_TARGET_AVXVNNI
#define K256_VNNI 1
#include "kernels/cpu/qgemm_k256.h"
#undef K256_
#undef K256_NAME
#undef K256_TARGET
#undef K256_VNNI

// ---------------------------------------------------------------------------------------------
// AVX-512 VNNI: tiles of 4 rows x 48 columns (3 vectors): 12 integer and 12 f32 accumulators

#define K512_MR 4
#define K512_NV 3

PL_INLINE PL_TARGET_AVX512_VNNI void tile512(const pl_qg_panel *P, const pl_qg_tile *T,
                                             const int MR, const int kb, const int shift,
                                             const bool has_mn) {
    const int nr = K512_NV * 16, b0 = T->k0 / kb, b1 = T->k1 / kb, steps = kb / 4;
    __m512 acc[K512_MR][K512_NV];
#pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 3
        for (int v = 0; v < K512_NV; v++) acc[m][v] = _mm512_setzero_ps();
    const uint8_t *lev = P->lev + (size_t)(T->k0 / 4) * nr * 4;
    for (int b = b0; b < b1; b++) {
        __m512i ia[K512_MR][K512_NV];
#pragma GCC unroll 4
        for (int m = 0; m < MR; m++) {
            __m512i init = shift ? _mm512_slli_epi32(_mm512_set1_epi32(T->sn[m][b]), shift)
                                 : _mm512_setzero_si512();
#pragma GCC unroll 3
            for (int v = 0; v < K512_NV; v++) ia[m][v] = init;
        }
#pragma GCC unroll 8
        for (int s = 0; s < steps; s++, lev += (size_t)nr * 4) {
            __m512i w[K512_NV];
#pragma GCC unroll 3
            for (int v = 0; v < K512_NV; v++) w[v] = _mm512_loadu_si512(lev + 64 * v);
#pragma GCC unroll 4
            for (int m = 0; m < MR; m++) {
                int32_t xv;
                memcpy(&xv, T->q[m] + (size_t)b * kb + 4 * s, 4);
                __m512i x = _mm512_set1_epi32(xv);
#pragma GCC unroll 3
                for (int v = 0; v < K512_NV; v++) ia[m][v] = _mm512_dpbusd_epi32(ia[m][v], w[v], x);
            }
        }
        __m512 sc[K512_NV];
#pragma GCC unroll 3
        for (int v = 0; v < K512_NV; v++) sc[v] = _mm512_loadu_ps(P->sc + (size_t)b * nr + 16 * v);
#pragma GCC unroll 4
        for (int m = 0; m < MR; m++) {
            __m512 d = _mm512_set1_ps(T->d[m][b * kb / 32]);
#pragma GCC unroll 3
            for (int v = 0; v < K512_NV; v++)
                acc[m][v] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(ia[m][v]), sc[v]), d,
                                            acc[m][v]);
        }
        if (has_mn) {
#pragma GCC unroll 3
            for (int v = 0; v < K512_NV; v++) {
                __m512 mn = _mm512_loadu_ps(P->mn + (size_t)b * nr + 16 * v);
#pragma GCC unroll 4
                for (int m = 0; m < MR; m++)
                    acc[m][v] = _mm512_fnmadd_ps(mn, _mm512_set1_ps(T->ds[m][b]), acc[m][v]);
            }
        }
    }
#pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 3
        for (int v = 0; v < K512_NV; v++) {
            int n0 = 16 * v, left = P->n_valid - n0;
            if (left <= 0) continue;
            __mmask16 k = left >= 16 ? 0xffff : pl_avx512_mask(left);
            __m512 r = acc[m][v];
            if (T->accumulate) r = _mm512_add_ps(_mm512_maskz_loadu_ps(k, T->out[m] + n0), r);
            _mm512_mask_storeu_ps(T->out[m] + n0, k, r);
        }
}

#define K512_ROWS(kb, shift, mn)                                                               \
    switch (T->n_rows) {                                                                       \
    case 1: tile512(P, T, 1, kb, shift, mn); break;                                            \
    case 2: tile512(P, T, 2, kb, shift, mn); break;                                            \
    case 3: tile512(P, T, 3, kb, shift, mn); break;                                            \
    default: tile512(P, T, 4, kb, shift, mn); break;                                           \
    }

PL_TARGET_AVX512_VNNI void pl_qg_kernel_vnni512(const pl_qg_panel *P, const pl_qg_tile *T) {
    if (P->has_mn) {
        K512_ROWS(32, 0, true);
    } else if (P->kb == 16) {
        K512_ROWS(16, 5, false);
    } else if (P->shift == 7) {
        K512_ROWS(32, 7, false);
    } else {
        K512_ROWS(32, 3, false);
    }
}
#endif /* PL_CPU_X86 */
