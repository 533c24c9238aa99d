/*
 * util/quant.h - the block-quantised weight types of the GGUF format (Q8_0, Q4_0, Q4_K, Q5_K,
 * Q6_K): their block layouts, byte for byte as GGUF files store them, and the reference
 * dequantisers and quantisers that are their rows in util/wtype.h's table.
 *
 * Layouts (all little-endian; "f16" is an IEEE half's bits; a row of a weight matrix is a run
 * of whole blocks, element e of the row in block e / block_elems):
 *
 *   Q8_0 (32 elements, 34 bytes): f16 d; int8 qs[32].        y[i] = d * qs[i]
 *   Q4_0 (32 elements, 18 bytes): f16 d; uint8 qs[16].
 *        y[i] = d * ((qs[i] & 15) - 8),  y[i + 16] = d * ((qs[i] >> 4) - 8)      (i < 16)
 *   Q4_K (256 elements, 144 bytes): f16 d, dmin; uint8 scales[12]; uint8 qs[128].
 *        Eight sub-blocks of 32, sub-block b with a 6-bit scale sc_b and a 6-bit min m_b
 *        packed in scales (pl_q_scale_min_k4). Chunk c < 4 (64 elements) keeps its levels in
 *        qs[32c .. 32c + 31]: element 64c + l is the low nibble of qs[32c + l] (sub-block 2c),
 *        element 64c + 32 + l its high nibble (sub-block 2c + 1).
 *        y = (d * sc_b) * q - (dmin * m_b),  q in [0, 15]
 *   Q5_K (256 elements, 176 bytes): f16 d, dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128].
 *        As Q4_K with a fifth bit: element 64c + l adds 16 * bit 2c of qh[l], element
 *        64c + 32 + l adds 16 * bit 2c + 1 of qh[l]; q in [0, 31].
 *   Q6_K (256 elements, 210 bytes): uint8 ql[128]; uint8 qh[64]; int8 scales[16]; f16 d.
 *        Sixteen groups of 16 elements, group g scaled by scales[g]. Half n < 2 (128
 *        elements) uses ql[64n ..], qh[32n ..]; for l < 32 its elements
 *          128n +      l: low nibble of ql[64n + l]       | bits 0-1 of qh[32n + l] << 4
 *          128n + 32 + l: low nibble of ql[64n + 32 + l]  | bits 2-3 of qh[32n + l] << 4
 *          128n + 64 + l: high nibble of ql[64n + l]      | bits 4-5 of qh[32n + l] << 4
 *          128n + 96 + l: high nibble of ql[64n + 32 + l] | bits 6-7 of qh[32n + l] << 4
 *        are q + 32, q in [-32, 31];  y = (d * scales[e / 16]) * q.
 *
 * Every product of the formulas is exact in f32 (an f16 has 11 significant bits, a scale at
 * most 8 and a level at most 6), so each value is rounded once (Q4_K/Q5_K: at the
 * subtraction; the others: at the last product) and any evaluation order or fused
 * multiply-add gives the same bits: fast paths can equal the reference exactly.
 *
 * The quantisers: Q8_0 and Q4_0 as GGUF's reference encoder defines them (scale from the
 * block's largest magnitude, levels rounded); the K-quants by a least-squares search of each
 * sub-block's scale and min, then 6-bit (8-bit for Q6_K) quantisation of those against the
 * super-block's f16 scales and a final rounding of the levels against the stored scales. They
 * give valid blocks for any finite input; non-finite inputs give blocks that read back as
 * non-finite or 0, never undefined behaviour.
 */
#ifndef PL_UTIL_QUANT_H
#define PL_UTIL_QUANT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PL_QK 32    /* elements of a Q8_0 / Q4_0 block */
#define PL_QK_K 256 /* elements of a K-quant super-block */

typedef struct pl_block_q8_0 {
    uint16_t d;
    int8_t qs[PL_QK];
} pl_block_q8_0;

typedef struct pl_block_q4_0 {
    uint16_t d;
    uint8_t qs[PL_QK / 2];
} pl_block_q4_0;

typedef struct pl_block_q4_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[PL_QK_K / 2];
} pl_block_q4_k;

typedef struct pl_block_q5_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[PL_QK_K / 8];
    uint8_t qs[PL_QK_K / 2];
} pl_block_q5_k;

typedef struct pl_block_q6_k {
    uint8_t ql[PL_QK_K / 2];
    uint8_t qh[PL_QK_K / 4];
    int8_t scales[PL_QK_K / 16];
    uint16_t d;
} pl_block_q6_k;

#ifdef __cplusplus
#define PL_Q_STATIC_ASSERT static_assert
#else
#define PL_Q_STATIC_ASSERT _Static_assert
#endif
PL_Q_STATIC_ASSERT(sizeof(pl_block_q8_0) == 34, "Q8_0 block is 34 bytes");
PL_Q_STATIC_ASSERT(sizeof(pl_block_q4_0) == 18, "Q4_0 block is 18 bytes");
PL_Q_STATIC_ASSERT(sizeof(pl_block_q4_k) == 144, "Q4_K block is 144 bytes");
PL_Q_STATIC_ASSERT(sizeof(pl_block_q5_k) == 176, "Q5_K block is 176 bytes");
PL_Q_STATIC_ASSERT(sizeof(pl_block_q6_k) == 210, "Q6_K block is 210 bytes");

/* The f16 at p (2 bytes, little-endian, any alignment), as its bits. */
static inline uint16_t pl_q_f16_bits(const void *p) {
    const uint8_t *b = (const uint8_t *)p;
    return (uint16_t)(b[0] | b[1] << 8);
}

/* Sub-block j's (< 8) 6-bit scale and min from a Q4_K/Q5_K scales[12]: bytes 0-3 hold the
 * scales of sub-blocks 0-3 in their low 6 bits, bytes 4-7 their mins; bytes 8-11 hold the low
 * 4 bits of sub-block 4-7's scale (low nibble) and min (high nibble), whose top 2 bits sit in
 * the top 2 bits of bytes 0-3 (scales) and 4-7 (mins). */
static inline void pl_q_scale_min_k4(const uint8_t *scales, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = scales[j] & 63;
        *m = scales[j + 4] & 63;
    } else {
        *sc = (scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4);
        *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
    }
}

/* The inverse: packs eight 6-bit scales and mins (each in [0, 63]) into scales[12]. */
void pl_q_pack_scale_min_k4(uint8_t *scales, const uint8_t sc[8], const uint8_t m[8]);

/* Reference dequantisers: out (n) f32 from src (n / block elements blocks, any alignment);
 * n a multiple of the block. */
void pl_q8_0_to_f32(const void *src, float *out, size_t n);
void pl_q4_0_to_f32(const void *src, float *out, size_t n);
void pl_q4_k_to_f32(const void *src, float *out, size_t n);
void pl_q5_k_to_f32(const void *src, float *out, size_t n);
void pl_q6_k_to_f32(const void *src, float *out, size_t n);

/* Quantisers: out (n / block elements blocks) from src (n) f32; n a multiple of the block. */
void pl_q8_0_from_f32(const float *src, void *out, size_t n);
void pl_q4_0_from_f32(const float *src, void *out, size_t n);
void pl_q4_k_from_f32(const float *src, void *out, size_t n);
void pl_q5_k_from_f32(const float *src, void *out, size_t n);
void pl_q6_k_from_f32(const float *src, void *out, size_t n);

#ifdef __cplusplus
}
#endif
#endif
