/*
 * tests/dist/test_comm.c - the communicator in one process: the one-rank no-op and the
 * threads implementation with 1-4 ranks pass every case of comm_cases.c with bit-identical
 * results on every rank; a rank that never comes (hung or dead) fails the others within the
 * timeout with their rank, the operation and the missing rank named; an abort reaches every
 * rank; a broken communicator refuses what follows.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "comm_cases.h"
#include "util/timer.h"

typedef struct rank_job {
    pl_comm_threads_world *w;
    int rank;
    int mode;           /* 0: run the cases; 1: all_reduce once; 2: skip (a hung rank); 3: abort */
    bool ok;
    uint64_t digest;
    pl_status status;
    double seconds;
    char err[512];
    char err2[512];     /* the next call's error, after a failure */
} rank_job;

static void *rank_main(void *arg) {
    rank_job *j = arg;
    pl_comm *c;
    if (pl_comm_threads_create(j->w, j->rank, &c) != PL_OK) {
        snprintf(j->err, sizeof j->err, "create: %s", pl_last_error());
        return NULL;
    }
    uint64_t t0 = pl_now_ns();
    float x[7] = {1, 2, 3, 4, 5, 6, 7};
    switch (j->mode) {
    case 0: j->ok = comm_cases_run(c, &j->digest, j->err, sizeof j->err); break;
    case 1:
        j->status = pl_comm_all_reduce_sum(c, x, 7);
        snprintf(j->err, sizeof j->err, "%s", pl_last_error());
        if (j->status != PL_OK) {
            pl_comm_barrier(c);
            snprintf(j->err2, sizeof j->err2, "%s", pl_last_error());
        }
        break;
    case 2: break;
    case 3: pl_comm_abort(c, "test abort"); break;
    }
    j->seconds = (double)(pl_now_ns() - t0) * 1e-9;
    pl_comm_destroy(c);
    return NULL;
}

static void run_ranks(int size, double timeout, rank_job *jobs) {
    pl_comm_threads_world *w;
    cr_assert_eq(pl_comm_threads_world_create(size, timeout, &w), PL_OK, "%s", pl_last_error());
    pthread_t t[8];
    for (int r = 0; r < size; r++) {
        jobs[r].w = w;
        jobs[r].rank = r;
        cr_assert_eq(pthread_create(&t[r], NULL, rank_main, &jobs[r]), 0);
    }
    for (int r = 0; r < size; r++) pthread_join(t[r], NULL);
}

Test(comm, one_rank_is_a_no_op) {
    pl_comm *c;
    cr_assert_eq(pl_comm_one_create(&c), PL_OK);
    uint64_t d;
    char err[512];
    cr_assert(comm_cases_run(c, &d, err, sizeof err), "%s", err);
    cr_assert_eq(c->size, 1);
    pl_comm_destroy(c);
}

Test(comm, threads_1_to_4_ranks_bit_identical) {
    for (int size = 1; size <= 4; size++) {
        rank_job jobs[4] = {0};
        run_ranks(size, 30.0, jobs);
        for (int r = 0; r < size; r++) {
            cr_assert(jobs[r].ok, "%d ranks, rank %d: %s", size, r, jobs[r].err);
            cr_assert_eq(jobs[r].digest, jobs[0].digest, "%d ranks: rank %d's results differ",
                         size, r);
        }
    }
}

Test(comm, a_rank_that_never_comes_fails_the_others_within_the_timeout) {
    rank_job jobs[3] = {{.mode = 1}, {.mode = 1}, {.mode = 2}};
    run_ranks(3, 0.3, jobs);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(jobs[r].status, PL_ERR_BACKEND);
        char want[128];
        snprintf(want, sizeof want, "rank %d: all_reduce: ", r);
        cr_assert(strstr(jobs[r].err, want), "%s", jobs[r].err);
        /* one of them timed out waiting for rank 2; the other saw that and stopped too */
        cr_assert(strstr(jobs[r].err, "timed out after 0.3 s waiting for rank 2"), "%s",
                  jobs[r].err);
        cr_assert(jobs[r].seconds >= 0.29 && jobs[r].seconds < 1.5, "%.3f s", jobs[r].seconds);
        /* broken: the next collective fails at once, repeating the first failure */
        cr_assert(strstr(jobs[r].err2, "failed earlier; barrier refused"), "%s", jobs[r].err2);
    }
}

Test(comm, an_abort_reaches_every_rank) {
    rank_job jobs[3] = {{.mode = 1}, {.mode = 3}, {.mode = 1}};
    run_ranks(3, 10.0, jobs);
    for (int r = 0; r < 3; r += 2) {
        cr_assert_eq(jobs[r].status, PL_ERR_BACKEND);
        cr_assert(strstr(jobs[r].err, "all_reduce: rank 1 aborted: test abort"), "%s",
                  jobs[r].err);
        cr_assert(jobs[r].seconds < 5, "%.3f s", jobs[r].seconds);
    }
}

Test(comm, bad_arguments_are_refused) {
    pl_comm_threads_world *w;
    cr_assert_eq(pl_comm_threads_world_create(0, 1.0, &w), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_comm_threads_world_create(2, 0.0, &w), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "--distributed-timeout"), "%s", pl_last_error());
    cr_assert_eq(pl_comm_threads_world_create(2, 1.0, &w), PL_OK);
    pl_comm *c;
    cr_assert_eq(pl_comm_threads_create(w, 2, &c), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_comm_threads_create(w, 0, &c), PL_OK);
    cr_assert_eq(pl_comm_threads_create(w, 0, &c) == PL_OK, false); /* taken */
    cr_assert_eq(pl_comm_broadcast(c, NULL, 4, 0), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_comm_broadcast(c, &w, 4, 2), PL_ERR_INVALID_ARGUMENT);
    pl_comm_threads_world_release(w); /* rank 1 never taken */
    pl_comm_destroy(c);
}

Test(comm, parts_cover_the_buffer_in_rank_order) {
    for (size_t n = 0; n < 50; n++)
        for (int size = 1; size <= 8; size++) {
            size_t next = 0;
            for (int r = 0; r < size; r++) {
                size_t lo, hi;
                pl_comm_part(n, size, r, &lo, &hi);
                cr_assert_eq(lo, next);
                cr_assert(hi - lo <= n / (size_t)size + 1);
                next = hi;
            }
            cr_assert_eq(next, n);
        }
}
