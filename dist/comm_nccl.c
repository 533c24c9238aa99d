/*
 * dist/comm_nccl.c - all-reduce and all-gather over NCCL on device buffers, enqueued on the
 * backend's stream; broadcast and barrier (host data: the step plan) over the MPI
 * communicator the NCCL one was made from.
 *
 * The all-reduce is not ncclAllReduce, whose summation order follows NCCL's ring or tree: as
 * in dist/comm_mpi.c it is a reduce-scatter by grouped ncclSend/ncclRecv (part r of every
 * buffer to rank r), a kernel summing the parts in rank order (nccl_sum.cu), and the parts
 * sent back out, so every rank, and every implementation, holds the same bits. The
 * all-gather is ncclAllGather (it moves bytes; there is nothing to order).
 *
 * The communicator is non-blocking (ncclConfig_t.blocking = 0) and each collective waits for
 * its stream with a deadline: a hung or dead peer ends the wait with the rank's and the
 * operation's names instead of a kernel spinning forever, and ncclCommAbort frees the GPU.
 * The cost is a host wait per collective (the next kernels' launch latency is not hidden
 * behind it); a watchdog on events would remove it.
 */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

#include "dist/comm.h"
#include "util/alloc.h"
#include "util/timer.h"

int pl_nccl_sum_parts(float *own, const float *others, int rank, int size, size_t n,
                      void *stream);

typedef struct nctx {
    ncclComm_t comm;
    cudaStream_t stream;
    int device;
    pl_comm *mpi;          /* host collectives; the caller's */
    float *scratch;        /* device: (size - 1) received parts */
    size_t scratch_cap;    /* floats */
} nctx;

static pl_status nccl_failed(pl_comm *c, pl_comm_op op, const char *call, ncclResult_t r) {
    return pl_comm_failf(c, op, "%s: %s", call, ncclGetErrorString(r));
}

/* Waits for a non-blocking NCCL call to leave ncclInProgress. */
static pl_status nccl_settle(pl_comm *c, pl_comm_op op, const char *call, ncclResult_t r) {
    nctx *x = c->ctx;
    uint64_t start = pl_now_ns(), deadline = start + (uint64_t)(c->timeout_s * 1e9);
    for (unsigned a = 0; r == ncclInProgress; a++) {
        if (pl_now_ns() > deadline)
            return pl_comm_failf(c, op, "%s still in progress after %.1f s "
                                 "(--distributed-timeout)", call, c->timeout_s);
        pl_comm_backoff(pl_now_ns() - start);
        ncclCommGetAsyncError(x->comm, &r);
    }
    return r == ncclSuccess ? PL_OK : nccl_failed(c, op, call, r);
}

/* Waits for everything enqueued on the stream, or the deadline. */
static pl_status stream_wait(pl_comm *c, pl_comm_op op) {
    nctx *x = c->ctx;
    uint64_t start = pl_now_ns(), deadline = start + (uint64_t)(c->timeout_s * 1e9);
    for (unsigned a = 0;; a++) {
        cudaError_t e = cudaStreamQuery(x->stream);
        if (e == cudaSuccess) return PL_OK;
        if (e != cudaErrorNotReady)
            return pl_comm_failf(c, op, "CUDA: %s", cudaGetErrorString(e));
        ncclResult_t ar = ncclSuccess;
        ncclCommGetAsyncError(x->comm, &ar);
        if (ar != ncclSuccess && ar != ncclInProgress)
            return nccl_failed(c, op, "NCCL", ar);
        if (pl_now_ns() > deadline)
            return pl_comm_failf(c, op, "timed out after %.1f s waiting for the other %d ranks' "
                                 "NCCL transfers (--distributed-timeout)", c->timeout_s,
                                 c->size - 1);
        pl_comm_backoff(pl_now_ns() - start);
    }
}

static pl_status n_all_reduce(pl_comm *c, float *buf, size_t n) {
    nctx *x = c->ctx;
    size_t lo, hi;
    pl_comm_part(n, c->size, c->rank, &lo, &hi);
    size_t mine = hi - lo, need = (size_t)(c->size - 1) * mine;
    if (need > x->scratch_cap) {
        /* grows to the largest step's size once; cudaFree/cudaMalloc synchronise, which the
         * wait below does anyway */
        cudaFree(x->scratch);
        x->scratch = NULL;
        x->scratch_cap = 0;
        if (cudaMalloc((void **)&x->scratch, need * sizeof(float)) != cudaSuccess)
            return pl_comm_failf(c, PL_COMM_ALL_REDUCE, "cudaMalloc of %zu floats failed", need);
        x->scratch_cap = need;
    }
    ncclGroupStart();
    for (int r = 0, k = 0; r < c->size; r++) {
        if (r == c->rank) continue;
        size_t plo, phi;
        pl_comm_part(n, c->size, r, &plo, &phi);
        ncclRecv(x->scratch + (size_t)k++ * mine, mine, ncclFloat32, r, x->comm, x->stream);
        ncclSend(buf + plo, phi - plo, ncclFloat32, r, x->comm, x->stream);
    }
    PL_TRY(nccl_settle(c, PL_COMM_ALL_REDUCE, "ncclGroupEnd", ncclGroupEnd()));
    int e = pl_nccl_sum_parts(buf + lo, x->scratch, c->rank, c->size, mine, x->stream);
    if (e != 0)
        return pl_comm_failf(c, PL_COMM_ALL_REDUCE, "sum kernel: %s",
                             cudaGetErrorString((cudaError_t)e));
    ncclGroupStart();
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank) continue;
        size_t plo, phi;
        pl_comm_part(n, c->size, r, &plo, &phi);
        ncclRecv(buf + plo, phi - plo, ncclFloat32, r, x->comm, x->stream);
        ncclSend(buf + lo, mine, ncclFloat32, r, x->comm, x->stream);
    }
    PL_TRY(nccl_settle(c, PL_COMM_ALL_REDUCE, "ncclGroupEnd", ncclGroupEnd()));
    return stream_wait(c, PL_COMM_ALL_REDUCE);
}

static pl_status n_all_gather(pl_comm *c, const void *send, size_t n_bytes, void *recv) {
    nctx *x = c->ctx;
    PL_TRY(nccl_settle(c, PL_COMM_ALL_GATHER, "ncclAllGather",
                       ncclAllGather(send, recv, n_bytes, ncclInt8, x->comm, x->stream)));
    return stream_wait(c, PL_COMM_ALL_GATHER);
}

static pl_status n_broadcast(pl_comm *c, void *buf, size_t n_bytes, int root) {
    pl_comm *m = ((nctx *)c->ctx)->mpi;
    return m->ops->broadcast(m, buf, n_bytes, root);
}

static pl_status n_barrier(pl_comm *c) {
    pl_comm *m = ((nctx *)c->ctx)->mpi;
    return m->ops->barrier(m);
}

static void n_abort(pl_comm *c, const char *why) {
    nctx *x = c->ctx;
    ncclCommAbort(x->comm);
    x->comm = NULL;
    pl_comm_abort(x->mpi, why);
}

static void n_destroy(pl_comm *c) {
    nctx *x = c->ctx;
    if (x) {
        if (x->comm) {
            if (c->broken) ncclCommAbort(x->comm);
            else ncclCommDestroy(x->comm);
        }
        cudaFree(x->scratch);
        pl_free(x);
    }
    pl_free(c);
}

static const pl_comm_ops nccl_ops = {
    .name = "nccl", .all_reduce_sum = n_all_reduce, .all_gather = n_all_gather,
    .broadcast = n_broadcast, .barrier = n_barrier, .abort = n_abort, .destroy = n_destroy,
};

pl_status pl_comm_nccl_create(pl_comm *mpi, int device, void *stream, pl_comm **out) {
    if (!mpi || !stream)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "--distributed-backend nccl: needs the MPI "
                       "communicator and the CUDA backend's stream (--backend cuda)");
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (mpi->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess)
            return pl_fail(PL_ERR_BACKEND, "ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
    PL_TRY(pl_comm_broadcast(mpi, &id, sizeof id, 0));
    if (cudaSetDevice(device) != cudaSuccess)
        return pl_fail(PL_ERR_BACKEND, "--cuda-device %d: cudaSetDevice failed", device);
    pl_comm *c = NULL;
    nctx *x = pl_calloc(1, sizeof *x);
    pl_status s = x ? pl_comm_alloc(&nccl_ops, mpi->rank, mpi->size, mpi->timeout_s, &c)
                    : pl_fail(PL_ERR_OUT_OF_MEMORY, "NCCL communicator: state");
    if (s != PL_OK) {
        pl_free(x);
        return s;
    }
    c->ctx = x;
    c->device = true;
    x->mpi = mpi;
    x->device = device;
    x->stream = (cudaStream_t)stream;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&x->comm, mpi->size, id, mpi->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        x->comm = NULL;
        s = pl_fail(PL_ERR_BACKEND, "ncclCommInitRankConfig: %s", ncclGetErrorString(r));
    } else {
        s = nccl_settle(c, PL_COMM_BARRIER, "ncclCommInitRankConfig", r);
    }
    if (s != PL_OK) {
        c->broken = true;
        n_destroy(c);
        return s;
    }
    int v = 0;
    ncclGetVersion(&v);
    /* the host side (the step plan) goes over mpi: its transport says what links the hosts */
    snprintf(c->transport, sizeof c->transport, "NCCL %d.%d.%d on CUDA device %d, plan over %.*s",
             v / 10000, v / 100 % 100, v % 100, device, 100, mpi->transport);
    *out = c;
    return PL_OK;
}

bool pl_comm_have_nccl(void) { return true; }

const char *pl_comm_nccl_version(void) {
    static char v[32];
    int n = 0;
    if (!v[0] && ncclGetVersion(&n) == ncclSuccess)
        snprintf(v, sizeof v, "%d.%d.%d", n / 10000, n / 100 % 100, n % 100);
    return v;
}
