/*
 * engine/dist_api.c - the public face of tensor parallelism (pagellm.h's section): which role
 * a process of an mpirun launch has, a worker's life, the engine's health, what is built in,
 * and the all-reduce benchmark of `pagellm doctor comm`.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "util/alloc.h"
#include "util/timer.h"

pl_status pl_engine_config_is_worker(const pl_engine_config *cfg, bool *out_is_worker) {
    if (!out_is_worker) return pl_fail(PL_ERR_INVALID_ARGUMENT, "is_worker: out is NULL");
    *out_is_worker = false;
    pl_engine_config c;
    PL_TRY(pl_engine_config_take(cfg, &c));
    int rank, size, local;
    if (!pl_comm_launcher_rank(&rank, &size, &local) || size == 1) return PL_OK;
    if (c.tensor_parallel_size == 1)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "mpirun started %d ranks: give --tensor-parallel-size %d to split the "
                       "model over them (or run one process)", size, size);
    pl_dist_backend kind;
    PL_TRY(pl_tp_resolve(&c, &kind, &rank, &local));
    *out_is_worker = rank > 0;
    return PL_OK;
}

pl_status pl_engine_run_worker(const pl_engine_config *cfg) {
    pl_engine_config c;
    PL_TRY(pl_engine_config_take(cfg, &c));
    return pl_tp_run_worker(&c);
}

pl_status pl_engine_health(const pl_engine *e) {
    if (!e) return pl_fail(PL_ERR_INVALID_ARGUMENT, "health: engine is NULL");
    return pl_tp_health(e->tp);
}

const char *pl_distributed_backends(void) {
    static char s[160];
    if (s[0]) return s;
    size_t n = (size_t)snprintf(s, sizeof s, "threads");
    if (pl_comm_have_mpi())
        n += (size_t)snprintf(s + n, sizeof s - n, ", mpi (%s)", pl_comm_mpi_version());
    if (pl_comm_have_nccl() && n < sizeof s)
        snprintf(s + n, sizeof s - n, ", nccl (%s)", pl_comm_nccl_version());
    return s;
}

/* ---- pagellm doctor comm ------------------------------------------------------------------ */

typedef struct bench_job {
    pl_comm *comm;
    pl_backend *be;          /* nccl: device buffers; NULL: host */
    const size_t *sizes;
    size_t n_sizes;
    int iters;
    pl_comm_bench_row *rows; /* rank 0's */
    pl_status status;
    char error[256];
} bench_job;

/* Every rank fills its buffer with rank + 1: the sum is N (N + 1) / 2 everywhere, exactly. */
static pl_status fill(bench_job *j, float *host, void *buf, size_t n) {
    for (size_t i = 0; i < n; i++) host[i] = (float)(j->comm->rank + 1);
    if (!j->be) return PL_OK;
    return j->be->ops->upload(j->be, buf, host, n * sizeof(float));
}

static pl_status bench_rank(bench_job *j) {
    size_t most = 0;
    for (size_t i = 0; i < j->n_sizes; i++)
        if (j->sizes[i] > most) most = j->sizes[i];
    size_t cap = most / sizeof(float) + 1;
    float *host = pl_malloc(cap * sizeof(float));
    void *buf = host;
    if (!host) return pl_fail(PL_ERR_OUT_OF_MEMORY, "doctor comm: %zu bytes", most);
    pl_status st = PL_OK;
    if (j->be) st = j->be->ops->alloc(j->be, cap * sizeof(float), &buf);
    int N = j->comm->size;
    float want = (float)N * (float)(N + 1) / 2.0f;
    for (size_t k = 0; k < j->n_sizes && st == PL_OK; k++) {
        size_t n = j->sizes[k] / sizeof(float);
        st = fill(j, host, buf, n);
        for (int w = 0; w < 2 && st == PL_OK; w++) st = pl_comm_all_reduce_sum(j->comm, buf, n);
        if (st == PL_OK) st = pl_comm_barrier(j->comm);
        uint64_t t0 = pl_now_ns();
        for (int it = 0; it < j->iters && st == PL_OK; it++)
            st = pl_comm_all_reduce_sum(j->comm, buf, n);
        double secs = (double)(pl_now_ns() - t0) * 1e-9 / (j->iters > 0 ? j->iters : 1);
        /* correctness on fresh data, outside the timing */
        if (st == PL_OK) st = fill(j, host, buf, n);
        if (st == PL_OK) st = pl_comm_all_reduce_sum(j->comm, buf, n);
        if (st == PL_OK && j->be) st = j->be->ops->download(j->be, host, buf, n * sizeof(float));
        int32_t ok = 1, all_ok = 1;
        for (size_t i = 0; i < n && st == PL_OK; i++)
            if (host[i] != want) ok = 0;
        int32_t *oks = st == PL_OK ? pl_calloc((size_t)N, sizeof *oks) : NULL;
        if (st == PL_OK && !oks) st = pl_fail(PL_ERR_OUT_OF_MEMORY, "doctor comm");
        if (st == PL_OK) st = pl_comm_all_gather(j->comm, &ok, sizeof ok, oks);
        for (int r = 0; r < N && st == PL_OK; r++) all_ok &= oks[r];
        pl_free(oks);
        if (st == PL_OK && j->comm->rank == 0) {
            pl_comm_bench_row *row = &j->rows[k];
            double bytes = (double)n * sizeof(float);
            row->bytes = n * sizeof(float);
            row->seconds = secs;
            row->algbw_gbs = secs > 0 ? bytes / secs * 1e-9 : 0;
            row->busbw_gbs = row->algbw_gbs * 2.0 * (N - 1) / N;
            row->correct = all_ok != 0;
        }
    }
    if (j->be) j->be->ops->free(j->be, buf);
    pl_free(host);
    return st;
}

static void *bench_thread(void *arg) {
    bench_job *j = arg;
    j->status = bench_rank(j);
    if (j->status != PL_OK) {
        snprintf(j->error, sizeof j->error, "%s", pl_last_error());
        pl_comm_abort(j->comm, j->error);
    }
    return NULL;
}

static pl_status bench_threads(const pl_engine_config *c, bench_job *proto, char *info,
                               size_t cap) {
    int N = c->tensor_parallel_size;
    pl_comm_threads_world *w;
    PL_TRY(pl_comm_threads_world_create(N, c->distributed_timeout, &w));
    bench_job *jobs = pl_calloc((size_t)N, sizeof *jobs);
    pthread_t *t = pl_calloc((size_t)N, sizeof *t);
    pl_status st = jobs && t ? PL_OK : pl_fail(PL_ERR_OUT_OF_MEMORY, "doctor comm: threads");
    int started = 0;
    for (int r = 0; r < N && st == PL_OK; r++) {
        jobs[r] = *proto;
        st = pl_comm_threads_create(w, r, &jobs[r].comm);
    }
    if (st != PL_OK) {
        for (int r = 0; r < N && jobs; r++) pl_comm_destroy(jobs[r].comm);
        pl_comm_threads_world_release(w);
    } else {
        snprintf(info, cap, "threads: %d ranks, %s", N, jobs[0].comm->transport);
        for (int r = 1; r < N; r++)
            if (pthread_create(&t[r], NULL, bench_thread, &jobs[r]) == 0) started = r;
            else {
                pl_comm_abort(jobs[0].comm, "a thread did not start");
                break;
            }
        bench_thread(&jobs[0]);
        for (int r = 1; r <= started; r++) pthread_join(t[r], NULL);
        st = jobs[0].status;
        for (int r = 0; r < N && st == PL_OK; r++)
            if (jobs[r].status != PL_OK) st = pl_fail(jobs[r].status, "%s", jobs[r].error);
        if (st != PL_OK && jobs[0].status != PL_OK) pl_fail(st, "%s", jobs[0].error);
        for (int r = 0; r < N; r++) pl_comm_destroy(jobs[r].comm);
    }
    pl_free(jobs);
    pl_free(t);
    return st;
}

pl_status pl_comm_benchmark(const pl_engine_config *cfg, const size_t *sizes, size_t n_sizes,
                            int iters, pl_comm_bench_row *rows, const char **out_info) {
    static char info[256];
    if (!sizes || !rows || n_sizes == 0 || iters < 1)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "doctor comm: no sizes or iterations");
    for (size_t i = 0; i < n_sizes; i++)
        if (sizes[i] == 0 || sizes[i] % sizeof(float))
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "doctor comm: size %zu is not a positive "
                           "multiple of 4 bytes (f32)", sizes[i]);
    pl_engine_config c;
    PL_TRY(pl_engine_config_take(cfg, &c));
    bench_job proto = {.sizes = sizes, .n_sizes = n_sizes, .iters = iters, .rows = rows};
    pl_status st;
    if (c.tensor_parallel_size == 1 && c.distributed_backend != PL_DIST_MPI &&
        c.distributed_backend != PL_DIST_NCCL) {
        st = pl_comm_one_create(&proto.comm);
        if (st == PL_OK) {
            snprintf(info, sizeof info, "one rank: nothing to exchange");
            st = bench_rank(&proto);
            pl_comm_destroy(proto.comm);
        }
    } else {
        pl_dist_backend kind;
        int rank, local;
        PL_TRY(pl_tp_resolve(&c, &kind, &rank, &local));
        if (kind == PL_DIST_THREADS) {
            st = bench_threads(&c, &proto, info, sizeof info);
        } else {
            pl_comm *mpi = NULL, *nccl = NULL;
            st = pl_comm_mpi_create(c.distributed_timeout, &mpi);
            if (st == PL_OK && kind == PL_DIST_NCCL) {
                st = pl_rank_backend_create(&c, rank % (local > 0 ? local : 1), 1, &proto.be);
                if (st == PL_OK)
                    st = pl_comm_nccl_create(mpi, proto.be->device, proto.be->stream, &nccl);
            }
            proto.comm = nccl ? nccl : mpi;
            if (st == PL_OK) {
                snprintf(info, sizeof info, "%s: %d ranks, %s", nccl ? "nccl" : "mpi",
                         proto.comm->size, proto.comm->transport);
                st = bench_rank(&proto);
            }
            pl_comm_destroy(nccl);
            pl_comm_destroy(mpi);
            pl_backend_destroy(proto.be);
        }
    }
    if (out_info) *out_info = info;
    return st;
}
