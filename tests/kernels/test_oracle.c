/*
 * tests/kernels/test_oracle.c - checks of the oracle itself: ref (and every cpu variant, which
 * must agree) against results computed here by hand or by an independent formula, on cases
 * small enough to reason about.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/kernels/kernels_test.h"
#include "util/dtype.h"

/* ref first, then every cpu variant */
#define FOR_EACH_BACKEND(e, be, name)                                                         \
    for (int bi_ = -1; bi_ < (e).n_cpu; bi_++)                                                \
        for (pl_backend *be = bi_ < 0 ? (e).ref : (e).cpu[bi_]; be; be = NULL)                \
            for (const char *name = bi_ < 0 ? "ref" : (e).name[bi_]; name; name = NULL)

Test(oracle, matmul_by_hand) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    /* x (2, 3) @ w^T, w (3, 3) = [[1,0,0],[0,1,0],[1,1,1]] */
    const float x[6] = {1, 2, 3, -4, 0.5f, 2};
    const float w[9] = {1, 0, 0, 0, 1, 0, 1, 1, 1};
    const float want[6] = {1, 2, 6, -4, 0.5f, -1.5f};
    uint16_t wh[9], wb[9];
    for (int i = 0; i < 9; i++) {
        wh[i] = pl_f32_to_f16(w[i]); /* 0 and 1 are exact in f16 and bf16 */
        wb[i] = pl_f32_to_bf16(w[i]);
    }
    float got[6];
    FOR_EACH_BACKEND(e, be, name) {
        cr_assert_eq(be->ops->matmul(be, got, x, w, PL_WTYPE_F32, 2, 3, 3), PL_OK);
        cr_assert(pl_kt_close(name, want, got, 6, TOL_ORACLE));
        cr_assert_eq(be->ops->matmul(be, got, x, wh, PL_WTYPE_F16, 2, 3, 3), PL_OK);
        cr_assert(pl_kt_close(name, want, got, 6, TOL_ORACLE));
        cr_assert_eq(be->ops->matmul(be, got, x, wb, PL_WTYPE_BF16, 2, 3, 3), PL_OK);
        cr_assert(pl_kt_close(name, want, got, 6, TOL_ORACLE));
    }
    pl_kt_env_fini(&e);
}

Test(oracle, rmsnorm_of_a_constant_vector) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    /* mean(x^2) = c^2, so out[d] = c / sqrt(c^2 + eps) * w[d] */
    enum { DIM = 37 };
    float x[DIM], w[DIM], want[DIM], got[DIM];
    const float c = -1.5f, eps = 1e-5f;
    for (int d = 0; d < DIM; d++) {
        x[d] = c;
        w[d] = 0.1f * (float)(d + 1);
        want[d] = (float)(c / sqrt((double)c * c + eps) * w[d]);
    }
    FOR_EACH_BACKEND(e, be, name) {
        cr_assert_eq(be->ops->rmsnorm(be, got, x, w, 1, DIM, eps), PL_OK);
        cr_assert(pl_kt_close(name, want, got, DIM, TOL_ORACLE));
    }
    pl_kt_env_fini(&e);
}

Test(oracle, rope_identity_at_zero_and_a_known_rotation) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    const float inv_freq[4] = {1.0f, 0.5f, 0.25f, 0.125f};
    for (int layout = 0; layout < 2; layout++) {
        FOR_EACH_BACKEND(e, be, name) {
            /* position 0: every angle is 0, nothing moves */
            float q[9], k[9], q0[9];
            for (int i = 0; i < 9; i++) q[i] = k[i] = q0[i] = (float)i - 4.0f;
            cr_assert_eq(be->ops->rope(be, q, k, (int32_t[]){0}, inv_freq, 1, 1, 1, 9,
                                       (pl_rope_layout)layout),
                         PL_OK);
            cr_assert(pl_kt_close(name, q0, q, 9, TOL_EXACT) &&
                      pl_kt_close(name, q0, k, 9, TOL_EXACT));
            /* head_dim 2, position 3, inv_freq 1: (1, 0) turns by 3 radians to (cos 3, sin 3),
             * the same in both layouts (the one pair is (0, 1)) */
            float a[2] = {1, 0}, b[2] = {0, 1};
            cr_assert_eq(be->ops->rope(be, a, b, (int32_t[]){3}, inv_freq, 1, 1, 1, 2,
                                       (pl_rope_layout)layout),
                         PL_OK);
            const float wa[2] = {(float)cos(3.0), (float)sin(3.0)};
            const float wb[2] = {(float)-sin(3.0), (float)cos(3.0)};
            cr_assert(pl_kt_close(name, wa, a, 2, TOL_ORACLE) &&
                      pl_kt_close(name, wb, b, 2, TOL_ORACLE));
        }
    }
    /* which elements pair up: head_dim 4, position 1, inv_freq {pi/2, 0}: pair 0 turns by a
     * quarter, pair 1 stays. interleaved pairs (0,1),(2,3); half pairs (0,2),(1,3). */
    const float f[2] = {(float)(M_PI / 2), 0.0f};
    const float x[4] = {1, 2, 3, 4};
    const float want_inter[4] = {-2, 1, 3, 4}; /* (1,2) -> (-2,1) */
    const float want_half[4] = {-3, 2, 1, 4};  /* (1,3) -> (-3,1) */
    FOR_EACH_BACKEND(e, be, name) {
        float q[4], k[4];
        memcpy(q, x, sizeof q);
        memcpy(k, x, sizeof k);
        cr_assert_eq(be->ops->rope(be, q, k, (int32_t[]){1}, f, 1, 1, 1, 4, PL_ROPE_INTERLEAVED),
                     PL_OK);
        cr_assert(pl_kt_close(name, want_inter, q, 4, TOL_ORACLE));
        memcpy(q, x, sizeof q);
        cr_assert_eq(be->ops->rope(be, q, k, (int32_t[]){1}, f, 1, 1, 1, 4, PL_ROPE_HALF), PL_OK);
        cr_assert(pl_kt_close(name, want_half, q, 4, TOL_ORACLE));
    }
    pl_kt_env_fini(&e);
}

Test(oracle, silu_known_values) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    const float g[4] = {0.0f, 1.0f, -2.0f, 30.0f}, u[4] = {5.0f, 1.0f, 2.0f, 0.5f};
    /* silu(1) = 1 / (1 + e^-1) = 0.7310585786; silu(-2) = -2 / (1 + e^2) = -0.2384058440 */
    const float want[4] = {0.0f, 0.7310585786f, -0.4768116880f, 15.0f};
    float got[4];
    FOR_EACH_BACKEND(e, be, name) {
        cr_assert_eq(be->ops->silu_mul(be, got, g, u, 4), PL_OK);
        cr_assert(pl_kt_close(name, want, got, 4, TOL_ORACLE));
    }
    pl_kt_env_fini(&e);
}

Test(oracle, embed_picks_rows) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    const float table[6] = {0.5f, -1, 2, 3, -0.25f, 8}; /* (3, 2), exact in f16 and bf16 */
    uint16_t th[6];
    for (int i = 0; i < 6; i++) th[i] = pl_f32_to_f16(table[i]);
    const float want[6] = {-0.25f, 8, 0.5f, -1, -0.25f, 8};
    float got[6];
    FOR_EACH_BACKEND(e, be, name) {
        cr_assert_eq(be->ops->embed(be, got, (int32_t[]){2, 0, 2}, 3, table, PL_WTYPE_F32, 2),
                     PL_OK);
        cr_assert(pl_kt_close(name, want, got, 6, TOL_EXACT));
        cr_assert_eq(be->ops->embed(be, got, (int32_t[]){2, 0, 2}, 3, th, PL_WTYPE_F16, 2), PL_OK);
        cr_assert(pl_kt_close(name, want, got, 6, TOL_EXACT));
    }
    pl_kt_env_fini(&e);
}

/* Attention cases with known answers: one position returns V exactly; a zero query weights
 * all positions equally (the mean of V); GQA maps query head h to KV head h / group. */
Test(oracle, attention_known_answers) {
    for (int kv = 0; kv < 2; kv++) {
        pl_dtype t = kv ? PL_DTYPE_F16 : PL_DTYPE_F32;
        pl_kt_env e;
        pl_kt_env_init(&e, t);
        pl_test_rng r;
        pl_test_rng_seed(&r, 70);
        enum { HD = 5, NKV = 2, NH = 4, BS = 2, CTX = 5, NB = 4 };
        /* K/V values exactly representable in f16, so the expected values need no rounding */
        float k[CTX * NKV * HD], v[CTX * NKV * HD];
        for (int i = 0; i < CTX * NKV * HD; i++) {
            k[i] = (float)((int)pl_test_rng_below(&r, 17) - 8) / 8.0f;
            v[i] = (float)((int)pl_test_rng_below(&r, 17) - 8) / 4.0f;
        }
        int32_t table[NB] = {3, 0, 2, 1}; /* position t lives in block table[t / 2] */
        int64_t slots[CTX];
        for (int p = 0; p < CTX; p++) slots[p] = (int64_t)table[p / BS] * BS + p % BS;
        FOR_EACH_BACKEND(e, be, name) {
            size_t bytes = (size_t)NB * NKV * BS * HD * pl_dtype_size(t);
            void *kc, *vc;
            cr_assert_eq(be->ops->alloc(be, bytes, &kc), PL_OK);
            cr_assert_eq(be->ops->alloc(be, bytes, &vc), PL_OK);
            cr_assert_eq(be->ops->kv_store(be, kc, vc, k, v, slots, CTX, NKV, HD, BS), PL_OK);

            /* seq 0: one decode row at position 0 (context 1): out = V[0] of its KV head.
             * seq 1: one row at position 4 with q = 0: out = mean of V[0..4]. Both sequences
             * share the same blocks (as with a shared prefix). */
            int32_t qs[3] = {0, 1, 2}, cl[2] = {1, CTX}, bt[2 * NB];
            memcpy(bt, table, sizeof table);
            memcpy(bt + NB, table, sizeof table);
            float q[2 * NH * HD];
            pl_test_fill(&r, q, NH * HD, 3.0f);
            memset(q + NH * HD, 0, NH * HD * sizeof(float));
            pl_attn_batch b = {.n_seqs = 2, .n_tokens = 2, .query_start = qs,
                               .context_lens = cl, .block_tables = bt, .max_blocks_per_seq = NB,
                               .max_query_len = 1, .max_context_len = CTX, .n_heads = NH,
                               .n_kv_heads = NKV, .head_dim = HD, .block_size = BS,
                               .scale = 0.7f};
            float out[2 * NH * HD], want[2 * NH * HD];
            for (int h = 0; h < NH; h++) {
                int kh = h / (NH / NKV);
                for (int d = 0; d < HD; d++) {
                    want[h * HD + d] = v[kh * HD + d];
                    double mean = 0;
                    for (int p = 0; p < CTX; p++) mean += v[(p * NKV + kh) * HD + d];
                    want[NH * HD + h * HD + d] = (float)(mean / CTX);
                }
            }
            cr_assert_eq(be->ops->attention(be, out, q, kc, vc, &b), PL_OK, "%s", pl_last_error());
            cr_assert(pl_kt_close(name, want, out, NH * HD, TOL_EXACT),
                      "one position returns V exactly (%s)", pl_dtype_name(t));
            cr_assert(pl_kt_close(name, want + NH * HD, out + NH * HD, NH * HD, TOL_ORACLE),
                      "a zero query averages V (%s)", pl_dtype_name(t));
            be->ops->free(be, kc);
            be->ops->free(be, vc);
        }
        pl_kt_env_fini(&e);
    }
}
