/*
 * tests/kernels/test_qmatmul.c - matmul of the block-quantised weight types: every cpu
 * variant (scalar, AVX2, AVX-512 with and without its VNNI kernels; 1-3 threads) and every
 * path (the integer GEMV, the int8 GEMM with its best kernel, the own GEMM and OpenBLAS on
 * dequantised chunks, and the automatic choice) against ref, which dequantises the same
 * blocks to f32 (util/quant.h) and keeps f32 activations. test_qgemm.c runs every kernel of
 * the int8 GEMM.
 *
 * The GEMV and the int8 GEMM quantise the activations (8 bits per block of 32), so their
 * outputs may move by the bound of tests/kernels/tolerances.h (TOL_QMATMUL), computed here
 * for every output.
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
static const int ROWS[] = {1, 2, 3, 4, 5, 7, 9, 16, 33};
enum { N_ROWS = sizeof ROWS / sizeof ROWS[0] };

/* (d_in, d_out): whole blocks of 32 (an odd number of them: the 512-bit kernels' last block
 * alone), of 256 (the K-quants), fewer outputs than the GEMV's 4 quarters, a tail. */
static const int SHAPES32[][2] = {{32, 17}, {96, 3}, {224, 65}, {768, 255}};
static const int SHAPES256[][2] = {{256, 17}, {512, 3}, {768, 130}};

/* Every cpu backend, every path (and on AVX-512 the AVX2 kernels too: vnni off). */
static void check_type(pl_wtype t, const int (*shapes)[2], int n_shapes, uint64_t seed) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, seed);
    for (int si = 0; si < n_shapes; si++) {
        int d_in = shapes[si][0], d_out = shapes[si][1];
        float *wf;
        void *w = pl_kt_rand_weights(&r, (size_t)d_in * d_out, t, &wf);
        for (int ri = 0; ri < N_ROWS; ri++) {
            int rows = ROWS[ri];
            float *x = pl_kt_rand(&r, (size_t)rows * d_in, 1.0f);
            size_t n = (size_t)rows * d_out;
            float *want = malloc(n * 4), *got = malloc(n * 4), *bound = malloc(n * 4);
            cr_assert_eq(e.ref->ops->matmul(e.ref, want, x, w, t, rows, d_in, d_out), PL_OK);
            pl_kt_qact_bound(x, wf, rows, d_in, d_out, bound);
            for (int b = 0; b < e.n_cpu; b++) {
                pl_cpu_ctx *c = e.cpu[b]->ctx;
                bool had_vnni = c->vnni;
                for (int v = had_vnni; v >= 0; v--) {
                    c->vnni = v;
                    for (int m = PL_CPU_MM_AUTO; m <= PL_CPU_MM_QGEMM; m++) {
                        c->mm_force = (pl_cpu_mm_path)m;
                        memset(got, 0xff, n * 4); /* NaN: every output must be written */
                        cr_assert_eq(e.cpu[b]->ops->matmul(e.cpu[b], got, x, w, t, rows, d_in,
                                                           d_out),
                                     PL_OK, "%s", pl_last_error());
                        char what[128];
                        snprintf(what, sizeof what, "%s %s%s rows %d %dx%d path %d", e.name[b],
                                 pl_wtype_name(t), v ? "" : " (no vnni)", rows, d_out, d_in, m);
                        cr_assert(pl_kt_q_close(what, want, got, bound, n), "%s", what);
                        /* exact weights, f32 activations (the own GEMM falls back to the
                         * GEMV without AVX2) */
                        if ((m == PL_CPU_MM_OWN && c->isa >= PL_CPU_ISA_AVX2) ||
                            m == PL_CPU_MM_BLAS)
                            cr_assert(pl_kt_close(what, want, got, n, TOL_MATMUL), "%s", what);
                    }
                }
                c->vnni = had_vnni;
                c->mm_force = PL_CPU_MM_AUTO;
            }
            free(x), free(want), free(got), free(bound);
        }
        free(w), free(wf);
    }
    pl_kt_env_fini(&e);
}

Test(qmatmul, q8_0) { check_type(PL_WTYPE_Q8_0, SHAPES32, 4, 81); }
Test(qmatmul, q4_0) { check_type(PL_WTYPE_Q4_0, SHAPES32, 4, 82); }
Test(qmatmul, q4_k) { check_type(PL_WTYPE_Q4_K, SHAPES256, 3, 83); }
Test(qmatmul, q5_k) { check_type(PL_WTYPE_Q5_K, SHAPES256, 3, 84); }
Test(qmatmul, q6_k) { check_type(PL_WTYPE_Q6_K, SHAPES256, 3, 85); PL_ASSERT_NO_LEAKS(); }

/* Weights with extreme blocks: the largest f16 scales, levels at both ends, negative Q6_K
 * scales, K-quant mins at 63; activations with a large and a tiny block. The integer sums
 * must not overflow or saturate (vpmaddubsw pairs of 2 x 63 x 127 for Q6_K; Q8_0's -128). */
Test(qmatmul, extreme_blocks) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 86);
    const int d_in = 512, d_out = 8, rows = 3;
    for (int ti = 0; ti < N_QTYPES; ti++) {
        pl_wtype t = QTYPES[ti];
        const pl_wtype_traits *tr = pl_wtype_traits_of(t);
        uint64_t bytes;
        cr_assert(pl_wtype_bytes(t, (uint64_t)d_in * d_out, &bytes));
        uint8_t *w = malloc(bytes);
        /* random bytes are valid blocks; every scale then set to a large finite f16 */
        for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)pl_test_rng_u64(&r);
        size_t nb = (size_t)d_in * d_out / (size_t)tr->block_elems;
        for (size_t bi = 0; bi < nb; bi++) {
            uint8_t *blk = w + bi * (size_t)tr->block_bytes;
            uint16_t big = (uint16_t)(bi % 2 ? 0x5bff : 0xdbff); /* +-255.9 */
            if (t == PL_WTYPE_Q6_K) {
                memcpy(blk + 208, &big, 2);
            } else {
                memcpy(blk, &big, 2);
                if (t == PL_WTYPE_Q4_K || t == PL_WTYPE_Q5_K) memcpy(blk + 2, &big, 2);
            }
            if (t == PL_WTYPE_Q8_0 && bi % 3 == 0) memset(blk + 2, 0x80, 32); /* -128 */
            if (t == PL_WTYPE_Q6_K && bi % 3 == 0) memset(blk + 192, 0x80, 16); /* scale -128 */
        }
        float *wf = malloc((size_t)d_in * d_out * 4);
        tr->to_f32(w, wf, (size_t)d_in * d_out);
        float *x = pl_kt_rand(&r, (size_t)rows * d_in, 1.0f);
        for (int i = 0; i < 32; i++) x[i] *= 1000.0f, x[d_in + 64 + i] *= 1e-4f;
        size_t n = (size_t)rows * d_out;
        float *want = malloc(n * 4), *got = malloc(n * 4), *bound = malloc(n * 4);
        cr_assert_eq(e.ref->ops->matmul(e.ref, want, x, w, t, rows, d_in, d_out), PL_OK);
        pl_kt_qact_bound(x, wf, rows, d_in, d_out, bound);
        /* the values are large: scale the f32 terms of the tolerance with them */
        for (size_t i = 0; i < n; i++) bound[i] += 1e-5f * fabsf(want[i]) + 1.0f;
        for (int b = 0; b < e.n_cpu; b++) {
            pl_cpu_ctx *c = e.cpu[b]->ctx;
            for (int v = c->vnni; v >= 0; v--) {
                bool keep = c->vnni;
                c->vnni = v;
                c->mm_force = PL_CPU_MM_GEMV;
                cr_assert_eq(e.cpu[b]->ops->matmul(e.cpu[b], got, x, w, t, rows, d_in, d_out),
                             PL_OK);
                for (size_t i = 0; i < n; i++)
                    cr_assert(fabsf(got[i] - want[i]) <= bound[i], "%s %s vnni %d: %zu %g vs %g",
                              e.name[b], tr->name, v, i, (double)got[i], (double)want[i]);
                c->vnni = keep;
                c->mm_force = PL_CPU_MM_AUTO;
            }
        }
        free(w), free(wf), free(x), free(want), free(got), free(bound);
    }
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

/* A row's result does not depend on the other rows of the call (matmul.c's promise for the
 * GEMV: a sequence's decode step is the same whatever shares its batch). */
Test(qmatmul, gemv_rows_independent) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 87);
    enum { ROWS_ = 7, D_IN = 768, D_OUT = 130 };
    for (int ti = 0; ti < N_QTYPES; ti++) {
        void *w = pl_kt_rand_weights(&r, (size_t)D_IN * D_OUT, QTYPES[ti], NULL);
        float *x = pl_kt_rand(&r, (size_t)ROWS_ * D_IN, 1.0f);
        float *all = malloc((size_t)ROWS_ * D_OUT * 4), *one = malloc((size_t)D_OUT * 4);
        for (int b = 0; b < e.n_cpu; b++) {
            pl_backend *be = e.cpu[b];
            ((pl_cpu_ctx *)be->ctx)->mm_force = PL_CPU_MM_GEMV;
            cr_assert_eq(be->ops->matmul(be, all, x, w, QTYPES[ti], ROWS_, D_IN, D_OUT), PL_OK);
            for (int row = 0; row < ROWS_; row++) {
                cr_assert_eq(be->ops->matmul(be, one, x + (size_t)row * D_IN, w, QTYPES[ti], 1,
                                             D_IN, D_OUT),
                             PL_OK);
                cr_assert(memcmp(one, all + (size_t)row * D_OUT, (size_t)D_OUT * 4) == 0,
                          "%s %s: row %d differs from the row alone", e.name[b],
                          pl_wtype_name(QTYPES[ti]), row);
            }
            ((pl_cpu_ctx *)be->ctx)->mm_force = PL_CPU_MM_AUTO;
        }
        free(w), free(x), free(all), free(one);
    }
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

/* A matmul group as a Q4_K_M model has it: parts of different quantised types (and a float
 * one) sharing x, each equal to its own ref matmul within its bound, on every path. */
Test(qmatmul, group_of_mixed_types) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 88);
    enum { N_PARTS = 4, D_IN = 512 };
    const int d_out[N_PARTS] = {130, 64, 17, 255};
    const pl_wtype types[N_PARTS] = {PL_WTYPE_Q4_K, PL_WTYPE_Q6_K, PL_WTYPE_F16, PL_WTYPE_Q8_0};
    void *w[N_PARTS];
    float *wf[N_PARTS];
    for (int p = 0; p < N_PARTS; p++)
        w[p] = pl_kt_rand_weights(&r, (size_t)D_IN * d_out[p], types[p], &wf[p]);
    static const int GROUP_ROWS[] = {1, 3, 16, 49};
    for (int ri = 0; ri < 4; ri++) {
        int rows = GROUP_ROWS[ri];
        float *x = pl_kt_rand(&r, (size_t)rows * D_IN, 1.0f);
        float *want[N_PARTS], *got[N_PARTS], *bound[N_PARTS];
        pl_matmul_part parts[N_PARTS];
        for (int p = 0; p < N_PARTS; p++) {
            size_t n = (size_t)rows * d_out[p];
            want[p] = malloc(n * 4), got[p] = malloc(n * 4), bound[p] = malloc(n * 4);
            cr_assert_eq(e.ref->ops->matmul(e.ref, want[p], x, w[p], types[p], rows, D_IN,
                                            d_out[p]),
                         PL_OK);
            pl_kt_qact_bound(x, wf[p], rows, D_IN, d_out[p], bound[p]);
            parts[p] = (pl_matmul_part){got[p], w[p], types[p], d_out[p]};
        }
        for (int b = -1; b < e.n_cpu; b++) {
            pl_backend *be = b < 0 ? e.ref : e.cpu[b];
            for (int m = PL_CPU_MM_AUTO; m <= (b < 0 ? PL_CPU_MM_AUTO : PL_CPU_MM_QGEMM); m++) {
                if (b >= 0) ((pl_cpu_ctx *)be->ctx)->mm_force = (pl_cpu_mm_path)m;
                for (int p = 0; p < N_PARTS; p++)
                    memset(got[p], 0xff, (size_t)rows * d_out[p] * 4);
                cr_assert_eq(pl_backend_matmul_group(be, parts, N_PARTS, x, rows, D_IN), PL_OK);
                for (int p = 0; p < N_PARTS; p++)
                    cr_assert(pl_kt_q_close(b < 0 ? "ref" : e.name[b], want[p], got[p], bound[p],
                                      (size_t)rows * d_out[p]),
                              "part %d (%s), rows %d, path %d", p, pl_wtype_name(types[p]), rows,
                              m);
            }
            if (b >= 0) ((pl_cpu_ctx *)be->ctx)->mm_force = PL_CPU_MM_AUTO;
        }
        for (int p = 0; p < N_PARTS; p++) free(want[p]), free(got[p]), free(bound[p]);
        free(x);
    }
    for (int p = 0; p < N_PARTS; p++) free(w[p]), free(wf[p]);
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

/* More x rows than one quantisation block (PL_CPU_QGEMV_BLOCK_ROWS): the integer GEMV and the
 * int8 GEMM run them block by block, each within its bound. */
Test(qmatmul, rows_past_one_block) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 89);
    const int rows = PL_CPU_QGEMV_BLOCK_ROWS + 45, d_in = 256, d_out = 20;
    for (int ti = 0; ti < N_QTYPES; ti++) {
        float *wf;
        void *w = pl_kt_rand_weights(&r, (size_t)d_in * d_out, QTYPES[ti], &wf);
        float *x = pl_kt_rand(&r, (size_t)rows * d_in, 1.0f);
        size_t n = (size_t)rows * d_out;
        float *want = malloc(n * 4), *got = malloc(n * 4), *bound = malloc(n * 4);
        cr_assert_eq(e.ref->ops->matmul(e.ref, want, x, w, QTYPES[ti], rows, d_in, d_out), PL_OK);
        pl_kt_qact_bound(x, wf, rows, d_in, d_out, bound);
        for (int b = 0; b < e.n_cpu; b++) {
            pl_cpu_ctx *c = e.cpu[b]->ctx;
            for (int m = PL_CPU_MM_AUTO; m <= PL_CPU_MM_QGEMM; m++) {
                if (m == PL_CPU_MM_OWN || m == PL_CPU_MM_BLAS) continue;
                c->mm_force = (pl_cpu_mm_path)m;
                memset(got, 0xff, n * 4);
                cr_assert_eq(e.cpu[b]->ops->matmul(e.cpu[b], got, x, w, QTYPES[ti], rows, d_in,
                                                   d_out),
                             PL_OK);
                cr_assert(pl_kt_q_close(e.name[b], want, got, bound, n), "%s %s path %d",
                          e.name[b], pl_wtype_name(QTYPES[ti]), m);
            }
            c->mm_force = PL_CPU_MM_AUTO;
        }
        free(w), free(wf), free(x), free(want), free(got), free(bound);
    }
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

/* Rows that are not whole blocks, and types without a row, are refused before anything is
 * written. */
Test(qmatmul, refuses_partial_blocks) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    uint8_t w[4096] = {0};
    float x[512] = {0}, out[4] = {7, 7, 7, 7};
    for (int b = -1; b < e.n_cpu; b++) {
        pl_backend *be = b < 0 ? e.ref : e.cpu[b];
        cr_assert_eq(be->ops->matmul(be, out, x, w, PL_WTYPE_Q4_K, 1, 128, 2),
                     PL_ERR_INVALID_ARGUMENT);
        cr_assert(strstr(pl_last_error(), "q4_k"), "%s", pl_last_error());
        cr_assert_eq(be->ops->matmul(be, out, x, w, PL_WTYPE_Q8_0, 1, 48, 2),
                     PL_ERR_INVALID_ARGUMENT);
        cr_assert_eq(be->ops->matmul(be, out, x, w, PL_WTYPE_COUNT, 1, 32, 2),
                     PL_ERR_INVALID_ARGUMENT);
        cr_assert_eq(be->ops->embed(be, out, (int32_t[]){0}, 1, w, PL_WTYPE_Q6_K, 100),
                     PL_ERR_INVALID_ARGUMENT);
        cr_assert(out[0] == 7 && out[3] == 7, "written before refusing");
    }
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}
