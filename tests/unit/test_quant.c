/*
 * tests/unit/test_quant.c - the block-quantised weight types (util/quant.h): the reference
 * dequantisers against values computed by hand and against blocks this test packs itself
 * from the format's description (every level, every 6-bit scale and min in every sub-block
 * position, negative and extreme scales), and the quantisers: valid blocks, bounded error,
 * the GGUF reference encoding of Q8_0/Q4_0, and hostile inputs.
 *
 * The expected values are computed in double from the integers a block holds: every product
 * of the formulas is exact there, and the scales are chosen so the Q4_K/Q5_K subtraction is
 * exact too, so one rounding to float gives the bits the format defines.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"
#include "util/dtype.h"
#include "util/quant.h"
#include "util/wtype.h"

static const pl_wtype QTYPES[] = {PL_WTYPE_Q8_0, PL_WTYPE_Q4_0, PL_WTYPE_Q4_K, PL_WTYPE_Q5_K,
                                  PL_WTYPE_Q6_K};
enum { N_QTYPES = sizeof QTYPES / sizeof QTYPES[0] };

static void set_f16(uint8_t *p, uint16_t h) {
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static void expect_bits(const float *got, const float *want, int n, const char *what) {
    for (int i = 0; i < n; i++)
        cr_assert(memcmp(&got[i], &want[i], 4) == 0, "%s: element %d is %.9g, want %.9g", what, i,
                  (double)got[i], (double)want[i]);
}

// ----------------------------------------------------------------------------
// the table

Test(quant, table_rows) {
    static const struct {
        pl_wtype t;
        const char *name;
        int elems, bytes;
    } rows[] = {{PL_WTYPE_Q8_0, "q8_0", 32, 34},   {PL_WTYPE_Q4_0, "q4_0", 32, 18},
                {PL_WTYPE_Q4_K, "q4_k", 256, 144}, {PL_WTYPE_Q5_K, "q5_k", 256, 176},
                {PL_WTYPE_Q6_K, "q6_k", 256, 210}};
    for (int i = 0; i < 5; i++) {
        const pl_wtype_traits *tr = pl_wtype_traits_of(rows[i].t);
        cr_assert_not_null(tr);
        cr_assert_str_eq(tr->name, rows[i].name);
        cr_assert_eq(tr->block_elems, rows[i].elems);
        cr_assert_eq(tr->block_bytes, rows[i].bytes);
        cr_assert(tr->to_f32 && tr->from_f32);
        cr_assert(pl_wtype_is_quant(rows[i].t));
        cr_assert_eq(pl_wtype_dtype(rows[i].t), PL_DTYPE_AUTO, "no public pl_dtype");
        uint64_t b;
        cr_assert(pl_wtype_bytes(rows[i].t, 2048, &b));
        cr_assert_eq(b, 2048u / (unsigned)rows[i].elems * (unsigned)rows[i].bytes);
        cr_assert(!pl_wtype_bytes(rows[i].t, (uint64_t)rows[i].elems + 1, &b), "partial block");
    }
    cr_assert(!pl_wtype_is_quant(PL_WTYPE_BF16));
    cr_assert(!pl_wtype_is_quant(PL_WTYPE_COUNT));
    cr_assert_null(pl_wtype_traits_of(PL_WTYPE_COUNT));
}

// ----------------------------------------------------------------------------
// dequantisers: values computed by hand

Test(quant, q8_0_by_hand) {
    uint8_t b[2 * 34] = {0};
    set_f16(b, 0x3800); /* 0.5 */
    for (int i = 0; i < 32; i++) b[2 + i] = (uint8_t)(int8_t)(i - 16);
    b[2 + 0] = 0x80;    /* -128 */
    b[2 + 31] = 0x7f;   /* 127 */
    set_f16(b + 34, 0xC400); /* -4 */
    b[36 + 3] = 5;
    b[36 + 4] = 0xfb; /* -5 */
    float y[64];
    pl_q8_0_to_f32(b, y, 64);
    cr_assert_eq(y[0], -64.0f);
    cr_assert_eq(y[1], -7.5f);
    cr_assert_eq(y[17], 0.5f);
    cr_assert_eq(y[31], 63.5f);
    cr_assert_eq(y[32 + 3], -20.0f);
    cr_assert_eq(y[32 + 4], 20.0f);
    cr_assert_eq(y[32 + 0], 0.0f);
    cr_assert(signbit(y[32 + 0]), "-4 * 0 is -0");
}

Test(quant, q4_0_by_hand) {
    uint8_t b[18];
    set_f16(b, 0x4000); /* 2 */
    for (int i = 0; i < 16; i++) b[2 + i] = (uint8_t)(i | (15 - i) << 4);
    float y[32];
    pl_q4_0_to_f32(b, y, 32);
    for (int i = 0; i < 16; i++) {
        cr_assert_eq(y[i], 2.0f * (float)(i - 8), "low nibble %d", i);
        cr_assert_eq(y[i + 16], 2.0f * (float)(7 - i), "high nibble %d", i);
    }
    cr_assert_eq(y[0], -16.0f);
    cr_assert_eq(y[16], 14.0f);
}

Test(quant, q4_k_by_hand) {
    uint8_t b[144] = {0};
    set_f16(b, 0x3C00);     /* d 1 */
    set_f16(b + 2, 0x3800); /* dmin 0.5 */
    uint8_t *sc = b + 4, *qs = b + 16;
    /* sub-block 0: scale 1, min 2; sub-block 5: scale 33 = 0b10'0001, min 50 = 0b11'0010 */
    sc[0] = 1;
    sc[4] = 2;
    sc[1] = 2 << 6;  /* top bits of sub-block 5's scale */
    sc[5] = 3 << 6;  /* top bits of sub-block 5's min */
    sc[9] = 0x21;    /* low bits: scale 1, min 2 */
    qs[0] = 0x07;    /* element 0: sub-block 0, level 7 */
    qs[64 + 3] = 0xA0; /* element 2 * 64 + 32 + 3 = 163: sub-block 5, level 10 */
    float y[256];
    pl_q4_k_to_f32(b, y, 256);
    cr_assert_eq(y[0], 6.0f);      /* 1 * 1 * 7 - 0.5 * 2 */
    cr_assert_eq(y[1], -1.0f);     /* level 0 */
    cr_assert_eq(y[163], 305.0f);  /* 1 * 33 * 10 - 0.5 * 50 */
    cr_assert_eq(y[160], -25.0f);
    cr_assert_eq(y[35], 0.0f);     /* sub-block 1: scale and min 0 */
}

Test(quant, q5_k_by_hand) {
    uint8_t b[176] = {0};
    set_f16(b, 0x4000);     /* d 2 */
    set_f16(b + 2, 0x3C00); /* dmin 1 */
    uint8_t *sc = b + 4, *qh = b + 16, *qs = b + 48;
    sc[3] = 5;          /* sub-block 3: scale 5, min 7 */
    sc[7] = 7;
    qs[32 + 9] = 0xE0;  /* element 64 + 32 + 9 = 105 (sub-block 3): low 4 bits 14 */
    qh[9] = 1 << 3;     /* its fifth bit (bit 2c + 1 = 3) */
    float y[256];
    pl_q5_k_to_f32(b, y, 256);
    cr_assert_eq(y[105], 2.0f * 5 * 30 - 7.0f);
    cr_assert_eq(y[64 + 9], 0.0f, "sub-block 2 untouched by bit 3");
    cr_assert_eq(y[106], -7.0f);
}

Test(quant, q6_k_by_hand) {
    uint8_t b[210] = {0};
    uint8_t *ql = b, *qh = b + 128;
    int8_t *scales = (int8_t *)(b + 192);
    set_f16(b + 208, 0xB400); /* d -0.25 */
    for (int g = 0; g < 16; g++) scales[g] = (int8_t)(g - 8);
    /* element 128 + 64 + 5 = 197 (half 1, k 2: high nibble of ql[64 + 5], qh bits 4-5),
     * level 0b10'1101 = 45, q = 13, group 12 (scale 4) */
    ql[64 + 5] = 0xD0;
    qh[32 + 5] = 2 << 4;
    /* element 40 (half 0, k 1: low nibble of ql[32 + 8], qh[8] bits 2-3): level 0 -> q -32,
     * group 2 (scale -6) */
    float y[256];
    pl_q6_k_to_f32(b, y, 256);
    cr_assert_eq(y[197], -0.25f * 4 * 13);
    cr_assert_eq(y[40], -0.25f * -6 * -32);
    cr_assert_eq(y[200], -0.25f * 4 * -32);
}

// ----------------------------------------------------------------------------
// dequantisers: blocks packed here from the description, every level and scale

/* f16 scales with exponents close together (so d * sc * q - dmin * m is exact in double),
 * both signs, and the extremes: 65504 and the smallest subnormal. */
static const uint16_t SCALES[] = {0x3C00, 0x2E66, 0xB4CD, 0x0400, 0x1234, 0x9234, 0x7BFF, 0x0001};
enum { N_SCALES = sizeof SCALES / sizeof SCALES[0] };

/* The Q4_K/Q5_K scales[12] of this test: six-bit scale s[j] and min m[j] of sub-block j. */
static void pack_k4_scales(uint8_t *out, const int *s, const int *m) {
    memset(out, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            out[j] |= (uint8_t)s[j];
            out[j + 4] |= (uint8_t)m[j];
        } else {
            out[j + 4] |= (uint8_t)((s[j] & 15) | (m[j] & 15) << 4);
            out[j - 4] |= (uint8_t)((s[j] >> 4) << 6);
            out[j] |= (uint8_t)((m[j] >> 4) << 6);
        }
    }
}

/* Q4_K (bits 4) or Q5_K (bits 5): for each v < 64, a super-block whose sub-block j has scale
 * (v + 7 j) % 64 and min (5 v + 3 j) % 64 (so every sub-block position sees all 64 values of
 * each) and levels running through all 16 (32). */
static void check_k4_all(int bits) {
    const int nmax = (1 << bits) - 1;
    const size_t bb = bits == 4 ? 144 : 176;
    uint8_t *blk = calloc(bb, 1);
    float got[256], want[256];
    for (int v = 0; v < 64; v++) {
        int s[8], m[8], L[256];
        for (int j = 0; j < 8; j++) {
            s[j] = (v + 7 * j) % 64;
            m[j] = (5 * v + 3 * j) % 64;
        }
        for (int e = 0; e < 256; e++) L[e] = (e * 7 + v) & nmax;
        uint16_t hd = SCALES[v % N_SCALES], hm = SCALES[(v / N_SCALES + 3) % N_SCALES];
        if (hd == 0x7BFF || hd == 0x0001 || hm == 0x7BFF || hm == 0x0001) hm = hd; /* exact */
        memset(blk, 0, bb);
        set_f16(blk, hd);
        set_f16(blk + 2, hm);
        pack_k4_scales(blk + 4, s, m);
        uint8_t *qh = blk + 16, *qs = blk + (bits == 4 ? 16 : 48);
        for (int e = 0; e < 256; e++) {
            int c = e / 64, hi = (e % 64) >= 32, l = e % 32;
            qs[32 * c + l] |= (uint8_t)((L[e] & 15) << (4 * hi));
            if (bits == 5) qh[l] |= (uint8_t)((L[e] >> 4) << (2 * c + hi));
        }
        double d = pl_f16_to_f32(hd), dmin = pl_f16_to_f32(hm);
        for (int e = 0; e < 256; e++) {
            int j = e / 32; /* sub-block: 64c + 32 hi + l -> 2c + hi */
            want[e] = (float)(d * s[j] * L[e] - dmin * m[j]);
        }
        (bits == 4 ? pl_q4_k_to_f32 : pl_q5_k_to_f32)(blk, got, 256);
        expect_bits(got, want, 256, bits == 4 ? "q4_k" : "q5_k");
    }
    free(blk);
}

Test(quant, q4_k_every_scale_min_and_level) { check_k4_all(4); }
Test(quant, q5_k_every_scale_min_and_level) { check_k4_all(5); }

/* The packer the quantisers use inverts pl_q_scale_min_k4 for every value in every position. */
Test(quant, k4_scale_packing_round_trip) {
    for (int v = 0; v < 64; v++) {
        uint8_t sc[8], mn[8], packed[12], mine[12];
        int s[8], m[8];
        for (int j = 0; j < 8; j++) {
            s[j] = sc[j] = (uint8_t)((v + 11 * j) % 64);
            m[j] = mn[j] = (uint8_t)((63 - v + 5 * j) % 64);
        }
        pl_q_pack_scale_min_k4(packed, sc, mn);
        pack_k4_scales(mine, s, m);
        cr_assert(memcmp(packed, mine, 12) == 0, "v %d", v);
        for (int j = 0; j < 8; j++) {
            int a, b;
            pl_q_scale_min_k4(packed, j, &a, &b);
            cr_assert(a == s[j] && b == m[j], "v %d sub-block %d: %d %d", v, j, a, b);
        }
    }
}

/* Q6_K: every level in every position of the bit layout, every int8 group scale (-128 ..
 * 127), negative and extreme d. */
Test(quant, q6_k_every_level_and_scale) {
    uint8_t blk[210];
    float got[256], want[256];
    for (int v = 0; v < 64; v++) {
        int L[256], sc[16];
        for (int e = 0; e < 256; e++) L[e] = (e * 11 + v) % 64;
        for (int g = 0; g < 16; g++) sc[g] = (int8_t)(uint8_t)(16 * v + g);
        memset(blk, 0, sizeof blk);
        for (int e = 0; e < 256; e++) {
            int half = e / 128, k = (e % 128) / 32, l = e % 32;
            blk[64 * half + 32 * (k % 2) + l] |= (uint8_t)((L[e] & 15) << (4 * (k / 2)));
            blk[128 + 32 * half + l] |= (uint8_t)((L[e] >> 4) << (2 * k));
        }
        for (int g = 0; g < 16; g++) blk[192 + g] = (uint8_t)(int8_t)sc[g];
        uint16_t hd = SCALES[v % N_SCALES];
        set_f16(blk + 208, hd);
        double d = pl_f16_to_f32(hd);
        for (int e = 0; e < 256; e++) want[e] = (float)(d * sc[e / 16] * (L[e] - 32));
        pl_q6_k_to_f32(blk, got, 256);
        expect_bits(got, want, 256, "q6_k");
    }
}

/* Q8_0 and Q4_0: every level with every scale, over consecutive blocks (the reader walks
 * block by block) at an odd address. */
Test(quant, q8_0_q4_0_every_level) {
    enum { NB = N_SCALES * 8 };
    uint8_t *raw8 = malloc(NB * 34 + 1), *raw4 = malloc(NB * 18 + 1);
    uint8_t *b8 = raw8 + 1, *b4 = raw4 + 1;
    float *got = malloc(NB * 32 * 4), *want = malloc(NB * 32 * 4);
    for (int bi = 0; bi < NB; bi++) {
        uint16_t hd = SCALES[bi % N_SCALES];
        set_f16(b8 + 34 * bi, hd);
        set_f16(b4 + 18 * bi, hd);
        for (int i = 0; i < 32; i++) b8[34 * bi + 2 + i] = (uint8_t)(32 * (bi / N_SCALES) + i);
        for (int i = 0; i < 16; i++)
            b4[18 * bi + 2 + i] = (uint8_t)(((i + bi) & 15) | ((15 - i + bi) & 15) << 4);
    }
    pl_q8_0_to_f32(b8, got, NB * 32);
    for (int bi = 0; bi < NB; bi++)
        for (int i = 0; i < 32; i++)
            want[32 * bi + i] = (float)((double)pl_f16_to_f32(SCALES[bi % N_SCALES]) *
                                        (int8_t)(uint8_t)(32 * (bi / N_SCALES) + i));
    expect_bits(got, want, NB * 32, "q8_0");
    pl_q4_0_to_f32(b4, got, NB * 32);
    for (int bi = 0; bi < NB; bi++) {
        double d = pl_f16_to_f32(SCALES[bi % N_SCALES]);
        for (int i = 0; i < 16; i++) {
            want[32 * bi + i] = (float)(d * (((i + bi) & 15) - 8));
            want[32 * bi + 16 + i] = (float)(d * (((15 - i + bi) & 15) - 8));
        }
    }
    expect_bits(got, want, NB * 32, "q4_0");
    free(raw8), free(raw4), free(got), free(want);
}

// ----------------------------------------------------------------------------
// quantisers

/* Gaussian-ish weights (sum of 4 uniforms) of scale 0.02 with a few outliers x8. */
static void weights_like(pl_test_rng *r, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float s = 0;
        for (int k = 0; k < 4; k++) s += pl_test_rng_float(r);
        x[i] = 0.02f * s * 0.866f;
        if (pl_test_rng_below(r, 500) == 0) x[i] *= 8.0f;
    }
}

static double rms(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s / (double)n);
}

static double rmse(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s / (double)n);
}

/* Relative RMSE bounds on weights_like data. Measured (2^20 values): q8_0 0.0060, q4_0 0.097,
 * q4_k 0.074, q5_k 0.037, q6_k 0.019; llama.cpp's reference quantisers on the same data
 * (a harness linked with its libggml-base, outside this repository): the same bytes for
 * q8_0 and q4_0, 0.3% / 1% / 2.4% more error for q4_k / q5_k / q6_k. */
static double rel_rmse_bound(pl_wtype t) {
    switch (t) {
    case PL_WTYPE_Q8_0: return 0.008;
    case PL_WTYPE_Q4_0: return 0.11;
    case PL_WTYPE_Q4_K: return 0.085;
    case PL_WTYPE_Q5_K: return 0.045;
    default: return 0.024;
    }
}

Test(quant, round_trip_error) {
    pl_test_rng r;
    pl_test_rng_seed(&r, 7);
    const size_t n = 256 * 512;
    float *x = malloc(n * 4), *y = malloc(n * 4), *z = malloc(n * 4);
    uint8_t *q = malloc(2 * n), *q2 = malloc(2 * n);
    weights_like(&r, x, n);
    double xr = rms(x, n);
    for (int ti = 0; ti < N_QTYPES; ti++) {
        const pl_wtype_traits *tr = pl_wtype_traits_of(QTYPES[ti]);
        tr->from_f32(x, q, n);
        tr->to_f32(q, y, n);
        double e = rmse(x, y, n) / xr;
        cr_assert(e <= rel_rmse_bound(QTYPES[ti]), "%s: relative rmse %.4f > %.4f", tr->name, e,
                  rel_rmse_bound(QTYPES[ti]));
        /* quantising what a block reads back as loses (almost) nothing more */
        tr->from_f32(y, q2, n);
        tr->to_f32(q2, z, n);
        double e2 = rmse(y, z, n) / xr;
        cr_assert(e2 <= 0.25 * e, "%s: requantised error %.4f of the first %.4f", tr->name, e2,
                  e);
    }
    free(x), free(y), free(z), free(q), free(q2);
}

/* Q8_0: scale = max |x| / 127 in f16, every value within half a step (plus the step's f16
 * rounding); levels of a dequantised block come back unchanged. Q4_0: the largest magnitude
 * lands on level -8, every value within one step. */
Test(quant, q8_0_q4_0_encoding) {
    pl_test_rng r;
    pl_test_rng_seed(&r, 8);
    enum { N = 32 * 64 };
    float x[N], y[N];
    uint8_t q8[N / 32 * 34], q4[N / 32 * 18], q8b[N / 32 * 34];
    weights_like(&r, x, N);
    pl_q8_0_from_f32(x, q8, N);
    pl_q8_0_to_f32(q8, y, N);
    for (int bi = 0; bi < N / 32; bi++) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * bi + i]));
        cr_assert_eq(pl_q_f16_bits(q8 + 34 * bi), pl_f32_to_f16(amax / 127.0f));
        float d = pl_f16_to_f32(pl_q_f16_bits(q8 + 34 * bi));
        for (int i = 0; i < 32; i++)
            cr_assert(fabsf(y[32 * bi + i] - x[32 * bi + i]) <= 0.57f * d, "block %d", bi);
    }
    pl_q8_0_from_f32(y, q8b, N);
    cr_assert(memcmp(q8, q8b, sizeof q8) == 0, "a Q8_0 block's values requantise to itself");

    pl_q4_0_from_f32(x, q4, N);
    pl_q4_0_to_f32(q4, y, N);
    for (int bi = 0; bi < N / 32; bi++) {
        int imax = 0;
        for (int i = 1; i < 32; i++)
            if (fabsf(x[32 * bi + i]) > fabsf(x[32 * bi + imax])) imax = i;
        float d = pl_f16_to_f32(pl_q_f16_bits(q4 + 18 * bi));
        cr_assert_eq(y[32 * bi + imax], -8.0f * d, "block %d: largest on level -8", bi);
        for (int i = 0; i < 32; i++)
            cr_assert(fabsf(y[32 * bi + i] - x[32 * bi + i]) <= 1.01f * fabsf(d), "block %d", bi);
    }
}

/* Blocks made of one value, zeros, all-negative, one spike, huge and tiny magnitudes: the
 * error stays within the type's step, and a block of zeros reads back as zeros. */
Test(quant, special_blocks) {
    enum { N = 256 };
    float x[N], y[N];
    uint8_t q[N * 2];
    for (int ti = 0; ti < N_QTYPES; ti++) {
        const pl_wtype_traits *tr = pl_wtype_traits_of(QTYPES[ti]);
        for (int kind = 0; kind < 7; kind++) {
            for (int i = 0; i < N; i++) {
                switch (kind) {
                case 0: x[i] = 0; break;
                case 1: x[i] = 0.75f; break;
                case 2: x[i] = -0.01f * (float)(i % 17 + 1); break;
                case 3: x[i] = i == 77 ? 5.0f : 0.0f; break;
                case 4: x[i] = 1e4f * (float)((i * 37) % 19 - 9); break;
                case 5: x[i] = 1e-6f * (float)((i * 37) % 19 - 9); break;
                default: x[i] = (float)(i % 32) - 16.0f; break;
                }
            }
            tr->from_f32(x, q, N);
            tr->to_f32(q, y, N);
            float amax = 0;
            for (int i = 0; i < N; i++) amax = fmaxf(amax, fabsf(x[i]));
            /* one step of the coarsest grid (4-bit over [-amax, amax]) plus f16 scale error */
            float bound = kind == 5 ? 2e-7f + amax / 7.0f : amax / 7.0f + 1e-6f;
            for (int i = 0; i < N; i++) {
                cr_assert(isfinite(y[i]), "%s kind %d: element %d not finite", tr->name, kind, i);
                cr_assert(fabsf(y[i] - x[i]) <= bound, "%s kind %d: element %d %g for %g",
                          tr->name, kind, i, (double)y[i], (double)x[i]);
            }
            if (kind == 0)
                for (int i = 0; i < N; i++) cr_assert_eq(y[i], 0.0f);
        }
    }
}

/* NaN and infinities are no undefined behaviour (this suite runs under UBSan in CI): the
 * blocks come out, and the finite blocks around them are untouched. */
Test(quant, non_finite_inputs) {
    enum { N = 512 };
    float x[N], y[N], ok[N];
    uint8_t q[N * 2];
    for (int ti = 0; ti < N_QTYPES; ti++) {
        const pl_wtype_traits *tr = pl_wtype_traits_of(QTYPES[ti]);
        for (int i = 0; i < N; i++) x[i] = 0.01f * (float)(i % 13 - 6);
        tr->from_f32(x, q, N);
        tr->to_f32(q, ok, N);
        x[3] = NAN;
        x[100] = INFINITY;
        x[101] = -INFINITY;
        tr->from_f32(x, q, N);
        tr->to_f32(q, y, N);
        for (int i = 256; i < N; i++)
            cr_assert_eq(y[i], ok[i], "%s: second block changed at %d", tr->name, i);
    }
}
