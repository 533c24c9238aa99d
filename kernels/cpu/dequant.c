/*
 * kernels/cpu/dequant.c - quantised weights to f32, 32-element pieces at a time: the own
 * GEMM's weight chunks, OpenBLAS tiles and embedding rows of the quantised types.
 *
 * Each piece's levels come out of qblocks.h (AVX2 loads where the ISA has them), are widened
 * to f32 and scaled: sc * (L - offset) - mn, one rounding as in the reference dequantiser,
 * so the result equals it bit for bit whatever the ISA (tests/kernels/test_ops.c, embed).
 */
#include "kernels/cpu/qblocks.h"

static void dequant_scalar(float *dst, const void *src, pl_wtype t, size_t p0, size_t n) {
    for (size_t p = 0; p < n; p++, dst += 32) {
        pl_qpiece q;
        pl_qpiece_read(src, t, p0 + p, &q);
        for (int i = 0; i < 32; i++) dst[i] = q.sc[i / 16] * (float)q.L[i] - q.mn;
    }
}

#ifdef PL_CPU_X86
/* Piece p's stored levels, scales (lanes 0-15 / 16-31 of the piece: lo, hi) and min. */
PL_INLINE PL_TARGET_AVX2 __m256i piece_avx2(const uint8_t *s, pl_wtype t, size_t p, float *lo,
                                            float *hi, float *mn) {
    const size_t bb = pl_q_block_bytes(t);
    *mn = 0;
    switch (t) {
    case PL_WTYPE_Q8_0:
        *lo = *hi = pl_avx2_f16(s + p * bb);
        return pl_avx2_lev_q8_0(s + p * bb);
    case PL_WTYPE_Q4_0:
        *lo = *hi = pl_avx2_f16(s + p * bb);
        return pl_avx2_lev_q4_0(s + p * bb);
    case PL_WTYPE_Q4_K:
    case PL_WTYPE_Q5_K: {
        const uint8_t *b = s + p / 8 * bb;
        int sub = (int)(p % 8), sc, m;
        pl_q_scale_min_k4(b + 4, sub, &sc, &m);
        *lo = *hi = pl_avx2_f16(b) * (float)sc;
        *mn = pl_avx2_f16(b + 2) * (float)m;
        return t == PL_WTYPE_Q5_K ? pl_avx2_lev_k4(b, sub, true) : pl_avx2_lev_k4(b, sub, false);
    }
    default: {
        const uint8_t *b = s + p / 8 * bb;
        int sub = (int)(p % 8);
        float d = pl_avx2_f16(b + 208);
        *lo = d * (float)(int8_t)b[192 + 2 * sub];
        *hi = d * (float)(int8_t)b[192 + 2 * sub + 1];
        return pl_avx2_lev_q6_k(b, sub);
    }
    }
}

/* Levels 8 at a time: widened (signed for Q8_0), less the offset, times the scale, less mn. */
PL_INLINE PL_TARGET_AVX2 __m256 scale8_avx2(__m128i lev8, bool is_signed, int off, float sc,
                                            float mn) {
    __m256i v = is_signed ? _mm256_cvtepi8_epi32(lev8) : _mm256_cvtepu8_epi32(lev8);
    v = _mm256_sub_epi32(v, _mm256_set1_epi32(off));
    return _mm256_fmsub_ps(_mm256_set1_ps(sc), _mm256_cvtepi32_ps(v), _mm256_set1_ps(mn));
}

static PL_TARGET_AVX2 void dequant_avx2(float *dst, const void *src, pl_wtype t, size_t p0,
                                        size_t n) {
    const bool sgn = t == PL_WTYPE_Q8_0;
    const int off = pl_q_level_offset(t);
    for (size_t p = 0; p < n; p++, dst += 32) {
        float lo, hi, mn;
        __m256i lev = piece_avx2(src, t, p0 + p, &lo, &hi, &mn);
        __m128i a = _mm256_castsi256_si128(lev), b = _mm256_extracti128_si256(lev, 1);
        _mm256_storeu_ps(dst, scale8_avx2(a, sgn, off, lo, mn));
        _mm256_storeu_ps(dst + 8, scale8_avx2(_mm_srli_si128(a, 8), sgn, off, lo, mn));
        _mm256_storeu_ps(dst + 16, scale8_avx2(b, sgn, off, hi, mn));
        _mm256_storeu_ps(dst + 24, scale8_avx2(_mm_srli_si128(b, 8), sgn, off, hi, mn));
    }
}

PL_INLINE PL_TARGET_AVX512 __m512 scale16_avx512(__m128i lev16, bool is_signed, int off,
                                                 float sc, float mn) {
    __m512i v = is_signed ? _mm512_cvtepi8_epi32(lev16) : _mm512_cvtepu8_epi32(lev16);
    v = _mm512_sub_epi32(v, _mm512_set1_epi32(off));
    return _mm512_fmsub_ps(_mm512_set1_ps(sc), _mm512_cvtepi32_ps(v), _mm512_set1_ps(mn));
}

static PL_TARGET_AVX512 void dequant_avx512(float *dst, const void *src, pl_wtype t, size_t p0,
                                            size_t n) {
    const bool sgn = t == PL_WTYPE_Q8_0;
    const int off = pl_q_level_offset(t);
    for (size_t p = 0; p < n; p++, dst += 32) {
        float lo, hi, mn;
        __m256i lev = piece_avx2(src, t, p0 + p, &lo, &hi, &mn);
        _mm512_storeu_ps(dst, scale16_avx512(_mm256_castsi256_si128(lev), sgn, off, lo, mn));
        _mm512_storeu_ps(dst + 16,
                         scale16_avx512(_mm256_extracti128_si256(lev, 1), sgn, off, hi, mn));
    }
}
#endif

void pl_cpu_dequant(pl_cpu_isa isa, float *dst, const void *src, pl_wtype t, size_t p0,
                    size_t n_pieces) {
#ifdef PL_CPU_X86
    if (isa == PL_CPU_ISA_AVX512) {
        dequant_avx512(dst, src, t, p0, n_pieces);
        return;
    }
    if (isa == PL_CPU_ISA_AVX2) {
        dequant_avx2(dst, src, t, p0, n_pieces);
        return;
    }
#endif
    (void)isa;
    dequant_scalar(dst, src, t, p0, n_pieces);
}
