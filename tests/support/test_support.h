/*
 * tests/support/test_support.h - what every test shares: a seeded RNG, float comparison with
 * a report of the worst element, leak assertions under the sanitizers, and access to the
 * shared test models.
 */
#ifndef PL_TEST_SUPPORT_H
#define PL_TEST_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- deterministic random numbers (xorshift64*) ---- */
typedef struct pl_test_rng {
    uint64_t s;
} pl_test_rng;
void pl_test_rng_seed(pl_test_rng *r, uint64_t seed);
uint64_t pl_test_rng_u64(pl_test_rng *r);
uint32_t pl_test_rng_below(pl_test_rng *r, uint32_t n); /* uniform in [0, n) */
float pl_test_rng_float(pl_test_rng *r);                /* uniform in [-1, 1) */
void pl_test_fill(pl_test_rng *r, float *x, size_t n, float scale);

/* A per-run seed: PL_TEST_SEED from the environment, else from the clock. Printed on stderr
 * with `what` so a failing randomized run can be replayed. */
uint64_t pl_test_run_seed(const char *what);

/* ---- float comparison (llm.c's rule: |got - ref| <= atol + rtol * |ref|) ---- */
/* Returns true when all n elements are close; otherwise prints the first 5 mismatches and the
 * max abs/rel error, prefixed with name, on stderr. */
bool pl_allclose(const char *name, const float *ref, const float *got, size_t n, float atol,
                 float rtol);
/* Normalised mean squared error: mse(ref, got) / mse(ref, 0). */
double pl_nmse(const float *ref, const float *got, size_t n);

/* ---- shared models ---- */
/* The folder named by PAGELLM_TEST_MODELS, or NULL. */
const char *pl_test_models_dir(void);
/* Writes "<dir>/<name>" into buf; false (and a message on stderr) when the folder is unset
 * or the file is missing. */
bool pl_test_model_path(const char *name, char *buf, size_t cap);

/* A fresh temporary directory (mkdtemp under TMPDIR or /tmp); static storage per call. */
const char *pl_test_tmpdir(void);

#ifdef __cplusplus
}
#endif

/* ---- the allocation-failure sweep (needs util/alloc.h, util/status.h and criterion) ---- */
/* Runs CALL, an expression giving a pl_status, with allocation k failing
 * (pl_alloc_fail_after(k)) for k = 0, 1, ... until it returns PL_OK, and asserts that every
 * failure is PL_ERR_OUT_OF_MEMORY; after each failure the statements given last run (checks
 * of what it left, cleanup; `{}` for none). k names the counter, in scope in CALL and those
 * statements; the int lvalue n_failed counts the failed runs. The hook is reset after each
 * call, so the checks and what follows the sweep allocate freely. */
#define PL_ALLOC_SWEEP_MAX 100000
#define PL_ALLOC_SWEEP(n_failed, k, CALL, ...)                                                  \
    for (long k = 0;; k++) {                                                                    \
        pl_alloc_fail_after(k);                                                                 \
        pl_status pl_sweep_st_ = (CALL);                                                        \
        pl_alloc_fail_after(-1);                                                                \
        if (pl_sweep_st_ == PL_OK) break;                                                       \
        cr_assert_eq(pl_sweep_st_, PL_ERR_OUT_OF_MEMORY, "%s, failing allocation %ld: %s (%s)", \
                     #CALL, k, pl_status_name(pl_sweep_st_), pl_last_error());                  \
        cr_assert_lt(k, PL_ALLOC_SWEEP_MAX, "%s: still failing after %ld allocations", #CALL,   \
                     k);                                                                        \
        (n_failed)++;                                                                           \
        __VA_ARGS__                                                                             \
    }

/* Asserts at the end of a test body that nothing leaked (only under AddressSanitizer, whose
 * leak report alone does not fail a Criterion test). */
#if defined(__SANITIZE_ADDRESS__)
#define PL_HAVE_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PL_HAVE_LSAN 1
#endif
#endif
#ifdef PL_HAVE_LSAN
#include <sanitizer/lsan_interface.h>
#define PL_ASSERT_NO_LEAKS() cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "memory leaked")
#else
#define PL_ASSERT_NO_LEAKS() ((void)0)
#endif

#endif
