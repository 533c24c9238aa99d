/*
 * kernels/cpu/qgemv.c - products of block-quantised weights: integer dot products of the
 * blocks as stored against activations quantised to 8 bits per block of 32. Decode sizes on
 * every ISA, and with AVX-512 VNNI batches and prompts too (the int8 GEMM: backend_cpu.c's
 * thresholds).
 *
 * Activations (pl_cpu_qact): each x row's block b of 32 values becomes int8 q = x / d[b]
 * rounded, d[b] = max |x| / 127, as ggml's q8_0. A 32-element piece of a weight row (one
 * Q8_0/Q4_0 block, one K-quant sub-block or two Q6_K groups: qblocks.h) is sc * L - mn, so
 *     sum_i w_i x_i  ~  d[b] * (sc * sum_i L_i q_i) - mn * (d[b] * sum_i q_i)
 * with an exact integer sum_i L_i q_i; the second term uses the row's precomputed ds[b].
 * The stored levels are unsigned with an offset (Q4_0: 8, Q6_K: 32; Q8_0 is shifted to
 * unsigned by 128 where the kernel wants it), so L q = stored * q - offset * q: the integer
 * sums start from minus offset times the activations' sums of 4 (s4n, shifted left), which
 * lines up with the lanes of the dot instructions (each lane sums 4 consecutive products).
 *
 * Error: the activations' rounding (at most d[b] / 2 per value, relative 1/254 of the block's
 * largest) is the only approximation beyond f32 accumulation; tests/kernels/tolerances.h
 * states the bound against ref's f32 activations.
 *
 * Besides the natural layout x can be stored in two others, built only for the types a call
 * has: "halves" (Q8_0/Q4_0: the first and last 16 values of each block apart, so a Q4_0
 * block's low and high nibbles line up with them lane for lane) and "pairs" (Q4_K/Q5_K on
 * VNNI: blocks in the order 0, 2, 1, 3 within each 128 values, matching one 64-byte load of
 * levels split into nibbles); and the int8 GEMM's block sums (qgemm.c).
 *
 * Kernels, by ISA (ctx->isa, ctx->vnni):
 * - AVX-512 VNNI: vpdpbusd (unsigned weight bytes x signed activation bytes, 4 products
 *   summed per 32-bit lane, no intermediate saturation), 16 lanes of f32 accumulators per
 *   (weight row, x row): up to 4 x 4 of them in registers. Q8_0/Q4_0 128 weights a step
 *   (halves), Q4_K/Q5_K 128 (pairs), Q6_K 64.
 * - AVX2 (and AVX-512 CPUs without VNNI): vpmaddubsw + vpmaddwd, Q8_0/Q4_0 64 weights a step
 *   (halves), the K-quants 32. vpmaddubsw saturates pairs at 16 bits, fine for levels below
 *   64 (2 x 63 x 127 < 32767), not for Q8_0 shifted to 0..255: Q8_0 uses |w| and sign(x, w)
 *   instead.
 * - Portable C: the same integer sums, one piece at a time.
 * Weight rows come 4 at a time from the 4 quarters of the matrix as in the f16 GEMV
 * (matmul.c); within a group the kernel walks units of 256 elements (a K-quant super-block,
 * 8 Q8_0/Q4_0 blocks), decoding a weight row's unit once for up to 4 (AVX2: 2) x rows.
 * Each output is accumulated the same way whatever the other rows of the call, so a row's
 * result does not depend on its batch (as matmul.c promises for the GEMV).
 */
#include <math.h>

#include "kernels/cpu/qblocks.h"
#include "util/alloc.h"

// ---------------------------------------------------------------------------------------------
// activations

/* Bytes of a row's natural part, and of the whole row with the halves part (see
 * quantize_row_halves). */
static size_t qa_natural(int K) { return ((size_t)3 * K + (size_t)K / 4 + 63) & ~(size_t)63; }
static size_t qa_halves(int K) { return (size_t)(K + 127) / 128 * 256; }
static size_t qa_stride(int K) {
    return qa_natural(K) + qa_halves(K) + 2 * (size_t)K + 3 * (size_t)K / 8; /* + the sums */
}

static inline const int8_t *qa_q(const pl_cpu_qact *a, int r) {
    return (const int8_t *)(a->base + (size_t)r * a->stride);
}
static inline const float *qa_dl(const pl_cpu_qact *a, int r) {
    return (const float *)(a->base + (size_t)r * a->stride + (size_t)a->K);
}
static inline const int32_t *qa_s4n(const pl_cpu_qact *a, int r) {
    return (const int32_t *)(a->base + (size_t)r * a->stride + 2 * (size_t)a->K);
}
static inline const float *qa_d(const pl_cpu_qact *a, int r) {
    return (const float *)(a->base + (size_t)r * a->stride + 3 * (size_t)a->K);
}
static inline const float *qa_ds(const pl_cpu_qact *a, int r) {
    return (const float *)(a->base + (size_t)r * a->stride + 3 * (size_t)a->K +
                           (size_t)a->K / 8);
}
/* The halves part: per group of 128 values 256 bytes (XA, XB, OFF, DL). */
static inline const unsigned char *qa_h(const pl_cpu_qact *a, int r) {
    return a->base + (size_t)r * a->stride + qa_natural(a->K);
}
/* The pair-permuted part: q (K int8) and dl (K/4 f32) with the blocks of every 128 values in
 * the order 0, 2, 1, 3 (see quantize_row_pairs). */
static inline const int8_t *qa_pq(const pl_cpu_qact *a, int r) {
    return (const int8_t *)(a->base + (size_t)r * a->stride + qa_natural(a->K) +
                            qa_halves(a->K));
}
static inline const float *qa_pdl(const pl_cpu_qact *a, int r) {
    return (const float *)(qa_pq(a, r) + a->K);
}

/* The scale of a block of 32 and its int8 values; NaN and infinities give level 0 or +-127
 * (the row's result is then not finite anyway), never undefined behaviour. */
static void quantize_block_scalar(const float *x, int8_t *q, float *d_out) {
    float amax = 0;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < 32; i++) {
        float v = x[i] * id;
        q[i] = (int8_t)(v >= 127.0f ? 127 : v <= -127.0f ? -127 : v == v ? (int)nearbyintf(v) : 0);
    }
    *d_out = d;
}

#ifdef PL_CPU_X86
/* The same values: max |x| by lanes (the order does not change a maximum), x * id rounded to
 * nearest even by the conversion, as nearbyintf does. */
static PL_TARGET_AVX512 void quantize_block_avx512(const float *x, int8_t *q, float *d_out) {
    __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
    if (!(amax == amax) || isinf(amax)) { /* NaN or inf: the portable rules */
        quantize_block_scalar(x, q, d_out);
        return;
    }
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    __m512 vid = _mm512_set1_ps(id);
    __m128i lo = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(a, vid)));
    __m128i hi = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(b, vid)));
    /* one store: block_sums_avx2 reads the block back as one 256-bit load, which two 128-bit
     * stores could not forward to (a stall of every block) */
    _mm256_storeu_si256((__m256i *)q, _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
    *d_out = d;
}

static PL_TARGET_AVX2 void quantize_block_avx2(const float *x, int8_t *q, float *d_out) {
    __m256 v[4], m = _mm256_setzero_ps();
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float amax = _mm_cvtss_f32(h);
    if (!(amax == amax) || isinf(amax)) {
        quantize_block_scalar(x, q, d_out);
        return;
    }
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    __m256 vid = _mm256_set1_ps(id);
    __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v[0], vid));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v[1], vid));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v[2], vid));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v[3], vid));
    /* packs work within 128-bit lanes: (0 1 4 5 2 3 6 7) groups of 4, put back in order */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p);
    *d_out = d;
}
#endif

#ifdef PL_CPU_X86
/* minus the sums of each 4 consecutive of 32 int8 (8 lanes), and their total */
PL_INLINE PL_TARGET_AVX2 __m256i sums4_avx2(__m256i q) {
    __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q); /* pairs: within 16 bits */
    return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
}

static PL_TARGET_AVX2 void block_sums_avx2(const int8_t *q, float d, int32_t *s4n, float *dl,
                                           float *ds) {
    __m256i s = sums4_avx2(_mm256_loadu_si256((const __m256i *)q));
    _mm256_storeu_si256((__m256i *)s4n, _mm256_sub_epi32(_mm256_setzero_si256(), s));
    _mm256_storeu_ps(dl, _mm256_set1_ps(d));
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    *ds = d * (float)_mm_cvtsi128_si32(h);
}

/* One group of the halves layout (see quantize_row_halves) from its n_blk (1..4) blocks. */
static PL_TARGET_AVX2 void halves_group_avx2(const int8_t *q, const float *d, int n_blk,
                                             unsigned char *h) {
    for (int i = 0; i < 4; i++) {
        const __m128i z = _mm_setzero_si128();
        __m128i a = i < n_blk ? _mm_loadu_si128((const __m128i *)(q + 32 * i)) : z;
        __m128i b = i < n_blk ? _mm_loadu_si128((const __m128i *)(q + 32 * i + 16)) : z;
        _mm_storeu_si128((__m128i *)(h + 16 * i), a);
        _mm_storeu_si128((__m128i *)(h + 64 + 16 * i), b);
        ((float *)(h + 192))[4 * i] = ((float *)(h + 192))[4 * i + 1] =
            ((float *)(h + 192))[4 * i + 2] = ((float *)(h + 192))[4 * i + 3] =
                i < n_blk ? d[i] : 0.0f;
    }
    for (int k = 0; k < 2; k++) { /* lanes 8k .. 8k + 7 */
        __m256i xa = _mm256_loadu_si256((const __m256i *)(h + 32 * k));
        __m256i xb = _mm256_loadu_si256((const __m256i *)(h + 64 + 32 * k));
        __m256i s = _mm256_add_epi32(sums4_avx2(xa), sums4_avx2(xb));
        _mm256_storeu_si256((__m256i *)(h + 128 + 32 * k),
                            _mm256_sub_epi32(_mm256_setzero_si256(), s));
    }
}
#endif

typedef struct qa_job {
    const pl_cpu_ctx *c;
    const float *x;
    pl_cpu_qact *a;
    int rows_per_task;
} qa_job;

static void quantize_row(const pl_cpu_ctx *c, const float *x, const pl_cpu_qact *a, int r) {
    const int K = a->K;
    int8_t *q = (int8_t *)qa_q(a, r);
    float *dl = (float *)qa_dl(a, r), *d = (float *)qa_d(a, r), *ds = (float *)qa_ds(a, r);
    int32_t *s4n = (int32_t *)qa_s4n(a, r);
    for (int b = 0; b < K / 32; b++) {
        const float *xb = x + (size_t)r * K + 32 * b;
        switch (c->isa) {
#ifdef PL_CPU_X86
        case PL_CPU_ISA_AVX512: quantize_block_avx512(xb, q + 32 * b, &d[b]); break;
        case PL_CPU_ISA_AVX2: quantize_block_avx2(xb, q + 32 * b, &d[b]); break;
#endif
        default: quantize_block_scalar(xb, q + 32 * b, &d[b]); break;
        }
#ifdef PL_CPU_X86
        if (c->isa >= PL_CPU_ISA_AVX2) {
            block_sums_avx2(q + 32 * b, d[b], s4n + 8 * b, dl + 8 * b, ds + b);
            continue;
        }
#endif
        int sum = 0;
        for (int l = 0; l < 8; l++) {
            const int8_t *g = q + 32 * b + 4 * l;
            int s4 = g[0] + g[1] + g[2] + g[3];
            s4n[8 * b + l] = -s4;
            dl[8 * b + l] = d[b];
            sum += s4;
        }
        ds[b] = d[b] * (float)sum;
    }
}

/* The halves layout of a row, for the 512-bit Q8_0/Q4_0 kernel: per group g of 4 blocks (128
 * values; the last group padded with zero blocks) 64 bytes XA = the first 16 values of each
 * block, 64 bytes XB = their last 16, 16 int32 OFF = minus the sum of the 4 XA and the 4 XB
 * values of each 32-bit lane, and 16 f32 DL = the scale of each lane's block. A Q4_0 block's
 * bytes hold value i in the low and value i + 16 in the high nibble, so the weights' low
 * nibbles of 4 blocks line up with XA and their high nibbles with XB, lane for lane. */
static void quantize_row_halves(const pl_cpu_ctx *c, const pl_cpu_qact *a, int r) {
    const int K = a->K, n_blocks = K / 32;
    const int8_t *q = qa_q(a, r);
    const float *d = qa_d(a, r);
    unsigned char *h = (unsigned char *)qa_h(a, r);
#ifdef PL_CPU_X86
    if (c->isa >= PL_CPU_ISA_AVX2) {
        for (int g = 0; g < (K + 127) / 128; g++, h += 256) {
            int n_blk = n_blocks - 4 * g < 4 ? n_blocks - 4 * g : 4;
            halves_group_avx2(q + 128 * g, d + 4 * g, n_blk, h);
        }
        return;
    }
#endif
    for (int g = 0; g < (K + 127) / 128; g++, h += 256) {
        int8_t *xa = (int8_t *)h, *xb = (int8_t *)h + 64;
        int32_t *off = (int32_t *)(h + 128);
        float *dl = (float *)(h + 192);
        for (int i = 0; i < 4; i++) {
            int b = 4 * g + i;
            const int8_t *qb = q + 32 * b;
            for (int k = 0; k < 16; k++) {
                xa[16 * i + k] = b < n_blocks ? qb[k] : 0;
                xb[16 * i + k] = b < n_blocks ? qb[16 + k] : 0;
            }
            for (int l = 0; l < 4; l++) {
                int s = 0;
                for (int j = 0; j < 4; j++) s += xa[16 * i + 4 * l + j] + xb[16 * i + 4 * l + j];
                off[4 * i + l] = -s;
                dl[4 * i + l] = b < n_blocks ? d[b] : 0.0f;
            }
        }
    }
}

/* The sums layout of a row (PL_CPU_QA_SUMS), from the natural one's minus sums of 4. */
static void quantize_row_sums(const pl_cpu_qact *a, int r) {
    const int32_t *s4n = (const int32_t *)(a->base + (size_t)r * a->stride + 2 * (size_t)a->K);
    int32_t *s32n = (int32_t *)pl_cpu_qact_sn32(a, r), *s16n = (int32_t *)pl_cpu_qact_sn16(a, r);
    for (int j = 0; j < a->K / 16; j++)
        s16n[j] = s4n[4 * j] + s4n[4 * j + 1] + s4n[4 * j + 2] + s4n[4 * j + 3];
    for (int b = 0; b < a->K / 32; b++) s32n[b] = s16n[2 * b] + s16n[2 * b + 1];
}

/* The pair-permuted layout of a row, for the 512-bit Q4_K/Q5_K kernel: within every 128
 * values (a K-quant's chunk pair) the blocks of 32 go in the order 0, 2, 1, 3, so that one
 * 64-byte load of levels split into low and high nibbles (sub-blocks 0 and 2, then 1 and 3)
 * lines up with 64 consecutive activation bytes. A last group of fewer than 4 blocks keeps
 * its order (no K-quant row has one). */
static void quantize_row_pairs(const pl_cpu_qact *a, int r) {
    static const int order[4] = {0, 2, 1, 3};
    const int K = a->K;
    const int8_t *q = qa_q(a, r);
    const float *dl = qa_dl(a, r);
    int8_t *pq = (int8_t *)qa_pq(a, r);
    float *pdl = (float *)qa_pdl(a, r);
    for (int b = 0; b < K / 32; b++) {
        int src = b / 4 * 4 + 4 <= K / 32 ? b / 4 * 4 + order[b % 4] : b;
        memcpy(pq + 32 * b, q + 32 * src, 32);
        memcpy(pdl + 8 * b, dl + 8 * src, 32);
    }
}

static void qa_task(void *arg, int task, int thread) {
    (void)thread;
    const qa_job *J = arg;
    int r1 = (task + 1) * J->rows_per_task;
    if (r1 > J->a->n_rows) r1 = J->a->n_rows;
    for (int r = task * J->rows_per_task; r < r1; r++) {
        quantize_row(J->c, J->x, J->a, r);
        if (J->a->layouts & PL_CPU_QA_HALVES) quantize_row_halves(J->c, J->a, r);
        if (J->a->layouts & PL_CPU_QA_PAIRS) quantize_row_pairs(J->a, r);
        if (J->a->layouts & PL_CPU_QA_SUMS) quantize_row_sums(J->a, r);
    }
}

unsigned pl_cpu_qact_layouts(const pl_cpu_ctx *c, pl_wtype t) {
    if (c->isa < PL_CPU_ISA_AVX2) return 0;
    if (t == PL_WTYPE_Q8_0 || t == PL_WTYPE_Q4_0) return PL_CPU_QA_HALVES;
    bool vnni = c->vnni && c->isa == PL_CPU_ISA_AVX512;
    return vnni && (t == PL_WTYPE_Q4_K || t == PL_WTYPE_Q5_K) ? PL_CPU_QA_PAIRS : 0;
}

pl_status pl_cpu_qact_quantize(pl_cpu_ctx *c, const float *x, int n_rows, int K,
                               unsigned layouts, pl_cpu_qact *out) {
    if (K % 32 != 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "quantised matmul: d_in %d is not a multiple "
                       "of 32", K);
    size_t stride = qa_stride(K), need = stride * (size_t)n_rows;
    if (need > c->qbuf_cap) {
        size_t cap = (need + 65535) & ~(size_t)65535;
        unsigned char *p = pl_calloc_aligned(cap, false);
        if (!p)
            return pl_fail(PL_ERR_OUT_OF_MEMORY, "cpu backend: no memory for %zu bytes of "
                           "quantised activations", cap);
        pl_free_aligned(c->qbuf);
        c->qbuf = p;
        c->qbuf_cap = cap;
    }
    *out = (pl_cpu_qact){.n_rows = n_rows, .K = K, .layouts = layouts, .stride = stride,
                         .base = c->qbuf};
    /* a row of 4096 values takes ~1 us: a pool wake-up is only worth it for many */
    int n_tasks = pl_cpu_n_tasks(c, (size_t)n_rows * K, 1u << 15);
    qa_job J = {.c = c, .x = x, .a = out, .rows_per_task = (n_rows + n_tasks - 1) / n_tasks};
    if (n_tasks <= 1) {
        qa_task(&J, 0, 0);
        return PL_OK;
    }
    pl_threadpool_run(c->pool, (n_rows + J.rows_per_task - 1) / J.rows_per_task, qa_task, &J);
    return PL_OK;
}

// ---------------------------------------------------------------------------------------------
// portable C: one piece at a time

static void qgemv_rows_scalar(const pl_cpu_qgemv_job *J, int o) {
    const size_t row_bytes = (size_t)J->d_in / 32 / (size_t)pl_q_pieces_per_block(J->wt) *
                             pl_q_block_bytes(J->wt);
    const uint8_t *wr = (const uint8_t *)J->w + (size_t)o * row_bytes;
    const int n_pieces = J->d_in / 32;
    for (int r = 0; r < J->n_rows; r++) {
        const int8_t *q = qa_q(J->a, r);
        const float *d = qa_d(J->a, r), *ds = qa_ds(J->a, r);
        float acc = 0;
        for (int p = 0; p < n_pieces; p++) {
            pl_qpiece w;
            pl_qpiece_read(wr, J->wt, (size_t)p, &w);
            int lo = 0, hi = 0;
            for (int i = 0; i < 16; i++) lo += w.L[i] * q[32 * p + i];
            for (int i = 16; i < 32; i++) hi += w.L[i] * q[32 * p + i];
            acc += d[p] * (w.sc[0] * (float)lo + w.sc[1] * (float)hi) - w.mn * ds[p];
        }
        J->out[(size_t)r * J->d_out + o] = acc;
    }
}

#ifdef PL_CPU_X86
// ---------------------------------------------------------------------------------------------
// AVX2: 32 weights a step, up to 4 weight rows x 2 x rows of 8-lane accumulators

/* Per weight row, what a unit (256 elements) needs beyond its levels. */
typedef struct unit_avx2 {
    __m256 sc8, mn8;  /* K4: d * sc_b, dmin * m_b per sub-block */
    __m256 q6lo, q6hi; /* Q6_K: d * scales[0..7], [8..15] */
} unit_avx2;

/* Piece sub of a unit: stored levels and the 8 lanes' weight scales. */
PL_INLINE PL_TARGET_AVX2 __m256i piece_avx2(const uint8_t *u, const unit_avx2 *s, int sub,
                                            const pl_wtype t, __m256 *wsc) {
    switch (t) {
    case PL_WTYPE_Q8_0: {
        const uint8_t *b = u + (size_t)sub * sizeof(pl_block_q8_0);
        *wsc = _mm256_set1_ps(pl_avx2_f16(b));
        return pl_avx2_lev_q8_0(b);
    }
    case PL_WTYPE_Q4_0: {
        const uint8_t *b = u + (size_t)sub * sizeof(pl_block_q4_0);
        *wsc = _mm256_set1_ps(pl_avx2_f16(b));
        return pl_avx2_lev_q4_0(b);
    }
    case PL_WTYPE_Q4_K:
    case PL_WTYPE_Q5_K:
        *wsc = _mm256_permutevar8x32_ps(s->sc8, _mm256_set1_epi32(sub));
        return pl_avx2_lev_k4(u, sub, t == PL_WTYPE_Q5_K);
    default: {
        /* groups 2 sub, 2 sub + 1 (lanes 0-3, 4-7) */
        __m256 g = sub < 4 ? s->q6lo : s->q6hi;
        int i = 2 * (sub % 4);
        *wsc = _mm256_permutevar8x32_ps(g, _mm256_setr_epi32(i, i, i, i, i + 1, i + 1, i + 1,
                                                              i + 1));
        return pl_avx2_lev_q6_k(u, sub);
    }
    }
}

/* out[r][o_j] for x rows r0 .. r0+R-1 and weight rows wr[j] (j < W) over pieces 0 .. np-1. */
PL_INLINE PL_TARGET_AVX2 void qblk_avx2(const pl_cpu_qgemv_job *J, const uint8_t *const *wr,
                                        const int *o, int r0, const int R, const int W,
                                        const pl_wtype t) {
    const bool k4 = t == PL_WTYPE_Q4_K || t == PL_WTYPE_Q5_K;
    const int off = pl_q_level_offset(t), shift = off == 8 ? 3 : 5;
    const size_t bb = pl_q_block_bytes(t);
    const int ppb = pl_q_pieces_per_block(t), n_pieces = J->d_in / 32;
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t *q[2];
    const int32_t *s4n[2];
    const float *d[2], *ds[2];
    for (int r = 0; r < R; r++) {
        q[r] = qa_q(J->a, r0 + r);
        s4n[r] = qa_s4n(J->a, r0 + r);
        d[r] = qa_d(J->a, r0 + r);
        ds[r] = qa_ds(J->a, r0 + r);
    }
    __m256 acc[4][2];
    for (int j = 0; j < W; j++)
        for (int r = 0; r < R; r++) acc[j][r] = _mm256_setzero_ps();
    for (int p0 = 0; p0 < n_pieces; p0 += 8) {
        const int np = n_pieces - p0 < 8 ? n_pieces - p0 : 8;
        for (int j = 0; j < W; j++) {
            const uint8_t *u = wr[j] + (size_t)(p0 / ppb) * bb; /* unit start */
            unit_avx2 s;
            if (k4) pl_avx2_k4_scales(u, &s.sc8, &s.mn8);
            if (t == PL_WTYPE_Q6_K) pl_avx2_q6_scales(u, &s.q6lo, &s.q6hi);
            for (int sub = 0; sub < np; sub++) {
                const int p = p0 + sub;
                __m256 wsc;
                __m256i lev = piece_avx2(u, &s, sub, t, &wsc);
                __m256i ulev = t == PL_WTYPE_Q8_0 ? _mm256_sign_epi8(lev, lev) : lev;
                for (int r = 0; r < R; r++) {
                    __m256i x = _mm256_loadu_si256((const __m256i *)(q[r] + 32 * p));
                    if (t == PL_WTYPE_Q8_0) x = _mm256_sign_epi8(x, lev);
                    __m256i isum = _mm256_madd_epi16(_mm256_maddubs_epi16(ulev, x), ones);
                    if (off) {
                        __m256i o4 = _mm256_loadu_si256((const __m256i *)(s4n[r] + 8 * p));
                        isum = _mm256_add_epi32(
                            isum, _mm256_sll_epi32(o4, _mm_cvtsi32_si128(shift)));
                    }
                    __m256 sc = _mm256_mul_ps(wsc, _mm256_broadcast_ss(d[r] + p));
                    acc[j][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), sc, acc[j][r]);
                }
            }
            if (k4) /* minus dmin m_b d[b] sum q, lane b = sub-block b */
                for (int r = 0; r < R; r++)
                    acc[j][r] = _mm256_fnmadd_ps(s.mn8, _mm256_loadu_ps(ds[r] + p0), acc[j][r]);
        }
    }
    for (int r = 0; r < R; r++) {
        float *out = J->out + (size_t)(r0 + r) * J->d_out, s[4];
        if (W == 4)
            _mm_storeu_ps(s, pl_avx2_hsum4(acc[0][r], acc[1][r], acc[2][r], acc[3][r]));
        else
            for (int j = 0; j < W; j++) s[j] = pl_avx2_hsum(acc[j][r]);
        for (int j = 0; j < W; j++) out[o[j]] = s[j];
    }
}

/* Q8_0/Q4_0 against the halves layout, two blocks (64 values) a step: A = the blocks' first
 * 16 levels each, B = their last 16, one conversion and multiply-add per step (per block in
 * qblk_avx2: Zen 4, AVX2 code, one x row, TSC cycles per 32 values in L2, Q4_0 4.2 -> 3.1,
 * Q8_0 3.5 -> 3.4). */
PL_INLINE PL_TARGET_AVX2 void qblk_h_avx2(const pl_cpu_qgemv_job *J, const uint8_t *const *wr,
                                          const int *o, int r0, const int R, const int W,
                                          const pl_wtype t) {
    const bool q8 = t == PL_WTYPE_Q8_0;
    const size_t bb = pl_q_block_bytes(t);
    const int n_blocks = J->d_in / 32;
    const __m256i ones = _mm256_set1_epi16(1), low = _mm256_set1_epi8(15);
    const unsigned char *h[2];
    for (int r = 0; r < R; r++) h[r] = qa_h(J->a, r0 + r);
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int j = 0; j < W; j++)
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) acc[j][r] = _mm256_setzero_ps();
    for (int b0 = 0; b0 < n_blocks; b0 += 2) {
        const bool two = b0 + 1 < n_blocks;
        /* the pair's place in the halves layout: group b0 / 4, its first or second half (XA
         * at +0, XB at +64, OFF at +128, DL at +192 from there) */
        const size_t hx = (size_t)(b0 / 4) * 256 + (size_t)(b0 % 4) * 16;
#pragma GCC unroll 4
        for (int j = 0; j < W; j++) {
            const uint8_t *b = wr[j] + (size_t)b0 * bb;
            __m128 d0 = _mm_set1_ps(pl_avx2_f16(b));
            __m128 d1 = two ? _mm_set1_ps(pl_avx2_f16(b + bb)) : _mm_setzero_ps();
            __m256 wsc = _mm256_set_m128(d1, d0);
            __m256i A, B;
            if (q8) {
                const __m128i z = _mm_setzero_si128();
                __m128i a1 = two ? _mm_loadu_si128((const __m128i *)(b + bb + 2)) : z;
                __m128i b1 = two ? _mm_loadu_si128((const __m128i *)(b + bb + 18)) : z;
                A = _mm256_set_m128i(a1, _mm_loadu_si128((const __m128i *)(b + 2)));
                B = _mm256_set_m128i(b1, _mm_loadu_si128((const __m128i *)(b + 18)));
            } else {
                __m128i q1 =
                    two ? _mm_loadu_si128((const __m128i *)(b + bb + 2)) : _mm_setzero_si128();
                __m256i v = _mm256_set_m128i(q1, _mm_loadu_si128((const __m128i *)(b + 2)));
                A = _mm256_and_si256(v, low);
                B = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
            }
#pragma GCC unroll 2
            for (int r = 0; r < R; r++) {
                const unsigned char *x = h[r] + hx;
                __m256i xa = _mm256_loadu_si256((const __m256i *)x);
                __m256i xb = _mm256_loadu_si256((const __m256i *)(x + 64));
                __m256i isum;
                if (q8) { /* |w| x sign(x, w): products of 2 x 127 x 127 fit 16 bits, sums not */
                    __m256i pa =
                        _mm256_maddubs_epi16(_mm256_sign_epi8(A, A), _mm256_sign_epi8(xa, A));
                    __m256i pb =
                        _mm256_maddubs_epi16(_mm256_sign_epi8(B, B), _mm256_sign_epi8(xb, B));
                    isum = _mm256_add_epi32(_mm256_madd_epi16(pa, ones),
                                            _mm256_madd_epi16(pb, ones));
                } else { /* pairs of 2 x 15 x 127, two of them: within 16 bits */
                    __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(A, xa),
                                                 _mm256_maddubs_epi16(B, xb));
                    __m256i o4 = _mm256_loadu_si256((const __m256i *)(x + 128));
                    isum = _mm256_add_epi32(_mm256_madd_epi16(p, ones), _mm256_slli_epi32(o4, 3));
                }
                __m256 sc = _mm256_mul_ps(wsc, _mm256_loadu_ps((const float *)(x + 192)));
                acc[j][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), sc, acc[j][r]);
            }
        }
    }
    for (int r = 0; r < R; r++) {
        float *out = J->out + (size_t)(r0 + r) * J->d_out, s[4];
        if (W == 4)
            _mm_storeu_ps(s, pl_avx2_hsum4(acc[0][r], acc[1][r], acc[2][r], acc[3][r]));
        else
            for (int j = 0; j < W; j++) s[j] = pl_avx2_hsum(acc[j][r]);
        for (int j = 0; j < W; j++) out[o[j]] = s[j];
    }
}

PL_INLINE PL_TARGET_AVX2 void qrows_avx2(const pl_cpu_qgemv_job *J, const uint8_t *const *wr,
                                         const int *o, const int W, const pl_wtype t) {
    const bool h = (J->a->layouts & PL_CPU_QA_HALVES) &&
                   (t == PL_WTYPE_Q8_0 || t == PL_WTYPE_Q4_0);
    int r = 0;
    for (; r + 2 <= J->n_rows; r += 2)
        if (h)
            qblk_h_avx2(J, wr, o, r, 2, W, t);
        else
            qblk_avx2(J, wr, o, r, 2, W, t);
    if (r < J->n_rows) {
        if (h)
            qblk_h_avx2(J, wr, o, r, 1, W, t);
        else
            qblk_avx2(J, wr, o, r, 1, W, t);
    }
}

#define QGEMV_DRIVER(ISA, ROWS)                                                                \
    PL_INLINE PL_TARGET_##ISA void qgemv_##ISA##_t(const pl_cpu_qgemv_job *J, int k0, int k1,  \
                                                   bool tail, const pl_wtype t) {              \
        const size_t rb = (size_t)J->d_in / 32 / (size_t)pl_q_pieces_per_block(t) *           \
                          pl_q_block_bytes(t);                                                 \
        const uint8_t *w = (const uint8_t *)J->w;                                              \
        for (int k = k0; k < k1; k++) {                                                        \
            int o[4];                                                                          \
            const uint8_t *wr[4];                                                              \
            for (int j = 0; j < 4; j++) {                                                      \
                o[j] = k + j * J->quarter;                                                     \
                wr[j] = w + (size_t)o[j] * rb;                                                 \
            }                                                                                  \
            ROWS(J, wr, o, 4, t);                                                              \
        }                                                                                      \
        if (tail)                                                                              \
            for (int k = 4 * J->quarter; k < J->d_out; k++) {                                  \
                const uint8_t *wr[1] = {w + (size_t)k * rb};                                   \
                ROWS(J, wr, &k, 1, t);                                                         \
            }                                                                                  \
    }                                                                                          \
    static PL_TARGET_##ISA void qgemv_##ISA(const pl_cpu_qgemv_job *J, int k0, int k1,         \
                                            bool tail) {                                       \
        switch (J->wt) {                                                                       \
        case PL_WTYPE_Q8_0: qgemv_##ISA##_t(J, k0, k1, tail, PL_WTYPE_Q8_0); break;            \
        case PL_WTYPE_Q4_0: qgemv_##ISA##_t(J, k0, k1, tail, PL_WTYPE_Q4_0); break;            \
        case PL_WTYPE_Q4_K: qgemv_##ISA##_t(J, k0, k1, tail, PL_WTYPE_Q4_K); break;            \
        case PL_WTYPE_Q5_K: qgemv_##ISA##_t(J, k0, k1, tail, PL_WTYPE_Q5_K); break;            \
        default: qgemv_##ISA##_t(J, k0, k1, tail, PL_WTYPE_Q6_K); break;                       \
        }                                                                                      \
    }

QGEMV_DRIVER(AVX2, qrows_avx2)

// ---------------------------------------------------------------------------------------------
// AVX-512 VNNI: up to 4 weight rows x 4 x rows of 16-lane accumulators. Q8_0 and Q4_0 go
// 128 weights (4 blocks) a step against the halves layout, with one conversion and one
// multiply-add per step; the K-quants 64 weights (two sub-blocks) a step against the natural
// layout.

/* Word indices into a Q4_0/Q8_0 group (4 blocks read as 16-bit words from its start): the 8
 * words of each block's qs (Q8_0: the first 8, the last 8 are the same indices 8 words on),
 * and each block's scale word repeated for its 4 lanes. */
static const int16_t H_Q4_0_QS[32] = {1,  2,  3,  4,  5,  6,  7,  8,  10, 11, 12,
                                      13, 14, 15, 16, 17, 19, 20, 21, 22, 23, 24,
                                      25, 26, 28, 29, 30, 31, 32, 33, 34, 35};
static const int16_t H_Q4_0_D[32] = {0, 0, 0, 0, 9, 9, 9, 9, 18, 18, 18, 18, 27, 27, 27, 27};
static const int16_t H_Q8_0_QS[32] = {1,  2,  3,  4,  5,  6,  7,  8,  18, 19, 20,
                                      21, 22, 23, 24, 25, 35, 36, 37, 38, 39, 40,
                                      41, 42, 52, 53, 54, 55, 56, 57, 58, 59};
static const int16_t H_Q8_0_D[32] = {0, 0, 0, 0, 17, 17, 17, 17, 34, 34, 34, 34, 51, 51, 51, 51};

/* The first n (clamped to 0 .. 32) 16-bit words. */
static inline __mmask32 words_mask(int n) {
    return n <= 0 ? 0 : n >= 32 ? 0xffffffffu : (__mmask32)((1u << n) - 1u);
}

/* Group g of a Q4_0/Q8_0 row (nblk <= 4 blocks from g; never reads past them): A = the
 * levels of the blocks' first 16 values, B = of their last 16 (16 bytes per block, Q8_0
 * shifted to unsigned by 128), wsc = each lane's block scale. */
PL_INLINE PL_TARGET_AVX512_VNNI void group_h512(const uint8_t *g, int nblk, const pl_wtype t,
                                                __m512i *A, __m512i *B, __m512 *wsc) {
    if (t == PL_WTYPE_Q4_0) {
        const int words = 9 * nblk;
        __m512i lo = _mm512_maskz_loadu_epi16(words_mask(words), g);
        __m512i hi = _mm512_maskz_loadu_epi16(words_mask(words - 32), g + 64);
        __m512i qs = _mm512_permutex2var_epi16(lo, _mm512_loadu_si512(H_Q4_0_QS), hi);
        *A = _mm512_and_si512(qs, _mm512_set1_epi8(15));
        *B = _mm512_and_si512(_mm512_srli_epi16(qs, 4), _mm512_set1_epi8(15));
        __m512i dw = _mm512_permutexvar_epi16(_mm512_loadu_si512(H_Q4_0_D), lo);
        *wsc = _mm512_cvtph_ps(_mm512_castsi512_si256(dw));
    } else {
        const int words = 17 * nblk;
        __m512i lo = _mm512_maskz_loadu_epi16(words_mask(words), g);
        __m512i hi = _mm512_maskz_loadu_epi16(words_mask(words - 32), g + 64);
        __m512i lo2 = _mm512_maskz_loadu_epi16(words_mask(words - 8), g + 16);
        __m512i hi2 = _mm512_maskz_loadu_epi16(words_mask(words - 40), g + 80);
        const __m512i idx = _mm512_loadu_si512(H_Q8_0_QS), flip = _mm512_set1_epi8((char)0x80);
        *A = _mm512_xor_si512(_mm512_permutex2var_epi16(lo, idx, hi), flip);
        *B = _mm512_xor_si512(_mm512_permutex2var_epi16(lo2, idx, hi2), flip);
        __m512i dw = _mm512_permutex2var_epi16(lo, _mm512_loadu_si512(H_Q8_0_D), hi);
        *wsc = _mm512_cvtph_ps(_mm512_castsi512_si256(dw));
    }
}

/* Q8_0/Q4_0: weight rows wr[j] (j < W) x x rows r0 .. r0+R-1, 4 blocks a step. */
PL_INLINE PL_TARGET_AVX512_VNNI void qblk_h512(const pl_cpu_qgemv_job *J,
                                               const uint8_t *const *wr, const int *o, int r0,
                                               const int R, const int W, const pl_wtype t) {
    const int shift = t == PL_WTYPE_Q8_0 ? 7 : 3; /* offsets 128, 8 */
    const size_t bb = pl_q_block_bytes(t);
    const int n_blocks = J->d_in / 32;
    const unsigned char *h[4];
    for (int r = 0; r < R; r++) h[r] = qa_h(J->a, r0 + r);
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int j = 0; j < W; j++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) acc[j][r] = _mm512_setzero_ps();
    for (int b0 = 0, g = 0; b0 < n_blocks; b0 += 4, g++) {
        const int nblk = n_blocks - b0 < 4 ? n_blocks - b0 : 4;
#pragma GCC unroll 4
        for (int j = 0; j < W; j++) {
            __m512i A, B;
            __m512 wsc;
            const uint8_t *wg = wr[j] + (size_t)b0 * bb;
            if (r0 == 0 && J->n_rows > 4 && b0 + 12 <= n_blocks) /* as qblk_512 */
                for (size_t l = 0; l < 4 * bb; l += 64)
                    _mm_prefetch((const char *)wg + 8 * bb + l, _MM_HINT_T0);
            group_h512(wg, nblk, t, &A, &B, &wsc);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const unsigned char *x = h[r] + (size_t)g * 256;
                __m512i isum = _mm512_slli_epi32(_mm512_loadu_si512(x + 128), shift);
                isum = _mm512_dpbusd_epi32(isum, A, _mm512_loadu_si512(x));
                isum = _mm512_dpbusd_epi32(isum, B, _mm512_loadu_si512(x + 64));
                __m512 sc = _mm512_mul_ps(wsc, _mm512_loadu_ps(x + 192));
                acc[j][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), sc, acc[j][r]);
            }
        }
    }
    for (int r = 0; r < R; r++) {
        float *out = J->out + (size_t)(r0 + r) * J->d_out, s[4];
        if (W == 4)
            _mm_storeu_ps(s, pl_avx512_hsum4(acc[0][r], acc[1][r], acc[2][r], acc[3][r]));
        else
            for (int j = 0; j < W; j++) s[j] = _mm512_reduce_add_ps(acc[j][r]);
        for (int j = 0; j < W; j++) out[o[j]] = s[j];
    }
}

typedef struct unit_512 {
    __m512 sc;   /* K4: lanes 0-7 d * sc_b; Q6_K: the 16 groups' d * scales[g] */
    __m512 mn;   /* K4: lanes 0-7 dmin * m_b */
} unit_512;

/* Lane indices that spread a Q6_K super-block's group scales over the 16 lanes of chunk k (64
 * elements): groups 4k .. 4k+3, 4 lanes each. */
static const int32_t Q6_IDX[4][16] = {
    {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
    {4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7},
    {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11},
    {12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15}};

/* Chunk k (elements 64k .. 64k + 63) of a Q6_K super-block u: the levels as unsigned bytes
 * and the 16 lanes' weight scales. */
PL_INLINE PL_TARGET_AVX512_VNNI __m512i chunk_512(const uint8_t *u, const unit_512 *s, int k,
                                                  const pl_wtype t, __m512 *wsc) {
    (void)t;
    /* Q6_K: half k / 2; k even: quarters 0, 1 (low nibbles, qh bits 0-3), odd: 2, 3 */
    *wsc = _mm512_permutexvar_ps(_mm512_loadu_si512(Q6_IDX[k]), s->sc);
    const int half = k / 2;
    __m512i ql = _mm512_loadu_si512(u + 64 * half); /* ql[64h .. 64h + 63] */
    __m256i h = _mm256_loadu_si256((const __m256i *)(u + 128 + 32 * half));
    __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
    if (k & 1) {
        ql = _mm512_srli_epi16(ql, 4);
        hh = _mm512_srli_epi16(hh, 4);
    }
    ql = _mm512_and_si512(ql, _mm512_set1_epi8(15));
    hh = _mm512_slli_epi16(_mm512_and_si512(hh, _mm512_set1_epi8(3)), 4);
    return _mm512_or_si512(ql, hh);
}

/* Sub-block lane patterns of a Q4_K/Q5_K chunk pair half h (128 values) against the
 * pair-permuted activations: the low nibbles of qs[64h ..] are sub-blocks 4h (lanes 0-7) and
 * 4h + 2 (8-15), the high nibbles 4h + 1 and 4h + 3. */
static const int32_t KP_IDX[4][16] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2},
    {1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6},
    {5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7}};

/* Q4_K/Q5_K super-block u, half h: levels of the low (A) and high (B) nibbles of qs[64h ..]
 * (plus their fifth bits), and the lanes' weight scales. */
PL_INLINE PL_TARGET_AVX512_VNNI void pair_k4_512(const uint8_t *u, const unit_512 *s, int h,
                                                 const bool five, __m512i *A, __m512i *B,
                                                 __m512 *wa, __m512 *wb) {
    __m512i v = _mm512_loadu_si512(u + (five ? 48 : 16) + 64 * h);
    *A = _mm512_and_si512(v, _mm512_set1_epi8(15));
    *B = _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(15));
    if (five) {
        /* qh[l] bit b is the fifth bit of sub-block b's value l */
        __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(u + 16)));
        const __m512i sixteen = _mm512_set1_epi8(16);
        __m512i ba = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (4 * h))),
                                        _mm256_set1_epi8((char)(4 << (4 * h))), 1);
        __m512i bb = _mm512_inserti64x4(_mm512_set1_epi8((char)(2 << (4 * h))),
                                        _mm256_set1_epi8((char)(8 << (4 * h))), 1);
        *A = _mm512_or_si512(*A, _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(qh, ba), sixteen));
        *B = _mm512_or_si512(*B, _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(qh, bb), sixteen));
    }
    *wa = _mm512_permutexvar_ps(_mm512_loadu_si512(KP_IDX[2 * h]), s->sc);
    *wb = _mm512_permutexvar_ps(_mm512_loadu_si512(KP_IDX[2 * h + 1]), s->sc);
}

/* K-quants: weight rows wr[j] (j < W) x x rows r0 .. r0+R-1, one super-block a unit. Q4_K and
 * Q5_K read 128 values a step against the pair-permuted activations, Q6_K 64 against the
 * natural ones. */
PL_INLINE PL_TARGET_AVX512_VNNI void qblk_512(const pl_cpu_qgemv_job *J, const uint8_t *const *wr,
                                              const int *o, int r0, const int R, const int W,
                                              const pl_wtype t) {
    const bool k4 = t != PL_WTYPE_Q6_K;
    const size_t bb = pl_q_block_bytes(t);
    const int n_units = J->d_in / 256;
    const int8_t *q[4];
    const int32_t *s4n[4];
    const float *dl[4], *ds[4];
    for (int r = 0; r < R; r++) {
        q[r] = k4 ? qa_pq(J->a, r0 + r) : qa_q(J->a, r0 + r);
        s4n[r] = qa_s4n(J->a, r0 + r);
        dl[r] = k4 ? qa_pdl(J->a, r0 + r) : qa_dl(J->a, r0 + r);
        ds[r] = qa_ds(J->a, r0 + r);
    }
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int j = 0; j < W; j++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) acc[j][r] = _mm512_setzero_ps();
    for (int un = 0; un < n_units; un++) {
#pragma GCC unroll 4
        for (int j = 0; j < W; j++) {
            const uint8_t *u = wr[j] + (size_t)un * bb;
            /* with more than one pass over the weights (more than 4 x rows), the first one
             * brings them in: the super-block two ahead, into L1 (Q6_K at 8 rows from DRAM:
             * 3.3-4.2 -> 1.8-2.2 TSC cycles per 32 weights and x row; with one pass it slowed
             * Q4_K/Q5_K at 1 row, 2.5 -> 3.1 and 3.0 -> 3.9: the hardware prefetcher keeps
             * up there) */
            if (r0 == 0 && J->n_rows > 4 && un + 2 < n_units)
                for (size_t l = 0; l < bb; l += 64)
                    _mm_prefetch((const char *)u + 2 * bb + l, _MM_HINT_T0);
            unit_512 s;
            if (k4) {
                __m256 sc8, mn8;
                pl_avx2_k4_scales(u, &sc8, &mn8);
                s.sc = _mm512_castps256_ps512(sc8);
                s.mn = _mm512_castps256_ps512(mn8);
                for (int h = 0; h < 2; h++) {
                    const int e = 256 * un + 128 * h;
                    __m512i A, B;
                    __m512 wa, wb;
                    pair_k4_512(u, &s, h, t == PL_WTYPE_Q5_K, &A, &B, &wa, &wb);
#pragma GCC unroll 4
                    for (int r = 0; r < R; r++) {
                        __m512i ia = _mm512_dpbusd_epi32(_mm512_setzero_si512(), A,
                                                         _mm512_loadu_si512(q[r] + e));
                        __m512i ib = _mm512_dpbusd_epi32(_mm512_setzero_si512(), B,
                                                         _mm512_loadu_si512(q[r] + e + 64));
                        __m512 sa = _mm512_mul_ps(wa, _mm512_loadu_ps(dl[r] + e / 4));
                        __m512 sb = _mm512_mul_ps(wb, _mm512_loadu_ps(dl[r] + e / 4 + 16));
                        acc[j][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), sa, acc[j][r]);
                        acc[j][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ib), sb, acc[j][r]);
                    }
                }
                /* lanes 0-7: minus dmin m_b d[b] sum q */
#pragma GCC unroll 4
                for (int r = 0; r < R; r++)
                    acc[j][r] = _mm512_mask3_fnmadd_ps(
                        s.mn, _mm512_castps256_ps512(_mm256_loadu_ps(ds[r] + 8 * un)),
                        acc[j][r], 0x00ff);
                continue;
            }
            __m256 lo, hi;
            pl_avx2_q6_scales(u, &lo, &hi);
            s.sc = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
            s.mn = _mm512_setzero_ps();
            for (int k = 0; k < 4; k++) {
                const int e = 256 * un + 64 * k; /* first element of the chunk */
                __m512 wsc;
                __m512i lev = chunk_512(u, &s, k, t, &wsc);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    __m512i isum = _mm512_slli_epi32(_mm512_loadu_si512(s4n[r] + e / 4), 5);
                    isum = _mm512_dpbusd_epi32(isum, lev, _mm512_loadu_si512(q[r] + e));
                    __m512 sc = _mm512_mul_ps(wsc, _mm512_loadu_ps(dl[r] + e / 4));
                    acc[j][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), sc, acc[j][r]);
                }
            }
        }
    }
    for (int r = 0; r < R; r++) {
        float *out = J->out + (size_t)(r0 + r) * J->d_out, s[4];
        if (W == 4)
            _mm_storeu_ps(s, pl_avx512_hsum4(acc[0][r], acc[1][r], acc[2][r], acc[3][r]));
        else
            for (int j = 0; j < W; j++) s[j] = _mm512_reduce_add_ps(acc[j][r]);
        for (int j = 0; j < W; j++) out[o[j]] = s[j];
    }
}

PL_INLINE PL_TARGET_AVX512_VNNI void qblk_any512(const pl_cpu_qgemv_job *J,
                                                 const uint8_t *const *wr, const int *o, int r0,
                                                 const int R, const int W, const pl_wtype t) {
    if (t == PL_WTYPE_Q8_0 || t == PL_WTYPE_Q4_0)
        qblk_h512(J, wr, o, r0, R, W, t);
    else
        qblk_512(J, wr, o, r0, R, W, t);
}

PL_INLINE PL_TARGET_AVX512_VNNI void qrows_512(const pl_cpu_qgemv_job *J, const uint8_t *const *wr,
                                               const int *o, const int W, const pl_wtype t) {
    int r = 0;
    for (; r + 4 <= J->n_rows; r += 4) qblk_any512(J, wr, o, r, 4, W, t);
    switch (J->n_rows - r) {
    case 3: qblk_any512(J, wr, o, r, 3, W, t); break;
    case 2: qblk_any512(J, wr, o, r, 2, W, t); break;
    case 1: qblk_any512(J, wr, o, r, 1, W, t); break;
    default: break;
    }
}

QGEMV_DRIVER(AVX512_VNNI, qrows_512)
#endif /* PL_CPU_X86 */

void pl_cpu_qgemv(const pl_cpu_qgemv_job *J, int k0, int k1, bool tail) {
#ifdef PL_CPU_X86
    if (J->c->isa == PL_CPU_ISA_AVX512 && J->c->vnni) {
        qgemv_AVX512_VNNI(J, k0, k1, tail);
        return;
    }
    if (J->c->isa >= PL_CPU_ISA_AVX2) {
        qgemv_AVX2(J, k0, k1, tail);
        return;
    }
#endif
    for (int q = 0; q < 4; q++)
        for (int o = k0 + q * J->quarter; o < k1 + q * J->quarter; o++) qgemv_rows_scalar(J, o);
    if (tail)
        for (int o = 4 * J->quarter; o < J->d_out; o++) qgemv_rows_scalar(J, o);
}
