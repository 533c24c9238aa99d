/*
 * util/threadpool.h - a persistent pool of worker threads for data-parallel kernels.
 *
 * The CPU backend splits every op into tasks (usually ranges of output rows) and hands them to
 * this pool. Workers are created once and live until destroy, so an op costs a wake-up, never a
 * thread creation: a decode step issues hundreds of ops of 10-500 microseconds each.
 *
 * Invariants
 * - pl_threadpool_run() is a fork-join: it returns only after every task has finished, and
 *   the calling thread works on tasks too (it is thread index 0; workers are 1..size-1).
 * - Tasks are handed out dynamically (an atomic counter), so a core stolen by another process
 *   slows one thread's share instead of stalling the whole op.
 * - One run at a time: run() must not be called concurrently on the same pool, nor from inside
 *   a task (the caller owns the pool, as a backend owns its pool).
 * - Idle workers spin briefly (a new op usually follows within microseconds), then sleep on a
 *   condition variable, so an idle engine costs no CPU.
 */
#ifndef PL_UTIL_THREADPOOL_H
#define PL_UTIL_THREADPOOL_H

#include "util/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pl_threadpool pl_threadpool;

/* Runs task `task` (0 <= task < n_tasks) on thread `thread` (0 <= thread < pool size): the
 * thread index lets a task use per-thread scratch memory without locking. */
typedef void (*pl_threadpool_fn)(void *ctx, int task, int thread);

/* Online cores of this machine (at least 1). */
int pl_cpu_count(void);

/* Creates a pool of n_threads threads in all, the caller included (n_threads - 1 workers are
 * started); n_threads 0 means pl_cpu_count(). Fails with PL_ERR_INVALID_ARGUMENT for a
 * negative count or more than 1024, PL_ERR_OUT_OF_MEMORY / PL_ERR_BACKEND when memory or a
 * thread cannot be had (nothing is left to clean up then). */
pl_status pl_threadpool_create(int n_threads, pl_threadpool **out);

/* Stops and joins the workers. NULL is a no-op. */
void pl_threadpool_destroy(pl_threadpool *pool);

/* Threads in the pool, the caller included. */
int pl_threadpool_size(const pl_threadpool *pool);

/* Runs fn(ctx, t, thread) for every t in [0, n_tasks) and returns when all have finished.
 * n_tasks <= 0 does nothing; with one task or a pool of one it runs inline on the caller. */
void pl_threadpool_run(pl_threadpool *pool, int n_tasks, pl_threadpool_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
