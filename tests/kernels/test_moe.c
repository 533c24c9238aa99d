/*
 * tests/kernels/test_moe.c - the mixture-of-experts and Gemma ops: moe_route (against a
 * hand-worked choice: ties to the lower index, NaN never chosen, renormalised or not),
 * moe_matmul (ref slot by slot against ref's own matmul of the expert's rows; every cpu
 * variant against ref over slot layouts: one token's experts, experts chosen by several
 * tokens, unused experts, the down product's own rows, every weight type), moe_combine
 * (with and without a shared expert), gelu_mul and scale (the soft-cap) against closed forms.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/kernels/kernels_test.h"
#include "util/dtype.h"

Test(moe, route_ties_nan_and_weights) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    /* token 0: experts 1 and 3 tie at the top, 2 next; token 1: a NaN and two ties at 0.5 */
    const float logits[2][5] = {{0.0f, 2.0f, 1.0f, 2.0f, -1.0f},
                                {NAN, 0.5f, -3.0f, 0.5f, 0.25f}};
    const int32_t want_ids[2][3] = {{1, 3, 2}, {1, 3, 4}};
    for (int norm = 0; norm < 2; norm++) {
        int32_t ids[6];
        float w[6];
        pl_backend *bes[PL_KT_MAX_CPU + 1] = {e.ref};
        for (int b = 0; b < e.n_cpu; b++) bes[b + 1] = e.cpu[b];
        for (int b = 0; b <= e.n_cpu; b++) {
            cr_assert_eq(bes[b]->ops->moe_route(bes[b], ids, w, &logits[0][0], 2, 5, 3,
                                                norm != 0), PL_OK, "%s", pl_last_error());
            for (int t = 0; t < 2; t++)
                for (int j = 0; j < 3; j++)
                    cr_assert_eq(ids[t * 3 + j], want_ids[t][j], "%s token %d pick %d",
                                 bes[b]->ops->name, t, j);
            /* token 0: softmax over all five, the chosen three, maybe renormalised */
            double z = 0, p[5];
            for (int i = 0; i < 5; i++) z += exp(logits[0][i] - 2.0);
            for (int i = 0; i < 5; i++) p[i] = exp(logits[0][i] - 2.0) / z;
            double s = norm ? p[1] + p[3] + p[2] : 1.0;
            cr_assert_float_eq(w[0], p[1] / s, 1e-6);
            cr_assert_float_eq(w[1], p[3] / s, 1e-6);
            cr_assert_float_eq(w[2], p[2] / s, 1e-6);
        }
    }
    int32_t ids[2];
    float w[2];
    cr_assert_eq(e.ref->ops->moe_route(e.ref, ids, w, &logits[0][0], 1, 5, 6, true),
                 PL_ERR_INVALID_ARGUMENT, "k > n_experts");
    cr_assert(strstr(pl_last_error(), "k 6"), "%s", pl_last_error());
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

typedef struct moe_layout {
    int n_tokens, k, n_experts;
    int32_t ids[64]; /* (n_tokens * k) */
} moe_layout;

static void moe_case(pl_kt_env *e, pl_test_rng *r, pl_wtype t, const moe_layout *L, int d_in,
                     int d_out) {
    int S = L->n_tokens * L->k, E = L->n_experts;
    float *wf;
    void *w = pl_kt_rand_weights(r, (size_t)E * d_out * d_in, t, &wf);
    void *w2 = pl_kt_rand_weights(r, (size_t)E * d_out * d_in, t, NULL);
    for (int x_div = 1; x_div <= L->k; x_div += L->k > 1 ? L->k - 1 : 1) {
        int n_x = S / x_div;
        float *x = pl_kt_rand(r, (size_t)n_x * d_in, 1.0f);
        float *want = malloc((size_t)S * d_out * 4), *want2 = malloc((size_t)S * d_out * 4);
        float *got = malloc((size_t)S * d_out * 4), *got2 = malloc((size_t)S * d_out * 4);
        pl_matmul_part parts[2] = {{want, w, t, d_out}, {want2, w2, t, d_out}};
        cr_assert_eq(e->ref->ops->moe_matmul(e->ref, parts, 2, x, x_div, L->ids, S, E, d_in),
                     PL_OK, "%s", pl_last_error());
        /* each slot: its row times its expert's matrix, through ref's plain matmul */
        const pl_wtype_traits *tr = pl_wtype_traits_of(t);
        size_t row_bytes = (size_t)d_in / tr->block_elems * tr->block_bytes;
        float *one = malloc((size_t)d_out * 4);
        for (int s = 0; s < S; s++) {
            const void *we = (const char *)w + (size_t)L->ids[s] * d_out * row_bytes;
            cr_assert_eq(e->ref->ops->matmul(e->ref, one, x + (size_t)(s / x_div) * d_in, we, t,
                                             1, d_in, d_out), PL_OK);
            cr_assert(memcmp(one, want + (size_t)s * d_out, (size_t)d_out * 4) == 0,
                      "ref moe_matmul slot %d", s);
        }
        free(one);
        for (int b = 0; b < e->n_cpu; b++) {
            memset(got, 0xff, (size_t)S * d_out * 4);
            memset(got2, 0xff, (size_t)S * d_out * 4);
            pl_matmul_part cp[2] = {{got, w, t, d_out}, {got2, w2, t, d_out}};
            cr_assert_eq(e->cpu[b]->ops->moe_matmul(e->cpu[b], cp, 2, x, x_div, L->ids, S, E,
                                                    d_in), PL_OK, "%s", pl_last_error());
            /* against ref: the f32 rounding of matmul; the quantised types' GEMV also rounds
             * activations to int8 (TOL_QMATMUL's nmse; its per-output bound is
             * test_qmatmul.c's business) */
            pl_tol tol = pl_wtype_is_quant(t) ? (pl_tol){1.0f, 1.0f, 4e-5} : TOL_MATMUL;
            cr_assert(pl_kt_close(e->name[b], want, got, (size_t)S * d_out, tol),
                      "moe_matmul %s %d tokens x %d of %d experts, x_div %d, %d->%d",
                      pl_wtype_name(t), L->n_tokens, L->k, E, x_div, d_in, d_out);
            cr_assert(pl_kt_close(e->name[b], want2, got2, (size_t)S * d_out, tol),
                      "second part");
            /* and bit for bit what the backend's own matmul gives each expert's rows taken
             * together (in slot order): grouping changes nothing but the bookkeeping */
            float *xg = malloc((size_t)S * d_in * 4), *og = malloc((size_t)S * d_out * 4);
            for (int ex = 0; ex < E; ex++) {
                int n = 0;
                for (int s = 0; s < S; s++)
                    if (L->ids[s] == ex)
                        memcpy(xg + (size_t)n++ * d_in, x + (size_t)(s / x_div) * d_in,
                               (size_t)d_in * 4);
                if (n == 0) continue;
                const void *we = (const char *)w + (size_t)ex * d_out * row_bytes;
                cr_assert_eq(e->cpu[b]->ops->matmul(e->cpu[b], og, xg, we, t, n, d_in, d_out),
                             PL_OK);
                for (int s = 0, j = 0; s < S; s++)
                    if (L->ids[s] == ex)
                        cr_assert(memcmp(og + (size_t)j++ * d_out, got + (size_t)s * d_out,
                                         (size_t)d_out * 4) == 0,
                                  "%s: slot %d differs from matmul of expert %d's %d rows",
                                  e->name[b], s, ex, n);
            }
            free(xg), free(og);
        }
        free(x), free(want), free(want2), free(got), free(got2);
    }
    free(w), free(w2), free(wf);
}

Test(moe, matmul_every_layout_and_type) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 90);
    const moe_layout layouts[] = {
        {1, 2, 8, {5, 1}},                         /* decode: one row per expert */
        {1, 1, 3, {2}},                            /* top-1 */
        {4, 2, 4, {0, 1, 1, 0, 3, 0, 1, 3}},       /* experts shared by tokens, one unused */
        {5, 3, 6, {5, 4, 3, 5, 2, 0, 0, 5, 4, 1, 2, 3, 5, 0, 4}},
        {8, 2, 2, {0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0}}, /* every expert busy */
    };
    const pl_wtype types[] = {PL_WTYPE_F32, PL_WTYPE_F16, PL_WTYPE_BF16, PL_WTYPE_Q8_0,
                              PL_WTYPE_Q4_0, PL_WTYPE_Q4_K, PL_WTYPE_Q6_K};
    for (size_t li = 0; li < sizeof layouts / sizeof layouts[0]; li++)
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            int d_in = pl_wtype_traits_of(types[ti])->block_elems == 256 ? 256 : 64;
            moe_case(&e, &r, types[ti], &layouts[li], d_in, 24 + (int)li);
        }
    /* an expert id out of range is refused by the host backends */
    float x[64] = {0}, out[64];
    const int32_t bad[1] = {3};
    pl_matmul_part p = {out, x, PL_WTYPE_F32, 1};
    cr_assert_eq(e.cpu[0]->ops->moe_matmul(e.cpu[0], &p, 1, x, 1, bad, 1, 3, 64),
                 PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "expert 3"), "%s", pl_last_error());
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

Test(moe, combine_with_and_without_a_shared_expert) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 91);
    const int T = 5, K = 3, D = 37;
    float *y = pl_kt_rand(&r, (size_t)T * K * D, 1.0f), *w = pl_kt_rand(&r, (size_t)T * K, 1.0f);
    float *sh = pl_kt_rand(&r, (size_t)T * D, 1.0f), *g = pl_kt_rand(&r, (size_t)T, 4.0f);
    float *want = malloc((size_t)T * D * 4), *got = malloc((size_t)T * D * 4);
    for (int with = 0; with < 2; with++) {
        cr_assert_eq(e.ref->ops->moe_combine(e.ref, want, y, w, T, K, D, with ? sh : NULL, g),
                     PL_OK);
        for (int t = 0; t < T; t++) /* the definition, by hand */
            for (int d = 0; d < D; d++) {
                double a = with ? sh[t * D + d] / (1.0 + exp(-(double)g[t])) : 0.0;
                for (int j = 0; j < K; j++) a += (double)w[t * K + j] * y[(t * K + j) * D + d];
                cr_assert_float_eq(want[t * D + d], a, 1e-6);
            }
        for (int b = 0; b < e.n_cpu; b++) {
            cr_assert_eq(e.cpu[b]->ops->moe_combine(e.cpu[b], got, y, w, T, K, D,
                                                    with ? sh : NULL, g), PL_OK);
            cr_assert(pl_kt_close(e.name[b], want, got, (size_t)T * D, TOL_SILU), "combine");
        }
    }
    free(y), free(w), free(sh), free(g), free(want), free(got);
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

Test(moe, gelu_mul_and_scale) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 92);
    const size_t SIZES[] = {1, 7, 17, 255, 768 * 3, 33 * 2048 + 5};
    for (int si = 0; si < 6; si++) {
        size_t n = SIZES[si];
        float *g = pl_kt_rand(&r, n, 8.0f), *u = pl_kt_rand(&r, n, 1.0f);
        g[0] = -100.0f;
        if (n > 1) g[1] = 100.0f;
        float *want = malloc(n * 4), *got = malloc(n * 4);
        cr_assert_eq(e.ref->ops->gelu_mul(e.ref, want, g, u, n), PL_OK);
        for (size_t i = 0; i < n; i++) { /* PyTorch's tanh formula */
            double x = g[i];
            double v = 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
            cr_assert_float_eq(want[i], v * u[i], 1e-6 + 1e-6 * fabs(v * u[i]));
        }
        for (int b = 0; b < e.n_cpu; b++) {
            memcpy(got, g, n * 4); /* out aliases gate */
            cr_assert_eq(e.cpu[b]->ops->gelu_mul(e.cpu[b], got, got, u, n), PL_OK);
            cr_assert(pl_kt_close(e.name[b], want, got, n, TOL_SILU), "gelu_mul n %zu", n);
        }
        /* scale, then the soft-cap tanh(x / c) * c: |x| stays below c */
        for (int capped = 0; capped < 2; capped++) {
            float cap = capped ? 5.0f : 0.0f;
            memcpy(want, g, n * 4);
            cr_assert_eq(e.ref->ops->scale(e.ref, want, n, 3.0f, cap), PL_OK);
            for (size_t i = 0; i < n; i++) {
                double v = 3.0 * g[i];
                if (capped) {
                    v = tanh(v / 5.0) * 5.0;
                    cr_assert_leq(fabsf(want[i]), 5.0f);
                }
                cr_assert_float_eq(want[i], v, 1e-6 + 1e-6 * fabs(v));
            }
            for (int b = 0; b < e.n_cpu; b++) {
                memcpy(got, g, n * 4);
                cr_assert_eq(e.cpu[b]->ops->scale(e.cpu[b], got, n, 3.0f, cap), PL_OK);
                cr_assert(pl_kt_close(e.name[b], want, got, n, TOL_SILU), "scale n %zu", n);
            }
        }
        free(g), free(u), free(want), free(got);
    }
    /* the cpu's vector tanh: saturates to exactly +-cap, keeps 0, and tails of every length */
    for (int b = 0; b < e.n_cpu; b++) {
        float v[19];
        for (int i = 0; i < 19; i++) v[i] = i % 3 == 0 ? 1e4f : i % 3 == 1 ? -1e30f : 0.0f;
        cr_assert_eq(e.cpu[b]->ops->scale(e.cpu[b], v, 19, 1.0f, 5.0f), PL_OK);
        for (int i = 0; i < 19; i++)
            cr_assert_eq(v[i], i % 3 == 0 ? 5.0f : i % 3 == 1 ? -5.0f : 0.0f, "%s: element %d: %g",
                         e.name[b], i, (double)v[i]);
    }
    float x = 1.0f;
    cr_assert_eq(e.ref->ops->scale(e.ref, &x, 1, 1.0f, -1.0f), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(e.cpu[0]->ops->scale(e.cpu[0], &x, 1, NAN, 0.0f), PL_ERR_INVALID_ARGUMENT);
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}
