/*
 * dist/comm.h - the communicator of tensor parallelism: a group of `size` ranks that run the
 * same collectives in the same order.
 *
 *   engine/runner.c (all-reduce after o and down, all-gather of logits)
 *   engine/ (the step plan: broadcast)          -> pl_comm_* (this file: checks, timing, counts)
 *                                                    -> one | threads | mpi | nccl
 *
 * Implementations
 * - one:     a single rank; every collective is a no-op (the world of an untouched engine).
 * - threads: `size` ranks as threads of one process sharing memory (the in-process reference
 *            the tests use, and `--distributed-backend threads`).
 * - mpi:     one rank per process over MPI_COMM_WORLD (Open MPI), host buffers; collectives
 *            are built from point-to-point messages so the summation order and the timeout
 *            are ours, not the MPI library's.
 * - nccl:    all-reduce and all-gather on device buffers, enqueued on the backend's stream;
 *            the unique id and every host-side collective (broadcast, barrier) go over MPI.
 *
 * Invariants
 * - Every rank gets bit-identical results: an all-reduce sums element i as
 *   ((x_0[i] + x_1[i]) + x_2[i]) + ... in rank order on every implementation, so MPI, NCCL and
 *   the threaded reference agree to the bit (and a run does not depend on timing).
 * - Every collective waits at most timeout_s; when it expires the call fails with
 *   PL_ERR_BACKEND and a message naming this rank, the operation and the ranks it waited for.
 *   After any failure the communicator is broken: every later call fails at once (the ranks
 *   can no longer be sure to agree on what comes next); abort ends the group.
 * - Buffers: all-reduce and all-gather take device memory when `device` is set (nccl), host
 *   memory otherwise; broadcast and barrier always take host memory.
 * - One thread at a time per rank's handle (the caller serialises).
 */
#ifndef PL_DIST_COMM_H
#define PL_DIST_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The collectives, for counters and messages. */
typedef enum pl_comm_op {
    PL_COMM_ALL_REDUCE = 0,
    PL_COMM_ALL_GATHER,
    PL_COMM_BROADCAST,
    PL_COMM_BARRIER,
    PL_COMM_N_OPS
} pl_comm_op;

/* "all_reduce", "all_gather", "broadcast", "barrier". */
const char *pl_comm_op_name(pl_comm_op op);

/* What this rank did: calls, bytes and the seconds spent inside each collective. Bytes are
 * the size of the collective's result as nccl-tests counts it: an all-reduce of n floats is
 * 4n bytes, an all-gather of n bytes per rank is size * n, a broadcast of n bytes is n. */
typedef struct pl_comm_stats {
    uint64_t calls[PL_COMM_N_OPS];
    uint64_t bytes[PL_COMM_N_OPS];
    uint64_t ns[PL_COMM_N_OPS];
} pl_comm_stats;

typedef struct pl_comm pl_comm;

typedef struct pl_comm_ops {
    const char *name; /* "one", "threads", "mpi", "nccl" */
    /* buf (n floats) = the sum over ranks of every rank's buf, in rank order; in place. */
    pl_status (*all_reduce_sum)(pl_comm *c, float *buf, size_t n);
    /* recv (size * n_bytes) = every rank's send (n_bytes) in rank order. */
    pl_status (*all_gather)(pl_comm *c, const void *send, size_t n_bytes, void *recv);
    /* buf (n_bytes, host) = root's buf. */
    pl_status (*broadcast)(pl_comm *c, void *buf, size_t n_bytes, int root);
    pl_status (*barrier)(pl_comm *c);
    /* Ends the group: the other ranks fail their next (or current) collective with why, or
     * are terminated (MPI_Abort). Must not block. */
    void (*abort)(pl_comm *c, const char *why);
    void (*destroy)(pl_comm *c);
} pl_comm_ops;

struct pl_comm {
    const pl_comm_ops *ops;
    void *ctx;           /* the implementation's state */
    int rank, size;
    double timeout_s;    /* each collective waits at most this long */
    bool device;         /* all_reduce / all_gather take device memory (nccl) */
    bool broken;         /* a collective failed: every later one fails at once */
    char transport[160]; /* "threads in one process", "MPI over shared memory", ... */
    char error[256];     /* the first failure, repeated by every later call */
    pl_comm_stats stats;
};

/* ---- the collectives: argument checks, broken state, timing and counters -------------- */

pl_status pl_comm_all_reduce_sum(pl_comm *c, float *buf, size_t n);
pl_status pl_comm_all_gather(pl_comm *c, const void *send, size_t n_bytes, void *recv);
pl_status pl_comm_broadcast(pl_comm *c, void *buf, size_t n_bytes, int root);
pl_status pl_comm_barrier(pl_comm *c);
/* Ends the group (see pl_comm_ops.abort) and marks c broken. NULL is a no-op. */
void pl_comm_abort(pl_comm *c, const char *why);
/* NULL is a no-op. */
void pl_comm_destroy(pl_comm *c);

/* ---- implementations ------------------------------------------------------------------ */

/* One rank: collectives copy (all-gather) or do nothing. */
pl_status pl_comm_one_create(pl_comm **out);

/* `size` ranks as threads of this process. The world is created once; each thread takes its
 * rank's handle with pl_comm_threads_create (any order, each rank once) and destroys it; the
 * world goes with the last handle, or with pl_comm_threads_world_release when a rank's handle
 * was never taken. */
typedef struct pl_comm_threads_world pl_comm_threads_world;
pl_status pl_comm_threads_world_create(int size, double timeout_s, pl_comm_threads_world **out);
pl_status pl_comm_threads_create(pl_comm_threads_world *w, int rank, pl_comm **out);
/* Gives up the ranks whose handles were not taken (a rank that failed to start): the world
 * is freed once the taken ones are destroyed. */
void pl_comm_threads_world_release(pl_comm_threads_world *w);

/* This process's rank in MPI_COMM_WORLD. Initialises MPI (thread level SERIALIZED) unless the
 * program already did, and finalises it at destroy if it did. PL_ERR_UNSUPPORTED when built
 * without MPI. */
pl_status pl_comm_mpi_create(double timeout_s, pl_comm **out);

/* NCCL over the ranks of mpi (made by pl_comm_mpi_create, which stays the caller's and must
 * outlive the result): rank 0 makes the unique id and broadcasts it over mpi; all-reduce and
 * all-gather run on `stream` (a cudaStream_t) of CUDA device `device`; broadcast and barrier
 * go to mpi. PL_ERR_UNSUPPORTED when built without NCCL. */
pl_status pl_comm_nccl_create(pl_comm *mpi, int device, void *stream, pl_comm **out);

/* Whether this build has the MPI / NCCL implementations. */
bool pl_comm_have_mpi(void);
bool pl_comm_have_nccl(void);
/* Their library versions ("Open MPI v4.1.4", "2.28.3"); "" when not built in. Static. */
const char *pl_comm_mpi_version(void);
const char *pl_comm_nccl_version(void);

/* The rank and world size MPI's launcher (mpirun) gave this process, read from its
 * environment before MPI is initialised: false when the process was not started by one. */
bool pl_comm_launcher_rank(int *out_rank, int *out_size, int *out_local_size);

/* ---- helpers for the implementations (dist/comm.c) ------------------------------------ */

/* Allocates a pl_comm with ops, rank, size and timeout set, transport empty. */
pl_status pl_comm_alloc(const pl_comm_ops *ops, int rank, int size, double timeout_s,
                        pl_comm **out);
/* Records the first failure (also as this thread's last error) and returns PL_ERR_BACKEND:
 * "rank R: OP: what". */
pl_status pl_comm_failf(pl_comm *c, pl_comm_op op, const char *fmt, ...) PL_PRINTF(3, 4);
/* Element range [*lo, *hi) of the part of n that rank owns in a reduce-scatter: parts as
 * equal as possible, in rank order. */
void pl_comm_part(size_t n, int size, int rank, size_t *lo, size_t *hi);
/* One pause of a polling wait that has lasted waited_ns: spinning, then yielding, then short
 * sleeps, so a busy rank loses little latency and an idle one costs little CPU. */
void pl_comm_backoff(uint64_t waited_ns);

#ifdef __cplusplus
}
#endif
#endif
