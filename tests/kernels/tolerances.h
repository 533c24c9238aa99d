/*
 * tests/kernels/tolerances.h - the one table of tolerances for comparing the cpu backend (and
 * later cuda) against ref, with why each is what it is.
 *
 * A comparison passes when |got - ref| <= atol + rtol * |ref| for every element
 * (pl_allclose) and, for long reductions, when mse(ref, got) / mse(ref, 0) <= nmse.
 * Inputs in the tests are uniform in [-1, 1] unless a test says otherwise; ref accumulates in
 * double, so these bounds are the fast path's f32 rounding only.
 */
#ifndef PL_TESTS_KERNELS_TOLERANCES_H
#define PL_TESTS_KERNELS_TOLERANCES_H

typedef struct pl_tol {
    float atol, rtol;
    double nmse; /* 0: not checked */
} pl_tol;

/* Widening f16/bf16 to f32 is exact and gather/copy are memcpy: bit-identical. */
static const pl_tol TOL_EXACT = {0.0f, 0.0f, 0.0};
/* f32 sum of squares in 16-32 partial lanes vs double: ~dim/32 roundings of 6e-8 each. */
static const pl_tol TOL_RMSNORM = {1e-6f, 2e-5f, 0.0};
/* cosf/sinf (1 ulp) instead of double cos/sin, then two f32 products and a sum. */
static const pl_tol TOL_ROPE = {2e-6f, 1e-5f, 0.0};
/* own vector exp (~2 ulp) + one division and product: a few ulp relative. */
static const pl_tol TOL_SILU = {1e-7f, 2e-6f, 0.0};
/* f32 dot products of up to 768 terms in lane-parallel or sgemm order vs double:
 * error grows like sqrt(d_in) * 6e-8 * sum|x w| (<= ~1e-4 absolute for d_in 768). */
static const pl_tol TOL_MATMUL = {2e-4f, 1e-4f, 1e-10};
/* The same for d_in 5000 (a 6.5x longer reduction than the shape table's 768). */
static const pl_tol TOL_MATMUL_LONG = {6e-4f, 1e-4f, 1e-10};
/* Quantised weights through the integer GEMV (kernels/cpu/qgemv.c): the activations are
 * rounded to int8 per block of 32 (scale d = max |x| / 127), each value by at most d / 2, so
 * an output may differ from ref's (f32 activations, the same dequantised weights) by up to
 *     B = sum_b (max_{i in b} |x_i| / 254) * sum_{i in b} |w_i|
 * The tests compute B for every output and allow TOL_QACT_SLACK * B (the slack covers the
 * scale's own f32 rounding) plus this tolerance's f32 terms (as TOL_MATMUL). The nmse bound is
 * for inputs uniform in [-1, 1): the rounding errors are then uniform in [-d/2, d/2] and
 * independent, nmse ~ (d / 2)^2 / 3 / (1/3) = (1/254)^2 = 1.6e-5 (measured 0.8-1.3e-5).
 * The dequantising paths (own GEMM, OpenBLAS tiles) read the weights exactly and keep f32
 * activations: TOL_MATMUL holds for them, and these bounds too. */
#define TOL_QACT_SLACK 1.01
static const pl_tol TOL_QMATMUL = {2e-4f, 1e-4f, 4e-5};
/* scores (f32 dots of head_dim terms), online-softmax rescaling and own exp (~2 ulp), then a
 * convex combination of V rows in [-1, 1]: errors stay near 1e-6 absolute. Also used with a
 * sliding window: a window only removes keys (fewer terms, fewer rescales), so the error
 * cannot grow; a window of 1 is exact (one weight of 1: out = V[p], asserted bitwise), and a
 * window covering the context is asserted bit-identical to none. */
static const pl_tol TOL_ATTENTION = {2e-5f, 1e-4f, 1e-10};
/* The same with scores of magnitude ~100 (q scaled by 40): an f32 dot's absolute error,
 * about |s| * sqrt(head_dim) * 6e-8 ~ 5e-5, becomes a relative error of the softmax weights. */
static const pl_tol TOL_ATTENTION_PEAKY = {5e-4f, 1e-3f, 1e-8};
/* Whole model, every logit of every position (tests/e2e/test_e2e_logits.c): cpu vs ref, and
 * either vs the dense reference. The per-op errors above compound through every layer's
 * residual stream and then a dot of dim terms with lm_head, where logits reach |18|
 * (stories260K). Measured worst: 2.3e-5 absolute at a logit of 17 (0.15 of this bound), nmse
 * 7e-14; a wrong frequency, position or block gives errors of order 0.1-1. */
static const pl_tol TOL_LOGITS = {1e-4f, 1e-4f, 1e-10};
/* The same with an f16 KV cache on both sides (the dense reference rounds K and V to f16 as it
 * stores them): a K or V element that lies near an f16 rounding boundary may round one way in
 * one backend and the other way in another (their f32 values differ in the last bits), a
 * difference of an f16 ulp (4.9e-4 relative) that the layers after it carry on. Measured
 * worst on stories260K: 0.0143 absolute (cpu vs ref), against 1.4e-5 with an f32 cache; a
 * wrong block or position still gives errors of order 0.1-1. */
static const pl_tol TOL_LOGITS_KV_F16 = {3e-2f, 2e-3f, 1e-6};
/* Independent hand-computed checks of ref itself (formulas in float/double in the test). */
static const pl_tol TOL_ORACLE = {1e-6f, 1e-6f, 0.0};

#endif
