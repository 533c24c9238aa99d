/*
 * util/dtype.h - element sizes and scalar f16/bf16 <-> f32 conversion.
 *
 * These are the portable, exact conversions (round to nearest even on the way down); SIMD
 * backends convert in registers and are checked against these.
 */
#ifndef PL_UTIL_DTYPE_H
#define PL_UTIL_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pagellm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes per element; 0 for PL_DTYPE_AUTO. */
static inline size_t pl_dtype_size(pl_dtype t) {
    return t == PL_DTYPE_F32 ? 4 : (t == PL_DTYPE_F16 || t == PL_DTYPE_BF16) ? 2 : 0;
}

/* "f32", "f16", "bf16", "q8_0", ..., "q4_k_m", "q5_k_m", "auto". */
static inline const char *pl_dtype_name(pl_dtype t) {
    switch (t) {
    case PL_DTYPE_F32: return "f32";
    case PL_DTYPE_F16: return "f16";
    case PL_DTYPE_BF16: return "bf16";
    case PL_DTYPE_Q8_0: return "q8_0";
    case PL_DTYPE_Q4_0: return "q4_0";
    case PL_DTYPE_Q4_K: return "q4_k";
    case PL_DTYPE_Q5_K: return "q5_k";
    case PL_DTYPE_Q6_K: return "q6_k";
    case PL_DTYPE_Q4_K_M: return "q4_k_m";
    case PL_DTYPE_Q5_K_M: return "q5_k_m";
    default: return "auto";
    }
}

/* A weight-only type drawn in blocks (q8_0 .. q5_k_m). */
static inline bool pl_dtype_is_quant(pl_dtype t) {
    return (int)t >= (int)PL_DTYPE_Q8_0 && (int)t <= (int)PL_DTYPE_Q5_K_M;
}

static inline uint32_t pl_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float pl_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float pl_bf16_to_f32(uint16_t h) { return pl_bits_f32((uint32_t)h << 16); }

static inline uint16_t pl_f32_to_bf16(float f) {
    uint32_t u = pl_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float pl_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0) return pl_bits_f32(sign);
        /* subnormal: normalise */
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400u));
        man &= 0x3ffu;
        return pl_bits_f32(sign | ((uint32_t)(127 - 15 - e) << 23) | (man << 13));
    }
    if (exp == 31) return pl_bits_f32(sign | 0x7f800000u | (man << 13));
    return pl_bits_f32(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

static inline uint16_t pl_f32_to_f16(float f) {
    uint32_t u = pl_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;          /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u;         /* overflow (and inf) -> inf */
    if (a < 0x38800000u) {                               /* subnormal or zero in f16 */
        if (a < 0x33000000u) return sign;                /* rounds to zero */
        uint32_t man = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23);                /* 14..24 */
        uint32_t r = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return sign | (uint16_t)r;
    }
    uint32_t r = a - 0x38000000u;                        /* rebias exponent 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1u);
    return sign | (uint16_t)(r >> 13);
}

/* Reads element i of a weight array of type t as f32. */
static inline float pl_load_f32(const void *p, pl_dtype t, size_t i) {
    switch (t) {
    case PL_DTYPE_F16: return pl_f16_to_f32(((const uint16_t *)p)[i]);
    case PL_DTYPE_BF16: return pl_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

#ifdef __cplusplus
}
#endif
#endif
