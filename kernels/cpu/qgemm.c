/*
 * kernels/cpu/qgemm.c - the int8 GEMM for batches of quantised products (prefill, batched
 * decode): the driver. The parts are in qgemm.h (the arithmetic and the panel layout),
 * qgemm_pack.c (weights to panels), qgemm_kern.c and qgemm_amx.c (the micro-kernels).
 *
 * The activations arrive quantised once for the whole call (pl_cpu_qact, shared by every
 * part whatever its type). Each part's output columns (weight rows) are cut into panels of
 * the kernel's width; a panel is one work item: its weight rows are unpacked to int8 levels
 * once, into the thread's scratch (L2-sized), and then every activation row runs against it
 * in tiles of the kernel's height. The items of all parts are cut into one contiguous range
 * per thread (ranges.h: stealing from the others' backs when done), so the threads split the
 * output columns and each weight byte is read from memory once per call.
 */
#include <string.h>

#include "kernels/cpu/qgemm.h"
#include "kernels/cpu/ranges.h"
#include "util/alloc.h"
#include "util/dtype.h"

int pl_qg_nr(pl_cpu_qgemm_kernel k) {
    switch (k) {
    case PL_QGEMM_VNNI512: return 48;
    case PL_QGEMM_AMX: return 32;
    default: return 16;
    }
}

int pl_qg_mr(pl_cpu_qgemm_kernel k) { return k == PL_QGEMM_AMX ? 32 : 4; }

const char *pl_cpu_qgemm_kernel_name(pl_cpu_qgemm_kernel k) {
    static const char *const names[PL_QGEMM_COUNT] = {"auto",    "scalar",  "avx2",
                                                      "avxvnni", "vnni512", "amx"};
    return k >= 0 && k < PL_QGEMM_COUNT ? names[k] : "?";
}

bool pl_cpu_qgemm_usable(const pl_cpu_ctx *c, pl_cpu_qgemm_kernel k) {
    switch (k) {
    case PL_QGEMM_SCALAR: return true;
    case PL_QGEMM_AVX2: return c->isa >= PL_CPU_ISA_AVX2;
    case PL_QGEMM_AVXVNNI: return c->isa >= PL_CPU_ISA_AVX2 && c->avxvnni;
    case PL_QGEMM_VNNI512: return c->isa == PL_CPU_ISA_AVX512 && c->vnni;
    case PL_QGEMM_AMX: return c->isa == PL_CPU_ISA_AVX512 && c->amx;
    default: return false;
    }
}

/* AMX only where it is not behind the 512-bit VNNI kernel: not for Q6_K, whose scales change
 * every 16 k, so each tile product is half as deep and its scaling as costly.
 * bench_kernels --only qgemm --threads 1 --rows 64,512, Sapphire Rapids class Xeon, GOPS
 * VNNI512 / AMX over the four stories110m/TinyLlama shapes at 512 rows: Q8_0 327-411 /
 * 416-454, Q4_0 323-400 / 400-455, Q4_K 344-410 / 360-433, Q5_K 346-407 / 357-424, Q6_K
 * 299-348 / 248-299 (at 64 rows AMX leads the others by 2-18% and trails on Q6_K by 8-13%). */
static bool amx_suits(const pl_cpu_qgemm_part *parts, int n_parts) {
    for (int p = 0; p < n_parts; p++)
        if (parts[p].wt == PL_WTYPE_Q6_K) return false;
    return true;
}

pl_cpu_qgemm_kernel pl_cpu_qgemm_pick(const pl_cpu_ctx *c, const pl_cpu_qgemm_part *parts,
                                      int n_parts) {
    if (c->qgemm_force != PL_QGEMM_AUTO && pl_cpu_qgemm_usable(c, c->qgemm_force))
        return c->qgemm_force;
    for (int k = PL_QGEMM_COUNT - 1; k > PL_QGEMM_SCALAR; k--) {
        if (k == PL_QGEMM_AMX && !amx_suits(parts, n_parts)) continue;
        if (pl_cpu_qgemm_usable(c, (pl_cpu_qgemm_kernel)k)) return (pl_cpu_qgemm_kernel)k;
    }
    return PL_QGEMM_SCALAR;
}

typedef struct qg_job {
    pl_cpu_ctx *c;
    const pl_cpu_qact *a;
    const int32_t *rows;
    int n_rows, K;
    const pl_cpu_qgemm_part *parts;
    int n_parts;
    int first_item[PL_MATMUL_MAX_PARTS + 1]; /* part p's panels: first_item[p] .. [p+1]-1 */
    pl_cpu_qgemm_kernel k;
    int nr, mr;
    pl_qg_amx_rows amx; /* AMX: the rows gathered */
    pl_ranges items;
} qg_job;

/* Whether kernel k reads signed levels for type t. */
static bool signed_panel(pl_cpu_qgemm_kernel k, pl_wtype t) {
    return k == PL_QGEMM_AMX || k == PL_QGEMM_SCALAR || (k == PL_QGEMM_AVX2 && t == PL_WTYPE_Q8_0);
}

static void run_kernel(const qg_job *J, const pl_qg_panel *P, const pl_qg_tile *T) {
    switch (J->k) {
#ifdef PL_CPU_X86
    case PL_QGEMM_AVX2: pl_qg_kernel_avx2(P, T); break;
    case PL_QGEMM_AVXVNNI: pl_qg_kernel_avxvnni(P, T); break;
    case PL_QGEMM_VNNI512: pl_qg_kernel_vnni512(P, T); break;
#endif
    default: pl_qg_kernel_scalar(P, T); break;
    }
}

static void qg_item(const qg_job *J, int item, int thread) {
    int p = 0;
    while (item >= J->first_item[p + 1]) p++;
    const pl_cpu_qgemm_part *part = &J->parts[p];
    const int n0 = (item - J->first_item[p]) * J->nr;
    const int n_valid = part->d_out - n0 < J->nr ? part->d_out - n0 : J->nr;
    uint64_t row_bytes;
    pl_wtype_bytes(part->wt, (uint64_t)J->K, &row_bytes);
    unsigned char *buf = (unsigned char *)J->c->scratch[thread];
    pl_qg_panel P;
    pl_qg_pack(J->c->isa, (const uint8_t *)part->w + (size_t)n0 * row_bytes, (size_t)row_bytes,
               part->wt, n_valid, J->nr, J->K, signed_panel(J->k, part->wt), buf, &P);
#ifdef PL_CPU_X86
    if (J->k == PL_QGEMM_AMX) {
        pl_qg_amx_config(P.kb);
        pl_qg_amx_panel(&P, &J->amx, part->out + n0, part->ldo,
                        buf + pl_qg_panel_bytes(J->nr, J->K));
        return;
    }
#endif
    /* chunks of k outer: a chunk of the panel stays in L1 while every tile passes over it */
    for (int k0 = 0; k0 < J->K; k0 += PL_QG_KC)
    for (int m0 = 0; m0 < J->n_rows; m0 += J->mr) {
        pl_qg_tile T;
        T.n_rows = J->n_rows - m0 < J->mr ? J->n_rows - m0 : J->mr;
        T.k0 = k0;
        T.k1 = J->K - k0 < PL_QG_KC ? J->K : k0 + PL_QG_KC;
        T.accumulate = k0 > 0;
        for (int m = 0; m < T.n_rows; m++) {
            int r = J->rows ? J->rows[m0 + m] : m0 + m;
            T.q[m] = pl_cpu_qact_q(J->a, r);
            T.d[m] = pl_cpu_qact_d(J->a, r);
            T.ds[m] = pl_cpu_qact_ds(J->a, r);
            T.sn[m] = P.kb == 16 ? pl_cpu_qact_sn16(J->a, r) : pl_cpu_qact_sn32(J->a, r);
            T.out[m] = part->out + (size_t)(m0 + m) * part->ldo + n0;
        }
        run_kernel(J, &P, &T);
    }
}

static void qg_task(void *arg, int r, int thread) {
    qg_job *J = arg;
    bool own;
    for (int item; (item = pl_ranges_next(&J->items, r, &own)) >= 0;) qg_item(J, item, thread);
#ifdef PL_CPU_X86
    if (J->k == PL_QGEMM_AMX) pl_qg_amx_release();
#endif
}

/* AMX: the call's rows copied to one block, padded to whole 32-row tiles with zero rows, then
 * their scales (d, ds: K/32 floats a row). */
static pl_status gather_rows(pl_cpu_ctx *c, qg_job *J) {
    const size_t stride = ((size_t)J->K + 63) & ~(size_t)63, nd = (size_t)J->K / 32;
    const size_t n_pad = (size_t)(J->n_rows + J->mr - 1) / J->mr * J->mr;
    const size_t q_bytes = n_pad * stride;
    const size_t need = q_bytes + 2 * (size_t)J->n_rows * nd * sizeof(float);
    if (need > c->qx_cap) {
        size_t cap = (need + 65535) & ~(size_t)65535;
        unsigned char *p = pl_calloc_aligned(cap, false);
        if (!p)
            return pl_fail(PL_ERR_OUT_OF_MEMORY, "cpu backend: no memory for %zu bytes of "
                           "quantised activations", cap);
        pl_free_aligned(c->qx);
        c->qx = p;
        c->qx_cap = cap;
    }
    float *d = (float *)(c->qx + q_bytes), *ds = d + (size_t)J->n_rows * nd;
    for (size_t m = 0; m < n_pad; m++) {
        unsigned char *dst = c->qx + m * stride;
        if (m >= (size_t)J->n_rows) {
            memset(dst, 0, (size_t)J->K);
            continue;
        }
        int r = J->rows ? J->rows[m] : (int)m;
        memcpy(dst, pl_cpu_qact_q(J->a, r), (size_t)J->K);
        memcpy(d + m * nd, pl_cpu_qact_d(J->a, r), nd * sizeof(float));
        memcpy(ds + m * nd, pl_cpu_qact_ds(J->a, r), nd * sizeof(float));
    }
    J->amx = (pl_qg_amx_rows){.n_rows = J->n_rows, .xq = (const int8_t *)c->qx,
                              .xq_stride = stride, .d = d, .ds = ds};
    return PL_OK;
}

pl_status pl_cpu_qgemm(pl_cpu_ctx *c, const pl_cpu_qact *a, const int32_t *rows, int n_rows,
                       const pl_cpu_qgemm_part *parts, int n_parts) {
    if (n_parts < 1 || n_parts > PL_MATMUL_MAX_PARTS)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "int8 GEMM: %d parts (1..%d)", n_parts,
                       PL_MATMUL_MAX_PARTS);
    if (!(a->layouts & PL_CPU_QA_SUMS))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "int8 GEMM: activations without block sums");
    if (n_rows <= 0) return PL_OK;
    qg_job J = {.c = c, .a = a, .rows = rows, .n_rows = n_rows, .K = a->K, .parts = parts,
                .n_parts = n_parts, .k = pl_cpu_qgemm_pick(c, parts, n_parts)};
    J.nr = pl_qg_nr(J.k);
    J.mr = pl_qg_mr(J.k);
    for (int p = 0; p < n_parts; p++) {
        if (!pl_wtype_is_quant(parts[p].wt) || a->K % pl_wtype_traits_of(parts[p].wt)->block_elems)
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "int8 GEMM: part %d: type %s with d_in %d",
                           p, pl_wtype_name(parts[p].wt), a->K);
        J.first_item[p + 1] = J.first_item[p] + (parts[p].d_out + J.nr - 1) / J.nr;
    }
    if (J.first_item[n_parts] == 0) return PL_OK;
    size_t scratch = pl_qg_panel_bytes(J.nr, J.K) + PL_QG_AMX_SCRATCH;
    PL_TRY(pl_cpu_reserve(c, (scratch + sizeof(float) - 1) / sizeof(float), 0));
    if (J.k == PL_QGEMM_AMX) PL_TRY(gather_rows(c, &J));
    pl_ranges_init(&J.items, J.first_item[n_parts], c->n_threads);
    if (J.items.n <= 1)
        qg_task(&J, 0, 0);
    else
        pl_threadpool_run(c->pool, J.items.n, qg_task, &J);
    return PL_OK;
}
