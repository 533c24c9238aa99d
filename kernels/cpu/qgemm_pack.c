/*
 * kernels/cpu/qgemm_pack.c - the int8 GEMM's weight panels (layout: qgemm.h): nr weight rows
 * of a quantised type unpacked to int8 levels, transposed so that each 4-byte group of k of
 * a column sits beside the other columns' at the same k, plus the blocks' f32 scales and
 * mins.
 *
 * Portable C reads each 32-element piece with pl_qpiece_read and stores it byte by byte;
 * with AVX2 the pieces of 8 rows are decoded as 32-byte vectors (qblocks.h) and transposed 8 x
 * 8 in 32-bit words, one store per k step. Both write the same bytes and the same scales (the
 * reference's single rounding of d * scale).
 */
#include <string.h>

#include "kernels/cpu/qblocks.h"
#include "kernels/cpu/qgemm.h"

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t pl_qg_panel_bytes(int nr, int K) {
    return align64((size_t)nr * K) + align64((size_t)K / 16 * nr * 4) +
           align64((size_t)K / 32 * nr * 4);
}

/* The level offset a type's unsigned panel keeps (the kernels remove it from the sums). */
static int unsigned_offset(pl_wtype t) {
    return t == PL_WTYPE_Q8_0 ? 128 : t == PL_WTYPE_Q4_0 ? 8 : t == PL_WTYPE_Q6_K ? 32 : 0;
}

static int log2_of(int v) {
    int s = 0;
    while (v > 1) v >>= 1, s++;
    return s;
}

static void layout(pl_wtype t, int n_valid, int nr, int K, bool is_signed, void *buf,
                   pl_qg_panel *P) {
    uint8_t *b = buf;
    int off = is_signed ? 0 : unsigned_offset(t);
    *P = (pl_qg_panel){
        .nr = nr, .n_valid = n_valid, .K = K, .kb = t == PL_WTYPE_Q6_K ? 16 : 32,
        .shift = off ? log2_of(off) : 0,
        .has_mn = t == PL_WTYPE_Q4_K || t == PL_WTYPE_Q5_K, .is_signed = is_signed,
        .lev = b,
        .sc = (float *)(b + align64((size_t)nr * K)),
        .mn = (float *)(b + align64((size_t)nr * K) + align64((size_t)K / 16 * nr * 4)),
    };
}

/* Columns n_valid .. nr-1: zero levels, scales and mins. */
static void zero_columns(pl_qg_panel *P) {
    const int nr = P->nr, n0 = P->n_valid;
    if (n0 >= nr) return;
    for (int s = 0; s < P->K / 4; s++) memset(P->lev + ((size_t)s * nr + n0) * 4, 0, (size_t)(nr - n0) * 4);
    for (int b = 0; b < P->K / P->kb; b++) memset(P->sc + (size_t)b * nr + n0, 0, (size_t)(nr - n0) * 4);
    if (P->has_mn)
        for (int b = 0; b < P->K / 32; b++)
            memset(P->mn + (size_t)b * nr + n0, 0, (size_t)(nr - n0) * 4);
}

static void pack_portable(const uint8_t *w, size_t row_bytes, pl_wtype t, pl_qg_panel *P) {
    const int nr = P->nr, off = P->is_signed ? 0 : unsigned_offset(t);
    for (int n = 0; n < P->n_valid; n++) {
        const uint8_t *row = w + (size_t)n * row_bytes;
        for (int p = 0; p < P->K / 32; p++) {
            pl_qpiece pc;
            pl_qpiece_read(row, t, (size_t)p, &pc);
            for (int i = 0; i < 32; i++) {
                int k = 32 * p + i;
                P->lev[((size_t)(k / 4) * nr + n) * 4 + k % 4] = (uint8_t)(pc.L[i] + off);
            }
            if (P->kb == 16) {
                P->sc[(size_t)(2 * p) * nr + n] = pc.sc[0];
                P->sc[(size_t)(2 * p + 1) * nr + n] = pc.sc[1];
            } else {
                P->sc[(size_t)p * nr + n] = pc.sc[0];
            }
            if (P->has_mn) P->mn[(size_t)p * nr + n] = pc.mn;
        }
    }
}

#ifdef PL_CPU_X86
/* Piece p of a row as 32 panel bytes. */
PL_INLINE PL_TARGET_AVX2 __m256i piece_levels(const uint8_t *row, pl_wtype t, int p,
                                              bool is_signed) {
    switch (t) {
    case PL_WTYPE_Q8_0: {
        __m256i v = pl_avx2_lev_q8_0(row + (size_t)p * sizeof(pl_block_q8_0));
        return is_signed ? v : _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80));
    }
    case PL_WTYPE_Q4_0: {
        __m256i v = pl_avx2_lev_q4_0(row + (size_t)p * sizeof(pl_block_q4_0));
        return is_signed ? _mm256_sub_epi8(v, _mm256_set1_epi8(8)) : v;
    }
    case PL_WTYPE_Q4_K:
        return pl_avx2_lev_k4(row + (size_t)(p / 8) * sizeof(pl_block_q4_k), p % 8, false);
    case PL_WTYPE_Q5_K:
        return pl_avx2_lev_k4(row + (size_t)(p / 8) * sizeof(pl_block_q5_k), p % 8, true);
    default: {
        __m256i v = pl_avx2_lev_q6_k(row + (size_t)(p / 8) * sizeof(pl_block_q6_k), p % 8);
        return is_signed ? _mm256_sub_epi8(v, _mm256_set1_epi8(32)) : v;
    }
    }
}

/* r[j] (row j's 8 words) -> r[i] = word i of every row. */
PL_INLINE PL_TARGET_AVX2 void transpose8(__m256i *r) {
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int h = 0; h < 8; h += 4) {
        u[h] = _mm256_unpacklo_epi64(t[h], t[h + 2]);
        u[h + 1] = _mm256_unpackhi_epi64(t[h], t[h + 2]);
        u[h + 2] = _mm256_unpacklo_epi64(t[h + 1], t[h + 3]);
        u[h + 3] = _mm256_unpackhi_epi64(t[h + 1], t[h + 3]);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
    }
}

/* Pieces p0 .. K/32 - 1 of the panel's rows, 8 rows at a time. */
PL_INLINE PL_TARGET_AVX2 void pack_levels_t(const uint8_t *w, size_t row_bytes, pl_qg_panel *P,
                                            const pl_wtype t, int p0) {
    const int nr = P->nr;
    for (int g = 0; g < nr; g += 8) {
        if (g >= P->n_valid) break; /* zero_columns clears the rest */
        const uint8_t *rows[8];
        for (int j = 0; j < 8; j++) rows[j] = w + (size_t)(g + j) * row_bytes;
        for (int p = p0; p < P->K / 32; p++) {
            __m256i r[8];
            for (int j = 0; j < 8; j++)
                r[j] = g + j < P->n_valid ? piece_levels(rows[j], t, p, P->is_signed)
                                          : _mm256_setzero_si256();
            transpose8(r);
            for (int j = 0; j < 8; j++)
                _mm256_storeu_si256((__m256i *)(P->lev + ((size_t)(8 * p + j) * nr + g) * 4),
                                    r[j]);
        }
    }
}

/* r[j] (row j's 16 words) -> r[i] = word i of every row: 16 x 16, in four rounds of
 * shuffles (32-bit, 64-bit, then 128-bit lanes twice). */
PL_INLINE PL_TARGET_AVX512 void transpose16(__m512i *r) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* r[4q + c] now holds, in 128-bit lane l, words c of rows 4l'.. of group q: lanes are
     * rows 4q .. 4q+3 of 128-bit lane l = column block l */
    for (int i = 0; i < 8; i++) {
        int a = i < 4 ? i : i + 4, b = a + 4;
        t[i] = _mm512_shuffle_i32x4(r[a], r[b], 0x88);
        t[i + 8] = _mm512_shuffle_i32x4(r[a], r[b], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 4], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 4], 0xdd);
        r[i + 4] = _mm512_shuffle_i32x4(t[i + 8], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_i32x4(t[i + 8], t[i + 12], 0xdd);
    }
}

/* Levels of 16 rows, two pieces (64 k) at a time; an odd last piece by the 8-row code. */
PL_INLINE PL_TARGET_AVX512 void pack_levels16_t(const uint8_t *w, size_t row_bytes,
                                                pl_qg_panel *P, const pl_wtype t) {
    const int nr = P->nr, n_pieces = P->K / 32;
    for (int g = 0; g < nr && g < P->n_valid; g += 16) {
        const uint8_t *rows[16];
        for (int j = 0; j < 16; j++) rows[j] = w + (size_t)(g + j) * row_bytes;
        for (int p = 0; p + 1 < n_pieces; p += 2) {
            __m512i r[16];
            for (int j = 0; j < 16; j++)
                r[j] = g + j < P->n_valid
                           ? _mm512_inserti64x4(
                                 _mm512_castsi256_si512(piece_levels(rows[j], t, p, P->is_signed)),
                                 piece_levels(rows[j], t, p + 1, P->is_signed), 1)
                           : _mm512_setzero_si512();
            transpose16(r);
            for (int j = 0; j < 16; j++)
                _mm512_storeu_si512(P->lev + ((size_t)(8 * p + j) * nr + g) * 4, r[j]);
        }
    }
}

static PL_TARGET_AVX512 void pack_levels_avx512(const uint8_t *w, size_t row_bytes,
                                                pl_wtype t, pl_qg_panel *P) {
    switch (t) {
    case PL_WTYPE_Q8_0: pack_levels16_t(w, row_bytes, P, PL_WTYPE_Q8_0); break;
    case PL_WTYPE_Q4_0: pack_levels16_t(w, row_bytes, P, PL_WTYPE_Q4_0); break;
    case PL_WTYPE_Q4_K: pack_levels16_t(w, row_bytes, P, PL_WTYPE_Q4_K); break;
    case PL_WTYPE_Q5_K: pack_levels16_t(w, row_bytes, P, PL_WTYPE_Q5_K); break;
    default: pack_levels16_t(w, row_bytes, P, PL_WTYPE_Q6_K); break;
    }
}

static PL_TARGET_AVX2 void pack_avx2(pl_cpu_isa isa, const uint8_t *w, size_t row_bytes,
                                     pl_wtype t, pl_qg_panel *P) {
    if (isa == PL_CPU_ISA_AVX512 && P->nr % 16 == 0) {
        pack_levels_avx512(w, row_bytes, t, P);
    }
    switch (isa == PL_CPU_ISA_AVX512 && P->nr % 16 == 0 ? PL_WTYPE_COUNT : t) {
    case PL_WTYPE_Q8_0: pack_levels_t(w, row_bytes, P, PL_WTYPE_Q8_0, 0); break;
    case PL_WTYPE_Q4_0: pack_levels_t(w, row_bytes, P, PL_WTYPE_Q4_0, 0); break;
    case PL_WTYPE_Q4_K: pack_levels_t(w, row_bytes, P, PL_WTYPE_Q4_K, 0); break;
    case PL_WTYPE_Q5_K: pack_levels_t(w, row_bytes, P, PL_WTYPE_Q5_K, 0); break;
    case PL_WTYPE_Q6_K: pack_levels_t(w, row_bytes, P, PL_WTYPE_Q6_K, 0); break;
    default: /* AVX-512 did all but an odd last piece */
        if (P->K / 32 % 2) {
            switch (t) {
            case PL_WTYPE_Q8_0: pack_levels_t(w, row_bytes, P, PL_WTYPE_Q8_0, P->K / 32 - 1); break;
            case PL_WTYPE_Q4_0: pack_levels_t(w, row_bytes, P, PL_WTYPE_Q4_0, P->K / 32 - 1); break;
            default: break; /* K-quant rows are whole 256s: an even number of pieces */
            }
        }
        break;
    }
    const int nr = P->nr;
    if (t == PL_WTYPE_Q8_0 || t == PL_WTYPE_Q4_0) {
        /* 8 blocks' f16 scales of 8 rows: widened and transposed, one store per block */
        size_t bb = pl_q_block_bytes(t);
        int n_blocks = P->K / 32, p = 0;
        for (; p + 8 <= n_blocks; p += 8)
            for (int g = 0; g < P->n_valid; g += 8) {
                __m256i a[8];
                for (int j = 0; j < 8; j++) {
                    uint16_t h[8] = {0};
                    if (g + j < P->n_valid)
                        for (int i = 0; i < 8; i++)
                            h[i] = pl_q_f16_bits(w + (size_t)(g + j) * row_bytes +
                                                 (size_t)(p + i) * bb);
                    a[j] = _mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)));
                }
                transpose8(a);
                for (int i = 0; i < 8; i++)
                    _mm256_storeu_si256((__m256i *)(P->sc + (size_t)(p + i) * nr + g), a[i]);
            }
        for (int n = 0; n < P->n_valid; n++) /* the last blocks */
            for (int q = p; q < n_blocks; q++)
                P->sc[(size_t)q * nr + n] = pl_avx2_f16(w + (size_t)n * row_bytes + (size_t)q * bb);
        return;
    }
    /* K-quants: a super-block's 8 (16) scales of 8 rows at once, transposed like the levels
     * into one 8-column store per block */
    size_t bb = pl_q_block_bytes(t);
    for (int g = 0; g < P->n_valid; g += 8)
        for (int u = 0; u < P->K / 256; u++) {
            __m256i a[8], b[8];
            for (int j = 0; j < 8; j++) {
                __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
                if (g + j < P->n_valid) {
                    const uint8_t *sb = w + (size_t)(g + j) * row_bytes + (size_t)u * bb;
                    if (t == PL_WTYPE_Q6_K)
                        pl_avx2_q6_scales(sb, &lo, &hi);
                    else
                        pl_avx2_k4_scales(sb, &lo, &hi);
                }
                a[j] = _mm256_castps_si256(lo);
                b[j] = _mm256_castps_si256(hi);
            }
            transpose8(a);
            transpose8(b);
            for (int j = 0; j < 8; j++) {
                if (t == PL_WTYPE_Q6_K) { /* 16 groups of 16: blocks 16u + j and 16u + 8 + j */
                    _mm256_storeu_si256((__m256i *)(P->sc + (size_t)(16 * u + j) * nr + g), a[j]);
                    _mm256_storeu_si256((__m256i *)(P->sc + (size_t)(16 * u + 8 + j) * nr + g),
                                        b[j]);
                } else {
                    _mm256_storeu_si256((__m256i *)(P->sc + (size_t)(8 * u + j) * nr + g), a[j]);
                    _mm256_storeu_si256((__m256i *)(P->mn + (size_t)(8 * u + j) * nr + g), b[j]);
                }
            }
        }
}
#endif

void pl_qg_pack(pl_cpu_isa isa, const uint8_t *w, size_t row_bytes, pl_wtype t, int n_valid,
                int nr, int K, bool is_signed, void *buf, pl_qg_panel *P) {
    layout(t, n_valid, nr, K, is_signed, buf, P);
#ifdef PL_CPU_X86
    if (isa >= PL_CPU_ISA_AVX2)
        pack_avx2(isa, w, row_bytes, t, P);
    else
#endif
        pack_portable(w, row_bytes, t, P);
    (void)isa;
    zero_columns(P);
}
