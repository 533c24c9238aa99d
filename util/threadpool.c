/*
 * util/threadpool.c - persistent workers, fork-join runs, spin-then-sleep waiting.
 *
 * How a run works. The caller publishes the job (fn, ctx, n_tasks) under the mutex, bumps the
 * generation and resets the task counter to (generation << 32 | 0). Workers notice the new
 * generation (spinning on it, or woken from the condition variable), copy the job under the
 * mutex, then claim task indices with a compare-and-swap that also checks the generation. The
 * generation check is what makes late workers harmless: a worker that wakes after a job has
 * finished (or while the next is being published) cannot claim an index of a job whose fields
 * it did not read. Whoever finishes the last task signals the caller.
 *
 * Spinning: the decode loop issues ops back to back, so a worker that sleeps after each op
 * would add a futex wake-up (5-50 us) to every op. Workers and the waiting caller therefore
 * spin (with the x86 pause hint) for SPIN_NS before sleeping; an idle pool sleeps.
 */
#include "util/threadpool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "util/alloc.h"
#include "util/timer.h"

#define MAX_THREADS 1024
#define SPIN_NS 200000u /* how long an idle thread polls before sleeping */

struct pl_threadpool {
    int size;           /* threads, the caller included */
    pthread_t *threads; /* (size - 1) workers */
    int n_started;

    pthread_mutex_t mu;
    pthread_cond_t wake_cv; /* workers sleep here waiting for a new generation */
    pthread_cond_t done_cv; /* the caller sleeps here waiting for the last task */
    int n_sleeping;         /* workers in wake_cv; under mu */
    bool stop;              /* under mu */

    /* The current job; written under mu before the generation is published. */
    pl_threadpool_fn fn;
    void *ctx;
    int n_tasks;
    _Atomic uint32_t gen;

    _Atomic uint64_t next; /* (gen << 32) | next unclaimed task index */
    _Atomic int n_done;    /* tasks of the current job finished */
};

typedef struct worker_arg {
    pl_threadpool *pool;
    int index;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

int pl_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Claims and runs tasks of generation `gen` (job fields fn/ctx/n_tasks) until none is left. */
static void run_tasks(pl_threadpool *p, uint32_t gen, pl_threadpool_fn fn, void *ctx, int n_tasks,
                      int thread) {
    uint64_t v = atomic_load_explicit(&p->next, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(v >> 32) != gen || (uint32_t)v >= (uint32_t)n_tasks) return;
        if (!atomic_compare_exchange_weak_explicit(&p->next, &v, v + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* v was reloaded */
        fn(ctx, (int)(uint32_t)v, thread);
        if (atomic_fetch_add_explicit(&p->n_done, 1, memory_order_acq_rel) + 1 == n_tasks) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
        v = atomic_load_explicit(&p->next, memory_order_acquire);
    }
}

static void *worker_main(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    pl_free(arg);
    pl_threadpool *p = wa.pool;
    uint32_t seen = 0; /* the generation before the first run */
    for (;;) {
        /* Poll for a new generation, checking the clock only every 256 polls. */
        uint64_t t0 = pl_now_ns();
        for (unsigned i = 1;; i++) {
            if (atomic_load_explicit(&p->gen, memory_order_acquire) != seen) break;
            cpu_relax();
            if ((i & 255u) == 0 && pl_now_ns() - t0 > SPIN_NS) break;
        }
        pthread_mutex_lock(&p->mu);
        while (!p->stop && atomic_load_explicit(&p->gen, memory_order_relaxed) == seen) {
            p->n_sleeping++;
            pthread_cond_wait(&p->wake_cv, &p->mu);
            p->n_sleeping--;
        }
        if (p->stop) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        seen = atomic_load_explicit(&p->gen, memory_order_relaxed);
        pl_threadpool_fn fn = p->fn;
        void *ctx = p->ctx;
        int n_tasks = p->n_tasks;
        pthread_mutex_unlock(&p->mu);
        run_tasks(p, seen, fn, ctx, n_tasks, wa.index);
    }
}

static void stop_workers(pl_threadpool *p) {
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->wake_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    p->n_started = 0;
}

pl_status pl_threadpool_create(int n_threads, pl_threadpool **out) {
    if (!out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "threadpool: out is NULL");
    *out = NULL;
    if (n_threads < 0 || n_threads > MAX_THREADS)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "threadpool: n_threads %d outside [0, %d]",
                       n_threads, MAX_THREADS);
    if (n_threads == 0) n_threads = pl_cpu_count();
    if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;

    pl_threadpool *p = pl_calloc(1, sizeof *p);
    if (!p) return pl_fail(PL_ERR_OUT_OF_MEMORY, "threadpool: no memory for the pool");
    p->size = n_threads;
    atomic_init(&p->gen, 0);
    atomic_init(&p->next, 0);
    atomic_init(&p->n_done, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    if (n_threads > 1) {
        p->threads = pl_calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) goto oom;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = pl_malloc(sizeof *wa);
        if (!wa) goto oom;
        wa->pool = p;
        wa->index = i;
        int rc = pthread_create(&p->threads[i - 1], NULL, worker_main, wa);
        if (rc != 0) {
            pl_free(wa);
            stop_workers(p);
            pl_threadpool_destroy(p);
            return pl_fail(PL_ERR_BACKEND, "threadpool: cannot start worker %d of %d: %s", i,
                           n_threads - 1, strerror(rc));
        }
        p->n_started++;
    }
    *out = p;
    return PL_OK;

oom:
    stop_workers(p);
    pl_threadpool_destroy(p);
    return pl_fail(PL_ERR_OUT_OF_MEMORY, "threadpool: no memory for %d threads", n_threads);
}

void pl_threadpool_destroy(pl_threadpool *p) {
    if (!p) return;
    stop_workers(p);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->wake_cv);
    pthread_mutex_destroy(&p->mu);
    pl_free(p->threads);
    pl_free(p);
}

int pl_threadpool_size(const pl_threadpool *p) { return p ? p->size : 1; }

void pl_threadpool_run(pl_threadpool *p, int n_tasks, pl_threadpool_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!p || p->size == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    uint32_t gen = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->next, (uint64_t)gen << 32, memory_order_release);
    atomic_store_explicit(&p->gen, gen, memory_order_release);
    if (p->n_sleeping > 0) pthread_cond_broadcast(&p->wake_cv);
    pthread_mutex_unlock(&p->mu);

    run_tasks(p, gen, fn, ctx, n_tasks, 0);

    uint64_t t0 = pl_now_ns();
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(&p->n_done, memory_order_acquire) == n_tasks) return;
        cpu_relax();
        if ((i & 255u) == 0 && pl_now_ns() - t0 > SPIN_NS) break;
    }
    pthread_mutex_lock(&p->mu);
    while (atomic_load_explicit(&p->n_done, memory_order_acquire) != n_tasks)
        pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
