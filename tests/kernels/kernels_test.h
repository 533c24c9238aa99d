/*
 * tests/kernels/kernels_test.h - what the kernel tests share: the set of backends every op
 * is compared over, and small buffer helpers.
 *
 * A pl_kt_env holds the ref backend (the oracle) and one cpu backend per (ISA, thread count)
 * pair this machine can run: ISAs scalar, avx2, avx512 up to what the CPU has, threads 1, 2, 3
 * (3 > cores on the CI machines, which exercises dynamic task claiming under contention).
 */
#ifndef PL_TESTS_KERNELS_TEST_H
#define PL_TESTS_KERNELS_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "tests/kernels/tolerances.h"
#include "tests/support/test_support.h"

#define PL_KT_MAX_CPU 9

typedef struct pl_kt_env {
    pl_backend *ref;
    int n_cpu;
    pl_backend *cpu[PL_KT_MAX_CPU];
    char name[PL_KT_MAX_CPU][32]; /* "cpu/avx512/t2" */
} pl_kt_env;

/* Creates ref and every cpu variant with the given kv_dtype; asserts on failure. */
void pl_kt_env_init(pl_kt_env *e, pl_dtype kv_dtype);
void pl_kt_env_fini(pl_kt_env *e);

/* Compares with a tolerance from tolerances.h: allclose, and nmse when tol.nmse > 0. Prints
 * `what` with the failing values (pl_allclose) and returns false on a mismatch. */
bool pl_kt_close(const char *what, const float *ref, const float *got, size_t n, pl_tol tol);

/* Random buffers (uniform [-scale, scale)) owned by the caller (free with free()). */
float *pl_kt_rand(pl_test_rng *r, size_t n, float scale);
/* n random values (uniform [-1, 1)) stored as weight type t (rounded to f16/bf16, quantised;
 * n whole blocks of t), plus (if f32_out) a separate buffer of the exact f32 values they
 * represent (the reference dequantiser's); free() both. */
void *pl_kt_rand_weights(pl_test_rng *r, size_t n, pl_wtype t, float **f32_out);

/* The activation-rounding bound of every output of a quantised matmul (tolerances.h,
 * TOL_QMATMUL): bound (rows, d_out) from x (rows, d_in) and the weights' exact values wf
 * (d_out, d_in). */
void pl_kt_qact_bound(const float *x, const float *wf, int rows, int d_in, int d_out,
                      float *bound);
/* got within bound of want, element by element, and (for 100 outputs or more) the nmse of
 * TOL_QMATMUL; logs `what` and the first mismatch. */
bool pl_kt_q_close(const char *what, const float *want, const float *got, const float *bound,
                   size_t n);

#endif
