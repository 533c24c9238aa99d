/*
 * tests/support/test_support.c - RNG, comparisons, model paths for the tests.
 */
#include "test_support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void pl_test_rng_seed(pl_test_rng *r, uint64_t seed) { r->s = seed ? seed : 0x9e3779b97f4a7c15ull; }

uint64_t pl_test_rng_u64(pl_test_rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545f4914f6cdd1dull;
}

uint32_t pl_test_rng_below(pl_test_rng *r, uint32_t n) {
    return n ? (uint32_t)((pl_test_rng_u64(r) >> 32) % n) : 0;
}

float pl_test_rng_float(pl_test_rng *r) {
    return (float)((pl_test_rng_u64(r) >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; /* 24 bits */
}

void pl_test_fill(pl_test_rng *r, float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = pl_test_rng_float(r) * scale;
}

uint64_t pl_test_run_seed(const char *what) {
    const char *env = getenv("PL_TEST_SEED");
    uint64_t seed;
    if (env) {
        seed = strtoull(env, NULL, 0);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
    }
    fprintf(stderr, "%s: run seed %llu (replay with PL_TEST_SEED=%llu)\n", what,
            (unsigned long long)seed, (unsigned long long)seed);
    return seed;
}

bool pl_allclose(const char *name, const float *ref, const float *got, size_t n, float atol,
                 float rtol) {
    size_t bad = 0;
    double max_abs = 0, max_rel = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        double rel = d / (fabs((double)ref[i]) + 1e-30);
        if (!(d <= atol + rtol * fabs((double)ref[i]))) {
            if (bad < 5)
                fprintf(stderr, "%s: mismatch at %zu: ref %.9g got %.9g\n", name, i, ref[i], got[i]);
            bad++;
        }
        if (d > max_abs || isnan(d)) max_abs = d;
        if (rel > max_rel) max_rel = rel;
    }
    if (bad)
        fprintf(stderr, "%s: %zu of %zu mismatched (atol %g rtol %g), max abs %g max rel %g\n",
                name, bad, n, atol, rtol, max_abs, max_rel);
    return bad == 0;
}

double pl_nmse(const float *ref, const float *got, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? num / den : num;
}

const char *pl_test_models_dir(void) {
    const char *d = getenv("PAGELLM_TEST_MODELS");
    return (d && d[0]) ? d : NULL;
}

bool pl_test_model_path(const char *name, char *buf, size_t cap) {
    const char *dir = pl_test_models_dir();
    if (!dir) {
        fprintf(stderr, "PAGELLM_TEST_MODELS is not set: skipping tests that need %s\n", name);
        return false;
    }
    snprintf(buf, cap, "%s/%s", dir, name);
    struct stat st;
    if (stat(buf, &st) != 0) {
        fprintf(stderr, "%s not found (PAGELLM_TEST_MODELS=%s): skipping\n", buf, dir);
        return false;
    }
    return true;
}

const char *pl_test_tmpdir(void) {
    static _Thread_local char buf[512];
    const char *base = getenv("TMPDIR");
    snprintf(buf, sizeof buf, "%s/pagellm-test-XXXXXX", base && base[0] ? base : "/tmp");
    return mkdtemp(buf) ? buf : NULL;
}
