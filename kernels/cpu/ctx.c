/*
 * kernels/cpu/ctx.c - what every op of the cpu backend shares through its pl_cpu_ctx:
 * per-thread and shared scratch, how many tasks to split work into, the ISA's name. Below the
 * ops and backend_cpu.c (which creates the context); it calls none of them.
 */
#include <stdint.h>

#include "kernels/cpu/cpu.h"
#include "util/alloc.h"

const char *pl_cpu_isa_name(pl_cpu_isa isa) {
    switch (isa) {
    case PL_CPU_ISA_AVX512: return "avx512";
    case PL_CPU_ISA_AVX2: return "avx2";
    default: return "scalar";
    }
}

// ---------------------------------------------------------------------------------------------
// scratch and task splitting

pl_status pl_cpu_reserve(pl_cpu_ctx *c, size_t n_floats, size_t n_ints) {
    if (n_floats > c->scratch_cap) {
        size_t cap = (n_floats + 4095) & ~(size_t)4095; /* whole pages: fewer regrowths */
        if (cap > SIZE_MAX / sizeof(float))
            return pl_fail(PL_ERR_OUT_OF_MEMORY, "cpu backend: scratch of %zu floats", n_floats);
        for (int t = 0; t < c->n_threads; t++) {
            float *p = pl_calloc_aligned(cap * sizeof(float), false);
            if (!p)
                return pl_fail(PL_ERR_OUT_OF_MEMORY,
                               "cpu backend: no memory for %zu bytes of scratch", cap * 4);
            pl_free_aligned(c->scratch[t]);
            c->scratch[t] = p;
        }
        c->scratch_cap = cap;
    }
    if (n_ints > c->int_cap) {
        int32_t *p = pl_reallocarray(c->ints, n_ints, sizeof *p);
        if (!p)
            return pl_fail(PL_ERR_OUT_OF_MEMORY, "cpu backend: no memory for %zu ints of scratch",
                           n_ints);
        c->ints = p;
        c->int_cap = n_ints;
    }
    return PL_OK;
}

pl_status pl_cpu_reserve_shared(pl_cpu_ctx *c, size_t n_floats) {
    if (n_floats <= c->shared_cap) return PL_OK;
    size_t cap = (n_floats + 4095) & ~(size_t)4095;
    float *p =
        cap <= SIZE_MAX / sizeof(float) ? pl_calloc_aligned(cap * sizeof(float), false) : NULL;
    if (!p)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "cpu backend: no memory for %zu floats of shared "
                       "scratch", n_floats);
    pl_free_aligned(c->shared);
    c->shared = p;
    c->shared_cap = cap;
    return PL_OK;
}

int pl_cpu_n_tasks(const pl_cpu_ctx *c, size_t work, size_t min_per_task) {
    if (c->n_threads <= 1 || min_per_task == 0 || work < 2 * min_per_task) return 1;
    size_t n = work / min_per_task, cap = (size_t)c->n_threads * 8;
    return (int)(n < cap ? n : cap);
}
