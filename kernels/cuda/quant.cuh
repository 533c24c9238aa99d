/*
 * kernels/cuda/quant.cuh - the quantised blocks of util/quant.h read on the device, one
 * 32-element piece per call (a Q8_0/Q4_0 block, a Q4_K/Q5_K sub-block, two Q6_K groups), as
 * kernels/cpu/qblocks.h does on the host: the matrix-vector product (qmatmul.cu), the
 * dequantisation to f16 before cuBLAS, and the embedding read through it.
 *
 * Loads: Q4_K and Q5_K super-blocks (144, 176 bytes: multiples of 16) start 16-byte aligned
 * when the tensor does (device allocations and whole-tensor uploads), so their level bytes
 * come in 16-byte vectors; Q8_0, Q4_0 and Q6_K blocks (34, 18, 210 bytes) are only 2-byte
 * aligned and come in 16-bit words. Values are sc * L - mn as in the reference dequantiser:
 * every product is exact, so a fused multiply-add rounds the same, and the results equal it
 * bit for bit.
 */
#ifndef PL_KERNELS_CUDA_QUANT_CUH
#define PL_KERNELS_CUDA_QUANT_CUH

#include "kernels/cuda/cuda_common.cuh"
#include "util/quant.h"

// The f16 at p (2-byte aligned) as f32.
static __device__ __forceinline__ float pl_q_half(const uint8_t *p) {
    return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short *>(p)));
}

// 32 bytes at p as 8 little-endian words: from 16-bit loads (p 2-byte aligned) or 16-byte
// vectors (p 16-byte aligned).
static __device__ __forceinline__ void pl_q_load32_a2(const uint8_t *p, uint32_t w[8]) {
    const unsigned short *h = reinterpret_cast<const unsigned short *>(p);
    PL_UNROLL
    for (int i = 0; i < 8; i++) w[i] = (uint32_t)h[2 * i] | (uint32_t)h[2 * i + 1] << 16;
}
static __device__ __forceinline__ void pl_q_load32_a16(const uint8_t *p, uint32_t w[8]) {
    PL_VEC_ALIGNED(p, 16);
    const uint4 a = reinterpret_cast<const uint4 *>(p)[0];
    const uint4 b = reinterpret_cast<const uint4 *>(p)[1];
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
    w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
}
static __device__ __forceinline__ int pl_q_byte(const uint32_t *w, int i) {
    return (int)((w[i >> 2] >> (8 * (i & 3))) & 0xffu);
}
// Byte i (0..11, known only at run time) of the words s0..s2: selects instead of indexing an
// array, which would put the array in local memory (a stack frame) when i is not a constant.
static __device__ __forceinline__ int pl_q_byte_of3(uint32_t s0, uint32_t s1, uint32_t s2,
                                                    int i) {
    const uint32_t w = i < 4 ? s0 : (i < 8 ? s1 : s2);
    return (int)((w >> (8 * (i & 3))) & 0xffu);
}

// Piece p of the row (or run of whole blocks) at row, as 32 f32 values.
template <int T>
static __device__ __forceinline__ void pl_q_piece(const uint8_t *__restrict__ row, int p,
                                                  float v[32]) {
    uint32_t w[8];
    if constexpr (T == PL_WTYPE_Q8_0) {
        const uint8_t *b = row + (size_t)p * sizeof(pl_block_q8_0);
        const float d = pl_q_half(b);
        pl_q_load32_a2(b + 2, w);
        PL_UNROLL
        for (int i = 0; i < 32; i++) v[i] = d * (float)(int8_t)pl_q_byte(w, i);
    } else if constexpr (T == PL_WTYPE_Q4_0) {
        const uint8_t *b = row + (size_t)p * sizeof(pl_block_q4_0);
        const float d = pl_q_half(b);
        const unsigned short *h = reinterpret_cast<const unsigned short *>(b + 2);
        PL_UNROLL
        for (int i = 0; i < 4; i++) w[i] = (uint32_t)h[2 * i] | (uint32_t)h[2 * i + 1] << 16;
        PL_UNROLL
        for (int i = 0; i < 16; i++) {
            const int q = pl_q_byte(w, i);
            v[i] = d * (float)((q & 15) - 8);
            v[i + 16] = d * (float)((q >> 4) - 8);
        }
    } else if constexpr (T == PL_WTYPE_Q4_K || T == PL_WTYPE_Q5_K) {
        constexpr bool five = T == PL_WTYPE_Q5_K;
        const uint8_t *b = row + (size_t)(p >> 3) * (five ? sizeof(pl_block_q5_k)
                                                          : sizeof(pl_block_q4_k));
        const int sub = p & 7;
        const uint32_t dm = reinterpret_cast<const uint32_t *>(b)[0];
        const float d = __half2float(__ushort_as_half((unsigned short)(dm & 0xffffu)));
        const float dmin = __half2float(__ushort_as_half((unsigned short)(dm >> 16)));
        const uint32_t *s = reinterpret_cast<const uint32_t *>(b + 4);
        const uint32_t s0 = s[0], s1 = s[1], s2 = s[2];
        int sc, m; // pl_q_scale_min_k4 on the 12 scale bytes s0..s2
        if (sub < 4) {
            sc = pl_q_byte_of3(s0, s1, s2, sub) & 63;
            m = pl_q_byte_of3(s0, s1, s2, sub + 4) & 63;
        } else {
            sc = (pl_q_byte_of3(s0, s1, s2, sub + 4) & 15) |
                 (pl_q_byte_of3(s0, s1, s2, sub - 4) >> 6) << 4;
            m = (pl_q_byte_of3(s0, s1, s2, sub + 4) >> 4) |
                (pl_q_byte_of3(s0, s1, s2, sub) >> 6) << 4;
        }
        const float dsc = d * (float)sc, mn = dmin * (float)m;
        pl_q_load32_a16(b + (five ? 48 : 16) + 32 * (sub >> 1), w);
        [[maybe_unused]] uint32_t qh[8];
        if constexpr (five) pl_q_load32_a16(b + 16, qh);
        PL_UNROLL
        for (int i = 0; i < 32; i++) {
            int q = (pl_q_byte(w, i) >> (4 * (sub & 1))) & 15;
            if constexpr (five) q |= ((pl_q_byte(qh, i) >> sub) & 1) << 4;
            v[i] = dsc * (float)q - mn;
        }
    } else { // Q6_K
        const uint8_t *b = row + (size_t)(p >> 3) * sizeof(pl_block_q6_k);
        const int sub = p & 7, half = sub >> 2, k = sub & 3;
        const float d = pl_q_half(b + 208);
        const unsigned short sc2 = *reinterpret_cast<const unsigned short *>(b + 192 + 2 * sub);
        const float lo = d * (float)(int8_t)(sc2 & 0xffu), hi = d * (float)(int8_t)(sc2 >> 8);
        uint32_t qh[8];
        pl_q_load32_a2(b + 64 * half + 32 * (k & 1), w);
        pl_q_load32_a2(b + 128 + 32 * half, qh);
        PL_UNROLL
        for (int i = 0; i < 32; i++) {
            const int q = ((pl_q_byte(w, i) >> (4 * (k >> 1))) & 15) |
                          ((pl_q_byte(qh, i) >> (2 * k)) & 3) << 4;
            v[i] = (i < 16 ? lo : hi) * (float)(q - 32);
        }
    }
}

// Q4_K and Q5_K blocks are read in 16-byte vectors (pl_q_load32_a16): kernels/backend.h asks
// for weights from upload_weight (or 16-byte aligned backend memory); anything else is refused
// here rather than faulting on the device.
static inline pl_status pl_q_check_aligned(const void *w, pl_wtype t, const char *op) {
    if ((t == PL_WTYPE_Q4_K || t == PL_WTYPE_Q5_K) && (uintptr_t)w % 16 != 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "%s: %s weights at %p are not 16-byte aligned (kernels/backend.h: weights "
                       "come from upload_weight)", op, pl_wtype_name(t), w);
    return PL_OK;
}

// Calls f(piece reader) for the run-time type t: the one switch from pl_wtype to a template.
#define PL_Q_DISPATCH(t, CALL)                                                                \
    switch (t) {                                                                              \
    case PL_WTYPE_Q8_0: CALL(PL_WTYPE_Q8_0); break;                                           \
    case PL_WTYPE_Q4_0: CALL(PL_WTYPE_Q4_0); break;                                           \
    case PL_WTYPE_Q4_K: CALL(PL_WTYPE_Q4_K); break;                                           \
    case PL_WTYPE_Q5_K: CALL(PL_WTYPE_Q5_K); break;                                           \
    default: CALL(PL_WTYPE_Q6_K); break;                                                      \
    }

#endif
