/*
 * tests/kernels/kernels_test.c - the backend set and helpers shared by the kernel tests.
 */
#include "tests/kernels/kernels_test.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "util/dtype.h"

void pl_kt_env_init(pl_kt_env *e, pl_dtype kv_dtype) {
    *e = (pl_kt_env){0};
    pl_backend_options opt = {.n_threads = 1, .kv_dtype = kv_dtype};
    cr_assert_eq(pl_backend_ref_create(&opt, &e->ref), PL_OK, "ref create: %s", pl_last_error());
    pl_cpu_isa best = pl_cpu_detect_isa();
    for (int isa = PL_CPU_ISA_SCALAR; isa <= (int)best; isa++) {
        for (int t = 1; t <= 3; t++) {
            opt.n_threads = t;
            pl_backend **be = &e->cpu[e->n_cpu];
            cr_assert_eq(pl_cpu_backend_create_isa(&opt, (pl_cpu_isa)isa, be), PL_OK,
                         "cpu create: %s", pl_last_error());
            snprintf(e->name[e->n_cpu], sizeof e->name[0], "cpu/%s/t%d",
                     pl_cpu_isa_name((pl_cpu_isa)isa), t);
            e->n_cpu++;
        }
    }
}

void pl_kt_env_fini(pl_kt_env *e) {
    pl_backend_destroy(e->ref);
    for (int i = 0; i < e->n_cpu; i++) pl_backend_destroy(e->cpu[i]);
    *e = (pl_kt_env){0};
}

bool pl_kt_close(const char *what, const float *ref, const float *got, size_t n, pl_tol tol) {
    if (!pl_allclose(what, ref, got, n, tol.atol, tol.rtol)) return false;
    if (tol.nmse > 0) {
        double e = pl_nmse(ref, got, n);
        if (e > tol.nmse) {
            fprintf(stderr, "%s: nmse %.3g > %.3g\n", what, e, tol.nmse);
            return false;
        }
    }
    return true;
}

float *pl_kt_rand(pl_test_rng *r, size_t n, float scale) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    cr_assert_not_null(p);
    pl_test_fill(r, p, n, scale);
    return p;
}

void *pl_kt_rand_weights(pl_test_rng *r, size_t n, pl_wtype t, float **f32_out) {
    float *f = pl_kt_rand(r, n, 1.0f);
    void *w = f;
    if (t != PL_WTYPE_F32) {
        const pl_wtype_traits *tr = pl_wtype_traits_of(t);
        cr_assert(tr && n % (size_t)tr->block_elems == 0, "%zu values of %s", n,
                  pl_wtype_name(t));
        uint64_t bytes;
        cr_assert(pl_wtype_bytes(t, n, &bytes));
        w = malloc(bytes ? (size_t)bytes : 1);
        cr_assert_not_null(w);
        tr->from_f32(f, w, n);
        tr->to_f32(w, f, n); /* the values the stored weights stand for */
    }
    if (f32_out && w == f) { /* give the caller two buffers to free, whatever the type */
        *f32_out = malloc((n ? n : 1) * sizeof(float));
        cr_assert_not_null(*f32_out);
        memcpy(*f32_out, f, n * sizeof(float));
    } else if (f32_out) {
        *f32_out = f;
    } else if (w != f) {
        free(f);
    }
    return w;
}

void pl_kt_qact_bound(const float *x, const float *wf, int rows, int d_in, int d_out,
                      float *bound) {
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < d_out; o++) {
            double b = 0;
            for (int k = 0; k < d_in; k += 32) {
                float amax = 0;
                double sw = 0;
                for (int i = k; i < k + 32; i++) {
                    amax = fmaxf(amax, fabsf(x[(size_t)r * d_in + i]));
                    sw += fabs(wf[(size_t)o * d_in + i]);
                }
                b += amax / 254.0 * sw;
            }
            bound[(size_t)r * d_out + o] = (float)(TOL_QACT_SLACK * b);
        }
}

bool pl_kt_q_close(const char *what, const float *want, const float *got, const float *bound,
                    size_t n) {
    for (size_t i = 0; i < n; i++) {
        float lim = bound[i] + TOL_QMATMUL.atol + TOL_QMATMUL.rtol * fabsf(want[i]);
        if (!(fabsf(got[i] - want[i]) <= lim)) {
            cr_log_error("%s: element %zu is %.7g, ref %.7g, allowed +-%.3g", what, i,
                         (double)got[i], (double)want[i], (double)lim);
            return false;
        }
    }
    /* nmse is a statistic of many independent roundings: a handful of outputs says little */
    double e = n >= 100 ? pl_nmse(want, got, n) : 0;
    if (e > TOL_QMATMUL.nmse) {
        cr_log_error("%s: nmse %.3g > %.3g", what, e, TOL_QMATMUL.nmse);
        return false;
    }
    return true;
}
