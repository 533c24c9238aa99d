/*
 * tests/kernels/test_matmul.c - matmul, every cpu variant against ref: rows 1..64, sizes that
 * are multiples of nothing, f32/f16/bf16 weights, and both cpu regimes (the streaming GEMV
 * kernel and the tiled sgemm) forced on every row count.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "tests/kernels/kernels_test.h"
#include "util/dtype.h"

static const int ROWS[] = {1, 2, 3, 7, 16, 33, 64};
/* (d_in, d_out) pairs: tiny, odd, one above a vector width, model-sized, and fewer output
 * features than the GEMV's 4 streams */
static const int SHAPES[][2] = {{8, 17},    {17, 8},    {64, 172}, {172, 64},
                                {255, 768}, {768, 255}, {40, 3}};
enum { N_SHAPES = sizeof SHAPES / sizeof SHAPES[0] };

static void check_dtype(pl_wtype t) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 20 + (uint64_t)t);
    for (int si = 0; si < N_SHAPES; si++) {
        int d_in = SHAPES[si][0], d_out = SHAPES[si][1];
        void *w = pl_kt_rand_weights(&r, (size_t)d_in * d_out, t, NULL);
        for (int ri = 0; ri < 7; ri++) {
            int rows = ROWS[ri];
            float *x = pl_kt_rand(&r, (size_t)rows * d_in, 1.0f);
            size_t n = (size_t)rows * d_out;
            float *want = malloc(n * 4), *got = malloc(n * 4);
            cr_assert_eq(e.ref->ops->matmul(e.ref, want, x, w, t, rows, d_in, d_out), PL_OK);
            for (int b = 0; b < e.n_cpu; b++) {
                pl_cpu_ctx *c = e.cpu[b]->ctx;
                /* default choice, then each kernel forced (own falls back without AVX2) */
                for (int m = PL_CPU_MM_AUTO; m <= PL_CPU_MM_BLAS; m++) {
                    c->mm_force = (pl_cpu_mm_path)m;
                    memset(got, 0xff, n * 4); /* NaN: every output must be written */
                    cr_assert_eq(e.cpu[b]->ops->matmul(e.cpu[b], got, x, w, t, rows, d_in, d_out),
                                 PL_OK);
                    cr_assert(pl_kt_close(e.name[b], want, got, n, TOL_MATMUL),
                              "matmul %s rows %d %dx%d path %d", pl_wtype_name(t), rows, d_out,
                              d_in, m);
                }
                c->mm_force = PL_CPU_MM_AUTO;
            }
            free(x), free(want), free(got);
        }
        free(w);
    }
    pl_kt_env_fini(&e);
}

Test(matmul, f32) {
    check_dtype(PL_WTYPE_F32);
    PL_ASSERT_NO_LEAKS();
}
Test(matmul, f16) {
    check_dtype(PL_WTYPE_F16);
    PL_ASSERT_NO_LEAKS();
}
Test(matmul, bf16) {
    check_dtype(PL_WTYPE_BF16);
    PL_ASSERT_NO_LEAKS();
}

/* An f16 GEMM whose weights need several widened tiles per task (d_in large enough that a
 * tile holds fewer rows than the task owns). */
Test(matmul, f16_gemm_many_tiles) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 29);
    int rows = 20, d_in = 5000, d_out = 300;
    void *w = pl_kt_rand_weights(&r, (size_t)d_in * d_out, PL_WTYPE_F16, NULL);
    float *x = pl_kt_rand(&r, (size_t)rows * d_in, 1.0f);
    float *want = malloc((size_t)rows * d_out * 4), *got = malloc((size_t)rows * d_out * 4);
    cr_assert_eq(e.ref->ops->matmul(e.ref, want, x, w, PL_WTYPE_F16, rows, d_in, d_out), PL_OK);
    pl_backend *be = e.cpu[e.n_cpu - 2]; /* best ISA, 2 threads */
    ((pl_cpu_ctx *)be->ctx)->mm_force = PL_CPU_MM_BLAS;
    cr_assert_eq(be->ops->matmul(be, got, x, w, PL_WTYPE_F16, rows, d_in, d_out), PL_OK);
    cr_assert(pl_kt_close(e.name[e.n_cpu - 2], want, got, (size_t)rows * d_out, TOL_MATMUL_LONG));
    free(w), free(x), free(want), free(got);
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

/* The own GEMM's blocking: 300 rows (blocks of 256 + 44), 256 (AVX-512: four tiles of 4
 * vectors), several tiles with a shorter last one (130 rows: AVX-512 4 + 4 + 1 vectors, AVX2
 * eight tiles of 2 + one of 1; 100: 4 + 3), one tile of each width (5 rows: the 1 x 24 and
 * 1 x 12 tiles; 17, 49), a last J-block and a last group with fewer weight rows, d_in not a
 * multiple of the chunk, and a long d_in. Every cpu backend (AVX-512 where the machine has
 * it, AVX2, scalar, which falls back), own GEMM forced. */
Test(matmul, own_gemm_blocking) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 31);
    static const int CASES[][3] = {/* rows, d_in, d_out */
                                   {256, 768, 100}, {130, 300, 37}, {100, 5000, 50},
                                   {17, 300, 1000}, {5, 20, 7},     {49, 513, 25},
                                   {300, 64, 30}};
    const pl_wtype types[] = {PL_WTYPE_F32, PL_WTYPE_F16, PL_WTYPE_BF16};
    for (int ci = 0; ci < 7; ci++)
        for (int ti = 0; ti < 3; ti++) {
            int rows = CASES[ci][0], d_in = CASES[ci][1], d_out = CASES[ci][2];
            void *w = pl_kt_rand_weights(&r, (size_t)d_in * d_out, types[ti], NULL);
            float *x = pl_kt_rand(&r, (size_t)rows * d_in, 1.0f);
            size_t n = (size_t)rows * d_out;
            float *want = malloc(n * 4), *got = malloc(n * 4);
            cr_assert_eq(e.ref->ops->matmul(e.ref, want, x, w, types[ti], rows, d_in, d_out),
                         PL_OK);
            for (int b = 0; b < e.n_cpu; b++) {
                pl_cpu_ctx *c = e.cpu[b]->ctx;
                c->mm_force = PL_CPU_MM_OWN;
                /* one range per thread, then 5 ranges: tasks that finish their own range
                 * steal groups from the back of the others' (with one thread, task 0 steals
                 * all of ranges 1-4 before tasks 1-4 start) */
                for (int ranges = 0; ranges <= 5; ranges += 5) {
                    c->own_ranges = ranges;
                    memset(got, 0xff, n * 4);
                    cr_assert_eq(e.cpu[b]->ops->matmul(e.cpu[b], got, x, w, types[ti], rows,
                                                       d_in, d_out),
                                 PL_OK);
                    cr_assert(pl_kt_close(e.name[b], want, got, n,
                                          d_in > 1000 ? TOL_MATMUL_LONG : TOL_MATMUL),
                              "own gemm %s rows %d %dx%d ranges %d", pl_wtype_name(types[ti]),
                              rows, d_out, d_in, ranges);
                }
                c->own_ranges = 0;
                c->mm_force = PL_CPU_MM_AUTO;
            }
            free(w), free(x), free(want), free(got);
        }
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

/* The GEMV gives each output the same bits whatever the number of x rows in the call: a
 * sequence's decode step must not depend on which others share its batch (with an f32 KV
 * cache, greedy output is then independent of load; docs/api.md). Each x row alone against
 * the same rows in one call, every cpu backend, every shape and weight type. */
Test(matmul, gemv_rows_independent) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 41);
    const pl_wtype types[] = {PL_WTYPE_F32, PL_WTYPE_F16, PL_WTYPE_BF16};
    enum { ROWS = 7 };
    for (int si = 0; si < N_SHAPES; si++)
        for (int ti = 0; ti < 3; ti++) {
            int d_in = SHAPES[si][0], d_out = SHAPES[si][1];
            void *w = pl_kt_rand_weights(&r, (size_t)d_in * d_out, types[ti], NULL);
            float *x = pl_kt_rand(&r, (size_t)ROWS * d_in, 1.0f);
            float *all = malloc((size_t)ROWS * d_out * 4), *one = malloc((size_t)d_out * 4);
            for (int b = 0; b < e.n_cpu; b++) {
                pl_backend *be = e.cpu[b];
                ((pl_cpu_ctx *)be->ctx)->mm_force = PL_CPU_MM_GEMV;
                cr_assert_eq(be->ops->matmul(be, all, x, w, types[ti], ROWS, d_in, d_out), PL_OK);
                for (int row = 0; row < ROWS; row++) {
                    cr_assert_eq(be->ops->matmul(be, one, x + (size_t)row * d_in, w, types[ti],
                                                 1, d_in, d_out),
                                 PL_OK);
                    cr_assert(memcmp(one, all + (size_t)row * d_out, (size_t)d_out * 4) == 0,
                              "%s %s %dx%d: row %d of %d differs from the row alone", e.name[b],
                              pl_wtype_name(types[ti]), d_out, d_in, row, ROWS);
                }
                ((pl_cpu_ctx *)be->ctx)->mm_force = PL_CPU_MM_AUTO;
            }
            free(w), free(x), free(all), free(one);
        }
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

/* A matmul group (q, k, v; gate, up): parts of different widths and weight types share one
 * x; each part must equal its own ref matmul, on every cpu backend and path (the GEMV parts
 * run as one pool call whose chunks are numbered across the parts), and through
 * pl_backend_matmul_group on ref, which has no group op and runs the parts one by one. */
Test(matmul, group) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 37);
    enum { N_PARTS = 4, D_IN = 172 };
    const int d_out[N_PARTS] = {255, 64, 17, 768};
    const pl_wtype types[N_PARTS] = {PL_WTYPE_F32, PL_WTYPE_F16, PL_WTYPE_BF16, PL_WTYPE_F16};
    void *w[N_PARTS];
    for (int p = 0; p < N_PARTS; p++)
        w[p] = pl_kt_rand_weights(&r, (size_t)D_IN * d_out[p], types[p], NULL);
    static const int GROUP_ROWS[] = {1, 3, 16, 49, 64};
    for (int ri = 0; ri < 5; ri++) {
        int rows = GROUP_ROWS[ri];
        float *x = pl_kt_rand(&r, (size_t)rows * D_IN, 1.0f);
        float *want[N_PARTS], *got[N_PARTS];
        pl_matmul_part parts[N_PARTS];
        for (int p = 0; p < N_PARTS; p++) {
            size_t n = (size_t)rows * d_out[p];
            want[p] = malloc(n * 4);
            got[p] = malloc(n * 4);
            cr_assert_eq(e.ref->ops->matmul(e.ref, want[p], x, w[p], types[p], rows, D_IN,
                                            d_out[p]),
                         PL_OK);
            parts[p] = (pl_matmul_part){got[p], w[p], types[p], d_out[p]};
        }
        for (int b = -1; b < e.n_cpu; b++) {
            pl_backend *be = b < 0 ? e.ref : e.cpu[b];
            const char *name = b < 0 ? "ref" : e.name[b];
            for (int m = PL_CPU_MM_AUTO; m <= (b < 0 ? PL_CPU_MM_AUTO : PL_CPU_MM_BLAS); m++) {
                if (b >= 0) ((pl_cpu_ctx *)be->ctx)->mm_force = (pl_cpu_mm_path)m;
                for (int p = 0; p < N_PARTS; p++)
                    memset(got[p], 0xff, (size_t)rows * d_out[p] * 4);
                cr_assert_eq(pl_backend_matmul_group(be, parts, N_PARTS, x, rows, D_IN), PL_OK);
                for (int p = 0; p < N_PARTS; p++)
                    cr_assert(pl_kt_close(name, want[p], got[p], (size_t)rows * d_out[p],
                                          TOL_MATMUL),
                              "group part %d (%s, %d wide), rows %d, path %d", p,
                              pl_wtype_name(types[p]), d_out[p], rows, m);
            }
            if (b >= 0) ((pl_cpu_ctx *)be->ctx)->mm_force = PL_CPU_MM_AUTO;
        }
        for (int p = 0; p < N_PARTS; p++) free(want[p]), free(got[p]);
        free(x);
    }
    for (int p = 0; p < N_PARTS; p++) free(w[p]);
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

/* A group of no parts, of too many, or with a bad part is refused, and nothing is written. */
Test(matmul, group_bad_input) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    float x[4] = {1, 2, 3, 4}, w[8] = {0}, out[2] = {7, 7};
    pl_matmul_part ok = {out, w, PL_WTYPE_F32, 2};
    pl_matmul_part five[5] = {ok, ok, ok, ok, ok};
    pl_matmul_part bad[2] = {ok, {out, NULL, PL_WTYPE_F32, 2}};
    pl_matmul_part bad_type[2] = {ok, {out, w, PL_WTYPE_NONE, 2}};
    for (int b = -1; b < e.n_cpu; b++) {
        pl_backend *be = b < 0 ? e.ref : e.cpu[b];
        cr_assert_eq(pl_backend_matmul_group(be, &ok, 0, x, 1, 4), PL_ERR_INVALID_ARGUMENT);
        cr_assert_eq(pl_backend_matmul_group(be, NULL, 1, x, 1, 4), PL_ERR_INVALID_ARGUMENT);
        cr_assert_eq(pl_backend_matmul_group(be, five, 5, x, 1, 4), PL_ERR_INVALID_ARGUMENT);
        cr_assert_eq(pl_backend_matmul_group(be, bad_type, 2, x, 1, 4),
                     PL_ERR_INVALID_ARGUMENT);
        if (b >= 0) { /* the cpu op checks every part before it runs any */
            out[0] = out[1] = 7;
            cr_assert_eq(be->ops->matmul_group(be, bad, 2, x, 1, 4), PL_ERR_INVALID_ARGUMENT);
            cr_assert_eq(be->ops->matmul_group(be, bad_type, 2, x, 1, 4),
                         PL_ERR_INVALID_ARGUMENT);
            cr_assert_eq(be->ops->matmul_group(be, five, 5, x, 1, 4), PL_ERR_INVALID_ARGUMENT);
            cr_assert(out[0] == 7 && out[1] == 7, "%s wrote before refusing", e.name[b]);
        }
    }
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}
