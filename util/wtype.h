/*
 * util/wtype.h - the weight storage types: one table row per type, with its traits.
 *
 * A weight tensor is stored row by row; each row is a run of blocks, and every size is
 * computed from blocks (elements per block, bytes per block), never as elements x element
 * size, so a block-quantised type (GGUF's Q8_0: 32 elements in 34 bytes, a scale and 32
 * int8) is one more row of the table. The rows: the plain floats F32, F16 and BF16 (one
 * element per block) and GGUF's block-quantised Q8_0, Q4_0 (32 elements per block), Q4_K,
 * Q5_K and Q6_K (256), whose layouts util/quant.h gives.
 *
 * pl_wtype is internal. Its first values equal the public pl_dtype values of the same name
 * (checked in wtype.c), so an f32/f16/bf16 pl_dtype converts with pl_wtype_of_dtype and back with
 * pl_wtype_dtype; a type beyond them has no pl_dtype (AUTO). The KV cache keeps pl_dtype.
 *
 * The reference dequantiser of each type (to_f32) is the specification of its values: the
 * reference backend and the tests read weights through it, and any faster path is checked
 * against it. `backends` says which backends' matmul and embed take the type as stored; the
 * runner refuses a model whose weights its backend cannot multiply, naming both.
 */
#ifndef PL_UTIL_WTYPE_H
#define PL_UTIL_WTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagellm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pl_wtype {
    PL_WTYPE_NONE = 0, /* not a weight type (a safetensors I64 tensor, say) */
    PL_WTYPE_F32 = 1,
    PL_WTYPE_F16 = 2,
    PL_WTYPE_BF16 = 3,
    PL_WTYPE_Q8_0 = 4,
    PL_WTYPE_Q4_0 = 5,
    PL_WTYPE_Q4_K = 6,
    PL_WTYPE_Q5_K = 7,
    PL_WTYPE_Q6_K = 8,
    PL_WTYPE_COUNT
} pl_wtype;

/* Backends, as bits of pl_wtype_traits.backends. */
#define PL_WTYPE_ON_REF 1u
#define PL_WTYPE_ON_CPU 2u
#define PL_WTYPE_ON_CUDA 4u

typedef struct pl_wtype_traits {
    const char *name;  /* "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k" */
    int block_elems;   /* elements per block; a row's length must be a multiple */
    int block_bytes;   /* bytes per block */
    /* Reference dequantiser: out (n_elems) f32 from src (n_elems / block_elems blocks, any
     * alignment). n_elems is a multiple of block_elems. */
    void (*to_f32)(const void *src, float *out, size_t n_elems);
    /* Quantiser from f32 (round to nearest even for the float types); NULL for a type that
     * is only ever read from files. */
    void (*from_f32)(const float *src, void *out, size_t n_elems);
    unsigned backends; /* PL_WTYPE_ON_* of the backends that multiply it as stored */
} pl_wtype_traits;

/* The row of t, or NULL when t is not a weight type (NONE, out of range). */
const pl_wtype_traits *pl_wtype_traits_of(pl_wtype t);

/* "f32", ...; "none" for a value without a row. */
const char *pl_wtype_name(pl_wtype t);

/* Bytes of n_elems elements of t: false when t has no row, n_elems is not a whole number of
 * blocks, or the size overflows 64 bits. */
bool pl_wtype_bytes(pl_wtype t, uint64_t n_elems, uint64_t *out);

/* True for the block-quantised types (Q8_0 .. Q6_K). */
static inline bool pl_wtype_is_quant(pl_wtype t) {
    return (int)t >= (int)PL_WTYPE_Q8_0 && (int)t < (int)PL_WTYPE_COUNT;
}

/* The pl_dtype of an f32/f16/bf16 type; PL_DTYPE_AUTO for any other. */
static inline pl_dtype pl_wtype_dtype(pl_wtype t) {
    return t == PL_WTYPE_F32 || t == PL_WTYPE_F16 || t == PL_WTYPE_BF16 ? (pl_dtype)(int)t
                                                                          : PL_DTYPE_AUTO;
}

/* The pl_wtype of an f32/f16/bf16 pl_dtype; PL_WTYPE_NONE for AUTO or an unknown value. */
static inline pl_wtype pl_wtype_of_dtype(pl_dtype d) {
    return d == PL_DTYPE_F32 || d == PL_DTYPE_F16 || d == PL_DTYPE_BF16 ? (pl_wtype)(int)d
                                                                          : PL_WTYPE_NONE;
}

/* Converts n_elems elements from type st at src (any alignment) to type dt at dst (aligned
 * for dt): a copy when the types agree, else through f32 in chunks (no allocation). dt must
 * have a quantiser. n_elems is a whole number of blocks of both. */
void pl_wtype_convert(void *dst, pl_wtype dt, const void *src, pl_wtype st, size_t n_elems);

#ifdef __cplusplus
}
#endif
#endif
