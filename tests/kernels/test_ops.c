/*
 * tests/kernels/test_ops.c - the element-wise and row-wise ops (embed, rmsnorm, add_rmsnorm,
 * rope, silu_mul, gather_rows, add_bias): every cpu variant against ref over a shape table;
 * rmsnorm also as Qwen3's per-head q/k norm (many short rows, in place).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/kernels/kernels_test.h"
#include "util/dtype.h"

static const int ROWS[] = {1, 2, 3, 7, 16, 33, 64};
static const int DIMS[] = {8, 17, 64, 172, 255, 768};
#define N_OF(a) (int)(sizeof(a) / sizeof((a)[0]))

Test(ops, embed) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 11);
    /* the float types at every dim, the quantised ones at the dims that are whole blocks;
     * quantised rows are dequantised bit-exactly like the reference */
    const pl_wtype types[] = {PL_WTYPE_F32,  PL_WTYPE_F16,  PL_WTYPE_BF16, PL_WTYPE_Q8_0,
                              PL_WTYPE_Q4_0, PL_WTYPE_Q4_K, PL_WTYPE_Q5_K, PL_WTYPE_Q6_K};
    static const int QDIMS[] = {32, 96, 256, 768};
    const int vocab = 300;
    for (int ti = 0; ti < N_OF(types); ti++)
        for (int di = 0; di < N_OF(DIMS); di++) {
            int be_ = pl_wtype_traits_of(types[ti])->block_elems;
            int dim = be_ == 1 ? DIMS[di] : di < N_OF(QDIMS) ? QDIMS[di] : 0, n = 70;
            if (dim == 0 || dim % be_ != 0) continue;
            void *table = pl_kt_rand_weights(&r, (size_t)vocab * dim, types[ti], NULL);
            int32_t ids[70];
            for (int i = 0; i < n; i++) ids[i] = (int32_t)pl_test_rng_below(&r, vocab);
            float *want = calloc((size_t)n * dim, sizeof *want);
            float *got = calloc((size_t)n * dim, sizeof *got);
            cr_assert_eq(e.ref->ops->embed(e.ref, want, ids, n, table, types[ti], dim), PL_OK);
            for (int b = 0; b < e.n_cpu; b++) {
                memset(got, 0, (size_t)n * dim * sizeof *got);
                cr_assert_eq(e.cpu[b]->ops->embed(e.cpu[b], got, ids, n, table, types[ti], dim),
                             PL_OK);
                cr_assert(pl_kt_close(e.name[b], want, got, (size_t)n * dim, TOL_EXACT),
                          "embed %s dim %d %s", pl_wtype_name(types[ti]), dim, e.name[b]);
            }
            free(table);
            free(want);
            free(got);
        }
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

Test(ops, rmsnorm_and_add_rmsnorm) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 12);
    for (int ri = 0; ri < N_OF(ROWS); ri++)
        for (int di = 0; di < N_OF(DIMS); di++) {
            int rows = ROWS[ri], dim = DIMS[di];
            size_t n = (size_t)rows * dim;
            float *x = pl_kt_rand(&r, n, 2.0f), *w = pl_kt_rand(&r, (size_t)dim, 1.0f);
            float *delta = pl_kt_rand(&r, n, 1.0f);
            float *want = malloc(n * 4), *got = malloc(n * 4);
            float *res_want = malloc(n * 4), *res_got = malloc(n * 4);
            cr_assert_eq(e.ref->ops->rmsnorm(e.ref, want, x, w, rows, dim, 1e-5f), PL_OK);
            memcpy(res_want, x, n * 4);
            float *anorm_want = malloc(n * 4);
            cr_assert_eq(e.ref->ops->add_rmsnorm(e.ref, anorm_want, res_want, delta, w, rows, dim,
                                                 1e-5f),
                         PL_OK);
            for (int b = 0; b < e.n_cpu; b++) {
                pl_backend *be = e.cpu[b];
                cr_assert_eq(be->ops->rmsnorm(be, got, x, w, rows, dim, 1e-5f), PL_OK);
                cr_assert(pl_kt_close(e.name[b], want, got, n, TOL_RMSNORM),
                          "rmsnorm rows %d dim %d", rows, dim);
                /* in place: out aliases x */
                memcpy(got, x, n * 4);
                cr_assert_eq(be->ops->rmsnorm(be, got, got, w, rows, dim, 1e-5f), PL_OK);
                cr_assert(pl_kt_close(e.name[b], want, got, n, TOL_RMSNORM),
                          "in-place rmsnorm rows %d dim %d", rows, dim);

                memcpy(res_got, x, n * 4);
                cr_assert_eq(be->ops->add_rmsnorm(be, got, res_got, delta, w, rows, dim, 1e-5f),
                             PL_OK);
                cr_assert(pl_kt_close(e.name[b], res_want, res_got, n, TOL_EXACT),
                          "add_rmsnorm residual rows %d dim %d", rows, dim);
                cr_assert(pl_kt_close(e.name[b], anorm_want, got, n, TOL_RMSNORM),
                          "add_rmsnorm out rows %d dim %d", rows, dim);
            }
            free(x), free(w), free(delta), free(want), free(got), free(res_want), free(res_got);
            free(anorm_want);
        }
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

Test(ops, rope_both_layouts) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 13);
    const int HEAD_DIMS[] = {8, 17, 64, 80, 128};
    const int GQA[][2] = {{4, 4}, {4, 2}, {8, 2}, {8, 1}};
    for (int layout = 0; layout < 2; layout++)
        for (int hi = 0; hi < N_OF(HEAD_DIMS); hi++)
            for (int gi = 0; gi < 4; gi++)
                for (int ti = 0; ti < 3; ti++) {
                    int hd = HEAD_DIMS[hi], nh = GQA[gi][0], nkv = GQA[gi][1];
                    int nt = (int[]){1, 7, 33}[ti];
                    size_t nq = (size_t)nt * nh * hd, nk = (size_t)nt * nkv * hd;
                    float *q = pl_kt_rand(&r, nq, 1.0f), *k = pl_kt_rand(&r, nk, 1.0f);
                    float inv_freq[64];
                    for (int j = 0; j < hd / 2; j++)
                        inv_freq[j] = powf(10000.0f, -2.0f * (float)j / (float)hd);
                    int32_t pos[33];
                    for (int i = 0; i < nt; i++) pos[i] = (int32_t)pl_test_rng_below(&r, 5000);
                    float *qw = malloc(nq * 4), *kw = malloc(nk * 4);
                    float *qg = malloc(nq * 4), *kg = malloc(nk * 4);
                    memcpy(qw, q, nq * 4);
                    memcpy(kw, k, nk * 4);
                    cr_assert_eq(e.ref->ops->rope(e.ref, qw, kw, pos, inv_freq, nt, nh, nkv, hd,
                                                  (pl_rope_layout)layout),
                                 PL_OK);
                    for (int b = 0; b < e.n_cpu; b++) {
                        memcpy(qg, q, nq * 4);
                        memcpy(kg, k, nk * 4);
                        cr_assert_eq(e.cpu[b]->ops->rope(e.cpu[b], qg, kg, pos, inv_freq, nt, nh,
                                                         nkv, hd, (pl_rope_layout)layout),
                                     PL_OK);
                        cr_assert(pl_kt_close(e.name[b], qw, qg, nq, TOL_ROPE) &&
                                      pl_kt_close(e.name[b], kw, kg, nk, TOL_ROPE),
                                  "rope layout %d hd %d heads %d/%d tokens %d", layout, hd, nh,
                                  nkv, nt);
                    }
                    free(q), free(k), free(qw), free(kw), free(qg), free(kg);
                }
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

Test(ops, silu_mul) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 14);
    const size_t SIZES[] = {1, 7, 17, 172, 255, 768 * 3, 33 * 2048 + 5};
    for (int si = 0; si < 7; si++) {
        size_t n = SIZES[si];
        float *g = pl_kt_rand(&r, n, 12.0f), *u = pl_kt_rand(&r, n, 1.0f);
        g[0] = -100.0f; /* exp(100) overflows unless the exp clamps */
        if (n > 1) g[1] = 100.0f;
        float *want = malloc(n * 4), *got = malloc(n * 4);
        cr_assert_eq(e.ref->ops->silu_mul(e.ref, want, g, u, n), PL_OK);
        for (int b = 0; b < e.n_cpu; b++) {
            cr_assert_eq(e.cpu[b]->ops->silu_mul(e.cpu[b], got, g, u, n), PL_OK);
            cr_assert(pl_kt_close(e.name[b], want, got, n, TOL_SILU), "silu_mul n %zu", n);
            memcpy(got, g, n * 4); /* out aliases gate */
            cr_assert_eq(e.cpu[b]->ops->silu_mul(e.cpu[b], got, got, u, n), PL_OK);
            cr_assert(pl_kt_close(e.name[b], want, got, n, TOL_SILU), "in-place silu n %zu", n);
        }
        free(g), free(u), free(want), free(got);
    }
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

Test(ops, gather_rows) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 15);
    for (int di = 0; di < N_OF(DIMS); di++) {
        int dim = DIMS[di], n_src = 40, n = 9;
        float *x = pl_kt_rand(&r, (size_t)n_src * dim, 1.0f);
        int32_t rows[9];
        for (int i = 0; i < n; i++) rows[i] = (int32_t)pl_test_rng_below(&r, (uint32_t)n_src);
        float *want = malloc((size_t)n * dim * 4), *got = malloc((size_t)n * dim * 4);
        cr_assert_eq(e.ref->ops->gather_rows(e.ref, want, x, rows, n, dim), PL_OK);
        for (int i = 0; i < n; i++) /* independent of both backends */
            cr_assert_eq(memcmp(want + (size_t)i * dim, x + (size_t)rows[i] * dim, dim * 4u), 0);
        for (int b = 0; b < e.n_cpu; b++) {
            cr_assert_eq(e.cpu[b]->ops->gather_rows(e.cpu[b], got, x, rows, n, dim), PL_OK);
            cr_assert(pl_kt_close(e.name[b], want, got, (size_t)n * dim, TOL_EXACT));
        }
        free(x), free(want), free(got);
    }
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

/* Qwen3's q_norm / k_norm: rmsnorm over (n_tokens * n_heads) rows of head_dim with one (head_dim)
 * weight, in place (out aliases x), as the runner applies it to q and k before RoPE. Each row
 * must equal that head alone normalised (ref one row at a time, independent of the batching). */
Test(ops, rmsnorm_per_head_in_place) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 17);
    const int HEAD_DIMS[] = {8, 40, 64, 128};
    const int TOKENS[] = {1, 7, 33};
    const int HEADS[] = {2, 14, 32};
    for (int hi = 0; hi < N_OF(HEAD_DIMS); hi++)
        for (int ti = 0; ti < N_OF(TOKENS); ti++)
            for (int ni = 0; ni < N_OF(HEADS); ni++) {
                int hd = HEAD_DIMS[hi], rows = TOKENS[ti] * HEADS[ni];
                size_t n = (size_t)rows * hd;
                float *x = pl_kt_rand(&r, n, 4.0f), *w = pl_kt_rand(&r, (size_t)hd, 1.5f);
                float *want = malloc(n * 4), *got = malloc(n * 4);
                for (int row = 0; row < rows; row++)
                    cr_assert_eq(e.ref->ops->rmsnorm(e.ref, want + (size_t)row * hd,
                                                     x + (size_t)row * hd, w, 1, hd, 1e-6f),
                                 PL_OK);
                memcpy(got, x, n * 4);
                cr_assert_eq(e.ref->ops->rmsnorm(e.ref, got, got, w, rows, hd, 1e-6f), PL_OK);
                cr_assert(pl_kt_close("ref", want, got, n, TOL_EXACT), "ref per-head hd %d", hd);
                for (int b = 0; b < e.n_cpu; b++) {
                    memcpy(got, x, n * 4);
                    cr_assert_eq(e.cpu[b]->ops->rmsnorm(e.cpu[b], got, got, w, rows, hd, 1e-6f),
                                 PL_OK);
                    cr_assert(pl_kt_close(e.name[b], want, got, n, TOL_RMSNORM),
                              "per-head rmsnorm hd %d, %d rows", hd, rows);
                }
                free(x), free(w), free(want), free(got);
            }
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

/* Qwen2's q/k/v biases: x (n_rows, dim) += bias on every row. One f32 addition per element, so
 * every backend gives ref's bits; rows past the thread pool's split size included. */
Test(ops, add_bias) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 18);
    const int SHAPES[][2] = {{1, 1}, {1, 7}, {3, 17}, {2, 896}, {33, 128}, {4096, 64},
                             {1000, 129}};
    for (int si = 0; si < N_OF(SHAPES); si++) {
        int rows = SHAPES[si][0], dim = SHAPES[si][1];
        size_t n = (size_t)rows * dim;
        float *x = pl_kt_rand(&r, n, 3.0f), *bias = pl_kt_rand(&r, (size_t)dim, 1.0f);
        float *want = malloc(n * 4), *got = malloc(n * 4);
        memcpy(want, x, n * 4);
        cr_assert_eq(e.ref->ops->add_bias(e.ref, want, bias, rows, dim), PL_OK);
        for (size_t i = 0; i < n; i++) /* the rule itself, independent of both backends */
            cr_assert_eq(want[i], x[i] + bias[i % (size_t)dim], "ref element %zu", i);
        for (int b = 0; b < e.n_cpu; b++) {
            memcpy(got, x, n * 4);
            cr_assert_eq(e.cpu[b]->ops->add_bias(e.cpu[b], got, bias, rows, dim), PL_OK);
            cr_assert(pl_kt_close(e.name[b], want, got, n, TOL_EXACT), "add_bias %dx%d", rows,
                      dim);
        }
        free(x), free(bias), free(want), free(got);
    }
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

Test(ops, add_bias_invalid_arguments) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, bias[4] = {0};
    for (int b = -1; b < e.n_cpu; b++) {
        pl_backend *be = b < 0 ? e.ref : e.cpu[b];
        const pl_backend_ops *o = be->ops;
        cr_assert_eq(o->add_bias(be, x, bias, -1, 4), PL_ERR_INVALID_ARGUMENT);
        cr_assert(strstr(pl_last_error(), "n_rows"), "%s", pl_last_error());
        cr_assert_eq(o->add_bias(be, x, bias, 2, 0), PL_ERR_INVALID_ARGUMENT);
        cr_assert_eq(o->add_bias(be, x, bias, 2, -4), PL_ERR_INVALID_ARGUMENT);
        cr_assert(strstr(pl_last_error(), "dim"), "%s", pl_last_error());
        cr_assert_eq(o->add_bias(be, NULL, bias, 2, 4), PL_ERR_INVALID_ARGUMENT);
        cr_assert_eq(o->add_bias(be, x, NULL, 2, 4), PL_ERR_INVALID_ARGUMENT);
        cr_assert(strstr(pl_last_error(), "NULL"), "%s", pl_last_error());
        cr_assert_eq(o->add_bias(be, NULL, NULL, 0, 4), PL_OK, "no rows: nothing to touch");
    }
    for (int i = 0; i < 8; i++) cr_assert_eq(x[i], (float)(i + 1), "a refused call wrote x");
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}
