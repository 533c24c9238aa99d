/*
 * kernels/cpu/qblocks.h - the quantised blocks of util/quant.h read in pieces of 32 elements
 * (a Q8_0/Q4_0 block, a Q4_K/Q5_K sub-block, two Q6_K groups): as integer levels with their
 * scales, in portable C and AVX2. Shared by the dequantiser (dequant.c) and the integer GEMV
 * (qgemv.c).
 *
 * Piece p of a row holds elements 32p .. 32p + 31; element i of it is
 *     sc[i / 16] * L_i - mn
 * with L_i the level less the type's offset (Q8_0: the int8 itself; Q4_0: nibble - 8; Q4_K,
 * Q5_K: 0 .. 15 / 31; Q6_K: 6 bits - 32), sc the piece's scales (two only for Q6_K, whose
 * groups are 16 long; for Q4_K/Q5_K d * the sub-block's 6-bit scale) and mn the K-quants'
 * dmin * 6-bit min. As in the reference dequantiser every product is exact and there is one
 * rounding.
 */
#ifndef PL_KERNELS_CPU_QBLOCKS_H
#define PL_KERNELS_CPU_QBLOCKS_H

#include "kernels/cpu/cpu.h"
#include "util/dtype.h"
#include "util/quant.h"

/* Bytes of a type's block and the pieces in it (1 for Q8_0/Q4_0, 8 for the K-quants). */
static inline size_t pl_q_block_bytes(pl_wtype t) {
    return (size_t)pl_wtype_traits_of(t)->block_bytes;
}
static inline int pl_q_pieces_per_block(pl_wtype t) {
    return pl_wtype_traits_of(t)->block_elems / 32;
}

/* The constant added to every stored level of a type (Q8_0: 0 here; its 128 is the VNNI
 * kernel's own, see qgemv.c). */
static inline int pl_q_level_offset(pl_wtype t) {
    return t == PL_WTYPE_Q4_0 ? 8 : t == PL_WTYPE_Q6_K ? 32 : 0;
}

typedef struct pl_qpiece {
    int8_t L[32]; /* levels less the offset */
    float sc[2];  /* scale of elements 0-15 and 16-31 */
    float mn;     /* subtracted from every element */
} pl_qpiece;

static inline float pl_q_f16(const uint8_t *p) { return pl_f16_to_f32(pl_q_f16_bits(p)); }

/* Piece p of the blocks at src (a row, or any run of whole blocks), in portable C. */
static inline void pl_qpiece_read(const void *src, pl_wtype t, size_t p, pl_qpiece *o) {
    const uint8_t *s = (const uint8_t *)src;
    o->mn = 0;
    switch (t) {
    case PL_WTYPE_Q8_0: {
        const uint8_t *b = s + p * sizeof(pl_block_q8_0);
        o->sc[0] = o->sc[1] = pl_q_f16(b);
        memcpy(o->L, b + 2, 32);
        break;
    }
    case PL_WTYPE_Q4_0: {
        const uint8_t *b = s + p * sizeof(pl_block_q4_0);
        o->sc[0] = o->sc[1] = pl_q_f16(b);
        for (int i = 0; i < 16; i++) {
            o->L[i] = (int8_t)((b[2 + i] & 15) - 8);
            o->L[i + 16] = (int8_t)((b[2 + i] >> 4) - 8);
        }
        break;
    }
    case PL_WTYPE_Q4_K:
    case PL_WTYPE_Q5_K: {
        bool five = t == PL_WTYPE_Q5_K;
        const uint8_t *b = s + p / 8 * (five ? sizeof(pl_block_q5_k) : sizeof(pl_block_q4_k));
        const uint8_t *qh = b + 16, *qs = b + (five ? 48 : 16);
        int sub = (int)(p % 8), c = sub / 2, sc, m;
        pl_q_scale_min_k4(b + 4, sub, &sc, &m);
        o->sc[0] = o->sc[1] = pl_q_f16(b) * (float)sc;
        o->mn = pl_q_f16(b + 2) * (float)m;
        for (int l = 0; l < 32; l++) {
            int q = sub & 1 ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
            if (five) q |= ((qh[l] >> sub) & 1) << 4;
            o->L[l] = (int8_t)q;
        }
        break;
    }
    default: { /* Q6_K */
        const uint8_t *b = s + p / 8 * sizeof(pl_block_q6_k);
        int sub = (int)(p % 8), half = sub / 4, k = sub % 4;
        float d = pl_q_f16(b + 208);
        o->sc[0] = d * (float)(int8_t)b[192 + 2 * sub];
        o->sc[1] = d * (float)(int8_t)b[192 + 2 * sub + 1];
        const uint8_t *ql = b + 64 * half + 32 * (k & 1), *qh = b + 128 + 32 * half;
        for (int l = 0; l < 32; l++) {
            int lo = k < 2 ? ql[l] & 15 : ql[l] >> 4;
            o->L[l] = (int8_t)((lo | ((qh[l] >> (2 * k)) & 3) << 4) - 32);
        }
        break;
    }
    }
}

#ifdef PL_CPU_X86
/* The f16 at p as f32 with F16C (exact, as pl_q_f16). */
PL_INLINE PL_TARGET_AVX2 float pl_avx2_f16(const uint8_t *p) {
    return _cvtsh_ss(pl_q_f16_bits(p));
}

/* ---- AVX2: a piece's stored levels as 32 bytes (offset not removed; Q8_0 signed, the others
 * unsigned). b points at the block (Q8_0/Q4_0) or super-block (K-quants); sub is the piece
 * within a super-block (0 .. 7). */

PL_INLINE PL_TARGET_AVX2 __m256i pl_avx2_lev_q8_0(const uint8_t *b) {
    return _mm256_loadu_si256((const __m256i *)(b + 2));
}

PL_INLINE PL_TARGET_AVX2 __m256i pl_avx2_lev_q4_0(const uint8_t *b) {
    __m128i qs = _mm_loadu_si128((const __m128i *)(b + 2));
    __m256i t = _mm256_inserti128_si256(_mm256_castsi128_si256(qs), _mm_srli_epi16(qs, 4), 1);
    return _mm256_and_si256(t, _mm256_set1_epi8(15));
}

/* Q4_K (qs at b + 16) and Q5_K (qh at b + 16, qs at b + 48). */
PL_INLINE PL_TARGET_AVX2 __m256i pl_avx2_lev_k4(const uint8_t *b, int sub, const bool five) {
    __m256i q = _mm256_loadu_si256((const __m256i *)(b + (five ? 48 : 16) + 32 * (sub / 2)));
    if (sub & 1) q = _mm256_srli_epi16(q, 4);
    q = _mm256_and_si256(q, _mm256_set1_epi8(15));
    if (five) {
        __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 16));
        __m256i bit = _mm256_set1_epi8((char)(1 << sub));
        __m256i has = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
        q = _mm256_or_si256(q, _mm256_and_si256(has, _mm256_set1_epi8(16)));
    }
    return q;
}

PL_INLINE PL_TARGET_AVX2 __m256i pl_avx2_lev_q6_k(const uint8_t *b, int sub) {
    int half = sub / 4, k = sub % 4;
    __m256i ql = _mm256_loadu_si256((const __m256i *)(b + 64 * half + 32 * (k & 1)));
    if (k >= 2) ql = _mm256_srli_epi16(ql, 4);
    ql = _mm256_and_si256(ql, _mm256_set1_epi8(15));
    __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * half));
    qh = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k));
    qh = _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(3)), 4);
    return _mm256_or_si256(ql, qh);
}

/* A Q4_K/Q5_K super-block's eight 6-bit scales and eight mins, unpacked to bytes (sc_0 ..
 * sc_7, m_0 .. m_7), all in vector registers: bytes 0-3 and 8-11 of the scales give the low
 * bits of sc_0-3 / sc_4-7 (low nibble), bytes 4-7 and 8-11 those of the mins (8-11: high
 * nibble), and the top 2 bits of bytes 0-7 the top bits of sc_4-7 and m_4-7. Reads the 16
 * bytes from b + 4 (the 12 scale bytes and 4 level bytes after them). */
PL_INLINE PL_TARGET_AVX2 __m128i pl_avx2_k4_scale_bytes(const uint8_t *b) {
    __m128i v = _mm_loadu_si128((const __m128i *)(b + 4));
    __m128i a = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9,
                                                  10, 11));
    __m128i t = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4,
                                                  5, 6, 7));
    __m128i lo = _mm_and_si128(a, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63,
                                                0, 0, 0, 0));
    __m128i hi = _mm_and_si128(_mm_srli_epi16(a, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                                   0, 0, 0, 15, 15, 15, 15));
    __m128i top = _mm_and_si128(_mm_srli_epi16(t, 2), _mm_set1_epi8(0x30));
    return _mm_or_si128(_mm_or_si128(lo, hi), top);
}

/* Q4_K/Q5_K super-block scales: sc8 = d * sc_b, mn8 = dmin * m_b (b = lane). */
PL_INLINE PL_TARGET_AVX2 void pl_avx2_k4_scales(const uint8_t *b, __m256 *sc8, __m256 *mn8) {
    __m128i v = pl_avx2_k4_scale_bytes(b);
    /* d and dmin from one 32-bit load */
    __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)pl_q_f16_bits(b) |
                                                     (uint32_t)pl_q_f16_bits(b + 2) << 16)));
    __m256 s = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
    __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)));
    *sc8 = _mm256_mul_ps(_mm256_broadcastss_ps(dd), s);
    *mn8 = _mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dd)), m);
}

/* Q6_K super-block group scales: lo = d * scales[0..7], hi = d * scales[8..15]. */
PL_INLINE PL_TARGET_AVX2 void pl_avx2_q6_scales(const uint8_t *b, __m256 *lo, __m256 *hi) {
    __m128i s = _mm_loadu_si128((const __m128i *)(b + 192));
    __m256 d = _mm256_set1_ps(pl_avx2_f16(b + 208));
    *lo = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s)));
    *hi = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(s, 8))));
}
#endif /* PL_CPU_X86 */

#endif
