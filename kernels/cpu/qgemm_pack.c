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

PL_INLINE PL_TARGET_AVX2 void pack_levels_t(const uint8_t *w, size_t row_bytes, pl_qg_panel *P,
                                            const pl_wtype t) {
    const int nr = P->nr;
    for (int g = 0; g < nr; g += 8) {
        if (g >= P->n_valid) break; /* zero_columns clears the rest */
        const uint8_t *rows[8];
        for (int j = 0; j < 8; j++) rows[j] = w + (size_t)(g + j) * row_bytes;
        for (int p = 0; p < P->K / 32; p++) {
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

static PL_TARGET_AVX2 void pack_avx2(const uint8_t *w, size_t row_bytes, pl_wtype t,
                                     pl_qg_panel *P) {
    switch (t) {
    case PL_WTYPE_Q8_0: pack_levels_t(w, row_bytes, P, PL_WTYPE_Q8_0); break;
    case PL_WTYPE_Q4_0: pack_levels_t(w, row_bytes, P, PL_WTYPE_Q4_0); break;
    case PL_WTYPE_Q4_K: pack_levels_t(w, row_bytes, P, PL_WTYPE_Q4_K); break;
    case PL_WTYPE_Q5_K: pack_levels_t(w, row_bytes, P, PL_WTYPE_Q5_K); break;
    default: pack_levels_t(w, row_bytes, P, PL_WTYPE_Q6_K); break;
    }
    const int nr = P->nr;
    for (int n = 0; n < P->n_valid; n++) {
        const uint8_t *row = w + (size_t)n * row_bytes;
        if (t == PL_WTYPE_Q8_0 || t == PL_WTYPE_Q4_0) {
            size_t bb = pl_q_block_bytes(t);
            for (int p = 0; p < P->K / 32; p++)
                P->sc[(size_t)p * nr + n] = pl_avx2_f16(row + (size_t)p * bb);
            continue;
        }
        size_t bb = pl_q_block_bytes(t);
        for (int u = 0; u < P->K / 256; u++) {
            float a[16], m[8];
            __m256 lo, hi;
            if (t == PL_WTYPE_Q6_K) {
                pl_avx2_q6_scales(row + (size_t)u * bb, &lo, &hi);
                _mm256_storeu_ps(a, lo);
                _mm256_storeu_ps(a + 8, hi);
                for (int j = 0; j < 16; j++) P->sc[(size_t)(16 * u + j) * nr + n] = a[j];
            } else {
                pl_avx2_k4_scales(row + (size_t)u * bb, &lo, &hi);
                _mm256_storeu_ps(a, lo);
                _mm256_storeu_ps(m, hi);
                for (int j = 0; j < 8; j++) {
                    P->sc[(size_t)(8 * u + j) * nr + n] = a[j];
                    P->mn[(size_t)(8 * u + j) * nr + n] = m[j];
                }
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
        pack_avx2(w, row_bytes, t, P);
    else
#endif
        pack_portable(w, row_bytes, t, P);
    (void)isa;
    zero_columns(P);
}
