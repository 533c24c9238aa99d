/*
 * kernels/cpu/add_bias.c - bias add: x (n_rows, dim) += bias (dim) on every row.
 *
 * Elementwise and tiny next to the products it follows (q/k/v of Qwen2): rows are split over
 * the pool only when there are enough of them; the inner loop is left to the compiler.
 */
#include "kernels/cpu/cpu.h"

typedef struct bias_job {
    float *x;
    const float *bias;
    int dim, rows_per_task, n_rows;
} bias_job;

static void bias_task(void *arg, int task, int worker) {
    (void)worker;
    const bias_job *J = arg;
    int r0 = task * J->rows_per_task, r1 = r0 + J->rows_per_task;
    if (r1 > J->n_rows) r1 = J->n_rows;
    for (int r = r0; r < r1; r++) {
        float *row = J->x + (size_t)r * J->dim;
        for (int i = 0; i < J->dim; i++) row[i] += J->bias[i];
    }
}

pl_status pl_cpu_add_bias(pl_backend *be, float *x, const float *bias, int n_rows, int dim) {
    if (n_rows < 0 || dim <= 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "add_bias: n_rows %d, dim %d", n_rows, dim);
    if (n_rows == 0) return PL_OK;
    if (!x || !bias) return pl_fail(PL_ERR_INVALID_ARGUMENT, "add_bias: x or bias is NULL");
    pl_cpu_ctx *c = be->ctx;
    int n_tasks = pl_cpu_n_tasks(c, (size_t)n_rows * (size_t)dim, 1u << 14);
    if (n_tasks > n_rows) n_tasks = n_rows;
    int per = (n_rows + n_tasks - 1) / n_tasks;
    bias_job J = {.x = x, .bias = bias, .dim = dim, .rows_per_task = per, .n_rows = n_rows};
    pl_threadpool_run(c->pool, (n_rows + per - 1) / per, bias_task, &J);
    return PL_OK;
}
