/*
 * util/wtype.c - the weight storage type table (see wtype.h) and its reference converters.
 *
 * The plain float rows read and write through memcpy, so sources that are not aligned for
 * their type (safetensors data offsets need not be) are never dereferenced as float or
 * uint16_t.
 */
#include "util/wtype.h"

#include <string.h>

#include "util/dtype.h"
#include "util/quant.h"

_Static_assert((int)PL_WTYPE_F32 == (int)PL_DTYPE_F32 && (int)PL_WTYPE_F16 == (int)PL_DTYPE_F16 &&
                   (int)PL_WTYPE_BF16 == (int)PL_DTYPE_BF16,
               "pl_wtype's plain float rows carry the pl_dtype values");

// ----------------------------------------------------------------------------
// reference converters

static void f32_to_f32(const void *src, float *out, size_t n) { memcpy(out, src, n * 4); }
static void f32_from_f32(const float *src, void *out, size_t n) { memcpy(out, src, n * 4); }

static void f16_to_f32(const void *src, float *out, size_t n) {
    const uint8_t *s = src;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        out[i] = pl_f16_to_f32(h);
    }
}

static void f16_from_f32(const float *src, void *out, size_t n) {
    uint8_t *o = out;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = pl_f32_to_f16(src[i]);
        memcpy(o + 2 * i, &h, 2);
    }
}

static void bf16_to_f32(const void *src, float *out, size_t n) {
    const uint8_t *s = src;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        out[i] = pl_bf16_to_f32(h);
    }
}

static void bf16_from_f32(const float *src, void *out, size_t n) {
    uint8_t *o = out;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = pl_f32_to_bf16(src[i]);
        memcpy(o + 2 * i, &h, 2);
    }
}

// ----------------------------------------------------------------------------
// the table

#define ALL_BACKENDS (PL_WTYPE_ON_REF | PL_WTYPE_ON_CPU | PL_WTYPE_ON_CUDA)

static const pl_wtype_traits k_traits[PL_WTYPE_COUNT] = {
    [PL_WTYPE_F32] = {"f32", 1, 4, f32_to_f32, f32_from_f32, ALL_BACKENDS},
    [PL_WTYPE_F16] = {"f16", 1, 2, f16_to_f32, f16_from_f32, ALL_BACKENDS},
    [PL_WTYPE_BF16] = {"bf16", 1, 2, bf16_to_f32, bf16_from_f32, ALL_BACKENDS},
    [PL_WTYPE_Q8_0] = {"q8_0", PL_QK, sizeof(pl_block_q8_0), pl_q8_0_to_f32, pl_q8_0_from_f32,
                       ALL_BACKENDS},
    [PL_WTYPE_Q4_0] = {"q4_0", PL_QK, sizeof(pl_block_q4_0), pl_q4_0_to_f32, pl_q4_0_from_f32,
                       ALL_BACKENDS},
    [PL_WTYPE_Q4_K] = {"q4_k", PL_QK_K, sizeof(pl_block_q4_k), pl_q4_k_to_f32,
                       pl_q4_k_from_f32, ALL_BACKENDS},
    [PL_WTYPE_Q5_K] = {"q5_k", PL_QK_K, sizeof(pl_block_q5_k), pl_q5_k_to_f32,
                       pl_q5_k_from_f32, ALL_BACKENDS},
    [PL_WTYPE_Q6_K] = {"q6_k", PL_QK_K, sizeof(pl_block_q6_k), pl_q6_k_to_f32,
                       pl_q6_k_from_f32, ALL_BACKENDS},
};

const pl_wtype_traits *pl_wtype_traits_of(pl_wtype t) {
    if ((int)t <= (int)PL_WTYPE_NONE || (int)t >= (int)PL_WTYPE_COUNT) return NULL;
    return k_traits[t].name ? &k_traits[t] : NULL;
}

const char *pl_wtype_name(pl_wtype t) {
    const pl_wtype_traits *tr = pl_wtype_traits_of(t);
    return tr ? tr->name : "none";
}

bool pl_wtype_bytes(pl_wtype t, uint64_t n_elems, uint64_t *out) {
    const pl_wtype_traits *tr = pl_wtype_traits_of(t);
    if (!tr || n_elems % (uint64_t)tr->block_elems != 0) return false;
    return !__builtin_mul_overflow(n_elems / (uint64_t)tr->block_elems,
                                   (uint64_t)tr->block_bytes, out);
}

void pl_wtype_convert(void *dst, pl_wtype dt, const void *src, pl_wtype st, size_t n_elems) {
    const pl_wtype_traits *d = pl_wtype_traits_of(dt), *s = pl_wtype_traits_of(st);
    if (!d || !s || !d->from_f32) return;
    if (dt == st) {
        memcpy(dst, src, n_elems / (size_t)s->block_elems * (size_t)s->block_bytes);
        return;
    }
    /* chunks of whole blocks of both types */
    size_t unit = (size_t)(s->block_elems > d->block_elems ? s->block_elems : d->block_elems);
    float buf[4096];
    size_t chunk = sizeof buf / sizeof buf[0] / unit * unit;
    const uint8_t *sp = src;
    uint8_t *dp = dst;
    for (size_t done = 0; done < n_elems; done += chunk) {
        size_t n = n_elems - done < chunk ? n_elems - done : chunk;
        s->to_f32(sp, buf, n);
        d->from_f32(buf, dp, n);
        sp += n / (size_t)s->block_elems * (size_t)s->block_bytes;
        dp += n / (size_t)d->block_elems * (size_t)d->block_bytes;
    }
}
