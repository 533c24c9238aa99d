/*
 * tests/kernels/test_qgemm.c - the int8 GEMM (kernels/cpu/qgemm.c) with each of its kernels
 * forced: portable C, AVX2, AVX-VNNI, AVX-512 VNNI and AMX, each where this machine (and its
 * OS, for AMX) has it; a kernel it lacks is skipped and named in the log.
 *
 * - Every kernel against ref within the activation-rounding bound (TOL_QMATMUL), on shapes
 *   whose columns end inside a panel and rows that end inside a tile (AMX: 32 rows).
 * - Every kernel bit for bit equal to the portable one: the integer block sums are exact and
 *   the scales are applied in one f32 order (qgemm.h), so no kernel may differ at all.
 * - Blocks at the extremes (largest scales, levels at both ends, Q8_0's -128, Q6_K scale -128)
 *   where a 16-bit pair sum could saturate.
 * - A subset of the activation rows (the entry point grouped expert products use) gives those
 *   rows' results of the whole call.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/qgemm.h"
#include "tests/kernels/kernels_test.h"
#include "util/dtype.h"

static const pl_wtype QTYPES[] = {PL_WTYPE_Q8_0, PL_WTYPE_Q4_0, PL_WTYPE_Q4_K, PL_WTYPE_Q5_K,
                                  PL_WTYPE_Q6_K};
enum { N_QTYPES = sizeof QTYPES / sizeof QTYPES[0] };

/* The widest cpu backend of the env at 2 threads (every kernel the machine has is usable on
 * it); the kernels of lower ISAs also run there, forced. */
static pl_backend *widest(pl_kt_env *e) {
    pl_backend *be = NULL;
    for (int b = 0; b < e->n_cpu; b++)
        if (strstr(e->name[b], "/t2")) be = e->cpu[b];
    cr_assert_not_null(be);
    return be;
}

/* Runs the GEMM with kernel k through the backend's matmul (int8 GEMM path forced). */
static void run(pl_backend *be, pl_cpu_qgemm_kernel k, float *out, const float *x, const void *w,
                pl_wtype t, int rows, int d_in, int d_out) {
    pl_cpu_ctx *c = be->ctx;
    c->mm_force = PL_CPU_MM_QGEMM;
    c->qgemm_force = k;
    pl_cpu_qgemm_part part = {.wt = t};
    cr_assert_eq(pl_cpu_qgemm_pick(c, &part, 1), k);
    cr_assert_eq(be->ops->matmul(be, out, x, w, t, rows, d_in, d_out), PL_OK, "%s",
                 pl_last_error());
    c->mm_force = PL_CPU_MM_AUTO;
    c->qgemm_force = PL_QGEMM_AUTO;
}

static bool usable_or_skip(pl_backend *be, pl_cpu_qgemm_kernel k) {
    if (pl_cpu_qgemm_usable(be->ctx, k)) return true;
    static bool said[PL_QGEMM_COUNT];
    if (!said[k]) cr_log_info("int8 GEMM kernel %s: not on this machine, skipped",
                              pl_cpu_qgemm_kernel_name(k));
    said[k] = true;
    return false;
}

/* Left to choose, a call takes AMX unless one of its parts is Q6_K, where the 512-bit VNNI
 * kernel is the faster (qgemm.c). */
Test(qgemm, auto_pick_follows_the_types) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_cpu_ctx *c = widest(&e)->ctx;
    pl_cpu_qgemm_part q8 = {.wt = PL_WTYPE_Q8_0}, q4k = {.wt = PL_WTYPE_Q4_K}, mixed[2] = {{.wt = PL_WTYPE_Q4_0},
                                                              {.wt = PL_WTYPE_Q6_K}};
    bool amx = pl_cpu_qgemm_usable(c, PL_QGEMM_AMX);
    bool vnni = pl_cpu_qgemm_usable(c, PL_QGEMM_VNNI512);
    if (amx && vnni) {
        cr_assert_eq(pl_cpu_qgemm_pick(c, &q8, 1), PL_QGEMM_AMX);
        cr_assert_eq(pl_cpu_qgemm_pick(c, &q4k, 1), PL_QGEMM_AMX);
        cr_assert_eq(pl_cpu_qgemm_pick(c, mixed, 1), PL_QGEMM_AMX);
        cr_assert_eq(pl_cpu_qgemm_pick(c, mixed, 2), PL_QGEMM_VNNI512);
        cr_assert_eq(pl_cpu_qgemm_pick(c, &mixed[1], 1), PL_QGEMM_VNNI512);
    } else {
        cr_log_info("AMX or AVX-512 VNNI missing: only the non-AMX picks are checked");
        cr_assert_neq(pl_cpu_qgemm_pick(c, &mixed[1], 1), PL_QGEMM_AMX);
    }
    pl_kt_env_fini(&e);
}

/* (d_in, d_out) per type family; rows. d_out 17 and 50 end inside every panel width (16, 32,
 * 48), 100 spans several panels; rows 33 and 40 take a second AMX tile, partly filled, and 100
 * four, through which the AMX kernel pipelines its groups. */
static const int SHAPES32[][2] = {{64, 17}, {224, 50}, {512, 100}};
static const int SHAPES256[][2] = {{256, 17}, {512, 50}, {768, 100}};
static const int ROWS[] = {1, 2, 3, 4, 5, 16, 17, 33, 40, 100};
enum { N_ROWS = sizeof ROWS / sizeof ROWS[0] };

static void check_kernels(pl_wtype t, uint64_t seed) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_backend *be = widest(&e);
    pl_test_rng r;
    pl_test_rng_seed(&r, seed);
    bool k256 = t != PL_WTYPE_Q8_0 && t != PL_WTYPE_Q4_0;
    for (int si = 0; si < 3; si++) {
        int d_in = k256 ? SHAPES256[si][0] : SHAPES32[si][0];
        int d_out = k256 ? SHAPES256[si][1] : SHAPES32[si][1];
        float *wf;
        void *w = pl_kt_rand_weights(&r, (size_t)d_in * d_out, t, &wf);
        for (int ri = 0; ri < N_ROWS; ri++) {
            int rows = ROWS[ri];
            size_t n = (size_t)rows * d_out;
            float *x = pl_kt_rand(&r, (size_t)rows * d_in, 1.0f);
            float *want = malloc(n * 4), *bound = malloc(n * 4), *base = malloc(n * 4),
                  *got = malloc(n * 4);
            cr_assert_eq(e.ref->ops->matmul(e.ref, want, x, w, t, rows, d_in, d_out), PL_OK);
            pl_kt_qact_bound(x, wf, rows, d_in, d_out, bound);
            run(be, PL_QGEMM_SCALAR, base, x, w, t, rows, d_in, d_out);
            for (int k = PL_QGEMM_SCALAR; k < PL_QGEMM_COUNT; k++) {
                if (!usable_or_skip(be, (pl_cpu_qgemm_kernel)k)) continue;
                memset(got, 0xff, n * 4); /* NaN: every output must be written */
                run(be, (pl_cpu_qgemm_kernel)k, got, x, w, t, rows, d_in, d_out);
                char what[128];
                snprintf(what, sizeof what, "%s kernel %s rows %d %dx%d", pl_wtype_name(t),
                         pl_cpu_qgemm_kernel_name((pl_cpu_qgemm_kernel)k), rows, d_out, d_in);
                cr_assert(pl_kt_q_close(what, want, got, bound, n), "%s", what);
                for (size_t i = 0; i < n; i++)
                    cr_assert(memcmp(&got[i], &base[i], 4) == 0,
                              "%s: output %zu is %.9g, the portable kernel's %.9g", what, i,
                              (double)got[i], (double)base[i]);
            }
            free(x), free(want), free(bound), free(base), free(got);
        }
        free(w), free(wf);
    }
    pl_kt_env_fini(&e);
}

Test(qgemm, q8_0) { check_kernels(PL_WTYPE_Q8_0, 91); }
Test(qgemm, q4_0) { check_kernels(PL_WTYPE_Q4_0, 92); }
Test(qgemm, q4_k) { check_kernels(PL_WTYPE_Q4_K, 93); }
Test(qgemm, q5_k) { check_kernels(PL_WTYPE_Q5_K, 94); }
Test(qgemm, q6_k) { check_kernels(PL_WTYPE_Q6_K, 95); PL_ASSERT_NO_LEAKS(); }

/* Extreme blocks (as test_qmatmul's extreme_blocks): no kernel may overflow or saturate. */
Test(qgemm, extreme_blocks) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_backend *be = widest(&e);
    pl_test_rng r;
    pl_test_rng_seed(&r, 96);
    const int d_in = 512, d_out = 20, rows = 5;
    for (int ti = 0; ti < N_QTYPES; ti++) {
        pl_wtype t = QTYPES[ti];
        const pl_wtype_traits *tr = pl_wtype_traits_of(t);
        uint64_t bytes;
        cr_assert(pl_wtype_bytes(t, (uint64_t)d_in * d_out, &bytes));
        uint8_t *w = malloc(bytes);
        for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)pl_test_rng_u64(&r);
        size_t nb = (size_t)d_in * d_out / (size_t)tr->block_elems;
        for (size_t bi = 0; bi < nb; bi++) {
            uint8_t *blk = w + bi * (size_t)tr->block_bytes;
            uint16_t big = (uint16_t)(bi % 2 ? 0x5bff : 0xdbff); /* +-255.9 */
            if (t == PL_WTYPE_Q6_K) {
                memcpy(blk + 208, &big, 2);
                if (bi % 3 == 0) memset(blk + 192, 0x80, 16); /* scale -128 */
                if (bi % 3 == 1) memset(blk, 0xff, 192);      /* levels 63 */
            } else {
                memcpy(blk, &big, 2);
                if (t == PL_WTYPE_Q4_K || t == PL_WTYPE_Q5_K) memcpy(blk + 2, &big, 2);
                if (t == PL_WTYPE_Q8_0 && bi % 3 == 0) memset(blk + 2, 0x80, 32); /* -128 */
                if (t == PL_WTYPE_Q8_0 && bi % 3 == 1) memset(blk + 2, 0x7f, 32); /* 127 */
            }
        }
        float *wf = malloc((size_t)d_in * d_out * 4);
        tr->to_f32(w, wf, (size_t)d_in * d_out);
        float *x = pl_kt_rand(&r, (size_t)rows * d_in, 1.0f);
        /* a block of +-127 after rounding: every activation at the end of the scale */
        for (int i = 0; i < 32; i++) x[i] = i % 2 ? 1000.0f : -1000.0f, x[d_in + 64 + i] *= 1e-4f;
        for (int i = 0; i < 32; i++) x[2 * d_in + 32 + i] = 500.0f;
        size_t n = (size_t)rows * d_out;
        float *want = malloc(n * 4), *got = malloc(n * 4), *bound = malloc(n * 4);
        cr_assert_eq(e.ref->ops->matmul(e.ref, want, x, w, t, rows, d_in, d_out), PL_OK);
        pl_kt_qact_bound(x, wf, rows, d_in, d_out, bound);
        for (size_t i = 0; i < n; i++) bound[i] += 1e-5f * fabsf(want[i]) + 1.0f;
        for (int k = PL_QGEMM_SCALAR; k < PL_QGEMM_COUNT; k++) {
            if (!usable_or_skip(be, (pl_cpu_qgemm_kernel)k)) continue;
            run(be, (pl_cpu_qgemm_kernel)k, got, x, w, t, rows, d_in, d_out);
            for (size_t i = 0; i < n; i++)
                cr_assert(fabsf(got[i] - want[i]) <= bound[i], "%s kernel %s: %zu %g vs %g",
                          tr->name, pl_cpu_qgemm_kernel_name((pl_cpu_qgemm_kernel)k), i,
                          (double)got[i], (double)want[i]);
        }
        free(w), free(wf), free(x), free(want), free(got), free(bound);
    }
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

/* pl_cpu_qgemm on a list of activation rows (out of order, repeated) gives, bit for bit, those
 * rows' outputs of the call over all rows, with every kernel; two parts of different types
 * in one call. */
Test(qgemm, row_subset) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_backend *be = widest(&e);
    pl_cpu_ctx *c = be->ctx;
    pl_test_rng r;
    pl_test_rng_seed(&r, 97);
    enum { ROWS_ = 37, D_IN = 512, N_SUB = 6 };
    const int d_out[2] = {70, 33};
    const pl_wtype types[2] = {PL_WTYPE_Q4_K, PL_WTYPE_Q6_K};
    const int32_t sub[N_SUB] = {36, 0, 5, 5, 17, 33};
    void *w[2];
    float *all[2], *some[2];
    for (int p = 0; p < 2; p++) {
        w[p] = pl_kt_rand_weights(&r, (size_t)D_IN * d_out[p], types[p], NULL);
        all[p] = malloc((size_t)ROWS_ * d_out[p] * 4);
        some[p] = malloc((size_t)N_SUB * d_out[p] * 4);
    }
    float *x = pl_kt_rand(&r, (size_t)ROWS_ * D_IN, 1.0f);
    for (int k = PL_QGEMM_SCALAR; k < PL_QGEMM_COUNT; k++) {
        if (!usable_or_skip(be, (pl_cpu_qgemm_kernel)k)) continue;
        c->qgemm_force = (pl_cpu_qgemm_kernel)k;
        pl_cpu_qact qa;
        cr_assert_eq(pl_cpu_qact_quantize(c, x, ROWS_, D_IN, PL_CPU_QA_SUMS, &qa), PL_OK);
        pl_cpu_qgemm_part parts[2];
        for (int p = 0; p < 2; p++)
            parts[p] = (pl_cpu_qgemm_part){all[p], (size_t)d_out[p], w[p], types[p], d_out[p]};
        cr_assert_eq(pl_cpu_qgemm(c, &qa, NULL, ROWS_, parts, 2), PL_OK, "%s", pl_last_error());
        for (int p = 0; p < 2; p++)
            parts[p] = (pl_cpu_qgemm_part){some[p], (size_t)d_out[p], w[p], types[p], d_out[p]};
        cr_assert_eq(pl_cpu_qgemm(c, &qa, sub, N_SUB, parts, 2), PL_OK, "%s", pl_last_error());
        for (int p = 0; p < 2; p++)
            for (int i = 0; i < N_SUB; i++)
                cr_assert(memcmp(some[p] + (size_t)i * d_out[p], all[p] + (size_t)sub[i] * d_out[p],
                                 (size_t)d_out[p] * 4) == 0,
                          "kernel %s part %d: subset row %d (row %d) differs",
                          pl_cpu_qgemm_kernel_name((pl_cpu_qgemm_kernel)k), p, i, sub[i]);
    }
    c->qgemm_force = PL_QGEMM_AUTO;
    /* activations without the block sums are refused */
    pl_cpu_qact qa;
    cr_assert_eq(pl_cpu_qact_quantize(c, x, 2, D_IN, 0, &qa), PL_OK);
    pl_cpu_qgemm_part part = {some[0], (size_t)d_out[0], w[0], types[0], d_out[0]};
    cr_assert_eq(pl_cpu_qgemm(c, &qa, NULL, 2, &part, 1), PL_ERR_INVALID_ARGUMENT);
    for (int p = 0; p < 2; p++) free(w[p]), free(all[p]), free(some[p]);
    free(x);
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}
