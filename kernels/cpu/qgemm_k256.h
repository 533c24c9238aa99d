/*
 * kernels/cpu/qgemm_k256.h - the int8 GEMM's 256-bit micro-kernel, included once per
 * instruction set by qgemm_kern.c with
 *   K256_NAME    the entry point's name
 *   K256_TARGET  its target attribute
 *   K256_VNNI    1: vpdpbusd (AVX-VNNI); 0: vpmaddubsw + vpmaddwd (AVX2)
 * A tile of 4 rows x 16 columns (2 vectors of 8): 8 integer accumulators reset every block
 * and 8 f32 ones (the compiler keeps what fits of the 16 registers).
 *
 * AVX2 multiplies unsigned weight bytes by signed activation bytes with vpmaddubsw, whose
 * pairs saturate at 16 bits: levels below 64 are safe (2 x 63 x 127), Q8_0's are not, so its
 * panel is signed and it runs |w| x sign(x, w) (at most 2 x 128 x 127).
 */
#define K256_MR 4
#define K256_NV 2

PL_INLINE K256_TARGET __m256i K256_(dot)(__m256i acc, __m256i w, __m256i wabs, __m256i x,
                                         const bool sgn) {
#if K256_VNNI
    (void)wabs;
    (void)sgn;
    return _mm256_dpbusd_avx_epi32(acc, w, x);
#else
    __m256i p = sgn ? _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(x, w))
                    : _mm256_maddubs_epi16(w, x);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
#endif
}

PL_INLINE K256_TARGET void K256_(tile)(const pl_qg_panel *P, const pl_qg_tile *T, const int MR,
                                       const int kb, const int shift, const bool has_mn,
                                       const bool sgn) {
    const int nr = P->nr, b0 = T->k0 / kb, b1 = T->k1 / kb, steps = kb / 4;
    __m256 acc[K256_MR][K256_NV];
#pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 2
        for (int v = 0; v < K256_NV; v++) acc[m][v] = _mm256_setzero_ps();
    const uint8_t *lev = P->lev + (size_t)(T->k0 / 4) * nr * 4;
    for (int b = b0; b < b1; b++) {
        __m256i ia[K256_MR][K256_NV];
#pragma GCC unroll 4
        for (int m = 0; m < MR; m++) {
            __m256i init = shift ? _mm256_slli_epi32(_mm256_set1_epi32(T->sn[m][b]), shift)
                                 : _mm256_setzero_si256();
#pragma GCC unroll 2
            for (int v = 0; v < K256_NV; v++) ia[m][v] = init;
        }
#pragma GCC unroll 8
        for (int s = 0; s < steps; s++, lev += (size_t)nr * 4) {
            __m256i w[K256_NV], wa[K256_NV];
#pragma GCC unroll 2
            for (int v = 0; v < K256_NV; v++) {
                w[v] = _mm256_loadu_si256((const __m256i *)(lev + 32 * v));
                wa[v] = sgn ? _mm256_abs_epi8(w[v]) : w[v];
            }
#pragma GCC unroll 4
            for (int m = 0; m < MR; m++) {
                int32_t xv;
                memcpy(&xv, T->q[m] + (size_t)b * kb + 4 * s, 4);
                __m256i x = _mm256_set1_epi32(xv);
#pragma GCC unroll 2
                for (int v = 0; v < K256_NV; v++)
                    ia[m][v] = K256_(dot)(ia[m][v], w[v], wa[v], x, sgn);
            }
        }
        __m256 sc[K256_NV];
#pragma GCC unroll 2
        for (int v = 0; v < K256_NV; v++) sc[v] = _mm256_loadu_ps(P->sc + (size_t)b * nr + 8 * v);
#pragma GCC unroll 4
        for (int m = 0; m < MR; m++) {
            __m256 d = _mm256_set1_ps(T->d[m][b * kb / 32]);
#pragma GCC unroll 2
            for (int v = 0; v < K256_NV; v++)
                acc[m][v] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(ia[m][v]), sc[v]), d,
                                            acc[m][v]);
        }
        if (has_mn) {
#pragma GCC unroll 2
            for (int v = 0; v < K256_NV; v++) {
                __m256 mn = _mm256_loadu_ps(P->mn + (size_t)b * nr + 8 * v);
#pragma GCC unroll 4
                for (int m = 0; m < MR; m++)
                    acc[m][v] = _mm256_fnmadd_ps(mn, _mm256_set1_ps(T->ds[m][b]), acc[m][v]);
            }
        }
    }
#pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 2
        for (int v = 0; v < K256_NV; v++) {
            int n0 = 8 * v, left = P->n_valid - n0;
            if (left <= 0) continue;
            __m256 r = acc[m][v];
            if (T->accumulate)
                r = _mm256_add_ps(left >= 8 ? _mm256_loadu_ps(T->out[m] + n0)
                                            : pl_avx2_load_part(T->out[m], PL_DTYPE_F32,
                                                                (size_t)n0, left),
                                  r);
            if (left >= 8)
                _mm256_storeu_ps(T->out[m] + n0, r);
            else
                pl_avx2_store_part(T->out[m] + n0, r, left);
        }
}

/* One type's tiles of 1 .. 4 rows. */
#define K256_ROWS(kb, shift, mn, sgn)                                                          \
    switch (T->n_rows) {                                                                       \
    case 1: K256_(tile)(P, T, 1, kb, shift, mn, sgn); break;                                   \
    case 2: K256_(tile)(P, T, 2, kb, shift, mn, sgn); break;                                   \
    case 3: K256_(tile)(P, T, 3, kb, shift, mn, sgn); break;                                   \
    default: K256_(tile)(P, T, 4, kb, shift, mn, sgn); break;                                  \
    }

K256_TARGET void K256_NAME(const pl_qg_panel *P, const pl_qg_tile *T) {
    if (P->has_mn) {
        K256_ROWS(32, 0, true, false);
    } else if (P->kb == 16) {
        K256_ROWS(16, 5, false, false);
    } else if (P->is_signed) { /* Q8_0 on AVX2 */
        K256_ROWS(32, 0, false, true);
    } else if (P->shift == 7) {
        K256_ROWS(32, 7, false, false);
    } else {
        K256_ROWS(32, 3, false, false);
    }
}

#undef K256_ROWS
#undef K256_MR
#undef K256_NV
