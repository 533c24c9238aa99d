/*
 * kernels/cpu/backend_cpu.c - the fast CPU backend: creation, ISA detection, host memory, and
 * the ops table. What the ops share (scratch, task splitting) is in ctx.c, below them.
 *
 * Memory is host heap aligned to 64 bytes (one cache line, one AVX-512 vector), so the KV
 * cache's blocks start on vector boundaries; weights are used where the loader put them
 * (upload_weight returns src: zero copy, any alignment). The backend owns one thread pool
 * (opt->n_threads threads, 0 = all cores), per-thread scratch, and nothing else: every op's
 * inputs arrive as arguments.
 */
#include <cblas.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/qgemm.h"
#include "kernels/ref/ref.h"
#include "util/alloc.h"
#include "util/dtype.h"
#include "util/log.h"

#ifdef PL_CPU_X86
#include <cpuid.h>
#endif

// ---------------------------------------------------------------------------------------------
// ISA detection

static bool has_f16c(void) {
#ifdef PL_CPU_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    return (c & bit_F16C) != 0;
#else
    return false;
#endif
}

pl_cpu_isa pl_cpu_detect_isa(void) {
#ifdef PL_CPU_X86
    __builtin_cpu_init();
    /* __builtin_cpu_supports also checks that the OS saves the vector state (XCR0). */
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return PL_CPU_ISA_AVX512;
    if (avx2) return PL_CPU_ISA_AVX2;
#endif
    return PL_CPU_ISA_SCALAR;
}

static bool has_avx512_vnni(void) {
#ifdef PL_CPU_X86
    return __builtin_cpu_supports("avx512vnni");
#else
    return false;
#endif
}

/* AVX-VNNI: CPUID leaf 7 sub-leaf 1, EAX bit 4 (the VEX encoding of vpdpbusd). */
static bool has_avxvnni(void) {
#ifdef PL_CPU_X86
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    return (a & (1u << 4)) != 0;
#else
    return false;
#endif
}

// ---------------------------------------------------------------------------------------------
// host memory

static pl_status cpu_alloc(pl_backend *be, size_t n_bytes, void **out) {
    (void)be;
    if (!out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "alloc: out is NULL");
    /* Large buffers (the KV cache above all) ask for transparent huge pages: attention visits
     * a sequence's blocks in table order, i.e. 4 KB pieces scattered over the whole cache, and
     * with 4 KB pages nearly every block costs a TLB miss (measured, one thread, decode of 64
     * sequences x 512 positions: 10% less CPU time in attention). */
    *out = pl_calloc_aligned(n_bytes, true);
    if (!*out)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "cpu backend: cannot allocate %zu bytes", n_bytes);
    return PL_OK;
}

static void cpu_free(pl_backend *be, void *p) {
    (void)be;
    pl_free_aligned(p);
}

static pl_status cpu_copy(pl_backend *be, void *dst, const void *src, size_t n_bytes) {
    (void)be;
    if (n_bytes == 0) return PL_OK;
    if (!dst || !src) return pl_fail(PL_ERR_INVALID_ARGUMENT, "upload/download: NULL pointer");
    memcpy(dst, src, n_bytes);
    return PL_OK;
}

static pl_status cpu_sync(pl_backend *be) {
    (void)be; /* every op has finished when it returns */
    return PL_OK;
}

static void cpu_free_weight(pl_backend *be, void *w, const void *src) {
    (void)be;
    (void)w;
    (void)src;
}

// ---------------------------------------------------------------------------------------------
// create / destroy and the table

static void cpu_destroy(pl_backend *be) {
    if (!be) return;
    pl_cpu_ctx *c = be->ctx;
    if (c) {
        pl_threadpool_destroy(c->pool);
        if (c->scratch)
            for (int t = 0; t < c->n_threads; t++) pl_free_aligned(c->scratch[t]);
        pl_free(c->scratch);
        pl_free(c->ints);
        pl_free_aligned(c->shared);
        pl_free_aligned(c->qbuf);
        pl_free(c->moe_ints);
        pl_free(c->moe_floats);
        pl_free_aligned(c->qx);
        pl_free(c);
    }
    pl_free(be);
}

static const pl_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .sync = cpu_sync,
    .memory_info = pl_ref_host_memory_info,
    .upload_weight = pl_ref_host_upload_weight,
    .free_weight = cpu_free_weight,
    .embed = pl_cpu_embed,
    .rmsnorm = pl_cpu_rmsnorm,
    .add_rmsnorm = pl_cpu_add_rmsnorm,
    .matmul = pl_cpu_matmul,
    .rope = pl_cpu_rope,
    .kv_store = pl_cpu_kv_store,
    .attention = pl_cpu_attention,
    .silu_mul = pl_cpu_silu_mul,
    .gather_rows = pl_cpu_gather_rows,
    .copy_blocks = pl_cpu_copy_blocks,
    .matmul_group = pl_cpu_matmul_group,
    .add_bias = pl_cpu_add_bias,
    .moe_route = pl_cpu_moe_route,
    .moe_matmul = pl_cpu_moe_matmul,
    .moe_combine = pl_cpu_moe_combine,
    .gelu_mul = pl_cpu_gelu_mul,
    .scale = pl_cpu_scale,
};

/* Without the own GEMM (scalar CPUs), below gemm_min_rows activation rows streaming the
 * weights once through the GEMV kernel beats OpenBLAS (which repacks the weight panel on every
 * call). Measured with the AVX2 GEMV before AVX2 had the own GEMM (bench_kernels --only batch,
 * 2048x768, 2 threads, fastest of repeats: f32 GEMV/sgemm 0.91/1.19 ms at 16 rows, 1.37/1.48
 * at 32, 2.40/2.20 at 64; f16 1.15/1.63 at 32, 2.15/2.26 at 64); the scalar GEMV is slower. */
#define DEFAULT_GEMM_MIN_ROWS 48
/* With AVX-512, from this many rows the own register-tiled GEMM beats the GEMV kernel
 * (bench_kernels --only batch, 2048x768, fastest of repeats, 2 threads: f32 GEMV/own 335/358
 * us at 10 rows, 354/354 at 12, 425/355 at 16; f16 240/276 at 12, 325/279 at 16; one thread
 * puts the f32 crossing at 10 rows, f16 at 14). It beats OpenBLAS
 * from 4 rows up to 256 rows (bench_kernels --only gemm --threads 1, f32, GFLOP/s sgemm/own:
 * 66/104 at 32 rows, 94/129 at 64, 145/148 at 256), but not at 1024 f32 rows (170/161,
 * 160/130 for the 32000-row lm_head), where its 256-row blocks re-read the weights; f16 needs
 * OpenBLAS to widen every weight first, and the own kernel stays ahead or level there
 * (1024 rows: 136/155, 115/106, 89/97, 88/99). */
#define DEFAULT_OWN_MIN_ROWS_F32 12
#define DEFAULT_OWN_MIN_ROWS_HALF 14
#define DEFAULT_OWN_MAX_ROWS_F32 256
/* AVX2 (12 accumulators instead of 24): all three kernels land near 75-80% of the FMA peak
 * from 32 rows, so the margins are small; single-thread runs are the steady ones here (Zen 3,
 * bench_kernels --only batch --threads 1, 2048x768, GFLOP/s GEMV/own/sgemm): f32 16 rows
 * 60/67/49, 24 59/64/57, 32 69/73/64, 48 72/79/72, 64 75/79/73-77, 128 55-77/63-77/76-80;
 * f16 24 77/67/58, 32 78/76/63, 48 80/54-80/71, 64 80/81/74-75, 96 80/81/81, 128 75-78/61-78
 * /82-83. The f16 GEMV widens in registers, which keeps it ahead of the own GEMM's copy up
 * to 48 rows. In the engine the f32 GEMV stays ahead at 32 rows too (issue 8's throughput
 * command, 32 sequences, alternating builds: GEMV 457/453/505, own 450/435/458 total
 * tokens/s), so the own GEMM starts at 48 rows for both. */
/* Quantised weights (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K): below this many activation rows the
 * integer GEMV (qgemv.c), from it the int8 GEMM (qgemm.c), whose panels cost an unpacking of
 * the weights per call that the GEMV does not pay (measured here: 0.10-0.17 TSC cycles a
 * weight on one core, what 10-17 rows of its products cost). With AVX-512 VNNI, Intel Xeon
 * with AMX (bench_kernels --only qgemm --threads 1, fastest of repeats, GOPS GEMV / GEMM
 * with its 512-bit kernel, 2048x768 and 768x2048):
 *   Q8_0 at 8 rows 137/112, 131/127; 12 rows 141/158, 135/168; 16 rows 144/186, 138/201
 *   Q4_0 at 8 rows 173/135, 168/130; 12 rows 175/176, 172/170; 16 rows 176/209, 174/200
 *   Q4_K at 8 rows 131/152, 125/157; 12 rows 122/197, 138/205
 *   Q5_K at 8 rows 111/103; 12 rows 111/141;  Q6_K at 8 rows 104/90; 12 rows 114/123
 * Without VNNI the int8 GEMM's AVX2 kernel (vpmaddubsw) takes over from the rows where the
 * own GEMM on dequantised chunks used to (measured on a Zen 4 with that kernel forced: it
 * crossed the GEMV at 8-24 rows); the int8 kernel is faster than that GEMM, so these are
 * upper bounds. */
static const int VNNI_QGEMM_MIN_ROWS[5] = {12, 12, 8, 12, 12};
static const int AVX2_QGEMM_MIN_ROWS[5] = {24, 12, 24, 12, 8};
#define AVX2_OWN_MIN_ROWS_F32 48
#define AVX2_OWN_MIN_ROWS_HALF 48
#define AVX2_OWN_MAX_ROWS 96

/* Whether OpenBLAS runs AVX-512 kernels. Debian 12's OpenBLAS 0.3.21 predates AMD Zen 4/5 and
 * takes its AVX2 (Haswell) kernels there: on a Zen 5 EPYC, 2 threads, sgemm 56-89 GFLOP/s at
 * 1024 rows of the stories110m matrices against 160-179 with OPENBLAS_CORETYPE=SkylakeX, where
 * the own AVX-512 GEMM reaches 86-165 (bench_kernels --only gemm --rows 1024). */
static bool blas_runs_avx512(void) {
    const char *n = openblas_get_corename();
    return n && (strcasestr(n, "skylakex") || strcasestr(n, "cooperlake") ||
                 strcasestr(n, "sapphirerapids"));
}

pl_status pl_cpu_backend_create_isa(const pl_backend_options *opt, pl_cpu_isa isa,
                                    pl_backend **out) {
    if (!out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "backend cpu: out is NULL");
    *out = NULL;
    pl_dtype kv = opt ? opt->kv_dtype : PL_DTYPE_AUTO;
    int n_threads = opt ? opt->n_threads : 0;
    if (kv == PL_DTYPE_AUTO) kv = PL_KV_DTYPE_AUTO;
    if (kv != PL_DTYPE_F32 && kv != PL_DTYPE_F16)
        return pl_fail(PL_ERR_UNSUPPORTED, "backend cpu: kv_dtype %s is not supported (f32, f16)",
                       pl_dtype_name(kv));
    if (n_threads < 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "backend cpu: n_threads %d < 0", n_threads);

    pl_backend *be = pl_calloc(1, sizeof *be);
    pl_cpu_ctx *c = pl_calloc(1, sizeof *c);
    if (!be || !c) {
        pl_free(be);
        pl_free(c);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "backend cpu: no memory");
    }
    be->ops = &cpu_ops;
    be->ctx = c;
    be->is_host = true;
    be->wtype_bit = PL_WTYPE_ON_CPU;
    be->kv_dtype = kv;
    pl_cpu_isa best = pl_cpu_detect_isa();
    c->isa = isa < best ? isa : best;
    c->vnni = c->isa == PL_CPU_ISA_AVX512 && has_avx512_vnni();
    c->avxvnni = c->isa >= PL_CPU_ISA_AVX2 && has_avxvnni();
#ifdef PL_CPU_X86
    c->amx = c->isa == PL_CPU_ISA_AVX512 && pl_qg_amx_available();
#endif
    for (int q = 0; q < PL_CPU_MM_CLASSES - 2; q++)
        c->qgemm_min_rows[2 + q] = c->vnni ? VNNI_QGEMM_MIN_ROWS[q] : AVX2_QGEMM_MIN_ROWS[q];
    c->gemm_min_rows = DEFAULT_GEMM_MIN_ROWS;
    c->own_min_rows[0] = DEFAULT_OWN_MIN_ROWS_F32;
    c->own_min_rows[1] = DEFAULT_OWN_MIN_ROWS_HALF;
    c->own_max_rows[0] = DEFAULT_OWN_MAX_ROWS_F32;
    if (c->isa == PL_CPU_ISA_AVX2) {
        c->own_min_rows[0] = AVX2_OWN_MIN_ROWS_F32;
        c->own_min_rows[1] = AVX2_OWN_MIN_ROWS_HALF;
        for (int k = 0; k < PL_CPU_MM_CLASSES; k++) c->own_max_rows[k] = AVX2_OWN_MAX_ROWS;
    }
    if (c->isa == PL_CPU_ISA_AVX512 && !blas_runs_avx512()) {
        c->own_max_rows[0] = 0; /* the own GEMM beats OpenBLAS's AVX2 kernels at every size */
        pl_log(PL_LOG_INFO, "backend cpu: OpenBLAS runs its %s kernels on this AVX-512 CPU; "
               "large f32 matmuls use the own GEMM (OPENBLAS_CORETYPE=SkylakeX selects "
               "OpenBLAS's AVX-512 kernels)", openblas_get_corename());
    }

    pl_status st = pl_threadpool_create(n_threads, &c->pool);
    if (st != PL_OK) {
        pl_free(c);
        pl_free(be);
        return pl_fail_prefix(st, "backend cpu");
    }
    c->n_threads = pl_threadpool_size(c->pool);
    c->scratch = pl_calloc((size_t)c->n_threads, sizeof *c->scratch);
    if (!c->scratch) {
        cpu_destroy(be);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "backend cpu: no memory for scratch table");
    }
    /* Tasks call sgemm on their own tile; OpenBLAS threads would fight the pool for cores. */
    openblas_set_num_threads(1);
    *out = be;
    return PL_OK;
}

pl_status pl_backend_cpu_create(const pl_backend_options *opt, pl_backend **out) {
    return pl_cpu_backend_create_isa(opt, PL_CPU_ISA_AVX512, out);
}
