/*
 * dist/comm.c - what every communicator shares: the checks, the broken state, timing and
 * counters around each collective; the one-rank implementation; the launcher's environment.
 */
#include "dist/comm.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/alloc.h"
#include "util/timer.h"

static const char *const op_names[PL_COMM_N_OPS] = {"all_reduce", "all_gather", "broadcast",
                                                      "barrier"};

const char *pl_comm_op_name(pl_comm_op op) {
    return op >= 0 && op < PL_COMM_N_OPS ? op_names[op] : "unknown";
}

pl_status pl_comm_alloc(const pl_comm_ops *ops, int rank, int size, double timeout_s,
                        pl_comm **out) {
    if (size < 1 || rank < 0 || rank >= size)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "communicator: rank %d of %d", rank, size);
    if (!(timeout_s > 0))
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "--distributed-timeout = %g: must be a positive number of seconds",
                       timeout_s);
    pl_comm *c = pl_calloc(1, sizeof *c);
    if (!c) return pl_fail(PL_ERR_OUT_OF_MEMORY, "communicator: state");
    c->ops = ops;
    c->rank = rank;
    c->size = size;
    c->timeout_s = timeout_s;
    *out = c;
    return PL_OK;
}

pl_status pl_comm_failf(pl_comm *c, pl_comm_op op, const char *fmt, ...) {
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (!c->broken) {
        snprintf(c->error, sizeof c->error, "rank %d: %s: %s", c->rank, pl_comm_op_name(op),
                 what);
        c->broken = true;
    }
    return pl_fail(PL_ERR_BACKEND, "%s", c->error);
}

void pl_comm_part(size_t n, int size, int rank, size_t *lo, size_t *hi) {
    size_t q = n / (size_t)size, r = n % (size_t)size, k = (size_t)rank;
    *lo = k * q + (k < r ? k : r);
    *hi = *lo + q + (k < r ? 1 : 0);
}

void pl_comm_backoff(uint64_t waited_ns) {
    /* Poll without pause for 200 us: a peer in step is microseconds away, and a transfer
     * progresses only while both sides poll (MPI's rendezvous). Then short sleeps, which on a
     * machine with more runnable threads than cores measured 10-30x faster than sched_yield
     * (a yield can hand the core away for a whole time slice): 16 requests of dummy:tiny over
     * 2 MPI ranks took 0.6-1.7 s with yields, 0.03-0.1 s with sleeps. Past 100 ms the wait is
     * an idle worker's (the next step has not come): 1 ms sleeps cost it almost no CPU. */
    if (waited_ns < 200000) return;
    struct timespec ts = {0, waited_ns < 100000000 ? 20000 : 1000000};
    nanosleep(&ts, NULL);
}

/* ---- the checked, timed, counted collectives ----------------------------------------- */

static pl_status enter(pl_comm *c, pl_comm_op op) {
    if (!c) return pl_fail(PL_ERR_INVALID_ARGUMENT, "communicator: NULL");
    if (c->broken)
        return pl_fail(PL_ERR_BACKEND, "%s (the communicator failed earlier; %s refused)",
                       c->error, pl_comm_op_name(op));
    return PL_OK;
}

static pl_status leave(pl_comm *c, pl_comm_op op, uint64_t t0, uint64_t bytes, pl_status s) {
    c->stats.calls[op]++;
    c->stats.bytes[op] += bytes;
    c->stats.ns[op] += pl_now_ns() - t0;
    if (s != PL_OK && !c->broken) {
        /* an implementation failure that did not go through pl_comm_failf */
        snprintf(c->error, sizeof c->error, "rank %d: %s: %s", c->rank, pl_comm_op_name(op),
                 pl_last_error());
        c->broken = true;
        pl_fail(s, "%s", c->error);
    }
    return s;
}

pl_status pl_comm_all_reduce_sum(pl_comm *c, float *buf, size_t n) {
    PL_TRY(enter(c, PL_COMM_ALL_REDUCE));
    if (n > 0 && !buf) return pl_fail(PL_ERR_INVALID_ARGUMENT, "all_reduce: NULL buffer");
    uint64_t t0 = pl_now_ns();
    /* one rank: nothing to add, except on a device, where the one-rank NCCL path is what a
     * machine with one GPU can check */
    pl_status s = (c->size == 1 && !c->device) || n == 0 ? PL_OK
                                                          : c->ops->all_reduce_sum(c, buf, n);
    return leave(c, PL_COMM_ALL_REDUCE, t0, (uint64_t)n * sizeof(float), s);
}

pl_status pl_comm_all_gather(pl_comm *c, const void *send, size_t n_bytes, void *recv) {
    PL_TRY(enter(c, PL_COMM_ALL_GATHER));
    if (n_bytes > 0 && (!send || !recv))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "all_gather: NULL buffer");
    uint64_t t0 = pl_now_ns();
    pl_status s = n_bytes == 0 ? PL_OK : c->ops->all_gather(c, send, n_bytes, recv);
    return leave(c, PL_COMM_ALL_GATHER, t0, (uint64_t)n_bytes * (uint64_t)c->size, s);
}

pl_status pl_comm_broadcast(pl_comm *c, void *buf, size_t n_bytes, int root) {
    PL_TRY(enter(c, PL_COMM_BROADCAST));
    if (root < 0 || root >= c->size)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "broadcast: root %d of %d ranks", root, c->size);
    if (n_bytes > 0 && !buf) return pl_fail(PL_ERR_INVALID_ARGUMENT, "broadcast: NULL buffer");
    uint64_t t0 = pl_now_ns();
    pl_status s = c->size == 1 || n_bytes == 0 ? PL_OK : c->ops->broadcast(c, buf, n_bytes, root);
    return leave(c, PL_COMM_BROADCAST, t0, n_bytes, s);
}

pl_status pl_comm_barrier(pl_comm *c) {
    PL_TRY(enter(c, PL_COMM_BARRIER));
    uint64_t t0 = pl_now_ns();
    pl_status s = c->size == 1 ? PL_OK : c->ops->barrier(c);
    return leave(c, PL_COMM_BARRIER, t0, 0, s);
}

void pl_comm_abort(pl_comm *c, const char *why) {
    if (!c) return;
    if (!c->broken) {
        snprintf(c->error, sizeof c->error, "rank %d: aborted: %s", c->rank, why);
        c->broken = true;
    }
    if (c->size > 1) c->ops->abort(c, why);
}

void pl_comm_destroy(pl_comm *c) {
    if (c) c->ops->destroy(c);
}

/* ---- one rank ------------------------------------------------------------------------ */

static pl_status one_all_reduce(pl_comm *c, float *buf, size_t n) { return PL_OK; }

static pl_status one_all_gather(pl_comm *c, const void *send, size_t n_bytes, void *recv) {
    if (recv != send) memmove(recv, send, n_bytes);
    return PL_OK;
}

static pl_status one_broadcast(pl_comm *c, void *buf, size_t n_bytes, int root) { return PL_OK; }
static pl_status one_barrier(pl_comm *c) { return PL_OK; }
static void one_abort(pl_comm *c, const char *why) {}
static void one_destroy(pl_comm *c) { pl_free(c); }

static const pl_comm_ops one_ops = {
    .name = "one", .all_reduce_sum = one_all_reduce, .all_gather = one_all_gather,
    .broadcast = one_broadcast, .barrier = one_barrier, .abort = one_abort,
    .destroy = one_destroy,
};

pl_status pl_comm_one_create(pl_comm **out) {
    PL_TRY(pl_comm_alloc(&one_ops, 0, 1, 1e9, out));
    snprintf((*out)->transport, sizeof (*out)->transport, "none (one rank)");
    return PL_OK;
}

/* ---- the launcher's environment ------------------------------------------------------ */

/* A non-negative integer from the first of names that is set; -1 when none is. */
static long env_int(const char *const *names) {
    for (; *names; names++) {
        const char *v = getenv(*names);
        if (!v || !*v) continue;
        char *end;
        long x = strtol(v, &end, 10);
        if (*end == '\0' && x >= 0 && x < 1000000) return x;
    }
    return -1;
}

bool pl_comm_launcher_rank(int *out_rank, int *out_size, int *out_local_size) {
    /* Open MPI's mpirun, then the PMIx and PMI launchers (MPICH's hydra, Slurm's srun) */
    static const char *const rank_v[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", NULL};
    static const char *const size_v[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL};
    static const char *const local_v[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", NULL};
    long rank = env_int(rank_v), size = env_int(size_v), local = env_int(local_v);
    if (rank < 0 || size < 1 || rank >= size) return false;
    *out_rank = (int)rank;
    *out_size = (int)size;
    *out_local_size = local >= 1 ? (int)local : (int)size;
    return true;
}
