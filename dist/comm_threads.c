/*
 * dist/comm_threads.c - `size` ranks as threads of one process: the in-process reference.
 *
 * Every collective is phases separated by a barrier over the world's shared table of buffer
 * pointers (each rank publishes its buffer, then reads the others' directly):
 *   all-reduce: publish | rank r sums part r of every buffer in rank order into its own
 *               buffer's part r | each rank copies the other parts from their owners | done.
 *   all-gather, broadcast: publish | copy from the published buffers | done.
 * The closing barrier keeps a buffer alive until no rank reads it any more. A part is read
 * and written only by its owner in the summing phase and only read afterwards, so no phase
 * races with another.
 *
 * The barrier is a generation counter under a mutex with a timed wait on CLOCK_MONOTONIC; it
 * records which ranks arrived, so a timeout names the ones that did not. abort wakes every
 * waiter with the reason.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dist/comm.h"
#include "util/alloc.h"

#define MAX_RANKS 64

struct pl_comm_threads_world {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int size;
    double timeout_s;
    int refs;                  /* handles not destroyed + ranks not yet taken or released */
    bool taken[MAX_RANKS];
    /* the barrier */
    unsigned long generation;
    int arrived;
    bool here[MAX_RANKS];      /* arrived in the current generation */
    /* published buffers (valid between a collective's first and last barrier) */
    void *buf[MAX_RANKS];
    /* abort */
    bool aborted;
    int abort_rank;
    char abort_why[160];
};

typedef struct tctx {
    pl_comm_threads_world *w;
} tctx;

static void world_unref_locked(pl_comm_threads_world *w, bool *out_free) {
    *out_free = --w->refs == 0;
}

static void world_free(pl_comm_threads_world *w) {
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    pl_free(w);
}

/* Waits until every rank arrived (PL_OK), the world was aborted, or the timeout expired. */
static pl_status barrier_wait(pl_comm *c, pl_comm_op op) {
    pl_comm_threads_world *w = ((tctx *)c->ctx)->w;
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    double whole = (double)(long)c->timeout_s;
    dl.tv_sec += (time_t)whole;
    dl.tv_nsec += (long)((c->timeout_s - whole) * 1e9);
    if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;

    pthread_mutex_lock(&w->mu);
    if (w->aborted) goto aborted;
    unsigned long gen = w->generation;
    w->here[c->rank] = true;
    if (++w->arrived == w->size) {
        w->arrived = 0;
        memset(w->here, 0, sizeof w->here);
        w->generation++;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        return PL_OK;
    }
    while (w->generation == gen && !w->aborted) {
        int e = pthread_cond_timedwait(&w->cv, &w->mu, &dl);
        if (e == ETIMEDOUT && w->generation == gen && !w->aborted) {
            char missing[200] = "";
            size_t len = 0;
            for (int r = 0; r < w->size && len + 12 < sizeof missing; r++)
                if (!w->here[r])
                    len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d",
                                            len ? ", " : "", r);
            w->here[c->rank] = false; /* leaves: the generation can never complete now */
            w->arrived--;
            /* the world is over: the others (the late rank too) fail now, not at their own
             * timeouts */
            w->aborted = true;
            w->abort_rank = c->rank;
            snprintf(w->abort_why, sizeof w->abort_why,
                     "%s timed out after %.1f s waiting for rank %s", pl_comm_op_name(op),
                     c->timeout_s, missing);
            pthread_cond_broadcast(&w->cv);
            pthread_mutex_unlock(&w->mu);
            return pl_comm_failf(c, op,
                                 "timed out after %.1f s waiting for rank %s "
                                 "(--distributed-timeout)",
                                 c->timeout_s, missing);
        }
    }
    if (w->aborted) goto aborted;
    pthread_mutex_unlock(&w->mu);
    return PL_OK;
aborted: {
    int ar = w->abort_rank;
    char why[sizeof w->abort_why];
    memcpy(why, w->abort_why, sizeof why);
    pthread_mutex_unlock(&w->mu);
    return pl_comm_failf(c, op, "rank %d aborted: %s", ar, why);
}
}

static void publish(pl_comm *c, void *p) {
    pl_comm_threads_world *w = ((tctx *)c->ctx)->w;
    pthread_mutex_lock(&w->mu);
    w->buf[c->rank] = p;
    pthread_mutex_unlock(&w->mu);
}

/* The published buffer of rank r (read after the barrier that follows publishing: the
 * mutex in the barrier orders the publication before the read). */
static void *peer(pl_comm *c, int r) { return ((tctx *)c->ctx)->w->buf[r]; }

static pl_status t_all_reduce(pl_comm *c, float *buf, size_t n) {
    publish(c, buf);
    PL_TRY(barrier_wait(c, PL_COMM_ALL_REDUCE));
    size_t lo, hi;
    pl_comm_part(n, c->size, c->rank, &lo, &hi);
    const float *b0 = peer(c, 0);
    for (size_t i = lo; i < hi; i++) {
        float s = b0[i];
        for (int r = 1; r < c->size; r++) s += ((const float *)peer(c, r))[i];
        buf[i] = s;
    }
    PL_TRY(barrier_wait(c, PL_COMM_ALL_REDUCE));
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank) continue;
        pl_comm_part(n, c->size, r, &lo, &hi);
        memcpy(buf + lo, (const float *)peer(c, r) + lo, (hi - lo) * sizeof(float));
    }
    return barrier_wait(c, PL_COMM_ALL_REDUCE);
}

static pl_status t_all_gather(pl_comm *c, const void *send, size_t n_bytes, void *recv) {
    publish(c, (void *)send);
    PL_TRY(barrier_wait(c, PL_COMM_ALL_GATHER));
    for (int r = 0; r < c->size; r++) {
        char *dst = (char *)recv + (size_t)r * n_bytes;
        if (dst != peer(c, r)) memcpy(dst, peer(c, r), n_bytes); /* a rank's own part in place */
    }
    return barrier_wait(c, PL_COMM_ALL_GATHER);
}

static pl_status t_broadcast(pl_comm *c, void *buf, size_t n_bytes, int root) {
    publish(c, buf);
    PL_TRY(barrier_wait(c, PL_COMM_BROADCAST));
    if (c->rank != root) memcpy(buf, peer(c, root), n_bytes);
    return barrier_wait(c, PL_COMM_BROADCAST);
}

static pl_status t_barrier(pl_comm *c) { return barrier_wait(c, PL_COMM_BARRIER); }

static void t_abort(pl_comm *c, const char *why) {
    pl_comm_threads_world *w = ((tctx *)c->ctx)->w;
    pthread_mutex_lock(&w->mu);
    if (!w->aborted) {
        w->aborted = true;
        w->abort_rank = c->rank;
        snprintf(w->abort_why, sizeof w->abort_why, "%s", why);
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void t_destroy(pl_comm *c) {
    tctx *t = c->ctx;
    pl_comm_threads_world *w = t->w;
    bool last;
    pthread_mutex_lock(&w->mu);
    world_unref_locked(w, &last);
    pthread_mutex_unlock(&w->mu);
    if (last) world_free(w);
    pl_free(t);
    pl_free(c);
}

static const pl_comm_ops threads_ops = {
    .name = "threads", .all_reduce_sum = t_all_reduce, .all_gather = t_all_gather,
    .broadcast = t_broadcast, .barrier = t_barrier, .abort = t_abort, .destroy = t_destroy,
};

pl_status pl_comm_threads_world_create(int size, double timeout_s, pl_comm_threads_world **out) {
    if (size < 1 || size > MAX_RANKS)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "--tensor-parallel-size = %d: the threads backend takes 1 to %d ranks",
                       size, MAX_RANKS);
    if (!(timeout_s > 0))
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "--distributed-timeout = %g: must be a positive number of seconds",
                       timeout_s);
    pl_comm_threads_world *w = pl_calloc(1, sizeof *w);
    if (!w) return pl_fail(PL_ERR_OUT_OF_MEMORY, "threads communicator: world");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    w->size = size;
    w->timeout_s = timeout_s;
    w->refs = size;
    *out = w;
    return PL_OK;
}

pl_status pl_comm_threads_create(pl_comm_threads_world *w, int rank, pl_comm **out) {
    pthread_mutex_lock(&w->mu);
    bool bad = rank < 0 || rank >= w->size || w->taken[rank];
    if (!bad) w->taken[rank] = true;
    pthread_mutex_unlock(&w->mu);
    if (bad)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "threads communicator: rank %d of %d taken or "
                       "out of range", rank, w->size);
    pl_comm *c = NULL;
    tctx *t = pl_calloc(1, sizeof *t);
    pl_status s = t ? pl_comm_alloc(&threads_ops, rank, w->size, w->timeout_s, &c)
                    : pl_fail(PL_ERR_OUT_OF_MEMORY, "threads communicator: rank state");
    if (s != PL_OK) {
        pl_free(t);
        pthread_mutex_lock(&w->mu);
        w->taken[rank] = false; /* may be taken again, or released */
        pthread_mutex_unlock(&w->mu);
        return s;
    }
    t->w = w;
    c->ctx = t;
    snprintf(c->transport, sizeof c->transport, "threads in one process (shared memory)");
    *out = c;
    return PL_OK;
}

void pl_comm_threads_world_release(pl_comm_threads_world *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    int untaken = 0;
    for (int r = 0; r < w->size; r++)
        if (!w->taken[r]) untaken++, w->taken[r] = true;
    w->refs -= untaken;
    bool last = w->refs == 0;
    pthread_mutex_unlock(&w->mu);
    if (last) world_free(w);
}
