/*
 * util/quant.c - reference dequantisers and quantisers of the GGUF block types (see quant.h
 * for the layouts).
 *
 * The dequantisers are the specification the kernels are checked against: written from the
 * layout, element by element, reading bytes (no struct access), so they work at any
 * alignment. The quantisers favour clarity over speed; they run when a model is converted,
 * never per token.
 */
#include "util/quant.h"

#include <math.h>
#include <string.h>

#include "util/dtype.h"

// ----------------------------------------------------------------------------
// helpers

static float f16_at(const uint8_t *p) { return pl_f16_to_f32(pl_q_f16_bits(p)); }

static void put_f16(uint8_t *p, float v) {
    uint16_t h = pl_f32_to_f16(v);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

/* v rounded half away from zero and clamped to [lo, hi]; NaN gives the level nearest 0. */
static int clamp_round(float v, int lo, int hi) {
    if (v != v) return lo > 0 ? lo : hi < 0 ? hi : 0;
    if (v <= (float)lo) return lo;
    if (v >= (float)hi) return hi;
    return (int)roundf(v);
}

// ----------------------------------------------------------------------------
// dequantisers

void pl_q8_0_to_f32(const void *src, float *out, size_t n) {
    const uint8_t *b = src;
    for (size_t i0 = 0; i0 < n; i0 += PL_QK, b += sizeof(pl_block_q8_0)) {
        float d = f16_at(b);
        for (int i = 0; i < PL_QK; i++) out[i0 + i] = d * (float)(int8_t)b[2 + i];
    }
}

void pl_q4_0_to_f32(const void *src, float *out, size_t n) {
    const uint8_t *b = src;
    for (size_t i0 = 0; i0 < n; i0 += PL_QK, b += sizeof(pl_block_q4_0)) {
        float d = f16_at(b);
        const uint8_t *qs = b + 2;
        for (int i = 0; i < PL_QK / 2; i++) {
            out[i0 + i] = d * (float)((qs[i] & 15) - 8);
            out[i0 + i + 16] = d * (float)((qs[i] >> 4) - 8);
        }
    }
}

/* Q4_K and Q5_K share everything but the fifth bit (qh NULL for Q4_K). */
static void k4_block_to_f32(float d, float dmin, const uint8_t *scales, const uint8_t *qh,
                            const uint8_t *qs, float *out) {
    for (int e = 0; e < PL_QK_K; e++) {
        int c = e / 64, l = e % 32, hi = (e % 64) >= 32, sub = 2 * c + hi;
        int q = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
        if (qh) q += ((qh[l] >> sub) & 1) << 4;
        int sc, m;
        pl_q_scale_min_k4(scales, sub, &sc, &m);
        out[e] = d * (float)sc * (float)q - dmin * (float)m;
    }
}

void pl_q4_k_to_f32(const void *src, float *out, size_t n) {
    const uint8_t *b = src;
    for (size_t i0 = 0; i0 < n; i0 += PL_QK_K, b += sizeof(pl_block_q4_k))
        k4_block_to_f32(f16_at(b), f16_at(b + 2), b + 4, NULL, b + 16, out + i0);
}

void pl_q5_k_to_f32(const void *src, float *out, size_t n) {
    const uint8_t *b = src;
    for (size_t i0 = 0; i0 < n; i0 += PL_QK_K, b += sizeof(pl_block_q5_k))
        k4_block_to_f32(f16_at(b), f16_at(b + 2), b + 4, b + 16, b + 48, out + i0);
}

void pl_q6_k_to_f32(const void *src, float *out, size_t n) {
    const uint8_t *b = src;
    for (size_t i0 = 0; i0 < n; i0 += PL_QK_K, b += sizeof(pl_block_q6_k)) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *scales = (const int8_t *)(b + 192);
        float d = f16_at(b + 208);
        for (int e = 0; e < PL_QK_K; e++) {
            int half = e / 128, k = (e % 128) / 32, l = e % 32;
            uint8_t lowbyte = ql[64 * half + 32 * (k & 1) + l];
            int lo = k < 2 ? lowbyte & 15 : lowbyte >> 4;
            int top = (qh[32 * half + l] >> (2 * k)) & 3;
            int q = (lo | top << 4) - 32;
            out[i0 + e] = d * (float)scales[e / 16] * (float)q;
        }
    }
}

// ----------------------------------------------------------------------------
// Q8_0 and Q4_0 quantisers (the format's reference encoding)

/* The largest |x| of n values (NaN ignored), and the value that has it. */
static float abs_max(const float *x, int n, float *signed_max) {
    float amax = 0, vmax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            vmax = x[i];
        }
    if (signed_max) *signed_max = vmax;
    return amax;
}

void pl_q8_0_from_f32(const float *src, void *out, size_t n) {
    uint8_t *b = out;
    for (size_t i0 = 0; i0 < n; i0 += PL_QK, b += sizeof(pl_block_q8_0)) {
        const float *x = src + i0;
        float d = abs_max(x, PL_QK, NULL) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        put_f16(b, d);
        for (int i = 0; i < PL_QK; i++)
            b[2 + i] = (uint8_t)(int8_t)clamp_round(x[i] * id, -127, 127);
    }
}

void pl_q4_0_from_f32(const float *src, void *out, size_t n) {
    uint8_t *b = out;
    for (size_t i0 = 0; i0 < n; i0 += PL_QK, b += sizeof(pl_block_q4_0)) {
        const float *x = src + i0;
        float vmax;
        abs_max(x, PL_QK, &vmax);
        /* the largest magnitude lands on level -8 (the one without a positive twin) */
        float d = vmax / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        put_f16(b, d);
        for (int i = 0; i < PL_QK / 2; i++) {
            int lo = 8, hi = 8;
            /* x * id + 8.5 truncated: round half up to levels 0..15 */
            float v0 = x[i] * id + 8.5f, v1 = x[i + 16] * id + 8.5f;
            if (v0 == v0) lo = v0 <= 0.0f ? 0 : v0 >= 15.0f ? 15 : (int)v0;
            if (v1 == v1) hi = v1 <= 0.0f ? 0 : v1 >= 15.0f ? 15 : (int)v1;
            b[2 + i] = (uint8_t)(lo | hi << 4);
        }
    }
}

// ----------------------------------------------------------------------------
// K-quant quantisers

/* Scales tried per sub-block, as levels spanned by the sub-block's range: nmax - 1.5 ..
 * nmax + 0.9 in steps of 0.1 (a wider span than nmax alone lets an outlier clip). */
#define FIT_STEPS 25

/* Squared error of x[i] ~ s * L_i + o with L_i the nearest level in [0, nmax] (lmin = 0) or
 * [lmin, lmax] for signed levels. */
static double fit_error(const float *x, int n, float s, float o, int lmin, int lmax) {
    double err = 0;
    for (int i = 0; i < n; i++) {
        int L = s != 0.0f ? clamp_round((x[i] - o) / s, lmin, lmax) : 0;
        double e = (double)s * L + o - x[i];
        err += e * e;
    }
    return err;
}

/* x[0..n) ~ s * L - m with levels L in [0, nmax], s >= 0 and m >= 0: for each scale of a
 * grid, levels by rounding, then (s, m) refitted by least squares on those levels; the pair
 * with the least squared error wins. */
static void fit_scale_min(const float *x, int n, int nmax, float *s_out, float *m_out) {
    float lo = 0, hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    if (!(hi > lo) || !isfinite(hi - lo)) { /* constant, all negative-constant, or not finite */
        *s_out = 0;
        *m_out = isfinite(lo) ? -lo : 0;
        return;
    }
    float best_s = (hi - lo) / (float)nmax, best_o = lo;
    double best = fit_error(x, n, best_s, best_o, 0, nmax);
    for (int step = 0; step < FIT_STEPS; step++) {
        float iscale = ((float)nmax - 1.5f + 0.1f * (float)step) / (hi - lo);
        double sl = 0, sll = 0, sx = 0, slx = 0;
        for (int i = 0; i < n; i++) {
            int L = clamp_round(iscale * (x[i] - lo), 0, nmax);
            sl += L;
            sll += (double)L * L;
            sx += x[i];
            slx += (double)L * x[i];
        }
        double det = n * sll - sl * sl;
        if (!(det > 0)) continue;
        double s = (n * slx - sl * sx) / det, o = (sx - s * sl) / n;
        if (o > 0) { /* the representable minimum -m must not be above 0 */
            o = 0;
            s = slx / sll;
        }
        if (!(s > 0)) continue;
        double err = fit_error(x, n, (float)s, (float)o, 0, nmax);
        if (err < best) {
            best = err;
            best_s = (float)s;
            best_o = (float)o;
        }
    }
    *s_out = best_s;
    *m_out = -best_o;
}

/* Stores vmax / top as an f16 whose magnitude is not so far below |vmax / top| that vmax's
 * scale would round beyond top (rounding to f16 down, of subnormals especially, would clip
 * it); returns the stored value. */
static float put_scale_f16(uint8_t *p, float vmax, int top) {
    uint16_t h = pl_f32_to_f16(fabsf(vmax) / (float)top);
    if (isfinite(vmax) && h < 0x7bff && pl_f16_to_f32(h) * ((float)top + 0.5f) < fabsf(vmax))
        h++;
    float v = pl_f16_to_f32(h);
    if (vmax < 0) v = -v;
    put_f16(p, v);
    return v;
}

/* One Q4_K/Q5_K super-block's levels (L[256] in [0, nmax]), f16 d and dmin, and the 6-bit
 * scales and mins. */
static void quantize_k4(const float *x, int nmax, uint8_t *L, uint8_t *d_out, uint8_t *dmin_out,
                        uint8_t sc[8], uint8_t mn[8]) {
    float s[8], m[8], smax = 0, mmax = 0;
    for (int b = 0; b < 8; b++) {
        fit_scale_min(x + 32 * b, 32, nmax, &s[b], &m[b]);
        smax = fmaxf(smax, s[b]);
        mmax = fmaxf(mmax, m[b]);
    }
    float d = put_scale_f16(d_out, smax, 63), dmin = put_scale_f16(dmin_out, mmax, 63);
    for (int b = 0; b < 8; b++) {
        sc[b] = (uint8_t)(d > 0 ? clamp_round(s[b] / d, 0, 63) : 0);
        mn[b] = (uint8_t)(dmin > 0 ? clamp_round(m[b] / dmin, 0, 63) : 0);
        float ds = d * sc[b], dm = dmin * mn[b];
        for (int i = 0; i < 32; i++)
            L[32 * b + i] = (uint8_t)(ds > 0 ? clamp_round((x[32 * b + i] + dm) / ds, 0, nmax) : 0);
    }
}

void pl_q_pack_scale_min_k4(uint8_t *scales, const uint8_t sc[8], const uint8_t m[8]) {
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        scales[j + 4] = (uint8_t)((m[j] & 63) | (m[j + 4] >> 4) << 6);
        scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
}

void pl_q4_k_from_f32(const float *src, void *out, size_t n) {
    uint8_t *b = out;
    for (size_t i0 = 0; i0 < n; i0 += PL_QK_K, b += sizeof(pl_block_q4_k)) {
        uint8_t L[PL_QK_K], sc[8], mn[8];
        quantize_k4(src + i0, 15, L, b, b + 2, sc, mn);
        pl_q_pack_scale_min_k4(b + 4, sc, mn);
        uint8_t *qs = b + 16;
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
    }
}

void pl_q5_k_from_f32(const float *src, void *out, size_t n) {
    uint8_t *b = out;
    for (size_t i0 = 0; i0 < n; i0 += PL_QK_K, b += sizeof(pl_block_q5_k)) {
        uint8_t L[PL_QK_K], sc[8], mn[8];
        quantize_k4(src + i0, 31, L, b, b + 2, sc, mn);
        pl_q_pack_scale_min_k4(b + 4, sc, mn);
        uint8_t *qh = b + 16, *qs = b + 48;
        memset(qh, 0, 32);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                int a = L[64 * c + l], z = L[64 * c + 32 + l];
                qs[32 * c + l] = (uint8_t)((a & 15) | (z & 15) << 4);
                qh[l] |= (uint8_t)((a >> 4) << (2 * c) | (z >> 4) << (2 * c + 1));
            }
    }
}

/* x[0..n) ~ s * L with L in [-32, 31]: scales that put the largest magnitude near level -32
 * (the level without a positive twin), each refitted by least squares on its levels. */
static float fit_scale_q6(const float *x, int n) {
    float vmax;
    float amax = abs_max(x, n, &vmax);
    if (!(amax > 0) || !isfinite(amax)) return 0;
    float best_s = vmax / -32.0f;
    double best = fit_error(x, n, best_s, 0, -32, 31);
    for (int step = -10; step <= 10; step++) {
        float iscale = -(32.0f + 0.1f * (float)step) / vmax;
        double sll = 0, slx = 0;
        for (int i = 0; i < n; i++) {
            int L = clamp_round(iscale * x[i], -32, 31);
            sll += (double)L * L;
            slx += (double)L * x[i];
        }
        if (!(sll > 0)) continue;
        float s = (float)(slx / sll);
        double err = fit_error(x, n, s, 0, -32, 31);
        if (err < best) {
            best = err;
            best_s = s;
        }
    }
    return best_s;
}

void pl_q6_k_from_f32(const float *src, void *out, size_t n) {
    uint8_t *b = out;
    for (size_t i0 = 0; i0 < n; i0 += PL_QK_K, b += sizeof(pl_block_q6_k)) {
        const float *x = src + i0;
        float s[16], sext = 0;
        for (int g = 0; g < 16; g++) {
            s[g] = fit_scale_q6(x + 16 * g, 16);
            if (fabsf(s[g]) > fabsf(sext)) sext = s[g];
        }
        /* the largest group scale lands on -128, as the levels' largest on -32 */
        float d = put_scale_f16(b + 208, -sext, 128);
        uint8_t L[PL_QK_K];
        for (int g = 0; g < 16; g++) {
            int sc = d != 0.0f ? clamp_round(s[g] / d, -128, 127) : 0;
            b[192 + g] = (uint8_t)(int8_t)sc;
            float ds = d * (float)sc;
            for (int i = 0; i < 16; i++)
                L[16 * g + i] =
                    (uint8_t)((ds != 0.0f ? clamp_round(x[16 * g + i] / ds, -32, 31) : 0) + 32);
        }
        uint8_t *ql = b, *qh = b + 128;
        for (int half = 0; half < 2; half++) {
            const uint8_t *Lh = L + 128 * half;
            for (int l = 0; l < 32; l++) {
                ql[64 * half + l] = (uint8_t)((Lh[l] & 15) | (Lh[64 + l] & 15) << 4);
                ql[64 * half + 32 + l] = (uint8_t)((Lh[32 + l] & 15) | (Lh[96 + l] & 15) << 4);
                qh[32 * half + l] = (uint8_t)(Lh[l] >> 4 | (Lh[32 + l] >> 4) << 2 |
                                              (Lh[64 + l] >> 4) << 4 | (Lh[96 + l] >> 4) << 6);
            }
        }
    }
}
