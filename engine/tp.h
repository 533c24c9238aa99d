/*
 * engine/tp.h - the tensor-parallel group of an engine: the communicator, the other ranks
 * (threads of this process, or processes started by mpirun), the agreement on the KV pool
 * and the plan link (docs/distributed.md).
 *
 *   rank 0 (pl_engine_create)                 rank r > 0 (a thread, or pl_engine_run_worker)
 *   load the whole model, pl_tp_start:        load the whole model (mapped), keep its shard
 *     communicator; threads: shards 1.. and    communicator
 *     their threads; keep shard 0
 *   pool size from this rank's memory    <->  the same: all-gather, the smallest wins
 *   runner                               <->  runner; "ready" all-gather
 *   steps: plan + collectives            <->  pl_runner_follow until STOP
 *
 * Every start-up exchange carries each rank's status and message, so a rank that cannot load
 * its shard fails the whole group at once with its reason.
 */
#ifndef PL_ENGINE_TP_H
#define PL_ENGINE_TP_H

#include <stdatomic.h>
#include <stdbool.h>

#include "dist/comm.h"
#include "engine/runner.h"
#include "engine/tp_link.h"
#include "pagellm.h"

/* A rank of the threads backend (ranks 1 .. size-1). */
typedef struct pl_tp_thread {
    pthread_t thread;
    bool started;
    int rank;
    pl_engine_config cfg;   /* the engine's (no strings are read from it) */
    pl_model *shard;        /* owned until the thread takes it */
    pl_comm *comm;          /* owned until the thread takes it */
    pl_status status;       /* how the rank ended */
    char error[256];
    uint64_t steps, tokens; /* RUN plans and the tokens they held */
    pl_comm_stats stats;    /* its communicator's counters at the end */
} pl_tp_thread;

typedef struct pl_tp {
    int size;
    pl_dist_backend kind;          /* resolved: MPI, NCCL or THREADS */
    pl_comm *comm;                 /* rank 0's handle */
    pl_comm *mpi;                  /* nccl: the MPI communicator under it */
    pl_tp_link link;
    bool link_on;
    pl_tp_thread *threads;         /* threads: ranks 1 .. size-1 */
    int n_threads;                 /* started */
    bool finished;                 /* pl_tp_finish ran */
    uint64_t steps, tokens;        /* rank 0's, for the closing log line */
    atomic_bool failed;            /* a collective failed: the engine cannot step any more */
    char error[256];               /* why (written before failed is set) */
    char info[256];                /* "mpi: Open MPI v4.1.4, one host (shared memory), 2 ranks" */
} pl_tp;

/* The distributed backend cfg asks for (auto resolved), and whether this process was started
 * by mpirun. PL_ERR_INVALID_ARGUMENT / UNSUPPORTED for a combination that cannot work. */
pl_status pl_tp_resolve(const pl_engine_config *cfg, pl_dist_backend *out_kind,
                        int *out_launcher_rank, int *out_local_ranks);

/* CPU threads per rank when cfg leaves it to the machine: the cores shared among the ranks on
 * this host. */
int pl_tp_threads_per_rank(const pl_engine_config *cfg);

/* Rank 0: builds the group around the whole model m (loaded by the caller, sharded here in
 * place to rank 0's part) and be (rank 0's backend). *out stays NULL on failure. */
pl_status pl_tp_start(const pl_engine_config *cfg, pl_model *m, pl_backend *be, pl_tp **out);
/* Rank 0: the start-up agreement: every rank's status and KV blocks its memory holds; all
 * take the smallest. st is rank 0's own status so far (a failure is reported to all). */
pl_status pl_tp_agree_blocks(pl_tp *tp, pl_status st, const pl_model *m,
                             const pl_runner_limits *lim, int my_blocks, int *out_blocks);
/* Rank 0, after making its runner r (st: how that went): waits until every rank made its
 * runner, then starts the plan link and its keep-alive; r's steps reach the others from here
 * on. */
pl_status pl_tp_connect(pl_tp *tp, const pl_engine_config *cfg, pl_runner *r,
                        const pl_model *m, const pl_runner_limits *lim, pl_status st);
/* A rank other than 0 of an MPI launch: the whole life of the rank (pl_engine_run_worker). */
pl_status pl_tp_run_worker(const pl_engine_config *cfg);
/* Rank 0, end: stops the others (STOP when the group is healthy; threads: abort otherwise)
 * and joins the threads; the counters stay readable until pl_tp_stop. Once; NULL no-op. */
void pl_tp_finish(pl_tp *tp, pl_runner *r);
/* Rank 0's figures for its closing log line (the others log theirs). */
void pl_tp_set_totals(pl_tp *tp, uint64_t steps, uint64_t tokens);
/* pl_tp_finish, then frees the group (MPI is finalised when healthy). NULL is a no-op. */
void pl_tp_stop(pl_tp *tp, pl_runner *r);

/* Rank r + 1 of the threads backend (its status, steps and counters are final after
 * pl_tp_finish). */
static inline const pl_tp_thread *pl_tp_thread_at(const pl_tp *tp, int r) {
    return &tp->threads[r];
}

/* After a step: when the group's communicator broke, records it (pl_tp_health). */
void pl_tp_check(pl_tp *tp);
/* PL_OK, or PL_ERR_BACKEND with why the group failed. Any thread. */
pl_status pl_tp_health(pl_tp *tp);

#endif
