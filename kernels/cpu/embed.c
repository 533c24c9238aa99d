/*
 * kernels/cpu/embed.c - token embedding lookup, and the f16/bf16 -> f32 row widening that
 * matmul reuses.
 *
 * out (n_tokens, dim) f32 = table[ids[i]], table (vocab, dim) of any weight type. Widening f16
 * with F16C and bf16 by a 16-bit shift is exact, and quantised rows are dequantised with
 * dequant.c, which equals the reference dequantiser, so this op equals ref bit for bit. Large
 * batches (prefill) split over tokens.
 */
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"
#include "util/dtype.h"

#ifdef PL_CPU_X86
PL_INLINE PL_TARGET_AVX512 void convert_avx512_dt(float *dst, const void *src, size_t n,
                                                  const pl_dtype t) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, pl_avx512_load(src, t, i));
    if (i < n) {
        __mmask16 m = pl_avx512_mask((int)(n - i));
        _mm512_mask_storeu_ps(dst + i, m, pl_avx512_load_mask(src, t, i, m));
    }
}

static PL_TARGET_AVX512 void convert_avx512(float *dst, const void *src, pl_dtype t, size_t n) {
    if (t == PL_DTYPE_F16)
        convert_avx512_dt(dst, src, n, PL_DTYPE_F16);
    else
        convert_avx512_dt(dst, src, n, PL_DTYPE_BF16);
}

PL_INLINE PL_TARGET_AVX2 void convert_avx2_dt(float *dst, const void *src, size_t n,
                                              const pl_dtype t) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, pl_avx2_load(src, t, i));
    for (; i < n; i++) dst[i] = pl_load_f32(src, t, i);
}

static PL_TARGET_AVX2 void convert_avx2(float *dst, const void *src, pl_dtype t, size_t n) {
    if (t == PL_DTYPE_F16)
        convert_avx2_dt(dst, src, n, PL_DTYPE_F16);
    else
        convert_avx2_dt(dst, src, n, PL_DTYPE_BF16);
}
#endif

void pl_cpu_convert_row(pl_cpu_isa isa, float *dst, const void *src, pl_dtype t, size_t n) {
    if (t == PL_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
#ifdef PL_CPU_X86
    if (isa == PL_CPU_ISA_AVX512) {
        convert_avx512(dst, src, t, n);
        return;
    }
    if (isa == PL_CPU_ISA_AVX2) {
        convert_avx2(dst, src, t, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = pl_load_f32(src, t, i);
}

typedef struct embed_job {
    pl_cpu_isa isa;
    float *out;           /* (n_tokens, dim) */
    const int32_t *ids;   /* (n_tokens) */
    const void *table;    /* (vocab, dim) of type */
    pl_wtype type;
    size_t row_bytes;
    int dim, per_task;    /* tokens per task */
    int n_tokens;
} embed_job;

static void embed_task(void *arg, int task, int thread) {
    (void)thread;
    const embed_job *J = arg;
    int i1 = (task + 1) * J->per_task < J->n_tokens ? (task + 1) * J->per_task : J->n_tokens;
    for (int i = task * J->per_task; i < i1; i++) {
        const unsigned char *row =
            (const unsigned char *)J->table + (size_t)J->ids[i] * J->row_bytes;
        float *dst = J->out + (size_t)i * J->dim;
        if (pl_wtype_is_quant(J->type))
            pl_cpu_dequant(J->isa, dst, row, J->type, 0, (size_t)J->dim / 32);
        else
            pl_cpu_convert_row(J->isa, dst, row, pl_wtype_dtype(J->type), (size_t)J->dim);
    }
}

pl_status pl_cpu_embed(pl_backend *be, float *out, const int32_t *ids, int n_tokens,
                       const void *table, pl_wtype type, int dim) {
    PL_TRY(pl_ref_check_embed(out, ids, n_tokens, table, type, dim));
    if (n_tokens == 0) return PL_OK;
    pl_cpu_ctx *c = be->ctx;
    uint64_t row_bytes;
    pl_wtype_bytes(type, (uint64_t)dim, &row_bytes); /* checked: dim is whole blocks */
    int n_tasks = pl_cpu_n_tasks(c, (size_t)n_tokens * dim, 1u << 15);
    embed_job J = {.isa = c->isa, .out = out, .ids = ids, .table = table, .type = type,
                   .row_bytes = (size_t)row_bytes, .dim = dim, .n_tokens = n_tokens,
                   .per_task = (n_tokens + n_tasks - 1) / n_tasks};
    pl_threadpool_run(c->pool, (n_tokens + J.per_task - 1) / J.per_task, embed_task, &J);
    return PL_OK;
}
